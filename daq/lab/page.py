"""The lab's own page, served by ``hil lab serve`` under ``/lab/``: every rig with its state and a link to its
``hil serve`` page, the latest sessions of all rigs with a search, and each session's page (metadata,
analysis, streams plotted with their units, a CSV download of each stream).

Everything it shows is read from the lab's Tiled server *in process* (an ASGI transport: no socket) with the
visitor's own key, so Tiled's own permissions decide what each person sees. The key never travels in a URL:
a visitor signs in with a form (``POST /lab/api/login``), the server asks Tiled whose key it is and answers
with the key in a cookie (HttpOnly, SameSite=Strict, Secure over TLS, path ``/lab``). As on ``hil serve``'s
page, a request whose ``Host`` is not this server's is refused (DNS rebinding), and so is a change whose
``Origin`` is another site's.
"""

from __future__ import annotations

import ipaddress
import json
import math
from pathlib import Path
from urllib.parse import urlsplit

from daq.lab import layout
from daq.lab.names import SESSION_ID, STREAM_NAME
from daq.lab.rigs import OFFLINE_AFTER, RIGS, shown_state
from daq.lab.search_pages import LISTING

STATIC = Path(__file__).parent / "static"
COOKIE = "hil_lab_key"
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
POINTS = 2000  # samples a plotted stream is thinned to, at most
LATEST = 50  # sessions the page lists
SCAN_LIMIT = 20  # pages of 300 sessions a search reads, at most
SEARCHED = ("id", "kind", "status", "by", "reason")


def _is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheck:
    """The names a browser may reach the lab by: loopback, the bound address, ``allowed``."""

    def __init__(self, bound: str, allowed: tuple[str, ...] = ()) -> None:
        self.names = {bound.strip("[]").lower(), *(a.lower() for a in allowed)}

    def host_ok(self, host: str | None) -> bool:
        name = (urlsplit(f"//{host or ''}").hostname or "").lower()
        return bool(name) and (_is_loopback(name) or name in self.names)

    def origin_ok(self, origin: str | None, scheme: str, host: str | None) -> bool:
        """No Origin (a script) or this server's own."""
        return origin is None or origin == f"{scheme}://{host}"


def build_page(tiled_app, hosts: HostCheck, secure: bool = False):
    """The page's Starlette application, to mount at ``/lab`` of the lab's Tiled application."""
    import httpx  # lazy: only the lab's server builds the page
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    tiled = httpx.AsyncClient(transport=httpx.ASGITransport(app=tiled_app), base_url="http://lab.internal",
                              timeout=60)

    def problem(status: int, text: str) -> JSONResponse:
        return JSONResponse({"error": text}, status_code=status, headers=NO_STORE)

    async def ask(path: str, key: str | None, **params) -> httpx.Response:
        headers = {"Authorization": f"Apikey {key}"} if key else {}
        return await tiled.get(path, params=params, headers={**headers, "Accept": "application/json"})

    def guarded(handler, change: bool = False):
        async def endpoint(request: Request) -> Response:
            host = request.headers.get("host")
            if not hosts.host_ok(host):
                return problem(403, f"Host {host!r} is not this lab's name")
            if change and not hosts.origin_ok(request.headers.get("origin"), request.url.scheme, host):
                return problem(403, "a request from another site")
            try:
                return await handler(request, request.cookies.get(COOKIE))
            except (ValueError, KeyError) as exc:
                return problem(400, f"bad request: {exc}")
        return endpoint

    async def whoami(key: str | None) -> dict | None:
        if not key:
            return None
        resp = await ask("/api/v1/auth/whoami", key)
        if resp.status_code != 200:
            return None
        principal = resp.json()
        for k in principal.get("api_keys", []):
            if k.get("first_eight") == key[:8]:
                from daq.lab.scopes import role_of  # the roles' scopes, as the CLI reads them

                return {"name": k.get("note") or principal["uuid"], "role": role_of(k.get("scopes", []))}
        return None

    async def page(request: Request, key) -> Response:
        return FileResponse(STATIC / "lab.html", headers=NO_STORE)

    async def login(request: Request, key) -> Response:
        try:
            body = json.loads(await request.body())
            given = str(body["key"]).strip()
        except (ValueError, KeyError, TypeError):
            return problem(400, 'the body must be JSON: {"key": "<your lab key>"}')
        who = await whoami(given)
        if who is None:
            return problem(401, "the lab does not know this key")
        response = JSONResponse(who, headers=NO_STORE)
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict", secure=secure, path="/lab")
        return response

    async def logout(request: Request, key) -> Response:
        response = JSONResponse({"name": None, "role": None}, headers=NO_STORE)
        response.delete_cookie(COOKIE, path="/lab", httponly=True, samesite="strict", secure=secure)
        return response

    async def me(request: Request, key) -> Response:
        return JSONResponse(await whoami(key) or {"name": None, "role": None}, headers=NO_STORE)

    def refused(resp: httpx.Response) -> Response | None:
        if resp.status_code in (401, 403):
            return problem(401, "sign in with your lab key")
        if resp.status_code == 404:
            return problem(404, "not in the lab")
        if resp.status_code >= 400:
            return problem(502, f"the lab's catalogue answered HTTP {resp.status_code}")
        return None

    async def rigs(request: Request, key) -> Response:
        resp = await ask(f"/api/v1/search/{RIGS}", key, fields="metadata", **{"page[limit]": 300})
        if resp.status_code == 404:
            return JSONResponse([], headers=NO_STORE)
        if (bad := refused(resp)) is not None:
            return bad
        offline_after = float(request.query_params.get("offline_after", OFFLINE_AFTER))
        rows = [shown_state(item["attributes"]["metadata"], offline_after) for item in resp.json()["data"]]
        return JSONResponse(sorted((r for r in rows if r.get("name")), key=lambda r: r["name"]),
                            headers=NO_STORE)

    async def sessions(request: Request, key) -> Response:
        from daq.lab.search import Filters, session_query
        from daq.lab.search_pages import query_params  # tiled's query registry: the server has it

        text = request.query_params.get("q", "").strip().lower()
        params = {**query_params(session_query(Filters())), "fields": "metadata", "select_metadata": LISTING,
                  "omit_links": "true", "sort": "-started", "page[limit]": "300"}
        found: list[dict] = []
        for page_no in range(SCAN_LIMIT if text else 1):
            resp = await ask("/api/v1/search/", key, **params, **{"page[offset]": str(300 * page_no)})
            if (bad := refused(resp)) is not None:
                return bad
            rows = [item["attributes"]["metadata"]["selected"] for item in resp.json()["data"]]
            found += [r for r in rows if not text or _matches(r, text)]
            if len(rows) < 300 or len(found) >= LATEST:
                break
        found.sort(key=lambda r: r.get("started") or 0, reverse=True)
        return JSONResponse([_row(r) for r in found[:LATEST]], headers=NO_STORE)

    async def session(request: Request, key) -> Response:
        sid = request.path_params["sid"]
        if not SESSION_ID.fullmatch(sid):
            return problem(404, "not a session id (12 hex digits)")
        resp = await ask(f"/api/v1/metadata/{sid}", key)
        if (bad := refused(resp)) is not None:
            return bad
        meta = resp.json()["data"]["attributes"]["metadata"]
        return JSONResponse(meta, headers=NO_STORE)

    async def series(request: Request, key) -> Response:
        sid, stream = request.path_params["sid"], request.path_params["stream"]
        if not SESSION_ID.fullmatch(sid) or not STREAM_NAME.fullmatch(stream) or stream == layout.EVENTS:
            return problem(404, "no such stream")
        resp = await ask(f"/api/v1/metadata/{sid}", key)
        if (bad := refused(resp)) is not None:
            return bad
        info = (resp.json()["data"]["attributes"]["metadata"].get("streams") or {}).get(stream)
        if info is None or info.get("type") != "frame":
            return problem(404, f"session {sid} has no recorded stream {stream}")
        n = int(info["n_samples"])
        step = max(1, math.ceil(n / POINTS))
        out = {"stream": stream, "channels": info["channels"], "units": info["units"], "step": step}
        for part, cut in ((layout.TIME, f"0:{n}:{step}"), ("data", f"0:{n}:{step},:")):
            got = await ask(f"/api/v1/array/full/{sid}/{stream}/{part}", key, slice=cut)
            if (bad := refused(got)) is not None:
                return bad
            out[part] = got.json()
        return JSONResponse(out, headers=NO_STORE)

    async def download(request: Request, key) -> Response:
        """A stream's time and data as CSV (read with the visitor's key; no key in the link)."""
        sid, stream = request.path_params["sid"], request.path_params["stream"]
        if not SESSION_ID.fullmatch(sid) or not STREAM_NAME.fullmatch(stream) or stream == layout.EVENTS:
            return problem(404, "no such stream")
        meta = await ask(f"/api/v1/metadata/{sid}", key)
        if (bad := refused(meta)) is not None:
            return bad
        info = (meta.json()["data"]["attributes"]["metadata"].get("streams") or {}).get(stream)
        if info is None or info.get("type") != "frame":
            return problem(404, f"session {sid} has no recorded stream {stream}")
        parts = {}
        for part in (layout.TIME, "data"):
            got = await ask(f"/api/v1/array/full/{sid}/{stream}/{part}", key)
            if (bad := refused(got)) is not None:
                return bad
            parts[part] = got.json()
        names = [f"{c} [{u}]" for c, u in zip(info["channels"], info["units"], strict=True)]
        head = ",".join(["t [s]", *names])
        lines = [head, *(",".join([repr(t), *(repr(v) for v in row)])
                         for t, row in zip(parts[layout.TIME], parts["data"], strict=True))]
        return Response("\n".join(lines) + "\n", media_type="text/csv", headers={
            **NO_STORE, "Content-Disposition": f'attachment; filename="{sid}-{stream}.csv"'})

    routes = [
        Route("/", guarded(page)),
        Route("/sessions/{sid}", guarded(page)),
        Route("/api/login", guarded(login, change=True), methods=["POST"]),
        Route("/api/login", guarded(logout, change=True), methods=["DELETE"]),
        Route("/api/me", guarded(me)),
        Route("/api/rigs", guarded(rigs)),
        Route("/api/sessions", guarded(sessions)),
        Route("/api/sessions/{sid}", guarded(session)),
        Route("/api/sessions/{sid}/streams/{stream}", guarded(series)),
        Route("/api/sessions/{sid}/streams/{stream}/csv", guarded(download)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def _matches(row: dict, text: str) -> bool:
    rig = row.get("rig") or {}
    words = [str(row.get(k) or "") for k in SEARCHED] + [str(rig.get(k) or "") for k in ("name", "kind")]
    return any(text in w.lower() for w in words)


def _row(r: dict) -> dict:
    rig = r.get("rig") or {}
    analysis = r.get("analysis") or {}
    return {"id": r.get("id"), "rig": rig.get("name"), "kind": r.get("kind"), "status": r.get("status"),
            "by": r.get("by"), "started": r.get("started"), "ended": r.get("ended"),
            "verdict": analysis.get("verdict")}


def mount_page(tiled_app, hosts: HostCheck, secure: bool = False) -> None:
    """Put the page at ``/lab`` of the Tiled application, ahead of Tiled's own routes."""
    from starlette.routing import Mount

    tiled_app.router.routes.insert(0, Mount("/lab", app=build_page(tiled_app, hosts, secure)))
