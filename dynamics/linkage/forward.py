"""Forward dynamics of a linkage with its driver released: Baumgarte-stabilised KKT system plus
optional position/velocity projection (methods.md c.4, i.2).

    [ M      Phi_K^T ] [ q'' ]   [ h + Q b                                   ]
    [ Phi_K     0    ] [ lam ] = [ gamma_K - 2 alpha Phi_K' - beta^2 Phi_K   ]

Phi_K are the kinematic rows (every row but the driver), Phi_K' = Phi_K,q q'. The actuator effort
Q (crank torque, N m) enters through b = -Phi_q^D / Phi_s^D (e_phi of the crank for an angle
driver). Projection after a step (M-orthogonal, so it never adds kinetic energy):

    q  <- q - M^-1 Phi_q^T (Phi_q M^-1 Phi_q^T)^-1 Phi        (Newton, until ||Phi|| < 1e-12)
    q' <- q' - M^-1 Phi_q^T (Phi_q M^-1 Phi_q^T)^-1 Phi_q q'
Violation metrics E_p = Phi^T Phi (m^2), E_v = Phi'^T Phi' (m^2/s^2) (Eqs. 2.13-2.14).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import constraints as C
from .model import Linkage, LinkageError

Torque = Callable[[float, np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class Trajectory:
    """Simulated motion: t (N,) s, q and qd (N, n), E_p and E_v (N,) constraint violation metrics."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    E_p: np.ndarray
    E_v: np.ndarray


def mechanical_energy(model: Linkage, q: np.ndarray, qd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kinetic T = 1/2 q'^T M q' and potential V = sum m_i g y_i, each (N,) in J."""
    q, qd = C._check(model, q), C._check(model, qd, "qd")
    return 0.5 * np.einsum("ni,i,ni->n", qd, model.mass_diag, qd), -q @ model.gravity_force


def _driver(model: Linkage) -> tuple[np.ndarray, int]:
    rows = model.driver_rows
    if rows.size != 1:
        raise LinkageError(f"{model.name}: forward dynamics needs exactly one driver row, has {rows.size}")
    return model.kinematic_rows, int(rows[0])


def accelerations(model: Linkage, q: np.ndarray, qd: np.ndarray, effort: float = 0.0,
                  alpha: float = 15.0, beta: float = np.sqrt(30.0)) -> np.ndarray:
    """q'' (n,) of the released linkage under gravity and driver effort Q (N m or N)."""
    return _accelerations(model, q, qd, effort, alpha, beta, *_driver(model))


def _accelerations(model, q, qd, effort, alpha, beta, krows, drow) -> np.ndarray:
    n = model.n_coords
    J = C.jacobian(model, q[None, :])[0]
    Jk = J[krows]
    phi = C.residual(model, q[None, :], 0.0)[0, krows]
    g = C.gamma(model, q[None, :], qd[None, :], 0.0, 0.0, 0.0)[0, krows]
    m = krows.size
    K = np.zeros((n + m, n + m))
    K[np.arange(n), np.arange(n)] = model.mass_diag
    K[:n, n:] = Jk.T
    K[n:, :n] = Jk
    h = model.gravity_force
    if effort:
        # b = -Phi_q^D / Phi_s^D (s = 0: a distance driver at its nominal length)
        h = h - effort * J[drow] / C.input_derivative(model, 0.0)[0, drow]
    rhs = np.concatenate([h, g - 2.0 * alpha * (Jk @ qd) - beta * beta * phi])
    try:
        return np.linalg.solve(K, rhs)[:n]
    except np.linalg.LinAlgError:
        raise LinkageError(f"{model.name}: singular KKT matrix: dependent constraints or a singular "
                           "configuration of the released linkage") from None


def project(model: Linkage, q: np.ndarray, qd: np.ndarray, tol: float = 1e-12,
            max_iter: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """M-orthogonal projection of (q, q') (n,) onto Phi_K = 0 and Phi_K,q q' = 0."""
    krows, _ = _driver(model)
    Minv = 1.0 / model.mass_diag
    q = q.copy()
    J = C.jacobian(model, q[None, :])[0, krows]
    for _ in range(max_iter):
        phi = C.residual(model, q[None, :], 0.0)[0, krows]
        if np.linalg.norm(phi) < tol:
            break
        # simplified Newton (Jacobian of the step's start): the corrections are tiny
        q -= Minv * (J.T @ np.linalg.solve((J * Minv) @ J.T, phi))
    else:
        raise LinkageError(f"{model.name}: position projection did not converge (||Phi|| = "
                           f"{np.linalg.norm(phi):.3g}): the state left the assembly")
    J = C.jacobian(model, q[None, :])[0, krows]
    qd = qd - Minv * (J.T @ np.linalg.solve((J * Minv) @ J.T, J @ qd))
    return q, qd


def simulate(model: Linkage, q0: np.ndarray, qd0: np.ndarray, t_end: float, dt: float,
             torque: Torque | None = None, alpha: float = 15.0, beta: float = np.sqrt(30.0),
             method: str = "rk4", projection: bool = True) -> Trajectory:
    """Integrate the released linkage from (q0, q0') (n,) for t in [0, t_end] s with fixed step dt.

    torque(t, q, q') -> driver effort (N m); None = torque-free. method "rk4" or "euler" (explicit
    Euler, the Batbaatar thesis's choice with alpha = 15, beta = sqrt 30, dt = 1 ms).
    """
    if np.any(model.mass_diag <= 0):
        raise LinkageError(f"{model.name}: forward dynamics needs positive masses and inertias")
    if method not in ("rk4", "euler"):
        raise LinkageError(f"method: expected 'rk4' or 'euler', got {method!r}")
    if not (dt > 0 and t_end > 0):
        raise LinkageError(f"dt and t_end: expected positive times, got dt={dt!r}, t_end={t_end!r}")
    krows, drow = _driver(model)
    q = C._check(model, np.atleast_2d(q0))[0].copy()
    qd = C._check(model, np.atleast_2d(qd0), "qd0")[0].copy()
    steps = int(round(t_end / dt))
    t = dt * np.arange(steps + 1)
    Q, QD = np.empty((steps + 1, q.size)), np.empty((steps + 1, q.size))
    Q[0], QD[0] = q, qd

    def f(tk, y):
        qq, vv = y[:q.size], y[q.size:]
        tau = torque(tk, qq, vv) if torque is not None else 0.0
        return np.concatenate([vv, _accelerations(model, qq, vv, tau, alpha, beta, krows, drow)])

    y = np.concatenate([q, qd])
    for k in range(steps):
        tk = t[k]
        if method == "euler":
            y = y + dt * f(tk, y)
        else:
            k1 = f(tk, y)
            k2 = f(tk + dt / 2, y + dt / 2 * k1)
            k3 = f(tk + dt / 2, y + dt / 2 * k2)
            k4 = f(tk + dt, y + dt * k3)
            y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        if projection:
            y = np.concatenate(project(model, y[:q.size], y[q.size:]))
        Q[k + 1], QD[k + 1] = y[:q.size], y[q.size:]
    phi = C.residual(model, Q, 0.0)[:, krows]
    phid = np.einsum("nmi,ni->nm", C.jacobian(model, Q)[:, krows], QD)
    return Trajectory(t=t, q=Q, qd=QD, E_p=np.einsum("nm,nm->n", phi, phi),
                      E_v=np.einsum("nm,nm->n", phid, phid))
