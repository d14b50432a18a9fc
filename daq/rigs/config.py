"""Reading a rig config: the TOML file parsed once, against its rig kind's schema (found in the registry),
into the kind's typed struct - the one shape every later step (check, run, devices, session, analysis) uses.

Here and not in :mod:`daq.config`: config parsing knows nothing of the rig kinds; only the registry
(:mod:`daq.rigs`) maps ``[rig].kind`` to the schema a whole config is checked against.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from daq.config.load import ConfigError, parse, read_toml, refuse_unsupplied, resolve_paths
from daq.config.schema import RigConfig
from daq.rigs import parse_config, parse_shared, rig_of
from daq.rigs.base import Rig
from drivers.clock import MAX_SPEED

__all__ = ["load", "load_config", "load_shared", "session_config", "refuse_sim_speed_early", "sim_speed_of",
           "with_sim_speed"]


def load(path: str | Path) -> tuple[Rig, Any]:
    """Read a rig config and parse it whole into its rig kind's struct: ``(rig, cfg)``.

    Every relative path of the config (``[store].path``, ``[bus].keys``, trajectories, export folders,
    certificates and keys, the simulator's PKI folder: the schema's ``PathStr`` fields) is made absolute
    against the config file's folder first, here and only here, so a config means the same files whatever
    the current directory. Any problem is one ConfigError naming the file and the key; a template whose
    site values are not filled in is refused first, naming each (before its rig kind is even imported)."""
    raw = read_toml(path)
    refuse_unsupplied(raw, path)
    rig = rig_of(raw, path)
    resolve_paths(raw, rig.schema, Path(path).parent)
    return parse_config(raw, path)


def load_shared(path: str | Path) -> RigConfig:
    """Only what every command needs of a config (the global ``--config``): [rig], [bus], [store], typed."""
    raw = read_toml(path)
    rig_of(raw, path)
    resolve_paths(raw, RigConfig, Path(path).parent)
    return parse_shared(raw, path)


def load_config(path: str | Path) -> dict:
    """The TOML data of a rig config, checked whole and with its paths resolved as :func:`load` does: for
    programs and tests that edit a config before they hand it to ``daq.run.lifecycle.run`` (which parses a
    dict once). The service itself passes the typed config of :func:`load`."""
    raw = read_toml(path)
    refuse_unsupplied(raw, path)
    rig = rig_of(raw, path)
    resolve_paths(raw, rig.schema, Path(path).parent)
    parse(raw, rig.schema, path)
    raw.setdefault("store", {})
    return raw


def session_config(config: dict, schema: type, session_id: str) -> Any:
    """A session's stored config snapshot back in its rig kind's struct (what the run was parsed into)."""
    return parse(config, schema, f"session {session_id} config")


def with_sim_speed(cfg: Any, speed: float | None, file: str | Path | None = None) -> Any:
    """``cfg`` with its simulator's clock at ``speed`` (``hil run --sim-speed``, ``hil serve``'s sim_speed;
    None: as the config says). Refused in one line, before anything opens, for a rig that is not simulated
    (the wall clock is the only clock of real hardware) or a speed out of range."""
    if speed is None:
        return cfg
    fields = {f.name: f for f in msgspec.structs.fields(type(cfg))}
    refuse_sim_speed(cfg.rig.simulated and "simulator" in fields, speed, file)
    sim = cfg.simulator
    if sim is None:  # the simulator's defaults, as the run would start them
        table = _simulator_type(fields["simulator"].type)
        sim = table()
    return msgspec.structs.replace(cfg, simulator=msgspec.structs.replace(sim, speed=float(speed)))


def refuse_sim_speed(simulated: bool, speed: float, file: str | Path | None = None) -> None:
    """ConfigError (one line) for a sim speed asked of a rig that is not ``simulated`` (real hardware runs on
    the wall clock only) or a speed out of range."""
    if not simulated:
        raise ConfigError(f"sim speed {speed:g} refused: not a simulated rig ([rig].simulated = true, with "
                          "its [simulator]); real hardware runs on the wall clock only", file,
                          "[simulator].speed")
    if not (isinstance(speed, int | float) and math.isfinite(speed) and 0 < speed <= MAX_SPEED):
        raise ConfigError(f"sim speed {speed!r} is out of range: must be > 0 and <= {MAX_SPEED:g}", file,
                          "[simulator].speed")


def refuse_sim_speed_early(path: str | Path, speed: float | None) -> None:
    """:func:`refuse_sim_speed` from the file alone, before the config is checked or anything is built: a
    real template (no ``[rig].simulated``) gets this one line rather than its list of site values."""
    if speed is None:
        return
    raw = read_toml(path)
    rig = raw.get("rig")
    refuse_sim_speed(isinstance(rig, dict) and rig.get("simulated") is True, speed, path)


def sim_speed_of(cfg: Any) -> float:
    """The clock speed a parsed config runs at: its ``[simulator].speed`` on a simulated rig, else 1."""
    sim = getattr(cfg, "simulator", None)
    if not cfg.rig.simulated or sim is None:
        return 1.0
    return float(getattr(sim, "speed", 1.0))


def _simulator_type(tp: Any) -> type:
    """The table type of a ``simulator: T | None`` field."""
    for arg in getattr(tp, "__args__", (tp,)):
        if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
            return arg
    raise TypeError(f"no table type in {tp!r}")
