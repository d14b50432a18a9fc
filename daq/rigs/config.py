"""Reading a rig config: the TOML file parsed once, against its rig kind's schema (found in the registry),
into the kind's typed struct - the one shape every later step (check, run, devices, session, analysis) uses.

Here and not in :mod:`daq.config`: config parsing knows nothing of the rig kinds; only the registry
(:mod:`daq.rigs`) maps ``[rig].kind`` to the schema a whole config is checked against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daq.config.load import parse, read_toml, refuse_unsupplied, resolve_paths
from daq.config.schema import RigConfig
from daq.rigs import parse_config, parse_shared, rig_of
from daq.rigs.base import Rig

__all__ = ["load", "load_config", "load_shared", "session_config"]


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
