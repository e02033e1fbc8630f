"""Inverse dynamics of a driven linkage through the augmented (KKT) system (methods.md c.5).

    [ M    Phi_q^T ] [ q'' ]   [ h     ]        M = diag(m_i, m_i, J_i),
    [ Phi_q   0    ] [ lam ] = [ gamma ]        h = h_gravity + J_P^T F_foot

Sign convention M q'' + Phi_q^T lam = h. The driver effort (crank torque in N m about +z for an
angle driver, actuator force in N along the extension for a distance driver) is
Q = sum_k lam_k dPhi_k/ds over the driver rows (= -lam^D for a crank, methods.md c.5); the pin
reaction of pin k on its first body i is -lam^k, on its second body +lam^k (N, planar frame).
Power identity (independent of lam):  Q s' = q'^T (M q'' - h).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import constraints as C
from .kinematics import solve
from .model import Linkage, LinkageError


@dataclass(frozen=True)
class InverseDynamics:
    """Result of `inverse_dynamics`; every array has N samples first.

    qdd (N, n) accelerations; lam (N, m) multipliers; effort (N,) driver torque (N m) or force (N);
    pin_forces (N, P, 2) force of each pin on its first body (N); row_names (m,) for lam.
    """

    qdd: np.ndarray
    lam: np.ndarray
    effort: np.ndarray
    pin_forces: np.ndarray
    row_names: tuple[str, ...]


def applied_forces(model: Linkage, q: np.ndarray, foot_force: np.ndarray | None = None) -> np.ndarray:
    """h (N, n): gravity [0, -m_i g, 0] per body plus J_P^T F for a force F (N, 2) in N at the foot."""
    q = C._check(model, q)
    h = np.broadcast_to(model.gravity_force, q.shape).copy()
    if foot_force is not None:
        F = np.asarray(foot_force, dtype=float)
        F = np.broadcast_to(F, (q.shape[0], 2)) if F.shape == (2,) else F
        if F.shape != (q.shape[0], 2) or not np.all(np.isfinite(F)):
            raise LinkageError(f"foot_force: expected finite shape ({q.shape[0]}, 2) in N, got {F.shape}")
        h += np.einsum("nci,nc->ni", C.point_jacobian(model, q, model.foot), F)
    return h


def inverse_dynamics(model: Linkage, q: np.ndarray, qd: np.ndarray, s, sd, sdd,
                     foot_force: np.ndarray | None = None) -> InverseDynamics:
    """Solve the KKT system at every sample; q, qd (N, n) consistent with the input s, sd, sdd (N,)."""
    q = C._check(model, q)
    N, n = q.shape
    m = model.n_rows
    Jc = C.jacobian(model, q)
    K = np.zeros((N, n + m, n + m))
    K[:, np.arange(n), np.arange(n)] = model.mass_diag
    K[:, :n, n:] = np.swapaxes(Jc, 1, 2)
    K[:, n:, :n] = Jc
    rhs = np.concatenate([applied_forces(model, q, foot_force),
                          C.gamma(model, q, qd, s, sd, sdd)], axis=1)
    x = solve(model, K, rhs, kkt=True)
    qdd, lam = x[:, :n], x[:, n:]
    effort = np.einsum("nm,nm->n", lam, C.input_derivative(model, C._check_s(s, N, "s")))
    P = len(model.pin_bi)
    return InverseDynamics(qdd=qdd, lam=lam, effort=effort,
                           pin_forces=-lam[:, :2 * P].reshape(N, P, 2), row_names=model.row_names)


def effort_from_power(model: Linkage, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, sd,
                      foot_force: np.ndarray | None = None) -> np.ndarray:
    """Driver effort from the power identity Q = q'^T (M q'' - h) / s', shape (N,).

    Singular as s' -> 0 (start, stall, reversal): raises LinkageError if any |s'| < 1e-9; use the
    multiplier (`inverse_dynamics`) or the reduced form there.
    """
    q = C._check(model, q)
    sd = C._check_s(sd, q.shape[0], "sd")
    if np.any(np.abs(sd) < 1e-9):
        raise LinkageError("sd: the power identity divides by the input rate, which is ~0 at some "
                           "samples; use the driver multiplier instead")
    h = applied_forces(model, q, foot_force)
    return np.einsum("ni,ni->n", qd, model.mass_diag * qdd - h) / sd
