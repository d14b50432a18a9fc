"""How a subscriber waits for messages (issue 44): the socket's FD is registered with the event loop once,
not once per wait; the wait still ends at its deadline, wakes for every message, and works again in a
later event loop and after close."""

from __future__ import annotations

import asyncio
import selectors

import numpy as np
import pytest

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber, BusTimeout
from daq.errors import ProtocolError

N_WAITS = 30


class CountingLoop(asyncio.SelectorEventLoop):
    """The standard selector loop, counting how often a reader is registered."""

    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())
        self.add_reader_calls = 0

    def add_reader(self, fd, callback, *args):  # type: ignore[override]
        self.add_reader_calls += 1
        return super().add_reader(fd, callback, *args)


def frame(seq: int) -> Frame:
    return Frame("t.w", seq, 0.01 * seq, 1e-3, ["a", "b"], ["m", "N"], np.full((4, 2), float(seq)))


async def publish_one_at_a_time(pub: BusPublisher, sub: BusSubscriber, n: int) -> list[int]:
    """Publish n frames, each only once the subscriber waits for it: every recv has to wait."""
    got = []
    for k in range(n):
        waiting = asyncio.ensure_future(sub.recv(timeout=10))
        await asyncio.sleep(0)  # the recv runs until it waits for the socket
        assert not waiting.done()
        await pub.publish(frame(k))
        got.append((await waiting).seq)
    return got


def test_waiting_for_each_message_registers_the_socket_once():
    async def go() -> tuple[list[int], int]:
        pub = BusPublisher()
        sub = BusSubscriber(pub.endpoint)
        try:
            await pub.wait_for_subscribers(1, timeout=10)
            loop = asyncio.get_running_loop()
            assert isinstance(loop, CountingLoop)
            got = await publish_one_at_a_time(pub, sub, N_WAITS)
            return got, loop.add_reader_calls
        finally:
            sub.close()
            pub.close()

    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        got, calls = runner.run(go())
    assert got == list(range(N_WAITS))
    # pyzmq's asyncio poll of wait_for_subscribers registers its own reader once; the subscriber once
    assert calls <= 2, f"{calls} reader registrations for {N_WAITS} waits"


async def test_a_wait_ends_at_its_deadline_and_the_next_message_still_arrives():
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    try:
        await pub.wait_for_subscribers(1, timeout=10)
        assert await publish_one_at_a_time(pub, sub, 3) == [0, 1, 2]
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(BusTimeout):
            await sub.recv(timeout=0.2)
        assert loop.time() - start >= 0.2 - 0.01  # not before the deadline (a later one is no failure)
        await pub.publish(frame(3))
        assert (await sub.recv(timeout=10)).seq == 3
        # a long deadline armed earlier does not cut a later, shorter one short or keep it from ending
        task = asyncio.create_task(sub.recv(timeout=30))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(BusTimeout):
            await sub.recv(timeout=0.1)
        assert sub.stats.missing == 0
    finally:
        sub.close()
        pub.close()


def test_a_subscriber_waits_in_a_second_event_loop_after_the_first_closed():
    pub_holder: dict = {}

    async def first() -> int:
        pub = pub_holder["pub"] = BusPublisher()
        sub = pub_holder["sub"] = BusSubscriber(pub.endpoint)
        await pub.wait_for_subscribers(1, timeout=10)
        return (await publish_one_at_a_time(pub, sub, 1))[0]

    async def second() -> list[int]:
        pub, sub = pub_holder["pub"], pub_holder["sub"]
        try:
            waiting = asyncio.create_task(sub.recv(timeout=10))
            await asyncio.sleep(0.05)  # the subscriber is waiting in this loop before the message goes out
            await pub.publish(frame(1))
            return [(await waiting).seq, *await publish_one_at_a_time(pub, sub, 0)]
        finally:
            sub.close()
            pub.close()

    assert asyncio.run(first()) == 0
    assert asyncio.run(second()) == [1]


async def test_close_takes_the_socket_off_the_loop():
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    try:
        await pub.wait_for_subscribers(1, timeout=10)
        await publish_one_at_a_time(pub, sub, 2)
        fd = sub._fd
        loop = asyncio.get_running_loop()
        sub.close()
        assert not loop.remove_reader(fd), "the closed subscriber's FD was still registered"
    finally:
        sub.close()
        pub.close()


async def test_closing_a_subscriber_ends_a_wait_in_progress():
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    try:
        await pub.wait_for_subscribers(1, timeout=10)
        waiting = asyncio.create_task(sub.recv(timeout=60))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        sub.close()
        async with asyncio.timeout(10):  # the wait ends at the close, not at its 60 s deadline
            with pytest.raises(ProtocolError, match="closed while waiting"):
                await waiting
    finally:
        sub.close()
        pub.close()
