"""Routes of replays: a stored session played on the live view."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from daq.serve.problems import BadRequest, Conflict, NotFound
from daq.serve.replays import check_speed
from daq.serve.replies import JSON, read_json

REPLAY_USAGE = 'the body must be JSON: {"session": "<id>", "speed": 1.0, "loop": false}'


async def replays(service, request: Request, name) -> Response:
    return JSON(service.replayer.snapshot())


async def post_replay(service, request: Request, name) -> Response:
    body = await read_json(request, REPLAY_USAGE)
    if not isinstance(body.get("session"), str) or not body["session"]:
        raise BadRequest(REPLAY_USAGE)
    try:
        speed = check_speed(body.get("speed", 1.0))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    loop = body.get("loop", False)
    if not isinstance(loop, bool):
        raise BadRequest("loop must be true or false")
    entry = await service.replayer.start(body["session"], speed, loop, name or "anonymous")
    return JSON(entry.to_dict(), status_code=202)


async def stop_replay(service, request: Request, name) -> Response:
    replay_id = request.path_params["rid"]
    entry = service.replayer.find(replay_id)
    if entry is None:
        raise NotFound(f"no replay {replay_id}: this server knows the playing replay and the last one "
                       "(replays end when hil serve stops and are not kept across a restart)")
    if service.replayer.current is not entry:
        raise Conflict(f"replay {entry.id} has {entry.status}")
    await service.replayer.stop()
    return JSON(entry.to_dict())
