"""LSCF poles: the common-denominator least-squares complex-frequency fit of a set of FRFs, at one model order
or at every order of a stabilisation diagram (the method is step 1 of :mod:`modal_extraction`'s docstring).

The numerators are eliminated by projection and the denominator's least squares is solved on R factors,
never on normal equations (their condition number passes 1e10 at the high orders). Every FRF's rows are
brought to a triangle a block at a time; the first step of every order of a diagram comes from one QR per
FRF (:func:`_first_step_rs`). ``benchmarks/bench_lscf.py`` compares it with scipy's lstsq on all rows.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["lscf_poles", "lscf_pole_sets"]


def _reduced_r(X: np.ndarray, W: np.ndarray, H: np.ndarray) -> np.ndarray:
    """R factor (p+1, p+1) of the denominator-only least-squares problem (numerators eliminated).

    For FRF ``o`` the linearised error is ``W_o (X b_o - H_o X a)``; the best ``b_o`` for any ``a``
    leaves ``(I - P_o) W_o H_o X a`` with ``P_o`` the projector onto the span of ``W_o X``. The
    projection is done with Householder QR on the real-stacked columns, never by forming normal
    equations (which square a condition number that reaches 1e10 and more at the high orders). The
    rows of all FRFs are then reduced to one triangle a block at a time (each FRF's R factor, then the
    R factor of those stacked): the same least squares as all the rows, with each block's QR in cache
    (benchmarks/bench_lscf.py).
    """

    def real_rows_t(M: np.ndarray) -> np.ndarray:
        """(..., p+1, n_freq) complex, C-ordered -> (..., p+1, 2 n_freq) real: the transposed real rows,
        Re and Im of each line in turn (the order of rows changes no least squares), as a view."""
        return M.view(float)

    Xt = np.ascontiguousarray(X.T)  # then every product below is C-ordered, as the views need
    Yt = real_rows_t((W * H)[:, None, :] * Xt[None])  # (n_frf, p+1, 2 n_freq): each block F-ordered
    if np.allclose(W / W[:, :1], W[0] / W[0, 0]):  # weights differ only by a factor per FRF: one span
        Q = np.linalg.qr(real_rows_t(W[0][None, :] * Xt).T)[0]  # (2 n_freq, p+1)
        Zt = (Yt @ Q) @ Q.T
    else:
        Q = np.linalg.qr(np.swapaxes(real_rows_t(W[:, None, :] * Xt[None]), 1, 2))[0]  # (n_frf, 2n_freq, p+1)
        Zt = (Yt @ Q) @ np.swapaxes(Q, 1, 2)
    np.subtract(Yt, Zt, out=Zt)  # in place: a second array of this size costs more than the subtraction
    Rs = np.stack([_triangle(block.T) for block in Zt])  # block.T is F-ordered: QR'd in place, no copy
    return _triangle(Rs.reshape(-1, Zt.shape[1]))


def _triangle(A: np.ndarray) -> np.ndarray:
    """R (min(m, n), n) of the QR of ``A`` (m, n) by LAPACK's dgeqrf, in place when ``A`` is F-ordered."""
    m, n = A.shape
    lwork = int(scipy.linalg.lapack.dgeqrf_lwork(m, n)[0])
    qr, _, _, info = scipy.linalg.lapack.dgeqrf(A, lwork=lwork, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dgeqrf failed (info {info})")
    return np.triu(qr[: min(m, n)])


def _first_step_rs(X: np.ndarray, W: np.ndarray, H: np.ndarray, orders: list[int]) -> dict[int, np.ndarray]:
    """The R factor of every order's first step (weights ``W``, no denominator yet) from one QR per FRF.

    The first step's columns of order ``p`` are the first ``p + 1`` powers of ``z`` of the highest order,
    for the numerator (``W_o X``) and the denominator (``W_o H_o X``) alike. With the two interleaved
    (``N_0 D_0 N_1 D_1 ...``), every order's columns are the first ``2 (p + 1)`` of the highest order's,
    so the leading block of that one R factor is the R factor of order ``p`` (QR of a matrix's leading
    columns is the leading block of its QR). The numerators are eliminated on that small triangle: its
    numerator columns put first and reduced again, the denominator block of the result is the R factor
    of the projected denominator rows (what :func:`_reduced_r` builds from all the rows)."""
    top = max(orders)
    n_frf, n_freq = H.shape
    tops = []
    for w, wh in zip(W, W * H, strict=True):  # one FRF at a time: its rows, Re then Im, F-ordered for the QR
        real = np.empty((2 * n_freq, 2 * (top + 1)), order="F")
        for cols, M in ((slice(0, None, 2), w[:, None] * X), (slice(1, None, 2), wh[:, None] * X)):
            real[:n_freq, cols], real[n_freq:, cols] = M.real, M.imag
        tops.append(_triangle(real))
    out = {}
    for p in orders:
        k = p + 1
        cols = np.r_[0 : 2 * k : 2, 1 : 2 * k : 2]  # numerator columns first
        reduced = np.zeros((n_frf, k, k))  # rows the data do not fill (fewer lines than unknowns) stay 0
        for o, R in enumerate(tops):
            denominator = _triangle(np.asfortranarray(R[: 2 * k, cols]))[k:, k:]
            reduced[o, : len(denominator)] = denominator
        out[p] = _triangle(reduced.reshape(-1, k))
    return out


def lscf_poles(
    freq: np.ndarray,
    H: np.ndarray,
    order: int,
    f_max: float,
    weights: np.ndarray | None = None,
    iterations: int = 2,
) -> np.ndarray:
    """All poles (rad/s) of a common-denominator LSCF fit of the FRFs ``H`` (n_frf, n_freq) at ``freq``.

    Without ``weights`` each FRF is scaled to unit RMS, so weak and strong responses count alike;
    ``weights`` (n_frf, n_freq) or (n_freq,) multiply the linearised error instead (each FRF's
    weighted RMS scaled to 1). ``f_max``: top of the band (maps onto z = -1).
    ``iterations``: Sanathanan-Koerner steps: the linearised error ``B - H A`` is divided by the
    previous denominator, so it approaches the output error ``B / A - H``. Without them a weak mode
    beside a strong one is fitted with a badly biased damping that wanders from order to order (and
    whether it stabilises then hinges on round-off); with two steps it holds at every order.
    """
    return lscf_pole_sets(freq, H, [order], f_max, weights, iterations)[0]


def lscf_pole_sets(
    freq: np.ndarray,
    H: np.ndarray,
    orders: list[int] | tuple[int, ...],
    f_max: float,
    weights: np.ndarray | None = None,
    iterations: int = 2,
) -> list[np.ndarray]:
    """:func:`lscf_poles` at each of ``orders`` (a stabilisation diagram): the first step of all of them
    comes from one QR per FRF (:func:`_first_step_rs`), the Sanathanan-Koerner steps after it weigh each
    order by its own denominator."""
    H = np.atleast_2d(np.asarray(H, dtype=complex))
    if weights is None:
        W = np.ones(H.shape)
    else:
        W = np.broadcast_to(np.asarray(weights, dtype=float), H.shape)
    W = W / np.sqrt(np.mean(np.abs(W * H) ** 2, axis=1, keepdims=True))
    ts = 0.5 / f_max  # the band maps onto the upper half of the unit circle
    z = np.exp(2j * np.pi * freq * ts)
    orders = [int(p) for p in orders]
    if not orders:
        return []
    X_top = z[:, None] ** np.arange(max(orders) + 1)[None, :]  # (n_freq, p_max + 1)
    first = _first_step_rs(X_top, W, H, orders)
    out = []
    for order in orders:
        X = X_top[:, : order + 1]
        R, Wk = first[order], W
        for step in range(iterations + 1):
            if step:  # the same least squares as all the reduced rows, on p+1 rows
                R = _reduced_r(X, Wk, H)
            a = scipy.linalg.lstsq(R[:, :order], -R[:, order], lapack_driver="gelsy", check_finite=False)[0]
            coeffs = np.append(a, 1.0)  # a_0 ... a_p, highest fixed to 1
            if step < iterations:
                g = 1.0 / np.maximum(np.abs(X @ coeffs), np.finfo(float).tiny)
                Wk = W * (g / np.sqrt(np.mean(g**2)))[None, :]
        roots = np.roots(coeffs[::-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.log(roots.astype(complex)) / ts)
    return out
