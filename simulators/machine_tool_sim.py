"""Simulated modal-test front end of the machine tool, speaking SCPI over raw TCP on loopback.

Why SCPI on a socket: it is how lab instruments and data-acquisition front ends are driven
(IEEE 488.2 / SCPI text commands on TCP port 5025, bulk data as definite-length binary blocks
``#<n><length><bytes>``), it carries long sample arrays in one reply (Modbus registers would
need thousands of reads), and it needs no dependency beyond asyncio.

The instrument combines what a modal test on the machine needs: the feed axis (moved by the drive
to a position), a shaker at one measured DOF with a periodic multisine source, and the acquisition
of the force and all accelerometers at ``dt``. Commands (case-insensitive, one per line):

``*IDN?`` ``*RST`` ``*OPC?`` ``SYST:ERR?`` | ``AXIS:POS <m>`` ``AXIS:POS?`` |
``SOUR:DOF <label>`` ``SOUR:AMPL <N rms>`` ``SOUR:FREQ:STAR <Hz>`` ``SOUR:FREQ:STOP <Hz>``
``SOUR:PER <samples>`` ``SOUR:SEED <int>`` ``SOUR:DET <group>`` ``OUTP ON|OFF`` ``OUTP?`` |
``ACQ:DT <s>`` ``ACQ:PER <periods>`` ``ACQ:SETT <periods>`` ``INIT`` ``ACQ:STAT?`` |
``SENS:CHAN?`` ``FETC:FORC?`` ``FETC:ACC?`` (float64 little-endian blocks; accelerations row-major
samples x channels). Errors go to the SCPI error queue (``SYST:ERR?``); a query that fails answers
``ERR <code>,"<text>"`` at once so a client never waits for a reply that will not come.

The physics: :func:`simulators.physics.machine_tool.simulate_modal_test` of the simulated structure
with the configured truth (``variant = "disturbed"`` changes the constants the identification does not
estimate), noise added.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from drivers.clock import Clock
from simulators.physics.machine_tool import (
    MachineToolTruth,
    TruthConstants,
    simulate_modal_test,
)
from simulators.settings import MachineToolSimulator, simulator_table

IDN = "hil-lab,MT-MODAL-FRONTEND-SIM,0,1.0"


#: ``[simulator]`` of a machine-tool config (simulators/settings.py)
FrontEndSettings = MachineToolSimulator


class ScpiError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


class ModalFrontEnd:
    """The instrument's state and its measurement (no I/O)."""

    def __init__(self, settings: FrontEndSettings):
        self.s = settings
        consts = TruthConstants()
        if settings.variant == "disturbed":
            consts = consts.disturbed()
        self.truth = MachineToolTruth(settings.truth, consts)
        self.rng = np.random.default_rng(settings.seed)
        self.reset()

    def reset(self) -> None:
        self.position = 0.0
        self.dof = self.truth.obs_labels[0]
        self.amplitude = 10.0
        self.f_start, self.f_stop = 10.0, 200.0
        self.period = 1024
        self.source_seed = 0
        self.detection = 0  # 0: every line of the band; g >= 2: odd lines only, one in g left out
        self.output = False
        self.dt = 1.0 / 1024
        self.periods = 2
        self.settle = 1
        self.force: np.ndarray | None = None
        self.accel: np.ndarray | None = None
        self.busy = False
        self.errors: list[tuple[int, str]] = []

    def excitation(self) -> np.ndarray:
        """One period of a random-phase multisine over the source band, scaled to the rms amplitude."""
        n = self.period
        lines = np.arange(n // 2 + 1) / (n * self.dt)
        sel = (lines >= self.f_start) & (lines <= self.f_stop)
        if not sel.any():
            raise ScpiError(-221, "no frequency line of the period inside the source band")
        if self.detection >= 2:  # odd random-phase: even lines and one odd line per group stay free;
            # which one is drawn once per group size, not per seed: realisations share their lines
            pick = np.random.default_rng(self.detection)
            odd = np.flatnonzero(sel & (np.arange(sel.size) % 2 == 1))
            sel[:] = False
            keep = np.ones(odd.size, dtype=bool)
            for start in range(0, odd.size - self.detection + 1, self.detection):
                keep[start + pick.integers(self.detection)] = False
            sel[odd[keep]] = True
            if not sel.any():
                raise ScpiError(-221, "no odd line of the period left to excite in the source band")
        phase = np.random.default_rng(self.source_seed).uniform(0, 2 * np.pi, sel.sum())
        spec = np.zeros(n // 2 + 1, dtype=complex)
        spec[sel] = np.exp(1j * phase)
        x = np.fft.irfft(spec, n)
        return x / np.sqrt(np.mean(x**2)) * self.amplitude

    def measure(self) -> None:
        """Settling periods plus recorded periods of the source at the current position."""
        if not self.output:
            raise ScpiError(-221, "settings conflict: source output is OFF")
        one = self.excitation()
        u = np.tile(one, self.settle + self.periods)
        out = simulate_modal_test(self.truth, self.position, u, self.dt, self.dof, self.rng,
                                  accel_noise=self.s.accel_noise, force_noise=self.s.force_noise, substeps=8)
        skip = self.settle * self.period
        self.force = out["force"][skip:]
        self.accel = out["accel"][skip:]


def _block(arr: np.ndarray) -> bytes:
    payload = np.ascontiguousarray(arr, dtype="<f8").tobytes()
    n = str(len(payload))
    return f"#{len(n)}{n}".encode() + payload + b"\n"


class MachineToolFrontEndSim:
    """The front end served on ``host:port`` (port 0: any free one); ``await start()`` / ``stop()``."""

    def __init__(self, config: Mapping[str, Any] | MachineToolSimulator, clock: Clock | None = None):
        self.settings = simulator_table(config, MachineToolSimulator)
        self.clock = clock if clock is not None else self.settings.clock()  # axis moves take its seconds
        self.dev = ModalFrontEnd(self.settings)
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self._task: asyncio.Task | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task] = set()
        self.n_writes = 0  # commands that set something (not queries), for the dry-run tests
        # fault injection: command head (e.g. "SYST:ERR?") -> s its answer is held (a slow or hung reply)
        self.answer_delay: dict[str, float] = {}

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, self.settings.host, self.settings.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for w in list(self._clients):
            w.close()
        if self._handlers:  # let each connection see its closed socket and return (no cancelled handler)
            await asyncio.wait(self._handlers, timeout=2.0)
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    def device_config(self) -> dict:
        return {"frontend": {"host": self.settings.host, "port": self.port}}

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        task = asyncio.current_task()
        assert task is not None  # the server runs each connection's handler as a task
        self._handlers.add(task)
        try:
            while line := await reader.readline():
                text = line.decode("ascii", "replace").strip()
                if not text:
                    continue
                reply = await self.answer(text)
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._clients.discard(writer)
            self._handlers.discard(task)
            writer.close()

    async def answer(self, text: str) -> bytes | None:
        """The bytes the front end sends back for one line (None: a command, answered by nothing); a refused
        command goes to the error queue, a refused query is answered ``ERR code,"text"``. The TCP server
        and the in-process backend (:mod:`simulators.in_process`) both answer through here."""
        try:
            return await self._command(text)
        except ScpiError as exc:
            self.dev.errors.append((exc.code, str(exc)))
            return f'ERR {exc.code},"{exc}"\n'.encode() if text.endswith("?") else None

    async def _command(self, text: str) -> bytes | None:
        d = self.dev
        head, _, arg = text.partition(" ")
        head = head.upper()
        if not head.endswith("?"):
            self.n_writes += 1  # a command that sets something (the dry-run tests count them)
        if self.answer_delay.get(head):
            await asyncio.sleep(self.answer_delay[head])
        arg = arg.strip()

        def num(lo: float = -np.inf, hi: float = np.inf) -> float:
            try:
                v = float(arg)
            except ValueError:
                raise ScpiError(-104, f"data type error: {arg!r}") from None
            if not (np.isfinite(v) and lo <= v <= hi):
                raise ScpiError(-222, f"data out of range: {arg}")
            return v

        if head == "*IDN?":
            return f"{IDN}\n".encode()
        if head == "*RST":
            d.reset()
            return None
        if head == "*OPC?":
            if self._task is not None:
                task, self._task = self._task, None
                try:
                    await task
                except ScpiError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the measurement failed: report it as a device error
                    raise ScpiError(-240, f"hardware error: {exc}") from None
            return b"1\n"
        if head == "SYST:ERR?":
            code, msg = d.errors.pop(0) if d.errors else (0, "No error")
            return f'{code},"{msg}"\n'.encode()
        if self._task is not None and not self._task.done() and not head.endswith("?"):
            raise ScpiError(-213, "init ignored: measurement in progress")
        if head == "AXIS:POS":
            target = num(0.0, self.dev.truth.c.travel)
            await self.clock.sleep(abs(target - d.position) / self.settings.axis_speed)
            d.position = target
            d.force = d.accel = None
            return None
        if head == "AXIS:POS?":
            return f"{d.position:.9g}\n".encode()
        if head == "SOUR:DOF":
            if arg not in d.truth.obs_labels:
                raise ScpiError(-224, f"illegal parameter value: {arg!r}")
            d.dof = arg
            return None
        setters = {
            "SOUR:AMPL": ("amplitude", 0.0, 1000.0, float),
            "SOUR:FREQ:STAR": ("f_start", 0.0, 1e5, float),
            "SOUR:FREQ:STOP": ("f_stop", 0.0, 1e5, float),
            "SOUR:PER": ("period", 16, 2**20, int),
            "SOUR:SEED": ("source_seed", 0, 2**31, int),
            "SOUR:DET": ("detection", 0, 100, int),
            "ACQ:DT": ("dt", 1e-5, 1.0, float),
            "ACQ:PER": ("periods", 1, 1000, int),
            "ACQ:SETT": ("settle", 0, 100, int),
        }
        if head in setters:
            attr, lo, hi, typ = setters[head]
            setattr(d, attr, typ(num(lo, hi)))
            return None
        if head == "OUTP":
            if arg.upper() not in ("ON", "OFF", "1", "0"):
                raise ScpiError(-224, f"illegal parameter value: {arg!r}")
            d.output = arg.upper() in ("ON", "1")
            return None
        if head == "OUTP?":
            return b"1\n" if d.output else b"0\n"
        if head == "INIT":
            d.force = d.accel = None
            self._task = asyncio.get_running_loop().create_task(asyncio.to_thread(d.measure))
            return None
        if head == "ACQ:STAT?":
            return b"BUSY\n" if self._task is not None and not self._task.done() else b"IDLE\n"
        if head == "SENS:CHAN?":
            return (",".join(d.truth.obs_labels) + "\n").encode()
        if head in ("FETC:FORC?", "FETC:ACC?"):
            data = d.force if head == "FETC:FORC?" else d.accel
            if data is None:
                raise ScpiError(-230, "data corrupt or stale: no completed measurement")
            return _block(data)
        raise ScpiError(-113, f"undefined header: {head}")
