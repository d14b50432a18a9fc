"""The adjoint rigs' settings: which plant each kind moves, its channels, and the config struct
(``[simulator]``, ``[devices]``, ``[adjoint]``, ``[excitation]``, ``[plan]``, ``[fit]``, ``[sequential]``).

The rig, the online identifier, the design helpers and the plots import it; it imports none of them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Count, NonNegative, Positive, RigConfig, Table
from daq.rigs.drive import DriveDevicesTable
from daq.rigs.excitation import ExcitationTable

#: plant -> (measured output name, unit)
OUTPUTS = {"oscillator": ("x2", "m"), "pendulum": ("phi", "rad"), "crane": ("w1", "rad/s")}
#: plant -> (input name, unit)
INPUTS = {"oscillator": ("force", "N"), "pendulum": ("force", "N"), "crane": ("torque", "N*m")}
#: rig kind -> the plant it moves
PLANT_OF = {"oscillator": "oscillator", "pendulum": "pendulum", "crane-adjoint": "crane"}
#: the driven body's speed state of each plant (its design limit may not exceed the drive's speed limit)
SPEED_STATE = {"oscillator": "v1", "pendulum": "v_c", "crane": "w1"}
#: nuisance parameter -> the simulator truth key it estimates (where the names differ)
NUISANCE_TRUTH = {"pendulum": {"f_c": "cart_coulomb", "f_p": "joint_coulomb"}}
DESIGNS = ("adjoint", "F0", "sine", "multisine")


# ----------------------------------------------------------------------------------------- config


class Simulator(Table, kw_only=True):
    plant: str | None = None
    truth: dict[str, float] = sfield(default_factory=dict)
    drive: dict[str, Any] = sfield(default_factory=dict)

    def check(self) -> None:
        from simulators.crane_drive import DriveSettings, get_plant  # lazy: asyncua and scipy

        try:
            plant = get_plant(self.plant)
        except ValueError as exc:
            raise Invalid("plant", str(exc)) from None
        for key, build in (("truth", plant.truth.from_config), ("drive", DriveSettings.from_config)):
            try:
                build(dict(getattr(self, key)))
            except (TypeError, ValueError) as exc:
                why = re.sub(r"^(\[[^\]]*\]|\w+ truth):?\s*", "", str(exc))
                raise Invalid(key, why, table=True) from None


class AdjointTable(Table, kw_only=True):
    """The design (``identification.adjoint_plants.design_problem`` spec plus optimiser settings)."""

    plant: str
    parameters: list[str]
    criterion: Literal["A", "D", "E"] = "D"
    scaling: Literal["relative", "none"] = "relative"
    t_f: Positive
    dt: Positive                      # s, input sample time
    n_sub: Count = 2
    u_max: Positive                   # N (N*m for the crane), |u| <= u_max
    start: float = 0.5                # F0 = start * F_max
    sigma: Positive                   # measurement noise std (output units)
    meas_dt: Positive                 # s, measurement sample time assumed by the design
    method: Literal["lbfgs", "gradient"] = "lbfgs"
    max_iter: Count = 300
    rounds: Count = 6
    end_tol: Positive = 1e-3
    end_weight: Positive = 1000.0
    limit_weight: Positive = 1000.0
    end: dict[str, Positive] = sfield(default_factory=dict)
    limits: dict[str, Positive] = sfield(default_factory=dict)
    nominal: dict[str, float] = sfield(default_factory=dict)  # design point; default: simulator truth

    def check(self) -> None:
        if self.plant not in OUTPUTS:
            raise Invalid("plant", f"must be one of {sorted(OUTPUTS)}, got {self.plant!r}")
        n = round(self.t_f / self.dt)
        if n < 1 or abs(n * self.dt - self.t_f) > 1e-9 * self.t_f:
            raise Invalid("t_f", f"{self.t_f} s is not a whole number of input samples dt = {self.dt} s")
        if not -1 <= self.start <= 1:
            raise Invalid("start", f"must be within [-1, 1] (a fraction of u_max), got {self.start}")

    def spec(self) -> dict:
        keys = ("parameters", "criterion", "scaling", "t_f", "dt", "n_sub", "u_max", "start", "sigma",
                "meas_dt", "end", "limits", "end_weight", "limit_weight")
        return {k: getattr(self, k) for k in keys}


class PlanTable(Table, kw_only=True):
    design: Literal["adjoint", "F0", "sine", "multisine"] = "adjoint"
    trajectory: str = "trajectory.csv"   # CSV written by `hil design adjoint` (t [s], force [N])
    design_if_missing: bool = True       # no file: design on the fly (off the event loop)


class FitTable(Table, kw_only=True):
    start: Positive = 1.05      # the fit starts at start * the design point
    skip: NonNegative = 0.0     # s left out at the beginning of the record
    n_sigma: Positive = 3.0     # |estimate - truth| <= n_sigma * std counts as "within"
    input_lag: NonNegative = 0.0  # s, known time constant of the force actuator (the model has none)
    # nuisance parameters fitted alongside the design's (name -> start and nominal value, SI): pendulum
    # d_c, f_c, f_p; crane viscous, coulomb, stribeck_torque, stribeck_speed, dead_time; oscillator d1, ...
    nuisance: dict[str, float] = sfield(default_factory=dict)
    friction_speed_eps: Positive | None = None  # smooth sign tanh(v/eps) of the fitted Coulomb terms
    decimate: Count = 1         # crane: the model runs on decimate * cycle, every decimate-th sample used


class SequentialTable(Table, kw_only=True):
    """Online estimate after every run and the sequential design loop (issue 10); off by default.

    Loop: run, refit over all runs, stop when every relative std <= ``target_rel_std`` (or a budget is
    spent), else re-solve the adjoint design at the estimate (``redesign``; else repeat the input) and run.
    """

    enabled: bool = False
    target_rel_std: Positive = 1e-3   # stop when every relative std of the estimate is <= this
    max_runs: Count = 5               # budget, runs (the first, [plan] input, included)
    max_seconds: Positive | None = None  # budget from the plan start, s (wall clock)
    redesign: bool = True             # re-solve the adjoint design at each new estimate
    shrink: Positive = 0.25           # warm start = shrink * previous input (off the bounds)
    cold_start: bool = True           # also design from F0 and keep the better (a far-off old design traps
                                      # the warm start: see identification.sequential_design.redesign)
    alpha: Positive = 0.05            # level of the confidence ellipsoid in the estimate events
    wait_timeout: Positive = 120.0    # s the plan waits for a run's estimate

    def check(self) -> None:
        if self.shrink > 1:
            raise Invalid("shrink", f"must be in (0, 1], got {self.shrink}")
        if self.alpha >= 1:
            raise Invalid("alpha", f"must be in (0, 1), got {self.alpha}")


class AdjointRigConfig(RigConfig, kw_only=True):
    simulator: Simulator | None = None
    devices: DriveDevicesTable | None = None
    adjoint: AdjointTable
    excitation: ExcitationTable | None = None   # crane: the shipped multisine ([plan] design = "multisine")
    plan: PlanTable = sfield(default_factory=PlanTable)
    fit: FitTable = sfield(default_factory=FitTable)
    sequential: SequentialTable = sfield(default_factory=SequentialTable)

    def check(self) -> None:
        kind = self.rig.kind
        plant = PLANT_OF.get(kind, kind)
        if self.sequential.enabled and self.sequential.redesign and self.plan.design != "adjoint":
            raise Invalid("sequential.redesign", f"re-designs the adjoint input; [plan].design is "
                                                 f"{self.plan.design!r} (set redesign = false to repeat it)")
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        if self.adjoint.plant != plant:
            raise Invalid("adjoint.plant", f"{self.adjoint.plant!r} in a {kind!r} rig (plant {plant!r})")
        if self.simulator is not None and (self.simulator.plant or "crane") != plant:
            raise Invalid("simulator.plant", f"the simulated drive must host the {plant!r} plant, "
                                             f"got {self.simulator.plant!r}")
        drive = self.devices.drive
        unit = INPUTS[plant][1]
        if self.adjoint.u_max > drive.torque_limit:
            raise Invalid("adjoint.u_max", f"{self.adjoint.u_max} {unit} exceeds [devices.drive]."
                                           f"torque_limit ({drive.torque_limit} {unit})")
        speed = SPEED_STATE[plant]
        if self.adjoint.limits.get(speed, 0.0) > drive.speed_limit:
            raise Invalid(f"adjoint.limits.{speed}", f"{self.adjoint.limits[speed]} exceeds "
                                                     f"[devices.drive].speed_limit ({drive.speed_limit})")
        if self.plan.design == "multisine" and plant != "crane":
            raise Invalid("plan.design", "'multisine' is the crane's shipped multisine ([excitation])")
        n = round(self.adjoint.t_f / self.adjoint.dt)
        if n > drive.max_samples:
            raise Invalid("adjoint.t_f", f"{n} samples exceed [devices.drive].max_samples "
                                         f"({drive.max_samples})")
