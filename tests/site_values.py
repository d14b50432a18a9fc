"""Filling in a real rig's template as a site does: each ``"<site: ...>"`` marker (daq/config/site.py)
replaced, quotes and all, with a value; everything else of the file (comments, register maps, plan) kept.

For tests that need a template that runs, pointed at loopback: :func:`fill_site_values` on the text,
:func:`filled_template` for a copy in a test's folder, and :func:`press_site_values` /
:func:`crane_site_values` for a complete set of values (the devices on 127.0.0.1, nothing beyond it).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from daq.config.site import markers

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _dotted(key: str) -> tuple[str, ...]:
    """``[devices.force_source].host`` (as the refusal prints it) or ``devices.force_source.host``."""
    return tuple(key.replace("[", "").replace("]", "").split("."))


def toml_value(value: Any) -> str:
    """A value as TOML writes it (numbers, booleans, strings, lists of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string (JSON's escapes are TOML's)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def site_keys(text: str) -> list[str]:
    """The key paths still marked for the site, in the file's order (``devices.force_source.host``)."""
    return [".".join(path) for path, _ in markers(tomllib.loads(text))]


def fill_site_values(text: str, values: Mapping[str, Any]) -> str:
    """``text`` with the marker of each key of ``values`` replaced by its value. A key that holds no marker,
    or a marker written twice in the file, is a KeyError/ValueError (a test's mistake, said at once)."""
    raw = tomllib.loads(text)
    marked = {path: what for path, what in markers(raw)}
    for key, value in values.items():
        path = _dotted(key)
        if path not in marked:
            raise KeyError(f"{key}: no site marker there (marked: {', '.join('.'.join(p) for p in marked)})")
        node: Any = raw
        for part in path:
            node = node[part]
        quoted = [q for q in (json.dumps(node), f"'{node}'") if q in text]
        if len(quoted) != 1 or text.count(quoted[0]) != 1:
            raise ValueError(f"{key}: its marker {node!r} is not written exactly once in the file")
        text = text.replace(quoted[0], toml_value(value))
    tomllib.loads(text)  # still TOML
    return text


def filled_template(name: str, values: Mapping[str, Any], folder: Path, as_name: str | None = None) -> Path:
    """A copy of ``configs/<name>`` in ``folder`` with ``values`` filled in (relative paths in the values are
    relative to ``folder``, as they would be to the site's own copy)."""
    path = Path(folder) / (as_name or name)
    path.write_text(fill_site_values((CONFIGS / name).read_text(), values))
    return path


def press_site_values(force_port: int, sensor_urls: Mapping[str, str] | None = None,
                      host: str = "127.0.0.1") -> dict[str, Any]:
    """Every site value of ``configs/press.toml``: the force source at ``host:force_port``, each sensor at its
    url in ``sensor_urls`` (default: ``socket://host:force_port+1..3``, loopback ports a test owns or that
    nothing listens on), the simulated press's sigmas and linkage constants."""
    urls = dict(sensor_urls or {})
    for i, name in enumerate(("D_vertical", "F_horizontal", "B0_vertical"), start=1):
        urls.setdefault(name, f"socket://{host}:{force_port + i}")
    values: dict[str, Any] = {
        "devices.force_source.host": host, "devices.force_source.port": force_port,
        "devices.force_source.device_id": 1, "devices.force_source.model": "test force source",
        "devices.force_source.f_max": 22000.0,
        "analysis.constants.k_lever": 1.0e9, "analysis.constants.k_guide": 5.0e8,
        "analysis.constants.k_joint": 1.2e9, "analysis.constants.joint_beta": 2.0e8,
        "analysis.constants.b0_ratio": 0.2,
    }
    for name, unit_id, sigma in (("D_vertical", 1, 1.518e-5), ("F_horizontal", 2, 4.895e-6),
                                 ("B0_vertical", None, 3.904e-6)):
        table = f"devices.sensors.{name}"
        values[f"{table}.url"] = urls[name]
        values[f"{table}.baudrate"] = 9600 if unit_id is None else 19200
        values[f"{table}.model"] = f"test sensor {name}"
        values[f"{table}.sigma"] = sigma
        if unit_id is not None:
            values[f"{table}.device_id"] = unit_id
    return values


def crane_site_values(url: str, pki: str = "pki/crane") -> dict[str, Any]:
    """Every site value of ``configs/crane.toml``: the drive at ``url`` (opc.tcp:// on loopback), the PKI
    files under ``pki`` (relative to the filled copy's folder: simulators/certs.py's ``ensure_pki`` names),
    wide search bounds."""
    return {
        "devices.drive.url": url, "devices.drive.namespace": "urn:hil-lab:crane-drive",
        "devices.drive.torque_limit": 15.0, "devices.drive.speed_limit": 100.0,
        "devices.drive.security.certificate": f"{pki}/client_cert.der",
        "devices.drive.security.private_key": f"{pki}/client_key.pem",
        "devices.drive.security.server_certificate": f"{pki}/server_cert.der",
        "devices.drive.security.user": "operator",
        # data-sheet values with wide margins, as configs/crane-sim.toml (none centred on the simulated axis)
        "model_selection.bounds.J1": [0.01, 0.1], "model_selection.bounds.J2": [0.01, 0.15],
        "model_selection.bounds.J3": [0.015, 0.5], "model_selection.bounds.k12": [800.0, 30000.0],
        "model_selection.bounds.k23": [60.0, 3000.0],
    }
