"""The project's one JSON library: msgspec, writing byte for byte what the stdlib ``json`` module wrote and
reading what it read (several times faster; writing the stdlib's bytes costs a walk over the value, about
as fast as ``json.dumps`` on large values, slower on small ones). The stdlib module stays in the tests only,
as an independent parser of our output.

Written as ``json.dumps`` writes: non-ASCII text as ``\\uXXXX`` escapes (``ensure_ascii``), floats as
Python's ``repr`` (``1e-07``, ``NaN``, ``Infinity``), dict keys converted as the stdlib converts them, its
separators (``", "`` and ``": "``; ``compact``: ``","`` and ``":"``) and its ``indent``. Read as
``json.loads`` reads, including what msgspec alone refuses: the NaN/Infinity literals, numbers beyond the
float range (as +-inf) and strings with lone UTF-16 surrogate escapes.

- :func:`dumps` (text) and :func:`encode` (bytes); ``default`` as json.dumps's (called for what JSON cannot
  take; :func:`numpy_default` lets numpy scalars and arrays through), ``allow_nan``.
- :func:`dumps_strict`: standard JSON that strict parsers accept (the exports): non-finite floats as null,
  numpy scalars and arrays as plain values.
- :func:`loads`: malformed text raises :class:`JsonDecodeError` (a ProtocolError and a ValueError, one
  line); nesting deeper than the recursion limit raises RecursionError, as json.loads does.
- :func:`parse`: :func:`loads` with msgspec's own errors (the bus maps them to its frame error kinds).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from daq.errors import ProtocolError

#: Deepest nesting encoded, a ValueError beyond (json.dumps ran into the recursion limit instead); far
#: deeper than any config, body (the bus checks 64 levels) or result, and well within the recursion limit.
MAX_DEPTH = 200

ENCODER = msgspec.json.Encoder()


class JsonDecodeError(ProtocolError, ValueError):
    """Text that should be JSON is not (msgspec's reason, one line: what is wrong and at which byte)."""


def dumps(obj: Any, *, indent: int | None = None, compact: bool = False,
          default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> str:
    """``json.dumps(obj)`` with these options (``compact``: ``separators=(",", ":")``)."""
    return encode(obj, indent=indent, compact=compact, default=default, allow_nan=allow_nan).decode("ascii")


def encode(obj: Any, *, indent: int | None = None, compact: bool = False,
           default: Callable[[Any], Any] | None = None, allow_nan: bool = True,
           max_depth: int = MAX_DEPTH) -> bytes:
    """:func:`dumps` as ASCII bytes. TypeError for what JSON cannot take (and ``default`` does not turn into
    something it can), ValueError for NaN/inf without ``allow_nan`` and for nesting beyond ``max_depth``."""
    wire = _wire_value(obj, default, allow_nan, max_depth, 0)
    texts: list[str] = []
    try:
        out = ENCODER.encode(wire)
    except UnicodeEncodeError:  # lone surrogates, which json.dumps writes as escapes
        out = ENCODER.encode(_hide_surrogates(wire, texts))
    if not out.isascii() or b"\x7f" in out:
        out = _ascii_escape(out)
    if not compact or indent is not None:
        out = _layout(out, indent)
    return _put_surrogates(out, texts) if texts else out


def dumps_strict(obj: Any, *, indent: int | None = None, default: Callable[[Any], Any] | None = None) -> str:
    """Standard JSON that strict parsers accept: non-finite floats (NaN, inf, which event bodies and device
    info may hold) as null, numpy scalars and arrays as plain values (before ``default`` sees them)."""
    return dumps(_finite_only(obj), indent=indent, default=default, allow_nan=False)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads(data)``; :class:`JsonDecodeError` for anything that is not JSON."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeError):
        pass
    if isinstance(data, str):  # lone surrogates (legal in strings only) as their escapes
        raw = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", data).encode()
    else:
        raw = bytes(data)
    try:
        return _loads_lenient(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeError) as exc:
        raise JsonDecodeError(f"invalid JSON: {exc}") from None


def parse(raw: bytes) -> Any:
    """Parse JSON (msgspec; the lenient path only for what it refuses); msgspec's errors as they are."""
    try:
        return _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _loads_lenient(raw)


def numpy_default(obj: Any) -> Any:
    """A ``default`` that lets numpy scalars and arrays through as Python values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data (what :func:`loads` gives back for it): numpy values as Python numbers
    and lists, anything else JSON has no word for (TOML dates, paths) as its ``str``."""

    def default(x: Any) -> Any:
        try:
            return numpy_default(x)
        except TypeError:
            return str(x)

    return loads(encode(obj, default=default))


# ----------------------------------------------------------------------------- writing

_NONFINITE = {"nan": msgspec.Raw(b"NaN"), "inf": msgspec.Raw(b"Infinity"), "-inf": msgspec.Raw(b"-Infinity")}
_NONFINITE_KEYS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _wire_float(x: float, allow_nan: bool) -> msgspec.Raw:
    text = float.__repr__(x)
    literal = _NONFINITE.get(text)
    if literal is None:
        return msgspec.Raw(text.encode())
    if not allow_nan:
        raise ValueError(f"Out of range float values are not JSON compliant: {text}")
    return literal


def _wire_key(key: Any, allow_nan: bool) -> str:
    """A dict key as the stdlib JSON encoder writes it."""
    if isinstance(key, str):
        return key if type(key) is str else str.__str__(key)
    if isinstance(key, float):
        text = float.__repr__(key)
        if text in _NONFINITE_KEYS and not allow_nan:
            raise ValueError(f"Out of range float values are not JSON compliant: {text}")
        return _NONFINITE_KEYS.get(text, text)
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _wire_value(obj: Any, default: Callable[[Any], Any] | None, allow_nan: bool, limit: int,
                depth: int) -> Any:
    """``obj`` as msgspec writes it the stdlib's way: every float as its ``repr`` (msgspec writes exponents
    and NaN its own way), subclasses of str and int as their plain values, the rest through ``default``;
    depth is bounded."""
    kind = type(obj)
    if kind is str or kind is int or obj is None or obj is True or obj is False:
        return obj
    if kind is float:  # without an exponent msgspec writes what repr writes
        return obj if 1e-4 <= abs(obj) < 1e16 or obj == 0.0 else _wire_float(obj, allow_nan)
    if isinstance(obj, float):
        return _wire_float(obj, allow_nan)
    if isinstance(obj, int):
        return int.__int__(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if depth > limit:
        raise ValueError("nested too deeply")
    depth += 1  # below: the common values inline, without a call (the walk is most of the time)
    if isinstance(obj, dict):
        return {(k if type(k) is str else _wire_key(k, allow_nan)):
                (v if type(v) in _PLAIN or (type(v) is float and (1e-4 <= abs(v) < 1e16 or v == 0.0))
                 else _wire_value(v, default, allow_nan, limit, depth))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [v if type(v) in _PLAIN or (type(v) is float and (1e-4 <= abs(v) < 1e16 or v == 0.0))
                else _wire_value(v, default, allow_nan, limit, depth) for v in obj]
    if default is None:
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
    return _wire_value(default(obj), default, allow_nan, limit, depth)


_PLAIN = frozenset({str, int, bool, type(None)})


def _finite_only(obj: Any, depth: int = 0) -> Any:
    if isinstance(obj, float | np.floating):
        x = float(obj)
        return x if math.isfinite(x) else None
    if depth > 200:  # deeper than any body the bus lets through; the encoder says what is wrong
        return obj
    if isinstance(obj, dict):
        return {k: _finite_only(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_only(v, depth + 1) for v in obj]
    if isinstance(obj, np.ndarray):
        return _finite_only(obj.tolist(), depth + 1)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


# A tag no text holds by chance: placeholders for what msgspec cannot write or format itself.
_TAG = secrets.token_hex(8)
_LITERALS = {lit: b'"\\u0000' + f"{_TAG}{c}".encode() + b'"' for lit, c in
             ((b"NaN", "n"), (b"Infinity", "p"), (b"-Infinity", "m"))}
_SURROGATE = re.compile("([\ud800-\udfff])")


def _layout(out: bytes, indent: int | None) -> bytes:
    """Compact JSON with json.dumps's default separators, or indented as ``indent=`` indents."""
    hidden = b"NaN" in out or b"Infinity" in out
    if hidden:  # msgspec.json.format parses standard JSON only
        out = _TOKEN.sub(lambda m: _LITERALS[m.group(1)] if m.group(1) else m.group(), out)
    out = msgspec.json.format(out, indent=max(indent or 0, 1))
    # JSON text holds no raw newline but the ones format writes, each followed by the indentation only
    if indent is None:
        out = b"".join(map(bytes.lstrip, out.replace(b",\n", b", \n").split(b"\n")))
    elif indent <= 0:
        out = b"\n".join(map(bytes.lstrip, out.split(b"\n")))
    if hidden:
        for literal, placeholder in _LITERALS.items():
            out = out.replace(placeholder, literal)
    return out


def _hide_surrogates(wire: Any, texts: list[str]) -> Any:
    """``wire`` with the strings (keys too) holding lone surrogates, which msgspec cannot write, swapped
    for placeholders (appended to ``texts``)."""

    def swap(s: str) -> str:
        if not _SURROGATE.search(s):
            return s
        texts.append(s)
        return f"\x00{_TAG}s{len(texts) - 1}"

    def walk(x: Any) -> Any:  # depth bounded by _wire_value
        if type(x) is str:
            return swap(x)
        if type(x) is dict:
            return {swap(k): walk(v) for k, v in x.items()}
        if type(x) is list:
            return [walk(v) for v in x]
        return x

    return walk(wire)


def _put_surrogates(out: bytes, texts: list[str]) -> bytes:
    """The placeholders of :func:`_hide_surrogates` replaced by their strings as json.dumps writes them."""
    for i, s in enumerate(texts):
        parts = _SURROGATE.split(s)  # text, surrogate, text, ...
        body = b"".join(ENCODER.encode(p)[1:-1] if j % 2 == 0 else f"\\u{ord(p):04x}".encode()
                        for j, p in enumerate(parts))
        if not body.isascii() or b"\x7f" in body:
            body = _ascii_escape(body)
        out = out.replace(b'"\\u0000' + f"{_TAG}s{i}".encode() + b'"', b'"' + body + b'"')
    return out


def _ascii_escape(out: bytes) -> bytes:
    """Non-ASCII characters (and DEL) as ``\\uXXXX`` escapes, surrogate pairs above U+FFFF; in valid JSON
    they only occur inside strings, where the escape means the same character."""
    return _NON_ASCII.sub(_escape_char, out.decode("utf-8")).encode("ascii")


_NON_ASCII = re.compile("[^\x00-\x7e]")


def _escape_char(m: re.Match) -> str:
    n = ord(m.group())
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 | (n >> 10):04x}\\u{0xDC00 | (n & 0x3FF):04x}"


# ----------------------------------------------------------------------------- reading

_DECODER = msgspec.json.Decoder()
# What msgspec refuses but json.loads read: the NaN/Infinity literals json.dumps writes for non-finite
# floats, numbers beyond the float range (read as +-inf) and strings with lone UTF-16 surrogate escapes
# (read as such, so that the bus's name checks report them as "text").
_LENIENT = msgspec.json.Decoder(float_hook=float)
_TOKEN = re.compile(rb'"(?:[^"\\]|\\[\s\S])*"|(-?Infinity|NaN)')
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([\s\S]))")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _loads_lenient(raw: bytes) -> Any:
    """Parse ``raw`` with the literals and strings msgspec refuses swapped for placeholders, then put
    the values (float NaN/inf, strings holding lone surrogates) back in."""
    tag = "\x00" + secrets.token_hex(8)
    values: list[Any] = []

    def swap(m: re.Match) -> bytes:
        token = m.group()
        if m.group(1):
            value: Any = float(token.decode().replace("Infinity", "inf"))
        elif _SURROGATE_ESCAPE.search(token):
            value = _unescape(token[1:-1].decode("utf-8"))
        else:
            return token
        values.append(value)
        return b'"\\u0000' + f"{tag[1:]}{len(values) - 1}".encode() + b'"'

    obj = _LENIENT.decode(_TOKEN.sub(swap, raw))
    if not values:
        return obj

    def put_back(x: Any) -> Any:
        return values[int(x[len(tag):])] if type(x) is str and x.startswith(tag) else x

    stack = [obj]
    while stack:  # msgspec has bounded the depth
        node = stack.pop()
        if type(node) is dict:
            items = [(put_back(k), put_back(v)) for k, v in node.items()]
            node.clear()
            node.update(items)  # same order
            stack.extend(node.values())
        elif type(node) is list:
            node[:] = [put_back(v) for v in node]
            stack.extend(node)
    return put_back(obj)


def _unescape(text: str) -> str:
    """The value of a JSON string body (lone surrogates kept, valid pairs joined)."""

    def one(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        c = _SIMPLE_ESCAPES.get(m.group(2))
        if c is None:
            raise msgspec.DecodeError(f"invalid escape \\{m.group(2)} in a string")
        return c

    if any(c < " " for c in text):
        raise msgspec.DecodeError("control character in a string")
    return _ESCAPE.sub(one, text).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
