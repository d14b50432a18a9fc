"""The lab server finds a nested node by its whole path in one catalogue query (daq/lab/entry_lookup.py), and
finds what Tiled's own walk of the path finds: the same node, the same refusals."""

from __future__ import annotations

import asyncio
import collections

import pytest

pytest.importorskip("tiled.server")


async def _build(folder) -> None:
    from tiled.catalog import from_uri
    from tiled.structures.core import StructureFamily

    tree = from_uri(f"sqlite:///{folder / 'catalog.db'}", writable_storage=[str(folder / "data")],
                    init_if_not_exists=True)
    await tree.startup()
    try:
        session = await tree.create_node(StructureFamily.container, {"status": "complete"}, key="s1")
        stream = await session.create_node(StructureFamily.container, {"rate": 2000.0}, key="press.force")
        await stream.create_node(StructureFamily.container, {"unit": "N"}, key="data")
        more = await stream.create_node(StructureFamily.container, {}, key="more")
        await more.create_node(StructureFamily.container, {"depth": 5}, key="deep")
    finally:
        await tree.shutdown()


@pytest.fixture(scope="module")
def catalogue_folder(tmp_path_factory):
    """A real Tiled SQLite catalogue (made once: Tiled initialises it in a process of its own):
    s1/press.force/{data, more/deep}, containers all."""
    folder = tmp_path_factory.mktemp("catalogue")
    asyncio.run(_build(folder))
    return folder


async def _catalogue(folder):
    """The catalogue of ``folder``, opened in this process and this event loop."""
    from tiled.catalog import from_uri

    tree = from_uri(f"sqlite:///{folder / 'catalog.db'}", writable_storage=[str(folder / "data")])
    await tree.startup()
    return tree


class Statements:
    """Counts the SQL statements the catalogue's engine runs."""

    def __init__(self, tree):
        from sqlalchemy import event

        self.n = 0
        event.listen(tree.context.engine.sync_engine, "before_cursor_execute", self._count)

    def _count(self, *_):
        self.n += 1

    async def of(self, lookup) -> tuple[int, object]:
        before = self.n
        result = await lookup
        return self.n - before, result


def _args(tree, path, families=None, policy=None):
    metrics = collections.defaultdict(lambda: {"dur": 0.0})  # what Tiled's request state holds
    return (path, ["read:metadata"], None, None, {"read:metadata"}, tree, {}, metrics, families, policy)


@pytest.mark.asyncio
async def test_a_nested_node_is_found_in_one_query_and_is_the_node_tiled_walks_to(catalogue_folder):
    from tiled.server.dependencies import get_entry as walk

    from daq.lab.entry_lookup import one_query_lookup

    tree = await _catalogue(catalogue_folder)
    lookup, count = one_query_lookup(walk), Statements(tree)
    try:
        # two siblings at one depth: the query built once per depth finds each by its own keys
        for path in ("s1/press.force/data", "s1/press.force/more", "s1/press.force/more/deep"):
            walked, by_walk = await count.of(walk(*_args(tree, path)))
            queried, by_path = await count.of(lookup(*_args(tree, path)))
            assert by_path.node.id == by_walk.node.id and by_path.metadata() == by_walk.metadata()
            assert type(by_path) is type(by_walk)
            depth = len(path.split("/"))
            # Tiled's walk: a query (and its eager loads) per segment; ours: one, whatever the depth
            assert walked >= depth * queried, (path, walked, queried)
        one, _ = await count.of(lookup(*_args(tree, "s1")))
        deep, _ = await count.of(lookup(*_args(tree, "s1/press.force/more/deep")))
        assert deep == one
    finally:
        await tree.shutdown()


@pytest.mark.asyncio
async def test_a_missing_or_wrong_kind_of_node_is_refused_as_tiled_refuses_it(catalogue_folder):
    from fastapi import HTTPException
    from tiled.server.dependencies import get_entry as walk
    from tiled.structures.core import StructureFamily

    from daq.lab.entry_lookup import one_query_lookup

    tree = await _catalogue(catalogue_folder)
    lookup = one_query_lookup(walk)
    try:
        for path, families in (("s1/press.force/nosuch", None), ("s1/nosuch/data", None),
                               ("s1/press.force/data", {StructureFamily.array})):
            answers = []
            for find in (walk, lookup):
                with pytest.raises(HTTPException) as refused:
                    await find(*_args(tree, path, families))
                answers.append((refused.value.status_code, refused.value.detail))
            assert answers[0] == answers[1], answers
            assert answers[0][0] == 404
    finally:
        await tree.shutdown()


@pytest.mark.asyncio
async def test_with_an_access_policy_the_path_is_walked_as_tiled_walks_it(catalogue_folder):
    """An access policy filters each level: Tiled's own walk runs then (here a policy letting all through)."""
    from tiled.server.dependencies import get_entry as walk

    from daq.lab.entry_lookup import one_query_lookup

    class AllowAll:
        async def allowed_scopes(self, *_):
            return {"read:metadata", "read:data"}

        async def filters(self, *_):
            return []

    tree = await _catalogue(catalogue_folder)
    lookup, count = one_query_lookup(walk), Statements(tree)
    try:
        path = "s1/press.force/more/deep"
        walked, by_walk = await count.of(walk(*_args(tree, path, policy=AllowAll())))
        queried, by_path = await count.of(lookup(*_args(tree, path, policy=AllowAll())))
        assert walked == queried and by_path.node.id == by_walk.node.id
    finally:
        await tree.shutdown()
