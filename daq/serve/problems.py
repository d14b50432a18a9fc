"""The HTTP service's errors: each one :class:`~daq.errors.HilError` with the status it answers with.

Routes raise these (or the domain's own errors, mapped in :func:`status_of`); one place turns any of them
into ``{"error": "one line"}`` (:func:`daq.serve.replies.problem_reply`)."""

from __future__ import annotations

from daq.errors import HilError
from daq.serve.replays import ReplayConflict
from daq.serve.runner import NotRunning
from daq.store.errors import UnknownSession


class RequestError(HilError):
    """A request the server will not answer as asked; ``status`` is its HTTP status."""

    status = 400
    headers: dict[str, str] = {}


class BadRequest(RequestError):
    """Malformed input: a body that is not the JSON asked for, a bad parameter (400)."""


class Unauthorized(RequestError):
    """No token, or a wrong one (401)."""

    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(RequestError):
    """A known caller that may not do this: a viewer's token, a foreign Origin or Host (403)."""

    status = 403


class NotFound(RequestError):
    """No such run, replay, config, session, plot or action (404)."""

    status = 404


class Conflict(RequestError):
    """The thing exists but is not in a state for that (409)."""

    status = 409


class TooLarge(RequestError):
    """A request body over the limit (413)."""

    status = 413


class Busy(RequestError):
    """Every slot of a bounded pool is taken: try again later (503 with Retry-After)."""

    status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


def status_of(exc: BaseException) -> int:
    """The HTTP status of an error a route let through."""
    if isinstance(exc, RequestError):
        return exc.status
    if isinstance(exc, UnknownSession):
        return 404
    if isinstance(exc, NotRunning | ReplayConflict):
        return 409
    if isinstance(exc, HilError | RecursionError):  # RecursionError: input nested deeper than Python goes
        return 400
    return 500
