"""Small batched 3-D and spatial-vector helpers (arrays with the vector on the last axis).

Spatial vectors are 6-arrays (linear, angular), Pinocchio's order. In the lab frame, a motion
(v_O, ω) is the angular velocity ω and the velocity v_O of the body point currently at the lab
origin; a force (f, n_O) is the resultant and the moment about the lab origin. Cross products:

    (v, ω) × (u, z)  = (ω × u + v × z, ω × z)          motion × motion
    (v, ω) ×* (f, n) = (ω × f, ω × n + v × f)          motion × force
"""
from __future__ import annotations

import numpy as np


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a × b over the last axis (length 3), broadcasting the leading axes."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack((a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0), axis=-1)


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a · b over the last axis."""
    return np.einsum("...i,...i->...", a, b)


def matvec(R: np.ndarray, x: np.ndarray) -> np.ndarray:
    """R x for stacks of (3, 3) matrices and (3,) vectors."""
    return np.matmul(R, x[..., None])[..., 0]


def force_cross(v: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Spatial motion × force product v ×* f, (..., 6) arrays."""
    w = v[..., 3:]
    return np.concatenate((cross(w, f[..., :3]), cross(w, f[..., 3:]) + cross(v[..., :3], f[..., :3])), axis=-1)


def inertia_apply(m: np.ndarray, h: np.ndarray, I_O: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Spatial inertia times motion, all about the same point O.

    m (...,) kg; h = m c (..., 3) kg·m first mass moment (c the CoM relative to O); I_O (..., 3, 3)
    kg·m² rotational inertia about O; v (..., 6) motion. Returns (..., 6):
    (m v_O − h × ω,  I_O ω + h × v_O).
    """
    lin, ang = v[..., :3], v[..., 3:]
    return np.concatenate((m[..., None] * lin - cross(h, ang), matvec(I_O, ang) + cross(h, lin)), axis=-1)


def parallel_axis(m: np.ndarray, c: np.ndarray, I_c: np.ndarray) -> np.ndarray:
    """Rotational inertia about O of a body with mass m, CoM c (relative to O), central inertia
    I_c: I_O = I_c + m (|c|² E − c cᵀ)."""
    cc = c[..., :, None] * c[..., None, :]
    return I_c + m[..., None, None] * (dot(c, c)[..., None, None] * np.eye(3) - cc)


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices of unit quaternions (..., 4) in (x, y, z, w) order."""
    x, y, z, w = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    return np.stack((
        np.stack((1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)), -1),
        np.stack((2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)), -1),
        np.stack((2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)), -1),
    ), -2)
