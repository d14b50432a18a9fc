"""A running session in the lab while it records: a forwarder of its own (a process started beside the run)
reads what the rig's SQLite store already holds and streams it into the session's container with Tiled's
own streaming writes (arrays grown by PATCH with ``extend``, tables appended), so any reader - ``hil
--store URL watch``, a notebook with ``subscribe()`` - follows it. The recording never waits on it: the
forwarder only reads the store (SQLite's WAL lets a reader and the writer go on together), and a lab that
is slow or down leaves it *behind*, catching up when the lab answers again. When the session ends it
sends the tail, marks the end, and runs the verified push (:mod:`daq.lab.push`) on the same container:
the live copy and the final copy are one container.

Layout while live (what :mod:`daq.lab.layout` says, with ``replication.state = "live"``): a stream's ``t``
and ``data`` appear once it holds ``live_rows`` samples (about LIVE_SPAN_S of them: Tiled's Zarr arrays
have the size of their first block, so an array is declared empty and shows rows only once its first
whole block is written - a reader never sees a row the store does not hold) and then grow with every
poll; its ``frames`` table and the session's ``events`` table are CSV tables (appendable). The verified
push at the end keeps all of them: it checks each block by its hash, appends what the forwarder had not
sent, and adds the digests (:meth:`daq.lab.push.Pusher._array`)."""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES
from daq.lab import layout
from daq.lab.about import write_about
from daq.lab.arrow_columns import to_arrow
from daq.lab.checks import event_columns
from daq.lab.names import check_session_id, check_stream_name
from daq.lab.push import child, delete, session_metadata, status_of
from daq.lab.push_lock import pushing
from daq.lab.settings import ENV_KEY, ENV_KEY_FILE, LabError, LabTable, read_key
from daq.lab.trust import default_trust
from daq.store.reader import SessionReader
from daq.store.records import FINAL_STATUSES, SessionInfo, StreamInfo

log = logging.getLogger("hil.lab.live")

POLL_S = 0.1  # s between looks at the store (the store commits every 0.25 s)
META_EVERY_S = 1.0  # s between updates of the session's metadata (counts, heartbeat, lag)
TABLES_EVERY_S = 1.0  # s between appends to the frames and events tables
LIVE_SPAN_S = 0.5  # s of samples in a live block
RETRY_S = (0.5, 5.0)  # s before trying a lab that failed again: the first wait, the longest
MAX_WRITE_BYTES = 8 << 20  # largest live write (catching up goes in pieces of this)
#: The session's field saying how the forwarder is doing: heartbeat (unix s), behind (s of recording not
#: yet in the lab), host. A lab that hears nothing for a while marks it incomplete (daq/lab/live_sweep.py).
LIVE_KEY = "live"
#: s a forwarder waits for a lab that is down after its session ended (then the next push --pending sends it)
ENDED_PATIENCE_S = 600.0


def live_rows(si: StreamInfo, n: int, t_first: float | None, t_last: float | None) -> int:
    """Rows of a live block: a power of two holding about LIVE_SPAN_S of samples at the stream's rate
    (its nominal period, else its rate so far), at most the final block (:func:`layout.chunk_rows`)."""
    dt = si.dt
    if not dt and n > 1 and t_first is not None and t_last is not None and t_last > t_first:
        dt = (t_last - t_first) / (n - 1)
    want = LIVE_SPAN_S / dt if dt else 1.0
    rows = 1
    while rows * 2 <= want:
        rows *= 2
    return min(rows, layout.chunk_rows(si))


@dataclass
class _Stream:
    """What of one stream is in the lab."""

    name: str
    node: Any = None  # the stream container (tiled's nodes have no type information)
    t: Any = None
    data: Any = None
    frames: Any = None
    rows: int = 0  # live block
    sent: int = 0  # samples in the lab
    frames_sent: int = 0  # frame rows in the lab
    t_last: float | None = None


class Forwarder:
    """Streams one running session of the store at ``store_path`` to the lab at ``url``."""

    def __init__(self, store_path: str | os.PathLike, session: str, url: str, key: str):
        self.store_path, self.sid = str(store_path), check_session_id(session)
        self.url, self.key = url.rstrip("/"), key
        self.root: Any = None  # tiled's nodes have no type information
        self.node: Any = None
        self.streams: dict[str, _Stream] = {}
        self.events_node = None
        self.events_sent = 0
        self.state = "starting"  # "live", "behind", "ended"
        self.last_meta = 0.0
        self.last_tables = 0.0  # time.monotonic() of the last tables' pass
        self.said, self.said_at = "", 0.0  # the last failure logged, and when
        self.retry_at, self.wait = 0.0, RETRY_S[0]

    # ------------------------------------------------------------------ the loop

    def run(self, stop_after: float | None = None) -> str:
        """Forward until the session has ended and all of it is in the lab, then push it verified; the
        push's line (or why not). Holds the session's push lock throughout (no push writes beside it)."""
        deadline = None if stop_after is None else time.monotonic() + stop_after
        with pushing(self.store_path, self.sid):  # held to the end: the run's background push leaves it to us
            return self._forward_then_push(deadline)

    def _forward_then_push(self, deadline: float | None) -> str:
        ended_at = None
        with SessionReader(self.store_path, recover=False) as store:
            while deadline is None or time.monotonic() < deadline:
                info = store.get_session(self.sid)
                if self.step(store, info) and info.status in FINAL_STATUSES:
                    break
                if info.status in FINAL_STATUSES:
                    ended_at = ended_at or time.monotonic()
                    if time.monotonic() - ended_at > ENDED_PATIENCE_S:
                        return (f"{self.sid}: ended, and the lab has not answered for "
                                f"{ENDED_PATIENCE_S:.0f} s since; hil lab push --pending sends it")
                time.sleep(POLL_S)
        return self.finish()

    def finish(self) -> str:
        """The verified push of the ended session into the live container (under the push lock run holds)."""
        from daq.lab.replicate import push_sessions  # lazy: replicate starts this module's process

        try:
            results = push_sessions(self.store_path, self.url, self.key, [self.sid], say=log.info,
                                    lock_held=True)
        except LabError as exc:  # the lab went away at the end: the next push --pending completes it
            return str(exc)
        return "; ".join(r.line() for r in results)

    def step(self, store: SessionReader, info: SessionInfo) -> bool:
        """One pass: everything the store holds now goes to the lab. True when the lab holds all of it."""
        now = time.monotonic()
        if self.root is None and now < self.retry_at:
            return False
        try:
            if self.root is None:
                self._connect(store, info)
            done = self._forward(store, info)
            if done or time.time() - self.last_meta >= META_EVERY_S:
                self._update_metadata(store, info, behind=not done)
            self.state = "ended" if info.status in FINAL_STATUSES and done else "live"
            self.wait = RETRY_S[0]
            return done
        except (LabError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a slow or absent lab: behind, try again later
            said = _line(exc)
            if self.state != "behind" or said != self.said or now - self.said_at > 60:  # never silent
                log.warning("lab %s: %s; behind, catching up when it answers", self.url, said)
                self.said, self.said_at = said, now
            self.state, self.root = "behind", None
            self.retry_at, self.wait = now + self.wait, min(self.wait * 2, RETRY_S[1])
            return False

    # ------------------------------------------------------------------ the lab's side

    def _connect(self, store: SessionReader, info: SessionInfo) -> None:
        """Open the lab and find (or make) the session's container; what a container made by an earlier
        forwarder holds is counted from the lab, so writing goes on where the lab stands."""
        from tiled.client import from_uri  # lazy: only a forwarder talks to Tiled here

        from daq.lab.live_client import live_structure_clients  # lazy: as above

        root = from_uri(self.url, api_key=self.key, structure_clients=live_structure_clients(),
                        verify=default_trust())
        meta = self._metadata(store, info)
        try:
            node = root.create_container(self.sid, metadata=meta, specs=[layout.SESSION_SPEC])
        except Exception as exc:
            if status_of(exc) != 409:
                raise
            node = root[self.sid]
            if layout.plain(node.metadata.get("replication") or {}).get("state") == layout.VERIFIED:
                raise LabError(f"{self.sid}: the lab holds it verified already; nothing to stream") from None
        if child(node, layout.ABOUT) is None:  # the config, devices and writer while it records (layout 3)
            write_about(node, layout.about_fields(info, None))
        self.root, self.node = root, node
        self.streams = {}
        self.events_node, self.events_sent = _table_rows(node, layout.EVENTS)
        for name in info.streams:
            self._find_stream(name)

    def _find_stream(self, name: str) -> _Stream:
        st = self.streams.get(name)
        if st is not None:
            return st
        st = self.streams[name] = _Stream(name)
        st.node = child(self.node, name)
        if st.node is not None:
            st.rows = int(st.node.metadata.get("chunk_rows") or 0)
            st.t, st.data = child(st.node, layout.TIME), child(st.node, layout.DATA)
            st.frames, st.frames_sent = _table_rows(st.node, layout.FRAMES)
            if st.t is None or st.data is None:  # one made, the other not (the lab went in between):
                st.t = st.data = None  # both are made again (an existing one is taken and written)
            else:
                st.sent = min(st.t.structure().shape[0], st.data.structure().shape[0])
                if st.sent <= st.rows:  # an array made but perhaps never written (the lab went): again
                    st.sent = 0
        return st

    def _forward(self, store: SessionReader, info: SessionInfo) -> bool:
        """The samples of every stream first (what a follower waits for), then - at most every
        TABLES_EVERY_S, and at the end - the frames and events tables (a Tiled server spends about the
        same on any request: fewer requests a pass, shorter passes)."""
        done = True
        frame_streams = [si for si in info.streams.values() if si.type == "frame" and si.n_samples]
        for si in frame_streams:
            check_stream_name(self.sid, si.name)
            done = self._forward_stream(store, si, info.status in FINAL_STATUSES) and done
        ended = info.status in FINAL_STATUSES
        if not (ended or time.monotonic() - self.last_tables >= TABLES_EVERY_S):
            return False
        for si in frame_streams:
            self._forward_frames(store, si)
        rows = _event_rows_after(store, self.sid, self.events_sent)
        if rows:
            self.events_node = self._table(self.node, self.events_node, layout.EVENTS,
                                           event_columns(rows))
            self.events_sent += len(rows)
        self.last_tables = time.monotonic()
        return done

    def _forward_frames(self, store: SessionReader, si: StreamInfo) -> None:
        """Append the frames whose samples are all in the lab to the stream's frames table."""
        st = self._find_stream(si.name)
        if st.node is None:
            return
        frames = _frame_rows_after(store, self.sid, si.name, st.frames_sent, st.sent)
        if frames:
            st.frames = self._table(st.node, st.frames, layout.FRAMES, layout.frames_rows(frames))
            st.frames_sent += len(frames)

    def _forward_stream(self, store: SessionReader, si: StreamInfo, ended: bool = False) -> bool:
        """Send the samples of a stream the lab lacks (in pieces of at most MAX_WRITE_BYTES) and the frames
        whose samples are all in; True when the lab holds every sample the store had."""
        st = self._find_stream(si.name)
        n = si.n_samples
        if st.node is None:
            if si.dt is None and n < 2:
                return ended  # its own times: its rate is not known yet (ended: the push sends it)
            st.rows = live_rows(si, n, si.t_first, si.t_last)
            fields = {**layout.stream_node_fields(si, st.rows), "session": self.sid, "live": True}
            try:
                st.node = self.node.create_container(si.name, metadata=fields, specs=[layout.STREAM_SPEC])
            except Exception as exc:
                if status_of(exc) != 409:
                    raise
                self.streams.pop(si.name)
                st = self._find_stream(si.name)
        assert si.dtype is not None  # a frame stream
        dtype = SUPPORTED_DTYPES[si.dtype]
        width = len(si.channels)
        step = max(st.rows, MAX_WRITE_BYTES // max(1, width * dtype.itemsize + 8) // st.rows * st.rows)
        while st.sent < n:
            if st.t is None and n < st.rows:  # the arrays appear with their first whole block (see the
                return ended  # module's docstring); a stream that ended shorter goes with the final push
            hi = min(n, st.sent + step)
            part = store.read_range(self.sid, si.name, st.sent, hi)
            t = np.ascontiguousarray(part.t, dtype="<f8")
            data = np.ascontiguousarray(part.data, dtype=dtype)
            at = st.sent
            if st.t is None:  # made holding their first block; the rest of this piece follows it
                st.t = self._array(st, layout.TIME, t[:st.rows], ("sample",), {"unit": "s", "time_unit": "s"})
                st.data = self._array(st, layout.DATA, data[:st.rows], ("sample", "channel"),
                                      {"channels": si.channels, "units": si.units})
                t, data, at = t[st.rows:], data[st.rows:], at + st.rows
            if len(t):
                st.t.put_rows(t, at)
                st.data.put_rows(data, at)
            st.sent = hi
            st.t_last = float(part.t[-1])
        return True

    def _array(self, st: _Stream, key: str, first: np.ndarray, dims: tuple, metadata: dict):
        """The live array ``key`` of a stream, made empty and then given its first whole block.

        It is declared with no rows and blocks of ``st.rows``: Tiled 0.2.20's Zarr storage is made with
        one whole block of zeros (the size of the first declared block), but readers see only the rows
        the catalogue's shape says. An array declared with the block's shape would show those zeros
        until the block's write landed (or for good, when the lab went away in between). The first write
        is the whole first block, so the shape the write leaves never covers a row not written."""
        from tiled.structures.array import ArrayStructure, BuiltinDtype  # lazy: tiled's client side
        from tiled.structures.core import StructureFamily  # lazy: as above
        from tiled.structures.data_source import DataSource  # lazy: as above

        assert len(first) == st.rows, "the first write of a live array is its whole first block"
        chunks = ((st.rows,), *((s,) for s in first.shape[1:]))
        structure = ArrayStructure(shape=(0, *first.shape[1:]), chunks=chunks, dims=dims,
                                   data_type=BuiltinDtype.from_numpy_dtype(first.dtype))
        try:
            arr = st.node.new(StructureFamily.array,
                              [DataSource(structure=structure, structure_family=StructureFamily.array)],
                              key=key, metadata=metadata)
        except Exception as exc:
            if status_of(exc) != 409:
                raise
            arr = st.node[key]
        arr.put_rows(first, 0)
        return arr

    def _table(self, parent, node, key: str, columns: dict):
        """Append rows to the live table ``key`` (made with them when missing)."""
        from tiled.structures.core import StructureFamily  # lazy: as above
        from tiled.structures.data_source import DataSource  # lazy: as above
        from tiled.structures.table import TableStructure  # lazy: as above

        from daq.lab.live_client import CSV  # lazy: as above

        table = to_arrow(columns)
        if node is not None:
            node.append_arrow(table)
            return node
        node = parent.new(StructureFamily.table,
                          [DataSource(structure=TableStructure.from_arrow_table(table), mimetype=CSV,
                                      structure_family=StructureFamily.table)],
                          key=key, metadata={"live": True})
        node.write_arrow(table)
        return node

    def _metadata(self, store: SessionReader, info: SessionInfo) -> dict:
        """The session's metadata as the lab holds it now: counts of what is in the lab, not more."""
        meta = session_metadata(store, info)
        for name, fields in meta["streams"].items():
            st = self.streams.get(name)
            sent = st.sent if st is not None else 0
            fields.update(n_samples=sent, n_messages=st.frames_sent if st is not None else 0,
                          t_last=st.t_last if st is not None and sent else None,
                          t_first=fields["t_first"] if sent else None)
        meta["replication"] = {"state": layout.LIVE}
        meta[LIVE_KEY] = {"heartbeat": time.time(), "state": self.state, "host": socket.gethostname(),
                          "behind": self._behind(info)}
        return meta

    def _behind(self, info: SessionInfo) -> float:
        """s of recording the lab does not hold yet (the largest over the streams)."""
        lag = 0.0
        for name, si in info.streams.items():
            st = self.streams.get(name)
            if si.type == "frame" and si.n_samples and si.t_last is not None:
                have = st.t_last if st is not None and st.t_last is not None else si.t_first
                lag = max(lag, si.t_last - (have if have is not None else si.t_last))
        return lag if math.isfinite(lag) else 0.0

    def _update_metadata(self, store: SessionReader, info: SessionInfo, behind: bool) -> None:
        meta = self._metadata(store, info)
        keep = ("replication", "analysis", "analysed_by", "pushed_by")
        there = layout.plain(self.node.metadata)
        if layout.plain(there.get("replication") or {}).get("state") == layout.VERIFIED:
            return  # pushed meanwhile (by hand): the verified copy stays as it is
        meta.update({k: there[k] for k in keep if k in there and k != "replication"})
        self.node.replace_metadata(metadata=meta, specs=[layout.SESSION_SPEC], drop_revision=True)
        self.last_meta = time.time()


def _table_rows(parent, key: str) -> tuple[Any, int]:
    """(the live table ``key`` of ``parent`` or None, its rows). A table the lab cannot read (a server
    killed in the middle of an append leaves half a row) is deleted: the next pass writes it again whole."""
    node = child(parent, key)
    if node is None:
        return None, 0
    try:
        return node, node.read_arrow().num_rows
    except Exception as exc:
        status = status_of(exc)
        if status is None or status < 500:
            raise  # the lab is away or refuses: behind, as for any write
        log.warning("the lab cannot read its live %s table (%s); writing it again", key, _line(exc))
        delete(parent, key, node)
        return None, 0


def _event_rows_after(store: SessionReader, sid: str, done: int) -> list[tuple]:
    """Event rows (EVENT_COLUMNS) of the session after the first ``done``, in arrival order."""
    with store._lock:  # the reader's own connection, as its methods use it
        return store._db.execute(f"SELECT {', '.join(layout.EVENT_COLUMNS)} FROM events WHERE session_id=? "
                                 "ORDER BY ord LIMIT -1 OFFSET ?", (sid, done)).fetchall()


def _frame_rows_after(store: SessionReader, sid: str, stream: str, done: int, samples: int) -> list[tuple]:
    """Frame rows (FRAME_COLUMNS) of a stream after the first ``done``, whose samples lie below
    ``samples`` (those the lab holds), in sample order."""
    with store._lock:
        return store._db.execute(f"SELECT {', '.join(layout.FRAME_COLUMNS)} FROM frames WHERE session_id=? "
                                 "AND stream=? AND s0 + n <= ? ORDER BY s0, ord LIMIT -1 OFFSET ?",
                                 (sid, stream, samples, done)).fetchall()


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


# ---------------------------------------------------------------------- starting it beside a run


def start_live(store_path: str | os.PathLike, session: str, config) -> subprocess.Popen | None:
    """With a ``[lab]`` table (``live`` not false) in the run's config: start the forwarder of
    ``session`` in a process of its own (its lines go to ``<store folder>/lab-live.log``); never waited
    for, and nothing here can fail the run."""
    table = config.get("lab") if isinstance(config, dict) else getattr(config, "lab", None)
    if not table:
        return None
    try:
        import msgspec  # lazy: only with a [lab] table

        lab = table if isinstance(table, LabTable) else msgspec.convert(table, LabTable)
        if not lab.live:
            return None
        cmd = [sys.executable, "-m", "daq.lab.live", str(store_path), session, lab.url]
        env = dict(os.environ)
        if lab.key_file:
            env[ENV_KEY_FILE] = str(lab.key_file)
        elif not env.get(ENV_KEY) and not env.get(ENV_KEY_FILE):
            log.warning("[lab] has no key_file and neither $%s nor $%s is set: not streamed live",
                        ENV_KEY_FILE, ENV_KEY)
            return None
        with open(Path(store_path).resolve().parent / "lab-live.log", "a") as logf:
            return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
    except Exception as exc:  # noqa: BLE001 - the recording goes on; a forwarder not started is a log line
        log.warning("live forwarding not started: %s", exc)
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m daq.lab.live STORE SESSION URL``: forward one session (key: $HIL_LAB_KEY_FILE or
    $HIL_LAB_KEY), then push it verified."""
    args = sys.argv[1:] if argv is None else argv
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 PID: where it is, in its log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is not news
    if len(args) != 3:
        print("usage: python -m daq.lab.live STORE SESSION URL", file=sys.stderr)
        return 2
    try:
        line = Forwarder(args[0], args[1], args[2], read_key(None)).run()
    except (LabError, KeyboardInterrupt) as exc:
        print(f"{args[1]}: {exc}", flush=True)
        return 1
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
