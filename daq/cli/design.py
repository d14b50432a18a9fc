"""``hil design adjoint CONFIG``: the adjoint input design of an oscillator, pendulum or crane-adjoint config,
written as the trajectory file ``hil run`` pushes to the drive (CSV t [s], force [N] or torque [N*m]) plus
plots and a summary."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from daq.config.load import ConfigError


@click.group()
def design() -> None:
    """Design excitation signals for a rig config."""


@design.command("adjoint")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Folder for trajectory.csv and the plots (default: the folder of [plan].trajectory).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def adjoint(config_path: str, out_dir: str | None, as_json: bool) -> None:
    """Optimise the input by the adjoint method and write trajectory.csv, convergence.png, signal.png and
    information.png."""
    from daq.rigs import parse_config  # lazy: the registry loads every rig kind
    from daq.rigs.adjoint.config import INPUTS, OUTPUTS, PLANT_OF, AdjointRigConfig  # lazy: the rig kind
    from daq.rigs.adjoint.design import problem_of, run_design, write_trajectory  # lazy: scipy
    from daq.rigs.adjoint.plots import plot_design  # lazy: matplotlib
    from daq.rigs.config import load_config  # lazy: the registry loads every rig kind
    from identification.adjoint_design import evaluate  # lazy: scipy
    from identification.adjoint_plants import reference_inputs  # lazy: scipy

    raw = load_config(config_path)
    _, cfg = parse_config(raw, config_path)
    if not isinstance(cfg, AdjointRigConfig):
        raise ConfigError(f"rig kind {cfg.rig.kind!r} has no adjoint design (kinds: {', '.join(PLANT_OF)})",
                          config_path, "[rig].kind")
    folder = Path(out_dir) if out_dir else Path(cfg.plan.trajectory).parent
    res = run_design(cfg)
    pb = problem_of(cfg)
    refs = {k: v[:, 0] for k, v in reference_inputs(pb, cfg.adjoint.start).items()}
    stds = {"adjoint": res.std}
    for name, u in refs.items():
        stds[name] = _std(evaluate(pb, u[:, None], gradient=False).fisher)
    what, unit = INPUTS[cfg.adjoint.plant]
    traj = write_trajectory(folder / "trajectory.csv", res.dt, res.u[:, 0], f"{what} [{unit}]")
    files = [traj, *plot_design(res, refs, stds, folder, OUTPUTS[cfg.adjoint.plant][1], f"{what} [{unit}]")]
    scale = {c.index: c.scale for c in pb.end_conditions}
    names = list(pb.model.state_names)
    summary = {**res.to_dict(), "plant": cfg.adjoint.plant, "peak_force": float(np.abs(res.u).max()),
               "u_max": cfg.adjoint.u_max,
               "end_scaled": {k: abs(v) / scale[names.index(k)] for k, v in res.end_residuals.items()},
               "end_tol": cfg.adjoint.end_tol,
               "predicted_std": {name: dict(zip(res.param_names, np.asarray(s).tolist(), strict=True))
                                 for name, s in stds.items()},
               "files": [str(f) for f in files]}
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    click.echo(f"{cfg.adjoint.plant}: criterion {res.criterion}, {res.method}, {res.iterations} iterations "
               f"({res.n_evaluations} gradient solves, {res.time:.1f} s), "
               f"{'ok' if res.success else 'NOT MET'}: {res.message}")
    click.echo(f"peak {what} {summary['peak_force']:.4g} {unit} (|u| <= {cfg.adjoint.u_max:g} {unit}), "
               f"{res.u.shape[0]} samples of {res.dt:g} s")
    for name, s in stds.items():
        click.echo(f"predicted std ({name:>7}): " + ", ".join(
            f"{p} {v:.3g}" for p, v in zip(res.param_names, np.asarray(s), strict=True)))
    worst = max(summary["end_scaled"].values(), default=0.0)
    click.echo("end residuals: " + ", ".join(f"{k} {v:.3g}" for k, v in res.end_residuals.items())
               + f" (scaled max {worst:.3g}, tol {cfg.adjoint.end_tol:g})")
    click.echo(f"written: {', '.join(str(f) for f in files)}")


def _std(fisher: np.ndarray) -> np.ndarray:
    try:
        return np.sqrt(np.diag(np.linalg.inv(fisher)))
    except np.linalg.LinAlgError:
        return np.full(fisher.shape[0], np.inf)
