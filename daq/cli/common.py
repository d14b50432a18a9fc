"""What the command modules share: the resolved global options (:class:`CliState`, handed to commands
through click's context object), JSON output, progress on stderr and the one mapping of the project's
error tree to exit codes and one-line messages. Imports nothing of ``daq.cli``."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from daq import json_codec
from daq.bus.handshake import CONNECT_TIMEOUT, HandshakeFailed, handshake
from daq.bus.keys import ENV_KEYS, CurveKeys, default_keys_dir, is_local, load_keys
from daq.config.load import SiteValuesMissing, store_path_for
from daq.errors import one_line
from daq.lab.reader import LabReader
from daq.lab.settings import read_key
from daq.rigs.config import load_shared
from daq.store.read_write import SessionStore
from drivers.errors import HilError

if TYPE_CHECKING:  # annotations only: rich loads when a bar is drawn
    from rich.progress import Progress, TaskID

# ----------------------------------------------------------------------------- a rig's process

def rig_process() -> None:
    """Set up a process that drives a rig (``hil run``, ``hil sim``, ``hil serve``): BLAS on one thread for
    its whole life. Its matrices are small (a plant's state, a fit of tens of columns), and a multi-threaded
    OpenBLAS keeps its idle threads spinning on ``sched_yield`` after every call: with numpy 1.26 (the
    lowest declared) a simulated press run spent 10 s of system time in 15 s, and on a loaded 2-core PC
    its force polls fell to 35 of 200 per second. Analyses this process starts inherit the setting; their
    pools set it themselves anyway."""
    from identification.estimation.blas import limit_blas_to_one_thread  # lazy: threadpoolctl

    limit_blas_to_one_thread()


# ----------------------------------------------------------------------------- errors -> exit codes

#: Exit codes by error family, first match wins. Every error of the project's tree (drivers.errors,
#: daq.errors: device, config, protocol, store, plan) is a user mistake or an unreachable peer: one
#: ``Error: ...`` line and exit code 1, never a traceback; so are files the OS refuses. (Exit code 2 is
#: click's usage error and `hil run`'s "safe state not confirmed".)
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (HilError, 1),
    (OSError, 1),
)


def exit_code(exc: BaseException) -> int | None:
    """The exit code for ``exc``, or None for an unexpected error (a bug: it keeps its traceback)."""
    for family, code in EXIT_CODES:
        if isinstance(exc, family):
            return code
    return None


class OneLineError(click.ClickException):
    """A project error on its way out of the CLI: ``Error: <one line>`` and its exit code. A config with
    values the site must still supply is the one error of several lines: its summary, then one line per
    value (key path and what to put there)."""

    def __init__(self, exc: BaseException, code: int) -> None:
        if isinstance(exc, SiteValuesMissing):
            super().__init__("\n".join([exc.summary + ":", *(f"  {line}" for line in exc.lines)]))
        else:
            super().__init__(one_line(exc))
        self.exit_code = code  # type: ignore[misc]  # click's stubs say ClassVar; click reads it per instance


def quiet_broken_pipe() -> click.exceptions.Exit:
    """What to raise when stdout's reader went away (``hil show X | head``): no message, no traceback.
    stdout is pointed at devnull first so that flushing it at exit cannot fail again (the recipe of
    the Python docs, signal module, "Note on SIGPIPE"); exit code 1 as Python's own on EPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (tests' captured output)
        pass
    return click.exceptions.Exit(1)


def positive_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Option callback: a finite number of seconds above zero (``float`` alone lets inf and nan through,
    and an infinite timeout waits forever). A one-line error, exit code 1."""
    if value is not None and not (math.isfinite(value) and value > 0):
        name = param.opts[0] if param.opts else param.name
        raise click.ClickException(f"{name} must be a finite number of seconds above 0, got {value:g}")
    return value


# ----------------------------------------------------------------------------- CURVE clients

#: The help of every client's ``--keys`` option.
KEYS_HELP = (f"CURVE keys folder with the server's server.key and a client key pair (default: ${ENV_KEYS}, "
             "else ~/.config/hil/keys when it exists); needed for a run whose [bus] has keys.")


def client_keys(endpoint: str, keys_dir: str | None = None) -> CurveKeys | None:
    """The keys a client offers ``endpoint``: ``--keys``, else ``$HIL_KEYS`` (required to exist for an
    endpoint beyond loopback), else the default folder when it exists, else none."""
    if keys_dir:
        return load_keys(keys_dir)
    folder = default_keys_dir()
    if os.environ.get(ENV_KEYS) and not is_local(endpoint):
        return load_keys(folder)
    return load_keys(folder) if folder.is_dir() else None


async def checked_keys(endpoint: str, keys: CurveKeys | None, socket_type: int, explicit: bool = False,
                       timeout: float = CONNECT_TIMEOUT) -> CurveKeys | None:
    """The keys that get through to ``endpoint`` (a probe handshake, bounded by ``timeout``), else
    :class:`HandshakeFailed` saying what to pass. Keys the user did not name (``$HIL_KEYS``, the default
    folder) are dropped for a plain server on loopback; beyond loopback a plain server is refused."""
    try:
        await handshake(endpoint, keys, socket_type, timeout)
        return keys
    except HandshakeFailed as exc:
        if not (exc.plain_server and not explicit and is_local(endpoint)):
            raise
    await handshake(endpoint, None, socket_type, timeout)
    return None


# ----------------------------------------------------------------------------- global options

#: The help of every ``--key-file`` that takes the lab's key: what each source holds, in the order tried.
LAB_KEY_HELP = ("Path of the file holding the lab's API key alone on its line; else [lab].key_file of "
                "--config (a path), $HIL_LAB_KEY_FILE (a path) or $HIL_LAB_KEY (the key itself).")


@dataclass
class CliState:
    """What the global options resolved to; commands get it from ``ctx.obj`` (:data:`pass_state`)."""

    store_option: str | None
    config_path: str | None
    _config: Any = field(default=None, repr=False)
    lab_key_file: str | None = None  # --key-file: the lab's API key when --store is a lab URL

    @property
    def config(self) -> Any:
        """The ``--config`` file's shared tables ([rig], [bus], [store]; a typed ``RigConfig``), loaded and
        validated on first use (None without --config)."""
        if self._config is None and self.config_path is not None:
            self._config = load_shared(self.config_path)
        return self._config

    @property
    def store_path(self) -> Path:
        """The one rule (daq.config.load.store_path_for): --store, $HIL_STORE, the --config's [store].path
        (relative to the config's folder), else the user data directory."""
        return store_path_for(self.store_option, self.config)

    @property
    def is_lab(self) -> bool:
        """--store names a lab (http:// or https://) instead of a local file."""
        return (self.store_option or "").startswith(("http://", "https://"))

    def open_store(self, create: bool = False) -> SessionStore | LabReader:
        if self.is_lab:  # a lab: read-only, the same reads as a local store (daq/lab/reader.py)
            table = getattr(self.config, "lab", None)
            key_file = self.lab_key_file or (table.key_file if table else None)
            assert self.store_option is not None  # is_lab
            return LabReader(self.store_option, read_key(key_file))
        return SessionStore(self.store_path, create=create)


pass_state = click.make_pass_decorator(CliState)


# ----------------------------------------------------------------------------- output


def json_default(obj):
    """numpy scalars and arrays as Python values, anything else as its text."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def echo_json(obj) -> None:
    click.echo(json_codec.dumps(obj, indent=2, default=json_default))


#: Progress is shown for exports/replays of at least this many samples / messages.
PROGRESS_MIN_ITEMS = 2_000_000


class StderrProgress:
    """A ``progress(done, total)`` callback drawing on stderr: a rich bar on a terminal, a line
    every 10 % otherwise; silent for small jobs (below ``min_items``). Never writes to stdout."""

    def __init__(self, label: str, min_items: int = PROGRESS_MIN_ITEMS, unit: str = "samples"):
        self.label, self.min_items, self.unit = label, min_items, unit
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._next_pct = 10

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_items:
            return
        if sys.stderr.isatty():
            if self._bar is None:
                from rich.console import Console  # lazy: rich only for a bar on a terminal
                from rich.progress import Progress

                self._bar = Progress(console=Console(stderr=True), transient=True)
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=total)
            assert self._task is not None  # added with the bar
            self._bar.update(self._task, completed=done)
        elif done * 100 >= self._next_pct * total:
            pct = 100 * done // total
            click.echo(f"{self.label}: {pct} % ({done:,} of {total:,} {self.unit})", err=True)
            self._next_pct = pct // 10 * 10 + 10

    def __enter__(self) -> StderrProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def progress_printer():
    """Progress of long analyses on stderr: a bar on a terminal, plain lines otherwise."""
    from rich.console import Console  # lazy: rich is slow to import and only analyses need it
    from rich.progress import Progress

    console = Console(stderr=True)
    state: dict = {"last": -1}

    def update(done: int, total: int, what: object = "") -> None:
        label = str(what) if what else "analysis"
        if not console.is_terminal:
            step = max(1, total // 20)
            if done == total or done - state["last"] >= step:
                state["last"] = done
                click.echo(f"{done}/{total} {label}", err=True)
            return
        if "bar" not in state:
            state["bar"] = Progress(console=console, transient=True)
            state["task"] = state["bar"].add_task("analysis", total=total)
            state["bar"].start()
        state["bar"].update(state["task"], completed=done, description=label)
        if done >= total:
            state["bar"].stop()

    return update
