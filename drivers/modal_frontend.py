"""Driver of a modal-test front end over SCPI (the machine-tool rig's one device).

The instrument's functions in SI units; the requests go to a SCPI backend (:mod:`drivers.backends`): by
default SCPI on raw TCP (:mod:`drivers.scpi_link`: every setting confirmed through the error queue, so a
refused command is an error here, not a silent no-op).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from msgspec import Meta

from drivers.backends import REAL, Backends
from drivers.errors import BadResponse
from drivers.safe_state import SafeAction, SafeStep
from drivers.settings import NonEmpty, Port, Settings, Timeout, settings_from


class FrontEndSettings(Settings, kw_only=True):
    """``[devices.frontend]``: where the front end listens and how long a request and a measurement may
    take (s)."""

    host: NonEmpty = "127.0.0.1"
    port: Port
    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 5.0   # s per SCPI request
    measure_timeout: Timeout = 120.0                       # s one measurement may take


class ModalFrontEnd:
    """The front end's functions in SI (axis moves, source and acquisition settings, measurements, the safe
    action) over a SCPI backend (:mod:`drivers.backends`; the real one is SCPI over TCP)."""

    def __init__(self, settings: FrontEndSettings | Mapping[str, Any], name: str = "frontend",
                 backends: Backends | None = None):
        self.name = name
        self.settings = cfg = settings_from(settings, FrontEndSettings)
        self.host, self.port = cfg.host, cfg.port
        self.timeout, self.measure_timeout = cfg.timeout, cfg.measure_timeout
        self.link = (backends or REAL).scpi(name, cfg.host, cfg.port, cfg.timeout)
        self.address = self.link.address

    async def connect(self) -> None:
        await self.link.connect()
        self.idn = await self.query("*IDN?")

    async def close(self) -> None:
        await self.link.close()

    @property
    def connected(self) -> bool:
        return self.link.connected

    async def query(self, text: str, timeout: float | None = None) -> str:
        return await self.link.query(text, timeout)

    async def write(self, text: str, timeout: float | None = None, value: object = None) -> None:
        """A command, confirmed through the error queue (``value``: its argument in SI, as a recording
        backend logs it)."""
        await self.link.command(text, value, timeout)

    async def query_block(self, text: str) -> np.ndarray:
        return await self.link.query_block(text)

    # -- the instrument's functions, in SI ----------------------------------------------------------------
    async def move_to(self, position: float) -> float:
        await self.write(f"AXIS:POS {position:.9g}", timeout=self.measure_timeout, value=position)
        actual = float(await self.query("AXIS:POS?"))
        if abs(actual - position) > 1e-6 and not self.link.holds_writes:  # held: the axis stays where it is
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
        if self.link.holds_writes:  # held: no measurement was started, so there is none to fetch
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
        ), linked=lambda: self.link.opened)  # a dropped stream is opened again by the next request

    async def safe_state(self) -> None:
        """Run :meth:`safe_action`: every step is tried; SafeStateError names each step that failed."""
        await self.safe_action()()

    async def identity(self) -> dict:
        return {"idn": getattr(self, "idn", ""), "address": self.address, "protocol": "SCPI over TCP"}


def _output_still_on(answer: object) -> str | None:
    """The read-back's verdict: ``OUTP?`` must answer 0."""
    return None if answer == "0" else f"output still on (OUTP? answered {answer!r})"
