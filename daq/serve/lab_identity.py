"""One identity on every rig: ``hil serve --lab URL`` takes a person's lab key where it takes a token.

A key that is not one of the rig's own tokens is asked about at the lab (``people.whoami``, Tiled's
``/api/v1/auth/whoami``): the lab says whose key it is and what it may do (viewer, operator, admin). The
answer is kept for :attr:`LabKeys.ttl` seconds (a setting, default a minute): a revoked key stops working
at most that long after the revocation, and a page that polls every few seconds does not ask the lab each
time. A lab that does not answer accepts no lab key (fail closed); the rig's own tokens keep working.

Keys are held in memory only as their SHA-256 (never the secret) and are asked about in a worker thread
(:meth:`LabKeys.lookup`), so the server's event loop never waits on the lab.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass

from daq.lab.settings import LabError, LabUnreachable

log = logging.getLogger(__name__)

DEFAULT_TTL = 60.0  # s an answer of the lab is kept: revocation is effective within this time
RETRY_S = 5.0  # s a key is refused without asking again after the lab did not answer (no pile of waits)


@dataclass(frozen=True)
class LabPerson:
    """Whose lab key it is, as the lab said."""

    name: str
    role: str  # viewer | operator | admin


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class LabKeys:
    """The lab's answers about keys, kept for ``ttl`` seconds each."""

    def __init__(self, url: str, ttl: float = DEFAULT_TTL) -> None:
        self.url, self.ttl = url, float(ttl)
        self._answers: dict[str, tuple[float, LabPerson | None]] = {}
        self._mutex = threading.Lock()
        self.problem: str | None = None  # why the last question found no answer (the lab down)

    def known(self, key: str | None) -> bool:
        """True when an answer about ``key`` is held and fresh (no need to ask the lab)."""
        if not key:
            return True
        with self._mutex:
            found = self._answers.get(_digest(key))
        return found is not None and found[0] > time.monotonic()

    def cached(self, key: str | None) -> LabPerson | None:
        """The person holding ``key`` while the lab's answer is fresh; None otherwise."""
        if not key:
            return None
        with self._mutex:
            found = self._answers.get(_digest(key))
        if found is None or found[0] <= time.monotonic():
            return None
        return found[1]

    def lookup(self, key: str) -> LabPerson | None:
        """Ask the lab who holds ``key`` (blocking: call it in a thread) and keep the answer; None for a key
        the lab refuses or does not name, or when the lab does not answer (kept :data:`RETRY_S` seconds at
        most, so that requests do not pile up waiting on a lab that is down)."""
        from daq.lab.people import whoami  # lazy: httpx only for a rig with a lab

        keep = self.ttl
        try:
            answer = whoami(self.url, key)
            self.problem = None
        except LabUnreachable as exc:
            if self.problem != str(exc):
                log.warning("%s: lab keys are refused until it answers", exc)
            self.problem, answer, keep = str(exc), None, min(self.ttl, RETRY_S)
        except LabError:  # refused (revoked, unknown): no one
            answer = None
            self.problem = None
        person = LabPerson(str(answer["name"]), str(answer["role"])) if answer else None
        with self._mutex:
            now = time.monotonic()
            self._answers = {k: v for k, v in self._answers.items() if v[0] > now}  # drop the stale ones
            self._answers[_digest(key)] = (now + keep, person)
        return person
