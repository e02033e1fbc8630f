"""Articulated-body algorithm (Featherstone): forward dynamics in O(n), batched over time.

    a = M(q)⁻¹ (τ − C(q, v) v − g(q) + Σ_e J_eᵀ w_e)

Pinocchio's three passes in local frames (spatial vectors (linear, angular) in each body's frame,
ⁱX_p the motion transform parent → child, gravity as the base acceleration (−g, 0)):

    1 (forward)   v_i = ⁱX_p v_p + v_J,   c_i = c_J + v_i × v_J,   p^A_i = v_i ×* (Y_i v_i)
    2 (backward)  U_i = Y^A_i S_i,  D_i = S_iᵀ U_i,  u_i = τ[i] − S_iᵀ p^A_i
                  Y^a = Y^A_i − U_i D_i⁻¹ U_iᵀ,   p^a = p^A_i + Y^a c_i + U_i D_i⁻¹ u_i
                  Y^A_p += ⁱX_pᵀ Y^a ⁱX_p,   p^A_p += ⁱX_pᵀ p^a
    3 (forward)   a' = ⁱX_p a_p + c_i,   a[i] = D_i⁻¹ (u_i − U_iᵀ a'),   a_i = a' + S_i a[i]

with Y^A_i starting as the body's spatial inertia. Segments on fixed joints are merged into their
moving ancestor's body when the code is generated (as Pinocchio's URDF reader does); D_i⁻¹ is an
unrolled LDLᵀ solve. External wrenches enter as generalised forces: τ + Σ_e J_eᵀ w_e (exact, the
same equation). By default the compiled kernel (kernels/tree.py `aba`: the same passes over the
model's tables, fixed-joint segments as bodies without coordinates, D_i⁻¹ by LDLᵀ, external
wrenches as p^A_i −= w_i in the body frame) runs; on the numpy path, like rnea, the algorithm is
unrolled once per model into straight-line code (codegen.py), run on floats for one sample and on
(N,) arrays for a batch. Equals pinocchio.aba.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .codegen import (ZERO, Code, add, body_inertia, body_transform, compiled, const, dot6, force_to_parent,
                      inertia_times, inertia_to_parent, joint_motion, let_mat, madd, moving_bodies, mul, rotT, run,
                      sub, subspace, vadd, vcross)
from . import kernels, workspace
from .joints import normalized_configuration
from .kinematics import all_finite, check_state, kernel_input_failed, kernel_state
from .model import Model
from .rnea import CHUNK, Wrench, external_generalized_forces, external_wrenches, segment_wrenches


def _ldl_solve(code: Code, D, rhs: list[list], where: str) -> list[list]:
    """D⁻¹ b for each b in rhs (k items each), D (k × k items, symmetric positive definite), by an
    unrolled LDLᵀ factorisation; a pivot that folds to a constant <= 0 (e.g. a massless leaf with
    a joint, methods.md a.5) raises ValueError naming `where`."""
    k = len(D)
    L = [[None] * k for _ in range(k)]
    d, inv = [], []
    for j in range(k):
        dj = code.let(sub(D[j][j], add(*(mul(mul(L[j][m], L[j][m]), d[m]) for m in range(j)))))
        if dj is None or (isinstance(dj, float) and dj <= 0.0):
            raise ValueError(f"{where}: articulated inertia about its joint is not positive definite "
                             "(a massless segment with a joint and nothing massive beyond it?)")
        d.append(dj)
        inv.append(1.0 / dj if isinstance(dj, float) else code.let(f"(1.0/{dj})"))
        for i in range(j + 1, k):
            L[i][j] = code.let(mul(sub(D[i][j], add(*(mul(mul(L[i][m], L[j][m]), d[m]) for m in range(j)))), inv[j]))
    out = []
    for b in rhs:
        y: list = []
        for i in range(k):
            y.append(code.let(sub(b[i], add(*(mul(L[i][m], y[m]) for m in range(i))))))
        x: list = [None] * k
        for i in reversed(range(k)):
            x[i] = code.let(sub(mul(y[i], inv[i]), add(*(mul(L[m][i], x[m]) for m in range(i + 1, k)))))
        out.append(x)
    return out


def _generate(model: Model) -> str:
    code = Code()
    q = [f"q{k}" for k in range(model.nq)]
    v = [f"v{k}" for k in range(model.nv)]
    tau = [f"tau{k}" for k in range(model.nv)]
    moving, anchor, inertia = moving_bodies(model)
    st = {}          # per moving segment: the pass-1 quantities
    for i in moving:
        j, iv = model.segments[i].joint, model.idx_v[i]
        a, R, t, RJ = body_transform(code, model, i, anchor, q)
        vJ, cJ = joint_motion(code, j, RJ, v[iv:iv + j.nv], [None] * j.nv)
        if a < 0:
            vel = (code.vec(vJ[0]), code.vec(vJ[1]))
        else:
            vp, wp = st[a]["v"]
            vel = (code.vec(vadd(rotT(R, vadd(vp, vcross(wp, t))), vJ[0])), code.vec(vadd(rotT(R, wp), vJ[1])))
        lin, ang = vel
        c = (code.vec(vadd(cJ[0], vcross(ang, vJ[0]), vcross(lin, vJ[1]))), code.vec(vadd(cJ[1], vcross(ang, vJ[1]))))
        Y = body_inertia(*inertia[i])
        f = [code.vec(x) for x in inertia_times(Y, vel)]
        pA = [code.vec(vcross(ang, f[0])), code.vec(vadd(vcross(ang, f[1]), vcross(lin, f[0])))]
        st[i] = {"anchor": a, "R": R, "t": t, "v": vel, "c": c, "Y": Y, "pA": pA, "S": subspace(j, RJ)}
    for i in reversed(moving):
        b = st[i]
        A, B, C = b["Y"]
        S, iv, k = b["S"], model.idx_v[i], len(b["S"])
        U = [[code.vec(x) for x in inertia_times(b["Y"], col)] for col in S]          # U_k = Y^A S_k
        D = [[dot6(S[r], U[c]) for c in range(k)] for r in range(k)]
        u = [code.let(sub(tau[iv + r], dot6(S[r], b["pA"]))) for r in range(k)]
        where = f"model {model.name!r}: segment {model.segments[i].name!r}"
        b["U"], b["D"], b["u"], b["where"] = U, D, u, where
        if b["anchor"] < 0:
            continue
        Ucol = [U[c][0] + U[c][1] for c in range(k)]           # U as k columns of 6 items
        # Z = D⁻¹ Uᵀ (one solve per component r of the 6), z = D⁻¹ u
        sol = _ldl_solve(code, D, [[Ucol[c][r] for c in range(k)] for r in range(6)] + [u], where)
        Z, z = sol[:6], sol[6]

        def UZ(r, c):          # (U D⁻¹ Uᵀ)_rc
            return add(*(mul(Ucol[m][r], Z[c][m]) for m in range(k)))

        Aa = [[code.let(sub(A[r][c], UZ(r, c))) if c >= r else None for c in range(3)] for r in range(3)]
        Ca = [[code.let(sub(C[r][c], UZ(3 + r, 3 + c))) if c >= r else None for c in range(3)] for r in range(3)]
        for r in range(3):
            for c in range(r):
                Aa[r][c], Ca[r][c] = Aa[c][r], Ca[c][r]
        Ya = (Aa, [[code.let(sub(B[r][c], UZ(r, 3 + c))) for c in range(3)] for r in range(3)], Ca)
        Yc = inertia_times(Ya, b["c"])
        Uz = [add(*(mul(Ucol[m][r], z[m]) for m in range(k))) for r in range(6)]
        pa = (code.vec(vadd(b["pA"][0], Yc[0], Uz[:3])), code.vec(vadd(b["pA"][1], Yc[1], Uz[3:])))
        par = st[b["anchor"]]
        Y1 = inertia_to_parent(code, b["R"], b["t"], Ya)
        par["Y"] = tuple(let_mat(code, madd(P, X)) for P, X in zip(par["Y"], Y1))
        fl, fa = force_to_parent(code, b["R"], b["t"], pa)
        par["pA"] = [code.vec(vadd(par["pA"][0], fl)), code.vec(vadd(par["pA"][1], fa))]
    qdd = [None] * model.nv
    g = const(-model.gravity)
    for i in moving:
        b = st[i]
        R, t = b["R"], b["t"]
        if b["anchor"] < 0:
            ap = (rotT(R, g), ZERO)
        else:
            al, aa = st[b["anchor"]]["a"]
            ap = (rotT(R, vadd(al, vcross(aa, t))), rotT(R, aa))
        a1 = (code.vec(vadd(ap[0], b["c"][0])), code.vec(vadd(ap[1], b["c"][1])))
        rhs = [sub(b["u"][r], dot6(b["U"][r], a1)) for r in range(len(b["S"]))]
        x = _ldl_solve(code, b["D"], [rhs], b["where"])[0]
        iv = model.idx_v[i]
        qdd[iv:iv + len(x)] = x
        b["a"] = (code.vec(vadd(a1[0], *([mul(c, xk) for c in col[0]] for col, xk in zip(b["S"], x)))),
                  code.vec(vadd(a1[1], *([mul(c, xk) for c in col[1]] for col, xk in zip(b["S"], x)))))
    return code.function("aba", {"q": q, "v": v, "tau": tau}, qdd)


def _singular(model: Model, sample: int, segment: int | None = None) -> ValueError:
    """The error for a singular articulated inertia (a non-positive pivot at `segment`, or
    accelerations not finite): by construction if nothing beyond the joint has mass (methods.md
    a.5), else a singular configuration at `sample`."""
    if segment is None:
        return ValueError(f"model {model.name!r}: singular articulated inertia at sample {sample} (accelerations "
                          "not finite)")
    if model.masses @ model.supports[:, segment] == 0:
        return ValueError(f"model {model.name!r}: segment {model.segments[segment].name!r}: articulated inertia "
                          "about its joint is not positive definite (a massless segment with a joint and nothing "
                          "massive beyond it?)")
    return ValueError(f"model {model.name!r}: singular articulated inertia at sample {sample} (segment "
                      f"{model.segments[segment].name!r})")


def aba(model: Model, q, v, tau, f_ext: Sequence[Wrench] | None = None, data: workspace.Data | None = None) -> np.ndarray:
    """Accelerations a ([N,] nv) for q ([N,] nq), v ([N,] nv), joint torques tau ([N,] nv; N·m
    or N, a free flyer's six entries a wrench in the base frame as in rnea) and external wrenches
    f_ext (sequence of rnea.Wrench, lab frame). Equals pinocchio.aba.

    ValueError naming the argument for a wrong shape or NaN; naming the segment where the
    articulated inertia is singular by construction (a massless leaf with a joint, methods.md
    a.5); or saying the accelerations are not finite (a singular configuration).
    """
    if v is None or tau is None:
        raise ValueError("aba needs q, v and tau")
    Q = None
    if kernels.enabled():
        # shapes only: the kernel checks finiteness (kinematics.kernel_state)
        Q, V, T, batched = kernel_state(model, q, v, tau, a_name="tau")
        if not batched:
            Q, V, T = Q[None], V[None], T[None]
    if Q is not None and kernels.tree_compiled(Q.shape[0]):
        N = Q.shape[0]
        d = workspace.data(model, data)
        F = segment_wrenches(d, external_wrenches(model, f_ext, N, batched), N) if f_ext else d.no_ext
        out = np.empty((N, model.nv))
        # the entry point without numba's type dispatch: the arrays are exactly its signature's
        status = kernels.entry("tree.aba")(d.itab, d.ftab, d.gravity, Q, V, T, F, out)
        if status != -1:
            kernel_input_failed(model, status, q, v, tau, "tau", pivot=True)   # a NaN, a unit block off norm
            raise _singular(model, status // len(model.segments), status % len(model.segments))
        if not all_finite(out):
            raise _singular(model, int(np.argwhere(~np.isfinite(out))[0, 0]))
        return out if batched else out[0]
    (q, v, t), batched = check_state(model, q, v, tau, a_name="tau")
    N = q.shape[0]
    ext = external_wrenches(model, f_ext, N, batched)
    q = normalized_configuration(model, q)
    if ext:
        t = t + external_generalized_forces(model, q, ext)
    kernel = compiled(model, "aba", _generate, data)
    out = np.empty((N, model.nv))
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in range(0, N, CHUNK):
            out[s:s + CHUNK] = run(kernel, [q[s:s + CHUNK], v[s:s + CHUNK], t[s:s + CHUNK]], model.nv)
    if not all_finite(out):
        n = int(np.argwhere(~np.isfinite(out))[0, 0])
        raise _singular(model, n)
    return out if batched else out[0]
