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
from daq.lab.scopes import role_of
from daq.lab.search import Filters, session_query
from daq.lab.search_pages import LISTING, query_params

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


class LabPage:
    """The page's routes; each reads Tiled in process with the visitor's key (the cookie)."""

    def __init__(self, tiled_app, hosts: HostCheck, secure: bool = False) -> None:
        import httpx  # lazy: only the lab's server builds the page

        self.hosts, self.secure = hosts, secure
        self.tiled = httpx.AsyncClient(transport=httpx.ASGITransport(app=tiled_app),
                                       base_url="http://lab.internal", timeout=60)

    async def ask(self, path: str, key: str | None, **params):
        headers = {"Authorization": f"Apikey {key}"} if key else {}
        return await self.tiled.get(path, params=params, headers={**headers, "Accept": "application/json"})

    def guarded(self, handler, change: bool = False):
        """``handler(request, key)`` as an endpoint behind the Host (and, for a change, Origin) check."""
        async def endpoint(request):
            host = request.headers.get("host")
            if not self.hosts.host_ok(host):
                return _problem(403, f"Host {host!r} is not this lab's name")
            if change and not self.hosts.origin_ok(request.headers.get("origin"), request.url.scheme, host):
                return _problem(403, "a request from another site")
            try:
                return await handler(request, request.cookies.get(COOKIE))
            except (ValueError, KeyError) as exc:
                return _problem(400, f"bad request: {exc}")
        return endpoint

    async def whoami(self, key: str | None) -> dict | None:
        """{"name", "role"} of ``key`` as the lab knows it; None for no key or one it refuses."""
        if not key:
            return None
        resp = await self.ask("/api/v1/auth/whoami", key)
        if resp.status_code != 200:
            return None
        principal = resp.json()
        for k in principal.get("api_keys", []):
            if k.get("first_eight") == key[:8]:
                return {"name": k.get("note") or principal["uuid"], "role": role_of(k.get("scopes", []))}
        return None

    async def page(self, request, key):
        from starlette.responses import FileResponse  # lazy: starlette only in the lab's server

        return FileResponse(STATIC / "lab.html", headers=NO_STORE)

    async def login(self, request, key):
        try:
            body = json.loads(await request.body())
            given = str(body["key"]).strip()
        except (ValueError, KeyError, TypeError):
            return _problem(400, 'the body must be JSON: {"key": "<your lab key>"}')
        who = await self.whoami(given)
        if who is None:
            return _problem(401, "the lab does not know this key")
        response = _json(who)
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict", secure=self.secure, path="/lab")
        return response

    async def logout(self, request, key):
        response = _json({"name": None, "role": None})
        response.delete_cookie(COOKIE, path="/lab", httponly=True, samesite="strict", secure=self.secure)
        return response

    async def me(self, request, key):
        return _json(await self.whoami(key) or {"name": None, "role": None})

    async def rigs(self, request, key):
        resp = await self.ask(f"/api/v1/search/{RIGS}", key, fields="metadata", **{"page[limit]": 300})
        if resp.status_code == 404:
            return _json([])
        if (bad := _refused(resp)) is not None:
            return bad
        offline_after = float(request.query_params.get("offline_after", OFFLINE_AFTER))
        rows = [shown_state(item["attributes"]["metadata"], offline_after) for item in resp.json()["data"]]
        return _json(sorted((r for r in rows if r.get("name")), key=lambda r: r["name"]))

    async def sessions(self, request, key):
        """The latest sessions (:data:`LATEST`), or the latest matching ``?q=`` (a word of the id, rig,
        kind, status, who or reason)."""
        text = request.query_params.get("q", "").strip().lower()
        params = {**query_params(session_query(Filters())), "fields": "metadata", "select_metadata": LISTING,
                  "omit_links": "true", "sort": "-started", "page[limit]": "300"}
        found: list[dict] = []
        for page_no in range(SCAN_LIMIT if text else 1):
            resp = await self.ask("/api/v1/search/", key, **params, **{"page[offset]": str(300 * page_no)})
            if (bad := _refused(resp)) is not None:
                return bad
            rows = [item["attributes"]["metadata"]["selected"] for item in resp.json()["data"]]
            found += [r for r in rows if not text or _matches(r, text)]
            if len(rows) < 300 or len(found) >= LATEST:
                break
        found.sort(key=lambda r: r.get("started") or 0, reverse=True)
        return _json([_row(r) for r in found[:LATEST]])

    async def session(self, request, key):
        sid = request.path_params["sid"]
        if not SESSION_ID.fullmatch(sid):
            return _problem(404, "not a session id (12 hex digits)")
        resp = await self.ask(f"/api/v1/metadata/{sid}", key)
        if (bad := _refused(resp)) is not None:
            return bad
        return _json(resp.json()["data"]["attributes"]["metadata"])

    async def _stream(self, request, key) -> tuple[str, str, dict | None, object]:
        """(session, stream, the stream's metadata, None) of a recorded stream; else a refusal last."""
        sid, stream = request.path_params["sid"], request.path_params["stream"]
        if not SESSION_ID.fullmatch(sid) or not STREAM_NAME.fullmatch(stream) or stream == layout.EVENTS:
            return sid, stream, None, _problem(404, "no such stream")
        meta = await self.ask(f"/api/v1/metadata/{sid}", key)
        if (bad := _refused(meta)) is not None:
            return sid, stream, None, bad
        info = (meta.json()["data"]["attributes"]["metadata"].get("streams") or {}).get(stream)
        if info is None or info.get("type") != "frame":
            return sid, stream, None, _problem(404, f"session {sid} has no recorded stream {stream}")
        return sid, stream, info, None

    async def _parts(self, sid: str, stream: str, key, cut: dict[str, str | None]) -> tuple[dict, object]:
        """The stream's time and data arrays (each sliced by ``cut``): (parts, None) or ({}, refusal)."""
        parts = {}
        for part in (layout.TIME, "data"):
            params = {"slice": cut[part]} if cut.get(part) else {}
            got = await self.ask(f"/api/v1/array/full/{sid}/{stream}/{part}", key, **params)
            if (bad := _refused(got)) is not None:
                return {}, bad
            parts[part] = got.json()
        return parts, None

    async def series(self, request, key):
        """A stream thinned to at most :data:`POINTS` samples, with its channels and units."""
        sid, stream, info, bad = await self._stream(request, key)
        if info is None:
            return bad
        n = int(info["n_samples"])
        step = max(1, math.ceil(n / POINTS))
        cut = {layout.TIME: f"0:{n}:{step}", "data": f"0:{n}:{step},:"}
        parts, bad = await self._parts(sid, stream, key, cut)
        if bad is not None:
            return bad
        return _json({"stream": stream, "channels": info["channels"], "units": info["units"], "step": step,
                      **parts})

    async def download(self, request, key):
        """A stream's time and data as CSV (read with the visitor's key; no key in the link)."""
        from starlette.responses import Response  # lazy: as above

        sid, stream, info, bad = await self._stream(request, key)
        if info is None:
            return bad
        parts, bad = await self._parts(sid, stream, key, {})
        if bad is not None:
            return bad
        names = [f"{c} [{u}]" for c, u in zip(info["channels"], info["units"], strict=True)]
        lines = [",".join(["t [s]", *names]), *(",".join([repr(t), *(repr(v) for v in row)])
                 for t, row in zip(parts[layout.TIME], parts["data"], strict=True))]
        return Response("\n".join(lines) + "\n", media_type="text/csv", headers={
            **NO_STORE, "Content-Disposition": f'attachment; filename="{sid}-{stream}.csv"'})

    def app(self):
        """The page's Starlette application, to mount at ``/lab``."""
        from starlette.applications import Starlette  # lazy: as above
        from starlette.routing import Mount, Route  # lazy: as above
        from starlette.staticfiles import StaticFiles  # lazy: as above

        g = self.guarded
        return Starlette(routes=[
            Route("/", g(self.page)),
            Route("/sessions/{sid}", g(self.page)),
            Route("/api/login", g(self.login, change=True), methods=["POST"]),
            Route("/api/login", g(self.logout, change=True), methods=["DELETE"]),
            Route("/api/me", g(self.me)),
            Route("/api/rigs", g(self.rigs)),
            Route("/api/sessions", g(self.sessions)),
            Route("/api/sessions/{sid}", g(self.session)),
            Route("/api/sessions/{sid}/streams/{stream}", g(self.series)),
            Route("/api/sessions/{sid}/streams/{stream}/csv", g(self.download)),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ])


def _json(content, status: int = 200):
    from starlette.responses import JSONResponse  # lazy: as above

    return JSONResponse(content, status_code=status, headers=NO_STORE)


def _problem(status: int, text: str):
    return _json({"error": text}, status)


def _refused(resp):
    """One JSON line for Tiled's refusal or failure; None for a good answer."""
    if resp.status_code in (401, 403):
        return _problem(401, "sign in with your lab key")
    if resp.status_code == 404:
        return _problem(404, "not in the lab")
    if resp.status_code >= 400:
        return _problem(502, f"the lab's catalogue answered HTTP {resp.status_code}")
    return None


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
    from starlette.routing import Mount  # lazy: as above

    tiled_app.router.routes.insert(0, Mount("/lab", app=LabPage(tiled_app, hosts, secure).app()))
