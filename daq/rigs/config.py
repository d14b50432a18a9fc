"""Reading a rig config: the TOML file checked against its rig kind's schema (found in the registry).

Here and not in :mod:`daq.config`: config parsing knows nothing of the rig kinds; only the registry
(:mod:`daq.rigs`) maps ``[rig].kind`` to the schema a whole config is checked against.
"""

from __future__ import annotations

from pathlib import Path

from daq.config.load import read_toml, resolve_paths
from daq.config.schema import RigConfig
from daq.rigs import parse_config, parse_shared

__all__ = ["load_config"]


def load_config(path: str | Path, whole: bool = True) -> dict:
    """Read a rig config and check it whole against its rig kind's schema; returns the TOML data.

    ``whole=False`` checks only the shared tables (the global ``--config`` of commands that need
    just the store or the bus). Every relative path of the config (``[store].path``, ``[bus].keys``,
    trajectories, export folders, certificates and keys, the simulator's PKI folder: the schema's
    ``PathStr`` fields) is made absolute against the config file's folder, here and only here, so a config
    means the same files whatever the current directory.
    """
    raw = read_toml(path)
    if whole:
        rig, _ = parse_config(raw, path)
        schema = rig.schema
    else:  # only what every command needs: [rig], [bus], [store]
        parse_shared(raw, path)
        schema = RigConfig
    resolve_paths(raw, schema, Path(path).parent)
    raw.setdefault("store", {})
    return raw
