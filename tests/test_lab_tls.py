"""`hil lab serve` over TLS on loopback: a real Tiled server in a child process, a self-signed certificate."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from daq.lab import layout
from daq.lab.live import LIVE_KEY
from tests.polling import poll_until
from tests.serve_fixtures import self_signed, tls13_get
from tests.test_lab import LabServer


@pytest.fixture(scope="module")
def tls_lab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-lab")
    certfile, keyfile = self_signed(folder, "127.0.0.1")
    server = LabServer(folder / "lab", "--certfile", certfile, "--keyfile", keyfile,
                       env={"HIL_LAB_STALE": "3"})
    yield server, certfile
    assert server.stop() == 0


def test_the_lab_over_tls_answers_its_people_and_sends_no_session_tickets(tls_lab):
    """Tiled's ``subscribe()`` follows a live session with websockets' sync client, whose reader thread
    would read a session ticket while its caller writes the request on the same SSL object (see
    daq/tls.py): the lab sends none."""
    lab, certfile = tls_lab
    assert lab.url.startswith("https://127.0.0.1:")
    port = int(lab.url.rsplit(":", 1)[1])
    answer, version, ticket = tls13_get(port, certfile, "/api/v1/metadata/",
                                        f"Authorization: Apikey {lab.key}\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert version == "TLSv1.3" and ticket is False
    trust = ssl.create_default_context(cafile=certfile)
    with httpx.Client(base_url=lab.url, verify=trust, timeout=30) as http:
        assert http.get("/api/v1/metadata/").status_code == 401  # no key, no data
        keyed = http.get("/api/v1/metadata/", headers={"Authorization": f"Apikey {lab.key}"})
        assert keyed.status_code == 200


def test_the_lab_over_tls_marks_a_silent_live_session_incomplete(tls_lab):
    """The lab's sweep talks to its own server: over TLS it trusts the server's own certificate, which this
    machine does not (self-signed); it used to fail on it every time, leaving silent sessions running."""
    from tiled.client import from_uri

    lab, certfile = tls_lab
    root = from_uri(lab.url, api_key=lab.key, verify=ssl.create_default_context(cafile=certfile))
    heard = time.time() - 100  # a forwarder last heard 100 s ago (the fixture's lab: stale after 3 s)
    root.create_container("silent-session", specs=[layout.SESSION_SPEC], metadata={
        "status": "running", "replication": {"state": layout.LIVE}, LIVE_KEY: {"heartbeat": heard}})
    status = lambda: layout.plain(root["silent-session"].metadata)["status"]  # noqa: E731
    poll_until(lambda: status() == "incomplete", timeout=60, period=0.5)
    assert "stopped sending" in layout.plain(root["silent-session"].metadata)["reason"]


def test_lab_clients_trust_what_ssl_cert_file_names_with_one_context_per_setting(tls_lab, monkeypatch):
    """The lab's clients share one SSL context per process (daq/lab/trust.py) and still trust what httpx's
    ``verify=True`` does: this lab's self-signed certificate only while ``$SSL_CERT_FILE`` names it."""
    from daq.lab.connect import open_lab, probe
    from daq.lab.settings import LabUnreachable
    from daq.lab.trust import default_trust

    lab, certfile = tls_lab
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(LabUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
        probe(lab.url, lab.key, timeout=30)
    monkeypatch.setenv("SSL_CERT_FILE", certfile)
    trusted = default_trust()
    assert default_trust() is trusted  # made once for this setting
    probe(lab.url, lab.key, timeout=30)
    open_lab(lab.url, lab.key).create_container("trust-check")  # Tiled's client over the same trust
    assert "trust-check" in list(open_lab(lab.url, lab.key))
    monkeypatch.delenv("SSL_CERT_FILE")
    assert default_trust() is not trusted
    with pytest.raises(LabUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
        probe(lab.url, lab.key, timeout=30)
