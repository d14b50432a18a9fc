"""``hil watch``: print the online identifier's estimates (``press.online``) as they arrive."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from daq.cli import CliState, pass_state, register


def _running_endpoint(state: CliState) -> str:
    """The data endpoint of the newest running session announced under ``<store folder>/runs``."""
    from daq.lifecycle import runs_dir

    found = sorted(runs_dir(Path(state.store_path)).glob("*.json"), key=lambda p: p.stat().st_mtime)
    for p in reversed(found):
        try:
            return json.loads(p.read_text())["data"]
        except (OSError, ValueError, KeyError):
            continue
    raise click.UsageError("no running session found; give --endpoint (e.g. the one `hil replay` prints)")


def _row(body: dict) -> list[str]:
    k, std, rel = body["k"], body["std"], body["rel_std"]
    cells = [str(body["series_used"])]
    cells += [f"{p:.5e} ± {s:.2e} ({100 * r:.3g} %)" for p, s, r in zip(k, std, rel, strict=True)]
    cells += [" / ".join(f"{a:.2e}" for a in body["ellipse_semi_axes"]), f"{body['s2']:.3g}",
              f"{1e3 * body.get('elapsed_s', float('nan')):.1f}"]
    return cells


async def _watch(endpoint: str, count: int, timeout: float | None, as_json: bool, keys=None) -> int:
    from daq.bus import BusSubscriber, BusTimeout
    from daq.online import ONLINE_STREAM

    sub = BusSubscriber(endpoint, topics=("event/" + ONLINE_STREAM,), keys=keys)
    table = None
    n = 0
    try:
        while count <= 0 or n < count:
            try:
                msg = await sub.recv(timeout=timeout)
            except BusTimeout:
                break
            if msg.stream != ONLINE_STREAM:
                continue
            n += 1
            if as_json:
                click.echo(json.dumps({"kind": msg.kind, "t": msg.t, "replay": msg.replay, **msg.body}))
            elif msg.kind == "estimate":
                table = _print_row(table, msg.body)
            else:
                click.echo(f"{msg.kind}: {msg.body}", err=True)
        return n
    finally:
        sub.close()


def _print_row(table, body: dict):
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if table is None:
        table = Table(title=f"online estimate ({body.get('model', '')}, ± 1 std)")
        for col in ("series", *body.get("parameters", ["k5", "k7"]), "ellipse semi-axes [N/m]", "RSS/dof",
                    "fit [ms]"):
            table.add_column(col)
    table.add_row(*_row(body))
    if console.is_terminal:
        console.clear()
    console.print(table)
    return table


@click.command()
@click.option("--endpoint", default=None, help="Bus to watch (default: the running session's data endpoint).")
@click.option("-n", "--count", type=int, default=0, help="Stop after this many events (0: until Ctrl-C).")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds without an event.")
@click.option("--keys", "keys_dir", default=None, metavar="PATH", help="CURVE keys folder (see `hil keys`).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per estimate event on stdout.")
@pass_state
def watch(state: CliState, endpoint: str | None, count: int, timeout: float | None, keys_dir: str | None,
          as_json: bool) -> None:
    """Show the online estimates (k5, k7, std, ellipse) of a live run or a replayed session."""
    from daq.keys import is_local, load_keys

    endpoint = endpoint or _running_endpoint(state)
    keys = load_keys(keys_dir) if keys_dir or not is_local(endpoint) else None
    try:
        n = asyncio.run(_watch(endpoint, count, timeout, as_json, keys))
    except KeyboardInterrupt:
        return
    if n == 0:
        click.echo(f"no estimate from {endpoint}", err=True)


register(watch)
