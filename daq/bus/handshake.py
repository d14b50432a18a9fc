"""Does a client get through to a command server or a bus publisher? One probe connection with the
client's credentials, watched with a ZeroMQ socket monitor, says so within a bounded time - and why not.

ZeroMQ itself never tells a client that it was refused: a client without CURVE keys (or with the
wrong server key, or a client key the server does not authorize) connects, fails the handshake,
reconnects, and waits forever for replies or frames that never come. The handshake events of a
monitored socket tell the cases apart at once (checked against libzmq 4.3.5):

* ``HANDSHAKE_SUCCEEDED``: the credentials fit the server (or both sides are plain).
* ``HANDSHAKE_FAILED_PROTOCOL`` with a mechanism mismatch: one side uses CURVE, the other not.
* ``HANDSHAKE_FAILED_AUTH``: the server's authenticator refused our client key (not authorized).
* ``HANDSHAKE_FAILED_NO_DETAIL``/other protocol errors with keys: the server key is not this server's.
* nothing within the timeout: nobody answers at the endpoint.

The probe socket sends nothing (a SUB without subscriptions, a DEALER without a request), so the
server's counters and the publisher's subscriptions do not see it.
"""

from __future__ import annotations

import time

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from daq.bus.keys import ENV_KEYS, CurveKeys, secure_client
from daq.errors import ProtocolError

#: Seconds a command-line client waits for the handshake before it gives up (a bounded wait).
CONNECT_TIMEOUT = 5.0

_WATCHED = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
_MISMATCH = zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH


class HandshakeFailed(ProtocolError, ConnectionError):
    """The client cannot talk to the endpoint with the credentials it has; the message says what to do.

    ``plain_server``: the server uses no CURVE (the client offered keys it does not want)."""

    def __init__(self, message: str, plain_server: bool = False):
        super().__init__(message)
        self.plain_server = plain_server


async def handshake(endpoint: str, keys: CurveKeys | None, socket_type: int = zmq.DEALER,
                    timeout: float = CONNECT_TIMEOUT, ctx: zmq.asyncio.Context | None = None) -> None:
    """Connect a probe socket of ``socket_type`` with ``keys`` (None: plain) to ``endpoint`` and wait for
    the handshake; returns when it succeeded, raises :class:`HandshakeFailed` with the reason (at the
    first failed handshake, or after ``timeout`` s without an answer)."""
    ctx = ctx if ctx is not None else zmq.asyncio.Context.instance()
    sock = ctx.socket(socket_type)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(_WATCHED)
    try:
        if keys is not None:
            secure_client(sock, keys)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            raise HandshakeFailed(f"cannot connect to {endpoint}: {exc}") from None
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await monitor.poll(max(1, int(remaining * 1000))):  # POLLIN by default
                raise HandshakeFailed(f"no answer from {endpoint} within {timeout:g} s: is the run still "
                                      "going, and is this its endpoint?")
            event = parse_monitor_message(await monitor.recv_multipart())
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return
            raise _failure(endpoint, keys, event["event"], event["value"])
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def _failure(endpoint: str, keys: CurveKeys | None, event: int, value: int) -> HandshakeFailed:
    if keys is None:
        return HandshakeFailed(
            f"{endpoint} is secured with CURVE and refused a client without keys: pass --keys DIR (or set "
            f"${ENV_KEYS}) with the server's public key server.key and an authorized client key pair"
        )
    where = keys.directory
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == _MISMATCH:
        return HandshakeFailed(f"{endpoint} does not use CURVE keys; connect without --keys",
                               plain_server=True)
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return HandshakeFailed(
            f"{endpoint} refused the client key of {where} (not authorized there): copy {where}/client.key "
            "to the server and run `hil keys authorize client.key` in its keys folder"
        )
    return HandshakeFailed(
        f"CURVE handshake with {endpoint} failed: {where}/server.key is not the public key of that "
        "server; copy the server's server.key into the keys folder"
    )
