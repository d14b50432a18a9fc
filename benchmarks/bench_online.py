"""Online identifier latency on the simulated press: measurement event that completes a series ->
published ``estimate`` event, median and worst. From the second series on the event waits for the
model-uncertainty verdict (worker process), so two latencies are reported: the M1 fit alone (thread pool;
what the "target" stop rule waits for) and the whole event with the verdict.

Side by side in the same run: the fit time in the pool (``elapsed_s``), the verdict's compute time in
the worker (``verdict.elapsed_s``), and the plain calls of ``estimate_stiffness`` and ``model_verdict``
on the same arrays in this process (no bus, no pool, no worker).

    .venv/bin/python benchmarks/bench_online.py [--series 6] [--steps-up 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=6)
    ap.add_argument("--steps-up", type=int, default=3)
    args = ap.parse_args()

    from daq.rigs.config import load_config
    from daq.rigs.press.online import verdict_options
    from daq.rigs.press.session import press_arrays
    from daq.run.lifecycle import run
    from daq.store.read_write import SessionStore
    from identification.analyses.online_press import estimate_stiffness, model_verdict

    cfg = copy.deepcopy(load_config("configs/press-sim.toml"))
    cfg["plan"].update(n_series=args.series, n_steps_up=args.steps_up, n_samples=4, settle_time=0.02,
                       q_max=12000.0)
    cfg["correction"].update(tolerance=60.0, max_iterations=6)
    cfg["online"] = {"enabled": True, "target_rel_std": 1e-9}  # never met: every series is fitted
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.sqlite"
        res = asyncio.run(run(cfg, str(path), show_progress=False, handle_sigint=False))
        with SessionStore(path) as store:
            ests = [e for e in store.events(res.session_id, kind="estimate")]
            arr = press_arrays(store, res.session_id)
    lat = [e.t - e.body["trigger_t"] for e in ests]
    fit = [e.body["elapsed_s"] for e in ests]
    worker = [e.body["verdict"]["elapsed_s"] for e in ests if "elapsed_s" in e.body.get("verdict", {})]
    plain, plain_v = [], []
    p = None
    for n in range(1, arr.z.shape[0] + 1):
        t0 = time.perf_counter()
        p = estimate_stiffness(arr.z[:n], arr.q[:n], arr.q_desired, arr.sigmas, arr.sensors, p0=p).p
        plain.append(time.perf_counter() - t0)
        if n >= 2:
            t0 = time.perf_counter()
            model_verdict(arr.z[:n], arr.q[:n], arr.q_desired, arr.sigmas, arr.sensors,
                          **verdict_options(cfg.get("analysis") or {}))
            plain_v.append(time.perf_counter() - t0)
    print(f"status {res.status}, {len(ests)} estimates, {arr.z.shape[1]} setpoints per series")
    for name, v in (("event -> estimate event (bus, fit, verdict)", lat),
                    ("M1 fit in the pool (elapsed_s)", fit), ("plain estimate_stiffness call", plain),
                    ("verdict in the worker", worker), ("plain model_verdict call", plain_v)):
        if not v:
            continue
        ms = 1e3 * np.asarray(v)
        print(f"{name:<44} median {statistics.median(ms):7.1f} ms   worst {ms.max():7.1f} ms")


if __name__ == "__main__":
    main()
