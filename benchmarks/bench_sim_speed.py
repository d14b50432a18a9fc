"""Simulated rigs at several clock speeds, side by side (issue 43): wall time, recorded (simulated) span,
how the run ended and the analysis' verdict.

    PYTHONPATH=. python benchmarks/bench_sim_speed.py --rig press --speeds 1 10
    PYTHONPATH=. python benchmarks/bench_sim_speed.py --rig crane --speeds 1 10 20 50
    PYTHONPATH=. python benchmarks/bench_sim_speed.py --rig press --speeds 10 40 --series 3  # a quicker look

The highest speed a rig holds on a machine is the highest that ends ``complete`` (a speed too high stops the
run as "simulation too slow"); give the machine's load (printed first) with the figures. Each run uses a
fresh store in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import tempfile
import time
from pathlib import Path

from daq.rigs.analysis import analyze_session
from daq.rigs.config import load_config
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore

CONFIGS = {"press": "configs/press-sim.toml", "crane": "configs/crane-sim.toml",
           "oscillator": "configs/oscillator-sim.toml", "pendulum": "configs/pendulum-sim.toml",
           "machine-tool": "configs/machine-tool-sim.toml"}


def _config(rig: str, series: int | None) -> dict:
    cfg = copy.deepcopy(load_config(CONFIGS[rig]))
    if rig == "press" and series is not None:
        cfg["plan"]["n_series"] = series
    if rig in ("oscillator", "pendulum"):
        cfg["plan"]["design"] = "sine"  # no adjoint design: the bench times the run, not the optimiser
    return cfg


def _verdict(report: dict) -> str:
    summary = report.get("summary") or {}
    if report.get("verdicts"):
        return " ".join(f"{m} {v}" for m, v in report["verdicts"].items())
    return str(summary.get("verdict") or report.get("chosen") or report.get("structure") or "-")


async def one(rig: str, speed: float, series: int | None, analyze: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "s.sqlite"
        t0 = time.perf_counter()
        result = await run(_config(rig, series), store, show_progress=False, handle_sigint=False,
                           sim_speed=speed)
        wall = time.perf_counter() - t0
        out = {"rig": rig, "speed": speed, "status": result.status, "wall_s": wall,
               "reason": result.reason or ""}
        with SessionStore(store) as st:
            events = st.events(result.session_id)
            out["recorded_s"] = events[-1].t - events[0].t if events else 0.0
            if analyze and result.status == "complete":
                _, analysis, kind, _ = analyze_session(st, result.session_id)
                out["verdict"] = _verdict(kind.report_dict(analysis))
                out["summary"] = kind.analysis_summary(kind.report_dict(analysis))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rig", choices=sorted(CONFIGS), default="press")
    ap.add_argument("--speeds", type=float, nargs="+", default=[1.0, 10.0])
    ap.add_argument("--series", type=int, default=None, help="press: [plan].n_series (default: the config's)")
    ap.add_argument("--no-analyze", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'rig':12s} {'speed':>6s} {'status':9s} {'wall s':>8s} {'recorded s':>11s}  verdict / reason")
    for speed in args.speeds:
        r = asyncio.run(one(args.rig, speed, args.series, not args.no_analyze))
        print(f"{r['rig']:12s} {r['speed']:6g} {r['status']:9s} {r['wall_s']:8.1f} {r['recorded_s']:11.1f}  "
              f"{r.get('verdict') or r['reason']}", flush=True)
        if r.get("summary"):
            print(f"{'':40s}{r['summary']}", flush=True)


if __name__ == "__main__":
    main()
