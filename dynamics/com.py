"""Centre of mass of a tree model with its velocity and acceleration, batched over time.

    c = Σ m_i c_i / M,   ċ = Σ m_i v_ci / M,   c̈ = Σ m_i a_ci / M

with c_i the lab-frame CoM of segment i, v_ci = v_O,i + ω_i × c_i and
a_ci = a_O,i + α_i × c_i + ω_i × v_ci (kinematics.py), M = model.total_mass. By default the
compiled rnea kernel's centroidal output gives them as c, P/M and Ṗ/M (centroidal.py), the same sums.
"""
from __future__ import annotations

import numpy as np

from . import kernels, workspace
from .centroidal import centroidal_state
from .kinematics import check_state, lab_inertias, tree_state
from .model import Model
from .spatial import cross


def com(model: Model, q, v=None, a=None, data: workspace.Data | None = None):
    """CoM position ([N,] 3) m in the lab frame for q ([N,] nq); with v ([N,] nv) also its
    velocity (m/s), with v and a also its acceleration (m/s²): returns c, (c, ċ) or (c, ċ, c̈).
    data: the model's workspace."""
    (q, v, a), batched = check_state(model, q, v, a)
    if model.total_mass <= 0:
        raise ValueError(f"model {model.name!r} has no mass: no centre of mass")
    if a is not None and v is None:
        raise ValueError("com: the acceleration needs v as well")
    if kernels.enabled():
        X = centroidal_state(model, q, v, a, data)
        parts = [X[:, :3], X[:, 3:6] / model.total_mass, X[:, 9:12] / model.total_mass][:1 + (v is not None) + (a is not None)]
        parts = parts if batched else [x[0] for x in parts]
        return parts[0] if len(parts) == 1 else tuple(parts)
    st = tree_state(model, q, v, a)
    m, c, _, _ = lab_inertias(model, st)
    w = m / model.total_mass

    def avg(x):
        out = np.einsum("s,nsj->nj", w, x)
        return out if batched else out[0]

    if v is None:
        return avg(c)
    V = st.velocity
    vc = V[..., :3] + cross(V[..., 3:], c)
    if a is None:
        return avg(c), avg(vc)
    A = st.acceleration
    ac = A[..., :3] + cross(A[..., 3:], c) + cross(V[..., 3:], vc)
    return avg(c), avg(vc), avg(ac)
