"""The HTTP API and the WebSocket of ``hil serve`` (docs/api.md): a Starlette application.

JSON in and out; the session fields are those of ``hil sessions --json`` / ``hil show --json``
(:mod:`daq.export.listing`), a run's outcome is ``hil run --json``'s ``run``. Errors are
``{"error": "one line"}`` with the status of their type (:mod:`daq.serve.problems`). The routes live in
small modules beside this one (``routes_*``, :mod:`daq.serve.pages`); this one holds what they share and
the table of routes, behind the Host/Origin check (:mod:`daq.serve.same_origin`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from daq.errors import one_line
from daq.serve import pages, routes_live, routes_lock, routes_replays, routes_runs, routes_sessions
from daq.serve.analyses import Analyses
from daq.serve.auth import COOKIE, VIEWER, Tokens, bearer
from daq.serve.configs import ConfigFolder
from daq.serve.exports import ExportPool
from daq.serve.lab_identity import LabKeys
from daq.serve.locks import RigLock
from daq.serve.problems import Forbidden, Unauthorized
from daq.serve.relay import LiveRelay
from daq.serve.replays import Replayer
from daq.serve.replies import error, problem_reply
from daq.serve.run_queue import RunQueue
from daq.serve.runner import Runner
from daq.serve.same_origin import ORIGIN_CHECKED, HostPolicy, SameOrigin
from daq.store.errors import UnknownSession
from daq.store.reader import SessionReader

STATIC = Path(__file__).parent / "static"


class Service:
    """What the routes share: tokens, configs, store, queue, runner, relay, exports and the bind rule."""

    def __init__(self, tokens: Tokens, configs: ConfigFolder, store_path: Path, queue: RunQueue,
                 runner: Runner, relay: LiveRelay, open_reads: bool, replayer: Replayer | None = None,
                 hosts: HostPolicy | None = None, exports: ExportPool | None = None, secure: bool = False,
                 lab_keys: LabKeys | None = None, locks: RigLock | None = None):
        self.tokens, self.configs, self.store_path = tokens, configs, Path(store_path)
        self.analyses = Analyses(self.store_path)
        self.queue, self.runner, self.relay = queue, runner, relay
        self.replayer = replayer or Replayer(self.store_path, relay, runner)
        self.open_reads = open_reads  # bound to loopback: reads need no token
        self.hosts = hosts or HostPolicy("127.0.0.1")
        self.exports = exports or ExportPool(self.store_path)
        self.secure = secure  # served over TLS: the cookie is Secure
        self.lab_keys = lab_keys  # with --lab: people's lab keys are taken as tokens
        self.locks = locks or RigLock(self.store_path.parent)

    def token_of(self, conn: HTTPConnection, write: bool) -> str | None:
        """The caller's token: the bearer header, else the dashboard's cookie - for a change only with an
        Origin that was sent and is ours (a browser always sends one; SameSite=Strict keeps other sites'
        requests without the cookie, the Origin check keeps them out even so)."""
        token = bearer(conn.headers.get("authorization"))
        if token is None and (not write or conn.scope.get("state", {}).get(ORIGIN_CHECKED)):
            token = conn.cookies.get(COOKIE)
        return token

    def person(self, token: str | None) -> tuple[str, str] | None:
        """(name, role) of ``token``: one of the rig's own tokens, else a lab key the lab named (with
        ``--lab``; :meth:`resolve` asked the lab first)."""
        name = self.tokens.name_of(token)
        if name is not None:
            return name, self.tokens.role_of(token) or VIEWER
        found = self.lab_keys.cached(token) if self.lab_keys is not None else None
        return (found.name, found.role) if found is not None else None

    async def resolve(self, conn: HTTPConnection, write: bool) -> None:
        """With ``--lab``: ask the lab (in a thread) about a key that is not one of the rig's tokens and
        whose answer is not held, so that :meth:`who` finds it."""
        token = self.token_of(conn, write)
        if self.lab_keys is None or not token or self.lab_keys.known(token) or self.tokens.name_of(token):
            return
        await asyncio.to_thread(self.lab_keys.lookup, token)

    def who(self, conn: HTTPConnection, write: bool) -> str | None:
        """The token's name; None for an anonymous read where reads are open. Unauthorized (401) without a
        valid token where one is needed, Forbidden (403) for a viewer's token asking for a change."""
        token = self.token_of(conn, write)
        found = self.person(token)
        if found is None and (write or not self.open_reads):
            if self.tokens.problem:  # the file became unusable while serving: nobody until it is fixed
                raise Unauthorized(self.tokens.problem)
            if token is not None and self.lab_keys is not None and self.lab_keys.problem:
                raise Unauthorized(f"not one of the rig's tokens, and {self.lab_keys.problem}")
            raise Unauthorized("missing or wrong token: send 'Authorization: Bearer TOKEN' (the token is "
                               f"in {self.tokens.path})" if token is None or write else "wrong token")
        if found is None:
            return None
        name, role = found
        if write and role == VIEWER:
            raise Forbidden(f"the token {name!r} is a viewer's (read-only): it cannot change anything")
        return name

    def role(self, conn: HTTPConnection) -> str | None:
        """``admin``, ``operator``, ``viewer`` or None: what the caller's token may do (the page enables its
        controls by it)."""
        found = self.person(self.token_of(conn, write=False))
        return found[1] if found is not None else None

    def reader(self) -> SessionReader:
        if not self.store_path.exists():
            raise UnknownSession("the store is empty: no sessions yet")
        return SessionReader(self.store_path, create=False)


Handler = Callable[[Service, Request, "str | None"], Awaitable[Response]]


def guarded(service: Service, handler: Handler, write: bool) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` as an endpoint: the caller checked first, every error answered as one JSON line."""
    async def endpoint(request: Request) -> Response:
        try:
            await service.resolve(request, write)
            return await handler(service, request, service.who(request, write))
        except Exception as exc:  # noqa: BLE001 - every error a JSON reply (problem_reply logs the unknown)
            return problem_reply(exc)
    return endpoint


def build_app(service: Service) -> Starlette:
    """The application: the routes of the modules beside this one behind the Host/Origin check."""
    def route(path: str, handler: Handler, method: str = "GET", write: bool | None = None) -> Route:
        changes = method != "GET" if write is None else write
        return Route(path, guarded(service, handler, changes), methods=[method])

    async def live(ws) -> None:
        await routes_live.live(service, ws)

    async def index(request: Request) -> Response:
        return pages.index(service, request)

    routes = [
        Route("/", index),
        route("/api/login", pages.login, "POST", write=False),
        route("/api/login", pages.logout, "DELETE", write=False),
        route("/api/me", pages.me),
        route("/api/configs", routes_sessions.configs),
        route("/api/sessions", routes_sessions.sessions),
        route("/api/sessions/{sid}", routes_sessions.session),
        route("/api/sessions/{sid}/summary", routes_sessions.summary),
        route("/api/sessions/{sid}/series", routes_sessions.series),
        route("/api/sessions/{sid}/export", routes_sessions.export_session),
        route("/api/sessions/{sid}/analysis", routes_sessions.analysis),
        route("/api/sessions/{sid}/analysis", routes_sessions.analyze, "POST"),
        route("/api/sessions/{sid}/analysis/{file}", routes_sessions.analysis_plot),
        route("/api/runs", routes_runs.runs),
        route("/api/runs", routes_runs.post_run, "POST"),
        route("/api/runs/{rid}", routes_runs.run),
        route("/api/runs/{rid}", routes_runs.delete_run, "DELETE"),
        route("/api/runs/{rid}/{action}", routes_runs.run_action, "POST"),
        route("/api/lock", routes_lock.get_lock),
        route("/api/lock", routes_lock.post_lock, "POST"),
        route("/api/lock", routes_lock.delete_lock, "DELETE"),
        route("/api/replays", routes_replays.replays),
        route("/api/replays", routes_replays.post_replay, "POST"),
        route("/api/replays/{rid}/stop", routes_replays.stop_replay, "POST"),
        route("/api/live", routes_live.live_stats),
        WebSocketRoute("/ws/live", live),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(SameOrigin, policy=service.hosts)],
                     exception_handlers={HTTPException: _http_problem, Exception: _unexpected})


async def _unexpected(request: Request, exc: Exception) -> Response:
    """An error outside the guarded routes (the page, the static files, the middleware) as one JSON line
    with 500; Starlette raises it on afterwards, so uvicorn logs its traceback."""
    return error(500, f"internal error: {one_line(exc)}")


async def _http_problem(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such route, a method the route does not take) as one JSON line too."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    path = request.url.path
    words = {404: f"no such path {path}", 405: f"{path} does not take {request.method}"}
    headers = getattr(exc, "headers", None) or {}
    return error(status, words.get(status, str(getattr(exc, "detail", exc))), **headers)
