"""The crane's nonlinear-distortion measurement settings (``[distortion]``) and its input design.

Odd random-phase multisines with detection lines (unexcited odd and all even lines), ``n_realisations``
of them, each one trajectory of ``n_settle`` settling periods and ``n_periods`` measured periods: what
the robust best-linear-approximation method needs (identification/frequency/nonlinear_distortion.py).
Kept apart from the stage itself (daq/rigs/crane/distortion.py) so that the crane's config imports it
without importing the stage.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from msgspec import Meta

from daq.config.load import Invalid
from daq.config.schema import Hz, Seed, Table

__all__ = ["DistortionTable", "design_realisations", "excited_bins"]


class DistortionTable(Table, kw_only=True):
    """``[distortion]``: the measurement runs after the training and validation multisines."""

    enabled: bool = False
    f_min: Hz = 1.0                 # Hz, lowest excited line
    f_max: Hz = 100.0               # Hz, highest excited line
    period: Annotated[float, Meta(gt=0, le=60)] = 1.0   # s; the line spacing is 1 / period
    n_periods: Annotated[int, Meta(ge=2, le=100)] = 2   # measured periods per realisation (noise)
    n_settle: Annotated[int, Meta(ge=0, le=100)] = 2    # periods dropped at the start (transient)
    n_realisations: Annotated[int, Meta(ge=2, le=100)] = 3   # random-phase realisations (BLA scatter)
    group: Annotated[int, Meta(ge=2, le=100)] = 4      # one odd detection line in each group of odd lines
    amplitude: Annotated[float, Meta(gt=0, le=1)] = 0.5   # peak torque as a fraction of the torque limit
    trend_degree: Annotated[int, Meta(ge=0, le=6)] = 3  # polynomial left over of a slow transient, removed
    alpha: Annotated[float, Meta(gt=0, lt=0.5)] = 0.01  # false-alarm rate of the detection
    seed: Seed = 31

    def check(self) -> None:
        if not self.f_min < self.f_max:
            raise Invalid("f_max", f"needs f_min < f_max, got {self.f_min} and {self.f_max} Hz")

    def samples(self, dt: float) -> tuple[int, int]:
        """(samples per period, samples per trajectory) at the trajectory's sample time ``dt``."""
        n_per = round(self.period / dt)
        return n_per, n_per * (self.n_settle + self.n_periods)


def excited_bins(table: DistortionTable, dt: float) -> np.ndarray:
    """The excited DFT bins of one period (the same for every realisation)."""
    from identification.design.multisine import odd_random_phase_lines  # lazy: scipy

    return odd_random_phase_lines(table.samples(dt)[0], dt, table.f_min, min(table.f_max, 0.45 / dt),
                                  group=table.group, seed=table.seed)


def design_realisations(table: DistortionTable, dt: float, torque_limit: float) -> list[np.ndarray]:
    """One torque trajectory (N*m, samples of ``dt``) per realisation: the settling and measured periods
    of one odd random-phase multisine; one scale for all, so their peak is ``amplitude * torque_limit``
    (the same amplitude spectrum in every realisation, as the BLA needs)."""
    from identification.design.multisine import random_phase_realisations  # lazy: scipy

    n_per, _ = table.samples(dt)
    one = random_phase_realisations(n_per, excited_bins(table, dt), table.n_realisations, seed=table.seed)
    one *= table.amplitude * torque_limit / np.abs(one).max()
    return [np.tile(r, table.n_settle + table.n_periods) for r in one]
