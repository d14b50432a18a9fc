"""Agreement measures between model and reference: modes (MACXP, NDD) and FRFs (FRAC, CSF).

Seed paper 003 uses them to compare a machine-tool model with modal-test data:

* MACXP (Vacher et al. 2010), a modal assurance criterion for complex modes that also weighs
  the eigenvalues: with ``phi`` complex shapes and ``lam`` complex eigenvalues (``Re lam < 0``)

      num = ( |phi1^H phi2| / |conj(lam1) + lam2| + |phi1^T phi2| / |lam1 + lam2| )^2
      den = prod_k ( phi_k^H phi_k / (2 |Re lam_k|) + |phi_k^T phi_k| / (2 |lam_k|) )
      MACXP = num / den  in [0, 1]

  It is 1 for identical modes, 0 for shapes orthogonal in both the Hermitian and the plain
  product, and invariant to any complex scaling of either shape. A frequency or damping
  mismatch lowers it, which is why it also picks the matching mode.
* NDD (natural damping difference): ``(xi1 - xi2) / xi2``, relative to the reference damping
  ``xi2``; the GSA uses its square.
* FRAC (frequency response assurance criterion, Heylen & Lammens): shape correlation of two FRFs
  over frequency, ``|H1^H H2|^2 / ((H1^H H1)(H2^H H2))``; blind to a scale factor.
* CSF (cross signature scale factor): ``2 |H1^H H2| / (H1^H H1 + H2^H H2)``; also penalises a
  difference in amplitude.
"""

from __future__ import annotations

import numpy as np

__all__ = ["macxp", "macxp_matrix", "ndd", "frac", "csf", "summary_stats"]


def macxp(phi1: np.ndarray, lam1: complex, phi2: np.ndarray, lam2: complex) -> float:
    """MACXP of one mode pair (shapes of equal length, eigenvalues with negative real part)."""
    return float(macxp_matrix(np.asarray(phi1)[:, None], np.atleast_1d(lam1),
                              np.asarray(phi2)[:, None], np.atleast_1d(lam2))[0, 0])


def macxp_matrix(phi1: np.ndarray, lam1: np.ndarray, phi2: np.ndarray, lam2: np.ndarray) -> np.ndarray:
    """MACXP of every mode of set 1 (columns of ``phi1``) against every mode of set 2 -> (n1, n2)."""
    p1 = np.asarray(phi1, dtype=complex)
    p2 = np.asarray(phi2, dtype=complex)
    l1 = np.asarray(lam1, dtype=complex).ravel()
    l2 = np.asarray(lam2, dtype=complex).ravel()
    herm = np.abs(p1.conj().T @ p2)
    plain = np.abs(p1.T @ p2)
    s_h = np.abs(np.conj(l1)[:, None] + l2[None, :])
    s_p = np.abs(l1[:, None] + l2[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        num = (herm / s_h + plain / s_p) ** 2
        d1 = (np.sum(np.abs(p1) ** 2, axis=0) / (2 * np.abs(l1.real))
              + np.abs(np.sum(p1 * p1, axis=0)) / (2 * np.abs(l1)))
        d2 = (np.sum(np.abs(p2) ** 2, axis=0) / (2 * np.abs(l2.real))
              + np.abs(np.sum(p2 * p2, axis=0)) / (2 * np.abs(l2)))
        out = num / (d1[:, None] * d2[None, :])
    return np.nan_to_num(out, nan=0.0, posinf=0.0)


def ndd(xi_model: np.ndarray | float, xi_ref: np.ndarray | float) -> np.ndarray:
    """Natural damping difference ``(xi_model - xi_ref) / xi_ref`` (dimensionless)."""
    xm = np.asarray(xi_model, dtype=float)
    xr = np.asarray(xi_ref, dtype=float)
    return (xm - xr) / xr


def frac(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """FRAC of FRFs along the last axis (frequency); leading axes broadcast."""
    a = np.asarray(h1, dtype=complex)
    b = np.asarray(h2, dtype=complex)
    cross = np.abs(np.sum(a.conj() * b, axis=-1)) ** 2
    return cross / (np.sum(np.abs(a) ** 2, axis=-1) * np.sum(np.abs(b) ** 2, axis=-1))


def csf(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """Cross signature scale factor of FRFs along the last axis (frequency)."""
    a = np.asarray(h1, dtype=complex)
    b = np.asarray(h2, dtype=complex)
    cross = np.abs(np.sum(a.conj() * b, axis=-1))
    return 2 * cross / (np.sum(np.abs(a) ** 2, axis=-1) + np.sum(np.abs(b) ** 2, axis=-1))


def summary_stats(values: np.ndarray, higher_is_better: bool = True) -> dict[str, float]:
    """Worst, 5 % percentile (on the bad side), mean and median, as in the paper's Tables 2-5."""
    v = np.asarray(values, dtype=float).ravel()
    if higher_is_better:
        worst, p5 = float(v.min()), float(np.percentile(v, 5))
    else:
        worst, p5 = float(v.max()), float(np.percentile(v, 95))
    return {"worst": worst, "p5": p5, "mean": float(v.mean()), "median": float(np.median(v))}
