"""Centroidal momentum and its rate, batched over time (lab-frame axes, about the CoM).

    h_G = (P, L_G),  P = Σ m_i v_ci = M ċ,   L_G = L_O − c × P,   L_O = Σ (Y_i v_i)_angular
    ḣ_G = (Ṗ, L̇_G),  Ṗ = M c̈,   L̇_G = L̇_O − c × Ṗ          (ċ × P = 0)

with Y_i v_i the spatial momentum of segment i about the lab origin and L̇_O the angular part of
Σ (Y_i a_i + v_i ×* Y_i v_i) (no gravity: ḣ_G is the rate of momentum, which equals the sum of
external forces including weight, and their moments about the CoM). Pinocchio: data.hg and
data.dhg of computeCentroidalMomentumTimeVariation.

By default the compiled rnea kernel's forward pass without gravity (kernels/tree.py `rnea` with its
centroidal output: body momenta and their rates moved to the lab origin and summed, no backward
pass) gives c, h_G and ḣ_G; the numpy path sums the same terms from the lab-frame kinematics.
"""
from __future__ import annotations

import numpy as np

from . import kernels, workspace
from .kinematics import check_state, configuration_failed, contiguous, lab_inertias, tree_state
from .model import Model
from .spatial import cross, force_cross, inertia_apply


def _about_com(h_O: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.concatenate((h_O[..., :3], h_O[..., 3:] - cross(c, h_O[..., :3])), axis=-1)


def centroidal_state(model: Model, q: np.ndarray, v: np.ndarray | None, a: np.ndarray | None,
                     data: workspace.Data | None = None) -> np.ndarray:
    """The compiled kernel's (N, 15) rows for validated (N, ·) arrays: CoM c (3) m, then with v
    h_G (6), then with a ḣ_G (6) (entries without their input are undefined)."""
    d = workspace.data(model, data)
    q = contiguous(q)
    zero = np.zeros((q.shape[0], model.nv))
    out = np.empty((q.shape[0], 15))
    if kernels.kernel("tree.rnea")(d.itab, d.ftab, d.zero_gravity, q, zero if v is None else contiguous(v),
                                   zero if a is None else contiguous(a), d.no_ext, np.empty((0, model.nv)), out) >= 0:
        configuration_failed(model, q)
    return out


def centroidal_momentum(model: Model, q, v, a=None, data: workspace.Data | None = None):
    """Centroidal momentum h_G ([N,] 6): linear momentum P (kg·m/s) and angular momentum about
    the CoM L_G (kg·m²/s), lab axes, for q ([N,] nq), v ([N,] nv). With a ([N,] nv) also returns
    its rate ḣ_G ([N,] 6) (N, N·m): (h_G, ḣ_G). data: the model's workspace."""
    (q, v, a), batched = check_state(model, q, v, a)
    if v is None:
        raise ValueError("centroidal_momentum needs q and v")
    if model.total_mass <= 0:
        raise ValueError(f"model {model.name!r} has no mass")
    if kernels.enabled():
        X = centroidal_state(model, q, v, a, data)
        hG, dhG = X[:, 3:9], X[:, 9:15]
        if a is None:
            return hG if batched else hG[0]
        return (hG, dhG) if batched else (hG[0], dhG[0])
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
