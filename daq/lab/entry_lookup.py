"""A node found by its whole path in one catalogue query, where Tiled walks the path a segment at a time.

Tiled 0.2.20 finds the node of every request (``tiled.server.dependencies.get_entry``) one path segment at a
time, so that an access policy can filter each level: a query with its eager loads per segment. A lab
request mostly names a stream's array or table three levels down (``SESSION/STREAM/data``), and its lookup
cost three times that of a session's: 28 against 15 ms of server CPU for a metadata GET here. The lab server
has no access policy (people's roles are scopes, checked before the lookup), so the walk filters nothing;
Tiled's catalogue adapter already finds a node by a path of several segments in one query (joined aliases,
``node_from_segments``). :func:`install` has Tiled's routers use that whenever there is no access policy,
no session state and the root is a catalogue without conditions, and Tiled's own walk otherwise."""

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
        if (len(parts) < 2 or access_policy is not None or session_state
                or type(root_tree) is not CatalogContainerAdapter
                or root_tree.conditions or root_tree.access_filters):
            return await walk(path, security_scopes, principal, authn_access_tags, authn_scopes, root_tree,
                              session_state, metrics, structure_families, access_policy)
        try:
            entry = await root_tree.lookup_adapter(parts)
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
