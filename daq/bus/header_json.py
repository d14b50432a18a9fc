"""The JSON of bus headers, with msgspec (the project's one JSON library): byte for byte the format
``json.dumps(obj, separators=(",", ":"), allow_nan=True)`` wrote, and read back including what msgspec
alone refuses (NaN/Infinity literals, numbers beyond the float range, lone UTF-16 surrogate escapes).
Errors are msgspec's (or TypeError/ValueError); :mod:`daq.bus.frames` turns them into FrameError kinds.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import msgspec
import numpy as np

#: Deeper than any header the frames module lets through (event bodies are checked to 64 levels).
MAX_DEPTH = 128


def dumps(obj: dict) -> bytes:
    """Compact JSON: floats as Python's ``repr`` (``1e-07``, ``NaN``, ``Infinity``), dict keys converted as
    the stdlib does, non-ASCII text as ``\\uXXXX`` escapes."""
    out = ENCODER.encode(_wire_value(obj))
    return out if out.isascii() and b"\x7f" not in out else _ascii_escape(out)


def loads(raw: bytes) -> Any:
    """Parse a header (msgspec; the lenient path only for what it refuses)."""
    try:
        return _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _loads_lenient(raw)


ENCODER = msgspec.json.Encoder()
_NONFINITE = {"nan": msgspec.Raw(b"NaN"), "inf": msgspec.Raw(b"Infinity"), "-inf": msgspec.Raw(b"-Infinity")}


def _wire_float(x: float) -> msgspec.Raw:
    text = float.__repr__(x)
    return _NONFINITE.get(text) or msgspec.Raw(text.encode())


def _wire_key(key: Any) -> str:
    """A dict key as the stdlib JSON encoder writes it."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return float.__repr__(key).replace("nan", "NaN").replace("inf", "Infinity")
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _wire_value(obj: Any, depth: int = 0) -> Any:
    """``obj`` with every float as its ``repr`` (msgspec writes exponents and NaN its own way) and numpy
    scalars and arrays as Python values; depth is bounded (bodies are checked before)."""
    if isinstance(obj, str) or obj is None or obj is True or obj is False:
        return obj
    if isinstance(obj, float):
        return _wire_float(obj)
    if isinstance(obj, int):
        return int(obj)
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(obj, dict):
        return {_wire_key(k): _wire_value(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_wire_value(v, depth + 1) for v in obj]
    return _wire_value(_json_default(obj), depth + 1)


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


def _json_default(obj: Any) -> Any:
    """Let numpy scalars and arrays appear in event bodies."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


_DECODER = msgspec.json.Decoder()
# What msgspec refuses but the wire format has carried: the NaN/Infinity literals json.dumps writes for
# non-finite floats in event bodies, numbers beyond the float range (read as +-inf) and strings with
# lone UTF-16 surrogate escapes (read as such, so that the name checks report them as "text").
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
