"""The per-stream shortcuts of the frame codec (issue 23) change speed, never results.

* Encoding remembers a stream's header text after t0 (time base, shape, session, replay flag, layout);
  every change of those must show in the next header, and the bytes stay the wire format of before.
* Decoding takes a steady stream's header through a typed msgspec decode; it must accept nothing the
  full decoder refuses and build the same frame - checked against the full decoder on mutated headers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daq.bus import frames
from daq.bus.frames import Frame, FrameError, decode, encode, frame_header

FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.too_slow],
)


def header_of(frame: Frame) -> dict:
    """The header as the stdlib parses it (the independent reference)."""
    return json.loads(encode(frame)[1])


def expected_header(frame: Frame) -> dict:
    """What the header must say, from the frame's fields through the uncached validating path."""
    return json.loads(json.dumps(frame_header(frame)))


# ----------------------------------------------------------------------------- encode


def test_wire_bytes_are_those_of_the_format_before_the_cache():
    """Byte for byte what the encoder wrote before issue 23 (taken from that code)."""
    f = Frame("rig.s\u00e9", 7, 1.5e-05, 0.001, ["x", "F\u00b5"], ["m", "N"], np.zeros((3, 2)),
              session_id="s\u00e9", replay=True)
    assert encode(f)[1] == (
        b'{"v":1,"type":"frame","seq":7,"t0":1.5e-05,"dt":0.001,"timestamps":false,"shape":[3,2],'
        b'"session_id":"s\xc3\xa9","replay":true,"stream":"rig.s\\u00e9","channels":["x","F\\u00b5"],'
        b'"units":["m","N"],"dtype":"float64"}'
    )
    g = Frame("rig.t", 2**63 - 1, -3.0, None, ["a"], ["1"], np.zeros((2, 1), dtype="<i4"),
              timestamps=np.array([0.5, 1e20]))
    assert encode(g)[1] == (
        b'{"v":1,"type":"frame","seq":9223372036854775807,"t0":-3.0,"dt":null,"timestamps":true,'
        b'"shape":[2,1],"session_id":null,"replay":false,"stream":"rig.t","channels":["a"],"units":["1"],'
        b'"dtype":"int32"}'
    )


def test_every_change_of_a_steady_stream_shows_in_its_next_header():
    rng = np.random.default_rng(23)
    f = Frame("cache.s", 0, 0.0, 0.001, ["a", "b"], ["m", "N"], rng.standard_normal((4, 2)))
    changes = [
        lambda: setattr(f, "seq", 1),
        lambda: setattr(f, "t0", 0.004),
        lambda: setattr(f, "dt", 0.002),
        lambda: setattr(f, "data", rng.standard_normal((9, 2))),  # shape
        lambda: setattr(f, "session_id", "run-1"),
        lambda: setattr(f, "replay", True),
        lambda: setattr(f, "timestamps", np.arange(9) * 0.5),
        lambda: setattr(f, "timestamps", None),
        lambda: setattr(f, "dt", 1),  # an int: written as 1.0, like every dt
        lambda: setattr(f, "session_id", None),
        lambda: setattr(f, "replay", False),
    ]
    for change in changes:
        change()
        assert header_of(f) == expected_header(f)
        assert header_of(f) == expected_header(f)  # the second time from the cache
    assert header_of(f)["dt"] == 1.0 and header_of(f)["shape"] == [9, 2]


def test_equal_values_that_write_differently_are_not_mixed_up():
    """1 == True and a 0-d array changes in place: neither may reuse the remembered text."""
    f = Frame("cache.eq", 0, 0.0, 0.5, ["a"], ["m"], np.zeros((2, 1)), session_id=1)  # type: ignore[arg-type]
    assert header_of(f)["session_id"] == "1"
    f.session_id = True  # type: ignore[assignment]
    assert header_of(f)["session_id"] == "True"
    f.session_id = None
    f.dt = np.array(0.5)  # type: ignore[assignment]
    assert header_of(f)["dt"] == 0.5
    f.dt[()] = 0.25  # type: ignore[index]
    assert header_of(f)["dt"] == 0.25


def test_a_cached_stream_still_refuses_what_it_refused_before():
    f = Frame("cache.bad", 0, 0.0, 0.5, ["a"], ["m"], np.zeros((2, 1)))
    encode(f)
    for field, value, kind in [
        ("dt", float("nan"), "header"),
        ("dt", -1.0, "header"),
        ("t0", float("inf"), "range"),
        ("seq", 2**63, "range"),
        ("session_id", "\ud800", "text"),
    ]:
        good = getattr(f, field)
        setattr(f, field, value)
        with pytest.raises(FrameError) as info:
            encode(f)
        assert info.value.kind == kind, field
        setattr(f, field, good)
        encode(f)


# ----------------------------------------------------------------------------- decode


def steady_base() -> list[list[bytes]]:
    rng = np.random.default_rng(5)
    msgs = [
        Frame("st.dt", 3, 10.0, 1e-3, ["a", "b"], ["m", "N"], rng.standard_normal((5, 2)), session_id="s"),
        Frame("st.ts", 0, 10.0, None, ["x"], ["Pa"], rng.integers(0, 99, (4, 1)).astype("int16"),
              timestamps=10.0 + np.arange(4) * 0.01, replay=True),
    ]
    return [[bytes(p) for p in encode(m)] for m in msgs]


BASE = steady_base()
FIELDS = ["v", "type", "stream", "seq", "t0", "dt", "timestamps", "shape", "channels", "units", "dtype",
          "session_id", "replay", "extra"]
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**64),
    st.sampled_from([0, 1, 2, 4, 5, 2**63 - 1, 2**63, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["frame", "event", "st.dt", "st.ts", "m", "\ud800"]),
    st.sampled_from(["float64", "int64", "int16", "uint16"]),
    st.lists(st.sampled_from([0, 2, 4, 5, "a", "b", "m", "N", "x", "Pa", 1.5, None]), max_size=3),
)


@st.composite
def mutated(draw) -> list[bytes]:
    """A steady stream's message with one to three header fields set, deleted or duplicated."""
    topic, raw, payload = draw(st.sampled_from(BASE))
    header = json.loads(raw)
    text = None
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(FIELDS))
        action = draw(st.sampled_from(["set", "set", "set", "delete", "duplicate"]))
        if action == "delete":
            header.pop(key, None)
        elif action == "set":
            header[key] = draw(values)
        else:  # the key twice: JSON parsers keep the last one
            text = json.dumps(header)[:-1] + f', "{key}": ' + json.dumps(draw(values), allow_nan=True) + "}"
    raw = (text or json.dumps(header, allow_nan=True)).encode()
    if draw(st.integers(0, 5)) == 0:
        payload = payload[: draw(st.integers(0, len(payload)))]
    if draw(st.integers(0, 5)) == 0:  # the last 8 bytes (a timestamp of "st.ts") not finite
        payload = payload[:-8] + np.array([draw(st.sampled_from([np.nan, np.inf, 1.0]))]).tobytes()
    if draw(st.integers(0, 5)) == 0:
        topic = draw(st.sampled_from([b"data/st.dt", b"data/st.ts", b"data/other", b"event/st.dt"]))
    return [topic, raw, payload]


def full_decode(parts: list[bytes]) -> frames.Message | FrameError:
    """decode() without the steady shortcut."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frames, "_steady_frame", lambda *args: None)
        try:
            return decode(parts)
        except FrameError as exc:
            return exc


def same_frame(a: Frame, b: Frame) -> bool:
    fields = ("stream", "seq", "t0", "dt", "channels", "units", "session_id", "replay")
    if any(getattr(a, k) != getattr(b, k) or type(getattr(a, k)) is not type(getattr(b, k)) for k in fields):
        return False
    if a.data.dtype != b.data.dtype or a.data.shape != b.data.shape or a.data.tobytes() != b.data.tobytes():
        return False
    if (a.timestamps is None) != (b.timestamps is None):
        return False
    return a.timestamps is None or a.timestamps.tobytes() == b.timestamps.tobytes()


def test_the_shortcut_takes_steady_streams_and_leaves_the_first_frame_to_the_full_decoder():
    frames._LAYOUTS.clear()
    topic, raw, payload = BASE[0]
    assert frames._steady_frame(topic, raw, payload) is None  # no layout validated yet
    first = decode(BASE[0])
    second = frames._steady_frame(topic, raw, payload)
    assert second is not None and same_frame(first, second)
    assert frames._steady_frame(b"event/st.dt", raw, payload) is None  # wrong topic: the full way


@FUZZ
@given(mutated())
def test_the_shortcut_accepts_nothing_the_full_decoder_refuses_and_builds_the_same_frame(parts):
    for base in BASE:
        decode(base)  # both streams' layouts known
    full = full_decode(parts)
    quick = frames._steady_frame(*parts)
    if quick is not None:
        assert isinstance(full, Frame), f"shortcut accepted what the full decoder refuses: {full}"
        assert same_frame(quick, full)
    got = decode(parts) if isinstance(full, Frame) else None
    if isinstance(full, FrameError):
        with pytest.raises(FrameError) as info:
            decode(parts)
        assert info.value.kind == full.kind  # the same error, named by the full decoder
    else:
        assert isinstance(got, Frame) and same_frame(got, full)


def test_steady_headers_take_the_shortcut_and_layout_changes_do_not():
    """The property above is not vacuous: new seq and t0 values go the short way, a new layout does not."""
    for base in BASE:
        decode(base)
    rng = np.random.default_rng(11)
    taken = left = 0
    for i in range(60):
        topic, raw, payload = BASE[i % 2]
        header = json.loads(raw)
        header["seq"] = int(rng.integers(0, 2**62))
        header["t0"] = float(rng.uniform(-1e3, 1e3))
        if i % 3 == 0:
            header["units"] = ["m"] * (len(header["units"]) + 1)  # a layout change: the full way
        quick = frames._steady_frame(topic, json.dumps(header).encode(), payload)
        assert (quick is None) == (i % 3 == 0)
        if quick is not None:
            assert (quick.seq, quick.t0) == (header["seq"], header["t0"])
        taken += quick is not None
        left += quick is None
    assert (taken, left) == (40, 20)


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"dtype": "int64"}, lambda f: f.data.dtype == np.dtype("int64")),  # same item size, other type
        ({"channels": ["a", "c"]}, lambda f: f.channels == ["a", "c"]),
        ({"units": ["m", "Pa"]}, lambda f: f.units == ["m", "Pa"]),
        ({"dt": None, "timestamps": True}, None),  # no timestamps in the payload: refused
    ],
)
def test_a_layout_change_of_a_steady_stream_is_decoded_by_its_new_layout(change, check):
    decode(BASE[0])
    topic, raw, payload = BASE[0]
    parts = [topic, json.dumps({**json.loads(raw), **change}).encode(), payload]
    assert frames._steady_frame(*parts) is None or check is not None
    if check is None:
        with pytest.raises(FrameError):
            decode(parts)
    else:
        assert check(decode(parts))
    decode(BASE[0])  # and back
