"""Candidate models of the press linkage: one structural model, three friction models (paper section 5).

Structure (own code, same topology as the simulated plant): a quasi-static planar spring network with
10 displacement unknowns (pressure-bar head D, end of bar 5 at joint F, pin F, end of bar 7 in frame bearing
G, lever end in frame bearing A), linear bars, hardening radial bearings. State equation

    E(y, p, q) = K(p) y + f_bearing(y) - b q = 0,   K(p) = K_0 + k5 K_5 + k7 K_7,

with p = (k5, k7) in N/m and q the force that reaches the linkage, q = q_P - q_fric. Observations
h = [D vertical, F horizontal, b0_ratio * D vertical] in m. Exact first and second derivatives are given.

Friction models (all give q_fric from the force history q_P[series, setpoint] in chronological order):

* M1 ``NoFriction``: q_fric = 0.
* M2 ``CoulombFriction``: q_fric = q_c * sign(dq_P/dt), the sign taken from the last force change.
  q_c is NOT a fitted parameter of the test: it is fixed from the training series (inverse model).
* M3 ``MemoryFriction``: continuous, rate-independent memory model with inputs (q_P(t_i), q_P(t_i-1),
  q_min, q_max) -> direction s and travel since the last reversal, q_fric = s * (c_0 + sum_j c_j
  arctan(travel / w_j)) (a Preisach-like sum of arctan units), coefficients by linear least squares on
  friction forces obtained through the inverse model from training series.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from identification.estimation.least_squares import fit_state_model
from identification.models import press_kernels

P_NAMES = ("k5", "k7")

_POS = {
    "D": np.array([0.0, 0.0]),
    "F": np.array([-0.30, 0.50]),
    "G": np.array([0.0, 1.00]),
    "A": np.array([-0.30, -0.20]),
}
#: The sensors the press model can predict, in its own order; data columns are mapped by name.
OUTPUT_NAMES = ("D_vertical", "F_horizontal", "B0_vertical")

_D, _F5, _F, _G7, _A = range(5)
_NDOF = 10
_EYE2 = np.eye(2)


@dataclass
class PressConstants:
    """Known constants of the linkage model (SI). Same meaning as the simulator's keys of the same name."""

    k_lever: float = 1.0e9
    k_guide: float = 5.0e8
    k_joint: float = 1.2e9
    joint_beta: float = 2.0e8
    b0_ratio: float = 0.2

    @classmethod
    def from_dict(cls, d: dict) -> PressConstants:
        """The constants of a mapping; a key that is none of them is refused (a typo must not leave the
        default in place)."""
        names = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in d if k not in names)
        if unknown:
            raise ValueError(f"unknown press constant(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(names))})")
        return cls(**{k: float(v) for k, v in d.items()})

    def to_dict(self) -> dict:
        return asdict(self)


def _bar_matrix(i: int, j: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Unit-stiffness (k = 1) matrix of a bar between nodes i and j with nominal ends a, b."""
    n = (b - a) / np.linalg.norm(b - a)
    K = np.zeros((_NDOF, _NDOF))
    idx = [2 * i, 2 * i + 1, 2 * j, 2 * j + 1]
    nn = np.outer(n, n)
    K[np.ix_(idx, idx)] = np.block([[nn, -nn], [-nn, nn]])
    return K


class PressLinkageModel:
    """Batched state model of the linkage for ``identification.estimation.least_squares.fit_state_model``."""

    n_p = 2

    def __init__(self, constants: PressConstants | None = None,
                 outputs: tuple[str, ...] = OUTPUT_NAMES, compiled: bool | None = None) -> None:
        """``outputs``: which sensors the observations are, in the order of the data's columns;
        ``compiled``: the state solve and its derivatives compiled (default: when numba is installed) or
        in numpy."""
        self.compiled = press_kernels.AVAILABLE and (compiled is None or bool(compiled))
        unknown = [o for o in outputs if o not in OUTPUT_NAMES]
        if unknown:
            raise ValueError(f"the press model has no sensor {unknown} (known: {', '.join(OUTPUT_NAMES)})")
        self.outputs = tuple(outputs)
        self.n_s = len(self.outputs)
        c = constants or PressConstants()
        self.c = c
        self.K5 = _bar_matrix(_D, _F5, _POS["D"], _POS["F"])
        self.K7 = _bar_matrix(_F, _G7, _POS["F"], _POS["G"])
        self.K0 = c.k_lever * _bar_matrix(_F, _A, _POS["F"], _POS["A"])
        self.K0[2 * _D, 2 * _D] += c.k_guide
        # bearings: pairs of nodes (-1 = ground)
        self.bearings = ((_F5, _F), (_G7, -1), (_A, -1))
        self._bearing_index()
        self._J_rest = self._bearing(np.zeros((1, _NDOF)))[1][0]  # the bearings' stiffness at rest
        ends = zip(*self.bearings, strict=True)  # the bearings' first nodes, their second (-1: ground)
        self._bearing_first, self._bearing_second = (np.array(nodes, dtype=np.int64) for nodes in ends)
        self.b = np.zeros(_NDOF)
        self.b[2 * _D + 1] = 1.0
        full = np.zeros((len(OUTPUT_NAMES), _NDOF))
        full[0, 2 * _D + 1] = 1.0
        full[1, 2 * _F] = 1.0
        full[2, 2 * _D + 1] = c.b0_ratio
        self.Hobs = full[[OUTPUT_NAMES.index(o) for o in self.outputs]]

    def K(self, p: np.ndarray) -> np.ndarray:
        return self.K0 + p[0] * self.K5 + p[1] * self.K7

    # -- bearings -------------------------------------------------------------------------------------
    def _rel(self, y: np.ndarray, i: int, j: int) -> np.ndarray:
        d = y[:, 2 * i : 2 * i + 2]
        return d - y[:, 2 * j : 2 * j + 2] if j >= 0 else d

    def _bearing_index(self) -> None:
        """Where each bearing's two displacement components sit in the state, as the 0/+-1 matrices of
        :meth:`_bearing`'s one pass over all bearings: ``_gather`` (10, 2b) takes the relative
        displacements from the state, ``_scatter_f`` (2b, 10) puts the bearings' forces into the state's,
        ``_scatter_j`` (4b, 100) their 2x2 stiffnesses into the 10x10 Jacobian (with the cross terms of
        the bearings between two nodes). Every node sits in at most one bearing, so each entry of the force
        and of its Jacobian gets at most one term: the products with 0 and +-1 are exact, the numbers the
        same as assigning each term in its place (and small matrix products cost less than the fancy
        indexing that did: numpy's per-call overhead dominates at the fits' 14-58 points)."""
        nodes = [n for pair in self.bearings for n in pair if n >= 0]
        if len(nodes) != len(set(nodes)):
            raise ValueError("a node in two bearings: _bearing assigns each node's terms once")
        b = len(self.bearings)
        gather, scatter_f = np.zeros((_NDOF, 2 * b)), np.zeros((2 * b, _NDOF))
        scatter_j = np.zeros((4 * b, _NDOF**2))
        for k, (i, j) in enumerate(self.bearings):
            ends = [(2 * i, 1.0)] + ([(2 * j, -1.0)] if j >= 0 else [])  # d = y_i - y_j (or y_i: ground)
            for r in range(2):
                for at, sign in ends:
                    gather[at + r, 2 * k + r] += sign
                    scatter_f[2 * k + r, at + r] += sign
                for c in range(2):
                    for at_r, sign_r in ends:
                        for at_c, sign_c in ends:
                            scatter_j[4 * k + 2 * r + c, (at_r + r) * _NDOF + at_c + c] += sign_r * sign_c
        self._gather, self._scatter_f, self._scatter_j = gather, scatter_f, scatter_j

    def _bearing(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bearing forces (N, 10) and their Jacobian (N, 10, 10) at states y (N, 10): g = k (1 + beta |d|^2) d
        of each bearing's relative displacement d, all bearings at once (the hot path of every press fit:
        called at each Newton step of each state solve)."""
        k, beta = self.c.k_joint, self.c.joint_beta
        N = y.shape[0]
        d = (y @ self._gather).reshape(N, -1, 2)  # (N, b, 2)
        d2 = d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]
        s = 1 + beta * d2
        g = k * s[..., None] * d
        kt = k * (s[..., None, None] * _EYE2 + 2 * beta * (d[..., :, None] * d[..., None, :]))  # (N, b, 2, 2)
        f = g.reshape(N, -1) @ self._scatter_f
        Jb = (kt.reshape(N, -1) @ self._scatter_j).reshape(N, _NDOF, _NDOF)
        return f, Jb

    # -- StateModel protocol --------------------------------------------------------------------------
    def residual(self, y: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        f, _ = self._bearing(y)
        return y @ self.K(p).T + f - np.outer(q, self.b)

    def solve_state(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """States (N, 10) at the forces ``q`` (N,): Newton from the linear start, compiled
        (:mod:`identification.models.press_kernels`) unless ``compiled`` is false or numba is missing."""
        q = np.asarray(q, dtype=float).ravel()
        K = self.K(p)
        K_lin = K + self._J_rest
        if self.compiled:
            return press_kernels.newton_states(K, K_lin, self.b, q, self._bearing_first, self._bearing_second,
                                               self.c.k_joint, self.c.joint_beta)
        return self._solve_state_numpy(K, K_lin, q)

    def _solve_state_numpy(self, K: np.ndarray, K_lin: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The same Newton iteration in numpy, all points at once (the path without numba)."""
        y = np.linalg.solve(K_lin, np.outer(self.b, q)).T  # linear start
        load, KT = np.outer(q, self.b), K.T
        for _ in range(30):
            f, Jb = self._bearing(y)
            res = y @ KT + f - load
            Jb += K  # the tangent K + Jb, in the array _bearing just made
            dy = np.linalg.solve(Jb, res[:, :, None])[:, :, 0]  # the step is -dy, exactly (LU is linear in b)
            y -= dy
            # converged when the step is tiny against the displacements: Newton's error after a step of
            # relative size 1e-10 is of order 1e-20; an absolute 1e-15 m was below the rounding floor of a
            # stiff K (condition ~1e6) and let half the solves of a wandering fit run all 30 iterations
            if np.max(np.abs(dy)) <= 1e-10 * np.max(np.abs(y)) + 1e-300:
                break
        return y

    def state_derivatives(self, p: np.ndarray, q: np.ndarray,
                          second: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
        """``(y, Y_p, Y_pp or None)`` from the compiled kernels (the hook of
        :func:`~identification.estimation.least_squares.state_sensitivities`); None without them (that
        function then differentiates through :meth:`jacobians` and :meth:`E_second` in numpy)."""
        if not self.compiled:
            return None
        p = np.asarray(p, dtype=float)
        y = self.solve_state(p, q)
        Yp, Ypp = press_kernels.state_derivatives(self.K(p), self.K5, self.K7, y, self._bearing_first,
                                                  self._bearing_second, self.c.k_joint, self.c.joint_beta,
                                                  second)
        return y, Yp, Ypp

    def jacobians(self, y: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, Jb = self._bearing(y)
        Ey = self.K(p)[None] + Jb
        Ep = np.stack([y @ self.K5.T, y @ self.K7.T], axis=2)
        return Ey, Ep

    def observe(self, y: np.ndarray, p: np.ndarray, q: np.ndarray | None) -> np.ndarray:
        return y @ self.Hobs.T  # the sensors see the state only: q is not needed

    def observe_jacobians(self, y: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        N = y.shape[0]
        return np.broadcast_to(self.Hobs, (N, self.n_s, _NDOF)), np.zeros((N, self.n_s, 2))

    def E_second(self, y: np.ndarray, p: np.ndarray, q: np.ndarray, Yp: np.ndarray) -> np.ndarray:
        """E_yy[Y_l, Y_m] + K_m Y_l + K_l Y_m (E is linear in p, so E_pp = 0)."""
        k, beta = self.c.k_joint, self.c.joint_beta
        N = y.shape[0]
        T = np.zeros((N, _NDOF, 2, 2))
        for i, j in self.bearings:
            d = self._rel(y, i, j)
            V = Yp[:, 2 * i : 2 * i + 2, :] - (Yp[:, 2 * j : 2 * j + 2, :] if j >= 0 else 0.0)  # (N, 2, n_p)
            dv = np.einsum("ni,nil->nl", d, V)
            vv = np.einsum("nil,nim->nlm", V, V)
            # d2g[v, w] = 2 k beta ((d.w) v + (d.v) w + (v.w) d)
            g2 = 2 * k * beta * (
                np.einsum("nm,nil->nilm", dv, V) + np.einsum("nl,nim->nilm", dv, V)
                + np.einsum("nlm,ni->nilm", vv, d)
            )
            T[:, 2 * i : 2 * i + 2] += g2
            if j >= 0:
                T[:, 2 * j : 2 * j + 2] -= g2
        KY = [np.einsum("ij,njl->nil", Km, Yp) for Km in (self.K5, self.K7)]  # (N, d_y, n_p) each
        for m in range(2):
            T[:, :, :, m] += KY[m]
            T[:, :, m, :] += KY[m]
        return T

    def h_second(self, y: np.ndarray, p: np.ndarray, q: np.ndarray, Yp: np.ndarray) -> np.ndarray:
        return np.zeros((y.shape[0], self.n_s, 2, 2))

    # -- helpers --------------------------------------------------------------------------------------
    def predict(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Displacements (..., n_s) in m for effective forces q (...) in N."""
        q = np.asarray(q, dtype=float)
        y = self.solve_state(np.asarray(p, float), q.ravel())
        return self.observe(y, p, None).reshape(q.shape + (self.n_s,))

    def inverse_force(
        self,
        p: np.ndarray,
        z: np.ndarray,
        sigmas: np.ndarray,
        omega: np.ndarray | None = None,
        iters: int = 8,
        return_variance: bool = False,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Force q (N,) whose model output best matches z (N, 3), weights omega/sigma^2 (inverse model).

        ``return_variance``: also the variance of each q from sensor noise, 1 / sum_k (dh_k/dq / sigma_k)^2.
        """
        z = np.asarray(z, dtype=float)
        weights = np.ones(self.n_s) if omega is None else np.asarray(omega, float)
        w = weights / np.asarray(sigmas, float) ** 2
        K = self.K(p)
        s0 = self.Hobs @ np.linalg.solve(K + self._bearing(np.zeros((1, _NDOF)))[1][0], self.b)
        q = (z @ (w * s0)) / (s0 @ (w * s0))
        for _ in range(iters):
            y = self.solve_state(p, q)
            _, Jb = self._bearing(y)
            dq_dy = np.linalg.solve(K[None] + Jb, np.broadcast_to(self.b, y.shape)[:, :, None])[:, :, 0]
            g = dq_dy @ self.Hobs.T  # dh/dq (N, 3)
            r = z - self.observe(y, p, None)
            info = np.einsum("ns,s,ns->n", g, w, g)
            q = q + np.einsum("ns,s,ns->n", g, w, r) / info
        return (q, 1.0 / info) if return_variance else q


# ---------------------------------------------------------------------------------------------------
# friction models
# ---------------------------------------------------------------------------------------------------


def force_history_features(q_hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Direction s (+1 loading / -1 unloading) and force travel since the last reversal, per sample.

    q_hist is the chronological force record (any shape, flattened in C order). The direction is the sign of
    q_P(t_i) - q_P(t_i-1) (kept when the force does not change); the travel uses the running extremum of the
    current branch: q_P - q_min while loading, q_max - q_P while unloading. The record starts on a loading
    branch from its first value.
    """
    q = np.asarray(q_hist, dtype=float).ravel()
    s = np.empty_like(q)
    travel = np.empty_like(q)
    direction, q_rev = 1.0, q[0] if q.size else 0.0
    prev = q_rev
    for i, qi in enumerate(q):
        dq = qi - prev
        if dq != 0 and np.sign(dq) != direction:
            direction = float(np.sign(dq))
            q_rev = prev  # the last extremum becomes q_min (now loading) or q_max (now unloading)
        s[i] = direction
        travel[i] = max(direction * (qi - q_rev), 0.0)
        prev = qi
    shape = np.shape(q_hist)
    return s.reshape(shape), travel.reshape(shape)


def _fit_with_nuisance(X: np.ndarray, q: np.ndarray, y: np.ndarray, ridge: float = 1e-9,
                       y_var: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Least squares y ~ X c + b q; returns c and its covariance.

    Friction inferred through the inverse model carries a term proportional to the force wherever the
    first-step stiffness (fitted without friction) is slightly off; the nuisance column b q absorbs it so
    it does not leak into the friction coefficients (it is a stiffness error, not friction). The covariance
    propagates the noise of y (variances ``y_var``; else the residual variance, which also counts misfit)
    and says how well the training series pin c down: the uncertainty test carries it into its decisions.
    """
    A = np.column_stack([X, q])
    scale = np.linalg.norm(A, axis=0) + 1e-300
    As = A / scale
    # ridge solution through the SVD of As, not the normal equations: the arctan units are nearly collinear
    # (condition ~1e5), and squaring that in As.T @ As made the coefficients depend on the BLAS's rounding
    # (a thread count or CPU changed M3's first coefficient in the third digit)
    U, sv, Vt = np.linalg.svd(As, full_matrices=False)
    M = (Vt.T / (sv**2 + ridge)) @ Vt
    coef = (Vt.T @ ((sv / (sv**2 + ridge)) * (U.T @ y))) / scale
    if y_var is None:
        e = y - A @ coef
        cov_s = float(e @ e) / max(y.size - A.shape[1], 1) * M
    else:
        cov_s = M @ (As.T * np.asarray(y_var, float)) @ As @ M
    cov = cov_s / np.outer(scale, scale)
    return coef[:-1], cov[:-1, :-1]


def _fit_features(X: np.ndarray, q_hist: np.ndarray, q_fric: np.ndarray, mask: np.ndarray | None,
                  q_fric_var: np.ndarray | None, ridge: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients (and covariance) of friction = X @ c on the masked training samples."""
    m = np.ones(X.shape[:-1], bool) if mask is None else mask
    var = None if q_fric_var is None else np.asarray(q_fric_var)[m]
    return _fit_with_nuisance(X[m], np.asarray(q_hist)[m], np.asarray(q_fric)[m], ridge, y_var=var)


class NoFriction:
    """M1: friction neglected."""

    name = "M1"
    description = "no friction"

    covariance = np.zeros((0, 0))

    def fit(self, q_hist: np.ndarray, q_fric: np.ndarray, mask: np.ndarray | None = None,
            q_fric_var: np.ndarray | None = None) -> NoFriction:
        return self

    def features(self, q_hist: np.ndarray) -> np.ndarray:
        """No coefficients: friction = features @ coef with an empty coefficient vector."""
        return np.zeros(np.shape(q_hist) + (0,))

    def friction(self, q_hist: np.ndarray) -> np.ndarray:
        return np.zeros_like(np.asarray(q_hist, dtype=float))

    def to_dict(self) -> dict:
        return {"model": self.name}


class CoulombFriction:
    """M2: q_fric = q_c * sign(dq_P/dt); q_c fixed by least squares on training friction forces."""

    name = "M2"
    description = "Coulomb friction"

    def __init__(self, q_c: float = 0.0) -> None:
        self.q_c = float(q_c)
        self.covariance = np.zeros((1, 1))

    def features(self, q_hist: np.ndarray) -> np.ndarray:
        """Friction = features @ [q_c]: the direction of loading."""
        s, _ = force_history_features(q_hist)
        return s[..., None]

    def fit(self, q_hist: np.ndarray, q_fric: np.ndarray, mask: np.ndarray | None = None,
            q_fric_var: np.ndarray | None = None) -> CoulombFriction:
        coef, self.covariance = _fit_features(self.features(q_hist), q_hist, q_fric, mask, q_fric_var)
        self.q_c = float(coef[0])
        return self

    def friction(self, q_hist: np.ndarray) -> np.ndarray:
        s, _ = force_history_features(q_hist)
        return self.q_c * s

    def to_dict(self) -> dict:
        return {"model": self.name, "q_c": self.q_c}


class MemoryFriction:
    """M3: q_fric = s * (1 + q_P / q_ref) * (c_0 + sum_j c_j arctan(travel / w_j)), coefficients per term.

    The inputs are those of the paper's memory model: the current force q_P(t_i), the direction from
    q_P(t_i-1), and the travel from the running extremum of the branch. The force-proportional terms
    (``load_dependent``) let the friction amplitude follow the guide's normal force, which grows with
    the process force; the model stays linear in its coefficients (least squares).
    """

    name = "M3"
    description = "rate-independent memory friction (arctan units)"

    def __init__(
        self, widths: tuple[float, ...] = (250.0, 600.0, 1200.0, 2500.0, 5000.0), ridge: float = 1e-9,
        load_dependent: bool = True, q_ref: float = 1.0e4,
    ) -> None:
        self.widths = np.asarray(widths, dtype=float)
        self.load_dependent = load_dependent
        self.q_ref = float(q_ref)
        self.coef = np.zeros((self.widths.size + 1) * (2 if load_dependent else 1))
        self.covariance = np.zeros((self.coef.size, self.coef.size))
        self.ridge = ridge

    def features(self, q_hist: np.ndarray) -> np.ndarray:
        """Friction = features @ coef: direction times (1, arctan units of the travel)."""
        s, travel = force_history_features(q_hist)
        units = np.arctan(travel[..., None] / self.widths)
        base = s[..., None] * np.concatenate([np.ones(s.shape + (1,)), units], axis=-1)
        if not self.load_dependent:
            return base
        load = np.asarray(q_hist, dtype=float)[..., None] / self.q_ref
        return np.concatenate([base, base * load], axis=-1)

    def fit(self, q_hist: np.ndarray, q_fric: np.ndarray, mask: np.ndarray | None = None,
            q_fric_var: np.ndarray | None = None) -> MemoryFriction:
        self.coef, self.covariance = _fit_features(self.features(q_hist), q_hist, q_fric, mask, q_fric_var,
                                                   self.ridge)
        return self

    def friction(self, q_hist: np.ndarray) -> np.ndarray:
        return self.features(q_hist) @ self.coef

    def to_dict(self) -> dict:
        return {"model": self.name, "widths_N": self.widths.tolist(), "load_dependent": self.load_dependent,
                "q_ref_N": self.q_ref, "coef_N": self.coef.tolist()}


FRICTION_MODELS = {"M1": NoFriction, "M2": CoulombFriction, "M3": MemoryFriction}


@dataclass
class TrainedPressModels:
    """Structural model, friction models trained on the training series, and the first-step stiffness."""

    structure: PressLinkageModel
    friction: dict  # name -> friction model
    p_train_m1: np.ndarray
    q_fric_train: np.ndarray  # inferred friction forces on the training series, N


def train_friction_models(
    z: np.ndarray,
    q_hist: np.ndarray,
    sigmas: np.ndarray,
    train_series: list[int],
    *,
    constants: PressConstants | None = None,
    omega: np.ndarray | None = None,
    p0: tuple[float, float] | np.ndarray = (1.8e8, 1.8e8),
    skip_virgin: bool = True,
    n_iter: int = 3,
    outputs: tuple[str, ...] | None = None,
) -> TrainedPressModels:
    """Train M2/M3 through the inverse model (paper section 5).

    1. Fit k5, k7 with M1 on the training series. 2. Inverse model: the force that explains each measured
    displacement; friction = q_P - that force. 3. Fit q_c (M2) and the arctan coefficients (M3) to it.
    ``skip_virgin`` leaves out the first loading branch of the record (friction memory not yet formed).
    Steps 1-3 are repeated ``n_iter`` times with the stiffness re-fitted under M3, so that stiffness and
    inferred friction become consistent (the first pass is exactly the paper's procedure).
    """
    model = PressLinkageModel(constants, tuple(outputs) if outputs else OUTPUT_NAMES[:z.shape[-1]])
    tr = list(train_series)
    zt = z[tr].reshape(-1, model.n_s)
    mask = np.zeros(q_hist.shape, bool)
    mask[tr] = True
    if skip_virgin:
        s, _ = force_history_features(q_hist)
        first_down = int(np.argmax(s.ravel() < 0))
        mask.reshape(-1)[:first_down] = False
    q_eff = q_hist
    p = np.asarray(p0, float)
    p_m1 = None
    fr: dict = {}
    for _ in range(max(n_iter, 1)):
        fit = fit_state_model(model, zt, q_eff[tr].reshape(-1), sigmas, p, omega=omega, second_order=False,
                              bounds=(0.0, np.inf))
        p = fit.p
        p_m1 = p if p_m1 is None else p_m1
        q_inv, q_var = model.inverse_force(p, zt, sigmas, omega, return_variance=True)
        q_fric = np.zeros(q_hist.shape)
        q_fric[tr] = q_hist[tr] - q_inv.reshape(len(tr), -1)
        q_fric_var = np.zeros(q_hist.shape)
        q_fric_var[tr] = q_var.reshape(len(tr), -1)
        fr = {name: cls().fit(q_hist, q_fric, mask, q_fric_var) for name, cls in FRICTION_MODELS.items()}
        q_eff = q_hist - fr["M3"].friction(q_hist)
    assert p_m1 is not None  # the loop runs at least once
    return TrainedPressModels(structure=model, friction=fr, p_train_m1=p_m1, q_fric_train=q_fric)
