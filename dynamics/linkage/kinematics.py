"""Velocity and acceleration analysis of a driven linkage (methods.md c.3), batched over samples.

    Phi_q q'  = -Phi_s s'                  (velocity; Phi_s = dPhi/ds on the driver rows)
    Phi_q q'' = gamma(q, q', s, s', s'')    (acceleration)

q (N, n) in m and rad (planar frame x forward, y up); s, s', s'' (N,) the input, its rate and its
second derivative (rad, rad/s, rad/s^2 for a crank).
"""
from __future__ import annotations

import numpy as np

from . import constraints as C
from .model import Linkage, SingularConfigurationError


def solve(model: Linkage, A: np.ndarray, rhs: np.ndarray, kkt: bool = False) -> np.ndarray:
    """Batched solve of A x = rhs, A (N, k, k), rhs (N, k): Phi_q systems (k = n) or KKT systems
    (k = n + m, kkt=True), split into the independent blocks of `Linkage.components`."""
    comps = model.components
    try:
        if len(comps) == 1:
            return np.linalg.solve(A, rhs[..., None])[..., 0]
        n = model.n_coords
        x = np.empty(rhs.shape)
        for cols, rows in comps:
            idx = np.concatenate([cols, n + rows]) if kkt else None
            r, c = (idx, idx) if kkt else (rows, cols)
            x[:, c] = np.linalg.solve(A[:, r[:, None], c], rhs[:, r][..., None])[..., 0]
        return x
    except np.linalg.LinAlgError:
        raise SingularConfigurationError(
            f"{model.name}: singular constraint Jacobian: the linkage is at a singular configuration "
            "(dead centre or branch point)") from None


def velocities(model: Linkage, q: np.ndarray, s, sd) -> np.ndarray:
    """q' (N, n) from Phi_q q' = -Phi_s s'."""
    q = C._check(model, q)
    N = q.shape[0]
    sd = C._check_s(sd, N, "sd")
    rhs = -C.input_derivative(model, C._check_s(s, N, "s")) * sd[:, None]
    return solve(model, C.jacobian(model, q), rhs)


def accelerations(model: Linkage, q: np.ndarray, qd: np.ndarray, s, sd, sdd) -> np.ndarray:
    """q'' (N, n) from Phi_q q'' = gamma."""
    return solve(model, C.jacobian(model, q), C.gamma(model, q, qd, s, sd, sdd))


def input_derivatives(model: Linkage, q: np.ndarray, s) -> tuple[np.ndarray, np.ndarray]:
    """q_s = dq/ds and q_ss = d^2q/ds^2, each (N, n) (methods.md c.6):
    Phi_q q_s = -Phi_s,  Phi_q q_ss = gamma(q, q' = q_s, s' = 1, s'' = 0)."""
    q = C._check(model, q)
    s = C._check_s(s, q.shape[0], "s")
    one = np.ones_like(s)
    q_s = velocities(model, q, s, one)
    return q_s, accelerations(model, q, q_s, s, one, np.zeros_like(s))
