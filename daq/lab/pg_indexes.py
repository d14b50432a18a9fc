"""B-tree expression indexes that let a PostgreSQL catalogue answer the session filters (rig, kind, status,
who, verdict, ``--since``/``--until`` on ``started``, ``--param NAME=LO:HI`` on ``analysis.estimates.NAME``)
from an index instead of reading every session's metadata for each search.

Tiled turns a ``Comparison`` on ``a.b.c`` into ``metadata #> '{a,b,c}' >= value``; an index on exactly that
expression is what PostgreSQL's planner matches, so :func:`daq.lab.search.session_query` sends an equality
as ``>=`` and ``<=`` the value - the replication state's too: Tiled's ``Eq`` is ``metadata @> {...}``,
answered by Tiled's GIN index, whose every hit (all sessions, for the state) the planner must then re-check
on the row and ANDs with the other conditions' indexes less often; as ranges, the selective conditions'
B-tree bitmaps are ANDed and only their few rows are read.

The session containers' metadata is small (layout 3: ~2 kB, see :mod:`daq.lab.about`), so it is kept in
the row, not out of line; PostgreSQL compresses a value over ~2 kB, and every condition evaluated on a row
decompresses it again, so the column is switched to lz4 (several times faster to decompress than the
default pglz; PostgreSQL 14+, built with lz4 - else left as it is). Values written afterwards are lz4.

A listing of the newest sessions (``hil sessions``: Tiled sorts by ``started`` descending, a page of 50)
has its own index: Tiled's sort expression is ``metadata -> 'started'`` (not the filters' ``#>``), so the
index leads with it and the newest rows are read from its end, 50 of them, not all 10,000 sorted; its
second column is the filters' ``metadata #> '{started}'``, so a ``--since/--until`` window is checked in the
index while it is walked (the planner cannot know the two expressions agree). The replication state is
indexed for its statistics: without them the planner takes "verified" for 0.5 % of the sessions (every one
is), and sorts them all rather than walking the sort index.

An index per estimate name that the catalogue's sessions carry is made when ``hil lab serve`` starts (``IF
NOT EXISTS``: a restart after new kinds of analyses adds theirs)."""

from __future__ import annotations

import asyncio
import re

#: Metadata paths indexed in every PostgreSQL catalogue.
ALWAYS = (("started",), ("ended",), ("kind",), ("status",), ("by",), ("rig", "name"), ("analysis", "verdict"),
          ("replication", "state"))
#: The newest first (``daq.lab.search_pages.NEWEST_FIRST``): Tiled's sort expression, then the filters'.
SORT_INDEX = ("CREATE INDEX IF NOT EXISTS \"hil_sort_started\" ON nodes "
              "((metadata -> 'started'), (metadata #> '{started}'))")
#: Estimate names an index is made for (the rigs' parameter names; anything else is left to a scan).
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")
ESTIMATE_NAMES = ("SELECT DISTINCT jsonb_object_keys(metadata #> '{analysis,estimates}') FROM nodes "
                  "WHERE jsonb_typeof(metadata #> '{analysis,estimates}') = 'object'")


def index_sql(path: tuple[str, ...]) -> str:
    name = "hil_" + "_".join(path)
    return f"CREATE INDEX IF NOT EXISTS \"{name}\" ON nodes ((metadata #> '{{{','.join(path)}}}'))"


async def _ensure(dsn: str) -> list[str]:
    import asyncpg  # type: ignore[import-untyped]  # lazy: only a PostgreSQL catalogue

    db = await asyncpg.connect(dsn)
    try:
        names = sorted(r[0] for r in await db.fetch(ESTIMATE_NAMES) if NAME.match(r[0]))
        paths = [*ALWAYS, *(("analysis", "estimates", n) for n in names)]
        for path in paths:
            await db.execute(index_sql(path))
        await db.execute(SORT_INDEX)
        try:
            await db.execute("ALTER TABLE nodes ALTER COLUMN metadata SET COMPRESSION lz4")
        except asyncpg.PostgresError:  # before PostgreSQL 14, or built without lz4: pglz stays
            pass
        await db.execute("ANALYZE nodes")
        return [*(".".join(p) for p in paths), "started (newest first)"]
    finally:
        await db.close()


def ensure_search_indexes(uri: str) -> list[str]:
    """Make the indexes of a ``postgresql[+asyncpg]://`` catalogue; the metadata paths indexed."""
    dsn = re.sub(r"^postgresql\+asyncpg://", "postgresql://", uri)
    return asyncio.run(_ensure(dsn))
