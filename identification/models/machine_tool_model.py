"""Identification model of a one-axis machine tool (seed paper 003, section 3.1): position-flexible,
lumped-parameter, 27 unknown stiffness and damping parameters.

This is the model the GSA identification (:mod:`identification.gsa`), the modal analysis
and the rig's reports work with. The simulated structure (:mod:`simulators.physics.machine_tool`) is the
simulator's own truth; today it has the same structure and constants, so an identification of simulated
data can reach the truth exactly (``variant = "disturbed"`` of the simulator, or
:meth:`MachineToolConstants.disturbed` here, emulate modelling error).

What it is, in SI units, axes x lateral, y vertical (up), z along the feed axis:

* a bed of two rigid segments (front, back; 6 DOF each) joined by a known elastic joint (the bed's
  own bending/torsion flexibility), standing on three mounting elements ME1 (front centre) and
  ME2/ME3 (back corners), each with stiffness and viscous damping in x, y and z;
* a workpiece table (rigid, 6 DOF) on a linear guide with four shoes, each shoe a spring in x and
  y and a rotational spring about x and y between the table and the rail point below it; the rail
  point is interpolated between the two bed segments, so the coupling moves with the table;
* a ball-screw drive along z: screw axial (fixed bearing FB to the front bed) and rotation, a
  coupling CPL to the motor rotor, the motor held by the position loop/brake (a known torsional
  spring to the bed); the nut on the table is a spring BSD in series with the screw shaft between
  bearing and nut (``EA / L``, L grows with the axis position).

Axis position ``s`` (m, 0 ... ``travel``) moves the table: the guide-shoe rail points and the
screw length change, so K and C depend on ``s``; M is constant in these coordinates (each body's
DOFs sit at its centre of mass). The 27 unknowns mirror the paper's list: 16 stiffness
(ME k x/y/z, FB kz, CPL krz, BSD kz, LGS kx/ky/krx/kry shared by the four shoes) and 11 damping
(ME c x/y/z, CPL crz, BSD crz) parameters; everything else (masses, inertias, geometry, bed
joint, servo stiffness, guide and material damping) is a known constant, and
:meth:`MachineToolConstants.disturbed` changes some of those to emulate modelling error.

Modal analysis: :meth:`MachineTool.real_modes` (undamped, generalised symmetric eigenproblem,
what the stiffness identification needs), :meth:`MachineTool.real_modes_batch` (many stiffness
vectors at once, for the Sobol samples), :meth:`MachineTool.complex_modes` (state-space eigenproblem
with the full damping matrix: eigenvalues, complex shapes, modal damping; :func:`complex_modes_of` for
given matrices) and :meth:`MachineTool.frf` (receptance, mobility or accelerance at the measured nodes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

__all__ = [
    "STIFFNESS_NAMES", "DAMPING_NAMES", "PARAM_NAMES", "NOMINAL", "param_bounds", "as_vector", "as_dict",
    "MachineToolConstants", "MachineTool", "ComplexModes", "complex_modes_of", "DEFAULT_NODES", "N_DOF",
]

STIFFNESS_NAMES = [f"ME{i}_k{d}" for i in (1, 2, 3) for d in "xyz"] + [
    "FB_kz", "CPL_krz", "BSD_kz", "LGS_kx", "LGS_ky", "LGS_krx", "LGS_kry"]
DAMPING_NAMES = [f"ME{i}_c{d}" for i in (1, 2, 3) for d in "xyz"] + ["CPL_crz", "BSD_crz"]
PARAM_NAMES = STIFFNESS_NAMES + DAMPING_NAMES

# N/m, N*m/rad (k); N*s/m, N*m*s/rad (c)
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


def param_bounds(names: Sequence[str] = PARAM_NAMES, nominal: Mapping[str, float] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The paper's search box: [0.7, 1.3] x nominal for stiffness, [1/3, 3] x nominal for damping."""
    nominal = NOMINAL if nominal is None else nominal
    lo, hi = [], []
    for n in names:
        v = float(nominal[n])
        a, b = (0.7, 1.3) if n in STIFFNESS_NAMES else (1.0 / 3.0, 3.0)
        lo.append(a * v)
        hi.append(b * v)
    return np.array(lo), np.array(hi)


def as_vector(params: Mapping[str, float] | np.ndarray | None) -> np.ndarray:
    """Parameters in :data:`PARAM_NAMES` order (missing names: nominal)."""
    if params is None:
        return np.array([NOMINAL[n] for n in PARAM_NAMES])
    if isinstance(params, Mapping):
        unknown = set(params) - set(PARAM_NAMES)
        if unknown:
            raise ValueError(f"unknown machine-tool parameter(s) {sorted(unknown)}")
        return np.array([float(params.get(n, NOMINAL[n])) for n in PARAM_NAMES])
    v = np.asarray(params, dtype=float)
    if v.shape != (len(PARAM_NAMES),):
        raise ValueError(f"parameter vector must have {len(PARAM_NAMES)} entries")
    return v


def as_dict(vec: np.ndarray) -> dict[str, float]:
    return {n: float(v) for n, v in zip(PARAM_NAMES, vec, strict=True)}


# ------------------------------------------------------------------------------------- constants
@dataclass(frozen=True)
class MachineToolConstants:
    """Everything the identification does not estimate (SI units)."""

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
    guide_c: tuple[float, float] = (3.0e3, 4.0e3)  # known damping per shoe, x and y, N*s/m
    material_beta: float = 2.0e-5  # s, stiffness-proportional damping of the bed joint
    travel: float = 0.6  # m
    table_z0: float = 0.5  # table centre z at s = 0, m
    shoe_half: tuple[float, float] = (0.3, 0.15)  # shoe offsets +-x, +-z from the table centre
    rail_y: float = 0.6
    table_cg_y: float = 0.72
    screw_y: float = 0.45
    fb_z: float = 0.1  # fixed bearing position, m
    me_points: tuple[tuple[float, float, float], ...] = ((0.0, 0.0, 0.1), (-0.45, 0.0, 1.5), (0.45, 0.0, 1.5))

    def disturbed(self, factor: float = 1.0) -> MachineToolConstants:
        """A similar machine whose non-identified constants differ (modelling error).

        Masses, inertias, bed-joint stiffness and screw constants change by a few per cent (scaled
        by ``factor``); the stiffness and damping parameters keep their meaning.
        """
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


# measured points: name -> (body, offset from the body's reference point, directions)
DEFAULT_NODES: tuple[tuple[str, str, tuple[float, float, float], str], ...] = (
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


def _skew(r: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -r[2], r[1]], [r[2], 0.0, -r[0]], [-r[1], r[0], 0.0]])


def _point(body: str, r: np.ndarray) -> np.ndarray:
    """3 x N_DOF map from the DOFs to the translation of a point at offset r on a rigid body."""
    T = np.zeros((3, N_DOF))
    i = _BODY[body]
    T[:, i:i + 3] = np.eye(3)
    T[:, i + 3:i + 6] = -_skew(r)
    return T


def _rot(body: str) -> np.ndarray:
    T = np.zeros((3, N_DOF))
    i = _BODY[body]
    T[:, i + 3:i + 6] = np.eye(3)
    return T


def _box_inertia(m: float, size: Sequence[float]) -> np.ndarray:
    a, b, c = size
    return np.array([m * (b * b + c * c), m * (a * a + c * c), m * (a * a + b * b)]) / 12.0


@dataclass
class ComplexModes:
    """Complex modal analysis at one position (modes sorted by frequency, positive-imaginary roots)."""

    lam: np.ndarray  # complex eigenvalues, rad/s
    freq: np.ndarray  # undamped natural frequencies |lam| / 2 pi, Hz
    xi: np.ndarray  # modal damping ratios -Re(lam)/|lam|
    shapes: np.ndarray  # complex displacement shapes at the measured DOFs (n_obs, n_modes)
    shapes_full: np.ndarray = field(repr=False)  # (N_DOF, n_modes)


def complex_modes_of(M: np.ndarray, K: np.ndarray, C: np.ndarray, O: np.ndarray,
                     n_modes: int | None = None) -> ComplexModes:
    """Complex modes of ``M x'' + C x' + K x = f`` (M diagonal), shapes observed through ``O``.

    Modes sorted by frequency (positive-imaginary roots); each shape is scaled so that its largest
    component is real and 1 (phase and scale are arbitrary).
    """
    n = M.shape[0]
    Minv = np.diag(1.0 / np.diag(M))
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ K, -Minv @ C]])
    lam, V = np.linalg.eig(A)
    keep = lam.imag > 0
    lam, V = lam[keep], V[:n, keep]
    order = np.argsort(np.abs(lam))
    lam, V = lam[order], V[:, order]
    if n_modes is not None:
        lam, V = lam[:n_modes], V[:, :n_modes]
    piv = V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])]
    V = V / piv
    w = np.abs(lam)
    return ComplexModes(lam=lam, freq=w / (2 * np.pi), xi=-lam.real / w, shapes=O @ V, shapes_full=V)


class MachineTool:
    """The model at any axis position: matrices, modes, FRFs. Picklable (plain arrays inside)."""

    def __init__(self, constants: MachineToolConstants | None = None,
                 nodes: Sequence[tuple[str, str, tuple[float, float, float], str]] = DEFAULT_NODES):
        self.c = constants or MachineToolConstants()
        self.nodes = tuple(nodes)
        self.obs_labels = [f"{n}{d}" for n, _, _, dirs in self.nodes for d in dirs]
        self._cache: dict[float, tuple] = {}
        self._obs: np.ndarray | None = None
        self.M = self._mass()
        self._n_k = len(STIFFNESS_NAMES)

    # ------------------------------------------------------------------ geometry
    def centres(self, s: float) -> dict[str, np.ndarray]:
        c = self.c
        lz = c.bed_size[2]
        hy = c.bed_size[1] / 2
        return {"front": np.array([0.0, hy, lz / 2]), "back": np.array([0.0, hy, 1.5 * lz]),
                "table": np.array([0.0, c.table_cg_y, c.table_z0 + s]),
                "screw": np.array([0.0, c.screw_y, c.fb_z])}

    def _bed_point(self, P: np.ndarray, cen: dict) -> np.ndarray:
        """Translation of the bed at global point P, interpolated between the two segments along z."""
        zf, zb = cen["front"][2], cen["back"][2]
        w = float(np.clip((P[2] - zf) / (zb - zf), 0.0, 1.0))
        return (1 - w) * _point("front", P - cen["front"]) + w * _point("back", P - cen["back"])

    def _bed_rot(self, z: float, cen: dict) -> np.ndarray:
        zf, zb = cen["front"][2], cen["back"][2]
        w = float(np.clip((z - zf) / (zb - zf), 0.0, 1.0))
        return (1 - w) * _rot("front") + w * _rot("back")

    def _mass(self) -> np.ndarray:
        c = self.c
        m = np.zeros(N_DOF)
        for k, body in enumerate(("front", "back")):
            i = _BODY[body]
            m[i:i + 3] = c.bed_mass[k]
            m[i + 3:i + 6] = _box_inertia(c.bed_mass[k], c.bed_size)
        i = _BODY["table"]
        m[i:i + 3] = c.table_mass
        m[i + 3:i + 6] = _box_inertia(c.table_mass, c.table_size)
        m[_US], m[_TS], m[_TM] = c.screw_mass, c.screw_inertia, c.motor_inertia
        return np.diag(m)

    def observation(self, s: float) -> np.ndarray:
        """(n_obs, N_DOF) map from DOFs to the measured translations (rows: :attr:`obs_labels`)."""
        del s  # offsets are relative to the bodies, so the map does not move with the axis
        if self._obs is None:
            self._obs = self._build_observation()
        return self._obs

    def _build_observation(self) -> np.ndarray:
        rows = []
        for _, body, off, dirs in self.nodes:
            if body == "screw":
                for d in dirs:
                    r = np.zeros(N_DOF)
                    if d == "z":
                        r[_US] = 1.0
                    rows.append(r)
                continue
            T = _point(body, np.asarray(off, dtype=float))
            rows += [T[_AXIS[d]] for d in dirs]
        return np.array(rows)

    # ------------------------------------------------------------------ assembly
    def _units(self, s: float) -> tuple:
        """Per-position pieces: K0, C0 and, per parameter, (kind, vector(s)) of its unit contribution."""
        key = round(float(s), 12)
        if key in self._cache:
            return self._cache[key]
        c = self.c
        cen = self.centres(s)
        K0 = np.zeros((N_DOF, N_DOF))
        C0 = np.zeros((N_DOF, N_DOF))
        # bed joint (known): relative motion of the two segments at the joint point
        J = np.array([0.0, c.joint_y, c.bed_size[2]])
        Gt = _point("back", J - cen["back"]) - _point("front", J - cen["front"])
        Gr = _rot("back") - _rot("front")
        G = np.vstack([Gt, Gr])
        Kj = G.T @ np.diag(c.joint_k) @ G
        K0 += Kj
        C0 += c.material_beta * Kj
        # motor held by the position loop (relative to the front bed's rotation about z)
        gm = np.zeros(N_DOF)
        gm[_TM] = 1.0
        gm -= _rot("front")[2]
        K0 += c.servo_k * np.outer(gm, gm)
        C0 += c.servo_c * np.outer(gm, gm)
        # guide shoes: known damping in x, y
        shoes = []
        for sx in (-1, 1):
            for sz in (-1, 1):
                off = np.array([sx * c.shoe_half[0], c.rail_y - c.table_cg_y, sz * c.shoe_half[1]])
                P = cen["table"] + off
                Gs = _point("table", P - cen["table"]) - self._bed_point(P, cen)
                Rs = _rot("table") - self._bed_rot(P[2], cen)
                shoes.append((Gs, Rs))
                C0 += c.guide_c[0] * np.outer(Gs[0], Gs[0]) + c.guide_c[1] * np.outer(Gs[1], Gs[1])
        units: dict[str, list[np.ndarray]] = {}
        for i, P in enumerate(c.me_points, start=1):
            P = np.asarray(P, dtype=float)
            body = "front" if P[2] < c.bed_size[2] else "back"
            T = _point(body, P - cen[body])  # ground is fixed: relative motion = bed point motion
            for d in "xyz":
                units[f"ME{i}_k{d}"] = [T[_AXIS[d]]]
                units[f"ME{i}_c{d}"] = [T[_AXIS[d]]]
        # fixed bearing: screw axial vs front bed at the bearing
        B = cen["screw"]
        g = np.zeros(N_DOF)
        g[_US] = 1.0
        g -= _point("front", B - cen["front"])[2]
        units["FB_kz"] = [g]
        # coupling: motor angle vs screw angle
        g = np.zeros(N_DOF)
        g[_TM], g[_TS] = 1.0, -1.0
        units["CPL_krz"] = [g]
        units["CPL_crz"] = [g]
        # screw rotation vs bed (bearing and nut friction, linearised)
        g = np.zeros(N_DOF)
        g[_TS] = 1.0
        g -= _rot("front")[2]
        units["BSD_crz"] = [g]
        # nut: table axial at the nut vs screw axial + lead * angle
        N = np.array([0.0, c.screw_y, cen["table"][2]])
        g = _point("table", N - cen["table"])[2].copy()
        g[_US] -= 1.0
        g[_TS] -= c.lead / (2 * np.pi)
        units["BSD_kz"] = [g]
        shaft_len = max(N[2] - c.fb_z, 1e-3)
        units["LGS_kx"] = [Gs[0] for Gs, _ in shoes]
        units["LGS_ky"] = [Gs[1] for Gs, _ in shoes]
        units["LGS_krx"] = [Rs[0] for _, Rs in shoes]
        units["LGS_kry"] = [Rs[1] for _, Rs in shoes]
        # stack: unit matrices U_n = sum_g g g^T, as (n_par, N, N)
        Uk = np.array([sum(np.outer(g, g) for g in units[n]) for n in STIFFNESS_NAMES])
        Uc = np.array([sum(np.outer(g, g) for g in units[n]) for n in DAMPING_NAMES])
        out = (K0, C0, Uk, Uc, c.screw_EA / shaft_len)
        self._cache[key] = out
        return out

    def _effective_k(self, kvec: np.ndarray, k_shaft: float) -> np.ndarray:
        """Stiffness parameters as they act: the nut is in series with the shaft between bearing and nut."""
        k = np.array(kvec, dtype=float)
        j = STIFFNESS_NAMES.index("BSD_kz")
        k[..., j] = 1.0 / (1.0 / k[..., j] + 1.0 / k_shaft)
        return k

    def matrices(self, params, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """M, K, C at axis position ``s`` (m) for the parameters (dict or :data:`PARAM_NAMES` vector)."""
        p = as_vector(params)
        K0, C0, Uk, Uc, ks = self._units(s)
        kv = self._effective_k(p[:self._n_k], ks)
        K = K0 + np.tensordot(kv, Uk, axes=1)
        C = C0 + np.tensordot(p[self._n_k:], Uc, axes=1)
        return self.M, K, C

    def damping_parts(self, s: float) -> tuple[np.ndarray, np.ndarray]:
        """Known damping matrix C0 and the unit matrices of the damping parameters (n_c, N, N)."""
        _, C0, _, Uc, _ = self._units(s)
        return C0, Uc

    # ------------------------------------------------------------------ modal analysis
    def real_modes(self, params, s: float, n_modes: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Undamped modes: angular frequencies (rad/s) and mass-normalised shapes (N_DOF, n)."""
        M, K, _ = self.matrices(params, s)
        n = N_DOF if n_modes is None else int(n_modes)
        w2, V = scipy.linalg.eigh(K, M, subset_by_index=[0, n - 1])
        return np.sqrt(np.maximum(w2, 0.0)), V

    def real_modes_batch(self, kmat: np.ndarray, s: float, n_modes: int) -> tuple[np.ndarray, np.ndarray]:
        """Undamped modes for many stiffness vectors (rows in :data:`STIFFNESS_NAMES` order) at once."""
        K0, _, Uk, _, ks = self._units(s)
        kv = self._effective_k(np.atleast_2d(kmat), ks)
        Ks = K0 + np.einsum("bp,pij->bij", kv, Uk)
        msq = 1.0 / np.sqrt(np.diag(self.M))
        A = Ks * msq[None, :, None] * msq[None, None, :]  # M^-1/2 K M^-1/2 (M diagonal)
        w2, Q = np.linalg.eigh(A)
        w2, Q = w2[:, :n_modes], Q[:, :, :n_modes]
        return np.sqrt(np.maximum(w2, 0.0)), Q * msq[None, :, None]

    def complex_modes(self, params, s: float, n_modes: int | None = None) -> ComplexModes:
        """State-space eigenproblem with the full (non-proportional) damping matrix."""
        M, K, C = self.matrices(params, s)
        return complex_modes_of(M, K, C, self.observation(s), n_modes)

    def frf(self, params, s: float, freq: np.ndarray, input_dof: int | str,
            kind: str = "receptance") -> np.ndarray:
        """FRFs (n_obs, n_freq) from a force at the measured DOF ``input_dof`` (index or label).

        ``kind``: "receptance" (m/N), "mobility" (m/s/N) or "accelerance" (m/s^2/N).
        """
        M, K, C = self.matrices(params, s)
        O = self.observation(s)
        j = self.obs_labels.index(input_dof) if isinstance(input_dof, str) else int(input_dof)
        b = O[j]
        w = 2 * np.pi * np.asarray(freq, dtype=float)
        Z = K[None] - (w ** 2)[:, None, None] * M[None] + 1j * w[:, None, None] * C[None]
        X = np.linalg.solve(Z, np.broadcast_to(b, (w.size, N_DOF))[..., None])[..., 0]
        H = (O @ X.T)
        if kind == "mobility":
            H = H * (1j * w)
        elif kind == "accelerance":
            H = H * (-(w ** 2))
        elif kind != "receptance":
            raise ValueError("kind must be receptance, mobility or accelerance")
        return H
