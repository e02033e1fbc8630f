"""The fixed joint: no coordinates (nq = nv = 0); the child frame stays at the joint placement.

URDF ``fixed``. Pinocchio has no fixed joint: the segment's body is appended to its parent's
joint (as Pinocchio's URDF reader does), so `pinocchio` returns None.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..codegen import IDENTITY, ZERO

NAME, CODE, NQ, NV = "fixed", 0, 0, 0
AXIS_PARAMETER = False
PITCH_PARAMETER = False
UNIT = None
NEUTRAL = ()
FIXED_IN_PARENT = ()
CONSTANT_SUBSPACE = True
ABOUT_AXIS = False
URDF_TYPE = "fixed"


def q_dot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.zeros_like(q)


def urdf_chain(joint) -> list:
    return [("", "fixed", None)]


def pinocchio(pin, joint):
    return None


def emit_transform(code, joint, qs):
    return IDENTITY, ZERO


def emit_motion(code, joint, RJ, vs, as_):
    return (ZERO, ZERO), (ZERO, ZERO)


def emit_subspace(joint, RJ):
    return []


@njit(cache=True, inline="always")
def rt(ftab, i, q, iq):
    return 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, x0, x1, x2, y0, y1, y2


@njit(cache=True, inline="always")
def column(ftab, i, RJ, k):
    return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    return
