"""Profile-likelihood confidence intervals, traced outwards from the optimum (Raue et al. 2009, seed 004).

For a least-squares cost ``J = 0.5 * sum(r^2)`` with Gaussian residuals of variance ``sigma2``,
the likelihood-ratio statistic of parameter ``j`` fixed at ``v`` (others re-optimised) is

    LR(v) = 2 (J_j(v) - J_opt) / sigma2

and the profile interval at level ``level`` is ``{v : LR(v) <= threshold}`` with threshold the
chi-square quantile with 1 dof (sigma known), or the F(1, dof) quantile when ``sigma2`` was
estimated from the same residuals with ``dof`` degrees of freedom. For a linear model the
profile is exactly quadratic, and the interval is the normal (sigma known) or Student-t
(sigma estimated) interval - the known-answer test.

Each parameter is traced in both directions from the estimate, each direction one task for the
``executor``: a step, a warm-started re-fit (from the previous point's parameters), then a next
step sized so that ``sqrt(LR)`` - linear in the distance for a quadratic profile - is predicted
to pass the threshold. The crossing is interpolated linearly in ``sqrt(LR)`` (exact for a
quadratic profile); ``refine`` more re-fits at the interpolated crossing narrow the bracket where
the profile is not quadratic. A side that reaches a bound or runs out of steps below the threshold
stays open: that parameter is not identifiable at this level (on that side). A side whose estimate
already sits on its bound is reported as ``"at bound"``: the interval ends there by construction.
A re-fit that lands *below* the optimum's cost means the optimum was not the minimum; the result
says so (``better_cost``) instead of hiding it behind LR = 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from identification.estimation.distributions import chi2_ppf, f_ppf, norm_ppf, t_ppf
from identification.estimation.identifiability import ProfileResult
from identification.estimation.tasks import map_tasks

__all__ = ["ProfileLikelihoodResult", "profile_likelihood_intervals", "lr_threshold"]

Refit = Callable[[int, float, np.ndarray], tuple[float, np.ndarray]]


def lr_threshold(level: float = 0.95, dof: int | None = None) -> float:
    """chi2(1) quantile, or the F(1, dof) quantile when sigma is estimated with ``dof`` dof."""
    return float(chi2_ppf(level, 1) if dof is None else f_ppf(level, 1, dof))


@dataclass
class ProfileLikelihoodResult(ProfileResult):
    """Profiles (grid, cost as in :class:`ProfileResult`) plus LR values, intervals and Fisher intervals."""

    lr: list[np.ndarray]  # likelihood-ratio statistic at every grid value
    threshold: float
    level: float
    sigma2: float
    interval: list[tuple[float | None, float | None]]  # None: open on that side
    fisher_interval: list[tuple[float, float] | None]
    identifiable: list[bool]  # both sides closed (crossed, or the bound the estimate sits on)
    n_refits: int
    side_status: list[tuple[str, str]]  # per side (lower, upper): closed | bound | steps | at bound
    fisher_se: list[float | None]  # standard errors behind the Fisher intervals (plots draw the parabola)
    better_cost: float | None = None  # lowest re-fit cost when it fell below cost_opt (optimum not reached)
    seconds: float = 0.0  # wall time of the tracing
    # False when an adequacy check found the model wrong or the residuals coloured: a closed profile is then
    # not called identifiable, because its threshold assumes white residuals of a right structure
    graded: bool = True

    def to_dict(self) -> dict:
        d = super().to_dict()
        d.update({"threshold": self.threshold, "level": self.level, "sigma2": self.sigma2,
                  "n_refits": self.n_refits, "better_cost": self.better_cost,
                  "seconds": self.seconds})
        for i, p in enumerate(d["parameters"]):
            fi = self.fisher_interval[i]
            p.update({"lr": self.lr[i].tolist(), "interval": list(self.interval[i]),
                      "identifiable": bool(self.identifiable[i]) and self.graded,
                      "closed": bool(self.identifiable[i]), "side_status": list(self.side_status[i]),
                      "verdict": self.verdict(i), "fisher_interval": None if fi is None else list(fi),
                      "fisher_se": self.fisher_se[i]})
        return d

    def verdict(self, i: int) -> str:
        """``identifiable`` (each side crossed the threshold or is the bound the estimate sits on),
        ``open below``/``open above``, or ``not identifiable`` (open on both sides)."""
        lo_open, hi_open = self._open(i)
        if lo_open and hi_open:
            return "not identifiable"
        if lo_open or hi_open:
            return "open below" if lo_open else "open above"
        at_bound = " (estimate at bound)" if "at bound" in self.side_status[i] else ""
        if not self.graded:
            return "closed, not graded (intervals not valid)" + at_bound
        return "identifiable" + at_bound

    def _open(self, i: int) -> tuple[bool, ...]:  # (below, above)
        return tuple(x is None and st != "at bound"
                     for x, st in zip(self.interval[i], self.side_status[i], strict=True))

    def format_table(self, units: dict[str, str] | None = None) -> str:
        """Profile-likelihood interval next to the Fisher interval, per parameter (``units`` by name)."""
        def side(x, status, bound):
            if x is not None:
                return f"{x:.5g}"
            return f"{bound:.5g} (bound)" if status == "at bound" else (
                "open (bound)" if status == "bound" else "open (steps)")

        lines = [f"{100 * self.level:g} % intervals: profile likelihood (LR threshold {self.threshold:.3f}) "
                 f"and Fisher matrix",
                 f"{'parameter':<16} {'estimate':>11} {'profile lo':>18} {'profile hi':>18} "
                 f"{'Fisher lo':>11} {'Fisher hi':>11}  verdict"]
        for i, (n, e) in enumerate(zip(self.names, self.estimate, strict=True)):
            iv, fi, st = self.interval[i], self.fisher_interval[i], self.side_status[i]
            flo, fhi = (f"{x:.5g}" for x in fi) if fi is not None else ("-", "-")
            unit = f" [{units[n]}]" if units and units.get(n) else ""
            lines.append(f"{n:<16} {e:>11.5g} {side(iv[0], st[0], self.grids[i][0]):>18} "
                         f"{side(iv[1], st[1], self.grids[i][-1]):>18} {flo:>11} {fhi:>11}  "
                         f"{self.verdict(i)}{unit}")
        if self.better_cost is not None:
            lines.append(f"warning: a profile re-fit reached cost {self.better_cost:.6g} < optimum "
                         f"{self.cost_opt:.6g}; the optimum was not the minimum")
        return "\n".join(lines)


def _trace(task: tuple) -> dict:
    """One direction of one parameter's profile (runs on the executor)."""
    refit, j, d, est, lo, hi, cost_opt, sigma2, thr, h0, max_steps, refine, refine_tol = task
    x, lr_prev = float(est[j]), 0.0
    start = np.asarray(est, dtype=float)
    h = float(h0)
    pts: list[tuple[float, float, float]] = []
    crossing, status = None, "steps"
    bound = hi if d > 0 else lo

    def lr_at(v: float, p0: np.ndarray) -> tuple[float, np.ndarray]:
        cost, p = refit(j, v, p0)
        lr = max(2.0 * (float(cost) - cost_opt) / sigma2, 0.0)
        pts.append((v, float(cost), lr))
        return lr, np.asarray(p, dtype=float)

    for _ in range(int(max_steps)):
        v = x + d * h
        at_bound = (v - bound) * d >= 0
        if at_bound:
            v = bound
        if v == x:
            status = "at bound" if not pts else "bound"
            break
        lr, p = lr_at(v, start)
        if lr >= thr:
            a, b, xa, xb = np.sqrt(lr_prev), np.sqrt(lr), x, v
            crossing = xa + (np.sqrt(thr) - a) / (b - a) * (xb - xa)
            # sqrt(LR) linear through the optimum and both bracket points: the interpolation is exact
            linear = xa != float(est[j]) and abs(a - b * (xa - est[j]) / (xb - est[j])) <= refine_tol * b
            for _r in range(0 if linear else int(refine)):  # secant steps on sqrt(LR), keeping the bracket
                lc, _ = lr_at(float(crossing), start)
                c = np.sqrt(lc)
                if abs(c - np.sqrt(thr)) <= 1e-9 * np.sqrt(thr):
                    break
                if c < np.sqrt(thr):
                    a, xa = c, float(crossing)
                else:
                    b, xb = c, float(crossing)
                crossing = xa + (np.sqrt(thr) - a) / (b - a) * (xb - xa)
            status = "closed"
            break
        if at_bound:
            status = "bound"
            break
        slope = (np.sqrt(lr) - np.sqrt(lr_prev)) / abs(v - x)
        want = 1.05 * np.sqrt(thr) - np.sqrt(lr)
        h_new = want / slope if slope > 0 else 4 * h
        h = float(np.clip(h_new, 0.5 * h, 4.0 * h))
        x, lr_prev, start = v, lr, p
    return {"j": j, "d": d, "points": pts, "crossing": None if crossing is None else float(crossing),
            "status": status}


def profile_likelihood_intervals(refit: Refit, estimate: ArrayLike,
                                 bounds: Sequence[tuple[float, float]], cost_opt: float, sigma2: float,
                                 names: Sequence[str], *,
                                 fisher_se: ArrayLike | None = None, which: Sequence[int] | None = None,
                                 level: float = 0.95, dof: int | None = None, max_steps: int = 10,
                                 first_step: Sequence[float] | None = None, refine: int = 0,
                                 refine_tol: float = 1e-3, executor=None) -> ProfileLikelihoodResult:
    """Trace the profile of every parameter in ``which`` (default all) and read off its interval.

    ``refit(j, value, start)`` re-optimises all parameters but ``j`` (held at ``value``) from the
    full parameter vector ``start`` and returns ``(cost, parameters)``; it must be picklable when
    the executor runs in other processes. ``cost`` is ``0.5 * sum(r^2)``; ``sigma2`` the residual
    variance (known, or estimated with ``dof`` degrees of freedom -> F threshold). ``fisher_se``
    gives the Fisher intervals ``est +- z se`` (t quantile with ``dof``) and the first step
    (half a standard error); otherwise the first step is 5 % of the bound range. ``refine``: at most
    this many extra re-fits per closed side at the interpolated crossing, skipped when ``sqrt(LR)``
    is linear in the distance (within ``refine_tol``) through the optimum and the bracket's two points
    (a quadratic profile, where the interpolation is already exact).
    The directions go to ``executor.map`` (or any map-like callable) as independent tasks.
    """
    t_start = time.perf_counter()
    est = np.asarray(estimate, dtype=float)
    which = list(range(est.size)) if which is None else list(which)
    thr = lr_threshold(level, dof)
    se = None if fisher_se is None else np.asarray(fisher_se, dtype=float)
    tasks = []
    for j in which:
        lo, hi = (float(b) for b in bounds[j])
        if first_step is not None:
            h0 = float(first_step[j])
        elif se is not None and np.isfinite(se[j]) and se[j] > 0:
            h0 = 0.5 * float(se[j])
        else:
            h0 = 0.05 * (hi - lo)
        for d in (-1, 1):
            tasks.append((refit, j, d, est, lo, hi, float(cost_opt), float(sigma2), thr, h0, max_steps,
                          int(refine), float(refine_tol)))
    out = map_tasks(executor, _trace, tasks)
    tail = 0.5 + level / 2
    q = float(norm_ppf(tail) if dof is None else t_ppf(tail, dof))
    grids, costs, lrs, intervals, ident, clear, status = [], [], [], [], [], [], []
    fisher: list[tuple[float, float] | None] = []
    ses: list[float | None] = []
    n_refits = 0
    lowest = float(cost_opt)
    for j in which:
        sides = {r["d"]: r for r in out if r["j"] == j}
        pts = sides[-1]["points"] + [(float(est[j]), float(cost_opt), 0.0)] + sides[1]["points"]
        pts.sort(key=lambda t: t[0])
        n_refits += len(sides[-1]["points"]) + len(sides[1]["points"])
        status.append((sides[-1]["status"], sides[1]["status"]))
        lowest = min([lowest] + [t[1] for t in pts])
        grids.append(np.array([t[0] for t in pts]))
        costs.append(np.array([t[1] for t in pts]))
        lrs.append(np.array([t[2] for t in pts]))
        lo_x = sides[-1]["crossing"]
        hi_x = sides[1]["crossing"]
        intervals.append((None if lo_x is None else float(lo_x), None if hi_x is None else float(hi_x)))
        ident.append((lo_x is not None or sides[-1]["status"] == "at bound")
                     and (hi_x is not None or sides[1]["status"] == "at bound"))
        lo, hi = bounds[j]
        tol = 1e-9 * (hi - lo)
        clear.append((lo_x is not None or est[j] <= lo + tol) and (hi_x is not None or est[j] >= hi - tol))
        if se is not None and np.isfinite(se[j]):
            fisher.append((float(est[j] - q * se[j]), float(est[j] + q * se[j])))
            ses.append(float(se[j]))
        else:
            fisher.append(None)
            ses.append(None)
    return ProfileLikelihoodResult(
        names=[names[j] for j in which], grids=grids, costs=costs, cost_opt=float(cost_opt),
        estimate=est[which], clear_minimum=clear, lr=lrs, threshold=thr, level=float(level),
        sigma2=float(sigma2), interval=intervals, fisher_interval=fisher, identifiable=ident,
        n_refits=n_refits, side_status=status, fisher_se=ses,
        better_cost=lowest if lowest < float(cost_opt) * (1 - 1e-9) else None,
        seconds=time.perf_counter() - t_start)
