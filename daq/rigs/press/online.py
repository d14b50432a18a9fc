"""Online identifier of the press: a bus consumer that refits after every completed series.

It reads the ``measurement`` events of ``press.plan`` (live from the run's bus, or from ``hil replay``),
collects z[series, setpoint, sensor] and q[series, setpoint], and when a series is complete it runs
:func:`identification.analyses.online_press.estimate_stiffness` (warm-started from the previous estimate) and
publishes an ``estimate`` event on ``press.online``; the recorder stores it like any event.

The fit runs in a one-thread pool, off the event loop, so the acquisition tasks keep their timing.
A thread, not a process: the fit is ~10 ms of numpy/scipy (which release the GIL in their kernels),
its inputs are a few kB, and a process would add start-up and pickling per series for no gain; one
worker keeps the estimates in series order with their warm starts.

From the second series on, the same event also carries the running model-uncertainty ``verdict``
(:func:`identification.analyses.online_press.model_verdict`: M1/M2/M3, the offline splits and Bonferroni
level, M3's estimate). Every look is a test of the same models, so the looks share one alpha: each is
tested at its increment of an alpha-spending function over the planned looks (``spending``, default
O'Brien-Fleming type; the plan's ``n_series`` from ``plan_start``), the interim verdicts are marked
provisional, and a correct model is rejected at some look with probability at most ``tol``
(``spending="none"``: every look at ``tol``, the old behaviour).
That is ~1 s of mostly Python-level work per series, which in a thread would
hold the GIL against the acquisition loops, so it runs in one worker process (spawn context, BLAS
single-threaded, lower priority), started with the identifier. A :class:`StopRule` turns the estimate
and the history of verdict patterns into a ``stop`` reason in the event; the plan acts on it (budgets
are the plan's). Scripts that run a plan with the verdict need the ``if __name__ == "__main__"`` guard
(spawned workers import the main module).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import identification.analyses.online_press  # noqa: F401
import identification.analyses.press_analysis  # noqa: F401
from daq.bus.frames import Event, Frame
from daq.config.load import parse
from daq.online.estimates import Emit, OnlineEstimates
from daq.online.estimates import publisher_emit as _publisher_emit
from identification.analyses.online_press import (
    OnlineEstimate,
    estimate_stiffness,
    model_verdict,
    verdict_settled,
)
from identification.estimation.blas import limit_blas_to_one_thread
from identification.models import press_kernels
from identification.models.press_models import PressConstants

PLAN_STREAM = "press.plan"
ONLINE_STREAM = "press.online"
PLAN_TOPIC = "event/" + PLAN_STREAM

STOP_MODES = ("target", "verdict", "both")
WORKER_NICE = 5  # niceness added to the verdict worker process


@dataclass
class StopRule:
    """When the online results allow the plan to stop (the plan adds its budgets).

    ``mode``: "target" (every rel. std of the M1 estimate below ``target_rel_std``), "verdict" (the
    pattern of rejected models the same for ``settle_series`` consecutive series), or "both". Never
    before ``min_series`` series. With ``needs_kept`` a verdict that rejects every model does not count
    as settled: it names no adequate model yet (on the simulated press, M3 trained on 2-4 series is
    rejected too, and that pattern can hold for a few series); the budget ends a plan that never
    finds one.
    """

    mode: str = "target"
    target_rel_std: float = 0.002
    min_series: int = 3
    settle_series: int = 2
    needs_kept: bool = True

    def __post_init__(self) -> None:
        if self.mode not in STOP_MODES:
            raise ValueError(f"stop rule mode must be one of {STOP_MODES}, got {self.mode!r}")

    def reason(self, est: dict, patterns: list[tuple[str, ...] | None]) -> str | None:
        """The stop reason after the series of ``est`` (None: go on)."""

        n = int(est["series_used"])
        if n < self.min_series:
            return None
        rel = est["rel_std"]
        target = None
        if max(rel) < self.target_rel_std:
            cells = ", ".join(f"{p} {r:.3g}" for p, r in zip(est["parameters"], rel, strict=True))
            target = f"confidence target met after {n} series: rel. std {cells} < {self.target_rel_std:g}"
        settled = None
        v = est.get("verdict") or {}
        answered = "rejected" in v and (bool(v["kept"]) or not self.needs_kept)
        if answered and verdict_settled(patterns, self.settle_series):
            rejected = ", ".join(v["rejected"]) or "none"
            kept = ", ".join(v["kept"]) or "none"
            settled = (f"verdict settled after {n} series: rejected {rejected}, kept {kept}, the same for "
                       f"{self.settle_series} consecutive series at the corrected level "
                       f"{100 * v['level']:.3g} %")
        if self.mode == "target":
            return target
        if self.mode == "verdict":
            return settled
        return f"{target}; {settled}" if target and settled else None


class OnlineIdentifier(OnlineEstimates):
    """Collects press measurements and publishes an estimate after every completed series.

    ``sigmas``: noise std of ONE reading per sensor name (m); each measured z is the mean of
    ``n_samples`` readings, so its std is sigma / sqrt(n_samples) (as in ``daq.rigs.press.session``).
    ``emit(kind, body)`` publishes an event on ``press.online`` (live: ``RunContext.event``).
    """

    def __init__(self, sigmas: dict[str, float], emit: Emit, *, inflate: bool = True, alpha: float = 0.05,
                 constants: PressConstants | None = None, verdict: dict | None = None,
                 rule: StopRule | None = None,
                 verdict_from: int = 2, spending: str = "obrien-fleming"):
        """``verdict``: keyword arguments of ``model_verdict`` (tol, criterion, n_sensors, ...), or None
        for no model-uncertainty test, run from ``verdict_from`` (>= 2) series on; ``rule``: evaluated
        after every series (None: never stops)."""
        super().__init__(emit)
        self.sigmas = dict(sigmas)
        self.inflate = inflate
        self.alpha = alpha
        self.constants = constants
        self.q_desired: np.ndarray | None = None
        self.sensors: list[str] | None = None
        self.rows: dict[int, dict[int, tuple[list[float], float]]] = {}
        self.n_samples: int | None = None
        self.done: list[int] = []          # completed series used, in order
        self.fitted: dict | None = None    # the latest M1 body, possibly before its verdict is in
        self.verdict = verdict
        self.verdict_from = max(2, int(verdict_from))
        self.spending = spending
        self.n_planned: int | None = None  # the plan's series (plan_start): the family of looks
        self.rule = rule
        self.patterns: list[tuple[str, ...] | None] = []  # rejected models after each series (None: none)
        self._p: np.ndarray | None = None
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="online-identifier")
        self._procs: cf.ProcessPoolExecutor | None = None
        self._warm: cf.Future | None = None
        if verdict is not None:  # started now; `ready()` waits for its imports before the staircase
            spawn = multiprocessing.get_context("spawn")
            self._procs = cf.ProcessPoolExecutor(max_workers=1, mp_context=spawn,
                                                 initializer=_worker_init)
            self._warm = self._procs.submit(_warm_up)

    async def ready(self, timeout: float = 60.0) -> None:
        """Import the fit code off the loop and wait until the verdict worker has imported the analysis:
        call before the staircase starts, so that neither lands on the event loop during acquisition."""
        await asyncio.to_thread(_warm_up)
        if self._procs is not None:
            assert self._warm is not None  # submitted with the pool
            with contextlib.suppress(TimeoutError, cf.process.BrokenProcessPool):
                async with asyncio.timeout(timeout):  # never wait_for (docs/contracts.md, "Stopping")
                    await asyncio.wrap_future(self._warm)

    @classmethod
    def for_config(cls, cfg: Any, emit: Emit, *, verdict: bool | None = None) -> OnlineIdentifier:
        """The identifier a parsed press config describes: its sensors' sigmas, [online] and [analysis].
        ``verdict`` overrides [online].verdict."""
        o, a = cfg.online, cfg.analysis
        use = o.verdict if verdict is None else verdict
        rule = StopRule(mode=o.stop_rule, target_rel_std=o.target_rel_std, min_series=o.min_series,
                        settle_series=o.settle_series, needs_kept=o.settle_needs_kept)
        sigmas = {name: s.sigma for name, s in cfg.devices.sensors.items()}
        return cls(sigmas, emit, inflate=o.inflate, alpha=o.alpha, constants=a.linkage(),
                   verdict=verdict_options(a) if use else None, rule=rule, verdict_from=o.verdict_from)

    @classmethod
    def from_config(cls, config: dict, emit: Emit, *, verdict: bool | None = None) -> OnlineIdentifier:
        """The identifier a press config snapshot (TOML data) describes, parsed by the press schema (for
        replays and tools)."""
        from daq.rigs.press.config import PressConfig  # lazy: the schema loads the drivers and the simulator

        return cls.for_config(parse(config, PressConfig, "press config"), emit, verdict=verdict)

    # -- feeding ------------------------------------------------------------------------------------
    async def handle(self, ev: Frame | Event) -> None:
        """Take one plan event; refit (and emit) when it completes a series."""
        if not isinstance(ev, Event) or ev.stream != PLAN_STREAM:
            return
        b = ev.body
        if ev.kind == "plan_start":
            self.q_desired = np.asarray(b["q_desired"], float)
            self.sensors = list(b["sensors"])
            self.n_planned = int(b["n_series"]) if b.get("n_series") else None
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
        assert self.q_desired is not None  # series complete only after plan_start
        z = np.array([[self.rows[i][j][0] for j in range(len(self.q_desired))] for i in self.done])
        q = np.array([[self.rows[i][j][1] for j in range(len(self.q_desired))] for i in self.done])
        return z, q

    async def _refit(self, trigger: Event) -> None:

        z, q = self.arrays()
        assert self.q_desired is not None and self.sensors is not None  # set by plan_start
        sig = np.array([self.sigmas.get(n, np.nan) for n in self.sensors]) / np.sqrt(self.n_samples or 1)
        if np.isnan(sig).any():
            self.patterns.append(None)
            return  # no sigma for some sensor: nothing honest to publish
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        pending = None
        if self._procs is not None and z.shape[0] >= self.verdict_from:
            assert self.verdict is not None  # the worker exists only for a verdict
            looks = {}
            if self.spending != "none" and self.n_planned:
                looks = {"n_planned": self.n_planned, "first_look": self.verdict_from,
                         "spending": self.spending}
            pending = asyncio.wrap_future(self._procs.submit(
                _timed, model_verdict, z, q, self.q_desired, sig, tuple(self.sensors), **self.verdict,
                **looks))
        q_desired, sensors = self.q_desired, self.sensors  # as narrowed above, for the lambda
        est: OnlineEstimate | ValueError | np.linalg.LinAlgError
        try:
            est = await loop.run_in_executor(self._pool, lambda: estimate_stiffness(
                z, q, q_desired, sig, sensors, p0=self._p, alpha=self.alpha, inflate=self.inflate,
                constants=self.constants))
        except (ValueError, np.linalg.LinAlgError) as exc:
            est = exc
        body = None
        if not isinstance(est, Exception):
            self._p = est.p
            body = est.to_dict()
            body.update(series=int(self.done[-1]), elapsed_s=time.perf_counter() - t0,
                        trigger_seq=int(trigger.seq), trigger_t=float(trigger.t))
            if self.rule is not None and self.rule.mode == "target":  # decided without the verdict
                reason = self.rule.reason(body, self.patterns)
                if reason:
                    body["stop"] = reason
            self.fitted = dict(body)
            await self._notify()
        verdict = await self._verdict(pending)
        self.patterns.append(tuple(verdict["rejected"]) if verdict and "rejected" in verdict else None)
        if body is None:
            body = {"series_used": len(self.done), "error": f"{type(est).__name__}: {est}"}
            await self._publish("estimate_failed", body)
            return
        if verdict is not None:
            verdict["settled_for"] = _run_length(self.patterns)
            body["verdict"] = verdict
        if self.rule is not None and self.rule.mode != "target":
            reason = self.rule.reason(body, self.patterns)
            if reason:
                body["stop"] = reason
        await self._publish("estimate", body)

    async def _verdict(self, pending) -> dict | None:
        """The finished model-uncertainty test as an event dict (its failure as {"error": ...})."""
        if pending is None:
            return None
        t0 = time.perf_counter()
        try:
            v, compute_s = await pending
        except (ValueError, np.linalg.LinAlgError, ArithmeticError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        except cf.process.BrokenProcessPool as exc:
            self._procs = None  # the worker died: no further verdicts in this run
            return {"error": f"verdict worker lost: {exc}"}
        out = v.to_dict()
        out["elapsed_s"] = compute_s                 # the test itself, in the worker
        out["wait_s"] = time.perf_counter() - t0     # beyond the M1 fit, which ran meanwhile
        return out

    async def wait_for(self, n_series: int, timeout: float, *, verdict: bool = True) -> dict | None:
        """The estimate over ``n_series`` completed series (None if it did not come within ``timeout``).

        ``verdict=False``: the M1 estimate as soon as it is fitted, before the verdict (the body the
        event will carry, without ``verdict``): enough for the "target" rule, which then costs no wait.
        """
        def current() -> dict | None:
            for b in (self.latest, None if verdict else self.fitted):
                if b is not None and b["series_used"] >= n_series:
                    return b
            return None

        await self._wait(lambda: current() is not None, timeout)
        return current()

    # -- running ------------------------------------------------------------------------------------
    # ``run`` (OnlineEstimates) consumes ``event/press.plan`` and ends after ``plan_end``.
    def _is_last(self, msg) -> bool:
        return isinstance(msg, Event) and msg.kind == "plan_end"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._procs is not None:
            # a verdict still running (an aborted plan) is of no use: end the worker now rather than let
            # the interpreter's exit wait for it (3.11 has no public terminate; _processes is the pool's map)
            workers = list((getattr(self._procs, "_processes", None) or {}).values())
            self._procs.shutdown(wait=False, cancel_futures=True)
            for w in workers:
                with contextlib.suppress(Exception):
                    w.terminate()
            self._procs = None


def _worker_init() -> None:
    """Worker initializer: one BLAS thread (small matrices) and a lower CPU priority, so that on a busy
    machine the acquisition and the devices get the cores first."""
    import os

    limit_blas_to_one_thread()  # also numpy's and scipy's BLAS, which this worker loads with its first test
    with contextlib.suppress(OSError, AttributeError):
        os.nice(WORKER_NICE)


def _timed(fn, *args, **kwargs):
    """(fn(*args, **kwargs), seconds it took), in the worker."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _warm_up() -> None:
    """Called once in a fresh worker (and in the identifier's thread by ``ready``): unpickling this function
    imports this module, and with it the analysis code, and the press model's compiled kernels are loaded
    (compiled, on a fresh checkout), all before the first series needs them - not during acquisition."""
    press_kernels.load_kernels()


def _run_length(patterns: list) -> int:
    """How many of the last entries equal the last one (0 if the last is None)."""
    if not patterns or patterns[-1] is None:
        return 0
    n = 0
    for p in reversed(patterns):
        if p != patterns[-1]:
            break
        n += 1
    return n


def verdict_options(analysis: Any) -> dict:
    """``model_verdict`` keyword arguments from a parsed [analysis] table (the offline settings); a dict is
    parsed by the press schema's table first (its defaults)."""
    if isinstance(analysis, dict):
        from daq.rigs.press.config import AnalysisTable  # lazy: as in OnlineIdentifier.from_config

        analysis = parse(analysis, AnalysisTable, "press config", ["analysis"])
    keys = ("tol", "criterion", "n_sensors", "n_random_splits", "seed")
    return {**{k: getattr(analysis, k) for k in keys}, "constants": analysis.linkage()}


def publisher_emit(publisher, session_id: str | None = None) -> Emit:
    """An ``emit`` that publishes on ``press.online`` through a BusPublisher (replays, tools)."""
    return _publisher_emit(publisher, ONLINE_STREAM, session_id)
