"""The ``hil`` command line: sessions, show, export, replay, tap, demo (and extension points).

Other modules add commands with :func:`register` (or ``main.add_command``) and simulators with
``sim.add_command``. User mistakes (bad path, unknown session, malformed config, ...) end with
one ``Error: ...`` line on stderr and exit code 1, never a traceback: the :class:`HilGroup`
turns the project's error types into ``click.ClickException``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import click
import numpy as np

from daq.config.load import ENV_STORE, ConfigError, default_store_path, load_config, store_path_for


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exception types that describe a user mistake or an unreachable peer (no traceback)."""
    from daq.bus.frames import FrameError
    from daq.bus.pubsub import BusTimeout
    from daq.export.session_export import ExportError
    from daq.run.commands import CommandError, CommandTimeout
    from daq.store.session_store import StoreError
    from drivers.errors import DeviceError

    return (
        ConfigError,
        DeviceError,
        StoreError,
        ExportError,
        FrameError,
        CommandError,
        CommandTimeout,
        BusTimeout,
        OSError,
    )


class HilGroup(click.Group):
    """A click group that reports known errors as one line instead of a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            if logging.getLogger().isEnabledFor(logging.INFO):  # -v: the traceback too
                logging.getLogger("hil").exception("details")
            raise click.ClickException(_one_line(exc)) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


@dataclass
class CliState:
    """What the global options resolved to; commands read it from ``ctx.obj``."""

    store_option: str | None
    config_path: str | None
    _config: dict | None = field(default=None, repr=False)

    @property
    def config(self) -> dict | None:
        """The ``--config`` file, loaded and validated on first use (None without --config)."""
        if self._config is None and self.config_path is not None:
            self._config = load_config(self.config_path, whole=False)
        return self._config

    @property
    def store_path(self) -> Path:
        """The one rule (daq.config.load.store_path_for): --store, $HIL_STORE, the --config's [store].path
        (relative to the config's folder), else the user data directory."""
        return store_path_for(self.store_option, self.config)

    def open_store(self, create: bool = False):
        from daq.store.session_store import SessionStore

        return SessionStore(self.store_path, create=create)


pass_state = click.make_pass_decorator(CliState)


@click.group(cls=HilGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_option",
    metavar="PATH",
    default=None,
    help=f"Session store file (default: ${ENV_STORE}, the --config's [store].path, "
    f"or {default_store_path()}).",
)
@click.option("--config", "config_path", metavar="PATH", default=None, help="Rig config (TOML).")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(package_name="hil-lab", prog_name="hil")
@click.pass_context
def main(ctx: click.Context, store_option: str | None, config_path: str | None, verbose: int) -> None:
    """Hardware-in-the-loop lab service: record, inspect, replay and export sessions."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2), format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # pymodbus logs hex dumps of recent frames with every client error; ours say it in words
        logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    ctx.obj = CliState(store_option, config_path)
    if config_path is not None:
        _ = ctx.obj.config  # fail early and clearly on a malformed config


def register(command: click.Command, name: str | None = None) -> click.Command:
    """Add a command (or group) to ``hil``; for modules that extend the CLI."""
    main.add_command(command, name)
    return command


# ----------------------------------------------------------------------------- helpers


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


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def _endpoint_from(state: CliState, endpoint: str | None, what: str) -> str:
    if endpoint:
        return endpoint
    cfg = state.config
    if cfg is not None:
        return cfg["bus"]["data"]
    raise click.UsageError(f"give --endpoint (or --config with a [bus] table) to {what}")


# ----------------------------------------------------------------------------- sessions / show


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_state
def sessions(state: CliState, as_json: bool) -> None:
    """List the sessions in the store."""
    with state.open_store() as store:
        infos = store.list_sessions()
    if as_json:
        _echo_json(
            [
                {
                    "id": i.id,
                    "kind": i.kind,
                    "status": i.status,
                    "reason": i.reason,
                    "started": i.started,
                    "ended": i.ended,
                    "streams": sorted(i.streams),
                }
                for i in infos
            ]
        )
        return
    if not infos:
        click.echo(f"no sessions in {state.store_path}")
        return
    click.echo(f"{'ID':<14}{'KIND':<8}{'STATUS':<12}{'STARTED':<21}{'DURATION':>10}  STREAMS")
    for i in infos:
        click.echo(
            f"{i.id:<14}{i.kind:<8}{i.status:<12}{_fmt_time(i.started):<21}{_fmt_duration(i):>10}  "
            f"{len(i.streams)}"
        )


@main.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_state
def show(state: CliState, session: str, as_json: bool) -> None:
    """Show a session's metadata, streams and event counts (SESSION: id or unique prefix)."""
    from daq.export.session_export import session_metadata

    with state.open_store() as store:
        info = store.get_session(session)
        counts = store.event_counts(info.id)
        for s in info.streams.values():
            if s.type == "frame" and s.n_samples:
                s.timing = store.stream_timing(info.id, s.name)
    if as_json:
        meta = session_metadata(info)
        meta["event_counts"] = [{"stream": s, "kind": k, "n": n} for (s, k), n in counts.items()]
        _echo_json(meta)
        return
    click.echo(f"session   {info.id}")
    click.echo(f"kind      {info.kind}")
    click.echo(f"status    {info.status}" + (f" ({info.reason})" if info.reason else ""))
    click.echo(f"started   {_fmt_time(info.started)}")
    click.echo(f"ended     {_fmt_time(info.ended)}  ({_fmt_duration(info)})")
    click.echo(f"software  {info.software_version}")
    for name, dev in (info.devices or {}).items():
        click.echo(f"device    {name}: {json.dumps(dev)}")
    click.echo("streams:")
    for s in info.streams.values():
        if s.type == "frame":
            rate = _rate_text(s)
            chans = ", ".join(f"{c} [{u}]" for c, u in zip(s.channels, s.units, strict=True))
            click.echo(
                f"  {s.name}: {s.n_samples} samples in {s.n_messages} frames, {s.dtype}, {rate}; {chans}"
            )
    click.echo("events:")
    if not counts:
        click.echo("  (none)")
    for (stream, kind), n in counts.items():
        click.echo(f"  {stream} {kind}: {n}")
    if info.stats:
        click.echo(f"recorder  {json.dumps(info.stats)}")


# ----------------------------------------------------------------------------- export


@main.command()
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
    from daq.export.session_export import export as export_to
    from daq.export.session_export import time_origin

    for name, value in (("--start", start), ("--stop", stop)):
        if value is not None and not math.isfinite(value):
            raise click.BadParameter("must be a finite number of seconds", param_hint=name)
    if start is not None and stop is not None and stop <= start:
        raise click.BadParameter(f"must be after --start ({start})", param_hint="--stop")
    names = [n.strip() for n in streams.split(",") if n.strip()] if streams is not None else None
    if fmt == "uff":
        _export_uff(state, session, output, names, start, stop, force, binary, as_json)
        return
    with state.open_store() as store:
        info = store.get_session(session)
        origin = time_origin(info) or 0.0
        with _StderrProgress(f"export {info.id} ({fmt})") as progress:
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
        _echo_json(result.as_dict())
    else:
        click.echo(str(result.path))


def _export_uff(state: CliState, session: str, output, names, start, stop, force: bool, binary: bool,
                as_json: bool) -> None:
    """UFF 58 export of a machine-tool session's FRFs (daq.rigs.machine_tool.uff); no stream or time
    slices."""
    from daq.rigs.machine_tool.uff import export_uff

    if names is not None or start is not None or stop is not None:
        raise click.BadParameter("UFF export writes whole FRFs; --streams, --start and --stop do not apply",
                                 param_hint="--format uff")
    with state.open_store() as store:
        result = export_uff(store, session, output, force=force, binary=binary)
    if as_json:
        _echo_json(result.as_dict())
    else:
        click.echo("\n".join(str(p) for p in result.paths))


#: Progress is shown for exports/replays of at least this many samples / messages.
PROGRESS_MIN_ITEMS = 2_000_000


class _StderrProgress:
    """A ``progress(done, total)`` callback drawing on stderr: a rich bar on a terminal, a line
    every 10 % otherwise; silent for small jobs (below ``min_items``). Never writes to stdout."""

    def __init__(self, label: str, min_items: int = PROGRESS_MIN_ITEMS, unit: str = "samples"):
        self.label, self.min_items, self.unit = label, min_items, unit
        self._bar = None
        self._task = None
        self._next_pct = 10

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_items:
            return
        if sys.stderr.isatty():
            if self._bar is None:
                from rich.console import Console
                from rich.progress import Progress

                self._bar = Progress(console=Console(stderr=True), transient=True)
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=total)
            self._bar.update(self._task, completed=done)
        elif done * 100 >= self._next_pct * total:
            pct = 100 * done // total
            click.echo(f"{self.label}: {pct} % ({done:,} of {total:,} {self.unit})", err=True)
            self._next_pct = pct // 10 * 10 + 10

    def __enter__(self) -> _StderrProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def _rate_text(s) -> str:
    """A stream's real sample spacing for `hil show` (bursts described as such)."""
    if s.timing is not None:
        return s.timing.describe()
    return f"{s.rate:.6g} Hz" if s.rate else "irregular"


# ----------------------------------------------------------------------------- replay


@main.command()
@click.argument("session")
@click.option("--speed", type=float, default=1.0, show_default=True, help="Time factor (2 = twice as fast).")
@click.option("--burst", is_flag=True, help="As fast as possible (ignores --speed).")
@click.option("--endpoint", default=None, help="Bind here (default: the config's [bus].data or port 0).")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=5.0,
    show_default=True,
    help="Wait this long for a first subscriber before publishing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_state
def replay(
    state: CliState,
    session: str,
    speed: float,
    burst: bool,
    endpoint: str | None,
    wait_s: float,
    as_json: bool,
) -> None:
    """Publish a stored session onto the bus at its original timing (or --burst)."""
    if not burst and not (speed > 0 and math.isfinite(speed)):
        raise click.BadParameter("must be a positive number", param_hint="--speed")
    endpoint = endpoint or (state.config["bus"]["data"] if state.config else "tcp://127.0.0.1:0")
    with state.open_store() as store:
        info = store.get_session(session)
        stats = asyncio.run(_replay(store, info.id, endpoint, speed, burst, wait_s))
    summary = {
        "session": info.id,
        "frames": stats.frames,
        "events": stats.events,
        "samples": stats.samples,
        "wall_s": round(stats.duration_s, 3),
        "recorded_span_s": round(stats.span_s, 3),
    }
    if as_json:
        _echo_json(summary)
    else:
        click.echo(
            f"replayed {info.id}: {stats.frames} frames ({stats.samples} samples), {stats.events} events "
            f"in {stats.duration_s:.2f} s"
        )


async def _replay(store, session_id: str, endpoint: str, speed: float, burst: bool, wait_s: float):
    from daq.bus.pubsub import BusPublisher, BusTimeout
    from daq.run.replay import replay_session

    pub = BusPublisher(endpoint)
    try:
        click.echo(f"publishing on {pub.endpoint}", err=True)
        if wait_s > 0:
            try:
                await pub.wait_for_subscribers(1, wait_s)
                await asyncio.sleep(0.05)
            except BusTimeout:
                click.echo(f"no subscriber after {wait_s} s; publishing anyway", err=True)
        info = store.get_session(session_id)
        n_messages = sum(s.n_messages for s in info.streams.values())
        span = (
            max((s.t_last or 0.0) for s in info.streams.values())
            - min((s.t_first or 0.0) for s in info.streams.values())
            if info.streams
            else 0.0
        )
        # long replays (many messages, or a long recording at its own pace) report progress
        threshold = 1 if (not burst and span / speed > 30.0) else 20_000
        with _StderrProgress(f"replay {session_id}", min_items=threshold, unit="messages") as progress:
            stats = await replay_session(
                store, session_id, pub, speed=speed, burst=burst, progress=progress, total=n_messages
            )
        await asyncio.sleep(0.1)  # let the last messages leave before the socket closes
        return stats
    finally:
        pub.close()


# ----------------------------------------------------------------------------- tap


def summarize(msg) -> dict:
    """A short, printable summary of a frame or event."""
    from daq.bus.frames import Frame

    if isinstance(msg, Frame):
        d = np.asarray(msg.data, dtype=np.float64) if msg.data.size else np.zeros((0, len(msg.channels)))
        mean = d.mean(axis=0).tolist() if len(d) else []
        return {
            "type": "frame",
            "stream": msg.stream,
            "seq": msg.seq,
            "t0": msg.t0,
            "shape": list(msg.data.shape),
            "dtype": str(msg.data.dtype),
            "channels": msg.channels,
            "units": msg.units,
            "mean": mean,
            "replay": msg.replay,
            "session_id": msg.session_id,
        }
    return {
        "type": "event",
        "stream": msg.stream,
        "kind": msg.kind,
        "seq": msg.seq,
        "t": msg.t,
        "body": msg.body,
        "replay": msg.replay,
        "session_id": msg.session_id,
    }


def _summary_line(s: dict) -> str:
    if s["type"] == "frame":
        means = ", ".join(
            f"{c}={m:.4g} {u}" for c, m, u in zip(s["channels"], s["mean"], s["units"], strict=False)
        )
        flag = " [replay]" if s["replay"] else ""
        return f"{s['stream']} #{s['seq']} {s['shape'][0]}x{s['shape'][1]} {s['dtype']}{flag}: mean {means}"
    flag = " [replay]" if s["replay"] else ""
    return f"{s['stream']} #{s['seq']} event {s['kind']}{flag}: {json.dumps(s['body'], default=str)}"


def _tap_topics(topic: str) -> tuple[str, ...]:
    """Subscriptions for TOPIC: a data/... or event/... topic as given, else a stream name or prefix
    (``press.sensors``, ``press.``) matched in both frames and events; empty: everything."""
    if not topic or topic.startswith(("data/", "event/")):
        return (topic,)
    return (f"data/{topic}", f"event/{topic}")


def _tap_source(state: CliState, endpoint: str | None, keys_dir: str | None):
    """(endpoint, keys): --endpoint, else the config's [bus].tap (the lossy copy for outsiders),
    else its [bus].data; CURVE keys when --keys is given or the endpoint is beyond loopback."""
    from daq.bus.keys import is_local, load_keys

    cfg_keys = None
    if not endpoint:
        cfg = state.config
        if cfg is None:
            raise click.UsageError("give --endpoint (or --config with a [bus] table) to tap the bus")
        bus = cfg["bus"] if isinstance(cfg, dict) else cfg.bus
        get = bus.get if isinstance(bus, dict) else lambda k: getattr(bus, k, None)
        endpoint = get("tap") or get("data")
        cfg_keys = get("keys")
    if endpoint.endswith(":0"):
        raise click.UsageError(f"endpoint {endpoint} has no port; give the publisher's --endpoint")
    keys_dir = keys_dir or cfg_keys
    keys = load_keys(keys_dir) if keys_dir or not is_local(endpoint) else None
    return endpoint, keys


@main.command()
@click.argument("topic", default="")
@click.option(
    "--endpoint", default=None, help="Publisher to connect to (default: the config's [bus].tap, else .data)."
)
@click.option(
    "-n", "--count", type=int, default=0, help="Stop after this many messages (0: run until Ctrl-C)."
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Stop after this many seconds without a message (an error only if nothing came at all).",
)
@click.option("--keys", "keys_dir", default=None, metavar="PATH", help="CURVE keys folder (see `hil keys`).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_state
def tap(
    state: CliState,
    topic: str,
    endpoint: str | None,
    count: int,
    timeout: float | None,
    keys_dir: str | None,
    as_json: bool,
) -> None:
    """Print live frames and events. TOPIC: a stream name or prefix as printed (press.sensors,
    press.), or a data/... or event/... topic; default everything."""
    endpoint, keys = _tap_source(state, endpoint, keys_dir)
    try:
        stats = asyncio.run(_tap(endpoint, topic, count, timeout, as_json, keys))
    except KeyboardInterrupt:
        return
    if stats.n_malformed or stats.missing:
        click.echo(f"malformed: {stats.malformed}, missing (gaps): {stats.gaps}", err=True)


async def _tap(
    endpoint: str, topic: str, count: int, timeout: float | None, as_json: bool, keys=None
):
    """Print messages until ``count``; a ``timeout`` with nothing received at all is an error
    (BusTimeout), after messages it just ends the tap."""
    from daq.bus.pubsub import BusSubscriber, BusTimeout

    sub = BusSubscriber(endpoint, topics=_tap_topics(topic), keys=keys)
    n = 0
    try:
        while count <= 0 or n < count:
            try:
                msg = await sub.recv(timeout=timeout)
            except BusTimeout:
                if n == 0:
                    raise BusTimeout(f"no message from {endpoint} within {timeout} s") from None
                break
            s = summarize(msg)
            click.echo(json.dumps(s, default=str) if as_json else _summary_line(s))
            n += 1
        return sub.stats
    finally:
        sub.close()


# ----------------------------------------------------------------------------- demo


@main.command()
@click.option("--duration", type=float, default=3.0, show_default=True, help="Seconds of synthetic data.")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Sample rate, Hz.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_state
def demo(state: CliState, duration: float, rate: float, as_json: bool) -> None:
    """Publish synthetic frames on loopback, record them, replay the session and compare (no hardware)."""
    from daq.run.demo import run_demo

    if not (0 < duration <= 600 and 1 <= rate <= 1e6):
        raise click.BadParameter("need 0 < --duration <= 600 and 1 <= --rate <= 1e6")
    with state.open_store(create=True) as store:
        summary = asyncio.run(run_demo(store, duration=duration, rate=rate))
    if as_json:
        _echo_json(summary)
        return
    click.echo(f"store      {state.store_path}")
    click.echo(f"session    {summary['session']} ({summary['status']})")
    click.echo(f"published  {summary['published_frames']} frames, {summary['published_events']} events")
    click.echo(
        f"recorded   {summary['recorded_frames']} frames, {summary['recorded_samples']} samples, "
        f"gaps {summary['gaps']}, malformed {summary['malformed']}"
    )
    click.echo(
        f"replayed   {summary['replayed_frames']} frames in {summary['replay_wall_s']:.3f} s (burst), "
        f"identical: {summary['replay_identical']}"
    )
    if not summary["replay_identical"]:
        sys.exit(2)


# Rig-level commands (run, analyze, sim press|crane) register themselves on import.
from daq.cli import design as _design, keys as _keys, rig as _rig, uff as _uff, watch as _watch  # noqa: E402,F401,I001
