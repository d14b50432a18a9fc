"""The press rig's settings: its config struct (``[simulator]``, ``[devices]``, ``[plan]``, ``[correction]``,
``[acquisition]``, ``[analysis]``, ``[online]``) and the rules that need more than one table or the rig's
own code (:func:`check_rig`, run by `hil check` and `hil run` before anything opens).

Every number is bounded to what a real press and its instruments can have; the drivers and the simulator
receive only configs that passed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec
import numpy as np
from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid, to_dict
from daq.config.schema import (
    Budget,
    RigConfig,
    Seed,
    Settle,
    Table,
    Wait,
)
from drivers.displacement import SensorSettings, open_sensor
from drivers.errors import HilError
from drivers.force_source import ForceSource, ForceSourceSettings, Newton
from simulators.physics.press import SENSOR_NAMES
from simulators.press_rig import PressRig
from simulators.settings import PressSimulator  # [simulator]: the simulator's own table

if TYPE_CHECKING:  # annotations only: identification.models loads scipy, which `hil check` does not need
    from identification.models.press_models import PressConstants

#: the press analysis fits the memory (friction) model on all series but the last two and tests on those
MIN_SERIES = 3



#: the devices' tables are the drivers' own settings structs (defaults, ranges and rules written there once)
ForceSourceDevice = ForceSourceSettings
SensorDevice = SensorSettings


class PressDevices(Table, kw_only=True):
    force_source: ForceSourceDevice
    sensors: dict[str, SensorDevice]

    def check(self) -> None:
        if not 2 <= len(self.sensors) <= 8:
            raise Invalid("sensors", f"the press analysis needs 2 to 8 sensors, got {len(self.sensors)}")
        for name, sensor in self.sensors.items():
            if sensor.sigma is None:
                raise Invalid(f"sensors.{name}.sigma", "missing required key (the nominal noise std of one "
                                                       "reading, m: the press analysis weights by it)")


class PlanTable(Table, kw_only=True):
    q_max: Newton = 20000.0            # N, top of the staircase
    n_steps_up: Annotated[int, Meta(ge=1, le=1000)] = 14
    n_series: Annotated[int, Meta(ge=1, le=1000)] = 6      # >= MIN_SERIES (checked with its reason)
    n_samples: Annotated[int, Meta(ge=1, le=100000)] = 20
    sample_interval: Annotated[float, Meta(ge=0, le=10.0)] = 0.005  # s between two readings of a block
    settle_time: Settle = 0.1
    precondition: bool = True

    @property
    def q_desired(self) -> np.ndarray:
        up = np.linspace(0.0, self.q_max, self.n_steps_up + 1)
        return np.concatenate([up, up[-2::-1]])

    def check(self) -> None:
        if self.n_series < MIN_SERIES:
            raise Invalid("n_series", f"{self.n_series} series are too few: the press analysis needs at "
                                      f"least {MIN_SERIES} (the memory model is trained on all but the last "
                                      f"two series, tested on those); set n_series >= {MIN_SERIES}")


class CorrectionTable(Table, kw_only=True):
    tolerance: Annotated[float, Meta(gt=0, le=1e6)] = 50.0      # N
    gain: Annotated[float, Meta(gt=0, le=2)] = 1.0
    max_iterations: Annotated[int, Meta(ge=1, le=100)] = 8
    monotone: bool = True
    margin: Annotated[float, Meta(ge=0, lt=1)] = 0.5
    settle_time: Settle = 0.15
    window: Annotated[float, Meta(gt=0, le=60.0)] = 0.1         # s of force averaged per measurement
    max_stall: Annotated[float, Meta(gt=0, le=60.0)] = 1.0      # s the force stream may pause (10x while
                                                                # its source still answers polls)


class AcquisitionTable(Table, kw_only=True):
    rate: Annotated[float, Meta(gt=0, le=2000)] = 200.0   # Hz
    block: Annotated[int, Meta(ge=1, le=10000)] = 10
    max_failures: Annotated[int, Meta(ge=1, le=100)] = 3


Stiffness = Annotated[float, Meta(gt=0, le=1e13)]   # N/m


class LinkageConstants(Table, kw_only=True):
    """``[analysis.constants]``: the known constants of the press's linkage model
    (:class:`identification.models.press_models.PressConstants`), every one required: they are the site's
    own machine's (a real press's template leaves each to the site), and a partial table must not fill the
    rest in from the simulator. Absent as a whole, a simulated press uses its simulator's defaults."""

    k_lever: Stiffness                                   # N/m, lever axial stiffness
    k_guide: Stiffness                                   # N/m, horizontal stiffness of the pressure-bar guide
    k_joint: Stiffness                                   # N/m, radial bearing stiffness
    joint_beta: Annotated[float, Meta(ge=0, le=1e15)]    # 1/m^2, bearing hardening (0: linear bearings)
    b0_ratio: Annotated[float, Meta(ge=-100, le=100)]    # feeler lever ratio (B0 vertical / D vertical)

    def check(self) -> None:
        if self.b0_ratio == 0:
            raise Invalid("b0_ratio", "must not be 0: B0 would see nothing of D's travel")

    def model(self) -> PressConstants:
        from identification.models.press_models import PressConstants  # lazy: scipy, for the analysis only

        return PressConstants(**msgspec.structs.asdict(self))


class AnalysisTable(Table, kw_only=True):
    tol: Annotated[float, Meta(gt=0, lt=1)] = 0.05
    criterion: Literal["A", "D", "E"] = "E"
    n_random_splits: Annotated[int, Meta(ge=0, le=10000)] = 0
    seed: Seed = 0
    n_sensors: Annotated[int, Meta(ge=1, le=8)] = 2
    constants: LinkageConstants | None = None   # None: the model's defaults (the simulated press's values)

    def linkage(self) -> PressConstants | None:
        """The linkage constants for the analysis (None: its defaults)."""
        return self.constants.model() if self.constants is not None else None


class OnlineTable(Table, kw_only=True):
    """Online identification (daq/rigs/press/online.py) and the stopping rule on its estimate; off by
    default."""

    enabled: bool = False
    target_rel_std: Annotated[float, Meta(gt=0, lt=1)] = 0.002   # stop when every rel. std is below
    min_series: Annotated[int, Meta(ge=1, le=1000)] = 3
    verdict: bool = True            # model-uncertainty test (M1/M2/M3, [analysis] settings) from series 2 on
    stop_rule: Literal["target", "verdict", "both"] = "target"   # what may end the plan before the budget
    settle_series: Annotated[int, Meta(ge=1, le=1000)] = 2        # "verdict": same rejected set this often
    settle_needs_kept: bool = True  # a verdict rejecting every model is not settled (no adequate model yet)
    verdict_from: Annotated[int, Meta(ge=2, le=1000)] = 2          # first series count given a verdict
    dry_run: bool = False           # evaluate and record the rule (estimate "stop"), never stop the plan
    max_series: Annotated[int, Meta(ge=1, le=1000)] | None = None  # budget (default: plan.n_series)
    max_seconds: Budget | None = None                              # budget from the plan start, s
    inflate: bool = True            # scale the covariance by max(1, RSS/dof) (M1 misfit)
    alpha: Annotated[float, Meta(gt=0, lt=1)] = 0.05               # level of the ellipse axes
    wait_timeout: Wait = 10.0       # s the plan waits for a series' estimate before going on without

    def check(self) -> None:
        if self.stop_rule != "target" and not self.verdict:
            raise Invalid("stop_rule", f"{self.stop_rule!r} needs the online verdict (verdict = true)")
        if self.enabled and not self.dry_run and self.max_series is not None and self.max_series < MIN_SERIES:
            raise Invalid("max_series", f"a budget of {self.max_series} series ends the plan before the "
                                        f"{MIN_SERIES} series the press analysis needs; set max_series >= "
                                        f"{MIN_SERIES}")


class PressConfig(RigConfig, kw_only=True):
    simulator: PressSimulator | None = None
    devices: PressDevices | None = None
    plan: PlanTable = sfield(default_factory=PlanTable)
    correction: CorrectionTable = sfield(default_factory=CorrectionTable)
    acquisition: AcquisitionTable = sfield(default_factory=AcquisitionTable)
    analysis: AnalysisTable = sfield(default_factory=AnalysisTable)
    online: OnlineTable = sfield(default_factory=OnlineTable)

    def check(self) -> None:
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        src = self.devices.force_source
        if self.plan.q_max > src.f_max:
            raise Invalid("plan.q_max", f"{self.plan.q_max:g} N is above the force source's range "
                                        f"([devices.force_source].f_max = {src.f_max:g} N)")
        if self.rig.simulated:
            sim = self.simulator or PressSimulator()
            if src.f_max > sim.force_source.f_max:
                raise Invalid("devices.force_source.f_max",
                              f"{src.f_max:g} N is above what the simulated source accepts "
                              f"([simulator.force_source].f_max = {sim.force_source.f_max:g} N)")
        step = self.plan.q_max / self.plan.n_steps_up
        if self.correction.tolerance >= step:
            raise Invalid("correction.tolerance", "must be smaller than one step of the staircase "
                                                  f"([plan].q_max / n_steps_up = {step:g} N)")
        if not self.rig.simulated and self.analysis.constants is None:
            raise Invalid("analysis.constants", "missing required table: a real press needs its linkage's "
                                                "own constants (k_lever, k_guide, k_joint, joint_beta, "
                                                "b0_ratio); only a simulated press takes the simulator's",
                          table=True)
        if self.analysis.n_sensors > len(self.devices.sensors):
            raise Invalid("analysis.n_sensors",
                          f"more than the {len(self.devices.sensors)} sensors configured")


# ----------------------------------------------------------------------------------------- rig rules


def check_rig(cfg: PressConfig, config_dir: Path) -> None:
    """What `hil run` builds before the first byte is sent, built here: the simulated plant and devices
    (``[rig].simulated``) and the drivers of ``[devices]`` (register maps, limits). Any refusal is an
    :class:`Invalid` naming the table it comes from."""
    assert cfg.devices is not None  # [devices] is required (PressConfig.check)
    if cfg.rig.simulated:
        for name, sensor in cfg.devices.sensors.items():
            if name not in SENSOR_NAMES:
                raise Invalid(f"devices.sensors.{name}", f"the simulated press has no sensor {name!r} (it "
                                                         f"has {', '.join(SENSOR_NAMES)})", table=True)
            if sensor.protocol != "modbus_tcp" and not str(sensor.url).startswith("socket://"):
                raise Invalid(f"devices.sensors.{name}.url", "a simulated sensor listens on a socket: "
                                                             f"give socket://HOST:PORT, got {sensor.url!r}")
        for name in (cfg.simulator.sensors if cfg.simulator else {}):
            if name not in cfg.devices.sensors:
                raise Invalid(f"simulator.sensors.{name}", f"no sensor {name!r} in [devices.sensors]",
                              table=True)
        _build("simulator", lambda: PressRig(to_dict(cfg)))  # built, not started: no socket opens
    _build("devices.force_source", lambda: ForceSource(cfg.devices.force_source, name="force_source"))
    for name, table in cfg.devices.sensors.items():
        _build(f"devices.sensors.{name}", lambda n=name, t=table: open_sensor(n, t))


def _build(table: str, make) -> None:
    try:
        make()
    except (TypeError, ValueError, KeyError, HilError) as exc:
        raise Invalid(table, str(exc) or type(exc).__name__, table=True) from None
