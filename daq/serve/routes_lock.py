"""Routes of the rig's lock (:mod:`daq.serve.locks`): ``GET /api/lock`` (anyone who may read), ``POST
/api/lock`` ``{"note": "..."}`` (an operator takes the rig), ``DELETE /api/lock`` (its holder, or an admin
breaking it)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from daq.serve.problems import BadRequest
from daq.serve.replies import JSON, read_json

LOCK_USAGE = 'the body must be JSON: {"note": "<why the rig is locked>"}'


def _announce(service) -> dict:
    state = service.locks.state()
    service.relay.broadcast({"type": "lock", **state})
    return state


async def get_lock(service, request: Request, name) -> Response:
    return JSON(service.locks.state())


async def post_lock(service, request: Request, name) -> Response:
    body = await read_json(request, LOCK_USAGE)
    note = body.get("note", "")
    if not isinstance(note, str):
        raise BadRequest(LOCK_USAGE)
    service.locks.lock(name, note)
    return JSON(_announce(service))


async def delete_lock(service, request: Request, name) -> Response:
    released = service.locks.unlock(name, admin=service.role(request) == "admin")
    state = _announce(service)
    service.runner.poke()  # runs others queued while it was locked may start now
    return JSON({**state, "released": released.as_dict() if released else None,
                 "broken": bool(released and released.by != name)})
