"""The spherical (ball) joint, Pinocchio's ``JointModelSpherical``: q = quaternion (x, y, z, w) of
the child frame in the joint placement frame (a unit-norm block), v = ω, the angular velocity in
the child frame (nq = 4, nv = 3).

R_J = R(q) (the rotation matrix of the unit quaternion), t_J = 0; S = (0, E), c_J = 0;
τ = n; q̇ = ½ q ⊗ (ω, 0). URDF has no spherical joint (export refuses the model).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..codegen import ZERO
from ..spatial import quat_to_matrix

NAME, CODE, NQ, NV = "spherical", 4, 4, 3
AXIS_PARAMETER = False
PITCH_PARAMETER = False
UNIT = (0, 4, "quaternion (x, y, z, w)")
NEUTRAL = (0.0, 0.0, 0.0, 1.0)
FIXED_IN_PARENT = (False, False, False)
CONSTANT_SUBSPACE = True
ABOUT_AXIS = False
URDF_TYPE = None


def quaternion_rate(quat: np.ndarray, w: np.ndarray) -> np.ndarray:
    """q̇ (N, 4) = ½ q ⊗ (ω, 0) for quaternions (N, 4) (x, y, z, w) and ω (N, 3) in the child frame."""
    xyz, qw = quat[:, :3], quat[:, 3:]
    return np.concatenate((0.5 * (qw * w + np.cross(xyz, w)), -0.5 * np.einsum("ij,ij->i", xyz, w)[:, None]), axis=1)


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return quaternion_rate(q, v)


def rotation_of(q: np.ndarray) -> np.ndarray:
    """(N, 3, 3) rotation matrices of quaternion blocks (N, 4)."""
    return quat_to_matrix(q)


def urdf_chain(joint):
    return None


def pinocchio(pin, joint):
    return pin.JointModelSpherical(), None


def emit_rotation(code, qs):
    """R(q) items for the quaternion item names qs (x, y, z, w), assumed unit."""
    x, y, z, w = qs
    xx, yy, zz = code.let(f"{x}*{x}"), code.let(f"{y}*{y}"), code.let(f"{z}*{z}")
    xy, xz, yz = code.let(f"{x}*{y}"), code.let(f"{x}*{z}"), code.let(f"{y}*{z}")
    wx, wy, wz = code.let(f"{w}*{x}"), code.let(f"{w}*{y}"), code.let(f"{w}*{z}")
    return [[code.let(f"1.0 - 2.0*({yy} + {zz})"), code.let(f"2.0*({xy} - {wz})"), code.let(f"2.0*({xz} + {wy})")],
            [code.let(f"2.0*({xy} + {wz})"), code.let(f"1.0 - 2.0*({xx} + {zz})"), code.let(f"2.0*({yz} - {wx})")],
            [code.let(f"2.0*({xz} - {wy})"), code.let(f"2.0*({yz} + {wx})"), code.let(f"1.0 - 2.0*({xx} + {yy})")]]


def emit_transform(code, joint, qs):
    return emit_rotation(code, qs), ZERO


def emit_motion(code, joint, RJ, vs, as_):
    return (ZERO, list(vs)), (ZERO, list(as_))


def emit_subspace(joint, RJ):
    e = [[1.0, None, None], [None, 1.0, None], [None, None, 1.0]]
    return [(ZERO, x) for x in e]


@njit(cache=True, inline="always")
def quaternion_rt(q, k, t0, t1, t2):
    """(R(q[k:k + 4]) row-major (9), (t0, t1, t2)), a 12-tuple."""
    x, y, z, w = q[k], q[k + 1], q[k + 2], q[k + 3]
    return (1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y),
            2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x),
            2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y), t0, t1, t2)


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    return quaternion_rt(q, iq, 0.0, 0.0, 0.0)


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    return 0.0, 0.0, 0.0, v[iv], v[iv + 1], v[iv + 2], x0, x1, x2, y0 + a[iv], y1 + a[iv + 1], y2 + a[iv + 2]


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    return 0.0, 0.0, 0.0, 1.0 if k == 0 else 0.0, 1.0 if k == 1 else 0.0, 1.0 if k == 2 else 0.0


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    tau[s, iv], tau[s, iv + 1], tau[s, iv + 2] = n0, n1, n2
