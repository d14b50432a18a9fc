"""The lab server remembers a person's key for a moment instead of asking the database three times a request.

Tiled (0.2.20) looks a request's key up in the authentication database once for the person, once for their
scopes and once for the key's access tags - four SELECTs each - and writes the key's last use back: most of
a lab request's CPU (a py-spy profile of `hil lab serve`: ~80 % of the request path in those queries;
benchmarks/bench_lab_request.py). :class:`KeyCache` answers repeated lookups of a key from memory for
``TTL_S`` seconds.

What it keeps Tiled's answers to:
- **A change of people through this server takes effect at once.** Any request other than GET/HEAD to
  ``/api/v1/auth/`` (a key made or revoked, a person made or given another role) empties the cache before and
  after it runs (:mod:`daq.lab.people_server`); a lookup that began before an emptying is not kept.
- **A key that expires stops working when it expires**: its expiry is checked on every hit.
- A change made beside the server, straight in the database (``tiled admin``, another server on the same
  authentication database), takes effect within ``TTL_S``.
- A key's "last used" (``latest_activity``) is written when the key is looked up in the database, so at most
  ``TTL_S`` behind.
Refused keys are never kept: every wrong key costs its database lookup, as before.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("hil.lab")

#: Seconds a looked-up key is answered from memory.
TTL_S = 2.0
#: Keys kept at most (the least recently used go first).
MAX_KEYS = 4096

Lookup = Callable[[Any, bytes], Awaitable[Any]]


class KeyCache:
    """``lookup(db, secret)`` as Tiled's ``lookup_valid_api_key``, with the valid keys it found kept for
    ``ttl`` seconds (``clock``: monotonic seconds)."""

    def __init__(self, lookup: Lookup, ttl: float = TTL_S, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = MAX_KEYS):
        self._lookup, self.ttl, self._clock, self._max = lookup, ttl, clock, max_keys
        self._keys: OrderedDict[bytes, tuple[float, Any]] = OrderedDict()
        self._generation = 0

    async def lookup(self, db: Any, secret: bytes) -> Any:
        digest = hashlib.sha256(secret).digest()
        kept = self._keys.get(digest)
        now = self._clock()
        if kept is not None:
            found_at, api_key = kept
            if now - found_at < self.ttl and not _expired(api_key):
                self._keys.move_to_end(digest)
                return api_key
            del self._keys[digest]
        generation = self._generation
        api_key = await self._lookup(db, secret)
        if api_key is not None and generation == self._generation:  # no change of people meanwhile
            self._keys[digest] = (now, api_key)
            while len(self._keys) > self._max:
                self._keys.popitem(last=False)
        return api_key

    def clear(self) -> None:
        """Forget every key (people or keys changed); lookups under way are not kept."""
        self._generation += 1
        self._keys.clear()


def _expired(api_key: Any) -> bool:
    expires = getattr(api_key, "expiration_time", None)
    if expires is None:
        return False
    if expires.tzinfo is None:  # SQLite gives it back naive, in UTC (as Tiled reads it)
        expires = expires.replace(tzinfo=UTC)
    return expires <= datetime.now(UTC)


def install() -> KeyCache | None:
    """Put a :class:`KeyCache` in front of Tiled's key lookup in this process (the lab server's); None, with
    a warning, when this Tiled has no such function (the server then runs uncached, as Tiled is)."""
    import tiled.server.authentication as authentication  # lazy: only the lab server imports Tiled's server

    original = getattr(authentication, "lookup_valid_api_key", None)
    if original is None:
        log.warning("this Tiled has no lookup_valid_api_key: people's keys are looked up on every request")
        return None
    cache = KeyCache(original)
    authentication.lookup_valid_api_key = cache.lookup
    return cache
