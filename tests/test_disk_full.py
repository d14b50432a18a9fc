"""A full file system, for real: the session store on a small tmpfs. A run that fills it stops through the
safe state, its session says "disk full" (the store still takes those few bytes), and `hil sessions`,
`hil show` and `hil export` work on what was committed - also on a store left full to the last byte.
Needs root to mount; skipped with the reason otherwise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from click.testing import CliRunner

from daq import rigs
from daq.cli.main import main
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from tests.beacon_rig import BeaconRig, NoSimulator
from tests.polling import finished


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MiB tmpfs at ``tmp_path/mnt``, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(folder: Path) -> None:
    """Take every byte left on ``folder``'s file system."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def hil(store: Path, *args: str):
    res = CliRunner().invoke(main, ["--store", str(store), *args], env={"HIL_STORE": None})
    assert "Traceback" not in res.output
    return res


async def test_a_run_that_fills_the_disk_stops_safely_and_its_store_stays_usable(tmpfs, tmp_path):
    rig = rigs.register(BeaconRig(samples=250, channels=4, period=0.002))  # 8 kB frames, ~4 MB/s
    store_path = tmpfs / "s.sqlite"
    try:
        task = asyncio.ensure_future(
            run({"rig": {"kind": "beacon"}}, store_path, show_progress=False, handle_sigint=False,
                simulated_rig=NoSimulator()))
        result = await finished(task, 30.0)
    finally:
        rigs.unregister("beacon")
    assert result.status == "aborted" and result.reason.startswith("disk full:"), result.reason
    assert result.safe and rig.lamp.safe and not rig.lamp.on  # the safe action ran and was confirmed
    fill(tmpfs)  # and nothing left at all for what follows

    with SessionStore(store_path) as store:
        info = store.get_session(result.session_id)
        outcome = [e.body for e in store.events(result.session_id, kind="plan_outcome")]
        committed = store.read_stream(result.session_id, "beacon.x").data.shape[0]
    assert info.status == "aborted" and info.reason == result.reason
    assert len(outcome) == 1 and outcome[0]["safe"] is True and outcome[0]["reason"].startswith("disk full")
    assert committed > 0

    res = hil(store_path, "sessions")
    assert res.exit_code == 0 and result.session_id in res.output and "aborted" in res.output, res.output
    res = hil(store_path, "show", result.session_id)
    assert res.exit_code == 0 and "disk full" in res.output and "beacon.x" in res.output, res.output
    out = tmp_path / "out.h5"  # on a disk with room
    res = hil(store_path, "export", result.session_id, "--format", "hdf5", "-o", str(out))
    assert res.exit_code == 0, res.output
    with h5py.File(out) as f:
        assert f["streams/beacon.x/data"].shape == (committed, 4)


def test_sessions_and_show_work_on_a_full_store_with_an_abandoned_session(tmpfs):
    """Opening a store marks sessions of dead writers incomplete; on a full disk that UPDATE fails - the
    sessions are shown incomplete all the same (and the store is left as it is)."""
    store_path = tmpfs / "s.sqlite"
    subprocess.run([sys.executable, "-c", "import os, sys; from daq.store.read_write import SessionStore; "
                    "s = SessionStore(sys.argv[1]); s.create_session('x', {}); s.flush(); os._exit(0)",
                    str(store_path)], check=True, cwd=Path(__file__).parent.parent)
    fill(tmpfs)
    res = hil(store_path, "sessions")
    assert res.exit_code == 0 and "incomplete" in res.output, res.output
    res = hil(store_path, "show", "latest")
    assert res.exit_code == 0 and "is gone" in res.output and "not recorded in the store" in res.output, (
        res.output)
