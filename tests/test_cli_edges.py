"""Bad input at the edges of the `hil` CLI (issue 19): non-finite event bodies in exported JSON, slices
outside the session, output names of another format, options that would be ignored or hang, long
session ids and a reader of stdout that goes away."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from daq.bus.frames import Event, Frame
from daq.cli.main import main
from daq.store.read_write import SessionStore

SID = "a1b2c3d4e5f6"
LONG_SID = "run-2026-11-25-press-calibration-long-identifier-0001"


def _strict_loads(text: str):
    """json.loads refusing NaN/Infinity (what strict parsers in other languages do)."""

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def store_path(tmp_path, rng):
    path = tmp_path / "hil.sqlite"
    store = SessionStore(path)
    sid = store.create_session("press", {"rig": {"kind": "press"}}, session_id=SID)
    store.append(sid, Frame("press.force", 0, 1.0, 1e-3, ["force"], ["N"], rng.standard_normal((10, 1))))
    body = {"a": float("nan"), "b": float("inf"), "c": [1.5, float("-inf")], "d": {"e": float("nan")}}
    store.append(sid, Event("press.plan", "step", 0, 1.005, body))
    store.finish(sid, "complete")
    store.close()
    return path


def run(*args):
    return CliRunner().invoke(main, list(args), env={"HIL_STORE": ""})


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for frag in fragments:
        assert frag in lines[0], lines[0]


EXPECTED_BODY = {"a": None, "b": None, "c": [1.5, None], "d": {"e": None}}


# ----------------------------------------------------------------------------- 1: NaN in exported JSON


def test_csv_export_of_non_finite_event_body_is_strict_json(store_path, tmp_path):
    out = tmp_path / "out"
    r = run("--store", str(store_path), "export", SID, "--format", "csv", "-o", str(out))
    assert r.exit_code == 0, r.output
    with open(out / "events.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [_strict_loads(row["body"]) for row in rows] == [EXPECTED_BODY]
    meta = _strict_loads((out / "session.json").read_text())
    assert meta["id"] == SID


def test_hdf5_export_of_non_finite_event_body_is_strict_json(store_path, tmp_path):
    import h5py

    out = tmp_path / "out.h5"
    r = run("--store", str(store_path), "export", SID, "--format", "hdf5", "-o", str(out))
    assert r.exit_code == 0, r.output
    texts = []

    def collect(name, obj):
        if isinstance(obj, h5py.Dataset) and name.endswith("body"):
            texts.extend(v.decode() if isinstance(v, bytes) else v for v in obj[()])

    with h5py.File(out, "r") as f:
        f.visititems(collect)
        for key in ("config_json", "devices_json", "metadata_json"):
            _strict_loads(f.attrs[key])
    assert [_strict_loads(t) for t in texts] == [EXPECTED_BODY]


def test_mat_export_of_non_finite_event_body_is_strict_json(store_path, tmp_path):
    out = tmp_path / "out.mat"
    r = run(
        "--store", str(store_path), "export", SID, "--format", "mat", "--mat-version", "5", "-o", str(out)
    )
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    assert b"NaN" not in raw and b"Infinity" not in raw


# ----------------------------------------------------------------------------- 2: slices outside the session


def test_export_start_after_the_end_is_refused(store_path, tmp_path):
    out = tmp_path / "out"
    r = run("--store", str(store_path), "export", SID, "--format", "csv", "-o", str(out), "--start", "100")
    assert_one_line_error(r, "--start", "after the session's end", "0.009 s")
    assert not out.exists()
    r = run("--store", str(store_path), "export", SID, "--format", "csv", "-o", str(out), "--stop", "-1")
    assert_one_line_error(r, "--stop", "0.009 s")
    assert not out.exists()


def test_export_start_inside_the_session_still_works(store_path, tmp_path):
    out = tmp_path / "out"
    r = run("--store", str(store_path), "export", SID, "--format", "csv", "-o", str(out), "--start", "0.009")
    assert r.exit_code == 0, r.output
    lines = (out / "press.force.csv").read_text().splitlines()
    assert len(lines) == 2  # header and the last sample


# ------------------------------------------------------------------------ 3: output name of another format


@pytest.mark.parametrize(
    ("fmt", "name", "fragment"),
    [
        ("mat", "x.h5", ".mat"),
        ("hdf5", "x.mat", ".h5 or .hdf5"),
        ("csv", "x.h5", "folder"),
        ("csv", "x.mat", "folder"),
    ],
)
def test_export_refuses_a_suffix_of_another_format(store_path, tmp_path, fmt, name, fragment):
    out = tmp_path / name
    r = run("--store", str(store_path), "export", SID, "--format", fmt, "-o", str(out))
    assert_one_line_error(r, name, fragment)
    assert not out.exists()


@pytest.mark.parametrize(
    ("fmt", "name"), [("hdf5", "x.hdf5"), ("hdf5", "x.H5"), ("mat", "x.mat"), ("csv", "x")]
)
def test_export_takes_a_matching_suffix(store_path, tmp_path, fmt, name):
    out = tmp_path / name
    r = run("--store", str(store_path), "export", SID, "--format", fmt, "-o", str(out))
    assert r.exit_code == 0, r.output
    assert out.exists()


# ------------------------------------------------------------------------ 4: run --plots without --analyze


def test_run_plots_without_analyze_is_refused(tmp_path):
    r = run("run", str(tmp_path / "rig.toml"), "--plots", str(tmp_path / "plots"))
    assert_one_line_error(r, "--plots needs --analyze")


# ----------------------------------------------------------------------------- 6: stdout closed early


def test_broken_pipe_ends_quietly(tmp_path):
    path = tmp_path / "hil.sqlite"
    store = SessionStore(path)
    sid = store.create_session("press", {"rig": {"kind": "press"}}, session_id=SID)
    for i in range(20_000):  # `hil show` prints a line per event kind: far more than a pipe holds
        store.append(sid, Event("press.plan", f"kind{i}", i, 1.0 + i * 1e-3, {}))
    store.finish(sid, "complete")
    store.close()
    env = {**os.environ, "HIL_STORE": ""}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from daq.cli.main import main; main()", "--store", str(path), "show", SID],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout.readline().startswith(b"session")
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=60)
    assert err.decode() == "", err.decode()
    assert proc.returncode == 1  # Python's exit code on EPIPE, without a word


# ----------------------------------------------------------------------------- 7: long session ids


def test_sessions_columns_fit_long_ids(tmp_path):
    path = tmp_path / "hil.sqlite"
    store = SessionStore(path)
    for sid in (SID, LONG_SID):
        store.create_session("press", {"rig": {"kind": "press"}}, session_id=sid)
        store.finish(sid, "complete")
    store.close()
    r = run("--store", str(path), "sessions")
    assert r.exit_code == 0, r.output
    header, *rows = r.output.splitlines()
    kind_col = header.index("KIND")
    assert kind_col >= len(LONG_SID) + 2
    for row in rows:
        sid, kind = row.split()[:2]
        assert row.index(kind, len(sid)) == kind_col, r.output
        assert row[kind_col - 2 : kind_col] == "  "


# ----------------------------------------------------------------------------- 8: ctl --timeout


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_ctl_refuses_a_timeout_that_is_not_a_positive_finite_number(tmp_path, value):
    r = run("ctl", "status", "--endpoint", "tcp://127.0.0.1:9", "--timeout", value)
    assert_one_line_error(r, "--timeout", "finite number of seconds above 0")


def test_ctl_refuses_an_infinite_timeout_without_waiting():
    # a subprocess with a deadline: without the check this waits forever for a reply
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from daq.cli.main import main; main()",
            "ctl",
            "status",
            "--endpoint",
            "tcp://127.0.0.1:9",
            "--timeout",
            "inf",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HIL_STORE": ""},
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == "Error: --timeout must be a finite number of seconds above 0, got inf"


def test_strict_json_helper():
    from daq.export.layout import strict_json

    text = strict_json({"x": np.float32("nan"), "y": np.array([1.0, np.inf]), "z": (np.int64(3), "s")})
    assert _strict_loads(text) == {"x": None, "y": [1.0, None], "z": [3, "s"]}
