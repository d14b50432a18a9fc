"""Model selection with practical identifiability (seed paper 004, section 2.2).

Every candidate structure is fitted to the training run (multistart bounded nonlinear least
squares with the sensitivity Jacobian), checked for practical identifiability at its optimum
(:mod:`identification.estimation.identifiability`) and simulated on the validation run with the training
parameters. The choice is the accepted candidate with the fewest parameters whose validation cost
is within ``(1 + parsimony_tol)`` of the best accepted one (ties: better validation). The default
tolerance of 1 % settles near-ties: a spurious term (a gravity torque fitted to ~0 on a horizontal
axis) can win by a cost difference in the sixth digit, which says nothing about the structure.
``parsimony_tol = 0`` is the paper's rule (best validation fit, nothing else).
A profile likelihood is traced for the chosen model (intervals next to the Fisher intervals).
Both take the residuals as white noise and the structure as right; the chosen model therefore also gets
the adequacy check of its validation residuals (whiteness, independence of the input) and robust
(Newey-West sandwich) intervals beside the model-based ones
(:mod:`identification.estimation.residual_adequacy`),
plus the shift of its estimate caused by the model's time step (``decimate``): the intervals are called
valid, and a parameter identifiable, only when these pass.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from identification.estimation.blas import limit_blas_to_one_thread, single_thread_blas
from identification.estimation.identifiability import (
    IdentifiabilityResult,
    ProfileResult,
    analyze_identifiability,
)
from identification.estimation.pool_context import pool_context
from identification.estimation.residual_adequacy import IntervalReport
from identification.models import drive_kernels
from identification.models.drive_models import DEFAULT_BOUNDS, DriveStructure, all_structures, parse_name
from identification.models.drive_simulation import DEFAULT_FRICTION_EPS
from identification.selection.chosen_model import chosen_intervals, chosen_traces, profile_chosen
from identification.selection.fitting import (
    FitResult,
    Run,
    _Scaling,
    as_run,
    fit_structure,
    simulate_run,
)

__all__ = [
    "FitResult",
    "CandidateResult",
    "SelectionResult",
    "fit_structure",
    "select_model",
    "as_run",
    "chosen_intervals",
    "profile_chosen",
    "simulate_run",
]


# ------------------------------------------------------------------------------------- selection
@dataclass
class CandidateResult:
    structure: DriveStructure
    params: dict[str, float]
    train_fit: float
    valid_fit: float
    valid_cost: float  # 0.5 * sum of squared validation residuals
    identifiability: IdentifiabilityResult
    accepted: bool
    n_evals: int
    seconds: float
    start_costs: list[float]
    at_bound: list[str]
    std_errors: dict[str, float] = field(default_factory=dict)  # SI, from the Fisher matrix (eq. 9 unscaled)

    @property
    def name(self) -> str:
        return self.structure.name

    def __str__(self) -> str:
        """Short label (progress bars print the candidate they were handed; the repr holds arrays)."""
        return (f"{self.name}: valid {100 * self.valid_fit:.2f} %, "
                f"{'accepted' if self.accepted else 'rejected'}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "n_params": self.structure.n_params,
            "params": dict(self.params),
            "std_errors": dict(self.std_errors),
            "train_fit": self.train_fit,
            "valid_fit": self.valid_fit,
            "valid_cost": self.valid_cost,
            "accepted": self.accepted,
            "identifiability": self.identifiability.to_dict(),
            "n_evals": self.n_evals,
            "seconds": self.seconds,
            "start_costs": [c if math.isfinite(c) else None for c in self.start_costs],
            "at_bound": list(self.at_bound),
        }


@dataclass
class SelectionResult:
    candidates: list[CandidateResult]
    chosen: CandidateResult | None
    profile: ProfileResult | None
    settings: dict
    seconds: float
    # kept for plots: decimated traces of the chosen model
    traces: dict = field(default_factory=dict)
    intervals: IntervalReport | None = None  # the chosen model's model-based and robust intervals, adequacy
    refined: list[CandidateResult] = field(default_factory=list)  # the close rivals refitted on the fine step
    stages: dict = field(default_factory=dict)  # stage -> {"seconds": wall, "cpu_seconds": cpu}

    @property
    def chosen_name(self) -> str | None:
        return self.chosen.name if self.chosen else None

    def candidate(self, name: str) -> CandidateResult:
        for c in self.candidates:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "chosen": self.chosen_name,
            "chosen_params": dict(self.chosen.params) if self.chosen else None,
            "candidates": [c.to_dict() for c in self.candidates],
            "profile": self.profile.to_dict() if self.profile else None,
            "ci95": self.intervals.ci95() if self.intervals else None,
            "adequacy": self.intervals.adequacy_dict() if self.intervals else None,
            "intervals": self.intervals.to_dict() if self.intervals else None,
            "settings": _jsonable(self.settings),
            "seconds": self.seconds,
            "refined": [c.to_dict() for c in self.refined],
            "stages": _jsonable(self.stages),
        }

    def format_table(self) -> str:
        """Text table of all candidates, best validation fit first; ``*`` marks the choice."""
        head = (f"{'model':<28} {'n_p':>3} {'train %':>8} {'valid %':>8} {'minPII %':>8} {'maxCI':>9} "
                f"{'collin':>9} {'acc':>4}")
        lines = [head, "-" * len(head)]
        for c in sorted(self.candidates, key=lambda c: -c.valid_fit):
            idf = c.identifiability
            mark = "*" if self.chosen is not None and c.name == self.chosen.name else " "
            lines.append(
                f"{mark}{c.name:<27} {c.structure.n_params:>3} {100 * c.train_fit:>8.3f} "
                f"{100 * c.valid_fit:>8.3f} "
                f"{100 * idf.min_pii:>8.3g} {_fmt(idf.max_ci):>9} {_fmt(idf.collinearity_index):>9} "
                f"{'yes' if c.accepted else 'no':>4}")
        lines.append(f"chosen: {self.chosen_name}   ({len(self.candidates)} candidates, "
                     f"{self.seconds:.1f} s)")
        s = self.settings
        nan = float("nan")
        lines.append(f"accepted when: min PII >= {100 * s.get('min_pii_ratio', nan):g} % of the largest, "
                     f"every scaled condition index < {s.get('max_condition_index', nan):g}, "
                     + (f"every std <= {100 * s['max_rel_std']:g} % of its value, "
                        if s.get("max_rel_std") is not None else "") +
                     f"validation fit >= {100 * s.get('min_validation_fit', nan):g} %")
        if self.refined:
            rivals = ", ".join(f"{c.name} valid {100 * c.valid_fit:.3f} % "
                               f"({'accepted' if c.accepted else 'rejected'})" for c in self.refined)
            lines.append(f"close rivals refitted on the {1e3 * s.get('model_step', nan):.3g} ms step "
                         f"(the choice is made there): {rivals}")
        if self.stages:
            lines.append("stages: " + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in self.stages.items()))
        if self.chosen is not None:
            lines.append(f"parameters of {self.chosen.name} (+- one standard error):")
            for name, value in self.chosen.params.items():
                se = self.chosen.std_errors.get(name, float("nan"))
                rel = f" ({100 * se / abs(value):.2g} %)" if value and math.isfinite(se) else ""
                lines.append(f"  {name:<16} {value:>12.5g} +- {se:.3g}{rel}")
        if self.chosen is not None and "dead_time" in self.chosen.params and "speed_lag" in s:
            lag = 1e3 * s["speed_lag"]
            lines.append(f"  dead_time is the drive's own (command to torque): the measured speed, "
                         f"differenced from the encoder angle, lags by a further {lag:.3g} ms (half a "
                         f"sample), modelled apart")
        if self.intervals is not None:
            lines.append(self.intervals.format_table())
        better = [c for c in sorted(self.candidates, key=lambda c: -c.valid_fit)[:10] if not c.accepted]
        if better:
            lines.append("why the best-fitting rejected candidates failed:")
            for c in better:
                lines.append(f"  {c.name:<27} {'; '.join(c.identifiability.reasons) or 'rejected'}")
        return "\n".join(lines)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "inf"


def _jsonable(d):
    if isinstance(d, dict):
        return {str(k): _jsonable(v) for k, v in d.items()}
    if isinstance(d, list | tuple):
        return [_jsonable(v) for v in d]
    if isinstance(d, np.generic):
        return d.item()
    return d


def _evaluate_candidate(structure: DriveStructure, train, valid, bounds, opts: dict,
                        start: dict[str, float] | None = None) -> CandidateResult:
    """Fit, identifiability and validation of one candidate (runs in a worker process); ``start``: the
    single start point of a refit (physical values), else the multistart of ``opts``."""
    t0 = time.perf_counter()
    u, y, dt = train
    fit = fit_structure(structure, u, y, dt, bounds, n_starts=1 if start else opts["n_starts"],
                        seed=opts["seed"], decimate=opts["decimate"], skip=opts["skip"],
                        friction_eps=opts["friction_eps"], max_nfev=opts["max_nfev"], start=start)
    sc = _Scaling(structure.param_names, {**DEFAULT_BOUNDS, **bounds})
    idf = analyze_identifiability(fit.S, sc.ranges, structure.param_names, sigma2=fit.sigma2,
                                  min_pii_ratio=opts["min_pii_ratio"],
                                  max_condition_index=opts["max_condition_index"])
    uv, yv, dtv = valid
    _, ym, vfit = simulate_run(structure, fit.params, uv, yv, dtv, opts["decimate"], opts["friction_eps"])
    yvd = yv[::opts["decimate"]][: ym.size]
    ev = (ym - yvd)[opts["skip"]:]
    vcost = 0.5 * float(ev @ ev) if np.all(np.isfinite(ev)) else math.inf
    accepted = idf.accepted and vfit >= opts["min_validation_fit"]
    if vfit < opts["min_validation_fit"]:
        idf.reasons.append(f"validation fit {vfit:.3f} < {opts['min_validation_fit']}")
    var = np.diag(idf.scaled_covariance) if idf.scaled_covariance.size else np.zeros(0)
    se = np.asarray(sc.ranges) * np.sqrt(np.clip(var, 0.0, None))
    vague = _poorly_determined(structure.param_names, fit.params, se, opts.get("max_rel_std"))
    if vague:
        idf.reasons.append(f"poorly determined (std > {100 * opts['max_rel_std']:g} % of the value): {vague}")
        idf.accepted = accepted = False
    return CandidateResult(structure=structure, params=fit.params, train_fit=fit.fit, valid_fit=vfit,
                           valid_cost=vcost, identifiability=idf, accepted=accepted, n_evals=fit.n_evals,
                           seconds=time.perf_counter() - t0, start_costs=fit.start_costs,
                           at_bound=fit.at_bound,
                           std_errors={n: float(v) for n, v in zip(structure.param_names, se, strict=True)})


def _poorly_determined(names, params: dict[str, float], se: np.ndarray, max_rel_std: float | None) -> str:
    """The parameters whose standard error exceeds ``max_rel_std`` of their value (``None``: no limit).

    This is the identifiability question the data can answer: the condition index of the normalised
    sensitivities ignores the noise and the record length (the right crane model sits at 20-49 while
    every parameter is known to 0.3 %), the standard error does not; a term fitted to ~0 fails it."""
    if max_rel_std is None:
        return ""
    bad = []
    for name, s in zip(names, se, strict=True):
        v = abs(float(params[name]))
        if not (math.isfinite(s) and s <= max_rel_std * v):
            bad.append(f"{name} {100 * s / v:.3g} %" if v > 0 and math.isfinite(s) else name)
    return ", ".join(bad)


def warm_up() -> None:
    """What a worker process needs before its first candidate: this module's imports (by unpickling this
    function) and the compiled simulation (:func:`~identification.models.drive_kernels.load_kernels`)."""
    drive_kernels.load_kernels()


def _candidate_task(args: tuple) -> CandidateResult:
    return _evaluate_candidate(*args)


def _details_task(args: tuple):
    """The chosen model's intervals (with both checks) and its traces (runs on the executor)."""
    chosen, train, valid, bounds, opts = args
    with single_thread_blas():
        return (chosen_intervals(chosen, train, valid, bounds, opts),
                chosen_traces(chosen, train, valid, opts["decimate"], opts["friction_eps"]))


def _choose(cands: list[CandidateResult], parsimony_tol: float) -> CandidateResult | None:
    acc = [c for c in cands if c.accepted and math.isfinite(c.valid_cost)]
    if not acc:
        return None
    best = min(acc, key=lambda c: c.valid_cost)
    if parsimony_tol <= 0:
        return best
    near = [c for c in acc if c.valid_cost <= best.valid_cost * (1.0 + parsimony_tol)]
    return min(near, key=lambda c: (c.structure.n_params, c.valid_cost))




def _default_clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class _Stages:
    """Wall and CPU seconds per stage of a selection, from ``clock() -> (wall, cpu)``."""

    def __init__(self, clock: Callable[[], tuple[float, float]] | None):
        self.clock = clock or _default_clock
        self.seconds: dict[str, dict[str, float]] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        w0, c0 = self.clock()
        try:
            yield
        finally:
            w1, c1 = self.clock()
            self.seconds[name] = {"seconds": w1 - w0, "cpu_seconds": c1 - c0}


class _SpawnPool:
    """A process pool for one selection when the caller gave no executor (workers from the fork server, not
    forked from the caller: it may hold threads - asyncio executors, ZeroMQ I/O, BLAS pools - whose locks a
    forked child would inherit locked and wait on forever)."""

    def __init__(self, n_jobs: int):
        self.n_jobs = int(n_jobs)
        self._pool: cf.ProcessPoolExecutor | None = None

    def imap_unordered(self, fn, items):
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.n_jobs, initializer=limit_blas_to_one_thread,
                                                mp_context=pool_context())
        futs = {self._pool.submit(fn, item): i for i, item in enumerate(items)}
        for f in cf.as_completed(futs):
            yield futs[f], f.result()

    def map(self, fn, items) -> list:
        items = list(items)
        out: list = [None] * len(items)
        for i, r in self.imap_unordered(fn, items):
            out[i] = r
        return out

    __call__ = map

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _serial_map(fn, items) -> list:
    with single_thread_blas():
        return [fn(item) for item in items]


def _stream(executor, fn, items: list) -> Iterator:
    """Results of ``fn`` over ``items`` as they complete (``imap_unordered``) or in order (``map``)."""
    if hasattr(executor, "imap_unordered"):
        return (r for _, r in executor.imap_unordered(fn, items))
    return iter(getattr(executor, "map", executor)(fn, items))


def _screen(structs, train, valid, bounds, opts, executor, progress) -> list[CandidateResult]:
    """Every candidate fitted on the coarse step, in the order given back."""
    results: list[CandidateResult] = []
    # expensive (nonlinear, many parameters) first for load balance
    order = sorted(structs, key=lambda s: (not s.nonlinear, -s.n_params))
    for r in _stream(executor, _candidate_task, [(s, train, valid, bounds, opts) for s in order]):
        results.append(r)
        if progress:
            progress(len(results), len(structs), r)
    rank = {s: i for i, s in enumerate(structs)}
    return sorted(results, key=lambda r: rank[r.structure])


def _rivals(results: list[CandidateResult], chosen: CandidateResult, rival_tol: float,
            max_rivals: int) -> list[CandidateResult]:
    """The coarse choice and the accepted candidates whose validation cost is within ``1 + rival_tol`` of
    the best accepted one (cheapest first), at most ``max_rivals`` in all."""
    acc = sorted((c for c in results if c.accepted and math.isfinite(c.valid_cost)),
                 key=lambda c: c.valid_cost)
    near = [c for c in acc if c is not chosen and c.valid_cost <= acc[0].valid_cost * (1.0 + rival_tol)]
    return ([chosen] + near)[:max(1, int(max_rivals))]


def _refit(rivals, train, valid, bounds, opts, executor) -> list[CandidateResult]:
    """The rivals refitted on the fine step of ``opts``, each from its coarse estimate."""
    items = [(c.structure, train, valid, bounds, opts, c.params) for c in rivals]
    rank = {c.structure: i for i, c in enumerate(rivals)}
    return sorted(_stream(executor, _candidate_task, items), key=lambda r: rank[r.structure])


def select_model(train: Run, valid: Run, bounds: dict[str, tuple[float, float]] | None = None, *,
                 candidates: Sequence[DriveStructure | str] | None = None, n_starts: int = 3, seed: int = 0,
                 min_pii_ratio: float = 0.01, max_condition_index: float = 30.0,
                 max_rel_std: float | None = None,
                 min_validation_fit: float = 0.0, parsimony_tol: float = 0.01, decimate: int = 5,
                 skip: int = 0, friction_eps: float = DEFAULT_FRICTION_EPS, max_nfev: int = 60,
                 profile: bool = True, profile_points: int = 9,
                 progress: Callable[[int, int, CandidateResult], None] | None = None,
                 n_jobs: int = 2, executor=None, refit_decimate: int | None = 1, rival_tol: float = 0.05,
                 max_rivals: int = 4, clock: Callable[[], tuple[float, float]] | None = None
                 ) -> SelectionResult:
    """Screen all candidates (default: the 96 of the kit) on the step ``decimate * dt``: fit, check
    identifiability, validate. Then refit the coarse choice and its close rivals (:func:`_rivals`) on the
    step ``refit_decimate * dt`` (default: the data's own; ``None``: no refit) and choose among them: the
    chosen model's estimate, intervals, profiles and traces are those of the fine step, where the time
    step no longer biases them.

    ``progress(done, total, candidate_result)`` is called in this process after each screened candidate.
    ``executor`` (e.g. ``daq.executor.make_executor(...)``: a local pool or a Dask cluster) runs
    the candidates, the refits and the profile likelihood; it needs ``map(fn, items)`` and may offer
    ``imap_unordered`` (then progress is reported as candidates finish). Without one,
    ``n_jobs > 1`` spreads them over a process pool here. ``clock() -> (wall, cpu)`` times the stages
    (default: this process's clocks).
    """
    t0 = time.perf_counter()
    train, valid = as_run(train), as_run(valid)
    bounds = {k: (float(v[0]), float(v[1])) for k, v in {**DEFAULT_BOUNDS, **(bounds or {})}.items()}
    structs = [parse_name(c) if isinstance(c, str) else c for c in (candidates or all_structures())]
    opts: dict[str, Any] = dict(n_starts=int(n_starts), seed=int(seed), min_pii_ratio=float(min_pii_ratio),
                                max_condition_index=float(max_condition_index),
                                max_rel_std=None if max_rel_std is None else float(max_rel_std),
                                min_validation_fit=float(min_validation_fit),
                                decimate=int(decimate), skip=int(skip), friction_eps=float(friction_eps),
                                max_nfev=int(max_nfev))
    fine_dec = int(refit_decimate) if refit_decimate else int(decimate)
    fine = dict(opts, decimate=fine_dec, skip=int(skip) * int(decimate) // fine_dec)
    stage = _Stages(clock)
    pool = executor or (_SpawnPool(n_jobs) if n_jobs > 1 and len(structs) > 1 else _serial_map)
    refined: list[CandidateResult] = []
    prof = intervals = None
    traces: dict = {}
    try:
        with stage("selection"):
            results = _screen(structs, train, valid, bounds, opts, pool, progress)
            chosen = _choose(results, float(parsimony_tol))
        if chosen is not None and fine_dec != int(decimate):
            with stage("refit"):
                refined = _refit(_rivals(results, chosen, rival_tol, max_rivals), train, valid, bounds, fine,
                                 pool)
                chosen = _choose(refined, float(parsimony_tol))
            if chosen is None:  # no rival holds up on the fine step: report the coarse choice as before
                chosen, fine = _choose(results, float(parsimony_tol)), opts
        if chosen is not None:
            with stage("adequacy"):  # intervals, adequacy and time-step checks, traces: one task
                intervals, traces = getattr(pool, "map", pool)(_details_task, [(chosen, train, valid, bounds,
                                                                                fine)])[0]
            with stage("profiles"):
                if profile:  # a profile that will not be graded (intervals not valid) is traced on the coarse
                    # step: on the fine one it costs 5x the CPU (the shipped Stribeck session: minutes)
                    prof = profile_chosen(chosen, train, bounds, fine if intervals.intervals_valid else opts,
                                          n_grid=profile_points,
                                          executor=None if pool is _serial_map else pool)
                    prof.graded = bool(intervals.intervals_valid)  # identifiable only with valid intervals
    finally:
        if isinstance(pool, _SpawnPool):
            pool.close()
    h = float(train[2]) * fine["decimate"]
    settings = dict(opts, parsimony_tol=float(parsimony_tol), bounds={k: list(v) for k, v in bounds.items()},
                    n_candidates=len(structs), n_jobs=int(n_jobs), refit_decimate=fine["decimate"],
                    model_step=h, rival_tol=float(rival_tol), max_rivals=int(max_rivals),
                    speed_lag=0.5 * float(train[2]))
    return SelectionResult(candidates=results, chosen=chosen, profile=prof, settings=settings,
                           seconds=time.perf_counter() - t0, traces=traces, intervals=intervals,
                           refined=refined, stages=stage.seconds)
