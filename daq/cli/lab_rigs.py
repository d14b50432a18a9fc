"""``hil --store URL rigs``: the lab's rigs and their states (daq/lab/rigs.py), as a table or JSON."""

from __future__ import annotations

import time

import click

from daq.cli.common import CliState, echo_json
from daq.lab.reader import LabReader


def state_words(row: dict) -> str:
    """``running 3f2a... (press.toml, by otto, 4 of 10 steps)``, ``idle``, ``offline (42 s)``."""
    state = str(row.get("state", "?"))
    if state == "offline":
        age = row.get("age")
        return "offline" + (f" (last seen {age:.0f} s ago)" if isinstance(age, int | float) else "")
    run = row.get("run") or {}
    if state == "running" and run:
        progress = run.get("progress") or {}
        steps = f", {progress.get('done', 0)} of {progress['total']} steps" if progress.get("total") else ""
        return f"running {run.get('session') or '-'} ({run.get('config')}, by {run.get('by')}{steps})"
    return state


def list_lab_rigs(state: CliState, as_json: bool, offline_after: float) -> None:
    from daq.lab.rigs import read_rigs  # lazy: only a lab's listing needs it

    reader = state.open_store()
    assert isinstance(reader, LabReader)  # the caller checked is_lab
    rows = read_rigs(reader.root, offline_after)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"no rigs in {state.store_option} (hil serve --lab URL --rig NAME registers one)")
        return
    for row in rows:
        lock = row.get("lock") or {}
        locked = f"  locked by {lock['by']}: {lock.get('note') or ''}" if lock.get("locked") else ""
        beat = row.get("heartbeat")
        seen = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(beat)) if isinstance(beat, float) else "-"
        click.echo(f"{row['name']:<16}{state_words(row):<50} queue {row.get('queue', 0):<3} "
                   f"seen {seen}  {row.get('page') or ''}{locked}")
