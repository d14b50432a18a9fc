"""The run's progress bar on stderr (stdout stays clean for ``--json``); decoration that never fails a run."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)


class ProgressBar:
    """A rich progress bar on stderr (stdout stays clean for --json)."""

    def __init__(self, kind: str, total: int | None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=Console(stderr=True), transient=False)
        self._task = self._bar.add_task(f"{kind} plan", total=total)
        self._bar.start()

    def advance(self, n: int = 1, description: str | None = None) -> None:
        kw: dict[str, Any] = {"description": description} if description else {}
        with _terminal_may_be_gone():
            self._bar.update(self._task, advance=n, **kw)

    def close(self) -> None:
        with _terminal_may_be_gone():
            self._bar.stop()


@contextlib.contextmanager
def _terminal_may_be_gone():
    """The bar is decoration: when its terminal has closed (SIGHUP) or the reader of a pipe died, rich
    raises SystemExit on the broken pipe (OSError/ValueError elsewhere) - which, raised from the run's
    clean-up, skipped finishing the session. Drop the bar instead; the run ends as it would have."""
    try:
        yield
    except (OSError, ValueError, SystemExit) as exc:
        log.warning("progress bar dropped: its terminal is gone (%s)", type(exc).__name__)

