"""Joint models: normalisation of q, which subspace columns are fixed in the parent, and the
configuration derivative q̇(q, v) of each joint type (docs/models.md table); joint transforms and
motion subspaces are generated in codegen.py.

All functions take a joint's block of q as an (N, nq_i) array and return arrays with N first.
"""
from __future__ import annotations

import math

import numpy as np

from . import workspace
from .model import Joint, Model
from .spatial import quat_to_matrix

QUAT_TOL = 1e-3  # |‖quaternion‖ − 1| accepted (and normalised away); larger is a caller error


def _unit_blocks(model: Model) -> list[tuple[int, int]]:
    """(start, width) of q's quaternion (4) and (cos θ, sin θ) (2) blocks, kept in the model's
    workspace."""
    d = workspace.data(model)
    if d.unit_blocks is None:
        quaternion = ("spherical", "free_flyer")
        d.unit_blocks = [(int(iq) + s.joint.nq - 4, 4) if s.joint.type in quaternion else (int(iq), 2)
                         for s, iq in zip(model.segments, model.idx_q)
                         if s.joint.type in quaternion + ("revolute_unbounded",)]
    return d.unit_blocks


def normalized_configuration(model: Model, q: np.ndarray) -> np.ndarray:
    """q (N, nq) with quaternion (x, y, z, w) and (cos θ, sin θ) blocks normalised; ValueError
    naming the block of q if a norm is off by more than QUAT_TOL."""
    blocks = _unit_blocks(model)
    if not blocks:
        return q
    if q.shape[0] == 1:   # one sample: plain floats cost a fraction of numpy calls on 4-element arrays
        row = q[0].tolist()
        for k, w in blocks:
            n = math.sqrt(sum(x * x for x in row[k:k + w]))
            if abs(n - 1) > QUAT_TOL:
                _check_unit(k, w, np.array([n]))
            row[k:k + w] = [x / n for x in row[k:k + w]]
        return np.array([row])
    q = q.copy()
    for k, w in blocks:
        n = np.linalg.norm(q[:, k:k + w], axis=1)
        _check_unit(k, w, n)
        q[:, k:k + w] /= n[:, None]
    return q


def _check_unit(k: int, w: int, n: np.ndarray) -> None:
    bad = np.abs(n - 1) > QUAT_TOL
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"q[{k}:{k + w}]: {'quaternion (x, y, z, w)' if w == 4 else '(cos θ, sin θ)'} "
                         f"must have unit norm, got {n[i]:.6g} at sample {i}")


def fixed_in_parent(joint: Joint) -> np.ndarray:
    """(nv_i,) bool: which subspace columns are fixed in the parent (placement) frame rather than
    in the child frame (the planar joint's translations); their time derivative follows the
    parent's motion."""
    if joint.type == "planar":
        return np.array([True, True, False])
    return np.zeros(joint.nv, dtype=bool)


def configuration_derivative(model: Model, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q̇ (N, nq) from q (N, nq) and v (N, nv).

    Quaternion joints: q̇_quat = ½ q ⊗ (ω, 0) with ω in the child frame; the free flyer's
    translation rate is R v_lin (placement frame); (cos θ, sin θ) rate is (−sin θ, cos θ) θ̇;
    other joints q̇ = v.
    """
    qd = np.zeros_like(q)
    for s, iq, iv in zip(model.segments, model.idx_q, model.idx_v):
        t = s.joint.type
        qi, vi = q[:, iq:iq + s.joint.nq], v[:, iv:iv + s.joint.nv]
        if t in ("revolute", "prismatic", "planar"):
            qd[:, iq:iq + s.joint.nq] = vi
        elif t == "revolute_unbounded":
            qd[:, iq], qd[:, iq + 1] = -qi[:, 1] * vi[:, 0], qi[:, 0] * vi[:, 0]
        elif t in ("spherical", "free_flyer"):
            quat = qi[:, -4:]
            w = vi[:, -3:]
            xyz, qw = quat[:, :3], quat[:, 3:]
            qd[:, iq + s.joint.nq - 4:iq + s.joint.nq - 1] = 0.5 * (qw * w + np.cross(xyz, w))
            qd[:, iq + s.joint.nq - 1] = -0.5 * np.einsum("ij,ij->i", xyz, w)
            if t == "free_flyer":
                qd[:, iq:iq + 3] = np.einsum("nij,nj->ni", quat_to_matrix(quat), vi[:, :3])
    return qd
