"""TLS of the project's web servers (``hil serve``, ``hil lab serve``): their certificate and key checked
before anything is announced, and what uvicorn has no option for."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from daq.errors import ConfigError

if TYPE_CHECKING:
    import uvicorn


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Load the certificate and key as uvicorn will; one line naming the file that is missing, unreadable
    or not PEM, or saying that the two do not belong together."""
    if not certfile or not keyfile:
        return
    for option, name, marker in (("--certfile", certfile, "CERTIFICATE-----"),
                                 ("--keyfile", keyfile, "PRIVATE KEY-----")):
        path = Path(name).expanduser()
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{option} {path}: no such file") from None
        except OSError as exc:
            raise ConfigError(f"{option} {path}: cannot read it ({exc.strerror})") from None
        if b"-----BEGIN " not in text or marker.encode() not in text:
            raise ConfigError(f"{option} {path}: not a PEM file (expected a '-----BEGIN ...{marker}' block)")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"--certfile {certfile} and --keyfile {keyfile}: not a usable certificate and key "
                          f"pair ({getattr(exc, 'reason', None) or exc})") from None


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
