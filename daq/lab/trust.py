"""The TLS trust of this process's lab clients, built once per process.

httpx builds a new SSL context for every client and every one-off request it is given ``verify=True``
for, loading the whole CA bundle each time (20-60 ms of CPU); one lab command opens several (the probe,
Tiled's client, people's requests), and in the test suite these loads were the largest cost of the lab
commands after imports. :func:`default_trust` is what ``verify=True`` trusts - ``$SSL_CERT_FILE``, else
``$SSL_CERT_DIR``, else certifi's bundle, as httpx decides - made once for each value of those variables.
"""

from __future__ import annotations

import os
import ssl
import threading

_lock = threading.Lock()
_made: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def default_trust() -> ssl.SSLContext:
    """httpx's default SSL context for the current ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR``, made once."""
    import httpx  # lazy: only commands that talk to a lab need it (it comes with tiled's client)

    settings = (os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None)
    with _lock:
        context = _made.get(settings)
        if context is None:
            context = _made[settings] = httpx.create_ssl_context()
        return context
