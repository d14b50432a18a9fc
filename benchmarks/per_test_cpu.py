"""Each test's CPU (issue 43): a pytest plugin that ``benchmarks/suite_cpu.py --per-test`` loads into the
suite's run, and the table it prints after.

For each test the worker notes its own CPU (``time.process_time``) and that of the child processes it reaped
while the test ran (``RUSAGE_CHILDREN``: the `hil` and other processes a test starts and waits for), as JSON
lines in ``$HIL_PER_TEST_CPU/<pid>.jsonl``. The suite's lab servers are not the worker's children: the
worker's zygote forks them (tests/zygote.py), and each writes its own CPU when it exits, with the test that
started it (``PYTEST_CURRENT_TEST`` of the worker's environment), into ``servers.jsonl``. A process killed
with SIGKILL writes nothing; the kinds' table of suite_cpu.py still counts it."""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter
from pathlib import Path

import pytest

ENV = "HIL_PER_TEST_CPU"  #: the folder the records go to; unset: the plugin records nothing


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    cpu0, children0, wall0 = time.process_time(), _children_cpu(), time.monotonic()
    yield
    record = {"test": item.nodeid, "cpu": time.process_time() - cpu0, "children": _children_cpu() - children0,
              "wall": time.monotonic() - wall0}
    with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


def read_records(folder: Path) -> dict[str, list[dict]]:
    """Every test's record (``tests``) and every lab server's (``servers``) the run left in ``folder``."""
    tests: list[dict] = []
    for path in folder.glob("*.jsonl"):
        if path.name != "servers.jsonl":
            tests += [json.loads(line) for line in path.read_text().splitlines() if line]
    servers = []
    if (folder / "servers.jsonl").exists():
        servers = [json.loads(line) for line in (folder / "servers.jsonl").read_text().splitlines() if line]
    return {"tests": tests, "servers": servers}


def report(records: dict[str, list[dict]], top: int = 25) -> str:
    """The tests and test modules that cost the most CPU (lab servers with the test that started them), from
    what :func:`read_records` read."""
    tests, servers = records["tests"], records["servers"]
    modules: Counter[str] = Counter()
    for t in tests:
        modules[t["test"].split("::")[0]] += t["cpu"] + t["children"]
    for s in servers:
        modules[(s["test"] or "?").split("::")[0] + " (its lab servers)"] += s["cpu"]
    workers, children = sum(t["cpu"] for t in tests), sum(t["children"] for t in tests)
    lines = [f"{len(tests)} tests: workers {workers:.1f} CPU-s, their children {children:.1f}; "
             f"{len(servers)} lab servers {sum(s['cpu'] for s in servers):.1f}",
             f"\n{'CPU s':>8}  test module (worker + children; its lab servers apart)"]
    lines += [f"{cpu:8.1f}  {name}" for name, cpu in modules.most_common(top)]
    lines.append(f"\n{'worker':>8} {'children':>8} {'wall':>7}  test")
    for t in sorted(tests, key=lambda t: -(t["cpu"] + t["children"]))[:top]:
        lines.append(f"{t['cpu']:8.1f} {t['children']:8.1f} {t['wall']:7.1f}  {t['test']}")
    return "\n".join(lines)
