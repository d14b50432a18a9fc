"""The multisine torque excitation of the crane's drive (``[excitation]``): a training and a validation
multisine, designed here, shared by the crane rig and the crane-adjoint rig's comparison input.

This is no rig kind: the rig packages import it, it imports none of them.
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from msgspec import Meta
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Hz, PathStr, Seed, Table

if TYPE_CHECKING:
    from identification.design.multisine import MultisineResult

ROLES = ("training", "validation")


class ExcitationRole(Table, kw_only=True):
    f_min: Hz | None = None
    f_max: Hz | None = None
    n_lines: Annotated[int, Meta(ge=1, le=100000)] | None = None
    grid: Literal["lin", "log"] | None = None
    odd_only: bool | None = None
    seed: Seed | None = None
    amplitude: Annotated[float, Meta(gt=0, le=1)] | None = None
    duration: Annotated[float, Meta(gt=0, le=600)] | None = None


class ExcitationTable(Table, kw_only=True):
    f_min: Hz                           # Hz
    f_max: Hz                           # Hz
    n_lines: Annotated[int, Meta(ge=1, le=100000)]
    dt: Annotated[float, Meta(ge=1e-6, le=0.01)] = 1e-4
    duration: Annotated[float, Meta(gt=0, le=600)] = 2.0
    n_periods: Annotated[int, Meta(ge=1, le=1000)] = 1
    grid: Literal["lin", "log"] = "lin"
    odd_only: bool = False
    seed: Seed = 0
    amplitude: Annotated[float, Meta(gt=0, le=1)] = 0.5   # peak torque as a fraction of the torque limit
    max_iter: Annotated[int, Meta(ge=1, le=10000)] = 50
    export_dir: PathStr | None = None   # relative: to the config file's folder
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
            period = r["duration"] / r["n_periods"] / r["dt"]
            if period < 2 * r["n_lines"]:
                where = f"{role}.n_lines" if getattr(self, role).n_lines else "n_lines"
                raise Invalid(where, f"a period of {r['duration']:g} s / {r['n_periods']} at dt = "
                                     f"{r['dt']:g} s has {period:.3g} samples, fewer than 2 per line "
                                     f"({r['n_lines']} lines)")


def design_excitation(exc: ExcitationTable, role: str, torque_limit: float
                      ) -> tuple[float, np.ndarray, dict[str, Any], MultisineResult, float]:
    """Torque trajectory of ``role``: (dt, torque samples N*m, info, multisine result, peak)."""
    r = exc.role(role)
    ms = copy.deepcopy(_multisine(r["f_min"], r["f_max"], r["n_lines"], r["dt"], r["n_periods"], r["grid"],
                                  r["odd_only"], r["seed"], r["max_iter"], r["duration"] / r["n_periods"]))
    signal = np.asarray(ms.signal, dtype=float)
    peak = r["amplitude"] * torque_limit
    torque = signal / np.abs(signal).max() * peak
    info = {"f_min": r["f_min"], "f_max": r["f_max"], "n_lines": r["n_lines"], "grid": r["grid"],
            "seed": r["seed"], "crest_factor": float(ms.crest_factor),
            "peak_torque": float(np.abs(torque).max())}
    return r["dt"], torque, info, ms, peak


@functools.lru_cache(maxsize=16)
def _multisine(f_min: float, f_max: float, n_lines: int, dt: float, n_periods: int, grid: str, odd_only: bool,
               seed: int, max_iter: int, period: float) -> MultisineResult:
    """The multisine of these settings, designed once per process: the design is a seeded optimisation
    (3-5 CPU-s for each of the shipped crane's two), the same for every run of a config, and `hil serve`
    or a test process runs many (callers get a copy: the arrays are theirs to change)."""
    from identification.design.multisine import design_multisine  # lazy: scipy

    return design_multisine(f_min, f_max, n_lines, dt, n_periods=n_periods, grid=grid, odd_only=odd_only,
                            seed=seed, max_iter=max_iter, period=period)
