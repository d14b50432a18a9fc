"""The adjoint rigs' rules beyond their tables (:func:`check_rig`), run by `hil check` and by `hil run`
before anything opens: the design model is built, the trajectory file read and held against ``[adjoint]``,
the fit's parameter names resolved against the analysis model, and the drive's files and the simulated drive
checked against the inputs.

A module of its own (not :mod:`~daq.rigs.adjoint.config`): it needs the design helpers
(:mod:`~daq.rigs.adjoint.design`), which import the config.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daq.config.load import ConfigError, Invalid
from daq.rigs.adjoint.config import AdjointRigConfig, Simulator
from daq.rigs.adjoint.design import nominal_values, nuisance_starts, problem_of, read_trajectory
from daq.rigs.drive import check_drive
from identification.models.drive_models import DEFAULT_BOUNDS


def check_rig(cfg: AdjointRigConfig, config_dir: Path) -> None:
    a = cfg.adjoint
    try:
        pb = problem_of(cfg)
    except ConfigError as exc:  # the design point ([adjoint.nominal])
        raise Invalid("adjoint.nominal", exc.what, table=True) from None
    except (KeyError, ValueError) as exc:
        raise Invalid("adjoint", f"the design model cannot be built: {exc}", table=True) from None
    _check_fit_names(cfg)
    design = cfg.plan.design
    if design == "adjoint":
        _check_trajectory(cfg, pb)
        inputs = [("adjoint.dt", a.dt, pb.n_samples)]
    elif design == "multisine":
        inputs = [_check_multisine(cfg)]
    else:
        inputs = [("adjoint.dt", a.dt, pb.n_samples)]
    simulated = (cfg.simulator or Simulator()).drive if cfg.rig.simulated else None
    assert cfg.devices is not None  # [devices] is required (the config's check)
    check_drive(cfg.devices.drive, simulated, inputs)


def _check_fit_names(cfg: AdjointRigConfig) -> None:
    """``[fit.nuisance]`` names the analysis model knows (oscillator and pendulum: its ODE model; the crane:
    the drive-model kit)."""
    plant = cfg.adjoint.plant
    values = nominal_values(cfg)
    nuisance = nuisance_starts(cfg, values)
    if plant == "crane":
        unknown = sorted(set(nuisance) - set(DEFAULT_BOUNDS))
        if unknown:
            raise Invalid(f"fit.nuisance.{unknown[0]}", f"not a parameter of the crane's drive models "
                                                        f"(known: {', '.join(sorted(DEFAULT_BOUNDS))})")
        return
    from identification.analyses.adjoint_plants import analysis_model  # lazy: scipy

    try:
        analysis_model(plant, {**values, **nuisance}, [*cfg.adjoint.parameters, *nuisance])
    except (KeyError, ValueError) as exc:
        raise Invalid("fit.nuisance", f"the analysis model cannot be built: {exc}", table=True) from None


def _check_trajectory(cfg: AdjointRigConfig, pb) -> None:
    """The designed input the run would push: shape, sample time and length of ``[adjoint]``, finite,
    within ``u_max`` and the drive's limit."""
    a = cfg.adjoint
    path = Path(cfg.plan.trajectory)
    if not path.exists():
        if not cfg.plan.design_if_missing:
            raise Invalid("plan.trajectory", f"{path} not found: run `hil design adjoint CONFIG` first, or "
                                             "set design_if_missing = true")
        return  # designed on the fly before the session starts
    try:
        dt, force = read_trajectory(path)
    except (OSError, ValueError) as exc:
        raise Invalid("plan.trajectory", f"not a trajectory file (t [s], force): {exc}") from None
    if abs(dt - a.dt) > 1e-9 * a.dt:
        raise Invalid("plan.trajectory", f"{path}: sample time {dt:g} s differs from [adjoint].dt = {a.dt:g} "
                                         "s; run `hil design adjoint` again")
    if force.size != pb.n_samples:
        raise Invalid("plan.trajectory", f"{path}: {force.size} samples, [adjoint] needs {pb.n_samples} "
                                         f"(t_f / dt); run `hil design adjoint` again")
    if not np.isfinite(force).all():
        raise Invalid("plan.trajectory", f"{path}: non-finite input values")
    peak = float(np.abs(force).max())
    assert cfg.devices is not None  # [devices] is required (the config's check)
    limit = min(a.u_max, cfg.devices.drive.torque_limit)
    if peak > limit * (1 + 1e-9):
        raise Invalid("plan.trajectory", f"{path}: peak {peak:.4g} exceeds u_max / the drive's torque_limit "
                                         f"({limit:.4g}); run `hil design adjoint` again")


def _check_multisine(cfg: AdjointRigConfig) -> tuple[str, float, int]:
    """The crane's multisine as comparison input: its grid fits the band, it lasts ``t_f``."""
    from identification.design.multisine import multisine_lines  # lazy: scipy

    if cfg.excitation is None:
        raise Invalid("plan.design", "'multisine' needs an [excitation] table")
    r = cfg.excitation.role("training")
    try:
        multisine_lines(r["f_min"], r["f_max"], r["n_lines"], r["dt"], r["grid"], r["odd_only"],
                        period=r["duration"] / r["n_periods"])
    except ValueError as exc:
        raise Invalid("excitation", f"training multisine: {exc}", table=True) from None
    n = round(r["duration"] / r["dt"])
    if abs(n * r["dt"] - cfg.adjoint.t_f) > 1e-9 * cfg.adjoint.t_f:
        raise Invalid("excitation.duration", f"the multisine lasts {n * r['dt']:g} s, [adjoint].t_f is "
                                             f"{cfg.adjoint.t_f:g} s: make them equal")
    return "excitation.dt", r["dt"], n
