"""``hil serve --lab URL --rig NAME``: the rig's state kept in the lab (:mod:`daq.lab.rigs`), a heartbeat
every few seconds: idle or running (session, config, who, progress), the queue's length and the lock.

A lab that does not answer costs one log line (then one when it answers again), never a run: the
heartbeat runs in a worker thread beside the server and only reads what the server already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from daq.lab.settings import LabError
from daq.serve.lab_identity import DEFAULT_TTL

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0  # s between two writes of the rig's state


@dataclass(frozen=True)
class RigLab:
    """What ``hil serve --lab`` was given."""

    url: str
    rig: str
    key: str = ""  # the rig's own key (an operator's): writes its state
    cache_s: float = DEFAULT_TTL  # s an answer of the lab about a person's key is kept
    every_s: float = HEARTBEAT_S


def rig_state(service, page: str) -> dict:
    """The rig's state now, as the lab keeps it."""
    snap = service.queue.snapshot()
    current = snap["current"]
    run = None
    if current is not None:
        live = service.relay.last_status or {}
        run = {"id": current["id"], "session": current.get("session"), "config": current["config"],
               "by": current["by"], "kind": current.get("kind"), "started": current.get("started_at"),
               "progress": live.get("progress")}
    return {"page": page, "state": "running" if current is not None else "idle", "run": run,
            "queue": len(snap["queued"]), "lock": service.locks.state()}


class Heartbeat:
    """Writes :func:`rig_state` to the lab every ``lab.every_s`` seconds until stopped."""

    def __init__(self, lab: RigLab, service, page: str) -> None:
        from daq.lab.rigs import RigPublisher  # lazy: tiled's client only for a rig with a lab

        self.lab, self.service, self.page = lab, service, page
        self.publisher = RigPublisher(lab.url, lab.key, lab.rig)
        # One thread writes, in the order the writes were asked for: a beat cancelled on its way (stop)
        # still lands, and lands before the offline state (two threads let it land after, and the lab
        # showed a stopped rig idle); the publisher's node is looked up by one thread only.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rig-heartbeat")
        self.beats = 0  # writes the lab took
        self.problem: str | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="rig-heartbeat")
        return self

    async def _loop(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.lab.every_s)

    async def beat(self, state: dict | None = None) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._writer, self.publisher.publish, state or rig_state(self.service, self.page))
        except LabError as exc:
            if self.problem != str(exc):
                log.warning("rig state not kept in the lab: %s", exc)
            self.problem = str(exc)
            return
        if self.problem is not None:
            log.warning("rig state kept in the lab again")
        self.problem = None
        self.beats += 1

    async def stop(self) -> None:
        """Stop beating and say the rig is offline (a killed server says nothing: its readers see the
        heartbeat age)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        state = {**rig_state(self.service, self.page), "state": "offline", "run": None}
        try:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):  # not wait_for (docs/contracts.md, "Stopping")
                    await self.beat(state)
        finally:
            self._writer.shutdown(wait=False)
