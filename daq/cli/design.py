"""``hil design adjoint CONFIG``: the adjoint input design of an oscillator, pendulum or crane-adjoint config,
written as the trajectory file ``hil run`` pushes to the drive (CSV t [s], force [N] or torque [N*m]) plus
plots and a summary."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from daq import json_codec
from daq.cli.common import CliState
from daq.config.load import ConfigError
from daq.rigs.analysis import analyze_session
from daq.rigs.config import load, session_config


@click.group()
def design() -> None:
    """Design excitation signals for a rig config."""


@design.command("adjoint")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Folder for trajectory.csv and the plots (default: the folder of [plan].trajectory).")
@click.option("--prior", "prior_session", default=None, metavar="SESSION",
              help="Design at an earlier session's estimate (same rig kind; id, unique prefix or latest): "
                   "its values over [adjoint.nominal]; its covariance is reported.")
@click.option("--prior-information", is_flag=True,
              help="With --prior: add the inverse of the session's covariance to the criterion's Fisher "
                   "matrix (the information of all runs together). A prior much tighter than one run "
                   "flattens the criterion; the convergence verdict still applies.")
@click.option("--strict", is_flag=True, help="Exit with code 1 when the design did not converge.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def adjoint(ctx: click.Context, config_path: str, out_dir: str | None, prior_session: str | None,
            prior_information: bool, strict: bool, as_json: bool) -> None:
    """Optimise the input by the adjoint method at the design point ([adjoint.nominal], or --prior) and
    write trajectory.csv, convergence.png, signal.png and information.png."""
    from daq.rigs.adjoint.config import INPUTS, OUTPUTS, PLANT_OF, AdjointRigConfig  # lazy: the rig kind
    from daq.rigs.adjoint.design import (  # lazy: as above (asyncua with it)
        compare_inputs,
        design_record_path,
        problem_of,
        run_design,
        worse_than_references,
        write_trajectory,
    )
    from daq.rigs.adjoint.plots import plot_design  # lazy: as above (matplotlib when it draws)
    from identification.analyses.adjoint_plants import reference_inputs  # lazy: scipy

    _, cfg = load(config_path)
    if not isinstance(cfg, AdjointRigConfig):
        raise ConfigError(f"rig kind {cfg.rig.kind!r} has no adjoint design (kinds: {', '.join(PLANT_OF)})",
                          config_path, "[rig].kind")
    prior = _prior(ctx, prior_session, cfg) if prior_session else None
    values = prior.values if prior else None
    if prior_information and prior is None:
        raise click.UsageError("--prior-information needs --prior SESSION")
    prior_fisher = prior.fisher_for(list(cfg.adjoint.parameters)) if prior and prior_information else None
    folder = Path(out_dir) if out_dir else Path(cfg.plan.trajectory).parent
    res = run_design(cfg, values, prior_fisher)
    pb = problem_of(cfg, values, prior_fisher)
    refs = {k: v[:, 0] for k, v in reference_inputs(pb, cfg.adjoint.start).items()}
    table = compare_inputs(cfg, pb, res.u[:, 0])
    stds = {name: np.array(list(row["std"].values())) for name, row in table.items()}
    worse = worse_than_references(table, cfg.adjoint.criterion)
    what, unit = INPUTS[cfg.adjoint.plant]
    traj = write_trajectory(folder / "trajectory.csv", res.dt, res.u[:, 0], f"{what} [{unit}]")
    files = [traj, *plot_design(res, refs, stds, folder, OUTPUTS[cfg.adjoint.plant][1], f"{what} [{unit}]")]
    scale = {c.index: c.scale for c in pb.end_conditions}
    names = list(pb.model.state_names)
    summary = {**res.to_dict(), "plant": cfg.adjoint.plant, "peak_force": float(np.abs(res.u).max()),
               "u_max": cfg.adjoint.u_max,
               "end_scaled": {k: abs(v) / scale[names.index(k)] for k, v in res.end_residuals.items()},
               "end_tol": cfg.adjoint.end_tol,
               "design_point": dict(zip(res.param_names, res.b.tolist(), strict=True)),
               "prior": prior.to_dict() if prior else None, "prior_information": prior_fisher is not None,
               "predicted_std": {name: row["std"] for name, row in table.items()},
               "criterion_value": {name: row["criterion"] for name, row in table.items()},
               "worse_than_reference": worse,
               "files": [str(f) for f in files]}
    record = design_record_path(traj)
    record.write_text(json_codec.dumps({k: v for k, v in summary.items() if k != "files"}, indent=1,
                                       default=str))
    summary["files"].append(str(record))
    if as_json:
        click.echo(json_codec.dumps(summary, indent=2, default=str))
    else:
        _print(cfg, res, summary, table, worse, prior, prior_fisher is not None, what, unit, files)
    if strict and not res.converged:
        raise click.exceptions.Exit(1)


def _prior(ctx: click.Context, session: str, cfg):
    """The prior of ``--prior SESSION``: its last online estimate, else its offline analysis."""
    from daq.rigs.adjoint.design import (  # lazy: the rig kind (asyncua with it)
        prior_from_analysis,
        prior_from_estimate,
    )

    state = ctx.find_object(CliState)
    assert state is not None  # hil's group made it
    with state.open_store() as store:
        info = store.get_session(session)
        if info.kind != cfg.rig.kind:
            raise ConfigError(f"--prior {session}: session {info.id} is a {info.kind!r} session, the config "
                              f"a {cfg.rig.kind!r} rig", None, "--prior")
        recorded = session_config(info.config, type(cfg), info.id)  # the snapshot, typed as the run was
        ests = [e.body for e in store.events(info.id, kind="estimate")
                if e.stream == f"{cfg.rig.kind}.online"]
        if ests:
            return prior_from_estimate(info.id, recorded, ests[-1])
        _, result, rig, _ = analyze_session(store, info.id)
        return prior_from_analysis(info.id, recorded, rig.report_dict(result))


def _print(cfg, res, summary, table, worse, prior, prior_info, what, unit, files) -> None:
    click.echo(f"{cfg.adjoint.plant}: criterion {res.criterion}, {res.method}, {res.iterations} iterations "
               f"({res.n_evaluations} gradient solves, {res.time:.1f} s), optimiser: {res.message}")
    click.echo(("ok: " if res.converged else "") + res.status)
    point = ", ".join(f"{p} {v:.6g}" for p, v in summary["design_point"].items())
    if prior is None:
        click.echo(f"design point ([adjoint.nominal]): {point}")
    else:
        std = "" if prior.covariance is None else ", ".join(
            f"{p} {v:.3g}" for p, v in zip(prior.names, np.sqrt(np.diag(prior.covariance)), strict=True))
        click.echo(f"design point (session {prior.session}, {prior.source}): {point}; "
                   + (f"its std {std}" if std else "no covariance")
                   + ("; counted as information already held" if prior_info else ""))
    click.echo(f"peak {what} {summary['peak_force']:.4g} {unit} (|u| <= {cfg.adjoint.u_max:g} {unit}), "
               f"{res.u.shape[0]} samples of {res.dt:g} s")
    click.echo(f"{'input':>9} {'criterion':>11}  predicted std" + (" (this run alone)" if prior_info else ""))
    for name, row in table.items():
        click.echo(f"{name:>9} {row['criterion']:>11.5g}  " + ", ".join(
            f"{p} {v:.3g}" for p, v in row["std"].items()))
    for line in worse:
        click.echo(line)
    worst = max(summary["end_scaled"].values(), default=0.0)
    click.echo("end residuals: " + ", ".join(f"{k} {v:.3g}" for k, v in res.end_residuals.items())
               + f" (scaled max {worst:.3g}, tol {cfg.adjoint.end_tol:g})")
    click.echo(f"written: {', '.join(str(f) for f in files)}")
