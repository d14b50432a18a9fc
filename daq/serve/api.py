"""The HTTP API and the WebSocket of ``hil serve`` (docs/api.md): a Starlette application.

JSON in and out; the session fields are those of ``hil sessions --json`` / ``hil show --json``
(:mod:`daq.export.listing`), a run's outcome is ``hil run --json``'s ``run``. Errors are
``{"error": "one line"}`` with 400 (bad request), 401 (no or wrong token), 404, 409 (not in that state)
or 422 (a config that ``hil check`` refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from daq import json_codec
from daq.errors import HilError
from daq.export.listing import session_detail, session_rows
from daq.export.session_export import export
from daq.serve.analyses import Analyses
from daq.serve.auth import Tokens, bearer
from daq.serve.configs import ConfigFolder, one_line
from daq.serve.relay import LiveRelay
from daq.serve.replays import ReplayConflict, Replayer, check_speed
from daq.serve.run_queue import RunQueue
from daq.serve.runner import ACTIONS, NotRunning, Runner
from daq.store.errors import UnknownSession
from daq.store.reader import SessionReader

STATIC = Path(__file__).parent / "static"
EXPORT_CHUNK = 1 << 20
STATS_PERIOD = 1.0  # s between a browser's own counters on the WebSocket


class JSON(JSONResponse):
    """Responses through the project's one JSON codec (non-finite numbers as null)."""

    def render(self, content) -> bytes:
        return json_codec.dumps_strict(content, default=str).encode("utf-8")


def error(status: int, text: str, **headers: str) -> JSON:
    return JSON({"error": text}, status_code=status, headers=headers or None)


class Service:
    """What the routes share: tokens, configs, store, queue, runner, relay and the bind rule."""

    def __init__(self, tokens: Tokens, configs: ConfigFolder, store_path: Path, queue: RunQueue,
                 runner: Runner, relay: LiveRelay, open_reads: bool, replayer: Replayer | None = None):
        self.tokens, self.configs, self.store_path = tokens, configs, Path(store_path)
        self.analyses = Analyses(self.store_path)
        self.queue, self.runner, self.relay = queue, runner, relay
        self.replayer = replayer or Replayer(self.store_path, relay, runner)
        self.open_reads = open_reads  # bound to loopback: reads need no token

    def who(self, request: Request | WebSocket, write: bool) -> str | None:
        """The token's name; None for an anonymous read where reads are open. Raises PermissionError."""
        token = bearer(request.headers.get("authorization"))
        if token is None and not write:
            token = request.query_params.get("token")
        name = self.tokens.name_of(token)
        if name is None and (write or not self.open_reads):
            if self.tokens.problem:  # the file became unusable while serving: nobody until it is fixed
                raise PermissionError(self.tokens.problem)
            raise PermissionError("missing or wrong token: send 'Authorization: Bearer TOKEN' (the token is "
                                  f"in {self.tokens.path})" if token is None or write else "wrong token")
        return name

    def reader(self) -> SessionReader | None:
        if not self.store_path.exists():
            return None
        return SessionReader(self.store_path, create=False)


def build_app(service: Service) -> Starlette:
    def guard(write: bool):
        def wrap(fn):
            async def endpoint(request: Request) -> Response:
                try:
                    name = service.who(request, write)
                except PermissionError as exc:
                    return error(401, str(exc), **{"WWW-Authenticate": "Bearer"})
                try:
                    return await fn(request, name)
                except (UnknownSession, KeyError) as exc:
                    return error(404, one_line(exc) if isinstance(exc, UnknownSession) else
                                 f"no {exc.args[1] if len(exc.args) > 1 else 'run'} {exc.args[0]}")
                except (NotRunning, ReplayConflict) as exc:
                    return error(409, str(exc))
                except HilError as exc:
                    return error(400, one_line(exc))
            return endpoint
        return wrap

    @guard(write=False)
    async def configs(request: Request, name) -> Response:
        checked = await asyncio.to_thread(service.configs.check_all)
        return JSON([c.to_dict() for c in checked])

    def _sessions() -> list[dict]:
        reader = service.reader()
        if reader is None:
            return []
        with reader:
            return session_rows(reader)

    @guard(write=False)
    async def sessions(request: Request, name) -> Response:
        return JSON(await asyncio.to_thread(_sessions))

    def _detail(session: str) -> dict:
        reader = service.reader()
        if reader is None:
            raise UnknownSession(f"no session {session!r} (the store is empty)")
        with reader:
            return session_detail(reader, session)

    @guard(write=False)
    async def session(request: Request, name) -> Response:
        return JSON(await asyncio.to_thread(_detail, request.path_params["sid"]))

    @guard(write=False)
    async def export_session(request: Request, name) -> Response:
        fmt = request.query_params.get("format", "")
        if fmt not in ("hdf5", "mat", "csv"):
            return error(400, "format must be hdf5, mat or csv")
        path, filename = await asyncio.to_thread(_export, service, request.path_params["sid"], fmt)
        media = "application/zip" if fmt == "csv" else "application/octet-stream"
        return StreamingResponse(_stream_then_remove(path), media_type=media,
                                 headers={"Content-Disposition": f'attachment; filename="{filename}"',
                                          "Content-Length": str(path.stat().st_size)})

    def _session_id(session: str) -> str:
        reader = service.reader()
        if reader is None:
            raise UnknownSession(f"no session {session!r} (the store is empty)")
        with reader:
            return reader.get_session(session).id

    @guard(write=False)
    async def analysis(request: Request, name) -> Response:
        sid = await asyncio.to_thread(_session_id, request.path_params["sid"])
        return JSON({"session": sid, **service.analyses.state(sid)})

    @guard(write=True)
    async def analyze(request: Request, name) -> Response:
        sid = await asyncio.to_thread(_session_id, request.path_params["sid"])
        if not service.analyses.start(sid):
            return error(409, "an analysis is running; one at a time")
        return JSON({"session": sid, "state": "running"}, status_code=202)

    @guard(write=False)
    async def analysis_plot(request: Request, name) -> Response:
        sid = await asyncio.to_thread(_session_id, request.path_params["sid"])
        path = service.analyses.plot(sid, request.path_params["file"])
        if path is None:
            return error(404, f"no plot {request.path_params['file']!r} of session {sid}")
        return FileResponse(path, media_type="image/png")

    @guard(write=False)
    async def runs(request: Request, name) -> Response:
        snap = service.queue.snapshot()
        if snap["current"] is not None:
            snap["current"]["live"] = service.relay.last_status
        return JSON(snap)

    @guard(write=True)
    async def post_run(request: Request, name) -> Response:
        try:
            body = json_codec.loads(await request.body())
        except ValueError:
            return error(400, 'the body must be JSON: {"config": "<file name>"}')
        config = body.get("config") if isinstance(body, dict) else None
        if not isinstance(config, str) or not config:
            return error(400, 'the body must be JSON: {"config": "<file name>"}')
        checked = await asyncio.to_thread(service.configs.check, config)
        if checked is None:
            return error(404, f"no config {config!r} in {service.configs.folder} "
                              f"(GET /api/configs lists them)")
        if not checked.ok:
            return error(422, checked.error or "config refused")
        entry = service.queue.add(config, name or "anonymous")
        service.runner.poke()
        service.relay.broadcast({"type": "queue", **service.queue.snapshot()})
        return JSON({"id": entry.id, "config": config, "by": entry.by,
                     "position": len(service.queue.queued)}, status_code=202)

    @guard(write=True)
    async def delete_run(request: Request, name) -> Response:
        run_id = request.path_params["rid"]
        removed = service.queue.remove(run_id)
        if removed is None:
            found = service.queue.find(run_id)
            if found is None:
                raise KeyError(run_id)
            return error(409, f"run {found[1].id} is {found[1].status}: only a queued run can be deleted "
                              "(stop or abort a running one)")
        service.relay.broadcast({"type": "queue", **service.queue.snapshot()})
        return JSON({"deleted": removed.id})

    @guard(write=True)
    async def run_action(request: Request, name) -> Response:
        action = request.path_params["action"]
        if action not in ACTIONS:
            return error(404, f"no action {action!r} (use {', '.join(ACTIONS)})")
        reply = await service.runner.control(request.path_params["rid"], action, by=name)
        return JSON(reply)

    @guard(write=False)
    async def replays(request: Request, name) -> Response:
        return JSON(service.replayer.snapshot())

    @guard(write=True)
    async def post_replay(request: Request, name) -> Response:
        usage = 'the body must be JSON: {"session": "<id>", "speed": 1.0, "loop": false}'
        try:
            body = json_codec.loads(await request.body())
        except ValueError:
            return error(400, usage)
        if not isinstance(body, dict) or not isinstance(body.get("session"), str) or not body["session"]:
            return error(400, usage)
        try:
            speed = check_speed(body.get("speed", 1.0))
        except ValueError as exc:
            return error(400, str(exc))
        loop = body.get("loop", False)
        if not isinstance(loop, bool):
            return error(400, "loop must be true or false")
        entry = await service.replayer.start(body["session"], speed, loop, name or "anonymous")
        return JSON(entry.to_dict(), status_code=202)

    @guard(write=True)
    async def stop_replay(request: Request, name) -> Response:
        entry = service.replayer.find(request.path_params["rid"])
        if entry is None:
            raise KeyError(request.path_params["rid"], "replay")
        if service.replayer.current is not entry:
            raise ReplayConflict(f"replay {entry.id} has {entry.status}")
        await service.replayer.stop()
        return JSON(entry.to_dict())

    @guard(write=False)
    async def live_stats(request: Request, name) -> Response:
        return JSON(service.relay.stats())

    async def live(ws: WebSocket) -> None:
        try:
            service.who(ws, write=False)
        except PermissionError:
            await ws.close(code=4401)
            return
        await ws.accept()
        client = service.relay.connect()

        async def send() -> None:
            next_stats = asyncio.get_running_loop().time() + STATS_PERIOD
            while True:
                try:
                    async with asyncio.timeout(STATS_PERIOD):
                        text = await client.queue.get()
                except TimeoutError:
                    text = None
                if text is not None:
                    await ws.send_text(text)
                    client.sent += 1
                now = asyncio.get_running_loop().time()
                if now >= next_stats:
                    next_stats = now + STATS_PERIOD
                    service.relay.send_to(client, {"type": "stats", **client.stats()})

        sender = asyncio.get_running_loop().create_task(send())
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

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    routes = [
        Route("/", index),
        Route("/api/configs", configs),
        Route("/api/sessions", sessions),
        Route("/api/sessions/{sid}", session),
        Route("/api/sessions/{sid}/export", export_session),
        Route("/api/sessions/{sid}/analysis", analysis),
        Route("/api/sessions/{sid}/analysis", analyze, methods=["POST"]),
        Route("/api/sessions/{sid}/analysis/{file}", analysis_plot),
        Route("/api/runs", runs),
        Route("/api/runs", post_run, methods=["POST"]),
        Route("/api/runs/{rid}", delete_run, methods=["DELETE"]),
        Route("/api/runs/{rid}/{action}", run_action, methods=["POST"]),
        Route("/api/replays", replays),
        Route("/api/replays", post_replay, methods=["POST"]),
        Route("/api/replays/{rid}/stop", stop_replay, methods=["POST"]),
        Route("/api/live", live_stats),
        WebSocketRoute("/ws/live", live),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def _export(service: Service, session: str, fmt: str) -> tuple[Path, str]:
    """Export as ``hil export SESSION --format FMT`` does (same function, same defaults) into a temporary
    folder; CSV (a folder) is zipped. Returns the file and its download name."""
    reader = service.reader()
    if reader is None:
        raise UnknownSession(f"no session {session!r} (the store is empty)")
    tmp = Path(tempfile.mkdtemp(prefix="hil-serve-export-"))
    try:
        with reader:
            info = reader.get_session(session)
            suffix = {"hdf5": ".h5", "mat": ".mat", "csv": ""}[fmt]
            out = tmp / f"session-{info.id}{suffix}"
            export(reader, info.id, fmt, out)
        if fmt != "csv":
            return out, out.name
        archive = tmp / f"session-{info.id}.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(out.iterdir()):
                z.write(f, f"{out.name}/{f.name}")
        return archive, archive.name
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _stream_then_remove(path: Path) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            while chunk := f.read(EXPORT_CHUNK):
                yield chunk
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
