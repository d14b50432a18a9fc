"""Turn a recorded press session back into the arrays the identification works on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daq.config.load import ConfigError
from daq.rigs.config import session_config
from daq.rigs.press.config import PressConfig
from daq.store.errors import StoreError
from daq.store.read_write import SessionStore
from identification.analyses.press_analysis import corrected_displacements


class NotAPressSession(StoreError):
    """The session is not a press session or holds no measurements."""


@dataclass
class PressArrays:
    """Measurements of a press session.

    ``z[series, setpoint, sensor]`` mean displacement (m), ``q[series, setpoint]`` actual force (N),
    ``q_desired[setpoint]`` (N), sensor names and standard deviations (m). Series that did not finish
    are dropped, so every array is complete.
    """

    z: np.ndarray
    q: np.ndarray
    q_desired: np.ndarray
    sensors: list[str]
    sigmas: np.ndarray
    n_loading: int

    def corrected(self) -> np.ndarray:
        """The paper's post-hoc correction z_ijk * q_d_j / q_ij (refers every value to its desired force)."""

        return corrected_displacements(self.z, self.q, self.q_desired)


def _recorded_config(info) -> PressConfig | None:
    """The session's config snapshot in the press struct (None for a session recorded without one)."""
    if not info.config:
        return None
    try:
        return session_config(info.config, PressConfig, info.id)
    except ConfigError as exc:
        raise NotAPressSession(f"session {info.id}: its config snapshot does not parse: {exc}") from None


def press_arrays(store: SessionStore, session_id: str) -> PressArrays:
    """Collect the ``measurement`` events of a press session into complete arrays."""
    info = store.get_session(session_id)
    if info.kind != "press":
        raise NotAPressSession(f"session {info.id} is a {info.kind!r} session, not a press session")
    events = store.events(info.id, kind="measurement")
    if not events:
        raise NotAPressSession(f"session {info.id} holds no press measurements")
    start = store.events(info.id, kind="plan_start")
    q_desired = np.asarray(start[0].body["q_desired"] if start else
                           sorted({e.body["q_desired"] for e in events}), dtype=float)
    sensors = list(events[0].body["sensors"])
    n_series = max(e.body["series"] for e in events) + 1
    n_q, n_s = len(q_desired), len(sensors)
    z = np.full((n_series, n_q, n_s), np.nan)
    q = np.full((n_series, n_q), np.nan)
    for e in events:
        i, j = e.body["series"], e.body["index"]
        z[i, j] = e.body["z"]
        q[i, j] = e.body["q_actual"]
    complete = ~np.isnan(q).any(axis=1) & ~np.isnan(z).any(axis=(1, 2))
    if not complete.any():
        raise NotAPressSession(f"session {info.id} has no complete measurement series")
    cfg = _recorded_config(info)
    sensor_cfg = cfg.devices.sensors if cfg is not None and cfg.devices is not None else {}
    n_avg = np.array([e.body.get("n_samples", 1) for e in events], dtype=float).min()
    # each z value is the mean of n_avg readings: its standard deviation is sigma / sqrt(n_avg)
    sigma_reading = np.array([sensor_cfg[name].sigma if name in sensor_cfg else np.nan for name in sensors])
    sigmas = sigma_reading / np.sqrt(n_avg)
    n_up = cfg.plan.n_steps_up if cfg is not None else (n_q - 1) // 2
    return PressArrays(z[complete], q[complete], q_desired, sensors, sigmas, n_up + 1)
