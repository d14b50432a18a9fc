"""Who may do what: bearer tokens from a file of user-only permissions, and where the server may bind.

The token file holds one ``NAME TOKEN`` pair per line (``#`` starts a comment; a third word ``viewer``
makes a read-only token: it may look, never change anything); NAME is recorded as who started a run. It
must not be readable by group or others (as ssh refuses such a key). ``ensure_token_file``
creates it (mode 0600, one token named after the user) when it is missing; ``add_token``, ``token_names``
and ``revoke_token`` (``hil serve token add|list|revoke``) manage it, every change written to a temporary
file of mode 0600 and renamed over the old one. A running server notices a changed file at the next request
(:meth:`Tokens.name_of`): a revoked token stops working without a restart.

Rules (docs/api.md): a request that changes anything needs an operator's token, as ``Authorization: Bearer
TOKEN`` or as the dashboard's cookie (HttpOnly, SameSite=Strict, set by :data:`COOKIE` on the first visit
from the printed link, which then redirects to the clean URL; the cookie counts for a change only with a
matching Origin, :mod:`daq.serve.same_origin`). A read needs a token only when the server is bound beyond
loopback. A token is never taken from a URL except by that first visit. Binding beyond loopback needs TLS.
"""

from __future__ import annotations

import contextlib
import getpass
import hmac
import ipaddress
import logging
import os
import re
import secrets
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from daq.errors import AccessError, ConfigError

log = logging.getLogger(__name__)

ENV_TOKEN_FILE = "HIL_SERVE_TOKENS"
HEADER = "# hil serve tokens: NAME TOKEN per line; NAME is recorded as who started a run\n"
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
MIN_TOKEN = 16


COOKIE = "hil_token"  # the dashboard's cookie: the token itself, HttpOnly, SameSite=Strict
VIEWER = "viewer"     # the third word of a read-only token's line
ADMIN = "admin"       # the third word of an admin's token's line (operator, and may break a rig's lock)


class AuthError(AccessError):
    """A request without a valid token (HTTP 401)."""


def default_token_file() -> Path:
    """``$HIL_SERVE_TOKENS``, else ``$XDG_CONFIG_HOME/hil/serve-tokens`` (``~/.config/hil/serve-tokens``)."""
    if os.environ.get(ENV_TOKEN_FILE):
        return Path(os.environ[ENV_TOKEN_FILE]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hil" / "serve-tokens"


def _user() -> str:
    try:
        return getpass.getuser() or "operator"
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "operator"


def ensure_token_file(path: Path) -> str | None:
    """Create ``path`` (0600, folder 0700) with one fresh token when it is missing; returns that token,
    or None when the file already existed."""
    if path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{HEADER}{_user()} {token}\n")
    os.chmod(path, 0o600)  # whatever the umask said
    return token


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode


def _read_pairs(path: Path) -> list[tuple[int, str, str | None, str | None]]:
    """Every line of a token file as (line number, text, name, token); name and token None for a blank or
    comment line. A byte-order mark (an editor's UTF-8 BOM) is not part of the first name. Raises
    ConfigError (one line) for a file that is open to others, unreadable or has a
    line that is not ``NAME TOKEN``."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"token file {path} is not a file")
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"token file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): "
                              f"chmod 600 {path}")
        text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
    except OSError as exc:
        raise ConfigError(f"token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"token file {path} is not UTF-8 text") from None
    out: list[tuple[int, str, str | None, str | None]] = []
    seen: dict[str, int] = {}
    for k, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            out.append((k, line, None, None))
            continue
        parts = body.split()
        if len(parts) not in (2, 3) or len(parts[1]) < MIN_TOKEN or parts[2:] not in ([], [VIEWER], [ADMIN]):
            raise ConfigError(f"token file {path} line {k}: expected 'NAME TOKEN' or 'NAME TOKEN {VIEWER}' "
                              f"with a token of at least {MIN_TOKEN} characters (an admin's line ends in "
                              f"'{ADMIN}')")
        if parts[1] in seen:
            raise ConfigError(f"token file {path} line {k}: the same token as line {seen[parts[1]]} "
                              "(each token names one person)")
        seen[parts[1]] = k
        out.append((k, line, parts[0], parts[1]))
    return out


@dataclass
class Tokens:
    """The tokens of a token file: token -> name, re-read when the file changes."""

    path: Path
    names: dict[str, str]
    problem: str | None = None  # why no token is accepted (the file became unusable while serving)
    _stamp: tuple | None = None
    viewers: set[str] = field(default_factory=set)  # read-only tokens
    admins: set[str] = field(default_factory=set)  # tokens that may also break a rig's lock
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """Read ``path``; raises ConfigError (one line) for a file that cannot be used."""
        stamp = _stamp(path) if path.exists() else None
        pairs = _read_pairs(path)
        names = {tok: name for _, _, name, tok in pairs if tok is not None and name is not None}
        if not names:
            raise ConfigError(f"token file {path} holds no token (hil serve token add NAME)")
        viewers = {tok for _, line, _, tok in pairs if tok is not None and _third(line) == [VIEWER]}
        admins = {tok for _, line, _, tok in pairs if tok is not None and _third(line) == [ADMIN]}
        return cls(path, names, None, stamp, viewers=viewers, admins=admins)

    def refresh(self) -> None:
        """Re-read the file when it changed since the last read. A file that became unusable (open to
        others, a broken line, no token, gone) accepts no token until it is fixed: fail closed."""
        try:
            stamp = _stamp(self.path)
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return
        with self._lock:
            try:
                fresh = Tokens.load(self.path)
            except ConfigError as exc:
                if self.problem != str(exc):
                    log.error("%s; no token is accepted until it is fixed", exc)
                self.names, self.problem = {}, str(exc)
            else:
                self.names, self.viewers, self.admins = fresh.names, fresh.viewers, fresh.admins
                self.problem = None
            self._stamp = stamp

    def may_change(self, token: str | None) -> bool:
        """True for an operator's token (one not marked ``viewer``)."""
        return bool(token) and token in self.names and token not in self.viewers

    def role_of(self, token: str | None) -> str | None:
        """``viewer``, ``operator`` or ``admin`` for a known token, else None."""
        if self.name_of(token) is None:
            return None
        return VIEWER if token in self.viewers else ADMIN if token in self.admins else "operator"

    def name_of(self, token: str | None) -> str | None:
        """The name of ``token`` in the file as it is now, or None (compared in constant time)."""
        with contextlib.suppress(Exception):  # a request must never fail on the refresh itself
            self.refresh()
        if not token:
            return None
        found = None
        for known, name in self.names.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = name
        return found


# ---------------------------------------------------------------------------- managing the file


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path``: a temporary file of mode 0600 in the same folder, flushed, renamed over."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    with contextlib.suppress(OSError):  # the rename itself to disk
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def check_name(name: str) -> str:
    if not NAME_RULE.fullmatch(name):
        raise ConfigError(f"token name {name!r}: use 1 to 64 letters, digits and . _ @ - (no spaces), "
                          "starting with a letter or digit")
    return name


def token_names(path: Path) -> list[str]:
    """The names of the tokens in ``path``, in file order (the tokens themselves are never shown)."""
    if not path.exists():
        raise ConfigError(f"token file {path}: no such file (hil serve creates it on its first start, "
                          "or: hil serve token add NAME)")
    return [name for _, _, name, tok in _read_pairs(path) if tok is not None and name is not None]


def _third(line: str) -> list[str]:
    return line.split("#", 1)[0].split()[2:]


def add_token(path: Path, name: str, viewer: bool = False, admin: bool = False) -> str:
    """A fresh token for ``name``, added to ``path`` (created when missing); returns the token. A
    ``viewer``'s token is read-only; an ``admin``'s may also break a rig's lock."""
    check_name(name)
    pairs = _read_pairs(path) if path.exists() else []
    if any(n == name for _, _, n, _ in pairs):
        raise ConfigError(f"token file {path} already has a token named {name!r} (hil serve token revoke "
                          f"{name} first)")
    token = secrets.token_urlsafe(32)
    lines = [line for _, line, _, _ in pairs] or [HEADER.rstrip("\n")]
    role = f" {VIEWER}" if viewer else f" {ADMIN}" if admin else ""
    write_atomically(path, "\n".join([*lines, f"{name} {token}{role}"]) + "\n")
    return token


def revoke_token(path: Path, name: str) -> None:
    """Remove the token(s) named ``name`` from ``path``; the last token cannot go (the server would accept
    nobody: add another first)."""
    token_names(path)  # a missing file: its one-line error
    pairs = _read_pairs(path)
    names = [n for _, _, n, tok in pairs if tok is not None and n is not None]
    if name not in names:
        raise ConfigError(f"token file {path} has no token named {name!r} (it has: {', '.join(names)})")
    if all(n == name for n in names):
        raise ConfigError(f"{name!r} holds the only token of {path}: add another first "
                          "(hil serve token add NAME), then revoke this one")
    write_atomically(path, "\n".join(line for _, line, n, _ in pairs if n != name) + "\n")


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, certfile: str | None, keyfile: str | None) -> None:
    """Refuse to bind beyond loopback without TLS (the bus refuses endpoints without CURVE alike)."""
    if bool(certfile) != bool(keyfile):
        raise ConfigError("--certfile and --keyfile go together: give both or neither")
    if not is_loopback(host) and not certfile:
        raise ConfigError(f"--host {host} is reachable from other machines: give --certfile and --keyfile "
                          "(TLS), or bind 127.0.0.1")
