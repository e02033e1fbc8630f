"""The free flyer (floating base), Pinocchio's ``JointModelFreeFlyer``: q = (x, y, z) m, the child
origin in the joint placement frame, then the quaternion (qx, qy, qz, qw) of the child frame (a
unit-norm block); v = (linear velocity of the child origin, angular velocity), both in the child
frame (nq = 7, nv = 6).

R_J = R(quaternion), t_J = (x, y, z); S = E (6×6), c_J = 0; τ = (f, n), the base wrench in the base
frame; q̇ = (R v_lin, ½ q ⊗ (ω, 0)). URDF ``floating`` (a root free flyer is not written: load the
file with ``floating=True``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .spherical import quaternion_rate, quaternion_rt, rotation_of, emit_rotation

NAME, CODE, NQ, NV = "free_flyer", 5, 7, 6
AXIS_PARAMETER = False
PITCH_PARAMETER = False
UNIT = (3, 4, "quaternion (x, y, z, w)")
NEUTRAL = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
FIXED_IN_PARENT = (False,) * 6
CONSTANT_SUBSPACE = True
ABOUT_AXIS = False
URDF_TYPE = "floating"


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    quat = q[:, 3:]
    return np.concatenate((np.einsum("nij,nj->ni", rotation_of(quat), v[:, :3]), quaternion_rate(quat, v[:, 3:])),
                          axis=1)


def urdf_chain(joint) -> list:
    return [("", "floating", None)]


def pinocchio(pin, joint):
    return pin.JointModelFreeFlyer(), None


def emit_transform(code, joint, qs):
    return emit_rotation(code, qs[3:]), list(qs[:3])


def emit_motion(code, joint, RJ, vs, as_):
    return (list(vs[:3]), list(vs[3:])), (list(as_[:3]), list(as_[3:]))


def emit_subspace(joint, RJ):
    e = [[1.0, None, None], [None, 1.0, None], [None, None, 1.0]]
    z = [None, None, None]
    return [(x, z) for x in e] + [(z, x) for x in e]


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    return quaternion_rt(q, iq + 3, q[iq], q[iq + 1], q[iq + 2])


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    return (v[iv], v[iv + 1], v[iv + 2], v[iv + 3], v[iv + 4], v[iv + 5], x0 + a[iv], x1 + a[iv + 1], x2 + a[iv + 2],
            y0 + a[iv + 3], y1 + a[iv + 4], y2 + a[iv + 5])


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    return (1.0 if k == 0 else 0.0, 1.0 if k == 1 else 0.0, 1.0 if k == 2 else 0.0, 1.0 if k == 3 else 0.0,
            1.0 if k == 4 else 0.0, 1.0 if k == 5 else 0.0)


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    tau[s, iv], tau[s, iv + 1], tau[s, iv + 2] = f0, f1, f2
    tau[s, iv + 3], tau[s, iv + 4], tau[s, iv + 5] = n0, n1, n2
