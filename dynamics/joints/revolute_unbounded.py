"""The unbounded revolute joint (URDF ``continuous``, Pinocchio's RUB): a rotation about the unit
axis u with q = (cos θ, sin θ) (a unit-norm block), v = θ̇ (nq = 2, nv = 1).

Everything but the configuration is the revolute joint's (revolute.py); q̇ = (−sin θ, cos θ) θ̇.
Pinocchio's Python API builds only axis-aligned unbounded joints, so the Pinocchio model uses
``JointModelRUBZ`` in a frame turning z onto u.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..codegen import ZERO
# the revolute joint's motion, subspace and projection are this joint's too
from .revolute import column, emit_motion, emit_rotation, emit_subspace, motion, project, rotation  # noqa: F401

NAME, CODE, NQ, NV = "revolute_unbounded", 2, 2, 1
AXIS_PARAMETER = True
PITCH_PARAMETER = False
UNIT = (0, 2, "(cos θ, sin θ)")
NEUTRAL = (1.0, 0.0)
FIXED_IN_PARENT = (False,)
CONSTANT_SUBSPACE = True
ABOUT_AXIS = True
URDF_TYPE = "continuous"


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q̇ (N, 2) = (−sin θ, cos θ) θ̇."""
    return np.stack((-q[:, 1] * v[:, 0], q[:, 0] * v[:, 0]), axis=1)


def urdf_chain(joint) -> list:
    return [("", "continuous", joint.axis)]


def pinocchio(pin, joint):
    """RUBZ in a frame turned from z onto the axis: (joint model, that rotation)."""
    z = np.array([0.0, 0.0, 1.0])
    return pin.JointModelRUBZ(), pin.Quaternion.FromTwoVectors(z, np.asarray(joint.axis)).toRotationMatrix()


def emit_transform(code, joint, qs):
    return emit_rotation(code, joint, qs[0], qs[1]), ZERO


@njit(cache=True, inline="always")
def cos_sin(q, iq):
    return q[iq], q[iq + 1]


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    return rotation(ftab, i, q[iq], q[iq + 1])
