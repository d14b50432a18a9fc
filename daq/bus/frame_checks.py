"""The limits of the bus wire format and the checks that hold messages to them.

Both directions of :mod:`daq.bus.frames` use these: an encoder refuses what a decoder would refuse, and
a decoder refuses what a store or a reader could not take later. A violation raises :class:`FrameError`
with a short ``kind`` (:data:`ERROR_KINDS`), so that subscribers can count each kind of problem.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from daq.errors import ProtocolError

#: Largest payload a decoder accepts (bytes); bigger frames are dropped as "oversized".
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
#: Largest header a decoder accepts (bytes).
MAX_HEADER_BYTES = 1024 * 1024
#: Deepest nesting of lists/objects accepted in an event body (JSON parsers recurse).
MAX_NESTING = 64
#: Sequence numbers are unsigned 63-bit (they are stored as SQLite INTEGER).
SEQ_LIMIT = 2**63

#: dtypes allowed on the bus, by their canonical name in the header.
SUPPORTED_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<") if np.dtype(name).itemsize > 1 else np.dtype(name)
    for name in (
        "float64",
        "float32",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
}

#: Kinds of malformed input reported by :class:`FrameError`.
ERROR_KINDS = (
    "parts",  # not three message parts
    "topic",  # topic does not match the header
    "json",  # header is not a UTF-8 JSON object
    "nesting",  # JSON nested too deeply
    "schema",  # unknown schema version
    "header",  # missing field or wrong type
    "text",  # a name that is not valid UTF-8 text (e.g. a lone surrogate)
    "range",  # seq outside [0, 2**63) or a non-finite time
    "dtype",  # unsupported dtype
    "size",  # shape and payload disagree
    "oversized",  # header or payload over the limit
)


class FrameError(ProtocolError, ValueError):
    """A message that cannot be encoded or decoded; ``kind`` is one of :data:`ERROR_KINDS`."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _check_text(value: str, what: str) -> str:
    """``value`` must encode as UTF-8 (Python strings may hold lone surrogates, which do not)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise FrameError("text", f"{what} is not valid UTF-8 text: {value[:40]!r}") from None
    return value


def _check_stream(stream: Any) -> str:
    if not isinstance(stream, str) or not stream or "\x00" in stream:
        raise FrameError("header", f"stream name must be a non-empty string, got {stream!r}")
    return _check_text(stream, "stream name")


def _check_seq(seq: Any) -> int:
    if not 0 <= seq < SEQ_LIMIT:
        raise FrameError("range", f"sequence number {seq} outside [0, 2**63)")
    return seq


def _finite(value: Any, what: str) -> float:
    """``value`` as a finite float (huge JSON integers overflow; NaN/inf are refused)."""
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise FrameError("range", f"{what} must be finite, got {value!r:.40}")
    return x


def _all_finite(x: np.ndarray) -> bool:
    """No NaN or inf in ``x`` (short arrays through Python floats: cheaper than a ufunc call)."""
    if x.size <= 64:
        return all(map(math.isfinite, x.tolist()))
    return bool(np.isfinite(x).all())


def _check_names(names: list[str], what: str) -> list[str]:
    for name in names:
        _check_text(name, what)
    return names


def _check_body(body: dict) -> dict:
    """An event body: JSON-like, nested at most MAX_NESTING deep, keys and strings valid UTF-8."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        obj, depth = stack.pop()
        if depth > MAX_NESTING:
            raise FrameError("nesting", f"event body nested deeper than {MAX_NESTING} levels")
        if isinstance(obj, dict):
            for key, value in obj.items():
                if isinstance(key, str):
                    _check_text(key, "event body key")
                if isinstance(value, dict | list | tuple | str):
                    stack.append((value, depth + 1))
        elif isinstance(obj, list | tuple):
            stack.extend((value, depth + 1) for value in obj if isinstance(value, dict | list | tuple | str))
        elif isinstance(obj, str):
            _check_text(obj, "event body text")
    return body


def _check_session_id(sid: Any) -> Any:
    if type(sid) is str and not sid.isascii():
        _check_text(sid, "session id")
    return sid


#: Native little-endian dtypes by object (dict lookup; ``dtype.name`` is slow).
_DTYPE_NAMES: dict[np.dtype, str] = {dt: name for name, dt in SUPPORTED_DTYPES.items()}


def _dtype_name(arr: np.ndarray) -> str:
    name = _DTYPE_NAMES.get(arr.dtype)
    if name is not None:
        return name
    name = arr.dtype.name
    if name not in SUPPORTED_DTYPES:
        raise FrameError("dtype", f"unsupported dtype {arr.dtype} (supported: {', '.join(SUPPORTED_DTYPES)})")
    return name
