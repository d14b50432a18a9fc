"""Batches of independent fits on whatever runs them: the one adapter between the math and an executor.

The math takes ``executor``: None (run here, in order), a map-like callable ``f(fn, items) -> list``, or an
object with ``map`` (and perhaps ``imap_unordered``, as :mod:`daq.executor`'s have). Tasks and their
functions must be picklable when the executor runs them in other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

Map = Callable[[Callable, Sequence], list]


def map_tasks(executor: Any, fn: Callable[[Any], Any], items: Iterable[Any]) -> list:
    """``fn`` of every item, in item order, on ``executor`` (see the module)."""
    items = list(items)
    if executor is None:
        return [fn(item) for item in items]
    return list(getattr(executor, "map", executor)(fn, items))


def iter_tasks(executor: Any, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
    """``fn`` of every item as it completes when the executor can say (``imap_unordered``), else in order:
    for progress while a long batch runs."""
    if hasattr(executor, "imap_unordered"):
        return (result for _, result in executor.imap_unordered(fn, list(items)))
    return iter(map_tasks(executor, fn, items))
