"""Exports for ``hil serve`` on a bounded pool, apart from control and listing, with nothing left behind.

Each export runs in a process of its own (:mod:`daq.serve.export_job`, niced), at most :data:`WORKERS` at
a time and :data:`WAITING` more waiting for a slot; beyond that the request is answered 503 with
``Retry-After``. Listing and control never wait for an export (they use neither its slots nor its
threads). The file is made in a folder of its own under ``<store folder>/serve-exports/``; the folder goes
when the client leaves before the file is ready (the process is killed), when the file has been opened for
sending (it is removed from the disk at once and streamed from the open file), when the server exits, and
at the next start (what a killed server left)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from daq.serve.analyses import NICE
from daq.serve.problems import Busy, NotFound, RequestError

WORKERS = 2            # exports made at a time
WAITING = 4            # exports waiting for a slot, at most; more: 503
RETRY_AFTER_S = 10     # what a 503 asks the client to wait
CHUNK = 1 << 20        # bytes per body message
DISCONNECT_POLL_S = 0.25
FORMATS = ("hdf5", "mat", "csv")


class ExportFailed(RequestError):
    """The export process failed (its one ``Error:`` line)."""

    status = 500


class ClientGone(Exception):
    """The client left before its export was ready."""


class ExportPool:
    def __init__(self, store_path: Path, workers: int = WORKERS, waiting: int = WAITING) -> None:
        self.store_path = Path(store_path)
        self.root = self.store_path.parent / "serve-exports"
        self.workers, self.capacity = workers, workers + waiting
        self.admitted = 0
        self.running: set[asyncio.subprocess.Process] = set()
        self._slots: asyncio.Semaphore | None = None

    def clean(self) -> None:
        """Remove every export folder (at start: a killed server's; at exit: those still in the making)."""
        for proc in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    async def make(self, session_id: str, fmt: str, gone: Callable[[], Awaitable[bool]]) -> tuple[Path, str]:
        """The export file of ``session_id`` (a full id) and its download name; Busy when the pool is
        full, ClientGone when ``gone()`` said the client left first (the folder is removed either way)."""
        if fmt not in FORMATS:
            raise NotFound(f"no export format {fmt!r} (use {', '.join(FORMATS)})")
        if self.admitted >= self.capacity:
            raise Busy(f"{self.admitted} exports are in the making or waiting (at most {self.capacity}): "
                       f"try again in {RETRY_AFTER_S} s", RETRY_AFTER_S)
        self.admitted += 1
        self._slots = self._slots or asyncio.Semaphore(self.workers)
        try:
            waiter = asyncio.ensure_future(self._slots.acquire())
            try:
                await _unless_gone(waiter, gone)
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._slots.release()
                raise
            try:
                return await self._run(session_id, fmt, gone)
            finally:
                self._slots.release()
        finally:
            self.admitted -= 1

    async def _run(self, session_id: str, fmt: str, gone: Callable[[], Awaitable[bool]]) -> tuple[Path, str]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder = Path(tempfile.mkdtemp(prefix=f"{session_id}-{fmt}-", dir=self.root))
        proc = None
        try:
            nice = ["nice", "-n", str(NICE)] if shutil.which("nice") else []
            proc = await asyncio.create_subprocess_exec(
                *nice, sys.executable, "-m", "daq.serve.export_job", str(self.store_path), session_id, fmt,
                str(folder), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
            self.running.add(proc)
            out, err = await _unless_gone(asyncio.ensure_future(proc.communicate()), gone)
            if proc.returncode != 0:
                lines = [x for x in err.decode(errors="replace").splitlines() if x.startswith("Error:")]
                raise ExportFailed(lines[-1].removeprefix("Error: ") if lines else
                                   f"the export ended with exit code {proc.returncode}")
            name = out.decode().strip()
            return folder / name, name
        except BaseException:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.shield(proc.wait())
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            if proc is not None:
                self.running.discard(proc)


async def _unless_gone(task: asyncio.Future, gone: Callable[[], Awaitable[bool]]):
    """``await task``, polling ``gone()``; the task is cancelled and ClientGone raised when it says so."""
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await gone():
                raise ClientGone
    except BaseException:
        task.cancel()
        raise


class ExportResponse(Response):
    """The export file as the body: opened, removed from the disk with its folder, then streamed from the
    open file - nothing stays on disk whatever happens to the connection."""

    def __init__(self, path: Path, filename: str, media_type: str) -> None:
        self.file = open(path, "rb")  # noqa: SIM115 - closed in __call__ (or by the collector)
        size = os.fstat(self.file.fileno()).st_size
        shutil.rmtree(path.parent, ignore_errors=True)
        super().__init__(media_type=media_type, headers={
            "Content-Disposition": f'attachment; filename="{filename}"', "Content-Length": str(size)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            while chunk := await asyncio.to_thread(self.file.read, CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()
