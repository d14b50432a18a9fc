"""``hil --store URL watch SESSION``: follow a session the lab holds live (daq/lab/live.py) as ``hil watch``
follows a run on the rig PC - its online estimates as they arrive, how far each stream is, how far the lab
is behind the recording - until the session ends, whose status and reason it prints."""

from __future__ import annotations

import re
import time

import click

from daq import json_codec
from daq.lab import layout

ONLINE_SUFFIX = ".online"  # the streams of online estimates, as hil watch shows them
#: s between looks at the lab (the forwarder updates the session's metadata every second).
PERIOD_S = 1.0


def watch_lab(state, session: str | None, count: int, timeout: float | None, as_json: bool, show) -> None:
    """``hil --store URL watch SESSION``; ``show(tables, stream, body)`` draws an estimate (hil watch's)."""
    if not state.is_lab or not session:
        raise click.UsageError("a session is watched in a lab: hil --store URL watch SESSION")
    if not re.fullmatch("[0-9a-f]{12}", session):
        raise click.UsageError(f"{session[:40]!r} is not a session id (12 hex digits)")
    sid = session
    with state.open_store() as lab:
        try:
            lab.root[sid]
        except KeyError:
            raise click.ClickException(f"the lab at {lab.path} holds no session {sid}") from None
        try:
            follow(lab.root, sid, as_json, show, count, timeout)
        except KeyboardInterrupt:
            return


def follow(root, sid: str, as_json: bool, show, count: int = 0, timeout: float | None = None,
           period: float = PERIOD_S) -> tuple[str, int]:
    """Print the session's new online events and its progress until it ends (or ``count`` events, or
    ``timeout`` s without news); (its status, the events shown)."""
    seen, shown = 0, 0
    tables: dict[str, tuple] = {}  # stream -> hil watch's table of its estimates
    last_news, last_progress = time.monotonic(), ""
    while True:
        node = root[sid]
        meta = layout.plain(node.metadata)
        rows = _event_rows(node, seen)
        seen += len(rows)
        for stream, kind, t, body in rows:
            if not stream.endswith(ONLINE_SUFFIX):
                continue
            shown += 1
            if as_json:
                click.echo(json_codec.dumps({"stream": stream, "kind": kind, "t": t, **body}))
            elif kind == "estimate":
                show(tables, stream, body)
            if count and shown >= count:
                return meta["status"], shown
        progress = _progress(meta)
        if progress != last_progress or rows:
            last_news, last_progress = time.monotonic(), progress
            if not as_json:
                click.echo(progress, err=True)
        if meta["status"] != "running":
            status, reason = meta["status"], meta.get("reason")
            end = f"session {sid} {status}" + (f" ({reason})" if reason else "")
            record = {"session": sid, "status": status, "reason": reason}
            click.echo(json_codec.dumps(record) if as_json else end)
            return meta["status"], shown
        if timeout is not None and time.monotonic() - last_news > timeout:
            return meta["status"], shown
        time.sleep(period)


def _event_rows(node, seen: int) -> list[tuple[str, str, float, dict]]:
    """The session's events after the first ``seen`` (stream, kind, t, body)."""
    if layout.EVENTS not in node:
        return []
    df = node[layout.EVENTS].read()
    out = []
    cols = [df[c].tolist()[seen:] for c in ("stream", "kind", "t", "body")]
    for stream, kind, t, body in zip(*cols, strict=True):
        try:
            parsed = json_codec.loads(body)
        except ValueError:
            continue
        out.append((str(stream), str(kind), float(t), _as_dict(parsed)))
    return out


def _as_dict(body) -> dict:
    return body if isinstance(body, dict) else {"value": body}


def _progress(meta: dict) -> str:
    """One line: the status, each stream's samples in the lab, and how far behind the recording it is."""
    parts = []
    for name, s in sorted((meta.get("streams") or {}).items()):
        if s.get("type") == "frame":
            span = (s["t_last"] - s["t_first"]) if s.get("t_last") is not None and s.get("t_first") else 0.0
            parts.append(f"{name} {s['n_samples']} samples ({span:.1f} s)")
    live = meta.get("live") or {}
    behind = f"; lab behind by {live['behind']:.1f} s" if live.get("behind") else ""
    return f"{meta['status']}: " + ", ".join(parts) + behind
