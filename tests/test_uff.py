"""UFF 58: a simulated machine-tool session exported and imported again gives the same FRFs and the same
identification; unit conversion; bad files give one error line and no session."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest
import pyuff
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs.analysis import analyze_session
from daq.rigs.machine_tool.rig import mt_arrays
from daq.rigs.machine_tool.uff import Mapping, UffError, load_mapping, model_labels, read_file
from daq.store.read_write import SessionStore
from tests.in_process_runs import run_in_process
from tests.test_machine_tool_rig import small_config
from tests.test_rig_kit import _to_toml


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small simulated modal test (2 positions x 2 inputs; the front end reached in-process: the SCPI
    end-to-end run is tests/test_machine_tool_rig.py's) and its config file."""
    folder = tmp_path_factory.mktemp("uff")
    store = folder / "s.sqlite"
    result = asyncio.run(run_in_process(small_config(), store, show_progress=False, handle_sigint=False,
                                        sim_speed=10.0))  # a tenth of the waiting, the same samples
    assert result.status == "complete", result.reason
    cfg = folder / "mt.toml"
    cfg.write_text(_to_toml(small_config()))
    return folder, store, result.session_id, cfg


def _hil(*args: str):
    return CliRunner().invoke(main, list(args))


def _sessions(store) -> list[str]:
    if not store.exists():
        return []
    with SessionStore(store) as s:
        return [i.id for i in s.list_sessions()]


def _export_import(store, sid, cfg, out, *extra) -> str:
    res = _hil("--store", str(store), "export", sid, "--format", "uff", "-o", str(out), "--json", *extra)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["frfs"] == 2 * 2 * 26 and summary["coherence"] and summary["datasets"] == 2 * 104
    res = _hil("--store", str(store), "import", "uff", str(out), "--config", str(cfg), "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["session"]


@pytest.mark.slow(reason="identifies the machine tool from ASCII and from binary UFF")
def test_binary_round_trip_gives_the_same_frfs_and_identification(recorded, tmp_path):
    """Dataset 58b carries IEEE doubles: the FRFs come back bit for bit, so does the identification."""
    folder, store, sid, cfg = recorded
    imported = _export_import(store, sid, cfg, tmp_path / "frfs.uff", "--binary")
    with SessionStore(store) as s:
        a, b = mt_arrays(s, sid), mt_arrays(s, imported)
        assert (b.positions, b.roles, b.inputs, b.labels) == (a.positions, a.roles, a.inputs, a.labels)
        np.testing.assert_array_equal(b.freq, a.freq)
        for ha, hb, ca, cb in zip(a.H, b.H, a.coherence, b.coherence, strict=True):
            np.testing.assert_array_equal(hb, ha)
            np.testing.assert_array_equal(cb, ca)
        info = s.get_session(imported)
        assert info.config["rig"]["simulated"] is False and "simulator" not in info.config
        assert info.config["analysis"] == small_config()["analysis"]
        _, ra, _, _ = analyze_session(s, sid)
        _, rb, _, _ = analyze_session(s, imported)
    for fa, fb in zip(ra.fits, rb.fits, strict=True):
        np.testing.assert_allclose(fb.freq, fa.freq, rtol=1e-12)
        np.testing.assert_allclose(fb.xi, fa.xi, rtol=1e-12)
    np.testing.assert_allclose(rb.gsa.estimate, ra.gsa.estimate, rtol=1e-12)
    assert rb.gsa.names == ra.gsa.names and len(ra.gsa.names) == 27


def test_ascii_round_trip_keeps_twelve_digits(recorded, tmp_path):
    folder, store, sid, cfg = recorded
    out = tmp_path / "frfs.unv"
    imported = _export_import(store, sid, cfg, out)
    assert "position=0.05 m role=identification" in out.read_text()
    with SessionStore(store) as s:
        a, b = mt_arrays(s, sid), mt_arrays(s, imported)
    np.testing.assert_array_equal(b.freq, a.freq)
    for ha, hb, ca, cb in zip(a.H, b.H, a.coherence, b.coherence, strict=True):
        assert np.max(np.abs(hb - ha) / np.abs(ha)) < 1e-11  # E20.12: 12 significant digits
        np.testing.assert_allclose(cb, ca, rtol=1e-11, atol=0)


def test_one_file_per_position_and_the_folder_imports_the_same(recorded, tmp_path):
    folder, store, sid, cfg = recorded
    out = tmp_path / "per_position"
    assert _hil("--store", str(store), "export", sid, "--format", "uff", "-o", str(out)).exit_code == 0
    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["position_0050.0mm_identification.uff",
                                       "position_0300.0mm_validation.uff"]
    again = _hil("--store", str(store), "export", sid, "--format", "uff", "-o", str(out))
    assert again.exit_code == 1 and "already exists" in again.output
    new_store = tmp_path / "new.sqlite"
    res = _hil("--store", str(new_store), "import", "uff", *map(str, files), "--config", str(cfg), "--json")
    assert res.exit_code == 0, res.output
    with SessionStore(new_store) as s, SessionStore(store) as old:
        a, b = mt_arrays(old, sid), mt_arrays(s, json.loads(res.output)["session"])
    assert b.positions == [0.05, 0.3] and b.roles == ["identification", "validation"]
    assert np.max(np.abs(b.H[1] - a.H[1]) / np.abs(a.H[1])) < 1e-11


# ----------------------------------------------------------------------------------------- units


def _dataset(data, freq, **over) -> dict:
    """A dataset 58 FRF T1x/T1x at 0.1 m in accelerance, with fields overridden by ``over``."""
    ds = {
        "type": 58, "binary": 0, "id1": "test", "id2": "NONE", "id3": "NONE", "id4": "position=100 mm",
        "id5": "NONE", "func_type": 4, "ver_num": 0, "load_case_id": 0, "rsp_ent_name": "NONE", "rsp_node": 1,
        "rsp_dir": 1, "ref_ent_name": "NONE", "ref_node": 1, "ref_dir": 1, "abscissa_spacing": 1,
        "abscissa_spec_data_type": 18, "abscissa_axis_units_lab": "Hz", "ordinate_spec_data_type": 12,
        "ordinate_axis_units_lab": "m/s^2", "orddenom_spec_data_type": 13, "orddenom_axis_units_lab": "N",
        "z_axis_spec_data_type": 0, "x": freq, "data": data,
    }
    ds.update(over)
    return ds


def _write(path, *datasets):
    pyuff.UFF(str(path)).write_sets(list(datasets), mode="overwrite")
    return path


def _frf(seed: int = 0):
    rng = np.random.default_rng(seed)
    freq = np.arange(1.0, 65.0)
    return freq, rng.normal(size=freq.size) + 1j * rng.normal(size=freq.size)


def test_receptance_mobility_and_g_are_converted_to_si_accelerance(tmp_path):
    freq, h = _frf(1)
    w = 2 * np.pi * freq
    labels = model_labels()
    cases = [
        ({"ordinate_spec_data_type": 8, "ordinate_axis_units_lab": "mm"}, -(w**2) * h * 1e-3),
        ({"ordinate_spec_data_type": 11, "ordinate_axis_units_lab": "m/s", "orddenom_axis_units_lab": "kN"},
         1j * w * h * 1e-3),
        ({"ordinate_spec_data_type": 0, "ordinate_axis_units_lab": "g/N", "orddenom_axis_units_lab": "NONE"},
         9.80665 * h),
        ({"rsp_dir": -2, "rsp_node": 3, "ref_node": 10, "ref_dir": 3}, -h),  # T3 -y over S z
    ]
    for k, (over, expected) in enumerate(cases):
        path = _write(tmp_path / f"c{k}.uff", _dataset(h, freq, **over))
        f = read_file(path, Mapping.default(labels), labels)
        (fn,) = f.functions
        assert fn.position == pytest.approx(0.1) and fn.role == "identification"
        np.testing.assert_allclose(fn.values, expected, rtol=1e-10)
    assert (fn.response, fn.input) == ("T3y", "Sz")


def test_contradicting_type_and_unit_is_refused(tmp_path):
    freq, h = _frf()
    labels = model_labels()
    path = _write(tmp_path / "x.uff", _dataset(h, freq, ordinate_spec_data_type=8))  # displacement, in m/s^2
    with pytest.raises(UffError, match="displacement but its unit 'm/s\\^2' is one of acceleration"):
        read_file(path, Mapping.default(labels), labels)


# ----------------------------------------------------------------------------------------- bad input


def _good_file(tmp_path):
    freq, h = _frf()
    return _write(tmp_path / "good.uff", _dataset(h, freq))


def _bad_files(tmp_path) -> dict[str, tuple]:
    freq, h = _frf()
    good = _good_file(tmp_path).read_text()
    lines = good.splitlines(keepends=True)
    corrupt = tmp_path / "corrupt.uff"
    corrupt.write_text("".join(lines[:15] + ["  garbage in the data block that is not a number      \n"]
                               + lines[16:]))
    truncated = tmp_path / "truncated.uff"
    truncated.write_text("".join(lines[:20]) + "    -1\n")
    text = tmp_path / "notes.uff"
    text.write_text("this is not a universal file\n")
    nodes = _write(tmp_path / "nodes.uff", pyuff.prepare_15(node_nums=[1, 2], def_cs=[0, 0], disp_cs=[0, 0],
                                                            color=[1, 1], x=[0.0, 1.0], y=[0.0, 0.0],
                                                            z=[0.0, 0.0]))
    return {
        "corrupt": (corrupt, "malformed dataset 58"),
        "truncated": (truncated, "header announces 64 values"),
        "not uff": (text, "no universal-file datasets"),
        "dataset 15": (nodes, "no dataset 58 (function at nodal DOF); found dataset type(s) 15"),
        "time response": (_write(tmp_path / "t.uff", _dataset(h.real, freq, func_type=1)),
                          "function type 1 (time response)"),
        "no units": (_write(tmp_path / "u.uff", _dataset(h, freq, ordinate_axis_units_lab="NONE")),
                     "missing ordinate (response) units label"),
        "no position": (_write(tmp_path / "p.uff", _dataset(h, freq, id4="NONE")), "no axis position"),
    }


BAD = ["corrupt", "truncated", "not uff", "dataset 15", "time response", "no units", "no position"]


@pytest.mark.parametrize("case", BAD)
def test_bad_file_is_one_error_line_and_no_session(tmp_path, case):
    path, message = _bad_files(tmp_path)[case]
    store = tmp_path / "s.sqlite"
    res = _hil("--store", str(store), "import", "uff", str(path))
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], res.output
    assert not store.exists()


def test_a_bad_file_among_good_ones_leaves_the_store_untouched(recorded, tmp_path):
    folder, store, sid, cfg = recorded
    copy = tmp_path / "copy.sqlite"
    shutil.copy(store, copy)
    before = _sessions(copy)
    good = tmp_path / "good"
    assert _hil("--store", str(copy), "export", sid, "--format", "uff", "-o", str(good)).exit_code == 0
    bad, _ = _bad_files(tmp_path)["corrupt"]
    res = _hil("--store", str(copy), "import", "uff", *map(str, sorted(good.iterdir())), str(bad),
               "--config", str(cfg))
    assert res.exit_code == 1 and res.output.startswith("Error: corrupt.uff dataset 1: malformed"), res.output
    assert _sessions(copy) == before


def test_export_refuses_a_session_of_another_kind(tmp_path):
    from daq.bus.frames import Event

    store = tmp_path / "s.sqlite"
    with SessionStore(store) as s:
        sid = s.create_session("press", {"rig": {"kind": "press"}})
        s.append(sid, Event("press.plan", "note", 0, 1.0, {}))
        s.finish(sid, "complete")
    res = _hil("--store", str(store), "export", sid, "--format", "uff", "-o", str(tmp_path / "x.uff"))
    assert res.exit_code == 1 and "is a press session" in res.output
    assert not (tmp_path / "x.uff").exists()


def test_map_file_gives_position_role_and_node_numbers(tmp_path):
    """A file from another system: no id-line tokens, its own node numbers; the map supplies both."""
    freq, h = _frf(2)
    ds = _dataset(h, freq, id4="NONE", rsp_node=104, ref_node=101, rsp_dir=3)
    path = _write(tmp_path / "pos300.unv", ds)
    mapping = tmp_path / "map.toml"
    mapping.write_text('[nodes]\n101 = "T1"\n104 = "B1"\n\n[files."pos300.unv"]\nposition = 0.3\n'
                       'role = "validation"\n')
    labels = model_labels()
    (fn,) = read_file(path, load_mapping(mapping, labels), labels).functions
    assert (fn.position, fn.role, fn.response, fn.input) == (0.3, "validation", "B1z", "T1x")
    np.testing.assert_allclose(fn.values, h, rtol=1e-10)
    with pytest.raises(UffError, match="no axis position"):
        read_file(path, Mapping.default(labels), labels)
    mapping.write_text('[files."pos300.unv"]\nposition = 0.3\n')
    with pytest.raises(UffError, match="response node 104 .no entity name. is not a model node"):
        read_file(path, load_mapping(mapping, labels), labels)
    mapping.write_text('[nodes]\n101 = "Q9"\n')
    with pytest.raises(UffError, match="need a node number = one of"):
        load_mapping(mapping, labels)
