"""Export to HDF5, MAT and CSV, re-read and compared with the stored arrays."""

from __future__ import annotations

import csv
import json

import h5py
import numpy as np
import pytest
import scipy.io

from daq.bus.frames import Event, Frame
from daq.export.session_export import ExportError, export_session
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
