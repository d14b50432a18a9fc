"""``hil replay``, ``tap`` and ``demo``: sessions onto the bus, the bus onto the terminal."""

from __future__ import annotations

import asyncio
import math
import sys

import click
import numpy as np
import zmq

from daq import json_codec
from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber, BusTimeout
from daq.cli.common import (
    KEYS_HELP,
    CliState,
    StderrProgress,
    checked_keys,
    client_keys,
    echo_json,
    pass_state,
)
from daq.store.read_write import SessionStore

# ----------------------------------------------------------------------------- replay


@click.command()
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
    endpoint = endpoint or (state.config.bus.data if state.config else "tcp://127.0.0.1:0")
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
        echo_json(summary)
    else:
        click.echo(
            f"replayed {info.id}: {stats.frames} frames ({stats.samples} samples), {stats.events} events "
            f"in {stats.duration_s:.2f} s"
        )


async def _replay(store, session_id: str, endpoint: str, speed: float, burst: bool, wait_s: float):
    from daq.run.replay import replay_session  # lazy: the store reader's heavy parts

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
        with StderrProgress(f"replay {session_id}", min_items=threshold, unit="messages") as progress:
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
    return f"{s['stream']} #{s['seq']} event {s['kind']}{flag}: {json_codec.dumps(s['body'], default=str)}"


def _tap_topics(topic: str) -> tuple[str, ...]:
    """Subscriptions for TOPIC: a data/... or event/... topic as given, else a stream name or prefix
    (``press.sensors``, ``press.``) matched in both frames and events; empty: everything."""
    if not topic or topic.startswith(("data/", "event/")):
        return (topic,)
    return (f"data/{topic}", f"event/{topic}")


def _tap_source(state: CliState, endpoint: str | None, keys_dir: str | None):
    """(endpoint, keys): --endpoint, else the config's [bus].tap (the lossy copy for outsiders),
    else its [bus].data; CURVE keys of --keys, the config's [bus].keys, else as
    :func:`daq.cli.common.client_keys` finds them."""
    cfg_keys = None
    if not endpoint:
        cfg = state.config
        if cfg is None:
            raise click.UsageError("give --endpoint (or --config with a [bus] table) to tap the bus")
        bus = cfg["bus"] if isinstance(cfg, dict) else cfg.bus
        get = bus.get if isinstance(bus, dict) else lambda k: getattr(bus, k, None)
        endpoint = get("tap") or get("data")
        cfg_keys = get("keys")
    assert endpoint is not None  # [bus].data has a default
    if endpoint.endswith(":0"):
        raise click.UsageError(f"endpoint {endpoint} has no port; give the publisher's --endpoint")
    return endpoint, client_keys(endpoint, keys_dir or cfg_keys)


@click.command()
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
@click.option("--keys", "keys_dir", default=None, metavar="DIR", help=KEYS_HELP)
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
        stats = asyncio.run(_tap(endpoint, topic, count, timeout, as_json, keys, keys_dir is not None))
    except KeyboardInterrupt:
        return
    if stats.n_malformed or stats.missing:
        click.echo(f"malformed: {stats.malformed}, missing (gaps): {stats.gaps}", err=True)


async def _tap(
    endpoint: str, topic: str, count: int, timeout: float | None, as_json: bool, keys=None,
    explicit: bool = False,
):
    """Print messages until ``count``; a ``timeout`` with nothing received at all is an error
    (BusTimeout), after messages it just ends the tap. A publisher that refuses our keys (or their
    absence) is a one-line error at once (:func:`daq.cli.common.checked_keys`)."""
    keys = await checked_keys(endpoint, keys, zmq.SUB, explicit)
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
            click.echo(json_codec.dumps(s, default=str) if as_json else _summary_line(s))
            n += 1
        return sub.stats
    finally:
        sub.close()


# ----------------------------------------------------------------------------- demo


@click.command()
@click.option("--duration", type=float, default=3.0, show_default=True, help="Seconds of synthetic data.")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Sample rate, Hz.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_state
def demo(state: CliState, duration: float, rate: float, as_json: bool) -> None:
    """Publish synthetic frames on loopback, record them, replay the session and compare (no hardware)."""
    from daq.run.demo import run_demo  # lazy: the recorder and the synthetic rig

    if not (0 < duration <= 600 and 1 <= rate <= 1e6):
        raise click.BadParameter("need 0 < --duration <= 600 and 1 <= --rate <= 1e6")
    if state.is_lab:  # the demo records a session; a lab is read here, written only by `hil lab push`
        raise click.UsageError("hil demo records into a local store: give a file to --store, not a lab URL")
    with state.open_store(create=True) as store:
        assert isinstance(store, SessionStore)  # not a lab (refused above)
        summary = asyncio.run(run_demo(store, duration=duration, rate=rate))
    if as_json:
        echo_json(summary)
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
