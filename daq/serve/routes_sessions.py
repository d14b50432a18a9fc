"""Routes of the store: configs, sessions, a session's summary and plot series, exports, analyses."""

from __future__ import annotations

import asyncio

import numpy as np
from starlette.requests import Request
from starlette.responses import FileResponse, Response

from daq.export.listing import session_detail, session_rows
from daq.lab.marks import replicas, session_link
from daq.serve import series as series_math
from daq.serve.exports import ClientGone, ExportResponse
from daq.serve.problems import BadRequest, Conflict, NotFound
from daq.serve.replies import JSON

MAX_SERIES_POINTS = 4000   # buckets per stream of GET .../series, at most
SUMMARY_EVENTS = 500       # events of the run's own stream (who did what) in a summary, at most
CHUNK_BUCKETS = 256         # buckets read at a time (the memory of a series request)
ONLINE_KINDS = ("estimate", "estimate_failed")
CORRECTION_KINDS = ("setpoint_reached", "setpoint_not_reached")


async def configs(service, request: Request, name) -> Response:
    checked = await asyncio.to_thread(service.configs.check_all)
    return JSON([c.to_dict() for c in checked])


def _rows(service) -> list[dict]:
    """``hil sessions --json``, each row with ``lab``: the labs holding the session verified, with a link."""
    if not service.store_path.exists():
        return []
    with service.reader() as reader:
        rows = session_rows(reader)
    held = replicas(service.store_path)
    for row in rows:
        row["lab"] = [{"url": lab, "link": session_link(lab, row["id"])} for lab in held.get(row["id"], [])]
    return rows


async def sessions(service, request: Request, name) -> Response:
    return JSON(await asyncio.to_thread(_rows, service))


def _detail(service, session: str) -> dict:
    with service.reader() as reader:
        return session_detail(reader, session)


async def session(service, request: Request, name) -> Response:
    return JSON(await asyncio.to_thread(_detail, service, request.path_params["sid"]))


def _summary(service, session: str) -> dict:
    """What a run's page shows beside the metadata: the outcome, who did what, the last estimate of each
    online stream (with units and verdict)."""
    with service.reader() as reader:
        info = reader.get_session(session)
        events = reader.events(info.id)
    actions: list[dict]
    outcome, estimates, actions, corrections = None, {}, [], []
    for ev in events:
        if ev.kind == "plan_outcome":
            outcome = ev.body
        elif ev.kind in ONLINE_KINDS:
            estimates[ev.stream] = {"stream": ev.stream, "kind": ev.kind, "t": ev.t, "body": ev.body}
        elif ev.kind in CORRECTION_KINDS:
            corrections.append({"stream": ev.stream, "kind": ev.kind, "t": ev.t, "body": ev.body})
        elif (ev.stream.endswith(".run") or (isinstance(ev.body, dict) and "by" in ev.body)) \
                and len(actions) < SUMMARY_EVENTS:  # who started, paused, stopped it
            actions.append({"stream": ev.stream, "kind": ev.kind, "t": ev.t, "body": ev.body})
    return {"session": info.id, "kind": info.kind, "status": info.status, "reason": info.reason,
            "started": info.started, "ended": info.ended, "config": info.config, "outcome": outcome,
            "actions": actions, "estimates": list(estimates.values()),
            "corrections": corrections[-MAX_SERIES_POINTS:], "n_corrections": len(corrections)}


async def summary(service, request: Request, name) -> Response:
    return JSON(await asyncio.to_thread(_summary, service, request.path_params["sid"]))


def _series(service, session: str, points: int) -> dict:
    """Every frame stream of the session reduced to at most ``points`` buckets (t: the bucket's first sample
    time, s in the store's time base; mean, min, max per channel; gaps as null rows)."""
    out = []
    with service.reader() as reader:
        info = reader.get_session(session)
        for s in info.streams.values():
            if s.type != "frame" or not s.n_samples:
                continue
            n = reader.count_samples(info.id, s.name)
            per = series_math.buckets_of(n, points)
            parts = [series_math.reduce(c.t, np.asarray(c.data, dtype=float), per)  # memory: one chunk
                     for c in reader.iter_stream(info.id, s.name, chunk_samples=per * CHUNK_BUCKETS)]
            if not parts:
                continue
            t, mean, lo, hi = (np.concatenate([p[k] for p in parts]) for k in range(4))
            t, mean, lo, hi = series_math.with_gaps(t, mean, lo, hi, spacing=(s.dt or 0) * per or None)
            out.append({"stream": s.name, "channels": s.channels, "units": s.units, "n": n,
                        "per_point": per, "t": t.tolist(), "mean": mean.T.tolist(),
                        "min": lo.T.tolist(), "max": hi.T.tolist()})
    return {"session": info.id, "started": info.started, "streams": out}


async def series(service, request: Request, name) -> Response:
    raw = request.query_params.get("points", str(MAX_SERIES_POINTS))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SERIES_POINTS:
        raise BadRequest(f"points must be an integer from 1 to {MAX_SERIES_POINTS}")
    return JSON(await asyncio.to_thread(_series, service, request.path_params["sid"], int(raw)))


def _session_id(service, session: str) -> str:
    with service.reader() as reader:
        return reader.get_session(session).id


async def export_session(service, request: Request, name) -> Response:
    fmt = request.query_params.get("format", "")
    if fmt not in ("hdf5", "mat", "csv"):
        raise BadRequest("format must be hdf5, mat or csv")
    sid = await asyncio.to_thread(_session_id, service, request.path_params["sid"])
    try:
        path, filename = await service.exports.make(sid, fmt, request.is_disconnected)
    except ClientGone:
        return Response(status_code=499)  # nobody reads it; the folder is gone already
    media = "application/zip" if fmt == "csv" else "application/octet-stream"
    return ExportResponse(path, filename, media)


async def analysis(service, request: Request, name) -> Response:
    sid = await asyncio.to_thread(_session_id, service, request.path_params["sid"])
    return JSON({"session": sid, **service.analyses.state(sid)})


async def analyze(service, request: Request, name) -> Response:
    sid = await asyncio.to_thread(_session_id, service, request.path_params["sid"])
    if not service.analyses.start(sid):
        raise Conflict("an analysis is running; one at a time")
    return JSON({"session": sid, "state": "running"}, status_code=202)


async def analysis_plot(service, request: Request, name) -> Response:
    sid = await asyncio.to_thread(_session_id, service, request.path_params["sid"])
    path = service.analyses.plot(sid, request.path_params["file"])
    if path is None:
        raise NotFound(f"no plot {request.path_params['file']!r} of session {sid}")
    return FileResponse(path, media_type="image/png")


__all__ = ["analysis", "analysis_plot", "analyze", "configs", "export_session", "series", "session",
           "sessions", "summary"]
