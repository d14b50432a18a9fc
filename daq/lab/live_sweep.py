"""The lab's side of live sessions: a session whose forwarder stopped being heard (the rig PC died, its
network went) would stay ``running`` in the lab for ever. ``hil lab serve`` runs this sweep beside its
server: every so often it looks for live sessions still ``running`` whose forwarder's heartbeat is older
than the stale time, and marks them ``incomplete`` with the reason. The next ``hil lab push --pending``
from the rig completes the container with what the rig's store holds, verified."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

from daq.lab import layout
from daq.lab.trust import default_trust

log = logging.getLogger("hil.lab")

#: s without a word from a live session's forwarder after which the lab marks it incomplete
#: (``$HIL_LAB_STALE`` changes it); a forwarder refreshes its heartbeat every second while the lab answers.
STALE_S = 60.0
ENV_STALE = "HIL_LAB_STALE"


def stale_after() -> float:
    text = os.environ.get(ENV_STALE, "").strip()
    try:
        value = float(text) if text else STALE_S
    except ValueError:
        value = STALE_S
    return value if 0 < value <= 86400 else STALE_S


def mark_stale(root, now: float, stale: float) -> list[str]:
    """Mark the running live sessions of the lab (a Tiled client root) whose heartbeat is older than
    ``stale`` s ``incomplete``; their ids."""
    from tiled.queries import Comparison, Eq  # lazy: tiled's client side

    from daq.lab.live import LIVE_KEY  # lazy: the forwarder's module names the field

    found = root.search(Eq("replication.state", layout.LIVE)).search(Eq("status", "running")) \
        .search(Comparison("lt", f"{LIVE_KEY}.heartbeat", now - stale))
    marked = []
    for sid, node in found.items():
        heard = layout.plain(node.metadata.get(LIVE_KEY) or {}).get("heartbeat")
        reason = f"the rig stopped sending: nothing heard from its forwarder for {now - (heard or now):.0f} s"
        node.update_metadata({"status": "incomplete", "reason": reason, "ended": heard,
                              "ended_iso": layout.iso(heard)}, drop_revision=True)
        marked.append(sid)
    return marked


def own_certificate(certfile: str) -> ssl.SSLContext:
    """TLS settings for the sweep's requests to its own server: trust exactly the server's certificate (the
    first in its file) and nothing else. That certificate need not be trusted by this machine (self-signed)
    nor name the address the server was bound to (0.0.0.0); only the holder of its key can answer."""
    text = Path(certfile).read_text()
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    first = text.index(begin)
    context = ssl.create_default_context(cadata=text[first:text.index(end, first) + len(end)])
    context.check_hostname = False  # the certificate itself is the anchor, whatever name it bears
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf as its own anchor, as a pin
    return context


def start_sweep(url: str, key_file, stop: threading.Event, certfile: str | None = None) -> threading.Thread:
    """The sweep in a thread of the lab server's process, with the admin's key, until ``stop`` is set;
    over TLS (``certfile``: the server's own) it trusts the server's own certificate only."""
    verify = own_certificate(certfile) if certfile else default_trust()

    def sweep() -> None:
        stale = stale_after()
        root = None
        while not stop.wait(min(10.0, stale / 3)):
            try:
                if root is None:
                    from tiled.client import from_uri  # lazy: as above

                    root = from_uri(url, api_key=key_file.read_text().strip(), verify=verify)
                for sid in mark_stale(root, time.time(), stale):
                    log.warning("%s: marked incomplete (its rig stopped sending)", sid)
            except Exception as exc:  # noqa: BLE001 - a sweep that failed is tried again next time
                log.warning("live session sweep: %s", " ".join(str(exc).split())[:200])
                root = None

    thread = threading.Thread(target=sweep, name="hil-lab-sweep", daemon=True)
    thread.start()
    return thread
