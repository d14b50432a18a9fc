"""Adjoint input design (seed 002): gradient cost, optimiser comparison, Monte Carlo of the estimates.

1. Cost of one adjoint gradient in forward-solve equivalents for 100, 1,000 and 10,000 input
   samples next to a one-sided finite-difference gradient (N+1 forward solves; timed at 100 and
   1,000 samples, extrapolated linearly at 10,000).
2. The paper's gradient step against L-BFGS on the same penalised problem from the same start.
3. Monte Carlo over noise seeds with the simulator truths (simulators/physics) for the data and
   the identification models for the fit: oscillator c2 (optimised vs F0 vs full-amplitude sine),
   pendulum s_p, d_p (optimised vs F_comp vs F0; fitted as the rig analyses, with the cart-friction
   nuisance parameters of [fit.nuisance], since the truth has cart Coulomb friction), crane k23, d23,
   J3 (adjoint vs the shipped training multisine of configs/crane-sim.toml, same duration and peak
   torque).

Design point: the configs' ``[adjoint.nominal]`` (prior knowledge off the truth; the crane's from
configs/crane-adjoint-sim.toml), and every fit starts there - the simulator truth only makes the data and
is compared with. ``--design-at-truth`` designs (and starts the fits) at the truth instead: the best case,
which a real rig cannot have.

    .venv/bin/python benchmarks/bench_adjoint.py [--seeds 100] [--skip-mc] [--only osc,pend,crane]
        [--design-at-truth]
    .venv/bin/python benchmarks/bench_adjoint.py --convergence sqp,lbfgs [--only osc,pend,crane]
        [--reach 8,none] [--scale-nominal 1,0.85,1.15]

``--reach``: SQP's cost weight (``adjoint_sqp.cost_weight``; ``none`` = the unweighted cost before issue 44);
``--scale-nominal``: design points off the shipped one, the identified parameters of ``[adjoint.nominal]``
times each factor (how the iteration counts depend on the design point; still prior knowledge, no truth).
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.rigs.adjoint.design import lagged_mean  # noqa: E402
from identification.analyses.adjoint_plants import design_problem, fit_record, reference_inputs  # noqa: E402
from identification.design.adjoint_design import (  # noqa: E402
    DesignProblem,
    evaluate,
    fit_parameters,
    optimize_input,
    simulate_output,
)
from identification.design.multisine import design_multisine  # noqa: E402
from identification.selection.model_selection import fit_structure  # noqa: E402
from simulators.physics import oscillator as osc_sim  # noqa: E402
from simulators.physics import pendulum as pend_sim  # noqa: E402
from simulators.physics.crane import CraneTruth, simulate_axis  # noqa: E402


def _toml(name: str) -> dict:
    with open(ROOT / "configs" / name, "rb") as fh:
        return tomllib.load(fh)


def design_point(name: str, truth: dict, at_truth: bool) -> dict:
    """The design point of config ``name``: its ``[adjoint.nominal]``, or (``at_truth``, best case) the truth
    over it."""
    nominal = {k: float(v) for k, v in _toml(name)["adjoint"]["nominal"].items()}
    return {**nominal, **{k: float(v) for k, v in truth.items() if k in nominal}} if at_truth else nominal


def _best_time(fn, repeat: int = 3) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------------------------ 1. gradient cost
def bench_gradient_cost(plant: str, truth: dict, spec: dict) -> None:
    print(f"\n## gradient cost, {plant} (t_f fixed, n_sub = 1, criterion D)")
    print(f"{'N':>7} {'forward s':>10} {'adjoint grad s':>15} {'grad/fwd':>9} {'FD grad s':>12} {'FD/fwd':>8}"
          f" {'FD/adjoint':>11}")
    rng = np.random.default_rng(1)
    for n in (100, 1000, 10000):
        s = {**spec, "dt": spec["t_f"] / n, "n_sub": 1}
        pb = design_problem(plant, truth, s)
        u = rng.uniform(-0.8, 0.8, n) * pb.bounds()[1][0, 0]
        rep = 3 if n <= 1000 else 1
        t_fwd = _best_time(lambda pb=pb, u=u: evaluate(pb, u, gradient=False), rep)
        t_adj = _best_time(lambda pb=pb, u=u: evaluate(pb, u, gradient=True), rep)
        if n <= 1000:
            def fd(pb=pb, u=u):
                j0 = evaluate(pb, u, gradient=False).cost
                for k in range(u.size):
                    up = u.copy()
                    up[k] += 1e-6
                    evaluate(pb, up, gradient=False).cost - j0  # noqa: B018
            t_fd = _best_time(fd, 1)
            fd_note = ""
        else:
            t_fd = (n + 1) * t_fwd
            fd_note = " (extrapolated: (N+1) x forward)"
        print(f"{n:>7} {t_fwd:>10.4f} {t_adj:>15.4f} {t_adj / t_fwd:>9.2f} {t_fd:>12.2f} {t_fd / t_fwd:>8.0f}"
              f" {t_fd / t_adj:>11.0f}{fd_note}")


# ------------------------------------------------------------------------------ 2. optimisers
def _reach(history: list[float], target: float) -> int | None:
    for i, c in enumerate(history):
        if c <= target:
            return i + 1
    return None


def bench_optimisers(plant: str, truth: dict, spec: dict, max_iter: int) -> None:
    print(f"\n## optimisers, {plant}: same penalised cost (end multipliers 0), start F0, "
          f"<= {max_iter} iterations")
    res = {}
    for method in ("gradient", "lbfgs"):
        pb = design_problem(plant, truth, spec)
        u0 = reference_inputs(pb, float(spec.get("start", 0.5)))["F0"]
        res[method] = optimize_input(pb, u0, method=method, max_iter=max_iter, rounds=1, tol=1e-12)
    target = res["gradient"].cost_history[-1]
    print(f"{'method':>9} {'iter':>5} {'solves':>7} {'time s':>7} {'final cost':>11} "
          f"{'iter to paper final':>20} std")
    for method, r in res.items():
        it99 = _reach(r.cost_history, target)
        print(f"{method:>9} {r.iterations:>5} {r.n_evaluations:>7} {r.time:>7.1f} {r.cost_history[-1]:>11.4f}"
              f" {str(it99) if it99 else '-':>20} {np.array2string(r.std, precision=3)}")


# ------------------------------------------------------------------------------ 3. Monte Carlo
def _summary(name: str, est: np.ndarray, true: np.ndarray, pred: np.ndarray, names) -> str:
    m, s = est.mean(axis=0), est.std(axis=0, ddof=1)
    parts = [f"{n}: mean {mi:.6g} (bias {mi - ti:+.3g}), std {si:.3g}, predicted {pi:.3g}"
             for n, mi, si, ti, pi in zip(names, m, s, true, pred, strict=True)]
    return f"{name:>10}  " + "; ".join(parts)


def mc_oscillator(seeds: int, at_truth: bool = False) -> dict:
    cfg = _toml("oscillator-sim.toml")
    truth = osc_sim.OscillatorTruth.from_config(cfg["simulator"]["truth"])
    spec = cfg["adjoint"]
    pb = design_problem("oscillator", design_point("oscillator-sim.toml", truth.to_dict(), at_truth), spec)
    b_true = np.array([truth.to_dict()[n] for n in pb.model.param_names])
    start = float(cfg.get("fit", {}).get("start", 1.0))
    t0 = time.perf_counter()
    r = optimize_input(pb, reference_inputs(pb)["F0"], max_iter=spec["max_iter"], rounds=spec["rounds"],
                       end_tol=spec["end_tol"])
    print(f"\n## Monte Carlo, oscillator ({seeds} seeds): design at {pb.b.tolist()} "
          f"({'truth, best case' if at_truth else '[adjoint.nominal]'}) {time.perf_counter() - t0:.1f} s, "
          f"{r.iterations} iterations, end residuals {r.end_residuals}, success {r.success}")
    signals = {"optimised": r.u[:, 0], **{k: v[:, 0] for k, v in reference_inputs(pb).items()}}
    meas_dt = 0.001
    rep = int(round(pb.dt / meas_dt))
    model = pb.model
    out = {}
    for name, sig in signals.items():
        uf = np.repeat(sig, rep)
        _, _, Y = simulate_output(model, pb.b, uf, meas_dt, 1)
        fisher = np.einsum("nyi,nyj->ij", Y, Y) / truth.position_noise**2
        pred = np.sqrt(np.diag(np.linalg.inv(fisher)))
        est = []
        for seed in range(seeds):
            d = osc_sim.simulate(truth, uf, meas_dt, seed)
            est.append(fit_parameters(model, uf, meas_dt, d["x2"], pb.b * start).b)
        est = np.array(est)
        out[name] = est.std(axis=0, ddof=1)
        print(_summary(name, est, b_true, pred, model.param_names) + " (predicted at the design point)")
    o = out["optimised"][0]
    print(f"std ratio c2: optimised/F0 = {o / out['F0'][0]:.3f}, optimised/sine = {o / out['sine'][0]:.3f}")
    return out


def mc_pendulum(seeds: int, at_truth: bool = False) -> dict:
    """Pendulum Monte Carlo fitted as the rig analyses (``hil analyze``): ``fit_record`` with the cart's
    viscous and Coulomb friction as nuisance parameters (``[fit.nuisance]``, smooth sign
    ``[fit].friction_speed_eps``), the command seen through the actuator's known lag (``[fit].input_lag``);
    the joint's Coulomb friction and the encoder stay unmodelled as on the rig. Predicted std: the design
    noise's, marginal over the nuisances (the rig's ``predicted_std``)."""
    cfg = _toml("pendulum-sim.toml")
    truth = pend_sim.PendulumTruth.from_config(cfg["simulator"]["truth"])
    spec, fit_cfg = cfg["adjoint"], cfg["fit"]
    values = design_point("pendulum-sim.toml", truth.model_values(), at_truth)
    pb = design_problem("pendulum", values, spec)
    b_true = np.array([truth.model_values()[n] for n in pb.model.param_names])
    t0 = time.perf_counter()
    r = optimize_input(pb, reference_inputs(pb)["F0"], method=spec["method"], max_iter=spec["max_iter"],
                       rounds=spec["rounds"], end_tol=spec["end_tol"])
    ev = evaluate(pb, r.u, gradient=False)
    nuisance = {n: float(values.get(n, v)) for n, v in fit_cfg.get("nuisance", {}).items()}
    print(f"\n## Monte Carlo, pendulum ({seeds} seeds): design at {pb.b.tolist()} "
          f"({'truth, best case' if at_truth else '[adjoint.nominal]'}) {time.perf_counter() - t0:.1f} s, "
          f"{r.iterations} iterations, end residuals {r.end_residuals}, success {r.success}, "
          f"max |phi| {np.abs(ev.x[:, 1]).max():.2f} rad, max |x_c| {np.abs(ev.x[:, 0]).max():.2f} m")
    print(f"fit: the rig's (fit_record), nuisances {nuisance}, friction eps "
          f"{fit_cfg.get('friction_speed_eps')} m/s, input lag {fit_cfg.get('input_lag', 0.0)} s, "
          f"start {fit_cfg.get('start', 1.0)} x the design point")
    refs = reference_inputs(pb)
    signals = {"optimised": r.u[:, 0], "F_comp": refs["sine"][:, 0], "F0": refs["F0"][:, 0]}
    meas_dt = float(spec["meas_dt"])
    rep = int(round(pb.dt / meas_dt))
    params = list(pb.model.param_names)
    out = {}
    t_mc = time.perf_counter()
    for name, sig in signals.items():
        uf = np.repeat(sig, rep)
        u_fit = lagged_mean(uf, float(fit_cfg.get("input_lag", 0.0)), meas_dt)
        est, pred, failed = [], None, 0
        for seed in range(seeds):
            d = pend_sim.simulate(truth, uf, meas_dt, seed)
            f = fit_record("pendulum", values, params, nuisance, u_fit, meas_dt, d["angle"],
                           float(spec["sigma"]), start=float(fit_cfg.get("start", 1.0)),
                           friction_eps=fit_cfg.get("friction_speed_eps"))
            failed += not f.success
            pred = f.predicted_std[:len(params)]   # at the design point: the same for every seed
            est.append(f.estimate[:len(params)])
        est = np.array(est)
        out[name] = est.std(axis=0, ddof=1)
        tail = f"; {failed} fits not converged" if failed else ""
        print(_summary(name, est, b_true, pred, params) + tail)
    for j, n in enumerate(params):
        print(f"std ratio {n}: optimised/F_comp = {out['optimised'][j] / out['F_comp'][j]:.3f}, "
              f"optimised/F0 = {out['optimised'][j] / out['F0'][j]:.3f}")
    print(f"Monte Carlo fits: {time.perf_counter() - t_mc:.0f} s")
    return out


def _training_multisine(cfg: dict) -> tuple[float, np.ndarray]:
    """The shipped training multisine, as daq.crane_experiment.design_excitation builds it (no export)."""
    exc = {k: v for k, v in cfg["excitation"].items() if k not in ("training", "validation", "export_dir")}
    exc.update(cfg["excitation"]["training"])
    dt = float(exc["dt"])
    duration = float(exc["duration"])
    n_periods = int(exc.get("n_periods", 1))
    ms = design_multisine(float(exc["f_min"]), float(exc["f_max"]), int(exc["n_lines"]), dt,
                          n_periods=n_periods, grid=str(exc.get("grid", "lin")), seed=int(exc.get("seed", 0)),
                          max_iter=int(exc.get("max_iter", 50)), period=duration / n_periods)
    peak = float(exc["amplitude"]) * float(cfg["devices"]["drive"]["torque_limit"])
    return dt, ms.signal / np.abs(ms.signal).max() * peak


def mc_crane(seeds: int, at_truth: bool = False) -> dict:
    cfg = _toml("crane-sim.toml")
    truth = CraneTruth.from_config(cfg["simulator"]["truth"])
    dt_ms, u_ms = _training_multisine(cfg)
    peak = float(np.abs(u_ms).max())
    duration = u_ms.size * dt_ms
    spec = {"t_f": duration, "u_max": peak}  # same duration and peak torque as the multisine
    point = design_point("crane-adjoint-sim.toml", truth.to_dict(), at_truth)
    pb = design_problem("crane", point, spec)
    rep = int(round(pb.dt / dt_ms))
    u0 = u_ms.reshape(pb.n_samples, rep).mean(axis=1)  # start: the multisine, held per design sample
    t0 = time.perf_counter()
    r = optimize_input(pb, u0, max_iter=300)
    ev = evaluate(pb, r.u, gradient=False)
    print(f"\n## Monte Carlo, crane ({seeds} seeds): design at {pb.b.tolist()} "
          f"({'truth, best case' if at_truth else '[adjoint.nominal]'}) {time.perf_counter() - t0:.1f} s, "
          f"{r.iterations} iterations, |u| <= {peak:.2f} N*m over {duration:.2f} s, end residuals "
          f"{ {k: round(v, 8) for k, v in r.end_residuals.items()} }, max |w1| (design model) "
          f"{np.abs(ev.x[:, 0]).max():.1f} rad/s, success {r.success}")
    p = truth.to_dict()
    names = ["J1", "J2", "k12", "d12", "J3", "k23", "d23", "viscous", "coulomb", "stribeck_torque",
             "stribeck_speed", "dead_time"]
    free = ["k23", "d23", "J3"]
    if at_truth:  # best case: everything but the mast at the truth
        start, fixed = p, {k: p[k] for k in names if k not in free}
    else:  # as the rig: friction and dead time fitted from [fit.nuisance], the rest of the chain nominal
        nuisance = {k: float(v) for k, v in _toml("crane-adjoint-sim.toml")["fit"]["nuisance"].items()}
        start = {**point, **{k: point.get(k, v) for k, v in nuisance.items()}}
        fixed = {k: start[k] for k in names if k not in free and k not in nuisance}
    signals = {"adjoint": np.repeat(r.u[:, 0], rep), "multisine": u_ms}
    decimate = 10
    out = {}
    for name, u in signals.items():
        est = []
        wmax = 0.0
        for seed in range(seeds):
            d = simulate_axis(truth, u, dt_ms, seed)
            wmax = max(wmax, float(np.abs(d["speed_true"]).max()))
            f = fit_structure("3m+visc+coul+strib+dt", u, d["speed"], dt_ms, fixed=fixed,
                              start={k: start[k] for k in names}, n_starts=1, decimate=decimate,
                              friction_eps=truth.friction_speed_eps)
            est.append([f.params[k] for k in free])
        est = np.array(est)
        # prediction: design model's Fisher for this input at the trace rate
        pb_pred = DesignProblem(pb.model, pb.b, dt_ms * decimate, u.size // decimate, -peak - 1e-9,
                                peak + 1e-9, n_sub=1, sigma=pb.sigma, meas_dt=dt_ms)
        fis = evaluate(pb_pred, u.reshape(-1, decimate).mean(axis=1), gradient=False).fisher
        pred = np.sqrt(np.diag(np.linalg.inv(fis)))
        out[name] = est.std(axis=0, ddof=1)
        line = _summary(name, est, np.array([p[k] for k in free]), pred, free)
        print(line + f"; max |w1| {wmax:.1f} rad/s")
    for j, n in enumerate(free):
        print(f"std ratio {n}: adjoint/multisine = {out['adjoint'][j] / out['multisine'][j]:.3f}")
    return out


# ------------------------------------------------------------------------------ 0. shipped convergence
CONFIGS = {"osc": "oscillator-sim", "pend": "pendulum-sim", "crane": "crane-adjoint-sim"}
PENALTY_MAX_ITER = {"osc": 1000, "pend": 300, "crane": 1000}  # per round, as the configs shipped with lbfgs


def bench_convergence(only: set[str], methods: list[str], reaches: list[float | None] | None = None,
                      scales: list[float] | None = None) -> None:
    """The shipped configs' designs (``hil design adjoint configs/<x>.toml``, the config's max_iter and
    tolerances) with each method: iterations, gradient solves, criterion, status, CPU and wall time. SQP
    once per ``reaches`` entry (default: the shipped weight), each design point once per ``scales`` entry
    (the identified parameters of ``[adjoint.nominal]`` times it; default 1: the shipped design point)."""
    import resource

    from daq.rigs import parse_config
    from daq.rigs.adjoint.design import nominal_values
    from daq.rigs.config import load_config
    from identification.design.adjoint_sqp import STEP_REACH

    print("\n## shipped designs: iterations to convergence (CPU s of this process; wall s inflated by load)")
    print(f"{'config':<18} {'x nom':>5} {'method':<7} {'reach':>5} {'iter':>5} {'solves':>7} "
          f"{'criterion':>12} {'CPU s':>7} {'wall s':>7} status")
    for key, name in CONFIGS.items():
        if key not in only:
            continue
        path = str(ROOT / "configs" / f"{name}.toml")
        cfg = parse_config(load_config(path), path)[1]
        a = cfg.adjoint
        for scale in scales or [1.0]:
            nominal = nominal_values(cfg)
            values = {**nominal, **{p: nominal[p] * scale for p in a.parameters}}
            for method in methods:
                for reach in (reaches or [STEP_REACH]) if method == "sqp" else [None]:
                    pb = design_problem(a.plant, values, a.spec())
                    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.perf_counter()
                    res = optimize_input(pb, reference_inputs(pb, a.start)["F0"], method=method,
                                         max_iter=a.max_iter if method == a.method else PENALTY_MAX_ITER[key],
                                         rounds=a.rounds, end_tol=a.end_tol, grad_tol=a.grad_tol,
                                         sqp_options={"reach": reach} if method == "sqp" else None)
                    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
                    shown = "-" if method != "sqp" else "none" if reach is None else f"{reach:g}"
                    print(f"{name:<18} {scale:>5g} {method:<7} {shown:>5} {res.iterations:>5} "
                          f"{res.n_evaluations:>7} {res.info_cost:>12.5f} {cpu:>7.1f} "
                          f"{time.perf_counter() - t0:>7.1f} {res.status}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--skip-mc", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--only", default="osc,pend,crane")
    ap.add_argument("--opt-iter", type=int, default=300)
    ap.add_argument("--design-at-truth", action="store_true",
                    help="design at the simulator truth: best case, a real rig has no truth")
    ap.add_argument("--convergence", default="",
                    help="only the shipped designs' convergence with these methods, e.g. sqp,lbfgs")
    ap.add_argument("--reach", default="",
                    help="with --convergence: SQP cost weights to compare, e.g. 8,none (none: unweighted)")
    ap.add_argument("--scale-nominal", default="",
                    help="with --convergence: design points, the identified nominal values times these")
    args = ap.parse_args()
    if args.convergence:
        reaches = [None if r == "none" else float(r) for r in args.reach.split(",")] if args.reach else None
        scales = [float(f) for f in args.scale_nominal.split(",")] if args.scale_nominal else None
        bench_convergence(set(args.only.split(",")), args.convergence.split(","), reaches, scales)
        return 0
    at = args.design_at_truth
    only = set(args.only.split(","))
    osc_cfg, pend_cfg = _toml("oscillator-sim.toml"), _toml("pendulum-sim.toml")
    osc_sim_truth = osc_sim.OscillatorTruth.from_config(osc_cfg["simulator"]["truth"]).to_dict()
    pend_sim_truth = pend_sim.PendulumTruth.from_config(pend_cfg["simulator"]["truth"]).to_dict()
    osc_truth = design_point("oscillator-sim.toml", osc_sim_truth, at)  # the design point (name kept)
    pend_truth = design_point("pendulum-sim.toml", pend_sim_truth, at)
    osc_spec = _toml("oscillator-sim.toml")["adjoint"]
    pend_spec = _toml("pendulum-sim.toml")["adjoint"]
    if not args.skip_cost:
        if "osc" in only:
            bench_gradient_cost("oscillator", osc_truth, osc_spec)
        if "pend" in only:
            bench_gradient_cost("pendulum", pend_truth, pend_spec)
        if "osc" in only:
            bench_optimisers("oscillator", osc_truth, osc_spec, args.opt_iter)
        if "pend" in only:
            bench_optimisers("pendulum", pend_truth, pend_spec, args.opt_iter)
    if not args.skip_mc:
        if "osc" in only:
            mc_oscillator(args.seeds, at)
        if "pend" in only:
            mc_pendulum(args.seeds, at)
        if "crane" in only:
            mc_crane(args.seeds, at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
