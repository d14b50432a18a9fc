"""Experimental modal analysis: poles, damping and complex mode shapes from measured FRFs.

Method: LSCF poles + stabilisation diagram + LSFD residues (the usual frequency-domain EMA chain).

1. **Poles - least-squares complex frequency (LSCF).** All FRFs share one denominator polynomial
   ``A(z) = sum_r a_r z^r`` in ``z = exp(j pi f / f_top)`` over the fitted band (real coefficients,
   so the roots come in conjugate pairs); each FRF has its own numerator. The linearised error
   ``w (B_o(z) - H_o A(z))`` is minimised in least squares. The numerators are eliminated by
   projecting each FRF's rows onto the complement of its numerator basis (Householder QR), so the
   problem keeps only ``order + 1`` unknowns however many FRFs there are, and it is solved by QR
   too: forming the normal equations instead squares a condition number that passes 1e10 at the
   high orders, and then whether a weak mode stabilises depends on the BLAS build. Two
   Sanathanan-Koerner steps divide the error by the previous denominator, so the fit approaches the
   output error ``B / A - H``: a weak mode beside a strong one then keeps its damping at every order
   instead of being biased and wandering. The fit runs on the FRFs as measured (for accelerances
   from a flat-spectrum force the noise is about white, so no frequency is over-weighted), each FRF
   scaled to unit RMS; ``lscf_poles`` also takes weights per line (e.g. inverse H1 standard
   deviations from the coherence; on the simulated machine-tool sessions they changed nothing, so
   ``extract_modes`` does not use them).
2. **Stabilisation diagram.** The fit is repeated over a range of over-specified orders. Each pole
   of the top third of the orders starts a column followed down the orders while a pole within
   ``freq_tol`` in frequency and ``damping_tol`` (relative) in damping of it is there; a pole is
   *stable* when its column spans at least ``min_stable`` of the orders. A physical mode, once
   the order resolves it, holds at the higher orders; two close modes that the low orders merge
   into one pole, and noise poles that wander from order to order, make no such column.
   The pole map leaves ``headroom`` above the fitted band, so modes just beyond it get poles too.
   Of the stable poles inside ``[f_min, f_max]``, ``n_modes`` are chosen one at a time, each the
   one that lowers the LSFD residual most (a noise pole or a duplicate explains little). Stable
   poles outside ``[f_min, f_max]`` (by the same tolerances) stay in the model.
3. **Pole polishing.** The LSCF linearisation biases the damping of close modes when the data are
   noisy; the chosen poles are moved (within 1 % in frequency, a factor 2 in damping) to where
   the LSFD residual is smallest (variable projection, ``scipy.optimize.least_squares``).
4. **Residues - least-squares frequency domain (LSFD).** With the poles fixed, every FRF is linear
   in its residues ``r_k`` (and ``conj(r_k)`` at the conjugate pole) plus residual terms for the
   modes outside the band: lower ``1/(j omega)^2``, upper constant and ``(j omega)^2``; the
   out-of-band poles join as well (a mode just above the band is poorly described by a residual
   and bends the shapes of the highest reported modes). For a force at reference ``i`` the residue
   column over the responses is proportional to the mode shape; per mode the reference that
   drives it hardest gives its shape.

5. **Uncertainty of each pole.** The frequency and damping ratio of every reported mode get a standard
   deviation, the root sum of squares of two parts: the spread of the mode's pole over the orders of the
   stabilisation diagram (:func:`order_spread`: the model order is a modelling choice) and the FRF noise
   through the linearised fit of step 3 (:func:`pole_covariance`): the Jacobian of the
   variable-projection residual (residues and residual terms projected out, so their uncertainty is
   in it) in (relative frequency, log damping), with each FRF's own noise variance from its LSFD
   residual, as a sandwich ``(J^T J)^-1 J^T Sigma J (J^T J)^-1``. It counts the FRF noise only: a
   modal model that is not the structure's (non-viscous damping, leakage or bias of the FRF estimate,
   a mode merged with a neighbour) moves the damping beyond it, so an interval missing the truth on a
   simulated rig is a bias, not bad luck.

Limits: viscous (complex) modes, which the machine-tool model produces; modes that no reference
excites, or two modes closer than the frequency resolution, cannot be separated; a noise pole as
stable as the physical ones (very noisy data) can still be taken for a mode (check
``fit_error`` and ``support``). Accelerance or mobility residues are reported for receptance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from identification.frequency.lscf import lscf_pole_sets, lscf_poles

__all__ = ["ModalFit", "lscf_poles", "lscf_pole_sets", "lsfd", "extract_modes", "synthesize", "stable_poles",
           "refine_poles", "pole_covariance", "order_spread"]

_POWER = {"receptance": 0, "mobility": 1, "accelerance": 2}


@dataclass
class ModalFit:
    """Modal parameters identified from FRFs (modes sorted by frequency)."""

    lam: np.ndarray  # complex poles, rad/s, Im > 0
    freq: np.ndarray  # undamped natural frequency |lam| / 2 pi, Hz
    xi: np.ndarray  # damping ratio -Re(lam) / |lam|
    shapes: np.ndarray  # (n_resp, n_modes) complex displacement shapes, largest entry 1
    residues: np.ndarray  # (n_ref, n_resp, n_modes) complex receptance residues, m/N/s
    lower: np.ndarray  # (n_ref, n_resp) lower residual (coefficient of 1/(j omega)^2 in receptance), 1/kg
    upper: np.ndarray  # (n_ref, n_resp, 2) upper residual: constant (m/N) and (j omega)^2 coefficient
    fit_error: float  # ||H - H_fit|| / ||H|| over the fitted band, in the FRFs' own kind
    order: int  # the highest LSCF order that was used
    band: tuple[float, float]  # Hz, where modes are reported
    support: np.ndarray | None = None  # per mode: share of the other orders in which it reappears
    lam_out: np.ndarray | None = None  # stable poles outside the band but inside the fitted band
    residues_out: np.ndarray | None = None  # (n_ref, n_resp, n_out) their residues
    fit_band: tuple[float, float] | None = None  # Hz, the band the poles and residues were fitted in
    freq_std: np.ndarray | None = None  # Hz, std of each natural frequency (FRF noise, linearised fit)
    xi_std: np.ndarray | None = None  # std of each damping ratio (same)

    def intervals(self, level: float = 0.95) -> dict[str, np.ndarray]:
        """Normal ``level`` intervals (n_modes, 2) of ``freq`` and ``xi`` (the damping in log scale, so it
        stays positive); NaN where no std is known."""
        from scipy.stats import norm  # lazy: only with intervals

        z = float(norm.isf((1 - level) / 2))
        fs = np.full(self.freq.size, np.nan) if self.freq_std is None else self.freq_std
        xs = np.full(self.xi.size, np.nan) if self.xi_std is None else self.xi_std
        rel = xs / self.xi
        return {"freq": np.stack([self.freq - z * fs, self.freq + z * fs], axis=1),
                "xi": np.stack([self.xi * np.exp(-z * rel), self.xi * np.exp(z * rel)], axis=1)}


def _to_kind(freq: np.ndarray, H: np.ndarray, src: str, dst: str) -> np.ndarray:
    if src not in _POWER or dst not in _POWER:
        raise ValueError("kind must be receptance, mobility or accelerance")
    return H * (2j * np.pi * freq) ** (_POWER[dst] - _POWER[src])


def _physical(poles: np.ndarray, f_min: float, f_max: float, max_damping: float) -> np.ndarray:
    p = poles[np.isfinite(poles)]
    p = p[(p.imag > 0) & (p.real < 0)]
    w = np.abs(p)
    xi = -p.real / w
    keep = (w / (2 * np.pi) >= f_min) & (w / (2 * np.pi) <= f_max) & (xi < max_damping)
    return p[keep]


def stable_poles(
    pole_sets: list[np.ndarray],
    freq_tol: float = 0.005,
    damping_tol: float = 0.3,
    min_stable: float = 0.3,
    n_top: int | None = None,
    max_gap: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Poles that stay put from the highest model order downwards (an automated stabilisation diagram).

    ``pole_sets``: the physical poles of each order, lowest order first. Every pole of the ``n_top``
    highest orders (default: the top third; the very highest orders also fit noise and may lose a
    weak mode) starts a column that is followed down the orders, taking in each order the
    nearest pole within ``freq_tol`` (relative) in ``|lam|`` and ``damping_tol`` (relative) in
    damping of the starting pole; the column ends after more than ``max_gap`` orders in a row
    without one. A physical mode, once resolved, holds at every higher order; two close modes
    that the low orders merge into one pole, and noise poles, do not reach the top in one column.
    Columns holding poles of at least ``min_stable`` of the orders are kept (the longest of those
    that share a pole), each giving the median of its poles.
    Returns ``(poles, support)``, support = column length / number of orders, best first.
    """
    sets = [np.asarray(p, dtype=complex) for p in pole_sets]
    n_sets = len(sets)
    if n_sets < 2:
        raise ValueError("the stabilisation diagram needs at least two model orders")

    def close(p: complex, q: np.ndarray) -> np.ndarray:
        w, wq = abs(p), np.abs(q)
        xi, xq = -p.real / w, -q.real / wq
        return (np.abs(wq - w) <= freq_tol * w) & (np.abs(xq - xi) <= damping_tol * xi)

    n_top = max(3, n_sets // 3) if n_top is None else int(n_top)
    cols: list[tuple[float, complex]] = []
    for top in range(n_sets - 1, max(n_sets - 1 - n_top, 0) - 1, -1):
        for p in sets[top]:
            col, miss = [p], 0
            for j in range(top - 1, -1, -1):
                ok = np.flatnonzero(close(p, sets[j]))
                if ok.size == 0:
                    miss += 1
                    if miss > max_gap:
                        break
                    continue
                miss = 0
                col.append(sets[j][ok[np.argmin(np.abs(sets[j][ok] - p))]])
            c = np.array(col)
            cols.append((len(col) / n_sets, complex(np.median(c.real), np.median(c.imag))))
    poles: list[complex] = []
    sup: list[float] = []
    for length, p in sorted(cols, key=lambda c: -c[0]):
        if length < min_stable:
            break
        if poles and np.any(close(p, np.array(poles))):
            continue  # the same mode, seen from another of the top orders
        poles.append(p)
        sup.append(length)
    return np.array(poles, dtype=complex), np.array(sup)


def _basis(freq: np.ndarray, lam: np.ndarray, power: int, residuals: bool) -> np.ndarray:
    """LSFD design matrix (n_freq, 2 n_modes [+3]) for receptance residues, FRFs of ``power``."""
    jw = 2j * np.pi * np.asarray(freq, dtype=float)
    a = 1.0 / (jw[:, None] - lam[None, :])
    b = 1.0 / (jw[:, None] - lam.conj()[None, :])
    cols = [a + b, 1j * (a - b)]  # real and imaginary part of each residue
    if residuals:
        w_top = np.abs(jw).max()
        cols += [(1.0 / jw**2)[:, None], np.ones((jw.size, 1), dtype=complex), ((jw / w_top) ** 2)[:, None]]
    return np.hstack(cols) * (jw**power)[:, None]


def lsfd(
    freq: np.ndarray,
    H: np.ndarray,
    lam: np.ndarray,
    residuals: bool = True,
    kind: str = "receptance",
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Receptance residues of FRFs ``H`` (n_frf, n_freq) of ``kind`` for fixed poles ``lam`` (Im > 0).

    The error is taken on ``H`` as given (optionally times ``weights`` (n_freq,)), so white noise
    on accelerances is fitted as white. Returns ``(residues (n_frf, n_modes), lower (n_frf,),
    upper (n_frf, 2), H_fit (n_frf, n_freq))``; ``upper`` holds the constant (m/N) and the
    coefficient of ``(omega / omega_top)^2`` (m/N) of the receptance.
    """
    H = np.atleast_2d(np.asarray(H, dtype=complex))
    lam = np.asarray(lam, dtype=complex).ravel()
    B = _basis(freq, lam, _POWER[kind], residuals)
    w = np.ones(B.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    Bw = B * w[:, None]
    A = np.vstack([Bw.real, Bw.imag])
    rhs = np.vstack([(H.T * w[:, None]).real, (H.T * w[:, None]).imag])
    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1.0
    sol = scipy.linalg.lstsq(A / scale, rhs, lapack_driver="gelsy", check_finite=False)[0] / scale[:, None]
    n = lam.size
    res = (sol[:n] + 1j * sol[n : 2 * n]).T
    if residuals:
        lower, upper = sol[2 * n].copy(), sol[2 * n + 1 : 2 * n + 3].T.copy()
        upper[:, 1] = -upper[:, 1]  # (j w / w_top)^2 = -(w / w_top)^2
    else:
        lower, upper = np.zeros(H.shape[0]), np.zeros((H.shape[0], 2))
    return res, lower, upper, (B @ sol).T


def _forward_select(
    freq: np.ndarray, H: np.ndarray, cand: np.ndarray, fixed: np.ndarray, n_modes: int, kind: str
) -> list[int]:
    """Indices of ``n_modes`` candidate poles chosen one at a time, each the one that lowers the LSFD
    residual most (with the ``fixed`` poles and the residual terms always in). A duplicate of a pole
    already chosen, or a noise pole, explains little and is passed over."""
    chosen: list[int] = []
    for _ in range(n_modes):
        best = -1
        best_err: float | np.floating = np.inf
        for i in range(cand.size):
            if i in chosen:
                continue
            lam = np.concatenate([cand[chosen + [i]], fixed])
            err = np.linalg.norm(lsfd(freq, H, lam, kind=kind)[3] - H)
            if err < best_err:
                best, best_err = i, err
        chosen.append(best)
    return chosen


def refine_poles(
    freq: np.ndarray, H: np.ndarray, lam: np.ndarray, fixed: np.ndarray, kind: str, max_shift: float = 0.01
) -> np.ndarray:
    """Poles ``lam`` polished by nonlinear least squares on the LSFD residual (variable projection).

    The LSCF linearisation biases poles when the data are noisy, most visibly the damping of close
    modes; here each pole moves to where the residues' best fit of ``H`` is best, with the ``fixed``
    (out-of-band) poles and residual terms in the model. Frequencies stay within ``max_shift``
    (relative) and damping within a factor 2 of the start, so a pole cannot wander to another mode.
    """
    lam = np.asarray(lam, dtype=complex)
    w0, xi0 = np.abs(lam), -lam.real / np.abs(lam)
    x0 = np.concatenate([np.ones(lam.size), np.log(xi0)])

    def poles(x):
        w = w0 * x[: lam.size]
        xi = np.exp(x[lam.size :])
        return -xi * w + 1j * w * np.sqrt(1 - xi**2)

    def resid(x):
        d = lsfd(freq, H, np.concatenate([poles(x), fixed]), kind=kind)[3] - H
        return np.concatenate([d.real.ravel(), d.imag.ravel()])

    lo = np.concatenate([np.full(lam.size, 1 - max_shift), np.log(xi0 / 2)])
    hi = np.concatenate([np.full(lam.size, 1 + max_shift), np.log(np.minimum(2 * xi0, 0.99))])
    sol = scipy.optimize.least_squares(resid, x0, bounds=(lo, hi), diff_step=1e-6, x_scale="jac", max_nfev=30)
    return poles(sol.x)


def pole_covariance(freq: np.ndarray, H: np.ndarray, lam: np.ndarray, fixed: np.ndarray, kind: str,
                    rel_step: float = 1e-6, var: np.ndarray | None = None,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standard deviations of the natural frequencies (Hz) and damping ratios of the poles ``lam``
    fitted to ``H`` (n_frf, n_freq) with the ``fixed`` poles, and the covariance of (relative
    frequency, log damping) per pole (2 n, 2 n).

    Linearised variable projection: ``r(x) = H - LSFD fit`` with the residues eliminated, ``J = dr/dx``
    by central differences. The noise variance of each FRF is its residual RMS^2 scaled by
    n_lines / (n_lines - its linear unknowns - its share of the poles' unknowns); the covariance is the
    sandwich ``(J^T J)^-1 J^T diag(s^2) J (J^T J)^-1``, the rows of one FRF sharing its variance.
    ``var`` (n_frf, n_freq): the FRFs' own noise variance per line (``E|dH|^2``, e.g. from
    :func:`identification.frequency.frf_estimation.lpm_periodic`) replaces the flat one; where an FRF's
    residual is larger than that variance predicts (a model error), its lines are scaled up to the residual.
    """
    lam = np.asarray(lam, dtype=complex)
    n = lam.size
    H = np.atleast_2d(np.asarray(H, dtype=complex))
    w0, xi0 = np.abs(lam), -lam.real / np.abs(lam)

    def poles(x):
        w = w0 * x[:n]
        xi = np.exp(x[n:])
        return -xi * w + 1j * w * np.sqrt(1 - xi**2)

    def resid(x):
        d = lsfd(freq, H, np.concatenate([poles(x), fixed]), kind=kind)[3] - H
        return d

    x0 = np.concatenate([np.ones(n), np.log(xi0)])
    r0 = resid(x0)
    cols = []
    for k in range(2 * n):
        e = np.zeros(2 * n)
        e[k] = rel_step
        d = (resid(x0 + e) - resid(x0 - e)) / (2 * rel_step)
        cols.append(np.concatenate([d.real.ravel(), d.imag.ravel()]))
    J = np.stack(cols, axis=1)
    n_frf, n_f = r0.shape
    n_lin = 2 * (n + np.asarray(fixed).size) + 3  # real unknowns of one FRF's LSFD fit
    dof = max(2 * n_f - n_lin - 2 * n / n_frf, 1.0)
    s2 = np.sum(np.abs(r0) ** 2, axis=1) / dof  # per FRF, real and imaginary part together
    if var is None:
        line = np.repeat(s2, n_f).reshape(n_frf, n_f)
    else:
        line = np.asarray(var, dtype=float).reshape(n_frf, n_f) / 2  # per real component
        line = line * np.maximum(1.0, s2 / np.maximum(line.mean(axis=1), np.finfo(float).tiny))[:, None]
    var_rows = np.concatenate([line.ravel(), line.ravel()])
    d = np.linalg.norm(J, axis=0)
    d = np.where(d > 0, d, 1.0)
    try:
        A = np.linalg.inv((J / d).T @ (J / d)) / np.outer(d, d)
    except np.linalg.LinAlgError:
        nan = np.full(n, np.nan)
        return nan, nan, np.full((2 * n, 2 * n), np.nan)
    meat = (J * var_rows[:, None]).T @ J
    C = A @ meat @ A
    C = 0.5 * (C + C.T)
    v = np.clip(np.diag(C), 0.0, None)
    return w0 / (2 * np.pi) * np.sqrt(v[:n]), xi0 * np.sqrt(v[n:]), C


def order_spread(sets: list[np.ndarray], lam: np.ndarray, freq_tol: float = 0.005,
                 damping_tol: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """Spread (std, Hz and damping ratio) of each pole of ``lam`` over the stabilisation diagram's orders:
    per order the pole nearest to it within the stability tolerances; fewer than 3 such orders give 0.

    How much a mode moves when the model order changes is a part of its uncertainty that the noise does
    not show (the order is a modelling choice; a mode beside a close one or at the band edge moves most).
    """
    fs, xs = np.zeros(lam.size), np.zeros(lam.size)
    for k, p in enumerate(np.asarray(lam, dtype=complex)):
        fp, xp = np.abs(p), -p.real / np.abs(p)
        hit_f, hit_x = [], []
        for q in sets:
            if q.size == 0:
                continue
            fq, xq = np.abs(q), -q.real / np.abs(q)
            ok = (np.abs(fq - fp) <= freq_tol * fp) & (np.abs(xq - xp) <= damping_tol * xp)
            if ok.any():
                j = np.flatnonzero(ok)[np.argmin(np.abs(fq[ok] - fp))]
                hit_f.append(fq[j] / (2 * np.pi))
                hit_x.append(xq[j])
        if len(hit_f) >= 3:
            fs[k], xs[k] = np.std(hit_f, ddof=1), np.std(hit_x, ddof=1)
    return fs, xs


def _var_to_kind(f: np.ndarray, var: np.ndarray, band: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Per-line FRF variances (n_ref, n_resp, n_freq) or (n_resp, n_freq), cut to ``band`` (at ``f``) and
    converted from ``src`` to ``dst`` kind, as (n_frf, n_lines)."""
    V = np.asarray(var, dtype=float)
    V = (V[None] if V.ndim == 2 else V)[..., band]
    V = V * np.abs(2 * np.pi * f) ** (2 * (_POWER[dst] - _POWER[src]))
    return V.reshape(-1, f.size)


def synthesize(fit: ModalFit, freq: np.ndarray, kind: str = "receptance") -> np.ndarray:
    """FRFs (n_ref, n_resp, n_freq) of the identified modal model (with out-of-band poles and residuals)."""
    jw = 2j * np.pi * np.asarray(freq, dtype=float)
    lam, r = fit.lam, fit.residues
    if fit.lam_out is not None and fit.lam_out.size:
        lam = np.concatenate([lam, fit.lam_out])
        r = np.concatenate([r, fit.residues_out], axis=-1)
    rr = r[..., None]
    lm = lam[None, None, :, None]
    Hr = np.sum(rr / (jw - lm) + rr.conj() / (jw - lm.conj()), axis=2)
    w_top = 2 * np.pi * (fit.fit_band or fit.band)[1]
    w = np.abs(jw)
    Hr = Hr + fit.lower[..., None] / jw**2 + fit.upper[..., 0, None]
    Hr = Hr + fit.upper[..., 1, None] * (w / w_top) ** 2
    return _to_kind(np.asarray(freq, dtype=float), Hr, "receptance", kind)


def extract_modes(
    freq: np.ndarray,
    H: np.ndarray,
    n_modes: int,
    f_min: float,
    f_max: float,
    *,
    kind: str = "receptance",
    fit_band: tuple[float, float] | None = None,
    orders: tuple[int, ...] | None = None,
    max_damping: float = 0.2,
    freq_tol: float = 0.005,
    damping_tol: float = 0.3,
    min_stable: float = 0.3,
    fit_kind: str | None = None,
    headroom: float = 1.25,
    refine: bool = True,
    frf_var: np.ndarray | None = None,
) -> ModalFit:
    """Modal parameters of ``n_modes`` modes in ``[f_min, f_max]`` Hz from FRFs (see module docstring).

    ``H``: (n_ref, n_resp, n_freq) or (n_resp, n_freq) for one reference, of ``kind``. ``fit_band``:
    where poles and residues are fitted (default: the reporting band; give the excited band, which
    should reach beyond it, so modes just outside are fitted instead of lumped into residuals).
    ``orders``: the LSCF orders of the stabilisation diagram (default ``2 n_modes + 4`` to
    ``2 n_modes + 42`` in steps of 2). Raises ValueError when fewer than ``n_modes`` stable modes
    lie in the band. ``frf_var`` (shape of ``H``): the FRFs' noise variance per line, carried into the
    poles' standard deviations (:func:`pole_covariance`).
    """
    freq = np.asarray(freq, dtype=float)
    H = np.asarray(H, dtype=complex)
    if H.ndim == 2:
        H = H[None]
    n_ref, n_resp, _ = H.shape
    lo, hi = (f_min, f_max) if fit_band is None else (min(fit_band[0], f_min), max(fit_band[1], f_max))
    fb = (freq >= lo) & (freq <= hi) & (freq > 0)
    if ((freq >= f_min) & (freq <= f_max)).sum() < 4 * n_modes:
        raise ValueError(f"too few frequency lines in {f_min:g}-{f_max:g} Hz for {n_modes} modes")
    f = freq[fb]
    fit_kind = kind if fit_kind is None else fit_kind
    Hk = _to_kind(f, H[..., fb], kind, fit_kind).reshape(n_ref * n_resp, -1)
    use = np.sqrt(np.mean(np.abs(Hk) ** 2, axis=1)) > 0
    if orders is None:
        orders = tuple(range(2 * n_modes + 4, 2 * n_modes + 43, 2))
    top = f[-1] * headroom  # room above the band for the poles of modes just beyond it
    sets = [_physical(poles, lo, top, max_damping) for poles in lscf_pole_sets(f, Hk[use], orders, top)]
    cand, support = stable_poles(sets, freq_tol, damping_tol, min_stable)
    fc = np.abs(cand) / (2 * np.pi)
    inside = (fc >= f_min) & (fc <= f_max)
    if inside.sum() < n_modes:
        raise ValueError(
            f"only {int(inside.sum())} stable modes found in {f_min:g}-{f_max:g} Hz, {n_modes} asked"
        )
    cand, support = cand[inside], support[inside]
    # modes outside the reported band join the LSFD model; with the reweighted LSCF their damping holds too
    lam_out, _ = stable_poles(sets, freq_tol, damping_tol, min_stable)
    fo = np.abs(lam_out) / (2 * np.pi)
    lam_out = lam_out[(fo < f_min) | (fo > f_max)]
    lam_out = lam_out[np.argsort(np.abs(lam_out))]
    pick = _forward_select(f, Hk, cand, lam_out, n_modes, fit_kind)
    lam, sup = cand[pick], support[pick]
    order = np.argsort(np.abs(lam))
    lam, sup = lam[order], sup[order]
    if refine:
        lam = refine_poles(f, Hk, lam, lam_out, fit_kind)
    res, lower, upper, Hfit = lsfd(f, Hk, np.concatenate([lam, lam_out]), kind=fit_kind)
    err = float(np.linalg.norm(Hfit - Hk) / np.linalg.norm(Hk))
    Vk = None if frf_var is None else _var_to_kind(f, frf_var, fb, kind, fit_kind)[use]
    f_std, xi_std, _ = pole_covariance(f, Hk[use], lam, lam_out, fit_kind, var=Vk)
    f_sp, xi_sp = order_spread(sets, lam, freq_tol, damping_tol)
    f_std, xi_std = np.hypot(f_std, f_sp), np.hypot(xi_std, xi_sp)
    res = res.reshape(n_ref, n_resp, -1)
    res, res_out = res[..., : lam.size], res[..., lam.size :]
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
        upper=upper.reshape(n_ref, n_resp, 2),
        fit_error=err,
        order=int(max(orders)),
        band=(float(f_min), float(f_max)),
        support=sup,
        lam_out=lam_out,
        residues_out=res_out,
        fit_band=(float(f[0]), float(f[-1])),
        freq_std=f_std,
        xi_std=xi_std,
    )
