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
