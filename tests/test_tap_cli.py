"""`hil tap` against real publishers: stream-name topics, replay flags, --timeout, the tap endpoint, keys."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from daq.bus.frames import Event, Frame
from daq.bus.keys import create_keys
from daq.bus.pubsub import BusPublisher
from daq.cli.bus import _tap_source, _tap_topics
from daq.cli.main import main


def run(*args):
    return CliRunner().invoke(main, list(args), env={"HIL_STORE": ""})


def messages(pub: BusPublisher, replay: bool = False) -> list:
    def frame(stream: str) -> Frame:
        seq = pub.next_seq(stream)
        return Frame(stream, seq, 1.0, 1e-3, ["x"], ["N"], np.full((2, 1), 2.5), replay=replay)

    return [
        frame("press.sensors"),
        frame("press.force"),
        Event("press.plan", "step", pub.next_seq("press.plan"), 1.0, {"i": 1}, replay=replay),
    ]


class Publisher:
    """A BusPublisher in a thread of its own: ``mode`` "loop" publishes until stopped (on the main
    and the tap endpoint), "burst" waits for one subscriber, publishes ``n`` rounds and goes quiet."""

    def __init__(self, mode: str = "loop", n: int = 2, replay: bool = False, publish: bool = True):
        self.mode, self.n, self.replay, self.publish = mode, n, replay, publish
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.endpoint = self.tap_endpoint = ""
        self.thread = threading.Thread(target=lambda: asyncio.run(self._go()))

    async def _go(self) -> None:
        pub = BusPublisher(tap_endpoint="tcp://127.0.0.1:0")
        self.endpoint, self.tap_endpoint = pub.endpoint, pub.tap_endpoint
        self.ready.set()
        try:
            if self.mode == "burst":
                await pub.wait_for_subscribers(1, timeout=20)
                for _ in range(self.n if self.publish else 0):
                    for msg in messages(pub, self.replay):
                        await pub.publish(msg)
            while not self.stop.is_set():
                if self.mode == "loop":
                    for msg in messages(pub, self.replay):
                        await pub.publish(msg)
                await asyncio.sleep(0.01)
        finally:
            pub.close()

    def __enter__(self) -> Publisher:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def test_topic_forms():
    assert _tap_topics("") == ("",)
    assert _tap_topics("data/press.") == ("data/press.",)
    assert _tap_topics("event/press.plan") == ("event/press.plan",)
    assert _tap_topics("press.sensors") == ("data/press.sensors", "event/press.sensors")


def test_a_stream_name_as_printed_selects_that_stream_on_the_tap_endpoint():
    with Publisher() as p:
        r = run("tap", "press.sensors", "--endpoint", p.tap_endpoint, "-n", "3", "--timeout", "20")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == 3 and all(ln.startswith("press.sensors #") for ln in lines), r.output


def test_a_prefix_gets_frames_and_events_and_replayed_events_are_flagged():
    with Publisher(replay=True) as p:
        r = run("tap", "press.", "--endpoint", p.tap_endpoint, "-n", "9", "--timeout", "20")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    events = [ln for ln in lines if " event " in ln]
    frames = [ln for ln in lines if " event " not in ln]
    assert events and frames
    assert {ln.split(" #")[0] for ln in lines} <= {"press.sensors", "press.force", "press.plan"}
    assert all("event step [replay]:" in ln for ln in events), events
    assert all("[replay]" in ln for ln in frames)


def test_timeout_after_messages_ends_the_tap_without_an_error():
    with Publisher(mode="burst", n=2) as p:
        r = run("tap", "--endpoint", p.endpoint, "--timeout", "0.5")
    assert r.exit_code == 0, r.output
    assert len(r.output.splitlines()) == 6  # 2 rounds of 3 messages, then quiet


def test_timeout_with_no_message_at_all_is_one_error_line():
    with Publisher(mode="burst", publish=False) as p:
        r = run("tap", "--endpoint", p.endpoint, "--timeout", "0.3")
    assert r.exit_code == 1
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: no message from") and "0.3 s" in lines[0]


def test_the_config_tap_endpoint_is_preferred_and_keys_are_loaded_beyond_loopback(tmp_path, monkeypatch):
    cfg = {"bus": {"data": "tcp://127.0.0.1:5560", "tap": "tcp://127.0.0.1:5562"}}
    assert _tap_source(SimpleNamespace(config=cfg), None, None) == ("tcp://127.0.0.1:5562", None)
    cfg = {"bus": {"data": "tcp://127.0.0.1:5560"}}
    assert _tap_source(SimpleNamespace(config=cfg), None, None) == ("tcp://127.0.0.1:5560", None)
    keys = create_keys(tmp_path / "keys")
    endpoint, got = _tap_source(SimpleNamespace(config=None), "tcp://192.0.2.7:5562", str(keys.directory))
    assert got is not None and got.server_public == keys.server_public
    monkeypatch.setenv("HIL_KEYS", str(tmp_path / "none"))
    with pytest.raises(OSError, match="no keys folder"):  # beyond loopback, keys are required
        _tap_source(SimpleNamespace(config=None), "tcp://192.0.2.7:5562", None)
