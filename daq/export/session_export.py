"""Export a stored session (or a slice of it) to HDF5, MATLAB .mat or CSV, with units and metadata.

Every format is written chunk by chunk from :meth:`SessionStore.iter_stream`, so memory stays
bounded by the chunk size whatever the session's length; a file is written under a temporary
name in the output's folder and renamed when complete (a CSV folder as a whole), so a failed or killed
export never leaves a half file in place of the output, and ``force`` replaces an existing output only
once the new one is complete.

Layouts (one group / struct / file per stream, events included):

* HDF5  ``/`` attrs: session metadata (config and devices as JSON strings) and the time base;
  ``/streams/<stream>/t`` (s) and ``/streams/<stream>/data`` (n, n_channels), chunked and
  resizable, with attrs ``channels`` and ``units``; ``/events/<stream>`` datasets ``t``, ``seq``,
  ``kind``, ``body`` (JSON).
* MAT   variables ``session`` (metadata struct), ``streams`` (struct, one field per stream with
  ``t``, ``data``, ``channels``, ``units``, ``name``) and ``events`` (struct per event stream).
  Stream names are turned into MATLAB identifiers (``press.force`` -> ``press_force``).
  MAT v5 while every variable fits in :data:`MAT_V5_MAX_BYTES`, else MATLAB v7.3 (HDF5 inside).
* CSV   a directory: ``<stream>.csv`` with a header ``t [s, <time base>],<channel> [<unit>],...``,
  ``events.csv`` (stream, kind, seq, t, body as JSON) and ``session.json`` (metadata).

Press sensor blocks (stream ``press.sensors``) also get ``series`` and ``setpoint`` columns: the
k-th sensor frame is the block of the k-th ``measurement`` event on ``press.plan`` (-1 when a block
has no measurement event, e.g. after an abort).

Times are exported as stored: unix time (s) for live sessions; :func:`time_base` says which.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from daq.bus.frames import Event
from daq.export.csv_files import _to_csv
from daq.export.hdf5_files import to_hdf5
from daq.export.layout import (
    _SUFFIX,
    CHUNK_SAMPLES,
    CSV_CHUNK_SAMPLES,
    DEFAULT_DIR,
    FORMATS,
    LABELLED_STREAMS,
    MAT_V5_MAX_BYTES,
    MAT_VERSIONS,
    READ_AHEAD,
    ExportError,
    ExportResult,
    Progress,
    StreamPlan,
    check_count,
    events_by_stream,
    session_metadata,
    strict_json,
    time_base,
    time_base_text,
)
from daq.export.mat_files import MatV5Writer, MatV73Writer
from daq.store.reads import SessionReads
from daq.store.records import SessionInfo


def default_path(info: SessionInfo, fmt: str) -> Path:
    return DEFAULT_DIR / f"session-{info.id}{_SUFFIX[fmt]}"


def export_session(
    store: SessionReads, session_id: str, fmt: str, path: str | Path | None = None, **options
) -> Path:
    """Write a session in format ``fmt`` (hdf5, mat, csv); returns the path written.
    ``options`` are those of :func:`export`."""
    return export(store, session_id, fmt, path, **options).path


def export(
    store: SessionReads,
    session_id: str,
    fmt: str,
    path: str | Path | None = None,
    *,
    streams: list[str] | None = None,
    t_start: float | None = None,
    t_stop: float | None = None,
    mat_version: str = "auto",
    force: bool = False,
    compress: bool = False,
    chunk_samples: int = CHUNK_SAMPLES,
    progress: Progress | None = None,
) -> ExportResult:
    """Export a session, or the streams / time window ``t_start <= t < t_stop`` of it.

    ``t_start``/``t_stop`` are in the session's own time base (see :func:`time_base`);
    ``mat_version`` "auto" picks v5 while every variable fits in :data:`MAT_V5_MAX_BYTES`;
    an existing output is replaced only with ``force``; ``progress(done, total)`` is called
    after every chunk; ``compress`` gzips HDF5 datasets (slower; noisy floats barely shrink).
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r} (use one of {', '.join(FORMATS)})")
    if mat_version not in MAT_VERSIONS:
        raise ExportError(f"unknown MAT version {mat_version!r} (use one of {', '.join(MAT_VERSIONS)})")
    began = time.perf_counter()
    info = store.get_session(session_id)
    out = Path(path) if path is not None else default_path(info, fmt)
    if out.exists() and not force:
        raise ExportError(f"{out} already exists (use --force to overwrite it)")
    if out.exists() and fmt != "csv" and out.is_dir():
        raise ExportError(f"{out} is a directory; give a file name for {fmt} exports")
    frame_names, event_names = _select(info, streams)
    plans = [_plan(store, info, name, t_start, t_stop) for name in frame_names]
    events = [
        ev for ev in store.events(info.id, t_start=t_start, t_stop=t_stop) if ev.stream in set(event_names)
    ]
    result = ExportResult(
        out, fmt, None, {p.name: p.n for p in plans}, len(events), time_base(info), t_start, t_stop
    )
    total = sum(p.n for p in plans)
    done = [0]

    if fmt == "csv":
        chunk_samples = min(chunk_samples, CSV_CHUNK_SAMPLES)

    def chunks(plan: StreamPlan, size: int = chunk_samples, ahead: bool = True):
        """(chunk, label columns) of a stream in chunks of ``size`` samples. ``ahead``: read by a
        background thread while the previous chunks are written; else read here, on demand, into one
        reused pair of arrays (each chunk valid until the next is taken) - for a writer that holds
        the GIL while it writes (h5py), which a reading thread would only wait for."""
        it = store.iter_stream(info.id, plan.name, size, t_start=t_start, t_stop=t_stop, reuse=not ahead)
        try:
            for chunk in _read_ahead(it, READ_AHEAD) if ahead else it:
                yield chunk, plan.label_columns(chunk)
                done[0] += len(chunk)
                if progress is not None:
                    progress(done[0], total)
        finally:
            if not ahead:
                it.close()  # its SQLite connection, now rather than when collected

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with _in_place_when_done(out, directory=fmt == "csv") as part:
            if fmt == "csv":
                _to_csv(info, plans, events, part, chunks, result)
            elif fmt == "hdf5":
                to_hdf5(info, plans, events, part, chunks, result, compress, chunk_samples)
            else:
                result.mat_version = _choose_mat_version(info, plans, events, mat_version)
                writer = MatV5Writer if result.mat_version == "5" else MatV73Writer
                _to_mat(writer, info, plans, events, part, chunks, result, compress)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    if progress is not None and total == 0:
        progress(0, 0)
    result.seconds = time.perf_counter() - began
    result.bytes = _size_of(out)
    return result


@contextlib.contextmanager
def _in_place_when_done(out: Path, directory: bool = False) -> Iterator[Path]:
    """A temporary name next to ``out`` (a hidden ``.<name>.<id>.part`` in the same folder, so the same
    file system) to write the export to; when the block ends normally it takes ``out``'s place, an
    existing ``out`` being replaced only then; on any failure it is removed and ``out`` stays as it was.
    A file is replaced in one rename; a folder (CSV) is swapped with two, the old one removed after."""
    tag = uuid.uuid4().hex[:8]
    part = out.with_name(f".{out.name}.{tag}.part")
    try:
        if directory:
            part.mkdir()
        yield part
        if directory and (out.exists() or out.is_symlink()):
            old = out.with_name(f".{out.name}.{tag}.old")
            os.rename(out, old)
            try:
                os.rename(part, out)
            except OSError:
                os.rename(old, out)  # put the previous export back
                raise
            _remove(old)
        else:
            os.replace(part, out)
    finally:
        if part.exists() or part.is_symlink():
            _remove(part)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _read_ahead(it: Iterator, depth: int) -> Iterator:
    """Items of ``it`` produced by a background thread, at most ``depth`` ahead of the consumer.
    The iterator is advanced and closed in that thread only (its SQLite connection lives there)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in it:
                if not put(item):
                    return
            put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failed(exc))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=run, name="export-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        worker.join()


def _size_of(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


def _select(info: SessionInfo, streams: list[str] | None) -> tuple[list[str], list[str]]:
    frames = [n for n, s in info.streams.items() if s.type == "frame"]
    events = [n for n, s in info.streams.items() if s.type == "event"]
    if streams is None:
        return frames, events
    unknown = [s for s in streams if s not in info.streams]
    if unknown:
        raise ExportError(
            f"session {info.id} has no stream {', '.join(map(repr, unknown))} "
            f"(streams: {', '.join(sorted(info.streams))})"
        )
    return [n for n in frames if n in streams], [n for n in events if n in streams]


def _plan(store: SessionReads, info: SessionInfo, name: str, t_start, t_stop) -> StreamPlan:
    plan = StreamPlan(name, info.streams[name], store.count_samples(info.id, name, t_start, t_stop))
    spec = LABELLED_STREAMS.get(name)
    if spec is not None:
        ev_stream, kind, columns = spec
        evs = store.events(info.id, kind=kind, stream=ev_stream)
        frames = [(s0, n) for s0, n, _, _ in store.frame_index(info.id, name) if n > 0]
        plan.frame_starts = np.array([s0 for s0, _ in frames], dtype=np.int64)
        for col, key in columns.items():
            values = np.full(len(frames), -1, dtype=np.int64)
            for k, ev in enumerate(evs[: len(frames)]):
                values[k] = int(ev.body.get(key, -1))
            plan.labels[col] = values
    return plan


# ----------------------------------------------------------------------------- MAT


def matlab_name(name: str, taken: set[str]) -> str:
    """A valid, unique MATLAB identifier for a stream name (max 63 chars)."""
    ident = re.sub(r"\W", "_", name)
    if not ident or not ident[0].isalpha():
        ident = "s_" + ident
    ident = ident[:63]
    base, k = ident, 1
    while ident in taken:
        k += 1
        ident = f"{base[:58]}_{k}"
    taken.add(ident)
    return ident


@dataclass
class Column:
    """A big array of a MAT variable, written later chunk by chunk: (rows, cols) of ``dtype``."""

    key: str
    rows: int
    cols: int
    dtype: np.dtype


def _mat_variables(info: SessionInfo, plans: list[StreamPlan], events: list[Event]) -> dict:
    """The MAT variables as nested dicts (structs), lists of str (cells), str, numbers and
    :class:`Column` placeholders for the sample arrays."""
    taken: set[str] = set()
    streams = {}
    for i, plan in enumerate(plans):
        si = plan.info
        dtype = np.dtype(si.dtype)
        fields = {
            "name": plan.name,
            "t": Column(f"{i}/t", plan.n, 1, np.dtype(np.float64)),
            "data": Column(f"{i}/data", plan.n, len(si.channels), dtype),
            "channels": list(si.channels),
            "units": list(si.units),
            "dtype": str(dtype),
            "time_base": time_base(info),
        }
        for col in plan.labels:
            fields[col] = Column(f"{i}/{col}", plan.n, 1, np.dtype(np.int64))
        streams[matlab_name(plan.name, taken)] = fields
    taken = set()
    evs = {}
    for name, group in events_by_stream(events).items():
        evs[matlab_name(name, taken)] = {
            "name": name,
            "t": np.array([e.t for e in group], dtype=np.float64).reshape(-1, 1),
            "seq": np.array([e.seq for e in group], dtype=np.int64).reshape(-1, 1),
            "kind": [e.kind for e in group],
            "body": [strict_json(e.body) for e in group],
        }
    session = {
        "id": info.id,
        "kind": info.kind,
        "status": info.status,
        "reason": info.reason or "",
        "started": float(info.started),
        "ended": float(info.ended) if info.ended is not None else np.nan,
        "software_version": info.software_version,
        "time_base": time_base(info),
        "time_base_description": time_base_text(time_base(info)),
        "config_json": strict_json(info.config),
        "devices_json": strict_json(info.devices),
    }
    return {"session": session, "streams": streams, "events": evs}


def mat_variable_sizes(info: SessionInfo, plans: list[StreamPlan], events: list[Event]) -> dict[str, int]:
    """Bytes of every top-level variable in a MAT v5 file (uncompressed, exact)."""
    return {
        name: MatV5Writer.element_size(value, name)
        for name, value in _mat_variables(info, plans, events).items()
    }


def _choose_mat_version(info, plans, events, asked: str) -> str:
    if asked == "7.3":
        return "7.3"
    sizes = mat_variable_sizes(info, plans, events)
    too_big = {k: v for k, v in sizes.items() if v > MAT_V5_MAX_BYTES}
    if not too_big:
        return "5"
    if asked == "5":
        name, size = max(too_big.items(), key=lambda kv: kv[1])
        raise ExportError(
            f"MAT v5 cannot hold variable {name!r} ({size / 2**30:.2f} GiB, "
            f"limit {MAT_V5_MAX_BYTES / 2**30:.2f} GiB); "
            "use --mat-version 7.3 or export fewer streams or a shorter window"
        )
    return "7.3"


def _to_mat(writer_cls, info, plans, events, out: Path, chunks, result, compress: bool) -> None:
    variables = _mat_variables(info, plans, events)
    header_time = info.ended if info.ended is not None else info.started
    with writer_cls(out, variables, created=header_time, compress=compress) as w:
        for i, plan in enumerate(plans):
            k = 0
            for chunk, extra in chunks(plan):
                w.write_rows(f"{i}/t", k, chunk.t.reshape(-1, 1))
                data = chunk.data
                w.write_rows(f"{i}/data", k, data)
                for col, values in extra.items():
                    w.write_rows(f"{i}/{col}", k, values.reshape(-1, 1))
                k += len(chunk)
            check_count(plan, k)


__all__ = [
    "CHUNK_SAMPLES",
    "DEFAULT_DIR",
    "FORMATS",
    "MAT_V5_MAX_BYTES",
    "ExportError",
    "ExportResult",
    "export",
    "export_session",
    "mat_variable_sizes",
    "session_metadata",
    "time_base",
]
