"""The modal data the identification fits: reference modes per axis position, and FRFs for validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ModalReference:
    """Measured (or simulated) modal data at axis positions, and optionally FRFs for validation.

    ``lam[i]``: complex eigenvalues (rad/s) of the reference modes at ``positions[i]``;
    ``shapes[i]``: complex shapes at the measured DOFs (n_obs, n_modes); ``xi[i]``: modal damping.
    ``frf[i]``: (n_inputs, n_obs, n_freq) receptances at ``freq`` for forces at ``inputs``.
    ``freq_std[i]`` (Hz) and ``xi_std[i]``: the uncertainty the modal extraction reports for each natural
    frequency and damping ratio (``ModalFit.freq_std`` / ``xi_std``; None: not known). They give
    :func:`parameter_intervals` a noise scale that a model error does not inflate.
    """

    positions: list[float]
    lam: list[np.ndarray]
    shapes: list[np.ndarray]
    xi: list[np.ndarray]
    freq: np.ndarray | None = None
    inputs: list = field(default_factory=list)
    frf: list[np.ndarray] | None = None
    freq_std: list[np.ndarray] | None = None
    xi_std: list[np.ndarray] | None = None

    @property
    def n_modes(self) -> int:
        return int(self.lam[0].size)

    def subset(self, idx: Sequence[int]) -> ModalReference:
        return ModalReference(
            positions=[self.positions[i] for i in idx], lam=[self.lam[i] for i in idx],
            shapes=[self.shapes[i] for i in idx], xi=[self.xi[i] for i in idx], freq=self.freq,
            inputs=list(self.inputs), frf=None if self.frf is None else [self.frf[i] for i in idx],
            freq_std=None if self.freq_std is None else [self.freq_std[i] for i in idx],
            xi_std=None if self.xi_std is None else [self.xi_std[i] for i in idx])


def reference_from_model(model, params, positions: Sequence[float], n_modes: int,
                         freq: np.ndarray | None = None, inputs: Sequence = ()) -> ModalReference:
    """Reference modal data (and FRFs) computed from a model with known parameters."""
    lam, shapes, xi, frfs = [], [], [], []
    for s in positions:
        cm = model.complex_modes(params, s, n_modes)
        lam.append(cm.lam)
        shapes.append(cm.shapes)
        xi.append(cm.xi)
        if freq is not None and inputs:
            frfs.append(np.array([model.frf(params, s, freq, i) for i in inputs]))
    return ModalReference(positions=[float(s) for s in positions], lam=lam, shapes=shapes, xi=xi,
                          freq=None if freq is None else np.asarray(freq, dtype=float), inputs=list(inputs),
                          frf=frfs if frfs else None)

