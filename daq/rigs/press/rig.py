"""The press rig: force staircases with online setpoint correction, then sensor selection and the
model-uncertainty test (seed papers 000/001).

Devices: a pneumatic force source (Modbus) and displacement sensors (Modbus RTU/TCP or ASCII serial).
Streams: ``press.force`` (force_cmd, force, pressure; N, N, Pa) polled by a companion task, and
``press.sensors`` (one channel per sensor, m), one block per setpoint. Events on ``press.plan``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daq.bus.frames import Frame
from daq.config.load import parse, to_dict
from daq.online.estimates import start_online
from daq.rigs import summary
from daq.rigs.analysis import AnalysisError
from daq.rigs.base import AnalysisProgress, Rig, RunContext
from daq.rigs.press.acquisition import FORCE_STREAM, ForceAcquisition
from daq.rigs.press.config import OnlineTable, PressConfig, PressDevices, check_rig
from daq.rigs.press.online import ONLINE_STREAM, PLAN_TOPIC, OnlineIdentifier
from daq.rigs.press.session import PressArrays, press_arrays
from daq.rigs.press.setpoint_correction import CorrectionResult, CorrectionSettings, SetpointCorrector
from drivers.backends import Backends
from drivers.clock import Clock
from drivers.displacement import open_sensor
from drivers.force_source import ForceSource
from identification.analyses.online_press import UNIT
from identification.analyses.press_analysis import PressAnalysisResult, analyze_press
from identification.models.press_models import P_NAMES
from simulators import press_rig

SENSOR_STREAM = "press.sensors"
PLAN_STREAM = "press.plan"


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


Context = RunContext[PressConfig, PressRigDevices]


# ----------------------------------------------------------------------------------------- plan


async def _start_online(ctx):
    """Spawn the online identifier on the run's bus when [online] is enabled (else None)."""
    cfg: PressConfig = ctx.config
    if not cfg.online.enabled or ctx.dry_run:  # a dry run moves nothing: there is nothing to identify
        return None

    return await start_online(ctx, ONLINE_STREAM, (PLAN_TOPIC,),
                              lambda emit: OnlineIdentifier.for_config(cfg, emit), "online identifier")


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
    t_start = ctx.clock.time()
    blocks = await asyncio.gather(*(_read_block(sensors[n], p.n_samples, p.sample_interval, ctx.clock)
                                    for n in names))
    t_end = ctx.clock.time()
    z = np.column_stack([np.asarray(b, dtype=np.float64) for b in blocks])
    await ctx.publish(Frame(stream=SENSOR_STREAM, seq=ctx.next_seq(SENSOR_STREAM), t0=t_start, dt=None,
                            channels=names, units=["m"] * len(names), data=z,
                            timestamps=np.linspace(t_start, t_end, z.shape[0])))
    q_actual = await corrector.measure(max(t_end - t_start, 0.02), since=t_start)
    await ctx.event(PLAN_STREAM, "measurement", series=i, index=j, q_desired=q, q_actual=q_actual,
                    z=z.mean(axis=0).tolist(), z_std=z.std(axis=0).tolist(), n_samples=int(z.shape[0]),
                    sensors=names, units="m")


async def _read_block(sensor, n: int, interval: float, clock: Clock) -> np.ndarray:
    """``n`` readings of one sensor, ``interval`` seconds of the run's clock apart (0: back to back)."""
    if interval <= 0:
        return await sensor.read_many(n)
    out = np.empty(n)
    for i in range(n):
        if i:
            await clock.sleep(interval)
        out[i] = await sensor.read()
    return out


def _max_lag(ctx: Context) -> float:
    """Clock seconds the rig's own loops may fall behind: ``[simulator].max_lag`` on a faster-than-real-time
    clock (only there can a speed be too high for the machine), else no bound."""
    sim = ctx.config.simulator
    return sim.max_lag if ctx.clock.speed > 1 and sim is not None else math.inf


# ----------------------------------------------------------------------------------------- the rig


class PressRig(Rig[PressConfig, PressRigDevices, PressArrays, PressAnalysisResult]):
    """A force source and displacement sensors; the plan's steps are the helpers above, the session is
    read back by :func:`daq.rigs.press.session.press_arrays`."""

    kind = "press"
    summary = ("servo press: force staircases with online setpoint correction; sensor selection and the "
               "model-uncertainty test of three friction models")
    schema = PressConfig
    streams = {FORCE_STREAM: "force_cmd, force [N], pressure [Pa], polled",
               SENSOR_STREAM: "one channel per sensor [m], a block per setpoint", PLAN_STREAM: "events"}

    def check(self, cfg: PressConfig, config_dir: Path) -> None:
        check_rig(cfg, config_dir)  # the simulated plant and the drivers, built before anything opens

    async def open_devices(self, cfg: PressConfig, tables: PressDevices,
                           backends: Backends | None = None) -> PressRigDevices:
        """The force source and every displacement sensor, connected; all closed again on a failure."""
        source = ForceSource(tables.force_source, name="force_source", backends=backends)
        sensors = {name: open_sensor(name, c, backends) for name, c in tables.sensors.items()}
        devices = PressRigDevices(source, sensors, [("force to zero and disable", source.safe_action())])
        try:
            await source.connect()
            await asyncio.gather(*(s.connect() for s in sensors.values()))
        except BaseException:
            await devices.close()
            raise
        return devices

    def simulator(self, cfg: PressConfig) -> press_rig.PressRig:
        return press_rig.PressRig(to_dict(cfg))

    def simulated_devices(self, sim: press_rig.PressRig, cfg: PressConfig) -> PressDevices:
        """The ``[devices]`` with the ports the started simulator listens on."""
        return parse(sim.device_config(), PressDevices, None, ["devices"])

    def progress_total(self, cfg: PressConfig) -> int:
        return cfg.plan.n_series * len(cfg.plan.q_desired)

    async def plan(self, ctx: Context) -> None:
        """Precondition once, then every series walks the staircase: reach, settle, measure."""
        cfg = ctx.config
        devices = ctx.devices
        p = cfg.plan
        q_d = p.q_desired
        acquisition = ForceAcquisition(devices.source, ctx.publisher, ctx.session_id,
                                       rate=cfg.acquisition.rate, block=cfg.acquisition.block,
                                       max_failures=cfg.acquisition.max_failures, clock=ctx.clock,
                                       max_gap=_max_lag(ctx))
        assert cfg.devices is not None  # [devices] is required (PressConfig.check)
        settings = CorrectionSettings.for_config(cfg.correction, cfg.devices.force_source)
        if ctx.dry_run:  # the force cannot follow a held command: one command per setpoint, then measure
            settings.max_iterations = 1

        async def set_command(force: float) -> None:
            await devices.source.set_force(force)
            acquisition.command = force

        corrector = SetpointCorrector(await ctx.subscribe("data/" + FORCE_STREAM), set_command, settings,
                                      clock=ctx.clock, source_answered=lambda: acquisition.answered_at)
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
                await ctx.event(PLAN_STREAM, "precondition", q_desired=q, q_actual=r.q_actual,
                                reached=r.reached)
        t_plan = ctx.clock.monotonic()
        for i in range(p.n_series):
            for j, q in enumerate(q_d):
                await ctx.checkpoint(f"before series {i + 1} step {j + 1}")  # 1-based, as the progress bar
                await ctx.event(PLAN_STREAM, "step", series=i, index=j, q_desired=float(q))
                result = await corrector.reach(float(q))
                await _report_setpoint(ctx, i, j, result)
                if p.settle_time > 0:
                    await ctx.clock.sleep(p.settle_time)
                await _measure(ctx, corrector, i, j, float(q))
                ctx.summary["setpoints"] += 1
            if online is not None and await _online_stop(ctx, online, i + 1, ctx.clock.monotonic() - t_plan):
                break
        await set_command(0.0)
        await acquisition.finish()
        await ctx.event(PLAN_STREAM, "plan_end", **ctx.summary)

    def arrays(self, reader, session_id: str) -> PressArrays:
        return press_arrays(reader, session_id)

    def analyze(self, arrays: PressArrays, cfg: PressConfig,
                progress: AnalysisProgress | None = None) -> PressAnalysisResult:
        """Sensor selection and the model-uncertainty test on every complete series."""
        n_series = arrays.z.shape[0]
        if n_series < 3:
            raise AnalysisError(f"{n_series} complete series; the analysis needs at least 3 (training series "
                                "for the memory model plus two test series)")
        if np.isnan(arrays.sigmas).any():
            raise AnalysisError("the config snapshot gives no sigma for every sensor")
        a = cfg.analysis
        return analyze_press(arrays.z, arrays.q, arrays.q_desired, arrays.sigmas,
                             sensor_names=tuple(arrays.sensors), tol=a.tol, criterion=a.criterion,
                             n_sensors=min(a.n_sensors, len(arrays.sensors)),
                             n_random_splits=a.n_random_splits, seed=a.seed, constants=a.linkage())

    def report_text(self, result: PressAnalysisResult) -> str:
        return result.format_table()

    def analysis_summary(self, report: dict) -> dict:
        """The first kept model's parameters with +-1.96 standard errors; the verdict names every kept
        model ("M3 keep"; none kept: no estimates, no verdict)."""
        verdicts, models = report.get("verdicts") or {}, report.get("models") or {}
        kept = [m for m, v in verdicts.items() if v == "keep" and m in models]
        if not kept:
            return summary.summary({}, {}, None)
        model, names = models[kept[0]], list(report.get("parameters") or [])
        p, std = model.get("p") or [], model.get("std_errors") or []
        est = summary.estimates_of(dict(zip(names, p, strict=False)))
        iv = summary.intervals_of({n: [v - summary.Z95 * s, v + summary.Z95 * s]
                                   for n, v, s in zip(names, p, std, strict=False)
                                   if isinstance(v, (int, float)) and isinstance(s, (int, float))})
        return summary.summary(est, iv, " ".join(f"{m} keep" for m in kept), kept[0])

    def parameter_units(self) -> dict[str, str]:
        """k5, k7: stiffnesses in N/m (identification/analyses/press_analysis.py)."""
        return dict.fromkeys(P_NAMES, UNIT)

    def plots(self, result: PressAnalysisResult, arrays: PressArrays, folder: Path) -> list[Path]:
        from daq.rigs.press.plots import write_plots  # lazy: matplotlib, only when plots are asked for

        return write_plots(result, arrays.z, arrays.q, folder)


RIG = PressRig()
