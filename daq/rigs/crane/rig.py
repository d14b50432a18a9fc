"""The stacker-crane x-axis rig (seed paper 004): training and validation multisines through an OPC UA
servo drive, then model selection with practical identifiability over the 96-model kit.

Devices: one servo drive. Stream ``crane.trace`` (torque_cmd, torque, speed; N*m, N*m, rad/s) at the
drive's 10 kHz, one trajectory per role between ``trajectory_start``/``trajectory_end`` on ``crane.plan``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Count, NonNegative, Positive, Range, RigConfig, Table
from daq.rigs.base import Report, Rig

TRACE_STREAM = "crane.trace"
PLAN_STREAM = "crane.plan"
CHANNELS = ["torque_cmd", "torque", "speed"]
UNITS = ["N*m", "N*m", "rad/s"]
ROLES = ("training", "validation")
FRAME_SAMPLES = 5000


# ----------------------------------------------------------------------------------------- config


class DriveSecurity(Table, kw_only=True):
    mode: Literal["none", "Basic256Sha256_SignAndEncrypt"] = "none"
    certificate: str | None = None
    private_key: str | None = None
    server_certificate: str | None = None
    server_trust_dir: str | None = None
    user: str | None = None
    password: str | None = None
    password_env: str | None = None
    application_uri: str | None = None

    def check(self) -> None:
        if self.mode != "none":
            for key in ("certificate", "private_key"):
                if not getattr(self, key):
                    raise Invalid(key, f"required with mode = {self.mode!r}")
            if not (self.server_certificate or self.server_trust_dir):
                raise Invalid("server_certificate", "a secure endpoint needs the server's certificate pinned "
                                                    "(server_certificate) or trusted (server_trust_dir)")


class DriveDevice(Table, kw_only=True):
    url: str
    name: str = "crane-drive"
    namespace: str = "urn:hil-lab:crane-drive"
    torque_limit: Positive = 20.0     # N*m, checked by the driver before upload
    speed_limit: Positive = 150.0     # rad/s
    max_samples: Count = 100_000
    timeout: Positive = 4.0
    connect_timeout: Positive = 10.0
    heartbeat_interval: Positive = 0.2
    run_timeout_margin: NonNegative = 5.0
    security: DriveSecurity = sfield(default_factory=DriveSecurity)
    nodes: dict[str, str] = sfield(default_factory=dict)

    def check(self) -> None:
        from daq.config.load import suggestion
        from drivers.servo_drive import NODE_DEFAULTS

        if not self.url.startswith("opc.tcp://"):
            raise Invalid("url", f"must start with opc.tcp://, got {self.url!r}")
        for name in self.nodes:
            if name not in NODE_DEFAULTS:
                raise Invalid(f"nodes.{name}", "unknown node" + suggestion(name, list(NODE_DEFAULTS)))


class CraneDevices(Table, kw_only=True):
    drive: DriveDevice


class CraneSimulator(Table, kw_only=True):
    truth: dict[str, float] = sfield(default_factory=dict)
    drive: dict[str, Any] = sfield(default_factory=dict)

    def check(self) -> None:
        from simulators.crane_drive import DriveSettings
        from simulators.physics.crane import CraneTruth

        for key, build in (("truth", CraneTruth.from_config), ("drive", DriveSettings.from_config)):
            try:
                build(dict(getattr(self, key)))
            except (TypeError, ValueError) as exc:
                raise Invalid(key, re.sub(r"^(\[[^\]]*\]|crane truth):?\s*", "", str(exc)),
                              table=True) from None


class ExcitationRole(Table, kw_only=True):
    f_min: Positive | None = None
    f_max: Positive | None = None
    n_lines: Count | None = None
    grid: Literal["lin", "log"] | None = None
    odd_only: bool | None = None
    seed: int | None = None
    amplitude: Annotated[float, Meta(gt=0, le=1)] | None = None
    duration: Positive | None = None


class ExcitationTable(Table, kw_only=True):
    f_min: Positive                     # Hz
    f_max: Positive                     # Hz
    n_lines: Annotated[int, Meta(ge=1, le=100000)]
    dt: Annotated[float, Meta(gt=0, le=0.01)] = 1e-4
    duration: Annotated[float, Meta(gt=0, le=600)] = 2.0
    n_periods: Count = 1
    grid: Literal["lin", "log"] = "lin"
    odd_only: bool = False
    seed: int = 0
    amplitude: Annotated[float, Meta(gt=0, le=1)] = 0.5   # peak torque as a fraction of the torque limit
    max_iter: Count = 50
    export_dir: str | None = None
    training: ExcitationRole = sfield(default_factory=ExcitationRole)
    validation: ExcitationRole = sfield(default_factory=ExcitationRole)

    def role(self, role: str) -> dict:
        """The settings of one role: the table's values with the role's overrides."""
        base = {k: getattr(self, k) for k in ("f_min", "f_max", "n_lines", "dt", "duration", "n_periods",
                                               "grid", "odd_only", "seed", "amplitude", "max_iter")}
        over = getattr(self, role)
        base.update({k: v for k in ExcitationRole.__struct_fields__ if (v := getattr(over, k)) is not None})
        return base

    def check(self) -> None:
        for role in ROLES:
            r = self.role(role)
            if not r["f_min"] < r["f_max"]:
                raise Invalid(role, f"needs f_min < f_max, got {r['f_min']} and {r['f_max']} Hz", table=True)
            nyquist = 0.5 / r["dt"]
            if r["f_max"] >= nyquist:
                raise Invalid("f_max", f"{r['f_max']} Hz is not below the Nyquist frequency {nyquist:g} Hz")


class ModelSelectionTable(Table, kw_only=True):
    max_masses: Annotated[int, Meta(ge=1, le=3)] = 3
    candidates: list[str] | None = None
    n_starts: Count = 3
    seed: int = 0
    max_nfev: Count = 60
    decimate: Count = 5
    skip: Annotated[int, Meta(ge=0)] = 0
    friction_eps: Positive = 0.05
    min_pii_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.01
    max_condition_index: Positive = 30.0
    min_validation_fit: Annotated[float, Meta(le=1)] = 0.8
    parsimony_tol: NonNegative = 0.01
    profile_points: Count = 9
    n_jobs: Count = 2
    scheduler: str | None = None  # None: local process pool of n_jobs; "local": Dask LocalCluster; "tcp://..."
    bounds: dict[str, Range] = sfield(default_factory=dict)

    def check(self) -> None:
        from identification.drive_models import DEFAULT_BOUNDS, parse_name

        for name, (lo, hi) in self.bounds.items():
            if name not in DEFAULT_BOUNDS:
                raise Invalid(f"bounds.{name}",
                              f"unknown parameter (known: {', '.join(sorted(DEFAULT_BOUNDS))})")
            if not lo < hi:
                raise Invalid(f"bounds.{name}", f"needs lo < hi, got [{lo}, {hi}]")
        for c in self.candidates or []:
            try:
                parse_name(c)
            except (KeyError, ValueError) as exc:
                raise Invalid("candidates", f"{c!r}: {exc}") from None

    def options(self) -> dict:
        """Keyword arguments of identification.model_selection.select_model."""
        from identification.drive_models import DEFAULT_BOUNDS, all_structures, parse_name

        bounds = {**DEFAULT_BOUNDS, **{k: (float(v[0]), float(v[1])) for k, v in self.bounds.items()}}
        candidates = ([parse_name(c) for c in self.candidates] if self.candidates
                      else all_structures(self.max_masses))
        keys = ("n_starts", "seed", "max_nfev", "decimate", "skip", "friction_eps", "min_pii_ratio",
                "max_condition_index", "min_validation_fit", "parsimony_tol", "profile_points", "n_jobs")
        return dict(bounds=bounds, candidates=candidates, **{k: getattr(self, k) for k in keys})


class OnlineTable(Table, kw_only=True):
    """Online identification (daq/rigs/crane/online.py): refit one model after every trajectory; off by default."""

    enabled: bool = False
    model: str = "3m+visc+coul+dt"  # one structure of the kit (the shipped truth's expected choice)
    n_starts: Count = 3             # start points of the first (cold) fit; later fits are warm-started
    seed: int = 0
    max_nfev: Count = 100           # Jacobian evaluations per fit
    decimate: Count | None = None   # default: [model_selection].decimate
    alpha: Annotated[float, Meta(gt=0, lt=1)] = 0.05   # level of the confidence-ellipsoid axes
    worker: Literal["process", "thread"] = "process"
    wait_timeout: Positive = 120.0  # s the plan waits for the last trajectory's estimate before it ends

    def check(self) -> None:
        from identification.drive_models import parse_name

        try:
            parse_name(self.model)
        except (KeyError, ValueError) as exc:
            raise Invalid("model", str(exc)) from None


class CraneConfig(RigConfig, kw_only=True):
    simulator: CraneSimulator | None = None
    devices: CraneDevices | None = None
    excitation: ExcitationTable
    model_selection: ModelSelectionTable = sfield(default_factory=ModelSelectionTable)
    online: OnlineTable = sfield(default_factory=OnlineTable)

    def check(self) -> None:
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        drive = self.devices.drive
        for role in ROLES:
            r = self.excitation.role(role)
            n = round(r["duration"] / r["dt"])
            if n > drive.max_samples:
                raise Invalid(f"excitation.{role}" if getattr(self.excitation, role).duration else
                              "excitation.duration", f"{n} samples exceed [devices.drive].max_samples "
                                                     f"({drive.max_samples})")


# ----------------------------------------------------------------------------------------- devices


@dataclass
class CraneRigDevices:
    drive: Any
    safe_actions: list = field(default_factory=list)

    async def identities(self) -> dict[str, dict]:
        return {"drive": await self.drive.device_identity()}

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.drive.close()


async def open_devices(cfg: CraneConfig, device_cfg: dict) -> CraneRigDevices:
    from drivers.servo_drive import ServoDrive

    drive = ServoDrive(dict(device_cfg["drive"]))
    # stop, disable and read `enabled` back: raises when the drive did not confirm
    devices = CraneRigDevices(drive, [("stop and disable drive", drive.safe_state)])
    try:
        await drive.connect()
    except BaseException:
        await devices.close()
        raise
    return devices


def simulator(raw: dict):
    from simulators.crane_rig import CraneRig

    return CraneRig(raw)


def simulated_devices(sim, raw: dict) -> dict:
    """The [devices] tables with the drive's url pointed at the started simulator."""
    devices = {k: dict(v) for k, v in (raw.get("devices") or {}).items()}
    drive = devices.setdefault("drive", {})
    mode = dict(drive.get("security", {})).get("mode", "none")
    drive["url"] = sim.endpoints["secure" if mode != "none" else "plain"]
    return devices


# ----------------------------------------------------------------------------------------- plan


def design_excitation(exc: ExcitationTable, role: str, torque_limit: float):
    """Torque trajectory of ``role``: (dt, torque samples N*m, info, multisine result, peak)."""
    from identification.multisine import design_multisine

    r = exc.role(role)
    ms = design_multisine(r["f_min"], r["f_max"], r["n_lines"], r["dt"], n_periods=r["n_periods"],
                          grid=r["grid"], odd_only=r["odd_only"], seed=r["seed"], max_iter=r["max_iter"],
                          period=r["duration"] / r["n_periods"])
    signal = np.asarray(ms.signal, dtype=float)
    peak = r["amplitude"] * torque_limit
    torque = signal / np.abs(signal).max() * peak
    info = {"f_min": r["f_min"], "f_max": r["f_max"], "n_lines": r["n_lines"], "grid": r["grid"],
            "seed": r["seed"], "crest_factor": float(ms.crest_factor),
            "peak_torque": float(np.abs(torque).max())}
    return r["dt"], torque, info, ms, peak


async def prepare(ctx) -> None:
    """Design both excitations (off the event loop) before the session starts; export them if asked."""
    cfg: CraneConfig = ctx.config
    drive = ctx.devices.drive
    limit = min(cfg.devices.drive.torque_limit, drive.drive_limits.get("torque_limit", np.inf))
    loop = asyncio.get_running_loop()
    for role in ROLES:
        dt, torque, info, ms, peak = await loop.run_in_executor(None, design_excitation, cfg.excitation, role,
                                                                 limit)
        if cfg.excitation.export_dir:
            from daq.plots.excitation import export_trajectory, plot_multisine

            out = Path(cfg.excitation.export_dir)
            out.mkdir(parents=True, exist_ok=True)
            info["files"] = [str(export_trajectory(ms, out / f"{role}.csv", peak=peak)),
                             str(plot_multisine(ms, out / f"{role}.png", peak=peak))]
        ctx.prepared[role] = (dt, torque, info)


def online_settings(cfg: CraneConfig):
    """The online fit's settings: ``[online]`` over the ``[model_selection]`` bounds and model step."""
    from daq.rigs.crane.online import OnlineFitSettings

    o, ms = cfg.online, cfg.model_selection.options()
    return OnlineFitSettings(model=o.model, bounds=ms["bounds"], n_starts=o.n_starts, seed=o.seed,
                             max_nfev=o.max_nfev, decimate=o.decimate or ms["decimate"], skip=ms["skip"],
                             friction_eps=ms["friction_eps"], alpha=o.alpha, worker=o.worker)


async def _start_online(ctx):
    """Spawn the online identifier on the run's bus when [online] is enabled (else None)."""
    cfg: CraneConfig = ctx.config
    if not cfg.online.enabled:
        return None
    from daq.rigs.crane.online import ONLINE_STREAM, TOPICS, CraneOnlineIdentifier

    async def emit(kind: str, body: dict) -> None:
        await ctx.event(ONLINE_STREAM, kind, **body)

    ident = CraneOnlineIdentifier(online_settings(cfg), emit)
    ctx.spawn(ident.run(await ctx.subscribe(*TOPICS)), "crane online identifier")
    return ident


async def _finish_online(ctx, ident) -> None:
    """Wait (bounded) for the estimate over every recorded trajectory, so the session holds it."""
    est = await ident.wait_for(ctx.summary["runs"], ctx.config.online.wait_timeout)
    ctx.summary["online_estimates"] = len(ident.estimates)
    if est is None:
        ctx.summary["online_note"] = (f"no estimate over {ctx.summary['runs']} trajectories within "
                                      f"{ctx.config.online.wait_timeout:g} s")
    else:
        ctx.summary["online_rel_std_max"] = max((r for r in est["rel_std"] if r is not None), default=None)


async def plan(ctx) -> None:
    """For each role: upload, enable, start, wait, read the trace back, disable, publish the trace."""
    drive = ctx.devices.drive
    ctx.summary.update(runs=0)
    online = await _start_online(ctx)
    t_end = 0.0  # end of the last published trace: time bases never overlap
    for role in ROLES:
        await ctx.checkpoint(f"before the {role} run")
        dt, torque, info = ctx.prepared[role]
        await drive.load_trajectory(dt, torque)
        await drive.enable()
        t0 = max(time.time(), t_end)
        await drive.start()
        await drive.wait_done()
        trace = await drive.read_trace()
        await drive.disable()
        n = int(trace["speed"].size)
        expected = int(round(torque.size * dt / trace["dt"]))
        if n != expected:
            raise RuntimeError(f"{role}: trace has {n} samples, expected {expected}")
        await ctx.event(PLAN_STREAM, "trajectory_start", role=role, dt=trace["dt"], n=n, t0=t0, **info)
        data = np.column_stack([trace[c] for c in CHANNELS])
        await ctx.publish_blocks(TRACE_STREAM, data, t0, trace["dt"], CHANNELS, UNITS, FRAME_SAMPLES)
        t_end = t0 + n * trace["dt"]
        await ctx.event(PLAN_STREAM, "trajectory_end", role=role, dt=trace["dt"], n=n, t0=t0)
        ctx.summary["runs"] += 1
        ctx.advance(1, f"{role} run recorded ({n} samples)")
    if online is not None:
        await _finish_online(ctx, online)


# ----------------------------------------------------------------------------------------- analysis


def crane_arrays(store, session_id: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, float]]:
    """``role -> (t, torque_cmd, speed, dt)`` for every completed trajectory of a crane session.

    Each trajectory is read as its own sample range of the trace stream, not the whole session.
    """
    ends = {e.body["role"] for e in store.events(session_id, kind="trajectory_end")}
    if not ends:
        return {}
    out: dict = {}
    offset = 0  # each trajectory's frames follow its start event, in order
    for ev in store.events(session_id, kind="trajectory_start"):
        role, dt, n = ev.body["role"], float(ev.body["dt"]), int(ev.body["n"])
        start, offset = offset, offset + n
        if role not in ends:
            continue
        rows = _read_rows(store, session_id, start, start + n)
        if rows.shape[0] != n:
            raise ValueError(f"session {session_id}: {role} has {rows.shape[0]} stored samples, expected {n}")
        out[role] = (np.arange(n) * dt, rows[:, CHANNELS.index("torque_cmd")].astype(float),
                     rows[:, CHANNELS.index("speed")].astype(float), dt)
    return out


def _read_rows(store, session_id: str, start: int, stop: int) -> np.ndarray:
    read_range = getattr(store, "read_range", None)
    if read_range is not None:
        return read_range(session_id, TRACE_STREAM, start, stop).data
    return store.read_stream(session_id, TRACE_STREAM).data[start:stop]


def analyze(runs, cfg: CraneConfig, progress=None):
    from daq.rigs.analysis import AnalysisError
    from identification.model_selection import select_model

    missing = set(ROLES) - set(runs)
    if missing:
        raise AnalysisError(f"no {' and no '.join(sorted(missing))} run recorded")
    from daq.run.executor import make_executor

    opts = cfg.model_selection.options()
    if progress is not None:  # show the bar at once: the first candidates take a while
        progress(0, len(opts["candidates"]), "fitting candidate models")
    bounds = opts.pop("bounds")
    # candidates and profile-likelihood directions are independent fits: both go through the executor
    with make_executor(cfg.model_selection.scheduler, opts["n_jobs"]) as ex:
        return select_model(runs["training"], runs["validation"], bounds, progress=progress, executor=ex,
                            **opts)


def report_text(result) -> str:
    """The selection table, then the chosen model's profile-likelihood and Fisher intervals."""
    from identification.drive_models import PARAM_UNITS

    text = result.format_table()
    prof = result.profile
    if prof is not None and prof.names:
        text += (f"\n\nprofile likelihood of {result.chosen_name} on the training run "
                 f"({prof.n_refits} re-fits, {prof.seconds:.1f} s)\n" + prof.format_table(PARAM_UNITS)
                 + "\nboth intervals take the residuals as white noise of the fitted variance: a structure "
                   "error of the model (coloured residuals) is not in them")
    return text


def _plots(result, runs, folder: Path) -> list[Path]:
    from daq.rigs.crane.plots import write_plots

    return write_plots(result, folder)


def _describe(sim) -> list[dict]:
    s = sim.settings
    return [{"device": "drive", "protocol": "opc.tcp", "address": url, "security": kind,
             "nodes": f"namespace {s.namespace}, object {s.axis} (see [devices.drive.nodes])"}
            for kind, url in sim.endpoints.items()]


RIG = Rig(
    kind="crane",
    summary="stacker-crane x-axis: multisine runs through an OPC UA servo drive; model selection over 96 "
            "drive models with practical identifiability",
    schema=CraneConfig,
    open_devices=open_devices,
    plan=plan,
    simulator=simulator,
    simulated_devices=simulated_devices,
    prepare=prepare,
    progress_total=lambda cfg: len(ROLES),
    arrays=crane_arrays,
    analyze=analyze,
    report=Report(text=report_text, to_dict=lambda r: r.to_dict(), plots=_plots),
    describe_simulator=_describe,
    streams={TRACE_STREAM: "torque_cmd, torque [N*m], speed [rad/s] at the drive's cycle",
             PLAN_STREAM: "events"},
)
