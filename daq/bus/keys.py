"""CURVE keys for the command channel and the data bus, and the rule for when they are required.

Rule: a socket that *binds* beyond loopback (``0.0.0.0``, ``*``, a LAN address, a host name) must
use ZeroMQ CURVE; without keys the bind is refused (:class:`InsecureEndpoint`). Loopback TCP,
``ipc://`` and ``inproc://`` endpoints stay open to local users only and need no keys.

Keys live in one folder, by default ``$HIL_KEYS`` or else ``~/.config/hil/keys`` (honouring
``$XDG_CONFIG_HOME``), made by ``hil keys init``::

    server.key, server.key_secret   the service's key pair (the secret never leaves the machine)
    client.key, client.key_secret   a client key pair (for ``hil ctl`` / ``hil tap`` / dashboards)
    authorized/*.key                public keys of the clients the service accepts

The folder is created 0700 and every file 0600; keys in a folder other users can read are refused.
A remote client needs a folder with ``server.key`` (public only) and its own ``client.key`` pair,
and its public key copied into the service's ``authorized/`` (``hil keys authorize FILE``).
Files are in the ZeroMQ certificate format, readable by ``zmq.auth.load_certificate``.
"""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

import daq.errors

ENV_KEYS = "HIL_KEYS"
SERVER = "server"
CLIENT = "client"
AUTHORIZED = "authorized"


class KeysError(daq.errors.ConfigError, OSError):
    """Keys missing, unreadable or readable by other users."""


class InsecureEndpoint(KeysError):
    """Binding beyond loopback without CURVE keys."""


def default_keys_dir() -> Path:
    """``$HIL_KEYS``, else ``$XDG_CONFIG_HOME/hil/keys``, else ``~/.config/hil/keys``."""
    if os.environ.get(ENV_KEYS):
        return Path(os.environ[ENV_KEYS]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hil" / "keys"


@dataclass(frozen=True)
class CurveKeys:
    """Key material from one keys folder (Z85-encoded keys as bytes; missing parts are None)."""

    directory: Path
    server_public: bytes
    server_secret: bytes | None
    client_public: bytes | None
    client_secret: bytes | None
    own_clients: frozenset[bytes] = frozenset()  # client keys of this process (see with_own_client)
    from_folder: bool = True  # False: made by this process (run_keys); no authorized/ folder to read

    @property
    def authorized_dir(self) -> Path:
        return self.directory / AUTHORIZED

    def authorized(self) -> set[bytes]:
        """Public keys (Z85) of the clients a server accepts, read from ``authorized/`` now."""
        if not self.from_folder:
            return set(self.own_clients)
        try:
            return set(zmq.auth.load_certificates(self.authorized_dir)) | set(self.own_clients)
        except (OSError, ValueError) as exc:
            raise KeysError(f"cannot read the authorized client keys in {self.authorized_dir}: {exc}") from (
                None
            )


# ----------------------------------------------------------------------------- files


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file that is 0600 from its first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _cert_text(public: bytes, secret: bytes | None) -> str:
    what = "Secret" if secret is not None else "Public"
    lines = [
        f"#   ZeroMQ CURVE {what} Certificate, made by `hil keys` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
        "#   Keep this file readable by its owner only." if secret is not None else "#",
        "",
        "metadata",
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def _write_pair(directory: Path, name: str, public: bytes, secret: bytes) -> None:
    _write_private(directory / f"{name}.key", _cert_text(public, None))
    _write_private(directory / f"{name}.key_secret", _cert_text(public, secret))


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def create_keys(directory: str | os.PathLike | None = None, force: bool = False) -> CurveKeys:
    """Make a server and a client key pair in ``directory`` and authorize the client.

    Refuses to overwrite existing keys unless ``force`` (clients holding the old server key would
    be locked out).
    """
    d = Path(directory).expanduser() if directory is not None else default_keys_dir()
    if (d / f"{SERVER}.key_secret").exists() and not force:
        raise KeysError(f"keys already exist in {d}; use --force to replace them")
    try:
        _private_dir(d)
        _private_dir(d / AUTHORIZED)
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        _write_pair(d, SERVER, server_public, server_secret)
        _write_pair(d, CLIENT, client_public, client_secret)
        _write_private(d / AUTHORIZED / f"{CLIENT}.key", _cert_text(client_public, None))
    except OSError as exc:
        raise KeysError(f"cannot write keys to {d}: {exc.strerror or exc}") from None
    return load_keys(d)


def authorize(public_key_file: str | os.PathLike, directory: str | os.PathLike | None = None) -> Path:
    """Copy a client's public key file into ``authorized/`` (a server re-reads it on start)."""
    d = Path(directory).expanduser() if directory is not None else default_keys_dir()
    src = Path(public_key_file)
    try:
        public, _ = zmq.auth.load_certificate(src)
    except (OSError, ValueError) as exc:
        raise KeysError(f"{src} is not a ZeroMQ public key file: {exc}") from None
    _private_dir(d / AUTHORIZED)
    name = src.name if src.name.endswith(".key") else f"{src.stem}.key"
    dest = d / AUTHORIZED / name
    _write_private(dest, _cert_text(public, None))
    return dest


def _check_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeysError(
            f"{path} is accessible by other users (mode {mode:04o}); run `chmod go-rwx {path}` "
            "or make new keys with `hil keys init --force`"
        )


def _read_pair(directory: Path, name: str) -> tuple[bytes | None, bytes | None]:
    """(public, secret) of ``name``; secret None if only the public file exists; (None, None) if none."""
    for filename in (f"{name}.key_secret", f"{name}.key"):
        path = directory / filename
        if path.is_file():
            if filename.endswith("_secret"):
                _check_private(path)
            try:
                return zmq.auth.load_certificate(path)
            except (OSError, ValueError) as exc:
                raise KeysError(f"cannot read {path}: {exc}") from None
    return None, None


def load_keys(directory: str | os.PathLike | None = None) -> CurveKeys:
    """Read the keys folder (default :func:`default_keys_dir`); needs at least ``server.key``."""
    d = Path(directory).expanduser() if directory is not None else default_keys_dir()
    if not d.is_dir():
        raise KeysError(f"no keys folder at {d}; make keys with `hil keys init` (or set ${ENV_KEYS})")
    _check_private(d)
    server_public, server_secret = _read_pair(d, SERVER)
    if server_public is None:
        raise KeysError(f"no server key in {d}; make keys with `hil keys init`")
    client_public, client_secret = _read_pair(d, CLIENT)
    return CurveKeys(d, server_public, server_secret, client_public, client_secret)


# ----------------------------------------------------------------------------- the rule


def is_local(endpoint: str) -> bool:
    """True for loopback TCP, ipc:// and inproc:// endpoints (reachable from this machine only)."""
    transport, _, address = endpoint.partition("://")
    if transport in ("inproc", "ipc"):
        return True
    if transport != "tcp":
        return False
    host = address.rsplit(":", 1)[0].strip("[]")
    if ";" in host:  # "source;destination" form of a connect
        host = host.split(";", 1)[1]
    return host in ("localhost", "::1", "lo") or host.startswith("127.")


def check_bind(endpoint: str, keys: CurveKeys | None, what: str) -> None:
    """Refuse to bind ``endpoint`` beyond loopback without CURVE keys."""
    if keys is None and not is_local(endpoint):
        raise InsecureEndpoint(
            f"refusing to bind the {what} on {endpoint} without CURVE keys: it would accept anyone on "
            f"the network; make keys with `hil keys init` and pass them, or bind 127.0.0.1"
        )
    if keys is not None and keys.server_secret is None:
        raise KeysError(f"{keys.directory} has no server secret key; a server needs server.key_secret")


def keys_for(endpoint: str, directory: str | os.PathLike | None = None) -> CurveKeys | None:
    """The keys an endpoint needs under the rule: loaded when it is beyond loopback, else None."""
    return None if is_local(endpoint) else load_keys(directory)


def with_own_client(keys: CurveKeys) -> CurveKeys:
    """``keys`` with a fresh client pair that only this process knows, authorized by the servers made
    from the result: how a run's own consumers (recorder, plan subscribers) pass its CURVE endpoints
    without a client key on disk."""
    public, secret = zmq.curve_keypair()
    return replace(keys, client_public=public, client_secret=secret, own_clients=keys.own_clients | {public})


def run_keys(directory: Path) -> CurveKeys:
    """A server key pair made now, kept in memory only (a run's own command channel on loopback: its
    clients get the client pair through the run's private announcement, :mod:`daq.run.announce`)."""
    public, secret = zmq.curve_keypair()
    return CurveKeys(directory, public, secret, None, None, from_folder=False)


def secure_client(sock: zmq.Socket, keys: CurveKeys) -> None:
    """Make ``sock`` (before connect) a CURVE client of ``keys``' server with ``keys``' client pair."""
    if keys.client_public is None or keys.client_secret is None:
        raise KeysError(f"{keys.directory} has no client key pair (client.key_secret)")
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret


# ----------------------------------------------------------------------------- servers


class _Allowed:
    """ZAP credentials provider: a fixed set of client public keys (Z85)."""

    def __init__(self, keys: set[bytes]):
        self.keys = keys

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.keys


class _Auth:
    """One ZAP authenticator per context (ZeroMQ allows one), shared by the servers using it."""

    def __init__(self, ctx: zmq.Context):
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeysError("a CURVE server must be created inside a running event loop") from None
        self.auth = AsyncioAuthenticator(ctx)
        self.auth.start()
        self.users = 0

    def stop(self) -> None:
        """Unbind the ZAP endpoint, then close: unbinding an inproc endpoint is immediate, while a
        closed socket lets go of it only when ZeroMQ's reaper thread gets to it, so a new
        authenticator on this context could otherwise find it taken (EADDRINUSE, seen under load)."""
        sock = self.auth.zap_socket
        if sock is not None and not sock.closed:
            try:
                sock.unbind(ZAP_ENDPOINT)
            except zmq.ZMQError:
                pass  # already gone with its context
        self.auth.stop()


_AUTHS: dict[int, _Auth] = {}
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP specification (RFC 27)


def secure_server(sock: zmq.Socket, ctx: zmq.Context, keys: CurveKeys) -> str:
    """Make ``sock`` (before bind) a CURVE server accepting only ``keys``' authorized clients.

    Must be called in a running event loop (the authenticator answers there). Returns the ZAP
    domain to hand to :func:`release_server` when the socket closes.
    """
    if keys.server_secret is None:
        raise KeysError(f"{keys.directory} has no server secret key; a server needs server.key_secret")
    allowed = keys.authorized()
    entry = _AUTHS.get(id(ctx))
    if entry is not None and (entry.loop.is_closed() or entry.loop is not asyncio.get_running_loop()):
        entry.stop()  # left over from another event loop (e.g. a previous test)
        entry = None
    if entry is None:
        entry = _AUTHS[id(ctx)] = _Auth(ctx)
    domain = f"hil-{uuid.uuid4().hex[:12]}"
    entry.auth.configure_curve_callback(domain, _Allowed(allowed))
    entry.users += 1
    sock.zap_domain = domain.encode()
    sock.curve_server = True
    sock.curve_publickey = keys.server_public
    sock.curve_secretkey = keys.server_secret
    return domain


def release_server(ctx: zmq.Context, domain: str) -> None:
    """Forget ``domain``; stop the context's authenticator when its last server is gone."""
    entry = _AUTHS.get(id(ctx))
    if entry is None:
        return
    entry.auth.credentials_providers.pop(domain, None)
    entry.users -= 1
    if entry.users <= 0:
        entry.stop()
        del _AUTHS[id(ctx)]
