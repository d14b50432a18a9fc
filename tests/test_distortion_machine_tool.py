"""Issue 31 item 4 on the machine tool, end to end: `hil run` with `[distortion]` against the simulated SCPI
front end on loopback (its `SOUR:DET` odd random-phase multisines), then `hil analyze --json --plots`.
The simulated structure is linear (a modal model): no nonlinear distortion is detected; the modal runs
before the distortion runs are read as before."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.config.load import read_toml
from daq.rigs.machine_tool.distortion import read
from daq.rigs.machine_tool.rig import DISTORTION_STREAMS
from daq.store.read_write import SessionStore
from identification.frequency.nonlinear_distortion import excited_lines

CONFIG = read_toml("configs/machine-tool-sim.toml")


@pytest.mark.slow(reason="a small modal test and three distortion runs over SCPI, then the analysis")
def test_the_linear_structure_shows_no_distortion_and_the_detection_lines_stay_free(tmp_path):
    from tests.test_rig_kit import _to_toml

    cfg = copy.deepcopy(CONFIG)
    cfg["plan"].update(positions=[0.05], validation=[], inputs=["T1x"])
    cfg["excitation"].update(period=1024, periods=1, settle=2)
    cfg["analysis"].update(n_modes=2, f_min=20.0, f_max=60.0, sobol_n=4, n_opt=1, maxiter=5, workers=1)
    assert cfg["distortion"]["enabled"] is True  # shipped on
    path = tmp_path / "mt.toml"
    path.write_text(_to_toml(cfg))
    store = str(tmp_path / "s.sqlite")
    cli = CliRunner()
    res = cli.invoke(main, ["--store", store, "run", str(path), "--no-progress"])
    assert res.exit_code == 0, res.output
    js = cli.invoke(main, ["--store", store, "analyze", "latest", "--json", "--plots", str(tmp_path / "p")])
    assert js.exit_code == 0, js.output
    d = json.loads(js.stdout)
    nl = d["nonlinear_distortion"]
    assert nl["detected"] is False and nl["p_value"] > 0.01, nl
    assert nl["realisations"] == 3 and nl["periods"] == 2 and nl["output"] == "acceleration at T1x"
    assert nl["band"][0] >= 10.0 and nl["band"][1] <= 240.0
    assert str(tmp_path / "p" / f"{d['session']}-nonlinear_distortion.png") in d["plots"]
    assert len(d["modal_extraction"]) == 1  # the modal runs are read as before
    # the recorded force: odd lines only, one odd line in every 4 and all even lines left free
    with SessionStore(store) as s:
        rec = read(s, s.get_session("latest").id, DISTORTION_STREAMS)
    assert rec is not None and len(rec.force) == 3
    u = np.array([f.reshape(-1, rec.period) for f in rec.force])
    bins = excited_lines(u)
    odd_in_band = np.arange(11, 241, 2)  # 1 Hz lines, 10-240 Hz
    assert np.all(bins % 2 == 1) and np.all((bins >= 10) & (bins <= 240))
    assert odd_in_band.size - bins.size == odd_in_band.size // 4
