"""Forward dynamics by CRBA + Cholesky: a = M(q)⁻¹ (τ − h(q, v) ), batched over time.

    M(q) a = τ − C(q, v) v − g(q) + Σ_e J_eᵀ w_e

M from crba, h = rnea(q, v, 0, f_ext) (includes gravity and the external wrenches).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .crba import crba
from .kinematics import check_state
from .model import Model
from .rnea import Wrench, nonlinear_effects


def forward_dynamics(model: Model, q, v, tau, f_ext: Sequence[Wrench] | None = None) -> np.ndarray:
    """Accelerations a ([N,] nv) for q ([N,] nq), v ([N,] nv), joint torques tau ([N,] nv; N·m
    or N, a free flyer's entries as in rnea) and external wrenches f_ext (see rnea.Wrench).

    ValueError if M(q) is not positive definite (e.g. a massless leaf segment with a joint).
    """
    (q, v, t), batched = check_state(model, q, v, tau, a_name="tau")
    if v is None or t is None:
        raise ValueError("forward_dynamics needs q, v and tau")
    M = crba(model, q)
    b = t - nonlinear_effects(model, q, v, f_ext)
    try:
        L = np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        raise ValueError(f"model {model.name!r}: mass matrix not positive definite "
                         "(massless segment with a free joint?)") from None
    y = np.linalg.solve(L, b[..., None])
    a = np.linalg.solve(np.swapaxes(L, -1, -2), y)[..., 0]
    return a if batched else a[0]
