"""Online setpoint correction: adjust a force command until the measured force hits the desired one.

The corrector is a bus consumer: it reads the load-cell stream (frames of ``press.force``) that the
acquisition loop publishes, and drives the command through a callable. Each iteration writes the
command, lets the source settle, averages the measured force over a window and applies integral
action on the error. The source's static gain is learnt on the way (command / measured), so the next
setpoint starts close and usually needs one or two corrections.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from daq.bus.frames import Frame
from daq.bus.pubsub import BusSubscriber, BusTimeout
from daq.bus.silence import SilenceMeter
from daq.errors import ProtocolError
from drivers.clock import WALL, Clock


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
    monotone: bool = True          # approach each setpoint from the side it comes from (see reach())
    margin: float = 0.5            # monotone: aim this fraction of the tolerance short of the setpoint
    max_stall: float = 1.0         # s the force stream may pause before the correction gives up

    @classmethod
    def for_config(cls, table: Any, source: Any) -> CorrectionSettings:
        """The settings of a parsed ``[correction]`` table, commanding within the force source's
        ``f_min``..``f_max``."""
        names = ("tolerance", "gain", "max_iterations", "monotone", "margin", "settle_time", "window",
                 "max_stall")
        return cls(**{k: getattr(table, k) for k in names}, min_command=source.f_min,
                   max_command=source.f_max)


#: x ``max_stall``: the longest a stream may lack frames while its source still answers polls (a machine
#: too busy to carry the stream at its pace) before the correction gives up all the same
SLOW_STREAM_FACTOR = 10.0


class ForceStreamStalled(ProtocolError, TimeoutError):
    """The measured-force stream paused for longer than the configured limit."""


@dataclass
class CorrectionResult:
    """Outcome of one setpoint: reached or not, with the residual error and the final command."""

    q_desired: float
    q_actual: float
    command: float
    residual: float
    iterations: int
    reached: bool
    reversals: int = 0  # times the command had to go back against the direction of approach

    def as_dict(self) -> dict:
        return asdict(self)


class SetpointCorrector:
    """Integral correction of a force command from the measured force on the bus."""

    def __init__(self, subscriber: BusSubscriber, set_command: Callable[[float], Awaitable[object]],
                 settings: CorrectionSettings, *, stream: str = "press.force", channel: str = "force",
                 source: str = "force source", clock: Clock = WALL,
                 source_answered: Callable[[], float] | None = None):
        """``source_answered``: time.monotonic() of the source's last answer (a poll or a status read, as
        the acquisition records it), so that a slow stream from a source that still answers is not taken
        for a silent source."""
        self.subscriber = subscriber
        self.source_answered = source_answered
        self.set_command = set_command
        self.settings = settings
        self.stream = stream
        self.channel = channel
        self.source = source  # the device behind the stream, named in errors
        self.clock = clock    # the run's clock: settle times, windows and the stream's times are its seconds
        self.plant_gain = 1.0  # slope of measured force over command, learnt from reached setpoints
        self.plant_offset = 0.0  # N, measured force at zero command (extrapolated)
        self._reached: deque[tuple[float, float]] = deque(maxlen=8)  # (command, measured) when reached
        self._last_desired = 0.0

    def _learn(self, command: float, q: float) -> None:
        """Update the source characteristic q = gain * command + offset from the last reached setpoints.

        An affine fit, not a ratio: a source with an offset (seal breakaway) has a ratio q / command that
        drifts with the force, and a first command predicted from a wrong ratio overshoots the setpoint.
        """
        if command <= 0 or q <= 0:
            return
        self._reached.append((command, q))
        c = np.array([r[0] for r in self._reached])
        m = np.array([r[1] for r in self._reached])
        if c.size >= 2 and np.ptp(c) > 0.05 * c.max():
            gain, offset = np.polyfit(c, m, 1)
            if gain > 0:
                self.plant_gain, self.plant_offset = float(gain), float(offset)
                return
        self.plant_gain, self.plant_offset = q / command, 0.0

    def _command_for(self, force: float) -> float:
        return (force - self.plant_offset) / self.plant_gain

    async def measure(self, duration: float, since: float) -> float:
        """Mean measured force over ``duration`` s of samples, starting at the first one stamped at or after
        ``since`` (unix s).

        The window starts with the first sample that arrives, so a short pause of the stream (a busy
        line, a device that stalls for a moment) delays the measurement instead of failing it; only a
        stream silent for longer than ``max_stall`` raises :class:`ForceStreamStalled`.
        """
        with self.clock.waiting():  # a measuring window is a wait of the plan: the run's clock runs fast
            return await self._measure(duration, since)

    async def _measure(self, duration: float, since: float) -> float:
        values: list[np.ndarray] = []
        first: float | None = None
        limit = self.settings.max_stall
        silence = SilenceMeter(limit)  # a busy machine (the loop held up) is not a silent source
        last_frame = evidence = time.monotonic()  # the last frame; the last frame or excuse
        while True:
            if silence.exceeded:
                self._stalled(limit, last_frame, evidence)
                silence.heard()  # the source answers its polls: a slow stream on a busy machine
                evidence = time.monotonic()
            wait, started = silence.next_wait(), time.monotonic()
            try:
                msg = await self.subscriber.recv(timeout=wait)
            except BusTimeout:
                silence.waited(wait, started)
                continue
            if not isinstance(msg, Frame) or msg.stream != self.stream:
                silence.waited(wait, started)
                continue
            silence.heard()
            last_frame = evidence = time.monotonic()
            t = msg.time()
            keep = t >= since
            if first is None and keep.any():
                first = float(t[keep][0])
            if first is None:
                continue
            keep &= t < first + duration
            if keep.any():
                values.append(np.asarray(msg.data[keep, msg.channels.index(self.channel)], dtype=float))
            if t[-1] >= first + duration and values:
                return float(np.concatenate(values).mean())

    def _stalled(self, limit: float, last_frame: float, evidence: float) -> None:
        """The stream has been silent for ``limit`` s of a free loop: raise ForceStreamStalled, unless the
        source answered a poll since ``evidence`` (time.monotonic() of the last frame, or of the last time
        this excuse was taken: each answer excuses once). Then the frames are slow, not missing: on a
        machine too busy for every task at its pace (polls, frames and this loop share the CPU) the stream
        thins out although nothing is wrong with the device. That excuse holds for
        :data:`SLOW_STREAM_FACTOR` x ``limit`` without a frame at most."""
        now = time.monotonic()
        answered = self.source_answered() if self.source_answered is not None else -math.inf
        if answered <= evidence:
            raise ForceStreamStalled(f"{self.source} silent: no {self.stream} samples for {limit:.1f} s "
                                     "(limit: [correction].max_stall)")
        if now - last_frame >= SLOW_STREAM_FACTOR * limit:
            raise ForceStreamStalled(
                f"{self.source} answers, but no {self.stream} samples reached the correction for "
                f"{now - last_frame:.1f} s ({SLOW_STREAM_FACTOR:g} x [correction].max_stall): this machine "
                "is too busy to carry the force stream")

    async def reach(self, q_desired: float) -> CorrectionResult:
        """Drive the measured force to ``q_desired`` within tolerance or the iteration limit.

        With ``monotone`` (the default) every command aims ``margin * tolerance`` short of the
        setpoint on the side the force comes from, so the force creeps up on it without
        overshooting: on a rig with hysteresis (the press guide's friction), a force reversal
        between setpoints changes the friction state that the measurement is meant to see. Going
        back only happens after an overshoot beyond the tolerance and is counted in ``reversals``.
        """
        s = self.settings
        direction = float(np.sign(q_desired - self._last_desired)) if s.monotone else 0.0
        self._last_desired = q_desired
        aim = q_desired - direction * s.margin * s.tolerance
        command = self._clamp(self._command_for(aim)) if q_desired != 0 else self._clamp(0.0)
        q = math.nan
        reversals = 0
        sent = command
        for iteration in range(1, s.max_iterations + 1):
            await self.set_command(command)
            sent = command
            await self.clock.sleep(s.settle_time)
            q = await self.measure(s.window, since=self.clock.time())
            error = q_desired - q
            if abs(error) <= s.tolerance:
                self._learn(command, q)
                return CorrectionResult(q_desired, q, command, -error, iteration, True, reversals)
            step = s.gain * (aim - q) / self.plant_gain
            if direction and step * direction < 0:
                reversals += 1
            new_command = self._clamp(command + step)
            if new_command == command:  # saturated at a command limit: more iterations cannot help
                return CorrectionResult(q_desired, q, command, -error, iteration, False, reversals)
            command = new_command
        # the last command sent, not the next one the loop would have tried
        return CorrectionResult(q_desired, q, sent, q - q_desired, s.max_iterations, False, reversals)

    def _clamp(self, command: float) -> float:
        return float(min(max(command, self.settings.min_command), self.settings.max_command))
