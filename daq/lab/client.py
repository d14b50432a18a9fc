"""The Tiled client a push uses: Tiled's own ``Container`` for the tree, and two small node clients given
to it through ``structure_clients`` (Tiled's documented hook for choosing the class a node is handled
with). Tiled's default ``ArrayClient`` and ``DataFrameClient`` import dask.array, pandas and xarray when
the first array or table is touched (about 160 MB of a push's memory); a push only writes blocks and
Arrow tables and asks whether the server holds them, so it gets by with httpx, numpy and pyarrow.

Whether the lab holds a block is asked without downloading it: Tiled answers a block read with an ETag,
a hash the server computes over the array it read from its storage (``tiled.server.etag.tokenize``,
i.e. dask's ``tokenize``), and answers 304 with no body when the request's ``If-None-Match`` is that
hash. The push computes the same hash over the block it sent; a 304 means the server's bytes are the
sent bytes. Any other answer carries the stored block, which is then compared here byte for byte - so a
server whose hash differs (another dask version) costs a download, never a wrong verdict.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any, Literal

import numpy as np

OCTET_STREAM = "application/octet-stream"
ARROW_FILE = "application/vnd.apache.arrow.file"


#: How the server's arrays spell a little-endian dtype: the hash covers the dtype's spelling, and Zarr 3
#: hands out explicit "<f8" where numpy says "float64" ("="). The first answer with a body tells which
#: spelling this server uses, and later blocks are hashed that way.
ByteOrder = Literal["<", "="]
BYTE_ORDERS: tuple[ByteOrder, ...] = ("<", "=")
_order: dict[str, ByteOrder] = {"now": BYTE_ORDERS[0]}


def byte_order() -> ByteOrder:
    """The dtype spelling block tokens are made with now (learnt from the server's first answer)."""
    return _order["now"]


def block_token(values: np.ndarray, order: ByteOrder | None = None) -> str:
    """The ETag a Tiled server gives ``values`` served as raw bytes (see the module's docstring)."""
    from dask.tokenize import tokenize  # lazy: the light part of dask (no dask.array, no pandas)

    dtype = values.dtype
    if dtype.itemsize > 1 and dtype.byteorder in "<=":
        values = values.view(dtype.newbyteorder(order or _order["now"]))
    return tokenize((values, OCTET_STREAM))


def _client_base():
    from tiled.client.base import BaseClient  # lazy: only commands that talk to a lab load tiled

    return BaseClient


def _http(node):
    from tiled.client.utils import handle_error, retry_context  # lazy: as above

    return node.context.http_client, handle_error, retry_context


def _get(node, url: str, retries: bool, **kwargs):
    """A GET of ``url`` answered 2xx or 304 (else the client's error), with Tiled's retries or one try."""
    http, handle_error, retry_context = _http(node)
    if not retries:
        resp = http.get(url, **kwargs)
        return resp if resp.status_code == 304 else handle_error(resp)
    for attempt in retry_context():
        with attempt:
            resp = http.get(url, **kwargs)
            if resp.status_code == 304:
                return resp
            handle_error(resp)
    return resp


class _BlockArrayMixin:
    """An array node written and checked block by block."""

    item: Any  # Tiled's BaseClient provides it

    def write_block(self, values: np.ndarray, block: tuple[int, ...]) -> None:
        """Store ``values`` as block ``block`` (what Tiled's ``ArrayClient.write_block`` sends)."""
        http, handle_error, retry_context = _http(self)
        url = self.item["links"]["block"].format(*block)
        payload = np.ascontiguousarray(values).tobytes()
        for attempt in retry_context():
            with attempt:
                handle_error(http.put(url, content=payload, headers={"Content-Type": OCTET_STREAM}))

    def rows_match(self, values: np.ndarray, start: int, retries: bool = True) -> bool:
        """True when the lab stores exactly ``values`` as rows ``start:start+len(values)``: one request for
        many blocks (Tiled answers a sliced read with an ETag too: a 304 to their hash, else the rows as
        served, compared here). ``retries``: Tiled's retries of a failed request (else one try)."""
        values = np.ascontiguousarray(values)
        rows = {"slice": f"{start}:{start + len(values)}"}
        resp = _get(self, self.item["links"]["full"], retries, params=rows,
                    headers={"Accept": OCTET_STREAM, "If-None-Match": block_token(values)})
        return resp.status_code == 304 or resp.content == values.tobytes()

    def write_rows(self, values: np.ndarray, offset: int, timeout: float | None = None,
                   retries: bool = True) -> tuple[int, ...]:
        """Write ``values`` at row ``offset``, growing the array to fit (a PATCH with ``extend``: what
        ``ArrayClient.patch(..., extend=True)`` sends); the array's new shape. The same rows at the same
        offset twice are the same bytes, so a retried write is harmless."""
        http, handle_error, retry_context = _http(self)
        values = np.ascontiguousarray(values)
        params = {"offset": ",".join([str(offset)] + ["0"] * (values.ndim - 1)),
                  "shape": ",".join(map(str, values.shape)), "extend": "true"}
        kwargs: dict[str, Any] = {"content": values.tobytes(), "params": params,
                                  "headers": {"Content-Type": OCTET_STREAM}}
        if timeout is not None:
            kwargs["timeout"] = timeout
        if not retries:
            return tuple(handle_error(http.patch(self.item["links"]["full"], **kwargs)).json()["shape"])
        for attempt in retry_context():
            with attempt:
                resp = handle_error(http.patch(self.item["links"]["full"], **kwargs))
        return tuple(resp.json()["shape"])

    def block_matches(self, values: np.ndarray, block: tuple[int, ...], token: str | None = None,
                      retries: bool = True) -> bool:
        """True when the lab stores exactly ``values`` as block ``block``: a 304 to the block's token, or
        else the block's bytes as served, compared here. ``retries``: as in :meth:`rows_match`."""
        values = np.ascontiguousarray(values)
        resp = _get(self, self.item["links"]["block"].format(*block), retries,
                    headers={"Accept": OCTET_STREAM, "If-None-Match": token or block_token(values)})
        if resp.status_code == 304:
            return True
        same = resp.content == values.tobytes()
        if same:  # learn how this server spells the dtype, for the next blocks
            etag = resp.headers.get("ETag")
            _order["now"] = next((o for o in BYTE_ORDERS if block_token(values, o) == etag), _order["now"])
        return same


def arrow_file_bytes(table) -> bytes:
    """An Arrow table as the bytes of an Arrow IPC file (what Tiled takes for ARROW_FILE)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # lazy: only tables need it

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class _ArrowTableMixin:
    """A table node written whole and read as an Arrow table."""

    item: Any  # Tiled's BaseClient provides it

    def write_arrow(self, table) -> None:
        http, handle_error, retry_context = _http(self)
        payload = arrow_file_bytes(table)
        for attempt in retry_context():
            with attempt:
                handle_error(http.put(self.item["links"]["full"], content=payload,
                                      headers={"Content-Type": ARROW_FILE}))

    def append_arrow(self, table, timeout: float | None = None) -> None:
        """Append the rows of an Arrow table to the table's only partition (what ``append_partition``
        sends; Tiled 0.2.20 appends to CSV tables only). One request, no retry: an append sent twice is
        two appends, so after a failure the writer counts the rows the lab holds again."""
        http, handle_error, _ = _http(self)
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        url = self.item["links"]["partition"].format(index=0)
        handle_error(http.patch(url, content=arrow_file_bytes(table), headers={"Content-Type": ARROW_FILE},
                                **kwargs))

    def read_arrow(self, retries: bool = True):
        import pyarrow as pa  # lazy: as above

        resp = _get(self, self.item["links"]["full"], retries, headers={"Accept": ARROW_FILE})
        return pa.ipc.open_file(io.BytesIO(resp.content)).read_all()


@cache
def push_structure_clients() -> dict:
    """The ``structure_clients`` of a pushing client: containers as Tiled has them, arrays and tables
    with the classes above."""
    from tiled.client.container import Container  # lazy: as above

    base = _client_base()
    return {
        "container": Container,
        "array": type("BlockArrayClient", (_BlockArrayMixin, base), {}),
        "table": type("ArrowTableClient", (_ArrowTableMixin, base), {}),
    }
