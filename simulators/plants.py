"""The plants the simulated servo drive can move (``[simulator] plant``): each one's truth type, simulation,
trace keys and units. A small module of its own so that the ``[simulator]`` table's check
(simulators/settings.py) and the drive (simulators/crane_drive.py) share it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self

import numpy as np

from simulators.physics import oscillator, pendulum
from simulators.physics.crane import CraneTruth, simulate_axis


class Truth(Protocol):
    """A plant's truth (CraneTruth, OscillatorTruth, ...): built from its ``[simulator.truth]`` table."""

    @classmethod
    def from_config(cls, d: dict | None) -> Self: ...

    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class Plant:
    """What the drive moves: truth type, simulate(truth, input, dt, rng), trace keys and units."""

    truth: type[Truth]
    simulate: Callable[[Any, np.ndarray, float, np.random.Generator], dict]  # Any: the plant's truth type
    input_unit: tuple[str, str, str]    # UNECE code, symbol, description
    output_unit: tuple[str, str, str]
    speed_unit: tuple[str, str, str]
    output: str                         # measured output key of simulate's result
    limit_key: str                      # true speed compared with speed_limit
    mode: str

    def trace(self, sim: dict, k: int) -> dict[str, np.ndarray]:
        """The first ``k`` samples as the drive's trace arrays (crane names: torque_cmd, torque, speed)."""
        if self.output == "speed":
            keys = {"torque_cmd": "torque_cmd", "torque": "torque", "speed": "speed"}
        else:
            keys = {"torque_cmd": "force_cmd", "torque": "force", "speed": self.output}
        return {name: np.asarray(sim[key][:k]) for name, key in keys.items()}


_NM = ("NU", "N*m", "newton metre")
_N = ("NEW", "N", "newton")
_RADS = ("2A", "rad/s", "radian per second")
_MS = ("MTS", "m/s", "metre per second")
PLANTS: dict[str, Plant] = {
    "crane": Plant(CraneTruth, simulate_axis, _NM, _RADS, _RADS, "speed", "speed_true", "torque_trajectory"),
    "oscillator": Plant(oscillator.OscillatorTruth, oscillator.simulate, _N, ("MTR", "m", "metre"), _MS,
                        oscillator.OUTPUT, "v1", "force_trajectory"),
    "pendulum": Plant(pendulum.PendulumTruth, pendulum.simulate, _N, ("C81", "rad", "radian"), _MS,
                      pendulum.OUTPUT, "cart_speed", "force_trajectory"),
}


def get_plant(name: str | None) -> Plant:
    """The plant of ``[simulator] plant`` (default crane); ValueError naming the known ones."""
    name = "crane" if name is None else name
    if name not in PLANTS:
        raise ValueError(f"[simulator] plant must be one of {sorted(PLANTS)}, got {name!r}")
    return PLANTS[name]
