"""A lab reader's requests and the lab server's CPU for one read test's work (issue 43).

One `hil lab serve` holds one pushed session (20 s of a press-like recording: a 1 kHz force stream of three
channels and a timestamped sensor stream, as tests/test_lab.py makes it). Each round does what
tests/test_lab.py's read test does with it: `hil --store URL show SESSION --json`, `hil --store URL sessions
--json`, then one `LabReader` that reads every message and four windows. Counted: the requests the clients
sent (httpx's own log of each request) and the server process's CPU (utime + stime from /proc). Beside it,
Tiled's plain client reading the same session's arrays and tables whole once a round (`plain`): the floor
of the reads, without our checks, windows or the commands' own lookups.

``--trees OLD .`` runs the rounds with each checkout's client code (the server is this tree's), alternating,
e.g. a commit before a change:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_lab_reads.py [--rounds 5] [--repeats 2] [--trees OLD .]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_lab import cpu_of

#: what one round does, in a fresh interpreter with the tree's code first on the path (argv: TREE URL KEY SID
#: ROUNDS KIND); prints the requests it sent as JSON
ROUND = r"""
import json, logging, sys
tree, url, key, sid, rounds, kind = sys.argv[1:7]
sys.path.insert(0, tree)
asked = []
class Count(logging.Handler):
    def emit(self, record):
        asked.append(record.getMessage())
httpx_log = logging.getLogger("httpx")
httpx_log.addHandler(Count()); httpx_log.setLevel(logging.INFO); httpx_log.propagate = False
if kind == "plain":
    from tiled.client import from_uri
    for _ in range(int(rounds)):
        node = from_uri(url, api_key=key)[sid]
        for name in node:
            child = node[name]
            for part in child if child.structure_family == "container" else ():
                child[part].read()
            if child.structure_family == "table":
                child.read()
else:
    from click.testing import CliRunner
    from daq.cli.main import main
    from daq.lab.reader import LabReader
    T0 = 1.7e9
    for _ in range(int(rounds)):
        for args in (("show", sid, "--json"), ("sessions", "--json")):
            res = CliRunner(env={"HIL_LAB_KEY": key}).invoke(main, ["--store", url, *args])
            assert res.exit_code == 0, res.output
        with LabReader(url, key) as rem:
            assert sum(1 for _ in rem.messages(sid)) == 200 + 67 * 2 + 2
            for stream in ("press.force", "press.sensors"):
                for a, b in ((T0 + 3.05, T0 + 7.5), (None, T0 + 0.3)):
                    rem.read_window(sid, stream, a, b)
print(json.dumps(asked))
"""


def run(tree: str, kind: str, url: str, key: str, sid: str, rounds: int, server: int) -> tuple[int, float]:
    """(requests sent, server CPU-s) for ``rounds`` rounds of ``kind`` with ``tree``'s client code."""
    c0 = cpu_of(server)
    out = subprocess.run([sys.executable, "-c", ROUND, str(Path(tree).resolve()), url, key, sid, str(rounds),
                          kind], capture_output=True, text=True, check=True, cwd=tree)
    return len(json.loads(out.stdout.strip().splitlines()[-1])), cpu_of(server) - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the read test's work per run")
    ap.add_argument("--repeats", type=int, default=2, help="runs per tree, alternating")
    ap.add_argument("--trees", nargs="+", default=["."], help="checkouts whose client code runs the rounds")
    args = ap.parse_args()
    from tests.test_lab import LabServer, hil, make_session  # the suite's own server and session

    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        lab = LabServer(Path(tmp) / "lab")
        try:
            store = Path(tmp) / "hil.sqlite"
            sid = make_session(store)
            res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
            assert res.exit_code == 0, res.output
            kinds = [(tree, "ours") for tree in args.trees] + [(".", "plain")]
            got: dict[tuple[str, str], list[tuple[int, float]]] = {k: [] for k in kinds}
            for _ in range(args.repeats):
                for tree, kind in kinds:
                    got[(tree, kind)].append(run(tree, kind, lab.url, lab.key, sid, args.rounds,
                                                 lab.proc.pid))
        finally:
            lab.stop()
    print(f"{'client':>24} {'requests/round':>15} {'server CPU ms/round':>20} {'per request ms':>15}")
    for (tree, kind), runs in got.items():
        requests = statistics.median(r for r, _ in runs) / args.rounds
        cpu = statistics.median(c for _, c in runs) / args.rounds * 1e3
        print(f"{kind + ' ' + tree:>24} {requests:>15.1f} {cpu:>20.0f} {cpu / requests:>15.1f}")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
