"""The multisine torque excitation of the crane's drive (``[excitation]``): a training and a validation
multisine, designed here, shared by the crane rig and the crane-adjoint rig's comparison input.

This is no rig kind: the rig packages import it, it imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Count, Positive, Table

if TYPE_CHECKING:
    from identification.multisine import MultisineResult

ROLES = ("training", "validation")


class ExcitationRole(Table, kw_only=True):
    f_min: Positive | None = None
    f_max: Positive | None = None
    n_lines: Count | None = None
    grid: Literal["lin", "log"] | None = None
    odd_only: bool | None = None
    seed: int | None = None
    amplitude: Annotated[float, Meta(gt=0, le=1)] | None = None
    duration: Positive | None = None


class ExcitationTable(Table, kw_only=True):
    f_min: Positive                     # Hz
    f_max: Positive                     # Hz
    n_lines: Annotated[int, Meta(ge=1, le=100000)]
    dt: Annotated[float, Meta(gt=0, le=0.01)] = 1e-4
    duration: Annotated[float, Meta(gt=0, le=600)] = 2.0
    n_periods: Count = 1
    grid: Literal["lin", "log"] = "lin"
    odd_only: bool = False
    seed: int = 0
    amplitude: Annotated[float, Meta(gt=0, le=1)] = 0.5   # peak torque as a fraction of the torque limit
    max_iter: Count = 50
    export_dir: str | None = None
    training: ExcitationRole = sfield(default_factory=ExcitationRole)
    validation: ExcitationRole = sfield(default_factory=ExcitationRole)

    def role(self, role: str) -> dict:
        """The settings of one role: the table's values with the role's overrides."""
        base = {k: getattr(self, k) for k in ("f_min", "f_max", "n_lines", "dt", "duration", "n_periods",
                                               "grid", "odd_only", "seed", "amplitude", "max_iter")}
        over = getattr(self, role)
        base.update({k: v for k in ExcitationRole.__struct_fields__ if (v := getattr(over, k)) is not None})
        return base

    def check(self) -> None:
        for role in ROLES:
            r = self.role(role)
            if not r["f_min"] < r["f_max"]:
                raise Invalid(role, f"needs f_min < f_max, got {r['f_min']} and {r['f_max']} Hz", table=True)
            nyquist = 0.5 / r["dt"]
            if r["f_max"] >= nyquist:
                raise Invalid("f_max", f"{r['f_max']} Hz is not below the Nyquist frequency {nyquist:g} Hz")


def design_excitation(exc: ExcitationTable, role: str, torque_limit: float
                      ) -> tuple[float, np.ndarray, dict[str, Any], MultisineResult, float]:
    """Torque trajectory of ``role``: (dt, torque samples N*m, info, multisine result, peak)."""
    from identification.multisine import design_multisine  # lazy: scipy

    r = exc.role(role)
    ms = design_multisine(r["f_min"], r["f_max"], r["n_lines"], r["dt"], n_periods=r["n_periods"],
                          grid=r["grid"], odd_only=r["odd_only"], seed=r["seed"], max_iter=r["max_iter"],
                          period=r["duration"] / r["n_periods"])
    signal = np.asarray(ms.signal, dtype=float)
    peak = r["amplitude"] * torque_limit
    torque = signal / np.abs(signal).max() * peak
    info = {"f_min": r["f_min"], "f_max": r["f_max"], "n_lines": r["n_lines"], "grid": r["grid"],
            "seed": r["seed"], "crest_factor": float(ms.crest_factor),
            "peak_torque": float(np.abs(torque).max())}
    return r["dt"], torque, info, ms, peak
