"""Live sessions in the lab (issue 40) against a real `hil lab serve`: a session streams into its container
while it records (a writer appending to a real store, the forwarder as the process a run starts), readers
see it grow and never more than the store holds, and at its end the same container is pushed verified."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from daq.bus.frames import Event, Frame
from daq.lab import layout
from daq.lab.checks import frame_rows
from daq.lab.layout import frames_rows
from daq.lab.live import live_rows
from daq.lab.marks import replicas
from daq.lab.reader import LabReader
from daq.store.read_write import SessionStore
from daq.store.reader import SessionReader
from daq.store.records import StreamInfo
from tests.polling import poll_until
from tests.test_lab import ROOT, T0, LabServer, hil, shared_lab
from tests.test_lab_faults import press_config, run_process

RATE = 2000.0  # samples/s of the regular stream
N = 100  # samples a frame


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    """The lab server test_lab uses too (one per pytest session)."""
    yield from shared_lab(request, tmp_path_factory)


class Recording:
    """A session being recorded into a real store: frames of a 3-channel stream at RATE and a bursty
    timestamped one, events, committed as a run commits them."""

    def __init__(self, path: Path, seed: int = 3, name: str = "press-a"):
        self.rng = np.random.default_rng(seed)
        self.store = SessionStore(path)
        self.sid = self.store.create_session("press", {"rig": {"kind": "press", "name": name}}, {"dev": {}})
        self.store.append(self.sid, Event("press.run", "started", 0, T0, {"by": "alice"}))
        self.k = 0

    def record(self, frames: int) -> None:
        for _ in range(frames):
            k = self.k
            t = T0 + k * N / RATE
            self.store.append(self.sid, Frame("press.force", k, t, 1 / RATE, ["force_cmd", "force", "p"],
                                              ["N", "N", "Pa"], self.rng.normal(size=(N, 3))))
            if k % 3 == 0:
                self.store.append(self.sid, Frame("press.sensors", k // 3, t, None, ["D_vertical"], ["m"],
                                                  self.rng.normal(size=(7, 1)).astype("<f4"),
                                                  timestamps=t + np.arange(7) * 5e-4))
                self.store.append(self.sid, Event("press.online", "estimate", k // 3, t,
                                                  {"parameters": ["k5"], "values": [1.0 + k], "used": k}))
            self.k += 1
        self.store.flush()

    def end(self, status: str = "complete", reason: str | None = None) -> None:
        self.store.append(self.sid, Event("press.plan", "plan_outcome", 1, T0 + self.k * N / RATE,
                                          {"safe": True}))
        self.store.finish(self.sid, status, reason)
        self.store.close()


def forwarder(store: Path, sid: str, url: str, key: str) -> subprocess.Popen:
    """The forwarder as `hil run` starts it (daq.lab.live.start_live)."""
    return subprocess.Popen([sys.executable, "-m", "daq.lab.live", str(store), sid, url], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": key})


def forwarded_in_process(store: Path, lab, frames: int = 30) -> Recording:
    """A recording of ``frames`` frames, streamed into ``lab`` by a forwarder in this process until the lab
    holds all of it (the recording goes on, unended)."""
    from daq.lab.live import Forwarder

    rec = Recording(store)
    rec.record(frames)
    with SessionReader(store, recover=False) as r:
        fwd = Forwarder(store, rec.sid, lab.url, lab.key)
        assert any(fwd.step(r, r.get_session(rec.sid)) for _ in range(20))
    return rec


@functools.lru_cache(maxsize=32)
def lab_client(url: str, key: str):
    """One Tiled client per lab and key for this worker's probes: a new client asks the server ~5 times
    before the first lookup (a probe that made one cost the server ~210 ms of CPU and this process ~100 ms;
    polled every 0.2 s, that was a core)."""
    from tiled.client import from_uri

    return from_uri(url, api_key=key)


def lab_node(url: str, key: str, sid: str):
    try:
        return lab_client(url, key)[sid]
    except KeyError:
        return None


def lab_rows(url: str, key: str, sid: str, stream: str) -> int:
    """Rows of a stream's data array in the lab now (0 while it has none): one request (~35 ms of the
    server's CPU)."""
    try:
        return lab_client(url, key)[sid, stream, layout.DATA].shape[0]
    except KeyError:
        return 0


def store_rows(store: Path, sid: str, stream: str) -> int:
    with SessionReader(store, recover=False) as r:
        return r.get_session(sid).streams[stream].n_samples


def assert_verified_as_local(url: str, key: str, store: Path, sid: str, status: str = "complete") -> None:
    node = lab_node(url, key, sid)
    meta = layout.plain(node.metadata)
    assert meta["replication"]["state"] == layout.VERIFIED and meta["status"] == status
    assert "live" not in meta  # the final metadata is the push's
    with SessionReader(store, recover=False) as r:
        info = r.get_session(sid)
        for name, si in info.streams.items():
            if si.type != "frame":
                continue
            local = r.read_stream(sid, name)
            np.testing.assert_array_equal(node[name][layout.DATA].read(), local.data)
            np.testing.assert_array_equal(node[name][layout.TIME].read(), local.t)
            assert meta["streams"][name]["n_samples"] == si.n_samples
    assert sid in replicas(store)


def test_live_rows_hold_about_half_a_second_at_the_streams_rate():
    si = StreamInfo("s", "frame", ["a", "b", "c"], ["N", "N", "Pa"], "float64", 1e-4, 0, 0, None, None, True)
    assert live_rows(si, 0, None, None) == 4096  # 10 kHz: 0.41 s
    ts = StreamInfo("s", "frame", ["a"], ["m"], "float32", None, 0, 0, None, None, True)
    assert live_rows(ts, 101, 0.0, 10.0) == 4  # 10 samples/s
    assert live_rows(ts, 2, 0.0, 1e-9) == layout.chunk_rows(ts)  # never more than a final block


@pytest.mark.timeout(300)
def test_a_running_session_grows_in_the_lab_and_ends_verified_in_the_same_container(lab, tmp_path):
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, lab.url, lab.key)
    try:
        rec.record(20)
        listed = lambda: json.loads(hil("--store", lab.url, "sessions", "--status", "running", "--json",  # noqa: E731
                                        key=lab.key).output)
        poll_until(lambda: rec.sid in [row["id"] for row in listed()], timeout=60, period=0.5)
        watcher = subprocess.Popen([sys.executable, "-m", "daq.cli.main", "--store", lab.url, "watch",
                                    rec.sid, "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": lab.key})
        node = lab_node(lab.url, lab.key, rec.sid)
        meta = layout.plain(node.metadata)
        assert meta["status"] == "running" and meta["replication"]["state"] == layout.LIVE
        assert meta["rig"]["name"] == "press-a" and meta["kind"] == "press"
        assert layout.plain(node[layout.ABOUT].metadata)["config"]  # layout 3: the config in its about child
        seen = []
        for _ in range(4):  # it grows while it records; never beyond what the store holds
            rec.record(10)
            poll_until(lambda: lab_rows(lab.url, lab.key, rec.sid, "press.force") >= rec.k * N, timeout=60,
                       period=0.1)
            in_lab = lab_rows(lab.url, lab.key, rec.sid, "press.force")
            assert in_lab <= store_rows(store, rec.sid, "press.force")
            seen.append(in_lab)
        assert seen == sorted(seen) and len(set(seen)) == 4
        node = lab_node(lab.url, lab.key, rec.sid)
        t = node["press.force"][layout.TIME].read()
        with SessionReader(store, recover=False) as r:
            np.testing.assert_array_equal(t, r.read_range(rec.sid, "press.force", 0, len(t)).t)
        events = node[layout.EVENTS].read()
        assert "estimate" in set(events["kind"])
        rec.record(5)
        rec.end()
        out, _ = fwd.communicate(timeout=180)
        assert fwd.returncode == 0 and "pushed and verified" in out, out
        assert_verified_as_local(lab.url, lab.key, store, rec.sid)
        assert rec.sid not in [row["id"] for row in listed()]
        lines = [json.loads(line) for line in watcher.communicate(timeout=120)[0].splitlines()]
        assert lines[-1] == {"session": rec.sid, "status": "complete", "reason": None}  # it saw the end
        used = [line["used"] for line in lines[:-1]]
        assert used and used == sorted(used) and set(used) <= set(range(0, rec.k, 3))  # estimates, in order
        again = hil("--store", str(store), "lab", "push", rec.sid, "--to", lab.url, key=lab.key)
        assert "already in the lab, verified" in again.output, again.output
    finally:
        for proc in (fwd, locals().get("watcher")):
            if proc is not None and proc.poll() is None:
                proc.kill()


@pytest.mark.slow(reason="a simulated press run (about 15 s) with a Tiled server")
@pytest.mark.timeout(600)
def test_a_press_run_with_lab_is_listed_running_grows_and_ends_complete_and_verified(lab, tmp_path):
    """`hil run` with [lab]: listed running while it records, its force stream growing in the lab; at the
    end the forwarder's push marks the same container complete and verified, every sample in it."""
    store = tmp_path / "hil.sqlite"
    run = run_process(store, press_config(tmp_path, lab))
    try:
        sid = wait_for(lambda: _store_ids(store), timeout=120)[0]
        wait_for(lambda: sid in _running_ids(lab), timeout=60)
        grown = []
        while run.poll() is None and len(set(grown)) < 3:
            rows = lab_rows(lab.url, lab.key, sid, "press.force")
            assert rows <= store_rows(store, sid, "press.force")
            grown.append(rows)
            time.sleep(0.5)
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out
        wait_for_the_forwarders_verified_push(tmp_path / "lab-live.log")
        assert_verified_as_local(lab.url, lab.key, store, sid)
        # it grew while the run recorded: part of the stream in the lab before the run ended, never less later
        # (three values asked for two growths within the run's last seconds, which a busy lab may not show:
        # [0, 0, 991, 991, 991] in a loaded CI run whose session became visible late)
        final = store_rows(store, sid, "press.force")
        assert grown == sorted(grown) and any(0 < rows < final for rows in grown), (grown, final)
    finally:
        if run.poll() is None:
            run.kill()


def wait_for_the_forwarders_verified_push(log: Path) -> None:
    """Until the run's forwarder logs its verified push (its log's tail as the failure otherwise)."""
    try:
        wait_for(lambda: log.exists() and "pushed and verified" in log.read_text(), timeout=180)
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:] if log.exists() else f"no {log.name}") from None


def wait_for(probe, timeout: float, period: float = 0.25):
    """What ``probe()`` returns once it is truthy (AssertionError after ``timeout`` s)."""
    end = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(period)
    return found


def _store_ids(store: Path) -> list[str]:
    """The sessions of a rig's store (none while it is not made yet)."""
    if not store.exists():
        return []
    try:
        with SessionReader(store, recover=False) as r:
            return [i.id for i in r.list_sessions()]
    except Exception:  # noqa: BLE001 - the run is making it
        return []


def _running_ids(lab) -> list[str]:
    res = hil("--store", lab.url, "sessions", "--status", "running", "--json", key=lab.key)
    return [row["id"] for row in json.loads(res.output)] if res.exit_code == 0 else []


def free_port() -> int:
    """A port nothing listens on (bound and let go: the lab started on it later gets it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finished(fwd: subprocess.Popen) -> str:
    """The forwarder's output once it ended with the verified push (stuck: its threads' stacks)."""
    try:
        out, _ = fwd.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        fwd.send_signal(signal.SIGUSR1)  # faulthandler: where it is
        time.sleep(2)
        fwd.kill()
        raise AssertionError(f"the forwarder did not end: {fwd.communicate()[0][-6000:]}") from None
    assert fwd.returncode == 0 and "pushed and verified" in out, out
    return out


@pytest.mark.slow(reason="a Tiled server of its own, started while a session records")
@pytest.mark.timeout(600)
def test_a_lab_down_at_the_start_gets_the_whole_session_once_it_is_up(tmp_path):
    port = free_port()
    server = LabServer(tmp_path / "lab", port=port)  # made once (its key), then down when the run starts
    url, key = server.url, server.key
    server.stop()
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, url, key)
    try:
        rec.record(20)
        time.sleep(3)  # the forwarder tries, finds nothing, and is behind
        rec.record(20)
        assert fwd.poll() is None
        server = LabServer(tmp_path / "lab", port=port)
        poll_until(lambda: lab_rows(url, key, rec.sid, "press.force") >= rec.k * N, timeout=120, period=0.2)
        rec.end()
        finished(fwd)
        assert_verified_as_local(url, key, store, rec.sid)
    finally:
        if fwd.poll() is None:
            fwd.kill()
        server.stop()


@pytest.mark.slow(reason="a Tiled server of its own, killed and started again while a session records")
@pytest.mark.timeout(600)
def test_a_lab_killed_mid_run_is_caught_up_when_it_is_back(tmp_path):
    server = LabServer(tmp_path / "lab")
    port = int(server.url.rsplit(":", 1)[1])
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, server.url, server.key)
    try:
        rec.record(20)
        poll_until(lambda: lab_rows(server.url, server.key, rec.sid, "press.force") >= rec.k * N, timeout=120,
                   period=0.2)
        server.stop(signal.SIGKILL)
        rec.record(40)  # recorded while the lab is gone
        assert fwd.poll() is None  # behind, waiting for it
        server = LabServer(tmp_path / "lab", port=port)
        rec.record(10)
        poll_until(lambda: lab_rows(server.url, server.key, rec.sid, "press.force") >= rec.k * N, timeout=120,
                   period=0.2)
        rec.end()
        finished(fwd)
        assert_verified_as_local(server.url, server.key, store, rec.sid)
    finally:
        if fwd.poll() is None:
            fwd.kill()
        server.stop()


WRITER = """
import sys, time
import numpy as np
from daq.bus.frames import Event, Frame
from daq.store.read_write import SessionStore
store = SessionStore(sys.argv[1])
sid = store.create_session("press", {"rig": {"kind": "press", "name": "press-k"}}, {})
print(sid, flush=True)
rng = np.random.default_rng(5)
k = 0
while True:  # records until it is killed, as a rig PC that dies
    frame = Frame("press.force", k, 1.7e9 + k * 0.05, 5e-4, ["f"], ["N"], rng.normal(size=(100, 1)))
    store.append(sid, frame)
    k += 1
    if k % 5 == 0:
        store.flush()
        time.sleep(0.05)
"""


@pytest.mark.slow(reason="a Tiled server of its own, a recording killed with its forwarder")
@pytest.mark.timeout(600)
def test_a_rig_killed_mid_run_is_marked_incomplete_by_the_lab_and_completed_by_the_next_push(tmp_path):
    server = LabServer(tmp_path / "lab", env={"HIL_LAB_STALE": "3"})
    store = tmp_path / "hil.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    fwd = None
    try:
        sid = writer.stdout.readline().strip()
        fwd = forwarder(store, sid, server.url, server.key)
        poll_until(lambda: lab_rows(server.url, server.key, sid, "press.force") >= 2000, timeout=120,
                   period=0.2)
        writer.kill()  # the rig PC dies: the recording and its forwarder with it
        fwd.kill()
        writer.wait()
        fwd.wait()
        meta = lambda: layout.plain(lab_node(server.url, server.key, sid).metadata)  # noqa: E731
        poll_until(lambda: meta()["status"] == "incomplete", timeout=120, period=0.5)
        assert "stopped sending" in meta()["reason"] and meta()["replication"]["state"] == layout.LIVE
        res = hil("--store", str(store), "lab", "push", "--pending", "--to", server.url, key=server.key)
        assert res.exit_code == 0 and f"{sid}: pushed and verified" in res.output, res.output
        assert_verified_as_local(server.url, server.key, store, sid, status="incomplete")
    finally:
        for proc in (writer, fwd):
            if proc is not None and proc.poll() is None:
                proc.kill()
        server.stop()


@pytest.mark.timeout(600)
def test_two_sessions_of_two_rigs_stream_at_once(lab, tmp_path):
    recs = [Recording(tmp_path / f"rig{i}.sqlite", seed=10 + i, name=f"press-{i}") for i in range(2)]
    fwds = [forwarder(tmp_path / f"rig{i}.sqlite", r.sid, lab.url, lab.key) for i, r in enumerate(recs)]
    try:
        for _ in range(3):
            for r in recs:
                r.record(10)
        poll_until(lambda: all(lab_rows(lab.url, lab.key, r.sid, "press.force") >= r.k * N for r in recs),
                   timeout=120, period=0.2)
        listed = json.loads(hil("--store", lab.url, "sessions", "--status", "running", "--json",
                                key=lab.key).output)
        rigs = {row["id"]: row["rig"] for row in listed}
        assert {r.sid for r in recs} <= set(rigs)
        for r in recs:
            r.end()
        for i, (r, f) in enumerate(zip(recs, fwds, strict=True)):
            finished(f)
            assert_verified_as_local(lab.url, lab.key, tmp_path / f"rig{i}.sqlite", r.sid)
    finally:
        for f in fwds:
            if f.poll() is None:
                f.kill()


@pytest.mark.slow(reason="a simulated press run (about 20 s) with its lab frozen for 8 s")
@pytest.mark.timeout(600)
def test_a_lab_frozen_for_8_s_mid_run_changes_nothing_in_the_run(lab, tmp_path):
    """SIGSTOP of the lab server for 8 s while a `hil run` with [lab] records: the run records every frame
    (no gap, nothing rejected), and at its end the lab holds it complete and verified, every sample."""
    store = tmp_path / "hil.sqlite"
    run = run_process(store, press_config(tmp_path, lab))
    try:
        sid = wait_for(lambda: _store_ids(store), timeout=120)[0]
        wait_for(lambda: sid in _running_ids(lab), timeout=60)
        wait_for(lambda: lab_rows(lab.url, lab.key, sid, "press.force"), timeout=60)
        os.kill(lab.proc.pid, signal.SIGSTOP)
        frozen_at = store_rows(store, sid, "press.force")
        time.sleep(8)
        assert store_rows(store, sid, "press.force") > frozen_at  # the recording went on meanwhile
        os.kill(lab.proc.pid, signal.SIGCONT)
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0 and f"session {sid} complete" in out, out
        with SessionReader(store, recover=False) as r:
            stats = r.get_session(sid).stats
        assert stats["gap_count"] == 0 and stats["rejected"] == 0 and stats["recorded"] == stats["received"]
        wait_for_the_forwarders_verified_push(tmp_path / "lab-live.log")
        assert_verified_as_local(lab.url, lab.key, store, sid)
    finally:
        os.kill(lab.proc.pid, signal.SIGCONT)
        if run.poll() is None:
            run.kill()


NOTEBOOK = """
import json, sys, threading, time
from tiled.client import from_uri

url, key, sid, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lab = from_uri(url, api_key=key)
while sid not in lab:  # the forwarder makes it
    time.sleep(0.2)
run = lab[sid]
while "press.force" not in run or "t" not in run["press.force"]:
    time.sleep(0.2)
    run = lab[sid]
t = run["press.force"]["t"]
rows, done = {}, threading.Event()
def on_rows(update):
    for i, value in enumerate(update.data().tolist()):
        rows[update.offset[0] + i] = value
    if len(rows) >= want:
        done.set()
sub = t.subscribe()
sub.new_data.add_callback(on_rows)
sub.start_in_thread(start=1)
print("subscribed", flush=True)
done.wait(120)
sub.disconnect()
print(json.dumps({"status": run.metadata["status"], "t": [rows[i] for i in sorted(rows)]}))
"""


@pytest.mark.timeout(300)
def test_a_notebook_with_only_the_tiled_client_follows_a_running_session_with_subscribe(lab, tmp_path):
    """docs/lab.md's lines, in a Python where hil-lab cannot be imported: every sample of the time axis
    arrives through subscribe() while the session records, equal to the store's."""
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, lab.url, lab.key)
    script = tmp_path / "follow.py"
    script.write_text(NOTEBOOK)
    want = 60 * N
    reader = subprocess.Popen([sys.executable, "-I", str(script), lab.url, lab.key, rec.sid, str(want)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rec.record(20)
        first = reader.stdout.readline().strip()
        assert first == "subscribed", (first, reader.poll() is not None and reader.communicate()[1])
        for _ in range(4):
            rec.record(10)
            time.sleep(0.5)
        out, err = reader.communicate(timeout=180)
        got = json.loads(out)
        assert got["status"] == "running"  # it followed the session while it recorded
        with SessionReader(store, recover=False) as r:
            np.testing.assert_array_equal(got["t"], r.read_range(rec.sid, "press.force", 0, want).t)
        rec.end()
        finished(fwd)
    finally:
        for proc in (fwd, reader):
            if proc.poll() is None:
                proc.kill()


@pytest.mark.timeout(300)
def test_a_viewer_follows_a_live_session_and_the_key_its_subscription_makes_reads_only(lab, tmp_path):
    """subscribe() makes a short-lived key from the person's (Tiled's ``inherit``): a viewer's holds what a
    viewer may do and nothing more (before the lab's roles it inherited Tiled's "user" role: writes and
    deletes), and revoking the viewer revokes every key of theirs."""
    from tiled.client import from_uri
    from tiled.client.utils import ClientError

    from tests.test_lab_people import add_key

    vera, _ = add_key(lab, "vera-live", "viewer", tmp_path)
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, lab.url, lab.key)
    try:
        rec.record(20)
        poll_until(lambda: lab_rows(lab.url, lab.key, rec.sid, "press.force") >= rec.k * N, timeout=60,
                   period=0.2)
        client = from_uri(lab.url, api_key=vera)
        got = []
        sub = client[rec.sid]["press.force"]["t"].subscribe()
        on_rows = got.append
        sub.new_data.add_callback(on_rows)
        sub.start_in_thread(start=1)
        rec.record(10)
        poll_until(lambda: sum(len(u.data()) for u in list(got)) >= rec.k * N, timeout=60, period=0.2)
        sub.disconnect()
        made = client.context.create_api_key(note="mine")  # what subscribe() does, kept this time
        theirs = from_uri(lab.url, api_key=made["secret"])
        assert theirs[rec.sid].metadata["id"] == rec.sid  # it reads
        with pytest.raises(ClientError, match="401"):
            theirs.create_container("not-a-session")
        with pytest.raises(ClientError, match="401"):
            theirs[rec.sid].update_metadata({"status": "tampered"})
        res = hil("lab", "key", "revoke", "vera-live", "--to", lab.url, key=lab.key)
        assert res.exit_code == 0, res.output
        with pytest.raises(Exception, match="401"):
            from_uri(lab.url, api_key=made["secret"])[rec.sid]
        rec.end()
        finished(fwd)
    finally:
        if fwd.poll() is None:
            fwd.kill()


def stream_with_its_t_only(store: Path, lab) -> Recording:
    """A recording of 30 frames whose press.force a first forwarder left in ``lab`` with its `t` array made
    and its `data` not (the state a lab gone between the two leaves)."""
    from daq.lab.live import Forwarder

    rec = Recording(store)
    rec.record(30)
    with SessionReader(store, recover=False) as r:
        info = r.get_session(rec.sid)
        first = Forwarder(store, rec.sid, lab.url, lab.key)
        first._connect(r, info)
        si = info.streams["press.force"]
        st = first._find_stream(si.name)
        st.rows = live_rows(si, si.n_samples, si.t_first, si.t_last)
        fields = {**layout.stream_node_fields(si, st.rows), "session": rec.sid, "live": True}
        st.node = first.node.create_container(si.name, metadata=fields, specs=[layout.STREAM_SPEC])
        part = r.read_range(rec.sid, si.name, 0, st.rows)
        first._array(st, layout.TIME, np.ascontiguousarray(part.t), ("sample",), {"unit": "s"})
    return rec


def the_next_forwarder_sends_every_sample(store: Path, rec: Recording, lab) -> None:
    """A new forwarder goes live; the lab's press.force then holds every recorded sample, as the store."""
    from daq.lab.live import Forwarder

    with SessionReader(store, recover=False) as r:
        second = Forwarder(store, rec.sid, lab.url, lab.key)
        done = any(second.step(r, r.get_session(rec.sid)) for _ in range(20))
        assert done and second.state == "live"
    assert lab_rows(lab.url, lab.key, rec.sid, "press.force") == 30 * N
    node = lab_node(lab.url, lab.key, rec.sid)
    with SessionReader(store, recover=False) as r:
        local = r.read_stream(rec.sid, "press.force").data
    np.testing.assert_array_equal(node["press.force"][layout.DATA].read(), local)


@pytest.mark.timeout(300)
def test_a_stream_left_with_its_t_but_not_its_data_is_completed_by_the_next_forwarder(lab, tmp_path):
    """The lab went away between making a stream's `t` and its `data`: the forwarder that comes next makes
    the missing one and sends every sample (before: every pass failed on the missing array, silently)."""
    store = tmp_path / "hil.sqlite"
    rec = stream_with_its_t_only(store, lab)  # then gone
    the_next_forwarder_sends_every_sample(store, rec, lab)
    rec.end()


@pytest.mark.slow(reason="a Tiled server of its own, killed and started again")
def test_an_array_folder_a_killed_lab_left_without_its_node_is_set_aside_when_it_starts(tmp_path):
    """Tiled makes a new array's folder before it commits the array's node: a lab killed between the two kept
    the folder, and every forwarder after it got a 500 for ever making that array ("An array exists in
    store"; found when test_a_lab_killed_mid_run_is_caught_up_when_it_is_back hung). The server sets such a
    folder aside when it starts, and the next forwarder makes the array and sends every sample."""
    data = tmp_path / "lab"
    server = LabServer(data)
    store = tmp_path / "hil.sqlite"
    rec = stream_with_its_t_only(store, server)
    server.stop(signal.SIGKILL)
    folder = data / "data" / rec.sid / "press.force"
    shutil.copytree(folder / layout.TIME, folder / layout.DATA)  # `data`'s folder made, its node never
    planted = sorted(str(p.relative_to(folder / layout.DATA)) for p in (folder / layout.DATA).rglob("*"))
    server = LabServer(data)
    try:
        the_next_forwarder_sends_every_sample(store, rec, server)
        aside = sorted((data / "orphans").glob(f"*/{rec.sid}/press.force/*"))
        assert [p.name for p in aside] == [layout.DATA]
        assert sorted(str(p.relative_to(aside[0])) for p in aside[0].rglob("*")) == planted  # kept whole
        assert f"set aside {folder / layout.DATA}" in (tmp_path / "lab.log").read_text()
    finally:
        rec.end()
        server.stop()


@pytest.mark.timeout(420)
def test_a_session_that_ends_before_its_first_live_block_is_pushed_verified(lab, tmp_path):
    """A session shorter than a stream's first live block (100 samples of a 512-row block at 2 kHz): its
    arrays never appeared live, and the forwarder still ends with the verified push (before: it waited for
    that block for ever)."""
    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    fwd = forwarder(store, rec.sid, lab.url, lab.key)
    try:
        rec.record(1)
        poll_until(lambda: rec.sid in (lab_node(lab.url, lab.key, rec.sid) and [rec.sid] or []), timeout=120,
                   period=0.2)
        rec.end()
        finished(fwd)
        assert_verified_as_local(lab.url, lab.key, store, rec.sid)
    finally:
        if fwd.poll() is None:
            fwd.kill()


@pytest.mark.timeout(300)
def test_a_reader_sees_no_row_of_a_live_array_before_its_first_block_is_written(lab, tmp_path, monkeypatch):
    """What a plain Tiled reader gets of a stream's `t` and `data` at the moment the forwarder has made them
    and not yet written them (where a lab that goes away leaves them): no rows. Before, the arrays were
    declared with their first block's shape and read as that many rows of zeros, samples the store never
    held. Every row a reader gets, then and after each write, is the store's."""
    from tiled.client import from_uri

    from daq.lab.live import Forwarder
    from daq.lab.live_client import _LiveArrayMixin

    store = tmp_path / "hil.sqlite"
    rec = Recording(store)
    rec.record(30)
    reader = from_uri(lab.url, api_key=lab.key)
    seen: list[tuple[str, int, np.ndarray]] = []  # (array path, its row offset written next, what was read)
    put_rows = _LiveArrayMixin.put_rows

    def read_then_put_rows(self, values, offset):
        sid, stream, key = self.path_parts[-3:]
        seen.append((f"{stream}/{key}", offset, reader[sid][stream][key].read()))
        return put_rows(self, values, offset)

    monkeypatch.setattr(_LiveArrayMixin, "put_rows", read_then_put_rows)
    with SessionReader(store, recover=False) as r:
        fwd = Forwarder(store, rec.sid, lab.url, lab.key)
        assert any(fwd.step(r, r.get_session(rec.sid)) for _ in range(20))
        local = {name: r.read_stream(rec.sid, name) for name in ("press.force", "press.sensors")}
    firsts = {path: rows for path, offset, rows in seen if offset == 0}
    assert set(firsts) == {f"{name}/{key}" for name in local for key in (layout.TIME, layout.DATA)}
    assert all(len(rows) == 0 for rows in firsts.values()), {p: rows[:3] for p, rows in firsts.items()}
    assert len(seen) > len(firsts)  # reads between later writes too, each holding rows
    for path, _, rows in seen:  # whatever was there before a write: the store's own rows
        stream, key = path.split("/")
        want = local[stream].t if key == layout.TIME else local[stream].data
        np.testing.assert_array_equal(rows, want[:len(rows)])
    assert lab_rows(lab.url, lab.key, rec.sid, "press.force") == 30 * N
    rec.end()


@pytest.mark.timeout(300)
def test_the_final_push_verifies_what_the_forwarder_wrote_in_place_and_deletes_nothing(lab, tmp_path,
                                                                                       monkeypatch):
    """The live arrays and tables are the final ones: the verified push checks them by their hashes,
    rewrites a block the lab holds wrong, grows the arrays by what the forwarder had not sent (never
    showing a row the store lacks), and deletes none.
    Before, it deleted every live array and table and wrote them again, so a reader following the
    session lost its streams, or read zeros, while the push ran."""
    from daq.lab import push as push_module
    from daq.lab.replicate import push_sessions
    from tests.test_lab import hil

    deleted: list[str] = []
    delete = push_module.delete

    def recorded_delete(parent, key, node):
        deleted.append(key)
        delete(parent, key, node)

    monkeypatch.setattr(push_module, "delete", recorded_delete)
    store = tmp_path / "hil.sqlite"
    rec = forwarded_in_process(store, lab)
    live = {s: lab_node(lab.url, lab.key, rec.sid)[s].metadata["chunk_rows"] for s in ("press.force",)}
    assert lab_rows(lab.url, lab.key, rec.sid, "press.force") == 30 * N
    from daq.lab.client import push_structure_clients
    from daq.lab.connect import open_lab

    spoilt = open_lab(lab.url, lab.key, push_structure_clients())[rec.sid]["press.force"][layout.DATA]
    spoilt.write_block(np.zeros((live["press.force"], 3)), (1, 0))  # a block the lab holds wrong
    rec.record(17)  # recorded after the forwarder's last pass: the push sends it, growing the live arrays
    rec.end()
    results = push_sessions(store, lab.url, lab.key, [rec.sid], say=lambda line: None, lock_held=True)
    assert [r.state for r in results] == ["pushed"], [r.line() for r in results]
    assert deleted == []
    assert_verified_as_local(lab.url, lab.key, store, rec.sid)
    node = lab_node(lab.url, lab.key, rec.sid)
    rows = node["press.force"].metadata["chunk_rows"]
    assert rows == live["press.force"] < layout.chunk_rows(StreamInfo(
        "s", "frame", ["a", "b", "c"], ["N", "N", "Pa"], "float64", 1 / RATE, 0, 0, None, None, True))
    assert node["press.force"][layout.DATA].structure().chunks[0][0] == rows  # the live blocks, kept
    res = hil("lab", "verify", rec.sid, "--to", lab.url, key=lab.key)  # the recorded digests hold
    assert res.exit_code == 0, res.output
    with SessionReader(store, recover=False) as loc, LabReader(lab.url, lab.key) as rem:  # read as any other
        for stream in ("press.force", "press.sensors"):
            for size in (1000, 1 << 15, 1 << 62):  # less than a live block, several, all
                mine = [(c.start, c.t, c.data) for c in loc.iter_stream(rec.sid, stream, size)]
                theirs = [(c.start, c.t, c.data) for c in rem.iter_stream(rec.sid, stream, size)]
                assert len(mine) == len(theirs)
                for (s0, t0, d0), (s1, t1, d1) in zip(mine, theirs, strict=True):
                    assert s0 == s1 and np.array_equal(t0, t1) and np.array_equal(d0, d1)
            a, b = T0 + 0.3, T0 + 1.7
            w, v = loc.read_window(rec.sid, stream, a, b), rem.read_window(rec.sid, stream, a, b)
            assert w.start == v.start and np.array_equal(w.data, v.data)
    again = push_sessions(store, lab.url, lab.key, [rec.sid], say=lambda line: None)
    assert [r.state for r in again] == ["already"] and deleted == []


@pytest.mark.timeout(300)
def test_a_live_table_and_chunk_a_killed_forwarder_left_broken_are_written_again_by_the_push(lab, tmp_path):
    """A forwarder killed between making a live CSV table and writing it leaves a file the lab cannot read
    (it answers 500), and one killed mid-write a short array chunk. The push that completes the session
    writes those again instead of failing on reading them (CI saw `500 ... /table/full/<id>/press.force/
    frames` after a rig killed mid-run)."""
    from daq.lab.replicate import push_sessions

    store = tmp_path / "hil.sqlite"
    rec = forwarded_in_process(store, lab)
    (csv,) = (lab.data / "data" / rec.sid / "press.force" / "frames").glob("partition-*.csv")
    csv.write_bytes(b"")  # made, its first write never landed: the lab cannot read it (500)
    chunks = sorted((lab.data / "data" / rec.sid / "press.force" / "data").rglob("c/1/*"))
    assert chunks, "the live data array's second block is on the lab's disk"
    chunks[0].write_bytes(b"\0\1")  # a chunk file a killed write left short: the lab cannot read it either
    rec.end("incomplete", "the rig stopped")
    results = push_sessions(store, lab.url, lab.key, [rec.sid], say=lambda line: None)
    assert [r.state for r in results] == ["pushed"], [r.line() for r in results]
    assert_verified_as_local(lab.url, lab.key, store, rec.sid, status="incomplete")
    want = frames_rows(frame_rows(store, rec.sid, "press.force"))
    with LabReader(lab.url, lab.key) as rem:
        got = rem.frames_table(rec.sid, "press.force")
    for name, col in want.items():
        np.testing.assert_array_equal(got[name], col)
