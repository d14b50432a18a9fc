"""Reading a rig config: the TOML file checked against its rig kind's schema (found in the registry).

Here and not in :mod:`daq.config`: config parsing knows nothing of the rig kinds; only the registry
(:mod:`daq.rigs`) maps ``[rig].kind`` to the schema a whole config is checked against.
"""

from __future__ import annotations

from pathlib import Path

from daq.config.load import read_toml
from daq.rigs import parse_config, parse_shared

__all__ = ["load_config"]


def load_config(path: str | Path, whole: bool = True) -> dict:
    """Read a rig config and check it whole against its rig kind's schema; returns the TOML data.

    ``whole=False`` checks only the shared tables (the global ``--config`` of commands that need
    just the store or the bus). A relative ``[store].path`` is made absolute against the config file's
    folder, so the sessions of a config land in the same store whatever the current directory.
    """
    raw = read_toml(path)
    if whole:
        parse_config(raw, path)
    else:  # only what every command needs: [rig], [bus], [store]
        parse_shared(raw, path)
    raw.setdefault("store", {})
    store_path = raw["store"].get("path")
    if store_path and not Path(store_path).is_absolute():
        raw["store"]["path"] = str((Path(path).resolve().parent / store_path).resolve())
    return raw
