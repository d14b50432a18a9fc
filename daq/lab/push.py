"""``hil lab push``: store-and-forward replication of finished sessions to the lab, with Tiled's client.

Idempotent and resumable by construction: every array block goes to a fixed index of an array whose
shape is known up front, so writing a block twice puts the same bytes in the same place; the local store
remembers which blocks are in (``daq.lab.marks``), so a push killed with SIGKILL and started again goes on
where it stopped. Verified without downloading the data again: the server checks each block right after
it is written (Tiled's ETag - a hash the server computes over what it stored - against the same hash of
the sent block, :mod:`daq.lab.client`), each table is read back (they are small), and before the session
is marked replicated - in the lab (``replication.state = "verified"``) and in the local store - the row
counts of the server's arrays and the SHA-256 digests stored with them are compared with the local ones
(:mod:`daq.lab.checks`).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES
from daq.lab import layout
from daq.lab.about import REPORT, lab_analysis, split_analysis, write_about, write_analysis
from daq.lab.arrow_columns import from_arrow, to_arrow
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
from daq.lab.digests import ETAG_KEY, SHA_KEY, unreadable
from daq.lab.local_analyses import local_analysis, newer
from daq.lab.marks import Marks
from daq.lab.names import Refused, check_session_id, check_stream_name
from daq.lab.push_lock import pushing
from daq.lab.settings import LabError
from daq.lab.verify import Problem, local_problems, table_holds
from daq.store.reader import SessionReader
from daq.store.records import FINAL_STATUSES, SessionInfo, StreamInfo

#: Blocks in flight at once per push (each at most layout.BLOCK_BYTES; with its upload copy, 32 MB).
WORKERS = 2
#: s after which a half-pushed session's writer (another store's push) is taken as gone; a push renews its
#: claim every CLAIM_RENEW s while it writes.
CLAIM_STALE, CLAIM_RENEW = 600.0, 120.0


@dataclass
class PushResult:
    session_id: str
    state: str  # "pushed", "already", "skipped", "refused" (not pushed: the note says why)
    bytes_sent: int = 0
    note: str = ""

    def line(self) -> str:
        if self.state == "refused":
            return self.note
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


def delete(parent, key: str, node) -> None:
    """Delete the node ``key`` and its files. A node whose file the lab lost errs while its record goes:
    gone is what was asked."""
    try:
        node.delete(external_only=False)
    except Exception:
        if child(parent, key) is not None:
            raise


def status_of(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


class Pusher:
    """Pushes sessions of one local store to one lab (a Tiled client root container opened with
    :func:`daq.lab.client.push_structure_clients`)."""

    def __init__(self, root, lab_url: str, store: SessionReader, marks: Marks, workers: int = WORKERS,
                 on_block: Callable[[str, int], None] | None = None, who: dict | None = None):
        self.root, self.lab, self.store, self.marks = root, lab_url.rstrip("/"), store, marks
        self.who = who  # who holds the key, as the lab answered (daq.lab.people.whoami); None: unknown
        self.workers = workers
        self.on_block = on_block  # called after each block is in (tests kill the push there)
        self.sent = 0
        self.claim: dict = {}  # this push's claim on the session it writes: host, store, when
        self.lock_held = False  # True: the caller holds the session's push lock (daq/lab/live.py)
        self.lock_wait = 0.0  # s to wait for another push of the same session (the run's background push)

    def push(self, session: str) -> PushResult:
        info = self.store.get_session(session)
        check_session_id(info.id)  # odd ids and stream names stop at the door: nothing written
        for name in info.streams:
            check_stream_name(info.id, name)
        if info.status not in FINAL_STATUSES:
            return PushResult(info.id, "skipped", note=f"{info.status}, not finished")
        with nullcontext() if self.lock_held else pushing(self.store.path, info.id, self.lock_wait):
            try:  # a corrupt session stops at its check: nothing written
                check = check_session(self.store, info, self._lab_block_rows(info))
                return self._push(info, check)
            except (LabError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - the client's HTTP and server errors, one line
                if status_of(exc) == 409:  # a node made meanwhile: another store's push of this session
                    raise Refused(f"another push of {info.id} is writing it to the lab; this one leaves it "
                                  "to that one") from None
                raise from_client_error(self.lab, exc) from None

    def _lab_block_rows(self, info: SessionInfo) -> dict[str, int]:
        """Rows per block of the streams the lab holds blocked finer than :func:`layout.chunk_rows` (a live
        forwarder's blocks of about half a second): the push checks, completes and keeps those arrays in
        place, so that a reader following the session never sees them go."""
        node = child(self.root, info.id)
        if node is None:
            return {}
        found = {}
        for name, si in info.streams.items():
            snode = child(node, name) if si.type == "frame" and si.n_samples else None
            rows = snode.metadata.get("chunk_rows") if snode is not None else None
            if isinstance(rows, int) and 0 < rows < layout.chunk_rows(si) and rows & (rows - 1) == 0:
                found[name] = rows
        return found

    def _push(self, info: SessionInfo, check: SessionCheck) -> PushResult:
        checks = check.as_dict()
        meta = session_metadata(self.store, info)
        self.claim = {"host": socket.gethostname(), "store": str(self.store.path), "at": time.time()}
        meta["replication"] = {**meta["replication"], "writer": self.claim}  # who writes it, while partial
        node, fresh = self._create(self.root, info.id, meta, layout.SESSION_SPEC)
        note = ""
        if not fresh:
            there = layout.plain(node.metadata.get("replication", {}))
            _stand_aside(info.id, there, self.claim)
            if there.get("state") == layout.VERIFIED and there.get("checks") == checks:
                differing = self._recheck(node, info, check)  # the marker alone is not the copy
                if not differing:
                    read_at = time.time()  # before the rig's analysis is read (marks.mark's as_of)
                    note = self._hand_over_analysis(node, info.id)
                    self.marks.mark(info.id, self.lab, checks, as_of=read_at)
                    return PushResult(info.id, "already", note=note)
                note = f"the lab's copy differed: {differing}; repaired"
        if not fresh:  # taken over (a partial copy of this store's, or one whose writer is gone): ours now
            node.update_metadata({"replication": {"writer": self.claim}}, drop_revision=True)
        self.sent = 0
        arrays = {name: self._push_stream(self._renew(node), info, info.streams[name], sc)
                  for name, sc in check.streams.items()}
        events = event_columns(event_rows(self.store.path, info.id))
        self._push_table(node, fresh, info.id, layout.EVENTS, events, check.events, check.events_sha256)
        self._verify(arrays, info, check)
        read_at = time.time()  # before the rig's analysis is read (marks.mark's as_of)
        analysis = newer(local_analysis(self.store.path, info.id), lab_analysis(node))
        summary, report = split_analysis(analysis) if analysis is not None else (None, None)
        about = layout.about_fields(info, run_event(self.store, info, f"{info.kind}.plan", "plan_outcome"))
        write_about(node, {**about, **({REPORT: report} if report is not None else {})})
        meta["replication"] = {"state": layout.VERIFIED, "checks": checks, "pushed_at": time.time(),
                               "from_host": socket.gethostname()}
        if summary is not None:
            meta["analysis"] = summary
        for kept in ("analysed_by",):  # who analysed it, recorded with the analysis
            if node.metadata.get(kept) is not None:
                meta[kept] = layout.plain(node.metadata[kept])
        if self.who is not None:
            meta["pushed_by"] = self.who
        node.replace_metadata(metadata=meta, specs=[layout.SESSION_SPEC], drop_revision=True)
        self.marks.mark(info.id, self.lab, checks, as_of=read_at)
        return PushResult(info.id, "pushed", self.sent, note)

    def _recheck(self, node, info: SessionInfo, check: SessionCheck) -> str:
        """Check a copy the lab calls verified against the local session, block by block (the server
        confirms each by its hash; nothing downloaded but the tables). Whole: record the block digests on
        copies pushed before them, and return "". Else mark what holds as done, so that the push writes
        only what differs, and return what differs."""
        problems, whole = local_problems(node, info, check)
        if not problems:
            for arr, digests in whole:
                record_digests(arr, digests)
            return ""
        bad = set(problems)
        parts = (layout.TIME, layout.DATA, layout.FRAMES)
        self.marks.forget(info.id, self.lab, [layout.EVENTS, *(f"{name}/{p}" for name in check.streams
                                                                for p in parts)])  # an older push's
        for name, sc in check.streams.items():
            if Problem(name, "") in bad:
                continue
            for part in (layout.TIME, layout.DATA):
                if Problem(name, part, None) in bad:
                    continue
                for i in range(layout.n_blocks(sc.rows, sc.chunk_rows)):
                    if Problem(name, part, i) not in bad:
                        self.marks.block_done(info.id, self.lab, f"{name}/{part}", i)
            if Problem(name, layout.FRAMES) not in bad:
                self.marks.block_done(info.id, self.lab, f"{name}/{layout.FRAMES}", 0)
        if Problem("", layout.EVENTS) not in bad:
            self.marks.block_done(info.id, self.lab, layout.EVENTS, 0)
        return ", ".join(p.text() for p in problems)

    def _renew(self, node):
        """``node``, with this push's claim on it renewed when it is getting old."""
        if time.time() - self.claim["at"] > CLAIM_RENEW:
            self.claim = {**self.claim, "at": time.time()}
            node.update_metadata({"replication": {"writer": self.claim}}, drop_revision=True)
        return node

    def _hand_over_analysis(self, node, sid: str) -> str:
        """Put the rig's analysis of a session the lab already holds into its metadata, when it is newer
        than the lab's (:mod:`daq.lab.local_analyses`); a note for the push's line."""
        mine, theirs = local_analysis(self.store.path, sid), lab_analysis(node)
        if mine is None or newer(mine, theirs) is not mine or mine == theirs:
            return ""
        write_analysis(node, mine)
        return "analysis added"

    # ------------------------------------------------------------------ nodes

    def _create(self, parent, key: str, metadata: dict, spec: str):
        """(the container ``key``, True when this call made it): made if missing, else the one there."""
        try:
            return parent.create_container(key, metadata=metadata, specs=[spec]), True
        except Exception as exc:
            if status_of(exc) == 409:  # there already (an earlier or a concurrent push)
                return parent[key], False
            raise

    def _array(self, parent, fresh: bool, key: str, shape: tuple, dtype: np.dtype, rows: int,
               metadata: dict, dims: tuple, node_name: str) -> tuple[Any, int, bool]:
        """(the array ``key`` with this dtype, chunking and digest, the rows it holds, True when adopted);
        ``fresh``: the parent was just made, so there is nothing to look up. An array the live forwarder
        made (no digest yet, blocks of ``rows``, at most ``shape[0]`` rows) is adopted: given the final
        metadata and kept, its blocks checked before any is written and its missing rows appended. Any
        other array that does not fit is replaced."""
        from tiled.structures.array import ArrayStructure, BuiltinDtype  # lazy: tiled's client side
        from tiled.structures.core import StructureFamily  # lazy: as above
        from tiled.structures.data_source import DataSource  # lazy: as above

        chunks = (regular_chunks(shape[0], rows), *((s,) for s in shape[1:]))
        existing = None if fresh else child(parent, key)
        if existing is not None:
            st = existing.structure()
            same_kind = st.data_type.to_numpy_dtype() == dtype and tuple(st.shape[1:]) == shape[1:] \
                and tuple(map(tuple, st.chunks[1:])) == chunks[1:]
            sha = existing.metadata.get("sha256")
            if same_kind and tuple(st.shape) == shape and tuple(st.chunks[0]) == chunks[0] \
                    and sha == metadata.get("sha256"):
                record_digests(existing, {k: metadata[k] for k in (SHA_KEY, ETAG_KEY) if k in metadata})
                return existing, shape[0], False
            have = int(st.shape[0])
            if same_kind and sha in (None, metadata.get("sha256")) and have <= shape[0] \
                    and tuple(st.chunks[0]) in (regular_chunks(have, rows), (rows,) if not have else ()):
                if sha is None:  # the forwarder's: no block of it is known to be checked
                    self.marks.forget(parent.metadata.get("session", ""), self.lab, [node_name])
                existing.update_metadata(metadata=metadata, drop_revision=True)
                return existing, have, True
            delete(parent, key, existing)
            self.marks.forget(parent.metadata.get("session", ""), self.lab, [node_name])
        structure = ArrayStructure(shape=shape, chunks=chunks, dims=dims,
                                   data_type=BuiltinDtype.from_numpy_dtype(dtype))
        made = parent.new(StructureFamily.array,
                          [DataSource(structure=structure, structure_family=StructureFamily.array)],
                          key=key, metadata=metadata)
        return made, shape[0], False

    def _push_stream(self, node, info: SessionInfo, si: StreamInfo, sc: StreamCheck) -> dict:
        """Write one stream; its ``t`` and ``data`` nodes as the lab described them (made or found)."""
        fields = layout.stream_node_fields(si, sc.chunk_rows)
        snode, new = self._create(node, si.name, {**fields, "session": info.id}, layout.STREAM_SPEC)
        if not new and layout.plain(snode.metadata) != {**fields, "session": info.id}:  # a live stream's
            snode.replace_metadata(metadata={**fields, "session": info.id}, specs=[layout.STREAM_SPEC],
                                   drop_revision=True)
        assert si.dtype is not None  # a frame stream
        dtype = SUPPORTED_DTYPES[si.dtype]
        t_name, d_name = f"{si.name}/{layout.TIME}", f"{si.name}/{layout.DATA}"
        t_arr, t_have, t_adopted = self._array(
            snode, new, layout.TIME, (sc.rows,), np.dtype("<f8"), sc.chunk_rows,
            {"unit": "s", "time_unit": "s", "rows": sc.rows, "sha256": sc.t_sha256,
             **sc.t_blocks.as_metadata()}, ("sample",), t_name)
        d_arr, d_have, d_adopted = self._array(
            snode, new, layout.DATA, (sc.rows, len(si.channels)), dtype, sc.chunk_rows,
            {"channels": si.channels, "units": si.units, "rows": sc.rows, "sha256": sc.data_sha256,
             **sc.data_blocks.as_metadata()}, ("sample", "channel"), d_name)
        done_t = self.marks.done_blocks(info.id, self.lab, t_name)
        done_d = self.marks.done_blocks(info.id, self.lab, d_name)
        for adopted, arr, name, done, have, axis in ((t_adopted, t_arr, t_name, done_t, t_have, "t"),
                                                     (d_adopted, d_arr, d_name, done_d, d_have, "data")):
            if adopted:
                self._confirm_held(info.id, si, sc, arr, name, done, have, axis)
        pending: deque[tuple[Future, str, int]] = deque()
        parts = ((t_arr, t_name, done_t, sc.t_blocks, t_have, t_adopted),
                 (d_arr, d_name, done_d, sc.data_blocks, d_have, d_adopted))
        with ThreadPoolExecutor(self.workers, thread_name_prefix="lab-push") as pool:
            for i, chunk in enumerate(self.store.iter_stream(info.id, si.name, sc.chunk_rows)):
                for (arr, name, done, digests, have, adopted), values in zip(parts, (chunk.t, chunk.data),
                                                                             strict=True):
                    if i in done:
                        continue
                    block = (i,) if values.ndim == 1 else (i, 0)
                    values = np.ascontiguousarray(values)
                    start = i * sc.chunk_rows
                    if adopted and start + len(values) > have:  # rows the forwarder had not sent: appended
                        self.sent += self._append_block(arr, values, start, block, digests.token(i))
                        self.marks.block_done(info.id, self.lab, name, i)  # in order, so a reader
                        continue  # never sees a row not written
                    write = self._check_block if adopted else self._write_block
                    pending.append((pool.submit(write, arr, values, block, digests.token(i)), name, i))
                while len(pending) >= self.workers:
                    self._finish(info.id, pending.popleft())
            while pending:
                self._finish(info.id, pending.popleft())
        self._push_table(snode, new, info.id, layout.FRAMES,
                         layout.frames_rows(frame_rows(self.store.path, info.id, si.name)), sc.frames,
                         sc.frames_sha256, progress=f"{si.name}/{layout.FRAMES}")
        if t_adopted or d_adopted:  # grown here: the server's description now, not the one found
            t_arr, d_arr = snode[layout.TIME], snode[layout.DATA]
        return {layout.TIME: t_arr, layout.DATA: d_arr}

    def _confirm_held(self, sid: str, si: StreamInfo, sc: StreamCheck, arr, name: str, done: set[int],
                      have: int, axis: str) -> None:
        """Mark the blocks an adopted array holds as done where the lab confirms them a range at a time
        (up to a final block's rows per request: a live array's blocks are small, and a Tiled request
        costs about the same whatever it holds). A range not confirmed is left to the block checks."""
        rows = sc.chunk_rows
        held = sc.rows if have >= sc.rows else have // rows * rows  # whole blocks, or all of it
        span = max(rows, layout.chunk_rows(si) // rows * rows)
        for a in range(0, held, span):
            b = min(held, a + span)
            blocks = range(a // rows, layout.n_blocks(b, rows))
            if all(i in done for i in blocks):
                continue
            part = self.store.read_range(sid, si.name, a, b)
            values = np.ascontiguousarray(part.t, dtype="<f8") if axis == "t" else part.data
            if _holds(arr, partial(arr.rows_match, values, a, retries=False)):  # a broken chunk: no retries
                for i in blocks:
                    self.marks.block_done(sid, self.lab, name, i)
                    done.add(i)

    def _write_block(self, arr, values: np.ndarray, block: tuple[int, ...], token: str | None = None) -> int:
        """Write one block and have the server confirm it holds exactly these bytes (``token``: their hash,
        made by the local check already); the bytes sent."""
        arr.write_block(values, block)
        self._confirm(arr, values, block, token)
        return values.nbytes

    def _check_block(self, arr, values: np.ndarray, block: tuple[int, ...], token: str | None = None) -> int:
        """A block of an adopted array: written only when the lab does not hold exactly these bytes."""
        if _holds(arr, partial(arr.block_matches, values, block, token, retries=False)):
            return 0
        return self._write_block(arr, values, block, token)

    def _append_block(self, arr, values: np.ndarray, start: int, block: tuple[int, ...],
                      token: str | None) -> int:
        """Write a block at row ``start`` of an adopted array, growing it to hold the block; confirmed."""
        arr.write_rows(values, start)
        self._confirm(arr, values, block, token)
        return values.nbytes

    @staticmethod
    def _confirm(arr, values: np.ndarray, block: tuple[int, ...], token: str | None) -> None:
        if not arr.block_matches(values, block, token):
            raise LabError(f"the lab's copy of block {block[0]} of {arr.item['id']} differs from the sent "
                           "one; push again")

    def _finish(self, sid: str, item: tuple[Future, str, int]) -> None:
        future, name, block = item
        self.sent += future.result()
        self.marks.block_done(sid, self.lab, name, block)
        if self.on_block is not None:
            self.on_block(name, block)

    def _push_table(self, parent, fresh: bool, sid: str, key: str, columns: dict, rows: int, sha: str,
                    progress: str | None = None) -> None:
        """A table written whole and read back; one that is there but not known to be whole is replaced."""
        from tiled.structures.core import StructureFamily  # lazy: tiled's client side
        from tiled.structures.data_source import DataSource  # lazy: as above
        from tiled.structures.table import TableStructure  # lazy: as above

        if rows == 0:
            return
        progress = progress or key
        existing = None if fresh else child(parent, key)
        if existing is not None:
            if self.marks.done_blocks(sid, self.lab, progress):
                return
            if self._completed(parent, key, existing, columns, rows, sha):  # the forwarder's: kept
                existing.replace_metadata(metadata={"rows": rows, "sha256": sha}, drop_revision=True)
                self.marks.block_done(sid, self.lab, progress, 0)
                return
            delete(parent, key, existing)
        table = to_arrow(columns)
        tnode = parent.new(StructureFamily.table,
                           [DataSource(structure=TableStructure.from_arrow_table(table),
                                       structure_family=StructureFamily.table)],
                           key=key, metadata={"rows": rows, "sha256": sha})
        tnode.write_arrow(table)
        self.sent += table.nbytes
        if table_digest(tnode.read_arrow(), list(columns)) != (rows, sha):
            raise LabError(f"session {sid}: the lab's copy of the {key} table differs from the local one; "
                           "push again")
        self.marks.block_done(sid, self.lab, progress, 0)

    def _completed(self, parent, key: str, existing, columns: dict, rows: int, sha: str) -> bool:
        """True when the table ``existing`` holds these rows: already, or - a live forwarder's table that
        holds their first rows - once the rest is appended (where readers following the session have it)."""
        if not existing.metadata.get("live"):
            return table_holds(parent, key, rows, sha)
        try:
            table = existing.read_arrow(retries=False)  # a table left broken errs at once: written again
            there = from_arrow(table, list(columns))
        except ValueError:  # a column that cannot be ours
            return False
        except Exception as exc:  # noqa: BLE001 - a table the lab cannot read (a forwarder killed mid-append
            if unreadable(existing, exc):  # leaves a broken last line): written again whole
                return False
            raise
        have = table.num_rows
        if have > rows or table_sha256(there) != table_sha256({k: v[:have] for k, v in columns.items()}):
            return False
        if have < rows:
            existing.append_arrow(to_arrow({k: v[have:] for k, v in columns.items()}))
            self.sent += sum(v[have:].nbytes for v in columns.values())
        return table_holds(parent, key, rows, sha)

    # ------------------------------------------------------------------ verification

    def _verify(self, arrays: dict[str, dict], info: SessionInfo, check: SessionCheck) -> None:
        """Every block confirmed by the server; the row counts of the arrays as the server described them
        (when it made them, or when the push found them), and the digests stored with them, equal the local
        ones. A mismatch forgets the progress (the next push writes the stream again) and is an error."""
        for name, sc in check.streams.items():
            width = len(info.streams[name].channels)
            want = {layout.TIME: ((sc.rows,), sc.t_sha256), layout.DATA: ((sc.rows, width), sc.data_sha256)}
            blocks = layout.n_blocks(sc.rows, sc.chunk_rows)
            parts = arrays[name]
            ok = all(tuple(parts[key].structure().shape) == shape and parts[key].metadata.get("sha256") == sha
                     and len(self.marks.done_blocks(info.id, self.lab, f"{name}/{key}")) == blocks
                     for key, (shape, sha) in want.items())
            if not ok:
                parts_of = (layout.TIME, layout.DATA, layout.FRAMES)
                self.marks.forget(info.id, self.lab, [f"{name}/{n}" for n in parts_of])
                raise LabError(f"session {info.id}: the lab's copy of {name} differs from the local one; "
                               "push again")


def _holds(node, ask: Callable[[], bool]) -> bool:
    """``ask()``, where a part the lab cannot read (a chunk a killed forwarder left broken: the server errs)
    counts as not held - it is written again - and any other failure is raised."""
    try:
        return ask()
    except Exception as exc:  # noqa: BLE001 - the client's HTTP errors
        if unreadable(node, exc):
            return False
        raise


def regular_chunks(n: int, rows: int) -> tuple[int, ...]:
    """The blocks of ``n`` rows in blocks of ``rows``: whole ones and a shorter last one."""
    return (rows,) * (n // rows) + ((n % rows,) if n % rows else ())


def record_digests(arr, digests: dict) -> None:
    """Put the per-block digests on an array node of the lab, unless it holds these already."""
    if digests and any(layout.plain(arr.metadata.get(k)) != v for k, v in digests.items()):
        arr.update_metadata(metadata=digests, drop_revision=True)


def _stand_aside(sid: str, there: dict, mine: dict) -> None:
    """Refused when another store's push is writing this half-pushed session now (its claim is fresh)."""
    writer = there.get("writer")
    if there.get("state") == layout.VERIFIED or not isinstance(writer, dict):
        return
    if (writer.get("host"), writer.get("store")) == (mine["host"], mine["store"]):
        return  # this store's own earlier push, killed: resumed
    if time.time() - float(writer.get("at") or 0.0) < CLAIM_STALE:
        raise Refused(f"another push of {sid} is writing it to the lab (from {writer.get('host')}); this "
                      "one leaves it to that one")


def table_digest(table, names: list[str]) -> tuple[int, str]:
    """(rows, SHA-256) of an Arrow table's columns ``names``, as :func:`table_sha256` hashes them; a
    column that cannot be ours (nulls, another type) gives a digest that matches nothing."""
    try:
        return table.num_rows, table_sha256(from_arrow(table, names))
    except ValueError as exc:
        return table.num_rows, f"unreadable: {exc}"
