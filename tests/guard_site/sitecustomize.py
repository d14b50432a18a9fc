"""Puts tests/loopback_guard.py into every child Python process a test starts (tests/conftest.py puts this
folder on ``PYTHONPATH`` and sets ``$HIL_TEST_GUARD_LOG``), then runs the interpreter's own
``sitecustomize``, if any, which this module shadows."""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if os.environ.get("HIL_TEST_GUARD_LOG"):
    try:
        sys.modules.setdefault("loopback_guard", _load("loopback_guard", os.path.join(
            os.path.dirname(_here), "loopback_guard.py"))).install()
    except OSError:
        pass  # not readable (a child running as another user): that child is not guarded

_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_next = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _next is not None and _next.origin and _next.loader is not None:
    _load("_next_sitecustomize", _next.origin)
