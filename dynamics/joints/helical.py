"""The helical (screw) joint, Pinocchio's ``JointModelHelicalUnaligned(u, h)``: a rotation θ (rad)
about the unit axis u of the joint placement frame with the translation h θ along it (pitch h,
m/rad; ``Joint.pitch``).

q = θ, v = θ̇ (nq = nv = 1). R_J = Rodrigues(u, θ) (revolute.py), t_J = h θ u; S = (h u, u)
(constant in the child frame, since R_J u = u), c_J = 0; τ = h u · f + u · n. URDF has no helical
joint (export refuses the model).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..codegen import const, mul
from ..kernels.layout import AXIS, PARAM
from .revolute import cos_sin, emit_rotation, rotation

NAME, CODE, NQ, NV = "helical", 7, 1, 1
AXIS_PARAMETER = True
PITCH_PARAMETER = True
UNIT = None
NEUTRAL = (0.0,)
FIXED_IN_PARENT = (False,)
CONSTANT_SUBSPACE = True
ABOUT_AXIS = False           # it also translates: not rnea's rotation-only axis-aligned step
URDF_TYPE = None


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v.copy()


def urdf_chain(joint):
    return None


def pinocchio(pin, joint):
    return pin.JointModelHelicalUnaligned(np.asarray(joint.axis, dtype=float), float(joint.pitch)), None


def _lead(joint) -> list:
    """h u as constant items."""
    return const(joint.pitch * np.asarray(joint.axis, dtype=float))


def emit_transform(code, joint, qs):
    c, s = code.let(f"cos({qs[0]})"), code.let(f"sin({qs[0]})")
    return emit_rotation(code, joint, c, s), [mul(x, qs[0]) for x in _lead(joint)]


def emit_motion(code, joint, RJ, vs, as_):
    u, hu = const(joint.axis), _lead(joint)
    return (([mul(x, vs[0]) for x in hu], [mul(x, vs[0]) for x in u]),
            ([mul(x, as_[0]) for x in hu], [mul(x, as_[0]) for x in u]))


def emit_subspace(joint, RJ):
    return [(_lead(joint), const(joint.axis))]


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    th = q[iq]
    c, s = cos_sin(q, iq)
    r = rotation(ftab, i, c, s)
    d = ftab[i, PARAM] * th
    return (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8],
            ftab[i, AXIS] * d, ftab[i, AXIS + 1] * d, ftab[i, AXIS + 2] * d)


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    qd, qdd, h = v[iv], a[iv], ftab[i, PARAM]
    u0, u1, u2 = ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]
    return (h * u0 * qd, h * u1 * qd, h * u2 * qd, u0 * qd, u1 * qd, u2 * qd,
            x0 + h * u0 * qdd, x1 + h * u1 * qdd, x2 + h * u2 * qdd, y0 + u0 * qdd, y1 + u1 * qdd, y2 + u2 * qdd)


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    h = ftab[i, PARAM]
    return h * ftab[i, AXIS], h * ftab[i, AXIS + 1], h * ftab[i, AXIS + 2], ftab[i, AXIS], ftab[i, AXIS + 1], ftab[i, AXIS + 2]


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    h = ftab[i, PARAM]
    tau[s, iv] = (ftab[i, AXIS] * (h * f0 + n0) + ftab[i, AXIS + 1] * (h * f1 + n1)
                  + ftab[i, AXIS + 2] * (h * f2 + n2))
