"""Chunked exports: tiny chunks give the same files as one whole-array chunk, MAT v5/v7.3 rule and
round trips through independent readers (scipy, mat73), slices, labels, overwrite refusal, CLI JSON."""

from __future__ import annotations

import json
import math

import h5py
import mat73
import numpy as np
import pytest
import scipy.io
from click.testing import CliRunner

import daq.export.session_export as export_mod
from daq.bus.frames import Event, Frame
from daq.export.session_export import ExportError, export, mat_variable_sizes
from daq.store.read_write import SessionStore

BIG = 10**9  # one chunk: the whole-array path


@pytest.fixture
def session(tmp_path, rng):
    """Float64 frames with dt, int16 frames with explicit timestamps, bool frames whose times go back,
    and press sensor blocks with their measurement events (unix times, like a live session)."""
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {"rig": {"kind": "press"}}, session_id="feedc0ffee01")
    t0 = 1.7e9
    for i in range(6):
        n = [7, 0, 13, 4, 9, 1][i]
        store.append(
            sid,
            Frame(
                "press.force",
                i,
                t0 + 0.1 * i,
                1e-3,
                ["force", "pressure"],
                ["N", "Pa"],
                rng.normal(size=(n, 2)),
            ),
        )
        ts = t0 + 0.1 * i + np.cumsum(rng.uniform(1e-4, 1e-3, 5))
        store.append(
            sid,
            Frame(
                "press.counts",
                i,
                ts[0],
                None,
                ["k"],
                ["1"],
                rng.integers(-9, 9, (5, 1)).astype(np.int16),
                timestamps=ts,
            ),
        )
        ts = t0 + rng.uniform(0, 0.6, 3)
        store.append(
            sid,
            Frame(
                "press.valve",
                i,
                ts[0],
                None,
                ["open"],
                ["1"],
                rng.integers(0, 2, (3, 1)).astype(bool),
                timestamps=ts,
            ),
        )
    for k, (series, index) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        ts = t0 + 0.05 + 0.15 * k + np.arange(4) * 5e-4
        store.append(
            sid,
            Frame(
                "press.sensors",
                k,
                ts[0],
                None,
                ["D", "F"],
                ["m", "m"],
                rng.normal(size=(4, 2)) * 1e-5,
                timestamps=ts,
            ),
        )
        store.append(sid, Event("press.plan", "measurement", k, ts[-1], {"series": series, "index": index}))
    store.finish(sid, "complete")
    return store, sid


def h5_tree(path) -> dict:
    out = {}
    with h5py.File(path) as f:

        def visit(name, obj):
            attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()}
            out[name] = (obj[()] if isinstance(obj, h5py.Dataset) else None, attrs)

        f.visititems(visit)
        out["/"] = (None, {k: v for k, v in f.attrs.items()})
    return out


def assert_same_tree(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        (da, aa), (db, ab) = a[key], b[key]
        assert str(aa) == str(ab), key
        if da is not None:
            assert da.dtype == db.dtype and np.array_equal(da, db, equal_nan=da.dtype.kind == "f"), key


def test_hdf5_chunked_equals_whole_and_the_store(session, tmp_path):
    store, sid = session
    small = export(store, sid, "hdf5", tmp_path / "small.h5", chunk_samples=3)
    whole = export(store, sid, "hdf5", tmp_path / "whole.h5", chunk_samples=BIG)
    assert_same_tree(h5_tree(small.path), h5_tree(whole.path))
    with h5py.File(small.path) as f:
        assert f.attrs["time_base"] == "unix" and f["streams/press.force/t"].attrs["time_base"] == "unix"
        for name in ("press.force", "press.counts", "press.valve", "press.sensors"):
            sd = store.read_stream(sid, name)
            np.testing.assert_array_equal(f[f"streams/{name}/data"][()], sd.data)
            np.testing.assert_array_equal(f[f"streams/{name}/t"][()], sd.t)
            assert f[f"streams/{name}/data"].dtype == sd.data.dtype
        assert f["streams/press.sensors/series"][()].tolist() == [0] * 8 + [1] * 8
        assert f["streams/press.sensors/setpoint"][()].tolist() == ([0] * 4 + [1] * 4) * 2
    assert small.streams["press.force"] == 34 and small.events == 4


def test_csv_chunked_is_byte_identical_to_whole(session, tmp_path):
    store, sid = session
    a = export(store, sid, "csv", tmp_path / "a", chunk_samples=2).path
    b = export(store, sid, "csv", tmp_path / "b", chunk_samples=BIG).path
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    lines = (a / "press.sensors.csv").read_text().splitlines()
    assert lines[0] == '"t [s, unix]",D [m],F [m],series [1],setpoint [1]'  # quoted: the name has a comma
    rows = np.array([ln.split(",") for ln in lines[1:]], dtype=float)
    sd = store.read_stream(sid, "press.sensors")
    np.testing.assert_array_equal(rows[:, 0], sd.t)
    np.testing.assert_array_equal(rows[:, 1:3], sd.data)
    assert rows[:, 3].tolist() == [0] * 8 + [1] * 8
    valve = np.loadtxt(a / "press.valve.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(valve[:, 1], store.read_stream(sid, "press.valve").data[:, 0])
    assert json.loads((a / "session.json").read_text())["time_base"] == "unix"


def test_mat_v5_chunked_is_byte_identical_and_scipy_reads_it(session, tmp_path):
    store, sid = session
    a = export(store, sid, "mat", tmp_path / "a.mat", chunk_samples=3)
    b = export(store, sid, "mat", tmp_path / "b.mat", chunk_samples=BIG)
    assert a.mat_version == b.mat_version == "5"
    assert a.path.read_bytes() == b.path.read_bytes()
    m = scipy.io.loadmat(a.path, simplify_cells=True)
    for field, name in [
        ("press_force", "press.force"),
        ("press_counts", "press.counts"),
        ("press_valve", "press.valve"),
    ]:
        sd = store.read_stream(sid, name)
        s = m["streams"][field]
        np.testing.assert_array_equal(np.reshape(s["data"], sd.data.shape), sd.data)
        np.testing.assert_array_equal(np.ravel(s["t"]), sd.t)
        assert s["name"] == name and s["time_base"] == "unix"
    assert m["streams"]["press_counts"]["data"].dtype == np.int16
    assert np.ravel(m["streams"]["press_sensors"]["series"]).tolist() == [0] * 8 + [1] * 8
    assert list(m["events"]["press_plan"]["kind"]) == ["measurement"] * 4 and m["session"]["id"] == sid
    sizes = mat_variable_sizes(store.get_session(sid), [], [])  # no streams: only the struct overhead
    assert sizes["streams"] > 0 and a.path.stat().st_size > sum(sizes.values())


def test_mat_v73_round_trip_through_mat73(session, tmp_path):
    store, sid = session
    a = export(store, sid, "mat", tmp_path / "a.mat", mat_version="7.3", chunk_samples=3)
    b = export(store, sid, "mat", tmp_path / "b.mat", mat_version="7.3", chunk_samples=BIG)
    assert a.mat_version == "7.3"
    assert scipy.io.matlab.matfile_version(str(a.path)) == (2, 0)  # MATLAB's v7.3 header
    with open(a.path, "rb") as f:
        assert f.read(19) == b"MATLAB 7.3 MAT-file"
    ma, mb = mat73.loadmat(str(a.path)), mat73.loadmat(str(b.path))
    for field, name in [
        ("press_force", "press.force"),
        ("press_counts", "press.counts"),
        ("press_valve", "press.valve"),
        ("press_sensors", "press.sensors"),
    ]:
        sd = store.read_stream(sid, name)
        for m in (ma, mb):
            s = m["streams"][field]
            np.testing.assert_array_equal(np.reshape(s["data"], sd.data.shape), sd.data)
            np.testing.assert_array_equal(np.ravel(s["t"]), sd.t)
            assert s["name"] == name and [u for (u,) in s["units"]] == sd.units
    assert ma["streams"]["press_counts"]["data"].dtype == np.int16
    assert ma["streams"]["press_valve"]["data"].dtype == np.bool_
    assert np.ravel(ma["streams"]["press_sensors"]["setpoint"]).tolist() == ([0] * 4 + [1] * 4) * 2
    assert ma["session"]["id"] == sid and ma["session"]["time_base"] == "unix"
    assert [k for (k,) in ma["events"]["press_plan"]["kind"]] == ["measurement"] * 4
    assert json.loads(ma["events"]["press_plan"]["body"][3][0]) == {"series": 1, "index": 1}


def test_mat_version_follows_the_size_rule(session, tmp_path, monkeypatch):
    store, sid = session
    info = store.get_session(sid)
    plans = [
        export_mod._plan(store, info, n, None, None) for n, s in info.streams.items() if s.type == "frame"
    ]
    size = mat_variable_sizes(info, plans, store.events(sid))["streams"]
    assert size > 16 * 8 * 2  # holds the samples
    monkeypatch.setattr(export_mod, "MAT_V5_MAX_BYTES", size)
    assert export(store, sid, "mat", tmp_path / "fits.mat").mat_version == "5"
    assert (tmp_path / "fits.mat").stat().st_size == 128 + sum(
        mat_variable_sizes(info, plans, store.events(sid)).values()
    )
    monkeypatch.setattr(export_mod, "MAT_V5_MAX_BYTES", size - 1)
    assert export(store, sid, "mat", tmp_path / "big.mat").mat_version == "7.3"
    with pytest.raises(ExportError, match="MAT v5 cannot hold variable 'streams'"):
        export(store, sid, "mat", tmp_path / "v5.mat", mat_version="5")
    assert not (tmp_path / "v5.mat").exists() and not (tmp_path / "v5.mat.part").exists()
    # a slice is smaller: it fits v5 again
    assert export(store, sid, "mat", tmp_path / "slice.mat", streams=["press.force"]).mat_version == "5"


def test_slice_by_streams_and_time(session, tmp_path):
    store, sid = session
    t0, t1 = 1.7e9 + 0.2, 1.7e9 + 0.45
    r = export(
        store,
        sid,
        "hdf5",
        tmp_path / "s.h5",
        streams=["press.force", "press.sensors", "press.plan"],
        t_start=t0,
        t_stop=t1,
        chunk_samples=2,
    )
    with h5py.File(r.path) as f:
        assert sorted(f["streams"]) == ["press.force", "press.sensors"] and list(f["events"]) == [
            "press.plan"
        ]
        for name in ("press.force", "press.sensors"):
            w = store.read_window(sid, name, t0, t1)
            np.testing.assert_array_equal(f[f"streams/{name}/data"][()], w.data)
            assert len(w) > 0 and f.attrs["t_start"] == t0
        # the sensor blocks of the window keep their own labels (blocks 1 and 2: (0,1) and (1,0))
        assert f["streams/press.sensors/series"][()].tolist() == [0] * 4 + [1] * 4
        assert f["streams/press.sensors/setpoint"][()].tolist() == [1] * 4 + [0] * 4
        t_ev = f["events/press.plan/t"][()]
        assert ((t_ev >= t0) & (t_ev < t1)).all() and len(t_ev) == 2
    with pytest.raises(ExportError, match="no stream 'nope'"):
        export(store, sid, "csv", tmp_path / "x", streams=["nope"])


def test_existing_output_is_refused_without_force(session, tmp_path):
    store, sid = session
    out = tmp_path / "o.h5"
    out.write_bytes(b"keep me")
    with pytest.raises(ExportError, match="already exists.*--force"):
        export(store, sid, "hdf5", out)
    assert out.read_bytes() == b"keep me"
    export(store, sid, "hdf5", out, force=True)
    with h5py.File(out) as f:
        assert f.attrs["id"] == sid


def test_default_output_folder_is_git_ignored(session, tmp_path, monkeypatch):
    import subprocess
    from pathlib import Path

    store, sid = session
    monkeypatch.chdir(tmp_path)
    path = export(store, sid, "hdf5").path
    assert path == Path("exports") / f"session-{sid}.h5" and path.is_file()
    root = Path(export_mod.__file__).resolve().parents[2]
    r = subprocess.run(["git", "check-ignore", "-q", "exports/session-x.h5"], cwd=root, check=False)
    assert r.returncode == 0


def test_cli_export_json_and_overwrite(session, tmp_path):
    from daq.cli.main import main

    store, sid = session
    out = tmp_path / "c.mat"
    args = ["--store", str(store.path), "export", sid[:6], "--format", "mat", "-o", str(out)]
    r = CliRunner().invoke(main, [*args, "--json", "--streams", "press.force,press.plan", "--start", "0.1"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["mat_version"] == "5" and list(summary["streams"]) == ["press.force"]
    assert summary["streams"]["press.force"] == store.count_samples(sid, "press.force", 1.7e9 + 0.1, None)
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 1 and "already exists" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, [*args, "--json", "--force", "--mat-version", "7.3"])
    assert r.exit_code == 0 and json.loads(r.stdout)["mat_version"] == "7.3"
    r = CliRunner().invoke(main, [*args, "--force", "--start", "nan"])
    assert r.exit_code != 0 and "--start" in r.output


def test_cli_show_gives_burst_spacing(session):
    from daq.cli.main import main

    store, sid = session
    r = CliRunner().invoke(main, ["--store", str(store.path), "show", sid])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "press.sensors" in ln)
    assert "bursts of 4 at 2000 Hz every 0.15 s" in line
    r = CliRunner().invoke(main, ["--store", str(store.path), "show", sid, "--json"])
    s = json.loads(r.stdout)["streams"]["press.sensors"]
    assert math.isclose(s["spacing_s"], 5e-4, rel_tol=1e-3) and s["bursty"]


def test_mat_writers_keep_non_ascii_text(tmp_path):
    from daq.export.mat_files import MatV5Writer, MatV73Writer

    v = {"s": {"units": ["µm", "°C", ""], "name": "Ω-stream", "x": np.arange(3.0).reshape(-1, 1), "e": ""}}
    with MatV5Writer(tmp_path / "a.mat", v):
        pass
    s = scipy.io.loadmat(tmp_path / "a.mat", simplify_cells=True)["s"]
    assert list(s["units"][:2]) == ["µm", "°C"] and s["name"] == "Ω-stream" and s["x"].tolist() == [0, 1, 2]
    with MatV73Writer(tmp_path / "b.mat", v):
        pass
    s = mat73.loadmat(str(tmp_path / "b.mat"))["s"]
    assert s["units"] == [["µm"], ["°C"], [""]] and s["name"] == "Ω-stream" and s["e"] == ""
