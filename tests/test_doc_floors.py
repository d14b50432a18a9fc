"""docs/architecture.md draws the rooms of daq/ floor by floor: every room is in the drawing, and every
import (those inside functions too) goes to a room on the importer's own floor or below."""

from __future__ import annotations

import re

from tests.test_architecture import ROOT, imports, modules, room

#: the drawing of docs/architecture.md, from the ground floor up
FLOORS = [
    {"daq.errors", "daq.version", "daq.commission", "daq.executor", "daq.plots", "daq.tls"},
    {"daq.json_codec"},
    {"daq.bus"},
    {"daq.store"},
    {"daq.lab", "daq.export", "daq.online"},
    {"daq.config"},
    {"daq.rigs"},
    {"rig kinds"},
    {"daq.run"},
    {"daq.serve", "daq.testing"},
    {"daq.cli"},
]
RIG_KINDS = sorted(p.parent.name for p in (ROOT / "daq" / "rigs").glob("*/__init__.py"))


def floor(name: str) -> int:
    key = "rig kinds" if name.startswith("daq.rigs.") else name
    return next(i for i, rooms in enumerate(FLOORS) if key in rooms)


def drawing() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"## Inside `daq/`.*?```(.*?)```", text, re.S)
    assert found, "docs/architecture.md lost its drawing of daq/"
    return found.group(1)


def test_every_room_of_daq_is_drawn_on_a_floor():
    rooms = {room(name) for name in modules() if name.startswith("daq.") and name != "daq"}
    unplaced = sorted(r for r in rooms if not any(r in f for f in FLOORS) and not r.startswith("daq.rigs."))
    assert unplaced == [], "a new room of daq/ needs its floor in docs/architecture.md and here"
    picture = drawing()
    for r in rooms - {f"daq.rigs.{k}" for k in RIG_KINDS}:
        path = r.replace(".", "/")
        assert f"{path}/" in picture or f"{path}.py" in picture, f"{path} is missing from the drawing"
    assert "daq/rigs/<kind>/" in picture
    missing_kinds = [k for k in RIG_KINDS if k not in picture]
    assert missing_kinds == []


def test_every_import_of_daq_goes_to_its_own_floor_or_below():
    up = sorted(f"{i.source}:{i.line} -> {i.target}" for i in imports()
                if i.source.startswith("daq.") and i.target.startswith("daq.")
                and room(i.source) != room(i.target) and floor(room(i.source)) < floor(room(i.target)))
    assert up == []
