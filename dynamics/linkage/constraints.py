"""Constraint equations of a planar linkage, batched over samples (methods.md c.1-c.2).

Every function takes q of shape (N, n) (n = 3 nb: [x_i, y_i, phi_i] per body, m and rad, planar
frame x forward, y up) and the input s of shape (N,) (crank angle, rad, or actuator extension, m),
and returns arrays whose first axis is N. Rows: pins (2 each), distances, coordinates (`model.py`).

    pin:       Phi = R_i + A_i u_i - R_j - A_j u_j,     Phi_q = [I, B_i u_i | -I, -B_j u_j]
               gamma = A_i u_i phid_i^2 - A_j u_j phid_j^2
    distance:  Phi = d.d - L^2, d = r_i - r_j, L = L0 + s (driver) or L0,
               Phi_q = 2 d^T [I, B_i u_i | -I, -B_j u_j]
               gamma = -2 dd.dd + 2 d.(A_i u_i phid_i^2 - A_j u_j phid_j^2) + 2 (sd^2 + L sdd)
    coordinate: Phi = q_j[a] - q_i[a] - value (- s for a driver), a = x, y or phi (angles wrapped
               to [-pi, pi)),  gamma = sdd (driver) or 0
with Phi_q q'' = gamma and, for the input, Phi_q q' = -Phi_s s' (Phi_s = -1 or -2L on driver rows).
The ground is body nb with q = 0, so ground points are body points of a body that never moves.
"""
from __future__ import annotations

import numpy as np

from .model import Linkage, LinkageError


def _check(model: Linkage, q: np.ndarray, name: str = "q") -> np.ndarray:
    q = np.asarray(q, dtype=float)
    if q.ndim != 2 or q.shape[1] != model.n_coords:
        raise LinkageError(f"{name}: expected shape (N, {model.n_coords}) for linkage "
                           f"{model.name!r}, got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise LinkageError(f"{name}: contains NaN or inf")
    return q


def _check_s(s, N: int, name: str) -> np.ndarray:
    s = np.broadcast_to(np.asarray(s, dtype=float), (N,)) if np.ndim(s) == 0 else np.asarray(s, float)
    if s.shape != (N,):
        raise LinkageError(f"{name}: expected shape ({N},) (one input value per sample), got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise LinkageError(f"{name}: contains NaN or inf")
    return s


def _ext(q: np.ndarray) -> np.ndarray:
    """q with the ground body's three zero coordinates appended, shape (N, n + 3)."""
    return np.concatenate([q, np.zeros((q.shape[0], 3))], axis=1)


def _rot(phi: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A(phi) u and B(phi) u = dA/dphi u for phi (N, K) and u (K, 2); each (N, K, 2)."""
    c, s = np.cos(phi), np.sin(phi)
    Au = np.empty(phi.shape + (2,))
    Au[..., 0] = c * u[:, 0] - s * u[:, 1]
    Au[..., 1] = s * u[:, 0] + c * u[:, 1]
    Bu = np.empty_like(Au)
    Bu[..., 0] = -Au[..., 1]
    Bu[..., 1] = Au[..., 0]
    return Au, Bu


def _points(qe: np.ndarray, b: np.ndarray, u: np.ndarray):
    """Positions r = R_b + A_b u, A_b u and B_b u, each (N, K, 2)."""
    Au, Bu = _rot(qe[:, 3 * b + 2], u)
    return qe[:, 3 * b[:, None] + _XY] + Au, Au, Bu


_XY = np.array([0, 1])


def _lengths(model: Linkage, s: np.ndarray) -> np.ndarray:
    return model.dist_length + np.where(model.dist_driven, s[:, None], 0.0)


def residual(model: Linkage, q: np.ndarray, s) -> np.ndarray:
    """Phi(q, s), shape (N, m)."""
    q = _check(model, q)
    s = _check_s(s, q.shape[0], "s")
    qe = _ext(q)
    rp_i, _, _ = _points(qe, model.pin_bi, model.pin_ui)
    rp_j, _, _ = _points(qe, model.pin_bj, model.pin_uj)
    pins = (rp_i - rp_j).reshape(q.shape[0], -1)
    rd_i, _, _ = _points(qe, model.dist_bi, model.dist_ui)
    rd_j, _, _ = _points(qe, model.dist_bj, model.dist_uj)
    d = rd_i - rd_j
    dist = np.einsum("nkc,nkc->nk", d, d) - _lengths(model, s) ** 2
    ax = model.coord_axis
    ang = (qe[:, 3 * model.coord_bj + ax] - qe[:, 3 * model.coord_bi + ax] - model.coord_value
           - np.where(model.coord_driven, s[:, None], 0.0))
    ang = np.where(ax == 2, (ang + np.pi) % (2.0 * np.pi) - np.pi, ang)  # angles equal modulo 2 pi
    return np.concatenate([pins, dist, ang], axis=1)


def jacobian(model: Linkage, q: np.ndarray) -> np.ndarray:
    """Phi_q, shape (N, m, n)."""
    q = _check(model, q)
    N, n = q.shape
    qe = _ext(q)
    J = np.zeros((N, model.n_rows, n + 3))
    P = len(model.pin_bi)
    rows = np.arange(P)
    for b, u, sgn in ((model.pin_bi, model.pin_ui, 1.0), (model.pin_bj, model.pin_uj, -1.0)):
        _, _, Bu = _points(qe, b, u)
        J[:, 2 * rows, 3 * b] += sgn
        J[:, 2 * rows + 1, 3 * b + 1] += sgn
        J[:, 2 * rows, 3 * b + 2] += sgn * Bu[..., 0]
        J[:, 2 * rows + 1, 3 * b + 2] += sgn * Bu[..., 1]
    D = len(model.dist_bi)
    if D:
        rows = 2 * P + np.arange(D)
        rd_i, _, Bu_i = _points(qe, model.dist_bi, model.dist_ui)
        rd_j, _, Bu_j = _points(qe, model.dist_bj, model.dist_uj)
        d2 = 2.0 * (rd_i - rd_j)
        for b, Bu, sgn in ((model.dist_bi, Bu_i, 1.0), (model.dist_bj, Bu_j, -1.0)):
            J[:, rows, 3 * b] += sgn * d2[..., 0]
            J[:, rows, 3 * b + 1] += sgn * d2[..., 1]
            J[:, rows, 3 * b + 2] += sgn * np.einsum("nkc,nkc->nk", d2, Bu)
    rows = 2 * P + D + np.arange(len(model.coord_bi))
    J[:, rows, 3 * model.coord_bj + model.coord_axis] += 1.0
    J[:, rows, 3 * model.coord_bi + model.coord_axis] -= 1.0
    return J[:, :, :n]


def input_derivative(model: Linkage, s) -> np.ndarray:
    """Phi_s = dPhi/ds, shape (N, m): -1 on angle/coordinate-driver rows, -2 (L0 + s) on distance drivers."""
    s = np.atleast_1d(np.asarray(s, dtype=float))
    out = np.zeros((s.shape[0], model.n_rows))
    P, D = 2 * len(model.pin_bi), len(model.dist_bi)
    out[:, P:P + D] = np.where(model.dist_driven, -2.0 * _lengths(model, s), 0.0)
    out[:, P + D:] = np.where(model.coord_driven, -1.0, 0.0)
    return out


def gamma(model: Linkage, q: np.ndarray, qd: np.ndarray, s, sd, sdd) -> np.ndarray:
    """Acceleration right-hand side gamma with Phi_q q'' = gamma, shape (N, m).

    qd (N, n) in m/s and rad/s; s, sd, sdd (N,) input, its rate and its second derivative.
    """
    q = _check(model, q)
    qd = _check(model, qd, "qd")
    N = q.shape[0]
    s, sd, sdd = (_check_s(v, N, nm) for v, nm in ((s, "s"), (sd, "sd"), (sdd, "sdd")))
    qe, qde = _ext(q), _ext(qd)

    def centripetal(b, u):
        r, Au, Bu = _points(qe, b, u)
        w = qde[:, 3 * b + 2]
        vel = np.stack([qde[:, 3 * b], qde[:, 3 * b + 1]], axis=-1) + Bu * w[..., None]
        return r, Au * (w ** 2)[..., None], vel

    _, ci, _ = centripetal(model.pin_bi, model.pin_ui)
    _, cj, _ = centripetal(model.pin_bj, model.pin_uj)
    pins = (ci - cj).reshape(N, -1)
    ri, ci, vi = centripetal(model.dist_bi, model.dist_ui)
    rj, cj, vj = centripetal(model.dist_bj, model.dist_uj)
    d, dd = ri - rj, vi - vj
    L = _lengths(model, s)
    drv = np.where(model.dist_driven, 2.0 * (sd[:, None] ** 2 + L * sdd[:, None]), 0.0)
    dist = -2.0 * np.einsum("nkc,nkc->nk", dd, dd) + 2.0 * np.einsum("nkc,nkc->nk", d, ci - cj) + drv
    ang = np.where(model.coord_driven, sdd[:, None], 0.0) * np.ones((N, len(model.coord_bi)))
    return np.concatenate([pins, dist, ang], axis=1)


def point_positions(model: Linkage, q: np.ndarray, name: str) -> np.ndarray:
    """Position of a named moving point, shape (N, 2), m."""
    q = _check(model, q)
    b, u = model.point(name)
    r, _, _ = _points(_ext(q), np.array([b]), u[None, :])
    return r[:, 0, :]


def point_jacobian(model: Linkage, q: np.ndarray, name: str) -> np.ndarray:
    """J_P = dr_P/dq of a named point, shape (N, 2, n): [I, B_b u] in the columns of its body."""
    q = _check(model, q)
    b, u = model.point(name)
    _, _, Bu = _points(_ext(q), np.array([b]), u[None, :])
    J = np.zeros((q.shape[0], 2, model.n_coords))
    J[:, 0, 3 * b] = 1.0
    J[:, 1, 3 * b + 1] = 1.0
    J[:, :, 3 * b + 2] = Bu[:, 0, :]
    return J
