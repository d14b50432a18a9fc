"""The suite's `hil lab serve` processes, forked from one process per pytest worker that imported the lab
server's modules once.

Starting `python -m daq.cli.main lab serve` costs ~6 CPU-s, ~4.5 of them importing Tiled's server side (its
adapters import dask.dataframe, pandas, sparse, xarray); the suite starts a few dozen. The zygote imports
those modules once, then forks a child for each server a test asks for. The child runs the same entry
point with the test's arguments, environment, working folder, stdout (a pipe) and stderr (a file), so the
server is the real one: its own process, its own pid for signals (SIGINT, SIGKILL, SIGSTOP), its exit code.
What the child skips is only the interpreter's start and the imports.

The zygote has no threads when it forks (checked before each fork); it talks to the worker over a Unix
socketpair (one JSON message each; a child's stdout is handed over as a file descriptor) and kills the
children it still has when the worker goes away.

    python -m tests.zygote FD   (FD: the zygote's end of the socketpair)
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what a lab server imports; imported once, in the zygote, before any fork
PRELOAD = ("daq.cli.main", "daq.lab.server", "daq.lab.people_server", "daq.lab.page", "tiled.catalog",
           "tiled.server.app", "tiled.commandline._catalog", "tiled.authn_database.core",
           "tiled.alembic_utils", "sqlalchemy.ext.asyncio", "uvicorn",
           # what a server imported only once it served (py-spy of the children): the array store (its
           # first array), dask's check for distributed (its first table read), the event loop's parts
           "tiled.adapters.zarr", "distributed", "pydantic.v1", "anyio._backends._asyncio",
           "uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.websockets.auto", "uvloop")

MAX_MESSAGE = 1 << 20


# --- the zygote's side -----------------------------------------------------------------------------------

def _child(request: dict, out_w: int, sock: socket.socket) -> None:
    """In the forked child: become `hil ARGS` as a fresh process would be, run it, exit with its code."""
    code = 1
    try:
        sock.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out_w, 1)
        os.close(out_w)
        if request.get("stderr"):
            err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(err, 2)
            os.close(err)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own stdout
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - as above
        sys.argv = ["hil", *request["argv"]]
        from daq.cli.main import main

        try:
            main(request["argv"], prog_name="hil")
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:  # as Python does for an uncaught one: die of the signal
            sys.stdout.flush()
            sys.stderr.flush()
            _note_cpu(request)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - as an uncaught exception: its traceback, exit 1
            traceback.print_exc()
    finally:
        _note_cpu(request)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - the reader went: nothing to tell
                pass
        os._exit(code)


def _note_cpu(request: dict) -> None:
    """With $HIL_PER_TEST_CPU set (benchmarks/suite_cpu.py --per-test), this child's CPU and the test that
    started it, once, into that folder's servers.jsonl (benchmarks/per_test_cpu.py)."""
    folder = os.environ.get("HIL_PER_TEST_CPU")
    if not folder or getattr(_note_cpu, "done", False):
        return
    _note_cpu.done = True  # type: ignore[attr-defined]
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)  # a forked child's count starts at its fork
    with contextlib.suppress(OSError), open(Path(folder) / "servers.jsonl", "a") as out:
        out.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST"), "argv": request["argv"][:2],
                              "cpu": usage.ru_utime + usage.ru_stime}) + "\n")


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        sock.send(json.dumps({"exit": pid, "rc": os.waitstatus_to_exitcode(status)}).encode())


def zygote(fd: int) -> None:
    """Import PRELOAD, then fork a child for each request until the worker closes its end."""
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the preloaded modules out of the collector's sight: a child's full collections skip them
    sock = socket.socket(fileno=fd)
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    children: set[int] = set()
    try:
        while True:
            ready, _, _ = select.select([sock], [], [], 0.1)
            _reap(sock, children)
            if not ready:
                continue
            message = sock.recv(MAX_MESSAGE)
            if not message:
                return  # the worker went
            request = json.loads(message)
            if threading.active_count() != 1:  # a fork copies one thread: the others' locks would hang
                raise RuntimeError(f"the zygote has threads: {threading.enumerate()}")
            out_r, out_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(out_r)
                _child(request, out_w, sock)
            os.close(out_w)
            children.add(pid)
            socket.send_fds(sock, [json.dumps({"id": request["id"], "pid": pid}).encode()], [out_r])
            os.close(out_r)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


# --- the worker's side -----------------------------------------------------------------------------------

class Child:
    """A process the zygote forked, with the parts of subprocess.Popen the tests use."""

    def __init__(self, zygote: Zygote, pid: int, stdout_fd: int, args: list[str]):
        self._zygote = zygote
        self.pid = pid
        self.args = args
        self.stdout = os.fdopen(stdout_fd, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The worker's handle on its zygote: starts it, asks it for children, learns of their exits."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], cwd=ROOT, stdout=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()  # one request at a time
        self.changed = threading.Condition()
        self.exits: dict[int, int] = {}
        self.replies: dict[int, tuple[int, int]] = {}
        self.ready = False
        self.gone = False
        self.asked = 0
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()
        self._until(lambda: self.ready, 300, "the zygote did not start")

    def _read(self) -> None:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 1)
            except OSError:
                message, fds = b"", []
            with self.changed:
                if not message:
                    self.gone = True
                    self.changed.notify_all()
                    return
                note = json.loads(message)
                if "ready" in note:
                    self.ready = True
                elif "exit" in note:
                    self.exits[note["exit"]] = note["rc"]
                else:
                    self.replies[note["id"]] = (note["pid"], fds[0])
                self.changed.notify_all()

    def _until(self, done, timeout: float | None, what: str) -> bool:
        with self.changed:
            if self.changed.wait_for(lambda: done() or self.gone, timeout) and not done():
                raise RuntimeError(f"{what}: the zygote ended (exit {self.proc.poll()})")
            return done()

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, stderr: Path | None) -> Child:
        """`hil ARGV` in a forked child; its stdout is the returned handle's ``stdout`` (bytes)."""
        with self.lock:
            self.asked += 1
            key = self.asked
            self.sock.send(json.dumps({"id": key, "argv": argv, "env": env, "cwd": str(cwd),
                                       "stderr": str(stderr) if stderr else None}).encode())
            if not self._until(lambda: key in self.replies, 120, "no child"):
                raise RuntimeError("the zygote did not fork a child in 120 s")
            pid, fd = self.replies.pop(key)
        return Child(self, pid, fd, ["hil", *argv])

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit code once it ended (None if it is still running after ``timeout`` s)."""
        self._until(lambda: pid in self.exits, timeout, f"child {pid}")
        return self.exits.get(pid)

    def close(self) -> None:
        """End the zygote: it kills the children it has left and returns once its end of the socket reads
        the end. ``shutdown`` first: the reader thread is blocked in a receive on this socket, and a plain
        ``close`` leaves the socket open beneath it, so the zygote never saw the end and a worker waited
        here at exit until xdist's 10 s ran out and it was killed before its other exit handlers ran."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_zygote: Zygote | None = None
_made = threading.Lock()


def hil_child(argv: list[str], env: dict[str, str], cwd: Path, stderr: Path | None = None) -> Child:
    """`hil ARGV` forked from this worker's zygote (made on first use, closed when the worker ends)."""
    global _zygote
    with _made:
        if _zygote is None or _zygote.gone:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        zygote = _zygote
    return zygote.start(argv, env, cwd, stderr)


if __name__ == "__main__":
    zygote(int(sys.argv[1]))
