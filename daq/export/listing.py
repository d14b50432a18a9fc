"""What ``hil sessions --json`` and ``hil show --json`` print, as dicts: one definition for the CLI and for
the HTTP API of ``hil serve`` (the same fields in both)."""

from __future__ import annotations

from daq.export.layout import session_header, session_metadata
from daq.store.reads import SessionReads
from daq.store.records import SessionInfo


def started_by(store: SessionReads, info: SessionInfo) -> str | None:
    """Who asked for the run that recorded ``info``: the body's ``by`` of the ``started`` event on
    ``<kind>.run`` (``hil run``: the OS user or ``$HIL_USER``; ``hil serve``: the token's name); None for a
    session that has no such record (older runs, recordings that are not runs)."""
    found = store.events(info.id, kind="started", stream=f"{info.kind}.run")
    by = found[0].body.get("by") if found else None
    return str(by) if by is not None else None


def commands_given(store: SessionReads, info: SessionInfo) -> list[dict]:
    """The operator commands the run took (pause, resume, stop, abort), in order: ``t`` (unix s),
    ``command`` and ``by`` (who gave it: a token's name, an OS user through `hil ctl`, a key's name)."""
    found = store.events(info.id, kind="command", stream=f"{info.kind}.run")
    return [{"t": e.t, "command": e.body.get("command"), "by": e.body.get("by")} for e in found]


def is_dry_run(info: SessionInfo) -> bool:
    """Whether the session was a dry run (`hil run --dry-run`: commands held, none sent; docs/dry-run.md)."""
    rig = (info.config or {}).get("rig") if isinstance(info.config, dict) else None
    return bool(isinstance(rig, dict) and rig.get("dry_run"))


def held_commands(store: SessionReads, info: SessionInfo) -> list[dict]:
    """The commands a dry run held, in order (each ``command_held`` event's body: ``n``, ``device``,
    ``command``, ``value``, ``limits``, ``phase``); empty for a session that is no dry run."""
    if not is_dry_run(info):
        return []
    return [dict(e.body) for e in store.events(info.id, kind="command_held", stream=f"{info.kind}.dry_run")]


def rig_name(info: SessionInfo) -> str | None:
    """The ``[rig].name`` of the session's config snapshot (None when it has none)."""
    rig = (info.config or {}).get("rig") if isinstance(info.config, dict) else None
    name = rig.get("name") if isinstance(rig, dict) else None
    return str(name) if name else None


def session_row(info: SessionInfo, by: str | None = None) -> dict:
    """One session of ``hil sessions --json``; ``by``: :func:`started_by`."""
    return {**session_header(info, by), "rig": rig_name(info), "dry_run": is_dry_run(info),
            "streams": sorted(info.streams)}


def session_rows(store: SessionReads) -> list[dict]:
    """``hil sessions --json``: every session of the store, oldest first, each with who started it."""
    return [session_row(i, started_by(store, i)) for i in store.list_sessions()]


def session_detail(store: SessionReads, session: str) -> dict:
    """``hil show --json``: the session's metadata (:func:`session_metadata`, with each frame stream's real
    sample spacing and who started it), its event counts per stream and kind, and the operator commands it
    took with who gave them."""
    info = store.get_session(session)
    counts = store.event_counts(info.id)
    for s in info.streams.values():
        if s.type == "frame" and s.n_samples:
            s.timing = store.stream_timing(info.id, s.name)
    meta = session_metadata(info, started_by(store, info))
    meta["rig"] = rig_name(info)
    meta["event_counts"] = [{"stream": s, "kind": k, "n": n} for (s, k), n in counts.items()]
    meta["commands"] = commands_given(store, info)
    meta["dry_run"] = is_dry_run(info)
    if meta["dry_run"]:
        meta["held_commands"] = held_commands(store, info)
    return meta
