"""A run writes nothing until every device has answered plausibly (issue 39, part 2).

The shipped simulated press is served from a thread of its own on loopback and run as a real press would be:
a config with ``[rig] simulated = false`` whose ``[devices]`` point at the served ports, with one mistake at a
time - in the config (word order, scale, unit id, an address where a web server listens) or in the device
(slower than the config's timeout). Each `hil run`, and each `hil run --dry-run`, must refuse before its
first write: exit 1, one line naming the device and the likely cause, no traceback, no session, and the
simulated devices (which count every write request, for any unit id) received none.
"""

from __future__ import annotations

import asyncio
import copy
import http.server
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs import parse_config
from daq.rigs.config import load_config
from daq.run.lifecycle import run
from daq.run.preflight import DevicesNotReady, check_devices
from drivers.errors import HilError
from simulators.press_rig import PressRig
from tests.polling import poll_until
from tests.serve_fixtures import ServerThread
from tests.site_values import press_site_values

sys.path.insert(0, str(Path(__file__).parent))
from test_rig_kit import _to_toml  # noqa: E402

CONFIGS = Path("configs").resolve()
PRESS = load_config(CONFIGS / "press-sim.toml")
REFUSED = "run refused before anything was written"


class ServedPress:
    """The simulated press of configs/press-sim.toml served in a thread with its own event loop (the CLI
    under test runs its own loop in the test's thread)."""

    def __init__(self) -> None:
        self.rig = PressRig(PRESS)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with self.rig:
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported by __enter__
            self._error = exc
            self._ready.set()

    def __enter__(self) -> ServedPress:
        self._thread.start()
        assert self._ready.wait(20) and self._error is None, self._error
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.loop is not None and self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)

    def call(self, change: Callable[[PressRig], object]) -> None:
        """Apply ``change`` to the simulated rig in its own loop (a device's stall, ...)."""
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(_apply(change, self.rig), self.loop).result(10)

    def writes(self) -> int:
        """Write requests every simulated Modbus device received (the serial sensor has only queries)."""
        return sum(d.server.n_writes for d in self.rig.devices.values() if hasattr(d, "server"))


async def _apply(change: Callable[[PressRig], object], rig: PressRig) -> None:
    change(rig)


class WebServer:
    """A plain HTTP server on loopback: what answers when a config's address points at the wrong port."""

    def __init__(self) -> None:
        class Quiet(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


def real_press_config(folder: Path, devices: dict, edit: Callable[[dict], object] | None = None) -> Path:
    """A config of the press as a real one (not simulated) whose [devices] are ``devices`` with ``edit``
    applied; a short plan (a run that got past the check would still end soon)."""
    raw = copy.deepcopy(PRESS)
    raw.pop("simulator")
    raw.pop("store", None)
    raw["rig"]["simulated"] = False
    raw["devices"] = copy.deepcopy(devices)
    if edit is not None:
        edit(raw["devices"])
    raw["plan"].update(n_series=3, n_steps_up=1, n_samples=5, precondition=False)
    # a real press gives its linkage's own constants (here the values tests/site_values.py fills in)
    prefix = "analysis.constants."
    raw.setdefault("analysis", {})["constants"] = {k[len(prefix):]: v for k, v in press_site_values(1).items()
                                                   if k.startswith(prefix)}
    path = folder / "press.toml"
    path.write_text(_to_toml(raw))
    return path


def _sensor(name: str, **changes: object) -> Callable[[dict, int], None]:
    return lambda devices, web: devices["sensors"][name].update(changes)


def _register(name: str, **changes: object) -> Callable[[dict, int], None]:
    return lambda devices, web: devices["sensors"][name]["registers"]["displacement"].update(changes)


def _web_at(name: str) -> Callable[[dict, int], None]:
    return lambda devices, web: devices["sensors"][name].update(url=f"socket://127.0.0.1:{web}")


def _stall(device: str, seconds: float) -> Callable[[PressRig], None]:
    def change(rig: PressRig) -> None:
        rig.devices[device].server.stall = seconds  # type: ignore[union-attr]  # a Modbus device
    return change


def _unit(device_id: int) -> Callable[[dict, int], None]:
    return lambda devices, web: devices["force_source"].update(device_id=device_id)


FAULTS = [  # (id, config edit (devices, web server's port), device change, device named, words in the line)
    ("sensor word order", _register("D_vertical", word_order="little"), None, "D_vertical",
     ("word order", "word_order = 'big'")),
    ("sensor scale off by 1000", _register("F_horizontal", scale=1.0e-4), None, "F_horizontal",
     ("scale factor",)),
    ("sensor at the wrong unit id", _sensor("F_horizontal", device_id=5), None, "F_horizontal",
     ("no reply at all", "device_id = 5")),
    ("sensor slower than its timeout", None, _stall("D_vertical", 0.45), "D_vertical",
     ("slower than its timeout (0.3 s)",)),
    ("web server where the RTU sensor should be", _web_at("D_vertical"), None, "D_vertical",
     ("no reply at all", "url")),
    ("web server where the serial sensor should be", _web_at("B0_vertical"), None, "B0_vertical",
     ("web server", "<!DOCTYPE HTML>")),
    ("force source slower than its timeout", None, _stall("force_source", 0.45), "force_source",
     ("slower than its timeout (0.3 s)",)),
    ("force source at the wrong unit id", _unit(7), None, "force_source",
     ("no device answers unit id (device_id = 7)",)),
]


def _refusal(args: list[str]) -> str:
    """The one line a refused `hil run` prints (exit 1, no traceback)."""
    res = CliRunner().invoke(main, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and len(lines) == 1, res.output
    return lines[0]


@pytest.mark.parametrize("what, edit, change, device, words", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_run_and_a_dry_run_refuse_a_device_that_does_not_answer_plausibly_before_the_first_write(
        tmp_path, what, edit, change, device, words):
    store = tmp_path / "s.sqlite"
    with ServedPress() as press, WebServer() as web:
        config = real_press_config(tmp_path, press.rig.device_config(),
                                   (lambda d: edit(d, web.port)) if edit else None)
        if change is not None:
            press.call(change)
        for dry in ([], ["--dry-run"]):
            line = _refusal(["--store", str(store), "run", str(config), "--no-progress", *dry])
            assert line.startswith(f"Error: {device} ("), line  # the device first, with its address
            assert all(w in line for w in words) and REFUSED in line, line
            assert "also not ready" not in line, line  # only the device at fault is blamed
        assert press.writes() == 0
    assert not store.exists()  # refused before a session was opened: there is nothing to record


def test_the_same_config_without_the_mistake_runs_and_writes(tmp_path):
    """The negative control of the cases above: the unchanged config against the same served press passes
    the check and runs its (short) plan, and the devices count the writes it makes."""
    store = tmp_path / "s.sqlite"
    with ServedPress() as press:
        config = real_press_config(tmp_path, press.rig.device_config())
        res = CliRunner().invoke(main, ["--store", str(store), "run", str(config), "--no-progress"])
        assert res.exit_code == 0, res.output
        assert press.writes() > 0


async def test_a_simulated_run_is_checked_too_and_nothing_reaches_its_devices(tmp_path):
    """``[rig] simulated = true`` (the lifecycle `hil run` and `hil serve` share): the simulator's devices
    are probed before the run opens them; the run raises the refusal and no session is created."""
    raw = copy.deepcopy(PRESS)
    raw.pop("store", None)
    raw["plan"].update(n_series=3, n_steps_up=1, n_samples=5, precondition=False)
    raw["devices"]["sensors"]["D_vertical"]["registers"]["displacement"]["word_order"] = "little"
    rig, cfg = parse_config(raw, "press-sim")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        with pytest.raises(HilError) as refused:
            await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False, handle_sigint=False)
        writes = sum(d.server.n_writes for d in sim.devices.values() if hasattr(d, "server"))
    finally:
        await sim.stop()
    assert writes == 0
    assert isinstance(refused.value, DevicesNotReady) and refused.value.device == "D_vertical"
    assert "likely the word order" in str(refused.value) and REFUSED in str(refused.value)
    assert not (tmp_path / "s.sqlite").exists()


async def test_a_drive_of_another_serial_number_is_refused_before_even_its_heartbeat(tmp_path):
    """A drive rig (the oscillator): the drive's identity is read without a session of the run, so a wrong
    drive is refused before the heartbeat (a write) ever reaches it."""
    raw = load_config(CONFIGS / "oscillator-sim.toml")
    raw.pop("store", None)
    raw["devices"]["drive"]["expect"] = {"serial_number": "SN-4711"}
    rig, cfg = parse_config(raw, "oscillator-sim")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        with pytest.raises(HilError) as refused:
            await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False, handle_sigint=False)
        writes = sim.n_writes  # its acting calls and heartbeats
    finally:
        await sim.stop()
    assert writes == 0
    assert isinstance(refused.value, DevicesNotReady) and refused.value.device == "drive"
    assert "where 'SN-4711' is expected" in str(refused.value) and REFUSED in str(refused.value)
    assert not (tmp_path / "s.sqlite").exists()


def test_a_web_server_where_the_modal_front_end_should_be_is_named(tmp_path):
    """The machine tool's SCPI front end: its identification (*IDN?) is what the check reads; a web
    server's answer to it refuses the run (before, the plan's first command went to the web server)."""
    raw = load_config(CONFIGS / "machine-tool-sim.toml")
    raw.pop("store", None)
    raw["rig"]["simulated"] = False
    store = tmp_path / "s.sqlite"
    with WebServer() as web:
        raw["devices"]["frontend"]["port"] = web.port
        config = tmp_path / "machine-tool.toml"
        config.write_text(_to_toml(raw))
        for dry in ([], ["--dry-run"]):
            line = _refusal(["--store", str(store), "run", str(config), "--no-progress", *dry])
            assert line.startswith(f"Error: frontend (127.0.0.1:{web.port}): answers '<!DOCTYPE HTML>'"), line
            assert "a web server answers at this host/port" in line and REFUSED in line, line
    assert not store.exists()


def test_two_devices_at_fault_the_first_in_full_the_other_named(tmp_path):
    """One line still: the first device at fault (config order) with its cause, the others by name."""
    with ServedPress() as press, WebServer() as web:
        def edit(devices: dict) -> None:
            _register("D_vertical", word_order="little")(devices, web.port)
            _web_at("B0_vertical")(devices, web.port)

        config = real_press_config(tmp_path, press.rig.device_config(), edit)
        line = _refusal(["--store", str(tmp_path / "s.sqlite"), "run", str(config), "--no-progress"])
        assert press.writes() == 0
    assert line.startswith("Error: D_vertical (") and "likely the word order" in line, line
    assert line.endswith("; also not ready: B0_vertical (`hil devices` shows each)"), line


def test_a_run_of_hil_serve_is_refused_the_same_way_and_the_queue_says_why(tmp_path):
    """`hil serve` hands its runs to the same lifecycle: the refused run is `failed` with the line as its
    reason, without a session, and the served devices received no write."""
    configs = tmp_path / "configs"
    configs.mkdir()
    with ServedPress() as press:
        swapped = _register("F_horizontal", word_order="big")  # the device's map says "little"
        real_press_config(configs, press.rig.device_config(), lambda devices: swapped(devices, 0))
        server = ServerThread(configs, tmp_path / "store" / "s.sqlite", tmp_path / "tokens").start()
        try:
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"},
                              timeout=30) as http:
                run_id = http.post("/api/runs", json={"config": "press.toml"}).json()["id"]

                def ended() -> dict | None:
                    return next((e for e in http.get("/api/runs").json()["finished"] if e["id"] == run_id),
                                None)

                poll_until(lambda: ended() is not None, timeout=60, period=0.1)
                entry = ended()
        finally:
            server.stop()
        assert press.writes() == 0
    assert entry is not None and entry["status"] == "failed" and entry["session"] is None, entry
    assert entry["reason"].startswith("F_horizontal (") and "likely the word order" in entry["reason"], entry
    assert REFUSED in entry["reason"], entry


async def test_a_sensor_whose_every_read_needs_a_retry_is_not_plausible():
    """A sensor twice as slow as its timeout still returns values (the late reply to the first
    attempt answers the retry on an RTU line): its reads' median names it, in `hil devices` and before a
    run alike."""
    # Each read: the attempt times out at 0.8 s, the line is drained for its reply until 1.2 s, the retry
    # goes out and waits until 2.0 s; the device's (FIFO) reply to the first attempt comes at 1.6 s, in the
    # middle of the retry's window, 0.4 s from either edge. (With the shipped 0.3 s timeout and 0.6 s drain
    # a 1.0 s stall left 0.1 s: a loaded CI machine once let the reply slip into the drain, and the retry
    # then got no answer at all.)
    raw = copy.deepcopy(PRESS)
    raw["devices"]["sensors"]["D_vertical"].update(timeout=0.8, drain_time=0.4)
    rig, cfg = parse_config(raw, "press-sim")
    async with PressRig(raw) as sim:
        sim.devices["D_vertical"].server.stall = 1.6  # type: ignore[union-attr]  # a Modbus device
        devices = rig.simulated_devices(sim, cfg)
        with pytest.raises(DevicesNotReady) as refused:
            await check_devices(devices, reads=3)
        writes = sum(d.server.n_writes for d in sim.devices.values() if hasattr(d, "server"))
    assert writes == 0 and refused.value.device == "D_vertical"
    assert "displacement: answers in " in str(refused.value), refused.value
    assert "(median of 3 reads), slower than its timeout (0.8 s)" in str(refused.value), refused.value
