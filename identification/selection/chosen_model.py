"""What the analysis reports about the chosen drive model: its intervals with the adequacy and time-step
checks, its profile likelihood, and its traces for the plots.

Both checks decide whether the intervals may be trusted: the validation residuals must be white and
independent of the input, and the model's time step must not move the estimate by more than one robust
standard deviation. The time step is checked against the same model on half the step (the measured
command is held over each sample, so halving the step of a held input is exact; the difference doubled is
the first-order estimate of the step's own error), whatever the step is - also at the data's own.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from identification.estimation.profile_likelihood import ProfileLikelihoodResult, profile_likelihood_intervals
from identification.estimation.residual_adequacy import IntervalReport, interval_report, residual_adequacy
from identification.estimation.tasks import map_tasks
from identification.models.drive_models import DEFAULT_BOUNDS, PARAM_UNITS, DriveStructure
from identification.models.drive_simulation import prepare_input, simulate
from identification.selection.fitting import _Problem, _Scaling, as_run, fit_structure, simulate_run

__all__ = ["chosen_intervals", "chosen_traces", "profile_chosen", "step_error"]


class Fitted(Protocol):
    """A fitted candidate: its structure and its parameter values (SI)."""

    structure: DriveStructure
    params: dict[str, float]


def step_error(structure: DriveStructure, params: dict[str, float], u: np.ndarray, dt: float, decimate: int,
               friction_eps: float, coarse: np.ndarray) -> np.ndarray:
    """Estimated error of the model output ``coarse`` (on the step ``decimate * dt``) against the model
    without time-step error.

    ``decimate > 1``: the same model on the data's step ``dt`` minus ``coarse`` is the reference (as before).
    ``decimate = 1``: the model on ``dt / 2`` (the held command repeated, which is exact), the difference
    doubled (first order: the held friction and the dead time's share of a step are first-order errors)."""
    if decimate > 1:
        fine = simulate(structure, params, prepare_input(u, dt, 1), sensitivities=False,
                        friction_eps=friction_eps).y[::decimate]
        factor = 1.0
    else:
        half = prepare_input(np.repeat(u, 2), 0.5 * dt, 1, speed_lag=0.5 * dt)  # the data's speed lag
        fine = simulate(structure, params, half, sensitivities=False, friction_eps=friction_eps).y[::2]
        factor = 2.0
    n = min(coarse.size, fine.size)
    return factor * (coarse[:n] - fine[:n])


def chosen_intervals(chosen: Fitted, train, valid, bounds, opts: dict, level: float = 0.95, lags: int = 25,
                     adequacy_step: float = 5e-4) -> IntervalReport:
    """Model-based and robust intervals of ``chosen`` (its training fit) with the adequacy check on the
    validation run and the time-step check (:func:`step_error`, at the estimate, on the training input).
    ``opts``: decimate, skip, friction_eps.

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
    yd = y[::dec][: inp.n_steps]
    prob = _Problem(s, inp, yd, sc, skip, eps)
    values = np.array([chosen.params[n] for n in names])
    res, _, S = prob._eval(sc.to_th(values))
    _, ymv, _ = simulate_run(s, chosen.params, uv, yv, dtv, dec, eps)
    ev = (ymv - yv[::dec][: ymv.size])[skip:]
    u_grid = prepare_input(uv, dtv, dec).held(0.0)[0][: ymv.size][skip:]
    stride = max(1, int(round(adequacy_step / (dec * dt))))
    adequacy = residual_adequacy(ev, u_grid, lags=lags, level=1.0 - level, stride=stride)
    model_out = res + yd[skip:][: res.size]  # the model output on its own step
    err = step_error(s, chosen.params, u, dt, dec, eps, np.concatenate([np.zeros(skip), model_out]))[skip:]
    ref = f"{1e3 * dt:.3g} ms" if dec > 1 else f"{1e3 * dt / 2:.3g} ms"
    note = f"model step {1e3 * dec * dt:.3g} ms (against {ref})"
    if dec > 1:
        note += "; fit with decimate = 1 for valid intervals"
    return interval_report(names, values, S, res, adequacy, level=level, units=PARAM_UNITS,
                           step_error=err, step_note=note)


def chosen_traces(chosen: Fitted, train, valid, decimate: int, friction_eps: float) -> dict:
    """``role -> (t, measured, model)`` of the chosen model on both runs, on its model step."""
    traces = {}
    for role, run in (("train", train), ("valid", valid)):
        u, y, dt = as_run(run)
        t, ym, _ = simulate_run(chosen.structure, chosen.params, u, y, dt, decimate, friction_eps)
        traces[role] = (t, y[::decimate][: t.size], ym)
    return traces


def _base_fit(args: tuple):
    """The chosen structure re-fitted from its estimate (the profiles' optimum; runs on the executor)."""
    s, (u, y, dt), bounds, opts, start = args
    return fit_structure(s, u, y, dt, bounds, n_starts=1, decimate=opts["decimate"], skip=opts["skip"],
                         friction_eps=opts["friction_eps"], max_nfev=opts["max_nfev"], start=start)


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


def profile_chosen(chosen: Fitted, train, bounds, opts: dict, n_grid: int = 9,
                   executor=None) -> ProfileLikelihoodResult:
    """Profile likelihood of every parameter of ``chosen`` on the training run.

    Traced from the optimum outwards (:mod:`identification.estimation.profile_likelihood`) with warm-started
    re-fits, at most ``n_grid`` steps per side plus one refinement of each crossing, until the 95 %
    likelihood-ratio threshold (chi-square, 1 dof; sigma^2 from the residuals of thousands of samples,
    so F(1, n-p) differs by < 0.1 %) is crossed or a bound is hit; Fisher intervals (normal quantile)
    from the sensitivity matrix at the optimum. The residuals are treated as white, so the intervals
    are as narrow as that assumption makes them.
    """
    u, y, dt = as_run(train)
    s = chosen.structure
    names = s.param_names
    # the optimum's re-fit runs on the executor too: this process then never loads the compiled simulation
    base = map_tasks(executor, _base_fit, [(s, (u, y, dt), bounds, opts, chosen.params)])[0]
    est = np.array([base.params[n] for n in names])
    n_p = base.S.shape[1]
    try:
        cov = base.sigma2 * np.linalg.inv(base.S.T @ base.S)
        se = np.sqrt(np.where(np.diag(cov) > 0, np.diag(cov), np.nan))
    except np.linalg.LinAlgError:
        se = np.full(n_p, np.nan)
    return profile_likelihood_intervals(
        _ProfileRefit(s, (u, y, dt), bounds, opts), est, [bounds[n] for n in names], base.cost, base.sigma2,
        names, fisher_se=se, max_steps=n_grid, refine=2, executor=executor)
