"""The lab's door: what may become a node key or a URL of the lab, checked before anything is written or
any request is made, so odd input is one line and leaves nothing behind in the catalogue.

A session id is what the store makes (``daq.store.writer``: ``uuid4().hex[:12]``, twelve lowercase hex
digits); a stream name is what the rigs record (``press.force``, ``machine-tool.run``: letters, digits,
``_ . -``, not starting with a dot) and not the name of the session's ``events`` table or ``about`` node.
Anything else (``..``, ``a/b``, ``x?y``, ``%2f``) would be a path, a query or another node to Tiled's
client, which puts keys into URLs as they are. A lab URL is a scheme, a host and maybe a path: no query,
fragment or user:password (tokens never travel in URLs: the key goes in the ``Authorization`` header).
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

from daq.lab import layout
from daq.lab.settings import LabError

#: The store's session ids (daq/store/writer.py: ``uuid.uuid4().hex[:12]``).
SESSION_ID = re.compile(r"[0-9a-f]{12}")
#: What a reader may type for a session: its id or a unique prefix of it.
SESSION_PREFIX = re.compile(r"[0-9a-f]{1,12}")
#: Stream names as the rigs make them (``<kind>.<name>``).
STREAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
#: Node keys of a session that are not streams.
RESERVED = frozenset({layout.EVENTS, layout.ABOUT})


class Refused(LabError):
    """This session is not pushed (odd id or stream name, another push of it running); the others go on."""


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut short (it may be anything a user or a store holds)."""
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def check_session_id(sid: str) -> str:
    """``sid`` when it is a session id the store makes, else Refused (one line)."""
    if not SESSION_ID.fullmatch(sid):
        raise Refused(f"session id {shown(sid)} is not one the store makes (12 hex digits): not pushed")
    return sid


def check_stream_name(sid: str, name: str) -> str:
    """``name`` when it can be a stream node of the lab, else Refused (one line)."""
    if not STREAM_NAME.fullmatch(name) or name in RESERVED:
        raise Refused(f"session {sid}: stream name {shown(name)} is not one the lab takes (letters, digits, "
                      f"'_', '.', '-', not starting with '.', not {', '.join(sorted(RESERVED))}): not pushed")
    return name


def is_session_key(key: str) -> bool:
    """True for what may name a session in a reader's request: an id or a prefix of one."""
    return bool(SESSION_PREFIX.fullmatch(key))


def session_url_part(sid: str) -> str:
    """``sid`` escaped for a URL path segment (ids are checked; this is the belt to those braces)."""
    return quote(sid, safe="")


def check_lab_url(url: str) -> str:
    """``url`` without a trailing slash when it is an http(s) URL with no query, fragment or credentials;
    else LabError, never echoing what could be a key."""
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number raises here
    except ValueError:
        raise LabError("the lab URL is not a URL: give http(s)://host:port") from None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LabError("the lab URL must be http(s)://host[:port][/path]")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise LabError("the lab URL carries a query or fragment: give the key with --key-file, "
                       "$HIL_LAB_KEY_FILE or $HIL_LAB_KEY (keys never travel in URLs)")
    if parts.username is not None or parts.password is not None:
        raise LabError("the lab URL carries credentials: give the key with --key-file, $HIL_LAB_KEY_FILE or "
                       "$HIL_LAB_KEY (keys never travel in URLs)")
    return url.rstrip("/")


#: Catalogue URIs ``hil lab serve --catalog`` takes, and the driver each is opened with.
CATALOG_SCHEMES = {"postgresql": "postgresql+asyncpg", "postgresql+asyncpg": "postgresql+asyncpg",
                   "sqlite": "sqlite+aiosqlite", "sqlite+aiosqlite": "sqlite+aiosqlite"}


def catalog_database_uri(uri: str) -> str:
    """``--catalog`` as the URI Tiled opens (with its async driver); LabError for anything that is not a
    PostgreSQL or SQLite URI (Tiled would take a bare word as the name of a new SQLite file)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in CATALOG_SCHEMES or not rest.strip("/"):
        raise LabError("--catalog is not a database URI: give "
                       "postgresql://user@host:5432/db or sqlite:////path/catalog.db (or leave it out: "
                       "the SQLite file in the data folder)")
    return f"{CATALOG_SCHEMES[scheme]}://{rest}"
