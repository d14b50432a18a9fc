"""A command loads only the math it uses (docs/architecture.md): the packages of identification/ hand their
public names on lazily (PEP 562), so importing one module loads that module and what it imports itself -
not its siblings, not the other rooms. Checked on ``sys.modules`` of a fresh interpreter."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from functools import cache

import pytest

from tests.test_architecture import ROOT, modules

PACKAGES = sorted(name for name, path in modules().items()
                  if name.startswith("identification.") and path.name == "__init__.py")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs when it is imported: not inside a function, not for type
    checkers only."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


@cache
def first_party_imports(name: str) -> frozenset[str]:
    """The first-party modules that importing ``name`` runs directly, with the packages above each."""
    mods = modules()
    path = mods[name]
    base_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(base_parts[: len(base_parts) - node.level + 1] + ([base] if base else []))
        targets.add(base)
        targets.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods)
    found = set()
    for target in targets:
        parts = target.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in mods)
    return frozenset(found)


def uses(name: str) -> set[str]:
    """The first-party modules that ``name`` uses: what it imports, and what those import, each with the
    packages above it - but not what those packages' ``__init__`` import (a package that hands on every
    name of its modules would make each of them "used")."""
    parts = name.split(".")
    packages = {".".join(parts[:i]) for i in range(1, len(parts))}
    seen: set[str] = set()
    todo = [name]
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(m for m in first_party_imports(mod) if modules()[m].name != "__init__.py")
            packages.update(m for m in first_party_imports(mod) if modules()[m].name == "__init__.py")
    return seen | packages


def test_the_packages_of_identification_import_nothing_when_imported():
    """Their ``__init__`` imports under ``if TYPE_CHECKING`` only: a name is loaded when it is asked for."""
    eager = {pkg: sorted(first_party_imports(pkg) - {"identification"}) for pkg in PACKAGES}
    assert eager == {pkg: [] for pkg in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_the_object_of_its_module(package):
    """``__all__``, the table of modules and the names for type checkers agree, and each name is the very
    object its module defines."""
    pkg = importlib.import_module(package)
    typed = {a.asname or a.name
             for node in ast.parse(modules()[package].read_text()).body
             if isinstance(node, ast.If) and _is_type_checking(node)
             for stmt in node.body if isinstance(stmt, ast.ImportFrom)
             for a in stmt.names}
    table = {name: module for module, names in pkg._EXPORTS.items() for name in names}
    assert len(pkg.__all__) == len(set(pkg.__all__))
    assert set(pkg.__all__) == set(table) == typed
    for name, module in table.items():
        assert getattr(pkg, name) is getattr(importlib.import_module(f"{package}.{module}"), name)
    with pytest.raises(AttributeError, match="no_such_name"):
        pkg.no_such_name  # noqa: B018


PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m == "identification" or m.startswith("identification."))))
"""

#: one module of each room, with few imports of its own (the docs' example first)
SAMPLES = ["identification.selection.model_selection", "identification.design.multisine",
           "identification.estimation.least_squares", "identification.frequency.frf_estimation",
           "identification.models.press_models", "identification.gsa.sobol",
           "identification.analyses.press_analysis"]


@pytest.mark.parametrize("module", SAMPLES)
def test_importing_one_module_loads_only_what_it_imports(module):
    out = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, check=True).stdout
    loaded = set(json.loads(out.splitlines()[-1]))
    assert module in loaded
    assert sorted(loaded - uses(module)) == []
