"""The page and how a browser signs in without a token in any URL it keeps.

The link ``hil serve`` prints once (``/?token=TOKEN``) is exchanged on that first visit: the server checks
the token, answers with the token in a cookie (HttpOnly: no script reads it; SameSite=Strict: no other
site's request carries it; Secure over TLS) and redirects to the clean ``/`` - so neither the address bar,
the history after the redirect, a download link, a plot's address nor the WebSocket's URL carries the
token, and a copied link hands over nothing. A page without the cookie asks for the token in a form
(``POST /api/login``); ``DELETE /api/login`` signs out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from daq.serve.auth import COOKIE
from daq.serve.problems import BadRequest, Unauthorized
from daq.serve.replies import JSON, read_json

STATIC = Path(__file__).parent / "static"
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
LOGIN_USAGE = 'the body must be JSON: {"token": "<token>"}'


def _with_cookie(service, response: Response, token: str) -> Response:
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=service.secure, path="/")
    return response


def index(service, request: Request) -> Response:
    """The page; ``/?token=TOKEN`` (the printed link): the cookie, then a redirect to the clean URL."""
    token = request.query_params.get("token")
    if token is None:
        return FileResponse(STATIC / "index.html", headers=NO_STORE)
    if service.tokens.name_of(token) is None:
        return RedirectResponse("/?login=failed", status_code=303, headers=NO_STORE)
    return _with_cookie(service, RedirectResponse("/", status_code=303, headers=NO_STORE), token)


async def login(service, request: Request, name) -> Response:
    body = await read_json(request, LOGIN_USAGE)
    token = body.get("token")
    if not isinstance(token, str):
        raise BadRequest(LOGIN_USAGE)
    token = token.strip()
    found = service.person(token)
    if found is None and service.lab_keys is not None and service.tokens.name_of(token) is None:
        await asyncio.to_thread(service.lab_keys.lookup, token)  # a person's lab key (hil serve --lab)
        found = service.person(token)
    if found is None:
        raise Unauthorized("wrong token")
    return _with_cookie(service, JSON(_page_role(*found), headers=NO_STORE), token)


def _page_role(name: str | None, role: str | None) -> dict:
    """What the page is told: ``role`` viewer or operator (its controls follow), and ``admin: true`` for a
    caller who may also break another's lock."""
    told: dict = {"name": name, "role": "operator" if role == "admin" else role}
    return {**told, "admin": True} if role == "admin" else told


async def logout(service, request: Request, name) -> Response:
    response = JSON({"name": None, "role": None}, headers=NO_STORE)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=service.secure)
    return response


async def me(service, request: Request, name) -> Response:
    """Who the page is signed in as and what it may do (its controls follow)."""
    return JSON(_page_role(name, service.role(request)))
