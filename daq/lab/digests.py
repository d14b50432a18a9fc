"""Digests of every block of a session's arrays, recorded by the push, so that what the lab serves can be
checked against what was pushed, block by block, without downloading anything that was not asked for.

A push records on each array node (``t``, ``data``) ``block_sha256`` (SHA-256 of each block's
little-endian bytes) and ``block_etag`` (the hash a Tiled server gives the block as served: its ETag,
dask's ``tokenize``, see :mod:`daq.lab.client`). A reader checks a block in one of two ways:

- it fetched the whole block: the SHA-256 of the fetched rows against ``block_sha256`` (no request);
- it fetched part of it (a window, an edge search): it asks for the block with ``If-None-Match`` set to
  ``block_etag``; the server hashes the block as it reads it from its storage now and answers 304 with no
  body when they agree. Any other answer carries the block, whose SHA-256 is compared (a server whose
  hash differs costs a download, never a wrong verdict).

A block changed or lost on the lab's disk (Zarr hands out zeros for a missing chunk file) matches neither,
and the read stops with one line naming the session, the stream and the block.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from daq.lab.settings import LabError

OCTET_STREAM = "application/octet-stream"
SHA_KEY, ETAG_KEY = "block_sha256", "block_etag"


class LabCopyDiffers(LabError):
    """The lab's copy of a session is not what was pushed (changed or lost on the lab's disk)."""


def block_sha256(values: np.ndarray) -> str:
    """SHA-256 of a block's values as little-endian bytes in row order."""
    arr = np.asarray(values)
    if arr.dtype.itemsize > 1 and arr.dtype.byteorder not in "<|":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return hashlib.sha256(np.ascontiguousarray(arr).data).hexdigest()


@dataclass
class BlockDigests:
    """Per block of one array: SHA-256 and the server's hash (ETag) of what was pushed."""

    sha256: list[str]
    etag: list[str]
    order: str = "<"  # the dtype spelling the hashes were made with (daq.lab.client.byte_order)

    def add(self, values: np.ndarray) -> None:
        from daq.lab.client import block_token, byte_order  # lazy: dask's tokenize, only a push needs it

        values = np.ascontiguousarray(values)
        self.order = byte_order()
        self.sha256.append(block_sha256(values))
        self.etag.append(block_token(values, self.order))

    def token(self, i: int) -> str | None:
        """Block ``i``'s hash for the push's own check of it, when made the way the server spells it."""
        from daq.lab.client import byte_order  # lazy: as above

        return self.etag[i] if i < len(self.etag) and self.order == byte_order() else None

    def as_metadata(self) -> dict:
        return {SHA_KEY: list(self.sha256), ETAG_KEY: list(self.etag)}

    @classmethod
    def empty(cls) -> BlockDigests:
        return cls([], [])

    @classmethod
    def of(cls, metadata) -> BlockDigests | None:
        """The digests an array node's metadata records; None for a copy pushed before they were."""
        sha, etag = metadata.get(SHA_KEY), metadata.get(ETAG_KEY)
        if sha is None or etag is None:
            return None
        return cls([str(x) for x in sha], [str(x) for x in etag])


def where(session: str, stream: str, part: str, block: int | None = None) -> str:
    """How a line names a place in the lab's copy: ``session S, stream X, data block 3``."""
    place = f"session {session}" + (f", stream {stream}" if stream else "") + f", {part}"
    return place + ("" if block is None else f" block {block}")


def differs(session: str, stream: str, part: str, block: int | None = None) -> LabCopyDiffers:
    return LabCopyDiffers(f"{where(session, stream, part, block)}: the lab's copy is not what was pushed "
                          "(changed or lost on the lab's disk); not read - hil lab push it again")


def _get_block(node, block: tuple[int, ...], headers: dict):
    from tiled.client.utils import handle_error, retry_context  # lazy: only talking to a lab needs it

    http = node.context.http_client
    url = node.item["links"]["block"].format(*block)
    for attempt in retry_context():
        with attempt:
            resp = http.get(url, headers={"Accept": OCTET_STREAM, **headers})
            if resp.status_code != 304:
                handle_error(resp)
    return resp


def whole_sha256(node) -> str:
    """SHA-256 of a whole array node as served, read block by block: what a push recorded as ``sha256``
    (little-endian bytes); only copies pushed before block digests need it."""
    h = hashlib.sha256()
    shape = node.structure().shape
    for i in range(len(node.structure().chunks[0])):
        h.update(_get_block(node, block_index(len(shape), i), {}).content)
    return h.hexdigest()


def block_holds(node, block: tuple[int, ...], etag: str, sha: str) -> bool:
    """True when the lab serves block ``block`` of the array ``node`` (a Tiled client node) as pushed:
    a 304 to its recorded hash, or else the served block's SHA-256 (see the module's docstring)."""
    resp = _get_block(node, block, {"If-None-Match": etag})
    return resp.status_code == 304 or hashlib.sha256(resp.content).hexdigest() == sha


def unreadable(node, exc: BaseException) -> bool:
    """True when reading ``node`` failed because the lab cannot read its own file (lost or broken on its
    disk): the server erred (5xx), or it broke off the answer while it still answers about the node - a
    lab that does not answer at all is unreachable, not a changed copy."""
    import httpx  # lazy: only talking to a lab needs it

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        return status >= 500
    if not isinstance(exc, httpx.TransportError):
        return False
    try:
        return node.context.http_client.get(node.item["links"]["self"]).status_code == 200
    except httpx.HTTPError:
        return False


def block_index(n_dims: int, i: int) -> tuple[int, ...]:
    """The index of a row block of an array of ``n_dims`` dimensions (blocks span whole rows)."""
    return (i,) if n_dims == 1 else (i, 0)


class CopyChecker:
    """What a reader of the lab fetched, checked against the push's digests, each block once per reader
    (``hil --store URL``: daq/lab/reader.py). A block that is not as pushed raises LabCopyDiffers."""

    def __init__(self) -> None:
        self.done: set[tuple[str, int]] = set()  # (array node's URI, block); -1: the whole array

    def rows(self, session: str, stream: str, part: str, arr, n_rows: int, rows_per_block: int, lo: int,
             hi: int, fetched: np.ndarray | None = None) -> None:
        """Rows ``lo:hi`` of the array ``arr`` (``fetched``: what was read of them): every block they
        touch is as pushed. Whole blocks among ``fetched`` are hashed here; the others are asked for with
        their recorded hash (the server answers 304, no body)."""
        if hi <= lo:
            return
        meta = arr.metadata
        if tuple(arr.structure().shape)[0] != n_rows:
            raise differs(session, stream, part)
        digests = BlockDigests.of(meta)
        if digests is None:  # pushed before block digests: the whole array, once
            if (arr.uri, -1) not in self.done:
                if whole_sha256(arr) != meta.get("sha256"):
                    raise differs(session, stream, part)
                self.done.add((arr.uri, -1))
            return
        for b in range(lo // rows_per_block, (hi - 1) // rows_per_block + 1):
            if (arr.uri, b) in self.done:
                continue
            a, z = b * rows_per_block, min((b + 1) * rows_per_block, n_rows)
            if b >= len(digests.sha256):
                raise differs(session, stream, part, b)
            if fetched is not None and lo <= a and z <= hi:
                ok = block_sha256(fetched[a - lo:z - lo]) == digests.sha256[b]
            else:
                ok = block_holds(arr, block_index(len(arr.structure().shape), b), digests.etag[b],
                                 digests.sha256[b])
            if not ok:
                raise differs(session, stream, part, b)
            self.done.add((arr.uri, b))

    def table(self, session: str, stream: str, node, rows: int, sha: str) -> None:
        """A table read whole, of ``rows`` rows whose digest (daq.lab.checks.table_sha256) is ``sha``,
        is the one its push recorded."""
        if (node.uri, -1) in self.done:
            return
        if (rows, sha) != (node.metadata.get("rows"), node.metadata.get("sha256")):
            raise differs(session, stream, f"{node.item['id']} table")
        self.done.add((node.uri, -1))
