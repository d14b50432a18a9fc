"""How a run ends when it is not asked nicely: SIGTERM / SIGHUP (service stop, closed terminal) stop it
at once through the safe state, a run killed by SIGKILL leaves no announcement that `hil ctl` trips over,
and an abort by a stalled bus still records its ``plan_outcome``."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from click.testing import CliRunner

from daq.bus.pubsub import BusStalled
from daq.cli.main import main
from daq.rigs.config import load_config
from daq.run.announce import live_runs, runs_dir
from daq.run.commands import CommandServer
from daq.run.lifecycle import RunContext
from daq.run.safety import OperatorStop
from daq.store.read_write import SessionStore
from simulators.press_rig import PressRig
from tests.in_process_runs import run_in_process
from tests.polling import finished, wait_until

PRESS_SIM = Path("configs/press-sim.toml").read_text()
HIL = Path(sys.executable).parent / "hil"  # the installed console script


def press_config_file(tmp_path: Path, n_series: int = 3, n_steps_up: int = 4) -> Path:
    """The shipped simulated press config with a plan long enough to be interrupted."""
    text = re.sub(r"(?m)^n_series = \d+", f"n_series = {n_series}", PRESS_SIM)
    text = re.sub(r"(?m)^n_steps_up = \d+", f"n_steps_up = {n_steps_up}", text)
    text = re.sub(r"(?m)^n_samples = \d+", "n_samples = 4", text)
    path = tmp_path / "press-long.toml"
    path.write_text(text)
    return path


def _measurements(store_path: Path) -> int:
    if not store_path.exists():
        return 0
    try:
        with SessionStore(store_path, recover=False) as reader:
            sessions = reader.list_sessions()
            return len(reader.events(sessions[0].id, kind="measurement")) if sessions else 0
    except Exception:  # noqa: BLE001 - the writer may be creating the file right now
        return 0


@pytest.mark.slow(reason="a simulated press run in a `hil run` subprocess")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_the_run_through_the_safe_state(tmp_path, sig):
    cfg = press_config_file(tmp_path)
    store_path = tmp_path / "s.sqlite"
    proc = subprocess.Popen([str(HIL), "--store", str(store_path), "run", str(cfg), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while _measurements(store_path) < 2:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the plan did not get going"
            time.sleep(0.2)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out  # ended by itself: aborted, safe state confirmed (2 = not safe)
    assert "Traceback" not in out
    with SessionStore(store_path) as store:
        (info,) = store.list_sessions()
        outcome = [e.body for e in store.events(info.id, kind="plan_outcome")]
    assert info.status == "aborted" and info.reason == sig.name
    assert outcome and outcome[-1]["safe"] is True and outcome[-1]["status"] == "aborted"
    assert outcome[-1]["reason"] == sig.name
    assert not list(runs_dir(store_path).glob("*.json"))  # the announcement went with the run


@pytest.mark.slow(reason="a simulated press run in a `hil run` subprocess")
def test_sighup_after_the_terminal_is_gone_still_finishes_the_session(tmp_path):
    """A closed terminal: SIGHUP arrives and stdout/stderr are dead pipes. The progress bar's last write
    (rich raises SystemExit on EPIPE) used to end the clean-up before the session was finished."""
    cfg = press_config_file(tmp_path)
    store_path = tmp_path / "s.sqlite"
    proc = subprocess.Popen([str(HIL), "--store", str(store_path), "run", str(cfg)],  # with the progress bar
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _measurements(store_path) < 2:
            assert proc.poll() is None, "the run ended early"
            assert time.monotonic() < deadline, "the plan did not get going"
            time.sleep(0.2)
        proc.stdout.close()
        proc.stderr.close()
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=60) == 1  # aborted, safe state confirmed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with SessionStore(store_path) as store:
        (info,) = store.list_sessions()
        outcome = [e.body for e in store.events(info.id, kind="plan_outcome")]
    assert info.status == "aborted" and info.reason == "SIGHUP"
    assert outcome and outcome[-1]["safe"] is True


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: no such process any more
    return proc.pid


def _announce(store_path: Path, session: str, pid: int, command: str = "tcp://127.0.0.1:9") -> Path:
    folder = runs_dir(store_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.json"
    path.write_text(json.dumps({"session": session, "kind": "press", "command": command, "tap": None,
                                "data": "tcp://127.0.0.1:9", "pid": pid, "started": time.time()}))
    return path


def test_a_killed_runs_announcement_is_removed_and_not_counted(tmp_path):
    store_path = tmp_path / "s.sqlite"
    stale = _announce(store_path, "aaaa-killed", _dead_pid())
    res = CliRunner().invoke(main, ["--store", str(store_path), "ctl", "status"])
    assert res.exit_code != 0 and "no running session found" in res.output
    assert "several runs" not in res.output
    assert not stale.exists()


async def test_ctl_picks_the_live_run_next_to_a_killed_ones_announcement(tmp_path):
    store_path = tmp_path / "s.sqlite"
    server = CommandServer(handlers={"status": lambda: {"session": "bbbb-live", "kind": "press",
                                                        "state": "running"}}).start()
    try:
        stale = _announce(store_path, "aaaa-killed", _dead_pid())
        live = _announce(store_path, "bbbb-live", os.getpid(), server.endpoint)
        proc = await asyncio.create_subprocess_exec(
            str(HIL), "--store", str(store_path), "ctl", "status", "--json", "--timeout", "20",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
        server.close()
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["session"] == "bbbb-live"
    assert not stale.exists() and live.exists()
    assert [r["session"] for r in live_runs(store_path)] == ["bbbb-live"]


def test_announcements_without_a_pid_or_of_live_processes_are_kept(tmp_path):
    store_path = tmp_path / "s.sqlite"
    mine = _announce(store_path, "cccc", os.getpid())
    legacy = runs_dir(store_path) / "dddd.json"
    legacy.write_text(json.dumps({"session": "dddd", "command": "tcp://127.0.0.1:9"}))
    assert sorted(r["session"] for r in live_runs(store_path)) == ["cccc", "dddd"]
    assert mine.exists() and legacy.exists()


@pytest.mark.slow(reason="a simulated press run until a stuck subscriber stalls the bus")
async def test_a_bus_stalled_abort_records_its_plan_outcome(tmp_path):
    """A subscriber of the lossless data endpoint that stops reading aborts the run ("bus stalled"); the
    bus cannot carry the plan_outcome any more, so it goes into the store directly."""
    cfg = copy.deepcopy(load_config("configs/press-sim.toml"))
    cfg["plan"].update(n_series=50, n_steps_up=3, n_samples=4, settle_time=0.02, q_max=12000.0)
    cfg["correction"].update(tolerance=60.0, max_iterations=6)
    cfg["bus"].update(data=f"inproc://run-ends-{uuid.uuid4().hex}", send_timeout=0.5)  # no kernel buffers
    store_path = tmp_path / "s.sqlite"
    seen: list[RunContext] = []
    stuck = zmq.asyncio.Context.instance().socket(zmq.SUB)
    stuck.setsockopt(zmq.LINGER, 0)
    stuck.setsockopt(zmq.RCVHWM, 1)

    async def fill_its_queue(ctx: RunContext) -> None:
        """Publish until the stuck subscriber's queue is full (not minutes of plan traffic)."""
        with contextlib.suppress(BusStalled):
            for _ in range(5000):
                await ctx.event("test.flood", "flood")

    try:
        async with PressRig(cfg) as rig:
            task = asyncio.ensure_future(run_in_process(cfg, store_path, show_progress=False,
                                                        handle_sigint=False, simulated_rig=rig,
                                                        on_context=seen.append))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while _measurements(store_path) < 1:
                assert loop.time() < deadline and not task.done(), "the plan did not get going"
                await asyncio.sleep(0.2)
            stuck.subscribe(b"")
            stuck.connect(seen[0].publisher.endpoint)  # and never reads a single message
            await seen[0].publisher.wait_for_subscribers(seen[0].publisher.subscriptions + 1)
            await fill_its_queue(seen[0])
            result = await finished(task, 120.0)
    finally:
        stuck.close(linger=0)
    assert result.status == "aborted" and "bus stalled" in result.reason, result.reason
    assert result.safe
    with SessionStore(store_path) as store:
        info = store.get_session(result.session_id)
        outcome = [e.body for e in store.events(result.session_id, kind="plan_outcome")]
    assert info.status == "aborted" and info.reason == result.reason
    assert len(outcome) == 1
    assert outcome[0]["safe"] is True and outcome[0]["status"] == "aborted"
    assert "bus stalled" in outcome[0]["reason"]


async def test_the_stop_handlers_are_ours_during_the_run_only():
    """SIGTERM/SIGHUP handlers are installed with the run's and the previous ones are put back."""
    def previous(signum, frame):  # pragma: no cover - never delivered
        pass

    before = {s: signal.signal(s, previous) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        cancelled: list[bool] = []
        target = asyncio.get_running_loop().create_future()
        stopper = OperatorStop(target=target, on_first=lambda: cancelled.append(True)).install(
            sigint=False, terminate=True)
        assert signal.getsignal(signal.SIGTERM) is not previous
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_until(lambda: stopper.terminated is not None, timeout=10.0)
        assert stopper.terminated == "SIGTERM" and stopper.requested and cancelled and target.cancelled()
        stopper.uninstall()
        assert signal.getsignal(signal.SIGTERM) is previous and signal.getsignal(signal.SIGHUP) is previous
    finally:
        for s, h in before.items():
            signal.signal(s, h)
