"""Press analysis: normality check, sensor selection, and the model-uncertainty test for M1/M2/M3.

Entry point ``analyze_press(z, q, q_desired, sigmas, ...)`` works on plain arrays (as returned by
``daq.rigs.press.session.press_arrays``): z[series, setpoint, sensor] in m, actual forces q[series, setpoint]
in N (chronological: series in the order they were run), desired forces q_desired[setpoint] in N, sigmas in m.

Procedure (paper section 6):
1. Shapiro-Wilk on paired differences of repeated series (forces corrected with z * q_d / q first;
   setpoints with q_d = 0 are left out because the correction is undefined there).
2. Friction models M2/M3 are trained on ``train_series`` through the inverse model; the remaining
   ``test_series`` are used for all three models alike.
3. Sensor selection: A/D/E for every sensor combination with >= 2 sensors, covariance with the
   second-order term, M3 fitted to the training series with all sensors; the best 2-sensor set by
   ``criterion`` is used afterwards.
4. For each model and each split (Table 3 scenarios + optional random splits, one Bonferroni family):
   fit calibration and validation sets with the actual forces as inputs, alpha_min, verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from identification.design.sensor_selection import SensorSelectionResult, enumerate_sensor_sets
from identification.estimation.covariance import covariance_matrix, second_order_term
from identification.estimation.least_squares import FitResult, fit_state_model, state_sensitivities
from identification.models.press_models import OUTPUT_NAMES, P_NAMES, PressConstants, train_friction_models
from identification.selection.uncertainty_test import (
    NormalityRow,
    UncertaintyTestResult,
    press_scenarios,
    random_splits,
    run_uncertainty_test,
    shapiro_table,
)

SENSOR_NAMES = OUTPUT_NAMES  # the default column order (the simulated rig's config order)
MODEL_NAMES = ("M1", "M2", "M3")


@dataclass
class ModelReport:
    name: str
    description: str
    friction: dict
    fit_all: FitResult  # all test-series setpoints 2..n-1 with the chosen sensors
    test: UncertaintyTestResult
    friction_cov: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # of the trained coefficients

    @property
    def friction_model_size(self) -> int:
        """Number of friction coefficients trained on the training series."""
        return int(self.friction_cov.shape[0])

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "friction": self.friction,
            "friction_covariance": self.friction_cov.tolist(),
            "p": self.fit_all.p.tolist(), "covariance": self.fit_all.covariance.tolist(),
            "std_errors": self.fit_all.std_errors.tolist(), "s2": self.fit_all.s2,
            "reject": self.test.reject, "tests": self.test.to_dict()["tests"],
        }


@dataclass
class PressAnalysisResult:
    normality: list[NormalityRow]
    selection: SensorSelectionResult
    models: dict[str, ModelReport]
    train_series: list[int]
    test_series: list[int]
    tol: float
    sigmas: np.ndarray
    p_names: tuple[str, ...] = P_NAMES
    sensor_names: tuple[str, ...] = SENSOR_NAMES
    extra: dict = field(default_factory=dict)
    model_curves: dict[str, np.ndarray] = field(default_factory=dict)  # z_model[series, setpoint, sensor]

    def alpha_table(self) -> dict[str, dict[str, float]]:
        """alpha_min per model and split: {model: {split: alpha_min}}."""
        return {m: {t.name: t.alpha_min for t in r.test.tests} for m, r in self.models.items()}

    def to_dict(self) -> dict:
        """JSON-serialisable summary (SI units; parameters k5, k7 in N/m, covariances in (N/m)^2)."""
        return {
            "sensors": list(self.sensor_names),
            "sigmas_m": self.sigmas.tolist(),
            "parameters": list(self.p_names),
            "train_series": self.train_series,
            "test_series": self.test_series,
            "tol": self.tol,
            "normality": [r.to_dict() for r in self.normality],
            "sensor_selection": self.selection.to_dict(),
            "models": {k: v.to_dict() for k, v in self.models.items()},
            "verdicts": {k: ("reject" if v.test.reject else "keep") for k, v in self.models.items()},
        }

    def format_table(self) -> str:
        """Terminal text: normality, sensor selection, alpha_min per model and split, estimates."""
        lines = ["Shapiro-Wilk on paired differences of repeated series"]
        lines.append(f"  {'sensor':<14}{'W':>9}{'p-value %':>11}{'sigma [m]':>12}  normal")
        for nr in self.normality:
            lines.append(f"  {nr.sensor:<14}{nr.W:9.4f}{100 * nr.p_value:11.2f}{nr.sigma:12.3e}  {nr.normal}")
        sel = self.selection
        lines.append(f"\nSensor selection (criterion {sel.criterion}; C in (N/m)^2)")
        lines.append(f"  {'combination':<12}{'A':>12}{'D':>12}{'E':>12}")
        for row in sel.table:
            lines.append(f"  {row['combination']:<12}{row['A']:12.4e}{row['D']:12.4e}{row['E']:12.4e}")
        used = [n for n, w in zip(self.sensor_names, sel.omega, strict=True) if w]
        lines.append(f"  chosen: {sel.label} ({', '.join(used)})")
        first = next(iter(self.models.values()))
        level = first.test.tests[0].level if first.test.tests else float("nan")
        lines.append(f"\nModel-uncertainty test: alpha_min in %, Bonferroni level {100 * level:.3g} %")
        names = [t.name for t in first.test.tests]
        lines.append(f"  {'split':<24}" + "".join(f"{m:>12}" for m in self.models))
        for i, n in enumerate(names):
            cells = []
            for r in self.models.values():
                t = r.test.tests[i]
                cells.append(f"{100 * t.alpha_min:10.3g}{'*' if t.reject else ' '} ")
            lines.append(f"  {n:<24}" + "".join(cells))
        lines.append(f"  {'verdict':<24}" + "".join(
            f"{('reject' if r.test.reject else 'keep'):>12}" for r in self.models.values()))
        lines.append("  (* = rejected)")
        lines.append("\nEstimates on all test setpoints (k5, k7 in N/m; +- one standard error)")
        for r in self.models.values():
            p, se = r.fit_all.p, r.fit_all.std_errors
            lines.append(f"  {r.name}: k5 = {p[0]:.5e} +- {se[0]:.2e}, k7 = {p[1]:.5e} +- {se[1]:.2e}, "
                         f"RSS/dof = {r.fit_all.s2:.3g}")
        return "\n".join(lines)


def corrected_displacements(z: np.ndarray, q: np.ndarray, q_desired: np.ndarray) -> np.ndarray:
    """Paper's force correction z * q_d / q (left unchanged where q is ~0)."""
    q = np.asarray(q, float)
    qd = np.broadcast_to(np.asarray(q_desired, float), q.shape)
    ok = np.abs(q) > 1e-9 * max(np.abs(q).max(), 1.0)
    factor = np.where(ok, qd / np.where(ok, q, 1.0), 1.0)
    return np.asarray(z, float) * factor[..., None]


def _covariance_for_sensors(model, p, q_eff, z, sigmas, omega) -> np.ndarray:
    """Exact covariance (eq. 10 with S) at fixed p for a sensor subset (no re-fit)."""
    s = state_sensitivities(model, p, q_eff, second=True)
    om = np.asarray(omega, bool)
    r = ((z - s.h) / sigmas)[:, om].ravel()
    J = -(s.dh[:, om, :] / sigmas[om, None]).reshape(-1, p.size)
    assert s.d2h is not None  # state_sensitivities(second=True) computes it
    r_pp = -(s.d2h[:, om] / sigmas[om, None, None]).reshape(-1, p.size, p.size)
    if np.linalg.cond(J.T @ J) > 1e12:
        raise np.linalg.LinAlgError("information matrix numerically singular")
    C, H = covariance_matrix(J, None, second_order_term(r, np.ones(r.size), r_pp))
    return C


def _coefficient_sensitivity(model, fit: FitResult, q_eff: np.ndarray, X: np.ndarray, sigmas: np.ndarray,
                             omega: np.ndarray) -> np.ndarray:
    """dp/dc of a fit whose inputs are q_eff = q - X c (c: the friction model's coefficients).

    From the optimality condition J^T r = 0: dp/dc = -H^-1 J^T dr/dc with dr/dc = (dh/dq) X / sigma;
    dh/dq by a central difference of the model over 1 N.
    """
    om = np.asarray(omega, bool)
    if X.shape[-1] == 0:
        return np.zeros((fit.p.size, 0))
    dq = 1.0
    dhdq = (model.predict(fit.p, q_eff + dq) - model.predict(fit.p, q_eff - dq)) / (2 * dq)
    dr_dc = ((dhdq[:, om] / sigmas[om])[:, :, None] * X[:, None, :]).reshape(-1, X.shape[-1])
    return -np.linalg.solve(fit.H, fit.J.T @ dr_dc)


def analyze_press(
    z: np.ndarray,
    q: np.ndarray,
    q_desired: np.ndarray,
    sigmas: np.ndarray,
    *,
    train_series: list[int] | None = None,
    test_series: list[int] | None = None,
    tol: float = 0.05,
    criterion: str = "E",
    n_sensors: int = 2,
    n_random_splits: int = 0,
    seed: int = 0,
    constants: PressConstants | dict | None = None,
    p0: tuple[float, float] | np.ndarray = (1.8e8, 1.8e8),
    second_order: bool = True,
    compare: str = "difference",
    sensor_names: tuple[str, ...] = SENSOR_NAMES,
) -> PressAnalysisResult:
    """Run the whole press analysis; see the module docstring. Defaults: train on all but the last two
    series, test on the last two (for 6 series: train 0-3, test 4-5)."""
    z = np.asarray(z, float)
    q = np.asarray(q, float)
    sig = np.asarray(sigmas, float)
    n_series, n_q, n_s = z.shape
    names = tuple(sensor_names)
    if len(names) != n_s:
        raise ValueError(f"{n_s} sensor columns but {len(names)} sensor names {names}")
    if train_series is None:
        train_series = list(range(max(n_series - 2, 1)))
    if test_series is None:
        test_series = [i for i in range(n_series) if i not in train_series]
    if isinstance(constants, dict):
        constants = PressConstants.from_dict(constants)
    p0 = np.asarray(p0, float)

    loaded = np.asarray(q_desired, float) > 0  # the force correction is undefined at q_d = 0
    normality = shapiro_table(corrected_displacements(z, q, q_desired)[:, loaded], names)
    trained = train_friction_models(z, q, sig, train_series, constants=constants, p0=p0, outputs=names)
    model = trained.structure

    inner = np.arange(1, n_q - 1)  # setpoints 2..n-1 (1-based)
    tr = np.asarray(train_series)
    q_eff3 = q - trained.friction["M3"].friction(q)
    fit3 = fit_state_model(model, z[tr][:, inner].reshape(-1, n_s), q_eff3[tr][:, inner].ravel(), sig, p0,
                           bounds=(0.0, np.inf))
    zt, qt = z[tr][:, inner].reshape(-1, n_s), q_eff3[tr][:, inner].ravel()
    selection = enumerate_sensor_sets(lambda om: _covariance_for_sensors(model, fit3.p, qt, zt, sig, om),
                                      n_s, 2, criterion=criterion, n_sensors=min(n_sensors, n_s),
                                      sensor_names=names)
    omega = selection.omega

    splits = press_scenarios(n_q)
    if n_random_splits:
        splits.update(random_splits(n_q, n_random_splits, np.random.default_rng(seed)))
    ts = np.asarray(test_series)
    reports = {}
    curves: dict[str, np.ndarray] = {}  # model output at every recorded force, for the plots
    for name in MODEL_NAMES:
        fr = trained.friction[name]
        q_eff = q - fr.friction(q)

        def fit_idx(idx: np.ndarray, q_eff=q_eff) -> FitResult:
            return fit_state_model(model, z[ts][:, idx].reshape(-1, n_s), q_eff[ts][:, idx].ravel(), sig, p0,
                                   omega=omega, second_order=second_order, bounds=(0.0, np.inf))

        X = fr.features(q)  # friction = X @ coefficients, at every recorded force

        def fit_pc(idx: np.ndarray, fit_idx=fit_idx, q_eff=q_eff, X=X):
            f = fit_idx(idx)
            G = _coefficient_sensitivity(model, f, q_eff[ts][:, idx].ravel(),
                                         X[ts][:, idx].reshape(len(ts) * len(idx), X.shape[-1]), sig, omega)
            return f.p, f.covariance, G

        test = run_uncertainty_test(fit_pc, splits, tol, compare, nuisance_cov=fr.covariance)
        reports[name] = ModelReport(name=name, description=fr.description, friction=fr.to_dict(),
                                    fit_all=fit_idx(inner), test=test, friction_cov=np.asarray(fr.covariance))
        fitted = reports[name].fit_all.p
        curves[name] = model.predict(fitted, q_eff.ravel()).reshape(n_series, n_q, -1)
    return PressAnalysisResult(normality=normality, selection=selection, models=reports, sensor_names=names,
                               train_series=list(map(int, train_series)),
                               test_series=list(map(int, test_series)), tol=tol, sigmas=sig,
                               extra={"p_train_m1": trained.p_train_m1.tolist(),
                                      "p_selection_m3": fit3.p.tolist()},
                               model_curves=curves)
