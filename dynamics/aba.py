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
same equation). Like rnea, the algorithm is unrolled once per model into straight-line code
(codegen.py), run on floats for one sample and on (N,) arrays for a batch. Equals pinocchio.aba.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .codegen import (ZERO, Code, add, compiled, const, joint_motion, joint_transform, matmul, mul, neg, rot, rotT,
                      run, sub, vadd, vcross)
from .joints import normalized_configuration
from .kinematics import check_state
from .model import Model
from .rnea import CHUNK, Wrench, external_generalized_forces, external_wrenches
from .spatial import parallel_axis


def _bodies(model: Model) -> tuple[list[int], dict[int, tuple[int, np.ndarray, np.ndarray]], dict[int, tuple]]:
    """Moving segments (those with a joint coordinate); for every segment its anchor (nearest
    moving ancestor-or-self, -1 = world) with its frame's constant placement (R, t) in the anchor
    frame; and per moving segment the merged constant inertia (m, h, I_O) about its frame origin."""
    anchor: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
    moving = []
    for i, s in enumerate(model.segments):
        if s.joint.nv:
            anchor[i] = (i, np.eye(3), np.zeros(3))
            moving.append(i)
        else:
            p = model.parents[i]
            a, Ra, ta = (-1, np.eye(3), np.zeros(3)) if p < 0 else anchor[p]
            anchor[i] = (a, Ra @ s.joint.rotation, ta + Ra @ s.joint.translation)
    inertia = {i: [0.0, np.zeros(3), np.zeros((3, 3))] for i in moving}
    for i, s in enumerate(model.segments):
        a, R, t = anchor[i]
        if a < 0 or s.mass == 0:
            continue
        c = t + R @ s.com
        acc = inertia[a]
        acc[0] += s.mass
        acc[1] = acc[1] + s.mass * c
        acc[2] = acc[2] + parallel_axis(np.array(s.mass), c, R @ s.inertia @ R.T)
    return moving, anchor, {i: tuple(x) for i, x in inertia.items()}


def _T(M):
    return [[M[j][i] for j in range(3)] for i in range(3)]


def _skew(t):
    return [[None, neg(t[2]), t[1]], [t[2], None, neg(t[0])], [neg(t[1]), t[0], None]]


def _msub(A, B):
    return [[sub(A[i][j], B[i][j]) for j in range(3)] for i in range(3)]


def _madd(*Ms):
    return [[add(*(M[i][j] for M in Ms)) for j in range(3)] for i in range(3)]


def _let(code: Code, M):
    return [code.vec(r) for r in M]


def _inertia_times(Y, x):
    """(f_lin, f_ang) = Y (lin, ang) for Y = (A, B, C) = [[A, B], [Bᵀ, C]]."""
    A, B, C = Y
    return vadd(rot(A, x[0]), rot(B, x[1])), vadd(rotT(B, x[0]), rot(C, x[1]))


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


def _subspace(j, RJ) -> list[tuple[list, list]]:
    """Motion subspace columns S (k × (lin, ang) items) of a joint, in the child frame."""
    e = [[1.0, None, None], [None, 1.0, None], [None, None, 1.0]]
    t = j.type
    if t in ("revolute", "revolute_unbounded"):
        return [(ZERO, const(j.axis))]
    if t == "prismatic":
        return [(const(j.axis), ZERO)]
    if t == "spherical":
        return [(ZERO, x) for x in e]
    if t == "free_flyer":
        return [(x, ZERO) for x in e] + [(ZERO, x) for x in e]
    if t == "planar":          # x, y translations fixed in the placement frame, turned into the child
        return [(rotT(RJ, e[0]), ZERO), (rotT(RJ, e[1]), ZERO), (ZERO, e[2])]
    raise AssertionError(t)


def _dot6(x, y):
    return add(*(mul(a, b) for a, b in zip(x[0] + x[1], y[0] + y[1])))


def _generate(model: Model) -> str:
    code = Code()
    q = [f"q{k}" for k in range(model.nq)]
    v = [f"v{k}" for k in range(model.nv)]
    tau = [f"tau{k}" for k in range(model.nv)]
    moving, anchor, inertia = _bodies(model)
    st = {}          # per moving segment: the pass-1 quantities
    for i in moving:
        s, p = model.segments[i], model.parents[i]
        j = s.joint
        a, Ra, ta = (-1, np.eye(3), np.zeros(3)) if p < 0 else anchor[p]
        R0, t0 = const(Ra @ j.rotation), const(ta + Ra @ j.translation)
        iq, iv = model.idx_q[i], model.idx_v[i]
        RJ, tJ = joint_transform(code, j, q[iq:iq + j.nq])
        R = _let(code, matmul(R0, RJ))                         # child axes in the anchor frame
        t = code.vec(vadd(t0, rot(R0, tJ)))                    # child origin in the anchor frame
        vJ, cJ = joint_motion(code, j, RJ, v[iv:iv + j.nv], [None] * j.nv)
        if a < 0:
            vel = (code.vec(vJ[0]), code.vec(vJ[1]))
        else:
            vp, wp = st[a]["v"]
            vel = (code.vec(vadd(rotT(R, vadd(vp, vcross(wp, t))), vJ[0])), code.vec(vadd(rotT(R, wp), vJ[1])))
        lin, ang = vel
        c = (code.vec(vadd(cJ[0], vcross(ang, vJ[0]), vcross(lin, vJ[1]))), code.vec(vadd(cJ[1], vcross(ang, vJ[1]))))
        m, h, I_O = inertia[i]
        H = _skew(const(h))
        Y = (_madd([[m if r == k else None for k in range(3)] for r in range(3)]), [[neg(x) for x in r] for r in H],
             [[float(x) if x else None for x in r] for r in I_O])
        f = [code.vec(x) for x in _inertia_times(Y, vel)]
        pA = [code.vec(vcross(ang, f[0])), code.vec(vadd(vcross(ang, f[1]), vcross(lin, f[0])))]
        st[i] = {"anchor": a, "R": R, "t": t, "v": vel, "c": c, "Y": Y, "pA": pA, "S": _subspace(j, RJ)}
    for i in reversed(moving):
        b = st[i]
        A, B, C = b["Y"]
        S, iv = b["S"], model.idx_v[i]
        U = [[code.vec(x) for x in _inertia_times(b["Y"], col)] for col in S]          # U_k = Y^A S_k
        D = [[_dot6(S[r], U[k]) for k in range(len(S))] for r in range(len(S))]
        u = [code.let(sub(tau[iv + r], _dot6(S[r], b["pA"]))) for r in range(len(S))]
        where = f"model {model.name!r}: segment {model.segments[i].name!r}"
        b["U"], b["D"], b["u"], b["where"] = U, D, u, where
        if b["anchor"] < 0:
            continue
        # Z = D⁻¹ Uᵀ (rows: the 6 components), z = D⁻¹ u
        rows = [[U[k][0][r] for k in range(len(S))] for r in range(3)] + [[U[k][1][r] for k in range(len(S))]
                                                                           for r in range(3)]
        sol = _ldl_solve(code, D, rows + [u], where)
        Z, z = sol[:6], sol[6]
        # Y^a = Y^A − U D⁻¹ Uᵀ, block (r, c) entries Σ_k U[k][r] Z[c][k]
        Ucol = [U[k][0] + U[k][1] for k in range(len(S))]

        def UZ(r, c):
            return add(*(mul(Ucol[k][r], Z[c][k]) for k in range(len(S))))

        Aa = [[code.let(sub(A[r][c], UZ(r, c))) if c >= r else None for c in range(3)] for r in range(3)]
        Ca = [[code.let(sub(C[r][c], UZ(3 + r, 3 + c))) if c >= r else None for c in range(3)] for r in range(3)]
        for r in range(3):
            for c in range(r):
                Aa[r][c], Ca[r][c] = Aa[c][r], Ca[c][r]
        Ba = [[code.let(sub(B[r][c], UZ(r, 3 + c))) for c in range(3)] for r in range(3)]
        Ya = (Aa, Ba, Ca)
        Yc = _inertia_times(Ya, b["c"])
        pa = [code.vec(vadd(b["pA"][0], Yc[0], [add(*(mul(Ucol[k][r], z[k]) for k in range(len(S)))) for r in range(3)])),
              code.vec(vadd(b["pA"][1], Yc[1], [add(*(mul(Ucol[k][3 + r], z[k]) for k in range(len(S))))
                                                for r in range(3)]))]
        # to the anchor (parent body) frame: rotate the blocks, then move the origin by t (T = [t]×)
        R, t, par = b["R"], b["t"], st[b["anchor"]]
        A1 = _let(code, matmul(matmul(R, Aa), _T(R)))
        B1 = _let(code, matmul(matmul(R, Ba), _T(R)))
        C1 = _let(code, matmul(matmul(R, Ca), _T(R)))
        T = _skew(t)
        A1T = matmul(A1, T)
        B2 = _msub(B1, A1T)
        C2 = _madd(C1, matmul(T, B1), [[neg(x) for x in r] for r in matmul(_T(B1), T)],
                   [[neg(x) for x in r] for r in matmul(T, A1T)])
        PA, PB, PC = par["Y"]
        par["Y"] = (_let(code, _madd(PA, A1)), _let(code, _madd(PB, B2)), _let(code, _madd(PC, C2)))
        fl = code.vec(rot(R, pa[0]))
        fa = vadd(rot(R, pa[1]), vcross(t, fl))
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
        rhs = [sub(b["u"][r], _dot6(b["U"][r], a1)) for r in range(len(b["S"]))]
        x = _ldl_solve(code, b["D"], [rhs], b["where"])[0]
        iv = model.idx_v[i]
        qdd[iv:iv + len(x)] = x
        b["a"] = (code.vec(vadd(a1[0], *([mul(c, xk) for c in col[0]] for col, xk in zip(b["S"], x)))),
                  code.vec(vadd(a1[1], *([mul(c, xk) for c in col[1]] for col, xk in zip(b["S"], x)))))
    return code.function("aba", {"q": q, "v": v, "tau": tau}, qdd)


def aba(model: Model, q, v, tau, f_ext: Sequence[Wrench] | None = None) -> np.ndarray:
    """Accelerations a ([N,] nv) for q ([N,] nq), v ([N,] nv), joint torques tau ([N,] nv; N·m
    or N, a free flyer's six entries a wrench in the base frame as in rnea) and external wrenches
    f_ext (sequence of rnea.Wrench, lab frame). Equals pinocchio.aba.

    ValueError naming the argument for a wrong shape or NaN; naming the segment where the
    articulated inertia is singular by construction (a massless leaf with a joint, methods.md
    a.5); or saying the accelerations are not finite (a singular configuration).
    """
    (q, v, t), batched = check_state(model, q, v, tau, a_name="tau")
    if v is None or t is None:
        raise ValueError("aba needs q, v and tau")
    N = q.shape[0]
    ext = external_wrenches(model, f_ext, N, batched)
    q = normalized_configuration(model, q)
    if ext:
        t = t + external_generalized_forces(model, q, ext)
    kernel = compiled(model, "aba", _generate)
    out = np.empty((N, model.nv))
    with np.errstate(divide="ignore", invalid="ignore"):
        try:
            for s in range(0, N, CHUNK):
                out[s:s + CHUNK] = run(kernel, [q[s:s + CHUNK], v[s:s + CHUNK], t[s:s + CHUNK]], model.nv)
        except ZeroDivisionError:
            out[:] = np.nan
    if not np.all(np.isfinite(out)):
        n = int(np.argwhere(~np.isfinite(out))[0, 0])
        raise ValueError(f"model {model.name!r}: singular articulated inertia at sample {n} (accelerations "
                         "not finite)")
    return out if batched else out[0]
