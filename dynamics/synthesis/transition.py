"""Transitions between nominal motions (methods.md j.6; Surla 1980 thesis, Ch. 3.3-3.4).

Quintic spline of defect 3 (local: no linear system). On nodes x_0 < ... < x_N with values f_j,
h_j = x_j - x_{j-1}, each interior node carries the three-point parabola

    u'_j  = lam_j (f_j - f_{j-1})/h_j + mu_j (f_{j+1} - f_j)/h_{j+1},   lam_j = h_{j+1}/(h_j + h_{j+1}), mu_j = 1 - lam_j
    u''_j = 2 [ (f_{j+1} - f_j)/h_{j+1} - (f_j - f_{j-1})/h_j ] / (h_j + h_{j+1})
    u_j(x) = f_j + (x - x_j) u'_j + 1/2 (x - x_j)^2 u''_j

and the end nodes the prescribed derivatives (u'_0, u''_0), (u'_N, u''_N). On [x_{j-1}, x_j]

    S(x) = u_{j-1}(x) [1 - a(s)] + u_j(x) a(s),   s = (x - x_{j-1})/h_j,   a(s) = 3 s^2 - 2 s^3

(interior intervals; S'' is continuous there because neighbouring parabolas interpolate the same three
nodes). In the two end intervals u_0 and u_N do not pass through f_1, f_{N-1}, so the blend is the
quintic a(s) = 10 s^3 - 15 s^4 + 6 s^5 (a' = a'' = 0 at both ends): S stays C^2 everywhere
(methods.md j.6, the second remedy). S reproduces every quadratic exactly.

`blend` is the setpoint transition of the controller: from one nominal's reference to another's over
a duration D with the same quintic weight, q = (1 - a) q_from + a q_to, so the setpoint, its rate and
its acceleration are continuous at both ends (no jump at the switch).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class TransitionError(ValueError):
    """Bad nodes or end conditions (the message names the argument)."""


def _cubic(s):
    return 3 * s * s - 2 * s ** 3, 6 * s - 6 * s * s, 6 - 12 * s


def _quintic(s):
    return (10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5, 30 * s * s - 60 * s ** 3 + 30 * s ** 4,
            60 * s - 180 * s * s + 120 * s ** 3)


@dataclass(frozen=True)
class Defect3Spline:
    """The spline of the module doc; x (N+1,) nodes, f (N+1, ...) values, d1, d2 (N+1, ...) node
    derivatives u'_j, u''_j (the ends prescribed)."""

    x: np.ndarray
    f: np.ndarray
    d1: np.ndarray
    d2: np.ndarray

    def __call__(self, xi, nu: int = 0) -> np.ndarray:
        """S (nu = 0), S' (1) or S'' (2) at points xi (K,) within [x_0, x_N]: shape (K, ...)."""
        xi = np.atleast_1d(np.asarray(xi, dtype=float))
        if nu not in (0, 1, 2):
            raise TransitionError(f"nu: expected 0, 1 or 2, got {nu!r}")
        if np.any(xi < self.x[0] - 1e-12) or np.any(xi > self.x[-1] + 1e-12):
            raise TransitionError(f"xi: outside the nodes [{self.x[0]}, {self.x[-1]}]")
        N = self.x.size - 1
        j = np.clip(np.searchsorted(self.x, xi, side="right"), 1, N)  # interval [x_{j-1}, x_j]
        h = self.x[j] - self.x[j - 1]
        s = (xi - self.x[j - 1]) / h
        end = (j == 1) | (j == N)
        a = [np.where(end, q, c) for q, c in zip(_quintic(s), _cubic(s))]
        ext = (slice(None),) + (None,) * (self.f.ndim - 1)

        def par(k, dx, order):
            if order == 0:
                return self.f[k] + dx[ext] * self.d1[k] + 0.5 * dx[ext] ** 2 * self.d2[k]
            if order == 1:
                return self.d1[k] + dx[ext] * self.d2[k]
            return self.d2[k] + 0 * dx[ext]

        dl, dr = xi - self.x[j - 1], xi - self.x[j]
        L = [par(j - 1, dl, k) for k in range(3)]
        R = [par(j, dr, k) for k in range(3)]
        A = [a[0][ext], (a[1] / h)[ext], (a[2] / h ** 2)[ext]]
        if nu == 0:
            return L[0] + A[0] * (R[0] - L[0])
        if nu == 1:
            return L[1] + A[0] * (R[1] - L[1]) + A[1] * (R[0] - L[0])
        return L[2] + A[0] * (R[2] - L[2]) + 2 * A[1] * (R[1] - L[1]) + A[2] * (R[0] - L[0])


def defect3_spline(x, f, start: tuple, end: tuple) -> Defect3Spline:
    """Build the spline on nodes x (N+1,) (strictly increasing, N >= 2) with values f (N+1, ...) and
    prescribed end derivatives start = (f'(x_0), f''(x_0)), end = (f'(x_N), f''(x_N))."""
    x = np.asarray(x, dtype=float)
    f = np.asarray(f, dtype=float)
    if x.ndim != 1 or x.size < 3 or not np.all(np.diff(x) > 0) or not np.all(np.isfinite(x)):
        raise TransitionError(f"x: expected >= 3 strictly increasing finite nodes, got {x!r}")
    if f.shape[0] != x.size or not np.all(np.isfinite(f)):
        raise TransitionError(f"f: expected {x.size} finite node values first, got shape {f.shape}")
    h = np.diff(x)
    ext = (slice(None),) + (None,) * (f.ndim - 1)
    sl = np.diff(f, axis=0) / h[ext]                # (N, ...) slopes of the intervals
    lam = (h[1:] / (h[:-1] + h[1:]))[ext]
    d1 = np.empty_like(f)
    d2 = np.empty_like(f)
    d1[1:-1] = lam * sl[:-1] + (1 - lam) * sl[1:]
    d2[1:-1] = 2 * (sl[1:] - sl[:-1]) / (h[:-1] + h[1:])[ext]
    d1[0], d2[0] = np.asarray(start[0], float), np.asarray(start[1], float)
    d1[-1], d2[-1] = np.asarray(end[0], float), np.asarray(end[1], float)
    return Defect3Spline(x=x, f=f, d1=d1, d2=d2)


def blend_weight(sigma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a(s) = 10 s^3 - 15 s^4 + 6 s^5 and its first two derivatives in s, with s clipped to [0, 1]."""
    s = np.clip(np.asarray(sigma, dtype=float), 0.0, 1.0)
    a, da, dda = _quintic(s)
    inside = (np.asarray(sigma) > 0) & (np.asarray(sigma) < 1)
    return a, np.where(inside, da, 0.0), np.where(inside, dda, 0.0)


def blend(t: float, duration: float, a_from: tuple, a_to: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Transition setpoint at time t (s) since the switch over `duration` (s, > 0): from the old
    nominal's (q, q', q'') at t to the new one's (arrays of the same shape):

        q = (1 - a) q_f + a q_t,   q' = (1 - a) q'_f + a q'_t + a' (q_t - q_f)/D,
        q'' = (1 - a) q''_f + a q''_t + 2 a' (q'_t - q'_f)/D + a'' (q_t - q_f)/D^2
    """
    if not duration > 0:
        raise TransitionError(f"duration: expected > 0 s, got {duration!r}")
    a, da, dda = blend_weight(t / duration)
    qf, vf, af = (np.asarray(v, dtype=float) for v in a_from)
    qt, vt, at = (np.asarray(v, dtype=float) for v in a_to)
    dq, dv = qt - qf, vt - vf
    return (qf + a * dq, vf + a * dv + da * dq / duration,
            af + a * (at - af) + 2 * da * dv / duration + dda * dq / duration ** 2)
