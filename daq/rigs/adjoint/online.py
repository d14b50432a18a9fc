"""Online identifier of the drive rigs (oscillator, pendulum): a bus consumer refitting after every run.

It reads ``<kind>.plan`` events and the ``<kind>.trace`` frames between ``trajectory_start`` and
``trajectory_end`` (live from the run's bus, or from ``hil replay``), keeps every completed run, and
after each one fits the identified parameters over all runs so far
(:func:`identification.design.sequential_design.fit_runs`: the first fit scans from the design point, later
ones start at the previous estimate). Each result goes out as an ``estimate`` event on
``<kind>.online`` (the common body of issue 10); the recorder stores it like any event.

The fit runs in a one-thread pool, off the event loop: a few numpy solves over some thousand samples,
so a process would only add start-up and pickling; one worker keeps the estimates in run order with
their warm starts. The drive plays its trajectory from its own buffer, so the fit cannot disturb a run.

The plan side of the sequential design (:func:`decide`, :func:`redesigned_signal`) lives here too, so
the rig's plan only calls it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from daq.bus.frames import Event, Frame
from daq.online.estimates import Emit, OnlineEstimates, start_online
from daq.online.estimates import publisher_emit as _publisher_emit
from daq.rigs import parse_config
from daq.rigs.adjoint.config import OUTPUTS, AdjointRigConfig
from daq.rigs.adjoint.design import fisher_std, lagged_mean, nominal_values, nuisance_starts, problem_of
from daq.rigs.base import RunContext
from daq.rigs.drive import DriveRigDevices, ReceivedTrajectory, TrajectoryReceiver

#: SI units of the parameters the drive rigs identify (for the event body and `hil watch`).
PARAM_UNITS = {"m1": "kg", "m2": "kg", "c1": "N/m", "c2": "N/m", "d1": "N*s/m", "d2": "N*s/m",
               "s_p": "m", "d_p": "N*m*s/rad", "J_p": "kg*m^2", "m_p": "kg", "m_c": "kg", "d_c": "N*s/m",
               "k23": "N*m/rad", "d23": "N*m*s/rad", "J3": "kg*m^2"}


def streams(kind: str) -> tuple[str, str, str]:
    """(plan stream, trace stream, online stream) of a drive rig kind."""
    return f"{kind}.plan", f"{kind}.trace", f"{kind}.online"


def topics(kind: str) -> tuple[str, str]:
    """Bus topics the identifier subscribes to."""
    plan, trace, _ = streams(kind)
    return "event/" + plan, "data/" + trace


class DriveIdentifier(OnlineEstimates):
    """Collects trajectories of ``kind`` and publishes an estimate over all runs after each one.

    ``model``: the identification model (free parameters = the identified ones); ``b0``: where the
    first fit starts its scan; ``output``: the measured channel; ``input_lag`` (s): the actuator's
    known time constant (the rig's ``[fit].input_lag``); ``skip_s``: left out at each run's start;
    ``target``: with it, an estimate that meets it carries ``stop``. ``n_design``: the first
    ``n_design`` model parameters are the identified ones (default all); the rest are nuisance
    parameters (friction the design model leaves out, ``[fit.nuisance]``), fitted alongside and
    reported apart, the stopping rule sees only the identified ones.
    """

    def __init__(self, kind: str, model, b0: np.ndarray, output: str, emit: Emit, *, input_lag: float = 0.0,
                 skip_s: float = 0.0, target: float | None = None, alpha: float = 0.05,
                 n_design: int | None = None):
        super().__init__(emit)
        self.kind = kind
        self.plan_stream, self.trace_stream, self.online_stream = streams(kind)
        self.model = model
        self.b0 = np.asarray(b0, float)
        self.output = output
        self.input_lag = input_lag
        self.skip_s = skip_s
        self.target = target
        self.alpha = alpha
        self.all_names = list(model.param_names)
        self.n_design = len(self.all_names) if n_design is None else int(n_design)
        self.names = self.all_names[:self.n_design]
        self.runs: list = []               # identification.design.sequential_design.Record, in run order
        self.attempted = 0                 # runs whose fit was attempted (estimate or failure published)
        self._receiver = TrajectoryReceiver(self.plan_stream, self.trace_stream)
        self._b: np.ndarray | None = None  # warm start
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{kind}-identifier")

    # -- feeding ------------------------------------------------------------------------------------
    async def handle(self, msg: Frame | Event) -> None:
        """Take one message; refit (and emit) when it ends a trajectory."""
        tr = self._receiver.take(msg)
        if tr is None:
            return
        run = tr.start.get("run", len(self.runs))
        try:
            self.runs.append(self._record(tr))
        except ValueError as exc:
            self.attempted += 1
            await self._publish("estimate_failed", {"used": len(self.runs), "run": run, "error": str(exc)})
            return
        await self._refit(tr.end, run)

    def _record(self, tr: ReceivedTrajectory):
        from identification.design.sequential_design import Record  # lazy: scipy

        if not tr.channels:
            raise ValueError("trajectory without trace frames")
        channels, data = tr.channels, tr.data
        if data.shape[0] != tr.n:
            raise ValueError(f"trajectory has {data.shape[0]} samples, expected {tr.n}")
        cmd_name = next((c for c in channels if c.endswith("_cmd")), channels[0])  # force_cmd, torque_cmd
        cmd, out = data[:, channels.index(cmd_name)], data[:, channels.index(self.output)]
        skip = int(round(self.skip_s / tr.dt))
        return Record(lagged_mean(cmd, self.input_lag, tr.dt), out, tr.dt, skip)

    async def _refit(self, trigger: Event, run: int) -> None:
        from identification.design.sequential_design import fit_runs  # lazy: scipy

        runs = list(self.runs)
        first = self._b is None
        start = self.b0 if first else self._b
        assert start is not None  # _b is set by the first fit
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            fit = await loop.run_in_executor(self._pool, lambda: fit_runs(
                self.model, runs, start, scan=first, scan_dims=self.n_design, alpha=self.alpha))
        except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
            self.attempted += 1
            await self._publish("estimate_failed", {"used": len(runs), "run": run,
                                                    "error": f"{type(exc).__name__}: {exc}"})
            return
        self.attempted += 1
        self._b = fit.b
        k = self.n_design
        body = fit.marginal(k).to_dict() if k < len(self.all_names) else fit.to_dict()
        if k < len(self.all_names):
            body["nuisance"] = {n: {"value": float(fit.b[j]), "std": float(fit.std[j])}
                                for j, n in enumerate(self.all_names) if j >= k}
        units = [PARAM_UNITS.get(n, "") for n in self.names]
        body.update(model=f"{self.kind}: {', '.join(self.names)}", units=units, run=run,
                    elapsed_s=time.perf_counter() - t0, trigger_seq=int(trigger.seq),
                    trigger_t=float(trigger.t))
        if len(set(units)) == 1:
            body["unit"] = units[0]
        if self.target is not None:
            from identification.design.sequential_design import stop_reason  # lazy: scipy

            why = stop_reason(self.names, body["rel_std"], self.target, len(runs), max_runs=10**9)
            if why is not None:
                body["stop"] = why
        await self._publish("estimate", body)

    async def wait_for(self, n_runs: int, timeout: float) -> dict | None:
        """The estimate over ``n_runs`` runs; None if its fit failed or did not end within ``timeout``."""
        await self._wait(lambda: self.attempted >= n_runs, timeout)
        if self.latest is not None and self.latest["used"] >= n_runs:
            return self.latest
        return None

    # -- running ------------------------------------------------------------------------------------
    # ``run`` (OnlineEstimates) consumes :func:`topics` and ends at the plan's outcome event.
    def _is_last(self, msg) -> bool:
        return isinstance(msg, Event) and msg.stream == self.plan_stream and msg.kind in ("plan_outcome",
                                                                                          "plan_end")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def from_config(cfg: AdjointRigConfig, emit: Emit, target: float | None = None) -> DriveIdentifier:
    """The identifier of an adjoint rig config (:class:`~daq.rigs.adjoint.config.AdjointRigConfig`)."""
    pb = problem_of(cfg)
    model, params = pb.model, list(pb.model.param_names)
    b0 = pb.b * cfg.fit.start
    values = nominal_values(cfg)  # prior knowledge only, never the simulator truth
    nuisance = {n: v for n, v in nuisance_starts(cfg, values).items() if n not in params}
    if nuisance:  # the analysis model: the design's parameters, then the nuisances at their start values
        from identification.analyses.adjoint_plants import analysis_model  # lazy: scipy

        point = {**values, **nuisance}
        if cfg.fit.friction_speed_eps is not None:
            point["eps"] = cfg.fit.friction_speed_eps
        model = analysis_model(cfg.adjoint.plant, point, params + list(nuisance))
        b0 = np.concatenate([b0, list(nuisance.values())])
    alpha = cfg.sequential.alpha if getattr(cfg, "sequential", None) is not None else 0.05
    return DriveIdentifier(cfg.rig.kind, model, b0, OUTPUTS[cfg.adjoint.plant][0], emit,
                           input_lag=cfg.fit.input_lag, skip_s=cfg.fit.skip, target=target, alpha=alpha,
                           n_design=len(params))


def from_snapshot(config: dict, emit: Emit) -> DriveIdentifier:
    """The identifier of a recorded session (its config snapshot), e.g. for a replay."""
    _, cfg = parse_config(config)
    seq = getattr(cfg, "sequential", None)
    return from_config(cfg, emit, target=seq.target_rel_std if seq is not None and seq.enabled else None)


def publisher_emit(publisher, kind: str, session_id: str | None = None) -> Emit:
    """An ``emit`` that publishes on ``<kind>.online`` through a BusPublisher (replays, tools)."""
    return _publisher_emit(publisher, streams(kind)[2], session_id)


# ----------------------------------------------------------------------------------------- plan side


Context = RunContext[AdjointRigConfig, DriveRigDevices]


async def start(ctx: Context) -> DriveIdentifier:
    """Spawn the identifier on the run's bus, subscribed before the first trajectory."""
    cfg = ctx.config
    kind = cfg.rig.kind
    return await start_online(ctx, streams(kind)[2], topics(kind),
                              lambda emit: from_config(cfg, emit, target=cfg.sequential.target_rel_std),
                              f"{kind} online identifier")


async def decide(ctx: Context, ident: DriveIdentifier, n_runs: int,
                 elapsed_s: float) -> tuple[str | None, dict | None]:
    """After run ``n_runs``: wait for its estimate and apply the stopping rule; a stop is recorded as a
    ``plan_stop`` event and in the session summary. Returns (reason or None, estimate or None)."""
    from identification.design.sequential_design import stop_reason  # lazy: scipy

    s = ctx.config.sequential
    est = await ident.wait_for(n_runs, s.wait_timeout)
    reason = stop_reason(ident.names, est["rel_std"] if est else None, s.target_rel_std, n_runs, s.max_runs,
                         elapsed_s, s.max_seconds)
    if est is not None:
        ctx.summary["estimate"] = dict(zip(ident.names, est["values"], strict=True))
        ctx.summary["rel_std"] = dict(zip(ident.names, est["rel_std"], strict=True))
    if reason is not None:
        ctx.summary["stop_reason"] = reason
        await ctx.event(streams(ctx.config.rig.kind)[0], "plan_stop", reason=reason, runs=n_runs,
                        max_runs=s.max_runs, target_rel_std=s.target_rel_std,
                        parameters=ident.names, values=est["values"] if est else None,
                        rel_std=est["rel_std"] if est else None, elapsed_s=elapsed_s)
    return reason, est


def redesigned_signal(cfg: AdjointRigConfig, values: dict[str, float], u_prev: np.ndarray, run: int,
                      earlier: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, dict]:
    """The adjoint input re-solved at ``values`` (warm start from ``u_prev``), with the info the
    trajectory events carry (as :func:`daq.rigs.adjoint.design.signal_of`). Blocking: call it off the
    loop.

    ``earlier``: every input run so far (default: ``u_prev`` alone). With ``[sequential] accumulate`` (the
    default) the design maximises the information of those runs and the new one together - their Fisher
    matrix at ``values`` is the design's prior (``identification.design.sequential_design.redesign``) -
    so the new
    input targets what is still uncertain; else the new run's own. The info records which (``objective``,
    ``prior_fisher``) and the predicted std of the new run alone and of all runs together."""
    from identification.analyses.adjoint_plants import design_problem, reference_inputs  # lazy: scipy
    from identification.design.adjoint_design import evaluate  # lazy: scipy
    from identification.design.sequential_design import earlier_fisher, redesign  # lazy: scipy

    a = cfg.adjoint
    pb = design_problem(a.plant, {**nominal_values(cfg), **values}, a.spec())
    ran = [np.asarray(u_prev, float)] if earlier is None else [np.asarray(u, float) for u in earlier]
    held = earlier_fisher(pb, ran)  # at the estimate: what the runs so far hold
    accumulate = cfg.sequential.accumulate
    cold = reference_inputs(pb, a.start)["F0"] if cfg.sequential.cold_start else None
    t0 = time.perf_counter()
    res = redesign(pb, u_prev, shrink=cfg.sequential.shrink, also_from=cold, method=a.method,
                   max_iter=a.max_iter, rounds=a.rounds, end_tol=a.end_tol,
                   earlier=ran if accumulate else None)
    force = res.u[:, 0].copy()
    ev = evaluate(pb, force[:, None], gradient=False)
    names = list(pb.model.state_names)
    info = {"design": "adjoint", "trajectory": None, "redesigned": True, "run": run,
            "iterations": res.iterations, "design_success": res.success,
            "design_converged": res.converged, "design_status": res.status,
            "design_s": time.perf_counter() - t0, "parameters": list(pb.model.param_names),
            "design_point": pb.b.tolist(), "fisher": ev.fisher.tolist(),
            "predicted_std": fisher_std(ev.fisher).tolist(),
            "accumulate": accumulate,
            "objective": (f"information of all {len(ran) + 1} runs together (the {len(ran)} earlier inputs' "
                          f"Fisher matrix at the estimate as prior)") if accumulate else
                         "information of this run alone",
            "prior_fisher": held.tolist() if accumulate else None,
            "predicted_std_all_runs": fisher_std(ev.fisher + held).tolist(),
            "end_residuals": {names[c.index]: float(r) for c, r in zip(pb.end_conditions, ev.end_residuals,
                                                                        strict=True)},
            "input_dt": pb.dt, "peak_force": float(np.abs(force).max())}
    return force, info
