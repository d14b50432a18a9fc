"""Detection rates of the nonlinear-distortion test over seeds (issue 31, item 4).

Cases (the known-answer plants of tests/test_nonlinear_distortion.py and the crane):
- "linear": a 4th-order Chebyshev low-pass (discrete time), 4 realisations x 4 periods of 1024 samples;
- "cubic spring", "Coulomb friction": 1 kg on 40 kN/m with ``2e9 x^3`` or 5 N of Coulomb friction, same
  experiment at 100 N rms;
- "crane shipped" and "crane viscous only": simulators/physics/crane.py with the truth of
  configs/crane-sim.toml (Coulomb + Stribeck friction), and the same with ``coulomb = stribeck_torque =
  0``, under the shipped ``[distortion]`` plan (3 realisations x (2 settling + 2 measured) periods of 1 s
  at 10 kHz, 1-100 Hz, 10 N*m peak, cubic trend removed), torque command -> measured motor speed.
- "machine tool": the simulated front end (simulators/machine_tool_sim.py, the truth and noise of
  configs/machine-tool-sim.toml, a linear structure) under its shipped ``[distortion]`` plan: 3 odd
  random-phase multisines (``SOUR:DET 4``) x (3 settling + 2 measured) periods of 2 s, 10-240 Hz, 100 N rms
  at T1x, 0.05 m; force -> acceleration at T1x.
One seed = one draw of the lines, phases and noise (the front end: of the phases and noise). Prints the
share detected at alpha = 1 % and the median level.

    nice .venv/bin/python benchmarks/bench_distortion_rates.py [--seeds 100] [--crane-seeds 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daq.config.load import read_toml  # noqa: E402
from daq.rigs.crane.distortion_config import DistortionTable, design_realisations, excited_bins  # noqa: E402
from identification.frequency.nonlinear_distortion import (  # noqa: E402
    best_linear_approximation,
    distortion_from_records,
    distortion_verdict,
)
from simulators.physics.crane import CraneTruth, simulate_axis  # noqa: E402
from tests.test_nonlinear_distortion import DT, _experiments, _linear, _oscillator  # noqa: E402


def _known_answer(plant, seeds, u_scale):
    return [distortion_verdict(best_linear_approximation(u, y, DT, b)) for b, u, y in
            _experiments(plant, seeds, u_scale=u_scale)]


def _crane(truth: CraneTruth, table: DistortionTable, seed: int):
    dt = 1e-4
    table = msgspec.structs.replace(table, seed=seed)
    runs = [simulate_axis(truth, u, dt, rng=seed * 100 + m)
            for m, u in enumerate(design_realisations(table, dt, 20.0))]
    _, v = distortion_from_records([r["torque_cmd"] for r in runs], [r["speed"] for r in runs], dt,
                                   round(table.period / dt), excited_bins(table, dt), settle=table.n_settle,
                                   alpha=table.alpha, trend_degree=table.trend_degree)
    return v


def _machine_tool(seed: int):
    from daq.rigs.machine_tool.distortion import DistortionRecords, analyze
    from simulators.machine_tool_sim import MachineToolFrontEndSim

    raw = read_toml(Path(__file__).resolve().parents[1] / "configs/machine-tool-sim.toml")
    raw["simulator"]["seed"] = seed
    d, e = raw["distortion"], raw["excitation"]
    dev = MachineToolFrontEndSim(raw).dev
    dev.position, dev.dof, dev.output, dev.detection = raw["plan"]["positions"][0], "T1x", True, d["group"]
    dev.amplitude, dev.f_start, dev.f_stop, dev.period, dev.dt = (e["amplitude"], e["f_min"], e["f_max"],
                                                                 e["period"], e["dt"])
    dev.periods, dev.settle = d["n_periods"], d["n_settle"]
    force, accel = [], []
    for m in range(d["n_realisations"]):
        dev.source_seed = seed * 100 + m
        dev.measure()
        force.append(dev.force)
        accel.append(dev.accel[:, dev.truth.obs_labels.index("T1x")])
    cfg = type("Cfg", (), {"distortion": type("D", (), {"alpha": d["alpha"]})})
    return analyze(DistortionRecords(force, accel, e["dt"], e["period"], "T1x"), cfg).verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--crane-seeds", type=int, default=20)
    a = ap.parse_args()
    cfg = read_toml(Path(__file__).resolve().parents[1] / "configs/crane-sim.toml")
    table = msgspec.convert(cfg["distortion"], DistortionTable)
    shipped = CraneTruth.from_config(cfg["simulator"]["truth"])
    viscous = dataclasses.replace(shipped, coulomb=0.0, stribeck_torque=0.0)
    cases = {
        "linear": lambda: _known_answer(_linear, range(a.seeds), 1.0),
        "cubic spring": lambda: _known_answer(lambda x: _oscillator(x, k3=2e9), range(a.seeds), 100.0),
        "Coulomb friction": lambda: _known_answer(lambda x: _oscillator(x, coulomb=5.0), range(a.seeds),
                                                  100.0),
        "crane shipped": lambda: [_crane(shipped, table, s) for s in range(a.crane_seeds)],
        "crane viscous only": lambda: [_crane(viscous, table, s) for s in range(a.crane_seeds)],
        "machine tool": lambda: [_machine_tool(s) for s in range(a.crane_seeds)],
    }
    print(f"{'case':<20} {'seeds':>5} {'detected':>9} {'median level dB':>16} {'wall s':>7} {'cpu s':>7}")
    for name, fn in cases.items():
        w0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
        vs = fn()
        w, c = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_SELF).ru_utime - c0
        det = sum(v.detected for v in vs)
        level = np.median([v.level_db for v in vs])
        print(f"{name:<20} {len(vs):>5} {det:>4} ({100 * det / len(vs):3.0f} %) {level:>16.1f} "
              f"{w:>7.1f} {c:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
