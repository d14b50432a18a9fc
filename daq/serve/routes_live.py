"""The live view: the WebSocket ``/ws/live`` and the relay's counters."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from daq.serve.problems import RequestError
from daq.serve.replies import JSON, problem_reply

STATS_PERIOD = 1.0  # s between a browser's own counters on the WebSocket


async def live_stats(service, request: Request, name) -> Response:
    return JSON(service.relay.stats())


async def _send(service, ws: WebSocket, client) -> None:
    """The client's queue to the browser, and its counters every :data:`STATS_PERIOD` s."""
    loop = asyncio.get_running_loop()
    next_stats = loop.time() + STATS_PERIOD
    while True:
        try:
            async with asyncio.timeout(STATS_PERIOD):
                text = await client.queue.get()
        except TimeoutError:
            text = None
        if text is not None:
            await ws.send_text(text)
            client.sent += 1
        now = loop.time()
        if now >= next_stats:
            next_stats = now + STATS_PERIOD
            service.relay.send_to(client, {"type": "stats", **client.stats()})


async def live(service, ws: WebSocket) -> None:
    """One browser on the live view (the Host and Origin were checked by the middleware)."""
    try:
        await service.resolve(ws, write=False)
        service.who(ws, write=False)
    except RequestError as exc:  # refused in the handshake: 401 and the JSON line of any other request
        await ws.send_denial_response(problem_reply(exc))
        return
    await ws.accept()
    client = service.relay.connect()
    sender = asyncio.get_running_loop().create_task(_send(service, ws, client))
    try:
        while True:  # the browser sends nothing we need; this notices when it goes away
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
    except WebSocketDisconnect:
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        service.relay.disconnect(client)
