"""Issue 21, item 5: every natural frequency and damping ratio comes with a standard deviation, checked
against the known answer over noise seeds."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from identification.frequency.modal_extraction import extract_modes

F_TRUE = np.array([41.0, 42.5, 75.0, 120.0, 185.0, 215.0, 262.0])  # Hz (as tests/test_modal_extraction.py)
XI_TRUE = np.array([0.010, 0.012, 0.018, 0.022, 0.040, 0.015, 0.020])


def _noisy(seed: int, noise: float = 0.01, n_ref: int = 2, n_resp: int = 8):
    rng = np.random.default_rng(seed)
    w = 2 * np.pi * F_TRUE
    lam = -XI_TRUE * w + 1j * w * np.sqrt(1 - XI_TRUE**2)
    shapes = rng.normal(size=(n_resp, lam.size)) + 0.05j * rng.normal(size=(n_resp, lam.size))
    q = 1.0 / (2j * lam.imag * 500.0)
    res = q[None, None, :] * shapes[:n_ref][:, None, :] * shapes[None, :, :]
    freq = np.arange(1, 513) * 0.5
    jw = 2j * np.pi * freq
    acc = np.sum(res[..., None] / (jw - lam[:, None]) + res.conj()[..., None] / (jw - lam.conj()[:, None]),
                 axis=2) * jw**2
    rms = np.sqrt(np.mean(np.abs(acc[..., (freq >= 10) & (freq <= 240)]) ** 2, axis=-1, keepdims=True))
    e = (rng.normal(size=acc.shape) + 1j * rng.normal(size=acc.shape)) / np.sqrt(2)
    return freq, acc + noise * rms * e


@pytest.mark.slow(reason="modal extraction of six noisy synthetic data sets")
def test_modal_intervals_against_the_known_answer():
    """Six seeds x five modes. The std is of the size of the actual error (the z-scores' RMS is ~1-2, not
    10), and the 95 % intervals hold most true values. Measured over 20 seeds: 80 % of the frequency and
    81 % of the damping intervals hold the truth - below 95 %, because the residual terms that stand in for
    the mode above the excited band (262 Hz) are a model error the noise-only std does not count; the
    report says the intervals are lower bounds."""
    zf, zx, inf, inx = [], [], [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for seed in range(6):
            freq, noisy = _noisy(seed)
            fit = extract_modes(freq, noisy, 5, 20.0, 200.0, kind="accelerance", fit_band=(10.0, 240.0))
            assert fit.freq_std is not None and np.all(fit.freq_std > 0) and np.all(fit.xi_std > 0)
            iv = fit.intervals(0.95)
            inf += list((iv["freq"][:, 0] <= F_TRUE[:5]) & (F_TRUE[:5] <= iv["freq"][:, 1]))
            inx += list((iv["xi"][:, 0] <= XI_TRUE[:5]) & (XI_TRUE[:5] <= iv["xi"][:, 1]))
            zf += list((fit.freq - F_TRUE[:5]) / fit.freq_std)
            zx += list((fit.xi - XI_TRUE[:5]) / fit.xi_std)
    rms_f, rms_x = np.sqrt(np.mean(np.square(zf))), np.sqrt(np.mean(np.square(zx)))
    print(f"coverage freq {np.mean(inf):.2f}, xi {np.mean(inx):.2f}; z rms freq {rms_f:.2f}, xi {rms_x:.2f}")
    assert np.mean(inf) >= 0.6 and np.mean(inx) >= 0.6
    assert rms_f < 3 and rms_x < 3
