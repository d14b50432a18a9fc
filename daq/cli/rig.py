"""The rig-level commands: ``hil run``, ``analyze``, ``check``, ``rigs``, ``sim``, ``ctl``.

They know no rig kind: everything kind-specific comes from the registry (:mod:`daq.rigs`). Output
rule: with ``--json`` stdout carries only JSON; progress and logs go to stderr.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import cast

import click
import zmq

from daq import json_codec
from daq.cli.common import (
    KEYS_HELP,
    CliState,
    checked_keys,
    client_keys,
    echo_json,
    pass_state,
    positive_seconds,
    progress_printer,
    rig_process,
)
from daq.config.load import ConfigError, store_path_for, to_dict
from daq.lab.analysis import analysis_record
from daq.lab.live import start_live
from daq.lab.local_analyses import record_analysis
from daq.lab.reader import LabReader, NotStored
from daq.lab.replicate import push_after_run
from daq.rigs import check_rules, get_rig, kinds
from daq.rigs.analysis import analyze_session
from daq.rigs.config import load, refuse_sim_speed_early, with_sim_speed
from daq.store.read_write import SessionStore


def _load(config_path: str):
    """The config parsed once, into its rig kind's struct: ``(rig, cfg)``."""
    return load(config_path)


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--analyze", "then_analyze", is_flag=True, help="Analyse the session right after recording it.")
@click.option("--plots", "plots_dir", default=None, metavar="DIR", help="With --analyze: write plots here.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome (and analysis) as JSON on stdout.")
@click.option("--dry-run", is_flag=True,
              help="Connect and read every device and walk the whole plan, but hold every command: each is "
                   "checked against its limits and recorded, none is sent (docs/dry-run.md).")
@click.option("--sim-speed", type=float, default=None, metavar="X",
              help="A simulated rig only: run the plan and every simulated device X times faster than real "
                   "time (recorded times are simulated seconds; default: [simulator] speed, else 1).")
@pass_state
def run(state: CliState, config_path: str, then_analyze: bool, plots_dir: str | None, no_progress: bool,
        as_json: bool, dry_run: bool, sim_speed: float | None) -> None:
    """Run the experiment of a rig config and record one session.

    A config with [rig] simulated = true starts its simulated rig on loopback first. Ctrl-C once
    finishes the current step and stops; twice stops at once, and so do SIGTERM (a service manager,
    `docker stop`) and SIGHUP (the terminal closed). All leave the rig safe. Operators can also stop or
    pause the run from another terminal with `hil ctl`. With --dry-run nothing is written to a device.
    """
    if plots_dir is not None and not then_analyze:
        raise click.ClickException("--plots needs --analyze (plots come from the analysis)")
    refuse_sim_speed_early(config_path, sim_speed)  # a real rig's template: one line, nothing built or opened
    rig, cfg = _load(config_path)  # a config refused here has loaded none of the run machinery
    cfg = with_sim_speed(cfg, sim_speed, config_path)
    from daq.run.control import operator_name  # lazy: the whole run machinery and the rigs
    from daq.run.lifecycle import run as run_rig  # lazy: as above
    if (dry_run or cfg.rig.dry_run) and then_analyze:
        raise click.ClickException("--analyze needs a real run: a dry run moves nothing to analyse")
    store_path = store_path_for(state.store_option, cfg)
    rig_process()
    result = asyncio.run(run_rig(cfg, store_path, file=config_path, show_progress=not no_progress,
                                 started_by=operator_name(), dry_run=dry_run,
                                 on_session=lambda sid: start_live(store_path, sid, cfg)))  # [lab]: streamed
    analysis = None
    files: list[Path] = []
    try:  # the analysis first, so that the push carries it; the push whatever the analysis does
        if then_analyze and result.status == "complete" and rig.has_analysis:
            with SessionStore(store_path) as store:
                _, analysis, rig, files = analyze_session(store, result.session_id, plots_dir=plots_dir,
                                                          progress=progress_printer())
            record = analysis_record(rig, analysis, "rig", operator_name())
            _keep_on_rig(store_path, result.session_id, record)
    finally:
        push_after_run(store_path, cfg)  # [lab]: replicate in the background, never waited for
    if as_json:
        echo_json({"run": result.to_dict(), "analysis": rig.report_dict(analysis) if analysis else None,
                    "plots": [str(f) for f in files]})
    else:
        held = result.summary.get("dry_run")
        click.echo(f"session {result.session_id} {result.status}"
                   + (f" ({result.reason})" if result.reason else "")
                   + (f" (dry run: {held['commands_held']} commands held, none sent)" if held else "")
                   + f"  store {store_path}")
        if analysis is not None:
            click.echo(rig.report_text(analysis))
            if files:
                click.echo(f"plots written to {plots_dir}")
    if not result.safe:
        click.secho("WARNING: the rig's safe state was NOT confirmed: " + "; ".join(result.safe_errors)
                    + "\nCheck the machine before anyone approaches it.", err=True, fg="red", bold=True)
        sys.exit(2)
    if result.status != "complete":
        sys.exit(1)


@click.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.option("--plots", "plots_dir", default=None, metavar="DIR", help="Write plots (PNG) here.")
@pass_state
def analyze(state: CliState, session: str, as_json: bool, plots_dir: str | None) -> None:
    """Analyse a recorded session (id, unique prefix or "latest") with its rig kind's analysis."""
    from daq.run.control import operator_name  # lazy: the run machinery (who runs this command)

    with state.open_store() as store:
        info, result, rig, files = analyze_session(store, session, plots_dir=plots_dir,
                                                   progress=progress_printer())
        record = analysis_record(rig, result, "lab" if state.is_lab else "rig", operator_name())
        if as_json:  # the report first: a lab that does not take the result still shows it
            echo_json({"session": info.id, "kind": info.kind, **rig.report_dict(result),
                       "plots": [str(f) for f in files]})
        else:
            click.echo(f"session {info.id} ({info.kind}, {info.status})")
            click.echo(rig.report_text(result))
            if files:
                click.echo(f"plots written to {plots_dir}")
        if state.is_lab:  # the estimates, intervals and verdicts go into the lab session's metadata
            assert isinstance(store, LabReader)  # is_lab
            try:
                store.record_analysis(info.id, record)
            except NotStored as exc:
                click.echo(str(exc), err=True)
    if not state.is_lab:  # kept in the store: the next push hands it to the lab (docs/lab.md)
        _keep_on_rig(state.store_path, info.id, record)


def _keep_on_rig(store_path, session_id: str, record: dict) -> None:
    """Keep an analysis in the local store for the lab; a store that cannot take it is a warning."""
    try:
        record_analysis(store_path, session_id, record)
    except (OSError, sqlite3.Error) as exc:
        click.echo(f"warning: the analysis is not kept for the lab ({store_path}: {exc})", err=True)


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the checked config as JSON.")
def check(config_path: str, as_json: bool) -> None:
    """Check a rig config whole (types, ranges, unknown keys, relations, the rig's own rules) without
    running anything."""
    rig, cfg = _load(config_path)
    check_rules(rig, cfg, config_path)
    if as_json:
        echo_json({"ok": True, "kind": rig.kind, "config": to_dict(cfg)})
    else:
        click.echo(f"{config_path}: ok ({rig.kind}{', simulated' if cfg.rig.simulated else ''})")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--offline-after", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True,
              metavar="SECONDS", help="With --store URL: a rig whose last heartbeat is older is offline.")
@pass_state
def rigs(state: CliState, as_json: bool, offline_after: float) -> None:
    """List the rig kinds this installation knows; with --store URL (a lab), the lab's rigs and their
    states (idle, running, offline), queues and locks."""
    if state.is_lab:
        from daq.cli.lab_rigs import list_lab_rigs  # lazy: tiled's client only for a lab

        list_lab_rigs(state, as_json, offline_after)
        return
    table = [{"kind": k, "summary": get_rig(k).summary, "simulator": get_rig(k).has_simulator,
              "analysis": get_rig(k).has_analysis} for k in kinds()]
    if as_json:
        echo_json(table)
        return
    for row in table:
        sim = "simulated+real" if row["simulator"] else "real only"
        click.echo(f"{row['kind']:<14}{sim:<16}{row['summary']}")


@click.command()
@click.argument("kind")
@click.argument("config_path", metavar="[CONFIG]", required=False, default=None,
                type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the device table as JSON (one object).")
def sim(kind: str, config_path: str | None, as_json: bool) -> None:
    """Serve a rig kind's simulated devices on loopback until Ctrl-C or SIGTERM (CONFIG: default
    configs/<KIND>-sim.toml)."""
    rig = get_rig(kind)
    config_path = config_path or f"configs/{kind}-sim.toml"
    cfg_rig, cfg = _load(config_path)
    if cfg_rig.kind != rig.kind:
        raise ConfigError(f"is a {cfg_rig.kind!r} config, not a {rig.kind!r} one", config_path, "[rig].kind")
    if not rig.has_simulator:
        raise ConfigError(f"rig kind {rig.kind!r} has no simulator", config_path, "[rig].kind")
    rig_process()
    asyncio.run(_serve(rig, cfg, config_path, as_json))
    click.echo("stopped", err=True)


async def _serve(rig, cfg, config_path: str, as_json: bool) -> None:
    """Serve until Ctrl-C or SIGTERM, then power the devices off. The handlers are the loop's own, so a
    shell that started this in the background (SIGINT ignored) or a service manager (SIGTERM) stop it the
    same clean way a terminal's Ctrl-C does."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    simulated = rig.simulator(cfg)
    await simulated.start()
    try:
        table = rig.describe_simulator(simulated)
        if table is None:
            table = describe_devices(to_dict(rig.simulated_devices(simulated, cfg)), config_path)
        if as_json:
            click.echo(json_codec.dumps({"kind": rig.kind, "config": config_path, "devices": table}), nl=True)
        else:
            click.echo(f"{rig.kind} simulator from {config_path}; Ctrl-C to stop", err=True)
            for row in table:
                click.echo("  ".join(f"{k}={v}" for k, v in row.items()))
        sys.stdout.flush()
        await stop.wait()
    finally:
        await simulated.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def describe_devices(device_cfg: dict, config_path: str) -> list[dict]:
    """Per device: protocol, address, unit id, and where its register map is written down."""
    rows = []

    def add(name: str, d: dict, table: str) -> None:
        proto = d.get("protocol", "?")
        address = d.get("url") or f"{d.get('host', '127.0.0.1')}:{d.get('port')}"
        row = {"device": name, "protocol": proto, "address": address}
        if proto.startswith("modbus"):
            row["unit_id"] = d.get("device_id", 1)
            row["register_map"] = f"{config_path} [{table}.registers]"
        elif proto == "serial":
            row["commands"] = (f"{d.get('query', 'MEAS?')} / {d.get('id_query', 'ID?')} "
                               f"({config_path} [{table}])")
        rows.append(row)

    for name, d in device_cfg.items():
        if name == "sensors":
            for sname, sd in d.items():
                add(sname, sd, f"devices.sensors.{sname}")
        elif isinstance(d, dict):
            add(name, d, f"devices.{name}")
    return rows


@click.command()
@click.argument("action", type=click.Choice(["status", "pause", "resume", "stop", "abort", "lock", "unlock"]))
@click.option("--session", default=None, help="Which running session (default: the only one running).")
@click.option("--endpoint", default=None,
              help="Command endpoint of the run (default: from the store's runs/).")
@click.option("--timeout", type=float, default=3.0, show_default=True, callback=positive_seconds,
              help="Seconds to wait for the connection and for the reply.")
@click.option("--keys", "keys_dir", default=None, metavar="DIR", help=KEYS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the reply as JSON.")
@click.option("--note", default=None, help="lock: why the rig is locked (shown to everyone refused).")
@click.option("--serve", "serve_url", default=None, metavar="URL",
              help="lock/unlock: the rig's hil serve (default: $HIL_SERVE_URL, else http://127.0.0.1:8765).")
@click.option("--token-file", default=None, metavar="PATH",
              help="lock/unlock: the token (default: $HIL_SERVE_TOKEN, $HIL_LAB_KEY, hil serve's token "
                   "file).")
@pass_state
def ctl(state: CliState, action: str, session: str | None, endpoint: str | None, timeout: float,
        keys_dir: str | None, as_json: bool, note: str | None, serve_url: str | None,
        token_file: str | None) -> None:
    """Talk to a running `hil run`: status, pause, resume, stop (after the current step), abort (now);
    or lock/unlock the rig at its `hil serve` (--note says why): others' runs are refused meanwhile."""
    if action in ("lock", "unlock"):
        from daq.cli.ctl_lock import lock_command  # lazy: httpx only for these

        lock_command(action, note, serve_url, token_file, as_json)
        return
    from daq.run.announce import announced_keys, runs_dir  # lazy: with the run machinery
    from daq.run.commands import CommandClient  # lazy: zmq sockets only for this command
    from daq.run.control import operator_name  # lazy: with the run machinery

    entry = _find_run(state.store_path, session, endpoint)
    endpoint = endpoint or str(cast(dict, entry)["command"])  # _find_run found a run or raised
    # a run keyed by itself hands its owner the key through its private announcement (daq.run.control)
    own = announced_keys(entry, runs_dir(state.store_path)) if entry and not keys_dir else None
    keys = own or client_keys(endpoint, keys_dir)
    reply = asyncio.run(_request(CommandClient, endpoint, action, timeout, keys,
                                 keys_dir is not None or own is not None, by=operator_name()))
    if as_json:
        echo_json(reply)
    else:
        click.echo(f"{reply.get('kind', '?')} session {reply.get('session', '?')}: {reply.get('state', '?')}"
                   + (f"  {json_codec.dumps(reply.get('summary'))}" if reply.get("summary") else ""))
        if isinstance(reply.get("progress"), dict):
            click.echo(progress_line(reply["progress"]))


def progress_line(progress: dict) -> str:
    """``3 of 10 steps done (last: series 1 step  3 ...)``: the count the run's progress bar shows (steps
    finished, counted from 1), with the description of the last finished step as the bar printed it."""
    done, total, label = progress.get("done", 0), progress.get("total"), progress.get("label")
    text = f"{done} of {total} steps done" if total else f"{done} steps done"
    return text + (f" (last: {' '.join(str(label).split())})" if label else "")


async def _request(client_type, endpoint: str, action: str, timeout: float, keys=None,
                   explicit: bool = False, by: str | None = None) -> dict:
    keys = await checked_keys(endpoint, keys, zmq.DEALER, explicit, timeout)
    client = client_type(endpoint, keys=keys)
    try:
        who = {"by": by} if by and action != "status" else {}  # a command that changes the run says who
        return await client.request(action, timeout=timeout, **who)
    finally:
        client.close()


def _find_run(store_path: Path, session: str | None, endpoint: str | None = None) -> dict | None:
    """The announcement of the run to talk to: the one at ``endpoint`` (None if it has none: a run of
    another store or machine), else the one of ``session``, else the only one running."""
    from daq.run.announce import live_runs, runs_dir  # lazy: with the run machinery

    runs = live_runs(store_path)  # announcements of killed runs are removed here
    if endpoint is not None:
        return next((r for r in runs if r.get("command") == endpoint), None)
    if session:
        runs = [r for r in runs if str(r.get("session", "")).startswith(session)]
    if not runs:
        folder = runs_dir(store_path)
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):
            raise click.ClickException(f"{folder} is private to the OS user whose runs it announces: only "
                                       "that user (or root) can control them")
        raise click.ClickException(f"no running session found in {folder} (give --endpoint)")
    if len(runs) > 1:
        raise click.ClickException("several runs: " + ", ".join(str(r.get("session")) for r in runs)
                                   + " (give --session)")
    return runs[0]
