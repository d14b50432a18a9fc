"""OPC UA servers that start in milliseconds: the standard address space is built once per process.

asyncua fills every new server with the 6,174 nodes of the OPC UA standard address space, 1.7 CPU-s each
time, and a simulated crane starts a server per face (plain and secure) and per run: the largest part of a
simulated crane's start, and of the test suite's crane tests. Here the first server of a process builds that
space once, as asyncua does,
and keeps it untouched; each server then copies a node from it the first time it touches that node (a few
hundred in a server's life). It is asyncua's own lazy address space (``AddressSpace.load_aspace_shelf``,
its start-up cache for slow devices) with the copies taken from memory rather than from a shelf file, so
nothing is written to disk and nothing is unpickled that this process did not pickle itself.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from asyncua import ua
from asyncua.server.address_space import NodeData
from asyncua.server.internal_server import InternalServer

_lock = threading.Lock()
_standard: dict[ua.NodeId, NodeData] | None = None


def standard_nodes() -> dict[ua.NodeId, NodeData]:
    """The standard address space of this process, built by asyncua on the first call; never changed."""
    global _standard
    with _lock:
        if _standard is None:
            from asyncua.server.standard_address_space import standard_address_space  # lazy: 1.7 s to fill

            builder = InternalServer()
            standard_address_space.fill_address_space(builder.node_mgt_service)
            _standard = dict(builder.aspace._nodes)
        return _standard


class CopyOnTouch(MutableMapping):
    """A server's nodes: its own (copied from ``standard`` when first looked up, or added) over the
    shared standard ones, which are never handed out or changed."""

    def __init__(self, standard: dict[ua.NodeId, NodeData]):
        self.standard = standard
        self.own: dict[ua.NodeId, NodeData] = {}

    def __getitem__(self, key: ua.NodeId) -> NodeData:
        try:
            return self.own[key]
        except KeyError:
            node = self.own[key] = pickle.loads(pickle.dumps(self.standard[key], pickle.HIGHEST_PROTOCOL))
            return node

    def __setitem__(self, key: ua.NodeId, value: NodeData) -> None:
        self.own[key] = value

    def __delitem__(self, key: ua.NodeId) -> None:
        del self.own[key]

    def __contains__(self, key: object) -> bool:
        return key in self.own or key in self.standard

    def __iter__(self) -> Iterator[ua.NodeId]:  # what asyncua's shelf gives: the nodes touched or added
        return iter(self.own)

    def __len__(self) -> int:
        return len(self.own)


class QuickStartServer(InternalServer):
    """asyncua's internal server with the standard address space copied on touch (pass as ``iserver``)."""

    async def load_standard_address_space(self, shelf_file: Path | None = None, *_: Any) -> None:
        # a mapping in place of the dict, as asyncua's own shelf puts its lazy one there
        self.aspace._nodes = CopyOnTouch(await asyncio.to_thread(standard_nodes))  # type: ignore[assignment]
