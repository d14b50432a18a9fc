"""``hil lab serve``: Tiled's own server for the lab, run in this process.

The catalogue is a SQL database (SQLite in the data folder by default, PostgreSQL by URI for a lab of
many rigs); arrays and tables are written by Tiled under the data folder. People hold keys of their own
with a role (viewer, operator, admin: :mod:`daq.lab.people`); the first start makes an admin's key (a
0600 file). The server binds loopback unless given a TLS certificate.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from daq.lab import entry_lookup, key_cache, orphans, people_server
from daq.lab.connect import INSTALL_LAB, tiled_missing
from daq.lab.live_sweep import start_sweep
from daq.lab.names import catalog_database_uri
from daq.lab.page import HostCheck, mount_page
from daq.lab.pg_indexes import ensure_search_indexes
from daq.lab.private import private_file, private_folder, private_umask, sqlite_path
from daq.lab.reply_models import keep_reply_models
from daq.lab.settings import LabError
from daq.tls import check_tls, load_without_session_tickets

log = logging.getLogger("hil.lab")

#: Names inside the data folder.
CATALOG_FILE = "catalog.db"
ARRAYS_DIR = "data"
KEY_FILE = "lab.key"
#: Tiled's streaming cache (live sessions, daq/lab/live.py): in this process's memory, as one server process
#: serves the lab. It holds each write a subscriber may ask for again (``subscribe().start(start=N)``) for
#: data_ttl seconds, at most maxsize of them; the catalogue and the arrays stay the record. A lab of several
#: server processes uses Redis instead (docs/lab.md).
STREAMING_CACHE = {"uri": "memory", "data_ttl": 120, "seq_ttl": 86400, "maxsize": 20000}


@dataclass
class ServeOptions:
    """What ``hil lab serve`` was asked for."""

    data_dir: Path
    catalog: str | None = None  # a database URI; default sqlite in data_dir
    key_file: Path | None = None  # default data_dir/lab.key
    host: str = "127.0.0.1"
    port: int = 8000
    certfile: str | None = None
    keyfile: str | None = None
    arrays: str | None = None  # a writable location for arrays (folder or s3://...); default data_dir/data
    auth_db: str | None = None  # Tiled's authentication database (people, keys); default sqlite in data_dir

    @property
    def tls(self) -> bool:
        return bool(self.certfile and self.keyfile)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_options(opts: ServeOptions) -> None:
    """Refuse what would expose the lab unencrypted (beyond loopback only with TLS), and TLS files that
    are missing or not a certificate and its key (one line naming the file)."""
    if bool(opts.certfile) != bool(opts.keyfile):
        raise LabError("give both --certfile and --keyfile for TLS")
    check_tls(opts.certfile, opts.keyfile)
    if not is_loopback(opts.host) and not opts.tls:
        raise LabError(f"--host {opts.host} is reachable from other machines: give --certfile and --keyfile "
                       "(TLS), or bind 127.0.0.1")


def require_tiled_server() -> None:
    """One line naming the install command when Tiled's server is missing (before a key file is made)."""
    if tiled_missing("server"):
        raise LabError(f"hil lab serve needs Tiled's server, which is not installed: {INSTALL_LAB}")


def catalog_uri(opts: ServeOptions) -> str:
    if opts.catalog:
        return catalog_database_uri(opts.catalog)  # a bare word is refused, not made an SQLite file
    return f"sqlite+aiosqlite:///{opts.data_dir / CATALOG_FILE}"


def build_lab_app(opts: ServeOptions, auth_uri: str):
    """Tiled's app over the lab catalogue (created on first start); people's keys in ``auth_uri``."""
    try:
        from tiled.catalog import from_uri  # lazy: tiled's server side is heavy, only the lab server needs it
        from tiled.server.app import build_app  # lazy: as above
    except ImportError as exc:  # say which import failed: a broken dependency is not a missing extra
        raise LabError(f"the lab server needs Tiled's server ({exc}): {INSTALL_LAB}") from None
    out_of_collector_sight()  # Tiled's server modules: building the app below walks them no more

    arrays = opts.arrays or str(opts.data_dir / ARRAYS_DIR)
    if "://" not in arrays:
        Path(arrays).mkdir(parents=True, exist_ok=True)
    try:
        init_catalog(catalog_uri(opts))
        if catalog_uri(opts).startswith("postgresql"):  # range searches from indexes (daq/lab/pg_indexes.py)
            ensure_search_indexes(catalog_uri(opts))
        if "://" not in arrays:  # half-made arrays of a server killed mid-write (daq/lab/orphans.py)
            for old, new in orphans.set_aside(catalog_uri(opts), Path(arrays), opts.data_dir):
                log.warning("set aside %s, an array a stopped server left half made: now %s", old, new)
        tree = from_uri(catalog_uri(opts), writable_storage=[arrays], cache_config=dict(STREAMING_CACHE))
    except Exception as exc:  # noqa: BLE001 - tiled's init names the database problem
        raise LabError(f"cannot open the lab catalogue: {' '.join(str(exc).split())[-400:]}") from None
    app = build_app(tree, people_server.authentication(), people_server.server_settings(auth_uri))
    keys = key_cache.install()  # a key looked up once per request and 2 s, not three times per request
    keep_reply_models()  # Tiled's per-node reply classes made once, not again per request
    entry_lookup.install()  # a node found by its whole path in one query, not a query per segment
    people_server.record_changes(app, auth_uri, opts.data_dir / people_server.CHANGES_FILE,
                                 keys.clear if keys is not None else None)
    mount_page(app, HostCheck(opts.host), secure=opts.tls)  # the lab's own page at /lab/ (daq/lab/page.py)
    serve_without_settings_override(app)
    return app


def out_of_collector_sight() -> None:
    """Collect what is garbage now, then move everything left out of the garbage collector's sight for the
    server's life (``gc.freeze``). The server's modules and app are some 360,000 objects that live as long
    as it does; Python's full collections, which requests' garbage sets off, walked all of them again each
    time: a full collection took 0.25 CPU-s with them and 0.01 without, and building Tiled's app 0.56 and
    0.18 (it sets off several). Objects made later are collected as always."""
    gc.collect()
    gc.freeze()


def serve_without_settings_override(app) -> None:
    """While the server runs, drop Tiled's one dependency override (``get_settings``) when it is redundant.

    FastAPI rebuilds every dependency of every request - signatures inspected again - while any override is
    set (fastapi/fastapi#14441): a fifth of the lab server's CPU per request. Tiled's override applies the
    server's settings to the very object its cached ``get_settings()`` returns, so once called it changes
    nothing; it is dropped only when that holds, and put back for Tiled's shutdown, which looks it up."""
    from tiled.server.settings import get_settings  # lazy: as build_lab_app

    tiled_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with tiled_lifespan(app) as state:
            overrides = app.dependency_overrides
            override = overrides.get(get_settings)
            redundant = override is not None and override() is get_settings() and len(overrides) == 1
            if redundant:
                del app.dependency_overrides[get_settings]
            try:
                yield state
            finally:
                if redundant:
                    app.dependency_overrides[get_settings] = override

    app.router.lifespan_context = lifespan


def init_catalog(uri: str) -> None:
    """Create the catalogue's tables unless they are there, with Tiled's own ``tiled catalog init
    --if-not-exists``, called in this process: Tiled's ``from_uri(init_if_not_exists=True)`` runs it in a
    child Python that imports Tiled again (4 of the 9 s a lab server took to start). Nothing runs an event
    loop yet here, which is what Tiled's child process is for."""
    from tiled.commandline._catalog import init  # lazy: as above

    init(uri, if_not_exists=True)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), so the URL is known before the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on a socket that says it is TCP; without it a reply
    # written in two parts waited for the client's delayed ACK, 40 ms per request on a kept-alive connection
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise LabError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def url_of(opts: ServeOptions, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if opts.tls else 'http'}://{host}:{port}"


def serve(opts: ServeOptions, say=print) -> None:
    """Run the lab server until SIGINT/SIGTERM (uvicorn's own handlers end it cleanly); its folders and
    files are its OS user's only."""
    check_options(opts)
    if opts.catalog:
        catalog_uri(opts)  # refused before anything is made
    require_tiled_server()
    make_private(opts, say)
    with private_umask():  # the catalogue, arrays and tables Tiled creates: the server's user only
        _serve(opts, say)


def make_private(opts: ServeOptions, say=print) -> None:
    """The data folder, the arrays folder and a SQLite catalogue: made or tightened to the server's OS
    user (daq/lab/private.py)."""
    private_folder(opts.data_dir, say)
    arrays = opts.arrays or str(opts.data_dir / ARRAYS_DIR)
    if "://" not in arrays:
        private_folder(Path(arrays), say)
    db = sqlite_path(catalog_uri(opts))
    if db is not None:
        private_file(db, say)


def _serve(opts: ServeOptions, say) -> None:
    import uvicorn  # lazy: only the servers need it

    key_file = opts.key_file or opts.data_dir / KEY_FILE
    auth_uri = people_server.auth_uri(opts.data_dir, opts.auth_db)
    created = people_server.prepare(auth_uri, key_file)
    app = build_lab_app(opts, auth_uri)
    out_of_collector_sight()  # the app, its routes and models: kept for the server's life anyway
    sock = bind(opts.host, opts.port)
    config = uvicorn.Config(app, log_level="warning", ssl_certfile=opts.certfile, ssl_keyfile=opts.keyfile,
                            timeout_graceful_shutdown=5)
    load_without_session_tickets(config)
    server = uvicorn.Server(config)
    for sig in (signal.SIGINT, signal.SIGTERM):  # a stop before uvicorn has the signals: ends after start-up
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    say(f"admin key {'written to' if created else 'in'} {key_file}")
    say(url_of(opts, sock))
    stop = threading.Event()
    # live sessions whose rig went silent: incomplete
    start_sweep(url_of(opts, sock), key_file, stop, opts.certfile)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the Ctrl-C it caught
        pass
    finally:
        stop.set()
        sock.close()
    say("lab server stopped")
