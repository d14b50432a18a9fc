"""Our bytecode and the test modules' rewritten code, made once per run before anything imports them.

Python keeps a module's compiled code in its ``__pycache__`` - unless it may not write bytecode
(``PYTHONDONTWRITEBYTECODE``, set on this machine). pip compiles installed packages, but not an editable
install's sources, so on a fresh clone every process the suite starts (four pytest workers and ~130
`hil` commands, lab servers, forwarders and pool workers) compiled the modules of ours it imported:
0.05-0.2 CPU-s for a `hil` command, ~3 for a worker. And pytest keeps each test module with its asserts
rewritten (so a failure shows its values) in the same place under the same rule: each worker rewrote all
of them again, ~4 CPU-s each, all workers on two cores at once.

The run's first process (the xdist controller, which collects nothing itself, or a run without workers)
writes both once: ``compileall`` for the packages (in a process beside it), pytest's own functions for
the test modules. Every reader checks them against its source (timestamp, or hash for pytest's) as
always and compiles afresh what does not match. The same code runs; what changes is that the folders
hold ``__pycache__`` after a run here too (ignored by git, as everywhere).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: the packages of ours that tests and the processes they start import
PACKAGES = ("daq", "identification", "simulators", "drivers", "tests", "benchmarks")
#: test modules: pytest imports them rewritten (write_rewritten_tests), never as compileall compiles them
TEST_MODULE = re.compile(r"[/\\]test_[^/\\]*\.py$")


def start_compiling(root: Path) -> subprocess.Popen | None:
    """``compileall`` of the project's packages in a process of its own (it runs beside the rewriting of the
    test modules); None where Python writes its bytecode itself."""
    if sys.dont_write_bytecode:
        folders = [name for name in PACKAGES if (root / name).is_dir()]
        command = [sys.executable, "-m", "compileall", "-q", "-x", TEST_MODULE.pattern, *folders]
        return subprocess.Popen(command, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return None


#: made beside the bytecode: numba's cache of the compiled loops (drive) and solves (press), so that the
#: workers load them instead of compiling them all at once at the start (~10 CPU-s each on a fresh clone)
COMPILE_KERNELS = ("from identification.models import drive_kernels, press_kernels\n"
                   "drive_kernels.load_kernels()\n"
                   "press_kernels.load_kernels()\n")


def start_compiling_kernels(root: Path) -> subprocess.Popen:
    """The numba kernels compiled (or found in the cache) in a process of its own, the cache written beside
    the sources as any first use writes it (a checkout with no writable cache compiles in memory: nothing is
    kept, each process compiles its own as before)."""
    return subprocess.Popen([sys.executable, "-c", COMPILE_KERNELS], cwd=root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def write_rewritten_tests(config: pytest.Config, folder: Path) -> int:
    """Rewrite each ``test_*.py`` and ``conftest.py`` in ``folder`` whose cached code is missing or stale; the
    number written (0 when this pytest's internals differ: each worker then rewrites them, as before)."""
    if not sys.dont_write_bytecode:
        return 0  # pytest writes its own cache in the first process that imports a module
    try:
        from _pytest.assertion import rewrite
        from _pytest.assertion.rewrite import assertstate_key

        state = config.stash[assertstate_key]
        cache_dir = rewrite.get_cache_dir(folder / "conftest.py")
        if not rewrite.try_makedirs(cache_dir):
            return 0
    except (ImportError, AttributeError, KeyError, TypeError):
        return 0
    written = 0
    for source in sorted([*folder.glob("test_*.py"), folder / "conftest.py"]):
        try:
            pyc = cache_dir / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc) is not None:
                continue
            stamp, code = rewrite._rewrite_test(source, config)  # (the source's hash or stat, code)
            written += bool(rewrite._write_pyc(state, code, stamp, pyc))
        except (SyntaxError, ValueError, OSError, AttributeError, TypeError):
            continue  # a module that does not compile: the worker that imports it says why, as before
    return written
