"""Simulated structure of a one-axis machine tool (seed paper 003, section 3.1): the simulator's truth.

This is the plant behind the simulated modal-test front end (:mod:`simulators.machine_tool_sim`), not a
candidate model: the identification has its own model (``identification.models.machine_tool_model``).
Today the
truth has the same structure and the same known constants as that model (the identification can reach
it exactly); ``TruthConstants.disturbed()`` (the front end's ``variant = "disturbed"``) makes the
simulated machine differ from the model in what the identification does not estimate.

Bodies and DOFs (SI units; x lateral, y up, z along the feed axis), 21 in all: a bed of two rigid
segments (front, back; 6 DOF each), a rigid table (6 DOF), the screw's axial motion and angle, the
motor angle. Elements, each a spring and/or viscous damper on a relative motion ``g . q``:

* the bed joint between the segments (6 springs, stiffness-proportional material damping);
* mounting elements ME1..ME3 to the ground (x, y, z spring and damper each);
* four guide shoes between the table and the rail point below it (interpolated between the bed
  segments, so the coupling moves with the table): springs LGS x, y, about x and y, known dampers x, y;
* fixed bearing FB (screw axial vs front bed), coupling CPL (motor vs screw angle), screw rotation
  vs bed (damper BSD_crz), the motor held by the position loop (servo spring and damper);
* the nut BSD_kz (table axial vs screw axial + lead x angle) in series with the screw shaft between
  bearing and nut (``EA / L``, L grows with the axis position ``s``).

The truth is assembled element by element at each position (no parameter sensitivities needed here).
:func:`simulate_modal_test` produces a time-domain modal test: a force at one measured DOF, noisy
accelerations at all measured DOFs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.signal

__all__ = ["PARAM_NAMES", "NOMINAL", "NODES", "TruthConstants", "MachineToolTruth", "simulate_modal_test"]

STIFFNESS_NAMES = [f"ME{i}_k{d}" for i in (1, 2, 3) for d in "xyz"] + [
    "FB_kz", "CPL_krz", "BSD_kz", "LGS_kx", "LGS_ky", "LGS_krx", "LGS_kry"]
DAMPING_NAMES = [f"ME{i}_c{d}" for i in (1, 2, 3) for d in "xyz"] + ["CPL_crz", "BSD_crz"]
PARAM_NAMES = STIFFNESS_NAMES + DAMPING_NAMES

#: Default truth (``[simulator.truth]`` overrides any of them): N/m, N*m/rad (k); N*s/m, N*m*s/rad (c).
NOMINAL: dict[str, float] = {
    "ME1_kx": 1.2e8, "ME1_ky": 4.0e8, "ME1_kz": 1.0e8,
    "ME2_kx": 0.9e8, "ME2_ky": 3.2e8, "ME2_kz": 0.8e8,
    "ME3_kx": 1.1e8, "ME3_ky": 3.6e8, "ME3_kz": 1.2e8,
    "FB_kz": 5.0e8, "CPL_krz": 6.0e3, "BSD_kz": 5.0e8,
    "LGS_kx": 4.0e8, "LGS_ky": 6.0e8, "LGS_krx": 4.0e7, "LGS_kry": 2.0e7,
    "ME1_cx": 1.0e4, "ME1_cy": 2.0e4, "ME1_cz": 0.8e4,
    "ME2_cx": 0.8e4, "ME2_cy": 1.5e4, "ME2_cz": 1.0e4,
    "ME3_cx": 1.2e4, "ME3_cy": 1.8e4, "ME3_cz": 0.9e4,
    "CPL_crz": 0.12, "BSD_crz": 0.2,
}


def truth_values(params: Mapping[str, float] | np.ndarray | None) -> dict[str, float]:
    """All 27 truth values by name (missing names: :data:`NOMINAL`); unknown names raise ValueError."""
    if params is None:
        return dict(NOMINAL)
    if isinstance(params, Mapping):
        unknown = set(params) - set(PARAM_NAMES)
        if unknown:
            raise ValueError(f"unknown machine-tool parameter(s) {sorted(unknown)}")
        return {n: float(params.get(n, NOMINAL[n])) for n in PARAM_NAMES}
    v = np.asarray(params, dtype=float)
    if v.shape != (len(PARAM_NAMES),):
        raise ValueError(f"parameter vector must have {len(PARAM_NAMES)} entries")
    return {n: float(x) for n, x in zip(PARAM_NAMES, v, strict=True)}


@dataclass(frozen=True)
class TruthConstants:
    """The simulated machine's masses, inertias, geometry and known elements (SI units)."""

    bed_mass: tuple[float, float] = (1500.0, 1300.0)  # front, back segment, kg
    bed_size: tuple[float, float, float] = (1.0, 0.6, 0.8)  # x, y, z extent of one segment, m
    table_mass: float = 600.0
    table_size: tuple[float, float, float] = (0.7, 0.2, 0.7)
    screw_mass: float = 12.0  # axial, kg
    screw_inertia: float = 2.8e-3  # kg*m^2 about z
    motor_inertia: float = 2.5e-3
    lead: float = 0.02  # m per revolution
    screw_EA: float = 2.6e8  # N, axial stiffness x length of the shaft
    servo_k: float = 6.0e3  # N*m/rad, position loop / brake holding the motor
    servo_c: float = 0.5  # N*m*s/rad
    joint_k: tuple[float, ...] = (6e9, 4e9, 8e9, 4.0e8, 3.0e8, 2.5e8)  # bed joint x,y,z,rx,ry,rz
    joint_y: float = 0.3  # height of the bed joint, m
    guide_c: tuple[float, float] = (3.0e3, 4.0e3)  # damping per shoe, x and y, N*s/m
    material_beta: float = 2.0e-5  # s, stiffness-proportional damping of the bed joint
    travel: float = 0.6  # m
    table_z0: float = 0.5  # table centre z at s = 0, m
    shoe_half: tuple[float, float] = (0.3, 0.15)  # shoe offsets +-x, +-z from the table centre
    rail_y: float = 0.6
    table_cg_y: float = 0.72
    screw_y: float = 0.45
    fb_z: float = 0.1  # fixed bearing position, m
    me_points: tuple[tuple[float, float, float], ...] = ((0.0, 0.0, 0.1), (-0.45, 0.0, 1.5), (0.45, 0.0, 1.5))

    def disturbed(self, factor: float = 1.0) -> TruthConstants:
        """The same machine with masses, inertias, bed joint and screw a few per cent (x ``factor``) off."""
        f = float(factor)

        def sc(x, r):
            return x * (1.0 + f * r)

        return dataclasses.replace(
            self,
            bed_mass=(sc(self.bed_mass[0], 0.04), sc(self.bed_mass[1], -0.03)),
            table_mass=sc(self.table_mass, 0.05),
            screw_inertia=sc(self.screw_inertia, -0.06),
            motor_inertia=sc(self.motor_inertia, 0.08),
            screw_EA=sc(self.screw_EA, -0.05),
            joint_k=tuple(sc(k, r) for k, r in zip(self.joint_k, (0.05, -0.04, 0.03, -0.06, 0.05, -0.05),
                                                    strict=True)),
            table_cg_y=self.table_cg_y + f * 0.01,
        )


#: Accelerometer points: name -> (body, offset from the body's centre of mass, directions).
NODES: tuple[tuple[str, str, tuple[float, float, float], str], ...] = (
    ("T1", "table", (-0.25, 0.08, -0.25), "xyz"),
    ("T2", "table", (0.25, 0.08, 0.25), "xyz"),
    ("T3", "table", (0.25, 0.08, -0.25), "xyz"),
    ("B1", "front", (-0.45, 0.3, -0.35), "xyz"),
    ("B2", "front", (0.45, 0.3, -0.35), "xyz"),
    ("B3", "back", (-0.45, 0.3, 0.35), "xyz"),
    ("B4", "back", (0.45, 0.3, 0.35), "xyz"),
    ("B5", "front", (0.5, 0.0, 0.3), "xy"),
    ("B6", "back", (0.5, 0.0, -0.3), "xy"),
    ("S", "screw", (0.0, 0.0, 0.0), "z"),
)

_BODY = {"front": 0, "back": 6, "table": 12}
N_DOF = 21  # front bed 6, back bed 6, table 6, screw axial, screw angle, motor angle
_US, _TS, _TM = 18, 19, 20
_AXIS = {"x": 0, "y": 1, "z": 2}


def _point(body: str, r: np.ndarray) -> np.ndarray:
    """3 x N_DOF map from the DOFs to the translation of a point at offset r on a rigid body."""
    T = np.zeros((3, N_DOF))
    i = _BODY[body]
    T[:, i:i + 3] = np.eye(3)
    T[:, i + 3:i + 6] = -np.array([[0.0, -r[2], r[1]], [r[2], 0.0, -r[0]], [-r[1], r[0], 0.0]])
    return T


def _rot(body: str) -> np.ndarray:
    T = np.zeros((3, N_DOF))
    i = _BODY[body]
    T[:, i + 3:i + 6] = np.eye(3)
    return T


def _unit(*pairs: tuple[int, float]) -> np.ndarray:
    g = np.zeros(N_DOF)
    for i, v in pairs:
        g[i] += v
    return g


class MachineToolTruth:
    """The simulated structure with its parameter values: M, K, C at any axis position, the sensors."""

    def __init__(self, params: Mapping[str, float] | np.ndarray | None = None,
                 constants: TruthConstants | None = None,
                 nodes: Sequence[tuple[str, str, tuple[float, float, float], str]] = NODES):
        self.p = truth_values(params)
        self.c = constants or TruthConstants()
        self.nodes = tuple(nodes)
        self.obs_labels = [f"{n}{d}" for n, _, _, dirs in self.nodes for d in dirs]
        self.M = self._mass()
        self.O = self._observation()

    def _mass(self) -> np.ndarray:
        c = self.c
        m = np.zeros(N_DOF)
        for body, mass, size in (("front", c.bed_mass[0], c.bed_size), ("back", c.bed_mass[1], c.bed_size),
                                 ("table", c.table_mass, c.table_size)):
            a, b, d = size
            i = _BODY[body]
            m[i:i + 3] = mass
            m[i + 3:i + 6] = np.array([b * b + d * d, a * a + d * d, a * a + b * b]) * mass / 12.0
        m[_US], m[_TS], m[_TM] = c.screw_mass, c.screw_inertia, c.motor_inertia
        return np.diag(m)

    def _observation(self) -> np.ndarray:
        """(n_obs, N_DOF): DOFs -> measured translations (offsets move with the bodies, not with s)."""
        rows = []
        for _, body, off, dirs in self.nodes:
            if body == "screw":
                rows += [_unit((_US, 1.0)) if d == "z" else np.zeros(N_DOF) for d in dirs]
            else:
                T = _point(body, np.asarray(off, dtype=float))
                rows += [T[_AXIS[d]] for d in dirs]
        return np.array(rows)

    def matrices(self, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """M, K, C at axis position ``s`` (m), assembled element by element."""
        c, p = self.c, self.p
        K = np.zeros((N_DOF, N_DOF))
        C = np.zeros((N_DOF, N_DOF))

        def element(g: np.ndarray, k: float = 0.0, d: float = 0.0) -> None:
            gg = np.outer(g, g)
            K[:] += k * gg
            C[:] += d * gg

        lz, hy = c.bed_size[2], c.bed_size[1] / 2
        cen = {"front": np.array([0.0, hy, lz / 2]), "back": np.array([0.0, hy, 1.5 * lz]),
               "table": np.array([0.0, c.table_cg_y, c.table_z0 + s])}
        zf, zb = cen["front"][2], cen["back"][2]

        def bed_at(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Translation and rotation of the bed at P, interpolated between the segments along z."""
            w = float(np.clip((P[2] - zf) / (zb - zf), 0.0, 1.0))
            t = (1 - w) * _point("front", P - cen["front"]) + w * _point("back", P - cen["back"])
            return t, (1 - w) * _rot("front") + w * _rot("back")

        # bed joint: relative motion of the two segments at the joint point
        J = np.array([0.0, c.joint_y, lz])
        G = np.vstack([_point("back", J - cen["back"]) - _point("front", J - cen["front"]),
                       _rot("back") - _rot("front")])
        for g, k in zip(G, c.joint_k, strict=True):
            element(g, k, c.material_beta * k)
        # motor held by the position loop (relative to the front bed's rotation about z)
        element(_unit((_TM, 1.0)) - _rot("front")[2], c.servo_k, c.servo_c)
        # mounting elements: the ground is fixed, so the relative motion is the bed point's
        P: tuple[float, float, float] | np.ndarray  # a point of the constants, then as an array
        for i, P in enumerate(c.me_points, start=1):
            P = np.asarray(P, dtype=float)
            body = "front" if P[2] < lz else "back"
            T = _point(body, P - cen[body])
            for d in "xyz":
                element(T[_AXIS[d]], p[f"ME{i}_k{d}"], p[f"ME{i}_c{d}"])
        # guide shoes: table vs the rail point below
        for sx in (-1, 1):
            for sz in (-1, 1):
                off = np.array([sx * c.shoe_half[0], c.rail_y - c.table_cg_y, sz * c.shoe_half[1]])
                t, r = bed_at(cen["table"] + off)
                Gs, Rs = _point("table", off) - t, _rot("table") - r
                element(Gs[0], p["LGS_kx"], c.guide_c[0])
                element(Gs[1], p["LGS_ky"], c.guide_c[1])
                element(Rs[0], p["LGS_krx"])
                element(Rs[1], p["LGS_kry"])
        # fixed bearing: screw axial vs front bed at the bearing
        B = np.array([0.0, c.screw_y, c.fb_z])
        element(_unit((_US, 1.0)) - _point("front", B - cen["front"])[2], p["FB_kz"])
        # coupling: motor angle vs screw angle; screw rotation vs bed (bearing and nut friction, linearised)
        element(_unit((_TM, 1.0), (_TS, -1.0)), p["CPL_krz"], p["CPL_crz"])
        element(_unit((_TS, 1.0)) - _rot("front")[2], 0.0, p["BSD_crz"])
        # nut: table axial at the nut vs screw axial + lead * angle, in series with the shaft
        N = np.array([0.0, c.screw_y, cen["table"][2]])
        g = _point("table", N - cen["table"])[2] - _unit((_US, 1.0), (_TS, c.lead / (2 * np.pi)))
        k_shaft = c.screw_EA / max(N[2] - c.fb_z, 1e-3)
        element(g, 1.0 / (1.0 / p["BSD_kz"] + 1.0 / k_shaft))
        return self.M, K, C


def simulate_modal_test(truth: MachineToolTruth, s: float, force: np.ndarray, dt: float,
                        input_dof: int | str, rng: np.random.Generator, accel_noise: float = 0.0,
                        force_noise: float = 0.0, substeps: int = 16) -> dict:
    """A modal test at axis position ``s``: a force history at one measured DOF, accelerations at all.

    The structure starts at rest. The force samples are taken as a band-limited signal: they are
    interpolated ``substeps``-fold (polyphase FIR) and held over each fine step (exact
    discretisation per complex mode), so the sampled data follow the continuous FRF up to about
    0.8 x Nyquist; the responses are read at the sample instants. The hold delays the applied force by
    half a fine step (and rounds it off, ``sinc(f dt / substeps)``) against its samples: the force
    channel and the accelerations' direct term (the mass line) see the applied force, as a
    transducer does, so both channels carry the same lag (a direct term without it puts a phase
    error ``pi f dt / substeps`` between the mass line and the modes, which biases the poles).
    Returns ``t`` (s), ``force`` (N, measured, with
    ``force_noise`` std added), ``accel`` (n, n_obs) in m/s^2 with ``accel_noise`` std added, and
    ``labels`` of the acceleration channels.
    """
    M, K, C = truth.matrices(s)
    O = truth.O
    j = truth.obs_labels.index(input_dof) if isinstance(input_dof, str) else int(input_dof)
    b = O[j]
    f_in = np.asarray(force, dtype=float).ravel()
    sub = max(1, int(substeps))
    h = dt / sub
    # band-limited interpolation (polyphase FIR): the samples stand for a continuous force below Nyquist
    u = scipy.signal.resample_poly(f_in, sub, 1) if sub > 1 else f_in
    n = N_DOF
    Minv = np.diag(1.0 / np.diag(M))
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ K, -Minv @ C]])
    B = np.concatenate([np.zeros(n), Minv @ b])
    Cacc = O @ np.hstack([-Minv @ K, -Minv @ C])  # acceleration = M^-1 (b u - K x - C v)
    Dacc = O @ (Minv @ b)
    lam, V = np.linalg.eig(A)
    bm = np.linalg.solve(V, B)
    ed = np.exp(lam * h)
    gain = (ed - 1.0) / lam * bm
    y = np.zeros((f_in.size, O.shape[0]))
    CV = Cacc @ V
    uc = u.astype(complex)
    for k in range(lam.size):
        # z[i+1] = ed z[i] + gain u[i]  ->  z[i] = sum_{m<i} ed^(i-1-m) gain u[m]
        z = scipy.signal.lfilter([0.0, gain[k]], [1.0, -ed[k]], uc)[::sub]
        y += np.real(np.outer(z, CV[:, k]))
    spectrum = np.fft.rfft(f_in)
    nu = np.fft.rfftfreq(f_in.size, dt)
    u = np.fft.irfft(spectrum * np.sinc(nu * h) * np.exp(-1j * np.pi * nu * h), f_in.size)  # the held force
    y += np.outer(u, Dacc)
    t = np.arange(u.size) * dt
    acc = y + (rng.normal(0.0, accel_noise, y.shape) if accel_noise > 0 else 0.0)
    f_meas = u + (rng.normal(0.0, force_noise, u.shape) if force_noise > 0 else 0.0)
    return {"t": t, "force": f_meas, "accel": acc, "labels": list(truth.obs_labels)}
