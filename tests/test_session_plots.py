"""`hil analyze --plots` / `hil run --analyze --plots` (issue 42): the plot files of a session are named
after it and titled with it, so two sessions' analyses written to one folder keep both sets of plots;
fit.png's estimates carry their units with SI prefixes."""

from __future__ import annotations

import time

import numpy as np
from PIL import Image

from daq.bus.frames import Frame
from daq.rigs import register, unregister
from daq.rigs.analysis import analyze_session
from daq.store.read_write import SessionStore
from tests.beacon_rig import BeaconRig


class PlottedBeacon(BeaconRig):
    """The beacon with an analysis (the mean of its samples) and one plot of it, named as rigs name theirs."""

    kind = "beacon-plotted"

    def arrays(self, reader, session_id):
        return reader.read_stream(session_id, "beacon.x").data[:, 0]

    def analyze(self, arrays, cfg, progress=None):
        return float(np.mean(arrays))

    def report_dict(self, result):
        return {"mean": result}

    def plots(self, result, arrays, folder):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot(arrays)
        ax.set_title(f"mean {result:.3f}")
        path = folder / "fit.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        return [path]


def _session(store: SessionStore, level: float) -> str:
    sid = store.create_session(PlottedBeacon.kind, {"rig": {"kind": PlottedBeacon.kind, "name": "b",
                                                            "simulated": True}, "plan": {}})
    data = level + np.random.default_rng(7).standard_normal((50, 1))
    store.append(sid, Frame("beacon.x", 0, time.time(), 0.01, ["x0"], ["m"], data))
    store.finish(sid, "complete")
    return sid


def test_two_sessions_plots_in_one_folder_keep_their_own_names_and_titles(tmp_path):
    register(PlottedBeacon())
    try:
        with SessionStore(tmp_path / "s.sqlite", create=True) as store:
            first, second = _session(store, 1.0), _session(store, 5.0)
            _, _, _, files1 = analyze_session(store, first, plots_dir=tmp_path / "plots")
            before = files1[0].read_bytes()
            _, _, _, files2 = analyze_session(store, second, plots_dir=tmp_path / "plots")
    finally:
        unregister(PlottedBeacon.kind)
    assert [f.name for f in files1] == [f"{first}-fit.png"]
    assert [f.name for f in files2] == [f"{second}-fit.png"]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted([f"{first}-fit.png",
                                                                             f"{second}-fit.png"])
    assert files1[0].read_bytes() == before  # the second analysis left the first session's plot alone
    for sid, f in ((first, files1[0]), (second, files2[0])):
        with Image.open(f) as img:
            assert img.text["Title"] == f"session {sid} ({PlottedBeacon.kind}): fit"
            header = np.asarray(img.convert("L"))[:26]  # the title line drawn above the figure
            assert header.min() < 128 and img.size == (320, 240 + 26)


def test_estimates_in_plot_titles_carry_units_with_si_prefixes():
    from daq.plots.labels import estimate_text, si_text  # fit.png's title (daq/rigs/adjoint/plots.py)

    assert estimate_text("c2", 1099.97, 0.028, "N/m") == "c2 = 1.09997 kN/m ± 28 mN/m"
    assert si_text(600002.0, "Pa") == "600.002 kPa" and si_text(0.01, "kg*m^2") == "10 g*m^2"
    assert si_text(2e-6, "kg") == "2 mg" and si_text(0.25, "1") == "0.25"
