"""The ``[simulator]`` tables of every rig kind, typed once here and composed by the rig schemas.

Each table is a :class:`drivers.settings.Settings` struct (unknown keys refused, ranges as ``Meta``, relations
in ``check()``), as the drivers' settings tables are: the service's config walk checks them with key paths in
its messages, and the simulators take them parsed (or a plain mapping, through :func:`settings_from`).
Every rig's table holds the run's clock speed (:class:`SimulatorTable`): ``speed = 10`` runs the plan and
the simulated devices ten times faster than real time (:class:`drivers.clock.Clock`).

The plant truths (``[simulator.truth]``) stay the physics' own dataclasses: their rules (names, signs,
relations) are checked by building them, in each table's ``check()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from msgspec import Meta
from msgspec import field as sfield

from drivers.clock import MAX_SPEED, Clock
from drivers.settings import InvalidSetting, PathStr, Port, Settings, settings_from

__all__ = ["DriveSettings", "DriveSimulator", "ForceSourceParams", "MachineToolSimulator", "PressSimulator",
           "SensorNoise", "SimulatorTable", "settings_from"]

BIG = 1e12
Finite = Annotated[float, Meta(ge=-BIG, le=BIG)]
Seed = Annotated[int, Meta(ge=0, le=2**32 - 1)]
Newton = Annotated[float, Meta(ge=0, le=1e7)]
Speed = Annotated[float, Meta(gt=0, le=MAX_SPEED)]


class SimulatorTable(Settings, kw_only=True):
    """What every ``[simulator]`` has: the clock's speed and how far behind its physics may fall."""

    speed: Speed = 1.0          # > 1: the plan and every simulated device run this many times faster
    # s of simulated time the simulation's ticks (and the press's force polls) may run late on average,
    # tick after tick, before the run stops as too fast for this machine (one stall does not count)
    max_lag: Annotated[float, Meta(gt=0, le=60.0)] = 1.0

    def clock(self) -> Clock:
        """A fresh clock at this table's speed."""
        return Clock(self.speed)


# ----------------------------------------------------------------------------------------- press


class ForceSourceParams(Settings, kw_only=True):
    """``[simulator.force_source]``: the pneumatic force source (simulators/force_source_sim.py)."""

    f_max: Newton = 25000.0                                          # N, setpoints beyond are refused
    tau: Annotated[float, Meta(gt=0, le=60.0)] = 0.05               # s, the source's lag
    gain: Annotated[float, Meta(gt=0, le=10.0)] = 0.97              # static gain (command -> force)
    offset: Annotated[float, Meta(ge=-1e6, le=1e6)] = -15.0         # N (seal breakaway; force clipped at 0)
    pressure_nominal: Annotated[float, Meta(gt=0, le=1e8)] = 6.0e5  # Pa
    pressure_rel_sigma: Annotated[float, Meta(ge=0, le=1.0)] = 0.003  # relative std of the supply pressure
    pressure_corr_time: Annotated[float, Meta(gt=0, le=3600.0)] = 0.5  # s
    loadcell_sigma: Annotated[float, Meta(ge=0, le=1e5)] = 2.0      # N
    pressure_sensor_sigma: Annotated[float, Meta(ge=0, le=1e7)] = 50.0  # Pa
    watchdog_timeout: Annotated[float, Meta(gt=0, le=60.0)] = 1.0   # s (real: it guards the link)
    tick: Annotated[float, Meta(gt=0, le=0.1)] = 0.002              # s, physics period
    settled_band: Annotated[float, Meta(gt=0, le=1.0)] = 0.002      # settled: |force - target| < band * f_max


class SensorNoise(Settings, kw_only=True):
    """``[simulator.sensors.NAME]``: how a simulated displacement sensor degrades the true value."""

    sigma: Annotated[float, Meta(ge=0, le=0.1)] = 0.0        # m, noise std
    resolution: Annotated[float, Meta(ge=0, le=0.1)] = 0.0   # m, quantisation step (0: none)


class PressSimulator(SimulatorTable, kw_only=True):
    """``[simulator]`` of a press config."""

    seed: Seed = 0
    plant_period: Annotated[float, Meta(gt=0, le=1.0)] = 0.005   # s, how often the linkage is re-solved
    truth: dict[str, Finite] = sfield(default_factory=dict)       # simulators.physics.press.PressTruth
    force_source: ForceSourceParams = sfield(default_factory=ForceSourceParams)
    sensors: dict[str, SensorNoise] = sfield(default_factory=dict)

    def check(self) -> None:
        import numpy as np

        from simulators.physics.press import PressLinkage, PressTruth  # lazy: the plant, only when checked

        try:
            truth = PressTruth.from_config(dict(self.truth))
        except (TypeError, ValueError) as exc:
            raise InvalidSetting("truth", str(exc)) from None
        try:  # the plant as the simulator builds it (hysteresis elements from the spreads)
            with np.errstate(all="raise"):
                PressLinkage(truth)
        except (ValueError, FloatingPointError, ZeroDivisionError) as exc:
            raise InvalidSetting("truth", f"the simulated plant cannot be built from these values: {exc}",
                                 table=True) from None


# ----------------------------------------------------------------------------------------- servo drive


class DriveSettings(Settings, kw_only=True):
    """``[simulator.drive]``: the simulated OPC UA servo drive (simulators/crane_drive.py)."""

    name: str = "crane-drive-sim"
    host: str = "127.0.0.1"
    port: Port = 0
    secure_port: Port = 0
    security: Literal["none", "secure", "both"] = "none"
    pki_dir: PathStr = "sessions/pki/crane"   # relative: to the config file's folder
    users: dict[str, str] = sfield(default_factory=lambda: {"operator": "crane-sim"})
    namespace: str = "urn:hil-lab:crane-drive"
    axis: Annotated[str, Meta(min_length=1)] = "Axis1"
    cycle_time: Annotated[float, Meta(ge=1e-6, le=0.01)] = 1e-4        # s, the drive's cycle
    max_samples: Annotated[int, Meta(ge=2, le=10**8)] = 100_000
    max_sample_time: Annotated[float, Meta(gt=0, le=1.0)] = 0.01       # s
    torque_limit: Annotated[float, Meta(gt=0, le=1e5)] = 20.0
    speed_limit: Annotated[float, Meta(gt=0, le=1e4)] = 150.0
    live_rate: Annotated[float, Meta(gt=0, le=1000.0)] = 25.0          # Hz (real: what a client polls)
    watchdog_timeout: Annotated[float, Meta(gt=0, le=60.0)] = 1.0      # s (real: it guards the link)
    seed: Seed = 4

    def check(self) -> None:
        if self.max_sample_time / self.cycle_time < 1 - 1e-9:
            raise InvalidSetting("max_sample_time", f"{self.max_sample_time} s is below cycle_time "
                                                     f"({self.cycle_time} s)")

    def accepts(self, dt: float) -> str | None:
        """Why the simulated drive refuses a trajectory sampled at ``dt`` (None: it accepts it)."""
        ratio = dt / self.cycle_time
        if dt > self.max_sample_time * (1 + 1e-9) or abs(ratio - round(ratio)) > 1e-6 * max(1.0, ratio):
            return (f"the simulated drive plays sample times that are multiples of [simulator.drive]."
                    f"cycle_time ({self.cycle_time} s) up to max_sample_time ({self.max_sample_time} s)")
        return None


class DriveSimulator(SimulatorTable, kw_only=True):
    """``[simulator]`` of a rig behind the simulated drive: the plant it moves, its truth and the drive."""

    plant: str | None = None                                  # crane (default), oscillator, pendulum
    truth: dict[str, Finite] = sfield(default_factory=dict)   # the plant's truth (simulators/physics/)
    drive: DriveSettings = sfield(default_factory=DriveSettings)

    def check(self) -> None:
        import re

        from simulators.plants import get_plant  # lazy: scipy and the simulator's plants

        try:
            plant = get_plant(self.plant)
        except ValueError as exc:
            raise InvalidSetting("plant", str(exc)) from None
        try:  # the plant's own rules (names, signs, relations) are the truth's: checked by building it
            plant.truth.from_config(dict(self.truth))
        except (TypeError, ValueError) as exc:
            why = re.sub(r"^(\[[^\]]*\]|\w+ truth):?\s*", "", str(exc))
            raise InvalidSetting("truth", why, table=True) from None


# ----------------------------------------------------------------------------------------- machine tool


class MachineToolSimulator(SimulatorTable, kw_only=True):
    """``[simulator]`` of a machine-tool config: the simulated modal front end (machine_tool_sim.py)."""

    truth: dict[str, Annotated[float, Meta(gt=0, le=1e12)]] = sfield(default_factory=dict)  # joint k, c
    variant: Literal["ideal", "disturbed"] = "ideal"
    noise: dict[str, Annotated[float, Meta(ge=0, le=1e3)]] = sfield(default_factory=dict)  # accel m/s^2,
                                                                                            # force N rms
    seed: Seed = 0
    host: str = "127.0.0.1"
    port: Port = 0
    axis_speed: Annotated[float, Meta(gt=0, le=10.0)] = 0.5   # m/s, how fast a move takes (on the clock)

    @property
    def accel_noise(self) -> float:
        return float(self.noise.get("accel", 1e-3))   # m/s^2 rms on every accelerometer

    @property
    def force_noise(self) -> float:
        return float(self.noise.get("force", 0.05))   # N rms

    def check(self) -> None:
        from simulators.physics.machine_tool import truth_values  # lazy: the structure, only when checked

        if set(self.noise) - {"accel", "force"}:
            raise InvalidSetting("noise", "keys accel and force (>= 0) only")
        try:
            truth_values(dict(self.truth))  # unknown parameter names raise here
        except ValueError as exc:
            raise InvalidSetting("truth", str(exc), table=True) from None


def simulator_table(config: Mapping[str, Any] | SimulatorTable, cls: type[SimulatorTable]) -> Any:
    """The ``[simulator]`` of a whole rig config (or the table itself) as ``cls``, checked."""
    if isinstance(config, SimulatorTable):
        return config
    if "simulator" in config:
        sim = config["simulator"]
    else:  # a whole config without the table takes the defaults; else the mapping is the table
        sim = {} if any(k in config for k in ("rig", "devices", "plan")) else config
    return settings_from(dict(sim or {}), cls) if not isinstance(sim, cls) else sim
