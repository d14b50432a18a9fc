"""A run whose bus leaves the machine (CURVE on a non-loopback address of this host) runs, records, and is
controlled by `hil ctl` and tapped by `hil tap`/`hil watch` holding the client key (--keys or $HIL_KEYS);
a client without it, with another server's key or with a key the run does not authorize gets one clear
error line within the timeout (real ZeroMQ sockets and the real run lifecycle; the rig is a minimal one
defined here)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from loopback_guard import own_addresses

from daq.bus.keys import create_keys
from daq.cli.main import main
from daq.store.read_write import SessionStore
from tests.beacon_rig import RunThread


def lan_address() -> str | None:
    """A non-loopback IPv4 address of this host's own interfaces (asked of the kernel, nothing sent):
    traffic to it stays on this machine, so the loopback fence lets it through."""
    own = sorted(str(a) for a in own_addresses() if a.version == 4 and not a.is_loopback)
    return own[0] if own else None


ADDRESS = lan_address()
pytestmark = pytest.mark.skipif(ADDRESS is None, reason="this host has no non-loopback IPv4 address")


@pytest.fixture
def secured_run(beacon, tmp_path):
    keys = create_keys(tmp_path / "keys")
    config = {"rig": {"kind": "beacon", "name": "beacon"},
              "bus": {"data": f"tcp://{ADDRESS}:0", "command": f"tcp://{ADDRESS}:0",
                      "tap": f"tcp://{ADDRESS}:0", "keys": str(keys.directory)}}
    runner = RunThread(config, tmp_path / "s.sqlite", beacon)
    runner.thread.start()
    try:
        yield runner, keys, runner.announcement()
    finally:
        runner.stop()


def hil(tmp_path: Path, *args: str, keys_env: str | None = None):
    """`hil --store S ARGS` with $HIL_KEYS as given and no keys folder in the (test's) home."""
    env = {"HIL_KEYS": keys_env, "XDG_CONFIG_HOME": str(tmp_path / "no-config"), "HIL_STORE": None}
    return CliRunner().invoke(main, ["--store", str(tmp_path / "s.sqlite"), *args], env=env)


def one_error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


def test_a_secured_run_beyond_loopback_records_and_is_controlled_with_the_client_key(secured_run, tmp_path):
    runner, keys, announced = secured_run
    for name in ("command", "data", "tap"):
        assert announced[name].startswith(f"tcp://{ADDRESS}:"), announced
    res = hil(tmp_path, "ctl", "status", "--keys", str(keys.directory), "--json")
    assert res.exit_code == 0, res.output
    status = json.loads(res.output)
    assert status["kind"] == "beacon" and status["state"] == "running"
    assert status["progress"]["total"] == 10_000 and status["progress"]["done"] >= 2
    assert status["progress"]["label"] == f"frame {status['progress']['done']}"  # counted from 1, as the bar
    res = hil(tmp_path, "ctl", "status", keys_env=str(keys.directory))  # $HIL_KEYS is the default
    assert res.exit_code == 0, res.output
    assert "beacon session" in res.output and "steps done (last: frame " in res.output
    res = hil(tmp_path, "tap", "beacon.x", "--endpoint", announced["tap"], "--keys", str(keys.directory),
                 "-n", "3", "--timeout", "10")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == 3 and all(ln.startswith("beacon.x #") for ln in lines), res.output
    res = hil(tmp_path, "watch", "--keys", str(keys.directory), "--timeout", "0.3")
    assert res.exit_code == 0 and "no estimate from" in res.output, res.output
    res = hil(tmp_path, "ctl", "stop", "--keys", str(keys.directory))
    assert res.exit_code == 0, res.output
    runner.thread.join(30)
    result = runner.result
    assert result is not None and result.safe and "stopped by the operator" in result.reason, runner.error
    assert runner.rig.lamp.safe and not runner.rig.lamp.on
    with SessionStore(tmp_path / "s.sqlite") as store:
        info = store.get_session(result.session_id)
        frames = store.read_stream(result.session_id, "beacon.x")
        (outcome,) = [e.body for e in store.events(result.session_id, kind="plan_outcome")]
    published = runner.ctx.steps_done  # one frame of 10 rows per step; how many depends on the machine's pace
    assert published >= 3  # the tap above read three
    assert info.status == result.status  # every frame got through CURVE (the last may be cut by the stop):
    assert 10 * published <= frames.data.shape[0] <= 10 * (published + 1)
    assert outcome["safe"] is True


def test_clients_without_the_right_keys_fail_with_one_clear_line_at_once(secured_run, tmp_path):
    """"At once": each refusal names the handshake's verdict (no keys, wrong server key, not authorized),
    which only the handshake event gives; a client that waited out its timeout says "no answer ... within"
    instead (daq/bus/handshake.py)."""
    runner, keys, announced = secured_run
    res = hil(tmp_path, "ctl", "status", "--timeout", "3")
    assert "secured with CURVE" in one_error_line(res) and "--keys" in res.output
    res = hil(tmp_path, "tap", "--endpoint", announced["tap"])  # no --timeout: still bounded
    assert "secured with CURVE" in one_error_line(res) and "--keys" in res.output
    res = hil(tmp_path, "watch", "--endpoint", announced["data"])
    assert "secured with CURVE" in one_error_line(res)

    other = create_keys(tmp_path / "other")  # another service's keys: the wrong server key
    res = hil(tmp_path, "ctl", "status", "--keys", str(other.directory), "--timeout", "3")
    assert "is not the public key of that server" in one_error_line(res)
    res = hil(tmp_path, "tap", "--endpoint", announced["tap"], "--keys", str(other.directory))
    assert "is not the public key of that server" in one_error_line(res)

    stranger = tmp_path / "stranger"  # the right server key, a client key the run never authorized
    stranger.mkdir(mode=0o700)
    shutil.copy(keys.directory / "server.key", stranger / "server.key")
    for name in ("client.key", "client.key_secret"):
        shutil.copy(other.directory / name, stranger / name)
        os.chmod(stranger / name, 0o600)
    res = hil(tmp_path, "ctl", "status", "--keys", str(stranger), "--timeout", "3")
    assert "not authorized" in one_error_line(res)
    assert runner.ctx.state == "running" and runner.thread.is_alive()  # nothing reached the run


def test_a_plain_loopback_run_needs_no_keys_even_with_a_keys_folder_in_the_environment(beacon, tmp_path):
    keys = create_keys(tmp_path / "keys")
    runner = RunThread({"rig": {"kind": "beacon"}}, tmp_path / "s.sqlite", beacon)
    runner.thread.start()
    try:
        runner.announcement()
        res = hil(tmp_path, "ctl", "status", "--json", keys_env=str(keys.directory))
        assert res.exit_code == 0 and json.loads(res.output)["state"] == "running", res.output
        # named keys are used as they are: not the run's own (it keys its command channel itself), refused
        res = hil(tmp_path, "ctl", "status", "--keys", str(keys.directory))
        assert "is not the public key of that server" in one_error_line(res)
    finally:
        runner.stop()
