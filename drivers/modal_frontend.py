"""Driver of a modal-test front end over SCPI on raw TCP (the machine-tool rig's one device).

Text commands one per line, queries answered with one line or an IEEE 488.2 definite-length block
(``#<n><length><float64 little-endian bytes>``). Every setting is read back from the error queue
(``SYST:ERR?``) so a refused command is an error here, not a silent no-op. Values are SI.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

import numpy as np
from msgspec import Meta

from drivers.errors import BadResponse, DeviceConnectionError, DeviceRefused, DeviceTimeout, DeviceUnreachable
from drivers.outputs import held
from drivers.safe_state import SafeAction, SafeStep
from drivers.settings import NonEmpty, Port, Settings, Timeout, settings_from


class FrontEndSettings(Settings, kw_only=True):
    """``[devices.frontend]``: where the front end listens and how long a request and a measurement may
    take (s)."""

    host: NonEmpty = "127.0.0.1"
    port: Port
    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 5.0   # s per SCPI request
    measure_timeout: Timeout = 120.0                       # s one measurement may take


def _value(arg: str) -> float | str | None:
    """A command's argument as it is logged: a number where it is one (SI), else the word."""
    try:
        return float(arg)
    except ValueError:
        return arg or None


class ModalFrontEnd:
    def __init__(self, settings: FrontEndSettings | Mapping[str, Any], name: str = "frontend"):
        self.name = name
        self.settings = cfg = settings_from(settings, FrontEndSettings)
        self.host, self.port = cfg.host, cfg.port
        self.timeout, self.measure_timeout = cfg.timeout, cfg.measure_timeout
        self.address = f"{self.host}:{self.port}"
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._opened = False  # connect() succeeded and close() was not called since

    async def connect(self) -> None:
        try:
            self._r, self._w = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.timeout
            )
        except (OSError, TimeoutError) as exc:
            raise DeviceUnreachable(self.name, self.address, f"cannot connect: {exc}") from None
        self._opened = True
        self.idn = await self.query("*IDN?")

    async def close(self) -> None:
        self._opened = False
        self._drop()

    def _drop(self) -> None:
        """Close the stream (the next request connects again if :meth:`connect` had opened it)."""
        if self._w is not None:
            self._w.close()
            self._w = None

    @property
    def connected(self) -> bool:
        return self._w is not None

    async def _send(self, text: str) -> None:
        if self._w is None and self._opened:  # dropped after a request without an answer: a fresh stream
            try:
                self._r, self._w = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self.timeout)
            except (OSError, TimeoutError) as exc:
                raise DeviceUnreachable(self.name, self.address, f"cannot reconnect: {exc}") from None
        if self._w is None:
            raise DeviceConnectionError(self.name, self.address, "not connected")
        try:
            self._w.write((text + "\n").encode("ascii"))
            await self._w.drain()
        except (ConnectionError, OSError) as exc:
            raise DeviceConnectionError(self.name, self.address, f"connection lost: {exc}") from None

    async def _line(self, timeout: float) -> bytes:
        assert self._r is not None  # set with _w, which _send found connected
        try:
            line = await asyncio.wait_for(self._r.readline(), timeout)
        except TimeoutError:
            raise DeviceTimeout(self.name, self.address, f"no answer within {timeout:g} s") from None
        if not line:
            raise DeviceConnectionError(self.name, self.address, "connection closed by the device")
        if line.startswith(b"ERR "):
            raise DeviceRefused(self.name, self.address, line[4:].decode(errors="replace").strip())
        return line

    @contextlib.asynccontextmanager
    async def _exchange(self) -> AsyncIterator[None]:
        """One request and its answer, alone on the stream. A request that ends without its answer (a timeout,
        or cut by a caller) drops the stream: a late answer must never be taken as the next request's."""
        async with self._lock:
            try:
                yield
            except (DeviceTimeout, asyncio.CancelledError):
                self._drop()
                raise

    async def query(self, text: str, timeout: float | None = None) -> str:
        async with self._exchange():
            await self._send(text)
            return (await self._line(timeout or self.timeout)).decode("ascii", "replace").strip()

    async def write(self, text: str, timeout: float | None = None) -> None:
        """A command, confirmed through the error queue; in a dry run (:mod:`drivers.outputs`) logged instead
        of sent."""
        hold = held()
        if hold is not None:
            head, _, arg = text.partition(" ")
            await hold.hold(self.name, self.address, head, _value(arg.strip()))
            return
        async with self._exchange():
            await self._send(text)
            await self._send("SYST:ERR?")
            answer = (await self._line(timeout or self.timeout)).decode("ascii", "replace").strip()
        if not answer.startswith("0,"):
            raise DeviceRefused(self.name, self.address, f"{text!r} refused: {answer}")

    async def query_block(self, text: str) -> np.ndarray:
        async with self._exchange():
            await self._send(text)
            assert self._r is not None  # set with _w, which _send found connected
            try:
                head = await asyncio.wait_for(self._r.readexactly(2), self.timeout)
                if head == b"ER":
                    rest = await self._r.readline()
                    raise DeviceRefused(
                        self.name, self.address, (head + rest).decode(errors="replace")[4:].strip()
                    )
                if head[:1] != b"#" or not head[1:].isdigit():
                    raise BadResponse(self.name, self.address, f"not a definite-length block: {head!r}")
                n = int(await self._r.readexactly(int(head[1:])))
                payload = await asyncio.wait_for(self._r.readexactly(n + 1), self.timeout)
            except asyncio.IncompleteReadError:
                raise DeviceConnectionError(self.name, self.address, "connection closed mid-block") from None
            except TimeoutError:
                raise DeviceTimeout(
                    self.name, self.address, f"block not complete within {self.timeout:g} s"
                ) from None
        data = np.frombuffer(payload[:-1], dtype="<f8")
        if not np.all(np.isfinite(data)):
            raise BadResponse(self.name, self.address, f"{text}: non-finite samples")
        return data

    # -- the instrument's functions, in SI ----------------------------------------------------------------
    async def move_to(self, position: float) -> float:
        await self.write(f"AXIS:POS {position:.9g}", timeout=self.measure_timeout)
        actual = float(await self.query("AXIS:POS?"))
        if abs(actual - position) > 1e-6 and held() is None:  # a dry run: the axis stays where it is
            raise BadResponse(self.name, self.address, f"axis at {actual} m, commanded {position} m")
        return actual

    async def configure(
        self,
        *,
        dof: str,
        amplitude: float,
        f_start: float,
        f_stop: float,
        period: int,
        seed: int,
        dt: float,
        periods: int,
        settle: int,
        detection: int = 0,
    ) -> None:
        """Source and acquisition settings; ``detection`` >= 2 asks for an odd random-phase multisine with
        one odd line in each ``detection`` odd lines (and every even line) left unexcited (``SOUR:DET``,
        sent only then: a front end without it runs the full multisine as before)."""
        extra = (f"SOUR:DET {detection}",) if detection else ()
        for cmd in (
            f"SOUR:DOF {dof}",
            f"SOUR:AMPL {amplitude:.9g}",
            f"SOUR:FREQ:STAR {f_start:.9g}",
            f"SOUR:FREQ:STOP {f_stop:.9g}",
            f"SOUR:PER {period}",
            f"SOUR:SEED {seed}",
            f"ACQ:DT {dt:.12g}",
            f"ACQ:PER {periods}",
            f"ACQ:SETT {settle}",
            *extra,
        ):
            await self.write(cmd)

    async def measure(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Source on, measure, source off: (force N, accelerations m/s^2 (n, n_ch), channel labels)."""
        await self.write("OUTP ON")
        try:
            await self.write("INIT")
            if await self.query("*OPC?", timeout=self.measure_timeout) != "1":
                raise BadResponse(self.name, self.address, "*OPC? did not answer 1")
        finally:
            await self.write("OUTP OFF")
        labels = (await self.query("SENS:CHAN?")).split(",")
        if held() is not None:  # a dry run: no measurement was started, so there is none to fetch
            return np.zeros(0), np.zeros((0, len(labels))), labels
        force = await self.query_block("FETC:FORC?")
        accel = await self.query_block("FETC:ACC?")
        if accel.size != force.size * len(labels):
            raise BadResponse(
                self.name,
                self.address,
                f"{accel.size} acceleration values for {force.size} samples x {len(labels)} channels",
            )
        return force, accel.reshape(force.size, len(labels)), labels

    def safe_action(self) -> SafeAction:
        """Source output off (confirmed through the error queue), then ``OUTP?`` read back (must be 0). A
        step may open a fresh stream (at most ``timeout``) and then wait for its answer (``timeout``): its
        budget is that plus one more ``timeout`` of margin."""
        budget = 3.0 * self.timeout
        return SafeAction(self.name, self.address, (
            SafeStep("output off", budget, lambda: self.write("OUTP OFF")),
            SafeStep("read-back", budget, lambda: self.query("OUTP?"), check=_output_still_on,
                     needs_link=True),
        ), linked=lambda: self._opened)  # a dropped stream is opened again by the next request

    async def safe_state(self) -> None:
        """Run :meth:`safe_action`: every step is tried; SafeStateError names each step that failed."""
        await self.safe_action()()

    async def identity(self) -> dict:
        return {"idn": getattr(self, "idn", ""), "address": self.address, "protocol": "SCPI over TCP"}


def _output_still_on(answer: object) -> str | None:
    """The read-back's verdict: ``OUTP?`` must answer 0."""
    return None if answer == "0" else f"output still on (OUTP? answered {answer!r})"
