"""The suite's loopback fence (tests/loopback_guard.py, tests/loopback_fence.py) fails a test that reaches
beyond this machine or opens a serial device it did not create - also when the code swallows the error,
when it goes through asyncio, and when a child Python process does it - and lets loopback and a pty the
test made through. Observed in a nested pytest run (one process, and two pytest-xdist workers), so the
failures are seen here, not suffered; the fence's temporary folder goes with the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

INNER = '''
import asyncio
import os
import socket
import subprocess
import sys

import serial


def test_connect_to_test_net():
    with socket.socket() as s:
        s.settimeout(0.5)
        try:
            s.connect(("192.0.2.1", 502))
        except OSError:
            pass  # swallowed, as a driver's reconnect loop would: the fence still fails the test


def test_asyncio_connection_to_test_net():
    async def go():
        try:
            await asyncio.wait_for(asyncio.open_connection("192.0.2.1", 502), 0.5)
        except (OSError, asyncio.TimeoutError):
            pass
    asyncio.run(go())


def test_name_lookup_of_a_lan_host():
    try:
        socket.create_connection(("press.lab.invalid", 502), timeout=0.5)
    except OSError:
        pass


def test_udp_datagram_to_test_net():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.sendto(b"x", ("192.0.2.1", 9))
        except OSError:
            pass


def test_bind_to_all_interfaces():
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", 0))
        except OSError:
            pass


def test_serial_device_it_did_not_create():
    try:
        serial.Serial("/dev/ttyUSB0", timeout=0.1)
    except Exception:
        pass


def test_child_process_connects_to_test_net():
    code = ("import socket\\ntry:\\n socket.create_connection(('192.0.2.1', 502), 0.5)\\n"
            "except OSError:\\n pass")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_loopback_and_a_pty_it_made_are_fine():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        with socket.create_connection(("localhost", server.getsockname()[1]), timeout=5):
            pass
    master, slave = os.openpty()
    port = serial.Serial(os.ttyname(slave), timeout=0.1)
    port.write(b"ok")
    assert os.read(master, 2) == b"ok"
    port.close()
    os.close(master)
    os.close(slave)
'''

REFUSED = {  # inner test -> words its failure must carry
    "test_connect_to_test_net": "connect to ('192.0.2.1', 502)",
    "test_asyncio_connection_to_test_net": "connect to ('192.0.2.1', 502)",
    "test_name_lookup_of_a_lan_host": "name lookup of 'press.lab.invalid'",
    "test_udp_datagram_to_test_net": "sendto ('192.0.2.1', 9)",
    "test_bind_to_all_interfaces": "bind to ('0.0.0.0', 0)",
    "test_serial_device_it_did_not_create": "open of the serial device /dev/ttyUSB0",
    "test_child_process_connects_to_test_net": "(child) loopback guard: connect to ('192.0.2.1', 502)",
}


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["one process", "two workers"])
def test_the_fence_fails_each_test_that_reaches_beyond_loopback_and_passes_the_one_that_does_not(tmp_path,
                                                                                                 workers):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    env = {k: v for k, v in os.environ.items() if k != "HIL_TEST_GUARD_LOG"}  # the inner run has its own log
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "1000"  # the summary lines whole
    env["TMPDIR"] = str(tmp_path / "tmp")  # where the inner fence makes its log's folder
    (tmp_path / "tmp").mkdir()
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "loopback_fence", "-p", "no:cacheprovider",
                          *workers, "-q", "-rfEp", "test_inner.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    summary = [ln for ln in out.splitlines() if ln.startswith(("FAILED ", "ERROR ", "PASSED "))]
    failed = {ln.split("::", 1)[1].split(" ", 1)[0]: ln for ln in summary if ln.startswith("FAILED ")}
    assert set(failed) == set(REFUSED), out
    for name, words in REFUSED.items():
        assert "loopback guard: " in failed[name] and words in failed[name], failed[name]
    assert "PASSED test_inner.py::test_loopback_and_a_pty_it_made_are_fine" in summary, out
    assert not [ln for ln in summary if ln.startswith("ERROR ")], out
    assert not list((tmp_path / "tmp").glob("hil-guard-*")), "the fence's log folder outlived its pytest run"
