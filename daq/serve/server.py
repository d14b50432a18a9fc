"""``hil serve``: bind, print where the dashboard is, serve until SIGTERM/SIGINT.

The server binds its socket itself (port 0 picks a free port: :attr:`Server.port`), refuses an address
beyond loopback without TLS, creates the token file on first start (printing the URL with the token once,
as Jupyter does), opens the queue next to the store (its lock keeps a second server off the store) and runs
uvicorn in this process's event loop, with the connection limits of :mod:`daq.serve.connections`. The
signals belong to the server: SIGTERM or SIGINT abort the running run through its run context (in process,
:class:`~daq.serve.runner.Runner`), wait until it has reached the safe state and recorded its session, then
stop the server; queued runs stay queued for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from daq.errors import ConfigError
from daq.serve.api import Service, build_app
from daq.serve.auth import Tokens, check_bind, ensure_token_file, is_loopback
from daq.serve.configs import ConfigFolder
from daq.serve.connections import ConnectionLimits, JsonWebSocketProtocol, protocols
from daq.serve.exports import ExportPool
from daq.serve.lab_identity import LabKeys
from daq.serve.locks import RigLock
from daq.serve.relay import LiveRelay
from daq.serve.replays import Replayer
from daq.serve.rig_status import Heartbeat, RigLab
from daq.serve.run_queue import RunQueue
from daq.serve.runner import Runner
from daq.serve.same_origin import HostPolicy
from daq.serve.startup import BACKLOG, listen
from daq.store.read_write import SessionStore
from daq.tls import check_tls, load_without_session_tickets

log = logging.getLogger(__name__)


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # the signals are ours (see Server.serve)
        yield


def _print_on_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _never_failing(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` that drops its output when it cannot write: a terminal that closed (SIGHUP) or a parent that
    died leaves stderr a dead pipe, and the shutdown that follows must still abort the run through the
    safe state (it used to die on the EPIPE of its first status line, leaving the run going)."""
    def quiet(text: str) -> None:
        try:
            say(text)
        except (OSError, ValueError):  # BrokenPipeError, EIO of a hung-up terminal, a closed file
            pass
    return quiet


class Server:
    """One ``hil serve``: ``await Server(...).serve()``; ``port`` is known once ``started`` is set."""

    def __init__(self, configs: Path, store_path: Path, token_file: Path, host: str = "127.0.0.1",
                 port: int = 8765, certfile: str | None = None, keyfile: str | None = None,
                 say: Callable[[str], None] | None = None, allowed_hosts: tuple[str, ...] = (),
                 limits: ConnectionLimits | None = None, lab: RigLab | None = None):
        check_bind(host, certfile, keyfile)
        check_tls(certfile, keyfile)  # before any URL is announced
        self.hosts = HostPolicy(host, allowed_hosts)
        self.host, self.port, self.certfile, self.keyfile = host, port, certfile, keyfile
        self.limits = limits or ConnectionLimits()
        self.configs = ConfigFolder(Path(configs))
        if not self.configs.folder.is_dir():
            raise ConfigError(f"--configs {configs}: no such folder")
        self.store_path = Path(store_path)
        self.token_file = Path(token_file)
        self.say = _never_failing(say or _print_on_stderr)
        self.started = asyncio.Event()
        self.stopping = False
        self._uvicorn: _Uvicorn | None = None
        self.runner: Runner | None = None
        self.replayer: Replayer | None = None
        self.queue: RunQueue | None = None
        self.lab = lab  # --lab: people's lab keys, and the rig's state kept in the lab
        self.heartbeat: Heartbeat | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.certfile else "http"

    def url(self, token: str | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/" + (f"?token={token}" if token else "")

    def _check_configs_once(self) -> None:
        """Check every config of the folder once, in a thread, right after the start: the first check
        imports the rig kinds' code (seconds), which would otherwise fall on the first `POST /api/runs`."""
        try:
            self.configs.check_all()
        except OSError as exc:  # the folder is gone: each request says so itself
            log.warning("configs not checked ahead: %s", exc)

    async def serve(self, install_signals: bool = True) -> None:
        if self.token_file.exists():
            Tokens.load(self.token_file)  # a broken token file is one line before anything starts
        self.store_path.parent.mkdir(parents=True, exist_ok=True)
        SessionStore(self.store_path).close()  # create it; sessions of dead writers are marked incomplete
        self.queue = RunQueue.open(self.store_path.parent)
        exports = ExportPool(self.store_path)
        exports.clean()  # what a killed server left
        sock = None
        try:
            sock = listen(self.host, self.port)  # an occupied port fails here: no token file made yet
            self.port = sock.getsockname()[1]
            new_token = ensure_token_file(self.token_file)
            tokens = Tokens.load(self.token_file)
            relay = LiveRelay()
            self.runner = Runner(self.queue, self.configs, self.store_path, relay)
            self.replayer = Replayer(self.store_path, relay, self.runner)
            self.runner.before_run = lambda: self.replayer.stop("a queued run started")
            locks = RigLock(self.store_path.parent)
            self.runner.may_start = lambda entry: locks.may_queue(entry.by)  # a locked rig: its holder's only
            self.runner.start()
            service = Service(tokens, self.configs, self.store_path, self.queue, self.runner, relay,
                              open_reads=is_loopback(self.host), replayer=self.replayer, hosts=self.hosts,
                              exports=exports, secure=bool(self.certfile),
                              lab_keys=LabKeys(self.lab.url, self.lab.cache_s) if self.lab else None,
                              locks=locks)
            config = uvicorn.Config(build_app(service), log_level="warning", access_log=False, lifespan="off",
                                    ssl_certfile=self.certfile, ssl_keyfile=self.keyfile, loop="asyncio",
                                    http=protocols(self.limits), ws=JsonWebSocketProtocol,
                                    ws_ping_interval=20.0, ws_per_message_deflate=False,
                                    timeout_keep_alive=self.limits.keep_alive, backlog=BACKLOG,
                                    timeout_graceful_shutdown=5)
            load_without_session_tickets(config)
            self._uvicorn = _Uvicorn(config)
            if install_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.add_signal_handler(sig, lambda s: loop.create_task(self.shutdown(s.name)), sig)
            if new_token:
                self.say(f"created the token file {self.token_file} (token name: "
                         f"{next(iter(tokens.names.values()))}); open the dashboard with the token once:\n"
                         f"    {self.url(new_token)}")
            else:
                self.say(f"hil serve on {self.url()} (tokens in {self.token_file}; open "
                         f"{self.url('TOKEN')} once)")
            self.say(f"store {self.store_path}, configs {self.configs.folder}, "
                     f"{len(self.queue.queued)} run(s) queued")
            serving = asyncio.get_running_loop().create_task(self._uvicorn.serve(sockets=[sock]))
            while not self._uvicorn.started and not serving.done():
                await asyncio.sleep(0.01)
            self.started.set()
            if self.lab is not None:
                self.heartbeat = Heartbeat(self.lab, service, self.url()).start()
            warm = asyncio.get_running_loop().run_in_executor(None, self._check_configs_once)
            await serving
            await warm
        finally:
            if install_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(sig)
            if self.heartbeat is not None:
                await self.heartbeat.stop()
            if self.replayer is not None:
                await self.replayer.stop("hil serve stopped")
            if self.runner is not None and not self.stopping:
                await self.runner.shutdown()
            exports.clean()
            if sock is not None:
                sock.close()
            self.queue.close()

    async def shutdown(self, why: str = "shutdown") -> None:
        """Abort the running run (safe state, session finished), keep the queue, stop serving."""
        if self.stopping:
            return
        self.stopping = True
        self.say(f"{why}: stopping" + (" (aborting the current run first)" if self.queue and
                                       self.queue.current else ""))
        if self.replayer is not None:
            await self.replayer.stop("hil serve stopped")
        if self.runner is not None:
            await self.runner.shutdown(why)
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
