"""The planar joint: q = (x, y, θ), translations along x and y of the joint placement frame (m)
and a rotation θ (rad) about its z; v = q̇ (nq = nv = 3; not Pinocchio's cos/sin planar joint).

R_J = rot_z(θ), t_J = (x, y, 0). The x, y columns of S are fixed in the placement (parent) frame
and seen from the child: S = [(R_Jᵀ e_x, 0), (R_Jᵀ e_y, 0), (0, e_z)], so c_J = −(0, 0, θ̇) × v_J,lin;
τ = ((R_J f)_x, (R_J f)_y, n_z). URDF and Pinocchio: prismatic x → prismatic y → revolute z (URDF
export through two massless links; Pinocchio ``JointModelComposite(PX, PY, RZ)``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..codegen import neg, rotT, vadd, vcross, vneg

NAME, CODE, NQ, NV = "planar", 6, 3, 3
AXIS_PARAMETER = False
PITCH_PARAMETER = False
UNIT = None
NEUTRAL = (0.0, 0.0, 0.0)
FIXED_IN_PARENT = (True, True, False)
CONSTANT_SUBSPACE = False          # S in the child frame turns with θ (c_J ≠ 0)
ABOUT_AXIS = False
URDF_TYPE = None


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v.copy()


def urdf_chain(joint) -> list:
    return [("x", "prismatic", [1, 0, 0]), ("y", "prismatic", [0, 1, 0]), ("z", "revolute", [0, 0, 1])]


def pinocchio(pin, joint):
    jm = pin.JointModelComposite(pin.JointModelPX())
    jm.addJoint(pin.JointModelPY())
    jm.addJoint(pin.JointModelRZ())
    return jm, None


def emit_transform(code, joint, qs):
    c, s = code.let(f"cos({qs[2]})"), code.let(f"sin({qs[2]})")
    return [[c, neg(s), None], [s, c, None], [None, None, 1.0]], [qs[0], qs[1], None]


def emit_motion(code, joint, RJ, vs, as_):
    vl = code.vec(rotT(RJ, [vs[0], vs[1], None]))
    cJ = vneg(vcross([None, None, vs[2]], vl))          # c_J = (−ω_J × v_J,lin, 0)
    return (vl, [None, None, vs[2]]), (vadd(rotT(RJ, [as_[0], as_[1], None]), cJ), [None, None, as_[2]])


def emit_subspace(joint, RJ):
    e = [[1.0, None, None], [None, 1.0, None], [None, None, 1.0]]
    return [(rotT(RJ, e[0]), [None, None, None]), (rotT(RJ, e[1]), [None, None, None]), ([None, None, None], e[2])]


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    c, s = math.cos(q[iq + 2]), math.sin(q[iq + 2])
    return c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0, q[iq], q[iq + 1], 0.0


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    """RJ[i]: R_J row-major (the translations are fixed in the placement frame: R_Jᵀ (·, ·, 0))."""
    r0, r1, r2, r3, r4, r5 = RJ[i, 0], RJ[i, 1], RJ[i, 2], RJ[i, 3], RJ[i, 4], RJ[i, 5]
    j0, j1, j2 = r0 * v[iv] + r3 * v[iv + 1], r1 * v[iv] + r4 * v[iv + 1], r2 * v[iv] + r5 * v[iv + 1]
    k2 = v[iv + 2]
    return (j0, j1, j2, 0.0, 0.0, k2,
            x0 + (r0 * a[iv] + r3 * a[iv + 1] + k2 * j1),          # + c_J = −(0, 0, θ̇) × j
            x1 + (r1 * a[iv] + r4 * a[iv + 1] - k2 * j0),
            x2 + (r2 * a[iv] + r5 * a[iv + 1]), y0, y1, y2 + a[iv + 2])


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    if k == 2:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 1.0
    return RJ[i, 3 * k], RJ[i, 3 * k + 1], RJ[i, 3 * k + 2], 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    tau[s, iv] = RJ[i, 0] * f0 + RJ[i, 1] * f1 + RJ[i, 2] * f2
    tau[s, iv + 1] = RJ[i, 3] * f0 + RJ[i, 4] * f1 + RJ[i, 5] * f2
    tau[s, iv + 2] = n2
