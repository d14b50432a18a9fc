"""JSON in and out for the routes: the one JSON response class, error replies, and request bodies read
with a size limit and a nesting limit (docs/api.md, "Limits")."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from daq import json_codec
from daq.serve.configs import one_line
from daq.serve.problems import BadRequest, RequestError, TooLarge, status_of

log = logging.getLogger(__name__)

BODY_LIMIT = 64 * 1024  # bytes of a request body, at most (the API takes small JSON objects only)
MAX_DEPTH = 16          # nesting of a JSON body, at most (the API's bodies are flat objects)


class JSON(JSONResponse):
    """Responses through the project's one JSON codec (non-finite numbers as null)."""

    def render(self, content) -> bytes:
        return json_codec.dumps_strict(content, default=str).encode("utf-8")


def error(status: int, text: str, **headers: str) -> JSON:
    return JSON({"error": text}, status_code=status, headers=headers or None)


def problem_reply(exc: BaseException) -> JSON:
    """Any error a route let through as ``{"error": "one line"}`` with its status; an unexpected one is
    logged with its traceback and answered 500 in one line (never a plain-text traceback)."""
    status = status_of(exc)
    if status == 500:
        log.error("unexpected error answering a request", exc_info=exc)
        return error(500, f"internal error: {one_line(exc)}")
    text = "JSON nested too deeply" if isinstance(exc, RecursionError) else one_line(exc)
    return error(status, text, **(exc.headers if isinstance(exc, RequestError) else {}))


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (iterative: no recursion on hostile input)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo.extend((x, level + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


async def read_json(request: Request, usage: str) -> dict:
    """The request's body as a JSON object. TooLarge (413) beyond :data:`BODY_LIMIT` bytes, counted while
    reading (a declared Content-Length over it is refused before reading); BadRequest (400, ``usage``) for
    anything but a JSON object nested at most :data:`MAX_DEPTH` deep."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > BODY_LIMIT:
        raise TooLarge(f"request body of {declared} bytes: at most {BODY_LIMIT} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_LIMIT:
            raise TooLarge(f"request body over {BODY_LIMIT} bytes")
        chunks.append(chunk)
    try:
        body = json_codec.loads(b"".join(chunks))
    except RecursionError:
        raise BadRequest(f"JSON nested too deeply (at most {MAX_DEPTH} levels): {usage}") from None
    except ValueError:
        raise BadRequest(usage) from None
    if _depth(body) > MAX_DEPTH:
        raise BadRequest(f"JSON nested too deeply (at most {MAX_DEPTH} levels): {usage}")
    if not isinstance(body, dict):
        raise BadRequest(usage)
    return body
