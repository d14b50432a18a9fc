"""Issue 39, section 5: no shipped config's search box is centred on its simulator's truth, and no fit
starts at the truth.

The kit's fits start first at the centre of the (scaled) box: bounds a decade each side of the simulated
crane's values put that start on the answer (J1, J2, J3, k23, stribeck_speed). Shipped bounds are what a site
knows (data-sheet values with wide margins); the simulators' truths sit inside, away from every centre.
"""

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from daq.rigs.config import load
from identification.models.machine_tool_model import PARAM_NAMES, STIFFNESS_NAMES, param_bounds
from identification.selection.fitting import _Scaling, _starts
from simulators.physics.crane import CraneTruth
from simulators.physics.machine_tool import truth_values
from simulators.physics.oscillator import OscillatorTruth
from simulators.physics.pendulum import PendulumTruth
from tests.site_values import crane_site_values, filled_template, site_keys

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TRUTHS = {"crane": CraneTruth, "oscillator": OscillatorTruth, "pendulum": PendulumTruth}
#: the fit's name of a simulator's value where the two differ (the pendulum model's Coulomb frictions)
FIT_NAMES = {"cart_coulomb": "f_c", "joint_coulomb": "f_p"}
REL = 0.1  # a centre closer to the truth than this share of the box's (log-)width counts as centred


def _toml(name: str) -> dict:
    return tomllib.loads((CONFIGS / name).read_text())


def _off_centre(lo: float, hi: float, truth: float) -> list[str]:
    """Why the box [lo, hi] is centred on ``truth`` (empty: it is not): the arithmetic and, for a positive
    box, the geometric centre, each measured on the log scale when the box is positive."""
    why = []
    if lo > 0:
        width = math.log(hi / lo)
        for label, c in (("arithmetic", 0.5 * (lo + hi)), ("geometric", math.sqrt(lo * hi))):
            if abs(math.log(c / truth)) < REL * width:
                why.append(f"{label} centre {c:.4g}")
    elif abs(0.5 * (lo + hi) - truth) < REL * (hi - lo):
        why.append(f"centre {0.5 * (lo + hi):.4g}")
    return why


def _crane_configs() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.toml") if "model_selection" in _toml(p.name))


def test_every_shipped_crane_selection_is_checked():
    assert {"crane-sim.toml", "crane.toml"} <= set(_crane_configs())


@pytest.mark.parametrize("name", _crane_configs())
def test_crane_bounds_are_not_centred_on_the_truth_and_no_start_is_it(name, tmp_path):
    """Every box of the model selection (the loaded config's, defaults included) has its centres away from the
    simulated axis; the starts of the largest candidate (box centre + Latin hypercube, the config's seed)
    are none of them the truth. A template without a simulator is checked against the simulated axis it was
    written from (CraneTruth's defaults = configs/crane-sim.toml), with its site values (those bounds the site
    must supply among them) filled in as tests/site_values.py does."""
    raw = _toml(name)
    truth = CraneTruth.from_config(raw.get("simulator", {}).get("truth")).to_dict()
    path = CONFIGS / name
    if site_keys(path.read_text()):
        path = filled_template(name, crane_site_values("opc.tcp://127.0.0.1:4840"), tmp_path)
    _, cfg = load(path)
    opts = cfg.model_selection.options()
    bounds = opts["bounds"]
    centred = {n: why for n, (lo, hi) in bounds.items() if (why := _off_centre(lo, hi, truth[n]))}
    assert not centred, f"{name}: boxes centred on the simulated axis: {centred}"
    assert all(lo < truth[n] < hi for n, (lo, hi) in bounds.items()), "the truth must lie inside its box"
    names = list(bounds)
    sc = _Scaling(names, bounds)
    at_truth = sc.to_th(np.array([truth[n] for n in names]))
    starts = _starts(len(names), max(opts["n_starts"], 3), np.random.default_rng(opts["seed"]))
    for th in starts:
        assert np.max(np.abs(th - at_truth)) > 0.1, (name, dict(zip(names, sc.to_p(th), strict=True)))


@pytest.mark.parametrize("name", ["oscillator-sim.toml", "pendulum-sim.toml", "crane-adjoint-sim.toml"])
def test_adjoint_fits_start_away_from_the_truth(name):
    """The adjoint fits start at the design point ([adjoint.nominal]) and the nuisances' data-sheet values
    ([fit.nuisance]): each at least 10 % off the simulated plant."""
    raw = _toml(name)
    plant = TRUTHS[raw["adjoint"]["plant"]].from_config(raw.get("simulator", {}).get("truth")).to_dict()
    truth = {FIT_NAMES.get(n, n): v for n, v in plant.items()}
    nominal = raw["adjoint"]["nominal"]
    starts = {n: nominal[n] * raw.get("fit", {}).get("start", 1.0) for n in raw["adjoint"]["parameters"]}
    starts.update(raw.get("fit", {}).get("nuisance", {}))
    near = {n: (v, truth[n]) for n, v in starts.items() if abs(v - truth[n]) < 0.1 * abs(truth[n])}
    assert starts and not near, f"{name}: fit starts at the truth: {near}"


def test_machine_tool_box_is_not_centred_on_the_simulated_machine():
    """The machine tool's search box is [0.7, 1.3] x nominal (stiffness) and [1/3, 3] x nominal (damping):
    the simulated machine differs from the nominal (data-sheet) machine in every parameter, by more than
    a tenth of the box."""
    raw = _toml("machine-tool-sim.toml")
    truth = truth_values(raw.get("simulator", {}).get("truth"))
    lo, hi = param_bounds()
    boxes = list(zip(PARAM_NAMES, lo, hi, strict=True))
    centred = {n: why for n, a, b in boxes if (why := _off_centre(a, b, truth[n]))}
    assert not centred, f"machine tool boxes centred on the simulated machine: {sorted(centred)}"
    assert all(a < truth[n] < b for n, a, b in boxes)
    assert set(STIFFNESS_NAMES) <= set(truth)
