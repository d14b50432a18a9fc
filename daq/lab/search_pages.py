"""A search of the lab's sessions that fetches only what a listing shows: Tiled's search route with the
session filters as Tiled's own queries (:func:`daq.lab.search.session_query`), 300 hits a page (Tiled's
largest) and the server's own projection of each hit's metadata (``select_metadata``, a JMESPath
expression) - not the whole metadata (config snapshot, devices, the analysis report: ~6-10 kB a session),
which the plain client fetches for every hit and which cost 3-4 ms a hit. Pages follow the server's
``next`` links (a cursor: no page re-counts the hits before it)."""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import parse_qs, urlsplit

from daq.lab import layout
from daq.lab.search import Filters, session_query
from daq.store.records import SessionInfo

PAGE = 300  # hits a page: Tiled's MAX_PAGE_SIZE
#: What a listing, a prefix lookup and ``--json`` rows need of a session container's metadata.
LISTING = ("{id: id, kind: kind, status: status, reason: reason, started: started, ended: ended, "
           "heartbeat: heartbeat, software_version: software_version, by: by, rig: rig, "
           "dry_run: config.rig.dry_run, streams: streams, replication: {state: replication.state}, "
           "analysis: {estimates: analysis.estimates, intervals: analysis.intervals, "
           "verdict: analysis.verdict, structure: analysis.structure, by: analysis.by, "
           "where: analysis.where}}")


def query_params(queries: list) -> dict[str, list[str]]:
    """Tiled's queries as the search route's ``filter[...]`` parameters (as Tiled's client sends them)."""
    from tiled.query_registration import default_query_registry  # lazy: tiled's client side

    params: dict[str, list[str]] = defaultdict(list)
    for query in queries:
        name = default_query_registry.query_type_to_name[type(query)]
        for field, value in query.encode().items():
            if value is not None:
                params[f"filter[{name}][condition][{field}]"].append(value)
    return dict(params)


#: The newest first: Tiled sorts by the metadata's ``started`` descending, then by the node's key (the
#: session id) descending - the local store's order (started, id) reversed, so both pick the same sessions.
NEWEST_FIRST = ["-started", "-id"]


def _get(root, url: str, params: dict) -> dict:
    """One request of the search route, retried as Tiled's client retries; its JSON body."""
    from tiled.client.utils import handle_error, retry_context  # lazy: tiled's client side

    http = root.context.http_client
    base = url.split("?", 1)[0]
    for attempt in retry_context():
        with attempt:
            page = handle_error(http.get(base, params={**parse_qs(urlsplit(url).query), **params},
                                         headers={"Accept": "application/json"}))
    return page.json()


def _selected(body: dict) -> list[dict]:
    return [item["attributes"]["metadata"]["selected"] for item in body["data"]]  # the server's wrap


def search_rows(root, filters: Filters) -> list[dict]:
    """The listing fields (:data:`LISTING`) of every verified session matching ``filters``."""
    filters_params = query_params(session_query(filters))
    url: str | None = f"{root.item['links']['search']}?page[offset]=0&page[limit]={PAGE}"
    rows: list[dict] = []
    while url:
        body = _get(root, url, {**filters_params, "fields": "metadata", "select_metadata": LISTING,
                                "omit_links": "true"})
        rows += _selected(body)
        # A short page is the last: past it Tiled 0.2.20 still links offset pages up to its *estimate* of
        # the container's size (PostgreSQL's table statistics, not the hits), each an empty search.
        url = body["links"].get("next") if len(body["data"]) == PAGE else None
    return rows


def newest_rows(root, filters: Filters, limit: int) -> tuple[list[dict], int]:
    """The listing fields of the ``limit`` newest verified sessions matching ``filters`` (newest first),
    and how many match in all. The server sorts and cuts (:data:`NEWEST_FIRST`, a page of at most
    ``limit``); the count is one more request (Tiled's exact count, as ``len()`` of a search asks it),
    made only when the page came back full."""
    search = root.item["links"]["search"]
    filters_params = query_params(session_query(filters))
    rows: list[dict] = []
    while len(rows) < limit:
        size = min(PAGE, limit - len(rows))
        body = _get(root, search, {**filters_params, "page[offset]": str(len(rows)), "page[limit]": str(size),
                                   "sort": NEWEST_FIRST, "fields": "metadata", "select_metadata": LISTING,
                                   "omit_links": "true"})
        rows += _selected(body)
        if len(body["data"]) < size:  # the last of the hits
            return rows, len(rows)
    body = _get(root, search, {**filters_params, "fields": "count", "page[limit]": "0"})
    return rows, int(body["meta"]["count"])


def listing_info(row: dict) -> SessionInfo:
    """A session as a listing sees it: its fields, the rig part of its config, its streams (the whole
    session is :meth:`daq.lab.reader.LabReader.get_session`)."""
    rig = {k: v for k, v in (row.get("rig") or {}).items() if v is not None}  # layout 3: dry_run in it
    if row.get("dry_run") is not None:
        rig["dry_run"] = row["dry_run"]
    streams = row.get("streams") or {}
    return SessionInfo(
        id=row["id"], kind=row["kind"], status=row["status"], reason=row.get("reason"),
        started=row["started"], ended=row.get("ended"), config={"rig": rig},
        software_version=row.get("software_version") or "", devices={},
        streams={name: layout.stream_info(name, s) for name, s in sorted(streams.items())},
        heartbeat=row.get("heartbeat"),
    )
