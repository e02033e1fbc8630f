"""Quintic Hermite interpolation of sampled motion: values, rates and accelerations at the knots.

On an interval [t_i, t_{i+1}] of length Δ, with s = (t − t_i)/Δ, the quintic through the values p,
rates ṗ and accelerations p̈ at both knots is

    p(s) = H0 p_i + Δ H1 ṗ_i + Δ² H2 p̈_i + Δ² H3 p̈_{i+1} + Δ H4 ṗ_{i+1} + H5 p_{i+1}
    H0 = 1 − 10s³ + 15s⁴ − 6s⁵, H1 = s − 6s³ + 8s⁴ − 3s⁵, H2 = s²/2 − 3s³/2 + 3s⁴/2 − s⁵/2,
    H3 = s³/2 − s⁴ + s⁵/2,      H4 = −4s³ + 7s⁴ − 3s⁵,     H5 = 10s³ − 15s⁴ + 6s⁵

so that p, ṗ = dp/dt and p̈ = d²p/dt² equal the samples at the knots: joined interval after interval the
interpolant is C² (continuous position, rate and acceleration), and it reproduces every quintic exactly.
Pure computation; arrays time first, any units (the rates' and accelerations' are the values' per s and
per s²).
"""
from __future__ import annotations

import numpy as np

#: Coefficients of s⁰..s⁵ of the basis H0..H5 (module doc), rows in that order.
BASIS = np.array([[1.0, 0.0, 0.0, -10.0, 15.0, -6.0],
                  [0.0, 1.0, 0.0, -6.0, 8.0, -3.0],
                  [0.0, 0.0, 0.5, -1.5, 1.5, -0.5],
                  [0.0, 0.0, 0.0, 0.5, -1.0, 0.5],
                  [0.0, 0.0, 0.0, -4.0, 7.0, -3.0],
                  [0.0, 0.0, 0.0, 10.0, -15.0, 6.0]])
POWERS = np.arange(6)


def quintic_coefficients(knots: np.ndarray, Q: np.ndarray, V: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Coefficients (M, n, 6) of s⁰..s⁵ of the interpolant (module doc) on each of the M intervals of
    `knots` (M+1,) s, of values Q, rates V, accelerations A (M+1, n)."""
    d = np.diff(knots)[:, None]
    Y = np.stack([Q[:-1], d * V[:-1], d * d * A[:-1], d * d * A[1:], d * V[1:], Q[1:]], axis=-1)  # (M, n, 6)
    return Y @ BASIS


def quintic_eval(coef: np.ndarray, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Value, rate and acceleration of the polynomials `coef` (..., 6) (coefficients of s⁰..s⁵) at the
    interval fractions s and interval lengths d (s), both broadcast against coef[..., 0]:
    p = Σ c_k s^k, ṗ = Σ k c_k s^(k−1) / d, p̈ = Σ k (k−1) c_k s^(k−2) / d²."""
    sp = np.asarray(s, dtype=float)[..., None] ** POWERS
    x = (coef * sp).sum(-1)
    xd = (coef[..., 1:] * (POWERS[1:] * sp[..., :5])).sum(-1) / d
    xdd = (coef[..., 2:] * (POWERS[2:] * POWERS[1:5] * sp[..., :4])).sum(-1) / (d * d)
    return x, xd, xdd
