"""CPU of a `hil lab serve` start and stop (issue 43): the server started on a fresh data folder until it
prints its URL, then Ctrl-C; the CPU the whole process used (``os.wait4``). Each tree given runs in turn,
``--repeat`` rounds, so a machine whose speed drifts moves both alike; medians printed.

    .venv/bin/python benchmarks/bench_lab_start.py [--repeat 4] [--trees . /tmp/old]

A tree is a checkout (``git archive REV | tar -x -C /tmp/old``) run with this venv's Python, its own
folder first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def start_and_stop(tree: Path) -> float:
    """CPU-s of one `hil lab serve` from ``tree``: started, URL read, stopped with SIGINT."""
    with tempfile.TemporaryDirectory(prefix="hil-bench-lab-") as folder:
        proc = subprocess.Popen([sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data",
                                 str(Path(folder) / "lab"), "--port", "0"], cwd=tree, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree)})
        assert proc.stdout is not None
        lines = [proc.stdout.readline().decode() for _ in range(2)]
        if not lines[1].startswith(("http://", "https://")):
            proc.kill()
            raise SystemExit(f"{tree}: lab serve printed {lines}")
        proc.send_signal(signal.SIGINT)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.stdout.close()
        return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--trees", nargs="+", default=["."])
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees]
    cpu: dict[Path, list[float]] = {t: [] for t in trees}
    for _ in range(args.repeat):
        for tree in trees:
            cpu[tree].append(start_and_stop(tree))
    for tree, values in cpu.items():
        print(f"{str(tree):40s} start+stop CPU median {statistics.median(values):.2f} s "
              f"(min {min(values):.2f}, max {max(values):.2f}, n {len(values)})")


if __name__ == "__main__":
    main()
