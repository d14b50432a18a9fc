"""``hil sessions``, ``show`` and ``export``: what the store holds, and files of it."""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path

import click

from daq import json_codec
from daq.cli.common import CliState, StderrProgress, echo_json, pass_state
from daq.cli.lab_search import filters_from, limit_option, more_line, search_options, shown_limit
from daq.export.layout import time_origin
from daq.export.listing import (
    commands_given,
    held_commands,
    is_dry_run,
    rig_name,
    session_detail,
    session_row,
    started_by,
)
from daq.export.session_export import export as export_to
from daq.lab.local_analyses import local_analyses
from daq.lab.marks import replicas
from daq.lab.reader import LabReader
from daq.lab.search import matches


def _fmt_time(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _fmt_duration(info) -> str:
    end = (
        info.ended
        if info.ended is not None
        else (info.heartbeat if info.status != "running" else time.time())
    )
    if end is None:
        return "-"
    return f"{max(0.0, end - info.started):.1f} s"


# ----------------------------------------------------------------------------- sessions / show


@click.command()
@search_options
@limit_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (every match unless --limit).")
@pass_state
def sessions(state: CliState, as_json: bool, limit: int | None, **search) -> None:
    """List the sessions in the store or the lab (--store URL), optionally only those matching filters:
    the newest 50 by default, oldest of them first, and how many match in all."""
    filters = filters_from(**search)
    cut = shown_limit(limit, as_json)
    with state.open_store() as store:
        if state.is_lab:
            assert isinstance(store, LabReader)  # is_lab
            if cut is None:
                found = store.search_metadata(filters)
                total = len(found)
            else:  # the lab sorts, cuts and counts
                found, total = store.newest_metadata(filters, cut)
            infos = [info for info, _ in found]
            by = {info.id: meta.get("by") for info, meta in found}
        else:
            infos = store.list_sessions()
            by = {i.id: started_by(store, i) for i in infos}
            kept = local_analyses(state.store_path) if filters.verdict is not None or filters.params else {}
            infos = [i for i in infos if matches(i, filters, by[i.id], kept.get(i.id))]
            total = len(infos)
            if cut is not None:
                infos = infos[-cut:]  # oldest first: the newest at the end
        more = more_line(len(infos), total)
        if as_json:
            echo_json([session_row(i, by[i.id]) for i in infos])
            if more:
                click.echo(more, err=True)  # stdout stays JSON
            return
    if not infos:
        click.echo(f"no sessions in {state.store_option if state.is_lab else state.store_path}")
        return
    labs = {} if state.is_lab else replicas(state.store_path)
    header = ("ID", "KIND", "RIG", "STATUS", "STARTED", "DURATION", "STREAMS", "BY", "LAB")
    rows = [
        (i.id, i.kind, rig_name(i) or "-", i.status + (" (dry run)" if is_dry_run(i) else ""),
         _fmt_time(i.started), _fmt_duration(i), str(len(i.streams)), by[i.id] or "-",
         "lab" if state.is_lab else ("yes" if i.id in labs else "-")) for i in infos
    ]
    widths = [max(len(r[k]) for r in (header, *rows)) for k in range(len(header))]
    for row in (header, *rows):  # columns as wide as their content, two spaces apart; DURATION to the right
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.rjust(w) if k == 5 else c.ljust(w) for k, (c, w) in pairs]
        click.echo("  ".join(cells).rstrip())
    if more:
        click.echo(more)


@click.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_state
def show(state: CliState, session: str, as_json: bool) -> None:
    """Show a session's metadata, streams and event counts (SESSION: id or unique prefix)."""
    if as_json:
        with state.open_store() as store:
            echo_json(session_detail(store, session))
        return
    with state.open_store() as store:
        info = store.get_session(session)
        counts = store.event_counts(info.id)
        by = started_by(store, info)
        commands = commands_given(store, info)
        held = held_commands(store, info)
        for s in info.streams.values():
            if s.type == "frame" and s.n_samples:
                s.timing = store.stream_timing(info.id, s.name)
    click.echo(f"session   {info.id}")
    click.echo(f"kind      {info.kind}")
    click.echo(f"status    {info.status}" + (f" ({info.reason})" if info.reason else ""))
    if is_dry_run(info):  # commands held, none sent (docs/dry-run.md)
        click.echo(f"dry run   {len(held)} commands held, none sent (listed below)")
    click.echo(f"started   {_fmt_time(info.started)}" + (f" by {by}" if by else ""))
    click.echo(f"ended     {_fmt_time(info.ended)}  ({_fmt_duration(info)})")
    click.echo(f"software  {info.software_version}")
    for name, dev in (info.devices or {}).items():
        click.echo(f"device    {name}: {json_codec.dumps(dev)}")
    click.echo("streams:")
    for s in info.streams.values():
        if s.type == "frame":
            rate = _rate_text(s)
            chans = ", ".join(f"{c} [{u}]" for c, u in zip(s.channels, s.units, strict=True))
            click.echo(
                f"  {s.name}: {s.n_samples} samples in {s.n_messages} frames, {s.dtype}, {rate}; {chans}"
            )
    for c in commands:
        click.echo(f"command   {_fmt_time(c['t'])} {c['command']} by {c['by']}")
    for h in held:
        checked = f"  checked: {'; '.join(h.get('limits') or [])}" if h.get("limits") else ""
        click.echo(f"held {h['n']:>4}  {h['phase']:<12} {h['device']} {h['command']} = "
                   f"{json_codec.dumps(h['value'])}{checked}")
    click.echo("events:")
    if not counts:
        click.echo("  (none)")
    for (stream, kind), n in counts.items():
        click.echo(f"  {stream} {kind}: {n}")
    if info.stats:
        click.echo(f"recorder  {json_codec.dumps(info.stats)}")


# ----------------------------------------------------------------------------- export


@click.command()
@click.argument("session")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["hdf5", "mat", "csv", "uff"]),
    required=True,
    help="Output format (uff: the FRFs of a machine-tool session as UFF dataset 58).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    default=None,
    help="Output file (hdf5, mat; uff: .uff/.unv) or directory (csv; uff: a file per position); "
    "default exports/session-<id>.<ext>.",
)
@click.option(
    "--streams", default=None, metavar="A,B", help="Only these streams (frame or event, comma-separated)."
)
@click.option(
    "--start", type=float, default=None, metavar="T", help="Slice start, s after the session's first sample."
)
@click.option(
    "--stop", type=float, default=None, metavar="T", help="Slice end (exclusive), s after the first sample."
)
@click.option(
    "--mat-version",
    type=click.Choice(["auto", "5", "7.3"]),
    default="auto",
    show_default=True,
    help="MAT format: auto = v5 while every variable is below 2 GB, else v7.3 (HDF5-based).",
)
@click.option("--compress", is_flag=True, help="gzip the HDF5 / MAT v7.3 datasets (slower).")
@click.option("--binary", is_flag=True, help="uff: dataset 58b (exact doubles) instead of ASCII (12 digits).")
@click.option("--force", is_flag=True, help="Overwrite an existing output.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (only JSON on stdout).")
@pass_state
def export(
    state: CliState,
    session: str,
    fmt: str,
    output: str | None,
    streams: str | None,
    start: float | None,
    stop: float | None,
    mat_version: str,
    compress: bool,
    binary: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Export a session (or a slice: --streams, --start, --stop) to HDF5, MATLAB .mat or CSV; or the FRFs
    of a machine-tool session as UFF dataset 58 (--format uff, with coherence; --binary for 58b).

    Times in the files are the recorded ones (unix time for live sessions; the files say which);
    --start/--stop count seconds from the session's first sample.
    """
    for name, value in (("--start", start), ("--stop", stop)):
        if value is not None and not math.isfinite(value):
            raise click.BadParameter("must be a finite number of seconds", param_hint=name)
    if start is not None and stop is not None and stop <= start:
        raise click.BadParameter(f"must be after --start ({start})", param_hint="--stop")
    _check_output_suffix(fmt, output)
    names = [n.strip() for n in streams.split(",") if n.strip()] if streams is not None else None
    if fmt == "uff":
        _export_uff(state, session, output, names, start, stop, force, binary, as_json)
        return
    with state.open_store() as store:
        info = store.get_session(session)
        origin = time_origin(info) or 0.0
        _check_slice_in_span(info, origin, start, stop)
        with StderrProgress(f"export {info.id} ({fmt})") as progress:
            result = export_to(
                store,
                info.id,
                fmt,
                output,
                streams=names,
                t_start=None if start is None else origin + start,
                t_stop=None if stop is None else origin + stop,
                mat_version=mat_version,
                compress=compress,
                force=force,
                progress=progress,
            )
    if as_json:
        echo_json(result.as_dict())
    else:
        click.echo(str(result.path))


#: File name suffixes each file format may be written to (csv writes a folder).
_FORMAT_SUFFIXES = {"hdf5": (".h5", ".hdf5"), "mat": (".mat",)}
#: Suffixes of files, refused as csv folder names.
_FILE_SUFFIXES = (".h5", ".hdf5", ".mat", ".uff", ".unv", ".csv")


def _check_output_suffix(fmt: str, output: str | None) -> None:
    """Refuse an -o whose suffix names another format (MAT data in a .h5 file, a csv folder x.mat)."""
    if output is None or fmt == "uff":  # uff: .uff/.unv is one file, any other name a folder
        return
    suffix = Path(output).suffix.lower()
    if fmt == "csv":
        if suffix in _FILE_SUFFIXES:
            raise click.ClickException(
                f"-o {output}: csv exports write a folder (a .csv file per stream); give a folder name "
                f"without {suffix}"
            )
        return
    allowed = _FORMAT_SUFFIXES[fmt]
    if suffix not in allowed:
        raise click.ClickException(
            f"-o {output}: a {fmt} export needs a file name ending in {' or '.join(allowed)}"
        )


def _check_slice_in_span(info, origin: float, start: float | None, stop: float | None) -> None:
    """Refuse a --start after the session's last sample or event, or a --stop at or before its first:
    the export would be empty."""
    lasts = [s.t_last for s in info.streams.values() if s.t_last is not None]
    if not lasts:
        return  # an empty session: nothing to slice
    last = max(lasts)
    where = f"session {info.id} spans 0 to {last - origin:.6g} s after its first sample"
    if start is not None and origin + start > last:
        raise click.ClickException(f"--start {start:g} s is after the session's end ({where})")
    if stop is not None and stop <= 0:
        raise click.ClickException(f"--stop {stop:g} s is at or before the session's start ({where})")


def _export_uff(state: CliState, session: str, output, names, start, stop, force: bool, binary: bool,
                as_json: bool) -> None:
    """UFF 58 export of a machine-tool session's FRFs (daq.rigs.machine_tool.uff); no stream or time
    slices."""
    from daq.rigs.machine_tool.uff_export import export_uff  # lazy: the machine-tool rig kind, scipy

    if names is not None or start is not None or stop is not None:
        raise click.BadParameter("UFF export writes whole FRFs; --streams, --start and --stop do not apply",
                                 param_hint="--format uff")
    with state.open_store() as store:
        result = export_uff(store, session, output, force=force, binary=binary)
    if as_json:
        echo_json(result.as_dict())
    else:
        click.echo("\n".join(str(p) for p in result.paths))


def _rate_text(s) -> str:
    """A stream's real sample spacing for `hil show` (bursts described as such)."""
    if s.timing is not None:
        return s.timing.describe()
    return f"{s.rate:.6g} Hz" if s.rate else "irregular"
