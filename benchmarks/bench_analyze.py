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

``--trees OLD NEW``: the same command with each checkout's code (``PYTHONPATH=<tree>``) on the same session,
the trees alternating within each repeat, then the median wall and CPU seconds per tree and their ratio to the
first (issue 44: a checkout of the code before next to this one). ``--no-plots``: ``analyze latest --json``.

    nice .venv/bin/python benchmarks/bench_analyze.py [--repeats 3] [--store S] [--dask] [--json out.json]
    .venv/bin/python benchmarks/bench_analyze.py --repeats 5 --store S --no-plots --trees /tmp/old .
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "crane-sim.toml"


def hil(*args: str, capture: bool = True, root: Path = ROOT) -> subprocess.CompletedProcess:
    """Run the `hil` command of a checkout (same interpreter, ``root`` first on the path; default: this)."""
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", "from daq.cli.main import main; main()", *args]
    # run in the tree: `python -c` puts the working directory first on the path, ahead of PYTHONPATH
    return subprocess.run(cmd, env=env, check=True, text=True, capture_output=capture, cwd=root)


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


def adopt_orphans() -> None:
    """Become the subreaper of the commands' process trees: a pool's fork server outlives the command by a
    moment and its workers are its children, so only a reaper that waits for them counts their CPU time
    (``RUSAGE_CHILDREN``). Linux only; elsewhere the figure leaves them out."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans(deadline_s: float = 10.0) -> None:
    """Wait for what the command left (its fork server ends once the command has), so that its CPU counts."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.02)


def time_analyze(store: Path, plots: Path | None, root: Path = ROOT) -> dict:
    """One `hil analyze latest --json [--plots DIR]` of the checkout ``root``: wall and CPU seconds (the
    command and every process it started, its pool's fork server and workers too)."""
    adopt_orphans()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    extra = ("--plots", str(plots)) if plots is not None else ()
    out = hil("--store", str(store), "analyze", "latest", "--json", *extra, root=root)
    wall = time.perf_counter() - t0
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    d = json.loads(out.stdout)
    return {"tree": str(root), "wall": wall, "cpu": cpu, "load_before": load,
            "load_after": os.getloadavg()[0],
            "stages": d.get("stages", {}), "chosen": d.get("chosen"),
            "intervals_valid": (d.get("adequacy") or {}).get("intervals_valid")}


def table(rows: list[dict]) -> str:
    stages = list(dict.fromkeys(k for r in rows for k in r["stages"]))
    head = ("| run | tree | load | wall s | CPU s | " + " | ".join(f"{s} s (CPU)" for s in stages)
            + " | chosen | valid |")
    lines = [head, "|" + "---|" * (7 + len(stages))]
    for i, r in enumerate(rows):
        cells = [f"{r['stages'][s]['seconds']:.1f} ({r['stages'][s]['cpu_seconds']:.1f})"
                 if s in r["stages"] else "-" for s in stages]
        lines.append(f"| {i + 1} | {Path(r['tree']).name} | {r['load_before']:.1f}-{r['load_after']:.1f} | "
                     f"{r['wall']:.1f} | "
                     f"{r['cpu']:.1f} | " + " | ".join(cells)
                     + f" | {r['chosen']} | {r['intervals_valid']} |")
    return "\n".join(lines)


def tree_summary(rows: list[dict], trees: list[Path]) -> str:
    """Median wall and CPU seconds per tree, and each tree's ratio to the first (lower: faster)."""
    med = {t: (statistics.median(r["wall"] for r in rows if r["tree"] == str(t)),
               statistics.median(r["cpu"] for r in rows if r["tree"] == str(t))) for t in trees}
    w0, c0 = med[trees[0]]
    lines = ["| tree | median wall s | median CPU s | wall / first | CPU / first | same choice and verdict |",
             "|---|---|---|---|---|---|"]
    ref = {(r["chosen"], r["intervals_valid"]) for r in rows if r["tree"] == str(trees[0])}
    for t in trees:
        w, c = med[t]
        same = {(r["chosen"], r["intervals_valid"]) for r in rows if r["tree"] == str(t)} == ref
        lines.append(f"| {t} | {w:.1f} | {c:.1f} | {w / w0:.2f} | {c / c0:.2f} | {same} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--store", default=None, help="an existing store whose latest session is the crane's")
    ap.add_argument("--dask", action="store_true", help='record with [model_selection] scheduler = "local"')
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--trees", nargs="+", type=Path, default=None,
                    help="checkouts to time side by side (the first is the reference); default: this one")
    ap.add_argument("--no-plots", action="store_true", help="time `analyze latest --json` without --plots")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.trees or [ROOT])]
    with tempfile.TemporaryDirectory(prefix="bench-analyze-") as tmp:
        folder = Path(tmp)
        store = Path(args.store) if args.store else folder / "s.sqlite"
        if not args.store:
            hil("--store", str(store), "run", str(config_copy(folder, args.dask)), "--no-progress")
        rows = []
        for i in range(args.repeats):
            for tree in trees if i % 2 == 0 else trees[::-1]:  # alternate the order: drift hits both alike
                rows.append(time_analyze(store, None if args.no_plots else folder / f"plots{i}", tree))
                r = rows[-1]
                print(f"run {i + 1} ({tree.name}): {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
                      f"load {r['load_before']:.1f}", file=sys.stderr, flush=True)
    print(table(rows))
    if len(trees) > 1:
        print()
        print(tree_summary(rows, trees))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
