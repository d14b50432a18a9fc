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
count and log each kind of problem once. Both directions refuse what a store or a reader could
not take later: sequence numbers outside [0, 2**63), non-finite times, names that are not valid
UTF-8 text (e.g. lone UTF-16 surrogates) and event bodies nested deeper than :data:`MAX_NESTING`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import msgspec
import numpy as np

from daq.bus import header_json
from daq.bus.frame_checks import (  # the limits and FrameError belong to this module's interface too
    _DTYPE_NAMES,
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    SEQ_LIMIT,
    SUPPORTED_DTYPES,
    FrameError,
    _all_finite,
    _check_body,
    _check_names,
    _check_seq,
    _check_session_id,
    _check_stream,
    _check_text,
    _dtype_name,
    _finite,
)
from daq.bus.frame_checks import ERROR_KINDS as ERROR_KINDS  # re-exported
from daq.bus.frame_checks import MAX_NESTING as MAX_NESTING  # re-exported

SCHEMA_VERSION = 1

_F8 = SUPPORTED_DTYPES["float64"]
#: Types whose memory nobody changes once made. A read-only frame array viewing one directly (``data.base``)
#: may be kept as it is, without a copy: the store keeps it until its commit (daq/store/writer.py).
#: daq.bus.pubsub adds ``zmq.Frame``: a received ZeroMQ message, which no one writes.
IMMUTABLE_BUFFERS: set[type] = {bytes}

DATA_PREFIX = b"data/"
EVENT_PREFIX = b"event/"


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


def frame_header(frame: Frame) -> dict:
    """The JSON header of a frame (also used by the store); validates the frame."""
    _check_stream(frame.stream)
    data = frame.data
    if not isinstance(data, np.ndarray):
        raise FrameError("header", f"frame data must be a numpy array, got {type(data).__name__}")
    if data.ndim != 2:
        raise FrameError("size", f"frame data must be 2-D (n_samples, n_channels), got shape {data.shape}")
    channels = _check_names([str(c) for c in frame.channels], "channel name")
    units = _check_names([str(u) for u in frame.units], "unit")
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
    elif not _all_finite(np.asarray(frame.timestamps, dtype=np.float64)):
        raise FrameError("range", f"stream {frame.stream!r}: timestamps must be finite")
    _check_session_id(frame.session_id)
    return {
        "v": SCHEMA_VERSION,
        "type": "frame",
        "stream": frame.stream,
        "seq": _check_seq(int(frame.seq)),
        "t0": _finite(frame.t0, "t0"),
        "dt": None if frame.timestamps is not None else float(cast(float, frame.dt)),  # checked above
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
        return data.data.cast("B") if data.size else b""
    ts = np.ascontiguousarray(frame.timestamps, dtype="<f8")
    return data.tobytes() + ts.tobytes()


def event_header(event: Event) -> dict:
    """The JSON header of an event; validates it."""
    _check_stream(event.stream)
    if not isinstance(event.kind, str) or not event.kind:
        raise FrameError("header", f"event kind must be a non-empty string, got {event.kind!r}")
    if not isinstance(event.body, dict):
        raise FrameError("header", f"event body must be a dict, got {type(event.body).__name__}")
    _check_text(event.kind, "event kind")
    _check_session_id(event.session_id)
    return {
        "v": SCHEMA_VERSION,
        "type": "event",
        "stream": event.stream,
        "kind": event.kind,
        "seq": _check_seq(int(event.seq)),
        "t": _finite(event.t, "event time t"),
        "body": _check_body(event.body),
        "session_id": event.session_id,
        "replay": bool(event.replay),
    }


def _dumps(obj: dict) -> bytes:
    """Compact header JSON, byte for byte the wire format (see :mod:`daq.bus.header_json`)."""
    try:
        return header_json.dumps(obj)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise FrameError("json", f"header is not JSON-serialisable: {exc}") from None


def topic_of(msg: Message) -> bytes:
    prefix = DATA_PREFIX if isinstance(msg, Frame) else EVENT_PREFIX
    return prefix + msg.stream.encode("utf-8")


class _EncodeLayout:
    """A stream's validated, JSON-encoded header parts and what they were made from.

    ``static``: stream, channels, units and dtype as JSON text. ``tail``: the time base, shape, session id
    and replay flag, then ``static`` and the closing brace; valid for frames whose ``tail_key`` is equal."""

    __slots__ = ("channels", "units", "dtype", "native", "topic", "static", "tail_key", "tail")

    def __init__(self, frame: Frame, static: str):
        self.channels = _snapshot(frame.channels)
        self.units = _snapshot(frame.units)
        self.dtype = frame.data.dtype
        self.native = self.dtype in _DTYPE_NAMES  # little-endian already: the array's bytes are the payload
        self.topic = topic_of(frame)
        self.static = static
        self.tail_key: tuple | None = None
        self.tail = ""


# Per stream, the layout of its last frame: the parts of a frame header that rarely change (stream,
# channels, units, dtype; then time base, shape, session and replay flag) are validated and JSON-encoded
# once; a steady stream only compares them (list and tuple equality, cheaper than building a hashable
# key), and only the sequence number and t0 are formatted per frame. The bytes are plain JSON, the same
# as formatting every field each time.
_ENCODE_LAYOUTS: dict[str, _EncodeLayout] = {}
_ENCODE_LAYOUTS_MAX = 4096


def _snapshot(names: Any) -> list | tuple:
    """A copy that compares equal to ``names`` as long as its content is unchanged."""
    return list(names) if isinstance(names, list) else tuple(names)


def _encode_layout(frame: Frame) -> _EncodeLayout:
    h = frame_header(frame)  # full validation of the layout
    static = _dumps({k: h[k] for k in ("stream", "channels", "units", "dtype")})[1:-1].decode("ascii")
    layout = _EncodeLayout(frame, static)
    if len(_ENCODE_LAYOUTS) >= _ENCODE_LAYOUTS_MAX:
        _ENCODE_LAYOUTS.clear()
    _ENCODE_LAYOUTS[frame.stream] = layout
    return layout


def _jfloat(x: float, what: str) -> str:
    if not math.isfinite(x):
        raise FrameError("range", f"{what} must be finite, got {x!r}")
    return repr(x)


def _encode_tail(frame: Frame, layout: _EncodeLayout, key: tuple) -> str:
    """Validate and encode the header fields after t0; remembered when ``key`` stands for its text."""
    if frame.timestamps is None:
        dt = float(frame.dt) if frame.dt is not None else math.nan
        if not (dt > 0 and math.isfinite(dt)):
            frame_header(frame)  # raises the precise error
        time_base = f'"dt":{_jfloat(dt, "dt")},"timestamps":false'
    else:
        time_base = '"dt":null,"timestamps":true'
    sid = frame.session_id  # UTF-8 text checked by _check_session_id; msgspec writes it as it is
    sid_json = "null" if sid is None else header_json.ENCODER.encode(_check_session_id(str(sid))).decode()
    n, n_ch = frame.data.shape
    tail = (
        f'{time_base},"shape":[{n},{n_ch}],"session_id":{sid_json},'
        f'"replay":{"true" if frame.replay else "false"},{layout.static}}}'
    )
    # Remembered only for values that are immutable and whose equality means equal text (1 == True, but
    # str(1) != str(True); a 0-d array dt could change in place).
    plain = isinstance(frame.dt, float | int | None) and type(frame.replay) is bool
    if plain and (sid is None or type(sid) is str):
        layout.tail_key, layout.tail = key, tail
    return tail


def _encode_frame_fast(frame: Frame) -> list:
    data, stream = frame.data, frame.stream
    if not isinstance(data, np.ndarray) or data.ndim != 2 or type(stream) is not str:
        return [topic_of(frame), _dumps(frame_header(frame)), frame_payload(frame)]  # raises clearly
    layout = _ENCODE_LAYOUTS.get(stream)
    dtype, shape = data.dtype, data.shape
    if (
        layout is None
        or (layout.dtype is not dtype and layout.dtype != dtype)
        or len(layout.channels) != shape[1]
        or layout.channels != frame.channels
        or layout.units != frame.units
    ):
        layout = _encode_layout(frame)
    ts = frame.timestamps
    if ts is not None and (np.shape(ts) != (shape[0],) or not _all_finite(ts)):
        frame_header(frame)  # raises the precise error
    key = (ts is None, frame.dt, shape, frame.session_id, frame.replay)
    tail = layout.tail if key == layout.tail_key else _encode_tail(frame, layout, key)
    seq = int(frame.seq)
    if not 0 <= seq < SEQ_LIMIT:
        _check_seq(seq)
    t0 = float(frame.t0)
    if not math.isfinite(t0):
        _finite(t0, "t0")
    header = f'{{"v":{SCHEMA_VERSION},"type":"frame","seq":{seq},"t0":{t0!r},{tail}'.encode()  # one encode
    if ts is None and layout.native and data.flags.c_contiguous and data.size:
        payload: bytes | memoryview = data.data.cast("B")  # frame_payload's common case
    else:
        payload = frame_payload(frame)
    return [layout.topic, header, payload]


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


def parse_header(raw: bytes) -> dict:
    """Parse and version-check a JSON header (msgspec: parsing is a main per-message cost at 8 kB)."""
    if len(raw) > MAX_HEADER_BYTES:
        raise FrameError("oversized", f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        h = header_json.loads(raw if type(raw) is bytes else bytes(raw))
    except (UnicodeDecodeError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FrameError("json", f"header is not UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise FrameError("nesting", "header JSON is nested too deeply") from None
    if type(h) is not dict:
        raise FrameError("json", "header is not a JSON object")
    if h.get("v") != SCHEMA_VERSION:
        raise FrameError(
            "schema", f"unknown schema version {h.get('v')!r} (this reader knows {SCHEMA_VERSION})"
        )
    return h


class _Layout(NamedTuple):
    """The validated static part of a stream's frame headers (see :func:`frame_from_header`)."""

    dtype_name: str
    dtype: np.dtype
    channels: list[str]
    units: list[str]
    topic: bytes


# Per stream, the layout of its last frame: a steady stream only compares dtype, channels and units
# with it (cheap list equality) instead of validating them again. Checks that depend on the message
# (types of seq/t0/dt, shape, payload size) run for every frame.
_LAYOUTS: dict[str, _Layout] = {}
_LAYOUTS_MAX = 4096


def _layout(h: dict, stream: Any, n_ch: int) -> _Layout:
    """Validate the static part of a frame header and remember it for ``stream``."""
    _check_stream(stream)
    name: Any = h.get("dtype")  # a header value: a str when dtype is found
    dtype = SUPPORTED_DTYPES.get(name) if type(name) is str else None  # a list would be unhashable
    if dtype is None:
        raise FrameError("dtype", f"unsupported dtype {h.get('dtype')!r}")
    channels = _check_names(_str_list(h, "channels", n_ch), "channel name")
    units = _check_names(_str_list(h, "units", n_ch), "unit")
    layout = _Layout(name, dtype, list(channels), list(units), DATA_PREFIX + stream.encode("utf-8"))
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[stream] = layout
    return layout


def _shape(h: dict) -> tuple[int, int]:
    shape = h.get("shape")
    if type(shape) is list and len(shape) == 2:
        n, n_ch = shape
        if type(n) is int and type(n_ch) is int and n >= 0 and n_ch >= 0:
            return n, n_ch
    raise FrameError("size", f"shape must be two non-negative integers, got {shape!r}")


def frame_from_header(h: dict, payload: bytes | memoryview, *, copy: bool = False) -> Frame:
    """Build a frame from a parsed header and its payload; checks dtype, shape and size."""
    return _frame_and_topic(h, payload, copy)[0]


def _frame_and_topic(h: dict, payload: bytes | memoryview, copy: bool = False) -> tuple[Frame, bytes]:
    """:func:`frame_from_header`, also returning the topic the frame must have come with."""
    seq: Any  # a header value, checked below
    stream, seq, t0, has_ts = h.get("stream"), h.get("seq"), h.get("t0"), h.get("timestamps")
    if type(seq) is not int or type(has_ts) is not bool:
        _check_stream(stream)
        _field(h, "seq", int)
        _field(h, "timestamps", bool)
    if not 0 <= seq < SEQ_LIMIT:
        _check_seq(seq)
    if type(t0) is not float or not math.isfinite(t0):
        t0 = _finite(_field(h, "t0", (int, float)), "t0")
    if has_ts:
        dt = None
    else:
        dt = h.get("dt")
        if type(dt) is not float:
            dt = _field(h, "dt", (int, float), none_ok=True)
        if dt is None or not dt > 0:
            raise FrameError("header", "dt must be > 0 when no timestamps are given")
        dt = _finite(dt, "dt")
    n, n_ch = _shape(h)
    channels, units = h.get("channels"), h.get("units")
    layout = _LAYOUTS.get(stream) if type(stream) is str else None
    if (
        layout is None
        or layout.dtype_name != h.get("dtype")
        or len(layout.channels) != n_ch
        or layout.channels != channels
        or layout.units != units
    ):
        layout = _layout(h, stream, n_ch)
    dtype = layout.dtype
    n_data = n * n_ch * dtype.itemsize
    expected = n_data + (8 * n if has_ts else 0)
    if expected > MAX_PAYLOAD_BYTES:
        raise FrameError("oversized", f"frame of {expected} bytes exceeds {MAX_PAYLOAD_BYTES}")
    if len(payload) != expected:
        raise FrameError("size", f"payload has {len(payload)} bytes, header says {expected}")
    data = np.ndarray((n, n_ch), dtype, payload)  # a view, read-only if the payload is
    timestamps = np.ndarray((n,), _F8, payload, n_data) if has_ts else None
    if timestamps is not None and not _all_finite(timestamps):
        raise FrameError("range", "timestamps must be finite")
    if copy:
        data = data.copy()
        timestamps = None if timestamps is None else timestamps.copy()
    session_id = _check_session_id(h.get("session_id"))
    # channels/units: the lists just parsed (equal to the layout's), so each frame owns its own
    frame = Frame(
        stream,  # type: ignore[arg-type]  # validated via the layout
        seq,
        t0,
        dt,
        channels,  # type: ignore[arg-type]
        units,  # type: ignore[arg-type]
        data,
        timestamps,
        session_id if type(session_id) is str else None,
        h.get("replay") is True,
    )
    return frame, layout.topic


def event_from_header(h: dict) -> Event:
    """Build an event from a parsed header."""
    stream = _check_stream(h.get("stream"))
    kind = _check_text(_field(h, "kind", str), "event kind")
    if not kind:
        raise FrameError("header", "event kind must be a non-empty string")
    seq = _check_seq(_field(h, "seq", int))
    t = _finite(_field(h, "t", (int, float)), "event time t")
    body = _check_body(_field(h, "body", dict))
    session_id = _check_session_id(h.get("session_id"))
    return Event(
        stream=stream,
        kind=kind,
        seq=seq,
        t=t,
        body=body,
        session_id=session_id if isinstance(session_id, str) else None,
        replay=bool(h.get("replay", False)),
    )


def _steady_frame(topic: bytes, raw_header: bytes, payload: bytes | memoryview) -> Frame | None:
    """The frame of a stream whose layout is known, or None to let the full decoder judge the message.

    msgspec checks the header's types and ranges (:func:`daq.bus.header_json.frame_head`); the stream's
    dtype, channels and units are compared with the layout the full decoder validated; the payload size,
    topic and timestamps are checked here. It accepts nothing the full decoder refuses and builds the
    same frame: a header it does not take (the first of a stream, an event, anything unusual or wrong)
    goes the full way, which names what is wrong.
    """
    h = header_json.frame_head(raw_header)
    if h is None:
        return None
    n, n_ch = h.shape
    channels, units = h.channels, h.units
    layout = _LAYOUTS.get(h.stream)
    if (
        layout is None
        or layout.dtype_name != h.dtype
        or len(layout.channels) != n_ch
        or layout.channels != channels
        or layout.units != units
    ):
        return None
    has_ts, dt, t0 = h.timestamps, h.dt, h.t0
    if has_ts:
        dt = None
    elif dt is None or not math.isfinite(dt):
        return None
    dtype = layout.dtype
    n_data = n * n_ch * dtype.itemsize
    expected = n_data + 8 * n if has_ts else n_data
    if len(payload) != expected or expected > MAX_PAYLOAD_BYTES or not math.isfinite(t0):
        return None
    if topic != layout.topic and bytes(topic) != layout.topic:
        return None
    data = np.ndarray((n, n_ch), dtype, payload)  # a view, read-only if the payload is
    timestamps = None
    if has_ts:
        timestamps = np.ndarray((n,), _F8, payload, n_data)
        if not _all_finite(timestamps):
            return None
    return Frame(h.stream, h.seq, t0, dt, channels, units, data, timestamps, h.session_id, h.replay)


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
    if type(raw_header) is bytes and len(raw_header) <= MAX_HEADER_BYTES:
        frame = _steady_frame(topic, raw_header, payload)
        if frame is not None:
            return frame
    h = parse_header(raw_header)
    kind = h.get("type")
    msg: Message
    if kind == "frame":
        msg, expected_topic = _frame_and_topic(h, payload)
        if topic != expected_topic and bytes(topic) != expected_topic:
            raise FrameError("topic", f"topic {bytes(topic)[:80]!r} does not match the header")
        return msg
    if kind == "event":
        if len(payload):
            raise FrameError("size", f"event with a {len(payload)}-byte payload")
        msg = event_from_header(h)
    else:
        raise FrameError("header", f"unknown message type {kind!r}")
    if bytes(topic) != topic_of(msg):
        raise FrameError("topic", f"topic {bytes(topic)[:80]!r} does not match the header")
    return msg
