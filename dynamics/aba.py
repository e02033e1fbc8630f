"""Articulated-body algorithm (Featherstone): forward dynamics in O(n), batched over time.

    a = M(q)⁻¹ (τ − C(q, v) v − g(q) + Σ_e J_eᵀ w_e)

Pinocchio's three passes, here with every spatial quantity in the lab frame about the lab origin
(spatial.py; as Pinocchio's world-frame ABA), so no frame changes between parent and child:

    1 (forward)   v_i, S_i from kinematics.py;  c_i = (v_c × S_i) v[i]  (velocity product);
                  Y^A_i = Y_i;  p^A_i = v_i ×* (Y_i v_i) − Σ_{e on i} w_e
    2 (backward)  U_i = Y^A_i S_i,  D_i = S_iᵀ U_i,  u_i = τ[i] − S_iᵀ p^A_i
                  Y^A_p += Y^A_i − U_i D_i⁻¹ U_iᵀ
                  p^A_p += p^A_i + (Y^A_i − U_i D_i⁻¹ U_iᵀ) c_i + U_i D_i⁻¹ u_i
    3 (forward)   a'_i = a_p + c_i  (a_world = (−g, 0): gravity as a base acceleration)
                  a[i] = D_i⁻¹ (u_i − U_iᵀ a'_i),   a_i = a'_i + S_i a[i]

Y_i is segment i's 6×6 spatial inertia about the lab origin, [[m E, −[h]×], [[h]×, I_O]] with
h = m c. Fixed joints (no coordinate) pass Y^A_i and p^A_i to the parent unchanged. Equals
pinocchio.aba.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .kinematics import check_state, column_bias, lab_inertias, tree_state
from .model import Model
from .rnea import CHUNK, Wrench, external_wrenches
from .spatial import force_cross, inertia_apply


def _skew(x: np.ndarray) -> np.ndarray:
    """[x]× (..., 3, 3) with [x]× y = x × y."""
    z = np.zeros(x.shape[:-1])
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    return np.stack((np.stack((z, -x2, x1), -1), np.stack((x2, z, -x0), -1), np.stack((-x1, x0, z), -1)), -2)


def spatial_inertias(m: np.ndarray, h: np.ndarray, I_O: np.ndarray) -> np.ndarray:
    """(..., 6, 6) spatial inertias from mass m (...,) kg, first moment h (..., 3) kg·m and
    rotational inertia I_O (..., 3, 3) kg·m² about the same point (spatial.inertia_apply's map)."""
    Y = np.empty(h.shape[:-1] + (6, 6))
    H = _skew(h)
    Y[..., :3, :3] = m[..., None, None] * np.eye(3)
    Y[..., :3, 3:] = -H
    Y[..., 3:, :3] = H
    Y[..., 3:, 3:] = I_O
    return Y


def _aba(model: Model, q: np.ndarray, v: np.ndarray, tau: np.ndarray, ext: list[tuple[int, np.ndarray]]) -> np.ndarray:
    N, n = q.shape[0], len(model.segments)
    st = tree_state(model, q, v)
    S, V = st.S, st.velocity
    m, _, h, I_O = lab_inertias(model, st)
    mN = np.broadcast_to(m, (N, n))
    YA = spatial_inertias(mN, h, I_O)                                     # (N, n, 6, 6)
    pA = force_cross(V, inertia_apply(mN, h, I_O, V))                     # (N, n, 6)
    for i, w in ext:
        pA[:, i] -= w
    cb = column_bias(model, S, V, v)                                      # (N, nv, 6)
    U, Dinv, u, c = [None] * n, [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):
        p, k, iv = model.parents[i], int(model.nvs[i]), int(model.idx_v[i])
        Ya, pa = YA[:, i], pA[:, i]
        if k:
            Si = S[:, iv:iv + k]                                         # (N, k, 6)
            Ui = np.matmul(Ya, np.swapaxes(Si, 1, 2))                    # (N, 6, k)
            D = np.matmul(Si, Ui)                                        # (N, k, k)
            try:
                np.linalg.cholesky(D)
            except np.linalg.LinAlgError:
                raise ValueError(f"model {model.name!r}: segment {model.segments[i].name!r}: articulated "
                                 "inertia about its joint is not positive definite (massless segment with "
                                 "a joint and nothing massive beyond it?)") from None
            Di = 1.0 / D if k == 1 else np.linalg.inv(D)
            ui = tau[:, iv:iv + k] - np.einsum("nkj,nj->nk", Si, pa)
            ci = cb[:, iv:iv + k].sum(axis=1)
            U[i], Dinv[i], u[i], c[i] = Ui, Di, ui, ci
        if p < 0:
            continue
        if k:
            UD = np.matmul(Ui, Di)                                       # (N, 6, k)
            Ia = Ya - np.matmul(UD, np.swapaxes(Ui, 1, 2))
            YA[:, p] += Ia
            pA[:, p] += pa + np.einsum("nij,nj->ni", Ia, ci) + np.einsum("nik,nk->ni", UD, ui)
        else:
            YA[:, p] += Ya
            pA[:, p] += pa
    acc = np.empty((N, n, 6))
    qdd = np.empty((N, model.nv))
    base = np.concatenate((-model.gravity, np.zeros(3)))
    for i in range(n):
        p, k, iv = model.parents[i], int(model.nvs[i]), int(model.idx_v[i])
        ap = np.broadcast_to(base, (N, 6)) if p < 0 else acc[:, p]
        if not k:
            acc[:, i] = ap
            continue
        a1 = ap + c[i]
        ai = np.einsum("nkl,nl->nk", Dinv[i], u[i] - np.einsum("njk,nj->nk", U[i], a1))
        qdd[:, iv:iv + k] = ai
        acc[:, i] = a1 + np.einsum("nkj,nk->nj", S[:, iv:iv + k], ai)
    return qdd


def aba(model: Model, q, v, tau, f_ext: Sequence[Wrench] | None = None) -> np.ndarray:
    """Accelerations a ([N,] nv) for q ([N,] nq), v ([N,] nv), joint torques tau ([N,] nv; N·m
    or N, a free flyer's six entries a wrench in the base frame as in rnea) and external wrenches
    f_ext (sequence of rnea.Wrench, lab frame). Equals pinocchio.aba.

    ValueError naming the argument for a wrong shape or NaN, and naming the segment where the
    articulated inertia is singular (a massless leaf with a joint, methods.md a.5).
    """
    (q, v, t), batched = check_state(model, q, v, tau, a_name="tau")
    if v is None or t is None:
        raise ValueError("aba needs q, v and tau")
    N = q.shape[0]
    ext = external_wrenches(model, f_ext, N, batched)
    out = np.empty((N, model.nv))
    for s in range(0, N, CHUNK):
        sl = slice(s, s + CHUNK)
        out[sl] = _aba(model, q[sl], v[sl], t[sl], [(i, w[sl]) for i, w in ext])
    return out if batched else out[0]
