"""Who may do what: bearer tokens from a file of user-only permissions, and where the server may bind.

The token file holds one ``NAME TOKEN`` pair per line (``#`` starts a comment); NAME is recorded as who
started a run. It must not be readable by group or others (as ssh refuses such a key). ``ensure_token_file``
creates it (mode 0600, one token named after the user) when it is missing.

Rules (docs/api.md): a request that changes anything needs ``Authorization: Bearer TOKEN`` (a header, never
a query parameter: a page of another site can make the browser send a form or a link, not a header); a read
needs a token only when the server is bound beyond loopback, and may then also give it as ``?token=``
(downloads, the WebSocket, which browsers open without headers). Binding beyond loopback needs TLS.
"""

from __future__ import annotations

import getpass
import hmac
import ipaddress
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from daq.errors import ConfigError

ENV_TOKEN_FILE = "HIL_SERVE_TOKENS"


class AuthError(Exception):
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
        f.write(f"# hil serve tokens: NAME TOKEN per line; NAME is recorded as who started a run\n"
                f"{_user()} {token}\n")
    os.chmod(path, 0o600)  # whatever the umask said
    return token


@dataclass
class Tokens:
    """The tokens of a token file: token -> name."""

    path: Path
    names: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> Tokens:
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise ConfigError(f"token file {path}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"token file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): "
                              f"chmod 600 {path}")
        names: dict[str, str] = {}
        for k, line in enumerate(path.read_text().splitlines(), 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            if len(parts) != 2 or len(parts[1]) < 16:
                raise ConfigError(f"token file {path} line {k}: expected 'NAME TOKEN' with a token of at "
                                  "least 16 characters")
            names[parts[1]] = parts[0]
        if not names:
            raise ConfigError(f"token file {path} holds no token")
        return cls(path, names)

    def name_of(self, token: str | None) -> str | None:
        """The name of ``token``, or None (compared in constant time)."""
        if not token:
            return None
        found = None
        for known, name in self.names.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = name
        return found


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
