"""Nothing in the lab changes unseen (issue 41), against a real `hil lab serve` on 127.0.0.1: a block
changed or lost on the lab's disk is refused by every read through `hil --store URL` with one line naming
session, stream and block; a push never calls such a copy verified (it repairs it); `hil lab verify` says
which copies changed; a session deleted in the lab goes again with `--pending`; the lab's files are its
user's only; clients refuse a key file open to others."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest

from daq.lab.marks import replicas
from daq.lab.reader import LabReader
from daq.store.reader import SessionReader
from tests.test_lab import ROOT, T0, LabServer, hil, make_session
from tests.test_lab_door import retries_without_backoff
from tests.zygote import hil_child


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A lab server of this module's own: its tests change the lab's files behind the server's back and
    push sessions that test_lab's listings of the shared lab do not expect."""
    server = LabServer(tmp_path_factory.mktemp("lab-integrity") / "lab")
    yield server
    assert server.stop() == 0


def pushed_session(lab, tmp_path: Path, seed: int) -> tuple[Path, str]:
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 2.0, seed=seed)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and "pushed and verified" in res.output, res.output
    return store, sid


def scale_on_disk(lab, sid: str, stream: str, part: str, factor: float) -> None:
    """Change an array in the lab's folder behind the server's back (Zarr, as Tiled stores it)."""
    import zarr

    arr = zarr.open_array(str(lab.data / "data" / sid / stream / part), mode="r+")
    arr[:] = arr[:] * factor


def export(lab, sid: str, out: Path):
    return hil("--store", lab.url, "export", sid, "--format", "hdf5", "-o", str(out), key=lab.key)


def one_line_error(res, *names: str) -> str:
    assert res.exit_code == 1, res.output[-400:]
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def test_a_data_block_changed_on_the_labs_disk_is_refused_by_every_read_and_named(lab, tmp_path):
    store, sid = pushed_session(lab, tmp_path, seed=21)
    good = tmp_path / "good.h5"
    assert export(lab, sid, good).exit_code == 0
    scale_on_disk(lab, sid, "press.force", "data", 1.5)
    named = (f"session {sid}", "stream press.force", "data block 0", "not what was pushed")
    for args in (("export", sid, "--format", "hdf5", "-o", str(tmp_path / "bad.h5")),
                 ("export", sid, "--format", "mat", "--start", "0.5", "--stop", "1", "-o",
                  str(tmp_path / "bad.mat")),  # a window: only the blocks it touches are checked
                 ("show", sid), ("show", sid, "--json")):
        one_line_error(hil("--store", lab.url, *args, key=lab.key), *named)
    assert not (tmp_path / "bad.h5").exists() and not (tmp_path / "bad.mat").exists()
    with LabReader(lab.url, lab.key) as rem:  # the stream that was not touched still reads
        sensors = rem.read_stream(sid, "press.sensors")
        assert np.array_equal(sensors.data, SessionReader(store).read_stream(sid, "press.sensors").data)
    res = hil("lab", "verify", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 1
    assert res.output.strip() == f"{sid}: changed or lost in the lab: press.force/data block 0"


def test_a_push_repairs_a_changed_copy_instead_of_calling_it_verified(lab, tmp_path):
    store, sid = pushed_session(lab, tmp_path, seed=22)
    scale_on_disk(lab, sid, "press.force", "data", 1.5)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0, res.output
    assert "already in the lab, verified" not in res.output
    assert res.output.strip().endswith("(the lab's copy differed: press.force/data block 0; repaired)")
    res = hil("lab", "verify", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.strip() == f"{sid}: as pushed"
    local, remote = tmp_path / "local.h5", tmp_path / "lab.h5"
    assert hil("--store", str(store), "export", sid, "--format", "hdf5", "-o", str(local)).exit_code == 0
    assert export(lab, sid, remote).exit_code == 0
    assert local.read_bytes() == remote.read_bytes()
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.output.strip() == f"{sid}: already in the lab, verified"


def test_a_lost_chunk_of_the_time_axis_is_refused_and_verify_names_it(lab, tmp_path):
    store, sid = pushed_session(lab, tmp_path, seed=23)
    (lab.data / "data" / sid / "press.sensors" / "t" / "c" / "0").unlink()  # Zarr now serves zeros
    out = tmp_path / "lost.h5"
    one_line_error(export(lab, sid, out),
                   f"session {sid}", "stream press.sensors", "t block 0")
    assert not out.exists()
    with LabReader(lab.url, lab.key) as rem:  # an edge search reads part of t: its block is asked about
        with pytest.raises(Exception, match="stream press.sensors, t block 0"):
            rem.read_window(sid, "press.sensors", T0 + 0.5, T0 + 1.0)
    res = hil("lab", "verify", "--all", "--to", lab.url, key=lab.key)
    assert res.exit_code == 1 and f"{sid}: changed or lost in the lab: press.sensors/t block 0" in res.output
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and "press.sensors/t block 0; repaired" in res.output
    assert export(lab, sid, out).exit_code == 0


def hil_retrying_twice(lab, *args: str):
    """`hil` whose tiled client tries a request twice, without waits between (the second try is for the
    connection the server drops after one), not 10 times with backoff (~30 s for a server error)."""
    with retries_without_backoff():
        return hil(*args, key=lab.key)


def test_a_lost_table_file_is_refused_named_and_repaired(lab, tmp_path):
    store, sid = pushed_session(lab, tmp_path, seed=27)
    (lab.data / "data" / sid / "press.force" / "frames" / "partition-0.parquet").unlink()
    res = hil_retrying_twice(lab, "--store", lab.url, "show", sid)
    assert res.exit_code == 1 and res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"Error: session {sid}, stream press.force, frames table: the lab's copy is not what was pushed "
        "(changed or lost on the lab's disk); not read - hil lab push it again")
    res = hil_retrying_twice(lab, "lab", "verify", sid, "--to", lab.url)
    assert res.exit_code == 1, res.stderr
    assert res.stdout.strip() == f"{sid}: changed or lost in the lab: press.force/frames"
    res = hil_retrying_twice(lab, "--store", str(store), "lab", "push", sid, "--to", lab.url)
    assert res.exit_code == 0 and res.stdout.strip().endswith("differed: press.force/frames; repaired)")
    res = hil_retrying_twice(lab, "lab", "verify", sid, "--to", lab.url)
    assert res.exit_code == 0 and res.stdout.strip() == f"{sid}: as pushed"
    with SessionReader(store) as loc, LabReader(lab.url, lab.key) as rem:
        assert [m.seq for m in rem.messages(sid)] == [m.seq for m in loc.messages(sid)]


def test_a_session_deleted_in_the_lab_is_pushed_again_by_pending(lab, tmp_path):
    from tiled.client import from_uri

    store, sid = pushed_session(lab, tmp_path, seed=24)
    assert hil("--store", str(store), "lab", "push", "--pending", "--to", lab.url,
               key=lab.key).output.strip() == "nothing to push"
    from_uri(lab.url, api_key=lab.key)[sid].delete(recursive=True, external_only=False)
    res = hil("--store", str(store), "lab", "push", "--pending", "--to", lab.url, key=lab.key)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [
        f"{sid}: marked as in the lab, but the lab no longer holds it; pushing it again",
        res.output.splitlines()[1]] and res.output.splitlines()[1].startswith(f"{sid}: pushed and verified (")
    assert replicas(store) == {sid: [lab.url]}
    res = hil("lab", "verify", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.strip() == f"{sid}: as pushed"


def open_modes(folder: Path) -> list[str]:
    """Files and folders under ``folder`` (itself included) that group or others may use."""
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (folder, *folder.rglob("*"))}
    return [f"{p} {mode:o}" for p, mode in modes.items() if mode & 0o077]


def test_a_fresh_lab_and_what_it_stores_are_private_to_its_user(lab, tmp_path):
    _, sid = pushed_session(lab, tmp_path, seed=25)
    assert stat.S_IMODE(lab.data.stat().st_mode) == 0o700
    assert stat.S_IMODE((lab.data / "catalog.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((lab.data / "data").stat().st_mode) == 0o700
    session_files = lab.data / "data" / sid  # (other tests change files in the folder from outside)
    assert len(list(session_files.rglob("*"))) > 10 and open_modes(session_files) == []
    assert [p for p in open_modes(lab.data) if Path(p.split()[0]).parent == lab.data] == []


@pytest.mark.slow(reason="a second Tiled server (about 1 CPU-s forked from the zygote, 7 CPU-s alone)")
def test_serve_tightens_an_existing_lab_folder_open_to_others(tmp_path):
    data = tmp_path / "lab"
    (data / "data" / "old").mkdir(parents=True)
    os.chmod(data, 0o755)
    os.chmod(data / "data", 0o755)
    (data / "catalog.db").touch()
    os.chmod(data / "catalog.db", 0o644)
    proc = hil_child(["lab", "serve", "--data", str(data), "--port", "0"], cwd=ROOT, stderr=tmp_path / "log",
                     env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        lines = []
        while not (lines and lines[-1].startswith("http")):
            line = proc.stdout.readline().decode()
            assert line, f"lab serve ended: {lines}"
            lines.append(line.strip())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert lines[:3] == [f"made {data} private (mode 755 -> 700)",
                         f"made {data / 'data'} private (mode 755 -> 700)",
                         f"made {data / 'catalog.db'} private (mode 644 -> 600)"]
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "catalog.db").stat().st_mode) == 0o600


def test_a_client_refuses_a_key_file_open_to_others(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 1.0, seed=26)
    key_file = tmp_path / "lab.key"
    key_file.write_text(lab.key + "\n")
    os.chmod(key_file, 0o644)
    for args in (("--store", str(store), "lab", "push", sid, "--to", lab.url, "--key-file", str(key_file)),
                 ("--store", lab.url, "--key-file", str(key_file), "sessions"),
                 ("lab", "verify", "--all", "--to", lab.url, "--key-file", str(key_file))):
        res = hil(*args)
        assert one_line_error(res, str(key_file)) == \
            f"Error: {key_file} is readable by others (mode 644): chmod 600 {key_file}"
    assert replicas(store) == {}
    os.chmod(key_file, 0o600)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, "--key-file", str(key_file))
    assert res.exit_code == 0 and "pushed and verified" in res.output


@pytest.mark.slow(reason="a simulated oscillator run (about 12 s) and three analyses")
@pytest.mark.timeout(900)
def test_analyze_refuses_a_run_whose_data_changed_in_the_lab(lab, tmp_path):
    """The case of the issue: `hil --store URL analyze` of an oscillator run whose trace data were scaled by
    1.5 on the lab's disk gave another c2 with exit 0; now one line naming the block, exit 1."""
    store = tmp_path / "hil.sqlite"
    # `hil run` in this process (what is tested is the lab's reads, not the run's own process)
    run = hil("--store", str(store), "run", str(ROOT / "configs" / "oscillator-sim.toml"), "--no-progress")
    assert run.exit_code == 0, run.output
    sid = run.stdout.split()[1]
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    local = hil("--store", str(store), "analyze", sid, "--json")
    remote = hil("--store", lab.url, "analyze", sid, "--json", key=lab.key)
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output[-400:]
    here, there = (json.loads(r.output[r.output.index("{"):]) for r in (local, remote))
    assert there["estimate"] == here["estimate"] and set(here["estimate"]) == {"c2"}  # to the last bit
    scale_on_disk(lab, sid, "oscillator.trace", "data", 1.5)
    one_line_error(hil("--store", lab.url, "analyze", sid, "--json", key=lab.key),
                   f"session {sid}", "stream oscillator.trace", "data block 0")
