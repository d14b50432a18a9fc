"""``hil lab push``: store-and-forward replication of finished sessions to the lab, with Tiled's client.

Idempotent and resumable by construction: every array block goes to a fixed index of an array whose
shape is known up front, so writing a block twice puts the same bytes in the same place; the local store
remembers which blocks are in (``daq.lab.marks``), so a push killed with SIGKILL and started again goes on
where it stopped. Verified: the lab's copy is read back and its row counts and SHA-256 digests compared
with the local ones (:mod:`daq.lab.checks`) before the session is marked replicated, in the lab
(``replication.state = "verified"``) and in the local store.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES
from daq.lab import layout
from daq.lab.checks import (
    SessionCheck,
    StreamCheck,
    check_session,
    event_columns,
    event_rows,
    frame_rows,
    table_sha256,
)
from daq.lab.connect import from_client_error
from daq.lab.marks import Marks
from daq.lab.settings import LabError
from daq.store.reader import SessionReader
from daq.store.records import FINAL_STATUSES, SessionInfo, StreamInfo

#: Blocks in flight at once per push (each at most layout.BLOCK_BYTES; with its upload copy, 8 MB).
WORKERS = 4


@dataclass
class PushResult:
    session_id: str
    state: str  # "pushed", "already", "skipped"
    bytes_sent: int = 0
    note: str = ""

    def line(self) -> str:
        what = {"pushed": f"pushed and verified ({self.bytes_sent / 1e6:.1f} MB)",
                "already": "already in the lab, verified", "skipped": "skipped"}[self.state]
        return f"{self.session_id}: {what}" + (f" ({self.note})" if self.note else "")


def run_event(store: SessionReader, info: SessionInfo, stream: str, kind: str) -> dict | None:
    found = store.events(info.id, kind=kind, stream=stream)
    return dict(found[-1].body) if found else None


def session_metadata(store: SessionReader, info: SessionInfo) -> dict:
    started = run_event(store, info, f"{info.kind}.run", "started") or {}
    by = started.get("by")
    return layout.session_fields(info, None if by is None else str(by),
                                 run_event(store, info, f"{info.kind}.plan", "plan_outcome"))


def child(node, key: str):
    """``node[key]``, or None when the lab has no such node."""
    try:
        return node[key]
    except KeyError:
        return None


class Pusher:
    """Pushes sessions of one local store to one lab (a Tiled client root container)."""

    def __init__(self, root, lab_url: str, store: SessionReader, marks: Marks, workers: int = WORKERS,
                 on_block: Callable[[str, int], None] | None = None):
        self.root, self.lab, self.store, self.marks = root, lab_url.rstrip("/"), store, marks
        self.workers = workers
        self.on_block = on_block  # called after each block is in (tests kill the push there)
        self.sent = 0

    def push(self, session: str) -> PushResult:
        info = self.store.get_session(session)
        if info.status not in FINAL_STATUSES:
            return PushResult(info.id, "skipped", note=f"{info.status}, not finished")
        check = check_session(self.store, info)  # a corrupt session stops here: nothing written
        checks = check.as_dict()
        try:
            return self._push(info, check, checks)
        except (LabError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the client's HTTP and server errors, one line
            raise from_client_error(self.lab, exc) from None

    def _push(self, info: SessionInfo, check: SessionCheck, checks: dict) -> PushResult:
        node = child(self.root, info.id)
        meta = session_metadata(self.store, info)
        if node is not None:
            there = layout.plain(node.metadata.get("replication", {}))
            if there.get("state") == layout.VERIFIED and there.get("checks") == checks:
                self.marks.mark(info.id, self.lab, checks)
                return PushResult(info.id, "already")
        else:
            node = self._create(self.root, info.id, meta, layout.SESSION_SPEC)
        self.sent = 0
        for name, sc in check.streams.items():
            self._push_stream(node, info, info.streams[name], sc)
        self._push_table(node, layout.EVENTS, event_columns(event_rows(self.store.path, info.id)),
                         check.events, check.events_sha256)
        self._verify(node, info, check)
        analysis = layout.plain(node.metadata.get("analysis")) if node.metadata.get("analysis") else None
        meta["replication"] = {"state": layout.VERIFIED, "checks": checks, "pushed_at": time.time(),
                               "from_host": socket.gethostname()}
        if analysis is not None:
            meta["analysis"] = analysis
        node.replace_metadata(metadata=meta, specs=[layout.SESSION_SPEC], drop_revision=True)
        self.marks.mark(info.id, self.lab, checks)
        return PushResult(info.id, "pushed", self.sent)

    # ------------------------------------------------------------------ nodes

    def _create(self, parent, key: str, metadata: dict, spec: str):
        try:
            return parent.create_container(key, metadata=metadata, specs=[spec])
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) == 409:  # a concurrent push
                return parent[key]
            raise

    def _array(self, parent, key: str, shape: tuple, dtype: np.dtype, rows: int, metadata: dict,
               dims: tuple, node_name: str):
        """The array ``key`` with exactly this shape, dtype and chunking (an unfitting one is replaced)."""
        from tiled.structures.array import ArrayStructure, BuiltinDtype  # lazy: tiled's client side
        from tiled.structures.core import StructureFamily  # lazy: as above
        from tiled.structures.data_source import DataSource  # lazy: as above

        blocks = [rows] * (shape[0] // rows) + ([shape[0] % rows] if shape[0] % rows else [])
        chunks = (tuple(blocks), *((s,) for s in shape[1:]))
        existing = child(parent, key)
        if existing is not None:
            st = existing.structure()
            if tuple(st.shape) == shape and tuple(map(tuple, st.chunks)) == chunks \
                    and st.data_type.to_numpy_dtype() == dtype:
                return existing
            existing.delete(external_only=False)
            self.marks.forget(parent.metadata.get("session", ""), self.lab, [node_name])
        structure = ArrayStructure(shape=shape, chunks=chunks, dims=dims,
                                   data_type=BuiltinDtype.from_numpy_dtype(dtype))
        return parent.new(StructureFamily.array,
                          [DataSource(structure=structure, structure_family=StructureFamily.array)],
                          key=key, metadata=metadata)

    def _push_stream(self, node, info: SessionInfo, si: StreamInfo, sc: StreamCheck) -> None:
        fields = layout.stream_node_fields(si, sc.chunk_rows)
        snode = child(node, si.name) or self._create(node, si.name, {**fields, "session": info.id},
                                                     layout.STREAM_SPEC)
        assert si.dtype is not None  # a frame stream
        dtype = SUPPORTED_DTYPES[si.dtype]
        t_name, d_name = f"{si.name}/{layout.TIME}", f"{si.name}/{layout.DATA}"
        t_arr = self._array(snode, layout.TIME, (sc.rows,), np.dtype("<f8"), sc.chunk_rows,
                            {"unit": "s", "time_unit": "s"}, ("sample",), t_name)
        d_arr = self._array(snode, layout.DATA, (sc.rows, len(si.channels)), dtype, sc.chunk_rows,
                            {"channels": si.channels, "units": si.units}, ("sample", "channel"), d_name)
        index = self._array(snode, layout.T_INDEX, sc.t_index.shape, np.dtype("<f8"), max(1, len(sc.t_index)),
                            {"unit": "s", "step": layout.index_step(sc.chunk_rows)}, ("entry",),
                            f"{si.name}/{layout.T_INDEX}")
        if not self.marks.done_blocks(info.id, self.lab, f"{si.name}/{layout.T_INDEX}"):
            index.write_block(sc.t_index, (0,))
            self.marks.block_done(info.id, self.lab, f"{si.name}/{layout.T_INDEX}", 0)
            self.sent += sc.t_index.nbytes
        done_t = self.marks.done_blocks(info.id, self.lab, t_name)
        done_d = self.marks.done_blocks(info.id, self.lab, d_name)
        pending: deque[tuple[Future, str, int]] = deque()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="lab-push") as pool:
            for i, chunk in enumerate(self.store.iter_stream(info.id, si.name, sc.chunk_rows)):
                for arr, name, done, values in ((t_arr, t_name, done_t, chunk.t), (d_arr, d_name, done_d,
                                                                                     chunk.data)):
                    if i in done:
                        continue
                    block = (i,) if values.ndim == 1 else (i, 0)
                    values = np.ascontiguousarray(values)
                    pending.append((pool.submit(arr.write_block, values, block), name, i))
                    self.sent += values.nbytes
                while len(pending) >= self.workers:
                    self._finish(info.id, pending.popleft())
            while pending:
                self._finish(info.id, pending.popleft())
        self._push_table(snode, layout.FRAMES, layout.frames_rows(frame_rows(self.store.path, info.id,
                                                                             si.name)),
                         sc.frames, sc.frames_sha256)

    def _finish(self, sid: str, item: tuple[Future, str, int]) -> None:
        future, name, block = item
        future.result()
        self.marks.block_done(sid, self.lab, name, block)
        if self.on_block is not None:
            self.on_block(name, block)

    def _push_table(self, parent, key: str, columns: dict, rows: int, sha: str) -> None:
        """A table written whole; one that is there but not exactly these rows is replaced."""
        import pandas as pd  # lazy: pandas only where tables go to or come from the lab

        if rows == 0:
            return
        existing = child(parent, key)
        if existing is not None:
            if table_digest(existing) == (rows, sha):
                return
            existing.delete(external_only=False)
        parent.write_table(pd.DataFrame(columns), key=key)
        self.sent += sum(np.asarray(c).nbytes for c in columns.values())

    # ------------------------------------------------------------------ verification

    def _verify(self, node, info: SessionInfo, check: SessionCheck) -> None:
        """Read the lab's copy back and compare counts and digests; a mismatch forgets the progress (the
        next push writes the stream again) and is an error."""
        for name, sc in check.streams.items():
            snode = node[name]
            got = stream_digest(snode, sc.chunk_rows, self.workers)
            want = (sc.rows, sc.t_sha256, sc.data_sha256)
            frames = table_digest(snode[layout.FRAMES])
            index_ok = np.array_equal(np.asarray(snode[layout.T_INDEX].read()), sc.t_index)
            if got != want or frames != (sc.frames, sc.frames_sha256) or not index_ok:
                self.marks.forget(info.id, self.lab, [f"{name}/{n}" for n in (layout.TIME, layout.DATA,
                                                                               layout.T_INDEX)])
                raise LabError(f"session {info.id}: the lab's copy of {name} differs from the local one "
                               f"({got[0]} rows of {sc.rows}); push again")
        if check.events and table_digest(node[layout.EVENTS]) != (check.events, check.events_sha256):
            raise LabError(f"session {info.id}: the lab's events differ from the local ones; push again")


def stream_digest(snode, rows: int, workers: int = WORKERS) -> tuple[int, str, str]:
    """(rows, SHA-256 of t, SHA-256 of data) of a stream in the lab, read block by block."""
    t_arr, d_arr = snode[layout.TIME], snode[layout.DATA]
    n = int(t_arr.shape[0])
    if tuple(d_arr.shape[:1]) != (n,):
        return -1, "", ""
    th, dh = hashlib.sha256(), hashlib.sha256()
    spans = [(lo, min(n, lo + rows)) for lo in range(0, n, rows)]
    with ThreadPoolExecutor(workers, thread_name_prefix="lab-verify") as pool:
        for k in range(0, len(spans), workers):
            batch = spans[k:k + workers]
            ts = pool.map(lambda s: t_arr[s[0]:s[1]], batch)
            ds = pool.map(lambda s: d_arr[s[0]:s[1]], batch)
            for t, d in zip(ts, ds, strict=True):
                th.update(np.ascontiguousarray(t, dtype="<f8").data)  # no copy for the digest
                dh.update(np.ascontiguousarray(d).data)
    return n, th.hexdigest(), dh.hexdigest()


def table_digest(tnode) -> tuple[int, str]:
    """(rows, SHA-256) of a table in the lab, columns as :func:`table_sha256` hashes them."""
    df = tnode.read()
    cols = {}
    for name in df.columns:
        col = df[name].to_numpy()
        cols[name] = np.array(list(col), dtype=object) if col.dtype.kind not in "fiub" else col
    return len(df), table_sha256(cols)
