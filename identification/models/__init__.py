"""Models: press friction models, the 96-structure servo-drive kit and its simulation, ODE plants with
sensitivities, the machine-tool structure."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.models.drive_kernels import (
        AVAILABLE,
        drive_steps,
    )
    from identification.models.drive_models import (
        DEFAULT_BOUNDS,
        PARAM_UNITS,
        DriveStructure,
        all_structures,
        friction_torque,
        linear_matrices,
        parse_name,
    )
    from identification.models.drive_simulation import (
        DEFAULT_FRICTION_EPS,
        ENGINES,
        SimResult,
        StepInput,
        discretize,
        get_engine,
        prepare_input,
        set_engine,
        simulate,
    )
    from identification.models.machine_tool_model import (
        DAMPING_NAMES,
        DEFAULT_NODES,
        N_DOF,
        NOMINAL,
        PARAM_NAMES,
        STIFFNESS_NAMES,
        ComplexModes,
        MachineTool,
        MachineToolConstants,
        as_dict,
        as_vector,
        complex_modes_of,
        param_bounds,
    )
    from identification.models.ode_models import (
        OSCILLATOR_NOMINAL,
        PENDULUM_NOMINAL,
        PENDULUM_PARAMS,
        CartPendulumModel,
        LinearModel,
        ODEModel,
        complex_step_jacobian,
        crane_model,
        oscillator_model,
    )
    from identification.models.ode_sensitivity import (
        Trajectory,
        adjoint_gradient,
        integrate,
        output_cotangents,
        output_sensitivities,
    )
    from identification.models.press_models import (
        CoulombFriction,
        MemoryFriction,
        NoFriction,
        PressConstants,
        PressLinkageModel,
        TrainedPressModels,
        force_history_features,
        train_friction_models,
    )

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "drive_kernels": ("AVAILABLE", "drive_steps"),
    "drive_models": (
        "DEFAULT_BOUNDS", "PARAM_UNITS", "DriveStructure", "all_structures", "friction_torque",
        "linear_matrices", "parse_name",
    ),
    "drive_simulation": (
        "DEFAULT_FRICTION_EPS", "ENGINES", "SimResult", "StepInput", "discretize", "get_engine",
        "prepare_input", "set_engine", "simulate",
    ),
    "machine_tool_model": (
        "DAMPING_NAMES", "DEFAULT_NODES", "N_DOF", "NOMINAL", "PARAM_NAMES", "STIFFNESS_NAMES",
        "ComplexModes", "MachineTool", "MachineToolConstants", "as_dict", "as_vector", "complex_modes_of",
        "param_bounds",
    ),
    "ode_models": (
        "OSCILLATOR_NOMINAL", "PENDULUM_NOMINAL", "PENDULUM_PARAMS", "CartPendulumModel", "LinearModel",
        "ODEModel", "complex_step_jacobian", "crane_model", "oscillator_model",
    ),
    "ode_sensitivity": (
        "Trajectory", "adjoint_gradient", "integrate", "output_cotangents", "output_sensitivities",
    ),
    "press_models": (
        "CoulombFriction", "MemoryFriction", "NoFriction", "PressConstants", "PressLinkageModel",
        "TrainedPressModels", "force_history_features", "train_friction_models",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "AVAILABLE",
    "drive_steps",
    "DriveStructure",
    "all_structures",
    "parse_name",
    "linear_matrices",
    "friction_torque",
    "DEFAULT_BOUNDS",
    "PARAM_UNITS",
    "SimResult",
    "StepInput",
    "prepare_input",
    "discretize",
    "simulate",
    "DEFAULT_FRICTION_EPS",
    "ENGINES",
    "get_engine",
    "set_engine",
    "STIFFNESS_NAMES",
    "DAMPING_NAMES",
    "PARAM_NAMES",
    "NOMINAL",
    "param_bounds",
    "as_vector",
    "as_dict",
    "MachineToolConstants",
    "MachineTool",
    "ComplexModes",
    "complex_modes_of",
    "DEFAULT_NODES",
    "N_DOF",
    "ODEModel",
    "LinearModel",
    "CartPendulumModel",
    "oscillator_model",
    "crane_model",
    "OSCILLATOR_NOMINAL",
    "PENDULUM_NOMINAL",
    "PENDULUM_PARAMS",
    "complex_step_jacobian",
    "Trajectory",
    "integrate",
    "adjoint_gradient",
    "output_cotangents",
    "output_sensitivities",
    "PressConstants",
    "PressLinkageModel",
    "force_history_features",
    "NoFriction",
    "CoulombFriction",
    "MemoryFriction",
    "TrainedPressModels",
    "train_friction_models",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
