"""The crane rig's settings: its config struct (``[simulator]``, ``[devices]``, ``[excitation]``,
``[model_selection]``, ``[online]``), its streams, and the online fit's settings derived from them.

Both :mod:`daq.rigs.crane.rig` and :mod:`daq.rigs.crane.online` import it; it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Range, RigConfig, Seed, Table, Wait
from daq.rigs.crane.distortion_config import DistortionTable
from daq.rigs.drive import DriveDevicesTable, check_drive
from daq.rigs.excitation import ROLES, ExcitationTable
from identification.models.drive_models import DEFAULT_BOUNDS, all_structures, parse_name
from simulators.settings import DriveSimulator

TRACE_STREAM = "crane.trace"
PLAN_STREAM = "crane.plan"
ONLINE_STREAM = "crane.online"
CHANNELS = ["torque_cmd", "torque", "speed"]
UNITS = ["N*m", "N*m", "rad/s"]


# ----------------------------------------------------------------------------------------- config


class CraneSimulator(DriveSimulator, kw_only=True):
    """``[simulator]`` of the crane: the simulated drive's table with the crane as its plant."""

    def check(self) -> None:
        if self.plant not in (None, "crane"):
            raise Invalid("plant", f"the crane rig's simulated drive moves the crane, got {self.plant!r}")
        super().check()


class ModelSelectionTable(Table, kw_only=True):
    max_masses: Annotated[int, Meta(ge=1, le=3)] = 3
    candidates: Annotated[list[str], Meta(min_length=1)] | None = None
    n_starts: Annotated[int, Meta(ge=1, le=1000)] = 3
    seed: Seed = 0
    max_nfev: Annotated[int, Meta(ge=1, le=100000)] = 60
    decimate: Annotated[int, Meta(ge=1, le=1000)] = 5
    skip: Annotated[int, Meta(ge=0, le=10**7)] = 0          # samples left out at the start of a trace
    friction_eps: Annotated[float, Meta(gt=0, le=100.0)] = 0.05   # rad/s
    min_pii_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.0
    max_condition_index: Annotated[float, Meta(gt=0, le=1e6)] = 1000.0
    max_rel_std: Annotated[float, Meta(gt=0, le=1e3)] = 0.25  # standard error / |value| of every parameter
    min_validation_fit: Annotated[float, Meta(ge=-1e3, le=1)] = 0.8
    parsimony_tol: Annotated[float, Meta(ge=0, le=1)] = 0.01
    profile_points: Annotated[int, Meta(ge=1, le=1000)] = 9
    n_jobs: Annotated[int, Meta(ge=1, le=1024)] = 2
    scheduler: str | None = None  # None: local process pool of n_jobs; "local": Dask LocalCluster; "tcp://..."
    bounds: dict[str, Range] = sfield(default_factory=dict)

    def check(self) -> None:
        for name, (lo, hi) in self.bounds.items():
            if name not in DEFAULT_BOUNDS:
                raise Invalid(f"bounds.{name}",
                              f"unknown parameter (known: {', '.join(sorted(DEFAULT_BOUNDS))})")
            if not lo < hi:
                raise Invalid(f"bounds.{name}", f"needs lo < hi, got [{lo}, {hi}]")
        for c in self.candidates or []:
            try:
                parse_name(c)
            except (KeyError, ValueError) as exc:
                raise Invalid("candidates", f"{c!r}: {exc}") from None

    def options(self) -> dict:
        """Keyword arguments of identification.selection.model_selection.select_model."""
        bounds = {**DEFAULT_BOUNDS, **{k: (float(v[0]), float(v[1])) for k, v in self.bounds.items()}}
        candidates = ([parse_name(c) for c in self.candidates] if self.candidates
                      else all_structures(self.max_masses))
        keys = ("n_starts", "seed", "max_nfev", "decimate", "skip", "friction_eps", "min_pii_ratio",
                "max_condition_index", "max_rel_std", "min_validation_fit", "parsimony_tol", "profile_points",
                "n_jobs")
        return dict(bounds=bounds, candidates=candidates, **{k: getattr(self, k) for k in keys})


class OnlineTable(Table, kw_only=True):
    """Online identification (daq/rigs/crane/online.py): refit one model after every trajectory; off by
    default."""

    enabled: bool = False
    model: str = "3m+visc+coul+dt"  # one structure of the kit (the shipped truth's expected choice)
    n_starts: Annotated[int, Meta(ge=1, le=1000)] = 3   # start points of the first (cold) fit
    seed: Seed = 0
    max_nfev: Annotated[int, Meta(ge=1, le=100000)] = 100   # Jacobian evaluations per fit
    decimate: Annotated[int, Meta(ge=1, le=1000)] | None = None   # default: [model_selection].decimate
    alpha: Annotated[float, Meta(gt=0, lt=1)] = 0.05   # level of the confidence-ellipsoid axes
    worker: Literal["process", "thread"] = "process"
    wait_timeout: Wait = 120.0  # s the plan waits for the last trajectory's estimate before it ends

    def check(self) -> None:
        try:
            parse_name(self.model)
        except (KeyError, ValueError) as exc:
            raise Invalid("model", str(exc)) from None


class CraneConfig(RigConfig, kw_only=True):
    simulator: CraneSimulator | None = None
    devices: DriveDevicesTable | None = None
    excitation: ExcitationTable
    model_selection: ModelSelectionTable = sfield(default_factory=ModelSelectionTable)
    online: OnlineTable = sfield(default_factory=OnlineTable)
    distortion: DistortionTable = sfield(default_factory=DistortionTable)

    def check(self) -> None:
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        drive = self.devices.drive
        n = self.distortion.samples(self.excitation.dt)[1]
        if self.distortion.enabled and n > drive.max_samples:
            raise Invalid("distortion.n_periods", f"{n} samples per realisation exceed "
                                                  f"[devices.drive].max_samples ({drive.max_samples})")
        for role in ROLES:
            r = self.excitation.role(role)
            n = round(r["duration"] / r["dt"])
            if n > drive.max_samples:
                raise Invalid(f"excitation.{role}" if getattr(self.excitation, role).duration else
                              "excitation.duration", f"{n} samples exceed [devices.drive].max_samples "
                                                     f"({drive.max_samples})")


# ----------------------------------------------------------------------------------------- online fit


@dataclass
class OnlineFitSettings:
    """What is fitted and how (the ``[online]`` table with the ``[model_selection]`` defaults)."""

    model: str = "3m+visc+coul+dt"
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    n_starts: int = 3        # cold start of the first trajectory's fit
    seed: int = 0
    max_nfev: int = 100
    decimate: int = 5
    skip: int = 0
    friction_eps: float = 0.05  # rad/s
    alpha: float = 0.05      # level of the ellipsoid axes
    worker: str = "process"  # or "thread"

    def fit_kwargs(self) -> dict:
        return dict(bounds=dict(self.bounds), n_starts=self.n_starts, seed=self.seed, max_nfev=self.max_nfev,
                    decimate=self.decimate, skip=self.skip, friction_eps=self.friction_eps, alpha=self.alpha)


def online_settings(cfg: CraneConfig) -> OnlineFitSettings:
    """The online fit's settings: ``[online]`` over the ``[model_selection]`` bounds and model step."""
    o, ms = cfg.online, cfg.model_selection.options()
    return OnlineFitSettings(model=o.model, bounds=ms["bounds"], n_starts=o.n_starts, seed=o.seed,
                             max_nfev=o.max_nfev, decimate=o.decimate or ms["decimate"], skip=ms["skip"],
                             friction_eps=ms["friction_eps"], alpha=o.alpha, worker=o.worker)


# ----------------------------------------------------------------------------------------- rig rules


def check_rig(cfg: CraneConfig, config_dir: Path) -> None:
    """What `hil run` needs before the first byte, checked by `hil check` too: each role's multisine grid
    fits its band (the lines the design will excite), the export folder can be one, the drive's security
    files and the simulated drive accept the inputs (:func:`daq.rigs.drive.check_drive`)."""
    from identification.design.multisine import multisine_lines  # lazy: scipy

    inputs = []
    for role in ROLES:
        r = cfg.excitation.role(role)
        where = f"excitation.{role}" if getattr(cfg.excitation, role).n_lines else "excitation.n_lines"
        try:
            multisine_lines(r["f_min"], r["f_max"], r["n_lines"], r["dt"], r["grid"], r["odd_only"],
                            period=r["duration"] / r["n_periods"])
        except ValueError as exc:
            raise Invalid(where, f"{role} multisine: {exc}") from None
        key = f"excitation.{role}" if getattr(cfg.excitation, role).duration else "excitation.duration"
        inputs.append((key, r["dt"], round(r["duration"] / r["dt"])))
    out = cfg.excitation.export_dir
    if out and Path(out).exists() and not Path(out).is_dir():
        raise Invalid("excitation.export_dir", f"{out} is a file; the export writes <role>.csv and "
                                               "<role>.png into a folder")
    simulated = (cfg.simulator or CraneSimulator()).drive if cfg.rig.simulated else None
    assert cfg.devices is not None  # [devices] is required (the config's check)
    check_drive(cfg.devices.drive, simulated, inputs)
