"""Joint types, one module each, and what the algorithms do with all of them (normalisation of q,
q̇(q, v), which subspace columns are fixed in the parent).

Each joint type's module (fixed.py, revolute.py, revolute_unbounded.py, prismatic.py,
spherical.py, free_flyer.py, planar.py, helical.py) holds everything walklab knows about the type
(docs/kernels.md "Adding a joint type"):

- NAME (the model files' joint type), CODE (the compiled kernels' type code = its index in TYPES),
  NQ, NV; AXIS_PARAMETER (takes an ``axis``); PITCH_PARAMETER (takes a ``pitch``); UNIT: (start,
  width, what) of a unit-norm block of its q, or None; NEUTRAL: its q at rest; FIXED_IN_PARENT:
  per velocity coordinate, whether the subspace column is fixed in the parent (placement) frame;
  CONSTANT_SUBSPACE: S is constant in the child frame (so c_J = 0; the kernels then read a
  one-coordinate joint's column from the table, built from emit_subspace);
  ABOUT_AXIS: a pure rotation about its axis (cos_sin, rnea's axis-aligned step);
- q_dot(q, v): the configuration derivative ((N, nq) from (N, nq), (N, nv));
- URDF_TYPE (the URDF type that imports as it, or None) and urdf_chain(joint) (the URDF joints
  it exports as: (name suffix, URDF type, axis) chained through massless links, or None);
  pinocchio(pin, joint): (Pinocchio joint model, rotation turning its frame, or None) or None;
- the numpy path's code generation (codegen.py items): emit_transform(code, joint, qs) → (R_J,
  t_J), emit_motion(code, joint, RJ, vs, as_) → (v_J, S q̈ + c_J), emit_subspace(joint, RJ) → S;
- the compiled step (numba, ``inline="always"``; kernels/tree.py reaches it through the one
  switch of switch.py): rt(ftab, i, q, iq) → (R_J (9), t_J (3)); motion(ftab, i, RJ, v, a, iv,
  x, y) → (v_J (6), (x, y) + S q̈ + c_J (6)); column(ftab, i, RJ, k) → S's column k (6);
  project(ftab, i, RJ, f, n, tau, s, iv): tau[s, iv:iv + nv] = Sᵀ (f, n); cos_sin(q, iq) for an
  ABOUT_AXIS type. RJ[i] (row-major) holds R_J for joints of more than one coordinate only.

All array functions here take a joint's block of q as an (N, nq_i) array and return arrays with N
first.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from . import fixed, free_flyer, helical, planar, prismatic, revolute, revolute_unbounded, spherical

if TYPE_CHECKING:
    from ..model import Joint, Model

#: The joint type modules in kernel-code order (a type's CODE is its index).
TYPES = tuple(sorted((fixed, revolute, revolute_unbounded, prismatic, spherical, free_flyer, planar, helical),
                     key=lambda t: t.CODE))
BY_NAME = {t.NAME: t for t in TYPES}
_INTERFACE = ("NAME", "CODE", "NQ", "NV", "AXIS_PARAMETER", "PITCH_PARAMETER", "UNIT", "NEUTRAL", "FIXED_IN_PARENT",
              "CONSTANT_SUBSPACE", "ABOUT_AXIS", "URDF_TYPE", "q_dot", "urdf_chain", "pinocchio", "emit_transform", "emit_motion",
              "emit_subspace", "rt", "motion", "column", "project")
for _k, _t in enumerate(TYPES):
    _missing = [a for a in _INTERFACE if not hasattr(_t, a)]
    if _t.CODE != _k or _missing or len(_t.NEUTRAL) != _t.NQ or len(_t.FIXED_IN_PARENT) != _t.NV:
        raise ImportError(f"joint type module {_t.__name__}: CODE {_t.CODE} (expected {_k}), missing {_missing}, "
                          "or NEUTRAL / FIXED_IN_PARENT of the wrong length")

QUAT_TOL = 1e-3  # |‖quaternion‖ − 1| accepted (and normalised away); larger is a caller error


def joint_type(name: str):
    """The module of joint type `name` (KeyError for an unknown type: the model checks names)."""
    return BY_NAME[name]


def _unit_blocks(model: Model) -> list[tuple[int, int, str]]:
    """(start, width, what) of q's unit-norm blocks (quaternions, (cos θ, sin θ)), kept in the
    model's workspace."""
    from .. import workspace

    d = workspace.data(model)
    if d.unit_blocks is None:
        d.unit_blocks = [(int(iq) + u[0], u[1], u[2]) for s, iq in zip(model.segments, model.idx_q)
                         if (u := BY_NAME[s.joint.type].UNIT) is not None]
    return d.unit_blocks


def normalized_configuration(model: Model, q: np.ndarray) -> np.ndarray:
    """q (N, nq) with quaternion (x, y, z, w) and (cos θ, sin θ) blocks normalised; ValueError
    naming the block of q if a norm is off by more than QUAT_TOL."""
    blocks = _unit_blocks(model)
    if not blocks:
        return q
    if q.shape[0] == 1:   # one sample: plain floats cost a fraction of numpy calls on 4-element arrays
        row = q[0].tolist()
        for k, w, what in blocks:
            n = math.sqrt(sum(x * x for x in row[k:k + w]))
            if abs(n - 1) > QUAT_TOL:
                _check_unit(k, w, what, np.array([n]))
            row[k:k + w] = [x / n for x in row[k:k + w]]
        return np.array([row])
    q = q.copy()
    for k, w, what in blocks:
        n = np.linalg.norm(q[:, k:k + w], axis=1)
        _check_unit(k, w, what, n)
        q[:, k:k + w] /= n[:, None]
    return q


def _check_unit(k: int, w: int, what: str, n: np.ndarray) -> None:
    bad = np.abs(n - 1) > QUAT_TOL
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"q[{k}:{k + w}]: {what} must have unit norm, got {n[i]:.6g} at sample {i}")


def fixed_in_parent(joint: Joint) -> np.ndarray:
    """(nv_i,) bool: which subspace columns are fixed in the parent (placement) frame rather than
    in the child frame (the planar joint's translations); their time derivative follows the
    parent's motion."""
    return np.array(BY_NAME[joint.type].FIXED_IN_PARENT, dtype=bool)


def configuration_derivative(model: Model, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q̇ (N, nq) from q (N, nq) and v (N, nv), each joint's by its type's q_dot: quaternion
    joints q̇_quat = ½ q ⊗ (ω, 0) with ω in the child frame; the free flyer's translation rate
    is R v_lin (placement frame); (cos θ, sin θ) rate is (−sin θ, cos θ) θ̇; other joints q̇ = v.
    """
    qd = np.zeros_like(q)
    for s, iq, iv in zip(model.segments, model.idx_q, model.idx_v):
        j = s.joint
        if j.nq:
            qd[:, iq:iq + j.nq] = BY_NAME[j.type].q_dot(q[:, iq:iq + j.nq], v[:, iv:iv + j.nv])
    return qd
