"""A node found by its whole path in one catalogue query, where Tiled walks the path a segment at a time.

Tiled 0.2.20 finds the node of every request (``tiled.server.dependencies.get_entry``) one path segment at a
time, so that an access policy can filter each level: a query with its eager loads per segment. A lab
request mostly names a stream's array or table three levels down (``SESSION/STREAM/data``), and its lookup
cost three times that of a session's: 28 against 15 ms of server CPU for a metadata GET here. The lab server
has no access policy (people's roles are scopes, checked before the lookup), so the walk filters nothing;
Tiled's catalogue adapter already finds a node by a path of several segments in one query (joined aliases,
``node_from_segments``). :func:`install` has Tiled's routers use that whenever there is no access policy,
no session state and the root is a catalogue without conditions, and Tiled's own walk otherwise (and for
the root itself).

That query is built once per depth, with the path's keys as bound parameters (:func:`by_path`): Tiled's
``node_from_segments`` builds it afresh per request - an ``aliased`` node per segment, each with its column
collection, and a comparison per key. In a profile of the lab's live tests (py-spy, 50 Hz) the lookup was two
fifths of a request's CPU, most of it that building; built once, a nested node's metadata took 8.0 instead of
11.0 ms of server CPU (benchmarks/bench_lab_request.py). SQLAlchemy finds the compiled form in its cache."""

from __future__ import annotations

import functools

ATTRIBUTE = "hil_one_query"  # marks the router's lookup as this module's (installed once per process)


def install() -> None:
    """Have Tiled's routers (its API's and its Zarr endpoints') look nodes up by their whole path (see the
    module's docstring)."""
    from tiled.server import router, zarr  # lazy: only the lab server imports Tiled's server

    for module in (router, zarr):
        if not getattr(module.get_entry, ATTRIBUTE, False):
            module.get_entry = one_query_lookup(module.get_entry)


def one_query_lookup(walk):
    """``walk`` (Tiled's ``get_entry``) with a path of several segments found in one query when it can be."""
    from fastapi import HTTPException  # lazy: as install
    from starlette.status import HTTP_404_NOT_FOUND, HTTP_410_GONE  # lazy: as above
    from tiled.catalog.adapter import CatalogContainerAdapter  # lazy: as above
    from tiled.server.core import NoEntry  # lazy: as above
    from tiled.utils import BrokenLink  # lazy: as above

    @functools.wraps(walk)
    async def get_entry(path, security_scopes, principal, authn_access_tags, authn_scopes, root_tree,
                        session_state, metrics, structure_families=None, access_policy=None):
        parts = [segment for segment in path.split("/") if segment]
        if (not parts or access_policy is not None or session_state
                or type(root_tree) is not CatalogContainerAdapter
                or root_tree.conditions or root_tree.access_filters):
            return await walk(path, security_scopes, principal, authn_access_tags, authn_scopes, root_tree,
                              session_state, metrics, structure_families, access_policy)
        try:
            entry = await lookup(root_tree, parts)
        except BrokenLink as err:
            raise HTTPException(status_code=HTTP_410_GONE, detail=err.args[0]) from None
        except NoEntry:
            raise HTTPException(status_code=HTTP_404_NOT_FOUND, detail=f"No such entry: {parts}") from None
        if structure_families is None or entry.structure_family in structure_families:
            return entry
        raise HTTPException(
            status_code=HTTP_404_NOT_FOUND,
            detail=(f"The node at {path} has structure family {entry.structure_family} "
                    f"and this endpoint is compatible with structure families {structure_families}"))

    setattr(get_entry, ATTRIBUTE, True)
    return get_entry


@functools.lru_cache(maxsize=16)
def by_path(depth: int):
    """The select of the node ``depth`` segments below the node ``:root_id``, keys ``:k0`` ... in order, with
    the eager loads Tiled's ``lookup_adapter`` adds: Tiled's ``node_from_segments`` query, built once."""
    from sqlalchemy import bindparam, select  # lazy: as install
    from sqlalchemy.orm import aliased, selectinload  # lazy: as above
    from tiled.catalog import orm  # lazy: as above

    nodes = [aliased(orm.Node) for _ in range(depth)] + [orm.Node]
    statement = select(nodes[-1]).select_from(nodes[0]).where(nodes[0].id == bindparam("root_id"))
    for i in range(depth):
        parent, child = nodes[i], nodes[i + 1]
        statement = statement.join(child, child.parent == parent.id).where(child.key == bindparam(f"k{i}"))
    return statement.options(selectinload(orm.Node.data_sources).selectinload(orm.DataSource.structure))


async def lookup(root_tree, parts: list[str]):
    """The adapter of the node at ``parts`` below a catalogue root without conditions, by :func:`by_path`;
    where no node answers (absent, or inside a file the catalogue does not index) Tiled's own
    ``lookup_adapter`` decides, as it does for the walk."""
    from tiled.catalog.adapter import STRUCTURES  # lazy: as install

    params = {"root_id": root_tree.node.id, **{f"k{i}": key for i, key in enumerate(parts)}}
    async with root_tree.context.session() as db:
        node = (await db.execute(by_path(len(parts)), params)).scalar()
    if node is None:
        return await root_tree.lookup_adapter(parts)
    return STRUCTURES[node.structure_family](root_tree.context, node)
