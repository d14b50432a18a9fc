"""OPC UA security of the simulated drive and the servo driver, over real loopback servers.

The rig serves both faces: a secure endpoint (Basic256Sha256 SignAndEncrypt, trusted client
certificate, user/password) and an anonymous plain one that may only read, stop and disable.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import replace

import numpy as np
import pytest
import pytest_asyncio
from asyncua import Client, ua
from asyncua.crypto import uacrypto

from drivers.errors import DeviceConnectionError
from drivers.servo_drive import DriveConnectionError, ServoDrive, ServoDriveConfig, _cert_uri
from drivers.settings import settings_from
from simulators.certs import CLIENT_URI, SERVER_URI, ensure_pki, make_identity
from simulators.crane_drive import CraneDrive, PasswordUsers, build_server, server_url
from simulators.crane_rig import CraneRig
from simulators.physics.crane import CraneTruth
from simulators.settings import DriveSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")

TRUTH = replace(CraneTruth(), coulomb=0.0, stribeck_torque=0.0).to_dict()
DRIVE = {"watchdog_timeout": 0.4, "security": "both", "max_samples": 20_000}
NS = "urn:hil-lab:crane-drive"
PASSWORD = "crane-sim"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory):
    r = CraneRig({"simulator": {"speed": 10.0, "truth": TRUTH, "drive": DRIVE}},
                 pki_dir=tmp_path_factory.mktemp("pki"))
    await r.start()
    yield r
    await r.stop()


def _sec(pki, **kw) -> dict:
    return {"mode": "Basic256Sha256_SignAndEncrypt", "certificate": str(pki.client.cert),
            "private_key": str(pki.client.key), "server_certificate": str(pki.server.cert),
            "user": "operator", "password": PASSWORD, **kw}


def _dev(url: str, **kw) -> dict:
    return {"url": url, "name": "crane-drive", "heartbeat_interval": 0.1, "connect_timeout": 3.0,
            "timeout": 2.0, "max_samples": 20_000, **kw}


async def test_secure_run_works_without_certificate_warnings(rig, caplog):
    caplog.set_level(logging.WARNING, logger="asyncua")
    async with ServoDrive(_dev(rig.endpoints["secure"], security=_sec(rig.pki))) as d:
        assert (await d.device_identity())["security"] == "Basic256Sha256_SignAndEncrypt"
        await d.clear_fault()
        await d.load_trajectory(1e-3, np.full(100, 1.0))
        await d.enable()
        await d.start()
        assert (await d.wait_done(timeout=10))["state"] == "Done"
        assert (await d.read_trace())["speed"].size == 1000
        await d.safe_state()
        assert not rig.drive.enabled
    assert not [r for r in caplog.records if "application uri" in r.getMessage()]


async def test_generated_certificates_carry_the_announced_application_uri(rig):
    host = socket.gethostname()
    for ident, uri in ((rig.pki.client, CLIENT_URI), (rig.pki.server, SERVER_URI)):
        assert _cert_uri(ident.cert) == uri == ident.app_uri
        cert = await uacrypto.load_certificate(str(ident.cert))
        assert not uacrypto.check_certificate(cert, uri, host)  # no error: URI and host name in the SAN
    async with Client(rig.endpoints["plain"]) as c:  # the drive announces its certificate's URI
        servers = await c.find_servers()
    assert any(s.ApplicationUri.startswith(SERVER_URI) for s in servers)


async def test_wrong_password_and_untrusted_certificate_are_refused(rig, tmp_path):
    with pytest.raises(DriveConnectionError, match="BadUserAccessDenied"):
        async with ServoDrive(_dev(rig.endpoints["secure"], security=_sec(rig.pki, password="wrong"))):
            pass
    stranger = await make_identity(tmp_path, "stranger", CLIENT_URI)
    sec = _sec(rig.pki, certificate=str(stranger.cert), private_key=str(stranger.key))
    with pytest.raises(DriveConnectionError, match="BadCertificateUntrusted") as info:
        async with ServoDrive(_dev(rig.endpoints["secure"], security=sec)):
            pass
    assert isinstance(info.value, DeviceConnectionError) and info.value.device == "crane-drive"
    with pytest.raises(DriveConnectionError):  # no anonymous plain session on the secure endpoint
        async with ServoDrive(_dev(rig.endpoints["secure"])):
            pass


async def test_unverified_server_is_refused_by_config(rig):
    sec = {k: v for k, v in _sec(rig.pki).items() if k != "server_certificate"}
    with pytest.raises(ValueError, match="pinned"):
        settings_from(_dev(rig.endpoints["secure"], security=sec), ServoDriveConfig)


class RecordingUsers(PasswordUsers):
    """An impostor's user manager: accepts everyone and writes down what it was told."""

    def __init__(self):
        super().__init__({})
        self.seen: list[tuple[str | None, str | None]] = []

    def get_user(self, iserver, username=None, password=None, certificate=None):
        self.seen.append((username, password))
        return super().get_user(iserver, username, password, certificate)


async def test_impostor_server_is_refused_before_the_password_is_sent(rig, tmp_path):
    # an impostor drive with its own self-signed certificate, trusting our client certificate
    fake_pki = await ensure_pki(tmp_path / "impostor")
    (fake_pki.trusted_dir / "ours.der").write_bytes(rig.pki.client.cert.read_bytes())
    drive = CraneDrive(CraneTruth(), DriveSettings())
    users = RecordingUsers()
    server = await build_server(drive, "127.0.0.1", 0, pki=fake_pki, users={})
    server.iserver.user_manager = users
    url = server_url(server, "127.0.0.1")
    try:
        trusted = {**{k: v for k, v in _sec(rig.pki).items() if k != "server_certificate"},
                   "server_trust_dir": str(rig.pki.server_trusted_dir)}
        for sec, why in ((_sec(rig.pki), "not the pinned one"),  # pinned: the real drive's certificate
                         (trusted, "BadCertificateUntrusted")):  # trusted: a trust store with the real one
            with pytest.raises(DriveConnectionError, match=why):
                async with ServoDrive(_dev(url, security=sec, connect_timeout=2.0)):
                    pass
        assert users.seen == []  # the impostor never saw a user name or password
        async with ServoDrive(_dev(rig.endpoints["secure"], security=trusted)) as d:  # admits the real one
            assert (await d.device_identity())["security"] == "Basic256Sha256_SignAndEncrypt"
    finally:
        await drive.close()
        await server.stop()


async def test_anonymous_endpoint_cannot_move_the_axis(rig):
    async with Client(rig.endpoints["plain"]) as c:
        idx = await c.get_namespace_index(NS)
        axis = c.get_node(ua.NodeId("Axis1", idx))

        async def call(name, *args):
            return await axis.call_method(ua.NodeId(f"Axis1.{name}", idx), *args)

        load = (ua.Variant(1e-3, ua.VariantType.Double), ua.Variant([1.0] * 10, ua.VariantType.Double))
        for name, args in (("LoadTrajectory", load), ("Enable", ()), ("Start", ()), ("ClearFault", ())):
            code, msg = await call(name, *args)
            assert code == 10 and "secure endpoint" in msg, name
        assert not rig.drive.enabled and rig.drive.state != "Running"
        hb = c.get_node(ua.NodeId("Axis1.Heartbeat", idx))
        with pytest.raises(ua.UaStatusCodeError):
            await hb.write_value(ua.Variant(12345, ua.VariantType.UInt32))
        # reading, stopping and disabling stay open
        assert await c.get_node(ua.NodeId("Axis1.State", idx)).read_value() in ("Idle", "Loaded", "Done",
                                                                                 "Stopped", "Fault")
        assert (await call("Stop"))[0] == 0 and (await call("Disable"))[0] == 0


async def test_anonymous_heartbeat_does_not_feed_the_watchdog(rig):
    d = ServoDrive(_dev(rig.endpoints["secure"], security=_sec(rig.pki)))
    await d.connect()
    try:
        await d.clear_fault()
        await d.enable()
        assert rig.drive.enabled
        d._hb_task.cancel()  # the secure client goes quiet ...
        async with Client(rig.endpoints["plain"]) as c:  # ... and an anonymous one tries to stand in
            idx = await c.get_namespace_index(NS)
            hb = c.get_node(ua.NodeId("Axis1.Heartbeat", idx))
            for i in range(60):
                try:
                    await hb.write_value(ua.Variant(i, ua.VariantType.UInt32))
                except ua.UaStatusCodeError:
                    pass
                if rig.drive._values["FaultCode"] == 2:
                    break
                await asyncio.sleep(0.05)
        assert rig.drive._values["FaultCode"] == 2 and not rig.drive.enabled  # watchdog tripped
    finally:
        d._connected = False
        await d.close()
