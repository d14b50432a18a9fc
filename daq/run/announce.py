"""Run announcements: how `hil ctl`, `hil tap` and `hil watch` find the runs of a store.

A running session writes ``<store folder>/runs/<session>.json`` with its command, data and tap endpoints,
its process id and, when its command channel is keyed by the run itself (a loopback run without
``[bus].keys``), the client key pair that channel accepts. The folder is 0700 and every file 0600 from its
first byte on: only the run's OS user (and root) can read where the run listens and hold its key, so only
they can send it a command that is accepted (:mod:`daq.run.control`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from daq import json_codec
from daq.bus.keys import CurveKeys
from daq.errors import ConfigError
from daq.store.store_file import pid_alive

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def runs_dir(store_path: Path) -> Path:
    """Where running sessions announce their endpoints (for `hil ctl`)."""
    return Path(store_path).parent / "runs"


def private_runs_dir(store_path: Path) -> Path:
    """:func:`runs_dir`, created 0700 (an older folder that others could read is closed to them)."""
    folder = runs_dir(store_path)
    folder.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        try:
            os.chmod(folder, PRIVATE_DIR)
        except OSError as exc:
            raise ConfigError(f"{folder} is readable by other users and cannot be made private: "
                              f"{exc.strerror}") from None
    return folder


def write_announcement(store_path: Path, session_id: str, entry: dict) -> Path:
    """Write ``entry`` as the announcement of ``session_id``: 0600 from its first byte (written beside and
    renamed into place, so a reader never sees half of it)."""
    folder = private_runs_dir(store_path)
    path = folder / f"{session_id}.json"
    tmp = folder / f".{session_id}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
        os.write(fd, json_codec.dumps(entry).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def live_runs(store_path: Path) -> list[dict]:
    """The announcements of the sessions running on this store (oldest file name first).

    An announcement whose process is gone (``pid`` recorded in it, no such process or a zombie: a run
    killed by SIGKILL or a power cut never removes its own) is stale: it is deleted and not returned.
    Unreadable files and announcements without a pid are skipped/kept (nothing proves them stale).
    """
    folder = runs_dir(Path(store_path))
    runs = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json_codec.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(entry, dict):
            continue
        pid = entry.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and not pid_alive(pid):
            log.warning("removing the stale run announcement %s (process %s is gone)", f, pid)
            with contextlib.suppress(OSError):
                f.unlink()
            continue
        runs.append(entry)
    return runs


def announced_keys(entry: dict[str, Any], directory: Path) -> CurveKeys | None:
    """The client keys an announcement hands its reader (the run's own command key), else None."""
    curve = entry.get("curve")
    if not isinstance(curve, dict):
        return None
    try:
        server, public, secret = (str(curve[k]).encode("ascii") for k in ("server", "public", "secret"))
    except (KeyError, UnicodeEncodeError):
        return None
    return CurveKeys(directory, server, None, public, secret)
