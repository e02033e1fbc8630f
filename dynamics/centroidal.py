"""Centroidal momentum and its rate, batched over time (lab-frame axes, about the CoM).

    h_G = (P, L_G),  P = Σ m_i v_ci = M ċ,   L_G = L_O − c × P,   L_O = Σ (Y_i v_i)_angular
    ḣ_G = (Ṗ, L̇_G),  Ṗ = M c̈,   L̇_G = L̇_O − c × Ṗ          (ċ × P = 0)

with Y_i v_i the spatial momentum of segment i about the lab origin and L̇_O the angular part of
Σ (Y_i a_i + v_i ×* Y_i v_i) (no gravity: ḣ_G is the rate of momentum, which equals the sum of
external forces including weight, and their moments about the CoM). Pinocchio: data.hg and
data.dhg of computeCentroidalMomentumTimeVariation.
"""
from __future__ import annotations

import numpy as np

from .kinematics import check_state, lab_inertias, tree_state
from .model import Model
from .spatial import cross, force_cross, inertia_apply


def _about_com(h_O: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.concatenate((h_O[..., :3], h_O[..., 3:] - cross(c, h_O[..., :3])), axis=-1)


def centroidal_momentum(model: Model, q, v, a=None):
    """Centroidal momentum h_G ([N,] 6): linear momentum P (kg·m/s) and angular momentum about
    the CoM L_G (kg·m²/s), lab axes, for q ([N,] nq), v ([N,] nv). With a ([N,] nv) also returns
    its rate ḣ_G ([N,] 6) (N, N·m): (h_G, ḣ_G)."""
    (q, v, a), batched = check_state(model, q, v, a)
    if v is None:
        raise ValueError("centroidal_momentum needs q and v")
    if model.total_mass <= 0:
        raise ValueError(f"model {model.name!r} has no mass")
    st = tree_state(model, q, v, a)
    m, c, h, I_O = lab_inertias(model, st)
    G = np.einsum("s,nsj->nj", m, c) / model.total_mass
    Yv = inertia_apply(m, h, I_O, st.velocity)
    hG = _about_com(Yv.sum(axis=1), G)
    if a is None:
        return hG if batched else hG[0]
    dh = (inertia_apply(m, h, I_O, st.acceleration) + force_cross(st.velocity, Yv)).sum(axis=1)
    dhG = _about_com(dh, G)
    return (hG, dhG) if batched else (hG[0], dhG[0])
