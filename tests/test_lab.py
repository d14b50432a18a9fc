"""The lab (issue 32) against real servers: `hil lab serve` (Tiled on 127.0.0.1, port 0, SQLite catalogue)
started as a user starts it, sessions pushed with `hil lab push`, read back with the plain tiled client
(no hil-lab) and through `hil --store URL` with the same numbers as the local store."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from daq.bus.frames import Event, Frame
from daq.cli.main import main
from daq.lab.marks import replicas
from daq.lab.reader import EDGE_READ, LabReader
from daq.store.read_write import SessionStore
from daq.store.reader import SessionReader
from tests.zygote import hil_child

ROOT = Path(__file__).resolve().parents[1]
T0 = 1.7e9  # unix-time magnitude, as live sessions have


class LabServer:
    """`hil lab serve` in a child process (forked from the worker's zygote: tests/zygote.py); ``url`` once
    it printed it."""

    def __init__(self, data: Path, *extra: str, port: int = 0, env: dict | None = None):
        self.data = data
        self.log = data.parent / f"{data.name}.log"
        self.proc = hil_child(["lab", "serve", "--data", str(data), "--port", str(port), *extra],
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT,
                              stderr=self.log)
        self.lines = [self.proc.stdout.readline().decode().strip() for _ in range(2)]
        if not self.lines[1].startswith(("http://", "https://")):
            self.stop()
            raise AssertionError(f"lab serve printed {self.lines}: see {self.log.name}")
        self.url = self.lines[1]
        self.key = (data / "lab.key").read_text().strip()

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=180)
        self.proc.stdout.close()
        return rc


def shared_lab(request, tmp_path_factory):
    """One `hil lab serve` (SQLite catalogue) for every lab test that does not kill or restart its server:
    kept on the pytest session, so the `lab` fixtures of test_lab and test_lab_faults hand out the same
    server (a Tiled server start costs ~1 CPU-s forked from the zygote, ~5 alone); stopped with Ctrl-C at
    the end of the session."""
    server = getattr(request.session, "hil_lab_server", None)
    if server is None:
        server = request.session.hil_lab_server = LabServer(tmp_path_factory.mktemp("lab") / "lab")
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0  # Ctrl-C ends it cleanly


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


def hil(*args: str, key: str | None = None):
    env = {"HIL_LAB_KEY": key} if key else {}
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


def make_session(path: Path, seconds: float = 20.0, rate: float = 1000.0, seed: int = 1,
                 name: str = "press-a", by: str = "alice", status: str = "complete") -> str:
    """A finished session of two streams at different rates: a regular one (t0 + k dt, three channels,
    N/N/Pa) and a bursty timestamped float32 one (m); events with who started it and the safe outcome."""
    rng = np.random.default_rng(seed)
    with SessionStore(path) as store:
        sid = store.create_session("press", {"rig": {"kind": "press", "name": name}}, {"dev": {"id": 1}})
        store.append(sid, Event("press.run", "started", 0, T0, {"by": by}))
        n = 100
        for k in range(int(seconds * rate / n)):
            t = T0 + k * n / rate
            store.append(sid, Frame("press.force", k, t, 1 / rate, ["force_cmd", "force", "pressure"],
                                    ["N", "N", "Pa"], rng.normal(size=(n, 3))))
            if k % 3 == 0:
                store.append(sid, Frame("press.sensors", k // 3, t, None, ["D_vertical"], ["m"],
                                        rng.normal(size=(7, 1)).astype("<f4"),
                                        timestamps=t + np.arange(7) * 5e-4))
                store.append(sid, Event("press.plan", "step", k // 3, t, {"index": k // 3, "q": 1.5 * k}))
        store.append(sid, Event("press.plan", "plan_outcome", 1, T0 + seconds, {"safe": True}))
        store.finish(sid, status)
    return sid


@pytest.fixture(scope="module")
def pushed(lab, tmp_path_factory):
    """A store with one session, pushed once (the first push)."""
    store = tmp_path_factory.mktemp("rig") / "hil.sqlite"
    sid = make_session(store)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0, res.output
    return store, sid, res.output


def lab_files(lab) -> list[str]:
    return sorted(str(p.relative_to(lab.data)) for p in (lab.data / "data").rglob("*") if p.is_file())


def test_serve_makes_a_private_key_prints_the_url_and_refuses_plain_http_beyond_loopback(lab, tmp_path):
    assert lab.lines[0] == f"admin key written to {lab.data / 'lab.key'}"
    assert stat.S_IMODE((lab.data / "lab.key").stat().st_mode) == 0o600
    assert lab.url.startswith("http://127.0.0.1:")
    res = hil("lab", "serve", "--data", str(tmp_path / "x"), "--host", "0.0.0.0", "--port", "0")
    assert res.exit_code == 1 and "TLS" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x").exists()


def test_serve_names_a_tls_file_that_is_missing_or_not_pem_before_it_makes_anything(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    missing = tmp_path / "nowhere" / "cert.pem"
    cert = tmp_path / "cert.pem"
    cert.write_text("hello\n")
    for certfile, said in ((missing, "no such file"), (cert, "not a PEM file")):
        res = hil("lab", "serve", "--data", str(tmp_path / "x"), "--port", "0", "--certfile", str(certfile),
                  "--keyfile", str(key))
        lines = res.output.strip().splitlines()
        assert res.exit_code == 1 and len(lines) == 1 and str(certfile) in lines[0] and said in lines[0], \
            res.output
    assert not (tmp_path / "x").exists()


def test_push_twice_adds_nothing_and_the_store_marks_the_session(lab, pushed):
    store, sid, first = pushed
    assert first.startswith(f"{sid}: pushed and verified (") and len(first.strip().splitlines()) == 1
    files = lab_files(lab)
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 0 and res.output.strip() == f"{sid}: already in the lab, verified"
    assert lab_files(lab) == files  # nothing new written
    res = hil("--store", str(store), "lab", "push", "--pending", "--to", lab.url, key=lab.key)
    assert res.output.strip() == "nothing to push"
    assert replicas(store) == {sid: [lab.url]}
    listing = hil("--store", str(store), "sessions").output.splitlines()
    assert listing[0].split()[-1] == "LAB" and listing[1].split()[-1] == "yes"


PLAIN_CLIENT = textwrap.dedent("""
    import sys
    sys.modules["daq"] = None  # hil-lab is not installed here: only the tiled client
    import json
    from tiled.client import from_uri
    url, key, sid = sys.argv[1:4]
    session = from_uri(url, api_key=key)[sid]
    force = session["press.force"]
    data, t = force["data"].read(), force["t"].read()
    events = session["events"].read()
    print(json.dumps({
        "rig": session.metadata["rig"], "by": session.metadata["by"], "safe": session.metadata["safe"],
        "units": force.metadata["units_by_channel"], "time_unit": force["t"].metadata["unit"],
        "shape": list(data.shape), "dtype": str(data.dtype), "sum": float(data.sum()), "t0": float(t[0]),
        "t_last": float(t[-1]), "sensor_units": session["press.sensors"]["data"].metadata["units"],
        "events": events["kind"].value_counts().to_dict(), "columns": list(events.columns),
    }))
""")


def test_the_plain_tiled_client_reads_a_session_into_numpy_and_pandas_with_its_units(lab, pushed, tmp_path):
    store, sid, _ = pushed
    script = tmp_path / "read.py"
    script.write_text(PLAIN_CLIENT)
    out = subprocess.run([sys.executable, "-I", str(script), lab.url, lab.key, sid], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    local = SessionReader(store).read_stream(sid, "press.force")
    assert got["units"] == {"force_cmd": "N", "force": "N", "pressure": "Pa"} and got["time_unit"] == "s"
    assert got["sensor_units"] == ["m"] and got["rig"] == {"kind": "press", "name": "press-a"}
    assert (got["by"], got["safe"]) == ("alice", True)
    assert got["shape"] == [20000, 3] and got["dtype"] == "float64"
    assert got["sum"] == pytest.approx(float(local.data.sum()), rel=1e-12)
    assert (got["t0"], got["t_last"]) == (local.t[0], local.t[-1])
    assert got["events"] == {"step": 67, "started": 1, "plan_outcome": 1}
    assert got["columns"] == ["ord", "stream", "kind", "seq", "t", "replay", "body"]


def test_a_lab_session_reads_as_the_local_one_show_export_replay_windows(lab, pushed, tmp_path):
    store, sid, _ = pushed
    for args in (("show", sid, "--json"), ("sessions", "--json")):
        local, remote = hil("--store", str(store), *args), hil("--store", lab.url, *args, key=lab.key)
        assert remote.exit_code == 0
        theirs = json.loads(remote.output)
        if args[0] == "sessions":  # the shared lab also holds other tests' sessions: this store's rows
            theirs = [row for row in theirs if row["id"] == sid]
        assert theirs == json.loads(local.output)
    for fmt, name in (("hdf5", "s.h5"), ("mat", "s.mat")):
        a, b = tmp_path / f"local-{name}", tmp_path / f"lab-{name}"
        assert hil("--store", str(store), "export", sid, "--format", fmt, "-o", str(a)).exit_code == 0
        res = hil("--store", lab.url, "export", sid[:6], "--format", fmt, "-o", str(b), key=lab.key)
        assert res.exit_code == 0, res.output
        assert a.read_bytes() == b.read_bytes()
    with SessionReader(store) as loc, LabReader(lab.url, lab.key) as rem:
        mine, theirs = list(loc.messages(sid)), list(rem.messages(sid))
        assert len(mine) == len(theirs) == 200 + 67 * 2 + 2
        for x, y in zip(mine, theirs, strict=True):
            assert type(x) is type(y)
            if isinstance(x, Frame):
                assert (x.stream, x.seq, x.t0, x.dt, x.units) == (y.stream, y.seq, y.t0, y.dt, y.units)
                assert np.array_equal(x.data, y.data) and x.data.dtype == y.data.dtype
                assert (x.timestamps is None and y.timestamps is None) or np.array_equal(x.timestamps,
                                                                                         y.timestamps)
            else:
                assert x == y
        for stream in ("press.force", "press.sensors"):
            for a, b in ((T0 + 3.05, T0 + 7.5), (None, T0 + 0.3), (T0 + 19.95, None), (T0 - 5, T0 - 1)):
                w, v = loc.read_window(sid, stream, a, b), rem.read_window(sid, stream, a, b)
                assert w.start == v.start and np.array_equal(w.t, v.t) and np.array_equal(w.data, v.data)
            chunks = [(c.start, len(c)) for c in rem.iter_stream(sid, stream, 3000, t_start=T0 + 1)]
            assert chunks == [(c.start, len(c)) for c in loc.iter_stream(sid, stream, 3000, t_start=T0 + 1)]
        assert rem.stream_timing(sid, "press.sensors") == loc.stream_timing(sid, "press.sensors")


def test_search_by_rig_kind_status_time_and_who(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    ids = {make_session(store, 1.0, seed=s, name=n, by=b, status=st): (n, b, st)
           for s, n, b, st in ((2, "crane-b", "bob", "aborted"), (3, "press-a", "bob", "complete"))}
    assert hil("--store", str(store), "lab", "push", "--all", "--to", lab.url, key=lab.key).exit_code == 0

    def found(*args: str) -> set[str]:
        res = hil("--store", lab.url, "sessions", "--json", *args, key=lab.key)
        assert res.exit_code == 0, res.output
        return {row["id"] for row in json.loads(res.output)} & set(ids)

    assert found() == set(ids)
    assert found("--rig", "crane-b") == {s for s, v in ids.items() if v[0] == "crane-b"}
    assert found("--status", "complete", "--by", "bob") == {s for s, v in ids.items() if v[2] == "complete"}
    started = [SessionReader(store).get_session(s).started for s in ids]
    since = datetime.fromtimestamp(min(started) - 1).isoformat(timespec="seconds")
    until = datetime.fromtimestamp(max(started) + 1).isoformat(timespec="seconds")
    assert found("--since", since, "--until", until) == set(ids)
    assert found("--until", since) == set() and found("--since", until) == set()
    res = hil("--store", lab.url, "sessions", "--param", "k5=3:1", key=lab.key)
    assert res.exit_code == 2 and "LO <= HI" in res.output


def test_an_unreachable_lab_and_a_wrong_key_are_one_line_and_mark_nothing(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 1.0)
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    res = hil("--store", str(store), "lab", "push", sid, "--to", dead, key=lab.key)
    assert res.exit_code == 1 and "unreachable" in res.output and "retry later" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key="x" * 32)
    assert res.exit_code == 1 and "refused the key" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = hil("--store", lab.url, "sessions", key="y" * 32)
    assert res.exit_code == 1 and "refused the key" in res.output
    for bad in ("soon", "0", "-5", "nan"):  # the probe's wait from the environment: seconds, or one line
        res = CliRunner(env={"HIL_LAB_KEY": lab.key, "HIL_LAB_TIMEOUT": bad}).invoke(
            main, ["--store", str(store), "lab", "push", sid, "--to", lab.url])
        assert res.exit_code == 1 and "$HIL_LAB_TIMEOUT must be the seconds" in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert replicas(store) == {}


def test_a_corrupt_local_session_is_refused_and_nothing_of_it_reaches_the_lab(lab, tmp_path):
    import sqlite3

    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 2.0)
    with sqlite3.connect(store) as db:  # one frame of the last stream loses half its payload
        db.execute("UPDATE frames SET payload = substr(payload, 1, 100) WHERE rowid = "
                   "(SELECT MAX(rowid) FROM frames WHERE session_id=?)", (sid,))
    res = hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key)
    assert res.exit_code == 1 and "corrupt" in res.output and "not pushed" in res.output
    assert not (lab.data / "data" / sid).exists()
    with LabReader(lab.url, lab.key) as rem:
        assert sid not in rem.root
    assert replicas(store) == {}


def test_a_lab_config_table_is_typed_and_checked(tmp_path):
    from daq.rigs.config import load_config

    text = (ROOT / "configs" / "press-sim.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text + '\n[lab]\nurl = "http://127.0.0.1:8000"\nkey_file = "lab.key"\n')
    assert load_config(good)["lab"] == {"url": "http://127.0.0.1:8000", "key_file": str(tmp_path / "lab.key")}
    bad = tmp_path / "bad.toml"
    bad.write_text(text + '\n[lab]\nurl = "ftp://x"\nkeyfile = "k"\n')
    res = hil("check", str(bad))
    assert res.exit_code == 1 and "[lab]" in res.output and "Traceback" not in res.output


def test_window_read_fetches_only_the_window(lab, tmp_path):
    """10 s of a 30-minute session: the bytes on the wire are those of the window plus a few short reads of
    the time axis that find its edges, not the session's."""
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 1800.0, rate=200.0)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    with LabReader(lab.url, lab.key) as rem:
        wire = []
        hooks = rem.root.context.http_client.event_hooks
        hooks["response"] = [*hooks.get("response", []),
                             lambda r: (r.read(), wire.append(r.num_bytes_downloaded))]
        rem.get_session(sid)
        wire.clear()
        w = rem.read_window(sid, "press.force", T0 + 900, T0 + 910)
        window_bytes = sum(wire)
    assert len(w) == 2000
    whole = 1800 * 200 * (3 + 1) * 8
    payload = 2000 * 4 * 8 + 2 * EDGE_READ * 8  # the window, one edge read each side (a steady rate)
    print(f"window read: {window_bytes} B on the wire in {len(wire)} responses for "
          f"{w.data.nbytes + w.t.nbytes} B of samples; whole stream {whole} B")
    assert window_bytes < payload + 20_000 and window_bytes < whole / 50


def test_a_reader_looks_up_each_node_of_a_session_once(lab, pushed):
    """Each node lookup is a request the lab's server answers with several catalogue queries; a reader
    asks for a session's container, ``about``, streams, arrays and tables once, however many windows,
    events and messages it reads (they were asked again at every read: 23 ``about`` lookups in one read
    test's work)."""
    _, sid, _ = pushed
    with LabReader(lab.url, lab.key) as rem:
        asked: list[str] = []
        hooks = rem.root.context.http_client.event_hooks
        hooks["request"] = [*hooks.get("request", []), lambda r: asked.append(r.url.path)]
        for _ in range(3):
            for stream in ("press.force", "press.sensors"):
                assert len(rem.read_window(sid, stream, T0 + 3.05, T0 + 7.5)) > 0
                rem.stream_timing(sid, stream)
            assert rem.event_counts(sid) and len(rem.events(sid, kind="step")) == 67
            assert len(list(rem.messages(sid))) == 200 + 67 * 2 + 2
            assert rem.get_session(sid).id == sid
    lookups = Counter(path for path in asked if "/metadata/" in path or "/table/" in path)
    assert {f"/api/v1/metadata/{sid}/about", f"/api/v1/metadata/{sid}/press.force",
            f"/api/v1/table/partition/{sid}/events"} <= set(lookups)
    assert max(lookups.values()) == 1, {p: n for p, n in lookups.items() if n > 1}


def gappy_session(path: Path) -> str:
    """A monotonic stream whose rate is anything but steady: frames of random length at 1 kHz or 50 Hz,
    a gap of an hour a third of the way in, and a timestamped stream with random spacing (seeded)."""
    rng = np.random.default_rng(11)
    with SessionStore(path) as store:
        sid = store.create_session("crane", {"rig": {"kind": "crane", "name": "crane-g"}})
        t = u = T0
        for k in range(300):
            n, dt = int(rng.integers(20, 400)), (1e-3 if k % 7 else 2e-2)
            store.append(sid, Frame("crane.trace", k, t, dt, ["x"], ["m"], rng.normal(size=(n, 1))))
            t += n * dt + (3600.0 if k == 100 else 0.0)
            ts = u + np.cumsum(rng.exponential(0.01, 100))
            store.append(sid, Frame("crane.stamps", k, float(ts[0]), None, ["y"], ["m"],
                                    rng.normal(size=(100, 1)), timestamps=ts))
            u = float(ts[-1]) + (3600.0 if k == 100 else 0.0)
        store.finish(sid, "complete")
    return sid


def test_window_edges_are_found_on_an_unsteady_time_axis_as_the_local_store_finds_them(lab, tmp_path):
    """The edge search guesses from the times at its bounds and halves them every other read: windows
    anywhere (in the gap, on a sample's own time, from before the start to the last sample) read from the
    lab as the local store reads them, with a few reads each (the search itself, exhaustively:
    tests/test_lab_edges.py)."""
    store = tmp_path / "hil.sqlite"
    sid = gappy_session(store)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    rng = np.random.default_rng(5)
    with SessionReader(store) as loc, LabReader(lab.url, lab.key) as rem:
        for stream in ("crane.trace", "crane.stamps"):
            t = loc.read_stream(sid, stream).t
            assert len(t) > 10 * EDGE_READ
            gap = float(t[np.argmax(np.diff(t))]) + 1800.0
            edges = [*rng.uniform(t[0], t[-1], 2), gap, *rng.choice(t, 1), t[0] - 1, t[-1]]
            for a, b in zip(edges[::2], edges[1::2], strict=True):
                a, b = min(a, b), max(a, b)
                reads = count_downloads(rem.root)
                w, v = loc.read_window(sid, stream, a, b), rem.read_window(sid, stream, a, b)
                assert (w.start, len(w)) == (v.start, len(v)), (stream, a, b)
                assert np.array_equal(w.t, v.t) and np.array_equal(w.data, v.data)
                assert len(reads) <= 2 * (2 * np.log2(len(t) / EDGE_READ) + 2) + 2, (len(reads), stream)


def count_downloads(root) -> list[int]:
    """Body bytes of every response the client ``root`` receives from now on."""
    wire: list[int] = []
    hooks = root.context.http_client.event_hooks
    hooks["response"] = [*hooks.get("response", []),
                         lambda r: (r.read(), wire.append(r.num_bytes_downloaded))]
    return wire


def test_a_push_is_verified_by_the_server_without_downloading_the_samples(lab, tmp_path):
    """Each block is confirmed by the server's own hash of what it stored (a 304, no body) and the
    row counts and digests are read from the nodes' structure and metadata: the push downloads metadata
    and the two small tables, not the samples (reading the copy back downloaded all of them)."""
    from daq.lab.client import push_structure_clients
    from daq.lab.connect import open_lab
    from daq.lab.marks import Marks
    from daq.lab.push import Pusher

    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 120.0)  # press.force: 120,000 samples
    root = open_lab(lab.url, lab.key, push_structure_clients())
    wire = count_downloads(root)
    with SessionReader(store) as reader, Marks(store) as marks:
        result = Pusher(root, lab.url, reader, marks).push(sid)
    samples = 120_000 * (1 + 3) * 8
    print(f"push of {result.bytes_sent} B downloaded {sum(wire)} B in {len(wire)} responses")
    assert result.state == "pushed" and replicas(store) == {sid: [lab.url]}
    assert sum(wire) < samples / 10
    with LabReader(lab.url, lab.key) as rem, SessionReader(store) as loc:  # and the copy is whole
        a, b = rem.read_stream(sid, "press.force"), loc.read_stream(sid, "press.force")
        assert np.array_equal(a.t, b.t) and np.array_equal(a.data, b.data)
        meta = rem.root[sid]["press.force"]["data"].metadata
        assert meta["rows"] == 120_000 and meta["sha256"] == hashlib.sha256(b.data.tobytes()).hexdigest()


def test_the_lab_confirms_a_block_by_its_own_hash_and_a_wrong_block_is_caught(lab, tmp_path):
    from daq.lab.client import push_structure_clients
    from daq.lab.connect import open_lab

    store = tmp_path / "hil.sqlite"
    sid = make_session(store, 2.0)
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    root = open_lab(lab.url, lab.key, push_structure_clients())
    arr = root[sid]["press.force"]["data"]
    good = SessionReader(store).read_stream(sid, "press.force").data
    wire = count_downloads(root)
    assert arr.block_matches(good, (0, 0)) and wire == [0]  # a 304: the server's hash, nothing downloaded
    assert arr.block_matches(good, (0, 0), token="another-hash") and wire[-1] == good.nbytes  # compared here
    bad = good.copy()
    bad[1234, 2] = np.nextafter(bad[1234, 2], np.inf)  # one sample, one unit in the last place
    arr.write_block(bad, (0, 0))
    assert not arr.block_matches(good, (0, 0))
    arr.write_block(good, (0, 0))
    assert arr.block_matches(good, (0, 0))


def test_hil_serve_lists_whether_a_session_is_in_the_lab_with_a_link_to_it(lab, tmp_path):
    import httpx

    from tests.serve_fixtures import ServerThread

    store = tmp_path / "store" / "hil.sqlite"
    store.parent.mkdir()
    pushed_id, local_id = make_session(store, 1.0, seed=5), make_session(store, 1.0, seed=6)
    assert hil("--store", str(store), "lab", "push", pushed_id, "--to", lab.url, key=lab.key).exit_code == 0
    (tmp_path / "configs").mkdir()
    srv = ServerThread(tmp_path / "configs", store, tmp_path / "tokens").start()
    try:
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token}"}) as http:
            rows = {r["id"]: r for r in http.get("/api/sessions").raise_for_status().json()}
            page = http.get("/").text + http.get("/static/app.js").text
    finally:
        srv.stop()
    link = f"{lab.url}/lab/sessions/{pushed_id}"
    assert rows[pushed_id]["lab"] == [{"url": lab.url, "link": link}] and rows[local_id]["lab"] == []
    assert ">lab</th>" in page and "labCell(s.lab)" in page
    answer = httpx.get(link, timeout=60)  # the lab's page for the session (it asks for the key itself)
    assert answer.status_code == 200 and "text/html" in answer.headers["content-type"]
    assert lab.key not in link


def test_the_shipped_tiled_configs_for_a_lab_of_many_rigs_parse_with_tileds_own_schema(monkeypatch):
    """configs/lab/: PostgreSQL catalogue with arrays in a folder, or on an S3-compatible store (served as
    shipped in test_lab_s3; `hil lab serve --catalog` runs the same catalogue on a real PostgreSQL in
    test_lab_faults)."""
    from tiled.config import parse_configs

    from daq.lab.people_server import authentication

    env = {"HIL_LAB_AUTH_DB": "sqlite+aiosqlite:////srv/lab/auth.db",
           "HIL_LAB_CATALOG": "postgresql+asyncpg://hil@db:5432/lab",
           "HIL_LAB_ARRAYS": "/srv/lab/data", "HIL_LAB_S3": "https://s3.lab:9000/hil-lab",
           "HIL_LAB_FOLDER": "/srv/lab/tables", "AWS_ACCESS_KEY_ID": "id",
           "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    storages = {}
    for name in ("lab-postgres.yml", "lab-postgres-s3.yml"):
        text = (ROOT / "configs" / "lab" / name).read_text()
        assert "s3cr3t-value" not in text  # credentials only from the environment
        cfg = parse_configs(ROOT / "configs" / "lab" / name)
        # people with keys of their own, as `hil lab serve` runs Tiled: no single shared key
        assert cfg.authentication.single_user_api_key is None
        assert cfg.authentication.providers == authentication().providers
        assert cfg.authentication.allow_anonymous_access is False
        assert cfg.database.uri == env["HIL_LAB_AUTH_DB"] and cfg.database.init_if_not_exists is False
        (tree,) = cfg.trees
        assert tree.path == "/" and tree.args["uri"] == env["HIL_LAB_CATALOG"]
        storages[name] = tree.args["writable_storage"]
    assert storages["lab-postgres.yml"] == ["/srv/lab/data"]
    s3, folder = storages["lab-postgres-s3.yml"]
    assert (s3["uri"], s3["provider"], folder) == (env["HIL_LAB_S3"], "s3", "/srv/lab/tables")
    assert s3["config"]["secret_access_key"] == "s3cr3t-value"


def test_lab_key_init_makes_the_auth_database_and_one_first_admin_key(tmp_path):
    """`hil lab key init`: what `hil lab serve` does first, for a lab served with `tiled serve config`."""
    bad = hil("lab", "key", "init", "--auth-db", "not a uri", "--key-file", str(tmp_path / "a.key"))
    assert bad.exit_code == 1 and len(bad.output.strip().splitlines()) == 1
    assert "--auth-db takes" in bad.output
    uri = f"sqlite:///{tmp_path / 'auth.db'}"
    made = hil("lab", "key", "init", "--auth-db", uri, "--key-file", str(tmp_path / "a.key"))
    assert made.exit_code == 0 and made.output.strip() == f"admin key written to {tmp_path / 'a.key'}"
    assert stat.S_IMODE((tmp_path / "auth.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a.key").stat().st_mode) == 0o600
    key = (tmp_path / "a.key").read_text().strip()
    assert len(key) == 72 and key not in made.output
    again = hil("lab", "key", "init", "--auth-db", uri, "--key-file", str(tmp_path / "b.key"))
    assert again.exit_code == 0 and not (tmp_path / "b.key").exists()


def test_demo_given_a_lab_says_in_one_line_that_it_records_locally(lab):
    """`hil demo` records a session; a lab is only read through --store URL (written by `hil lab push`).
    Found by mypy (issue 30): the demo took the lab's reader as its store and failed on the first write."""
    res = hil("--store", lab.url, "demo", "--duration", "0.1", key=lab.key)
    assert res.exit_code == 2, res.output
    assert "hil demo records into a local store" in res.output and "Traceback" not in res.output
