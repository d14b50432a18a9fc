"""``hil run``, ``hil analyze`` and ``hil sim press|crane``: the rig-level commands of the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import click

from daq.cli import ENV_STORE, CliState, main, pass_state, sim
from daq.config import load_config


def _device_errors() -> tuple[type[BaseException], ...]:
    from drivers.errors import DeviceError

    return (DeviceError,)


def _store_for(state: CliState, config: dict) -> Path:
    """--store, else $HIL_STORE, else the run config's [store].path."""
    if state.store_option:
        return Path(state.store_option)
    if os.environ.get(ENV_STORE):
        return Path(os.environ[ENV_STORE])
    return Path(config["store"]["path"])


@main.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--analyze", "then_analyze", is_flag=True, help="Analyse the session right after recording it.")
@click.option("--plots", "plots_dir", default=None, metavar="DIR", help="With --analyze: write plots here.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome (and analysis) as JSON.")
@pass_state
def run(state: CliState, config_path: str, then_analyze: bool, plots_dir: str | None, no_progress: bool,
        as_json: bool) -> None:
    """Run the experiment of a rig config and record one session (prints its id).

    A config with [rig] simulated = true starts its simulated rig on loopback first.
    Ctrl-C once finishes the current step and stops; twice stops at once. Both leave the rig safe.
    """
    config = load_config(config_path)
    store_path = _store_for(state, config)
    kind = config["rig"]["kind"]
    try:
        if kind == "press":
            from daq.press_experiment import run_press

            outcome = asyncio.run(run_press(config, str(store_path), show_progress=not no_progress))
            summary = {"session": outcome.session_id, "status": outcome.status, "reason": outcome.reason,
                       "setpoints": outcome.setpoints, "not_reached": outcome.not_reached,
                       "safe_state": outcome.safe, "store": str(store_path)}
        else:
            from daq.crane_experiment import run_crane
            from daq.store import SessionStore

            session_id = asyncio.run(run_crane(config, str(store_path)))
            with SessionStore(store_path) as store:
                info = store.get_session(session_id)
            summary = {"session": info.id, "status": info.status, "reason": info.reason,
                       "store": str(store_path)}
    except _device_errors() as exc:
        raise click.ClickException(f"device error: {exc}") from None
    analysis = None
    if then_analyze and summary["status"] == "complete":
        from daq.analysis import analyze_session
        from daq.store import SessionStore

        with SessionStore(store_path) as store:
            _, analysis = analyze_session(store, summary["session"], plots_dir=plots_dir,
                                          progress=None if as_json else _progress_printer())
    if as_json:
        click.echo(json.dumps({"run": summary, "analysis": analysis.to_dict() if analysis else None},
                              indent=2, default=float))
    else:
        click.echo(f"session {summary['session']} {summary['status']}"
                   + (f" ({summary['reason']})" if summary.get("reason") else "")
                   + f"  store {store_path}")
        if analysis is not None:
            click.echo(analysis.format_table())
            if plots_dir:
                click.echo(f"plots written to {plots_dir}")
    if summary["status"] != "complete":
        sys.exit(1)


@main.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.option("--plots", "plots_dir", default=None, metavar="DIR", help="Write plots (PNG) here.")
@pass_state
def analyze(state: CliState, session: str, as_json: bool, plots_dir: str | None) -> None:
    """Analyse a recorded session (id, unique prefix or "latest").

    Press: sensor selection table, then per friction model and split the model-uncertainty test.
    Crane: all 96 candidate models, identifiability figures, the chosen structure.
    """
    from daq.analysis import analyze_session

    with state.open_store() as store:
        info, result = analyze_session(store, session, plots_dir=plots_dir,
                                       progress=None if as_json else _progress_printer())
    if as_json:
        click.echo(json.dumps({"session": info.id, "kind": info.kind, **result.to_dict()}, indent=2,
                              default=float))
    else:
        click.echo(f"session {info.id} ({info.kind}, {info.status})")
        click.echo(result.format_table())
        if plots_dir:
            click.echo(f"plots written to {plots_dir}")


def _progress_printer():
    """A rich progress bar for long analyses, fed by (done, total, label) callbacks."""
    from rich.progress import Progress

    state: dict = {}

    def update(done: int, total: int, label: str = "") -> None:
        if "bar" not in state:
            state["bar"] = Progress(transient=True)
            state["task"] = state["bar"].add_task("analysis", total=total)
            state["bar"].start()
        state["bar"].update(state["task"], completed=done, description=label or "analysis")
        if done >= total:
            state["bar"].stop()

    return update


@sim.command("press")
@click.argument("config_path", metavar="[CONFIG]", required=False, default="configs/press-sim.toml",
                type=click.Path(dir_okay=False))
def sim_press(config_path: str) -> None:
    """Serve the simulated press (force source, sensors) on loopback until Ctrl-C."""
    from simulators.press_rig import serve_press

    load_config(config_path)  # one clear line for a malformed config
    _serve(serve_press(config_path))


@sim.command("crane")
@click.argument("config_path", metavar="[CONFIG]", required=False, default="configs/crane-sim.toml",
                type=click.Path(dir_okay=False))
def sim_crane(config_path: str) -> None:
    """Serve the simulated stacker-crane drive (OPC UA) on loopback until Ctrl-C."""
    from simulators.crane_rig import serve_crane

    load_config(config_path)
    _serve(serve_crane(config_path))


def _serve(coro) -> None:
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
