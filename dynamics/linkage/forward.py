"""Forward dynamics of a linkage with its driver released: Baumgarte-stabilised KKT system plus
optional position/velocity projection (methods.md c.4, i.2).

    [ M      Phi_K^T ] [ q'' ]   [ h + Q b                                   ]
    [ Phi_K     0    ] [ lam ] = [ gamma_K - 2 alpha Phi_K' - beta^2 Phi_K   ]

Phi_K are the rows of the released linkage, Phi_K' = Phi_K,q q': every row but the drivers, and
for a linkage with several driver rows on one input (a walker's cranks on one shaft) the couplings
Phi^Dk - Phi^D1 = 0 (k >= 2), which keep the drivers together without fixing the input. The
actuator effort Q (crank torque, N m) does virtual work Q ds with s defined by the first driver
row, so it enters through b = -Phi_q^D1 / Phi_s^D1 (e_phi of the crank for an angle driver).
Projection after a step (M-orthogonal, so it never adds kinetic energy):

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


def _released(model: Linkage) -> tuple[np.ndarray, int, np.ndarray]:
    """(kinematic rows, first driver row, the other driver rows) of the released linkage: its rows
    are Phi[kinematic] and the couplings Phi[other] - Phi[first]."""
    drivers = model.driver_rows
    if drivers.size > 1 and np.any(model.dist_driven):
        raise LinkageError(f"{model.name}: forward dynamics of several distance drivers on one input "
                           "is not supported (their rows differ in dPhi/ds); use one driver")
    if np.any(model.mass_diag <= 0):
        raise LinkageError(f"{model.name}: forward dynamics needs positive masses and inertias")
    return model.kinematic_rows, int(drivers[0]), drivers[1:]


def _combine(released, x: np.ndarray) -> np.ndarray:
    """Rows (axis 1) of the released linkage from rows of the full one: x[kinematic], x[other] - x[first]."""
    krows, d0, others = released
    return np.concatenate([x[:, krows], x[:, others] - x[:, d0:d0 + 1]], axis=1)


def _rows(model: Linkage, released, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Phi_K (N, r), Phi_K,q (N, r, n) of the released linkage and the full Phi_q (N, m, n) at q (N, n)."""
    J = C.jacobian(model, q)
    phi = _combine(released, C.residual(model, q, 0.0))
    if model.input_kind == "angle":          # couplings of angles: equal modulo 2 pi
        k = released[0].size
        phi[:, k:] = (phi[:, k:] + np.pi) % (2.0 * np.pi) - np.pi
    return phi, _combine(released, J), J


def accelerations(model: Linkage, q: np.ndarray, qd: np.ndarray, effort: float = 0.0,
                  alpha: float = 15.0, beta: float = np.sqrt(30.0)) -> np.ndarray:
    """q'' (n,) of the released linkage under gravity and driver effort Q (N m or N)."""
    return _accelerations(model, q, qd, effort, alpha, beta, _released(model))


def _accelerations(model, q, qd, effort, alpha, beta, released) -> np.ndarray:
    d0 = released[1]
    phi, Jk, J = (x[0] for x in _rows(model, released, q[None, :]))
    g = _combine(released, C.gamma(model, q[None, :], qd[None, :], 0.0, 0.0, 0.0))[0]
    Minv = 1.0 / model.mass_diag
    h = model.gravity_force
    if effort:
        # b = -Phi_q^D / Phi_s^D (s = 0: a distance driver at its nominal length)
        h = h - effort * J[d0] / C.input_derivative(model, 0.0)[0, d0]
    rhs = g - 2.0 * alpha * (Jk @ qd) - beta * beta * phi
    # M is diagonal: eliminate q'' (Schur complement), (Phi_K,q M^-1 Phi_K,q^T) lam = Phi_K,q M^-1 h - rhs
    try:
        lam = np.linalg.solve((Jk * Minv) @ Jk.T, Jk @ (Minv * h) - rhs)
    except np.linalg.LinAlgError:
        raise LinkageError(f"{model.name}: singular KKT matrix: dependent constraints or a singular "
                           "configuration of the released linkage") from None
    return Minv * (h - Jk.T @ lam)


def project(model: Linkage, q: np.ndarray, qd: np.ndarray, tol: float = 1e-12,
            max_iter: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """M-orthogonal projection of (q, q') (n,) onto Phi_K = 0 and Phi_K,q q' = 0."""
    released = _released(model)
    Minv = 1.0 / model.mass_diag
    q = q.copy()
    J = _rows(model, released, q[None, :])[1][0]
    for _ in range(max_iter):
        phi = _rows(model, released, q[None, :])[0][0]
        if np.linalg.norm(phi) < tol:
            break
        # simplified Newton (Jacobian of the step's start): the corrections are tiny
        q -= Minv * (J.T @ np.linalg.solve((J * Minv) @ J.T, phi))
    else:
        raise LinkageError(f"{model.name}: position projection did not converge (||Phi|| = "
                           f"{np.linalg.norm(phi):.3g}): the state left the assembly")
    J = _rows(model, released, q[None, :])[1][0]
    qd = qd - Minv * (J.T @ np.linalg.solve((J * Minv) @ J.T, J @ qd))
    return q, qd


def simulate(model: Linkage, q0: np.ndarray, qd0: np.ndarray, t_end: float, dt: float,
             torque: Torque | None = None, alpha: float = 15.0, beta: float = np.sqrt(30.0),
             method: str = "rk4", projection: bool = True) -> Trajectory:
    """Integrate the released linkage from (q0, q0') (n,) for t in [0, t_end] s with fixed step dt.

    torque(t, q, q') -> driver effort (N m); None = torque-free. method "rk4" or "euler" (explicit
    Euler, the Batbaatar thesis's choice with alpha = 15, beta = sqrt 30, dt = 1 ms).
    """
    if method not in ("rk4", "euler"):
        raise LinkageError(f"method: expected 'rk4' or 'euler', got {method!r}")
    if not (dt > 0 and t_end > 0):
        raise LinkageError(f"dt and t_end: expected positive times, got dt={dt!r}, t_end={t_end!r}")
    released = _released(model)
    q = C._check(model, np.atleast_2d(q0))[0].copy()
    qd = C._check(model, np.atleast_2d(qd0), "qd0")[0].copy()
    steps = int(round(t_end / dt))
    t = dt * np.arange(steps + 1)
    Q, QD = np.empty((steps + 1, q.size)), np.empty((steps + 1, q.size))
    Q[0], QD[0] = q, qd

    def f(tk, y):
        qq, vv = y[:q.size], y[q.size:]
        tau = torque(tk, qq, vv) if torque is not None else 0.0
        return np.concatenate([vv, _accelerations(model, qq, vv, tau, alpha, beta, released)])

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
    phi, Jk, _ = _rows(model, released, Q)
    phid = np.einsum("nmi,ni->nm", Jk, QD)
    return Trajectory(t=t, q=Q, qd=QD, E_p=np.einsum("nm,nm->n", phi, phi),
                      E_v=np.einsum("nm,nm->n", phid, phid))
