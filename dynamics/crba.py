"""Composite-rigid-body algorithm: the joint-space mass matrix M(q), batched over time.

Pinocchio's two passes in body frames (spatial algebra of codegen.py, ⁱX_p the motion transform
parent → child):

    backward  Y^c_i = Y_i + Σ_{c ∈ children(i)} ᶜX_iᵀ Y^c_c ᶜX_i       composite inertia of the subtree
    columns   F = Y^c_i S_i,  M[i, i] = S_iᵀ F;  then up the ancestors j of i:
              F ← ʲX_childᵀ F (the force moved to j's frame),  M[j, i] = M[i, j]ᵀ = S_jᵀ F

By default the compiled kernel (kernels/tree.py `crba`, fixed-joint segments as bodies without
columns) runs. On the numpy path, segments on fixed joints are merged into their moving ancestor
when the code is generated and, like rnea, the algorithm is unrolled once per model into
straight-line code (codegen.py), run on floats for one sample and on (N,) arrays for a batch. Equals pinocchio.crba (full symmetric matrix, no
armature).
"""
from __future__ import annotations

import numpy as np

from .codegen import (Code, body_inertia, body_transform, compiled, dot6, force_to_parent, inertia_times,
                      inertia_to_parent, let_mat, madd, moving_bodies, run, subspace)
from . import kernels, workspace
from .joints import normalized_configuration
from .kinematics import check_state, configuration_failed, contiguous
from .model import Model
from .rnea import CHUNK


def _generate(model: Model) -> str:
    code = Code()
    q = [f"q{k}" for k in range(model.nq)]
    moving, anchor, inertia = moving_bodies(model)
    body = {}
    for i in moving:
        a, R, t, RJ = body_transform(code, model, i, anchor, q)
        body[i] = {"anchor": a, "R": R, "t": t, "S": subspace(model.segments[i].joint, RJ),
                   "Y": body_inertia(*inertia[i])}
    for i in reversed(moving):
        b = body[i]
        if b["anchor"] >= 0:
            par = body[b["anchor"]]
            par["Y"] = tuple(let_mat(code, madd(P, X))
                             for P, X in zip(par["Y"], inertia_to_parent(code, b["R"], b["t"], b["Y"])))
    nv = model.nv
    M = [[None] * nv for _ in range(nv)]
    for i in moving:
        b, iv = body[i], model.idx_v[i]
        F = [[code.vec(x) for x in inertia_times(b["Y"], col)] for col in b["S"]]
        for r, Sr in enumerate(b["S"]):
            for c in range(r, len(F)):
                M[iv + r][iv + c] = M[iv + c][iv + r] = code.let(dot6(Sr, F[c]))
        j = i
        while body[j]["anchor"] >= 0:
            F = [list(force_to_parent(code, body[j]["R"], body[j]["t"], f)) for f in F]
            F = [[code.vec(f[0]), code.vec(f[1])] for f in F]
            j = body[j]["anchor"]
            jv = model.idx_v[j]
            for r, Sr in enumerate(body[j]["S"]):
                for c in range(len(F)):
                    M[jv + r][iv + c] = M[iv + c][jv + r] = code.let(dot6(Sr, F[c]))
    return code.function("crba", {"q": q}, [x for row in M for x in row])


def crba(model: Model, q, data: workspace.Data | None = None) -> np.ndarray:
    """Mass matrix M(q), ([N,] nv, nv) symmetric positive (semi)definite, kg·m² / kg·m / kg
    blocks, for q (nq,) or (N, nq): kinetic energy T = ½ vᵀ M v. data: the model's workspace."""
    (q, _, _), batched = check_state(model, q)
    if kernels.enabled():
        d = workspace.data(model, data)
        q = contiguous(q)
        M = np.empty((q.shape[0], model.nv, model.nv))
        if kernels.kernel("tree.crba")(d.itab, d.ftab, q, M) >= 0:
            configuration_failed(model, q)
        return M if batched else M[0]
    q = normalized_configuration(model, q)
    kernel = compiled(model, "crba", _generate, data)
    nv = model.nv
    M = np.concatenate([run(kernel, [q[s:s + CHUNK]], nv * nv) for s in range(0, q.shape[0], CHUNK)])
    M = M.reshape(-1, nv, nv)
    return M if batched else M[0]
