"""The lab server keeps Tiled's reply models for its whole life instead of making them again per request.

Tiled (0.2.20) describes every node it answers with ``Resource[NodeAttributes, <links>, <meta>]``, a
pydantic generic parametrised on the spot. pydantic remembers a parametrisation only in a weak-valued
cache, and the classes it makes sit in reference cycles, so the cyclic garbage collector frees them
between requests; the next request then builds the class and its validation schema again (~1.3 ms, about
a sixth of an authenticated metadata GET's server CPU in a py-spy profile of `hil lab serve`, and once per
structure family a listing holds). One strong reference to each parametrisation Tiled's replies use keeps
pydantic's cache answering. The replies are the same classes, so what the server sends does not change.
"""

from __future__ import annotations

from typing import Any

_KEPT: list[Any] = []


def keep_reply_models() -> int:
    """Make each reply model Tiled's ``construct_resource`` asks for once and hold it; the number held."""
    from tiled.server import schemas  # lazy: only the lab server imports Tiled's server side

    if not _KEPT:
        resource = schemas.Resource
        _KEPT.append(resource[schemas.NodeAttributes, schemas.ContainerLinks, schemas.ContainerMeta])
        links = {*schemas.resource_links_type_by_structure_family.values(), schemas.SelfLinkOnly}
        _KEPT.extend(resource[schemas.NodeAttributes, kind, schemas.EmptyDict]
                     for kind in sorted(links, key=lambda kind: kind.__name__))
    return len(_KEPT)
