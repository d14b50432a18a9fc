"""The model against the reference modes: MACXP of undamped model modes, the stiffness stage's residual
vector, the light-damping rows of the damping stage, and assumption A1's offsets.

Every function takes a :class:`StageSetup`: the model, the reference it is compared with, and how many of
a parameter row's first entries are stiffness parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from identification.frequency.modal_metrics import ndd
from identification.gsa.reference import ModalReference


def _ref_terms(ref_shape: np.ndarray, ref_lam: np.ndarray) -> np.ndarray:
    """MACXP normaliser of the reference modes."""
    B = ref_shape
    return (np.sum(np.abs(B) ** 2, axis=0) / (2 * np.abs(ref_lam.real))
            + np.abs(np.sum(B * B, axis=0)) / (2 * np.abs(ref_lam)))


def stiffness_macxp(omega: np.ndarray, A: np.ndarray, B: np.ndarray, lam_ref: np.ndarray,
                     xi_ref: np.ndarray) -> np.ndarray:
    """MACXP (batch, model mode k, ref mode j) of real model shapes whose eigenvalue carries xi_ref_j.

    ``omega`` (b, nk) rad/s, ``A`` (b, n_obs, nk) real observed shapes, ``B`` (n_obs, nj) complex.
    """
    c = np.abs(np.einsum("bok,oj->bkj", A, B))
    u = -xi_ref + 1j * np.sqrt(1.0 - xi_ref ** 2)
    lam_m = omega[:, :, None] * u[None, None, :]
    s_h = np.abs(np.conj(lam_m) + lam_ref[None, None, :])
    s_p = np.abs(lam_m + lam_ref[None, None, :])
    a2 = np.sum(A * A, axis=1)  # (b, nk)
    w = omega[:, :, None]
    d1 = a2[:, :, None] * (1.0 / (2 * w * xi_ref[None, None, :]) + 1.0 / (2 * w))
    d2 = _ref_terms(B, lam_ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (c / s_h + c / s_p) ** 2 / (d1 * d2[None, None, :])
    return np.nan_to_num(out, nan=0.0, posinf=0.0)


class ModesAt(Protocol):
    """Complex modes at one axis position (e.g. ``machine_tool_model.ComplexModes``)."""

    lam: np.ndarray  # complex eigenvalues, rad/s
    freq: np.ndarray  # undamped natural frequencies, Hz
    xi: np.ndarray  # modal damping ratios
    shapes: np.ndarray  # complex shapes at the measured DOFs (n_obs, n_modes)


class ModalModel(Protocol):
    """What the identification asks of a position-dependent structural model (e.g.
    ``machine_tool_model.MachineTool``): the first ``n_stiff`` entries of a parameter row are stiffness."""

    def real_modes_batch(self, kmat: np.ndarray, s: float, n_modes: int) -> tuple[np.ndarray, np.ndarray]:
        """Undamped angular frequencies (b, n) and mass-normalised shapes (b, N, n) per stiffness row."""
        ...

    def observation(self, s: float) -> np.ndarray:
        """(n_obs, N) map from the model's DOFs to the measured ones."""
        ...

    def damping_parts(self, s: float) -> tuple[np.ndarray, np.ndarray]:
        """Known damping matrix C0 (N, N) and the unit matrices of the damping parameters (n_c, N, N)."""
        ...

    def complex_modes(self, params: np.ndarray, s: float, n_modes: int | None = None) -> ModesAt:
        """Modes with the full damping matrix at parameter row ``params``."""
        ...


@dataclass
class StageSetup:
    """Everything a worker needs to evaluate outputs (picklable): the model, the reference modes it is
    compared with, how many leading entries of a parameter row are stiffness, and how many model modes the
    matching looks at. Built once per identification (:meth:`of`); :meth:`at` points it at other modal data
    (the held-back positions) with the same model and mode count."""

    model: ModalModel
    positions: list[float]
    lam: list[np.ndarray]
    shapes: list[np.ndarray]
    xi: list[np.ndarray]
    n_stiff: int  # number of stiffness parameters (first columns of a parameter row)
    n_model_modes: int

    @classmethod
    def of(cls, model: ModalModel, reference: ModalReference, n_stiff: int, n_extra_modes: int) -> StageSetup:
        """The setup for ``reference``, matching among its modes plus ``n_extra_modes`` model modes."""
        return cls(model=model, positions=list(reference.positions), lam=reference.lam,
                   shapes=reference.shapes, xi=reference.xi, n_stiff=n_stiff,
                   n_model_modes=reference.n_modes + int(n_extra_modes))

    def at(self, reference: ModalReference) -> StageSetup:
        """The same model and mode count against other modal data."""
        return replace(self, positions=list(reference.positions), lam=reference.lam,
                       shapes=reference.shapes, xi=reference.xi)


def modal_outputs(setup: StageSetup, P: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MACXP and model damping of the matched modes for parameter rows P (b, n_params) at one position.

    Returns (macxp (b, nj), xi_model (b, nj), index of matched model mode (b, nj)).
    """
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(P[:, :setup.n_stiff], s, setup.n_model_modes)
    O = setup.model.observation(s)
    A = np.einsum("on,bnk->bok", O, Phi)
    mx = stiffness_macxp(omega, A, setup.shapes[pos], setup.lam[pos], setup.xi[pos])
    match = np.argmax(mx, axis=1)  # (b, nj)
    best = np.take_along_axis(mx, match[:, None, :], axis=1)[:, 0, :]
    C0, Uc = setup.model.damping_parts(s)
    Ph = np.take_along_axis(Phi, match[:, None, :], axis=2)  # (b, N, nj)
    w = np.take_along_axis(omega, match, axis=1)
    q0 = np.einsum("bik,ij,bjk->bk", Ph, C0, Ph, optimize=True)
    C = np.einsum("bn,nij->bij", P[:, setup.n_stiff:], Uc) if Uc.shape[0] else 0.0
    qc = np.einsum("bik,bij,bjk->bk", Ph, C, Ph, optimize=True)
    xi_m = (q0 + qc) / (2 * w)
    return best, xi_m, match


class GSAOutputs:
    """Picklable evaluator: rows -> [MACXP of all pairs, NDD^2 of all pairs] (position-major)."""

    def __init__(self, setup: StageSetup):
        self.setup = setup

    def __call__(self, X: np.ndarray) -> np.ndarray:
        mac, nd = [], []
        for i in range(len(self.setup.positions)):
            m, x, _ = modal_outputs(self.setup, X, i)
            mac.append(m)
            nd.append(ndd(x, self.setup.xi[i][None, :]) ** 2)
        return np.hstack(mac + nd)

def pair_macxp(setup: StageSetup, row: np.ndarray, pos: int, mode: int) -> float:
    """MACXP of reference mode ``mode`` at position ``pos`` with its best-matching model mode."""
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(row[None, :setup.n_stiff], s, setup.n_model_modes)
    A = setup.model.observation(s) @ Phi[0]
    B = setup.shapes[pos][:, mode:mode + 1]
    mx = stiffness_macxp(omega, A[None], B, setup.lam[pos][mode:mode + 1], setup.xi[pos][mode:mode + 1])
    return float(mx.max())

def damping_rows(setup: StageSetup, p: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per reference mode at one position: known damping xi0, factors Q (nj, n_c), matched MACXP."""
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_stiff], s, setup.n_model_modes)
    O = setup.model.observation(s)
    A = np.einsum("on,bnk->bok", O, Phi)
    mx = stiffness_macxp(omega, A, setup.shapes[pos], setup.lam[pos], setup.xi[pos])[0]
    match = np.argmax(mx, axis=0)
    Ph = Phi[0][:, match]
    w = omega[0][match]
    C0, Uc = setup.model.damping_parts(s)
    xi0 = np.einsum("ik,ij,jk->k", Ph, C0, Ph) / (2 * w)
    Q = np.einsum("ik,nij,jk->kn", Ph, Uc, Ph) / (2 * w[:, None])
    return xi0, Q, mx[match, np.arange(match.size)]

def shape_terms(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per column: the unit shape B, turned in phase to the real unit shape A and taken real, minus its
    projection on A -> (n_obs, n) (squares summing to 1 - MAC less the imaginary part no real shape fits)."""
    a = A / np.linalg.norm(A, axis=0)
    b = B / np.linalg.norm(B, axis=0)
    c = np.sum(a * b, axis=0)
    a = a * np.where(c.real < 0, -1.0, 1.0)  # eigenvector signs are arbitrary: point a along b
    c = np.sum(a * b, axis=0)
    u = (b * (np.conj(c) / np.where(np.abs(c) > 0, np.abs(c), 1.0))).real
    return u - a * np.sum(a * u, axis=0)


def modal_residual(setup: StageSetup, k_row: np.ndarray, match: list[np.ndarray] | None = None,
                    offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The stiffness stage's criterion as a smooth residual vector, at every position of ``setup``.

    Per reference mode: ``(omega_model - omega_ref) / (2 xi_ref omega_ref)`` (the weight the MACXP gives a
    frequency error), then :func:`shape_terms` of the matched real model shape and the reference shape.
    Per pair the squares sum to 1 - MACXP within a few per cent, without its floor from the imaginary part
    of the shapes; unlike ``sqrt(1 - MACXP)`` the vector is smooth at the optimum, which a Jacobian needs.
    Model modes are matched by MACXP unless ``match`` fixes them; ``offset`` (:func:`a1_offset`) is
    subtracted. Returns (residual, block label per entry: -1 frequency, k >= 0 the shape of pair k, matches).
    """
    rf, rs, lab, matches = [], [], [], []
    k = 0
    for i, s in enumerate(setup.positions):
        omega, Phi = setup.model.real_modes_batch(k_row[None, :setup.n_stiff], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        if match is None:
            mx = stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0]
            m = np.argmax(mx, axis=0)
        else:
            m = match[i]
        matches.append(m)
        w_ref = np.abs(setup.lam[i])
        rf.append((omega[0][m] - w_ref) / (2 * setup.xi[i] * w_ref))
        e = shape_terms(A[:, m], setup.shapes[i])
        for j in range(e.shape[1]):
            rs.append(e[:, j])
            lab.append(np.full(e.shape[0], k))
            k += 1
    r = np.concatenate(rf + rs)
    blocks = np.concatenate([np.full(sum(x.size for x in rf), -1)] + lab)
    return (r if offset is None else r - offset), blocks, matches


def a1_offset(setup: StageSetup, p: np.ndarray) -> np.ndarray:
    """What :func:`modal_residual` leaves at the right parameters: the model's undamped modes against the
    same model's damped modes at ``p`` (stiffness and damping), with the reference's weights.

    Assumption A1 (undamped shapes and frequencies for the stiffness stage) shifts the optimum by this
    residual's projection - in the reduced ideal case by up to about one std of a stiffness parameter.
    Subtracting it from the residual removes that shift to first order (the damping comes from the damping
    stage; it needs only be roughly right).
    """
    rf, rs = [], []
    for i, s in enumerate(setup.positions):
        omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_stiff], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        mx = stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0]
        m = np.argmax(mx, axis=0)
        cm = setup.model.complex_modes(p, s, setup.n_model_modes)
        kc = np.argmin(np.abs(cm.freq[None, :] - omega[0][m][:, None] / (2 * np.pi)), axis=1)
        w_ref = np.abs(setup.lam[i])
        rf.append((omega[0][m] - np.abs(cm.lam[kc])) / (2 * setup.xi[i] * w_ref))
        e = shape_terms(A[:, m], cm.shapes[:, kc])
        rs += [e[:, j] for j in range(e.shape[1])]
    return np.concatenate(rf + rs)


def a1_damping_shift(setup: StageSetup, p: np.ndarray) -> list[np.ndarray]:
    """Per position and reference mode: the model's damping ratio from its complex modes at ``p`` minus the
    light-damping formula's (``xi0 + Q c``, undamped shapes). Added to the formula's known part, it removes
    the formula's own error to first order (non-proportional damping, e.g. the coupling's, is where the
    formula is worst)."""
    out = []
    for i, s in enumerate(setup.positions):
        xi0, Q, _ = damping_rows(setup, p, i)
        omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_stiff], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        m = np.argmax(stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0], axis=0)
        cm = setup.model.complex_modes(p, s, setup.n_model_modes)
        kc = np.argmin(np.abs(cm.freq[None, :] - omega[0][m][:, None] / (2 * np.pi)), axis=1)
        out.append(cm.xi[kc] - (xi0 + Q @ p[setup.n_stiff:]))
    return out



def scaled_row(row: np.ndarray, cols, lo: np.ndarray, span: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A copy of the parameter row ``row`` with its ``cols`` at the scaled values ``x`` (box -> [0, 1])."""
    out = row.copy()
    out[cols] = lo[cols] + x * span[cols]
    return out


def residual_at(x: np.ndarray, setup: StageSetup, row: np.ndarray, cols, lo: np.ndarray, span: np.ndarray,
                match: list[np.ndarray] | None = None, offset: np.ndarray | None = None) -> np.ndarray:
    """:func:`modal_residual` with the ``cols`` of ``row`` at the scaled values ``x`` (for a Jacobian or a
    least-squares step in the fit's scaling)."""
    return modal_residual(setup, scaled_row(row, cols, lo, span, x), match, offset)[0]


@dataclass(frozen=True)
class ScaledEstimate:
    """An estimate in the fit's scaling (the box mapped to [0, 1]), and which parameters sit on a bound."""

    names: list[str]
    n_stiff: int
    est: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    span: np.ndarray
    x: np.ndarray
    at_bound: np.ndarray

    @classmethod
    def of(cls, names: list[str], n_stiff: int, estimate, lo, hi) -> ScaledEstimate:
        est = np.asarray(estimate, dtype=float)
        lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        x = (est - lo) / (hi - lo)
        return cls(names=names, n_stiff=n_stiff, est=est, lo=lo, hi=hi, span=hi - lo, x=x,
                   at_bound=(x <= 1e-6) | (x >= 1 - 1e-6))

    @property
    def damp_cols(self) -> np.ndarray:
        """The damping parameters' indices (after the stiffness)."""
        return self.n_stiff + np.arange(len(self.names) - self.n_stiff)

    def row(self, cols, x: np.ndarray) -> np.ndarray:
        """The estimate with its ``cols`` at the scaled values ``x``."""
        return scaled_row(self.est, cols, self.lo, self.span, x)
