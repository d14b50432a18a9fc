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

import builtins
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from drivers.errors import RegisterMapError
from drivers.settings import InvalidSetting, Settings, settings_from

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
#: raw limits of the integer types (a float32 register holds +-3.4e38)
INT_LIMITS = {"uint16": (0, 65535), "int16": (-32768, 32767), "uint32": (0, 2**32 - 1),
              "int32": (-2**31, 2**31 - 1)}
Finite = Annotated[float, Meta(ge=-1e12, le=1e12)]


class Register(Settings, kw_only=True):
    """One entry of a device's register map, as the config writes it (the table the service checks)."""

    table: Literal["holding", "input"] = "holding"
    address: Annotated[int, Meta(ge=0, le=65535)]
    type: Literal["uint16", "int16", "uint32", "int32", "float32"] = "float32"
    word_order: Literal["big", "little"] = "big"
    scale: Annotated[float, Meta(ge=-1e9, le=1e9)] = 1.0   # SI value = raw * scale + offset
    offset: Finite = 0.0
    unit: str = "1"
    description: str = ""
    range: Annotated[list[Finite], Meta(min_length=2, max_length=2)] | None = None  # plausible SI values

    @property
    def count(self) -> int:
        """Number of 16-bit registers the value occupies."""
        return _TYPES[self.type][1]

    def check(self) -> None:
        if abs(self.scale) < 1e-12:
            raise InvalidSetting("scale", f"{self.scale!r} is (almost) 0: readings would all be the offset; "
                                          "give the register's SI units per count")
        if self.address + self.count - 1 > 65535:
            raise InvalidSetting("address", f"{self.address} + {self.count} words runs past register 65535")
        if self.range is not None and not self.range[0] < self.range[1]:
            raise InvalidSetting("range", f"needs lo < hi, got {self.range}")
        for v in self.range or ():
            if not self.encodable(v):
                raise InvalidSetting("scale", f"{self.scale!r} maps the plausible value {v:g} {self.unit} "
                                              f"outside the {self.type} register ({self.raw_limits()}); "
                                              "choose scale/offset so [range] fits the register")

    def raw_limits(self) -> tuple[float, float]:
        return INT_LIMITS.get(self.type, (-3.4e38, 3.4e38))

    def encodable(self, value: float) -> bool:
        """True when ``value`` (SI) maps into the register's raw range."""
        lo, hi = self.raw_limits()
        return lo <= round((value - self.offset) / self.scale) <= hi

    def span(self) -> builtins.range:  # builtins: the field `range` shadows the name in the class
        """The register addresses it occupies."""
        return range(self.address, self.address + self.count)


def overlapping(registers: Mapping[str, Register]) -> tuple[str, str] | None:
    """The first two entries of one map that share a register of the same table (None: none do)."""
    seen: dict[tuple[str, int], str] = {}
    for name, reg in registers.items():
        for address in reg.span():
            other = seen.get((reg.table, address))
            if other is not None:
                return other, name
            seen[(reg.table, address)] = name
    return None



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
    def from_register(cls, name: str, reg: Register) -> RegisterSpec:
        """The codec of a checked map entry."""
        return cls(name=name, table=reg.table, address=reg.address, type=reg.type, word_order=reg.word_order,
                   scale=reg.scale, offset=reg.offset, unit=reg.unit,
                   range=(reg.range[0], reg.range[1]) if reg.range is not None else None)

    @classmethod
    def from_config(cls, name: str, d: Mapping | Register) -> RegisterSpec:
        """One map entry, a :class:`Register` or a plain mapping (converted and checked by the same struct);
        RegisterMapError with the entry name on any problem."""
        if isinstance(d, Register):
            return cls.from_register(name, d)
        if not isinstance(d, Mapping):
            raise RegisterMapError(f"register {name!r}: expected a table, got {type(d).__name__}")
        try:
            reg = settings_from(d, Register)
        except (msgspec.ValidationError, InvalidSetting) as exc:
            raise RegisterMapError(f"register {name!r}: {exc}") from None
        return cls.from_register(name, reg)

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


class RegisterMap(dict[str, RegisterSpec]):
    """Name -> RegisterSpec, built from a TOML table; ``require`` checks that a driver's names exist."""

    @classmethod
    def from_config(cls, table: Mapping, required: tuple[str, ...] = ()) -> RegisterMap:
        rmap = cls({name: RegisterSpec.from_config(name, d) for name, d in table.items()})
        missing = [n for n in required if n not in rmap]
        if missing:
            raise RegisterMapError(f"register map lacks {missing}")
        return rmap
