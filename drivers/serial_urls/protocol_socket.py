"""``socket://host:port``: pyserial's raw-socket port, closed without pyserial's 0.3 s sleep."""

from __future__ import annotations

import socket

from serial.urlhandler import protocol_socket


class Serial(protocol_socket.Serial):
    """pyserial's socket port; :meth:`close` returns at once (see the package docstring)."""

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
