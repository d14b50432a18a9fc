"""The ``[lab]`` table of a rig config, the lab's API key and the lab's errors.

The key is a secret: it is never in a config or a URL, only in a 0600 file (``--key-file``,
``[lab].key_file``, ``$HIL_LAB_KEY_FILE``) or in ``$HIL_LAB_KEY``. This module imports nothing of ``daq``
so that the config schema (the floor) can hold the table.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from drivers.errors import HilError

ENV_KEY = "HIL_LAB_KEY"  # the key itself
ENV_KEY_FILE = "HIL_LAB_KEY_FILE"  # the path of a file holding the key
KEY_PATTERN = re.compile(r"^[A-Za-z0-9]{16,256}$")  # what Tiled accepts as a single-user key


class LabError(HilError):
    """The lab refused or could not be reached; one line for the user, never a failed run."""


class LabUnreachable(LabError):
    """No answer from the lab server (down, wrong address, network): retry later."""


class LabTable(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """``[lab]``: where sessions are replicated. With it, ``hil run`` and ``hil serve`` push each session
    in the background when it ends."""

    url: Annotated[str, Meta(pattern=r"^https?://\S+$")]
    key_file: Annotated[str, Meta(min_length=1, extra={"path": True})] | None = None  # else $HIL_LAB_KEY
    push: bool = True  # false: keep the table for `hil lab push` only, no background push
    rig: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")] | None = None  # hil serve's rig
    live: bool = True  # false: a session reaches the lab when it ends, not while it records (daq/lab/live.py)


def default_lab_dir() -> Path:
    """The data folder of ``hil lab serve`` by default: ``$XDG_DATA_HOME/hil/lab``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hil" / "lab"


def read_key(key_file: str | os.PathLike | None) -> str:
    """The lab's key: from ``key_file`` (a path: the key alone on its first line), else from the file
    ``$HIL_LAB_KEY_FILE`` names, else ``$HIL_LAB_KEY`` (the key itself). The one place a key is read; every
    mistake is one line that never shows the key (a key where a path belongs and a path where the key
    belongs each get a hint)."""
    if key_file is None and os.environ.get(ENV_KEY_FILE, "").strip():
        key_file = os.environ[ENV_KEY_FILE].strip()
    if key_file is not None:
        refuse_open_key_file(Path(key_file))
        key, where = _key_from_file(Path(key_file)), str(key_file)
    else:
        key, where = os.environ.get(ENV_KEY, "").strip(), f"${ENV_KEY}"
        if not key:
            raise LabError(f"no lab key: give --key-file, set ${ENV_KEY_FILE} (a path) or ${ENV_KEY} "
                           "(the key itself), or [lab].key_file")
        if not KEY_PATTERN.match(key) and ("/" in key or _names_a_file(key)):
            raise LabError(f"${ENV_KEY} holds the key itself, not a file's path: set ${ENV_KEY_FILE} to the "
                           "path instead (or give --key-file)")
    if not KEY_PATTERN.match(key):
        raise LabError(f"the lab key in {where} must be 16 to 256 letters and digits")
    return key


def _names_a_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (OSError, ValueError):
        return False


def _key_from_file(path: Path) -> str:
    """The first line of a key file, stripped; one line for a file that is missing, not text, or that is
    not a file name at all but the key itself (never echoed)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        if KEY_PATTERN.match(path.name) and not path.exists():
            raise LabError(f"the lab key file given (--key-file, [lab].key_file or ${ENV_KEY_FILE}) looks "
                           f"like the key itself: put the key in a file and give its path, or set ${ENV_KEY}"
                           ) from None
        raise LabError(f"cannot read the lab key file {path}: {exc.strerror or exc}") from None
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise LabError(f"the lab key file {path} is not text (not UTF-8): it must hold the key alone on its "
                       "line") from None
    return lines[0].strip() if lines else ""


def refuse_open_key_file(path: Path) -> None:
    """A key file that group or others may read or write is refused (one line), by the server and by every
    client: a key that others can read is no longer one person's."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return  # reading it says why
    if mode & 0o077:
        raise LabError(f"{path} is readable by others (mode {mode:o}): chmod 600 {path}")
