"""The lab server's key cache (daq/lab/key_cache.py): a key looked up once per TTL instead of three times a
request, and what it must not change - a revoked key refused on the next request, an expired key refused
when it expires, a wrong key never remembered. Unit tests on the cache with its own clock, and a real
`hil lab serve` (the shared one) for revocation and expiry."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import httpx
import pytest

from daq.lab.key_cache import KeyCache
from tests.test_lab import hil, shared_lab
from tests.test_lab_people import add_key


class Database:
    """Tiled's lookup stand-in: the keys it holds, how often it was asked, and an optional hold."""

    def __init__(self, keys: dict[bytes, object]):
        self.keys, self.asked = keys, 0
        self.hold: asyncio.Event | None = None

    async def lookup(self, db, secret: bytes):
        self.asked += 1
        found = self.keys.get(secret)  # what the database holds when asked
        if self.hold is not None:
            await self.hold.wait()
        return found


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _key(expires: datetime | None = None):
    return SimpleNamespace(expiration_time=expires, note="vera")


async def test_a_key_is_looked_up_once_per_ttl_and_again_after_it():
    db, clock = Database({b"k": _key()}), Clock()
    cache = KeyCache(db.lookup, ttl=2.0, clock=clock)
    first = await cache.lookup(None, b"k")
    for _ in range(5):
        assert await cache.lookup(None, b"k") is first
    assert db.asked == 1
    clock.now += 1.99
    await cache.lookup(None, b"k")
    assert db.asked == 1
    clock.now += 0.02  # 2.01 s after it was looked up
    await cache.lookup(None, b"k")
    assert db.asked == 2


async def test_a_change_of_people_empties_it_and_a_lookup_under_way_then_is_not_kept():
    db = Database({b"k": _key()})
    cache = KeyCache(db.lookup, ttl=60.0, clock=Clock())
    await cache.lookup(None, b"k")
    cache.clear()
    await cache.lookup(None, b"k")
    assert db.asked == 2
    cache.clear()
    db.hold = asyncio.Event()
    under_way = asyncio.create_task(cache.lookup(None, b"k"))  # began before the key was revoked ...
    await asyncio.sleep(0)
    del db.keys[b"k"]
    cache.clear()  # ... the revocation's own emptying comes while it waits on the database
    db.hold.set()
    assert await under_way is not None  # it answers what the database said when it asked
    db.hold = None
    assert await cache.lookup(None, b"k") is None  # but was not kept: the next request asks again
    assert db.asked == 4


async def test_a_wrong_key_is_never_kept_and_an_expired_one_is_asked_again():
    soon = datetime.now(UTC) + timedelta(seconds=0.3)
    db = Database({b"short": _key(soon.replace(tzinfo=None))})  # as SQLite gives it back: naive UTC
    cache = KeyCache(db.lookup, ttl=60.0)
    for _ in range(3):
        assert await cache.lookup(None, b"wrong") is None
    assert db.asked == 3
    await cache.lookup(None, b"short")
    await cache.lookup(None, b"short")
    assert db.asked == 4
    await asyncio.sleep(0.35)
    del db.keys[b"short"]  # Tiled deletes an expired key when it is looked up
    assert await cache.lookup(None, b"short") is None
    assert db.asked == 5


async def test_the_least_recently_used_key_goes_first_when_it_is_full():
    db = Database({bytes([i]): _key() for i in range(4)})
    cache = KeyCache(db.lookup, ttl=60.0, clock=Clock(), max_keys=3)
    for i in range(3):
        await cache.lookup(None, bytes([i]))
    await cache.lookup(None, bytes([0]))  # used again: key 1 is now the oldest
    await cache.lookup(None, bytes([3]))
    asked = db.asked
    await cache.lookup(None, bytes([0]))
    await cache.lookup(None, bytes([3]))
    assert db.asked == asked
    await cache.lookup(None, bytes([1]))
    assert db.asked == asked + 1


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


def _status(url: str, key: str) -> int:
    return httpx.get(url + "/api/v1/auth/whoami", headers={"Authorization": f"Apikey {key}"}, timeout=30
                     ).status_code


def test_a_key_in_use_is_refused_by_the_request_right_after_its_revocation(lab, tmp_path):
    key, _ = add_key(lab, "rita", "viewer", tmp_path)
    with httpx.Client(headers={"Authorization": f"Apikey {key}"}, timeout=30) as rita:
        for _ in range(5):  # in use: the server has it in memory
            assert rita.get(lab.url + "/api/v1/metadata/").status_code == 200
        res = hil("lab", "key", "revoke", "rita", "--to", lab.url, key=lab.key)
        assert res.exit_code == 0, res.output
        assert rita.get(lab.url + "/api/v1/metadata/").status_code == 401
    assert _status(lab.url, lab.key) == 200


def test_a_key_that_expires_is_refused_once_it_has_expired(lab):
    made = httpx.post(lab.url + "/api/v1/auth/apikey", headers={"Authorization": f"Apikey {lab.key}"},
                      json={"expires_in": 3, "scopes": ["inherit"], "note": "short"}, timeout=30)
    assert made.status_code == 200, made.text
    short = made.json()["secret"]
    expires = datetime.fromisoformat(made.json()["expiration_time"])  # Tiled's: whole seconds, 2-3 s away
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    assert _status(lab.url, short) == 200
    while datetime.now(UTC) < expires - timedelta(seconds=0.3):  # kept in memory up to its last moment
        assert _status(lab.url, short) == 200
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _status(lab.url, short) != 401:
        time.sleep(0.05)
    assert datetime.now(UTC) >= expires  # not refused before it expired ...
    assert _status(lab.url, short) == 401  # ... and refused once it has
