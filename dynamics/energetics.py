"""Actuator energetics: power, net / positive / absolute work, per-cycle energy split by stance and
swing (methods.md l; Batbaatar 2021 thesis Eq. 2.20). Functions of arrays, time first.

    P = tau omega                                   (W; crank: tau theta', joint: M_i psi'_i)
    W_net = int P dt,   W_pos = int max(P, 0) dt,   W_abs = int |P| dt      (J)

Signals are piecewise linear between samples and integrated exactly as such: zero crossings of P
and of the stance signal and the cycle boundaries are inserted as breakpoints, so |P| and max(P, 0)
are integrated without the bias of sampling them. The ground-reaction moment is in P if it was in
the torque passed in; say so where results are reported.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class EnergeticsError(ValueError):
    """Bad array argument (shape, NaN, non-increasing time); the message names it."""


@dataclass(frozen=True)
class CycleEnergy:
    """Work per interval between consecutive boundaries, each (K,) in J.

    net = int P dt, positive = int max(P, 0) dt, absolute = int |P| dt; stance_* and swing_* split
    net and absolute by the stance signal (stance where it is > 0; all swing when none was given).
    """

    boundaries: np.ndarray
    net: np.ndarray
    positive: np.ndarray
    absolute: np.ndarray
    stance_net: np.ndarray
    stance_absolute: np.ndarray
    swing_net: np.ndarray
    swing_absolute: np.ndarray


def power(tau, omega) -> np.ndarray:
    """P = tau omega elementwise (W), any matching shapes (N,) or (N, k) (N m and rad/s)."""
    tau, omega = np.asarray(tau, dtype=float), np.asarray(omega, dtype=float)
    if tau.shape != omega.shape:
        raise EnergeticsError(f"tau and omega: shapes differ, {tau.shape} vs {omega.shape}")
    return tau * omega


def _check_t(t: np.ndarray, y: np.ndarray, name: str) -> None:
    if t.ndim != 1 or t.shape[0] < 2 or not np.all(np.diff(t) > 0):
        raise EnergeticsError(f"t: expected strictly increasing times (N >= 2,) in s, got shape {t.shape}")
    if y.shape != t.shape:
        raise EnergeticsError(f"{name}: expected shape {t.shape} (one value per time), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise EnergeticsError(f"{name}: contains NaN or inf")


def _zero_crossings(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    k = np.flatnonzero(y[:-1] * y[1:] < 0)
    return t[k] + y[k] / (y[k] - y[k + 1]) * (t[k + 1] - t[k])


def cycle_energy(t, p, boundaries, stance=None) -> CycleEnergy:
    """Work of power p (N,) W sampled at t (N,) s between consecutive boundaries (K + 1,) s.

    stance (N,): a signal positive in stance (e.g. penetration delta, m) or a boolean mask.
    """
    t, p = np.asarray(t, dtype=float), np.asarray(p, dtype=float)
    _check_t(t, p, "power")
    b = np.asarray(boundaries, dtype=float)
    if b.ndim != 1 or b.shape[0] < 2 or np.any(np.diff(b) <= 0) or b[0] < t[0] or b[-1] > t[-1]:
        raise EnergeticsError(f"boundaries: expected increasing times within [{t[0]}, {t[-1]}] s, got {b}")
    if stance is None:
        st = -np.ones_like(t)
    else:
        st = np.asarray(stance)
        st = np.where(st, 1.0, -1.0) if st.dtype == bool else np.asarray(st, dtype=float)
        _check_t(t, st, "stance")
    u = np.unique(np.concatenate([t, _zero_crossings(t, p), _zero_crossings(t, st), b]))
    u = u[(u >= b[0]) & (u <= b[-1])]
    pu = np.interp(u, t, p)
    du = np.diff(u)
    seg = 0.5 * (pu[:-1] + pu[1:]) * du           # P linear, one sign on each piece
    mid = 0.5 * (u[:-1] + u[1:])
    in_stance = np.interp(mid, t, st) > 0
    cyc = np.searchsorted(b, mid, side="right") - 1
    K = b.shape[0] - 1

    def total(w):
        return np.bincount(cyc, weights=w, minlength=K)[:K]

    return CycleEnergy(
        boundaries=b, net=total(seg), positive=total(np.maximum(seg, 0.0)), absolute=total(np.abs(seg)),
        stance_net=total(seg * in_stance), stance_absolute=total(np.abs(seg) * in_stance),
        swing_net=total(seg * ~in_stance), swing_absolute=total(np.abs(seg) * ~in_stance))


def work(t, p, stance=None) -> CycleEnergy:
    """Work over the whole record [t_0, t_N-1]: `cycle_energy` with one interval."""
    t = np.asarray(t, dtype=float)
    return cycle_energy(t, p, [t[0], t[-1]] if t.ndim == 1 and t.size else [0.0], stance)


def cycle_boundaries(t, theta, theta0: float = 0.0) -> np.ndarray:
    """Times (K,) s at which the unwrapped crank angle theta (N,) rad crosses theta0 + 2 pi k,
    linearly interpolated between samples (either direction of rotation)."""
    t, th = np.asarray(t, dtype=float), np.asarray(theta, dtype=float)
    _check_t(t, th, "theta")
    k = np.floor((th - theta0) / (2.0 * np.pi))
    j = np.flatnonzero(k[1:] != k[:-1])
    level = theta0 + 2.0 * np.pi * np.maximum(k[j], k[j + 1])
    return t[j] + (level - th[j]) / (th[j + 1] - th[j]) * (t[j + 1] - t[j])
