"""The server side of the lab's people (:mod:`daq.lab.people`): Tiled's authentication database, the first
admin's key, and the lab's record of who changed what.

- The authentication database is Tiled's own (its tables, its Alembic stamp), SQLite ``auth.db`` in the
  lab's folder (mode 0600) unless ``--auth-db`` names another; it is made before the server starts, as
  ``tiled admin initialize-database`` makes it.
- When it holds no admin key (first start, or every admin key was revoked), an admin service principal and
  a key are made and the key written to the key file (mode 0600; never printed). Whoever can start the
  server owns the lab's files, so that is no more power than they have.
- Every change (a request other than GET/HEAD to ``/api/v1/``, the admin's own included) is appended to
  ``changes.jsonl`` in the lab's folder (mode 0600) with the time, the person (the name Tiled keeps with
  their key), the key id, the principal, the method, the path and the answer's status: written by the
  server, so no client can leave it out.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import stat
import time
from pathlib import Path

from daq.lab.settings import LabError

AUTH_FILE = "auth.db"
CHANGES_FILE = "changes.jsonl"
FIRST_ADMIN = "admin"
#: The provider Tiled needs to run with people: nobody logs in with a password (people hold keys), so it
#: is Tiled's dictionary authenticator with no one in it.
PROVIDER = "keys"


def auth_uri(data_dir: Path, uri: str | None) -> str:
    """The authentication database's URI (Tiled's driver spelling): ``uri``, else ``data_dir/auth.db``."""
    if uri:
        for plain, driver in (("postgresql://", "postgresql+asyncpg://"), ("sqlite://", "sqlite+aiosqlite://")):
            if uri.startswith(plain):
                return driver + uri[len(plain):]
        return uri
    path = data_dir / AUTH_FILE
    if not path.exists():  # SQLite takes an empty file as a new database: it keeps this file's mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return f"sqlite+aiosqlite:///{path}"


def authentication():
    """Tiled's ``Authentication`` for a lab of people: API keys only, no anonymous access."""
    from tiled.config import Authentication  # lazy: as above

    return Authentication(providers=[{"provider": PROVIDER,
                                      "authenticator": "tiled.authenticators:DictionaryAuthenticator",
                                      "args": {"users_to_passwords": {}}}],
                          allow_anonymous_access=False)


def server_settings(uri: str) -> dict:
    from tiled.config import Database  # lazy: as above

    return {"database": Database(uri=uri, init_if_not_exists=False)}


def prepare(uri: str, key_file: Path) -> bool:
    """Make Tiled's authentication database if it is new, and an admin key when it holds none (written to
    ``key_file``, replacing what was there: a lab's old single shared key no longer opens it). Returns
    True when a key was written. An admin's key file open to others is refused: anyone could take it."""
    if key_file.exists() and (mode := stat.S_IMODE(key_file.stat().st_mode)) & 0o077:
        raise LabError(f"{key_file} is readable by others (mode {mode:o}): chmod 600 {key_file}")
    try:
        secret = asyncio.run(_prepare(uri))
    except LabError:
        raise
    except Exception as exc:  # noqa: BLE001 - the database's own message, one line
        text = " ".join(str(exc).split())[-300:]
        raise LabError(f"cannot open the lab's authentication database: {text}") from None
    if secret is None:
        return False
    write_private(key_file, secret + "\n")
    return True


async def _prepare(uri: str) -> str | None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # lazy: as above
    from sqlalchemy.future import select  # lazy: as above
    from tiled.alembic_utils import DatabaseUpgradeNeeded, UninitializedDatabase, check_database  # lazy
    from tiled.authn_database import orm  # lazy: as above
    from tiled.authn_database.core import (  # lazy: as above
        ALL_REVISIONS,
        REQUIRED_REVISION,
        create_service,
        initialize_database,
    )

    engine = create_async_engine(uri)
    try:
        try:
            await check_database(engine, REQUIRED_REVISION, ALL_REVISIONS)
        except UninitializedDatabase:
            await initialize_database(engine)
            await asyncio.to_thread(_stamp, uri)
        except DatabaseUpgradeNeeded:
            raise LabError("the lab's authentication database is from an older Tiled: back it up, then run "
                           "`tiled admin upgrade-database URI`") from None
        async with AsyncSession(engine, expire_on_commit=False) as db:
            await _lab_roles(db)
            holders = select(orm.APIKey.principal_id)
            principals = (await db.execute(select(orm.Principal).filter(orm.Principal.id.in_(holders)))
                          ).unique().scalars().all()  # roles are loaded with a join: unique()
            if any(r.name == "admin" for p in principals for r in p.roles):
                return None
            admin = await create_service(db, "admin")
            await _lab_roles(db)  # the new admin can follow live sessions too
            raw = secrets.token_bytes(4 + 32)  # as Tiled makes a key: 36 random bytes, named by 8 hex digits
            db.add(orm.APIKey(principal_id=admin.id, expiration_time=None, note=FIRST_ADMIN,
                              scopes=["inherit"], access_tags=None, first_eight=raw.hex()[:8],
                              hashed_secret=hashlib.sha256(raw).digest()))
            await db.commit()
            return raw.hex()
    finally:
        await engine.dispose()


async def _lab_roles(db) -> None:
    """The lab's Tiled roles (:data:`daq.lab.scopes.LAB_ROLES`) in the database, and "hil-keys" held by every
    admin principal (Tiled's admin role cannot make the short-lived key ``subscribe()`` opens its WebSocket
    with)."""
    from sqlalchemy.future import select  # lazy: as above
    from tiled.authn_database import orm  # lazy: as above

    from daq.lab.scopes import LAB_ROLES  # lazy: a server-side import

    have = {r.name: r for r in (await db.execute(select(orm.Role))).scalars().all()}
    for name, scopes in LAB_ROLES.items():
        if name not in have:
            have[name] = orm.Role(name=name, description="hil-lab", scopes=scopes)
            db.add(have[name])
    admins = (await db.execute(select(orm.Principal))).unique().scalars().all()
    for p in admins:
        names = {r.name for r in p.roles}
        if "admin" in names and "hil-keys" not in names:
            p.roles.append(have["hil-keys"])
    await db.commit()


def _stamp(uri: str) -> None:
    """Tiled's Alembic stamp on a new database, so Tiled's startup check accepts it."""
    from tiled.alembic_utils import stamp_head  # lazy: as above
    from tiled.authn_database.alembic_constants import ALEMBIC_DIR, ALEMBIC_INI_TEMPLATE_PATH  # lazy

    stamp_head(ALEMBIC_INI_TEMPLATE_PATH, ALEMBIC_DIR, uri)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte, replacing the file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


#: Requests that change nothing.
READS = {"GET", "HEAD", "OPTIONS"}


def record_changes(app, uri: str, log_path: Path, people_changed=None) -> None:
    """Have ``app`` append each change it answers to ``log_path`` (see the module's docstring);
    ``people_changed()`` is called before and after each change of people or keys (a request other than
    GET/HEAD to ``/api/v1/auth/``: the server's key cache, daq/lab/key_cache.py)."""
    from sqlalchemy import select  # lazy: as above
    from sqlalchemy.ext.asyncio import create_async_engine  # lazy: as above
    from tiled.authn_database import orm  # lazy: as above

    names: dict[str, str] = {}
    engine = create_async_engine(uri)
    if not log_path.exists():
        os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))

    async def name_of(key_id: str) -> str | None:
        if key_id not in names:
            async with engine.connect() as conn:
                note = (await conn.execute(select(orm.APIKey.note).where(orm.APIKey.first_eight == key_id))
                        ).scalar()
            if note is None:
                return None
            names[key_id] = note
        return names[key_id]

    app.add_middleware(ChangeLog, log_path=log_path, name_of=name_of, people_changed=people_changed)


class ChangeLog:
    """The ASGI middleware of :func:`record_changes`. A read passes straight through (most requests are
    reads); a change is written to the log once its answer starts, before the client receives it, so a
    client that has its answer finds the change in the log. A plain ASGI layer, not Starlette's
    ``BaseHTTPMiddleware``, which costs a task and two streams on every request, readers' too."""

    def __init__(self, app, *, log_path: Path, name_of, people_changed=None) -> None:
        self.app, self.log_path, self.name_of, self.people_changed = app, log_path, name_of, people_changed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in READS:
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request  # lazy: only the lab server imports the server side

        request = Request(scope)
        path = request.url.path
        people = self.people_changed is not None and path.startswith("/api/v1/auth/")
        logged = path.startswith("/api/v1/")

        async def answer(message) -> None:
            if logged and message["type"] == "http.response.start":
                await self._log(request, message["status"])
            await send(message)

        if people:
            self.people_changed()
        try:
            await self.app(scope, receive, answer)
        finally:
            if people:
                self.people_changed()

    async def _log(self, request, status: int) -> None:
        auth = request.headers.get("Authorization", "")
        key_id = auth[len("Apikey "):][:8] if auth.startswith("Apikey ") else None
        principal = getattr(request.state, "principal", None)
        entry = {"time": time.time(), "by": await self.name_of(key_id) if key_id else None, "key_id": key_id,
                 "principal": str(getattr(principal, "uuid", "")) or None, "method": request.method,
                 "path": request.url.path, "status": status}
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")
