"""The stacker-crane x-axis rig (seed paper 004): training and validation multisines through an OPC UA
servo drive, then model selection with practical identifiability over the 96-model kit.

Devices: one servo drive. Stream ``crane.trace`` (torque_cmd, torque, speed; N*m, N*m, rad/s) at the
drive's 10 kHz, one trajectory per role between ``trajectory_start``/``trajectory_end`` on ``crane.plan``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from daq.executor import make_executor
from daq.online.estimates import start_online
from daq.rigs import drive, summary
from daq.rigs.analysis import AnalysisError
from daq.rigs.base import AnalysisProgress, RunContext
from daq.rigs.crane import distortion
from daq.rigs.crane.config import (
    CHANNELS,
    ONLINE_STREAM,
    PLAN_STREAM,
    TRACE_STREAM,
    UNITS,
    CraneConfig,
    check_rig,
    online_settings,
)
from daq.rigs.crane.online import TOPICS, CraneOnlineIdentifier
from daq.rigs.excitation import ROLES, ExcitationTable, design_excitation
from daq.store.reads import SessionReads
from identification.models.drive_models import PARAM_UNITS

if TYPE_CHECKING:  # annotations only: the model selection loads scipy
    from identification.selection.model_selection import SelectionResult

__all__ = ["RIG", "CraneConfig", "CraneRig", "crane_arrays", "report_text"]

STREAMS = drive.TraceStreams(PLAN_STREAM, TRACE_STREAM, CHANNELS, UNITS)
#: role -> (t, torque_cmd, speed, dt) of each completed trajectory
CraneRuns = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, float]]
Context = RunContext[CraneConfig, drive.DriveRigDevices]


# ----------------------------------------------------------------------------------------- plan


async def _finish_online(ctx: Context, ident: CraneOnlineIdentifier) -> None:
    """Wait (bounded) for the estimate over every recorded trajectory, so the session holds it."""
    est = await ident.wait_for(ctx.summary["runs"], ctx.config.online.wait_timeout)
    ctx.summary["online_estimates"] = len(ident.estimates)
    if est is None:
        ctx.summary["online_note"] = (f"no estimate over {ctx.summary['runs']} trajectories within "
                                      f"{ctx.config.online.wait_timeout:g} s")
    else:
        ctx.summary["online_rel_std_max"] = max((r for r in est["rel_std"] if r is not None), default=None)


# ----------------------------------------------------------------------------------------- analysis


def crane_arrays(store: SessionReads, session_id: str) -> CraneRuns:
    """``role -> (t, torque_cmd, speed, dt)`` for every completed trajectory of a crane session.

    Each trajectory is read as its own sample range of the trace stream, not the whole session.
    """
    runs, _ = drive.read_trajectories(store, session_id, PLAN_STREAM, TRACE_STREAM,
                                      lambda index, start: str(start["role"]))
    out: CraneRuns = {}
    u, y = CHANNELS.index("torque_cmd"), CHANNELS.index("speed")
    for tr in runs:
        n = tr.rows.shape[0]
        out[str(tr.start["role"])] = (np.arange(n) * tr.dt, np.ascontiguousarray(tr.rows[:, u]),
                                      np.ascontiguousarray(tr.rows[:, y]), tr.dt)
    return out


def report_text(result) -> str:
    """The selection table, then the chosen model's profile-likelihood and Fisher intervals."""
    text = result.format_table()
    prof = result.profile
    if prof is not None and prof.names:
        text += (f"\n\nprofile likelihood of {result.chosen_name} on the training run "
                 f"({prof.n_refits} re-fits, {prof.seconds:.1f} s)\n" + prof.format_table(PARAM_UNITS)
                 + "\nboth intervals take the residuals as white noise of the fitted variance: a structure "
                   "error of the model (coloured residuals) is not in them")
    iv = getattr(result, "intervals", None)
    if iv is not None:  # the adequacy check decides whether any of these intervals is to be trusted
        ok = "valid" if iv.intervals_valid else "NOT valid"
        text += f"\n\nverdict on the intervals: {ok} - {iv.statement}"
    return text


def stage_clock() -> tuple[float, float]:
    """Wall seconds and the CPU seconds of this process and its live children (the executor's local
    workers), so that a stage's CPU time counts the work it handed out; a remote Dask cluster's is not in
    it."""
    import psutil  # lazy: only an analysis times its stages (psutil comes with dask.distributed)

    me = psutil.Process()
    cpu = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            cpu += sum(child.cpu_times()[:2])
        except psutil.Error:  # ended between the listing and the reading
            pass
    return time.perf_counter(), cpu


# ----------------------------------------------------------------------------------------- the rig


def _designed(excitation: ExcitationTable, role: str, limit: float) -> tuple[float, np.ndarray, dict]:
    """One role's excitation (time step, torque, info), and its CSV and plot when ``export_dir`` is set."""
    dt, torque, info, ms, peak = design_excitation(excitation, role, limit)
    if excitation.export_dir:
        from daq.plots.excitation import export_trajectory, plot_multisine  # lazy: scipy (matplotlib later)

        out = Path(excitation.export_dir)
        out.mkdir(parents=True, exist_ok=True)
        info["files"] = [str(export_trajectory(ms, out / f"{role}.csv", peak=peak)),
                         str(plot_multisine(ms, out / f"{role}.png", peak=peak))]
    return dt, torque, info


class CraneRig(drive.DriveRig[CraneConfig, CraneRuns, "SelectionResult"]):
    """Devices and simulator: the servo drive (:class:`daq.rigs.drive.DriveRig`)."""

    kind = "crane"
    summary = ("stacker-crane x-axis: multisine runs through an OPC UA servo drive; model selection over 96 "
               "drive models with practical identifiability")
    schema = CraneConfig
    streams = {TRACE_STREAM: "torque_cmd, torque [N*m], speed [rad/s] at the drive's cycle",
               PLAN_STREAM: "events"}

    def check(self, cfg: CraneConfig, config_dir: Path) -> None:
        check_rig(cfg, config_dir)  # multisine grids, export folder, security files, simulated drive

    def describe_simulator(self, sim) -> list[dict]:
        return drive.describe_simulator(sim, " (see [devices.drive.nodes])")

    def progress_total(self, cfg: CraneConfig) -> int:
        return len(ROLES) + distortion.n_runs(cfg.distortion)

    async def prepare(self, ctx: Context) -> None:
        """Design both excitations before the session starts; export them if asked. Both run off the event
        loop: the drive is connected and its heartbeat must keep its pace (the plot takes about a second)."""
        cfg = ctx.config
        assert cfg.devices is not None  # [devices] is required (the config's check)
        limit = min(cfg.devices.drive.torque_limit,
                    ctx.devices.drive.drive_limits.get("torque_limit", np.inf))
        loop = asyncio.get_running_loop()
        for role in ROLES:
            ctx.prepared[role] = await loop.run_in_executor(None, _designed, cfg.excitation, role, limit)

    async def plan(self, ctx: Context) -> None:
        """For each role: one trajectory through the drive (:func:`daq.rigs.drive.record_trajectory`); with
        ``[online]`` enabled, an estimate after each, and the plan waits (bounded) for the last one."""
        ctx.summary.update(runs=0)
        online = None
        if ctx.config.online.enabled and not ctx.dry_run:  # a dry run records no trace to identify from
            settings = online_settings(ctx.config)
            online = await start_online(ctx, ONLINE_STREAM, TOPICS,
                                              lambda emit: CraneOnlineIdentifier(settings, emit),
                                              "crane online identifier")
        t_end = 0.0  # end of the last published trace: time bases never overlap
        for role in ROLES:
            dt, torque, info = ctx.prepared[role]
            t_end = await drive.record_trajectory(ctx, STREAMS, dt, torque, info, role=role,
                                                  before=f"before the {role} run",
                                                  recorded=f"{role} run recorded", not_before=t_end,
                                                  label=f"{role}: ")
        await distortion.record(ctx, STREAMS, ctx.config.excitation.dt, t_end)
        if online is not None:
            await _finish_online(ctx, online)

    def arrays(self, reader: SessionReads, session_id: str) -> CraneRuns:
        return crane_arrays(reader, session_id)

    def analyze(self, arrays: CraneRuns, cfg: CraneConfig,
                progress: AnalysisProgress | None = None) -> SelectionResult:
        """Model selection over the kit on the training run, validated on the validation run."""
        missing = set(ROLES) - set(arrays)
        if missing:
            raise AnalysisError(f"no {' and no '.join(sorted(missing))} run recorded")

        opts = cfg.model_selection.options()
        if progress is not None:  # show the bar at once: the first candidates take a while
            progress(0, len(opts["candidates"]), "fitting candidate models")
        bounds = opts.pop("bounds")
        # candidates, the refits of the close rivals and the profile-likelihood directions are independent
        # fits: all go through the executor (a Dask cluster speeds up the whole analysis). Its workers start
        # first and load what they need while this process imports and runs the distortion analysis.
        with make_executor(cfg.model_selection.scheduler, opts["n_jobs"]) as ex:
            ex.warm("identification.selection.model_selection:warm_up")
            from identification.selection.model_selection import select_model  # lazy: scipy

            nl = distortion.analyze(arrays, cfg.distortion)  # first: can a linear model family be adequate?
            result = select_model(arrays["training"], arrays["validation"], bounds, progress=progress,
                                  executor=ex, clock=stage_clock, **opts)
        return distortion.attach(result, nl)

    def report_text(self, result: SelectionResult) -> str:
        return distortion.report_text(result) + report_text(result)

    def report_dict(self, result: SelectionResult) -> dict:
        return distortion.report_dict(result, result.to_dict())

    def analysis_summary(self, report: dict) -> dict:
        """The chosen structure (the verdict) with its parameters and their robust 95 % intervals."""
        chosen = report.get("chosen")
        if not isinstance(chosen, str):
            return summary.summary({}, {}, summary.NO_STRUCTURE)
        return {**summary.adequacy_summary(report, summary.estimates_of(report.get("chosen_params")), chosen),
                "verdict": chosen}

    def parameter_units(self) -> dict[str, str]:
        return dict(PARAM_UNITS)

    def plots(self, result: SelectionResult, arrays: CraneRuns, folder: Path) -> list[Path]:
        from daq.rigs.crane.plots import write_plots  # lazy: scipy (matplotlib when it draws)

        w0, c0 = stage_clock()
        files = write_plots(result, folder) + distortion.plots(result, folder)
        w1, c1 = stage_clock()
        result.stages["plots"] = {"seconds": w1 - w0, "cpu_seconds": c1 - c0}
        return files


RIG = CraneRig()
