"""B-tree expression indexes that let a PostgreSQL catalogue answer the session filters (rig, kind, status,
who, verdict, ``--since``/``--until`` on ``started``, ``--param NAME=LO:HI`` on ``analysis.estimates.NAME``)
from an index instead of reading every session's whole metadata (6-10 kB, compressed out of line) for each
search.

Tiled turns a ``Comparison`` on ``a.b.c`` into ``metadata #> '{a,b,c}' >= value``; an index on exactly that
expression is what PostgreSQL's planner matches, so :func:`daq.lab.search.session_query` sends an equality
as ``>=`` and ``<=`` the value (Tiled's ``Eq`` is ``metadata @> {...}``, for which the planner reads every
row rather than use Tiled's GIN index when the metadata is large). An index per estimate name
that the catalogue's sessions carry is made when ``hil lab serve`` starts (``IF NOT EXISTS``: a restart
after new kinds of analyses adds theirs)."""

from __future__ import annotations

import asyncio
import re

#: Metadata paths indexed in every PostgreSQL catalogue.
ALWAYS = (("started",), ("ended",), ("kind",), ("status",), ("by",), ("rig", "name"), ("analysis", "verdict"))
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
        await db.execute("ANALYZE nodes")
        return [".".join(p) for p in paths]
    finally:
        await db.close()


def ensure_search_indexes(uri: str) -> list[str]:
    """Make the indexes of a ``postgresql[+asyncpg]://`` catalogue; the metadata paths indexed."""
    dsn = re.sub(r"^postgresql\+asyncpg://", "postgresql://", uri)
    return asyncio.run(_ensure(dsn))
