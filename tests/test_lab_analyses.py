"""Every rig kind's analysis in the lab (issue 41): simulated oscillator, pendulum and crane runs analysed on
the rig (`hil run --analyze` with a [lab] table, the `hil serve` page's analyse) or from the lab
(`hil --store URL analyze`) are found by `hil --store URL sessions --param/--verdict`, and every listing
names the session's rig and who ran it. Against a real `hil lab serve` of its own."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.config.load import read_toml
from daq.lab.reader import LabReader
from tests.polling import poll_until
from tests.test_lab import ROOT, LabServer
from tests.test_rig_kit import _to_toml

OPERATOR = "dana"  # $HIL_USER of the runs: who ran them
#: s to wait for a background push (a process of its own) to put a session in the lab
PUSH_WAIT = 180.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A `hil lab serve` of this module's own: the shared one's listings are compared whole elsewhere
    (tests/test_lab.py), and these sessions must not show up there."""
    server = LabServer(tmp_path_factory.mktemp("lab") / "lab")
    yield server
    assert server.stop() == 0


def hil(*args: str, key: str | None = None, user: str = OPERATOR):
    env = {"HIL_USER": user, **({"HIL_LAB_KEY": key} if key else {})}
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


def rig_config(tmp_path: Path, name: str, lab=None, live: bool = True) -> Path:
    """A shipped simulated config, kept short, with a [lab] table when ``lab`` is given: the session
    streamed live (a forwarder beside the run) or, ``live=False``, pushed once when the run has ended."""
    cfg = read_toml(ROOT / "configs" / f"{name}.toml")
    cfg.pop("store", None)
    if "adjoint" in cfg:  # the design is made on the fly into the test's folder
        cfg["plan"].update(trajectory=str(tmp_path / "trajectory.csv"), design_if_missing=True)
    if name == "crane-sim":  # 20x real time, one candidate structure with dead time, a short fit
        cfg["simulator"]["speed"] = 20.0
        cfg["excitation"].update(max_iter=5)
        cfg["excitation"].pop("export_dir", None)
        cfg["distortion"]["enabled"] = False
        cfg["model_selection"].update(candidates=["3m+visc+coul+dt"], n_starts=1, max_nfev=60, decimate=10,
                                      profile_points=2)
    if lab is not None:
        key = tmp_path / "lab.key"
        key.write_text(lab.key + "\n")
        key.chmod(0o600)
        cfg["lab"] = {"url": lab.url, "key_file": str(key), **({} if live else {"live": False})}
    path = tmp_path / f"{name}.toml"
    path.write_text(_to_toml(cfg))
    return path


def lab_rows(lab, *args: str) -> dict[str, dict]:
    res = hil("--store", lab.url, "sessions", "--json", *args, key=lab.key)
    assert res.exit_code == 0, res.output
    return {row["id"]: row for row in json.loads(res.output)}


def wait_in_lab(lab, sid: str, store: Path, *args: str) -> dict:
    """The lab's row of ``sid`` once the search ``args`` finds it (the background push is its own process)."""
    log = store.parent / "lab-push.log"
    try:
        poll_until(lambda: sid in lab_rows(lab, *args), timeout=PUSH_WAIT, period=1.0)
    except AssertionError:
        raise AssertionError(f"{sid} not found by {args}; push log: "
                             f"{log.read_text() if log.exists() else '(none)'}") from None
    return lab_rows(lab, *args)[sid]


def span(value: float, rel: float = 1e-3) -> str:
    a, b = sorted((value * (1 - rel), value * (1 + rel)))
    return f"{a!r}:{b!r}"


def session_of(output: str) -> str:
    found = re.search(r"^session (\S+) complete", output, re.M)
    assert found, output
    return found.group(1)


def listing_row(output: str, sid: str) -> tuple[list[str], list[str]]:
    lines = output.splitlines()
    return lines[0].split(), next(line for line in lines if line.startswith(sid)).split()


#: kind -> (shipped config, the parameter searched, its value in the `hil run --json` report, streamed
#: live). The oscillator's session streams into the lab as it records and its analysis reaches the container
#: the forwarder made; the pendulum's and the crane's are pushed once when their runs end (`live = false`):
#: the analysis takes the same push either way (the forwarder ends with it), and streaming the crane's
#: 10 kHz trace live cost the lab server more CPU than the rest of these tests (tests/test_lab_live.py
#: tests the streaming itself)
KINDS = {
    "oscillator": ("oscillator-sim", "c2", lambda r: r["estimate"]["c2"], True),
    "pendulum": ("pendulum-sim", "s_p", lambda r: r["estimate"]["s_p"], False),
    "crane": ("crane-sim", "dead_time", lambda r: r["chosen_params"]["dead_time"], False),
}


@pytest.mark.slow(reason="a simulated run with its analysis (10-30 s), a background push to a Tiled server")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_run_analysed_on_the_rig_is_found_in_the_lab_by_its_estimate_and_verdict(lab, tmp_path, kind):
    name, param, value_of, live = KINDS[kind]
    store = tmp_path / "hil.sqlite"
    res = hil("--store", str(store), "run", str(rig_config(tmp_path, name, lab, live)), "--analyze", "--json",
              "--no-progress")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    sid, report = out["run"]["session_id"], out["analysis"]
    value = value_of(report)
    assert value > 0
    row = wait_in_lab(lab, sid, store, "--kind", kind, "--param", f"{param}={span(value)}")
    assert (row["rig"], row["started_by"]) == (name, OPERATOR)
    with LabReader(lab.url, lab.key) as rem:
        analysis = rem.session_metadata(sid)["analysis"]
    assert analysis["estimates"][param] == value and (analysis["where"], analysis["by"]) == ("rig", OPERATOR)
    lo, hi = analysis["intervals"][param] if param in analysis["intervals"] else (value, value)
    assert lo <= value <= hi
    if kind == "crane":  # the chosen structure is the verdict
        assert analysis["verdict"] == analysis["structure"] == report["chosen"] == "3m+visc+coul+dt"
    else:  # the adequacy check's word
        valid = report["adequacy"]["intervals_valid"]
        assert analysis["verdict"] == ("adequate" if valid else "inadequate")
    assert sid in lab_rows(lab, "--verdict", analysis["verdict"], "--rig", name)
    assert sid not in lab_rows(lab, "--kind", kind, "--param", f"{param}={span(value * 1.01)}")
    assert sid not in lab_rows(lab, "--kind", "press", "--param", f"{param}={span(value)}")
    # the text listings, of the lab and of the rig's store, name the rig and who ran the session
    for where, key in ((lab.url, lab.key), (str(store), None)):
        listed = hil("--store", where, "sessions", "--rig", name, "--param", f"{param}={span(value)}",
                     key=key)
        assert listed.exit_code == 0, listed.output
        header, cells = listing_row(listed.output, sid)
        assert header[:3] == ["ID", "KIND", "RIG"] and header[-2:] == ["BY", "LAB"]
        assert cells[1:3] == [kind, name] and cells[-2] == OPERATOR
    shown = json.loads(hil("--store", lab.url, "show", sid, "--json", key=lab.key).output)
    assert (shown["rig"], shown["started_by"]) == (name, OPERATOR)


@pytest.mark.slow(reason="a simulated oscillator run, a push and an analysis from the lab")
@pytest.mark.timeout(600)
def test_an_analysis_from_the_lab_is_searchable_for_an_oscillator(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    res = hil("--store", str(store), "run", str(rig_config(tmp_path, "oscillator-sim")), "--no-progress")
    assert res.exit_code == 0, res.output
    sid = session_of(res.output)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    assert sid not in lab_rows(lab, "--param", "c2=0:1e9")  # not analysed yet
    done = hil("--store", lab.url, "analyze", sid, "--json", key=lab.key, user="erin")
    assert done.exit_code == 0, done.output
    c2 = json.loads(done.stdout)["estimate"]["c2"]
    assert sid in lab_rows(lab, "--kind", "oscillator", "--param", f"c2={span(c2)}")
    with LabReader(lab.url, lab.key) as rem:
        analysis = rem.session_metadata(sid)["analysis"]
    assert (analysis["where"], analysis["by"], analysis["estimates"]) == ("lab", "erin", {"c2": c2})
    assert sid in lab_rows(lab, "--verdict", analysis["verdict"], "--kind", "oscillator")
    assert lab_rows(lab, "--kind", "oscillator")[sid]["started_by"] == OPERATOR  # who ran it, not analysed


def key_of(lab, name: str, role: str, folder: Path) -> str:
    """A key of its own for ``name`` with ``role`` (`hil lab key add`, the lab's admin key)."""
    out = folder / f"{name}.key"
    res = hil("lab", "key", "add", name, "--role", role, "--to", lab.url, "--key-file", str(out), key=lab.key)
    assert res.exit_code == 0, res.output
    return out.read_text().strip()


@pytest.mark.slow(reason="a simulated oscillator run, a push and two analyses from the lab")
@pytest.mark.timeout(600)
def test_a_viewers_analysis_from_the_lab_prints_the_report_and_stores_nothing_an_operators_stores(lab,
                                                                                                   tmp_path):
    store = tmp_path / "hil.sqlite"
    res = hil("--store", str(store), "run", str(rig_config(tmp_path, "oscillator-sim")), "--no-progress")
    assert res.exit_code == 0, res.output
    sid = session_of(res.output)
    viewer, operator = key_of(lab, "vic", "viewer", tmp_path), key_of(lab, "olga", "operator", tmp_path)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=operator).exit_code == 0
    seen = hil("--store", lab.url, "analyze", sid, key=viewer)
    assert seen.exit_code == 0, seen.output
    assert seen.stdout.startswith(f"session {sid} (oscillator, complete)") and "c2" in seen.stdout
    assert "Traceback" not in seen.output and "Error" not in seen.output
    assert seen.stderr.strip().splitlines()[-1] == (  # after the fit's progress lines
        f"the analysis was not stored in the lab {lab.url}: vic's key is a viewer's (reads only); an "
        "operator's key stores it")
    with LabReader(lab.url, lab.key) as rem:
        assert "analysis" not in rem.session_metadata(sid)
    done = hil("--store", lab.url, "analyze", sid, "--json", key=operator)
    assert done.exit_code == 0 and "not stored" not in done.stderr, done.output
    c2 = json.loads(done.stdout)["estimate"]["c2"]
    with LabReader(lab.url, viewer) as rem:
        meta = rem.session_metadata(sid)
    assert meta["analysis"]["estimates"] == {"c2": c2} and meta["analysed_by"]["name"] == "olga"
    assert meta["analysis"]["report"]["estimate"]["c2"] == c2  # the report, kept in the session's `about`
    assert sid in lab_rows(lab, "--param", f"c2={span(c2)}")


@pytest.mark.slow(reason="a simulated pendulum run, a background push, the dashboard's analysis")
@pytest.mark.timeout(600)
def test_the_serve_pages_analysis_reaches_the_lab(lab, tmp_path):
    import httpx

    from tests.serve_fixtures import ServerThread

    store = tmp_path / "store" / "hil.sqlite"
    store.parent.mkdir()
    # pushed when the run ends (the analysis is what is tested here; tests/test_lab_live.py streams)
    res = hil("--store", str(store), "run", str(rig_config(tmp_path, "pendulum-sim", lab, live=False)),
              "--no-progress")
    assert res.exit_code == 0, res.output
    sid = session_of(res.output)
    wait_in_lab(lab, sid, store, "--kind", "pendulum")
    assert sid not in lab_rows(lab, "--param", "s_p=0:1e9")  # pushed without an analysis
    (tmp_path / "configs").mkdir()
    os.environ["HIL_USER"] = OPERATOR
    srv = ServerThread(tmp_path / "configs", store, tmp_path / "tokens").start()
    try:
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token}"},
                          timeout=60) as http:
            assert http.post(f"/api/sessions/{sid}/analysis").status_code == 202

            def state() -> dict:
                return http.get(f"/api/sessions/{sid}/analysis").raise_for_status().json()

            poll_until(lambda: state()["state"] != "running", timeout=300, period=0.5)
            answer = state()
    finally:
        srv.stop()
        os.environ.pop("HIL_USER", None)
    assert answer["state"] == "done", answer
    s_p = answer["report"]["estimate"]["s_p"]
    row = wait_in_lab(lab, sid, store, "--kind", "pendulum", "--param", f"s_p={span(s_p)}")
    assert (row["rig"], row["started_by"]) == ("pendulum-sim", OPERATOR)
    with LabReader(lab.url, lab.key) as rem:
        assert rem.session_metadata(sid)["analysis"]["where"] == "rig"
