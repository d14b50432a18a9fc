"""TLS of the project's web servers (``hil serve``, ``hil lab serve``): what uvicorn has no option for."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn


def load_without_session_tickets(config: uvicorn.Config) -> None:
    """Load uvicorn's ``config`` now (that makes its SSL context) and have the context send no TLS 1.3
    session tickets.

    The server sends tickets right after the handshake, just when a threaded client (websockets' sync
    client, which Tiled's ``subscribe()`` and a lab's own scripts use) has its reader thread read them while
    its caller writes the request on the same SSL object, which OpenSSL does not allow: about 1 connection
    in 400 lost its request and was answered 408 after the header timeout. Without tickets each connection
    makes a full handshake, a few ms of CPU."""
    config.load()
    if config.ssl is not None:
        config.ssl.num_tickets = 0
