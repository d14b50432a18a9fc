"""What the CLI's lazy imports claim, measured: `hil --help` (and the help of a command) loads none of the
heavy rooms and libraries - no identification math, no simulators, no rig kinds or run machinery, no
scipy, matplotlib, numba, dask, h5py, web server or protocol stacks. Checked on ``sys.modules`` of a fresh
interpreter (what was imported, not how long it took: timing depends on the machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the rig kinds (daq/rigs/<kind>/); the registry itself (daq.rigs, its base and config modules) is light: a
#: kind is imported only when a config names it
RIG_KINDS = tuple(sorted(f"daq.rigs.{p.parent.name}" for p in (ROOT / "daq" / "rigs").glob("*/__init__.py")))
HEAVY = ("identification", "simulators", *RIG_KINDS, "daq.rigs.drive", "daq.run", "daq.serve", "daq.online",
         "daq.plots", "scipy", "matplotlib", "numba", "dask", "distributed", "h5py", "SALib", "starlette",
         "uvicorn", "asyncua", "pymodbus", "serial", "tiled", "pyarrow", "pyuff")
PROBE = """
import json, sys
from daq.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["serve", "--help"], ["ctl", "--help"]])
def test_help_imports_nothing_heavy(args):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, check=True).stdout
    loaded = json.loads(out.splitlines()[-1])
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []
