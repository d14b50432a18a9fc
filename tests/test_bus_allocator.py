"""Large bus messages reuse freed buffers (daq/bus/allocator.py): after ``keep_freed_heap`` a thread that
mallocs bursts of 80 kB buffers and frees them, as ZeroMQ's I/O thread does, faults no pages in again (with
glibc's defaults about 20 per buffer here). Counted in a child process: the thresholds are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.test_lab import ROOT

SCRIPT = """
import ctypes, json, os, resource, sys, threading
from daq.bus.allocator import keep_freed_heap
applied = keep_freed_heap() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def bursts(out):
    for _ in range(20):  # warm up: the heap reaches its working size
        for p in [libc.malloc(81920) for _ in range(10)]: libc.free(p)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        buffers = [libc.malloc(81920) for _ in range(10)]
        for p in buffers: ctypes.memset(p, 1, 81920)
        for p in buffers: libc.free(p)
    out.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 2000)
out = []
t = threading.Thread(target=bursts, args=(out,)); t.start(); t.join()
print(json.dumps({"applied": applied, "faults_per_buffer": out[0]}))
"""


def _faults(mode: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_bursts_of_large_buffers_fault_no_pages_in_once_freed_heap_is_kept():
    kept = _faults("keep")
    assert kept["applied"] is True and kept["faults_per_buffer"] < 1.0  # each 80 kB buffer is 20 pages


def test_allocator_settings_given_in_the_environment_are_left_alone():
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}
    assert _faults("keep", tunables)["applied"] is False
