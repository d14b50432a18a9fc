"""Export to HDF5, MAT and CSV, re-read and compared with the stored arrays."""

from __future__ import annotations

import csv
import json

import h5py
import numpy as np
import pytest
import scipy.io

from daq.bus.frames import Event, Frame
from daq.export.session_export import ExportError, export, export_session
from daq.store.read_write import SessionStore


@pytest.fixture
def session(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {"rig": {"kind": "press", "name": "t"}}, devices={"lc": {"id": 7}})
    for i in range(4):
        store.append(
            sid,
            Frame(
                "press.force",
                i,
                1.0 + i * 0.05,
                1e-3,
                ["force_cmd", "force", "pressure"],
                ["N", "N", "Pa"],
                rng.standard_normal((50, 3)) * 100,
            ),
        )
        store.append(
            sid,
            Frame(
                "press.count",
                i,
                1.0 + i * 0.05,
                1e-2,
                ["n"],
                ["1"],
                rng.integers(-5, 5, (5, 1)).astype(np.int32),
            ),
        )
    store.append(sid, Event("press.plan", "step", 0, 1.1, {"series": 0, "index": 2, "q_desired": 300.0}))
    store.append(sid, Event("press.plan", "plan_end", 1, 1.2, {}))
    store.finish(sid, "complete")
    return store, sid


def test_hdf5(session, tmp_path):
    store, sid = session
    path = export_session(store, sid, "hdf5", tmp_path / "out.h5")
    sd = store.read_stream(sid, "press.force")
    with h5py.File(path) as f:
        assert f.attrs["id"] == sid and json.loads(f.attrs["config_json"])["rig"]["name"] == "t"
        g = f["streams/press.force"]
        np.testing.assert_array_equal(g["data"][()], sd.data)
        np.testing.assert_array_equal(g["t"][()], sd.t)
        assert list(g.attrs["units"]) == ["N", "N", "Pa"] and g["t"].attrs["units"] == "s"
        assert list(g.attrs["channels"]) == ["force_cmd", "force", "pressure"]
        assert f["streams/press.count/data"].dtype == np.int32
        ev = f["events/press.plan"]
        assert [k.decode() for k in ev["kind"][()]] == ["step", "plan_end"]
        assert json.loads(ev["body"][0])["q_desired"] == 300.0


def test_mat(session, tmp_path):
    store, sid = session
    path = export_session(store, sid, "mat", tmp_path / "out.mat")
    m = scipy.io.loadmat(path, simplify_cells=True)
    s = m["streams"]["press_force"]
    sd = store.read_stream(sid, "press.force")
    np.testing.assert_array_equal(s["data"], sd.data)
    np.testing.assert_array_equal(np.ravel(s["t"]), sd.t)
    assert list(s["units"]) == ["N", "N", "Pa"] and s["name"] == "press.force"
    assert list(m["events"]["press_plan"]["kind"]) == ["step", "plan_end"]
    assert m["session"]["id"] == sid


def test_csv(session, tmp_path):
    store, sid = session
    out = export_session(store, sid, "csv", tmp_path / "csv")
    sd = store.read_stream(sid, "press.force")
    with open(out / "press.force.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["t [s, relative]", "force_cmd [N]", "force [N]", "pressure [Pa]"]
    arr = np.array(rows[1:], dtype=float)
    np.testing.assert_array_equal(arr[:, 0], sd.t)
    np.testing.assert_array_equal(arr[:, 1:], sd.data)  # repr() round-trips floats exactly
    with open(out / "events.csv") as f:
        ev = list(csv.DictReader(f))
    assert [e["kind"] for e in ev] == ["step", "plan_end"] and json.loads(ev[0]["body"])["index"] == 2
    meta = json.loads((out / "session.json").read_text())
    assert meta["streams"]["press.force"]["units"] == ["N", "N", "Pa"]


def test_bad_format(session):
    store, sid = session
    with pytest.raises(ExportError, match="unknown export format"):
        export_session(store, sid, "xlsx")


@pytest.fixture
def odd_session(tmp_path, rng):
    """A stream with samples but no channels, a stream whose only frame is empty, and a normal one."""
    store = SessionStore(tmp_path / "odd.sqlite")
    sid = store.create_session("press", {})
    x = rng.standard_normal((3, 4, 1))
    for i in range(3):
        store.append(sid, Frame("a.full", i, 1.0 + i, 0.25, ["x"], ["m"], x[i]))
        store.append(sid, Frame("b.nochan", i, 1.0 + i, 0.25, [], [], np.zeros((4, 0))))
    store.append(sid, Frame("c.noframes", 0, 1.0, 0.25, ["y"], ["V"], np.zeros((0, 1))))
    store.append(sid, Event("ev", "k", 0, 1.5, {"a": 1}))
    store.finish(sid, "complete")
    return store, sid, x


@pytest.mark.parametrize("fmt, version", [("hdf5", None), ("mat", "5"), ("mat", "7.3"), ("csv", None)])
def test_streams_without_channels_or_frames(odd_session, tmp_path, fmt, version):
    """Every format exports a stream without channels (times only) and one without samples; MAT v7.3
    used to fail with KeyError '1/data' (its empty placeholder had no slot for the rows)."""
    store, sid, x = odd_session
    opts = {"mat_version": version} if version else {}
    res = export(store, sid, fmt, tmp_path / f"out-{fmt}-{version}", **opts)
    assert res.streams == {"a.full": 12, "b.nochan": 12, "c.noframes": 0}
    t = 1.0 + np.repeat(np.arange(3), 4) + np.tile(np.arange(4), 3) * 0.25
    if fmt == "hdf5":
        with h5py.File(res.path) as f:
            np.testing.assert_array_equal(f["streams/b.nochan/t"][()], t)
            assert f["streams/b.nochan/data"].shape == (12, 0)
            assert f["streams/c.noframes/data"].shape == (0, 1)
            np.testing.assert_array_equal(f["streams/a.full/data"][()], x.reshape(12, 1))
    elif version == "5":
        m = scipy.io.loadmat(res.path)["streams"][0, 0]
        np.testing.assert_array_equal(m["b_nochan"][0, 0]["t"], t.reshape(-1, 1))
        assert m["b_nochan"][0, 0]["data"].shape == (12, 0)
        assert m["c_noframes"][0, 0]["data"].shape == (0, 1)
        np.testing.assert_array_equal(m["a_full"][0, 0]["data"], x.reshape(12, 1))
    elif version == "7.3":
        with h5py.File(res.path) as f:  # MATLAB's layout: arrays transposed, empty ones hold their size
            np.testing.assert_array_equal(f["streams/b_nochan/t"][()], t.reshape(1, -1))
            empty = f["streams/b_nochan/data"]
            assert empty.attrs["MATLAB_empty"] == 1 and list(empty[()]) == [12, 0]
            assert list(f["streams/c_noframes/data"][()]) == [0, 1]
            np.testing.assert_array_equal(f["streams/a_full/data"][()], x.reshape(1, 12))
    else:
        rows = list(csv.reader((res.path / "b.nochan.csv").read_text().splitlines()))
        assert rows[0] == ["t [s, relative]"]
        assert np.array(rows[1:], dtype=float).ravel().tolist() == t.tolist()
        assert (res.path / "c.noframes.csv").read_text().splitlines() == ['"t [s, relative]",y [V]']
