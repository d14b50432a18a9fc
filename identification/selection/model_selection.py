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
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

from identification.estimation.blas import limit_blas_to_one_thread, single_thread_blas
from identification.estimation.identifiability import (
    IdentifiabilityResult,
    ProfileResult,
    analyze_identifiability,
)
from identification.estimation.profile_likelihood import ProfileLikelihoodResult, profile_likelihood_intervals
from identification.estimation.residual_adequacy import IntervalReport, interval_report, residual_adequacy
from identification.estimation.tasks import iter_tasks
from identification.models.drive_models import (
    DEFAULT_BOUNDS,
    PARAM_UNITS,
    DriveStructure,
    all_structures,
    parse_name,
)
from identification.models.drive_simulation import DEFAULT_FRICTION_EPS, StepInput, prepare_input, simulate

__all__ = [
    "FitResult",
    "CandidateResult",
    "SelectionResult",
    "fit_structure",
    "select_model",
    "as_run",
]

Run = tuple  # (u, y, dt) or (t, u, y, dt)


def as_run(run: Run) -> tuple[np.ndarray, np.ndarray, float]:
    """Accept ``(u, y, dt)`` or ``(t, u, y, dt)`` (as returned by ``daq.crane_experiment.crane_arrays``)."""
    if len(run) == 4:
        _, u, y, dt = run
    elif len(run) == 3:
        u, y, dt = run
    else:
        raise ValueError("a run is (u, y, dt) or (t, u, y, dt)")
    u = np.asarray(u, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if u.size != y.size:
        raise ValueError("input and output of a run differ in length")
    return u, y, float(dt)


# ---------------------------------------------------------------------------------- parametrisation
class _Scaling:
    """Map the box [0, 1]^n_p to the bounds; log-scaled where lo > 0 and hi/lo >= 10."""

    def __init__(self, names: Sequence[str], bounds: dict[str, tuple[float, float]]):
        self.names = list(names)
        self.lo = np.array([float(bounds[n][0]) for n in names])
        self.hi = np.array([float(bounds[n][1]) for n in names])
        if np.any(self.hi <= self.lo):
            bad = [n for n, a, b in zip(names, self.lo, self.hi, strict=True) if b <= a]
            raise ValueError(f"bounds need lo < hi for {bad}")
        self.log = (self.lo > 0) & (self.hi / np.where(self.lo > 0, self.lo, 1.0) >= 10.0)
        safe_lo = np.where(self.lo > 0, self.lo, 1.0)
        self.ratio = np.where(self.log, np.log(np.where(self.log, self.hi / safe_lo, 2.0)), 0.0)

    def to_p(self, th: np.ndarray) -> np.ndarray:
        lin = self.lo + th * (self.hi - self.lo)
        lg = self.lo * np.exp(th * self.ratio)
        return np.where(self.log, lg, lin)

    def dp_dth(self, th: np.ndarray) -> np.ndarray:
        return np.where(self.log, self.to_p(th) * self.ratio, self.hi - self.lo)

    def to_th(self, p: np.ndarray) -> np.ndarray:
        p = np.clip(p, self.lo, self.hi)
        lin = (p - self.lo) / (self.hi - self.lo)
        lg = np.log(np.where(self.log, p / np.where(self.lo > 0, self.lo, 1.0), 1.0)) / np.where(
            self.log, self.ratio, 1.0)
        return np.clip(np.where(self.log, lg, lin), 0.0, 1.0)

    @property
    def ranges(self) -> np.ndarray:
        return self.hi - self.lo


# ---------------------------------------------------------------------------------------- fitting
@dataclass
class FitResult:
    structure: DriveStructure
    params: dict[str, float]
    cost: float  # 0.5 * sum of squared residuals (training, after `skip`)
    fit: float  # 1 - NRMSE on training
    S: np.ndarray  # output sensitivity at the optimum (training samples used in the cost)
    sigma2: float  # residual variance estimate
    n_evals: int
    n_starts: int
    start_costs: list[float]
    at_bound: list[str]
    std_errors: dict[str, float] = field(default_factory=dict)  # SI, from the Fisher matrix (eq. 9 unscaled)


def _nrmse(e: np.ndarray, y: np.ndarray) -> float:
    den = np.linalg.norm(y - y.mean())
    return float(np.linalg.norm(e) / den) if den > 0 else float("inf")


class _Problem:
    """Residuals and Jacobian in the scaled coordinates, with one cached simulation per point."""

    def __init__(self, structure, inp: StepInput, y: np.ndarray, scaling: _Scaling, skip: int,
                 friction_eps: float, fixed: dict[str, float] | None = None):
        self.s = structure
        self.inp = inp
        self.y = y
        self.sc = scaling
        self.skip = skip
        self.eps = friction_eps
        self.fixed = dict(fixed or {})
        self.free = [j for j, n in enumerate(scaling.names) if n not in self.fixed]
        self._key = None
        self._val = None
        self.n_evals = 0

    def params(self, th_free: np.ndarray) -> dict[str, float]:
        p = self.sc.to_p(np.clip(self._expand(th_free), 0, 1))
        out = {n: float(v) for n, v in zip(self.sc.names, p, strict=True)}
        out.update(self.fixed)
        return out

    def _expand(self, th_free: np.ndarray) -> np.ndarray:
        th = np.full(len(self.sc.names), 0.5)
        th[self.free] = th_free
        return th

    def _eval(self, th_free: np.ndarray):
        key = th_free.tobytes()
        if key != self._key:
            p = self.params(th_free)
            r = simulate(self.s, p, self.inp, sensitivities=True, friction_eps=self.eps)
            n = min(r.y.size, self.y.size)
            res = (r.y[:n] - self.y[:n])[self.skip:]
            J = r.S[:n][self.skip:][:, self.free] * self.sc.dp_dth(self._expand(th_free))[self.free]
            bad = not (np.all(np.isfinite(res)) and np.all(np.isfinite(J)))
            if bad:
                res = np.full_like(res, 1e3)
                J = np.zeros_like(J)
            self._key, self._val = key, (res, J, r.S[:n][self.skip:])
            self.n_evals += 1
        return self._val

    def fun(self, th_free):
        return self._eval(th_free)[0]

    def jac(self, th_free):
        return self._eval(th_free)[1]


def _starts(n_p: int, n_starts: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Centre of the (scaled) box, then Latin-hypercube points in [0.1, 0.9]."""
    out = [np.full(n_p, 0.5)]
    m = max(n_starts - 1, 0)
    if m:
        cut = (np.arange(m)[:, None] + rng.random((m, n_p))) / m
        for j in range(n_p):
            cut[:, j] = rng.permutation(cut[:, j])
        out += list(0.1 + 0.8 * cut)
    return out[:max(n_starts, 1)]


def fit_structure(structure: DriveStructure | str, u: np.ndarray, y: np.ndarray, dt: float,
                  bounds: dict[str, tuple[float, float]] | None = None, *, n_starts: int = 4, seed: int = 0,
                  decimate: int = 5, skip: int = 0, friction_eps: float = DEFAULT_FRICTION_EPS,
                  max_nfev: int = 60, fixed: dict[str, float] | None = None,
                  start: dict[str, float] | None = None, xtol: float = 1e-10) -> FitResult:
    """Fit one candidate on a run: multistart ``least_squares`` (TRF, box bounds) with sensitivity Jacobian.

    The model runs on the step ``decimate*dt``; the output is compared at the same instants
    (``y[::decimate]``). Parameters in ``fixed`` are held; ``start`` (physical values) replaces
    the first start point.
    """
    s = parse_name(structure) if isinstance(structure, str) else structure
    bounds = {**DEFAULT_BOUNDS, **(bounds or {})}
    inp = prepare_input(u, dt, decimate)
    yd = np.asarray(y, dtype=float)[::decimate][: inp.n_steps]
    sc = _Scaling(s.param_names, bounds)
    prob = _Problem(s, inp, yd, sc, skip, friction_eps, fixed)
    n_free = len(prob.free)
    rng = np.random.default_rng(seed)
    best = None
    start_costs = []
    if n_free == 0:
        res0 = prob.fun(np.zeros(0))
        best_th = np.zeros(0)
        best_cost = 0.5 * float(res0 @ res0)
        start_costs.append(best_cost)
    else:
        starts = _starts(n_free, n_starts, rng)
        if start is not None:
            starts[0] = sc.to_th(np.array([start.get(n, 0.5 * (sc.lo[j] + sc.hi[j]))
                                           for j, n in enumerate(sc.names)]))[prob.free]
        for th0 in starts:
            try:
                r = scipy.optimize.least_squares(prob.fun, th0, jac=prob.jac, bounds=(0.0, 1.0), method="trf",
                                                 x_scale="jac", max_nfev=max_nfev, xtol=xtol, ftol=xtol)
                cost = float(r.cost)
                th = r.x
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                cost, th = math.inf, th0
            start_costs.append(cost)
            if best is None or cost < best[0]:
                best = (cost, th)
        best_cost, best_th = best
    res, _, S = prob._eval(np.asarray(best_th, dtype=float))
    params = prob.params(best_th)
    n_used = res.size
    n_free_p = max(n_used - n_free, 1)
    y_used = yd[: n_used + skip][skip:]
    th_full = sc.to_th(np.array([params[n] for n in sc.names]))
    at_bound = [n for n, v in zip(sc.names, th_full, strict=True)
                if n not in prob.fixed and (v <= 1e-6 or v >= 1 - 1e-6)]
    return FitResult(structure=s, params=params, cost=float(best_cost), fit=1.0 - _nrmse(res, y_used), S=S,
                     sigma2=float(res @ res) / n_free_p, n_evals=prob.n_evals, n_starts=len(start_costs),
                     start_costs=start_costs, at_bound=at_bound)


def simulate_run(structure: DriveStructure, params: dict[str, float], u: np.ndarray, y: np.ndarray,
                 dt: float, decimate: int, friction_eps: float = DEFAULT_FRICTION_EPS
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """Model output on the run's decimated grid; returns (t, y_model, 1 - NRMSE)."""
    inp = prepare_input(u, dt, decimate)
    r = simulate(structure, params, inp, sensitivities=False, friction_eps=friction_eps)
    yd = np.asarray(y, dtype=float)[::decimate][: inp.n_steps]
    n = min(yd.size, r.y.size)
    return r.t[:n], r.y[:n], 1.0 - _nrmse(r.y[:n] - yd[:n], yd[:n])


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
                     f"validation fit >= {100 * s.get('min_validation_fit', nan):g} %")
        if self.chosen is not None:
            lines.append(f"parameters of {self.chosen.name} (+- one standard error):")
            for name, value in self.chosen.params.items():
                se = self.chosen.std_errors.get(name, float("nan"))
                rel = f" ({100 * se / abs(value):.2g} %)" if value and math.isfinite(se) else ""
                lines.append(f"  {name:<16} {value:>12.5g} +- {se:.3g}{rel}")
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


def _evaluate_candidate(structure: DriveStructure, train, valid, bounds, opts: dict) -> CandidateResult:
    """Fit, identifiability and validation of one candidate (runs in a worker process)."""
    t0 = time.perf_counter()
    u, y, dt = train
    fit = fit_structure(structure, u, y, dt, bounds, n_starts=opts["n_starts"], seed=opts["seed"],
                        decimate=opts["decimate"], skip=opts["skip"], friction_eps=opts["friction_eps"],
                        max_nfev=opts["max_nfev"])
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
    return CandidateResult(structure=structure, params=fit.params, train_fit=fit.fit, valid_fit=vfit,
                           valid_cost=vcost, identifiability=idf, accepted=accepted, n_evals=fit.n_evals,
                           seconds=time.perf_counter() - t0, start_costs=fit.start_costs,
                           at_bound=fit.at_bound,
                           std_errors={n: float(v) for n, v in zip(structure.param_names, se, strict=True)})


def _candidate_task(args: tuple) -> CandidateResult:
    return _evaluate_candidate(*args)


def _choose(cands: list[CandidateResult], parsimony_tol: float) -> CandidateResult | None:
    acc = [c for c in cands if c.accepted and math.isfinite(c.valid_cost)]
    if not acc:
        return None
    best = min(acc, key=lambda c: c.valid_cost)
    if parsimony_tol <= 0:
        return best
    near = [c for c in acc if c.valid_cost <= best.valid_cost * (1.0 + parsimony_tol)]
    return min(near, key=lambda c: (c.structure.n_params, c.valid_cost))


def select_model(train: Run, valid: Run, bounds: dict[str, tuple[float, float]] | None = None, *,
                 candidates: Sequence[DriveStructure | str] | None = None, n_starts: int = 3, seed: int = 0,
                 min_pii_ratio: float = 0.01, max_condition_index: float = 30.0,
                 min_validation_fit: float = 0.0, parsimony_tol: float = 0.01, decimate: int = 5,
                 skip: int = 0, friction_eps: float = DEFAULT_FRICTION_EPS, max_nfev: int = 60,
                 profile: bool = True, profile_points: int = 9,
                 progress: Callable[[int, int, CandidateResult], None] | None = None,
                 n_jobs: int = 2, executor=None) -> SelectionResult:
    """Fit all candidates (default: the 96 of the kit), check identifiability, validate, choose.

    ``progress(done, total, candidate_result)`` is called in this process after each candidate.
    ``executor`` (e.g. ``daq.executor.make_executor(...)``: a local pool or a Dask cluster) runs
    the candidates and the profile likelihood; it needs ``map(fn, items)`` and may offer
    ``imap_unordered`` (then progress is reported as candidates finish). Without one,
    ``n_jobs > 1`` spreads candidates over a process pool here.
    """
    t0 = time.perf_counter()
    train = as_run(train)
    valid = as_run(valid)
    bounds = {k: (float(v[0]), float(v[1])) for k, v in {**DEFAULT_BOUNDS, **(bounds or {})}.items()}
    structs = [parse_name(c) if isinstance(c, str) else c for c in (candidates or all_structures())]
    opts = dict(n_starts=int(n_starts), seed=int(seed), min_pii_ratio=float(min_pii_ratio),
                max_condition_index=float(max_condition_index), min_validation_fit=float(min_validation_fit),
                decimate=int(decimate), skip=int(skip), friction_eps=float(friction_eps),
                max_nfev=int(max_nfev))
    results: list[CandidateResult] = []
    total = len(structs)
    # expensive (nonlinear, many parameters) first for load balance
    order = sorted(structs, key=lambda s: (not s.nonlinear, -s.n_params))
    if executor is not None:
        items = [(s, train, valid, bounds, opts) for s in order]
        for r in iter_tasks(executor, _candidate_task, items):
            results.append(r)
            if progress:
                progress(len(results), total, r)
    elif n_jobs > 1 and total > 1:
        # spawn, not fork: the caller may hold threads (asyncio executors, ZeroMQ I/O threads, BLAS
        # pools) whose locks a forked child would inherit in a locked state and wait on forever
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=int(n_jobs),
                                         initializer=limit_blas_to_one_thread, mp_context=ctx) as ex:
            futs = [ex.submit(_evaluate_candidate, s, train, valid, bounds, opts) for s in order]
            for f in cf.as_completed(futs):
                r = f.result()
                results.append(r)
                if progress:
                    progress(len(results), total, r)
    else:
        with single_thread_blas():
            for s in order:
                r = _evaluate_candidate(s, train, valid, bounds, opts)
                results.append(r)
                if progress:
                    progress(len(results), total, r)
    rank = {s: i for i, s in enumerate(structs)}
    results.sort(key=lambda r: rank[r.structure])
    chosen = _choose(results, float(parsimony_tol))
    prof = None
    traces: dict = {}
    intervals = None
    with single_thread_blas():
        if chosen is not None:
            traces, prof = _chosen_details(chosen, train, valid, bounds, opts, decimate, friction_eps,
                                           profile, profile_points, executor)
            intervals = chosen_intervals(chosen, train, valid, bounds, opts)
            if prof is not None and intervals is not None:
                prof.graded = bool(intervals.intervals_valid)  # identifiable only with valid intervals
    settings = dict(opts, parsimony_tol=float(parsimony_tol), bounds={k: list(v) for k, v in bounds.items()},
                    n_candidates=total, n_jobs=int(n_jobs))
    return SelectionResult(candidates=results, chosen=chosen, profile=prof, settings=settings,
                           seconds=time.perf_counter() - t0, traces=traces, intervals=intervals)


def chosen_intervals(chosen: CandidateResult | FitResult, train, valid, bounds, opts: dict,
                     level: float = 0.95, lags: int = 25, adequacy_step: float = 5e-4) -> IntervalReport:
    """Model-based and robust intervals of ``chosen`` (its training fit) with the adequacy check on the
    validation run and the time-step check (the model on ``decimate * dt`` against the same model on
    ``dt``, at the estimate, on the training input). ``opts``: decimate, skip, friction_eps.

    The residuals are judged on a grid of ``adequacy_step`` (at least the model step): the speed the drive
    differences from encoder counts has sample-to-sample correlated quantisation noise (at 10 kHz a count
    is 0.06 rad/s), which is the sensor's and is absorbed by the robust covariance."""
    s = chosen.structure
    dec, skip, eps = int(opts["decimate"]), int(opts["skip"]), float(opts["friction_eps"])
    u, y, dt = as_run(train)
    uv, yv, dtv = as_run(valid)
    names = s.param_names
    sc = _Scaling(names, {**DEFAULT_BOUNDS, **bounds})
    inp = prepare_input(u, dt, dec)
    prob = _Problem(s, inp, y[::dec][: inp.n_steps], sc, skip, eps)
    values = np.array([chosen.params[n] for n in names])
    res, _, S = prob._eval(sc.to_th(values))
    _, ymv, _ = simulate_run(s, chosen.params, uv, yv, dtv, dec, eps)
    ev = (ymv - yv[::dec][: ymv.size])[skip:]
    u_grid = prepare_input(uv, dtv, dec).held(0.0)[0][: ymv.size][skip:]
    stride = max(1, int(round(adequacy_step / (dec * dt))))
    adequacy = residual_adequacy(ev, u_grid, lags=lags, level=1.0 - level, stride=stride)
    step_error, note = None, ""
    if dec > 1:
        fine = simulate(s, chosen.params, prepare_input(u, dt, 1), sensitivities=False, friction_eps=eps)
        n = min(inp.n_steps, fine.y[::dec].size)
        coarse = res + y[::dec][: inp.n_steps][skip:][: res.size]  # the model output on the coarse step
        step_error = (coarse[: n - skip] - fine.y[::dec][skip:n])
        note = (f"decimate = {dec} (model step {1e3 * dec * dt:.3g} ms); fit with decimate = 1 for valid "
                "intervals")
    return interval_report(names, values, S, res, adequacy, level=level, units=PARAM_UNITS,
                           step_error=step_error, step_note=note)


def _chosen_details(chosen, train, valid, bounds, opts, decimate, friction_eps, profile, profile_points,
                    executor=None):
    """Decimated traces of the chosen model and its profile likelihood."""
    prof = None
    u, y, dt = train
    uv, yv, dtv = valid
    tt, yt, _ = simulate_run(chosen.structure, chosen.params, u, y, dt, decimate, friction_eps)
    tv, yvm, _ = simulate_run(chosen.structure, chosen.params, uv, yv, dtv, decimate, friction_eps)
    traces = {"train": (tt, y[::decimate][: tt.size], yt), "valid": (tv, yv[::decimate][: tv.size], yvm)}
    if profile:
        prof = profile_chosen(chosen, train, bounds, opts, n_grid=profile_points, executor=executor)
    return traces, prof


class _ProfileRefit:
    """Re-fit of the chosen structure with one parameter held (picklable: runs on the executor)."""

    def __init__(self, structure: DriveStructure, train, bounds, opts: dict):
        self.s, self.train, self.bounds, self.opts = structure, train, bounds, opts

    def __call__(self, j: int, value: float, start: np.ndarray) -> tuple[float, np.ndarray]:
        u, y, dt = self.train
        names = self.s.param_names
        o = self.opts
        r = fit_structure(self.s, u, y, dt, self.bounds, n_starts=1, decimate=o["decimate"], skip=o["skip"],
                          friction_eps=o["friction_eps"], max_nfev=25, fixed={names[j]: value},
                          start={n: float(v) for n, v in zip(names, start, strict=True)})
        return r.cost, np.array([r.params[n] for n in names])


def profile_chosen(chosen: CandidateResult, train, bounds, opts: dict, n_grid: int = 9,
                   executor=None) -> ProfileLikelihoodResult:
    """Profile likelihood of every parameter of ``chosen`` on the training run.

    Traced from the optimum outwards (:mod:`identification.estimation.profile_likelihood`) with warm-started
    re-fits, at most ``n_grid`` steps per side plus one refinement of each crossing, until the 95 %
    likelihood-ratio threshold (chi-square, 1 dof; sigma^2 from the residuals of thousands of samples,
    so F(1, n-p) differs by < 0.1 %) is crossed or a bound is hit; Fisher intervals (normal quantile)
    from the sensitivity matrix at the optimum. The residuals are treated as white, so the intervals
    are as narrow as that assumption makes them.
    """
    u, y, dt = train
    s = chosen.structure
    names = s.param_names
    base = fit_structure(s, u, y, dt, bounds, n_starts=1, decimate=opts["decimate"], skip=opts["skip"],
                         friction_eps=opts["friction_eps"], max_nfev=opts["max_nfev"], start=chosen.params)
    est = np.array([base.params[n] for n in names])
    n_used, n_p = base.S.shape
    try:
        cov = base.sigma2 * np.linalg.inv(base.S.T @ base.S)
        se = np.sqrt(np.where(np.diag(cov) > 0, np.diag(cov), np.nan))
    except np.linalg.LinAlgError:
        se = np.full(n_p, np.nan)
    return profile_likelihood_intervals(
        _ProfileRefit(s, train, bounds, opts), est, [bounds[n] for n in names], base.cost, base.sigma2, names,
        fisher_se=se, max_steps=n_grid, refine=2, executor=executor)
