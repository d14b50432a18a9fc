"""The lab's rigs: each ``hil serve --lab URL --rig NAME`` keeps its state in the lab's catalogue, and anyone
with a key lists them (``hil --store URL rigs``, the lab's page).

The states live in Tiled itself, as a reserved container ``/rigs`` (spec ``hil-rigs``) holding one
container per rig (spec ``hil-rig``) whose metadata is the rig's state: ``name``, ``page`` (its ``hil
serve`` URL), ``heartbeat`` (unix time, s, of the last write), ``state`` (idle / running), ``run`` (session,
config, who, progress), ``queue`` (runs waiting) and ``lock``. ``rigs`` is not a session id
(:func:`daq.lab.names.is_session_key`) and has no ``replication.state``, so no session listing shows it.
Each write replaces the metadata without keeping a revision (a heartbeat every few seconds would otherwise
grow Tiled's revision table without end), with the rig's own key (an operator's: ``write:metadata``,
``create:node``).

Whether a rig is offline is the reader's judgement, not the rig's: a rig whose last heartbeat is older than
:data:`OFFLINE_AFTER` seconds (a reader's setting) is shown ``offline`` whatever it last said.
"""

from __future__ import annotations

import re
import time
from typing import Any

from daq.lab.settings import LabError

RIGS = "rigs"
SPEC_RIGS = "hil-rigs"
SPEC_RIG = "hil-rig"
OFFLINE_AFTER = 30.0  # s without a heartbeat after which a reader shows a rig offline
RIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


def check_rig_name(name: str) -> str:
    """``name`` when it may name a rig node of the lab, else one line."""
    if not RIG_NAME.fullmatch(name):
        raise LabError(f"--rig {name[:40]!r}: a rig's name is 1 to 64 letters, digits, '_', '.' or '-', "
                       "starting with a letter or digit")
    return name


class RigPublisher:
    """A rig's writer of its own state into the lab (blocking: call :meth:`publish` from a thread)."""

    def __init__(self, url: str, key: str, name: str) -> None:
        self.url, self.key, self.name = url, key, check_rig_name(name)
        self._node: Any = None  # the rig's Tiled node, looked up on the first write

    def _rig_node(self) -> Any:
        from tiled.client.utils import ClientError  # lazy: only a rig with a lab needs tiled's client

        from daq.lab.connect import from_client_error, open_lab  # lazy: as above

        root = open_lab(self.url, self.key)
        try:
            for parent, key, spec in ((root, RIGS, SPEC_RIGS), (None, self.name, SPEC_RIG)):
                parent = parent if parent is not None else root[RIGS]
                if key not in parent:
                    try:
                        parent.create_container(key=key, metadata={"hil": spec}, specs=[spec])
                    except ClientError as exc:  # another rig made it at the same moment: use that one
                        if getattr(getattr(exc, "response", None), "status_code", None) != 409:
                            raise
            return root[RIGS][self.name]
        except Exception as exc:  # noqa: BLE001 - the client's failure as one line
            raise from_client_error(self.url, exc) from None

    def publish(self, state: dict) -> None:
        """Write ``state`` (with this moment as its heartbeat) as the rig's metadata."""
        from daq.lab.connect import from_client_error  # lazy: as above

        state = {**state, "name": self.name, "heartbeat": time.time()}
        if self._node is None:
            self._node = self._rig_node()
        try:
            self._node.replace_metadata(metadata=state, drop_revision=True)
        except Exception as exc:  # noqa: BLE001 - next time the node is looked up again
            self._node = None
            raise from_client_error(self.url, exc) from None


def shown_state(meta: dict, offline_after: float = OFFLINE_AFTER, now: float | None = None) -> dict:
    """A rig's metadata as a reader shows it: ``state`` offline when its heartbeat is too old, ``age`` the
    heartbeat's age in seconds."""
    now = time.time() if now is None else now
    beat = meta.get("heartbeat")
    age = now - float(beat) if isinstance(beat, int | float) else None
    row = dict(meta)
    row["age"] = age
    if age is None or age > offline_after:
        row["state"] = "offline"
        row["run"] = None
    return row


def read_rigs(root, offline_after: float = OFFLINE_AFTER) -> list[dict]:
    """Every rig of the lab whose root container (Tiled's client) is ``root``, by name."""
    if RIGS not in root:
        return []
    rigs = root[RIGS]
    rows = [shown_state(dict(node.metadata), offline_after) for _, node in rigs.items()]
    return sorted((r for r in rows if r.get("name")), key=lambda r: r["name"])
