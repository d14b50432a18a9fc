"""The control path of a run is authenticated always, on loopback too (issue 33 item 1): another OS user can
neither read a run's announcement nor get a command accepted by its command channel, even knowing its port;
the owner's `hil ctl` works unchanged; every command is recorded with who gave it and shows in `hil show`
and the exports; `hil serve`'s API abort and its shutdown record different reasons. Real run lifecycle,
real ZeroMQ sockets, a real second OS user made by the test."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from daq import rigs
from daq.cli.main import main
from daq.run.announce import runs_dir
from daq.run.control import operator_name
from daq.serve.configs import ConfigFolder
from daq.serve.relay import LiveRelay
from daq.serve.run_queue import RunQueue
from daq.serve.runner import Runner
from daq.store.read_write import SessionStore
from tests.beacon_rig import BeaconRig, RunThread
from tests.other_user import as_user, other_user  # noqa: F401 - the fixture of a second OS user
from tests.polling import poll_until, wait_until

ROOT = Path(__file__).resolve().parents[1]


# closes its socket and ends its context itself: left to the interpreter's exit, the context's end can wait
# on a socket not yet collected (one run of .ci/run hung here for the subprocess's whole 60 s)
RAW_CLIENT = """
import json, sys, time, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, 0)
sock.connect(sys.argv[1])
sock.send_multipart([b"", json.dumps({"id": "x", "cmd": "pause", "args": {}}).encode()])
print("reply" if sock.poll(1500) else "no reply", flush=True)
sock.close(0)
ctx.term()
"""


def test_another_os_user_gets_no_command_accepted_and_the_owners_are_recorded(beacon, other_user):  # noqa: F811
    shared = Path(tempfile.mkdtemp(prefix="hil-shared-", dir="/tmp"))
    os.chmod(shared, 0o755)  # a lab folder every user may look into
    store = shared / "s.sqlite"
    runner = RunThread({"rig": {"kind": "beacon"}}, store, beacon)
    runner.thread.start()
    try:
        announced = runner.announcement()
        folder = runs_dir(store)
        (path,) = folder.glob("*.json")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600

        # the other user: the announcement is out of reach, and the port alone gets nothing accepted
        cli = ["-c", "from daq.cli.main import main; main()",
               "--store", str(store), "ctl", "pause", "--timeout", "3"]
        res = as_user(other_user, *cli)
        assert res.returncode == 1 and "private to the OS user" in res.stderr, res.stderr
        res = as_user(other_user, *cli, "--endpoint", announced["command"])
        assert res.returncode != 0 and "CURVE" in res.stderr and "Traceback" not in res.stderr, res.stderr
        res = as_user(other_user, "-c", RAW_CLIENT, announced["command"])
        assert res.stdout.strip() == "no reply", res.stderr
        assert runner.ctx.state == "running"

        # the owner: `hil ctl` as before, recorded with the operator's name
        res = CliRunner().invoke(main, ["--store", str(store), "ctl", "pause", "--json"])
        assert res.exit_code == 0 and json.loads(res.output)["state"] == "paused", res.output
        res = CliRunner().invoke(main, ["--store", str(store), "ctl", "abort"])
        assert res.exit_code == 0, res.output
        runner.thread.join(30)
    finally:
        runner.stop()
    who = f"{operator_name()}, hil ctl"
    assert runner.result.reason == f"aborted by the operator ({who})" and runner.result.safe
    sid = runner.result.session_id
    with SessionStore(store) as s:
        given = [(e.body["command"], e.body["by"]) for e in s.events(sid, kind="command")]
    assert given == [("pause", who), ("abort", who)]

    shown = CliRunner().invoke(main, ["--store", str(store), "show", sid])
    assert shown.exit_code == 0 and f"pause by {who}" in shown.output and f"abort by {who}" in shown.output
    detail = json.loads(CliRunner().invoke(main, ["--store", str(store), "show", sid, "--json"]).output)
    assert [(c["command"], c["by"]) for c in detail["commands"]] == given

    out = shared / "export"
    res = CliRunner().invoke(main, ["--store", str(store), "export", sid, "--format", "csv", "-o", str(out)])
    assert res.exit_code == 0, res.output
    (events,) = out.rglob("events.csv")
    with events.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("kind") == "command"]
    assert [json.loads(r["body"])["by"] for r in rows] == [who, who]
    shutil.rmtree(shared)


class _NoDevices:
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def device_config(self) -> dict:
        return {}


class SimulatedBeacon(BeaconRig):
    def simulator(self, raw):
        return _NoDevices()


async def test_an_api_abort_and_a_server_shutdown_record_different_reasons(tmp_path):
    rig = rigs.register(SimulatedBeacon())
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "beacon.toml").write_text('[rig]\nkind = "beacon"\nsimulated = true\n')
    store = tmp_path / "s.sqlite"
    queue = RunQueue.open(tmp_path)
    runner = Runner(queue, ConfigFolder(configs), store, LiveRelay()).start()
    try:
        def running_steps():
            return runner.ctx is not None and runner.ctx.steps_done >= 2

        entry = queue.add("beacon.toml", by="root")
        runner.poke()
        await wait_until(running_steps, timeout=30)
        reply = await runner.control(entry.id, "abort", by="root")
        assert reply["state"] == "stopping"
        await wait_until(lambda: queue.current is None and queue.finished, timeout=30)
        api = queue.finished[0]

        queue.add("beacon.toml", by="root")
        runner.poke()
        await wait_until(running_steps, timeout=30)
        await runner.shutdown("SIGTERM")
        shut = queue.finished[0]
    finally:
        if not runner.closing:
            await runner.shutdown()
        queue.close()
        rigs.unregister("beacon")
    assert api.reason == "aborted by the operator (token root)" and api.safe is True
    assert shut.reason == "hil serve stopped (SIGTERM) and aborted the run" and shut.safe is True
    assert rig.lamp.safe
    with SessionStore(store) as s:
        (cmd,) = s.events(api.session, kind="command")
        assert cmd.body == {"command": "abort", "by": "token root"}
        assert s.get_session(shut.session).reason == shut.reason


def test_a_stale_pid_is_a_zombie_too(tmp_path):
    """The run announcements and the store's crash recovery share one liveness check: a zombie (a child that
    exited and was not reaped) is gone for both."""
    from daq.run.announce import live_runs, write_announcement

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    poll_until(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][:1] == "Z", timeout=20)
    try:
        store = tmp_path / "s.sqlite"
        entry = {"session": "zzzz", "command": "tcp://127.0.0.1:9", "pid": child.pid}
        write_announcement(store, "zzzz", entry)
        assert live_runs(store) == [] and not list(runs_dir(store).glob("*.json"))
    finally:
        child.wait()


def test_the_serve_errors_join_the_one_error_tree():
    from daq.cli.common import exit_code
    from daq.errors import AccessError, ConflictError, HilError
    from daq.serve.auth import AuthError
    from daq.serve.replays import ReplayConflict
    from daq.serve.runner import NotRunning

    assert issubclass(NotRunning, ConflictError) and issubclass(ReplayConflict, ConflictError)
    assert issubclass(AuthError, AccessError) and issubclass(ConflictError, HilError)
    assert exit_code(NotRunning("x")) == exit_code(AuthError("x")) == 1  # one line, no traceback


def test_one_line_is_written_once():
    import daq.cli.common
    import daq.errors
    import daq.serve.configs

    assert daq.cli.common.one_line is daq.errors.one_line is daq.serve.configs.one_line
    assert daq.errors.one_line(ValueError("a\n  b")) == "a b"


async def test_a_command_that_meets_the_runs_loop_closing_is_not_running_and_leaves_no_coroutine(tmp_path):
    """The status poll of the live view asks the run for its status every 0.5 s; when that meets the
    moment the run's loop has closed and the run is not yet cleared, the answer is "not running" - and the
    command's coroutine is closed, not left to be collected with "coroutine ... was never awaited" (seen
    in the suite's output)."""
    import gc
    import warnings

    from daq.run.lifecycle import RunContext
    from daq.serve.runner import NotRunning

    queue = RunQueue.open(tmp_path)
    runner = Runner(queue, ConfigFolder(tmp_path), tmp_path / "s.sqlite", LiveRelay())
    queue.add("beacon.toml", by="root")
    queue.take()
    closed = asyncio.new_event_loop()
    closed.close()
    runner.ctx, runner._run_loop = RunContext(BeaconRig(), None, None), closed  # the run's last instant
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(NotRunning, match="just ended"):
                await runner.command("status")
            gc.collect()
        assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
    finally:
        queue.close()
