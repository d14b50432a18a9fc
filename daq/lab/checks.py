"""A local session read whole before anything goes to the lab: every frame decodes, the sample counts
agree with the stream table, every event body parses. The same pass gives what the lab's copy is
verified against: per stream the row count and a SHA-256 of the time axis and of the data, and per table
its rows and a SHA-256 of its columns. A corrupt session is refused here, so nothing of it is written."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field

import numpy as np

from daq import json_codec
from daq.lab.digests import BlockDigests
from daq.lab.layout import EVENT_COLUMNS, FRAME_COLUMNS, chunk_rows, frames_rows
from daq.lab.settings import LabError
from daq.store.reader import SessionReader
from daq.store.records import SessionInfo


@dataclass
class StreamCheck:
    rows: int
    chunk_rows: int
    t_sha256: str
    data_sha256: str
    frames: int
    frames_sha256: str
    t_blocks: BlockDigests = field(default_factory=BlockDigests.empty)  # per block (daq/lab/digests.py)
    data_blocks: BlockDigests = field(default_factory=BlockDigests.empty)

    def as_dict(self) -> dict:
        return {"rows": self.rows, "t_sha256": self.t_sha256, "data_sha256": self.data_sha256,
                "frames": self.frames, "frames_sha256": self.frames_sha256}


@dataclass
class SessionCheck:
    streams: dict[str, StreamCheck]
    events: int
    events_sha256: str

    def as_dict(self) -> dict:
        return {"streams": {k: v.as_dict() for k, v in self.streams.items()},
                "events": {"rows": self.events, "sha256": self.events_sha256}}


def frame_rows(path, sid: str, stream: str) -> list[tuple]:
    """The frame rows (FRAME_COLUMNS) of a stream, in sample order, without payloads."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)) as db:
        return db.execute(f"SELECT {', '.join(FRAME_COLUMNS)} FROM frames WHERE session_id=? AND stream=? "
                          "ORDER BY s0, ord", (sid, stream)).fetchall()


def event_rows(path, sid: str) -> list[tuple]:
    """The event rows (EVENT_COLUMNS) of a session in arrival order, bodies as their stored JSON text."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)) as db:
        return db.execute(f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE session_id=? ORDER BY ord",
                          (sid,)).fetchall()


def table_sha256(columns: dict[str, np.ndarray]) -> str:
    """SHA-256 over a table's columns in order (numbers as little-endian bytes, text as UTF-8 lines)."""
    h = hashlib.sha256()
    for name, col in columns.items():
        h.update(name.encode())
        arr = np.asarray(col)
        if arr.dtype.kind in "OUS":
            h.update("\n".join(str(v) for v in arr).encode("utf-8", "surrogatepass"))
        else:
            h.update(np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"))).tobytes())
    return h.hexdigest()


def event_columns(rows: list[tuple]) -> dict[str, np.ndarray]:
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(EVENT_COLUMNS)
    out = {}
    for name, col in zip(EVENT_COLUMNS, cols, strict=True):
        if name in ("stream", "kind", "body"):
            out[name] = np.array(col, dtype=object)
        elif name == "t":
            out[name] = np.array(col, dtype=np.float64)
        else:
            out[name] = np.array(col, dtype=np.int64)
    return out


def check_session(store: SessionReader, info: SessionInfo,
                  block_rows: Mapping[str, int] | None = None) -> SessionCheck:
    """Read the session whole (bounded memory: one block at a time); LabError if anything is off.
    ``block_rows``: rows per block of streams the lab has blocked otherwise (a live session's), else
    :func:`layout.chunk_rows`; the per-block digests follow them."""
    streams = {}
    for name, si in info.streams.items():
        if si.type != "frame" or not si.n_samples:
            continue
        rows = frame_rows(store.path, info.id, name)
        counted = sum(r[FRAME_COLUMNS.index("n")] for r in rows)
        if counted != si.n_samples:
            raise LabError(f"session {info.id} is corrupt: stream {name} holds {counted} samples in "
                           f"its frames but its table says {si.n_samples}; not pushed")
        block = (block_rows or {}).get(name) or chunk_rows(si)
        t_hash, d_hash, n = hashlib.sha256(), hashlib.sha256(), 0
        t_blocks, d_blocks = BlockDigests.empty(), BlockDigests.empty()
        try:
            for chunk in store.iter_stream(info.id, name, block):
                t_hash.update(np.ascontiguousarray(chunk.t, dtype="<f8").data)
                d_hash.update(np.ascontiguousarray(chunk.data).data)
                t_blocks.add(np.ascontiguousarray(chunk.t, dtype="<f8"))
                d_blocks.add(chunk.data)
                n += len(chunk)
        except (ValueError, TypeError) as exc:
            raise LabError(f"session {info.id} is corrupt: stream {name} does not decode ({exc}); "
                           "not pushed") from None
        if n != si.n_samples:
            raise LabError(f"session {info.id} is corrupt: stream {name} reads {n} samples of "
                           f"{si.n_samples}; not pushed")
        streams[name] = StreamCheck(n, block, t_hash.hexdigest(), d_hash.hexdigest(), len(rows),
                                    table_sha256(frames_rows(rows)), t_blocks, d_blocks)
    events = event_rows(store.path, info.id)
    for row in events:
        try:
            json_codec.loads(row[-1])
        except ValueError:
            raise LabError(f"session {info.id} is corrupt: event {row[0]} has a body that is not JSON; "
                           "not pushed") from None
    return SessionCheck(streams, len(events), table_sha256(event_columns(events)))
