"""`hil ctl status` reports the plan's progress as the run's progress bar counts it: steps finished of the
total, counted from 1, with the last step's description; the next checkpoint's label is the next number."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from daq import rigs
from daq.cli.main import main
from daq.cli.rig import progress_line
from daq.run.commands import CommandClient, CommandServer
from daq.run.control import operator_name
from tests.beacon_rig import BeaconRig, RunThread
from tests.polling import finished, poll_until


def test_the_progress_line_counts_as_the_bar():
    assert progress_line({"done": 3, "total": 10, "label": "series 1 step  3 q_d=  3000 N"}) == (
        "3 of 10 steps done (last: series 1 step 3 q_d= 3000 N)")
    assert progress_line({"done": 0, "total": None, "label": None}) == "0 steps done"


@pytest.fixture
def beacon():
    rig = rigs.register(BeaconRig())
    yield rig
    rigs.unregister("beacon")


def test_status_of_a_paused_run_names_the_steps_done_and_the_stop_names_the_next(beacon, tmp_path):
    runner = RunThread({"rig": {"kind": "beacon"}}, tmp_path / "s.sqlite", beacon)
    runner.thread.start()
    store = ["--store", str(tmp_path / "s.sqlite")]
    try:
        runner.announcement()
        res = CliRunner().invoke(main, [*store, "ctl", "pause", "--json"])
        assert res.exit_code == 0, res.output
        seen: list[dict] = []

        def parked() -> bool:
            """Paused, and the plan has finished the step it was in (20 ms) and waits at its next
            checkpoint: the count of steps done no longer moves between polls."""
            seen.append(json.loads(CliRunner().invoke(main, [*store, "ctl", "status", "--json"]).output))
            return len(seen) > 1 and seen[-1]["state"] == "paused" and (
                seen[-1]["progress"]["done"] == seen[-2]["progress"]["done"])

        poll_until(parked, timeout=30.0, period=0.1)
        first = seen[-1]["progress"]
        res = CliRunner().invoke(main, [*store, "ctl", "status"])
        status = json.loads(CliRunner().invoke(main, [*store, "ctl", "status", "--json"]).output)
        done = status["progress"]["done"]
        assert status["state"] == "paused" and done == first["done"] >= 1  # paused: no step moves
        assert status["progress"] == {"done": done, "total": 10_000, "label": f"frame {done}"}
        assert f"{done} of 10000 steps done (last: frame {done})" in res.output, res.output
        res = CliRunner().invoke(main, [*store, "ctl", "stop"])
        assert res.exit_code == 0, res.output
        runner.thread.join(30)
    finally:
        runner.stop()
    assert runner.result is not None and runner.result.safe
    who = f"{operator_name()}, hil ctl"  # the OS user (or $HIL_USER) the command was recorded with
    assert runner.result.reason == f"stopped by the operator ({who}) before frame {done + 1}"


async def test_the_reply_to_the_command_that_ends_the_server_still_arrives():
    """`hil ctl stop` ends the run, which closes the command server right after the reply: a client with
    ZMQ_IMMEDIATE lost that reply ("no reply within 3 s") before the server kept its connections a moment."""
    for _ in range(5):
        server = CommandServer(handlers={"stop": lambda: {"stopped": True}}).start()

        async def close_when_served(server=server) -> None:
            while server.served == 0:
                await asyncio.sleep(0.001)
            await server.stop()
            server.close()

        closer = asyncio.ensure_future(close_when_served())
        try:
            async with CommandClient(server.endpoint) as client:
                assert await client.request("stop", timeout=5) == {"stopped": True}
        finally:
            await finished(closer, 10)
