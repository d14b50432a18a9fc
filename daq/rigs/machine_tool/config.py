"""The machine-tool rig's settings: its config struct (``[simulator]``, ``[devices]``, ``[plan]``,
``[excitation]``, ``[analysis]``) and the rules that need the rig's own code (:func:`check_rig`, run by
`hil check` and `hil run` before anything opens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid, to_dict
from daq.config.schema import Hz, RigConfig, Seed, Table
from drivers.modal_frontend import FrontEndSettings, ModalFrontEnd
from identification.models.machine_tool_model import MachineTool, MachineToolConstants, as_vector
from simulators.settings import MachineToolSimulator

#: a stiffness (N/m) or damping (N*s/m) of a machine-tool joint: positive, below what steel can have
Joint = Annotated[float, Meta(gt=0, le=1e12)]


#: ``[simulator]`` is the simulated front end's own table (simulators/settings.py)
MTSimulator = MachineToolSimulator


#: ``[devices.frontend]`` is the driver's own settings struct
FrontEndDevice = FrontEndSettings


class MTDevices(Table, kw_only=True):
    frontend: FrontEndDevice


class MTPlan(Table, kw_only=True):
    positions: list[Annotated[float, Meta(ge=0, le=100.0)]]  # m, identification positions
    validation: list[Annotated[float, Meta(ge=0, le=100.0)]] = sfield(default_factory=list)  # m, held back
    inputs: list[str] = sfield(default_factory=lambda: ["T1x", "T1y", "T1z"])  # excitation DOFs

    def check(self) -> None:
        if not self.positions:
            raise Invalid("positions", "needs at least one identification position")
        travel = MachineToolConstants().travel
        for key in ("positions", "validation"):
            for p in getattr(self, key):
                if p > travel:
                    raise Invalid(key, f"{p} m is beyond the axis travel ({travel} m)")
        labels = MachineTool().obs_labels
        for i in self.inputs:
            if i not in labels:
                raise Invalid("inputs", f"{i!r} is not a measured DOF ({', '.join(labels)})")
        if not self.inputs:
            raise Invalid("inputs", "needs at least one excitation DOF")


class MTExcitation(Table, kw_only=True):
    f_min: Hz = 10.0  # Hz, multisine band
    f_max: Hz = 240.0
    dt: Annotated[float, Meta(ge=1e-6, le=0.01)] = 1.0 / 1024
    period: Annotated[int, Meta(ge=64, le=2**18)] = 2048  # samples per period (resolution 1/(period dt))
    periods: Annotated[int, Meta(ge=1, le=1000)] = 2  # recorded periods (H1 averages)
    settle: Annotated[int, Meta(ge=0, le=20)] = 1  # periods discarded for the transient
    amplitude: Annotated[float, Meta(gt=0, le=1e4)] = 20.0  # N rms
    seed: Seed = 0

    def check(self) -> None:
        if not self.f_min < self.f_max:
            raise Invalid("f_max", f"needs f_min < f_max, got {self.f_min} and {self.f_max} Hz")
        if self.f_max >= 0.4 / self.dt:
            raise Invalid("f_max", f"{self.f_max} Hz is not below 0.8 x Nyquist ({0.4 / self.dt:g} Hz of "
                                   f"dt = {self.dt:g} s)")
        df = 1.0 / (self.period * self.dt)
        if self.f_max - self.f_min < 2 * df:
            raise Invalid("f_max", f"band {self.f_min}-{self.f_max} Hz holds fewer than 2 lines of the "
                                   f"period's resolution {df:g} Hz; widen the band or lengthen period")


class MTAnalysis(Table, kw_only=True):
    n_modes: Annotated[int, Meta(ge=1, le=30)] = 8
    f_min: Hz = 20.0  # Hz, band of the modal extraction and the FRAC/CSF
    f_max: Hz = 220.0
    sobol_n: Annotated[int, Meta(ge=1, le=100000)] = 32
    n_opt: Annotated[int, Meta(ge=1, le=1000)] = 4
    maxiter: Annotated[int, Meta(ge=1, le=100000)] = 40
    refine: bool = True
    seed: Seed = 0
    scheduler: str | None = None  # None: local pool; "local": Dask LocalCluster; "tcp://...": a cluster
    workers: Annotated[int, Meta(ge=1, le=1024)] | None = None

    def check(self) -> None:
        if not self.f_min < self.f_max:
            raise Invalid("f_max", f"needs f_min < f_max, got {self.f_min} and {self.f_max} Hz")


class MTDistortion(Table, kw_only=True):
    """``[distortion]``: after the modal tests, ``n_realisations`` odd random-phase multisines with
    detection lines (the front end's ``SOUR:DET``) at one position and one input DOF, the band, period,
    amplitude and sample time of ``[excitation]``; `hil analyze` states the nonlinear distortions."""

    enabled: bool = False
    position: Annotated[float, Meta(ge=0, le=100.0)] | None = None   # m; default: the first position
    input: str | None = None             # excitation DOF; default: the first of [plan].inputs
    n_realisations: Annotated[int, Meta(ge=2, le=100)] = 3
    n_periods: Annotated[int, Meta(ge=2, le=100)] = 2
    n_settle: Annotated[int, Meta(ge=0, le=20)] = 3
    group: Annotated[int, Meta(ge=2, le=100)] = 4
    alpha: Annotated[float, Meta(gt=0, lt=0.5)] = 0.01
    seed: Seed = 31


class MachineToolConfig(RigConfig, kw_only=True):
    simulator: MTSimulator | None = None
    devices: MTDevices | None = None
    plan: MTPlan
    excitation: MTExcitation = sfield(default_factory=MTExcitation)
    analysis: MTAnalysis = sfield(default_factory=MTAnalysis)
    distortion: MTDistortion = sfield(default_factory=MTDistortion)

    def check(self) -> None:
        if self.simulator is not None:
            try:  # the analysis compares the estimate with the truth by the model's parameter names
                as_vector(dict(self.simulator.truth))
            except ValueError as exc:
                raise Invalid("simulator.truth", str(exc), table=True) from None
        d = self.distortion
        if d.input is not None and d.input not in MachineTool().obs_labels:
            raise Invalid("distortion.input", f"{d.input!r} is not a measured DOF")
        if d.position is not None and d.position > MachineToolConstants().travel:
            raise Invalid("distortion.position", f"{d.position} m is beyond the axis travel")
        a, e = self.analysis, self.excitation
        if a.f_min < e.f_min or a.f_max > e.f_max:
            raise Invalid(
                "analysis.f_max" if a.f_max > e.f_max else "analysis.f_min",
                f"analysis band {a.f_min}-{a.f_max} Hz is outside the excitation band {e.f_min}-{e.f_max} Hz",
            )


# ----------------------------------------------------------------------------------------- rig rules


def check_rig(cfg: MachineToolConfig, config_dir: Path) -> None:
    """What `hil run` builds before the first byte: the simulated front end (``[rig].simulated``) and the
    front-end driver of ``[devices]``; a refusal is an :class:`Invalid` naming the table."""
    if cfg.rig.simulated:
        from simulators.machine_tool_sim import MachineToolFrontEndSim  # lazy: only a simulated rig needs it

        _build("simulator", lambda: MachineToolFrontEndSim(to_dict(cfg)))  # built, not started
    elif cfg.devices is None:
        raise Invalid("devices", "missing required table (a real rig needs its devices)", table=True)
    if cfg.devices is not None:
        _build("devices.frontend", lambda: ModalFrontEnd(cfg.devices.frontend))


def _build(table: str, make) -> None:
    try:
        make()
    except (TypeError, ValueError, KeyError) as exc:
        raise Invalid(table, str(exc) or type(exc).__name__, table=True) from None
