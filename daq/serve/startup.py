"""What ``hil serve`` checks before it announces anything (the TLS files: daq/tls.py): its listening socket
(an occupied port is one line naming it, and nothing is created)."""

from __future__ import annotations

import socket

from daq.errors import ConfigError

BACKLOG = 32  # connections the kernel queues for accept(); asyncio also accepts at most this many per turn of
#                its loop, so a burst of connections cannot take many more files than --max-connections


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket (port 0: any free port); an address in use or not ours is one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on a socket that says it is TCP; without it a reply
    # written in two parts waited for the client's delayed ACK, 40 ms per request on a kept-alive connection
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                          + (" (another server there? give --port)" if exc.errno == 98 else "")) from None
    sock.set_inheritable(True)
    return sock
