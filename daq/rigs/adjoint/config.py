"""The adjoint rigs' settings: which plant each kind moves, its channels, and the config struct
(``[simulator]``, ``[devices]``, ``[adjoint]``, ``[excitation]``, ``[plan]``, ``[fit]``, ``[sequential]``).

The rig, the online identifier, the design helpers and the plots import it; it imports none of them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Budget, Finite, PathStr, Positive, RigConfig, Table, Wait
from daq.rigs.drive import DriveDevicesTable
from daq.rigs.excitation import ExcitationTable
from simulators.settings import DriveSimulator

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


#: ``[simulator]``: the simulated drive's own table (plant, truth, drive, speed)
Simulator = DriveSimulator


class AdjointTable(Table, kw_only=True):
    """The design (``identification.analyses.adjoint_plants.design_problem`` spec plus optimiser settings)."""

    plant: str
    parameters: Annotated[list[str], Meta(min_length=1)]
    criterion: Literal["A", "D", "E"] = "D"
    scaling: Literal["relative", "none"] = "relative"
    t_f: Annotated[float, Meta(gt=0, le=600.0)]      # s, length of the input
    dt: Annotated[float, Meta(ge=1e-6, le=1.0)]      # s, input sample time
    n_sub: Annotated[int, Meta(ge=1, le=1000)] = 2
    u_max: Annotated[float, Meta(gt=0, le=1e5)]      # N (N*m for the crane), |u| <= u_max
    start: Annotated[float, Meta(ge=-1, le=1)] = 0.5  # F0 = start * F_max
    sigma: Positive                   # measurement noise std (output units)
    meas_dt: Annotated[float, Meta(ge=1e-6, le=10.0)]  # s, measurement sample time assumed by the design
    method: Literal["sqp", "lbfgs", "gradient"] = "sqp"  # sqp: end conditions exact (adjoint_sqp)
    max_iter: Annotated[int, Meta(ge=1, le=100000)] = 300
    rounds: Annotated[int, Meta(ge=1, le=100)] = 6
    end_tol: Positive = 1e-3
    end_weight: Positive = 1000.0
    limit_weight: Positive = 1000.0
    end: dict[str, Positive] = sfield(default_factory=dict)
    limits: dict[str, Positive] = sfield(default_factory=dict)
    # the design point: prior knowledge (data sheet, an earlier identification), every value of the design
    # model; required for a design (`hil design adjoint --prior SESSION` puts a session's estimate over it)
    nominal: dict[str, Finite] = sfield(default_factory=dict)
    grad_tol: Positive = 0.05         # converged: no sample's projected gradient step > grad_tol x its range

    def check(self) -> None:
        if self.plant not in OUTPUTS:
            raise Invalid("plant", f"must be one of {sorted(OUTPUTS)}, got {self.plant!r}")
        n = round(self.t_f / self.dt)
        if n < 1 or abs(n * self.dt - self.t_f) > 1e-9 * self.t_f:
            raise Invalid("t_f", f"{self.t_f} s is not a whole number of input samples dt = {self.dt} s")

    def spec(self) -> dict:
        keys = ("parameters", "criterion", "scaling", "t_f", "dt", "n_sub", "u_max", "start", "sigma",
                "meas_dt", "end", "limits", "end_weight", "limit_weight")
        return {k: getattr(self, k) for k in keys}


class PlanTable(Table, kw_only=True):
    design: Literal["adjoint", "F0", "sine", "multisine"] = "adjoint"
    trajectory: PathStr = "trajectory.csv"   # CSV written by `hil design adjoint` (t [s], force [N]);
                                             # relative: to the config file's folder
    design_if_missing: bool = True       # no file: design on the fly (off the event loop)


class FitTable(Table, kw_only=True):
    start: Positive = 1.0       # the fit starts at start * the design point (the nominal or the prior)
    skip: Annotated[float, Meta(ge=0, le=600.0)] = 0.0     # s left out at the beginning of the record
    n_sigma: Annotated[float, Meta(gt=0, le=100.0)] = 3.0  # |estimate - truth| <= n_sigma * std: "within"
    input_lag: Annotated[float, Meta(ge=0, le=10.0)] = 0.0  # s, known time constant of the actuator
    # nuisance parameters fitted alongside the design's (name -> start and nominal value, SI): pendulum
    # d_c, f_c, f_p; crane viscous, coulomb, stribeck_torque, stribeck_speed, dead_time; oscillator d1, ...
    # A name the design point has (pendulum d_c, crane viscous) starts at the design point instead.
    nuisance: dict[str, Finite] = sfield(default_factory=dict)
    friction_speed_eps: Annotated[float, Meta(gt=0, le=100.0)] | None = None  # smooth sign tanh(v/eps)
    decimate: Annotated[int, Meta(ge=1, le=1000)] = 1  # crane: the model runs on decimate * cycle


class SequentialTable(Table, kw_only=True):
    """Online estimate after every run and the sequential design loop (issue 10); off by default.

    Loop: run, refit over all runs, stop when every relative std <= ``target_rel_std`` (or a budget is
    spent), else re-solve the adjoint design at the estimate (``redesign``; else repeat the input) and run.
    """

    enabled: bool = False
    target_rel_std: Annotated[float, Meta(gt=0, le=1.0)] = 1e-3  # stop when every relative std <= this
    max_runs: Annotated[int, Meta(ge=1, le=1000)] = 5   # budget, runs (the first, [plan] input, included)
    max_seconds: Budget | None = None  # budget from the plan start, s (wall clock)
    redesign: bool = True             # re-solve the adjoint design at each new estimate
    shrink: Annotated[float, Meta(gt=0, le=1)] = 0.25   # warm start = shrink * previous input
    cold_start: bool = True           # also design from F0 and keep the better (a far-off old design traps
                                      # the warm start: see identification.design.sequential_design.redesign)
    accumulate: bool = True           # a redesign maximises the information of all runs together (the
                                      # earlier inputs' Fisher matrix at the estimate as prior); false: the
                                      # new run's own, as if it were the only one
    alpha: Annotated[float, Meta(gt=0, lt=1)] = 0.05  # level of the confidence ellipsoid in the estimates
    wait_timeout: Wait = 120.0        # s the plan waits for a run's estimate


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
