"""The floors of the run control: executors sit below the rigs, and nothing below daq/run reaches up to it."""

from __future__ import annotations

from tests.test_architecture import imports, room


def test_rigs_import_nothing_of_the_run_machinery():
    """A rig kind runs inside the lifecycle (daq/run) and is handed what it needs: importing daq.run back
    would run up a floor (the executor used to live there)."""
    bad = [i for i in imports() if room(i.source).startswith("daq.rigs") and room(i.target) == "daq.run"]
    assert bad == []
