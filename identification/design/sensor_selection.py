"""Optimal sensor selection over binary weights (paper problem 11) with A, D or E criteria.

Two methods:

* ``enumerate_sensor_sets``: every combination with at least n_p sensors, with a caller-supplied covariance
  function (so the exact covariance with the second-order term, even a re-fit per combination, can be used);
  gives the paper's Table 2.
* ``select_sensors_bnb``: choose exactly ``m`` of many candidates (e.g. 30) from per-sensor Fisher
  information matrices F_k (Gauss-Newton: C(omega) = (sum_k omega_k F_k)^-1). Greedy + exchange gives an
  incumbent; branch-and-bound then proves optimality. Bound: adding sensors never increases C in the
  Loewner order and A, D, E are Loewner-monotone, so Psi((F_in + sum of all undecided F_k)^-1) is a valid
  lower bound for every completion of a node. A node limit stops the search; the reported gap is then
  (incumbent - smallest open bound) / incumbent.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

CRITERIA = ("A", "D", "E")


def design_criterion(C: np.ndarray, kind: str) -> float:
    """Psi_A = trace C, Psi_D = det C, Psi_E = lambda_max(C); inf for a non-finite C."""
    C = np.asarray(C, float)
    if not np.all(np.isfinite(C)):
        return float("inf")
    if kind == "A":
        return float(np.trace(C))
    if kind == "D":
        return float(np.linalg.det(C))
    if kind == "E":
        return float(np.linalg.eigvalsh(0.5 * (C + C.T))[-1])
    raise ValueError(f"unknown criterion {kind!r}; use one of {CRITERIA}")


def _criterion_from_info(F: np.ndarray, kind: str, cond_max: float = 1e14) -> float:
    """Psi(F^-1); inf when F is (numerically, condition > cond_max) singular.

    Bounds of the branch-and-bound use cond_max=inf: a node's bound must never exceed the value of any of
    its completions, and a completion with less information can be better conditioned than the sum of all
    undecided sensors, so only an exactly singular information matrix may give an infinite bound.
    """
    w = np.linalg.eigvalsh(0.5 * (F + F.T))
    if w[0] <= w[-1] / cond_max or w[-1] <= 0:
        return float("inf")
    lam = 1.0 / w
    return float({"A": lam.sum(), "D": np.prod(lam), "E": lam.max()}[kind])


def combo_label(omega: np.ndarray) -> str:
    return "".join("1" if w else "0" for w in omega)


@dataclass
class SensorSelectionResult:
    """Chosen weights, criterion values, and (for enumeration) one table row per combination."""

    omega: np.ndarray
    criterion: str
    value: float
    table: list[dict] = field(default_factory=list)  # rows: {"combination", "A", "D", "E", "n_sensors"}
    method: str = "enumeration"
    gap: float = 0.0
    nodes: int = 0
    lower_bound: float = float("nan")

    @property
    def label(self) -> str:
        return combo_label(self.omega)

    def to_dict(self) -> dict:
        return {"omega": [int(w) for w in self.omega], "combination": self.label, "criterion": self.criterion,
                "value": self.value, "method": self.method, "gap": self.gap, "nodes": self.nodes,
                "table": self.table}


def enumerate_sensor_sets(
    covariance_of: Callable[[np.ndarray], np.ndarray],
    n_s: int,
    n_p: int,
    *,
    criterion: str = "E",
    n_sensors: int | None = None,
    sensor_names: tuple[str, ...] | None = None,
) -> SensorSelectionResult:
    """Evaluate A, D, E for all combinations with >= n_p sensors and pick the best by ``criterion``.

    ``n_sensors`` (a sensor budget) restricts the choice to combinations of exactly that size; the full set
    stays in the table as the reference row. ``covariance_of(omega)`` returns C for boolean weights.
    """
    rows = []
    best: tuple[float, np.ndarray | None] = (float("inf"), None)
    for omega in itertools.product((1, 0), repeat=n_s):
        om = np.array(omega, dtype=bool)
        k = int(om.sum())
        if k < n_p or (n_sensors is not None and k != n_sensors and k != n_s):
            continue
        try:
            C = covariance_of(om)
            vals = {c: design_criterion(C, c) for c in CRITERIA}
        except np.linalg.LinAlgError:
            vals = {c: float("inf") for c in CRITERIA}
        row = {"combination": combo_label(om), "n_sensors": k, **vals}
        if sensor_names is not None:
            row["sensors"] = [n for n, w in zip(sensor_names, om, strict=True) if w]
        rows.append(row)
        if (n_sensors is None or k == n_sensors) and vals[criterion] < best[0]:
            best = (vals[criterion], om)
    if best[1] is None:
        raise ValueError("no admissible sensor combination")
    return SensorSelectionResult(omega=best[1], criterion=criterion, value=best[0], table=rows,
                                 method="enumeration", nodes=len(rows), lower_bound=best[0])


def _greedy_exchange(F: np.ndarray, m: int, kind: str) -> tuple[list[int], float]:
    """Greedy forward selection (regularised while singular) followed by 1-for-1 exchanges."""
    n_s, n_p, _ = F.shape
    reg = 1e-12 * np.trace(F.sum(0)) / n_p * np.eye(n_p)
    chosen: list[int] = []
    for _ in range(m):
        rest = [k for k in range(n_s) if k not in chosen]
        vals = [_criterion_from_info(F[chosen + [k]].sum(0) + reg, kind) for k in rest]
        chosen.append(rest[int(np.argmin(vals))])
    best = _criterion_from_info(F[chosen].sum(0), kind)
    improved = True
    while improved:
        improved = False
        for i, j in itertools.product(range(m), range(n_s)):
            if j in chosen:
                continue
            trial = chosen.copy()
            trial[i] = j
            v = _criterion_from_info(F[trial].sum(0), kind)
            if v < best * (1 - 1e-12):
                chosen, best, improved = trial, v, True
    return sorted(chosen), best


def select_sensors_bnb(
    F: np.ndarray,
    m: int,
    *,
    criterion: str = "E",
    max_nodes: int = 200_000,
) -> SensorSelectionResult:
    """Choose exactly m of n_s sensors minimising Psi((sum_k omega_k F_k)^-1); F has shape (n_s, n_p, n_p)."""
    F = np.asarray(F, float)
    n_s, n_p, _ = F.shape
    if not n_p <= m <= n_s:
        raise ValueError(f"need n_p <= m <= n_s, got m={m}")
    inc_set, inc_val = _greedy_exchange(F, m, criterion)
    # Order sensors by decreasing information (trace) so good branches come first.
    order = np.argsort([-np.trace(Fk) for Fk in F])
    Fo = F[order]
    suffix = np.concatenate([np.cumsum(Fo[::-1], axis=0)[::-1], np.zeros((1, n_p, n_p))])

    def bound_of(F_node: np.ndarray) -> float:
        return _criterion_from_info(F_node, criterion, cond_max=np.inf)

    # node: (bound, tie-breaker, depth, number included, F of included, included positions)
    tie = itertools.count()
    heap: list[tuple[float, int, int, int, np.ndarray, tuple[int, ...]]] = [
        (bound_of(suffix[0]), next(tie), 0, 0, np.zeros((n_p, n_p)), ())]
    nodes = 0
    while heap and nodes < max_nodes:
        bound, _, depth, k_in, F_in, chosen = heapq.heappop(heap)
        if bound >= inc_val * (1 - 1e-12):
            heap.clear()
            break
        nodes += 1
        if k_in == m:  # complete: F_in is the design itself
            inc_val, inc_set = bound, sorted(int(order[i]) for i in chosen)
            continue
        if depth == n_s:
            continue
        # branch: include sensor `depth`
        F_inc = F_in + Fo[depth]
        if k_in + 1 == m:
            b = _criterion_from_info(F_inc, criterion)
        else:
            b = bound_of(F_inc + suffix[depth + 1])
        if b < inc_val:
            heapq.heappush(heap, (b, next(tie), depth + 1, k_in + 1, F_inc, chosen + (depth,)))
        # branch: exclude sensor `depth` (needs enough sensors left)
        if k_in + (n_s - depth - 1) >= m:
            b = bound_of(F_in + suffix[depth + 1])
            if b < inc_val:
                heapq.heappush(heap, (b, next(tie), depth + 1, k_in, F_in, chosen))
    lower = min((h[0] for h in heap), default=inc_val)
    lower = min(lower, inc_val)
    gap = 0.0 if inc_val == 0 else max(0.0, (inc_val - lower) / inc_val)
    omega = np.zeros(n_s, bool)
    omega[inc_set] = True
    return SensorSelectionResult(omega=omega, criterion=criterion, value=inc_val,
                                 method="greedy+exchange+bnb", gap=gap, nodes=nodes, lower_bound=lower)
