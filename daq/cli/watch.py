"""``hil watch``: print the online estimates of every rig (events on ``<prefix>.online`` streams) as they
arrive: one table per stream, columns from the common contract (parameters, values, std, rel_std), the
verdict of a model-uncertainty test when the body has one, and the stop reason when a rule fired."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import zmq

from daq import json_codec
from daq.bus.frames import Event
from daq.bus.pubsub import BusSubscriber, BusTimeout
from daq.cli.common import KEYS_HELP, CliState, checked_keys, client_keys, pass_state


def _running_endpoint(state: CliState) -> str:
    """The data endpoint of the newest running session announced under ``<store folder>/runs``."""
    from daq.run.announce import live_runs, runs_dir  # lazy: with the run machinery

    live_runs(Path(state.store_path))  # removes the announcements of killed runs
    found = sorted(runs_dir(Path(state.store_path)).glob("*.json"), key=lambda p: p.stat().st_mtime)
    for p in reversed(found):
        try:
            return json_codec.loads(p.read_text())["data"]
        except (OSError, ValueError, KeyError):
            continue
    raise click.UsageError("no running session found; give --endpoint (e.g. the one `hil replay` prints)")


def _num(x) -> str:
    return f"{x:.5g}" if isinstance(x, int | float) else str(x)


def _verdict_text(v: dict | None) -> str:
    """One cell: per model keep/reject with its smallest alpha_min, and how long the pattern has held."""
    if not v:
        return ""
    if "error" in v:
        return f"error: {v['error']}"
    if v.get("undecided") and not v.get("models"):
        return str(v["undecided"])  # not computable yet, in words
    models = v.get("models")
    if isinstance(models, dict) and models:
        cells = []
        for name, m in models.items():
            m = m if isinstance(m, dict) else {"verdict": str(m)}
            if m.get("text"):  # the verdict's own words (readable p-values, undecided with its reason)
                cells.append(str(m["text"]))
                continue
            word = m.get("verdict") or ("reject" if m.get("reject") else "keep")
            a = m.get("min_alpha_min")
            cells.append(f"{name} {word}" + (f" ({100 * a:.3g} %)" if isinstance(a, int | float) else ""))
        text = " · ".join(cells)
    elif "rejected" in v or "kept" in v:
        rejected, kept = ", ".join(v.get("rejected") or []), ", ".join(v.get("kept") or [])
        text = f"rejected {rejected or 'none'}; kept {kept or 'none'}"
    else:
        text = ", ".join(f"{k}={_num(x)}" for k, x in v.items() if isinstance(x, str | int | float | bool))
    if v.get("settled_for"):
        text += f" [same {v['settled_for']}x]"
    return text


def _values(body: dict) -> list:
    return list(body.get("values", body.get("k", [])))


def _columns(body: dict) -> list[str]:
    unit = f" [{body['unit']}]" if body.get("unit") else ""
    names = body.get("parameters") or [f"p{i}" for i in range(len(_values(body)))]
    cols = ["used", *[f"{n}{unit}" for n in names]]
    if "ellipse_semi_axes" in body:
        cols.append("ellipse semi-axes")
    if "s2" in body:
        cols.append("RSS/dof")
    return [*cols, "fit [ms]", "verdict"]


def _row(body: dict, columns: list[str]) -> list[str]:
    """The cells of one estimate event following the common online contract."""
    vals, std = _values(body), list(body.get("std") or [])
    rel = list(body.get("rel_std") or [])
    n_par = len(columns) - 3 - ("ellipse semi-axes" in columns) - ("RSS/dof" in columns)
    cells = [str(body.get("used", body.get("series_used", "")))]
    for i in range(n_par):
        cell = f"{vals[i]:.5e}" if i < len(vals) else ""
        if i < min(len(std), len(vals)):
            cell += f" ± {std[i]:.2e}"
        if i < min(len(rel), len(vals)):
            cell += f" ({100 * rel[i]:.3g} %)"
        cells.append(cell)
    if "ellipse semi-axes" in columns:
        cells.append(" / ".join(f"{a:.2e}" for a in body.get("ellipse_semi_axes") or []))
    if "RSS/dof" in columns:
        cells.append(_num(body["s2"]) if "s2" in body else "")
    cells += [f"{1e3 * body.get('elapsed_s', float('nan')):.1f}", _verdict_text(body.get("verdict"))]
    return cells


async def _watch(endpoint: str, count: int, timeout: float | None, as_json: bool, keys=None,
                 explicit: bool = False) -> int:
    """Show (or print as JSON lines) the events of every ``*.online`` stream; returns how many."""
    keys = await checked_keys(endpoint, keys, zmq.SUB, explicit)
    sub = BusSubscriber(endpoint, topics=("event/",), keys=keys)
    tables: dict[str, tuple] = {}
    n = 0
    try:
        while count <= 0 or n < count:
            try:
                msg = await sub.recv(timeout=timeout)
            except BusTimeout:
                break
            if not str(getattr(msg, "stream", "")).endswith(ONLINE_SUFFIX) or not hasattr(msg, "body"):
                continue
            n += 1
            assert isinstance(msg, Event)  # it has a body
            if as_json:
                head = {"stream": msg.stream, "kind": msg.kind, "t": msg.t, "replay": msg.replay}
                click.echo(json_codec.dumps({**head, **msg.body}))
            elif msg.kind == "estimate":
                _show(tables, msg.stream, msg.body, msg.replay)
            else:
                click.echo(f"{msg.stream} {msg.kind}: {msg.body}", err=True)
        return n
    finally:
        sub.close()


ONLINE_SUFFIX = ".online"


def _show(tables: dict, stream: str, body: dict, replay: bool = False) -> None:
    """Add the estimate to its stream's table and redraw every table."""
    from rich.console import Console  # lazy: rich is slow to import
    from rich.table import Table
    from rich.text import Text  # plain text: brackets in names or verdicts are not rich markup

    if stream not in tables:
        cols = _columns(body)
        title = f"{stream}: online estimate ({body.get('model', '')}, ± 1 std){' - replay' if replay else ''}"
        table = Table(title=Text(title))
        for col in cols:
            table.add_column(Text(col))
        tables[stream] = (table, cols)
    table, cols = tables[stream]
    table.add_row(*(Text(c) for c in _row(body, cols)))
    if body.get("stop"):
        table.caption = Text(f"stop: {body['stop']}")
    console = Console()
    if console.is_terminal:
        console.clear()
    for t, _ in tables.values():
        console.print(t)


@click.command()
@click.argument("session", required=False)
@click.option("--endpoint", default=None, help="Bus to watch (default: the running session's data endpoint).")
@click.option("-n", "--count", type=int, default=0, help="Stop after this many events (0: until Ctrl-C).")
@click.option("--timeout", type=float, default=None, help="Stop after this many seconds without an event.")
@click.option("--keys", "keys_dir", default=None, metavar="DIR", help=KEYS_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per online event on stdout.")
@pass_state
def watch(state: CliState, session: str | None, endpoint: str | None, count: int, timeout: float | None,
          keys_dir: str | None, as_json: bool) -> None:
    """Show the online estimates (values, std, ellipse, verdict) of a live run or a replayed session; with
    --store URL, of the lab's running SESSION, until it ends."""
    if state.is_lab or session is not None:
        from daq.cli.lab_watch import watch_lab  # lazy: the lab's client

        watch_lab(state, session, count, timeout, as_json, _show)
        return
    endpoint = endpoint or _running_endpoint(state)
    keys = client_keys(endpoint, keys_dir)
    try:
        n = asyncio.run(_watch(endpoint, count, timeout, as_json, keys, keys_dir is not None))
    except KeyboardInterrupt:
        return
    if n == 0:
        click.echo(f"no estimate from {endpoint}", err=True)

