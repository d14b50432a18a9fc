"""The simulators' OPC UA servers share one standard address space per process (simulators/opcua_space.py):
each server sees the standard nodes asyncua would give it and changes only its own copies. Real servers
and clients on 127.0.0.1, port 0."""

from __future__ import annotations

import pytest
from asyncua import Client, Server, ua

from simulators.opcua_space import QuickStartServer, standard_nodes

pytestmark = pytest.mark.asyncio

NAMESPACE_ARRAY = ua.NodeId(ua.ObjectIds.Server_NamespaceArray)


async def started(server: Server, name: str) -> tuple[Server, str]:
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:0/{name}")
    server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    idx = await server.register_namespace(f"urn:test:{name}")
    drive = await server.nodes.objects.add_object(idx, "Drive")
    await drive.add_variable(idx, "speed", 1.5)
    await server.start()
    assert server.bserver is not None
    return server, f"opc.tcp://127.0.0.1:{server.bserver.port}/{name}"


async def names_below(client: Client, node_id: int, depth: int = 3) -> set[str]:
    """Browse names of the standard nodes up to ``depth`` levels under ``node_id``, as paths."""
    found: set[str] = set()

    async def walk(node, path: str, left: int) -> None:
        for child in await node.get_children():
            name = (await child.read_browse_name()).to_string()
            found.add(f"{path}/{name}")
            if left > 1:
                await walk(child, f"{path}/{name}", left - 1)

    await walk(client.get_node(ua.NodeId(node_id)), "", depth)
    return found


async def test_two_servers_in_one_process_keep_their_own_namespaces_and_leave_the_shared_space_alone():
    before = repr(standard_nodes()[NAMESPACE_ARRAY].attributes[ua.AttributeIds.Value].value)
    a, url_a = await started(Server(iserver=QuickStartServer()), "a")
    b, url_b = await started(Server(iserver=QuickStartServer()), "b")
    try:
        async with Client(url_a) as ca, Client(url_b) as cb:
            spaces_a = await ca.get_node(NAMESPACE_ARRAY).read_value()
            spaces_b = await cb.get_node(NAMESPACE_ARRAY).read_value()
            assert "urn:test:a" in spaces_a and "urn:test:a" not in spaces_b, (spaces_a, spaces_b)
            assert "urn:test:b" in spaces_b and "urn:test:b" not in spaces_a, (spaces_a, spaces_b)
            for client in (ca, cb):
                state = client.get_node(ua.NodeId(ua.ObjectIds.Server_ServerStatus_State))
                assert await state.read_value() == ua.ServerState.Running
    finally:
        await a.stop()
        await b.stop()
    after = repr(standard_nodes()[NAMESPACE_ARRAY].attributes[ua.AttributeIds.Value].value)
    assert after == before and "urn:test" not in after, (before, after)


async def test_a_quick_server_answers_the_standard_nodes_as_a_plain_asyncua_server_does():
    plain, url_plain = await started(Server(), "plain")
    quick, url_quick = await started(Server(iserver=QuickStartServer()), "quick")
    try:
        async with Client(url_plain) as cp, Client(url_quick) as cq:
            for root in (ua.ObjectIds.Server, ua.ObjectIds.TypesFolder):
                seen_plain, seen_quick = await names_below(cp, root), await names_below(cq, root)
                assert len(seen_plain) > 30, seen_plain
                assert seen_quick == seen_plain, seen_quick ^ seen_plain
            limits = ua.NodeId(ua.ObjectIds.Server_ServerCapabilities_MaxBrowseContinuationPoints)
            assert await cq.get_node(limits).read_value() == await cp.get_node(limits).read_value()
    finally:
        await plain.stop()
        await quick.stop()
