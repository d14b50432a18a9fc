"""The JSON of bus headers: byte for byte the format ``json.dumps(obj, separators=(",", ":"),
allow_nan=True)`` wrote, and read back including what msgspec alone refuses (NaN/Infinity literals,
numbers beyond the float range, lone UTF-16 surrogate escapes); the machinery is the project's one JSON
module, :mod:`daq.json_codec`. Errors are msgspec's (or TypeError/ValueError); :mod:`daq.bus.frames` turns
them into FrameError kinds.
"""

from __future__ import annotations

from typing import Any

from daq.json_codec import ENCODER, encode, numpy_default, parse

__all__ = ["ENCODER", "MAX_DEPTH", "dumps", "loads"]

#: Deeper than any header the frames module lets through (event bodies are checked to 64 levels).
MAX_DEPTH = 128


def dumps(obj: dict) -> bytes:
    """Compact JSON: floats as Python's ``repr`` (``1e-07``, ``NaN``, ``Infinity``), dict keys converted as
    the stdlib does, non-ASCII text as ``\\uXXXX`` escapes, numpy scalars and arrays as Python values."""
    return encode(obj, compact=True, default=numpy_default, max_depth=MAX_DEPTH)


def loads(raw: bytes) -> Any:
    """Parse a header (msgspec; the lenient path only for what it refuses)."""
    return parse(raw)
