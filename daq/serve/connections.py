"""The HTTP connections of ``hil serve`` at their edges: bounded, and every refusal the documented JSON.

uvicorn bounds an idle kept-alive connection but not the time a client takes to send its request line and
headers, and it answers a request it cannot parse in plain text. A client that opens connections and sends
its headers a byte at a time would hold every one of them open until the process runs out of files and
stops answering. The protocols here are uvicorn's own (h11 for HTTP, websockets' sans-I/O for WebSocket)
with these edges added (docs/api.md, "Errors and limits"):

* the request line and headers must be complete within ``header_timeout`` seconds of the connection (or
  of the first byte of the next request on a kept-alive one): else ``408`` and the connection is closed;
* they may take at most :data:`HEADER_BYTES` bytes: else ``431``;
* at most ``max_connections`` connections (HTTP and WebSocket) are open at once: one more is answered
  ``503`` at once and closed, so connections can never take the files a run needs;
* a request uvicorn cannot parse (a bad ``Content-Length``, request line, ``Host``, ...) and a WebSocket
  handshake it refuses are answered ``{"error": "one line"}`` like the application's own errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import os
import re
import resource
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.http11 import Response
from websockets.server import ServerProtocol

from daq import json_codec
from daq.errors import ConfigError

log = logging.getLogger(__name__)

HEADER_BYTES = 16 * 1024      # bytes of a request line and headers, at most (h11's own default)
MOST_CONNECTIONS = 100        # open connections at most, whatever the open-file limit allows
FILES_FOR_CONNECTIONS = 0.25  # share of the process's open-file limit that connections may take
MESSAGE_CHARS = 200           # of a refusal that quotes the request (h11 names the offending line)
LINGER_S = 2.0                # s a refused connection is read and dropped before it is closed
LINGER_BYTES = 256 * 1024     # bytes read and dropped at most; a client sending more is cut off


def default_max_connections() -> int:
    """:data:`MOST_CONNECTIONS`, or a quarter of the process's open-file limit when that is lower: the
    rest stays for the store, the bus, the devices and the exports of a run."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MOST_CONNECTIONS
    return max(1, min(MOST_CONNECTIONS, int(soft * FILES_FOR_CONNECTIONS)))


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how many: the settings ``hil serve --header-timeout --keep-alive --max-connections``."""

    header_timeout: float = 10.0  # s from the connection (or the next request's first byte) to its headers
    keep_alive: int = 5           # s an idle kept-alive connection stays open (uvicorn's timeout_keep_alive)
    max_connections: int = 0      # open at once; 0: default_max_connections()

    def __post_init__(self) -> None:
        if not self.header_timeout > 0:
            raise ConfigError(f"--header-timeout {self.header_timeout}: must be more than 0 s")
        if self.keep_alive < 1:
            raise ConfigError(f"--keep-alive {self.keep_alive}: must be 1 s at least")
        if self.max_connections < 0:
            raise ConfigError(f"--max-connections {self.max_connections}: 1 at least (0: the default)")
        if self.max_connections == 0:
            object.__setattr__(self, "max_connections", default_max_connections())


def error_bytes(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A whole HTTP/1.1 response ``{"error": text}`` that closes the connection, for the answers given
    before (or instead of) the application."""
    body = json_codec.dumps_strict({"error": text}).encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_HEAD_END = re.compile(rb"\r?\n\r?\n")


class _HeadCounter:
    """Counts the bytes of a request head as they arrive, without copying what came before: h11 bounds
    only a head that is still incomplete, not one that arrives whole in one read."""

    def __init__(self) -> None:
        self.seen = 0     # bytes of this head so far
        self.tail = b""   # its last 3 bytes (an end of head may straddle two reads)

    def size_with(self, data: bytes) -> int:
        """The head's size once ``data`` is added (up to its end when ``data`` completes it)."""
        window = self.tail + data
        end = _HEAD_END.search(window)
        size = self.seen - len(self.tail) + (end.start() if end else len(window))
        self.seen += len(data)
        self.tail = window[-3:]
        return size

    def reset(self) -> None:
        self.seen, self.tail = 0, b""


def _discard_received(transport: asyncio.Transport) -> None:
    """Read and drop what the client has sent and nobody read (without waiting for more): a socket closed
    with unread input is reset, and the client would lose the answer written just before."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None:  # TLS closes with its own goodbye
        return
    with contextlib.suppress(OSError):  # BlockingIOError: nothing (more) there
        for _ in range(4):  # what a request head can be, and no more: a flood is reset
            if not os.read(sock.fileno(), HEADER_BYTES):
                break


class _RememberingConnection(h11.Connection):
    """h11's server connection that keeps the protocol error it raised, to say it in the answer."""

    problem: h11.RemoteProtocolError | None = None

    def next_event(self):  # h11's own signature
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.problem = exc
            raise


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, a cap on open connections and JSON refusals;
    :func:`protocols` makes the class for one server's :class:`ConnectionLimits`."""

    limits = ConnectionLimits(max_connections=MOST_CONNECTIONS)
    refusing = False  # the last connection was refused for the cap (the warning is logged once)

    def __init__(self, *args, **kwargs) -> None:  # uvicorn's signature
        super().__init__(*args, **kwargs)
        self.parser = _RememberingConnection(h11.SERVER, HEADER_BYTES)
        self.conn = self.parser
        self._header_deadline: asyncio.TimerHandle | None = None
        self._head = _HeadCounter()
        self._linger: asyncio.TimerHandle | None = None  # set once a refusal is written: input is dropped
        self._dropped = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            if not type(self).refusing:  # once per run of refusals, not once per connection
                log.warning("refusing connections: %d open, at most %d (--max-connections)",
                            len(self.connections) - 1, self.limits.max_connections)
            type(self).refusing = True
            self._answer(503, f"the server has {self.limits.max_connections} connections open, its limit "
                              "(--max-connections): try again shortly", (("retry-after", "1"),), linger=False)
            return
        type(self).refusing = False
        self._start_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def eof_received(self) -> None:
        if self._linger is not None:  # the refused client has read its answer and said goodbye
            self.transport.close()
        super().eof_received()

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:  # the rest of a refused request: dropped (see _answer)
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.transport.abort()
            return
        if self.conn.their_state is h11.IDLE:  # the start of a request: its headers are on the clock
            self._start_header_clock()
            if self._head.size_with(data) > HEADER_BYTES:
                self._answer(431, f"request line and headers over {HEADER_BYTES} bytes")
                return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._stop_header_clock()
            self._head.reset()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if (not self.transport.is_closing() and self.conn.their_state is h11.IDLE
                and self.conn.trailing_data[0]):  # part of a next request came with the last one
            self._start_header_clock()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse, as JSON with its cause and h11's status."""
        problem = self.parser.problem
        status = problem.error_status_hint if problem is not None else 400
        if status == 431:
            text = f"request line and headers over {HEADER_BYTES} bytes"
        else:
            text = f"invalid HTTP request: {problem or msg}"[:MESSAGE_CHARS]
        self._answer(status, text)

    def _answer(self, status: int, text: str, headers: tuple[tuple[str, str], ...] = (),
                linger: bool = True) -> None:
        """Write the refusal and close with a linger, as web servers do: a socket closed while the client
        is still sending (the rest of an oversized head) is reset by the kernel, and the client loses the
        answer it has not read yet. So the write side is closed first (the client reads the answer, then
        the end), and what still comes in is dropped for up to :data:`LINGER_S` s or
        :data:`LINGER_BYTES` bytes, until the client closes its side. Not for a connection over the cap
        (``linger=False``): the cap keeps files free for the run, and a flood of lingering refusals would
        hold them; it is closed at once."""
        self._stop_header_clock()
        if self.transport.is_closing() or self._linger is not None:
            return
        self.transport.write(error_bytes(status, text, headers))
        if not linger or not self.transport.can_write_eof():  # TLS: no half-close; its own goodbye
            _discard_received(self.transport)
            self.transport.close()
            return
        self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        self.transport.write_eof()
        self.flow.resume_reading()  # uvicorn may have paused reading (flow control): drain regardless

    def _start_header_clock(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.limits.header_timeout, self._headers_too_late)

    def _stop_header_clock(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_late(self) -> None:
        self._header_deadline = None
        if self.conn.their_state is h11.IDLE:
            self._answer(408, "request line and headers not complete within "
                              f"{self.limits.header_timeout:g} s (--header-timeout): connection closed")


class _JsonRefusals(ServerProtocol):
    """websockets' server side whose handshake refusals (a bad handshake, uvicorn's own 403 and 500) are
    ``{"error": ...}`` instead of plain text."""

    def reject(self, status: int, text: str) -> Response:
        code = http.HTTPStatus(status)
        refused = f"WebSocket handshake refused ({code.value} {code.phrase})"
        words = " ".join(text.split())[:MESSAGE_CHARS] or refused
        body = json_codec.dumps_strict({"error": words}).encode()
        plain = super().reject(status, text)
        headers = Headers([(k, v) for k, v in plain.headers.raw_items()
                           if k.lower() not in ("content-type", "content-length")])
        headers["Content-Type"] = "application/json"
        headers["Content-Length"] = str(len(body))
        return Response(code.value, code.phrase, headers, body)


class JsonWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol refusing handshakes in JSON."""

    def __init__(self, *args, **kwargs) -> None:  # uvicorn's signature
        super().__init__(*args, **kwargs)
        self.conn = _JsonRefusals(extensions=self.conn.available_extensions, max_size=self.config.ws_max_size,
                                  logger=self.conn.logger)

    async def send(self, message) -> None:  # uvicorn's signature
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # the application's refusal (its JSON 401/403) is complete: the handshake is over, not missing
            self.handshake_complete = True


def protocols(limits: ConnectionLimits) -> type[BoundedH11Protocol]:
    """The HTTP protocol class for a server with these limits (uvicorn makes one instance per
    connection from a class)."""
    return type("ServeH11Protocol", (BoundedH11Protocol,), {"limits": limits})
