"""Frame/event encoding: round trips for every dtype, and each kind of malformed input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daq.bus.frames import SCHEMA_VERSION, SUPPORTED_DTYPES, Event, Frame, FrameError, decode, encode


def make_data(dtype: str, rng: np.random.Generator, n: int = 7, n_ch: int = 3) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=(n, n_ch)).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=(n, n_ch), dtype=dtype, endpoint=True)
    return rng.standard_normal((n, n_ch)).astype(dtype)


@pytest.mark.parametrize("dtype", list(SUPPORTED_DTYPES))
@pytest.mark.parametrize("with_ts", [False, True])
def test_frame_round_trip_every_dtype(dtype, with_ts, rng):
    data = make_data(dtype, rng)
    ts = np.cumsum(rng.uniform(0.001, 0.002, size=7)) if with_ts else None
    f = Frame(
        "rig.s",
        41,
        12.5,
        None if with_ts else 0.001,
        ["a", "b", "c"],
        ["m", "N", "1"],
        data,
        timestamps=ts,
        session_id="abc",
        replay=True,
    )
    parts = encode(f)
    assert parts[0] == b"data/rig.s"
    header = json.loads(parts[1])
    assert header["v"] == SCHEMA_VERSION and header["dtype"] == dtype and header["shape"] == [7, 3]
    g = decode([bytes(p) for p in parts])
    assert isinstance(g, Frame)
    assert g.data.dtype == np.dtype(dtype) and g.data.shape == (7, 3)
    assert g.data.tobytes() == data.tobytes()
    assert (g.stream, g.seq, g.t0, g.channels, g.units, g.session_id, g.replay) == (
        "rig.s",
        41,
        12.5,
        ["a", "b", "c"],
        ["m", "N", "1"],
        "abc",
        True,
    )
    if with_ts:
        assert g.dt is None and np.array_equal(g.timestamps, ts)
    else:
        assert g.dt == 0.001 and g.timestamps is None
        np.testing.assert_allclose(g.time(), 12.5 + 0.001 * np.arange(7))


def test_big_endian_and_non_contiguous_input_is_sent_little_endian(rng):
    base = rng.standard_normal((10, 4))
    f = Frame("s", 0, 0.0, 0.1, list("ab"), ["m", "m"], base.astype(">f8")[::2, 1:3])
    g = decode(encode(f))
    np.testing.assert_array_equal(g.data, base[::2, 1:3])
    assert encode(f)[2] == np.ascontiguousarray(base[::2, 1:3]).astype("<f8").tobytes()


def test_event_round_trip():
    e = Event(
        "press.plan",
        "setpoint_reached",
        3,
        100.25,
        {"q_desired": 200.0, "q_actual": np.float64(199.5), "z": np.array([1e-3, 2e-3])},
    )
    parts = encode(e)
    assert parts[0] == b"event/press.plan" and parts[2] == b""
    g = decode(parts)
    assert isinstance(g, Event)
    assert (g.kind, g.seq, g.t) == ("setpoint_reached", 3, 100.25)
    assert g.body == {"q_desired": 200.0, "q_actual": 199.5, "z": [1e-3, 2e-3]}


def good_parts() -> list[bytes]:
    return [bytes(p) for p in encode(Frame("s", 0, 0.0, 0.5, ["a", "b"], ["m", "N"], np.zeros((4, 2))))]


def with_header(**changes) -> list[bytes]:
    topic, header, payload = good_parts()
    h = json.loads(header)
    h.update(changes)
    return [topic, json.dumps(h).encode(), payload]


@pytest.mark.parametrize(
    "parts, kind",
    [
        (good_parts()[:2], "parts"),
        ([b"data/other", *good_parts()[1:]], "topic"),
        ([b"data/s", b"{not json", good_parts()[2]], "json"),
        ([b"data/s", b"\xff\xfe", good_parts()[2]], "json"),
        ([b"data/s", b"[1, 2]", good_parts()[2]], "json"),
        (with_header(v=99), "schema"),
        (with_header(v=None), "schema"),
        (with_header(seq="7"), "header"),
        (with_header(channels=["a"]), "header"),
        (with_header(type="blob"), "header"),
        (with_header(dtype="object"), "dtype"),
        (with_header(dtype="complex128"), "dtype"),
        (with_header(dtype=["float64"]), "dtype"),
        (with_header(shape=[5, 2]), "size"),
        (with_header(shape=[4]), "size"),
        ([*good_parts()[:2], good_parts()[2][:-1]], "size"),
        (with_header(shape=[10**9, 2], channels=["a", "b"]), "oversized"),
    ],
)
def test_malformed_input_raises_frame_error_of_its_kind(parts, kind):
    with pytest.raises(FrameError) as info:
        decode(parts)
    assert info.value.kind == kind


def test_a_stream_whose_layout_changes_is_validated_again():
    """Decoding caches a stream's validated dtype/channels/units; a change must not slip through."""
    decode(good_parts())
    for parts, kind in [
        (with_header(channels=["a", 1]), "header"),
        (with_header(units=["m"]), "header"),
        (with_header(dtype="float16"), "dtype"),
        (with_header(shape=[4, 3]), "header"),  # 3 columns, 2 channel names
        (with_header(stream="other"), "topic"),
    ]:
        with pytest.raises(FrameError) as info:
            decode(parts)
        assert info.value.kind == kind
    assert decode(good_parts()).channels == ["a", "b"]


def test_encode_notices_changed_channels_of_a_stream():
    f = Frame("s", 0, 0.0, 0.5, ["a", "b"], ["m", "N"], np.zeros((4, 2)), session_id="s\u00e9")
    assert decode(encode(f)).session_id == "s\u00e9"
    f.channels[1] = "c"
    assert decode(encode(f)).channels == ["a", "c"]
    f.units = ["m"]
    with pytest.raises(FrameError):
        encode(f)


def test_oversized_payload_is_refused_before_parsing():
    with pytest.raises(FrameError) as info:
        decode([b"data/s", b"garbage", b"\0" * 2000], max_payload=1000)
    assert info.value.kind == "oversized"


@pytest.mark.parametrize(
    "frame",
    [
        Frame("s", 0, 0.0, 0.1, ["a"], ["m"], np.zeros(3)),  # 1-D data
        Frame("s", 0, 0.0, 0.1, ["a", "b"], ["m"], np.zeros((3, 2))),  # units missing
        Frame("s", 0, 0.0, None, ["a"], ["m"], np.zeros((3, 1))),  # no time base
        Frame("s", 0, 0.0, 0.1, ["a"], ["m"], np.zeros((3, 1), dtype=complex)),  # unsupported dtype
        Frame("", 0, 0.0, 0.1, ["a"], ["m"], np.zeros((3, 1))),  # empty stream
    ],
)
def test_encode_refuses_invalid_frames(frame):
    with pytest.raises(FrameError):
        encode(frame)
