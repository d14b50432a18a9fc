"""`export --force` replaces an existing output only when the new one is complete: an export that fails
midway (here: after its first chunk) leaves the previous export byte for byte and no temporary file."""

from __future__ import annotations

import os

import pytest

from daq.bus.frames import Event, Frame
from daq.export.session_export import export_session
from daq.store.read_write import SessionStore


@pytest.fixture
def store(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {"rig": {"kind": "press", "name": "t"}})
    for i in range(8):
        for stream in ("a.x", "b.y"):
            data = rng.standard_normal((100, 1))
            store.append(sid, Frame(stream, i, 1.0 + i * 0.1, 1e-3, ["x"], ["m"], data))
    store.append(sid, Event("a.plan", "plan_end", 0, 2.0, {}))
    store.finish(sid, "complete")
    yield store, sid
    store.close()


def snapshot(path):
    """Every file under ``path`` (or ``path`` itself) -> its bytes."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return {p.relative_to(path).as_posix(): p.read_bytes() for p in files}
    return {path.name: path.read_bytes()}


class Interrupted(Exception):
    pass


def fail_after_first_chunk(done: int, total: int) -> None:
    if 0 < done < total:
        raise Interrupted(f"failed after {done} of {total} samples")


@pytest.mark.parametrize("fmt,name", [("hdf5", "out.h5"), ("mat", "out.mat"), ("csv", "out_csv")])
def test_a_failing_forced_export_leaves_the_previous_one_and_no_temporary_file(store, tmp_path, fmt, name):
    store, sid = store
    folder = tmp_path / "exports"
    out = export_session(store, sid, fmt, folder / name)
    before = snapshot(out)
    assert before
    with pytest.raises(Interrupted):
        export_session(store, sid, fmt, out, force=True, streams=["b.y"], chunk_samples=100,
                       progress=fail_after_first_chunk)
    assert snapshot(out) == before
    assert [p.name for p in folder.iterdir()] == [name]  # no .part file or folder left behind
    # and a forced export that completes does replace it (here with one stream only)
    export_session(store, sid, fmt, out, force=True, streams=["b.y"])
    assert snapshot(out) != before and [p.name for p in folder.iterdir()] == [name]
    if fmt == "csv":
        assert sorted(snapshot(out)) == ["b.y.csv", "events.csv", "session.json"]  # no stale a.x.csv


def test_the_written_export_has_the_permissions_of_a_new_file(store, tmp_path):
    store, sid = store
    out = export_session(store, sid, "hdf5", tmp_path / "x.h5")
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not a private temporary file's 0600
