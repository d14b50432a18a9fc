"""The declared dependency ranges are the tested ones: every lower bound in pyproject.toml is pinned in
constraints-lowest.txt (which `.ci/run` installs in a second venv to run the suite against)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared_lower_bounds() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"]) + list(meta["optional-dependencies"]["test"])
    bounds = {}
    for req in reqs:
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$", req)
        name, spec = m.group(1).lower(), m.group(3)
        low = re.search(r">=\s*([0-9][^,\s]*)", spec)
        assert low, f"{req}: every dependency declares a tested lower bound"
        bounds[name] = low.group(1)
    return bounds


def pinned() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints-lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, ver = line.split("==")
            pins[name.strip().lower()] = ver.strip()
    return pins


def _release(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", v)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_every_declared_lower_bound_is_pinned_in_the_lowest_versions_run():
    bounds, pins = declared_lower_bounds(), pinned()
    missing = sorted(set(bounds) - set(pins) - {"ruff"})  # ruff checks style, it changes no result
    assert not missing, f"not in constraints-lowest.txt: {missing}"
    for name, low in bounds.items():
        if name in pins:
            assert _release(pins[name]) == _release(low), (name, low, pins[name])
