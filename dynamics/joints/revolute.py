"""The revolute joint: a rotation θ (rad) about the unit axis u of the joint placement frame.

q = θ, v = θ̇ (nq = nv = 1). R_J = u uᵀ + cos θ (E − u uᵀ) + sin θ [u]× (Rodrigues), t_J = 0;
S = (0, u) (linear, angular; child frame), c_J = 0; τ = Sᵀ f = u · n. URDF ``revolute``;
Pinocchio ``JointModelRevoluteUnaligned(u)``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..codegen import ZERO, add, const, mul
from ..kernels.layout import AXIS

NAME, CODE, NQ, NV = "revolute", 1, 1, 1
AXIS_PARAMETER = True          # the joint takes an axis (model files: ``axis``)
PITCH_PARAMETER = False
UNIT = None                    # no unit-norm block in q
NEUTRAL = (0.0,)
FIXED_IN_PARENT = (False,)
CONSTANT_SUBSPACE = True
ABOUT_AXIS = True              # a pure rotation about its axis: cos_sin, rnea's axis-aligned step
URDF_TYPE = "revolute"


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q̇ (N, 1) = θ̇."""
    return v.copy()


def urdf_chain(joint) -> list:
    return [("", "revolute", joint.axis)]


def pinocchio(pin, joint):
    return pin.JointModelRevoluteUnaligned(np.asarray(joint.axis, dtype=float)), None


# ---- the numpy path's code (codegen.py items) ----------------------------------------------------

def emit_rotation(code, joint, c, s):
    """R_J items for cos θ, sin θ items: Rodrigues, R_ik = u_i u_k + c (δ_ik − u_i u_k) + s K_ik,
    which folds to 0/1 for an axis-aligned u."""
    u = const(joint.axis)
    K = [[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]]
    return [[code.let(add(u[i] * u[k], mul(c, float(i == k) - u[i] * u[k]), mul(s, K[i][k]))) for k in range(3)]
            for i in range(3)]


def emit_transform(code, joint, qs):
    c, s = code.let(f"cos({qs[0]})"), code.let(f"sin({qs[0]})")
    return emit_rotation(code, joint, c, s), ZERO


def emit_motion(code, joint, RJ, vs, as_):
    u = const(joint.axis)
    return (ZERO, [mul(x, vs[0]) for x in u]), (ZERO, [mul(x, as_[0]) for x in u])


def emit_subspace(joint, RJ):
    return [(ZERO, const(joint.axis))]


# ---- the compiled step (numba; inlined into kernels/tree.py through joints/switch.py) ------------

@njit(cache=True, inline="always")
def rotation(ftab, i, c, s):
    """(R_J row-major (9), t_J = 0 (3)), a 12-tuple, for the rotation about joint i's axis by the
    angle of cosine c and sine s (Rodrigues)."""
    u0, u1, u2 = ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]
    oc = 1.0 - c
    return (u0 * u0 * oc + c, u0 * u1 * oc - s * u2, u0 * u2 * oc + s * u1,
            u0 * u1 * oc + s * u2, u1 * u1 * oc + c, u1 * u2 * oc - s * u0,
            u0 * u2 * oc - s * u1, u1 * u2 * oc + s * u0, u2 * u2 * oc + c, 0.0, 0.0, 0.0)


@njit(cache=True, inline="always")
def cos_sin(q, iq):
    return math.cos(q[iq]), math.sin(q[iq])


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    """(R_J (9), t_J (3)) of joint i, a 12-tuple."""
    c, s = cos_sin(q, iq)
    return rotation(ftab, i, c, s)


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    """(v_J = S q̇ (6), (x, y) + S q̈ + c_J (6)), a 12-tuple."""
    qd, qdd = v[iv], a[iv]
    u0, u1, u2 = ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]
    return 0.0, 0.0, 0.0, u0 * qd, u1 * qd, u2 * qd, x0, x1, x2, y0 + u0 * qdd, y1 + u1 * qdd, y2 + u2 * qdd


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    """Column k of S in the child frame, a 6-tuple."""
    return 0.0, 0.0, 0.0, ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    """tau[s, iv:iv + nv] = Sᵀ (f, n)."""
    tau[s, iv] = ftab[i, AXIS] * n0 + ftab[i, AXIS + 1] * n1 + ftab[i, AXIS + 2] * n2


# ---- the axis-aligned step (an ABOUT_AXIS joint with u = ±e_k and R0 = E: itab AXIS_K = k) -------
# Written about e_2; the kernel reaches e_0 and e_1 by a cyclic permutation of the components
# (k, k+1, k+2) -> (2, 0, 1), under which rotations about e_k and cross products keep their form.

@njit(cache=True, inline="always")
def axis_step(c, s, K, Kd, t0, t1, t2, p0, p1, p2, q0, q1, q2, e0, e1, e2, f0, f1, f2):
    """The body's (v, ω, a, α), a 12-tuple, for a joint turning about e_2 by the angle of cosine c
    and sine s (the axis' sign folded in), rate K and acceleration Kd (rad/s, rad/s², signed as s),
    child origin t (m, parent frame), from the parent's velocity (p, q) and acceleration (e, f):
    v = X v_p + v_J, a = X a_p + S q̈ + v × v_J with X (l, w) = (Rᵀ (l + w × t), Rᵀ w), Rᵀ the
    rotation by −θ (2 components of each vector), v_J = (0, 0, 0, 0, 0, K), c_J = 0 — the same
    numbers as the general step with S = (0, e_2), without its zero products."""
    x0, x1, x2 = p0 + q1 * t2 - q2 * t1, p1 + q2 * t0 - q0 * t2, p2 + q0 * t1 - q1 * t0
    v0, v1 = c * x0 + s * x1, c * x1 - s * x0
    w0, w1 = c * q0 + s * q1, c * q1 - s * q0
    y0, y1, y2 = e0 + f1 * t2 - f2 * t1, e1 + f2 * t0 - f0 * t2, e2 + f0 * t1 - f1 * t0
    a0, a1 = c * y0 + s * y1, c * y1 - s * y0
    b0, b1 = c * f0 + s * f1, c * f1 - s * f0
    # + v × v_J = (v × (0, 0, K), ω × (0, 0, K)) with v, ω before v_J is added (v_J × v_J = 0)
    return v0, v1, x2, w0, w1, q2 + K, a0 + v1 * K, a1 - v0 * K, y2, b0 + w1 * K, b1 - w0 * K, f2 + Kd


@njit(cache=True, inline="always")
def axis_force(c, s, t0, t1, t2, f0, f1, f2, n0, n1, n2):
    """The force (f, n) of a body whose joint turns about e_2 (cosine c, sine s; origin t in the
    parent frame) moved into the parent frame: Xᵀ (f, n) = (R f, R n + t × R f), a 6-tuple; the
    joint's τ = Sᵀ (f, n) is ±n_2."""
    L0, L1 = c * f0 - s * f1, s * f0 + c * f1
    N0, N1 = c * n0 - s * n1, s * n0 + c * n1
    return L0, L1, f2, N0 + t1 * f2 - t2 * L1, N1 + t2 * L0 - t0 * f2, n2 + t0 * L1 - t1 * L0
