"""The rule for imports inside functions (docs/architecture.md): an import of the project's own modules
written inside a function says on its line why it is lazy, and the laziness defers something - a module
that importing the enclosing module does not load anyway. Read from the source (no import is run)."""

from __future__ import annotations

from tests.test_architecture import imports, modules
from tests.test_identification_lazy import first_party_imports


def loaded_at_import(name: str) -> set[str]:
    """Every first-party module that importing ``name`` loads through module-level imports (those of the
    packages' ``__init__`` included; imports inside functions and for type checkers left out)."""
    parts = name.split(".")
    seen: set[str] = set()
    todo = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(first_party_imports(mod))
    return seen


def _where(i) -> str:
    return f"{modules()[i.source].relative_to(modules()[i.source].parents[len(i.source.split('.')) - 1])}" \
           f":{i.line} -> {i.target}"


def test_an_import_inside_a_function_says_why_it_is_lazy():
    silent = sorted(_where(i) for i in imports() if i.local and not i.lazy)
    assert silent == []


def test_a_lazy_import_defers_what_the_module_does_not_load_anyway():
    """``from drivers.servo_drive import ServoDrive  # lazy: asyncua`` in a module that imports
    ``drivers.servo_drive`` at its top defers nothing: the import belongs at the top."""
    pointless = sorted(_where(i) for i in imports() if i.local and i.target in loaded_at_import(i.source))
    assert pointless == []
