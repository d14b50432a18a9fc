"""What ``hil sessions --json`` and ``hil show --json`` print, as dicts: one definition for the CLI and for
the HTTP API of ``hil serve`` (the same fields in both)."""

from __future__ import annotations

from daq.export.layout import session_metadata
from daq.store.reader import SessionReader
from daq.store.records import SessionInfo


def session_row(info: SessionInfo) -> dict:
    """One session of ``hil sessions --json``."""
    return {
        "id": info.id,
        "kind": info.kind,
        "status": info.status,
        "reason": info.reason,
        "started": info.started,
        "ended": info.ended,
        "streams": sorted(info.streams),
    }


def session_detail(store: SessionReader, session: str) -> dict:
    """``hil show --json``: the session's metadata (:func:`session_metadata`, with each frame stream's real
    sample spacing) and its event counts per stream and kind."""
    info = store.get_session(session)
    counts = store.event_counts(info.id)
    for s in info.streams.values():
        if s.type == "frame" and s.n_samples:
            s.timing = store.stream_timing(info.id, s.name)
    meta = session_metadata(info)
    meta["event_counts"] = [{"stream": s, "kind": k, "n": n} for (s, k), n in counts.items()]
    return meta
