"""The Tiled node clients the live forwarder writes with: the push's light clients (:mod:`daq.lab.client`)
plus Tiled's streaming writes - an array grown with a PATCH of its next rows (``extend``: what
``ArrayClient.patch(..., extend=True)`` sends) and a table appended with a PATCH of its partition (what
``append_partition`` sends). Each is one request with a timeout of its own and no retries: a lab that is
slow or down makes the forwarder fall behind (it writes the same rows again later), never wait long."""

from __future__ import annotations

from functools import cache

import numpy as np

from daq.lab.client import _ArrowTableMixin, _BlockArrayMixin, _client_base

#: s a single live write may take before the forwarder counts the lab as slow (and tries again later).
WRITE_TIMEOUT = 10.0
#: Tiled's own media type for CSV tables: the live frames and events tables are CSV files, the one file
#: table Tiled 0.2.20 appends to (its Parquet tables take whole writes only); the verified push at the end
#: completes and keeps them.
CSV = "text/csv"


class _LiveArrayMixin(_BlockArrayMixin):
    def put_rows(self, values: np.ndarray, offset: int) -> tuple[int, ...]:
        """Write ``values`` at row ``offset``, growing the array to fit; the array's new shape (one try)."""
        return self.write_rows(values, offset, timeout=WRITE_TIMEOUT, retries=False)


class _LiveTableMixin(_ArrowTableMixin):
    def append_arrow(self, table, timeout: float | None = WRITE_TIMEOUT) -> None:
        """Append the rows of an Arrow table (one try, with the forwarder's timeout)."""
        super().append_arrow(table, timeout)


@cache
def live_structure_clients() -> dict:
    """``structure_clients`` for the forwarder: containers as Tiled has them, arrays and tables with the
    push's classes and the streaming writes above."""
    from tiled.client.container import Container  # lazy: as above

    base = _client_base()
    return {
        "container": Container,
        "array": type("LiveArrayClient", (_LiveArrayMixin, base), {}),
        "table": type("LiveTableClient", (_LiveTableMixin, base), {}),
    }
