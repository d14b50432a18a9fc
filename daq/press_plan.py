"""The press force-staircase plan: which desired forces, in which order, how often."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daq.config import ConfigError, get


@dataclass(frozen=True)
class PressPlan:
    """A staircase 0 -> q_max -> 0 in ``n_steps_up`` equal steps each way, repeated ``n_series`` times.

    With 14 steps this gives the paper's 29 setpoints: 15 loading (including 0) and 14 unloading.
    """

    q_max: float = 20000.0          # N
    n_steps_up: int = 14
    n_series: int = 6
    n_samples: int = 20             # samples per sensor and setpoint
    sample_interval: float = 0.005  # s between sensor samples
    settle_time: float = 0.1        # s to wait after a setpoint is reached, before measuring
    precondition: bool = True       # one unrecorded 0 -> q_max -> 0 cycle first (erases the friction memory)

    @property
    def q_desired(self) -> np.ndarray:
        up = np.linspace(0.0, self.q_max, self.n_steps_up + 1)
        return np.concatenate([up, up[-2::-1]])

    @classmethod
    def from_config(cls, cfg: dict, file: str | None = None) -> PressPlan:
        plan = get(cfg, "plan", dict, default={}, file=file)
        q_max = float(get(plan, "q_max", float, default=cls.q_max, file=file))
        n_up = int(get(plan, "n_steps_up", int, default=cls.n_steps_up, file=file))
        n_series = int(get(plan, "n_series", int, default=cls.n_series, file=file))
        n_samples = int(get(plan, "n_samples", int, default=cls.n_samples, file=file))
        interval = float(get(plan, "sample_interval", float, default=cls.sample_interval, file=file))
        settle = float(get(plan, "settle_time", float, default=cls.settle_time, file=file))
        precondition = bool(get(plan, "precondition", bool, default=cls.precondition, file=file))
        if not q_max > 0:
            raise ConfigError("must be > 0 N", file, "plan.q_max")
        for key, value in (("n_steps_up", n_up), ("n_series", n_series), ("n_samples", n_samples)):
            if value < 1:
                raise ConfigError("must be at least 1", file, f"plan.{key}")
        for key, value in (("sample_interval", interval), ("settle_time", settle)):
            if not value >= 0:
                raise ConfigError("must be >= 0 s", file, f"plan.{key}")
        return cls(q_max, n_up, n_series, n_samples, interval, settle, precondition)
