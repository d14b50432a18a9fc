"""Numbers with their units for plot labels and titles, with SI prefixes as the page shows them:
``1099.97 N/m`` -> ``1.09997 kN/m``, an estimate as ``c2 = 1.09997 kN/m ± 28 mN/m``."""

from __future__ import annotations

import math

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"),
             (1e-9, "n"), (1e-12, "p"))
#: units that take no prefix (counts, ratios, angles in degrees, temperatures, ...)
_NO_PREFIX = {"", "1", "%", "°C", "degC", "dB", "-", "deg", "°", "count", "bool", "rpm"}


def si_text(value: float, unit: str, digits: int = 6) -> str:
    """``value`` in ``unit`` with an SI prefix and ``digits`` significant digits: 1.2e-5 m -> "12 µm";
    kilograms take prefixes as grams do (2e-6 kg -> "2 mg", 0.01 kg*m^2 -> "10 g*m^2")."""
    kilo = unit.startswith("kg") and not unit[2:3].isalpha()  # kg, kg*m^2: the prefix goes on the gram
    base, scale = ("g" + unit[2:], 1e3) if kilo else (unit, 1.0)
    shown = "" if base == "1" else base
    if not math.isfinite(value):
        return f"{value} {shown}".strip()
    x = value * scale
    factor, prefix = 1.0, ""
    if base not in _NO_PREFIX and x != 0:
        factor, prefix = next(((f, p) for f, p in _PREFIXES if abs(x) >= f * 0.9995), _PREFIXES[-1])
    return f"{x / factor:.{digits}g} {prefix}{shown}".strip()


def estimate_text(name: str, value: float, std: float, unit: str) -> str:
    """One estimate with its standard deviation, each with its unit: "c2 = 1.09997 kN/m ± 28 mN/m"."""
    return f"{name} = {si_text(value, unit)} ± {si_text(std, unit, 2)}"
