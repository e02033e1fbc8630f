"""Forward dynamics of a tree, batched over time: a = M(q)⁻¹ (τ − h(q, v)).

    M(q) a = τ − C(q, v) v − g(q) + Σ_e J_eᵀ w_e

Computed by the articulated-body algorithm (aba.py): O(n), no mass matrix; on human15 about 5x
faster than CRBA + Cholesky in batches and 1.2x for one sample (bench/dynamics.py section 4).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .aba import aba
from .model import Model
from .rnea import Wrench
from .workspace import Data


def forward_dynamics(model: Model, q, v, tau, f_ext: Sequence[Wrench] | None = None,
                     data: Data | None = None) -> np.ndarray:
    """Accelerations a ([N,] nv) for q ([N,] nq), v ([N,] nv), joint torques tau ([N,] nv; N·m
    or N, a free flyer's entries as in rnea) and external wrenches f_ext (see rnea.Wrench);
    data: the model's workspace (workspace.Data, default one per model).

    ValueError naming the argument for bad input, or the segment whose articulated inertia is
    singular (e.g. a massless leaf segment with a joint).
    """
    return aba(model, q, v, tau, f_ext, data)
