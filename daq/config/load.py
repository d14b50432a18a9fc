"""Rig configs: TOML files with SI units, checked whole against a typed schema before anything runs.

A config is read (:func:`read_toml`), then converted by :func:`parse` into the rig kind's schema: a tree
of ``msgspec.Struct`` tables (see :mod:`daq.config.schema` and each rig module). The walk checks every table
for unknown keys (with a suggestion), missing required keys, types and ranges, then each table's own
``check()`` (relations inside a table) and at last the rig's checks across tables. Every problem is one
:class:`ConfigError` naming the file and the full key path, e.g.
``press-sim.toml: [plan].n_sample: unknown key (did you mean n_samples?)``. A value a template leaves to the
site (``"<site: ...>"``, :mod:`daq.config.site`) is collected instead: a config with any is refused whole,
naming each (:class:`SiteValuesMissing`); a config file's reader refuses them even before its rig kind is
known (:func:`refuse_unsupplied`).

Reading a config file whole against its rig kind's schema is :func:`daq.rigs.config.load_config`: the rig
kinds live in the registry (:mod:`daq.rigs`), and this module imports nothing of them.

Why msgspec: its Structs are plain typed classes with range constraints (``Meta(gt=0)``) and it converts
a TOML dict in one call; it is small and fast, and its error messages carry the location, which we
turn into TOML key paths. The walk here adds what msgspec lacks: dict keys in paths and suggestions.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import msgspec

import daq.errors
from daq.config.site import is_marker, marker_text, markers
from drivers.settings import InvalidSetting

ENV_STORE = "HIL_STORE"


class ConfigError(daq.errors.ConfigError, ValueError):
    """A config problem: which file, which key path, what is wrong (one line)."""

    def __init__(self, message: str, file: str | Path | None = None, key: str | None = None):
        self.file = str(file) if file is not None else None
        self.key = key
        self.what = message
        where = ": ".join(p for p in (self.file, key) if p)
        super().__init__(f"{where}: {message}" if where else message)


class SiteValuesMissing(ConfigError):
    """A config holding values the site must still supply (``<site: ...>`` markers, :mod:`daq.config.site`):
    refused whole, naming every such value, before a rig's rules run and before anything opens.

    ``values``: ``(key path, what to put there)`` in the file's order; :attr:`lines` one line per value,
    the same words in the CLI (one line each) and in ``hil serve`` (a list); ``str()`` is all on one line."""

    def __init__(self, file: str | Path | None, values: list[tuple[str, str]]):
        self.values = values
        n = len(values)
        self.head = (f"not runnable: {n} value{'s' if n != 1 else ''} the site must supply "
                     f"{'are' if n != 1 else 'is'} not filled in (replace each \"<site: ...>\" in the file)")
        super().__init__(f"{self.head}: " + "; ".join(self.lines), file)

    @property
    def lines(self) -> list[str]:
        """``[devices.force_source].host: IP address of ...``: the key path and what to put there."""
        return [f"{key}: {what}" for key, what in self.values]

    @property
    def summary(self) -> str:
        """The first line: the file and how many values are missing."""
        return f"{self.file}: {self.head}" if self.file else self.head


class Invalid(daq.errors.ConfigError, InvalidSetting):
    """Raised by a table's ``check()``: ``key`` is the field (relative to the table) that is wrong (the
    service's :class:`drivers.settings.InvalidSetting`, which the drivers' own tables raise)."""


# ----------------------------------------------------------------------------------------- key paths


def key_path(path: list[str], is_table: bool) -> str:
    """``["plan", "q_max"]`` -> ``[plan].q_max``; a table itself -> ``[devices.sensors]``."""
    if not path:
        return "(top level)"
    if is_table:
        return f"[{'.'.join(path)}]"
    if len(path) == 1:
        return path[0]
    return f"[{'.'.join(path[:-1])}].{path[-1]}"


def suggestion(word: str, choices: list[str]) -> str:
    """`` (did you mean x?)`` for the closest choice, else the list of choices."""
    return _suggest(word, choices)


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(sorted(choices))})"


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """Strip ``X | None`` and ``Annotated``; returns (type, optional)."""
    optional = False
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1 and len(get_args(tp)) == 2:
                optional = True
                tp = args[0]
                continue
        return tp, optional


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _is_table_type(tp: Any) -> bool:
    base, _ = _unwrap(tp)
    return _is_struct(base) or (isinstance(base, type) and dataclasses.is_dataclass(base)) or \
        get_origin(base) is dict


def _leaf_message(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    m = re.match(r"^(.*) - at `\$(.*)`$", text)
    msg, where = m.groups() if m else (text, "")
    msg = msg.replace("`", "").replace(" | null", "")
    msg = re.sub(r"^Expected (\w+)", lambda g: f"must be {_TYPE_WORDS.get(g.group(1), g.group(1))}", msg)
    return f"{msg} (at {where})" if where else msg


def _leaf_error(raw: Any, tp: Any, exc: msgspec.ValidationError) -> str:
    """One line for a bad leaf: the value, what is allowed (the whole range, not only the side that
    failed) and what to do."""
    m = re.match(r"^(.*) - at `\$(.*)`$", str(exc))
    msg, where = m.groups() if m else (str(exc), "")
    value, elem = raw, tp
    idx = re.fullmatch(r"\[(\d+)\]", where)
    if idx and isinstance(raw, list) and int(idx.group(1)) < len(raw):
        value, elem = raw[int(idx.group(1))], _element_type(tp)
    allowed = allowed_range(elem)
    if allowed and re.match(r"^Expected `\w+`( of length)? [<>]=?", msg):
        at = f" (item {where})" if where else ""
        return f"{_shown(value)}{at} is out of range: must be {allowed}; set a value in that range"
    if "got" in msg:
        return f"{_leaf_message(exc)} {_shown(value)}"
    return f"{_leaf_message(exc)}, got {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _element_type(tp: Any) -> Any:
    base, _ = _unwrap(tp)
    args = get_args(base)
    return args[0] if get_origin(base) is list and args else tp


def _metas(tp: Any) -> list[msgspec.Meta]:
    out: list[msgspec.Meta] = []
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            out += [a for a in get_args(tp)[1:] if isinstance(a, msgspec.Meta)]
            tp = get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return out
            tp = args[0]
        else:
            return out


def allowed_range(tp: Any) -> str:
    """The constraints of a leaf type in words (``a non-empty string``,
    ``a list of 2 values``, ``a number > 0 and <= 3600``); "" when it has none."""
    base, _ = _unwrap(tp)
    word = _TYPE_WORDS.get(getattr(base, "__name__", ""), "a value")
    lo = hi = None
    for meta in _metas(tp):
        if meta.min_length is not None:
            if base is str:
                return "a non-empty string" if meta.min_length == 1 else \
                    f"a string of at least {meta.min_length} characters"
            if meta.max_length == meta.min_length:
                return f"a list of {meta.min_length} values"
            return f"a list of at least {meta.min_length} values"
        lo = ("<=", meta.ge) if meta.ge is not None else ("<", meta.gt) if meta.gt is not None else lo
        hi = ("<=", meta.le) if meta.le is not None else ("<", meta.lt) if meta.lt is not None else hi
    sides = ([f"{lo[0].replace('<', '>')} {_num(lo[1])}"] if lo else []) + \
        ([f"{hi[0]} {_num(hi[1])}"] if hi else [])
    return f"{word} {' and '.join(sides)}" if sides else ""


def _num(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


_TYPE_WORDS = {"float": "a number", "int": "an integer", "str": "a string", "bool": "a boolean (true/false)",
               "array": "a list", "object": "a table"}


class _Unsupplied:
    """What the walk returns for a value (or a table holding one) still marked for the site to supply."""

    def __repr__(self) -> str:
        return "<unsupplied>"


UNSUPPLIED = _Unsupplied()

#: markers found by one walk: (key path, what to put there)
_Found = list[tuple[list[str], str]]


def parse(raw: Any, schema: Any, file: str | Path | None = None, path: list[str] | None = None) -> Any:
    """Convert ``raw`` (TOML data) into ``schema``; raises ConfigError with the key path on any problem, and
    :class:`SiteValuesMissing` naming every value still marked ``<site: ...>`` (a template's)."""
    prefix = list(path or [])
    found: _Found = []
    obj = _walk(raw, schema, prefix, file, found)
    if found:
        order = {(*prefix, *p): i for i, (p, _) in enumerate(markers(raw))}
        found.sort(key=lambda m: order.get(tuple(m[0]), len(order)))
        raise SiteValuesMissing(file, [(key_path(p, False), what) for p, what in found])
    return obj


def refuse_unsupplied(raw: Any, file: str | Path | None = None) -> None:
    """Refuse TOML data that still holds site markers, naming each in the file's order, before any schema
    is known: a config reader calls it first, so a template is refused without importing its rig kind's
    code (scipy, drivers), in well under a second. :func:`parse` refuses the same markers with the same
    words where its schema has a value (data handed to it directly)."""
    found = markers(raw)
    if found:
        raise SiteValuesMissing(file, [(key_path(list(p), False), what) for p, what in found])


def _walk(raw: Any, tp: Any, path: list[str], file, found: _Found) -> Any:
    if is_marker(raw):  # any value of the schema, or a whole table, may be left to the site
        found.append((path, marker_text(raw)))
        return UNSUPPLIED
    base, optional = _unwrap(tp)
    if raw is None and optional:
        return None
    if _is_struct(base):
        return _walk_struct(raw, base, path, file, found)
    if isinstance(base, type) and dataclasses.is_dataclass(base):
        return _walk_dataclass(raw, base, path, file, found)
    if get_origin(base) is dict:
        if not isinstance(raw, dict):
            raise ConfigError(f"must be a table, got {type(raw).__name__} {raw!r}", file,
                              key_path(path, True))
        _, value_type = get_args(base)
        before = len(found)
        table = {str(k): _walk(v, value_type, [*path, str(k)], file, found) for k, v in raw.items()}
        return UNSUPPLIED if len(found) > before else table
    try:  # strict: a float field takes a TOML integer (``q_max = 20000``); nothing else is coerced
        return msgspec.convert(raw, tp)
    except msgspec.ValidationError as exc:
        raise ConfigError(_leaf_error(raw, tp, exc), file, key_path(path, False)) from None


def _check_keys(raw: Any, names: list[str], path: list[str], file) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"must be a table, got {type(raw).__name__} {raw!r}", file, key_path(path, True))
    for key in raw:
        if key not in names:
            is_table = isinstance(raw[key], dict)
            what = "unknown table" if is_table else "unknown key"
            raise ConfigError(what + _suggest(str(key), names), file, key_path([*path, str(key)], is_table))


def _run_check(obj: Any, path: list[str], file) -> None:
    check = getattr(obj, "check", None)
    if check is None:
        return
    try:
        check()
    except InvalidSetting as exc:
        sub = [*path, *exc.key.split(".")] if exc.key else path
        raise ConfigError(exc.message, file, key_path(sub, exc.key is None or exc.table)) from None


def _walk_struct(raw: Any, tp: type[msgspec.Struct], path: list[str], file, found: _Found) -> Any:
    """A table: its keys, each value, then its ``check()``. A table holding an unsupplied value is neither
    built nor checked (its rules need the value); the walk goes on to find every other problem."""
    fields = msgspec.structs.fields(tp)
    _check_keys(raw, [f.encode_name for f in fields], path, file)
    kwargs = {}
    before = len(found)
    for f in fields:
        if f.encode_name in raw:
            kwargs[f.name] = _walk(raw[f.encode_name], f.type, [*path, f.encode_name], file, found)
        elif f.required:
            what = "missing required table" if _is_table_type(f.type) else "missing required key"
            raise ConfigError(what, file, key_path([*path, f.encode_name], _is_table_type(f.type)))
    if len(found) > before:
        return UNSUPPLIED
    obj = tp(**kwargs)
    _run_check(obj, path, file)
    return obj


def _walk_dataclass(raw: Any, tp: type, path: list[str], file, found: _Found) -> Any:
    hints = typing.get_type_hints(tp, include_extras=True)
    fields = [f for f in dataclasses.fields(tp) if f.init]
    _check_keys(raw, [f.name for f in fields], path, file)
    before = len(found)
    kwargs = {f.name: _walk(raw[f.name], hints[f.name], [*path, f.name], file, found)
              for f in fields if f.name in raw}
    if len(found) > before:
        return UNSUPPLIED
    try:
        obj = tp(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc), file, key_path(path, True)) from None
    _run_check(obj, path, file)
    return obj


def is_path(tp: Any) -> bool:
    """True for a field that names a file or folder (``daq.config.schema.PathStr``)."""
    return any((m.extra or {}).get("path") for m in _metas(tp))


def resolve_paths(raw: dict, schema: Any, base: str | Path) -> dict:
    """Make every relative path of a checked config absolute against ``base`` (the config file's folder),
    in place: the fields typed ``PathStr`` - given ones, and the defaults of the tables the config has -
    so that drivers, simulators, plans and the session snapshot all see the same absolute file.
    ``~`` is expanded. Returns ``raw``."""
    _resolve(raw, schema, Path(base).resolve())
    return raw


def _resolve(raw: Any, tp: Any, base: Path) -> None:
    struct, _ = _unwrap(tp)
    if get_origin(struct) is dict and isinstance(raw, dict):
        for value in raw.values():
            _resolve(value, get_args(struct)[1], base)
        return
    if not (_is_struct(struct) and isinstance(raw, dict)):
        return
    for f in msgspec.structs.fields(struct):
        key = f.encode_name
        if is_path(f.type):
            value = raw.get(key, f.default if isinstance(f.default, str) else None)
            if isinstance(value, str) and value and not is_marker(value):  # a marker stays one
                path = Path(value).expanduser()
                raw[key] = str(path if path.is_absolute() else (base / path).resolve())
        elif key in raw:
            _resolve(raw[key], f.type, base)
        elif f.default_factory is not msgspec.NODEFAULT and _is_struct(_unwrap(f.type)[0]):
            sub: dict = {}  # a table left to its defaults: its default paths are relative too
            _resolve(sub, f.type, base)
            if sub:
                raw[key] = sub


def to_dict(obj: Any) -> Any:
    """A typed table back to plain TOML-like data as a config would write it (defaults left out)."""
    return msgspec.to_builtins(obj)


def snapshot(obj: Any) -> Any:
    """A typed config as plain data with every value it holds, defaults included (the session's record of
    what a run used: parsed again later it gives the same struct even if a default changes meanwhile).
    Absent optional tables and keys (None) are left out, as a TOML file leaves them out."""
    if isinstance(obj, msgspec.Struct):
        return {f.encode_name: snapshot(getattr(obj, f.name)) for f in msgspec.structs.fields(obj)
                if getattr(obj, f.name) is not None}
    if isinstance(obj, dict):
        return {str(k): snapshot(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list | tuple):
        return [snapshot(v) for v in obj]
    return msgspec.to_builtins(obj)


# ----------------------------------------------------------------------------------------- reading


def read_toml(path: str | Path) -> dict:
    """Read a TOML file; ConfigError (one line) for a missing, unreadable or malformed file."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config file", path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path) from None
    try:
        return tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError("invalid TOML: arrays or inline tables nested too deeply (a config needs a few "
                          "levels)", path) from None


def default_store_path() -> Path:
    """Where sessions go when nothing else says: ``$XDG_DATA_HOME/hil/hil.sqlite`` (~/.local/share/...)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hil" / "hil.sqlite"


def store_path_for(option: str | None, config: Any | None) -> Path:
    """The one rule for the store: --store, else $HIL_STORE, else the config's [store].path (a loaded config:
    relative paths are already resolved against the config file's folder), else :func:`default_store_path`.
    ``config``: the typed config (``cfg.store.path``) or its TOML data."""
    if option:
        return Path(option)
    if os.environ.get(ENV_STORE):
        return Path(os.environ[ENV_STORE])
    if isinstance(config, dict):
        path = (config.get("store") or {}).get("path")
    else:
        path = config.store.path if config is not None else None
    return Path(path) if path else default_store_path()
