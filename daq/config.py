"""Rig configs: TOML files with SI units, validated just enough to fail early and clearly.

``load_config(path)`` checks the shared tables ([rig], [bus], [store], see docs/contracts.md),
fills in defaults for [bus] and [store], and leaves rig-specific tables to the rooms that use
them; the helpers :func:`require` and :func:`get` let those rooms validate their own keys with the
same one-line :class:`ConfigError` messages.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

#: Rig kinds known to the service (other rooms may add theirs).
RIG_KINDS: set[str] = {"press", "crane"}

DEFAULT_BUS = {"data": "tcp://127.0.0.1:0", "command": "tcp://127.0.0.1:0"}
DEFAULT_STORE = {"path": "sessions/hil.sqlite"}
_ENDPOINT_SCHEMES = ("tcp://", "ipc://", "inproc://")

_MISSING = object()


class ConfigError(ValueError):
    """A config problem: which file, which key, what is wrong."""

    def __init__(self, message: str, file: str | Path | None = None, key: str | None = None):
        self.file = str(file) if file is not None else None
        self.key = key
        self.what = message
        where = ": ".join(p for p in (self.file, f"[{key}]" if key else None) if p)
        super().__init__(f"{where}: {message}" if where else message)


def _type_name(t: type | tuple[type, ...]) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(names.get(x, x.__name__) for x in ts)


def get(
    cfg: dict,
    key: str,
    types: type | tuple[type, ...] | None = None,
    default: Any = _MISSING,
    file: str | Path | None = None,
) -> Any:
    """Value at dotted ``key`` (e.g. ``"bus.data"``), type-checked; ``default`` if absent.

    ``int`` is accepted where ``float`` is asked for; ``bool`` is never accepted as a number.
    Without a default a missing key raises ConfigError.
    """
    node: Any = cfg
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict):
            raise ConfigError(f"expected a table at {'.'.join(parts[:i])}", file, key)
        if part not in node:
            if default is _MISSING:
                raise ConfigError("missing required key", file, key)
            return default
        node = node[part]
    if types is not None:
        ts = types if isinstance(types, tuple) else (types,)
        if float in ts and int not in ts:
            ts = (*ts, int)
        ok = isinstance(node, ts) and not (isinstance(node, bool) and bool not in ts)
        if not ok:
            raise ConfigError(f"must be {_type_name(types)}, got {type(node).__name__} {node!r}", file, key)
    return node


def require(
    cfg: dict, key: str, types: type | tuple[type, ...] | None = None, file: str | Path | None = None
) -> Any:
    """Like :func:`get` without a default: the key must be present."""
    return get(cfg, key, types, file=file)


def _check_endpoint(cfg: dict, key: str, file: Path) -> None:
    value = get(cfg, key, str, file=file)
    if not value.startswith(_ENDPOINT_SCHEMES):
        raise ConfigError(
            f"endpoint {value!r} must start with one of {', '.join(_ENDPOINT_SCHEMES)}", file, key
        )


def validate(cfg: dict, file: str | Path = "<config>") -> dict:
    """Check the shared tables and fill in [bus]/[store] defaults (in place); returns ``cfg``."""
    file = Path(file)
    rig = get(cfg, "rig", dict, file=file)
    kind = get(rig, "kind", str, file=file, default=None)
    if kind is None:
        raise ConfigError("missing required key", file, "rig.kind")
    if kind not in RIG_KINDS:
        raise ConfigError(
            f"unknown rig kind {kind!r} (known: {', '.join(sorted(RIG_KINDS))})", file, "rig.kind"
        )
    get(cfg, "rig.name", str, default="", file=file)
    get(cfg, "rig.simulated", bool, default=False, file=file)
    bus = cfg.setdefault("bus", {})
    if not isinstance(bus, dict):
        raise ConfigError("must be a table", file, "bus")
    for k, v in DEFAULT_BUS.items():
        bus.setdefault(k, v)
        _check_endpoint(cfg, f"bus.{k}", file)
    store = cfg.setdefault("store", {})
    if not isinstance(store, dict):
        raise ConfigError("must be a table", file, "store")
    for k, v in DEFAULT_STORE.items():
        store.setdefault(k, v)
    if not get(cfg, "store.path", str, file=file).strip():
        raise ConfigError("must not be empty", file, "store.path")
    return cfg


def load_config(path: str | Path) -> dict:
    """Read and validate a TOML rig config; raises ConfigError with file, key and problem."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path) from None
    try:
        cfg = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path) from None
    return validate(cfg, path)
