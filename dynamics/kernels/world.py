"""Compiled contact stage of the Jansen world (numba): the same quantities and floating-point steps as
`dynamics.plants.jansen_world.contact` (the numpy reference), in one loop over the legs.

Inputs: lcode, lp = (K, n, damping, v_min, χ̂) and fcode, fp as `dynamics.contact._law_codes` gives
them (non-latching laws only); coef (K, 4, 7) the leg's reduced table; shaft (L,) int64; sigma,
offset, bx (L,); par = (table step rad, mass kg, g m/s²); q, u (5,). Outputs written in place:
foot, vel, force (L, 2) lab x/z (m, m/s, N); Q (5,); DK (2, 5, 5) = (D, K); inertia (2,) kg m².
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .ground import CONSTANT_DAMPING, KELVIN_VOIGT, NO_FRICTION, _mu

EPS_D, EPS_V = 1e-7, 1e-6  # as jansen_world._EPS_D, _EPS_V


@njit(cache=True, inline="always")
def _fn(lcode, lp, d, dd):
    """Normal force of a non-latching law (contact.normal_force): 0 where δ ≤ 0, clamped ≥ 0."""
    if not d > 0.0:
        return 0.0
    if lcode == KELVIN_VOIGT:
        f = lp[0] * d + lp[2] * dd
    else:
        f = lp[0] * d ** lp[1]
        if lcode == CONSTANT_DAMPING:
            f = f * (1.0 + 1.5 * lp[2] * dd)
    return f if f > 0.0 else 0.0


@njit(cache=True, inline="always")
def _ft(fcode, fp, fn, v):
    """Planar friction force (contact.friction_force with d = 1)."""
    if fcode == NO_FRICTION:
        return 0.0
    s = abs(v)
    return -(_mu(fcode, fp, s) * fn / (s if s > 0.0 else 1.0)) * v


@njit(cache=True)
def jansen_contact(lcode, lp, fcode, fp, coef, shaft, sigma, offset, bx, par, q, u, foot, vel, force, Q, DK, inertia):
    L = shaft.shape[0]
    step, mass, g = par[0], par[1], par[2]
    K = coef.shape[0]
    c, sn = math.cos(q[2]), math.sin(q[2])
    for i in range(5):
        Q[i] = 0.0
        for j in range(5):
            DK[0, i, j] = 0.0
            DK[1, i, j] = 0.0
    inertia[0] = inertia[1] = 0.0
    b = np.zeros((2, 5))
    jac = np.zeros((2, 2, 2))
    two_pi = 2.0 * math.pi
    for l in range(L):
        th = sigma[l] * q[3 + shaft[l]] + offset[l]
        x = (th % two_pi) / step
        k = min(int(x), K - 1)
        t = (x - k) * step
        v = np.empty(7)
        for ch in range(7):
            v[ch] = ((coef[k, 0, ch] * t + coef[k, 1, ch]) * t + coef[k, 2, ch]) * t + coef[k, 3, ch]
        rx, rz = bx[l] * v[3], v[4]
        jx, jz = bx[l] * sigma[l] * v[5], sigma[l] * v[6]
        fx = q[0] + c * rx - sn * rz
        fz = q[1] + sn * rx + c * rz
        foot[l, 0], foot[l, 1] = fx, fz
        b[:, :] = 0.0
        b[0, 0] = b[1, 1] = 1.0
        b[0, 2], b[1, 2] = q[1] - fz, fx - q[0]
        col = 3 + shaft[l]
        b[0, col], b[1, col] = c * jx - sn * jz, sn * jx + c * jz
        for a in range(2):
            s_ = 0.0
            for j in range(5):
                s_ += b[a, j] * u[j]
            vel[l, a] = s_
        d, dd = -fz, -vel[l, 1]
        fn = _fn(lcode, lp, d, dd)
        fn_d = (_fn(lcode, lp, d + EPS_D, dd) - fn) / EPS_D
        fn_v = (_fn(lcode, lp, d, dd + EPS_V) - fn) / EPS_V
        ft = _ft(fcode, fp, fn, vel[l, 0])
        ft_n = ft / fn if fn > 0.0 else 0.0
        jac[:, :, :] = 0.0
        if fcode != NO_FRICTION:
            jac[0, 0, 0] = (_ft(fcode, fp, fn, vel[l, 0] + EPS_V) - ft) / EPS_V
            jac[0, 0, 1], jac[1, 0, 1] = -ft_n * fn_v, -ft_n * fn_d
        jac[0, 1, 1], jac[1, 1, 1] = -fn_v, -fn_d
        force[l, 0], force[l, 1] = ft, fn
        for i in range(5):
            Q[i] += b[0, i] * ft + b[1, i] * fn
            for m in range(2):
                for j in range(5):
                    DK[m, i, j] += (b[0, i] * jac[m, 0, 0] + b[1, i] * jac[m, 1, 0]) * b[0, j] + \
                                   (b[0, i] * jac[m, 0, 1] + b[1, i] * jac[m, 1, 1]) * b[1, j]
        Q[col] -= 0.5 * sigma[l] * v[1] * u[col] * u[col] + sigma[l] * v[2]
        inertia[shaft[l]] += v[0]
    Q[1] -= mass * g
