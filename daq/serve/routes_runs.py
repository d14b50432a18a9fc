"""Routes of the run queue: list, one run, queue, delete, and the commands to the running run."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from daq.config.load import ConfigError
from daq.errors import one_line
from daq.rigs.config import refuse_sim_speed
from daq.serve.problems import BadRequest, Conflict, NotFound
from daq.serve.replies import JSON, read_json
from daq.serve.runner import ACTIONS

RUN_USAGE = 'the body must be JSON: {"config": "<file name>", "sim_speed": <optional number>}'


def _with_kind(service, entry: dict) -> dict:
    """A queue entry with its rig kind also before it started (from its config's check)."""
    if entry.get("kind") is None:
        checked = service.configs.check(entry["config"])
        entry["kind"] = checked.kind if checked is not None and checked.ok else None
    return entry


def _snapshot(service) -> dict:
    snap = service.queue.snapshot()
    snap["queued"] = [_with_kind(service, e) for e in snap["queued"]]
    if snap["current"] is not None:
        snap["current"]["live"] = service.relay.last_status
    return snap


async def runs(service, request: Request, name) -> Response:
    return JSON(await asyncio.to_thread(_snapshot, service))


def _one(service, run_id: str) -> dict:
    found = service.queue.find(run_id)
    if found is None:
        raise NotFound(f"no run {run_id} (GET /api/runs lists the queue and the last 20 runs)")
    where, entry = found
    out = _with_kind(service, entry.to_dict())
    if where == "current":
        out["live"] = service.relay.last_status
    return out


async def run(service, request: Request, name) -> Response:
    return JSON(await asyncio.to_thread(_one, service, request.path_params["rid"]))


async def post_run(service, request: Request, name) -> Response:
    body = await read_json(request, RUN_USAGE)
    config = body.get("config")
    if not isinstance(config, str) or not config:
        raise BadRequest(RUN_USAGE)
    service.locks.check_queue(name)  # locked by someone else: 423 naming who, since when and why
    checked = await asyncio.to_thread(service.configs.check, config)
    if checked is None:
        raise NotFound(f"no config {config!r} in {service.configs.folder} (GET /api/configs lists them)")
    if not checked.ok:
        return JSON(checked.refusal(), status_code=422)
    sim_speed = body.get("sim_speed")
    if sim_speed is not None:  # a simulated rig only, in range: refused here, before it is queued
        if isinstance(sim_speed, bool) or not isinstance(sim_speed, int | float):
            raise BadRequest(RUN_USAGE)
        try:
            refuse_sim_speed(bool(checked.simulated), float(sim_speed), checked.name)
        except ConfigError as exc:
            return JSON({"error": one_line(exc), "config": config}, status_code=422)
    entry = service.queue.add(config, name or "anonymous", None if sim_speed is None else float(sim_speed))
    service.runner.poke()
    service.relay.broadcast({"type": "queue", **service.queue.snapshot()})
    return JSON({"id": entry.id, "config": config, "by": entry.by, "kind": checked.kind,
                 "position": len(service.queue.queued)}, status_code=202)


async def delete_run(service, request: Request, name) -> Response:
    run_id = request.path_params["rid"]
    removed = service.queue.remove(run_id)
    if removed is None:
        found = service.queue.find(run_id)
        if found is None:
            raise NotFound(f"no run {run_id}")
        raise Conflict(f"run {found[1].id} is {found[1].status}: only a queued run can be deleted "
                       "(stop or abort a running one)")
    service.relay.broadcast({"type": "queue", **service.queue.snapshot()})
    return JSON({"deleted": removed.id})


async def run_action(service, request: Request, name) -> Response:
    action = request.path_params["action"]
    if action not in ACTIONS:
        raise NotFound(f"no action {action!r} (use {', '.join(ACTIONS)})")
    run_id = request.path_params["rid"]
    if service.queue.find(run_id) is None:
        raise NotFound(f"no run {run_id}")
    return JSON(await service.runner.control(run_id, action, by=name))
