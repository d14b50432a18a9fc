"""``socket://host:port``: pyserial's raw-socket port, closed without pyserial's 0.3 s sleep, and reading a
line a piece at a time."""

from __future__ import annotations

import errno
import select
import socket
from typing import cast

from serial.serialutil import LF, PortNotOpenError, SerialException, Timeout
from serial.urlhandler import protocol_socket

_RETRY = (errno.EAGAIN, errno.EALREADY, errno.EWOULDBLOCK, errno.EINPROGRESS, errno.EINTR)


class Serial(protocol_socket.Serial):
    """pyserial's socket port; :meth:`close` returns at once (see the package docstring), :meth:`read_until`
    takes what has arrived at each wake-up."""

    def read_until(self, expected: bytes = LF, size: int | None = None) -> bytes:
        """pyserial's ``read_until``: up to and including ``expected``, at most ``size`` bytes, what has come
        when the port's timeout runs out. pyserial's own reads a byte per call, a ``select`` and a ``recv``
        each (a 20-byte answer: 40 system calls); here each wake-up looks at what has arrived (``MSG_PEEK``)
        and takes it up to the end of the line, so the bytes after it stay unread, as with pyserial's."""
        if not self.is_open:
            raise PortNotOpenError()
        sock = cast(socket.socket, self._socket)
        line = bytearray()
        timeout = Timeout(self._timeout)
        while size is None or len(line) < size:
            try:
                ready, _, _ = select.select([sock], [], [], timeout.time_left())
                if not ready:
                    break  # timed out
                room = 4096 if size is None else size - len(line)
                seen = sock.recv(room, socket.MSG_PEEK)
                if not seen:
                    raise SerialException("socket disconnected")
                joined = line + seen
                end = joined.find(expected, max(0, len(line) - len(expected) + 1))
                take = len(seen) if end < 0 else end + len(expected) - len(line)
                line += sock.recv(take)  # already here: all of it
                if end >= 0:
                    break
            except OSError as exc:
                if exc.errno not in _RETRY:
                    raise SerialException(f"read failed: {exc}") from exc
            if timeout.expired():
                break
        return bytes(line)

    def close(self) -> None:
        if not self.is_open:  # type: ignore[has-type]  # pyserial is untyped
            return
        sock: socket.socket | None = self._socket  # type: ignore[has-type]
        self._socket = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already dropped by the peer
            sock.close()
        self.is_open = False
