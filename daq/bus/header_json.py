"""The JSON of bus headers: byte for byte the format ``json.dumps(obj, separators=(",", ":"),
allow_nan=True)`` wrote, and read back including what msgspec alone refuses (NaN/Infinity literals,
numbers beyond the float range, lone UTF-16 surrogate escapes); the machinery is the project's one JSON
module, :mod:`daq.json_codec`. Errors are msgspec's (or TypeError/ValueError); :mod:`daq.bus.frames` turns
them into FrameError kinds.

:func:`frame_head` is the receiver's quick look at a frame header: msgspec decodes it straight into a typed
:class:`FrameHead`, checking types and ranges in C instead of a dict lookup and a Python check per field.
It only says yes or "ask the full decoder" (None): whatever it refuses goes through :func:`loads` and the
frames module's checks, which name the problem.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from daq.json_codec import ENCODER, encode, numpy_default, parse

__all__ = ["ENCODER", "MAX_DEPTH", "FrameHead", "dumps", "frame_head", "loads"]

#: Deeper than any header the frames module lets through (event bodies are checked to 64 levels).
MAX_DEPTH = 128

_Count = Annotated[int, msgspec.Meta(ge=0)]


class FrameHead(msgspec.Struct, gc=False):
    """A frame header of schema version 1 with every field of the right type and in range.

    ``dt`` must be > 0 when given (the frames module still requires it when there are no timestamps);
    ``session_id`` and ``replay`` may be missing, as the full decoder allows.
    """

    v: Literal[1]
    type: Literal["frame"]
    stream: str
    seq: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    t0: float
    timestamps: bool
    shape: tuple[_Count, _Count]
    channels: list[str]
    units: list[str]
    dtype: str
    dt: Annotated[float, msgspec.Meta(gt=0)] | None = None
    session_id: str | None = None
    replay: bool = False


_FRAME_HEAD = msgspec.json.Decoder(FrameHead)


def frame_head(raw: bytes) -> FrameHead | None:
    """``raw`` as a typed frame header, or None when it is anything else (an event, a malformed or unusual
    header: NaN, huge numbers, a wrong type, lone surrogates); msgspec's strict JSON has no non-finite
    floats, so ``t0`` and ``dt`` are finite."""
    try:
        return _FRAME_HEAD.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None


def dumps(obj: dict) -> bytes:
    """Compact JSON: floats as Python's ``repr`` (``1e-07``, ``NaN``, ``Infinity``), dict keys converted as
    the stdlib does, non-ASCII text as ``\\uXXXX`` escapes, numpy scalars and arrays as Python values."""
    return encode(obj, compact=True, default=numpy_default, max_depth=MAX_DEPTH)


def loads(raw: bytes) -> Any:
    """Parse a header (msgspec; the lenient path only for what it refuses)."""
    return parse(raw)
