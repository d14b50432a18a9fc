"""The listening sockets our servers bind themselves (`hil serve`, `hil lab serve`) say they are TCP, so the
connections asyncio accepts on them send at once (TCP_NODELAY). With protocol 0, asyncio left Nagle on: a
reply written in two parts (head, body) waited for the client's delayed ACK, ~40 ms per request on a
kept-alive connection (a lab's metadata GET 68 -> 33 ms, `/api/v1/` 48 -> 4 ms once fixed)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from daq.lab.server import bind
from daq.serve.startup import listen


@pytest.mark.parametrize("make", [bind, listen], ids=["hil lab serve", "hil serve"])
async def test_connections_accepted_on_our_listening_sockets_send_without_delay(make):
    sock = make("127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[int] = loop.create_future()

    class Note(asyncio.Protocol):
        def connection_made(self, transport):  # the accepted connection, as uvicorn gets it
            conn = transport.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server = await loop.create_server(Note, sock=sock)  # what uvicorn does with sockets=[sock]
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        nodelay = await asyncio.wait_for(accepted, 30)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert nodelay != 0
