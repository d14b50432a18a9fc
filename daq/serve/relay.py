"""The live relay: the current run's bus (or a replay's, :mod:`daq.serve.replays`), as JSON messages for
browsers.

The relay subscribes to the run's *tap* (the lossy copy of the bus for dashboards, :class:`BusPublisher`'s
``tap_endpoint``; the server gives every run one): a relay that falls behind loses tap messages, it never
holds up the run's lossless bus. Each browser has a bounded queue of its own; a message that does not fit
is dropped for that browser and counted (``dropped``), so a stalled browser slows neither the run nor the
other browsers. Every message carries ``seq``, one counter for the relay's life: a gap tells a browser how
many messages it missed.

Messages (``type``): ``hello`` (on connect: the relay's state, the run or replay, the last status and
estimates), ``run`` (a run started or ended), ``replay`` (a replay started, began its next pass, ended),
``frame`` (a frame, decimated for display: at most :data:`MAX_POINTS`
samples per message and :data:`MAX_RATE` per second per stream, with channels and units), ``event`` (every
event: plan steps, online estimates and verdicts, the plan outcome), ``status`` (the run's command channel's
``status`` reply, polled every :data:`STATUS_PERIOD` s), ``stats`` (this browser's counters). Numbers that
are not finite are sent as null (JSON has no NaN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

import numpy as np

from daq import json_codec
from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusSubscriber, BusTimeout

log = logging.getLogger(__name__)

CLIENT_QUEUE = 256     # messages a browser may lag behind before its messages are dropped
MAX_POINTS = 200       # samples of one stream per message, at most
MAX_RATE = 500.0       # samples of one stream per second sent to browsers, at most
STATUS_PERIOD = 0.25   # s between status polls of the running run
REPLAY_PASS = "hil.replay"  # the stream of a replay's event between two passes of a loop


class LiveClient:
    """One browser: its queue and counters."""

    def __init__(self, maxsize: int = CLIENT_QUEUE):
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize)
        self.sent = 0
        self.dropped = 0
        self.connected = time.time()

    def stats(self) -> dict:
        return {"sent": self.sent, "dropped": self.dropped, "queued": self.queue.qsize()}


class _Decimator:
    """Per stream: which samples go to the browsers (every k-th, k from the stream's sample rate)."""

    def __init__(self) -> None:
        self.next_t: dict[str, float] = {}

    def pick(self, frame: Frame) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(times, values) of the kept samples, and when samples were dropped the (min, max) of each kept
        sample and the dropped ones after it (the page's envelope: spikes between kept samples show)."""
        n = frame.data.shape[0]
        if frame.timestamps is not None:
            t: np.ndarray = np.asarray(frame.timestamps, dtype=np.float64)
        else:
            t = frame.t0 + np.arange(n) * (frame.dt or 0.0)
        if n == 0:
            return t, frame.data, None, None
        step = 1.0 / MAX_RATE
        keep = np.zeros(n, dtype=bool)
        nxt = self.next_t.get(frame.stream, -math.inf)
        if n > 1 and np.all(np.diff(t) >= 0):  # time-ordered: a sample at least every 1/MAX_RATE s
            slots = np.floor((t - t[0]) / step)
            first = np.r_[True, slots[1:] != slots[:-1]]
            keep = first & (t >= nxt)
        else:
            keep[:] = True
        idx = np.flatnonzero(keep)
        if len(idx) > MAX_POINTS:
            idx = idx[np.linspace(0, len(idx) - 1, MAX_POINTS).astype(int)]
        if len(idx):
            self.next_t[frame.stream] = float(t[idx[-1]]) + step
        lo = hi = None
        if 0 < len(idx) < n and frame.data.ndim == 2 and frame.data.dtype.kind == "f":
            rest = frame.data[idx[0]:]
            lo = np.fmin.reduceat(rest, idx - idx[0], axis=0)
            hi = np.fmax.reduceat(rest, idx - idx[0], axis=0)
        return t[idx], frame.data[idx], lo, hi


def _column(values: np.ndarray) -> list:
    """A channel's values as a JSON list (bool/int as numbers, non-finite as null)."""
    if values.dtype == np.bool_:
        values = values.astype(np.int8)
    return values.tolist()


class LiveRelay:
    """Fans the current run's tap out to the connected browsers."""

    def __init__(self, client_queue: int = CLIENT_QUEUE):
        self.client_queue = client_queue
        self.clients: set[LiveClient] = set()
        self.seq = 0
        self.run: dict | None = None              # the run being relayed (its queue entry)
        self.replay: dict | None = None           # or the replay being relayed (its entry)
        self.what = "run"                         # which of the two
        self.last_status: dict | None = None
        self.last_events: dict[str, dict] = {}    # stream -> last estimate message (for late joiners)
        self.tap_stats: dict | None = None
        self._sub: BusSubscriber | None = None
        self._tasks: list[asyncio.Task] = []
        self._decimator = _Decimator()

    # -------------------------------------------------------------------------------- browsers

    def connect(self) -> LiveClient:
        client = LiveClient(self.client_queue)
        self.clients.add(client)
        self.send_to(client, {"type": "hello", "run": self.run, "replay": self.replay,
                              "status": self.last_status, "estimates": list(self.last_events.values())})
        return client

    def disconnect(self, client: LiveClient) -> None:
        self.clients.discard(client)

    def _encode(self, msg: dict) -> str:
        self.seq += 1
        msg["seq"] = self.seq
        return json_codec.dumps_strict(msg, default=str)

    def send_to(self, client: LiveClient, msg: dict) -> None:
        text = self._encode(msg)
        self._offer(client, text)

    def _offer(self, client: LiveClient, text: str) -> None:
        try:
            client.queue.put_nowait(text)
        except asyncio.QueueFull:
            client.dropped += 1

    def broadcast(self, msg: dict) -> None:
        text = self._encode(msg)
        for client in list(self.clients):
            self._offer(client, text)

    def stats(self) -> dict:
        return {"seq": self.seq, "clients": [c.stats() for c in self.clients], "run": self.run,
                "replay": self.replay, "tap": self.tap_stats}

    # -------------------------------------------------------------------------------- the run

    def attach(self, subject: dict, tap_endpoint: str, keys, status: Callable[[], Awaitable[dict]],
               what: str = "run") -> None:
        """Relay the run ``subject`` (its queue entry; ``what="replay"``: a replay's entry) from the bus at
        ``tap_endpoint`` (a run's tap); ``status()`` asks it for its state."""
        self.detach_now()
        self.what = what
        self.run, self.replay = (subject, None) if what == "run" else (None, subject)
        self.last_status, self.last_events = None, {}
        self._decimator = _Decimator()
        self._sub = BusSubscriber(tap_endpoint, keys=keys)
        self.broadcast({"type": what, "state": "started", what: subject})
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump(self._sub), name="relay"),
                       loop.create_task(self._poll(status), name="relay-status")]

    def detach_now(self) -> None:
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        if self._sub is not None:
            self.tap_stats = self._sub.stats.as_dict()
            self._sub.close()
            self._sub = None

    async def detach(self, run: dict | None = None) -> None:
        """The run (or replay) ended: drain what the tap still holds (briefly), stop relaying, tell the
        browsers (``run``: its final entry)."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(0.5):
                    while True:
                        self._relay(await self._sub.recv(timeout=0.1))
        tasks = list(self._tasks)
        self.detach_now()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        what = self.what
        subject = run or (self.run if what == "run" else self.replay)
        self.broadcast({"type": what, "state": "ended", what: subject})
        self.run = self.replay = None
        self.what = "run"

    async def _pump(self, sub: BusSubscriber) -> None:
        while True:
            try:
                msg = await sub.recv(timeout=1.0)
            except BusTimeout:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a relay problem never touches the run
                log.warning("live relay: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._relay(msg)
            self.tap_stats = sub.stats.as_dict()

    def _relay(self, msg: Frame | Event) -> None:
        if isinstance(msg, Event) and msg.stream == REPLAY_PASS and self.what == "replay":
            self.replay = msg.body  # a looping replay's next pass (daq/serve/replays.py): times go back
            self._decimator = _Decimator()
            self.broadcast({"type": "replay", "state": "pass", "replay": msg.body})
            return
        if isinstance(msg, Event):
            out = {"type": "event", "stream": msg.stream, "kind": msg.kind, "bus_seq": msg.seq, "t": msg.t,
                   "body": msg.body, "session": msg.session_id, "replay": msg.replay}
            if msg.kind in ("estimate", "estimate_failed"):
                self.last_events[msg.stream] = out
            self.broadcast(out)
            return
        t, data, lo, hi = self._decimator.pick(msg)
        if not len(t) and msg.data.shape[0]:
            return  # all of it within the display's resolution of the last message
        out = {"type": "frame", "stream": msg.stream, "bus_seq": msg.seq, "channels": msg.channels,
               "units": msg.units, "n": int(msg.data.shape[0]), "t": t.tolist(),
               "data": [_column(data[:, k]) for k in range(data.shape[1])] if data.ndim == 2 else [],
               "session": msg.session_id, "replay": msg.replay}
        if lo is not None and hi is not None:
            out["min"] = [_column(lo[:, k]) for k in range(lo.shape[1])]
            out["max"] = [_column(hi[:, k]) for k in range(hi.shape[1])]
        self.broadcast(out)

    async def _poll(self, status: Callable[[], Awaitable[dict]]) -> None:
        while True:
            try:
                self.last_status = await status()
                self.broadcast({"type": "status", **self.last_status})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - not announced yet, or ending
                log.debug("status poll: %s", exc)
            await asyncio.sleep(STATUS_PERIOD)
