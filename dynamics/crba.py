"""Composite-rigid-body algorithm: the joint-space mass matrix M(q), batched over time.

With Y_i^c the spatial inertia of the subtree of segment i (lab frame, about the lab origin) and
S_k the motion subspace columns (kinematics.py):

    M_kl = S_kᵀ Y^c_segment(l) S_l      when segment(k) supports segment(l), M_lk = M_kl,
    M_kl = 0                            when neither segment supports the other.

Equals pinocchio.crba (full symmetric matrix, no armature).
"""
from __future__ import annotations

import numpy as np

from .kinematics import check_state, lab_inertias, tree_state
from .model import Model
from .rnea import CHUNK
from .spatial import inertia_apply


def _crba(model: Model, q: np.ndarray) -> np.ndarray:
    st = tree_state(model, q)
    m, _, h, I_O = lab_inertias(model, st)
    sub = model.supports.T                                     # sub[i, k] = 1 if k in subtree(i)
    N, n = q.shape[0], len(model.segments)
    mc = (sub @ m)[model.dof_segment]
    hc = np.matmul(sub, h)[:, model.dof_segment]
    Ic = np.matmul(sub, I_O.reshape(N, n, 9)).reshape(N, n, 3, 3)[:, model.dof_segment]
    YS = inertia_apply(mc, hc, Ic, st.S)                      # (N, nv, 6): Y^c_segment(l) S_l
    G = np.matmul(st.S, np.swapaxes(YS, -1, -2))              # G_kl = S_k · Y^c_seg(l) S_l
    U = model.supports[model.dof_segment][:, model.dof_segment].T   # U_kl: seg(k) supports seg(l)
    return G * U + np.swapaxes(G, -1, -2) * (U.T - U * U.T)


def crba(model: Model, q) -> np.ndarray:
    """Mass matrix M(q), ([N,] nv, nv) symmetric positive (semi)definite, kg·m² / kg·m / kg
    blocks, for q (nq,) or (N, nq): kinetic energy T = ½ vᵀ M v."""
    (q, _, _), batched = check_state(model, q)
    M = np.concatenate([_crba(model, q[s:s + CHUNK]) for s in range(0, q.shape[0], CHUNK)])
    return M if batched else M[0]
