"""Online identification of the simulated crane: an estimate after every trajectory, equal to the offline
fit of the same traces, and the same estimate events again from a replay.

One short simulated crane run (the OPC UA drive served on loopback, 1 s trajectories at 20x speed) with
[online] enabled serves every test of this module.
"""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest
import scipy.stats

from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.config.load import ConfigError, parse
from daq.rigs.config import load_config
from daq.rigs.crane.online import ONLINE_STREAM, TOPICS, CraneOnlineIdentifier, settings_from_config
from daq.rigs.crane.rig import CraneConfig, crane_arrays
from daq.run.replay import replay_session
from daq.store.read_write import SessionStore
from identification.analyses.crane_analysis import fit_runs
from tests.fit_starts import CRANE_BOUNDS
from tests.in_process_runs import run_in_process

MODEL = "3m+visc+coul+dt"
CONTRACT = ("model", "parameters", "values", "std", "rel_std", "covariance", "ellipse_semi_axes", "used",
            "elapsed_s")


def online_config() -> dict:
    cfg = copy.deepcopy(load_config("configs/crane-sim.toml"))
    cfg["simulator"]["speed"] = 20.0
    cfg["excitation"].update(duration=1.0, n_lines=40, max_iter=10)
    cfg["excitation"].pop("export_dir", None)
    cfg["excitation"]["validation"]["n_lines"] = 30
    cfg["model_selection"]["decimate"] = 10
    # the cold fit's one start is the centre of the bounds: moved off the truth (tests/fit_starts.py)
    cfg["model_selection"]["bounds"] = {n: list(b) for n, b in CRANE_BOUNDS.items()}
    cfg["online"] = {"enabled": True, "model": MODEL, "n_starts": 1, "max_nfev": 100}
    cfg["distortion"]["enabled"] = False  # two trajectories, two estimates
    return cfg


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    store_path = tmp_path_factory.mktemp("crane-online") / "s.sqlite"
    result = asyncio.run(run_in_process(online_config(), str(store_path), show_progress=False,
                                        handle_sigint=False))
    with SessionStore(store_path) as store:
        ests = [e.body for e in store.events(result.session_id) if e.stream == ONLINE_STREAM]
        runs = crane_arrays(store, result.session_id)
        config = store.get_session(result.session_id).config
    return result, store_path, ests, runs, config


@pytest.mark.slow(reason="crane runs with an online fit after every trajectory")
def test_an_estimate_after_every_trajectory(session):
    result, _, ests, runs, _ = session
    assert result.status == "complete", result.reason
    assert result.summary["runs"] == 2 and result.summary["online_estimates"] == 2
    assert [e["used"] for e in ests] == [1, 2]
    assert [e["roles"] for e in ests] == [["training"], ["training", "validation"]]
    assert [e["warm_start"] for e in ests] == [False, True]
    for e in ests:
        for key in CONTRACT:
            assert key in e, key
        assert e["model"] == MODEL and e["parameters"][0] == "J1" and len(e["values"]) == 10
        p = np.array(e["values"])
        C = np.array(e["covariance"])
        np.testing.assert_allclose(C, C.T, rtol=1e-12)
        w = np.linalg.eigvalsh(C)
        assert w.min() > 0
        np.testing.assert_allclose(e["std"], np.sqrt(np.diag(C)), rtol=1e-12)
        np.testing.assert_allclose(e["rel_std"], np.sqrt(np.diag(C)) / np.abs(p), rtol=1e-12)
        lam = w * scipy.stats.chi2.ppf(0.95, p.size)  # squared semi-axes (small ones only to round-off)
        np.testing.assert_allclose(np.square(e["ellipse_semi_axes"]), lam, rtol=1e-9, atol=1e-12 * lam.max())
        assert e["elapsed_s"] > 0
    # the second trajectory adds information: every standard deviation shrinks
    assert np.all(np.array(ests[1]["std"]) < np.array(ests[0]["std"]))
    # the elastic chain of the simulated truth is found (its Stribeck friction is not in the model)
    est = dict(zip(ests[-1]["parameters"], ests[-1]["values"], strict=True))
    for name, truth in (("J1", 0.02), ("J2", 0.06), ("J3", 0.04), ("k12", 2100.0), ("k23", 240.0)):
        assert est[name] == pytest.approx(truth, rel=0.05), name


def test_last_online_estimate_is_the_offline_fit(session):
    _, _, ests, runs, config = session
    s = settings_from_config(config)
    assert s.model == MODEL and s.decimate == 10
    kw = s.fit_kwargs()
    off = fit_runs(MODEL, [runs["training"], runs["validation"]], **kw)  # cold multistart, both traces
    last = ests[-1]
    # warm start (from the training-only estimate) vs cold multistart of the same cost: both stop at
    # the optimiser's tolerance (xtol = ftol = 1e-10 in the scaled box)
    np.testing.assert_allclose(last["values"], off.values, rtol=1e-5)
    np.testing.assert_allclose(last["cost"], off.cost, rtol=1e-8)
    np.testing.assert_allclose(last["std"], off.std, rtol=1e-3)
    corr = np.array(last["covariance"]) / np.outer(last["std"], last["std"])
    np.testing.assert_allclose(corr, off.covariance / np.outer(off.std, off.std), atol=1e-3)
    # and the first estimate is the cold fit of the training trace alone
    first = fit_runs(MODEL, [runs["training"]], **kw)  # same data, both cold: far inside the std
    assert np.all(np.abs(np.asarray(ests[0]["values"]) - first.values) <= 1e-3 * np.asarray(ests[0]["std"]))


async def test_replay_gives_the_same_estimate_events(session):
    result, store_path, live, _, config = session
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint, topics=TOPICS)
    got: list[tuple[str, dict]] = []

    async def emit(kind: str, body: dict) -> None:
        got.append((kind, body))

    ident = CraneOnlineIdentifier(settings_from_config(config), emit, n_runs=2)
    try:
        with SessionStore(store_path) as store:
            await pub.wait_for_subscribers(1, timeout=5)
            task = asyncio.ensure_future(ident.run(sub, idle_timeout=60.0))
            stats = await replay_session(store, result.session_id, pub, burst=True)
            await asyncio.wait_for(task, 120.0)
    finally:
        sub.close()
        pub.close()
    assert stats.frames > 0
    assert [k for k, _ in got] == ["estimate"] * len(live)
    for a, (_, b) in zip(live, got, strict=True):
        assert b["model"] == a["model"] and b["parameters"] == a["parameters"] and b["used"] == a["used"]
        for key in ("values", "std", "rel_std", "covariance", "ellipse_semi_axes", "cost", "sigma2"):
            np.testing.assert_allclose(np.asarray(b[key], float), np.asarray(a[key], float), rtol=1e-12,
                                       err_msg=key)


def test_online_table_is_off_by_default_and_checked():
    raw = load_config("configs/crane-sim.toml")
    assert parse(raw, CraneConfig).online.enabled is False
    bad = copy.deepcopy(raw)
    bad["online"] = {"enabled": True, "model": "3m+visc+frog"}
    with pytest.raises(ConfigError, match="online"):
        parse(bad, CraneConfig)


async def test_a_short_trajectory_is_reported_not_fitted():
    """Frames lost between start and end: an estimate_failed event naming the count, no fit, no crash."""
    from daq.bus.frames import Event, Frame
    from daq.rigs.crane.online import OnlineFitSettings

    got: list[tuple[str, dict]] = []

    async def emit(kind: str, body: dict) -> None:
        got.append((kind, body))

    ident = CraneOnlineIdentifier(OnlineFitSettings(model="1m+visc", worker="thread"), emit)
    try:
        await ident.handle(Event("crane.plan", "trajectory_start", 0, 0.0, {"role": "training", "dt": 1e-4,
                                                                            "n": 100}))
        await ident.handle(Frame("crane.trace", 0, 0.0, 1e-4, ["torque_cmd", "torque", "speed"],
                                 ["N*m", "N*m", "rad/s"], np.zeros((60, 3))))
        await ident.handle(Event("crane.plan", "trajectory_end", 1, 0.1, {"role": "training"}))
    finally:
        ident.close()
    assert [k for k, _ in got] == ["estimate_failed"]
    assert "received 60 samples, expected 100" in got[0][1]["error"] and ident.runs == []
    assert await ident.wait_for(1, timeout=1.0) is None  # answered (no estimate), so no wait
