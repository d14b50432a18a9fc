"""The import contract of the rooms (docs/architecture.md), checked over the real import graph.

Every ``import`` statement of the first-party packages counts, wherever it stands: at module level,
inside a function, or under ``if TYPE_CHECKING`` - a cycle hidden in a function is still a cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("daq", "drivers", "identification", "simulators")
MAX_LINES = 600
MAX_FUNCTION_LINES = 100


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported first-party module
    line: int
    local: bool  # inside a function
    lazy: bool  # the line says why it is imported lazily


@cache
def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


@cache
def imports() -> tuple[Import, ...]:
    mods = modules()
    found = []
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        is_pkg = path.name == "__init__.py"
        local_nodes = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(up + ([base] if base else []))
                # ``from pkg import module`` imports the module; ``from module import name`` the module
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            seen = set()
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t not in seen:
                    seen.add(t)
                    lazy = "lazy" in lines[node.lineno - 1].lower()
                    found.append(Import(name, t, node.lineno, id(node) in local_nodes, lazy))
    return tuple(found)


def room(module: str) -> str:
    """The room of a module: top-level package, or daq's and identification's sub-package (daq.rigs.<kind>
    for rig kinds)."""
    parts = module.split(".")
    if parts[0] == "identification" and len(parts) > 1 and (ROOT / "identification" / parts[1]).is_dir():
        return f"identification.{parts[1]}"
    if parts[0] != "daq" or len(parts) == 1:
        return parts[0]
    if parts[1] == "rigs" and len(parts) > 2 and (ROOT / "daq" / "rigs" / parts[2]).is_dir():
        return f"daq.rigs.{parts[2]}"
    return f"daq.{parts[1]}"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in list(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_import_cycles_counting_function_local_imports():
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports():
        edges[imp.source].add(imp.target)
        edges[imp.target]
    assert cycles(edges) == []


def test_math_and_drivers_import_nothing_of_the_service_or_the_simulators():
    bad = [
        i
        for i in imports()
        if i.source.split(".")[0] in ("identification", "drivers")
        and i.target.split(".")[0] in ("daq", "simulators")
    ]
    assert bad == []


def test_simulators_import_nothing_of_the_service():
    assert [i for i in imports() if i.source.startswith("simulators") and i.target.startswith("daq")] == []


def test_nothing_imports_the_cli():
    bad = [i for i in imports() if i.target.startswith("daq.cli") and not i.source.startswith("daq.cli")]
    assert bad == []


def test_no_rig_kind_imports_another():
    bad = []
    for i in imports():
        a, b = room(i.source), room(i.target)
        if a != b and a.startswith("daq.rigs.") and b.startswith("daq.rigs."):
            bad.append(i)
    assert bad == []


def test_lower_rooms_do_not_import_higher_ones():
    """bus, config, store and lab (with the error tree and the JSON codec) are the floor of daq/; run, online
    and export sit on them; rigs on those."""
    floor = {"daq.bus", "daq.config", "daq.store", "daq.lab", "daq.errors", "daq.json_codec", "daq.version",
             "daq.executor", "daq.tls"}
    middle = {"daq.run", "daq.online", "daq.export", "daq.plots"}
    bad = []
    for i in imports():
        a, b = room(i.source), room(i.target)
        if a == b or not b.startswith("daq"):
            continue
        if a in floor and b not in floor:
            bad.append(i)
        elif a in middle and (b.startswith("daq.rigs.") or b == "daq.cli"):
            bad.append(i)  # the middle may know the registry (daq.rigs), never a rig kind
    assert bad == []


#: what each room of identification/ may import besides itself: estimation is the floor, models stand on it,
#: the method families (design, selection, gsa) on models and never on each other, frequency beside them
#: (anything but analyses; the cycle test keeps it from importing a room that imports it), analyses (one
#: rig's whole analysis) on top
_BELOW_METHODS = {"identification.estimation", "identification.models", "identification.frequency"}
_METHODS = {"identification.design", "identification.selection", "identification.gsa"}
IDENTIFICATION_FLOORS = {
    "identification.estimation": set(),
    "identification.models": {"identification.estimation"},
    "identification.frequency": {"identification.estimation", "identification.models"} | _METHODS,
    "identification.design": _BELOW_METHODS,
    "identification.selection": _BELOW_METHODS,
    "identification.gsa": _BELOW_METHODS,
    "identification.analyses": _BELOW_METHODS | _METHODS,
}


def test_identification_rooms_import_only_the_floors_below():
    rooms = {room(name) for name in modules() if name.startswith("identification.")}
    assert rooms == set(IDENTIFICATION_FLOORS), "a new room of identification/ needs its floor here"
    bad = []
    for i in imports():
        a, b = room(i.source), room(i.target)
        if a in IDENTIFICATION_FLOORS and b.startswith("identification") and a != b:
            if b not in IDENTIFICATION_FLOORS[a]:
                bad.append(i)
    assert bad == []


def test_no_module_is_longer_than_the_limit():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_function_is_longer_than_the_limit():
    """Counted from the ``def`` line to the last line of the body, docstring included."""
    long = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = n
    assert long == {}
