"""The machine-tool rig (seed paper 003): a modal test at several feed-axis positions, then the
sensitivity-guided (GSA) identification of the structure's stiffness and damping parameters.

Device: one modal-test front end (SCPI over TCP: axis, shaker, acquisition). Per position the plan
moves the axis, then per excitation DOF runs a periodic multisine and records ``mt.force`` (N) and
``mt.accel`` (m/s^2, one channel per response DOF); events on ``mt.plan``: ``position_start`` /
``position_end`` {position, role} and ``run_start`` / ``run_end`` {position, role, input, dt, n, period}.
Analysis: FRFs per position (local polynomial method with a noise variance per line when a run holds two
periods or more, else H1 with coherence) -> EMA (LSCF/LSFD) modal data -> GSA identification.
Sessions imported from UFF 58 files (`hil import uff`) carry the FRFs directly on ``mt.frf``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import msgspec
import numpy as np
from threadpoolctl import threadpool_limits

from daq.config.load import to_dict
from daq.executor import make_executor
from daq.rigs import summary
from daq.rigs.analysis import AnalysisError
from daq.rigs.base import AnalysisProgress, Rig, RunContext
from daq.rigs.config import session_config
from daq.rigs.machine_tool import distortion
from daq.rigs.machine_tool.config import MachineToolConfig, MTDevices, MTSimulator, check_rig
from daq.rigs.machine_tool.plots import write_plots
from drivers.backends import Backends
from drivers.modal_frontend import FrontEndSettings, ModalFrontEnd
from identification.frequency.frf_estimation import h1_estimate, lpm_periodic
from identification.frequency.modal_extraction import extract_modes
from identification.models.machine_tool_model import (
    DAMPING_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    as_vector,
    param_bounds,
)

if TYPE_CHECKING:  # annotations only: SALib is heavy
    from identification.gsa.result import GSAIdentificationResult

FORCE_STREAM = "mt.force"
ACCEL_STREAM = "mt.accel"
FRF_STREAM = "mt.frf"
PLAN_STREAM = "mt.plan"
ROLES = ("identification", "validation")
DISTORTION_STREAMS = (PLAN_STREAM, FORCE_STREAM, ACCEL_STREAM)
ACCEL_UNIT = "m/s^2"
FRF_UNIT = "m/s^2/N"  # accelerance
FRAME_SAMPLES = 4096


# ----------------------------------------------------------------------------------------- devices


@dataclass
class MTDevicesOpen:
    frontend: ModalFrontEnd
    safe_actions: list = field(default_factory=list)

    async def identities(self) -> dict[str, dict]:
        return {"frontend": await self.frontend.identity()}

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.frontend.close()


Context = RunContext[MachineToolConfig, MTDevicesOpen]


# ----------------------------------------------------------------------------------------- plan


def _steps(cfg: MachineToolConfig) -> list[tuple[float, str]]:
    return [(p, "identification") for p in cfg.plan.positions] + [
        (p, "validation") for p in cfg.plan.validation
    ]


# ----------------------------------------------------------------------------------------- arrays


@dataclass
class MTArrays:
    """Per position (in plan order): role, measured accelerance FRFs and coherence."""

    positions: list[float]
    roles: list[str]
    inputs: list[str]
    labels: list[str]
    freq: np.ndarray  # Hz
    H: list[np.ndarray]  # (n_inputs, n_resp, n_freq) accelerance, m/s^2/N
    coherence: list[np.ndarray | None]
    truth: dict | None = None
    frf_var: list[np.ndarray] | None = None  # per position, noise variance per line of H (LPM), (m/s^2/N)^2
    distortion: distortion.DistortionRecords | None = None  # the [distortion] runs, if recorded


def mt_arrays(store, session_id: str) -> MTArrays:
    """FRFs per position: H1 from the recorded streams, or the stored FRFs of an imported session."""
    info = store.get_session(session_id)
    cfg = session_config(info.config, MachineToolConfig, info.id) if info.config else None
    sim = (cfg.simulator or MTSimulator()) if cfg is not None and cfg.rig.simulated else None
    truth = dict(sim.truth) if sim is not None else None
    if store.events(info.id, kind="frf_start"):
        out = _frf_arrays(store, info.id)
    else:
        out = _h1_arrays(store, info.id)
    if not out.positions:
        raise AnalysisError("no completed position in the session")
    out.truth = truth
    out.distortion = distortion.read(store, info.id, DISTORTION_STREAMS)
    return out


def _group(store, sid: str, start_kind: str) -> tuple[dict, list]:
    ends = {e.body["position"] for e in store.events(sid, kind="position_end")}
    runs: dict[float, list] = {}
    order: list = []
    for ev in store.events(sid, kind=start_kind):
        b = ev.body
        if b["position"] not in runs:
            order.append((b["position"], b["role"]))
        runs.setdefault(b["position"], []).append(b)
    return runs, [(p, r) for p, r in order if p in ends]


def _h1_arrays(store, sid: str) -> MTArrays:
    runs, order = _group(store, sid, "run_start")
    coh: list[np.ndarray | None]
    variances: list[np.ndarray | None]
    positions, roles, H, coh, variances = [], [], [], [], []
    inputs: list[str] = []
    labels: list[str] = []
    freq = np.zeros(0)
    offsets: dict[float, int] = {}
    offset = 0
    for p, rr in runs.items():
        offsets[p] = offset
        offset += sum(int(b["n"]) for b in rr)
    for p, role in order:
        Hs, Cs, Vs, off = [], [], [], offsets[p]
        for b in runs[p]:
            n = int(b["n"])
            f = store.read_range(sid, FORCE_STREAM, off, off + n)
            a = store.read_range(sid, ACCEL_STREAM, off, off + n)
            off += n
            labels = list(a.channels)
            est = h1_estimate(
                f.data[:, 0], a.data, float(b["dt"]), nperseg=int(b["period"]), noverlap=0, window="boxcar"
            )
            freq = est.freq
            Cs.append(est.coherence)
            if n // int(b["period"]) >= 2:  # transients out, noise per line: the poles' std carry it
                lpm = lpm_periodic(f.data[:, 0], a.data, float(b["dt"]), int(b["period"]))
                Hs.append(_on_grid(est.freq, lpm.freq, lpm.H))
                Vs.append(_on_grid(est.freq, lpm.freq, lpm.var, fill=np.inf))
            else:
                Hs.append(est.H)
        inputs = [b["input"] for b in runs[p]]
        positions.append(float(p))
        roles.append(role)
        H.append(np.array(Hs))
        coh.append(np.array(Cs))
        variances.append(np.array(Vs) if len(Vs) == len(Hs) else None)
    all_lpm = variances and all(v is not None for v in variances)
    frf_var = cast(list[np.ndarray], variances) if all_lpm else None  # all() does not narrow
    return MTArrays(positions, roles, inputs, labels, freq, H, coh, frf_var=frf_var)


def _on_grid(freq: np.ndarray, f_lpm: np.ndarray, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """LPM values (n_resp, n_lpm) on the H1 grid ``freq`` (the LPM leaves out DC and Nyquist)."""
    out = np.full((values.shape[0], freq.size), fill, dtype=values.dtype)
    idx = np.searchsorted(freq, f_lpm - 1e-9 * freq[-1])
    out[:, idx] = values
    return out


def _frf_arrays(store, sid: str) -> MTArrays:
    runs, order = _group(store, sid, "frf_start")
    data = store.read_stream(sid, FRF_STREAM)
    ch = list(data.channels)
    labels = [c[:-3] for c in ch if c.endswith(".re")]
    re_idx = [ch.index(f"{lb}.re") for lb in labels]
    im_idx = [ch.index(f"{lb}.im") for lb in labels]
    coh_idx = [ch.index(f"{lb}.coh") for lb in labels] if f"{labels[0]}.coh" in ch else None
    offsets, offset = {}, 0
    for p, rr in runs.items():
        offsets[p] = offset
        offset += sum(int(b["n"]) for b in rr)
    positions, roles, H, coh, inputs, freq = [], [], [], [], [], np.zeros(0)
    for p, role in order:
        Hs, Cs, off = [], [], offsets[p]
        for b in runs[p]:
            rows = data.data[off : off + int(b["n"])]
            off += int(b["n"])
            freq = rows[:, ch.index("freq")]
            Hs.append((rows[:, re_idx] + 1j * rows[:, im_idx]).T)
            if coh_idx is not None:
                Cs.append(rows[:, coh_idx].T)
        inputs = [b["input"] for b in runs[p]]
        positions.append(float(p))
        roles.append(role)
        H.append(np.array(Hs))
        coh.append(np.array(Cs) if Cs else None)
    return MTArrays(positions, roles, inputs, labels, freq, H, coh)


# ----------------------------------------------------------------------------------------- analysis


MODAL_STD_NOTE = ("  (std = spread of the pole over the stabilisation orders and FRF noise through the "
                  "linearised pole fit, with the FRFs' own noise variance per line when the runs hold two "
                  "periods or more (local polynomial method); on the simulated machine tool the 95 % "
                  "intervals hold 98 % of the true frequencies and 100 % of the damping ratios "
                  "(benchmarks/bench_modal_coverage.py). A modal model that is not the structure's "
                  "(non-viscous damping, modes merged or beyond the band) moves the poles by more than "
                  "the std; the parameter intervals below come from the scatter of the modal data about "
                  "the identified model)")


@dataclass
class MTAnalysisResult:
    arrays: MTArrays
    fits: list  # ModalFit per position
    gsa: GSAIdentificationResult
    band: tuple[float, float]
    distortion: distortion.MTDistortionOutcome | None = None

    def text(self) -> str:
        lines = [self.distortion.text(), ""] if self.distortion is not None else []
        lines.append("modal extraction (LSCF poles + LSFD residues), per position: f [Hz] and damping ratio "
                     "[%], +- one std")
        for p, role, fit in zip(self.arrays.positions, self.arrays.roles, self.fits, strict=True):
            fs = fit.freq_std if fit.freq_std is not None else np.full(fit.freq.size, np.nan)
            xs = fit.xi_std if fit.xi_std is not None else np.full(fit.xi.size, np.nan)
            lines.append(f"  {1000 * p:5.0f} mm {role:<14} fit error {100 * fit.fit_error:.2f} %")
            lines.append("      " + "  ".join(f"{f:.2f}+-{sf:.2g} Hz / {100 * x:.3g}+-{100 * sx:.2g} %"
                                              for f, sf, x, sx in zip(fit.freq, fs, fit.xi, xs, strict=True)))
        lines.append(MODAL_STD_NOTE)
        lines.append(self.gsa.format_tables())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = self.gsa.to_dict()
        d["modal_extraction"] = [
            {
                "position": p,
                "role": r,
                "freq": fit.freq.tolist(),
                "xi": fit.xi.tolist(),
                "freq_std": None if fit.freq_std is None else fit.freq_std.tolist(),
                "xi_std": None if fit.xi_std is None else fit.xi_std.tolist(),
                "ci95": {k: v.tolist() for k, v in fit.intervals(0.95).items()},
                "std_note": MODAL_STD_NOTE,
                "fit_error": fit.fit_error,
            }
            for p, r, fit in zip(self.arrays.positions, self.arrays.roles, self.fits, strict=True)
        ]
        d["band"] = list(self.band)
        return {"nonlinear_distortion": self.distortion.to_dict() if self.distortion else None, **d}


def analyze(arrays: MTArrays, cfg: MachineToolConfig, progress=None, executor=None) -> MTAnalysisResult:
    """EMA per position, then the GSA identification through the executor (progress on ``progress``)."""
    from identification.gsa import ModalReference, identify  # lazy: SALib is heavy

    a = cfg.analysis
    model = MachineTool()
    if arrays.labels != model.obs_labels:
        raise AnalysisError(f"response channels {arrays.labels} are not the model's measured DOFs")
    n_pos = len(arrays.positions)
    total = n_pos + 4
    step = [0]

    def say(msg: str) -> None:
        step[0] += 1
        if progress is not None:
            progress(min(step[0], total), total, msg)

    nl = distortion.analyze(arrays.distortion, cfg)  # first: is the structure linear enough?
    band = (arrays.freq >= a.f_min) & (arrays.freq <= a.f_max)
    freq = arrays.freq[band]
    w2 = (2 * np.pi * freq) ** 2
    refs: dict[str, dict] = {
        r: {"positions": [], "lam": [], "shapes": [], "xi": [], "frf": [], "freq_std": [], "xi_std": []}
        for r in ROLES
    }
    fits = []
    variances: Sequence[np.ndarray | None] = arrays.frf_var if arrays.frf_var else [None] * n_pos
    for p, role, H, var in zip(arrays.positions, arrays.roles, arrays.H, variances, strict=True):
        say(f"modal extraction at {1000 * p:.0f} mm")
        try:  # poles and residues fitted over the whole excited band; BLAS single-threaded (small matrices)
            with threadpool_limits(limits=1, user_api="blas"):
                fit = extract_modes(arrays.freq, H, a.n_modes, a.f_min, a.f_max, kind="accelerance",
                                    fit_band=(cfg.excitation.f_min, cfg.excitation.f_max), frf_var=var)
        except ValueError as exc:
            raise AnalysisError(f"modal extraction at {p} m: {exc}") from None
        fits.append(fit)
        r = refs[role]
        r["positions"].append(p)
        r["lam"].append(fit.lam)
        r["shapes"].append(fit.shapes)
        r["xi"].append(fit.xi)
        r["freq_std"].append(fit.freq_std)  # the extraction's own uncertainty: the model-error check's scale
        r["xi_std"].append(fit.xi_std)
        r["frf"].append(-H[..., band] / w2)  # receptance, as the model's FRFs

    def reference(role: str) -> ModalReference | None:
        r = refs[role]
        if not r["positions"]:
            return None
        return ModalReference(
            positions=r["positions"],
            lam=r["lam"],
            shapes=r["shapes"],
            xi=r["xi"],
            freq=freq,
            inputs=list(arrays.inputs),
            frf=r["frf"],
            freq_std=None if any(v is None for v in r["freq_std"]) else r["freq_std"],
            xi_std=None if any(v is None for v in r["xi_std"]) else r["xi_std"],
        )

    ref = reference("identification")
    if ref is None:
        raise AnalysisError("no identification position recorded")
    lo, hi = param_bounds()
    truth = as_vector(arrays.truth) if arrays.truth is not None else None
    own = executor is None
    ex = make_executor(a.scheduler, a.workers) if own else executor
    try:
        gsa = identify(
            model,
            ref,
            STIFFNESS_NAMES,
            DAMPING_NAMES,
            lo,
            hi,
            validation=reference("validation"),
            sobol_n=a.sobol_n,
            n_opt=a.n_opt,
            maxiter=a.maxiter,
            refine=a.refine,
            seed=a.seed,
            executor=ex,
            truth=truth,
            progress=say,
        )
    finally:
        if own:
            ex.close()
    if progress is not None:
        progress(total, total, "done")
    return MTAnalysisResult(arrays=arrays, fits=fits, gsa=gsa, band=(a.f_min, a.f_max), distortion=nl)


# ----------------------------------------------------------------------------------------- the rig


class MachineToolRig(Rig[MachineToolConfig, MTDevicesOpen, MTArrays, MTAnalysisResult]):
    """One modal-test front end; a modal test per position; EMA and GSA identification."""

    kind = "machine-tool"
    summary = ("machine-tool structure: modal tests at several axis positions through a SCPI front end; EMA "
               "and sensitivity-guided (GSA) identification of 27 stiffness and damping parameters")
    schema = MachineToolConfig
    streams = {
        FORCE_STREAM: "excitation force [N]",
        ACCEL_STREAM: "accelerations [m/s^2], one per response DOF",
        FRF_STREAM: "imported FRFs: freq [Hz], <dof>.re/.im [m/s^2/N] (and .coh)",
        PLAN_STREAM: "events",
    }

    def check(self, cfg: MachineToolConfig, config_dir: Path) -> None:
        check_rig(cfg, config_dir)  # the simulated front end and the driver, built before anything opens

    async def open_devices(self, cfg: MachineToolConfig, tables: MTDevices,
                           backends: Backends | None = None) -> MTDevicesOpen:
        fe = ModalFrontEnd(tables.frontend, backends=backends)

        await fe.connect()
        return MTDevicesOpen(fe, [("shaker output off", fe.safe_action())])

    def simulator(self, cfg: MachineToolConfig):
        from simulators.machine_tool_sim import MachineToolFrontEndSim  # lazy: only a simulated run serves it

        return MachineToolFrontEndSim(to_dict(cfg))

    def simulated_devices(self, sim, cfg: MachineToolConfig) -> MTDevices:
        """The ``[devices]`` with the front end's address the started simulator listens on."""
        where = sim.device_config()["frontend"]
        if cfg.devices is None:
            return MTDevices(frontend=FrontEndSettings(host=where["host"], port=where["port"]))
        return msgspec.structs.replace(cfg.devices, frontend=msgspec.structs.replace(
            cfg.devices.frontend, host=where["host"], port=where["port"]))

    def describe_simulator(self, sim) -> list[dict]:
        return [
            {
                "device": "frontend",
                "protocol": "SCPI over TCP",
                "address": f"{sim.settings.host}:{sim.port}",
                "commands": "AXIS:POS, SOUR:*, ACQ:*, INIT, *OPC?, FETC:FORC?, FETC:ACC?",
            }
        ]

    def progress_total(self, cfg: MachineToolConfig) -> int:
        return len(_steps(cfg)) * len(cfg.plan.inputs) + distortion.n_runs(cfg)

    async def plan(self, ctx: Context) -> None:
        """Per position: move the axis, per input DOF one periodic multisine measurement, publish it."""
        cfg = ctx.config
        fe = ctx.devices.frontend
        e = cfg.excitation
        ctx.summary.update(positions=0, runs=0)
        t_end = 0.0
        for position, role in _steps(cfg):
            await ctx.checkpoint(f"before position {position} m")
            await fe.move_to(position)
            await ctx.event(PLAN_STREAM, "position_start", position=position, role=role)
            for k, dof in enumerate(cfg.plan.inputs):
                await ctx.checkpoint(f"before exciting {dof} at {position} m")
                await fe.configure(
                    dof=dof,
                    amplitude=e.amplitude,
                    f_start=e.f_min,
                    f_stop=e.f_max,
                    period=e.period,
                    seed=e.seed + k,
                    dt=e.dt,
                    periods=e.periods,
                    settle=e.settle,
                )
                force, accel, labels = await fe.measure()
                n = int(force.size)
                t0 = max(ctx.clock.time(), t_end)
                await ctx.event(
                    PLAN_STREAM,
                    "run_start",
                    position=position,
                    role=role,
                    input=dof,
                    dt=e.dt,
                    n=n,
                    period=e.period,
                    t0=t0,
                )
                await ctx.publish_blocks(FORCE_STREAM, force[:, None], t0, e.dt, ["force"], ["N"],
                                         FRAME_SAMPLES)
                await ctx.publish_blocks(ACCEL_STREAM, accel, t0, e.dt, list(labels),
                                         [ACCEL_UNIT] * len(labels), FRAME_SAMPLES)
                t_end = t0 + n * e.dt
                await ctx.event(PLAN_STREAM, "run_end", position=position, role=role, input=dof, n=n)
                ctx.summary["runs"] += 1
                ctx.advance(1, f"{role} {1000 * position:.0f} mm, {dof} ({n} samples)")
            await ctx.event(PLAN_STREAM, "position_end", position=position, role=role)
            ctx.summary["positions"] += 1
        await distortion.record(ctx, DISTORTION_STREAMS, ACCEL_UNIT, FRAME_SAMPLES, t_end)

    def arrays(self, reader, session_id: str) -> MTArrays:
        return mt_arrays(reader, session_id)

    def analyze(self, arrays: MTArrays, cfg: MachineToolConfig,
                progress: AnalysisProgress | None = None) -> MTAnalysisResult:
        return analyze(arrays, cfg, progress)

    def report_text(self, result: MTAnalysisResult) -> str:
        return result.text()

    def analysis_summary(self, report: dict) -> dict:
        """The identified stiffness and damping parameters, their 95 % intervals and the adequacy verdict."""
        return summary.adequacy_summary(report, summary.estimates_of(report.get("estimate")))

    def plots(self, result: MTAnalysisResult, arrays: MTArrays, folder: Path) -> list[Path]:
        return write_plots(result, folder) + distortion.plots(result.distortion, folder)


RIG = MachineToolRig()

__all__ = ["RIG", "MachineToolConfig", "MachineToolRig", "MTArrays", "mt_arrays", "analyze"]
