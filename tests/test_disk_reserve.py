"""The room a run holds back on the store's disk for its outcome and the session's end (daq.store.reserve)."""

from __future__ import annotations

import os
import subprocess
import sys

from daq.store.reserve import DiskReserve


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_reserve_takes_real_blocks_and_gives_them_back(tmp_path):
    store = tmp_path / "s.sqlite"
    reserve = DiskReserve(store, size=256 * 1024)
    assert reserve.hold()
    st = reserve.path.stat()
    assert st.st_size == 256 * 1024 and st.st_blocks * 512 >= 256 * 1024  # allocated, not a sparse file
    reserve.release()
    assert not reserve.path.exists()
    reserve.release()  # twice is harmless


def test_the_ballast_of_a_killed_run_is_removed_by_the_next_one(tmp_path):
    store = tmp_path / "s.sqlite"
    stale = tmp_path / f"s.sqlite.reserve-{_dead_pid()}"
    stale.write_bytes(b"\0" * 1024)
    living = tmp_path / f"s.sqlite.reserve-{os.getppid()}"  # a process that exists
    living.write_bytes(b"\0" * 1024)
    other_store = tmp_path / f"t.sqlite.reserve-{_dead_pid()}"
    other_store.write_bytes(b"\0")
    reserve = DiskReserve(store, size=4096)
    assert reserve.hold()
    assert not stale.exists() and living.exists() and other_store.exists() and reserve.path.exists()
    reserve.release()
