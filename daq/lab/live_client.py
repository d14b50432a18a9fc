"""The Tiled node clients the live forwarder writes with: the push's light clients (:mod:`daq.lab.client`)
plus Tiled's streaming writes - an array grown with a PATCH of its next rows (``extend``: what
``ArrayClient.patch(..., extend=True)`` sends) and a table appended with a PATCH of its partition (what
``append_partition`` sends). Each is one request with a timeout of its own and no retries: a lab that is
slow or down makes the forwarder fall behind (it writes the same rows again later), never wait long."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from daq.lab.client import ARROW_FILE, OCTET_STREAM, _ArrowTableMixin, _BlockArrayMixin, _client_base

#: s a single live write may take before the forwarder counts the lab as slow (and tries again later).
WRITE_TIMEOUT = 10.0
#: Tiled's own media type for CSV tables: the live frames and events tables are CSV files, the one file
#: table Tiled 0.2.20 appends to (its Parquet tables take whole writes only); the verified push at the end
#: writes them again as Parquet.
CSV = "text/csv"


def _arrow_bytes(table) -> bytes:
    import pyarrow as pa  # type: ignore[import-untyped]  # lazy: only tables need it

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class _LiveArrayMixin:
    item: Any
    context: Any

    def put_rows(self, values: np.ndarray, offset: int) -> tuple[int, ...]:
        """Write ``values`` at row ``offset``, growing the array to fit; the array's new shape."""
        from tiled.client.utils import handle_error  # lazy: tiled's client side

        values = np.ascontiguousarray(values)
        params = {"offset": ",".join([str(offset)] + ["0"] * (values.ndim - 1)),
                  "shape": ",".join(map(str, values.shape)), "extend": "true"}
        resp = handle_error(self.context.http_client.patch(
            self.item["links"]["full"], content=values.tobytes(), params=params,
            headers={"Content-Type": OCTET_STREAM}, timeout=WRITE_TIMEOUT))
        return tuple(resp.json()["shape"])


class _LiveTableMixin:
    item: Any
    context: Any

    def append_arrow(self, table) -> None:
        """Append the rows of an Arrow table to the table's only partition (one request, no retry: an
        append sent twice is two appends, so after a failure the forwarder counts the rows again)."""
        from tiled.client.utils import handle_error  # lazy: as above

        handle_error(self.context.http_client.patch(
            self.item["links"]["partition"].format(index=0), content=_arrow_bytes(table),
            headers={"Content-Type": ARROW_FILE}, timeout=WRITE_TIMEOUT))


@cache
def live_structure_clients() -> dict:
    """``structure_clients`` for the forwarder: containers as Tiled has them, arrays and tables with the
    push's classes and the streaming writes above."""
    from tiled.client.container import Container  # lazy: as above

    base = _client_base()
    return {
        "container": Container,
        "array": type("LiveArrayClient", (_LiveArrayMixin, _BlockArrayMixin, base), {}),
        "table": type("LiveTableClient", (_LiveTableMixin, _ArrowTableMixin, base), {}),
    }
