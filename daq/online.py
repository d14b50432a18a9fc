"""Online identifier of the press: a bus consumer that refits after every completed series.

It reads the ``measurement`` events of ``press.plan`` (live from the run's bus, or from ``hil replay``),
collects z[series, setpoint, sensor] and q[series, setpoint], and when a series is complete it runs
:func:`identification.online_press.estimate_stiffness` (warm-started from the previous estimate) and
publishes an ``estimate`` event on ``press.online``; the recorder stores it like any event.

The fit runs in a one-thread pool, off the event loop, so the acquisition tasks keep their timing.
A thread, not a process: the fit is ~10 ms of numpy/scipy (which release the GIL in their kernels),
its inputs are a few kB, and a process would add start-up and pickling per series for no gain; one
worker keeps the estimates in series order with their warm starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from daq.bus import BusSubscriber, BusTimeout
from daq.frames import Event

PLAN_STREAM = "press.plan"
ONLINE_STREAM = "press.online"
PLAN_TOPIC = "event/" + PLAN_STREAM

Emit = Callable[[str, dict], Awaitable[None]]  # (kind, body) -> publish


class OnlineIdentifier:
    """Collects press measurements and publishes an estimate after every completed series.

    ``sigmas``: noise std of ONE reading per sensor name (m); each measured z is the mean of
    ``n_samples`` readings, so its std is sigma / sqrt(n_samples) (as in ``daq.press_session``).
    ``emit(kind, body)`` publishes an event on ``press.online`` (live: ``RunContext.event``).
    """

    def __init__(self, sigmas: dict[str, float], emit: Emit, *, inflate: bool = True, alpha: float = 0.05,
                 constants: dict | None = None):
        self.sigmas = dict(sigmas)
        self.emit = emit
        self.inflate = inflate
        self.alpha = alpha
        self.constants = constants
        self.q_desired: np.ndarray | None = None
        self.sensors: list[str] | None = None
        self.rows: dict[int, dict[int, tuple[list[float], float]]] = {}
        self.n_samples: int | None = None
        self.done: list[int] = []          # completed series used, in order
        self.estimates: list[dict] = []    # bodies published, in order
        self.latest: dict | None = None
        self._p = None
        self._changed = asyncio.Condition()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="online-identifier")

    # -- feeding ------------------------------------------------------------------------------------
    async def handle(self, ev: Event) -> None:
        """Take one plan event; refit (and emit) when it completes a series."""
        if ev.stream != PLAN_STREAM:
            return
        b = ev.body
        if ev.kind == "plan_start":
            self.q_desired = np.asarray(b["q_desired"], float)
            self.sensors = list(b["sensors"])
        elif ev.kind == "measurement" and self.q_desired is not None:
            i, j = int(b["series"]), int(b["index"])
            self.sensors = self.sensors or list(b["sensors"])
            n = int(b.get("n_samples", 1))
            self.n_samples = n if self.n_samples is None else min(self.n_samples, n)
            self.rows.setdefault(i, {})[j] = (list(b["z"]), float(b["q_actual"]))
            if len(self.rows[i]) == len(self.q_desired) and i not in self.done:
                self.done.append(i)
                await self._refit(ev)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """z[series, setpoint, sensor], q[series, setpoint] of the completed series, in order."""
        z = np.array([[self.rows[i][j][0] for j in range(len(self.q_desired))] for i in self.done])
        q = np.array([[self.rows[i][j][1] for j in range(len(self.q_desired))] for i in self.done])
        return z, q

    async def _refit(self, trigger: Event) -> None:
        from identification.online_press import estimate_stiffness

        z, q = self.arrays()
        sig = np.array([self.sigmas.get(n, np.nan) for n in self.sensors]) / np.sqrt(self.n_samples or 1)
        if np.isnan(sig).any():
            return  # no sigma for some sensor: nothing honest to publish
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            est = await loop.run_in_executor(self._pool, lambda: estimate_stiffness(
                z, q, self.q_desired, sig, self.sensors, p0=self._p, alpha=self.alpha, inflate=self.inflate,
                constants=self.constants))
        except (ValueError, np.linalg.LinAlgError) as exc:
            body = {"series_used": len(self.done), "error": f"{type(exc).__name__}: {exc}"}
            await self._publish("estimate_failed", body)
            return
        self._p = est.p
        body = est.to_dict()
        body.update(series=int(self.done[-1]), elapsed_s=time.perf_counter() - t0,
                    trigger_seq=int(trigger.seq), trigger_t=float(trigger.t))
        await self._publish("estimate", body)

    async def _publish(self, kind: str, body: dict) -> None:
        await self.emit(kind, body)
        if kind == "estimate":
            self.estimates.append(body)
            self.latest = body
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, n_series: int, timeout: float) -> dict | None:
        """The estimate over ``n_series`` completed series (None if it did not come within ``timeout``)."""
        def ready() -> bool:
            return self.latest is not None and self.latest["series_used"] >= n_series

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(ready)
        return self.latest if ready() else None

    # -- running ------------------------------------------------------------------------------------
    async def run(self, sub: BusSubscriber, idle_timeout: float | None = None) -> None:
        """Consume ``sub`` (subscribed to ``event/press.plan``) until cancelled, or until ``idle_timeout``
        s pass without a message, or after ``plan_end`` (a replay ends there)."""
        try:
            while True:
                try:
                    msg = await sub.recv(timeout=idle_timeout)
                except BusTimeout:
                    return
                if isinstance(msg, Event):
                    await self.handle(msg)
                    if msg.kind == "plan_end":
                        return
        finally:
            self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def sigmas_from_config(config: dict) -> dict[str, float]:
    """Per-reading sensor sigmas (m) from a press config snapshot (``[devices.sensors.<name>].sigma``)."""
    sensors = (config.get("devices") or {}).get("sensors") or {}
    return {name: float(c["sigma"]) for name, c in sensors.items() if "sigma" in c}


def publisher_emit(publisher, session_id: str | None = None) -> Emit:
    """An ``emit`` that publishes on ``press.online`` through a BusPublisher (replays, tools)."""
    async def emit(kind: str, body: dict) -> None:
        await publisher.publish(Event(stream=ONLINE_STREAM, kind=kind, seq=publisher.next_seq(ONLINE_STREAM),
                                      t=time.time(), body=body, session_id=session_id))
    return emit
