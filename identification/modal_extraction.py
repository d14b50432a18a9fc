"""Experimental modal analysis: poles, damping and complex mode shapes from measured FRFs.

Method: LSCF poles + LSFD residues (the two stages of the usual frequency-domain EMA).

1. **Poles - least-squares complex frequency (LSCF).** All FRFs share one denominator polynomial
   ``A(z) = sum_r a_r z^r`` in ``z = exp(j pi f / f_max)`` over the band (real coefficients, so the
   roots come in conjugate pairs); each FRF has its own numerator. The linearised error
   ``B_o(z) - H_o A(z)`` is minimised in least squares; the numerators are eliminated (reduced normal
   equations), so the system has only ``order + 1`` unknowns however many FRFs there are. The z-domain
   basis keeps it well conditioned at high orders, unlike a rational fraction in powers of ``j omega``.
2. **Pole selection.** The fit is repeated at several over-specified orders; a pole counts when it is
   stable (``Re s < 0``), inside the band, lightly damped (``xi < max_damping``) and reappears at the
   next order within 1 % in frequency and 20 % in damping (an automated stabilisation diagram). Of
   those, the ``n_modes`` with the largest modal peak (``max |r| / |Re lam|`` over the FRFs) are kept.
3. **Residues - least-squares frequency domain (LSFD).** With the poles fixed, every FRF is linear in
   its residues ``r_k`` (and ``conj(r_k)`` at the conjugate pole) plus a lower (``-1/omega^2``) and
   upper (constant) residual for modes outside the band: one real linear least-squares problem.
   For a force at reference ``i`` the residue column over the responses is proportional to the
   mode shape; per mode the reference that drives it hardest gives its shape.

Limits: receptance-type pole-residue model with viscous (complex) modes, which is what the
machine-tool model produces; modes that no reference excites, or two modes closer than the
frequency resolution, cannot be separated; the pole selection can mistake a noise pole for a mode
when the data are noisier than the requested modes are strong (check ``fit_error`` and the MACXP
of the identification). Accelerance or mobility input is converted to receptance first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ModalFit", "lscf_poles", "lsfd", "extract_modes", "synthesize"]


@dataclass
class ModalFit:
    """Modal parameters identified from FRFs (modes sorted by frequency)."""

    lam: np.ndarray  # complex poles, rad/s, Im > 0
    freq: np.ndarray  # undamped natural frequency |lam| / 2 pi, Hz
    xi: np.ndarray  # damping ratio -Re(lam) / |lam|
    shapes: np.ndarray  # (n_resp, n_modes) complex displacement shapes, largest entry 1
    residues: np.ndarray  # (n_ref, n_resp, n_modes) complex receptance residues, m/N/s
    lower: np.ndarray  # (n_ref, n_resp) lower residual (coefficient of -1/omega^2), 1/kg
    upper: np.ndarray  # (n_ref, n_resp) upper residual, m/N
    fit_error: float  # ||H - H_fit|| / ||H|| over the band (receptance)
    order: int  # the highest LSCF order that was used
    band: tuple[float, float]  # Hz


def _as_receptance(freq: np.ndarray, H: np.ndarray, kind: str) -> np.ndarray:
    jw = 2j * np.pi * freq
    if kind == "receptance":
        return H
    if kind == "mobility":
        return H / jw
    if kind == "accelerance":
        return H / jw**2
    raise ValueError("kind must be receptance, mobility or accelerance")


def lscf_poles(freq: np.ndarray, H: np.ndarray, order: int, f_max: float) -> np.ndarray:
    """All poles (rad/s) of a common-denominator LSCF fit of the FRFs ``H`` (n_frf, n_freq) at ``freq``.

    Each FRF is scaled to unit RMS first, so weak and strong responses count alike.
    """
    H = np.atleast_2d(H)
    H = H / np.sqrt(np.mean(np.abs(H) ** 2, axis=1, keepdims=True))
    ts = 0.5 / f_max  # the band maps onto the upper half of the unit circle
    z = np.exp(2j * np.pi * freq * ts)
    # with |z| = 1 every block of the normal equations is Toeplitz in (c - r): only the moments
    # sum_f w_f z_f^k for k = -p ... p are needed (one matrix product for all FRFs)
    k = np.arange(-order, order + 1)
    zk = z[:, None] ** k[None, :]  # (n_freq, 2p+1)
    idx = np.arange(order + 1)[None, :] - np.arange(order + 1)[:, None] + order  # c - r + p
    R = np.real(zk.sum(axis=0))[idx]
    S = -np.real(H @ zk)[:, idx]  # (n_frf, p+1, p+1)
    T = np.real((np.abs(H) ** 2) @ zk)[:, idx]
    M = np.sum(T, axis=0) - np.sum(np.transpose(S, (0, 2, 1)) @ np.linalg.solve(R, S), axis=0)
    a = np.linalg.solve(M[:order, :order], -M[:order, order])
    coeffs = np.append(a, 1.0)  # a_0 ... a_p, highest fixed to 1
    roots = np.roots(coeffs[::-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(roots.astype(complex)) / ts


def _physical(poles: np.ndarray, f_min: float, f_max: float, max_damping: float) -> np.ndarray:
    p = poles[np.isfinite(poles)]
    p = p[(p.imag > 0) & (p.real < 0)]
    w = np.abs(p)
    xi = -p.real / w
    keep = (w / (2 * np.pi) >= f_min) & (w / (2 * np.pi) <= f_max) & (xi < max_damping)
    return p[keep]


def lsfd(
    freq: np.ndarray, H: np.ndarray, lam: np.ndarray, residuals: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Residues of receptance FRFs ``H`` (n_frf, n_freq) for fixed poles ``lam`` (Im > 0).

    Returns ``(residues (n_frf, n_modes), lower (n_frf,), upper (n_frf,), H_fit (n_frf, n_freq))``.
    """
    H = np.atleast_2d(H)
    jw = 2j * np.pi * np.asarray(freq, dtype=float)
    lam = np.asarray(lam, dtype=complex)
    a = 1.0 / (jw[:, None] - lam[None, :])
    b = 1.0 / (jw[:, None] - lam.conj()[None, :])
    cols = [a + b, 1j * (a - b)]  # real and imaginary part of each residue
    if residuals:
        cols += [(1.0 / jw**2)[:, None], np.ones((jw.size, 1), dtype=complex)]
    B = np.hstack(cols)
    A = np.vstack([B.real, B.imag])
    rhs = np.vstack([H.T.real, H.T.imag])
    scale = np.linalg.norm(A, axis=0)
    sol = np.linalg.lstsq(A / scale, rhs, rcond=None)[0] / scale[:, None]
    n = lam.size
    res = (sol[:n] + 1j * sol[n : 2 * n]).T
    lower = sol[2 * n].copy() if residuals else np.zeros(H.shape[0])
    upper = sol[2 * n + 1].copy() if residuals else np.zeros(H.shape[0])
    return res, lower, upper, (B @ sol).T


def synthesize(fit: ModalFit, freq: np.ndarray, kind: str = "receptance") -> np.ndarray:
    """FRFs (n_ref, n_resp, n_freq) of the identified modal model (with residual terms)."""
    jw = 2j * np.pi * np.asarray(freq, dtype=float)
    r = fit.residues[..., None]
    lam = fit.lam[None, None, :, None]
    Hr = np.sum(r / (jw - lam) + r.conj() / (jw - lam.conj()), axis=2)
    Hr = Hr + fit.lower[..., None] / jw**2 + fit.upper[..., None]
    if kind == "receptance":
        return Hr
    return Hr * (jw if kind == "mobility" else jw**2)


def extract_modes(
    freq: np.ndarray,
    H: np.ndarray,
    n_modes: int,
    f_min: float,
    f_max: float,
    *,
    kind: str = "receptance",
    orders: tuple[int, ...] | None = None,
    max_damping: float = 0.2,
    freq_tol: float = 0.01,
    damping_tol: float = 0.2,
) -> ModalFit:
    """Modal parameters of ``n_modes`` modes in ``[f_min, f_max]`` Hz from FRFs (see module docstring).

    ``H``: (n_ref, n_resp, n_freq) or (n_resp, n_freq) for one reference, of ``kind``. ``orders``: the
    LSCF orders of the stabilisation check (default ``2 n_modes + 4 ... 2 n_modes + 28`` in steps of 4).
    Raises ValueError when fewer than ``n_modes`` admissible poles are found.
    """
    freq = np.asarray(freq, dtype=float)
    H = np.asarray(H, dtype=complex)
    if H.ndim == 2:
        H = H[None]
    n_ref, n_resp, _ = H.shape
    band = (freq >= f_min) & (freq <= f_max)
    if band.sum() < 4 * n_modes:
        raise ValueError(
            f"{band.sum()} frequency lines in {f_min:g}-{f_max:g} Hz: too few for {n_modes} modes"
        )
    f = freq[band]
    Hr = _as_receptance(f, H[..., band], kind).reshape(n_ref * n_resp, -1)
    use = np.sqrt(np.mean(np.abs(Hr) ** 2, axis=1)) > 0
    if orders is None:
        orders = tuple(range(2 * n_modes + 4, 2 * n_modes + 29, 4))
    sets = [_physical(lscf_poles(f, Hr[use], p, f[-1]), f_min, f_max, max_damping) for p in orders]
    stable = []
    for p, q in zip(sets[:-1], sets[1:], strict=True):
        for s in p:
            if q.size == 0:
                break
            k = np.argmin(np.abs(q - s))
            xi_p, xi_q = -s.real / abs(s), -q[k].real / abs(q[k])
            if abs(abs(q[k]) - abs(s)) <= freq_tol * abs(s) and abs(xi_q - xi_p) <= damping_tol * xi_p:
                stable.append(q[k])
    cand = _unique(np.array(stable), freq_tol / 2)
    if cand.size < n_modes:
        raise ValueError(f"only {cand.size} stable modes found in {f_min:g}-{f_max:g} Hz, {n_modes} asked")
    res, *_ = lsfd(f, Hr, cand)
    peak = np.max(np.abs(res) / np.sqrt(np.mean(np.abs(Hr) ** 2, axis=1))[:, None], axis=0) / np.abs(
        cand.real
    )
    lam = np.sort_complex(cand[np.sort(np.argsort(-peak)[:n_modes])])
    lam = lam[np.argsort(np.abs(lam))]
    res, lower, upper, Hfit = lsfd(f, Hr, lam)
    err = float(np.linalg.norm(Hfit - Hr) / np.linalg.norm(Hr))
    res = res.reshape(n_ref, n_resp, -1)
    best = np.argmax(np.linalg.norm(res, axis=1), axis=0)  # per mode, the reference driving it hardest
    shapes = res[best, :, np.arange(lam.size)].T
    piv = shapes[np.argmax(np.abs(shapes), axis=0), np.arange(lam.size)]
    w = np.abs(lam)
    return ModalFit(
        lam=lam,
        freq=w / (2 * np.pi),
        xi=-lam.real / w,
        shapes=shapes / piv,
        residues=res,
        lower=lower.reshape(n_ref, n_resp),
        upper=upper.reshape(n_ref, n_resp),
        fit_error=err,
        order=int(max(orders)),
        band=(float(f_min), float(f_max)),
    )


def _unique(poles: np.ndarray, tol: float) -> np.ndarray:
    """One pole per cluster (the last seen, i.e. from the highest order), clusters within ``tol``."""
    out: list[complex] = []
    for p in poles[::-1]:
        if all(abs(abs(p) - abs(q)) > tol * abs(p) for q in out):
            out.append(p)
    return np.array(out, dtype=complex)
