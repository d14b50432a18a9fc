"""Property-based fuzzing of bus messages: decode, the subscriber and the recorder never crash.

Every input either decodes to a message that the store can commit, or raises FrameError with a
known kind; fed over real sockets into a BusSubscriber + Recorder + SessionStore, malformed
messages are counted per kind and dropped while the valid ones around them are committed.
Hypothesis runs derandomized with bounded example counts (reproducible, a few seconds).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import zmq
import zmq.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daq.bus.frames import (
    ERROR_KINDS,
    MAX_HEADER_BYTES,
    Event,
    Frame,
    FrameError,
    decode,
    encode,
)
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.run.recorder import Recorder
from daq.store.read_write import SessionStore

FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ----------------------------------------------------------------------------- strategies

#: Text including lone UTF-16 surrogates (which Python strings can hold but UTF-8 cannot).
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.one_of(
    st.text(max_size=12),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), surrogates, st.text(max_size=5)),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63 - 1, 2**63, -1, 10**400, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=8,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def base_messages() -> list[list[bytes]]:
    rng = np.random.default_rng(7)
    frames = [
        Frame("f.dt", 3, 10.0, 1e-3, ["a", "b"], ["m", "N"], rng.standard_normal((5, 2))),
        Frame(
            "f.ts",
            0,
            10.0,
            None,
            ["x"],
            ["Pa"],
            rng.integers(0, 100, (4, 1)).astype("int16"),
            timestamps=10.0 + np.arange(4) * 0.01,
        ),
        Frame("f.dt", 4, 10.005, 1e-3, ["a", "b"], ["m", "N"], np.zeros((0, 2))),
    ]
    events = [Event("e.plan", "step", 2, 11.0, {"index": 1, "q": [1.0, 2.0]}, session_id="s1")]
    return [[bytes(p) for p in encode(m)] for m in [*frames, *events]]


BASES = base_messages()
HEADER_KEYS = sorted({k for parts in BASES for k in json.loads(parts[1])}) + ["extra"]


@st.composite
def malformed_candidates(draw) -> list[bytes]:
    """A valid message with its header, topic or payload changed in one or more ways."""
    topic, raw, payload = draw(st.sampled_from(BASES))
    header = json.loads(raw)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(HEADER_KEYS))
        action = draw(st.sampled_from(["set", "set", "delete", "nest", "name"]))
        if action == "name":  # a name field with other text (lone surrogates included)
            key = draw(st.sampled_from(["stream", "kind", "session_id", "channels", "units"]))
            if isinstance(header.get(key), list):
                header[key] = [draw(texts) for _ in header[key]]
            else:
                header[key] = draw(texts)
        elif action == "delete":
            header.pop(key, None)
        elif action == "nest":
            header[key] = json.loads(nested(draw(st.integers(1, 900))))
        else:
            header[key] = draw(json_values)
    text = json.dumps(header, ensure_ascii=True, allow_nan=True)
    if draw(st.booleans()):  # deep nesting the stdlib parser would recurse into
        text = text[:-1] + ',"deep":' + nested(draw(st.sampled_from([100, 1000, 5000, 100_000]))) + "}"
    raw = text.encode()
    if draw(st.integers(0, 9)) == 0:  # byte-level damage
        pos = draw(st.integers(0, len(raw)))
        raw = raw[:pos] + draw(st.binary(max_size=4)) + raw[pos + 1 :]
    stream = header.get("stream")
    topic_choice = draw(st.integers(0, 3))
    if topic_choice == 0 and isinstance(stream, str):  # a topic that matches the (bad) stream
        prefix = "event/" if header.get("type") == "event" else "data/"
        topic = (prefix + stream).encode("utf-8", "surrogatepass")
    elif topic_choice == 1:
        topic = draw(st.binary(max_size=16))
    payload_choice = draw(st.integers(0, 4))
    if payload_choice == 0:
        payload = payload[: draw(st.integers(0, len(payload)))]
    elif payload_choice == 1:
        payload = payload + draw(st.binary(min_size=1, max_size=16))
    elif payload_choice == 2:  # non-finite timestamps or any other bytes of the right size
        payload = np.full(len(payload) // 8, draw(st.sampled_from([np.nan, np.inf, -np.inf]))).tobytes()
    return [topic, raw, payload]


any_parts = st.lists(st.binary(max_size=64), max_size=5)


# ----------------------------------------------------------------------------- decode


def check_decode(parts: list, store: SessionStore | None = None) -> str:
    """decode() returns a message the store can commit, or raises FrameError of a known kind."""
    try:
        msg = decode(parts)
    except FrameError as exc:
        assert exc.kind in ERROR_KINDS, exc
        return exc.kind
    again = decode(encode(msg))  # what was accepted can be sent on unchanged
    assert (again.stream, again.seq, type(again)) == (msg.stream, msg.seq, type(msg))
    if store is not None:
        sid = store.create_session("fuzz", {})
        store.append(sid, msg)
        store.flush()  # the commit is where seq >= 2**63, NaN times or surrogates used to fail
    return "ok"


@settings(FUZZ, max_examples=300)
@given(any_parts)
def test_decode_of_arbitrary_bytes_never_crashes(parts):
    check_decode(parts)


def test_decode_of_mutated_headers_never_crashes_and_accepted_ones_commit(tmp_path):
    store = SessionStore(tmp_path / "fuzz.sqlite")
    outcomes: dict[str, int] = {}

    @settings(FUZZ, max_examples=250)
    @given(malformed_candidates())
    def run(parts):
        kind = check_decode(parts, store)
        outcomes[kind] = outcomes.get(kind, 0) + 1

    try:
        run()
    finally:
        store.close()
    # the fuzzer reached many kinds of refusal and still produced messages that decode (which kinds
    # exactly depends on Hypothesis' generation; each kind has a deterministic test below)
    assert len(set(outcomes) - {"ok"}) >= 5 and outcomes.get("ok", 0) > 0, outcomes


@pytest.mark.parametrize(
    "change, kind",
    [
        ({"stream": "\ud800"}, "text"),
        ({"channels": ["a", "\udfff"]}, "text"),
        ({"units": ["m\ud83d", "N"]}, "text"),
        ({"session_id": "\ud800"}, "text"),
        ({"seq": -1}, "range"),
        ({"seq": 2**63}, None),  # read as an int ("range"); a parser may read it as a float ("header")
        ({"t0": float("nan")}, "range"),
        ({"t0": 10**400}, "range"),
        ({"dt": float("inf")}, "range"),
        ({"deep": []}, "nesting"),  # replaced below by 100,000 levels: too deep for the JSON parsers
    ],
)
def test_each_known_crash_is_a_counted_kind(change, kind):
    topic, raw, payload = BASES[0]
    header = {**json.loads(raw), **change}
    text = json.dumps(header, ensure_ascii=True, allow_nan=True)
    if "deep" in change:
        text = text.replace('"deep": []', '"deep": ' + nested(100_000))
    with pytest.raises(FrameError) as info:
        decode([topic, text.encode(), payload])
    assert info.value.kind in ({kind} if kind else {"header", "range"})


def test_event_edge_cases():
    topic, raw, _ = BASES[3]
    h = json.loads(raw)
    cases = {
        "nesting": {**h, "body": {"a": json.loads(nested(200))}},
        "text": {**h, "body": {"\ud800": 1}},
        "range": {**h, "t": float("-inf")},
        "header": {**h, "kind": ""},
    }
    for kind, header in cases.items():
        with pytest.raises(FrameError) as info:
            decode([topic, json.dumps(header, allow_nan=True).encode(), b""])
        assert info.value.kind == kind
    oversized = {**h, "body": {"x": "a" * MAX_HEADER_BYTES}}
    with pytest.raises(FrameError) as info:
        decode([topic, json.dumps(oversized).encode(), b""])
    assert info.value.kind == "oversized"


def test_encode_refuses_what_decode_refuses():
    good = Frame("s", 0, 0.0, 0.1, ["a"], ["m"], np.zeros((2, 1)))
    for bad, kind in [
        (Frame("s\ud800", 0, 0.0, 0.1, ["a"], ["m"], np.zeros((2, 1))), "text"),
        (Frame("s", 0, 0.0, 0.1, ["\ud800"], ["m"], np.zeros((2, 1))), "text"),
        (Frame("s", 2**63, 0.0, 0.1, ["a"], ["m"], np.zeros((2, 1))), "range"),
        (Frame("s", -1, 0.0, 0.1, ["a"], ["m"], np.zeros((2, 1))), "range"),
        (Frame("s", 0, float("nan"), 0.1, ["a"], ["m"], np.zeros((2, 1))), "range"),
        (Frame("s", 0, 0.0, None, ["a"], ["m"], np.zeros((2, 1)), np.array([0.0, np.inf])), "range"),
        (Event("s", "k", 0, float("nan"), {}), "range"),
        (Event("s", "k", 2**63, 0.0, {}), "range"),
        (Event("s", "k", 0, 0.0, {"x": json.loads(nested(100))}), "nesting"),
    ]:
        encode(good)  # the stream's cached layout must not let the bad one through
        with pytest.raises(FrameError) as info:
            encode(bad)
        assert info.value.kind == kind, bad


# ----------------------------------------------------------------------------- subscriber + recorder


async def _record_through_sockets(tmp_path, batch: list[list[bytes]]):
    """Send ``batch`` from a raw XPUB into BusSubscriber -> Recorder -> SessionStore."""
    store = SessionStore(tmp_path / "rec.sqlite")
    sid = store.create_session("fuzz", {})
    raw = zmq.asyncio.Context.instance().socket(zmq.XPUB)
    raw.setsockopt(zmq.LINGER, 0)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    sub = BusSubscriber(f"tcp://127.0.0.1:{port}")
    rec = Recorder(store, sid, sub, flush_interval=0.05)
    try:
        await asyncio.wait_for(raw.recv(), 5)  # the subscription
        rec.start()
        for parts in batch:
            await raw.send_multipart(parts)
        async with asyncio.timeout(30):
            while sub.stats.received + sub.stats.n_malformed < len(batch):
                assert rec.running, rec.error
                await asyncio.sleep(0.01)
        await rec.stop()
        committed = sum(1 for _ in store.messages(sid))
        return rec, sub.stats, committed
    finally:
        raw.close(linger=0)
        sub.close()
        store.close()


def test_recorder_survives_fuzzed_batches(tmp_path):
    good = BASES[1]  # a valid frame sent between the fuzzed ones (its seq stays 0: no gap logic)

    @settings(FUZZ, max_examples=12)
    @given(st.lists(st.one_of(malformed_candidates(), any_parts), min_size=5, max_size=25))
    def run(batch):
        batch = [p for parts in batch for p in (parts, good)]
        batch = [parts for parts in batch if len(parts) >= 1]  # zmq sends no empty multipart
        expected_kinds: dict[str, int] = {}
        n_ok = 0
        for parts in batch:
            try:
                decode(parts)
                n_ok += 1
            except FrameError as exc:
                expected_kinds[exc.kind] = expected_kinds.get(exc.kind, 0) + 1
        for f in tmp_path.glob("rec.sqlite*"):
            f.unlink()
        rec, stats, committed = asyncio.run(_record_through_sockets(tmp_path, batch))
        assert rec.error is None
        assert stats.malformed == expected_kinds and "unexpected" not in stats.malformed
        assert rec.recorded + rec.rejected == n_ok == stats.received
        assert committed == rec.recorded > 0

    run()


def frame(pub: BusPublisher, data: np.ndarray) -> Frame:
    seq = pub.next_seq("f.dt")
    return Frame("f.dt", seq, 1.0 + seq * 0.005, 1e-3, ["a", "b"], ["m", "N"], data)


async def test_every_malformed_kind_through_a_real_publisher_into_a_real_recorder(tmp_path):
    """One or more messages of every kind, interleaved with valid frames, sent by a BusPublisher."""
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("fuzz", {})
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    rec = Recorder(store, sid, sub, flush_interval=0.05)
    topic, raw, payload = BASES[0]
    h = json.loads(raw)

    def header(**change) -> bytes:
        return json.dumps({**h, **change}, ensure_ascii=True, allow_nan=True).encode()

    bad = {
        "parts": [[topic, raw]],
        "topic": [[b"data/elsewhere", raw, payload]],
        "json": [[topic, b"{oops", payload], [topic, b"\xff\xfe", payload]],
        "nesting": [[topic, header()[:-1] + b',"d":' + nested(100_000).encode() + b"}", payload]],
        "schema": [[topic, header(v=2), payload]],
        "header": [[topic, header(seq="1"), payload], [topic, header(type="blob"), payload]],
        "text": [
            [b"data/\xed\xa0\x80", header(stream="\ud800"), payload],
            [topic, header(channels=["a", "\ud800"]), payload],
        ],
        "range": [
            [topic, header(seq=-5), payload],
            [topic, header(t0=float("nan")), payload],
            [topic, header(t0=10**400), payload],
            [topic, header(dt=float("inf")), payload],
        ],
        "dtype": [[topic, header(dtype="float16"), payload]],
        "size": [[topic, raw, payload + b"\0"]],
        "oversized": [[topic, b" " * (MAX_HEADER_BYTES + 1), payload]],
    }
    assert set(bad) == set(ERROR_KINDS)
    rng = np.random.default_rng(3)
    sent: list[np.ndarray] = []
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        rec.start()
        for messages in bad.values():
            for parts in messages:
                data = rng.standard_normal((5, 2))
                sent.append(data)
                await pub.publish(frame(pub, data))
                await pub.send_parts(parts)
        data = rng.standard_normal((5, 2))
        sent.append(data)
        await pub.publish(frame(pub, data))
        async with asyncio.timeout(30):
            while rec.recorded < len(sent):
                assert rec.running, rec.error
                await asyncio.sleep(0.01)
        assert rec.running  # still recording after all of it
        await rec.stop()
    finally:
        pub.close()
        sub.close()
    assert rec.error is None and rec.rejected == 0
    assert sub.stats.malformed == {kind: len(msgs) for kind, msgs in bad.items()}
    assert sub.stats.missing == 0
    stored = store.read_stream(sid, "f.dt")
    np.testing.assert_array_equal(stored.data, np.concatenate(sent))
    store.close()
