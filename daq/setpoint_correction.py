"""Online setpoint correction: adjust a force command until the measured force hits the desired one.

The corrector is a bus consumer: it reads the load-cell stream (frames of ``press.force``) that the
acquisition loop publishes, and drives the command through a callable. Each iteration writes the
command, lets the source settle, averages the measured force over a window and applies integral
action on the error. The source's static gain is learnt on the way (command / measured), so the next
setpoint starts close and usually needs one or two corrections.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import numpy as np

from daq.bus import BusSubscriber, BusTimeout
from daq.frames import Frame


@dataclass
class CorrectionSettings:
    """Tuning of the correction loop (SI units)."""

    tolerance: float = 50.0        # N, |q - q_d| accepted as reached
    gain: float = 1.0              # integral gain on the error (command += gain * error / plant gain)
    max_iterations: int = 8
    settle_time: float = 0.15      # s after each new command before averaging
    window: float = 0.1            # s of load-cell samples averaged per iteration
    min_command: float = 0.0       # N, the source's command range (limits are also checked by the driver)
    max_command: float = math.inf

    @classmethod
    def from_config(cls, d: dict, min_command: float = 0.0,
                    max_command: float = math.inf) -> CorrectionSettings:
        known = {k: float(v) if k != "max_iterations" else int(v) for k, v in d.items()
                 if k in cls.__dataclass_fields__}
        return cls(**{"min_command": min_command, "max_command": max_command, **known})


@dataclass
class CorrectionResult:
    """Outcome of one setpoint: reached or not, with the residual error and the final command."""

    q_desired: float
    q_actual: float
    command: float
    residual: float
    iterations: int
    reached: bool

    def as_dict(self) -> dict:
        return asdict(self)


class SetpointCorrector:
    """Integral correction of a force command from the measured force on the bus."""

    def __init__(self, subscriber: BusSubscriber, set_command: Callable[[float], Awaitable[object]],
                 settings: CorrectionSettings, *, stream: str = "press.force", channel: str = "force"):
        self.subscriber = subscriber
        self.set_command = set_command
        self.settings = settings
        self.stream = stream
        self.channel = channel
        self.plant_gain = 1.0  # measured / command, learnt from reached setpoints

    async def measure(self, duration: float, since: float) -> float:
        """Mean measured force over ``duration`` s of frames stamped at or after ``since`` (unix s)."""
        values: list[np.ndarray] = []
        n = 0
        deadline = time.monotonic() + duration + 2.0  # frames arrive in blocks: allow a little slack
        end = since + duration
        while time.monotonic() < deadline:
            try:
                msg = await self.subscriber.recv(timeout=max(0.05, deadline - time.monotonic()))
            except BusTimeout:
                break
            if not isinstance(msg, Frame) or msg.stream != self.stream:
                continue
            t = msg.time()
            col = msg.channels.index(self.channel)
            keep = (t >= since) & (t < end)
            if keep.any():
                values.append(np.asarray(msg.data[keep, col], dtype=float))
                n += int(keep.sum())
            if t[-1] >= end and n > 0:
                break
        if n == 0:
            raise TimeoutError(f"no {self.stream} samples arrived within {duration + 2.0:.1f} s")
        return float(np.concatenate(values).mean())

    async def reach(self, q_desired: float) -> CorrectionResult:
        """Drive the measured force to ``q_desired`` within tolerance or the iteration limit."""
        s = self.settings
        command = self._clamp(q_desired / self.plant_gain)
        q = math.nan
        for iteration in range(1, s.max_iterations + 1):
            await self.set_command(command)
            await asyncio.sleep(s.settle_time)
            q = await self.measure(s.window, since=time.time())
            error = q_desired - q
            if abs(error) <= s.tolerance:
                if command > 0 and q > 0:
                    self.plant_gain = q / command
                return CorrectionResult(q_desired, q, command, -error, iteration, True)
            new_command = self._clamp(command + s.gain * error / self.plant_gain)
            if new_command == command:  # saturated at a command limit: more iterations cannot help
                return CorrectionResult(q_desired, q, command, -error, iteration, False)
            command = new_command
        return CorrectionResult(q_desired, q, command, q - q_desired, s.max_iterations, False)

    def _clamp(self, command: float) -> float:
        return float(min(max(command, self.settings.min_command), self.settings.max_command))
