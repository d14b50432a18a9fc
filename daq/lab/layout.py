"""What a session looks like in the lab's Tiled catalogue (written down for people in docs/lab.md).

::

    /<session id>                 container, spec "hil-session", metadata: what a search filters and a
    |                             listing shows (id, kind, rig, status, times, by, safe, streams summary,
    |                             replication, the analysis summary): small, so the catalogue's database
    |                             filters and returns it without reading anything else (docs/lab.md)
    |-- about                     container, spec "hil-session-about", metadata: the rest (config, devices,
    |                             plan outcome, stats, writer, the analysis report); a reader merges it
    |-- <stream>                  container per frame stream, metadata: channels, units, dtype, dt, ...
    |   |-- t                     array (n,) float64, s: the time of every sample
    |   |-- data                  array (n, channels), dims (sample, channel), the stream's dtype
    |   `-- frames                table: one row per recorded frame (seq, t0, dt, n, s0, t_min, t_max, ...)
    `-- events                    table: ord, stream, kind, seq, t, replay, body (JSON text)

Arrays are chunked by whole rows, ``chunk_rows`` per block, so a block is written under a deterministic
index (a repeated write puts the same bytes in the same place); a time window reads only its own rows (the
server slices), after a few short reads of ``t`` that find its edges.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES
from daq.store.records import SessionInfo, StreamInfo

LAYOUT_VERSION = 3  # 3: the session's bulk in its "about" child; 2: no t_index; readers take 1 and 2 too
SESSION_SPEC = "hil-session"
ABOUT_SPEC = "hil-session-about"
ABOUT = "about"
#: A session's fields kept in its ``about`` child, not in the searched container (layout 3).
ABOUT_FIELDS = ("config", "devices", "plan_outcome", "stats", "writer_host", "writer_pid")
STREAM_SPEC = "hil-stream"
EVENTS = "events"
FRAMES = "frames"
TIME = "t"
DATA = "data"
#: Largest block of an array, bytes: each block is one request of a push, and a Tiled server's work per
#: request (routing, the catalogue's queries) costs more than the bytes of a smaller block. A window read
#: is not made larger by it: the server sends only the rows asked for (``?slice=``).
BLOCK_BYTES = 16 << 20
FRAME_COLUMNS = ("ord", "seq", "t0", "dt", "n", "has_ts", "replay", "s0", "t_min", "t_max")
EVENT_COLUMNS = ("ord", "stream", "kind", "seq", "t", "replay", "body")
#: Replication states of a session container; only "verified" sessions are listed by ``hil --store URL``,
#: and "live" ones (being recorded, streamed by daq/lab/live.py) by ``sessions --status running``.
PARTIAL, VERIFIED, LIVE = "partial", "verified", "live"


def chunk_rows(si: StreamInfo) -> int:
    """Rows per block of a stream's arrays: a power of two with the data block at most BLOCK_BYTES."""
    assert si.dtype is not None  # a frame stream
    row = max(1, len(si.channels)) * SUPPORTED_DTYPES[si.dtype].itemsize
    rows = 1
    while rows * 2 * max(row, 8) <= BLOCK_BYTES:
        rows *= 2
    return rows


def n_blocks(n: int, rows: int) -> int:
    return -(-n // rows)


def iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat() if t is not None else None


def stream_fields(si: StreamInfo) -> dict:
    """A stream's :class:`StreamInfo` as metadata (every field, so a reader rebuilds it exactly)."""
    return {"type": si.type, "channels": list(si.channels), "units": list(si.units), "dtype": si.dtype,
            "dt": si.dt, "n_messages": si.n_messages, "n_samples": si.n_samples, "t_first": si.t_first,
            "t_last": si.t_last, "monotonic": si.monotonic}


def stream_info(name: str, meta: dict) -> StreamInfo:
    return StreamInfo(name, meta["type"], list(meta["channels"]), list(meta["units"]), meta["dtype"],
                      meta["dt"], meta["n_messages"], meta["n_samples"], meta["t_first"], meta["t_last"],
                      bool(meta["monotonic"]))


def session_fields(info: SessionInfo, by: str | None, outcome: dict | None) -> dict:
    """The session container's metadata: what ``hil sessions`` searches and lists (small: the rest is
    :func:`about_fields`)."""
    rig = (info.config or {}).get("rig", {}) if isinstance(info.config, dict) else {}
    safe = outcome.get("safe") if isinstance(outcome, dict) else None
    return {
        "layout": LAYOUT_VERSION,
        "id": info.id,
        "kind": info.kind,
        "rig": {"kind": rig.get("kind", info.kind), "name": rig.get("name", ""),
                **({"dry_run": rig["dry_run"]} if rig.get("dry_run") is not None else {})},
        "status": info.status,
        "reason": info.reason,
        "started": info.started,
        "ended": info.ended,
        "started_iso": iso(info.started),
        "ended_iso": iso(info.ended),
        "by": by,
        "safe": safe,
        "software_version": info.software_version,
        "heartbeat": info.heartbeat,
        "streams": {name: stream_fields(s) for name, s in info.streams.items()},
        "replication": {"state": PARTIAL},
    }


def about_fields(info: SessionInfo, outcome: dict | None) -> dict:
    """The metadata of a session's ``about`` child: what ``hil show`` and an analysis need beyond
    :func:`session_fields` (the config snapshot alone is 2-4 kB)."""
    return {"layout": LAYOUT_VERSION, "config": info.config, "devices": info.devices, "plan_outcome": outcome,
            "stats": info.stats, "writer_host": info.writer_host, "writer_pid": info.writer_pid}


def session_info(meta: dict) -> SessionInfo:
    """The :class:`SessionInfo` a session container's metadata describes."""
    return SessionInfo(
        id=meta["id"], kind=meta["kind"], status=meta["status"], reason=meta["reason"],
        started=meta["started"], ended=meta["ended"], config=_plain(meta["config"]),
        software_version=meta["software_version"], devices=_plain(meta["devices"]),
        streams={name: stream_info(name, s) for name, s in sorted(meta["streams"].items())},
        writer_host=meta.get("writer_host"), writer_pid=meta.get("writer_pid"),
        heartbeat=meta.get("heartbeat"), stats=_plain(meta.get("stats")),
    )


def _plain(value):
    """Tiled's read-only views (DictView, ListView) as plain dicts and lists."""
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListView":
        return [_plain(v) for v in value]
    return value


def plain(value):
    return _plain(value)


def stream_node_fields(si: StreamInfo, rows: int) -> dict:
    """A stream container's metadata: the stream's fields plus its rows per block."""
    return {
        **stream_fields(si),
        "time_unit": "s",
        "units_by_channel": dict(zip(si.channels, si.units, strict=True)),
        "chunk_rows": rows,
    }


def frames_rows(rows: list[tuple]) -> dict[str, np.ndarray]:
    """Frame rows (FRAME_COLUMNS order) as columns; a missing dt is NaN."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(FRAME_COLUMNS)
    out = {}
    for name, col in zip(FRAME_COLUMNS, cols, strict=True):
        if name in ("dt", "t0", "t_min", "t_max"):
            out[name] = np.array([np.nan if v is None else v for v in col], dtype=np.float64)
        else:
            out[name] = np.array(col, dtype=np.int64)
    return out
