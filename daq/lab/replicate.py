"""Pushing from a local store to a lab as one call (``hil lab push`` and the background push after a run):
open the lab, push each session, and turn an unreachable lab or a refused key into one line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from daq.lab.client import push_structure_clients
from daq.lab.connect import from_client_error, open_lab, require_tiled_client
from daq.lab.local_analyses import analysed_after_push
from daq.lab.marks import Marks
from daq.lab.names import Refused
from daq.lab.people import whoami
from daq.lab.push import Pusher, PushResult
from daq.lab.settings import ENV_KEY, ENV_KEY_FILE, LabError, LabTable
from daq.lab.verify import forget_lost
from daq.store.reader import SessionReader
from daq.store.records import FINAL_STATUSES

log = logging.getLogger("hil.lab")


def pending_sessions(store: SessionReader, marks: Marks, lab: str) -> list[str]:
    """Finished sessions of the store that ``lab`` does not hold verified yet, or whose analysis on the rig
    came after the push, oldest first."""
    done = marks.labs_by_session()
    analysed = analysed_after_push(store.path, lab)
    return [i.id for i in store.list_sessions()
            if i.status in FINAL_STATUSES and (lab.rstrip("/") not in done.get(i.id, []) or i.id in analysed)]


def push_sessions(store_path: str | os.PathLike, url: str, key: str, sessions: Iterable[str] | None,
                  say: Callable[[str], None] = print, on_block=None,
                  lock_held: bool = False, lock_wait: float = 0.0) -> list[PushResult]:
    """Push ``sessions`` (None: every pending one) of the store to the lab at ``url`` (``lock_held``: the
    caller holds their push locks: a live forwarder handing its session over; ``lock_wait``: s to wait for
    another push of a session to end before leaving it to that one)."""
    require_tiled_client()  # before the push's client classes import it
    root = open_lab(url, key, push_structure_clients())
    who = whoami(url, key)  # None: a lab of one shared key, which knows no people
    if who is not None and who["role"] == "viewer":
        raise LabError(f"lab {url}: {who['name']}'s key is a viewer's (reads only): pushing needs an "
                       "operator's key")
    results = []
    # --pending: a session whose run was killed is marked incomplete first (the store's crash recovery), so
    # that it goes too - also into the live container its forwarder left behind
    with SessionReader(store_path, recover=sessions is None) as store, Marks(store_path) as marks:
        if sessions is None:  # the rig's marks re-checked against the lab: a session deleted there goes again
            try:
                forget_lost(root, marks, url, {i.id for i in store.list_sessions()}, say)
            except Exception as exc:  # noqa: BLE001 - the client's errors as one line
                raise from_client_error(url, exc) from None
        todo = pending_sessions(store, marks, url) if sessions is None else list(sessions)
        pusher = Pusher(root, url, store, marks, on_block=on_block, who=who)
        pusher.lock_held, pusher.lock_wait = lock_held, lock_wait
        for sid in todo:
            try:
                result = pusher.push(sid)
            except Refused as exc:  # this one stays here (odd name, pushed by another push); the rest go
                result = PushResult(sid, "refused", note=str(exc))
            say(result.line())
            results.append(result)
    return results


#: s the run's background push waits for a live forwarder still handing the session over: its push ends
#: first, then this one hands over the analysis recorded meanwhile (a forwarder gives up after its own limits)
BACKGROUND_LOCK_WAIT = 600.0


def push_in_background(store_path: str | os.PathLike, lab: LabTable | None) -> subprocess.Popen | None:
    """Start ``hil lab push --pending`` for the store in a process of its own (it outlives the run, and
    the run never waits on it); its lines go to ``<store folder>/lab-push.log``. None without [lab]."""
    if lab is None or not lab.push:
        return None
    folder = Path(store_path).resolve().parent
    cmd = [sys.executable, "-m", "daq.cli.main", "--store", str(store_path), "lab", "push", "--pending",
           "--to", lab.url, "--wait-for-push", str(BACKGROUND_LOCK_WAIT)]
    env = dict(os.environ)
    if lab.key_file:
        cmd += ["--key-file", lab.key_file]
    elif not env.get(ENV_KEY) and not env.get(ENV_KEY_FILE):
        log.warning("[lab] has no key_file and neither $%s nor $%s is set: sessions are not pushed",
                    ENV_KEY_FILE, ENV_KEY)
        return None
    try:
        logf = open(folder / "lab-push.log", "a")  # noqa: SIM115 - the child owns it
    except OSError as exc:
        log.warning("cannot write %s: %s; sessions are not pushed", folder / "lab-push.log", exc)
        return None
    with logf:
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def push_after_run(store_path: str | os.PathLike, config) -> subprocess.Popen | None:
    """With a ``[lab]`` table in the run's config (typed, or its TOML dict): push the store's pending
    sessions in the background (``hil run`` and ``hil serve`` call this when a session ends; nothing here
    waits or can fail the run)."""
    table = config.get("lab") if isinstance(config, dict) else getattr(config, "lab", None)
    if not table:
        return None
    try:
        import msgspec  # lazy: only with a [lab] table

        lab = table if isinstance(table, LabTable) else msgspec.convert(table, LabTable)
        return push_in_background(store_path, lab)
    except Exception as exc:  # noqa: BLE001 - the recording is done; a failed hand-over is a log line
        log.warning("background push not started: %s", exc)
        return None
