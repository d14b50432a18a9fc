"""The lab's files are the server's OS user's alone: ``hil lab serve`` makes its folders 0700 and its
SQLite catalogue 0600, tightens existing ones that are open to others (one line each), refuses those it
cannot tighten, and creates everything else with a umask of 077 - so a local user without a key reads
no session from the disk."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from daq.lab.settings import LabError

FOLDER_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, mode: int, say: Callable[[str], None]) -> None:
    """Clear the group and others bits of an existing ``path`` (one line when they were set)."""
    old = stat.S_IMODE(path.stat().st_mode)
    if not old & 0o077:
        return
    try:
        os.chmod(path, old & ~0o077 | (mode & 0o700))
    except OSError as exc:
        raise LabError(f"{path} is open to others (mode {old:o}) and cannot be made private "
                       f"({exc.strerror or exc}): chmod {mode:o} {path}") from None
    say(f"made {path} private (mode {old:o} -> {stat.S_IMODE(path.stat().st_mode):o})")


def private_folder(path: Path, say: Callable[[str], None]) -> None:
    """``path`` as a folder only its owner enters: made 0700, or an existing one tightened."""
    if path.exists() and not path.is_dir():
        raise LabError(f"{path} is not a folder")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=FOLDER_MODE)
        os.chmod(path, FOLDER_MODE)  # mkdir's mode passes through the umask
        return
    _tighten(path, FOLDER_MODE, say)


def private_file(path: Path, say: Callable[[str], None]) -> None:
    """An existing file (a catalogue) tightened to its owner; a missing one is left to its maker (the
    umask of :func:`private_umask` makes it 0600)."""
    if path.is_file():
        _tighten(path, FILE_MODE, say)


def sqlite_path(uri: str) -> Path | None:
    """The file of a SQLite catalogue URI (``sqlite+aiosqlite:///path``), else None."""
    scheme, sep, rest = uri.partition(":///")
    if not sep or not scheme.startswith("sqlite") or not rest or rest.startswith(":memory:"):
        return None
    return Path(rest.split("?", 1)[0])


@contextmanager
def private_umask() -> Iterator[None]:
    """Files and folders created meanwhile (Tiled's arrays and tables, SQLite's journals) are the owner's
    only; the previous umask is restored after."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
