"""Command channel: request/reply over ROUTER (server) and DEALER (client) with timeouts.

Wire format (JSON, never pickle), one ZeroMQ message per request and per reply, preceded by an
empty delimiter part:

* request ``{"id": str, "cmd": str, "args": {...}, "deadline": unix_time}``
* reply   ``{"id": str, "ok": true, "result": {...}}`` or ``{"id": str, "ok": false, "error": str}``

Every request gets exactly one reply: unknown commands, bad JSON, bad arguments and handler
exceptions become ``ok: false`` replies; the server never dies of a bad command. The client
raises :class:`CommandError` for error replies and :class:`CommandTimeout` when no reply came in
time. A request whose deadline has passed before the server sees it is refused, so a setpoint
that timed out on the client is never applied late. The client uses ``ZMQ_IMMEDIATE`` so that a
request is never queued for a server that is not connected.

Arguments are checked before any handler runs: non-finite numbers (NaN, Infinity, 1e999) and
JSON nested deeper than :data:`MAX_ARG_NESTING` are refused. A handler validates its own
arguments (e.g. a setpoint against the plan's limits) by raising :class:`CommandRefused`; the
client then raises :class:`CommandRefused` (a :class:`CommandError`) with the handler's message.

Security (see :mod:`daq.bus.keys`): binding beyond loopback needs CURVE keys, else the server refuses
to start (:class:`daq.bus.keys.InsecureEndpoint`); with keys only clients whose public key is
authorized get anything accepted. Clients pass the same keys folder (``keys=load_keys()``). A handler
that declares the argument :data:`CLIENT_KEY` learns which authorized key sent the request (who gave it).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import cast

import zmq
import zmq.asyncio

from daq import json_codec
from daq.bus.keys import CurveKeys, check_bind, release_server, secure_client, secure_server
from daq.bus.pubsub import bind_endpoint
from daq.errors import ProtocolError

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[dict] | dict]
MAX_REQUEST_BYTES = 1024 * 1024
#: How long a closed server's queued replies may still be delivered, ms (a bound: never a hang).
REPLY_LINGER_MS = 500
#: How long a stopping server keeps its connections after its last reply, s (see CommandServer.stop).
REPLY_GRACE_S = 0.2
#: Deepest nesting of lists/objects accepted in a request.
MAX_ARG_NESTING = 32
#: The argument a handler declares to learn the sender's CURVE public key (Z85; None without CURVE). The
#: server sets it; a request that sets it itself is refused.
CLIENT_KEY = "client_key"


class CommandError(ProtocolError):
    """The server answered with an error (unknown command, bad arguments, handler failure)."""


class CommandRefused(CommandError):
    """A handler (or the server's argument check) refused the command; nothing was executed.

    Handlers raise it with a message saying why (``setpoint 99999 N above the plan's 1000 N``).
    """


class CommandTimeout(ProtocolError, TimeoutError):
    """No reply arrived within the timeout."""


class CommandServer:
    """Serves named commands: ``handlers[name](**args) -> dict`` (sync or async)."""

    def __init__(
        self,
        endpoint: str = "tcp://127.0.0.1:0",
        handlers: dict[str, Handler] | None = None,
        ctx: zmq.asyncio.Context | None = None,
        keys: CurveKeys | None = None,
    ):
        """``keys``: CURVE keys (required to bind beyond loopback; with keys the server must be
        created inside a running event loop, where the authenticator runs)."""
        check_bind(endpoint, keys, "command server")
        self.handlers: dict[str, Handler] = dict(handlers or {})
        self.handlers.setdefault("ping", _ping)
        self.keys = keys
        self._ctx = ctx if ctx is not None else zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._domain: str | None = None
        try:
            if keys is not None:
                self._domain = secure_server(self._sock, self._ctx, keys)
            self.endpoint = bind_endpoint(self._sock, endpoint)
        except BaseException:
            self.close()
            raise
        self._task: asyncio.Task | None = None
        self._replying = False
        self._last_reply = -math.inf
        self.served = 0
        self.errors = 0
        self.refused = 0

    def start(self) -> CommandServer:
        """Serve in a background task of the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.serve())
        return self

    async def serve(self) -> None:
        """Answer requests until cancelled; handlers run one at a time, in arrival order."""
        while True:
            frames = await self._sock.recv_multipart(copy=False)
            if len(frames) < 2:
                continue  # nothing to route a reply to
            route, body = [f.bytes for f in frames[:-1]], frames[-1].bytes
            client_key = _client_key(frames[-1]) if self._domain is not None else None
            self._replying = True  # until the reply is handed over: stop() waits for it (bounded)
            try:
                reply = await self._handle(body, client_key)
                self.served += 1
                if not reply.get("ok"):
                    self.errors += 1
                    self.refused += bool(reply.get("refused"))
                try:
                    await self._sock.send_multipart(
                        [*route, json_codec.encode(reply, default=str)], flags=zmq.NOBLOCK
                    )
                except zmq.ZMQError as exc:
                    log.warning("could not send a command reply: %s", exc)
            finally:
                self._replying = False
                self._last_reply = time.monotonic()

    async def _handle(self, body: bytes, client_key: str | None = None) -> dict:
        req_id = None
        try:
            if len(body) > MAX_REQUEST_BYTES:
                raise CommandError(f"request of {len(body)} bytes is too large")
            req = _parse_request(body)
            req_id = req.get("id")
            if not isinstance(req_id, str | int | None):
                req_id = None
            name, args = req.get("cmd"), req.get("args", {})
            if not isinstance(name, str):
                raise CommandError("request has no command name ('cmd')")
            if not isinstance(args, dict):
                raise CommandError("command arguments ('args') must be an object")
            _check_args(name, args)
            deadline = req.get("deadline")
            if isinstance(deadline, int | float) and time.time() > deadline:
                raise CommandError(f"command {name!r} arrived after its deadline; not executed")
            handler = self.handlers.get(name)
            if handler is None:
                raise CommandError(f"unknown command {name!r} (known: {', '.join(sorted(self.handlers))})")
            if CLIENT_KEY in args:
                raise CommandRefused(f"command {name!r}: {CLIENT_KEY!r} is set by the server, not the client")
            if CLIENT_KEY in inspect.signature(handler).parameters:
                args = {**args, CLIENT_KEY: client_key}
            try:
                inspect.signature(handler).bind(**args)
            except TypeError as exc:
                raise CommandError(f"bad arguments for {name!r}: {exc}") from None
            result = handler(**args)
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                result = {}
            if not isinstance(result, dict):
                result = {"value": result}
            return {"id": req_id, "ok": True, "result": result}
        except CommandRefused as exc:
            return {"id": req_id, "ok": False, "refused": True, "error": str(exc)}
        except CommandError as exc:
            return {"id": req_id, "ok": False, "error": str(exc)}
        except Exception as exc:  # a handler failed: report it, keep serving
            log.exception("command handler failed")
            return {"id": req_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"}

    async def stop(self) -> None:
        """Stop serving; a reply being sent (e.g. to the `stop` command that ends a run) goes out first,
        waited for at most REPLY_LINGER_MS."""
        deadline = time.monotonic() + REPLY_LINGER_MS / 1000
        while self._replying and self._task is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        # A client with ZMQ_IMMEDIATE drops a reply it has not read yet when the connection goes away
        # (libzmq terminates the pipe): keep the connection a moment after the last reply.
        grace = self._last_reply + REPLY_GRACE_S - time.monotonic()
        if 0 < grace <= REPLY_GRACE_S:
            await asyncio.sleep(grace)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if not self._sock.closed:  # a reply just queued (the `stop` that ends the run) still goes out
            self._sock.close(linger=REPLY_LINGER_MS)
        if self._domain is not None:
            release_server(self._ctx, self._domain)
            self._domain = None

    async def __aenter__(self) -> CommandServer:
        return self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()
        self.close()


def _client_key(frame: zmq.Frame) -> str | None:
    """The CURVE public key (Z85) the ZAP handler authenticated the sender of ``frame`` with."""
    try:
        return cast(str, frame.get("User-Id")) or None  # the property decides the type
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return None


async def _ping() -> dict:
    return {"pong": True, "t": time.time()}


def _parse_request(body: bytes) -> dict:
    """Parse a request (a JSON object); non-finite numbers pass here and :func:`_check_args` refuses them."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError("request is not UTF-8 JSON") from None
    try:
        req = json_codec.loads(text)  # NaN/Infinity/1e999 parse, so that the refusal carries the id
    except ValueError:
        raise CommandError("request is not UTF-8 JSON") from None
    except RecursionError:
        raise CommandRefused("request nested too deeply; refused") from None
    if not isinstance(req, dict):
        raise CommandError("request must be a JSON object")
    return req


def _check_args(name: str, args: dict) -> None:
    """Refuse non-finite numbers anywhere in the arguments (also ints too large for a float)."""
    stack: list = [(args, 1)]
    while stack:
        obj, depth = stack.pop()
        if depth > MAX_ARG_NESTING:
            raise CommandRefused(f"command {name!r}: arguments nested deeper than {MAX_ARG_NESTING} levels")
        values = obj.values() if isinstance(obj, dict) else obj
        for v in values:
            if isinstance(v, dict | list):
                stack.append((v, depth + 1))
            elif isinstance(v, float) and not math.isfinite(v):
                raise CommandRefused(f"command {name!r}: non-finite number {v} in the arguments; refused")
            elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**63:
                raise CommandRefused(f"command {name!r}: integer argument out of range; refused")


class CommandClient:
    """Sends commands and waits for their acknowledgement."""

    def __init__(
        self,
        endpoint: str,
        ctx: zmq.asyncio.Context | None = None,
        timeout: float = 2.0,
        keys: CurveKeys | None = None,
    ):
        """``keys``: connect as a CURVE client (server public key and client pair from the folder)."""
        self.endpoint = endpoint
        self.timeout = timeout
        self._ctx = ctx if ctx is not None else zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.IMMEDIATE, 1)
        try:
            if keys is not None:
                secure_client(self._sock, keys)
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self._sock.close(linger=0)
            raise OSError(f"cannot connect to {endpoint}: {exc}") from None
        self._lock = asyncio.Lock()

    async def request(self, name: str, timeout: float | None = None, **args) -> dict:
        """Run command ``name`` on the server; returns the handler's result dict.

        Raises CommandError for an error reply and CommandTimeout when no reply came in time.
        """
        timeout = self.timeout if timeout is None else timeout
        req_id = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        body = json_codec.encode(
            {"id": req_id, "cmd": name, "args": args, "deadline": time.time() + timeout},
            default=_json_default,
        )
        async with self._lock:
            try:
                async with asyncio.timeout(max(timeout, 0.001)):
                    await self._sock.send_multipart([b"", body])
            except TimeoutError:
                raise CommandTimeout(
                    f"command {name!r}: no server reachable at {self.endpoint} within {timeout} s"
                ) from None
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await self._sock.poll(max(1, int(remaining * 1000))):
                    raise CommandTimeout(
                        f"command {name!r}: no reply from {self.endpoint} within {timeout} s"
                    )
                parts = await self._sock.recv_multipart()
                try:
                    reply = json_codec.loads(parts[-1].decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue
                if not isinstance(reply, dict) or reply.get("id") != req_id:
                    continue  # a late reply to an earlier request that timed out
                if reply.get("ok"):
                    result = reply.get("result")
                    return result if isinstance(result, dict) else {}
                if reply.get("refused"):
                    raise CommandRefused(str(reply.get("error", "refused")))
                raise CommandError(str(reply.get("error", "unknown error")))

    def close(self) -> None:
        if not self._sock.closed:
            self._sock.close(linger=0)

    async def __aenter__(self) -> CommandClient:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


def _json_default(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
