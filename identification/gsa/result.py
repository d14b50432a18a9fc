"""What an identification returns (:class:`GSAIdentificationResult`) and how the identified model compares
with modal data (:func:`evaluate_model`: MACXP, NDD, FRAC and CSF per position)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from identification.frequency.modal_metrics import csf, frac, macxp_matrix, ndd, summary_stats
from identification.gsa.intervals import GSAIntervals
from identification.gsa.reference import ModalReference
from identification.gsa.sobol import SobolResult


def evaluate_model(model, params: np.ndarray, reference: ModalReference, n_extra_modes: int = 4) -> dict:
    """Per position: MACXP and |NDD| of every reference mode (complex modal analysis, matched by
    MACXP) and FRAC/CSF of every reference FRF; plus the summary statistics over all positions."""
    per_pos = []
    for i, s in enumerate(reference.positions):
        cm = model.complex_modes(params, s, reference.n_modes + n_extra_modes)
        mx = macxp_matrix(cm.shapes, cm.lam, reference.shapes[i], reference.lam[i])
        match = np.argmax(mx, axis=0)
        mac = mx[match, np.arange(match.size)]
        nd = np.abs(ndd(cm.xi[match], reference.xi[i]))
        entry = {"position": s, "macxp": mac, "ndd": nd, "freq_model": cm.freq[match],
                 "freq_ref": np.abs(reference.lam[i]) / (2 * np.pi), "xi_model": cm.xi[match],
                 "xi_ref": reference.xi[i]}
        if reference.frf is not None and reference.freq is not None:
            Hm = np.array([model.frf(params, s, reference.freq, inp) for inp in reference.inputs])
            entry["frac"] = frac(Hm, reference.frf[i]).ravel()
            entry["csf"] = csf(Hm, reference.frf[i]).ravel()
        per_pos.append(entry)

    def cat(key):
        return np.concatenate([e[key] for e in per_pos]) if all(key in e for e in per_pos) else None

    table = {}
    for key, label, better in (("frac", "FRAC", True), ("csf", "CSF", True), ("macxp", "MACXP", True),
                               ("ndd", "NDD", False)):
        v = cat(key)
        if v is not None:
            table[label] = summary_stats(v, higher_is_better=better)
    return {"positions": per_pos, "table": table}



@dataclass
class GSAIdentificationResult:
    names: list[str]
    stiffness_names: list[str]
    damping_names: list[str]
    estimate: np.ndarray  # identified parameters (names order)
    start: np.ndarray  # the preliminary model
    lo: np.ndarray
    hi: np.ndarray
    sobol_macxp: SobolResult  # outputs: (position, mode) pairs, position-major
    sobol_ndd2: SobolResult
    pairs: list[tuple[int, int]]  # (position index, mode index) of each output row
    subproblems: list[dict]
    chosen_subproblem: dict[str, int | None]  # per stiffness parameter, index into subproblems
    spread: dict[str, float]  # std of the chosen subproblem, in units of the range
    damping_pairs: list[tuple[int, int]]
    identification: dict  # evaluate_model on the identification positions
    validation: dict | None  # ... on the held-back positions
    seconds: dict[str, float]
    n_evaluations: int
    truth: np.ndarray | None = None
    intervals: GSAIntervals | None = None  # standard errors, 95 % intervals, validity verdict
    #: (position, mode) pairs, least stiffness-sensitive NDD^2 first (the damping stage's order)
    damping_ranking: list[tuple[int, int]] = field(default_factory=list)

    def as_dict_params(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.names, self.estimate, strict=True)}

    def relative_deviation(self, truth: np.ndarray | None = None) -> np.ndarray | None:
        t = self.truth if truth is None else np.asarray(truth, dtype=float)
        return None if t is None else (self.estimate - t) / t

    def format_tables(self) -> str:
        lines = []
        for title, ev in (("identification positions", self.identification), ("validation", self.validation)):
            if not ev:
                continue
            pos = ", ".join(f"{1000 * e['position']:.0f}" for e in ev["positions"])
            lines.append(f"{title} (axis position {pos} mm), in %")
            cols = [c for c in ("FRAC", "CSF", "MACXP", "NDD") if c in ev["table"]]
            lines.append(f"  {'':<14}" + "".join(f"{c:>9}" for c in cols))
            for key, label in (("worst", "worst"), ("p5", "5 % pct"), ("mean", "mean"), ("median", "median")):
                lines.append(f"  {label:<14}" + "".join(f"{100 * ev['table'][c][key]:>9.2f}" for c in cols))
        dev = self.relative_deviation()
        if dev is not None:
            assert self.truth is not None  # dev is computed from it
            lines.append("parameter deviation from truth, % (and in interval std, where there is one)")
            std = self.intervals.std if self.intervals is not None else np.full(len(self.names), np.nan)
            for n, d, e, t, sd in zip(self.names, dev, self.estimate, self.truth, std, strict=True):
                z = f" {(e - t) / sd:>+7.2f} std" if np.isfinite(sd) and sd > 0 else ""
                lines.append(f"  {n:<10} {e:>12.4g} {100 * d:>+8.2f}{z}")
        if self.intervals is not None:
            lines.append(self.intervals.format_table())
        lines.append("wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def ev(e):
            if not e:
                return None
            return {"table": e["table"], "positions": [
                {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in p.items()}
                for p in e["positions"]]}

        dev = self.relative_deviation()  # None exactly when there is no truth
        return {
            "names": self.names,
            "estimate": self.as_dict_params(),
            "start": {n: float(v) for n, v in zip(self.names, self.start, strict=True)},
            "relative_deviation": None if dev is None else dict(zip(self.names, dev.tolist(), strict=True)),
            "sobol": {"pairs": [list(p) for p in self.pairs],
                      "macxp": {"S1": self.sobol_macxp.S1.tolist(), "ST": self.sobol_macxp.ST.tolist()},
                      "ndd2": {"S1": self.sobol_ndd2.S1.tolist(), "ST": self.sobol_ndd2.ST.tolist()}},
            "subproblems": [{"pair": [s["position"], s["mode"]],
                             "search": [self.names[j] for j in s["search"]],
                             "std": s["x"].std(axis=0).tolist(), "mean_cost": float(s["cost"].mean())}
                            for s in self.subproblems],
            "chosen_subproblem": self.chosen_subproblem,
            "damping_pairs": [list(p) for p in self.damping_pairs],
            "identification": ev(self.identification),
            "validation": ev(self.validation),
            "seconds": self.seconds,
            "n_evaluations": self.n_evaluations,
            "ci95": self.intervals.ci95() if self.intervals is not None else None,
            "adequacy": self.intervals.adequacy_dict() if self.intervals is not None else None,
            "intervals": self.intervals.to_dict() if self.intervals is not None else None,
        }


def fraction_within(result: GSAIdentificationResult, tol: float = 0.05, which: str = "stiffness") -> float:
    """Share of the (stiffness or damping) parameters within ``tol`` relative deviation of the truth."""
    dev = result.relative_deviation()
    if dev is None:
        return math.nan
    n_stiff = len(result.stiffness_names)
    d = dev[:n_stiff] if which == "stiffness" else dev[n_stiff:]
    return float(np.mean(np.abs(d) <= tol))
