"""Export a stored session to HDF5, MATLAB .mat or CSV, with units and metadata.

Layouts (one group / struct / file per stream, events included):

* HDF5  ``/`` attrs: session metadata (config and devices as JSON strings);
  ``/streams/<stream>/t`` (s) and ``/streams/<stream>/data`` (n, n_channels) with attrs
  ``channels`` and ``units``; ``/events/<stream>`` datasets ``t``, ``seq``, ``kind``, ``body`` (JSON).
* MAT   variables ``session`` (metadata struct), ``streams`` (struct, one field per stream with
  ``t``, ``data``, ``channels``, ``units``, ``name``) and ``events`` (struct per event stream).
  Stream names are turned into MATLAB identifiers (``press.force`` -> ``press_force``).
* CSV   a directory: ``<stream>.csv`` with a header ``t [s],<channel> [<unit>],...``,
  ``events.csv`` (stream, kind, seq, t, body as JSON) and ``session.json`` (metadata).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np

from daq.store import SessionInfo, SessionStore

FORMATS = ("hdf5", "mat", "csv")
_SUFFIX = {"hdf5": ".h5", "mat": ".mat", "csv": "_csv"}


class ExportError(Exception):
    """An export could not be written (one clear message)."""


def session_metadata(info: SessionInfo) -> dict:
    """JSON-friendly summary of a session (no sample data)."""
    return {
        "id": info.id,
        "kind": info.kind,
        "status": info.status,
        "reason": info.reason,
        "started": info.started,
        "ended": info.ended,
        "software_version": info.software_version,
        "config": info.config,
        "devices": info.devices,
        "streams": {
            name: {
                "type": s.type,
                "channels": s.channels,
                "units": s.units,
                "dtype": s.dtype,
                "dt": s.dt,
                "rate_hz": s.rate,
                "n_messages": s.n_messages,
                "n_samples": s.n_samples,
            }
            for name, s in info.streams.items()
        },
        "stats": info.stats,
    }


def default_path(info: SessionInfo, fmt: str) -> Path:
    return Path(f"session-{info.id}{_SUFFIX[fmt]}")


def export_session(store: SessionStore, session_id: str, fmt: str, path: str | Path | None = None) -> Path:
    """Write a session in format ``fmt`` (hdf5, mat, csv); returns the path written."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r} (use one of {', '.join(FORMATS)})")
    info = store.get_session(session_id)
    out = Path(path) if path is not None else default_path(info, fmt)
    try:
        if fmt != "csv":
            out.parent.mkdir(parents=True, exist_ok=True)
        {"hdf5": _to_hdf5, "mat": _to_mat, "csv": _to_csv}[fmt](store, info, out)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def _frame_streams(info: SessionInfo) -> list[str]:
    return [name for name, s in info.streams.items() if s.type == "frame"]


def _events_by_stream(store: SessionStore, info: SessionInfo) -> dict[str, list]:
    out: dict[str, list] = {}
    for ev in store.events(info.id):
        out.setdefault(ev.stream, []).append(ev)
    return out


# ----------------------------------------------------------------------------- HDF5


def _to_hdf5(store: SessionStore, info: SessionInfo, out: Path) -> None:
    import h5py

    meta = session_metadata(info)
    str_dt = h5py.string_dtype()
    with h5py.File(out, "w") as f:
        for key in ("id", "kind", "status", "software_version"):
            f.attrs[key] = meta[key]
        f.attrs["reason"] = info.reason or ""
        f.attrs["started"] = info.started
        f.attrs["ended"] = info.ended if info.ended is not None else np.nan
        f.attrs["config_json"] = json.dumps(info.config)
        f.attrs["devices_json"] = json.dumps(info.devices)
        f.attrs["metadata_json"] = json.dumps(meta, default=str)
        streams = f.create_group("streams")
        for name in _frame_streams(info):
            sd = store.read_stream(info.id, name)
            g = streams.create_group(name)
            g.attrs["channels"] = np.array(sd.channels, dtype=object).astype(str_dt) if sd.channels else []
            g.attrs["units"] = np.array(sd.units, dtype=object).astype(str_dt) if sd.units else []
            g.attrs["rate_hz"] = info.streams[name].rate or np.nan
            t = g.create_dataset("t", data=sd.t)
            t.attrs["units"] = "s"
            d = g.create_dataset("data", data=sd.data, compression="gzip" if sd.data.size > 4096 else None)
            d.attrs["channels"] = g.attrs["channels"]
            d.attrs["units"] = g.attrs["units"]
        events = f.create_group("events")
        for name, evs in _events_by_stream(store, info).items():
            g = events.create_group(name)
            g.create_dataset("t", data=np.array([e.t for e in evs], dtype=np.float64)).attrs["units"] = "s"
            g.create_dataset("seq", data=np.array([e.seq for e in evs], dtype=np.int64))
            g.create_dataset("kind", data=np.array([e.kind for e in evs], dtype=object), dtype=str_dt)
            g.create_dataset(
                "body", data=np.array([json.dumps(e.body) for e in evs], dtype=object), dtype=str_dt
            )


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


def _cell(strings: list[str]) -> np.ndarray:
    arr = np.empty((len(strings),), dtype=object)
    arr[:] = strings
    return arr


def _to_mat(store: SessionStore, info: SessionInfo, out: Path) -> None:
    from scipy.io import savemat

    taken: set[str] = set()
    streams = {}
    for name in _frame_streams(info):
        sd = store.read_stream(info.id, name)
        data = sd.data.astype(np.uint8) if sd.data.dtype == np.bool_ else sd.data
        streams[matlab_name(name, taken)] = {
            "name": name,
            "t": sd.t.reshape(-1, 1),
            "data": data,
            "channels": _cell(sd.channels),
            "units": _cell(sd.units),
            "dtype": str(sd.data.dtype),
        }
    taken = set()
    events = {}
    for name, evs in _events_by_stream(store, info).items():
        events[matlab_name(name, taken)] = {
            "name": name,
            "t": np.array([e.t for e in evs], dtype=np.float64).reshape(-1, 1),
            "seq": np.array([e.seq for e in evs], dtype=np.int64).reshape(-1, 1),
            "kind": _cell([e.kind for e in evs]),
            "body": _cell([json.dumps(e.body) for e in evs]),
        }
    session = {
        "id": info.id,
        "kind": info.kind,
        "status": info.status,
        "reason": info.reason or "",
        "started": info.started,
        "ended": info.ended if info.ended is not None else np.nan,
        "software_version": info.software_version,
        "config_json": json.dumps(info.config),
        "devices_json": json.dumps(info.devices),
    }
    savemat(
        out,
        {"session": session, "streams": streams, "events": events},
        do_compression=True,
        long_field_names=True,
    )


# ----------------------------------------------------------------------------- CSV


def csv_file_name(stream: str) -> str:
    return re.sub(r"[^\w.\-]", "_", stream) + ".csv"


def _to_csv(store: SessionStore, info: SessionInfo, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in _frame_streams(info):
        sd = store.read_stream(info.id, name)
        header = ["t [s]"] + [f"{c} [{u}]" for c, u in zip(sd.channels, sd.units, strict=True)]
        with open(out / csv_file_name(name), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            data = sd.data.astype(np.int64) if sd.data.dtype == np.bool_ else sd.data
            for t, row in zip(sd.t.tolist(), data.tolist(), strict=True):
                w.writerow([repr(t), *(repr(x) for x in row)])
    with open(out / "events.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stream", "kind", "seq", "t [s]", "body"])
        for ev in store.events(info.id):
            w.writerow([ev.stream, ev.kind, ev.seq, repr(ev.t), json.dumps(ev.body)])
    (out / "session.json").write_text(json.dumps(session_metadata(info), indent=2, default=str))
