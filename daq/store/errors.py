"""The store's errors: one clear message for a problem with the store or a request to it."""

from __future__ import annotations

import daq.errors


class StoreError(daq.errors.StoreError):
    """A problem with the store or a request to it (one clear message)."""


class UnknownSession(StoreError, KeyError):
    """No session (or no unique session) matches the given id or prefix."""

    def __str__(self) -> str:  # KeyError would add quotes
        return str(self.args[0]) if self.args else "unknown session"
