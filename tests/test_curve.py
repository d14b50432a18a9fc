"""CURVE on the command channel and the data bus: keys on disk, the loopback rule, and clients
without the server's key or without an authorized key getting nothing accepted (real sockets)."""

from __future__ import annotations

import asyncio
import os
import stat

import numpy as np
import pytest
import zmq
import zmq.asyncio
from click.testing import CliRunner

from daq.bus.frames import Frame
from daq.bus.keys import (
    CurveKeys,
    InsecureEndpoint,
    KeysError,
    authorize,
    create_keys,
    is_local,
    load_keys,
    release_server,
    secure_server,
)
from daq.bus.pubsub import BusPublisher, BusSubscriber, BusTimeout
from daq.cli.main import main
from daq.run.commands import CommandClient, CommandServer, CommandTimeout


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def keys(tmp_path) -> CurveKeys:
    return create_keys(tmp_path / "keys")


def local(endpoint: str) -> str:
    """A wildcard-bound endpoint as a client on this machine reaches it."""
    return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]


def test_keys_are_private_files_and_are_not_overwritten(keys, tmp_path):
    d = keys.directory
    assert mode(d) == 0o700 and mode(d / "authorized") == 0o700
    files = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert files == [
        "authorized/client.key",
        "client.key",
        "client.key_secret",
        "server.key",
        "server.key_secret",
    ]
    assert all(mode(d / f) == 0o600 for f in files)
    assert keys.server_secret is not None and keys.client_secret is not None
    assert keys.authorized() == {keys.client_public}
    with pytest.raises(KeysError, match="already exist"):
        create_keys(d)
    assert create_keys(d, force=True).server_public != keys.server_public


def test_keys_readable_by_others_are_refused(keys):
    os.chmod(keys.directory / "server.key_secret", 0o644)
    with pytest.raises(KeysError, match="accessible by other users"):
        load_keys(keys.directory)
    os.chmod(keys.directory / "server.key_secret", 0o600)
    os.chmod(keys.directory, 0o755)
    with pytest.raises(KeysError, match="accessible by other users"):
        load_keys(keys.directory)


def test_hil_keys_command_makes_and_shows_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("HIL_KEYS", str(tmp_path / "k"))
    r = CliRunner().invoke(main, ["keys", "init"])
    assert r.exit_code == 0, r.output
    assert mode(tmp_path / "k") == 0o700 and mode(tmp_path / "k" / "server.key_secret") == 0o600
    r = CliRunner().invoke(main, ["keys", "show"])
    k = load_keys(tmp_path / "k")
    assert r.exit_code == 0 and k.server_public.decode() in r.output and "1 client key" in r.output
    assert k.server_secret.decode() not in r.output and k.client_secret.decode() not in r.output
    r = CliRunner().invoke(main, ["keys", "init"])
    assert r.exit_code == 1 and r.output.startswith("Error: keys already exist")


def test_loopback_rule():
    assert is_local("tcp://127.0.0.1:0") and is_local("tcp://[::1]:5") and is_local("tcp://localhost:5")
    assert is_local("ipc:///tmp/x") and is_local("inproc://bus")
    for ep in ["tcp://0.0.0.0:0", "tcp://*:5561", "tcp://192.168.1.20:5561", "tcp://eth0:5561"]:
        assert not is_local(ep)


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:0", "tcp://*:0"])
async def test_binding_beyond_loopback_without_keys_is_refused(endpoint):
    with pytest.raises(InsecureEndpoint, match="without CURVE keys"):
        CommandServer(endpoint)
    with pytest.raises(InsecureEndpoint, match="without CURVE keys"):
        BusPublisher(endpoint)
    with pytest.raises(InsecureEndpoint, match="data bus tap"):
        BusPublisher(tap_endpoint=endpoint)


async def test_only_an_authorized_client_with_the_server_key_gets_commands_accepted(keys, tmp_path):
    accepted: list = []

    async def set_force(force_N: float) -> dict:
        accepted.append(force_N)
        return {"accepted": force_N}

    other = create_keys(tmp_path / "other")  # another service's keys: wrong server key
    stranger = load_keys(keys.directory)
    stranger = CurveKeys(  # right server key, but a client key pair nobody authorized
        keys.directory, keys.server_public, None, other.client_public, other.client_secret
    )
    async with CommandServer("tcp://0.0.0.0:0", handlers={"set_force": set_force}, keys=keys) as server:
        endpoint = local(server.endpoint)
        for bad_keys in [None, other, stranger]:
            async with CommandClient(endpoint, keys=bad_keys) as client:
                with pytest.raises(CommandTimeout):
                    await client.request("set_force", timeout=0.5, force_N=100.0)
        assert accepted == [] and server.served == 0
        async with CommandClient(endpoint, keys=keys) as client:
            assert await client.request("set_force", timeout=10, force_N=200.0) == {"accepted": 200.0}
    assert accepted == [200.0] and server.served == 1


async def test_a_newly_authorized_client_is_accepted_by_a_new_server(keys, tmp_path):
    other = create_keys(tmp_path / "other")
    authorize(other.directory / "client.key", keys.directory)
    guest = CurveKeys(keys.directory, keys.server_public, None, other.client_public, other.client_secret)
    async with CommandServer("tcp://0.0.0.0:0", keys=keys) as server:
        async with CommandClient(local(server.endpoint), keys=guest) as client:
            assert (await client.request("ping", timeout=10))["pong"] is True


async def test_data_bus_with_curve_delivers_to_authorized_subscribers_only(keys):
    pub = BusPublisher("tcp://0.0.0.0:0", keys=keys, tap_endpoint="tcp://0.0.0.0:0")
    good = BusSubscriber(local(pub.endpoint), keys=keys)
    plain = BusSubscriber(local(pub.endpoint))
    tap_plain = BusSubscriber(local(pub.tap_endpoint))
    tap_good = BusSubscriber(local(pub.tap_endpoint), keys=keys)
    try:
        await pub.wait_for_subscribers(1, timeout=10)
        data = np.arange(6.0).reshape(3, 2)
        async with asyncio.timeout(20):
            while True:  # the tap is lossy: publish until its (slow-joining) subscriber has one
                await pub.publish(Frame("t.s", pub.next_seq("t.s"), 1.0, 0.1, ["a", "b"], ["m", "m"], data))
                try:
                    got_tap = await tap_good.recv(timeout=0.05)
                    break
                except BusTimeout:
                    pass
        got = await good.recv(timeout=10)
        np.testing.assert_array_equal(got.data, data)
        np.testing.assert_array_equal(got_tap.data, data)
        assert pub.subscriptions == 1  # the plain subscriber never completed a handshake
        for sub in (plain, tap_plain):
            with pytest.raises(BusTimeout):
                await sub.recv(timeout=0.3)
    finally:
        for s in (good, plain, tap_plain, tap_good):
            s.close()
        pub.close()


async def test_servers_closed_and_opened_in_quick_succession_never_find_the_zap_endpoint_taken(keys):
    """The last server's close stops the context's authenticator and the next server starts one:
    closing alone left ``inproc://zeromq.zap.01`` bound until ZeroMQ's reaper thread ran, so a
    quick successor failed with EADDRINUSE (1 in 20 here near idle, more under load, once in CI)."""
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.PUB)  # never bound: only the authenticator's start and stop are timed
    try:
        for _ in range(5000):
            release_server(ctx, secure_server(sock, ctx, keys))
    finally:
        sock.close(linger=0)
    async with CommandServer("tcp://0.0.0.0:0", keys=keys) as server:  # and CURVE still works after
        async with CommandClient(local(server.endpoint), keys=keys) as client:
            assert (await client.request("ping", timeout=10))["pong"] is True
