"""The simulated Modbus devices' register codec (simulators/press_devices.py) and what a read refreshes.

The devices encode with struct layouts fixed once per type instead of calling pymodbus' converter on every
read; these words must be pymodbus' own for every type, word order, scale and edge value, or a simulated
rig would answer what no real device built on pymodbus would. A read refreshes only the registers it asks
for, and draws the sensors' noise all the same, so which registers a driver reads never changes the noise a
run sees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pymodbus.client import ModbusTcpClient

from simulators.force_source_sim import ForceSourceSim
from simulators.press_devices import _TYPES, SimRegister
from tests.test_drivers import FS_SIM, fs_cfg

EDGES = {"float32": [0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-45, math.inf, -math.inf, math.nan],
         "int16": [0, 1, -1, 32767, -32768], "uint16": [0, 1, 65535], "int32": [0, -1, 2**31 - 1, -2**31],
         "uint32": [0, 1, 2**32 - 1]}
OUT_OF_RANGE = {"float32": [1e39, -1e39], "int16": [32768, -32769], "uint16": [-1, 65536],
                "int32": [2**31, -2**31 - 1], "uint32": [-1, 2**32]}


def pymodbus_words(reg: SimRegister, value: float) -> list[int]:
    """What pymodbus' converter makes of ``value`` for ``reg`` (the scaling as the device does it)."""
    raw = (value - reg.offset) / reg.scale
    if reg.type != "float32":
        raw = int(round(raw))
    order = "little" if reg.word_order == "little" else "big"
    return ModbusTcpClient.convert_to_registers(raw, _TYPES[reg.type], word_order=order)


@pytest.mark.parametrize("word_order", ["big", "little"])
@pytest.mark.parametrize("kind", sorted(_TYPES))
def test_the_devices_words_are_pymodbus_words(kind, word_order):
    rng = np.random.default_rng(11)
    plain = SimRegister("x", "input", 0, kind, word_order, 1.0, 0.0)
    scaled = SimRegister("x", "input", 0, kind, word_order, 1.0e-7, -0.25)
    lo, hi = (-3e38, 3e38) if kind == "float32" else (min(EDGES[kind]), max(EDGES[kind]))
    values = [*EDGES[kind], *rng.uniform(lo, hi, 300).tolist(), *rng.normal(0.0, 100.0, 300).tolist()]
    if kind != "float32":
        values = [min(max(v, lo), hi) for v in values]
    for v in values:
        words = plain.to_regs(v)
        assert words == pymodbus_words(plain, v), (kind, word_order, v)
        assert all(0 <= w <= 0xFFFF for w in words) and len(words) == plain.count
    for raw in rng.uniform(lo, hi, 300).tolist():  # a scaled register (an eddy-current sensor's metres)
        v = scaled.offset + scaled.scale * raw
        assert scaled.to_regs(v) == pymodbus_words(scaled, v), (kind, word_order, v)
    for v in OUT_OF_RANGE[kind]:  # a value the type cannot hold fails as it does in pymodbus
        with pytest.raises(Exception) as ours:
            plain.to_regs(v)
        with pytest.raises(Exception) as theirs:
            pymodbus_words(plain, v)
        assert type(ours.value) is type(theirs.value), (kind, v)


async def test_a_read_refreshes_the_registers_it_asks_for_and_draws_the_same_noise_whatever_it_asks():
    """Two force sources of one seed: one read word by word as the drivers read (force, then pressure),
    the other as one block. Each read draws the load cell's and the pressure sensor's noise, so both give
    the same force and pressure at the same read; a register no read asked for keeps its last words."""
    one = ForceSourceSim(fs_cfg(0), {**FS_SIM, "loadcell_sigma": 5.0}, np.random.default_rng(21))
    whole = ForceSourceSim(fs_cfg(0), {**FS_SIM, "loadcell_sigma": 5.0}, np.random.default_rng(21))
    for sim in (one, whole):
        sim.force = 1234.5
    force, pressure = one.rmap["force"], one.rmap["pressure"]  # the device's own map
    block = await whole.server.access("input", 0, 6)
    asked = await one.server.access("input", force.address, force.count)
    assert asked == block[0:2] and force.from_regs(asked) != 1234.5  # the same noisy force
    assert one.server._image["input"][1][2:6] == [0, 0, 0, 0]  # pressure and status not asked: not refreshed
    block = await whole.server.access("input", 0, 6)
    asked = await one.server.access("input", pressure.address, pressure.count)
    assert asked == block[2:4] and pressure.from_regs(asked) != one.pressure  # the same noisy pressure
    assert one.server._image["input"][1][0:2] != block[0:2]  # the force word stays the first read's
