"""Odd input stops at the lab's door (issue 41), against a real `hil lab serve` on 127.0.0.1: session ids and
stream names the store does not make, racing pushes, a server that is not Tiled, key files and keys in the
wrong place, lab copies with an unknown dtype or without their events table, a catalogue that is not a
URI, a `[lab]` table given with --config and a Python without Tiled. Every case is one line and an exit
code, no traceback, nothing left in the catalogue (its root is listed) and nothing marked replicated."""

from __future__ import annotations

import contextlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from daq.bus.frames import Event, Frame
from daq.cli.main import main
from daq.lab.marks import replicas
from daq.lab.reader import LabReader
from daq.store.read_write import SessionStore
from tests.polling import poll_until
from tests.test_lab import ROOT, T0, hil, make_session, shared_lab


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    """The lab server test_lab uses too (one per pytest session)."""
    yield from shared_lab(request, tmp_path_factory)


def run(*args: str, env: dict | None = None):
    """`hil ARGS` with only ``env`` for the lab's key variables (none of the caller's)."""
    clean = {"HIL_LAB_KEY": None, "HIL_LAB_KEY_FILE": None, **(env or {})}
    return CliRunner(env=clean).invoke(main, list(args), catch_exceptions=False)


def one_line(res, code: int = 1) -> str:
    """The output of a refused command: one line, exit ``code``, no traceback."""
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    return lines[0]


def lab_root(lab) -> set[str]:
    with LabReader(lab.url, lab.key) as reader:
        return set(reader.root)


def lab_files(lab) -> set[Path]:
    return {p for p in (lab.data / "data").rglob("*")}


def odd_session(path: Path, sid: str, stream: str = "press.force") -> str:
    """A finished one-stream session stored under ``sid`` (which the store takes as given)."""
    with SessionStore(path) as store:
        store.create_session("press", {"rig": {"kind": "press", "name": "odd"}}, {}, session_id=sid)
        store.append(sid, Event("press.run", "started", 0, T0, {"by": "mallory"}))
        store.append(sid, Frame(stream, 0, T0, 1e-3, ["f"], ["N"], np.arange(20.0).reshape(20, 1)))
        store.finish(sid, "complete")
    return sid


def test_a_fresh_session_id_is_one_the_door_lets_through(tmp_path):
    """The door's pattern is the store's own format: a session made the ordinary way passes it."""
    from daq.lab.names import check_session_id

    for seed in range(3):
        sid = make_session(tmp_path / f"s{seed}.sqlite", 0.2, seed=seed)
        assert check_session_id(sid) == sid


@pytest.mark.parametrize("sid", ["..", ".", "a/b", "q?x=1", "h#x", "p%2fq", "../aaaaaaaaaaaa", "ABCDEF012345",
                                 "events"])
def test_an_odd_session_id_is_refused_before_anything_reaches_the_lab(lab, tmp_path, sid):
    store = tmp_path / "hil.sqlite"
    odd_session(store, sid)
    before_root, before_files = lab_root(lab), lab_files(lab)
    for how in ([sid], ["--pending"], ["--all"]):
        line = one_line(hil("--store", str(store), "lab", "push", *how, "--to", lab.url, key=lab.key))
        assert "not one the store makes" in line and "not pushed" in line
    assert lab_root(lab) == before_root and lab_files(lab) == before_files  # nothing orphaned
    assert replicas(store) == {}


@pytest.mark.parametrize("stream", ["a/b", "..", ".hidden", "events", "x?y", "h#x", "p%2fq", "sp ace"])
def test_an_odd_stream_name_is_refused_before_anything_reaches_the_lab(lab, tmp_path, stream):
    store = tmp_path / "hil.sqlite"
    sid = odd_session(store, "0dd5e551075e", stream)
    before_root, before_files = lab_root(lab), lab_files(lab)
    line = one_line(hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key))
    assert "stream name" in line and "not pushed" in line
    assert lab_root(lab) == before_root and lab_files(lab) == before_files
    assert replicas(store) == {}


def test_a_session_key_with_a_query_or_a_path_answers_no_other_session(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.5, seed=7)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    assert sid in hil("--store", lab.url, "show", sid, key=lab.key).output
    for odd in (f"{sid}?x=1", f"{sid}#x", f"{sid}/press.force", f"../{sid}", f"{sid[:4]}%2f"):
        line = one_line(hil("--store", lab.url, "show", odd, key=lab.key))
        assert "is not a session id" in line and sid not in line.replace(odd, "")


def test_a_second_push_of_a_session_being_pushed_stands_aside_in_one_line(lab, tmp_path):
    """While one push of a session runs (its lock held here, as a running push holds it), another push of
    the same session from the store writes nothing, marks nothing and says so; once the first is done the
    session pushes normally."""
    from daq.lab.push_lock import pushing

    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.5, seed=11)
    with pushing(store, sid):
        for how in ([sid], ["--pending"]):
            line = one_line(hil("--store", str(store), "lab", "push", *how, "--to", lab.url, key=lab.key))
            assert line.startswith(f"another push of {sid} is in progress")
        assert sid not in lab_root(lab) and replicas(store) == {}
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and "pushed and verified" in res.output
    assert set(replicas(store)) == {sid}


def test_two_pushes_of_one_session_at_once_end_in_one_verified_copy_and_one_line_each(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 30.0, rate=5000.0, seed=12)
    cmd = [sys.executable, "-m", "daq.cli.main", "--store", str(store), "lab", "push", sid, "--to", lab.url]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": lab.key}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
             for _ in range(2)]
    outs = [(p.communicate(timeout=240)[0].decode(), p.returncode) for p in procs]
    for out, _ in outs:
        assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
        # the session id is random hex and may itself contain "409": look for the status outside it
        assert "409" not in out.replace(sid, "") and "differs" not in out, out
    assert sorted(rc for _, rc in outs) in ([0, 0], [0, 1])
    assert any("pushed and verified" in out for out, rc in outs if rc == 0)
    for out, rc in outs:
        assert rc == 0 or out.startswith(f"another push of {sid} is in progress"), out
    with LabReader(lab.url, lab.key) as reader:
        assert reader.get_session(sid).id == sid
    assert set(replicas(store)) == {sid}


@pytest.mark.parametrize("seconds", [2.0, 30.0])
def test_two_store_copies_pushing_one_session_at_once_end_in_one_verified_copy_and_one_line_each(
        lab, tmp_path, seconds):
    """Two rigs' copies of one store (no shared lock) push the same session at once: one push writes it and
    says so, the other says in one line that the lab holds it or that another push is writing it - never
    Tiled's raw 409 or a false "the lab's copy differs"; both stores end marked, the lab's copy whole."""
    import shutil

    first, second = tmp_path / "a" / "hil.sqlite", tmp_path / "b" / "hil.sqlite"
    first.parent.mkdir()
    second.parent.mkdir()
    sid = make_session(first, seconds, rate=5000.0, seed=13)
    shutil.copy(first, second)
    cmds = [[sys.executable, "-m", "daq.cli.main", "--store", str(store), "lab", "push", sid, "--to", lab.url]
            for store in (first, second)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": lab.key}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
             for cmd in cmds]
    outs = [(p.communicate(timeout=240)[0].decode(), p.returncode) for p in procs]
    for out, _ in outs:
        assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
        assert "409" not in out.replace(sid, "") and "differ" not in out, out
    assert any(rc == 0 and "pushed and verified" in out for out, rc in outs), outs
    for out, rc in outs:
        assert rc == 0 or out.startswith(f"another push of {sid} is writing it to the lab"), out
    with LabReader(lab.url, lab.key) as reader:
        assert reader.get_session(sid).id == sid
        assert reader.read_stream(sid, "press.force").t.shape == (int(seconds * 5000),)
    res = hil("lab", "verify", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.strip() == f"{sid}: as pushed", res.output
    for store in (first, second):  # a loser pushes again later: then the lab holds it verified
        if sid not in replicas(store):
            again = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
            assert again.exit_code == 0 and "already in the lab, verified" in again.output, again.output
        assert set(replicas(store)) == {sid}


class NotTiled(http.server.BaseHTTPRequestHandler):
    """Answers 200 to every request, as a proxy's or another service's start page does: a web page, or JSON
    of its own (``json_body``)."""

    json_body = False

    def do_GET(self):  # noqa: N802 - http.server's name
        body = b'{"status": "ok", "data": []}' if self.json_body else b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if self.json_body else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(params=["html", "json"])
def not_tiled(request):
    handler = type("NotTiledHere", (NotTiled,), {"json_body": request.param == "json"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_that_answers_200_but_is_not_tiled_is_one_line(not_tiled, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.2)
    key = "k" * 32
    for args in (["--store", str(store), "lab", "push", sid, "--to", not_tiled], ["--store", not_tiled,
                                                                                 "sessions"]):
        line = one_line(run(*args, env={"HIL_LAB_KEY": key}))
        assert "not as a Tiled server does" in line and key not in line
    assert replicas(store) == {}


def test_a_key_in_the_url_is_refused_and_never_echoed(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.2)
    for url in (f"{lab.url}/?api_key={lab.key}", f"{lab.url}?api_key={lab.key}", f"{lab.url}#{lab.key}",
                lab.url.replace("://", f"://me:{lab.key}@")):
        for args in (["--store", str(store), "lab", "push", sid, "--to", url], ["--store", url, "sessions"],
                     ["--store", url, "show", sid]):
            line = one_line(run(*args, env={"HIL_LAB_KEY": lab.key}))
            assert lab.key not in line and "never travel in URLs" in line
    assert replicas(store) == {} and sid not in lab_root(lab)


def test_key_files_and_key_variables_say_what_they_hold(lab, tmp_path):
    binary = tmp_path / "lab.key"
    binary.write_bytes(b"\xff\xfe\x00k\x81" * 8)
    binary.chmod(0o600)
    line = one_line(run("--key-file", str(binary), "--store", lab.url, "sessions"))
    assert "not text" in line and str(binary) in line
    line = one_line(run("--store", lab.url, "sessions", env={"HIL_LAB_KEY_FILE": str(binary)}))
    assert "not text" in line
    good = tmp_path / "good.key"
    good.write_text(lab.key + "\n")
    good.chmod(0o600)
    # a path where the key belongs: a hint to $HIL_LAB_KEY_FILE, and the path works there
    line = one_line(run("--store", lab.url, "sessions", env={"HIL_LAB_KEY": str(good)}))
    assert "$HIL_LAB_KEY holds the key itself" in line and "$HIL_LAB_KEY_FILE" in line
    assert run("--store", lab.url, "sessions", env={"HIL_LAB_KEY_FILE": str(good)}).exit_code == 0
    # the key where a path belongs: a hint, and the key is not shown
    line = one_line(run("--key-file", lab.key, "--store", lab.url, "sessions"))
    assert "looks like the key itself" in line and lab.key not in line
    text = run("--help").output + run("lab", "push", "--help").output
    flat = " ".join(text.split())
    assert "$HIL_LAB_KEY_FILE (a path)" in flat and "$HIL_LAB_KEY (the key itself)" in flat


@pytest.fixture
def pushed_copy(lab, tmp_path):
    """A session pushed to the lab, for tests that then spoil the lab's copy."""
    def push(seed: int) -> str:
        store = tmp_path / f"s{seed}.sqlite"
        sid = make_session(store, 0.5, seed=seed)
        assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
        return sid
    return push


def reads(lab, sid: str, out: Path):
    yield "show", hil("--store", lab.url, "show", sid, key=lab.key)
    yield "export", hil("--store", lab.url, "export", sid, "--format", "csv", "--output", str(out / "x"),
                        key=lab.key)
    yield "replay", hil("--store", lab.url, "replay", sid, "--burst", "--wait", "0", "--endpoint",
                        "tcp://127.0.0.1:0", key=lab.key)


def test_a_lab_copy_with_an_unknown_dtype_is_one_line(lab, pushed_copy, tmp_path):
    import copy

    sid = pushed_copy(21)
    with LabReader(lab.url, lab.key) as reader:
        node = reader.root[sid]
        meta = copy.deepcopy(dict(node.metadata))
        meta["streams"]["press.force"]["dtype"] = "complex256"
        node.replace_metadata(metadata=meta)
    for what, res in reads(lab, sid, tmp_path):
        assert res.exit_code == 1 and "Traceback" not in res.output, (what, res.output)
        errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
        assert len(errors) == 1 and "'complex256'" in errors[0] and "press.force" in errors[0], res.output


def test_a_lab_copy_without_its_events_table_is_one_line(lab, pushed_copy, tmp_path):
    """The lost file makes the lab's server answer 500, which tiled's client retries (through stamina) 10
    times with backoff, ~20 s per read. Here it tries twice without the backoff (stamina's own test mode,
    as tests/test_lab_integrity.py's children try twice): the error the reader then raises, and its one
    line, are the same."""
    with retries_without_backoff():
        check_events_table_lost(lab, pushed_copy, tmp_path)


def retries_without_backoff() -> contextlib.AbstractContextManager:
    """stamina's test mode (a retried request tried twice, no waits between) where tiled retries through
    stamina; a tiled that does not (older versions) keeps its own retries."""
    try:
        import stamina
    except ImportError:
        return contextlib.nullcontext()
    return stamina.set_testing(True, attempts=2)


def check_events_table_lost(lab, pushed_copy, tmp_path) -> None:
    lost, gone = pushed_copy(22), pushed_copy(23)
    with LabReader(lab.url, lab.key) as reader:  # one table deleted from the catalogue, one file lost on disk
        reader.root[lost]["events"].delete(external_only=False)
    for f in (lab.data / "data" / gone / "events").rglob("*.parquet"):
        f.unlink()
    # the reader's integrity check names what it cannot serve (daq/lab/digests.py's one line)
    for sid, why in ((lost, "events table"), (gone, "events table")):
        for what, res in reads(lab, sid, tmp_path):
            if what == "show":
                continue  # show lists what the metadata says; the two readers of events must refuse
            assert res.exit_code == 1 and "Traceback" not in res.output, (what, res.output)
            errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
            assert len(errors) == 1 and why in errors[0] and sid in errors[0], (what, res.output)


def test_a_catalogue_that_is_not_a_uri_is_refused_and_nothing_is_made(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for catalog in ("not a uri", "lab.db", "postgres://x@127.0.0.1/lab", "sqlite://"):
        proc = subprocess.run([sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", "labdata",
                               "--port", "0", "--catalog", catalog], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and proc.stdout == "", (catalog, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "is not a database URI" in proc.stderr, proc.stderr
        assert list(tmp_path.iterdir()) == []  # no SQLite file of that name, no data folder


def test_the_lab_table_of_a_config_serves_push_pending_and_store_url(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.5, seed=31)
    (tmp_path / "lab.key").write_text(lab.key + "\n")
    (tmp_path / "lab.key").chmod(0o600)
    config = tmp_path / "press-lab.toml"
    config.write_text((ROOT / "configs" / "press-sim.toml").read_text()
                      + f'\n[lab]\nurl = "{lab.url}"\nkey_file = "lab.key"\npush = false\n')
    res = run("--config", str(config), "--store", str(store), "lab", "push", "--pending")
    assert res.exit_code == 0 and f"{sid}: pushed and verified" in res.output, res.output
    res = run("--config", str(config), "--store", lab.url, "show", sid)
    assert res.exit_code == 0 and sid in res.output, res.output


def without_tiled(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`hil ARGS` in a Python where Tiled cannot be imported, as after the README's plain install."""
    code = "import sys; sys.modules['tiled'] = None; from daq.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)


def test_without_tiled_the_lab_commands_name_the_install_command(tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.2)
    install = "pip install -e '.[lab]'"
    for args in (["lab", "serve", "--data", str(tmp_path / "lab"), "--port", "0"],
                 ["--store", str(store), "lab", "push", sid, "--to", "http://127.0.0.1:9"],
                 ["--store", "http://127.0.0.1:9", "sessions"]):
        proc = without_tiled(*args, cwd=tmp_path, HIL_LAB_KEY="k" * 32)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, (args, proc.stderr)
        assert install in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "lab").exists()  # no key file made before the refusal
    assert install in (ROOT / "docs" / "lab.md").read_text()


def _estimate_in_lab(lab, sid: str) -> dict:
    with LabReader(lab.url, lab.key) as reader:
        return dict((reader.session_metadata(sid).get("analysis") or {}).get("estimates") or {})


def test_an_analysis_recorded_while_a_push_reads_it_goes_with_the_next_pending_push(lab, tmp_path,
                                                                                   monkeypatch):
    """The race behind a rig analysis that never reached the lab: the live forwarder's verified push read
    the store's analysis (none yet), the run's analysis was recorded, then the push marked the session
    replicated - later than the analysis - and the run's background push said "nothing to push". The mark
    now dates from the read: the analysis recorded after it makes the session pending, and goes."""
    from daq.lab import push as push_module
    from daq.lab.analysis import analysis_metadata
    from daq.lab.local_analyses import record_analysis
    from daq.lab.replicate import push_sessions

    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.5, seed=21)
    real_read = push_module.local_analysis

    def read_then_the_analysis_lands(path, session_id):
        found = real_read(path, session_id)  # what the push carries: nothing yet
        record_analysis(path, session_id, analysis_metadata({"estimates": {"c2": 1099.97}}, by="dana",
                                                            where="rig"))
        return found

    monkeypatch.setattr(push_module, "local_analysis", read_then_the_analysis_lands)
    [first] = push_sessions(store, lab.url, lab.key, [sid], say=lambda _t: None)
    monkeypatch.undo()
    assert first.state == "pushed" and _estimate_in_lab(lab, sid) == {}
    res = hil("--store", str(store), "lab", "push", "--pending", "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and "analysis added" in res.output, res.output
    assert _estimate_in_lab(lab, sid) == {"c2": 1099.97}
    res = hil("--store", str(store), "lab", "push", "--pending", "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.strip() == "nothing to push", res.output


def test_the_runs_background_push_waits_for_a_forwarder_still_pushing_and_hands_over_the_analysis(lab,
                                                                                                 tmp_path):
    """A live forwarder holds the session's push lock while it hands the session over; the analysis is
    recorded meanwhile and the run's background push starts. It used to leave the session to the forwarder
    in one line (refused, exit 1) and the analysis stayed on the rig; it waits for the lock
    (--wait-for-push), then hands the analysis over."""
    from daq.lab.analysis import analysis_metadata
    from daq.lab.local_analyses import record_analysis
    from daq.lab.push_lock import pushing
    from daq.lab.replicate import BACKGROUND_LOCK_WAIT, push_sessions

    assert BACKGROUND_LOCK_WAIT >= 60.0  # a forwarder's hand-over of a long session takes that long
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 0.5, seed=22)
    cmd = [sys.executable, "-m", "daq.cli.main", "--store", str(store), "lab", "push", "--pending", "--to",
           lab.url, "--wait-for-push", "120"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": lab.key}
    with pushing(store, sid):  # the forwarder
        [first] = push_sessions(store, lab.url, lab.key, [sid], say=lambda _t: None, lock_held=True)
        assert first.state == "pushed"
        record_analysis(store, sid, analysis_metadata({"estimates": {"c2": 1099.97}}, by="dana", where="rig"))
        background = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                      cwd=ROOT)
        poll_until(lambda: background.poll() is not None or _lock_waited_on(store, sid), timeout=120.0)
        assert background.poll() is None  # it waits: the lock is still held
    out = background.communicate(timeout=120)[0].decode()
    assert background.returncode == 0 and "analysis added" in out, out
    assert _estimate_in_lab(lab, sid) == {"c2": 1099.97}


def _lock_waited_on(store: Path, sid: str) -> bool:
    """True once another process has opened the session's push lock file (it is waiting on it)."""
    from daq.lab.push_lock import lock_path

    target = str(lock_path(store, sid).resolve())
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        if int(fd_dir.parent.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == target for fd in fd_dir.iterdir()):
                return True
    return False
