"""Host and Origin checks for every request (DNS rebinding, cross-site requests): an ASGI middleware.

* **Host**: a request is answered only when its ``Host`` names this server: a loopback name or address
  (``localhost``, 127.0.0.0/8, ::1), the address the server is bound to, or a name given with
  ``--allow-host``. Otherwise 403 - a page of another site that rebinds its own name to 127.0.0.1 reads
  nothing.
* **Origin**: a WebSocket handshake and every request that may change something (not GET/HEAD/OPTIONS)
  with an ``Origin`` header must come from this server's own origin (scheme, host and port of the request
  itself); a foreign one (or ``null``) gets 403. Browsers always send Origin on those requests, so a page of
  another site is refused; tools without a browser (curl, scripts) send none and authenticate with the
  bearer header. Whether the Origin was present and matched is put in ``scope["state"]``: the dashboard's
  cookie authorises a change only then (:meth:`daq.serve.api.Service.caller`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from daq import json_codec

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ORIGIN_CHECKED = "origin_checked"  # scope["state"] key: True when an Origin was sent and is ours
DEFAULT_PORTS = {"http": 80, "https": 443}


def _split_host(host: str) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` too) as (lower-case name without brackets, port or None)."""
    try:
        parts = urlsplit(f"//{host}")
        return (parts.hostname or "").lower().rstrip("."), parts.port
    except ValueError:
        return "", None


def _is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """The host names this server answers to: loopback, its bind address, and the configured ones."""

    def __init__(self, bind_host: str, allowed: Iterable[str] = ()) -> None:
        names = {_split_host(h)[0] or h.lower() for h in allowed}
        bind = bind_host.strip("[]").lower()
        if bind not in ("0.0.0.0", "::", ""):
            names.add(bind)
        self.names = frozenset(names)

    def allows(self, host_header: str) -> bool:
        name, _ = _split_host(host_header)
        return bool(name) and (_is_loopback(name) or name in self.names)

    @staticmethod
    def same_origin(origin: str, host_header: str, scheme: str) -> bool:
        """True when ``origin`` is ``scheme://host_header`` (default ports filled in)."""
        try:
            o = urlsplit(origin)
            o_port = o.port
        except ValueError:
            return False
        name, port = _split_host(host_header)
        default = DEFAULT_PORTS.get(scheme)
        return (o.scheme == scheme and (o.hostname or "").lower().rstrip(".") == name
                and (o_port or DEFAULT_PORTS.get(o.scheme)) == (port or default))


class SameOrigin:
    """The middleware: refuses a foreign Host (every request) or Origin (WebSocket, changes) with 403."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not self.policy.allows(host):
            await _refuse(scope, send, f"host {host!r} is not one this server answers to (loopback, its "
                                       "address, or hil serve --allow-host NAME)")
            return
        origin = headers.get("origin")
        asgi_scheme: str = scope["scheme"]  # ASGI: a str
        scheme = {"ws": "http", "wss": "https"}.get(asgi_scheme, asgi_scheme)
        matches = origin is not None and self.policy.same_origin(origin, host, scheme)
        changes = scope["type"] == "websocket" or scope["method"] not in SAFE_METHODS
        if changes and origin is not None and not matches:
            await _refuse(scope, send, f"origin {origin!r} is not this server's: refused")
            return
        scope.setdefault("state", {})[ORIGIN_CHECKED] = matches
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, text: str) -> None:
    """403 ``{"error": text}``; a WebSocket handshake gets it as its HTTP answer (the ASGI denial response,
    which uvicorn's WebSocket protocols offer), never a bare close."""
    prefix = "websocket." if scope["type"] == "websocket" else ""
    body = json_codec.dumps_strict({"error": text}).encode()
    await send({"type": f"{prefix}http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": f"{prefix}http.response.body", "body": body})
