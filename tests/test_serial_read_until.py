"""A ``socket://`` serial port reads an answer line as pyserial's own port does, a piece at a time.

pyserial's ``read_until`` reads one byte per call (a ``select`` and a ``recv`` each); drivers/serial_urls'
port takes what has arrived at each wake-up, up to the end of the line. Here both ports read the same byte
streams from a loopback peer - whole lines, lines a byte at a time, a terminator split over two sends, two
lines in one send, a line longer than the size asked for, a line cut off by the timeout, a peer that hangs
up - and must give the same bytes and the same errors; and a line costs ours a few system calls, not two
a byte.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import serial
from serial.urlhandler import protocol_socket as pyserial_socket

from drivers.errors import BadResponse, DeviceTimeout
from drivers.serial_transport import SerialLine
from drivers.serial_urls import protocol_socket as ours

TIMEOUT = 0.3  # s, the ports' read timeout

#: (what the peer sends, with pauses in s between pieces, then whether it hangs up), and the reads made:
#: (expected terminator, size) per read
CASES = {
    "whole line": ([b"OK 1.25e-3\r\n"], False, [(b"\n", 258)]),
    "a byte at a time": ([bytes([b]) for b in b"D 0.000412\r\n"], False, [(b"\n", 258)]),
    "terminator split": ([b"abc\r", 0.05, b"\ndef\r\n"], False, [(b"\r\n", None), (b"\r\n", None)]),
    "two lines at once": ([b"first\nsecond\n"], False, [(b"\n", 258), (b"\n", 258)]),
    "longer than asked": ([b"x" * 40 + b"\n"], False, [(b"\n", 16), (b"\n", 16), (b"\n", 16)]),
    "cut off by the timeout": ([b"partial ans"], False, [(b"\n", 258)]),
    "peer hangs up mid line": ([b"half", 0.05], True, [(b"\n", 258)]),
}


class Peer:
    """A loopback listener for one connection: once queried (a byte from the port, which opens by emptying
    its input) it answers ``pieces`` (bytes, or a pause in s), then hangs up if told to, else holds the
    connection until :meth:`close`."""

    def __init__(self, pieces: list, hang_up: bool) -> None:
        self.pieces, self.hang_up = pieces, hang_up
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.url = f"socket://127.0.0.1:{self.listener.getsockname()[1]}"
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(10)
            conn.recv(1)  # the query
            for piece in self.pieces:
                if isinstance(piece, bytes):
                    conn.sendall(piece)
                    time.sleep(0.002)  # each piece its own segment
                else:
                    time.sleep(piece)
            if not self.hang_up:
                self.done.wait(10)

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        self.listener.close()


def reads(port_class, peer: Peer, asked: list) -> list:
    """What each read returns (bytes) or raises (the exception's type name)."""
    port = port_class(peer.url, timeout=TIMEOUT)
    port.write(b"?")  # and read at once, while the pieces come in
    out: list = []
    try:
        for expected, size in asked:
            try:
                out.append(port.read_until(expected, size))
            except serial.SerialException as exc:
                out.append(type(exc).__name__)
    finally:
        port.close()
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_our_socket_port_reads_lines_as_pyserials_does(case):
    pieces, hang_up, asked = CASES[case]
    results = {}
    for name, port_class in (("pyserial", pyserial_socket.Serial), ("ours", ours.Serial)):
        peer = Peer(pieces, hang_up)
        try:
            results[name] = reads(port_class, peer, asked)
        finally:
            peer.close()
    assert results["ours"] == results["pyserial"], case
    assert results["ours"] and results["ours"][0] not in (b"", None), case  # every case reads something


class CountingSocket:
    """A port's socket that counts its receives."""

    def __init__(self, real: socket.socket) -> None:
        self.real, self.calls = real, 0

    def recv(self, *args):
        self.calls += 1
        return self.real.recv(*args)

    def fileno(self) -> int:
        return self.real.fileno()


def test_a_line_costs_a_few_receives_not_one_a_byte():
    """A 30-byte answer in one piece: pyserial's port receives it a byte at a time, ours in one piece (and
    one look at it)."""
    counted: dict[str, int] = {}
    for name, port_class in (("pyserial", pyserial_socket.Serial), ("ours", ours.Serial)):
        peer = Peer([b"S1 D=+0.00041233 m  T=21.5 C\r\n"], False)
        try:
            port = port_class(peer.url, timeout=TIMEOUT)
            port.write(b"?")
            time.sleep(0.1)
            counting = CountingSocket(port._socket)
            port._socket = counting
            line = port.read_until(b"\n", 258)
            port._socket = counting.real
            port.close()
        finally:
            peer.close()
        assert line == b"S1 D=+0.00041233 m  T=21.5 C\r\n"
        counted[name] = counting.calls
    assert counted["pyserial"] == 30 and counted["ours"] == 2, counted


@pytest.mark.parametrize(("pieces", "error", "says"), [
    ([b"x" * 300], BadResponse, "answer longer than 256 bytes"),
    ([b"+0.0004"], DeviceTimeout, "no complete answer within 0.3 s (got b'+0.0004')"),
])
async def test_a_sensor_line_that_never_ends_is_one_clear_error(pieces, error, says):
    """Through the driver (drivers/serial_transport.py over this port): an answer with no end of line is
    refused in one line - too long, or cut off by the timeout - naming what came."""
    peer = Peer(pieces, False)
    line = SerialLine("S1", {"url": peer.url, "timeout": TIMEOUT})
    try:
        with pytest.raises(error) as caught:
            await line.query("MEAS?")
        assert says in str(caught.value) and "S1" in str(caught.value)
    finally:
        line.close()
        peer.close()
