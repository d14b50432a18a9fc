"""A dashboard replay always tells the live view that it ended - also one stopped (or failed) before it
reached the relay, which happens when a queued run becomes due right after the replay was asked for."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from daq.bus.frames import Frame
from daq.serve.relay import LiveRelay
from daq.serve.replays import Replayer
from daq.store.read_write import SessionStore
from tests.polling import wait_until


def recorded_session(path) -> str:
    store = SessionStore(path)
    sid = store.create_session("press", {})
    for i in range(5):
        store.append(sid, Frame("s", i, 50.0 + 0.1 * i, 0.01, ["a"], ["m"], np.full((10, 1), float(i))))
    store.finish(sid, "complete")
    store.close()
    return sid


def sent(client) -> list[dict]:
    out = []
    while not client.queue.empty():
        out.append(json.loads(client.queue.get_nowait()))
    return out


def replays(msgs: list[dict], state: str) -> list[dict]:
    """The replay entries of the live view's messages of ``state``."""
    return [m["replay"] for m in msgs if m["type"] == "replay" and m["state"] == state]


def idle_runner() -> SimpleNamespace:
    """What the replayer asks of the server's runner: no run queued or ending."""
    return SimpleNamespace(queue=SimpleNamespace(current=None), active=False)


async def looping_replay(tmp_path):
    """A relay with one browser, and a looping replay of a recorded session just started into it."""
    sid = recorded_session(tmp_path / "s.sqlite")
    relay = LiveRelay()
    browser = relay.connect()
    replayer = Replayer(tmp_path / "s.sqlite", relay, idle_runner())
    entry = await replayer.start(sid, speed=1.0, loop=True, by="tester")
    return relay, browser, replayer, entry


async def test_a_replay_stopped_before_it_reached_the_relay_is_still_announced_as_ended(tmp_path):
    relay, browser, replayer, entry = await looping_replay(tmp_path)
    stopped = await replayer.stop("a queued run started")  # before its thread has attached to the relay
    assert stopped is entry and entry.status == "stopped" and replayer.current is None
    ended = replays(sent(browser), "ended")
    assert [(e["id"], e["status"], e["reason"]) for e in ended] == [
        (entry.id, "stopped", "a queued run started")]
    assert relay.replay is None


async def test_a_replay_stopped_while_it_plays_is_announced_as_ended_once(tmp_path):
    relay, browser, replayer, entry = await looping_replay(tmp_path)
    await wait_until(lambda: relay.replay is not None, timeout=10)
    assert relay.replay["id"] == entry.id
    await replayer.stop()
    msgs = sent(browser)
    assert [r["id"] for r in replays(msgs, "started")] == [entry.id]
    assert [(e["id"], e["status"], e["reason"]) for e in replays(msgs, "ended")] == [
        (entry.id, "stopped", "stopped by the operator")]
