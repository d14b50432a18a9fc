"""Is a reading plausible, and if not, what is the likely mistake in the config? Plain functions, no I/O.

A real device's register map is its maker's; the config's copy of it can be wrong in a few typical ways,
each of which leaves a fingerprint in the raw registers:

- word order: the other word order decodes every reading into the plausible range;
- scale factor: the value times 1e-3 (or 1e3, 1e-6, 1e6) is plausible, or the readings scatter about 1000
  times the sensor's own noise (a register in mm read as m);
- register address: the value is what another register of the same device should read (pointed at
  another sensor's register);
- anything else: outside the range, naming the range and what to check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from drivers.registers import RegisterSpec

SCALES = (1e-3, 1e3, 1e-6, 1e6)


def inside(values: Sequence[float], span: tuple[float, float] | None) -> bool:
    """Every value finite and (with a span) inside it."""
    return all(math.isfinite(v) and (span is None or span[0] <= v <= span[1]) for v in values)


def sensible(values: Sequence[float], span: tuple[float, float]) -> bool:
    """Inside the span and not vanishingly small against it: swapped float words often decode to 1e-24,
    inside any span around zero but no reading an instrument makes."""
    if not inside(values, span):
        return False
    size = float(np.median(np.abs(values)))
    return size == 0.0 or size >= 1e-9 * (span[1] - span[0])


def decode_all(spec: RegisterSpec, raws: Sequence[Sequence[int]]) -> list[float]:
    """Each raw read decoded with ``spec`` (no plausibility check)."""
    return [spec.decode(r) for r in raws]


def likely_mistake(spec: RegisterSpec, raws: Sequence[Sequence[int]], span: tuple[float, float],
                   others: Mapping[str, tuple[float, float]]) -> str:
    """Why the readings of ``spec`` are implausible, in words (the first fingerprint that fits)."""
    values = decode_all(spec, raws)
    lo, hi = span
    shown = _median(values)
    where = f"reads {shown:.4g} {spec.unit}, outside the plausible {lo:g}..{hi:g} {spec.unit}"
    if spec.count == 2:
        other = "little" if spec.word_order == "big" else "big"
        swapped = decode_all(dataclasses.replace(spec, word_order=other), raws)
        if sensible(swapped, span):
            return (f"{where}: likely the word order - with word_order = {other!r} it reads "
                    f"{_median(swapped):.4g} {spec.unit}; set word_order = {other!r}")
    finite = [v for v in values if math.isfinite(v)]
    scale = next((f for f in SCALES if finite and len(finite) == len(values)
                  and inside([v * f for v in values], span)), None)
    scale_text = (f"the scale factor - {_times(scale)} it would be plausible ({shown * scale:.4g} "
                  f"{spec.unit}); check scale (and the register's unit, e.g. mm for m)") if scale else ""
    for name, other_span in others.items():
        if finite and inside(values, other_span):
            return (f"{where}: it reads like {name!r} ({other_span[0]:g}..{other_span[1]:g}); likely the "
                    "register address - is it pointed at another register of this device?"
                    + (f" (or {scale_text})" if scale else ""))
    if scale:
        return f"{where}: likely {scale_text}"
    return f"{where}: check the register's address, type, word order, scale and unit against the device's map"


def scatter_note(values: Sequence[float], sigma: float | None, unit: str = "m") -> str | None:
    """A warning when plausible readings scatter far more than the sensor's nominal noise (a scale off by a
    factor of about 1000 hides inside a wide range near zero); None when the spread fits."""
    if sigma is None or not math.isfinite(sigma) or sigma <= 0 or len(values) < 3:
        return None
    spread = float(np.std(values, ddof=1))
    ratio = spread / sigma
    if ratio < 30:
        return None
    near = 10.0 ** (3 * round(math.log10(ratio) / 3)) if ratio > 300 else None
    hint = f"; likely the scale factor (off by about {near:g}: mm read as m?)" if near else ""
    return (f"readings scatter {spread:.3g} {unit}, {ratio:.0f} x the sensor's sigma ({sigma:.3g} {unit})"
            f"{hint}")


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def _times(f: float) -> str:
    return f"divided by {1 / f:g}" if f < 1 else f"times {f:g}"
