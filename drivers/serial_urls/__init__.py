"""pyserial URL handlers of our own, found before pyserial's (``serial.protocol_handler_packages``).

pyserial 3.5's ``socket://`` port sleeps 0.3 s in ``close()`` ("give the server some time" before a
reconnect). Our serial lines and pymodbus's RTU client close their ports on the event loop, so every close
of a serial gateway or simulated sensor froze the whole loop for 0.3 s: in `hil devices` three sensors
closing stalled the force source's reads past their 0.3 s timeout, and in `hil run` a sensor closing could
delay the force source's safe-state write. Our drivers reconnect with their own backoff, so the sleep
buys nothing. :func:`install` puts this package first; importing a transport installs it.
"""

from __future__ import annotations

import serial

PACKAGE = __name__


def install() -> None:
    """Look URL handlers up here first (idempotent); protocols we do not define fall through to pyserial's."""
    if PACKAGE not in serial.protocol_handler_packages:
        serial.protocol_handler_packages.insert(0, PACKAGE)
