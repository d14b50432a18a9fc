"""Register-map codec: turn TOML register entries into values in SI units and back.

A register entry looks like::

    setpoint = { table = "holding", address = 0, type = "float32", word_order = "big", unit = "N" }

``value_SI = raw * scale + offset``. ``range = [lo, hi]`` (SI units, optional) is the plausible span of a read
value: a reading outside it is refused by the driver (an implausible value never goes out).
Types: float32, int16, uint16, int32, uint32. ``word_order`` applies to 32-bit types ("big": most
significant word first, the Modbus convention; "little": swapped words).
A device with another map needs a config change, not code.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from drivers.errors import RegisterMapError

# type name -> (struct code for a big-endian value, number of 16-bit registers)
_TYPES: dict[str, tuple[str, int]] = {
    "float32": (">f", 2),
    "int16": (">h", 1),
    "uint16": (">H", 1),
    "int32": (">i", 2),
    "uint32": (">I", 2),
}
#: The same, as compiled structs: type name -> (value struct, registers); register count -> words struct.
_VALUES: dict[str, tuple[struct.Struct, int]] = {
    name: (struct.Struct(code), n) for name, (code, n) in _TYPES.items()
}
_WORDS: dict[int, struct.Struct] = {n: struct.Struct(f">{n}H") for n in (1, 2)}
_TABLES = ("holding", "input")
_KEYS = {"table", "address", "type", "word_order", "scale", "offset", "unit", "description", "range"}


@dataclass(frozen=True)
class RegisterSpec:
    """One value in a device's register map."""

    name: str
    table: str
    address: int
    type: str = "float32"
    word_order: str = "big"
    scale: float = 1.0
    offset: float = 0.0
    unit: str = "1"
    range: tuple[float, float] | None = None  # plausible read values (SI); None: any finite value

    @property
    def count(self) -> int:
        """Number of 16-bit registers the value occupies."""
        return _TYPES[self.type][1]

    @property
    def is_float(self) -> bool:
        return self.type == "float32"

    @classmethod
    def from_config(cls, name: str, d: Mapping) -> RegisterSpec:
        """Validate one TOML entry; raises RegisterMapError with the entry name on any problem."""
        if not isinstance(d, Mapping):
            raise RegisterMapError(f"register {name!r}: expected a table, got {type(d).__name__}")
        unknown = sorted(set(d) - _KEYS)
        if unknown:
            raise RegisterMapError(f"register {name!r}: unknown keys {unknown}")
        try:
            spec = cls(
                name=name,
                table=str(d.get("table", "holding")),
                address=int(d["address"]),
                type=str(d.get("type", "float32")),
                word_order=str(d.get("word_order", "big")),
                scale=float(d.get("scale", 1.0)),
                offset=float(d.get("offset", 0.0)),
                unit=str(d.get("unit", "1")),
                range=_range(d["range"]) if "range" in d else None,
            )
        except KeyError as exc:
            raise RegisterMapError(f"register {name!r}: missing key {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise RegisterMapError(f"register {name!r}: {exc}") from None
        if spec.table not in _TABLES:
            raise RegisterMapError(f"register {name!r}: table must be one of {_TABLES}, got {spec.table!r}")
        if spec.type not in _TYPES:
            raise RegisterMapError(f"register {name!r}: type must be one of {sorted(_TYPES)}, "
                                   f"got {spec.type!r}")
        if spec.word_order not in ("big", "little"):
            raise RegisterMapError(f"register {name!r}: word_order must be 'big' or 'little'")
        if not 0 <= spec.address <= 65535 - spec.count + 1:
            raise RegisterMapError(f"register {name!r}: address {spec.address} out of 0..65535")
        if spec.scale == 0 or not math.isfinite(spec.scale) or not math.isfinite(spec.offset):
            raise RegisterMapError(f"register {name!r}: scale must be finite and non-zero, offset finite")
        return spec

    def plausible(self, value: float) -> bool:
        """True when ``value`` is finite and inside ``range`` (if the map gives one)."""
        if not math.isfinite(value):
            return False
        return self.range is None or self.range[0] <= value <= self.range[1]

    def decode(self, regs: Sequence[int]) -> float:
        """Registers -> value in SI units. NaN/inf floats are passed through (the caller judges them)."""
        if len(regs) != self.count:
            raise ValueError(f"{self.name}: expected {self.count} registers, got {len(regs)}")
        return self.decoder()(regs)

    def decoder(self) -> Callable[[Sequence[int]], float]:
        """The decode of this entry as one precompiled function (registers -> SI value), made once by a driver
        for its poll's hot path: the structs, word order, scale and offset are bound, nothing is looked up
        per call. The caller guarantees the register count (the Modbus reply check does)."""
        pack = _WORDS[self.count].pack
        unpack = _VALUES[self.type][0].unpack
        scale, offset = self.scale, self.offset
        if self.word_order == "little":
            def decode_swapped(regs: Sequence[int]) -> float:
                return unpack(pack(*reversed(regs)))[0] * scale + offset

            return decode_swapped

        def decode(regs: Sequence[int]) -> float:
            return unpack(pack(*regs))[0] * scale + offset

        return decode

    def encode(self, value: float) -> list[int]:
        """Value in SI units -> registers. Integers are rounded; out-of-range raises ValueError."""
        raw = (float(value) - self.offset) / self.scale
        code = _TYPES[self.type][0]
        if not self.is_float:
            if not math.isfinite(raw):
                raise ValueError(f"{self.name}: {value!r} cannot be encoded as {self.type}")
            raw = round(raw)
        try:
            packed = struct.pack(code, raw)
        except (struct.error, OverflowError) as exc:
            raise ValueError(f"{self.name}: {value!r} does not fit {self.type} (scale {self.scale})") from exc
        words = list(struct.unpack(f">{self.count}H", packed))
        if self.word_order == "little":
            words.reverse()
        return words


def _range(r) -> tuple[float, float]:
    """``[lo, hi]`` with finite lo < hi (ValueError otherwise)."""
    if isinstance(r, str | bytes) or not hasattr(r, "__len__") or len(r) != 2:
        raise ValueError(f"range must be [lo, hi], got {r!r}")
    lo, hi = float(r[0]), float(r[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"range must be finite with lo < hi, got {r!r}")
    return lo, hi


class RegisterMap(dict[str, RegisterSpec]):
    """Name -> RegisterSpec, built from a TOML table; ``require`` checks that a driver's names exist."""

    @classmethod
    def from_config(cls, table: Mapping, required: tuple[str, ...] = ()) -> RegisterMap:
        rmap = cls({name: RegisterSpec.from_config(name, d) for name, d in table.items()})
        missing = [n for n in required if n not in rmap]
        if missing:
            raise RegisterMapError(f"register map lacks {missing}")
        return rmap
