"""docs/contracts.md, "Stopping": the service's own code waits with ``asyncio.timeout``, never
``asyncio.wait_for``, which on Python 3.11 returns the inner result when the waiting task is cancelled just
as that result arrives (CPython gh-86296): a stop that lands at that moment would be lost. Read from the
source."""

from __future__ import annotations

import ast

from tests.test_architecture import modules


def wait_for_calls(tree: ast.AST) -> list[int]:
    """Lines that call ``asyncio.wait_for`` (as ``asyncio.wait_for`` or a name imported from asyncio)."""
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "asyncio" for a in node.names if a.name == "wait_for"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "wait_for" and isinstance(f.value, ast.Name)
                    and f.value.id == "asyncio") or (isinstance(f, ast.Name) and f.id in imported):
                lines.append(node.lineno)
    return lines


def test_the_service_never_waits_with_wait_for():
    found = {name: lines for name, path in modules().items() if name.startswith("daq.")
             if (lines := wait_for_calls(ast.parse(path.read_text())))}
    assert found == {}


def test_the_check_finds_a_wait_for_call():
    """The scan itself: both spellings are found, a method of our own named wait_for is not."""
    text = ("import asyncio\nfrom asyncio import wait_for as wf\n"
            "async def f(ident):\n    await asyncio.wait_for(g(), 1)\n    await wf(g(), 1)\n"
            "    await ident.wait_for(3, 1.0)\n")
    assert wait_for_calls(ast.parse(text)) == [4, 5]
