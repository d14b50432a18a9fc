"""The rig registry: ``[rig].kind`` -> its :class:`~daq.rigs.base.Rig`.

A new rig kind is one package ``daq/rigs/<kind>/`` whose ``rig`` module exposes ``RIG`` (an instance of
its subclass of :class:`~daq.rigs.base.Rig`) plus one line in :data:`KINDS` (docs/adding-a-rig.md); tests
and plug-ins may also :func:`register` a rig at run time.
Modules here that are no kind (:mod:`~daq.rigs.base`, :mod:`~daq.rigs.drive`, :mod:`~daq.rigs.excitation`,
:mod:`~daq.rigs.analysis`) hold what kinds share; a kind's package imports them, never another kind.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from daq.config.load import ConfigError, Invalid, key_path, parse
from daq.config.schema import RigConfig
from daq.rigs.base import Rig

#: kind -> module that defines ``RIG`` (imported on first use: a rig's imports stay off other runs)
KINDS: dict[str, str] = {
    "press": "daq.rigs.press.rig",
    "crane": "daq.rigs.crane.rig",
    "machine-tool": "daq.rigs.machine_tool.rig",
    "oscillator": "daq.rigs.adjoint.oscillator",
    "pendulum": "daq.rigs.adjoint.pendulum",
    "crane-adjoint": "daq.rigs.adjoint.crane_adjoint",
}

_loaded: dict[str, Rig] = {}


def register(rig: Rig) -> Rig:
    """Add (or replace) a rig kind at run time."""
    _loaded[rig.kind] = rig
    return rig


def unregister(kind: str) -> None:
    _loaded.pop(kind, None)


def kinds() -> list[str]:
    return sorted(set(KINDS) | set(_loaded))


def get_rig(kind: str, file: str | Path | None = None) -> Rig:
    """The rig of ``kind``; ConfigError naming the known kinds otherwise."""
    if kind in _loaded:
        return _loaded[kind]
    if kind not in KINDS:
        raise ConfigError(f"unknown rig kind {kind!r} (known: {', '.join(kinds())})", file, "[rig].kind")
    rig = importlib.import_module(KINDS[kind]).RIG
    _loaded[kind] = rig
    return rig


def parse_shared(raw: Any, file: str | Path | None = None) -> Any:
    """Check only [rig], [bus], [store] and [lab] (and that the kind is known); returns the typed shared
    tables."""
    rig_of(raw, file)
    return parse({k: raw[k] for k in ("rig", "bus", "store", "lab") if k in raw}, RigConfig, file)


def parse_config(raw: Any, file: str | Path | None = None) -> tuple[Rig, Any]:
    """Check a whole config against its rig kind's schema; returns (rig, typed config)."""
    rig = rig_of(raw, file)
    return rig, parse(raw, rig.schema, file)


def config_dir(file: str | Path | None) -> Path:
    """The folder of a config file (the current directory for a config given as data)."""
    return Path(file).resolve().parent if file is not None else Path.cwd()


def check_rules(rig: Rig, cfg: Any, file: str | Path | None = None) -> None:
    """The rig's rules beyond the schema (:meth:`~daq.rigs.base.Rig.check`) on a parsed config, with the
    config file's folder; an ``Invalid(key, why)`` becomes one ConfigError naming the file and the key."""
    try:
        rig.check(cfg, config_dir(file))
    except Invalid as exc:
        keys = exc.key.split(".") if exc.key else []
        raise ConfigError(exc.message, file, key_path(keys, exc.key is None or exc.table)) from None


def rig_of(raw: Any, file) -> Rig:
    if not isinstance(raw, dict):
        raise ConfigError("a config must be a TOML table", file)
    rig_table = raw.get("rig")
    if not isinstance(rig_table, dict):
        raise ConfigError("missing required table" if rig_table is None else "must be a table", file,
                          key_path(["rig"], True))
    kind = rig_table.get("kind")
    if not isinstance(kind, str):
        raise ConfigError("missing required key" if kind is None else "must be a string", file, "[rig].kind")
    return get_rig(kind, file)
