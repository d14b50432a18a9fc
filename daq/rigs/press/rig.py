"""The press rig: force staircases with online setpoint correction, then sensor selection and the
model-uncertainty test (seed papers 000/001).

Devices: a pneumatic force source (Modbus) and displacement sensors (Modbus RTU/TCP or ASCII serial).
Streams: ``press.force`` (force_cmd, force, pressure; N, N, Pa) polled by a companion task, and
``press.sensors`` (one channel per sensor, m), one block per setpoint. Events on ``press.plan``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from msgspec import Meta
from msgspec import field as sfield

from daq.bus.frames import Frame
from daq.config.load import Invalid
from daq.config.schema import Count, ModbusLink, NonNegative, Positive, Range, Register, RigConfig, Table
from daq.rigs.analysis import AnalysisError
from daq.rigs.base import Report, Rig
from daq.rigs.press.acquisition import FORCE_STREAM, ForceAcquisition
from daq.rigs.press.online import ONLINE_STREAM, PLAN_TOPIC, OnlineIdentifier, StopRule, verdict_options
from daq.rigs.press.session import press_arrays
from daq.rigs.press.setpoint_correction import CorrectionResult, CorrectionSettings, SetpointCorrector
from drivers.displacement import open_sensor
from drivers.force_source import ForceSource
from identification.press_analysis import analyze_press
from simulators.physics.press import PressTruth
from simulators.press_rig import PressRig

SENSOR_STREAM = "press.sensors"
PLAN_STREAM = "press.plan"


# ----------------------------------------------------------------------------------------- config


class ForceSourceDevice(ModbusLink, kw_only=True):
    protocol: Literal["modbus_tcp", "modbus_rtu"] = "modbus_tcp"
    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=0, le=65535)] = 502
    url: str | None = None
    baudrate: Count = 19200
    device_id: Annotated[int, Meta(ge=0, le=247)] = 1
    f_min: NonNegative = 0.0         # N, setpoints below are refused before sending
    f_max: Positive                  # N, setpoints above are refused before sending
    heartbeat_interval: Positive = 0.2
    safe_state_timeout: Annotated[float, Meta(gt=0, le=2.9)] = 2.5  # s; below the guard's 3 s per attempt
    registers: dict[str, Register]

    def check(self) -> None:
        if not self.f_min < self.f_max:
            raise Invalid("f_max", f"must be above f_min ({self.f_min} N)")
        missing = {"setpoint", "enable", "force", "pressure", "status"} - set(self.registers)
        if missing:
            raise Invalid("registers", f"missing register(s) {', '.join(sorted(missing))}")


class SensorDevice(ModbusLink, kw_only=True):
    protocol: Literal["modbus_rtu", "modbus_tcp", "serial"]
    url: str | None = None
    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=0, le=65535)] = 502
    device_id: Annotated[int, Meta(ge=0, le=247)] = 1
    baudrate: Count = 9600
    sigma: Positive                  # m, nominal noise std of one reading (the analysis weights with it)
    range: Range = sfield(default_factory=lambda: [-1.0, 1.0])  # m, plausible readings
    registers: dict[str, Register] | None = None
    query: str = "MEAS?"
    id_query: str = "ID?"
    terminator: str = "\r\n"

    def check(self) -> None:
        if not self.range[0] < self.range[1]:
            raise Invalid("range", f"needs lo < hi, got {self.range}")
        if self.protocol != "modbus_tcp" and not self.url:
            raise Invalid("url", f"required for protocol {self.protocol!r}")
        if self.protocol != "serial" and "displacement" not in (self.registers or {}):
            raise Invalid("registers", "a Modbus sensor needs a 'displacement' register")


class PressDevices(Table, kw_only=True):
    force_source: ForceSourceDevice
    sensors: dict[str, SensorDevice]

    def check(self) -> None:
        if not 2 <= len(self.sensors) <= 8:
            raise Invalid("sensors", f"the press analysis needs 2 to 8 sensors, got {len(self.sensors)}")


class ForceSourceSim(Table, kw_only=True):
    f_max: Positive = 25000.0
    tau: Positive = 0.05
    gain: Positive = 0.97
    offset: float = -15.0
    pressure_nominal: Positive = 6.0e5
    pressure_rel_sigma: NonNegative = 0.003
    pressure_corr_time: Positive = 0.5
    loadcell_sigma: NonNegative = 2.0
    pressure_sensor_sigma: NonNegative = 50.0
    watchdog_timeout: Positive = 1.0
    tick: Annotated[float, Meta(gt=0, le=0.1)] = 0.002
    settled_band: Positive = 0.002


class SensorNoise(Table, kw_only=True):
    sigma: NonNegative = 0.0
    resolution: NonNegative = 0.0


class PressSimulator(Table, kw_only=True):
    seed: int = 0
    plant_period: Annotated[float, Meta(gt=0, le=1.0)] = 0.005
    truth: dict[str, float] = sfield(default_factory=dict)
    force_source: ForceSourceSim = sfield(default_factory=ForceSourceSim)
    sensors: dict[str, SensorNoise] = sfield(default_factory=dict)

    def check(self) -> None:

        try:
            PressTruth.from_config(dict(self.truth))
        except (TypeError, ValueError) as exc:
            raise Invalid("truth", str(exc)) from None


class PlanTable(Table, kw_only=True):
    q_max: Positive = 20000.0          # N, top of the staircase
    n_steps_up: Annotated[int, Meta(ge=1, le=1000)] = 14
    n_series: Annotated[int, Meta(ge=1, le=1000)] = 6
    n_samples: Annotated[int, Meta(ge=1, le=100000)] = 20
    sample_interval: NonNegative = 0.005
    settle_time: NonNegative = 0.1
    precondition: bool = True

    @property
    def q_desired(self) -> np.ndarray:
        up = np.linspace(0.0, self.q_max, self.n_steps_up + 1)
        return np.concatenate([up, up[-2::-1]])


class CorrectionTable(Table, kw_only=True):
    tolerance: Positive = 50.0
    gain: Annotated[float, Meta(gt=0, le=2)] = 1.0
    max_iterations: Annotated[int, Meta(ge=1, le=100)] = 8
    monotone: bool = True
    margin: Annotated[float, Meta(ge=0, lt=1)] = 0.5
    settle_time: NonNegative = 0.15
    window: Positive = 0.1
    max_stall: Positive = 1.0           # s the force stream may pause before the correction gives up


class AcquisitionTable(Table, kw_only=True):
    rate: Annotated[float, Meta(gt=0, le=2000)] = 200.0   # Hz
    block: Annotated[int, Meta(ge=1, le=10000)] = 10
    max_failures: Annotated[int, Meta(ge=1, le=100)] = 3


class AnalysisTable(Table, kw_only=True):
    tol: Annotated[float, Meta(gt=0, lt=1)] = 0.05
    criterion: Literal["A", "D", "E"] = "E"
    n_random_splits: Annotated[int, Meta(ge=0)] = 0
    seed: int = 0
    n_sensors: Count = 2
    constants: dict[str, float] | None = None


class OnlineTable(Table, kw_only=True):
    """Online identification (daq/rigs/press/online.py) and the stopping rule on its estimate; off by
    default."""

    enabled: bool = False
    target_rel_std: Annotated[float, Meta(gt=0, lt=1)] = 0.002   # stop when every rel. std is below
    min_series: Annotated[int, Meta(ge=1, le=1000)] = 3
    verdict: bool = True            # model-uncertainty test (M1/M2/M3, [analysis] settings) from series 2 on
    stop_rule: Literal["target", "verdict", "both"] = "target"   # what may end the plan before the budget
    settle_series: Annotated[int, Meta(ge=1, le=1000)] = 2        # "verdict": same rejected set this often
    settle_needs_kept: bool = True  # a verdict rejecting every model is not settled (no adequate model yet)
    verdict_from: Annotated[int, Meta(ge=2, le=1000)] = 2          # first series count given a verdict
    dry_run: bool = False           # evaluate and record the rule (estimate "stop"), never stop the plan
    max_series: Annotated[int, Meta(ge=1, le=1000)] | None = None  # budget (default: plan.n_series)
    max_seconds: Positive | None = None                            # budget from the plan start, s
    inflate: bool = True            # scale the covariance by max(1, RSS/dof) (M1 misfit)
    alpha: Annotated[float, Meta(gt=0, lt=1)] = 0.05               # level of the ellipse axes
    wait_timeout: Positive = 10.0   # s the plan waits for a series' estimate before going on without

    def check(self) -> None:
        if self.stop_rule != "target" and not self.verdict:
            raise Invalid("stop_rule", f"{self.stop_rule!r} needs the online verdict (verdict = true)")


class PressConfig(RigConfig, kw_only=True):
    simulator: PressSimulator | None = None
    devices: PressDevices | None = None
    plan: PlanTable = sfield(default_factory=PlanTable)
    correction: CorrectionTable = sfield(default_factory=CorrectionTable)
    acquisition: AcquisitionTable = sfield(default_factory=AcquisitionTable)
    analysis: AnalysisTable = sfield(default_factory=AnalysisTable)
    online: OnlineTable = sfield(default_factory=OnlineTable)

    def check(self) -> None:
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        src = self.devices.force_source
        if self.plan.q_max > src.f_max:
            raise Invalid("plan.q_max", f"{self.plan.q_max:g} N is above the force source's range "
                                        f"([devices.force_source].f_max = {src.f_max:g} N)")
        if self.rig.simulated:
            sim = self.simulator or PressSimulator()
            if src.f_max > sim.force_source.f_max:
                raise Invalid("devices.force_source.f_max",
                              f"{src.f_max:g} N is above what the simulated source accepts "
                              f"([simulator.force_source].f_max = {sim.force_source.f_max:g} N)")
        if self.correction.tolerance >= self.plan.q_max / max(self.plan.n_steps_up, 1):
            raise Invalid("correction.tolerance", "must be smaller than one step of the staircase "
                                                  f"({self.plan.q_max / self.plan.n_steps_up:g} N)")
        if self.analysis.n_sensors > len(self.devices.sensors):
            raise Invalid("analysis.n_sensors",
                          f"more than the {len(self.devices.sensors)} sensors configured")


# ----------------------------------------------------------------------------------------- devices


@dataclass
class PressRigDevices:
    source: Any
    sensors: dict[str, Any]
    safe_actions: list = field(default_factory=list)

    async def identities(self) -> dict[str, dict]:
        out = {"force_source": self.source.device_identity()}
        out.update({name: s.device_identity() for name, s in self.sensors.items()})
        return out

    async def close(self) -> None:
        for dev in (self.source, *self.sensors.values()):
            with contextlib.suppress(Exception):
                await dev.close()


async def open_devices(cfg: PressConfig, device_cfg: dict) -> PressRigDevices:

    source = ForceSource(device_cfg["force_source"], name="force_source")
    sensors = {name: open_sensor(name, c) for name, c in device_cfg["sensors"].items()}
    devices = PressRigDevices(source, sensors, [("force to zero and disable", source.safe_state)])
    try:
        await source.connect()
        await asyncio.gather(*(s.connect() for s in sensors.values()))
    except BaseException:
        await devices.close()
        raise
    return devices


def simulator(raw: dict):

    return PressRig(raw)


# ----------------------------------------------------------------------------------------- plan


def _total_steps(cfg: PressConfig) -> int:
    return cfg.plan.n_series * len(cfg.plan.q_desired)


async def plan(ctx) -> None:
    """Precondition once, then every series walks the staircase: reach, settle, measure."""
    cfg: PressConfig = ctx.config
    devices: PressRigDevices = ctx.devices
    p = cfg.plan
    q_d = p.q_desired
    acquisition = ForceAcquisition(devices.source, ctx.publisher, ctx.session_id, rate=cfg.acquisition.rate,
                                   block=cfg.acquisition.block, max_failures=cfg.acquisition.max_failures)
    settings = CorrectionSettings(**{k: getattr(cfg.correction, k) for k in (
        "tolerance", "gain", "max_iterations", "monotone", "margin", "settle_time", "window", "max_stall")},
        min_command=cfg.devices.force_source.f_min, max_command=cfg.devices.force_source.f_max)

    async def set_command(force: float) -> None:
        await devices.source.set_force(force)
        acquisition.command = force

    corrector = SetpointCorrector(await ctx.subscribe("data/" + FORCE_STREAM), set_command, settings)
    ctx.summary.update(setpoints=0, not_reached=0)
    ctx.spawn(acquisition.run(), "force acquisition")
    online = await _start_online(ctx)  # subscribed before plan_start, which it needs
    await ctx.event(PLAN_STREAM, "plan_start", n_series=p.n_series, q_desired=q_d.tolist(),
                    sensors=list(devices.sensors))
    await devices.source.enable()
    if p.precondition:  # a full cycle wipes the friction memory: every series starts from the same state
        for q in (p.q_max, 0.0):
            await ctx.checkpoint("during preconditioning")
            r = await corrector.reach(q)
            await ctx.event(PLAN_STREAM, "precondition", q_desired=q, q_actual=r.q_actual, reached=r.reached)
    t_plan = time.monotonic()
    for i in range(p.n_series):
        for j, q in enumerate(q_d):
            await ctx.checkpoint(f"before series {i} step {j}")
            await ctx.event(PLAN_STREAM, "step", series=i, index=j, q_desired=float(q))
            result = await corrector.reach(float(q))
            await _report_setpoint(ctx, i, j, result)
            if p.settle_time > 0:
                await asyncio.sleep(p.settle_time)
            await _measure(ctx, corrector, i, j, float(q))
            ctx.summary["setpoints"] += 1
        if online is not None and await _online_stop(ctx, online, i + 1, time.monotonic() - t_plan):
            break
    await set_command(0.0)
    await acquisition.finish()
    await ctx.event(PLAN_STREAM, "plan_end", **ctx.summary)


async def _start_online(ctx):
    """Spawn the online identifier on the run's bus when [online] is enabled (else None)."""
    cfg: PressConfig = ctx.config
    if not cfg.online.enabled:
        return None

    async def emit(kind: str, body: dict) -> None:
        await ctx.event(ONLINE_STREAM, kind, **body)

    o = cfg.online
    a = cfg.analysis
    sigmas = {name: s.sigma for name, s in cfg.devices.sensors.items()}
    analysis = {k: getattr(a, k) for k in a.__struct_fields__}
    rule = StopRule(mode=o.stop_rule, target_rel_std=o.target_rel_std, min_series=o.min_series,
                    settle_series=o.settle_series, needs_kept=o.settle_needs_kept)
    ident = OnlineIdentifier(sigmas, emit, inflate=o.inflate, alpha=o.alpha, constants=a.constants,
                             verdict=verdict_options(analysis) if o.verdict else None, rule=rule,
                             verdict_from=o.verdict_from)
    await ident.ready()
    ctx.spawn(ident.run(await ctx.subscribe(PLAN_TOPIC)), "online identifier")
    return ident


async def _online_stop(ctx, ident, n_done: int, elapsed: float) -> bool:
    """After series ``n_done``: stop when the online stop rule fired or a budget is reached (reason recorded
    in a ``plan_stop`` event and the session summary). The "target" rule needs only the M1 fit, not the
    verdict; before the plan ends, the last series' full estimate is awaited so that the session has it."""
    o: OnlineTable = ctx.config.online
    est = None
    if n_done >= o.min_series:  # before, no rule may fire: the next series starts while the worker fits
        est = await _wait(ctx, ident, n_done, o.stop_rule != "target")
    ctx.summary["series"] = n_done
    reason = est.get("stop") if est is not None else None
    if reason is None and o.max_series is not None and n_done >= o.max_series:
        reason = f"series budget reached ({o.max_series})"
    elif reason is None and o.max_seconds is not None and elapsed >= o.max_seconds:
        reason = f"time budget reached ({elapsed:.1f} s >= {o.max_seconds:g} s)"
    ctx.summary["stop_reason"] = reason or f"fixed plan: {n_done} series"
    last = (reason is not None and not o.dry_run) or n_done >= ctx.config.plan.n_series
    if last and (est is None or "verdict" not in est) and ident.verdict is not None:
        est = await _wait(ctx, ident, n_done, True) or est
    verdict = (est or {}).get("verdict") or {}
    if "rejected" in verdict:
        ctx.summary["verdict"] = {"series": n_done, "rejected": verdict["rejected"], "kept": verdict["kept"],
                                  "settled_for": verdict.get("settled_for", 0)}
    if o.dry_run and reason is not None:
        ctx.summary.setdefault("dry_run_stop", {"series": n_done, "reason": reason})
        ctx.summary["stop_reason"] = f"fixed plan: {n_done} series (dry run)"
        return False
    if reason is None or n_done >= ctx.config.plan.n_series:
        return False
    await ctx.event(PLAN_STREAM, "plan_stop", reason=reason, series=n_done, n_series=ctx.config.plan.n_series,
                    rule=o.stop_rule, k=est["k"] if est else None, rel_std=est["rel_std"] if est else None,
                    rejected=verdict.get("rejected"))
    return True


async def _wait(ctx, ident, n_done: int, verdict: bool) -> dict | None:
    """The identifier's estimate of ``n_done`` series; the time waited adds to summary["online_wait_s"]."""
    t0 = time.monotonic()
    est = await ident.wait_for(n_done, ctx.config.online.wait_timeout, verdict=verdict)
    ctx.summary["online_wait_s"] = ctx.summary.get("online_wait_s", 0.0) + time.monotonic() - t0
    return est


async def _report_setpoint(ctx, i: int, j: int, r: CorrectionResult) -> None:
    if not r.reached:
        ctx.summary["not_reached"] += 1
    await ctx.event(PLAN_STREAM, "setpoint_reached" if r.reached else "setpoint_not_reached", series=i,
                    index=j, q_desired=r.q_desired, q_actual=r.q_actual, residual=r.residual,
                    iterations=r.iterations, command=r.command, reversals=r.reversals)
    mark = "" if r.reached else " NOT REACHED"
    ctx.advance(1, f"series {i + 1} step {j + 1:2d} q_d={r.q_desired:8.0f} N "
                   f"error={r.residual:+7.1f} N{mark}")


async def _measure(ctx, corrector: SetpointCorrector, i: int, j: int, q: float) -> None:
    """Read a block from every sensor while the load cell keeps streaming; record both."""

    sensors = ctx.devices.sensors
    names = list(sensors)
    p = ctx.config.plan
    t_start = time.time()
    blocks = await asyncio.gather(*(sensors[n].read_many(p.n_samples, p.sample_interval) for n in names))
    t_end = time.time()
    z = np.column_stack([np.asarray(b, dtype=np.float64) for b in blocks])
    await ctx.publish(Frame(stream=SENSOR_STREAM, seq=ctx.next_seq(SENSOR_STREAM), t0=t_start, dt=None,
                            channels=names, units=["m"] * len(names), data=z,
                            timestamps=np.linspace(t_start, t_end, z.shape[0])))
    q_actual = await corrector.measure(max(t_end - t_start, 0.02), since=t_start)
    await ctx.event(PLAN_STREAM, "measurement", series=i, index=j, q_desired=q, q_actual=q_actual,
                    z=z.mean(axis=0).tolist(), z_std=z.std(axis=0).tolist(), n_samples=int(z.shape[0]),
                    sensors=names, units="m")


# ----------------------------------------------------------------------------------------- analysis


def arrays(store, session_id: str):

    return press_arrays(store, session_id)


def analyze(arr, cfg: PressConfig, progress=None):

    n_series = arr.z.shape[0]
    if n_series < 3:
        raise AnalysisError(f"{n_series} complete series; the analysis needs at least 3 (training series "
                            "for the memory model plus two test series)")
    if np.isnan(arr.sigmas).any():
        raise AnalysisError("the config snapshot gives no sigma for every sensor")
    a = cfg.analysis
    return analyze_press(arr.z, arr.q, arr.q_desired, arr.sigmas, sensor_names=tuple(arr.sensors), tol=a.tol,
                         criterion=a.criterion, n_sensors=min(a.n_sensors, len(arr.sensors)),
                         n_random_splits=a.n_random_splits, seed=a.seed, constants=a.constants)


def _plots(result, arr, folder: Path) -> list[Path]:
    from daq.rigs.press.plots import write_plots  # lazy: matplotlib, only when plots are asked for

    return write_plots(result, arr.z, arr.q, folder)


RIG = Rig(
    kind="press",
    summary="servo press: force staircases with online setpoint correction; sensor selection and the "
            "model-uncertainty test of three friction models",
    schema=PressConfig,
    open_devices=open_devices,
    plan=plan,
    simulator=simulator,
    progress_total=_total_steps,
    arrays=arrays,
    analyze=analyze,
    report=Report(text=lambda r: r.format_table(), to_dict=lambda r: r.to_dict(), plots=_plots),
    streams={FORCE_STREAM: "force_cmd, force [N], pressure [Pa], polled", SENSOR_STREAM:
             "one channel per sensor [m], a block per setpoint", PLAN_STREAM: "events"},
)
