"""Online identifier of the crane: after every completed trajectory, refit one model on the traces so far.

It reads ``trajectory_start``/``trajectory_end`` on ``crane.plan`` and the ``crane.trace`` frames between
them (live from the run's bus, or from ``hil replay``), and after each trajectory fits the configured
candidate of the 96-model kit on all completed trajectories jointly
(:func:`identification.analyses.crane_analysis.fit_runs`), warm-started from the previous estimate. The
estimate,
its covariance and the confidence-ellipsoid axes go out as an ``estimate`` event on ``crane.online``
(the common online contract: model, parameters, values, std, rel_std, covariance, ellipse_semi_axes,
used, elapsed_s); the recorder stores it like any event.

The fit runs in one worker *process* by default: the friction models step through the trace in a
Python loop that would hold the GIL for seconds, and the event loop beside it feeds the drive's
watchdog. One worker keeps the estimates in trajectory order with their warm starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import multiprocessing
import time

import numpy as np

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusSubscriber
from daq.config.load import parse
from daq.online.estimates import Emit, OnlineEstimates
from daq.rigs.crane.config import (
    ONLINE_STREAM,
    PLAN_STREAM,
    TRACE_STREAM,
    CraneConfig,
    OnlineFitSettings,
    online_settings,
)
from daq.rigs.drive import TrajectoryReceiver

__all__ = ["ONLINE_STREAM", "TOPICS", "CraneOnlineIdentifier", "OnlineFitSettings", "settings_from_config"]

TOPICS = ("event/" + PLAN_STREAM, "data/" + TRACE_STREAM)


def _fit(model: str, runs: list, start: dict | None, kwargs: dict):
    """The refit (module level: runs in the worker process)."""
    from identification.analyses.crane_analysis import fit_runs  # lazy: scipy

    return fit_runs(model, runs, start=start, **kwargs)


def _init_worker() -> None:
    from daq.executor import one_blas_thread  # lazy: threadpoolctl, needed in the worker process only

    one_blas_thread()  # also the BLAS of numpy and scipy, which load only with the first fit


def _warm_up() -> None:
    """Import the fit's modules in the worker before the first trajectory ends."""
    import identification.analyses.crane_analysis  # noqa: F401  # lazy: scipy


class CraneOnlineIdentifier(OnlineEstimates):
    """Collects crane trajectories from the bus and publishes an estimate after every completed one."""

    def __init__(self, settings: OnlineFitSettings, emit: Emit, *, n_runs: int | None = None):
        super().__init__(emit)
        self.settings = settings
        self.n_runs = n_runs            # stop consuming after this many trajectories (replays)
        self.runs: list[tuple[np.ndarray, np.ndarray, float]] = []  # (torque_cmd, speed, dt) per trajectory
        self.roles: list[str] = []
        self.handled = 0                # trajectories answered with an estimate or a failure
        self._receiver = TrajectoryReceiver(PLAN_STREAM, TRACE_STREAM)
        self._start: dict[str, float] | None = None
        if settings.worker == "thread":
            self._pool: cf.Executor = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="crane-online")
        else:
            ctx = multiprocessing.get_context("spawn")  # fork would copy locks held by other threads
            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_init_worker)

    # -- feeding ------------------------------------------------------------------------------------
    async def handle(self, msg: Frame | Event) -> None:
        """Take one message; refit (and emit) when it ends a trajectory."""
        tr = self._receiver.take(msg)
        if tr is None:
            return
        role = str(tr.start["role"])
        if tr.data.shape[0] != tr.n:
            await self._publish("estimate_failed", {
                "used": len(self.runs), "role": role,
                "error": f"{role}: received {tr.data.shape[0]} samples, expected {tr.n}"})
            return
        u = tr.data[:, tr.channels.index("torque_cmd")].copy()
        y = tr.data[:, tr.channels.index("speed")].copy()
        self.runs.append((u, y, tr.dt))
        self.roles.append(role)
        await self._refit(tr.end)

    async def _refit(self, trigger: Event) -> None:
        s = self.settings
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            fit = await loop.run_in_executor(self._pool, _fit, s.model, list(self.runs), self._start,
                                             s.fit_kwargs())
        except Exception as exc:  # noqa: BLE001 - advisory: a failed fit is recorded, the run goes on
            await self._publish("estimate_failed", {"used": len(self.runs),
                                                    "error": f"{type(exc).__name__}: {exc}"})
            return
        warm = self._start is not None
        self._start = fit.params
        body = fit.to_dict()
        body.update(used=len(self.runs), roles=list(self.roles), warm_start=warm,
                    elapsed_s=time.perf_counter() - t0, trigger_seq=int(trigger.seq),
                    trigger_t=float(trigger.t))
        await self._publish("estimate", body)

    async def _publish(self, kind: str, body: dict) -> None:
        self.handled += 1  # before the base wakes the waiters, which count on it
        await super()._publish(kind, body)

    async def wait_for(self, n_runs: int, timeout: float) -> dict | None:
        """The estimate over ``n_runs`` trajectories (None if it did not come within ``timeout`` s)."""
        def ready() -> bool:
            return self.handled >= n_runs

        return self.latest if await self._wait(ready, timeout) else None

    # -- running ------------------------------------------------------------------------------------
    async def run(self, sub: BusSubscriber, idle_timeout: float | None = None) -> None:
        """Consume ``sub`` (subscribed to :data:`TOPICS`) until cancelled, ``idle_timeout`` s without a
        message, or ``n_runs`` trajectories handled."""
        self._pool.submit(_warm_up)
        await super().run(sub, idle_timeout)

    def _is_last(self, msg) -> bool:
        return self.n_runs is not None and self.handled >= self.n_runs

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def settings_from_config(config: dict) -> OnlineFitSettings:
    """Fit settings from a crane config snapshot (``[online]`` over ``[model_selection]``), for replays."""
    return online_settings(parse(config, CraneConfig, "crane config"))
