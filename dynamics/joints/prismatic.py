"""The prismatic joint: a translation d (m) along the unit axis u of the joint placement frame.

q = d, v = ḋ (nq = nv = 1). R_J = E, t_J = d u; S = (u, 0), c_J = 0; τ = u · f (N).
URDF ``prismatic``; Pinocchio ``JointModelPrismaticUnaligned(u)``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..codegen import IDENTITY, ZERO, const, mul
from ..kernels.layout import AXIS

NAME, CODE, NQ, NV = "prismatic", 3, 1, 1
AXIS_PARAMETER = True
PITCH_PARAMETER = False
UNIT = None
NEUTRAL = (0.0,)
FIXED_IN_PARENT = (False,)
CONSTANT_SUBSPACE = True
ABOUT_AXIS = False
URDF_TYPE = "prismatic"


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v.copy()


def urdf_chain(joint) -> list:
    return [("", "prismatic", joint.axis)]


def pinocchio(pin, joint):
    return pin.JointModelPrismaticUnaligned(np.asarray(joint.axis, dtype=float)), None


def emit_transform(code, joint, qs):
    return IDENTITY, [mul(x, qs[0]) for x in const(joint.axis)]


def emit_motion(code, joint, RJ, vs, as_):
    u = const(joint.axis)
    return ([mul(x, vs[0]) for x in u], ZERO), ([mul(x, as_[0]) for x in u], ZERO)


def emit_subspace(joint, RJ):
    return [(const(joint.axis), ZERO)]


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    d = q[iq]
    return (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, ftab[i, AXIS] * d, ftab[i, AXIS + 1] * d, ftab[i, AXIS + 2] * d)


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    qd, qdd = v[iv], a[iv]
    u0, u1, u2 = ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]
    return u0 * qd, u1 * qd, u2 * qd, 0.0, 0.0, 0.0, x0 + u0 * qdd, x1 + u1 * qdd, x2 + u2 * qdd, y0, y1, y2


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    return ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2], 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    tau[s, iv] = ftab[i, AXIS] * f0 + ftab[i, AXIS + 1] * f1 + ftab[i, AXIS + 2] * f2
