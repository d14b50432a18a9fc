"""Bus messages: time-series frames and events, and their wire encoding.

A message on the bus is three ZeroMQ parts ``[topic, header, payload]``:

* topic   ``b"data/<stream>"`` for frames, ``b"event/<stream>"`` for events, so that
  prefix subscriptions select streams;
* header  UTF-8 JSON describing the message (schema version, stream, sequence number,
  time base, channels, units, dtype, shape, session id, replay flag);
* payload the raw little-endian sample block (followed by float64 timestamps when the
  frame has an explicit time axis); empty for events.

Nothing is ever pickled: a decoder only trusts JSON and a byte count it checks itself.
Malformed input raises :class:`FrameError` with a short ``kind`` so that subscribers can
count and log each kind of problem once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

SCHEMA_VERSION = 1

#: Largest payload a decoder accepts (bytes); bigger frames are dropped as "oversized".
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
#: Largest header a decoder accepts (bytes).
MAX_HEADER_BYTES = 1024 * 1024

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

DATA_PREFIX = b"data/"
EVENT_PREFIX = b"event/"

#: Kinds of malformed input reported by :class:`FrameError`.
ERROR_KINDS = ("parts", "topic", "json", "schema", "header", "dtype", "size", "oversized")


class FrameError(ValueError):
    """A message that cannot be encoded or decoded; ``kind`` is one of :data:`ERROR_KINDS`."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass
class Frame:
    """A block of samples of one stream, shape (n_samples, n_channels)."""

    stream: str
    seq: int
    t0: float
    dt: float | None
    channels: list[str]
    units: list[str]
    data: np.ndarray
    timestamps: np.ndarray | None = None
    session_id: str | None = None
    replay: bool = False

    @property
    def n_samples(self) -> int:
        return int(self.data.shape[0])

    def time(self) -> np.ndarray:
        """Time of every sample, s (from ``timestamps`` or ``t0 + k*dt``)."""
        if self.timestamps is not None:
            return np.asarray(self.timestamps, dtype=np.float64)
        return self.t0 + np.arange(self.n_samples, dtype=np.float64) * float(self.dt or 0.0)


@dataclass
class Event:
    """Something that happened (plan step, setpoint reached, fault); no sample payload."""

    stream: str
    kind: str
    seq: int
    t: float
    body: dict = field(default_factory=dict)
    session_id: str | None = None
    replay: bool = False


Message = Frame | Event


# ----------------------------------------------------------------------------- encode


def _check_stream(stream: Any) -> str:
    if not isinstance(stream, str) or not stream or "\x00" in stream:
        raise FrameError("header", f"stream name must be a non-empty string, got {stream!r}")
    return stream


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


def frame_header(frame: Frame) -> dict:
    """The JSON header of a frame (also used by the store); validates the frame."""
    _check_stream(frame.stream)
    data = frame.data
    if not isinstance(data, np.ndarray):
        raise FrameError("header", f"frame data must be a numpy array, got {type(data).__name__}")
    if data.ndim != 2:
        raise FrameError("size", f"frame data must be 2-D (n_samples, n_channels), got shape {data.shape}")
    channels = [str(c) for c in frame.channels]
    units = [str(u) for u in frame.units]
    if len(channels) != data.shape[1] or len(units) != data.shape[1]:
        raise FrameError(
            "header",
            f"stream {frame.stream!r}: {data.shape[1]} data columns but {len(channels)} channels "
            f"and {len(units)} units",
        )
    if frame.timestamps is None:
        if frame.dt is None or not (float(frame.dt) > 0 and math.isfinite(float(frame.dt))):
            raise FrameError(
                "header", f"stream {frame.stream!r}: dt must be > 0 when no timestamps are given"
            )
    elif np.shape(frame.timestamps) != (data.shape[0],):
        raise FrameError("size", f"stream {frame.stream!r}: timestamps must have shape ({data.shape[0]},)")
    return {
        "v": SCHEMA_VERSION,
        "type": "frame",
        "stream": frame.stream,
        "seq": int(frame.seq),
        "t0": float(frame.t0),
        "dt": None if frame.timestamps is not None else float(frame.dt),
        "timestamps": frame.timestamps is not None,
        "channels": channels,
        "units": units,
        "dtype": _dtype_name(data),
        "shape": [int(data.shape[0]), int(data.shape[1])],
        "session_id": frame.session_id,
        "replay": bool(frame.replay),
    }


def frame_payload(frame: Frame) -> bytes | memoryview:
    """Raw little-endian payload of a frame (data block, then float64 timestamps if any)."""
    data = frame.data
    if data.dtype not in _DTYPE_NAMES or not data.flags.c_contiguous:
        data = np.ascontiguousarray(data, dtype=SUPPORTED_DTYPES[_dtype_name(data)])
    if frame.timestamps is None:
        return memoryview(data).cast("B") if data.size else b""
    ts = np.ascontiguousarray(frame.timestamps, dtype="<f8")
    return data.tobytes() + ts.tobytes()


def event_header(event: Event) -> dict:
    """The JSON header of an event; validates it."""
    _check_stream(event.stream)
    if not isinstance(event.kind, str) or not event.kind:
        raise FrameError("header", f"event kind must be a non-empty string, got {event.kind!r}")
    if not isinstance(event.body, dict):
        raise FrameError("header", f"event body must be a dict, got {type(event.body).__name__}")
    return {
        "v": SCHEMA_VERSION,
        "type": "event",
        "stream": event.stream,
        "kind": event.kind,
        "seq": int(event.seq),
        "t": float(event.t),
        "body": event.body,
        "session_id": event.session_id,
        "replay": bool(event.replay),
    }


def _dumps(obj: dict) -> bytes:
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=True, default=_json_default).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise FrameError("json", f"header is not JSON-serialisable: {exc}") from None


def _json_default(obj: Any) -> Any:
    """Let numpy scalars and arrays appear in event bodies."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def topic_of(msg: Message) -> bytes:
    prefix = DATA_PREFIX if isinstance(msg, Frame) else EVENT_PREFIX
    return prefix + msg.stream.encode("utf-8")


# The parts of a frame header that rarely change (stream, channels, units, dtype) are validated
# and JSON-encoded once per layout and cached; only seq, time base, shape and flags are formatted
# per frame. This keeps encoding cheap for small, fast frames. The bytes are plain JSON either way.
_LAYOUT_CACHE: dict[tuple, tuple[bytes, bytes]] = {}
_LAYOUT_CACHE_MAX = 4096


def _jfloat(x: float) -> str:
    return repr(x) if math.isfinite(x) else json.dumps(x)


def _encode_frame_fast(frame: Frame) -> list:
    data = frame.data
    if not isinstance(data, np.ndarray) or data.ndim != 2:
        return [topic_of(frame), _dumps(frame_header(frame)), frame_payload(frame)]  # raises clearly
    key = (frame.stream, tuple(frame.channels), tuple(frame.units), data.dtype, data.shape[1])
    try:
        cached = _LAYOUT_CACHE.get(key)
    except TypeError:  # unhashable channel names: let the full path report or handle them
        return [topic_of(frame), _dumps(frame_header(frame)), frame_payload(frame)]
    if cached is None:
        h = frame_header(frame)  # full validation of the layout
        static = {k: h[k] for k in ("stream", "channels", "units", "dtype")}
        cached = (topic_of(frame), _dumps(static)[1:-1])
        if len(_LAYOUT_CACHE) >= _LAYOUT_CACHE_MAX:
            _LAYOUT_CACHE.clear()
        _LAYOUT_CACHE[key] = cached
    topic, static = cached
    ts = frame.timestamps
    if ts is None:
        dt = float(frame.dt) if frame.dt is not None else math.nan
        if not (dt > 0 and math.isfinite(dt)):
            frame_header(frame)  # raises the precise error
        time_base = f'"dt":{_jfloat(dt)},"timestamps":false'
    else:
        if np.shape(ts) != (data.shape[0],):
            frame_header(frame)
        time_base = '"dt":null,"timestamps":true'
    sid = frame.session_id
    sid_json = "null" if sid is None else json.dumps(str(sid))
    head = (
        f'{{"v":{SCHEMA_VERSION},"type":"frame","seq":{int(frame.seq)},"t0":{_jfloat(float(frame.t0))},'
        f'{time_base},"shape":[{data.shape[0]},{data.shape[1]}],"session_id":{sid_json},'
        f'"replay":{"true" if frame.replay else "false"},'
    ).encode()
    return [topic, head + static + b"}", frame_payload(frame)]


def encode(msg: Message) -> list[bytes]:
    """Encode a frame or event as ``[topic, header, payload]`` (payload may be a memoryview)."""
    if isinstance(msg, Frame):
        return _encode_frame_fast(msg)
    if isinstance(msg, Event):
        return [topic_of(msg), _dumps(event_header(msg)), b""]
    raise FrameError("header", f"cannot encode {type(msg).__name__}; expected Frame or Event")


# ----------------------------------------------------------------------------- decode


def _field(h: dict, key: str, types: type | tuple[type, ...], *, none_ok: bool = False) -> Any:
    if key not in h:
        raise FrameError("header", f"missing field {key!r}")
    value = h[key]
    if value is None and none_ok:
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise FrameError("header", f"field {key!r} has the wrong type (bool)")
    if not isinstance(value, types):
        raise FrameError("header", f"field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _str_list(h: dict, key: str, n: int) -> list[str]:
    value = h.get(key)
    if type(value) is not list or len(value) != n or not all(type(x) is str for x in value):
        raise FrameError("header", f"field {key!r} must be {n} strings")
    return value


def _loads(raw: bytes) -> Any:
    """orjson is ~4x faster than json on our small headers (it is the bus's per-message cost at 8 kB);
    it rejects the NaN/Infinity literals that json.dumps may write into event bodies, so those
    headers go through the standard parser."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8"))


def parse_header(raw: bytes) -> dict:
    """Parse and version-check a JSON header."""
    if len(raw) > MAX_HEADER_BYTES:
        raise FrameError("oversized", f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        h = _loads(raw if isinstance(raw, bytes) else bytes(raw))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError("json", f"header is not UTF-8 JSON: {exc}") from None
    if not isinstance(h, dict):
        raise FrameError("json", "header is not a JSON object")
    if h.get("v") != SCHEMA_VERSION:
        raise FrameError(
            "schema", f"unknown schema version {h.get('v')!r} (this reader knows {SCHEMA_VERSION})"
        )
    return h


# Validated channel/unit lists seen recently, so that a steady stream does not re-check them.
_KNOWN_NAME_LISTS: dict[str, tuple[list, list]] = {}


def _names(h: dict, stream: str, n_ch: int) -> tuple[list[str], list[str]]:
    channels, units = h.get("channels"), h.get("units")
    known = _KNOWN_NAME_LISTS.get(stream)
    if known is not None and known[0] == channels and known[1] == units:
        return channels, units  # the lists just parsed: each frame owns its own
    channels = _str_list(h, "channels", n_ch)
    units = _str_list(h, "units", n_ch)
    if len(_KNOWN_NAME_LISTS) > 4096:
        _KNOWN_NAME_LISTS.clear()
    _KNOWN_NAME_LISTS[stream] = (list(channels), list(units))
    return channels, units


def frame_from_header(h: dict, payload: bytes | memoryview, *, copy: bool = False) -> Frame:
    """Build a frame from a parsed header and its payload; checks dtype, shape and size."""
    stream = h.get("stream")
    seq, t0, has_ts, dt = h.get("seq"), h.get("t0"), h.get("timestamps"), h.get("dt")
    if type(stream) is not str or not stream or type(seq) is not int or type(has_ts) is not bool:
        _check_stream(stream)
        _field(h, "seq", int)
        _field(h, "timestamps", bool)
    if type(t0) is not float:
        t0 = float(_field(h, "t0", (int, float)))
    if not has_ts:
        if type(dt) is not float:
            dt = _field(h, "dt", (int, float), none_ok=True)
        if dt is None or not dt > 0:
            raise FrameError("header", "dt must be > 0 when no timestamps are given")
        dt = float(dt)
    else:
        dt = None
    dtype = SUPPORTED_DTYPES.get(h.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise FrameError("dtype", f"unsupported dtype {h.get('dtype')!r}")
    shape = h.get("shape")
    if type(shape) is not list or len(shape) != 2 or not (type(shape[0]) is int and type(shape[1]) is int):
        raise FrameError("size", f"shape must be two non-negative integers, got {shape!r}")
    n, n_ch = shape
    if n < 0 or n_ch < 0:
        raise FrameError("size", f"shape must be two non-negative integers, got {shape!r}")
    channels, units = _names(h, stream, n_ch)
    n_data = n * n_ch * dtype.itemsize
    expected = n_data + (8 * n if has_ts else 0)
    if expected > MAX_PAYLOAD_BYTES:
        raise FrameError("oversized", f"frame of {expected} bytes exceeds {MAX_PAYLOAD_BYTES}")
    if len(payload) != expected:
        raise FrameError("size", f"payload has {len(payload)} bytes, header says {expected}")
    if has_ts:
        buf = memoryview(payload)
        data = np.frombuffer(buf[:n_data], dtype=dtype).reshape(n, n_ch)
        timestamps = np.frombuffer(buf[n_data:], dtype="<f8")
    else:
        data = np.frombuffer(payload, dtype=dtype).reshape(n, n_ch)
        timestamps = None
    if copy:
        data = data.copy()
        timestamps = None if timestamps is None else timestamps.copy()
    session_id = h.get("session_id")
    return Frame(
        stream,
        seq,
        t0,
        dt,
        channels,
        units,
        data,
        timestamps,
        session_id if type(session_id) is str else None,
        h.get("replay") is True,
    )


def event_from_header(h: dict) -> Event:
    """Build an event from a parsed header."""
    stream = _check_stream(h.get("stream"))
    kind = _field(h, "kind", str)
    seq = _field(h, "seq", int)
    t = float(_field(h, "t", (int, float)))
    body = _field(h, "body", dict)
    session_id = h.get("session_id")
    return Event(
        stream=stream,
        kind=kind,
        seq=seq,
        t=t,
        body=body,
        session_id=session_id if isinstance(session_id, str) else None,
        replay=bool(h.get("replay", False)),
    )


def decode(parts: list[bytes], *, max_payload: int | None = None) -> Message:
    """Decode ``[topic, header, payload]``; raises :class:`FrameError` on malformed input.

    The returned frame's ``data`` is a read-only view on the payload (no copy).
    """
    if len(parts) != 3:
        raise FrameError("parts", f"expected 3 message parts, got {len(parts)}")
    topic, raw_header, payload = parts
    limit = MAX_PAYLOAD_BYTES if max_payload is None else max_payload
    if len(payload) > limit:
        raise FrameError("oversized", f"payload of {len(payload)} bytes exceeds {limit}")
    h = parse_header(raw_header)
    kind = h.get("type")
    if kind == "frame":
        msg: Message = frame_from_header(h, payload)
    elif kind == "event":
        if len(payload):
            raise FrameError("size", f"event with a {len(payload)}-byte payload")
        msg = event_from_header(h)
    else:
        raise FrameError("header", f"unknown message type {kind!r}")
    if bytes(topic) != topic_of(msg):
        raise FrameError("topic", f"topic {bytes(topic)[:80]!r} does not match the header")
    return msg
