"""The project's one JSON module (msgspec) writes byte for byte what the stdlib ``json`` module wrote and
reads what it read; the stdlib is the independent reference here."""

from __future__ import annotations

import datetime
import enum
import json
import math

import numpy as np
import pytest

from daq import json_codec
from daq.errors import ProtocolError


class _Text(str):
    pass


class _Level(enum.IntEnum):
    HIGH = 3


class _Mode(enum.StrEnum):
    AUTO = "auto"


VALUES = [
    {"a": [1, 2, {"b": [], "c": {}}], "d": None, "e": True, "f": False, "g": [[[[]]]], "h": [{}]},
    [0.1, 1e300, -0.0, 0.0, 1e-7, 5e-324, 1e16, 1.5e16, 123456789.123, 0.1 + 0.2, 1.7976931348623157e308],
    [2**70, -(2**64), 2**63, -1, 0, 12345678901234567890123456789],
    "Prüfstand µ ✓ 𝄞 \x7f \x00 \x1f \u2028 \n\t\b\f\r \" \\ /",
    {"ключ": "значение", "𝄞": ["é"]},
    {7: "int key", 2.5: "float key", None: "null key", True: "t", False: "f", -1e-7: "small", 2**70: "big"},
    {_Text("sub"): _Text("class"), _Level.HIGH: _Level.HIGH, _Mode.AUTO: _Mode.AUTO},
    [float("nan"), float("inf"), -float("inf"), {"x": float("nan")}, {float("inf"): 1}],
    (1, (2, [3, (4,)])),
    ["NaN", "Infinity", "-Infinity", {"NaN": "x, y: z"}, "a,\nb", ", ", ": "],
    [np.float64(0.1), np.float64("nan"), np.float64(-0.0)],  # float subclasses: written as floats
    "lone \ud800 surrogate",
    {"key \udc00": ["\ud83d", "ok \u00e9"]},
    [], {}, "", 0, None, 1e-300,
]
OPTIONS = [{}, {"indent": 2}, {"indent": 4}, {"indent": 0}]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("options", OPTIONS, ids=["default", "indent2", "indent4", "indent0"])
def test_output_equals_the_stdlib(value, options):
    assert json_codec.dumps(value, **options) == json.dumps(value, **options)
    assert json_codec.encode(value, **options) == json.dumps(value, **options).encode()


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_compact_output_equals_the_stdlib(value):
    assert json_codec.dumps(value, compact=True) == json.dumps(value, separators=(",", ":"))


def test_random_floats_are_written_as_python_writes_them(rng):
    values = list(rng.standard_normal(200) * 10.0 ** rng.integers(-300, 300, 200))
    values += list(rng.uniform(-1e6, 1e6, 200).astype(np.float32).astype(float))
    assert json_codec.dumps(values) == json.dumps(values)
    assert json_codec.loads(json.dumps(values)) == values


def test_default_sees_what_json_cannot_take_as_the_stdlib_does():
    value = {"f32": np.float32(0.1), "i64": np.int64(5), "b": np.bool_(True),
             "date": datetime.date(2026, 1, 2), "arr": np.arange(3), "set": {1}}
    for options in ({"default": str}, {"default": str, "indent": 2}):
        assert json_codec.dumps(value, **options) == json.dumps(value, **options)
    with pytest.raises(TypeError):
        json_codec.dumps({"x": object()})
    with pytest.raises(TypeError):
        json_codec.dumps({(1, 2): 0})


def test_numpy_default_turns_numpy_values_into_python_ones():
    value = {"f32": np.float32(2.5), "i64": np.int64(-7), "arr": np.array([[1.0, float("nan")]]),
             "b": np.bool_(0)}
    out = json_codec.dumps(value, default=json_codec.numpy_default)
    assert out == json.dumps({"f32": 2.5, "i64": -7, "arr": [[1.0, float("nan")]], "b": False})
    with pytest.raises(TypeError, match="not JSON serialisable"):
        json_codec.dumps({"x": object()}, default=json_codec.numpy_default)


def test_non_finite_values_are_refused_or_null_for_strict_parsers():
    with pytest.raises(ValueError):
        json_codec.dumps([float("nan")], allow_nan=False)
    with pytest.raises(ValueError):
        json_codec.dumps({float("inf"): 1}, allow_nan=False)
    body = {"nan": float("nan"), "inf": [np.float32("inf"), -math.inf], "arr": np.array([1.0, np.nan]),
            "np": np.float64(0.25), "i": np.int32(3), "date": datetime.date(2026, 1, 2)}
    out = json_codec.dumps_strict(body, default=str)
    assert out == ('{"nan": null, "inf": [null, null], "arr": [1.0, null], "np": 0.25, "i": 3, '
                   '"date": "2026-01-02"}')
    json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    assert json_codec.dumps_strict(body, indent=2, default=str) == json.dumps(json.loads(out), indent=2)


def test_reading_equals_the_stdlib():
    texts = [json.dumps(v) for v in VALUES] + [
        "[NaN, Infinity, -Infinity]", "1e999", '{"a": -1e999}', '"\\ud800"', '{"a": 1, "a": 2}',
        "  [1.0, 1E5, 1e-7, 12345678901234567890123456789]\n", '"\\u00e9\\ud834\\udd1e"',
    ]
    for text in texts:
        expected = json.loads(text)
        assert repr(json_codec.loads(text)) == repr(expected), text
        assert repr(json_codec.loads(text.encode("utf-8", "surrogatepass"))) == repr(expected), text
    raw_surrogates = '["\ud800", {"k\udc00": NaN}]'  # in a str, not escaped: json.loads takes them
    assert repr(json_codec.loads(raw_surrogates)) == repr(json.loads(raw_surrogates))


@pytest.mark.parametrize("text", ["", "{", "[1,]", '{"a": 1}x', "nul", "{'a': 1}", '"\\x"', b"\xff\xfe"])
def test_malformed_input_raises_our_error_in_one_line(text):
    with pytest.raises(json_codec.JsonDecodeError) as info:
        json_codec.loads(text)
    assert isinstance(info.value, ProtocolError) and isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith("invalid JSON: ") and "\n" not in message


def test_too_deep_nesting():
    with pytest.raises(RecursionError):  # as json.loads
        json_codec.loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        json_codec.dumps(json_codec.loads("[" * 300 + "]" * 300))
    assert json_codec.dumps([[[]]] * 2) == "[[[]], [[]]]"
