"""ZeroMQ publish/subscribe of frames and events.

Two delivery modes:

* lossless (default, for recording): the publisher is an XPUB with ``XPUB_NODROP``; when a
  subscriber's queue is full the send raises ``zmq.Again`` and :meth:`BusPublisher.publish`
  waits and retries, so a slow subscriber slows the producer down instead of losing data.
  The wait is bounded (``send_timeout``, default 5 s): past it publish raises :class:`BusStalled`
  so that a consumer that stopped reading can never freeze a run without limit.
* lossy (for live views): a plain PUB / SUB with a small high-water mark; when a reader falls
  behind, messages are dropped and :meth:`BusSubscriber.recv_latest` returns the newest one.

A lossless publisher can also bind a *tap* endpoint (``tap_endpoint``): a lossy PUB carrying a
copy of every message for external subscribers (``hil tap``, dashboards). A tap subscriber that
is slow or stopped reading loses messages (it sees the gaps in the sequence numbers) and never
blocks the publisher, so the run's own consumers on the lossless endpoint (recorder, setpoint
corrector, online identifier) never depend on it. Give the lossless endpoint to the run's own
consumers only (an ``inproc://`` endpoint keeps other processes out entirely).

Binding beyond loopback needs CURVE keys (:mod:`daq.bus.keys`); subscribers then pass ``keys``.

Subscribers count malformed messages per kind (logging each kind once), drop them and keep
running, and detect gaps in the per-stream sequence numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import zmq
import zmq.asyncio

from daq.bus.frames import IMMUTABLE_BUFFERS, Frame, FrameError, Message, decode, encode
from daq.bus.keys import CurveKeys, check_bind, release_server, secure_client, secure_server
from daq.errors import ProtocolError

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "tcp://127.0.0.1:0"
#: Longest a lossless publish waits for its consumers before raising BusStalled, s.
DEFAULT_SEND_TIMEOUT = 5.0
#: Queue length per tap subscriber; beyond it a tap subscriber loses messages.
DEFAULT_TAP_HWM = 1000
#: Payloads at least this large are handed to ZeroMQ without a copy.
ZERO_COPY_THRESHOLD = 64 * 1024
# A received message's memory is never written: a frame received below the threshold views it read-only
# (_recv_nowait), and the store keeps such a frame's array until its commit without copying it.
IMMUTABLE_BUFFERS.add(zmq.Frame)
#: Messages handled in a row before a hot loop yields to the event loop.
_YIELD_EVERY = 64
#: Plain-int flags: pyzmq's enum flags cost an Enum operation per part on the hot path.
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_POLLIN = int(zmq.POLLIN)


class BusTimeout(ProtocolError, TimeoutError):
    """Nothing arrived (or could be sent) within the timeout."""


class BusStalled(BusTimeout):
    """A lossless publish could not hand a message to its subscribers within ``send_timeout``:
    a consumer stopped reading. The message was not sent; the run should stop safely."""


REBIND_WAIT = 2.0  # s a fixed endpoint is retried while a socket closed in this process lets go of it


def bind_endpoint(sock: zmq.Socket, endpoint: str) -> str:
    """Bind ``sock``; port 0 or ``*`` picks a free port. Returns the real endpoint.

    ZeroMQ closes a socket's listener in its I/O thread, after ``close()`` returns, so a fixed
    endpoint closed by the previous run of this process (``hil serve`` runs one after another) can
    still be taken for a moment: an address in use is retried for up to ``REBIND_WAIT`` seconds.
    """
    if endpoint.startswith("tcp://") and (endpoint.endswith(":0") or endpoint.endswith(":*")):
        endpoint = endpoint.rsplit(":", 1)[0] + ":*"
    deadline = time.monotonic() + REBIND_WAIT
    while True:
        try:
            sock.bind(endpoint)
            break
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                raise OSError(f"cannot bind {endpoint}: {exc}") from None
            time.sleep(0.005)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _context(ctx: zmq.asyncio.Context | None) -> zmq.asyncio.Context:
    return ctx if ctx is not None else zmq.asyncio.Context.instance()


def _loop_time(loop: asyncio.AbstractEventLoop, deadline: float) -> float:
    """A time.monotonic() deadline on the loop's clock."""
    return loop.time() + (deadline - time.monotonic())


class BusPublisher:
    """Binds an endpoint (and optionally a lossy tap endpoint) and publishes frames and events."""

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        lossless: bool = True,
        ctx: zmq.asyncio.Context | None = None,
        hwm: int | None = None,
        send_timeout: float | None = DEFAULT_SEND_TIMEOUT,
        tap_endpoint: str | None = None,
        tap_hwm: int = DEFAULT_TAP_HWM,
        keys: CurveKeys | None = None,
    ):
        """``hwm``: queue length per subscriber (default 1000 lossless, 16 lossy).
        ``send_timeout``: in lossless mode, raise :class:`BusStalled` after blocking this long
        (None: wait without limit). ``tap_endpoint``: also bind a lossy copy of the bus there
        (``tap_hwm`` messages queued per tap subscriber). ``keys``: CURVE server keys, required
        for endpoints beyond loopback (then create the publisher inside a running event loop)."""
        check_bind(endpoint, keys, "data bus")
        if tap_endpoint is not None:
            check_bind(tap_endpoint, keys, "data bus tap")
        self.lossless = lossless
        self.send_timeout = send_timeout
        self._ctx = _context(ctx)
        self._domains: list[str] = []
        self._tap: zmq.Socket | None = None
        self._sock = self._ctx.socket(zmq.XPUB if lossless else zmq.PUB)
        try:
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.setsockopt(zmq.SNDHWM, hwm if hwm is not None else (1000 if lossless else 16))
            if lossless:
                self._sock.setsockopt(zmq.XPUB_NODROP, 1)
                self._sock.setsockopt(zmq.XPUB_VERBOSE, 1)
            self._secure(self._sock, endpoint, keys)
            # Non-blocking sends go through a plain (sync) shadow of the same socket: cheaper than a future;
            # and straight to pyzmq's backend send (its Socket.send only adds routing_id/group, unused here).
            self._sync: zmq.Socket = zmq.Socket.shadow(self._sock.underlying)
            self._send = super(zmq.Socket, self._sync).send
            self.endpoint = bind_endpoint(self._sock, endpoint)
            self.tap_endpoint: str | None = None
            if tap_endpoint is not None:
                # XPUB (no NODROP): drops at its HWM exactly as PUB, and tells who subscribed (see
                # wait_for_tap_subscriber: a dashboard attached at the start sees the run's first events)
                tap = self._ctx.socket(zmq.XPUB)
                tap.setsockopt(zmq.LINGER, 0)
                tap.setsockopt(zmq.SNDHWM, tap_hwm)
                self._tap = zmq.Socket.shadow(tap.underlying)
                self._tap_owner = tap
                self._secure(tap, tap_endpoint, keys)
                self.tap_endpoint = bind_endpoint(tap, tap_endpoint)
        except BaseException:
            self.close()
            raise
        self._seq: dict[str, int] = {}
        self._sent = 0
        self.subscriptions = 0
        self.blocked_s = 0.0
        self.stalls = 0

    def _secure(self, sock: zmq.Socket, endpoint: str, keys: CurveKeys | None) -> None:
        if keys is not None and not endpoint.startswith("inproc://"):
            self._domains.append(secure_server(sock, self._ctx, keys))

    def next_seq(self, stream: str) -> int:
        """Next sequence number for ``stream`` (0, 1, 2, ... per stream)."""
        n = self._seq.get(stream, 0)
        self._seq[stream] = n + 1
        return n

    async def publish(self, msg: Message) -> None:
        """Publish one frame or event (lossless mode waits while subscribers are full)."""
        await self.send_parts(encode(msg))

    async def send_parts(self, parts: list) -> None:
        """Send already encoded parts (used by replay and benchmarks)."""
        copy = len(parts[-1]) < ZERO_COPY_THRESHOLD
        if not self._offer(parts, copy):
            await self._send_blocked(parts, copy)
        elif self._sent % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if self._tap is not None:
            self._send_tap(parts, copy)

    def _offer(self, parts: list, copy: bool) -> bool:
        """Send without waiting; False when a lossless send was refused (then wait and retry). A lossy
        publisher drops the message when the queue is full."""
        self._sent += 1
        try:
            self._send_nowait(parts, copy)
        except zmq.Again:
            return not self.lossless
        return True

    def _send_tap(self, parts: list, copy: bool) -> None:
        """The lossy copy for external subscribers: a plain PUB never blocks (drops at its HWM)."""
        assert self._tap is not None  # called only when there is a tap
        send = self._tap.send
        try:
            for part in parts[:-1]:
                send(part, _NOBLOCK_MORE)
            send(parts[-1], _NOBLOCK, copy=copy)
        except zmq.Again:  # not raised by PUB in practice; never let the tap hold anything up
            pass

    def _send_nowait(self, parts: list, copy: bool) -> None:
        """Send part by part with int flags (cheaper than send_multipart). Only the first part can
        raise zmq.Again: ZeroMQ checks the high-water mark per whole message."""
        send = self._send
        if len(parts) == 3:
            send(parts[0], _NOBLOCK_MORE)
            send(parts[1], _NOBLOCK_MORE)
        else:
            for part in parts[:-1]:
                send(part, _NOBLOCK_MORE)
        send(parts[-1], _NOBLOCK, copy)

    async def _send_blocked(self, parts: list, copy: bool) -> None:
        """Back-pressure: retry a refused send until it goes through (or send_timeout)."""
        start = time.monotonic()
        tries = 0
        while True:
            tries += 1
            await asyncio.sleep(0 if tries < 8 else 0.0005)
            # A non-blocking send reads ZeroMQ's commands (e.g. "the subscriber's pipe has room
            # again") at most every ~1 ms; reading ZMQ_EVENTS processes them now.
            self._sync.get(zmq.EVENTS)
            try:
                self._send_nowait(parts, copy)
                break
            except zmq.Again:
                if self.send_timeout is not None and time.monotonic() - start > self.send_timeout:
                    self.blocked_s += time.monotonic() - start
                    self.stalls += 1
                    topic = bytes(parts[0])[:80].decode("utf-8", "replace")
                    raise BusStalled(
                        f"bus stalled: a subscriber of {self.endpoint} did not take a message ({topic}) "
                        f"for {self.send_timeout} s; it stopped reading"
                    ) from None
        self.blocked_s += time.monotonic() - start

    async def wait_for_subscribers(self, n: int = 1, timeout: float = 5.0) -> int:
        """Lossless mode: wait until ``n`` subscription messages arrived (avoids the slow joiner).

        Returns the number seen so far; raises BusTimeout if fewer than ``n`` came in time.
        """
        if not self.lossless:
            raise RuntimeError("wait_for_subscribers needs a lossless (XPUB) publisher")
        deadline = time.monotonic() + timeout
        while self.subscriptions < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BusTimeout(f"{self.subscriptions} of {n} subscribers after {timeout} s")
            if await self._sock.poll(int(remaining * 1000) + 1):  # polls POLLIN (the default)
                msg = self._sync.recv(zmq.NOBLOCK)
                if msg[:1] == b"\x01":
                    self.subscriptions += 1
        return self.subscriptions

    def wait_for_tap_subscriber(self, timeout: float) -> bool:
        """Block (at most ``timeout`` s) until a subscription reaches the tap; True if one did.

        For a subscriber started together with the run (``hil serve``'s relay): without it the run's first
        events could go out before the subscription arrived (ZeroMQ's slow joiner) and the live view missed
        them. Blocking, so call it before the run publishes, in the publisher's thread."""
        if self._tap is None:
            return False
        if self._tap.poll(max(int(timeout * 1000), 0), zmq.POLLIN):
            self._tap.recv(zmq.NOBLOCK)
            return True
        return False

    def close(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None and not sock.closed:
            sock.close(linger=0)
        tap = getattr(self, "_tap_owner", None)
        if tap is not None and not tap.closed:
            tap.close(linger=0)
        for domain in self._domains:
            release_server(self._ctx, domain)
        self._domains = []

    async def __aenter__(self) -> BusPublisher:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


@dataclass
class BusStats:
    """What a subscriber saw: good messages, malformed ones per kind, and sequence gaps."""

    received: int = 0
    malformed: dict[str, int] = field(default_factory=dict)
    gaps: dict[str, int] = field(default_factory=dict)  # stream -> messages missing
    gap_count: int = 0  # number of separate gaps
    restarts: dict[str, int] = field(default_factory=dict)  # stream -> sequence went back
    last_gaps: deque = field(default_factory=lambda: deque(maxlen=100))  # (stream, expected, got)

    @property
    def missing(self) -> int:
        return sum(self.gaps.values())

    @property
    def n_malformed(self) -> int:
        return sum(self.malformed.values())

    def as_dict(self) -> dict:
        return {
            "received": self.received,
            "malformed": dict(self.malformed),
            "gaps": dict(self.gaps),
            "gap_count": self.gap_count,
            "restarts": dict(self.restarts),
        }


class BusSubscriber:
    """Connects to a publisher and yields decoded frames and events."""

    def __init__(
        self,
        endpoint: str,
        topics: tuple[str, ...] | list[str] = ("",),
        ctx: zmq.asyncio.Context | None = None,
        lossy: bool = False,
        hwm: int | None = None,
        max_payload: int | None = None,
        keys: CurveKeys | None = None,
    ):
        """``topics``: prefixes such as ``"data/press."`` or ``"event/"``; ``""`` means all.
        ``lossy``: small receive queue for live views (see :meth:`recv_latest`).
        ``keys``: connect as a CURVE client (needed for a publisher bound beyond loopback)."""
        self.endpoint = endpoint
        self.lossy = lossy
        self.max_payload = max_payload
        self._ctx = _context(ctx)
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, hwm if hwm is not None else (4 if lossy else 1000))
        for t in topics:
            self._sock.setsockopt(zmq.SUBSCRIBE, t.encode("utf-8") if isinstance(t, str) else t)
        self._sync: zmq.Socket = zmq.Socket.shadow(self._sock.underlying)
        self._fd = cast(int, self._sync.getsockopt(zmq.FD))  # the option decides the type
        try:
            if keys is not None and not endpoint.startswith("inproc://"):
                secure_client(self._sock, keys)
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self._sock.close(linger=0)
            raise OSError(f"cannot connect to {endpoint}: {exc}") from None
        self.stats = BusStats()
        self._next: dict[str, int] = {}
        self._logged: set[str] = set()
        self._n = 0  # messages taken off the socket
        self._yielded = 0  # self._n at the last yield to the event loop
        self._events = cast(Callable[[int], int], self._sync.get)  # ZMQ_EVENTS is an int option
        # The wait for a message (see _wait_readable): one reader on the loop for the subscriber's life,
        # one timer re-armed only when a deadline passes, a future per wait
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future | None = None
        self._deadline: float | None = None  # of the current wait, time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when the timer fires, time.monotonic()
        self._closed = False

    async def recv(self, timeout: float | None = None) -> Message:
        """Next well-formed message; raises BusTimeout if none arrives within ``timeout`` s."""
        deadline = None  # set at the first wait: a queued message needs no clock
        while True:
            try:
                parts = self._recv_nowait()
            except zmq.Again:
                if deadline is None and timeout is not None:
                    deadline = time.monotonic() + timeout
                await self._wait_readable(deadline)
                continue
            self._n += 1
            if self._n - self._yielded >= _YIELD_EVERY:
                self._yielded = self._n
                await asyncio.sleep(0)
            msg = self._decode(parts)
            if msg is not None:
                return msg

    async def recv_latest(self, timeout: float | None = None) -> Message:
        """Wait for a message, then drain the queue and return the newest one (live views)."""
        msg = await self.recv(timeout)
        while True:
            try:
                parts = self._recv_nowait()
            except zmq.Again:
                return msg
            self._n += 1
            newer = self._decode(parts)
            if newer is not None:
                msg = newer

    def _recv_nowait(self) -> list:
        """One message as ``[topic, header, payload]`` without blocking (zmq.Again if none).

        Receives zmq.Frames (their ``more`` flag spares a getsockopt per part); the payload is
        handed on without a copy, read-only below the zero-copy threshold as bytes used to be.
        """
        recv = self._sync.recv
        frame = recv(_NOBLOCK, copy=False)
        frames = [frame]
        while frame.more:  # the rest of a multipart message is already there
            frame = recv(_NOBLOCK, copy=False)
            frames.append(frame)
        if len(frames) != 3:
            return [f.bytes for f in frames]  # malformed: decode counts it
        payload = frame.buffer
        if len(payload) < ZERO_COPY_THRESHOLD:
            payload = payload.toreadonly()
        return [frames[0].bytes, frames[1].bytes, payload]

    async def _wait_readable(self, deadline: float | None) -> None:
        """Wait until the socket has a message, or raise BusTimeout at ``deadline``.

        ZeroMQ's FD is edge-triggered: it only says "look at ZMQ_EVENTS", and reading ZMQ_EVENTS clears it.
        The reader stays registered between waits (:meth:`_on_readable` reads ZMQ_EVENTS on every signal,
        so a signal with no one waiting does not keep the loop busy), and the deadline timer is re-armed
        only when it fires before the current wait's deadline: a wait costs one future, not two epoll_ctl
        calls, a timer and its cancellation (issue 44: they made the receive side cost more per message
        than plain pyzmq whenever the receiver was faster than the sender).
        """
        loop = asyncio.get_running_loop()
        events = self._events
        while True:
            if self._closed:
                raise ProtocolError(f"the subscriber of {self.endpoint} was closed while waiting")
            if self._loop is not loop:
                self._watch(loop)
            if events(zmq.EVENTS) & _POLLIN:
                return
            if deadline is not None:
                if time.monotonic() >= deadline:
                    raise BusTimeout(f"no message from {self.endpoint} within the timeout")
                self._deadline = deadline
                if self._timer is None or self._timer_at > deadline:
                    self._arm(loop, deadline)
            fut = self._waiter = loop.create_future()
            try:
                await fut
            finally:
                self._waiter = None
                self._deadline = None

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register the socket's FD with ``loop`` (once per loop; a new loop takes it over)."""
        self._unwatch()
        loop.add_reader(self._fd, self._on_readable)
        self._loop = loop

    def _unwatch(self) -> None:
        """Take the FD off the loop it is registered with (from that loop's thread, or when it is not
        running); a closed loop has forgotten it already."""
        loop, self._loop = self._loop, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            self._release(loop)
        else:
            loop.call_soon_threadsafe(self._release, loop)

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the loop's thread: the FD off the loop; a wait in progress ends (a closed subscriber's wait
        raises instead of hanging)."""
        loop.remove_reader(self._fd)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_readable(self) -> None:
        """The FD signalled: process ZeroMQ's commands (clears the signal) and wake a waiter if a message
        is there."""
        if self._closed:
            return
        ready = self._events(zmq.EVENTS) & _POLLIN
        waiter = self._waiter
        if ready and waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = loop.call_at(_loop_time(loop, deadline), self._on_deadline)

    def _on_deadline(self) -> None:
        """The timer fired: wake the waiter if its deadline passed, else re-arm for it."""
        self._timer = None
        waiter, deadline = self._waiter, self._deadline
        if waiter is None or waiter.done() or deadline is None or self._loop is None:
            return
        if time.monotonic() >= deadline:
            waiter.set_result(None)  # _wait_readable raises BusTimeout unless a message came meanwhile
        else:
            self._arm(self._loop, deadline)

    def _decode(self, parts: list) -> Message | None:
        try:
            msg = decode(parts, max_payload=self.max_payload)
        except FrameError as exc:
            self._malformed(exc.kind, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a decoder bug must not kill a subscriber (or the recorder)
            self._malformed("unexpected", exc)
            return None
        self.stats.received += 1
        expected = self._next.get(msg.stream)
        if expected != msg.seq and expected is not None:
            self._seq_jump(msg, expected)
        self._next[msg.stream] = msg.seq + 1
        return msg

    def _malformed(self, kind: str, exc: Exception) -> None:
        self.stats.malformed[kind] = self.stats.malformed.get(kind, 0) + 1
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning(
                "dropping malformed message from %s (%s); further ones of this kind are only counted",
                self.endpoint,
                exc,
                exc_info=kind == "unexpected",
            )

    def _seq_jump(self, msg: Frame | Message, expected: int) -> None:
        """Sequence jumps (off the hot path): seq > expected is a gap, seq < expected a producer restart."""
        key, st = msg.stream, self.stats
        if msg.seq > expected:
            missing = msg.seq - expected
            st.gaps[key] = st.gaps.get(key, 0) + missing
            st.gap_count += 1
            st.last_gaps.append((key, expected, msg.seq))
            if st.gap_count <= 10 or not self.lossy:
                log.log(
                    logging.DEBUG if self.lossy else logging.WARNING,
                    "gap on %s: expected seq %d, got %d (%d missing)",
                    key,
                    expected,
                    msg.seq,
                    missing,
                )
        else:
            st.restarts[key] = st.restarts.get(key, 0) + 1

    def close(self) -> None:
        self._closed = True
        self._unwatch()
        if not self._sock.closed:
            self._sock.close(linger=0)

    async def __aenter__(self) -> BusSubscriber:
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()
