"""The filters of ``hil --store URL sessions`` as Tiled queries on the session containers' metadata
(run by the catalogue's database: SQLite or PostgreSQL, never by scanning sessions here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from daq.lab import layout


@dataclass
class Filters:
    rig: str | None = None  # [rig].name
    kind: str | None = None
    status: str | None = None
    since: float | None = None  # started at or after, unix time
    until: float | None = None  # started before
    by: str | None = None
    verdict: str | None = None
    params: list[tuple[str, float, float]] = field(default_factory=list)  # estimate within [lo, hi]


def session_query(filters: Filters) -> list:
    """Tiled queries whose conjunction selects the verified sessions matching ``filters`` (the live ones
    for ``status="running"``)."""
    from tiled.queries import Comparison  # lazy: tiled's client side

    live = filters.status == "running"  # a running session is in the lab as it records (daq/lab/live.py)
    state = layout.LIVE if live else layout.VERIFIED
    qs: list = []
    for key, value in (("replication.state", state), ("rig.name", filters.rig), ("kind", filters.kind),
                       ("status", filters.status), ("by", filters.by), ("analysis.verdict", filters.verdict)):
        if value is not None:  # equal as "at least and at most": a B-tree index answers it (pg_indexes.py)
            qs += [Comparison("ge", key, value), Comparison("le", key, value)]
    if filters.since is not None:
        qs.append(Comparison("ge", "started", float(filters.since)))
    if filters.until is not None:
        qs.append(Comparison("lt", "started", float(filters.until)))
    for name, lo, hi in filters.params:
        qs.append(Comparison("ge", f"analysis.estimates.{name}", float(lo)))
        qs.append(Comparison("le", f"analysis.estimates.{name}", float(hi)))
    return qs


def run_search(root, filters: Filters):
    """The container of the matching sessions (queries applied one after another)."""
    node = root
    for q in session_query(filters):
        node = node.search(q)
    return node


def matches(info, filters: Filters, by: str | None, analysis: dict | None = None) -> bool:
    """The same filters on a local session (``analysis``: its analysis kept on the rig, if any)."""
    rig = (info.config or {}).get("rig", {}) if isinstance(info.config, dict) else {}
    found = (analysis or {}).get("estimates") or {}
    return ((filters.rig is None or rig.get("name") == filters.rig)
            and (filters.kind is None or info.kind == filters.kind)
            and (filters.status is None or info.status == filters.status)
            and (filters.by is None or by == filters.by)
            and (filters.since is None or info.started >= filters.since)
            and (filters.until is None or info.started < filters.until)
            and (filters.verdict is None or (analysis or {}).get("verdict") == filters.verdict)
            and all(isinstance(found.get(n), (int, float)) and lo <= found[n] <= hi
                    for n, lo, hi in filters.params))
