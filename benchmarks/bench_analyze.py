"""Benchmark: the whole `hil analyze --json` of the shipped crane session, with the seconds of each stage.

Records the session once (`hil --store S run configs/crane-sim.toml`, not timed; or ``--store`` an existing
store whose latest session is a crane session), then times exactly the command a user waits for,
``hil --store S analyze latest --json --plots DIR``, as a subprocess: wall time, and CPU time of it and of
every process it started (its executor's workers). The stages come from the command's own JSON
(``stages``: selection on the coarse step, refit of the close rivals on the data's step, profiles,
adequacy, traces, plots), each with the wall seconds and the CPU seconds of the command's process tree.

``--dask`` records the session with ``[model_selection] scheduler = "local"`` (a Dask LocalCluster of
``n_jobs`` workers): the same stages then run on the cluster. On a machine shared with other work the wall
times are inflated by the load; the CPU seconds are not (both are printed, with the load average).

    nice .venv/bin/python benchmarks/bench_analyze.py [--repeats 3] [--store S] [--dask] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "crane-sim.toml"


def hil(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    """Run the `hil` command of this checkout (same interpreter, this tree first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", "from daq.cli.main import main; main()", *args]
    return subprocess.run(cmd, env=env, check=True, text=True, capture_output=capture)


def config_copy(folder: Path, dask: bool) -> Path:
    """configs/crane-sim.toml, or a copy with the Dask scheduler set, two levels below ``folder`` (its
    relative paths, ``../sessions/...``, then land inside ``folder``)."""
    if not dask:
        return CONFIG
    text = CONFIG.read_text()
    text = re.sub(r"^\[model_selection\]\n", '[model_selection]\nscheduler = "local"\n', text, flags=re.M)
    out = folder / "configs" / "crane-sim-dask.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def time_analyze(store: Path, plots: Path) -> dict:
    """One `hil analyze latest --json --plots DIR`: wall and CPU seconds (the command and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = hil("--store", str(store), "analyze", "latest", "--json", "--plots", str(plots))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    d = json.loads(out.stdout)
    return {"wall": wall, "cpu": cpu, "load_before": load, "load_after": os.getloadavg()[0],
            "stages": d.get("stages", {}), "chosen": d.get("chosen"),
            "intervals_valid": (d.get("adequacy") or {}).get("intervals_valid")}


def table(rows: list[dict]) -> str:
    stages = list(dict.fromkeys(k for r in rows for k in r["stages"]))
    head = ("| run | load | wall s | CPU s | " + " | ".join(f"{s} s (CPU)" for s in stages)
            + " | chosen | valid |")
    lines = [head, "|" + "---|" * (6 + len(stages))]
    for i, r in enumerate(rows):
        cells = [f"{r['stages'][s]['seconds']:.1f} ({r['stages'][s]['cpu_seconds']:.1f})"
                 if s in r["stages"] else "-" for s in stages]
        lines.append(f"| {i + 1} | {r['load_before']:.1f}-{r['load_after']:.1f} | {r['wall']:.1f} | "
                     f"{r['cpu']:.1f} | " + " | ".join(cells)
                     + f" | {r['chosen']} | {r['intervals_valid']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--store", default=None, help="an existing store whose latest session is the crane's")
    ap.add_argument("--dask", action="store_true", help='record with [model_selection] scheduler = "local"')
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-analyze-") as tmp:
        folder = Path(tmp)
        store = Path(args.store) if args.store else folder / "s.sqlite"
        if not args.store:
            hil("--store", str(store), "run", str(config_copy(folder, args.dask)), "--no-progress")
        rows = []
        for i in range(args.repeats):
            rows.append(time_analyze(store, folder / f"plots{i}"))
            print(f"run {i + 1}: {rows[-1]['wall']:.1f} s wall, {rows[-1]['cpu']:.1f} s CPU", file=sys.stderr,
                  flush=True)
    print(table(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
