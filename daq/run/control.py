"""The command channel of a running plan: how *other processes* (`hil ctl`, a remote dashboard) control it.

Whoever runs the lifecycle in its own process (``hil serve``'s runner) holds the run's
``RunContext`` (:mod:`daq.run.lifecycle`) and calls :meth:`RunContext.command` directly; this channel is for
everyone else, and it is authenticated always, on loopback too:

* a run with ``[bus].keys`` serves CURVE with the keys folder's server pair and accepts the clients in its
  ``authorized/`` folder (``hil keys authorize``);
* a run without keys makes a server pair and one client pair of its own, in memory, and hands the client
  pair only through its announcement, a 0600 file in a 0700 folder (:mod:`daq.run.announce`): the run's OS
  user (and root) can control it, another OS user cannot even connect.

Every state-changing command is recorded as a ``command`` event on ``<kind>.run`` with who gave it
(:meth:`RunContext.command`): the operator name a client holding the run's own key sends (``$HIL_USER``
or its OS user, as ``hil run`` records ``started_by``), or the file name of the authorized key.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import time
from pathlib import Path
from typing import Any, Protocol

from daq.bus.keys import CurveKeys, run_keys, with_own_client
from daq.bus.pubsub import BusPublisher
from daq.run.announce import private_runs_dir, write_announcement
from daq.run.commands import CommandRefused, CommandServer

ENV_USER = "HIL_USER"  # who a process records as its operator (default: the OS user)
ACTIONS = ("status", "pause", "resume", "stop", "abort")


def operator_name() -> str | None:
    """Who operates from this process: ``$HIL_USER`` (a shared lab account names its person), else the OS
    user; None when neither is known. ``hil run`` records it as ``started_by``, ``hil ctl`` sends it."""
    name = os.environ.get(ENV_USER, "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):  # no user name in this environment (a container without passwd entry)
        return None


def channel_keys(bus_keys: CurveKeys | None, store_path: Path) -> CurveKeys:
    """The command channel's keys: the bus's keys folder when ``[bus].keys`` is set, else a server pair of
    the run's own; either way with a client pair of the run's own (the one its announcement hands out)."""
    base = bus_keys if bus_keys is not None else run_keys(private_runs_dir(store_path))
    return with_own_client(base)


def authorized_names(keys: CurveKeys) -> dict[str, str]:
    """Z85 public key -> the file name (without ``.key``) of each key in the ``authorized/`` folder."""
    if not keys.from_folder:
        return {}
    import zmq.auth  # lazy: only a keyed run reads certificate files

    names = {}
    for path in sorted(keys.authorized_dir.glob("*.key")):
        with contextlib.suppress(OSError, ValueError):
            public, _ = zmq.auth.load_certificate(path)
            names[public.decode("ascii")] = path.stem
    return names


class Commanded(Protocol):
    """What the channel commands: :class:`daq.run.lifecycle.RunContext`."""

    rig: Any
    publisher: BusPublisher

    async def command(self, action: str, by: str | None = None) -> dict: ...


class CommandChannel:
    """Serves ``status``, ``pause``, ``resume``, ``stop`` (after the step) and ``abort`` (now) of one run
    and announces it; :meth:`stop` withdraws both."""

    def __init__(self, ctx: Commanded, endpoint: str, keys: CurveKeys):
        self.ctx = ctx
        self.endpoint = endpoint
        self.keys = keys
        self.server: CommandServer | None = None
        self.announce: Path | None = None
        self._names: dict[str, str] = {}

    def start(self, store_path: Path, session_id: str) -> None:
        self._names = authorized_names(self.keys)
        self.server = CommandServer(self.endpoint, {a: self._handler(a) for a in ACTIONS},
                                    keys=self.keys).start()
        publisher = self.ctx.publisher
        entry: dict[str, Any] = {"session": session_id, "kind": self.ctx.rig.kind,
                                 "command": self.server.endpoint, "data": publisher.endpoint,
                                 "tap": publisher.tap_endpoint, "pid": os.getpid(), "started": time.time()}
        if not self.keys.from_folder:  # the run's own keys: the announcement is how its owner gets them
            entry["curve"] = {"server": self.keys.server_public.decode("ascii"),
                              "public": (self.keys.client_public or b"").decode("ascii"),
                              "secret": (self.keys.client_secret or b"").decode("ascii")}
        self.announce = write_announcement(store_path, session_id, entry)

    def _handler(self, action: str):
        async def handle(by: str | None = None, client_key: str | None = None) -> dict:
            return await self.ctx.command(action, self.issuer(client_key, by))
        return handle

    def issuer(self, client_key: str | None, claimed: str | None) -> str:
        """Who sent a command, in words: the operator name a holder of the run's own key sends, or the
        authorized key's file name (with the name it sends, if any)."""
        own = (self.keys.client_public or b"").decode("ascii")
        claimed = " ".join(str(claimed).split())[:64] if claimed else None
        if client_key is not None and client_key == own:
            return f"{claimed}, hil ctl" if claimed else "hil ctl"
        name = self._names.get(client_key or "")
        if name is None:
            if client_key is not None and self.keys.from_folder:
                self._names = authorized_names(self.keys)  # authorized since the run started
                name = self._names.get(client_key)
            if name is None:
                raise CommandRefused("the client key is not one the run knows by name; refused")
        return f"{claimed}, key {name}" if claimed else f"key {name}"

    async def stop(self) -> None:
        if self.announce is not None:
            with contextlib.suppress(OSError):
                self.announce.unlink()
        if self.server is not None:
            await self.server.stop()
            self.server.close()
