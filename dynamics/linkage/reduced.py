"""Reduced one-degree-of-freedom form of a crank-driven linkage, tabulated for live use (methods.md c.6).

    tau = I(th) th'' + 1/2 I'(th) th'^2 + G(th) - J_P(th)^T F            (N m, about +z)
    I  = q_th^T M q_th   (kg m^2),   I' = dI/dth,   G = -q_th^T h_gravity = dV/dth  (N m)
    J_P = d r_P / d th   (m/rad, foot point P, planar frame x forward, y up)

q_th and q_thth come from `kinematics.input_derivatives` on the assembled branch. I, G, r_P and J_P
are tabulated on a periodic grid of K crank angles and interpolated with periodic cubic splines;
I' is the derivative of the I spline (so I and I' are consistent). No division by th'.
Evaluation is vectorised (`lookup`, `crank_torque`) with a scalar fast path for one sample at a
time (`crank_torque_one`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline

from . import constraints as C
from .kinematics import input_derivatives
from .model import Linkage, LinkageError
from .position import assembled_positions, chunks

CHANNELS = ("I", "dI", "G", "x", "y", "Jx", "Jy")


@dataclass(frozen=True, eq=False)
class ReducedTable:
    """Piecewise-cubic tables over one crank revolution.

    coef (K, 4, 7): on [th_k, th_k + step], value = ((c0 t + c1) t + c2) t + c3 with t = th - th_k,
    channels CHANNELS (I kg m^2, dI kg m^2/rad, G N m, x y m, Jx Jy m/rad). rows: the same
    coefficients of I, dI, G, Jx, Jy flattened to one 20-float tuple per interval (scalar fast path).
    """

    name: str
    step: float
    coef: np.ndarray
    rows: tuple

    @property
    def size(self) -> int:
        return self.coef.shape[0]


def tabulate(model: Linkage, size: int = 720) -> ReducedTable:
    """Tables of I, G, r_P and J_P at `size` crank angles 2 pi k/size (vectorised over the grid)."""
    if model.input_kind != "angle":
        raise LinkageError(f"{model.name}: the reduced crank form needs an angle driver (crank)")
    if not isinstance(size, int) or size < 8:
        raise LinkageError(f"size: expected an integer >= 8 grid points per revolution, got {size!r}")
    th = 2.0 * np.pi * np.arange(size) / size
    q = assembled_positions(model, th)
    q_s = np.concatenate([input_derivatives(model, q[c], th[c])[0] for c in chunks(model, size)])
    Mq = model.mass_diag * q_s
    I = np.einsum("ni,ni->n", q_s, Mq)
    G = -q_s @ model.gravity_force
    r = C.point_positions(model, q, model.foot)
    Jp = np.einsum("nci,ni->nc", C.point_jacobian(model, q, model.foot), q_s)
    y = np.column_stack([I, G, r, Jp])
    spl = CubicSpline(np.append(th, 2.0 * np.pi), np.vstack([y, y[:1]]), bc_type="periodic")
    c = np.moveaxis(spl.c, 0, 1)  # (K, 4, 6), highest power first
    dI = np.zeros((size, 4))
    dI[:, 1:] = c[:, :3, 0] * np.array([3.0, 2.0, 1.0])
    coef = np.concatenate([c[:, :, :1], dI[:, :, None], c[:, :, 1:]], axis=2)
    fast = coef[:, :, [0, 1, 2, 5, 6]].transpose(0, 2, 1).reshape(size, 20)
    return ReducedTable(name=model.name, step=2.0 * np.pi / size, coef=coef,
                        rows=tuple(tuple(r) for r in fast.tolist()))


def lookup(table: ReducedTable, theta) -> np.ndarray:
    """Interpolated channels at crank angles theta (N,) rad (any real value): shape (N, 7)."""
    th = np.atleast_1d(np.asarray(theta, dtype=float))
    if not np.all(np.isfinite(th)):
        raise LinkageError("theta: contains NaN or inf")
    x = np.mod(th, 2.0 * np.pi) / table.step
    k = np.minimum(x.astype(np.intp), table.size - 1)
    t = ((x - k) * table.step)[:, None]
    c = table.coef[k]
    return ((c[:, 0] * t + c[:, 1]) * t + c[:, 2]) * t + c[:, 3]


def crank_torque(table: ReducedTable, theta, theta_d, theta_dd, foot_force=None) -> np.ndarray:
    """tau (N,) in N m for crank angle, rate, acceleration (N,) and foot force F (N, 2) in N."""
    v = lookup(table, theta)
    tau = v[:, 0] * np.asarray(theta_dd, float) + 0.5 * v[:, 1] * np.asarray(theta_d, float) ** 2 + v[:, 2]
    if foot_force is not None:
        F = np.asarray(foot_force, dtype=float)
        tau = tau - (v[:, 5] * F[..., 0] + v[:, 6] * F[..., 1])
    return tau


def crank_torque_one(table: ReducedTable, theta: float, theta_d: float, theta_dd: float,
                     fx: float = 0.0, fy: float = 0.0) -> float:
    """Scalar fast path of `crank_torque` for one live sample (plain floats, N m)."""
    step = table.step
    x = (theta % (2.0 * math.pi)) / step
    k = int(x)
    if k >= table.size:
        k = table.size - 1
    t = (x - k) * step
    c = table.rows[k]
    I = ((c[0] * t + c[1]) * t + c[2]) * t + c[3]
    dI = ((c[4] * t + c[5]) * t + c[6]) * t + c[7]
    G = ((c[8] * t + c[9]) * t + c[10]) * t + c[11]
    Jx = ((c[12] * t + c[13]) * t + c[14]) * t + c[15]
    Jy = ((c[16] * t + c[17]) * t + c[18]) * t + c[19]
    return I * theta_dd + 0.5 * dI * theta_d * theta_d + G - Jx * fx - Jy * fy
