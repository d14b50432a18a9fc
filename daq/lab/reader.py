"""A lab as a read-only session store: :class:`LabReader` answers what :class:`daq.store.reader.SessionReader`
answers (sessions, sample ranges, time windows, chunks, events, messages in arrival order), from the Tiled
catalogue, so ``hil --store URL show|export|analyze|replay`` run the code they run on a local store and
give the same numbers. Reads fetch what they need: a time window finds its two edges with a few short reads
of the time axis and then reads the window's rows, never the whole stream."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from typing import Any, Self, cast

import numpy as np

from daq import json_codec
from daq.bus.frames import SUPPORTED_DTYPES, Event, Frame
from daq.lab import layout
from daq.lab.about import about_metadata, merged, write_analysis
from daq.lab.checks import event_columns, table_sha256
from daq.lab.connect import from_client_error, open_lab
from daq.lab.digests import CopyChecker, differs, unreadable
from daq.lab.names import is_session_key, shown
from daq.lab.people import whoami
from daq.lab.search import Filters
from daq.lab.search_pages import listing_info, newest_rows, search_rows
from daq.lab.settings import LabError
from daq.lab.timing import stream_timing
from daq.store.errors import StoreError, UnknownSession
from daq.store.reader import CHUNK_SAMPLES, LATEST
from daq.store.records import SessionInfo, StreamData, StreamInfo, StreamTiming

#: Samples of the time axis read at once while looking for a window's edge (16 kB).
EDGE_READ = 2048


def search_edge(read: Callable[[int, int], np.ndarray], n: int, t: float, t_first: float | None,
                t_last: float | None) -> int:
    """The first index of a non-decreasing time axis of ``n`` samples whose time is at or after ``t``
    (``n`` if none), reading it only through ``read(lo, hi)`` (the times of samples lo..hi-1), EDGE_READ
    samples at a time: where ``t`` should lie is guessed from the times at the bounds (one read for a
    steady sample rate), and every other read halves the bounds, so gaps cost at most a few reads."""
    if t_first is not None and t <= t_first:
        return 0
    if t_last is not None and t > t_last:
        return n
    lo, hi = 0, n  # the answer lies in [lo, hi]
    t_lo, t_hi = t_first, t_last  # about the times at lo and hi - 1, for the guess
    k = 0
    while True:  # each read returns or narrows [lo, hi] by EDGE_READ at least
        if hi - lo <= EDGE_READ:
            return lo + int(np.searchsorted(read(lo, hi), t, side="left"))
        if k % 2 == 0 and t_lo is not None and t_hi is not None and t_hi > t_lo:
            mid = lo + int((t - t_lo) / (t_hi - t_lo) * (hi - lo))
        else:
            mid = (lo + hi) // 2
        a = min(max(lo, mid - EDGE_READ // 2), hi - EDGE_READ)
        times = read(a, a + EDGE_READ)
        if times[0] >= t:
            hi, t_hi = a, float(times[0])
        elif times[-1] < t:
            lo, t_lo = a + EDGE_READ, float(times[-1])
        else:
            return a + int(np.searchsorted(times, t, side="left"))
        k += 1


class NotStored(LabError):
    """An analysis read from the lab with a key that may not write it there (a viewer's)."""


class LabReader:
    """Read the sessions the lab at ``url`` holds verified (``key``: its API key)."""

    def __init__(self, url: str, key: str):
        self.path = url.rstrip("/")
        self.root = open_lab(self.path, key)
        self._key = key  # to ask the lab who holds it when recording an analysis
        self._nodes: dict[str, Any] = {}  # tiled nodes (tiled has no type information)
        # Each lookup below is a request the lab's server answers with several catalogue queries; a command
        # asks for the same ones again and again (every window read wants the session's streams), so each is
        # looked up once per reader, as the session container itself is (``_nodes``).
        self._about: dict[str, dict] = {}  # a session's ``about`` metadata, by session id
        self._children: dict[tuple[str, str], Any] = {}  # a session's stream and events nodes (None: absent)
        self._parts: dict[tuple[str, str], Any] = {}  # the t and data arrays of stream nodes
        # a verified session's tables (it never changes), checked when read: events, and frames by stream
        self._events: dict[str, list[tuple]] = {}
        self._frames: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self.checker = CopyChecker()  # what is read is what was pushed (daq/lab/digests.py)

    # ------------------------------------------------------------------ sessions

    def search(self, filters: Filters | None = None) -> list[SessionInfo]:
        """Verified sessions matching ``filters``, oldest first, as a listing sees them (their config holds
        only its ``rig`` table: :meth:`get_session` reads a whole session)."""
        return [info for info, _ in self.search_metadata(filters)]

    def search_metadata(self, filters: Filters | None = None) -> list[tuple[SessionInfo, dict]]:
        """Verified sessions matching ``filters`` with the listing fields of their metadata (who ran them,
        the analysis summary: :data:`daq.lab.search_pages.LISTING`), oldest first, in one search."""
        try:
            rows = search_rows(self.root, filters or Filters())
            pairs = [(listing_info(row), row) for row in rows]
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None
        return sorted(pairs, key=lambda p: (p[0].started, p[0].id))

    def newest_metadata(self, filters: Filters | None,
                        limit: int) -> tuple[list[tuple[SessionInfo, dict]], int]:
        """The ``limit`` newest verified sessions matching ``filters`` as :meth:`search_metadata` gives
        them (oldest of them first), and how many match in all; the server sorts, cuts and counts."""
        try:
            rows, total = newest_rows(self.root, filters or Filters(), limit)
            pairs = [(listing_info(row), row) for row in reversed(rows)]
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None
        return pairs, total

    def list_sessions(self) -> list[SessionInfo]:
        return self.search()

    def session_metadata(self, session: str) -> dict:
        """The session container's whole metadata (who, safe outcome, replication, analysis...)."""
        node = self._node(session)
        sid = str(node.metadata["id"])
        if sid not in self._about:
            self._about[sid] = about_metadata(node)
        return merged(layout.plain(node.metadata), self._about[sid])

    def get_session(self, session_id_or_unique_prefix: str) -> SessionInfo:
        return layout.session_info(self.session_metadata(session_id_or_unique_prefix))

    def _node(self, key: str):
        key = str(key)
        if key in self._nodes:
            return self._nodes[key]
        if not is_session_key(key) and key != LATEST:  # never a path, query or fragment in a request
            raise UnknownSession(f"{shown(key)} is not a session id (hex digits, or a prefix of them)")
        try:
            node = self.root[key] if is_session_key(key) else None
        except KeyError:
            node = None
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None
        if node is not None and not _verified(node.metadata):
            node = None
        if node is None:
            node = self._by_prefix(key)
        self._nodes[key] = self._nodes[node.metadata["id"]] = node
        return node

    def _by_prefix(self, key: str):
        infos = self.list_sessions()
        if key == LATEST and infos:
            return self.root[max(infos, key=lambda i: (i.started, i.id)).id]
        hits = [i.id for i in infos if key and i.id.startswith(key)]
        if len(hits) > 1:
            raise UnknownSession(f"session prefix {key!r} is ambiguous ({', '.join(hits[:3])}...)")
        if not hits:
            raise UnknownSession(f"unknown session {key!r} in {self.path}")
        return self.root[hits[0]]

    # ------------------------------------------------------------------ frame streams

    def _frame_stream(self, session_id: str, stream: str) -> tuple[str, StreamInfo, Any]:
        info = self.get_session(session_id)
        si = info.streams.get(stream)
        if si is None or si.type != "frame":
            names = [s for s, x in info.streams.items() if x.type == "frame"]
            raise StoreError(f"session {info.id} has no frame stream {stream!r} (frame streams: {names})")
        return info.id, si, (self._child(info.id, stream, "stream") if si.n_samples else None)

    def _lookup(self, sid: str, key: str):
        """The session's child node ``key`` (a stream or the events table) or None, looked up once."""
        if (sid, key) not in self._children:
            try:
                self._children[(sid, key)] = self._node(sid)[key]
            except KeyError:
                self._children[(sid, key)] = None
        return self._children[(sid, key)]

    def _child(self, sid: str, key: str, part: str):
        """:meth:`_lookup`; a node the push wrote but the lab lost is one line naming it (LabCopyDiffers)."""
        found = self._lookup(sid, key)
        if found is None:
            raise differs(sid, "" if key == layout.EVENTS else key, part)
        return found

    def read_stream(self, session_id: str, stream: str) -> StreamData:
        return self.read_range(session_id, stream)

    def read_range(self, session_id: str, stream: str, start: int = 0, stop: int | None = None) -> StreamData:
        _, si, snode = self._frame_stream(session_id, stream)
        lo = max(0, min(int(start or 0), si.n_samples))
        hi = si.n_samples if stop is None else max(lo, min(int(stop), si.n_samples))
        return self._slice(si, snode, lo, hi)

    def _slice(self, si: StreamInfo, snode, lo: int, hi: int) -> StreamData:
        assert si.dtype is not None  # a frame stream
        dtype = _dtype(si)
        if snode is None or hi <= lo:
            return StreamData(si.name, np.empty(0), np.empty((0, len(si.channels)), dtype=dtype),
                              list(si.channels), list(si.units), start=lo)
        try:
            t = np.asarray(self._part(snode, layout.TIME)[lo:hi], dtype=np.float64)
            data = np.asarray(self._part(snode, layout.DATA)[lo:hi], dtype=dtype).reshape(hi - lo,
                                                                                        len(si.channels))
            self._check(snode, layout.TIME, lo, hi, t)
            self._check(snode, layout.DATA, lo, hi, data)
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None
        return StreamData(si.name, t, data, list(si.channels), list(si.units), start=lo)

    def window_range(self, session_id: str, stream: str, t_start: float | None = None,
                     t_stop: float | None = None) -> tuple[int, int] | None:
        """``[start, stop)`` of a time window of a monotonic stream from the blocks at its edges."""
        _, si, snode = self._frame_stream(session_id, stream)
        if not si.monotonic:
            return None
        if snode is None:
            return 0, 0
        lo = 0 if t_start is None else self._edge(snode, si, t_start)
        hi = si.n_samples if t_stop is None else self._edge(snode, si, t_stop)
        return lo, max(lo, hi)

    def _edge(self, snode, si: StreamInfo, t: float) -> int:
        """The first sample at or after ``t`` of a monotonic stream (a few short reads of its time axis)."""
        return search_edge(lambda lo, hi: self._times(snode, lo, hi), si.n_samples, t, si.t_first, si.t_last)

    def _part(self, snode, key: str):
        """The array ``key`` of a stream node, looked up once (each lookup is a request)."""
        found = self._parts.get((snode.uri, key))
        if found is None:
            found = self._parts[(snode.uri, key)] = _held(snode, key, snode.metadata["session"],
                                                          snode.item["id"], key)
        return found

    def _check(self, snode, part: str, lo: int, hi: int, fetched: np.ndarray | None) -> None:
        """The blocks that rows lo:hi of ``part`` touch are as pushed (else LabCopyDiffers, naming one)."""
        meta = snode.metadata
        self.checker.rows(str(meta["session"]), str(snode.item["id"]), part, self._part(snode, part),
                          int(meta["n_samples"]), int(meta["chunk_rows"]), lo, hi, fetched)

    def _times(self, snode, lo: int, hi: int) -> np.ndarray:
        try:
            t = np.asarray(self._part(snode, layout.TIME)[lo:hi], dtype=np.float64)
            self._check(snode, layout.TIME, lo, hi, t)
            return t
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None

    def read_window(self, session_id: str, stream: str, t_start: float | None = None,
                    t_stop: float | None = None) -> StreamData:
        rng = self.window_range(session_id, stream, t_start, t_stop)
        if rng is not None:
            return self.read_range(session_id, stream, *rng)
        chunks = list(self.iter_stream(session_id, stream, 1 << 62, t_start=t_start, t_stop=t_stop))
        _, si, _ = self._frame_stream(session_id, stream)
        if chunks:
            return chunks[0]
        assert si.dtype is not None  # a frame stream
        return StreamData(stream, np.empty(0), np.empty((0, len(si.channels)), _dtype(si)),
                          list(si.channels), list(si.units), index=np.empty(0, dtype=np.int64))

    def count_samples(self, session_id: str, stream: str, t_start: float | None = None,
                      t_stop: float | None = None) -> int:
        rng = self.window_range(session_id, stream, t_start, t_stop)
        if rng is not None:
            return rng[1] - rng[0]
        return sum(len(c) for c in self.iter_stream(session_id, stream, CHUNK_SAMPLES, t_start=t_start,
                                                    t_stop=t_stop))

    def iter_stream(self, session_id: str, stream: str, chunk_samples: int = CHUNK_SAMPLES, *,
                    start: int | None = None, stop: int | None = None, t_start: float | None = None,
                    t_stop: float | None = None, reuse: bool = False) -> Generator[StreamData, None, None]:
        """Chunks of ``chunk_samples`` samples (the last shorter), as the local store gives them."""
        if not (isinstance(chunk_samples, int) and chunk_samples > 0):
            raise StoreError(f"chunk_samples must be a positive integer, got {chunk_samples!r}")
        _, si, snode = self._frame_stream(session_id, stream)
        lo = max(0, min(int(start or 0), si.n_samples))
        hi = si.n_samples if stop is None else max(lo, min(int(stop), si.n_samples))
        windowed = t_start is not None or t_stop is not None
        if windowed and si.monotonic:
            w0, w1 = cast(tuple[int, int], self.window_range(session_id, stream, t_start, t_stop))
            lo, hi = max(lo, w0), max(max(lo, w0), min(hi, w1))
        elif windowed:
            yield from self._filtered(si, snode, lo, hi, chunk_samples, t_start, t_stop)
            return
        step = _read_step(si, snode, chunk_samples)
        buf: list[StreamData] = []
        have, first = 0, lo
        edges = [lo, *range((lo // step + 1) * step, hi, step), hi]  # on block bounds: whole blocks hash here
        for a, b in zip(edges[:-1], edges[1:], strict=True):  # hand out chunks of the size asked for
            if b <= a:
                continue
            buf.append(self._slice(si, snode, a, b))
            have += len(buf[-1])
            while have >= chunk_samples:
                chunk, buf, have = _take(si, buf, chunk_samples, first)
                first += len(chunk)
                yield chunk
        if have:
            yield _take(si, buf, have, first)[0]

    def _filtered(self, si, snode, lo, hi, chunk_samples, t_start, t_stop) -> Iterator[StreamData]:
        """A window of a stream whose times go back: the samples inside it, with their indices."""
        rows = _read_step(si, snode, 1 << 62) if snode is not None else 1
        for a in range(lo, hi, rows):
            part = self._slice(si, snode, a, min(hi, a + rows))
            keep = np.ones(len(part), dtype=bool)
            if t_start is not None:
                keep &= part.t >= t_start
            if t_stop is not None:
                keep &= part.t < t_stop
            idx = part.sample_index()[keep]
            for k in range(0, len(idx), chunk_samples):
                sel = slice(k, k + chunk_samples)
                yield StreamData(si.name, part.t[keep][sel], part.data[keep][sel], list(si.channels),
                                 list(si.units), start=int(idx[sel][0]), index=idx[sel])

    def frames_table(self, session_id: str, stream: str) -> dict[str, np.ndarray]:
        sid, si, snode = self._frame_stream(session_id, stream)
        if snode is None:
            return {c: np.empty(0) for c in layout.FRAME_COLUMNS}
        if (sid, stream) in self._frames:
            return dict(self._frames[(sid, stream)])
        node = self._parts.get((snode.uri, layout.FRAMES))
        if node is None:
            node = self._parts[(snode.uri, layout.FRAMES)] = _held(snode, layout.FRAMES, session_id, stream,
                                                                  "frames table")
        df = self._table(node, session_id, stream, "frames table")
        cols = {c: df[c].to_numpy() for c in layout.FRAME_COLUMNS}
        self.checker.table(session_id, stream, node, len(df), table_sha256(cols))
        if _verified(self._node(sid).metadata, layout.VERIFIED):
            self._frames[(sid, stream)] = cols
        return dict(cols)

    def _table(self, node, session: str, stream: str, part: str):
        """A table node read whole; a table whose file the lab lost (the server errs) is one line."""
        try:
            return node.read()
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            if unreadable(node, exc):
                raise differs(session, stream, part) from None
            raise _lab_error(self.path, exc) from None

    def frame_index(self, session_id: str, stream: str) -> list[tuple[int, int, float | None, float | None]]:
        cols = self.frames_table(session_id, stream)
        return [(int(s0), int(n), _none(a), _none(b)) for s0, n, a, b in
                zip(cols["s0"], cols["n"], cols["t_min"], cols["t_max"], strict=True)]

    def stream_timing(self, session_id: str, stream: str, max_frames: int = 32) -> StreamTiming:
        """The stream's timing (``hil show``), for a stream whose every block is as pushed: a summary of
        the whole stream is given only for a whole copy (the server confirms each block by its hash;
        nothing is downloaded for it)."""
        _, si, snode = self._frame_stream(session_id, stream)
        if snode is not None:
            try:
                for part in (layout.TIME, layout.DATA):
                    self._check(snode, part, 0, si.n_samples, None)
            except Exception as exc:  # noqa: BLE001 - the client's errors as one line
                raise _lab_error(self.path, exc) from None
        return stream_timing(si, self.frames_table(session_id, stream),
                             lambda lo, hi: self.read_range(session_id, stream, lo, hi).t, max_frames)

    # ------------------------------------------------------------------ events and messages

    def _event_rows(self, sid: str) -> list[tuple]:
        """The session's events table as rows; a verified session's read once a reader (a live one grows)."""
        if sid in self._events:
            return self._events[sid]
        table = self._lookup(sid, layout.EVENTS)
        if table is None:
            meta = self._node(sid).metadata
            pushed = ((meta.get("replication") or {}).get("checks") or {}).get("events") or {}
            if pushed.get("rows"):  # the push wrote them: lost in the lab
                raise differs(sid, "", "events table")
            return []
        df = self._table(table, sid, "", "events table")
        rows = list(zip(*(df[c].tolist() for c in layout.EVENT_COLUMNS), strict=True))
        self.checker.table(sid, "", table, len(rows), table_sha256(event_columns(rows)))
        if _verified(self._node(sid).metadata, layout.VERIFIED):
            self._events[sid] = rows
        return rows

    def events(self, session_id: str, kind: str | None = None, stream: str | None = None, *,
               t_start: float | None = None, t_stop: float | None = None) -> list[Event]:
        sid = self.get_session(session_id).id
        out = []
        for _, s, k, q, t, r, b in self._event_rows(sid):
            if (kind is None or k == kind) and (stream is None or s == stream) \
                    and (t_start is None or t >= t_start) and (t_stop is None or t < t_stop):
                out.append(Event(stream=s, kind=k, seq=int(q), t=float(t), body=json_codec.loads(b),
                                 session_id=sid, replay=bool(r)))
        return out

    def event_counts(self, session_id: str) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for row in self._event_rows(self.get_session(session_id).id):
            counts[(row[1], row[2])] = counts.get((row[1], row[2]), 0) + 1
        return dict(sorted(counts.items()))

    def messages(self, session_id: str, streams: list[str] | None = None) -> Iterator[Frame | Event]:
        """Every frame and event in the original order; each stream read a block at a time."""
        info = self.get_session(session_id)
        items: list[tuple[int, str, int]] = []  # (ord, stream or "", row)
        tables = {}
        for name, si in info.streams.items():
            if si.type == "frame" and si.n_samples and (streams is None or name in streams):
                tables[name] = self.frames_table(info.id, name)
                items += [(int(o), name, k) for k, o in enumerate(tables[name]["ord"])]
        events = [e for e in self._event_rows(info.id) if streams is None or e[1] in streams]
        items += [(int(e[0]), "", k) for k, e in enumerate(events)]
        items.sort()
        cursors = {name: _Cursor(self, info.id, info.streams[name]) for name in tables}
        for _, name, k in items:
            if not name:
                _, s, kind, q, t, r, b = events[k]
                yield Event(stream=s, kind=kind, seq=int(q), t=float(t), body=json_codec.loads(b),
                            session_id=info.id, replay=bool(r))
                continue
            col = tables[name]
            s0, n, has_ts = int(col["s0"][k]), int(col["n"][k]), bool(col["has_ts"][k])
            t, data = cursors[name].rows(s0, s0 + n)
            si = info.streams[name]
            yield Frame(stream=name, seq=int(col["seq"][k]), t0=float(col["t0"][k]),
                        dt=None if has_ts else float(col["dt"][k]), channels=list(si.channels),
                        units=list(si.units), data=data, timestamps=t if has_ts else None,
                        session_id=info.id, replay=bool(col["replay"][k]))

    # ------------------------------------------------------------------ analysis results

    def record_analysis(self, session_id: str, analysis: dict) -> None:
        """Put an analysis summary into the session's metadata (searchable by ``hil sessions``); a viewer's
        key writes nothing (:class:`NotStored`)."""
        node = self._node(session_id)
        try:
            who = whoami(self.path, self._key)
            if who is not None and who.get("role") == "viewer":
                raise NotStored(f"the analysis was not stored in the lab {self.path}: {who['name']}'s key is "
                                "a viewer's (reads only); an operator's key stores it")
            write_analysis(node, analysis, {"analysed_by": who})
            self._about.pop(str(node.metadata["id"]), None)  # its report is in ``about`` now
        except NotStored:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's errors as one line
            raise _lab_error(self.path, exc) from None

    # ------------------------------------------------------------------ life cycle

    def close(self) -> None:
        for cache in (self._nodes, self._about, self._children, self._parts, self._events,
                      self._frames):
            cache.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Cursor:
    """Rows of one stream read a block at a time, for frames taken in sample order."""

    def __init__(self, reader: LabReader, sid: str, si: StreamInfo):
        self.reader, self.sid, self.si = reader, sid, si
        self.part: StreamData | None
        self.lo, self.part = 0, None

    def rows(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        if self.part is None or a < self.lo or b > self.lo + len(self.part):
            rows = int(self.reader._child(self.sid, self.si.name, "stream").metadata["chunk_rows"])
            self.lo = a
            self.part = self.reader.read_range(self.sid, self.si.name, a, max(b, a + rows))
        return self.part.t[a - self.lo:b - self.lo], self.part.data[a - self.lo:b - self.lo]


def _read_step(si: StreamInfo, snode, chunk_samples: int) -> int:
    """Rows a read asks for at once: ``chunk_samples``, at most a final block (:func:`layout.chunk_rows`),
    and a whole number of the stream's blocks when it holds more than one (a live session's blocks of
    half a second are read several to a request; whole blocks are hashed as they arrive)."""
    if snode is None:
        return chunk_samples
    _dtype(si)  # a dtype the store never writes: one line, before its block size is asked
    rows = int(snode.metadata["chunk_rows"])
    want = min(chunk_samples, max(rows, layout.chunk_rows(si)))
    return want if want < rows else want // rows * rows


def _take(si: StreamInfo, buf: list[StreamData], n: int, first: int) -> tuple[StreamData, list, int]:
    """The first ``n`` samples of the buffered parts as one chunk, and what is left."""
    t = np.concatenate([p.t for p in buf]) if len(buf) > 1 else buf[0].t
    d = np.concatenate([p.data for p in buf]) if len(buf) > 1 else buf[0].data
    chunk = StreamData(si.name, t[:n], d[:n], list(si.channels), list(si.units), start=first)
    rest = [StreamData(si.name, t[n:], d[n:], list(si.channels), list(si.units), start=first + n)]
    left = len(t) - n
    return chunk, (rest if left else []), left


def _dtype(si: StreamInfo) -> np.dtype:
    """The numpy dtype a stream's metadata names; one line for a name the store never writes."""
    dtype = SUPPORTED_DTYPES.get(si.dtype or "")
    if dtype is None:
        raise StoreError(f"stream {si.name!r} has dtype {str(si.dtype)[:40]!r} in the lab metadata, not one "
                         f"the store writes ({', '.join(SUPPORTED_DTYPES)})")
    return dtype


def _held(node, key: str, session: str, stream: str, part: str):
    """``node[key]``; a node the push wrote but the lab lost is one line naming it (LabCopyDiffers)."""
    try:
        return node[key]
    except KeyError:
        raise differs(str(session), str(stream), part) from None


def _none(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _verified(meta, *states: str) -> bool:
    """A session a reader opens: verified, or live (being recorded: ``hil --store URL watch``); or one of
    ``states``."""
    rep = meta.get("replication") or {}
    return rep.get("state") in (states or (layout.VERIFIED, layout.LIVE))


def _lab_error(url: str, exc: BaseException):
    if isinstance(exc, (StoreError, LabError)):
        return exc
    return from_client_error(url, exc)
