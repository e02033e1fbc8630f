"""Compiled tree recursions (numba): kinematics, rnea with external wrenches, crba, aba.

One generic recursion over the model's arrays (Featherstone's and Pinocchio's form), compiled
once for every model: the model enters as two tables built by `dynamics.workspace.Data`,

    itab (nseg, 6) int64:   parent (-1 = world), joint type code (JOINT_CODES), idx_q, idx_v, nq, nv
    ftab (nseg, 64) float:  joint axis (3), placement rotation R0 row-major (9), translation t0 (3) m,
                            mass kg, CoM (3) m, central inertia (9) kg·m², then the body's spatial
                            inertia Y (6×6, row-major) about its frame origin,

and gravity g (3,) m/s² (lab frame). Segments are parents-first. Spatial vectors are (linear,
angular) in each segment's frame; ⁱX_p is the 6×6 motion transform parent → child,

    ⁱX_p = [[Rᵀ, −Rᵀ[t]×], [0, Rᵀ]]       (R, t: child axes and origin in the parent frame)

and ⁱX_pᵀ takes a force from the child to the parent. Y (v, ω) = (m v − h × ω, I_O ω + h × v)
with h = m c and I_O = I_c + m (|c|² E − c cᵀ).

Every kernel runs a batch: (N, ·) C-contiguous float64 inputs, a loop over samples inside the
compiled code, outputs written into arrays the caller allocates; one sample is N = 1. A kernel
returns −1, or the first failure encoded as sample · nseg + segment (a quaternion or (cos θ,
sin θ) block of q off unit norm by more than QUAT_TOL; in aba, a non-positive articulated
inertia pivot), which the Python side turns into its clear error. Quaternion and (cos θ, sin θ)
blocks are normalised as in the numpy path (joints.normalized_configuration).

Each joint type's transform and subspace are the branches of `joint_transform`, `subspace` and
`joint_bias`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

# joint type codes (workspace.JOINT_CODES: the order of model.JOINT_NQ_NV)
FIXED, REVOLUTE, REVOLUTE_UNBOUNDED, PRISMATIC, SPHERICAL, FREE_FLYER, PLANAR = range(7)
# itab columns
PARENT, TYPE, IQ, IV, NQ, NV = range(6)
# ftab columns
AXIS, ROT, TRANS, MASS, COM, INERTIA, Y6 = 0, 3, 12, 15, 16, 19, 28
FTAB_WIDTH = 64
QUAT_TOL = 1e-3   # = joints.QUAT_TOL (a literal: numba freezes globals at compile time)
PIVOT_RTOL = 1e-12  # an articulated-inertia pivot below this times the body's inertia scale is singular


@njit(cache=True, inline="always")
def normalize(itab, q, qn):
    """qn = q with unit blocks normalised; −1, or the segment whose block is off unit norm."""
    qn[:] = q
    for i in range(itab.shape[0]):
        jt = itab[i, TYPE]
        if jt == SPHERICAL or jt == FREE_FLYER:
            k, w = itab[i, IQ] + itab[i, NQ] - 4, 4
        elif jt == REVOLUTE_UNBOUNDED:
            k, w = itab[i, IQ], 2
        else:
            continue
        s = 0.0
        for j in range(k, k + w):
            s += q[j] * q[j]
        n = math.sqrt(s)
        if not abs(n - 1.0) <= QUAT_TOL:
            return i
        for j in range(k, k + w):
            qn[j] = q[j] / n
    return -1


@njit(cache=True, inline="always")
def joint_transform(jt, f, q, iq, RJ, tJ):
    """RJ (3, 3), tJ (3,): the child frame in the joint placement frame for joint type jt, its
    ftab row f (axis) and coordinates q[iq:]."""
    RJ[:, :] = 0.0
    tJ[:] = 0.0
    if jt == REVOLUTE or jt == REVOLUTE_UNBOUNDED:
        if jt == REVOLUTE:
            c, s = math.cos(q[iq]), math.sin(q[iq])
        else:
            c, s = q[iq], q[iq + 1]
        u0, u1, u2 = f[AXIS], f[AXIS + 1], f[AXIS + 2]
        # Rodrigues: R = u uᵀ + c (E − u uᵀ) + s [u]×
        RJ[0, 0] = u0 * u0 + c * (1.0 - u0 * u0)
        RJ[1, 1] = u1 * u1 + c * (1.0 - u1 * u1)
        RJ[2, 2] = u2 * u2 + c * (1.0 - u2 * u2)
        RJ[0, 1] = u0 * u1 * (1.0 - c) - s * u2
        RJ[1, 0] = u0 * u1 * (1.0 - c) + s * u2
        RJ[0, 2] = u0 * u2 * (1.0 - c) + s * u1
        RJ[2, 0] = u0 * u2 * (1.0 - c) - s * u1
        RJ[1, 2] = u1 * u2 * (1.0 - c) - s * u0
        RJ[2, 1] = u1 * u2 * (1.0 - c) + s * u0
    elif jt == SPHERICAL or jt == FREE_FLYER:
        k = iq + 3 if jt == FREE_FLYER else iq
        x, y, z, w = q[k], q[k + 1], q[k + 2], q[k + 3]
        RJ[0, 0] = 1.0 - 2.0 * (y * y + z * z)
        RJ[0, 1] = 2.0 * (x * y - w * z)
        RJ[0, 2] = 2.0 * (x * z + w * y)
        RJ[1, 0] = 2.0 * (x * y + w * z)
        RJ[1, 1] = 1.0 - 2.0 * (x * x + z * z)
        RJ[1, 2] = 2.0 * (y * z - w * x)
        RJ[2, 0] = 2.0 * (x * z - w * y)
        RJ[2, 1] = 2.0 * (y * z + w * x)
        RJ[2, 2] = 1.0 - 2.0 * (x * x + y * y)
        if jt == FREE_FLYER:
            tJ[0], tJ[1], tJ[2] = q[iq], q[iq + 1], q[iq + 2]
    elif jt == PLANAR:
        c, s = math.cos(q[iq + 2]), math.sin(q[iq + 2])
        RJ[0, 0], RJ[0, 1], RJ[1, 0], RJ[1, 1], RJ[2, 2] = c, -s, s, c, 1.0
        tJ[0], tJ[1] = q[iq], q[iq + 1]
    else:
        RJ[0, 0] = RJ[1, 1] = RJ[2, 2] = 1.0
        if jt == PRISMATIC:
            for r in range(3):
                tJ[r] = f[AXIS + r] * q[iq]


@njit(cache=True, inline="always")
def subspace(jt, f, RJ, S):
    """Motion subspace columns S[:, :nv] (6, 6) of the joint in the child frame."""
    S[:, :] = 0.0
    if jt == REVOLUTE or jt == REVOLUTE_UNBOUNDED:
        for r in range(3):
            S[3 + r, 0] = f[AXIS + r]
    elif jt == PRISMATIC:
        for r in range(3):
            S[r, 0] = f[AXIS + r]
    elif jt == SPHERICAL:
        for r in range(3):
            S[3 + r, r] = 1.0
    elif jt == FREE_FLYER:
        for r in range(6):
            S[r, r] = 1.0
    elif jt == PLANAR:       # x, y translations fixed in the placement frame, seen from the child
        for r in range(3):
            S[r, 0] = RJ[0, r]
            S[r, 1] = RJ[1, r]
        S[5, 2] = 1.0


@njit(cache=True, inline="always")
def joint_bias(jt, S, v, iv, cJ):
    """c_J = Ṡ v (6,) in the child frame: (−ω_J × v_J,lin, 0) for the planar joint, else 0."""
    cJ[:] = 0.0
    if jt == PLANAR:
        lx = S[0, 0] * v[iv] + S[0, 1] * v[iv + 1]
        ly = S[1, 0] * v[iv] + S[1, 1] * v[iv + 1]
        w = v[iv + 2]
        cJ[0], cJ[1] = w * ly, -w * lx        # −(0, 0, w) × (lx, ly, 0)


@njit(cache=True, inline="always")
def placement(itab, ftab, i, qn, RJ, tJ, R, t, X):
    """Joint i: RJ, tJ; the child frame's axes R and origin t in the parent frame
    (R = R0 RJ, t = t0 + R0 tJ); X the motion transform parent → child (6, 6)."""
    f = ftab[i]
    joint_transform(itab[i, TYPE], f, qn, itab[i, IQ], RJ, tJ)
    for r in range(3):
        t[r] = f[TRANS + r]
        for c in range(3):
            acc = 0.0
            for k in range(3):
                acc += f[ROT + 3 * r + k] * RJ[k, c]
            R[r, c] = acc
            t[r] += f[ROT + 3 * r + c] * tJ[c]
    X[:, :] = 0.0
    for r in range(3):
        for c in range(3):
            X[r, c] = X[3 + r, 3 + c] = R[c, r]
        # −Rᵀ [t]×, column by column: −Rᵀ (t × e_c)
        X[r, 3] = R[2, r] * t[1] - R[1, r] * t[2]      # t × e_x = (0, t_z, −t_y)
        X[r, 4] = R[0, r] * t[2] - R[2, r] * t[0]      # t × e_y = (−t_z, 0, t_x)
        X[r, 5] = R[1, r] * t[0] - R[0, r] * t[1]      # t × e_z = (t_y, −t_x, 0)


@njit(cache=True, inline="always")
def motion_cross(a, b, out):
    """out = a × b for motions (lin, ang): (ω_a × v_b + v_a × ω_b, ω_a × ω_b)."""
    out[0] = a[4] * b[2] - a[5] * b[1] + a[1] * b[5] - a[2] * b[4]
    out[1] = a[5] * b[0] - a[3] * b[2] + a[2] * b[3] - a[0] * b[5]
    out[2] = a[3] * b[1] - a[4] * b[0] + a[0] * b[4] - a[1] * b[3]
    out[3] = a[4] * b[5] - a[5] * b[4]
    out[4] = a[5] * b[3] - a[3] * b[5]
    out[5] = a[3] * b[4] - a[4] * b[3]


@njit(cache=True, inline="always")
def force_cross(a, f, out):
    """out = a ×* f, motion a, force f: (ω × f_lin, ω × f_ang + v × f_lin)."""
    out[0] = a[4] * f[2] - a[5] * f[1]
    out[1] = a[5] * f[0] - a[3] * f[2]
    out[2] = a[3] * f[1] - a[4] * f[0]
    out[3] = a[4] * f[5] - a[5] * f[4] + a[1] * f[2] - a[2] * f[1]
    out[4] = a[5] * f[3] - a[3] * f[5] + a[2] * f[0] - a[0] * f[2]
    out[5] = a[3] * f[4] - a[4] * f[3] + a[0] * f[1] - a[1] * f[0]


@njit(cache=True, inline="always")
def body_inertia(ftab, i, Y):
    for r in range(6):
        for c in range(6):
            Y[r, c] = ftab[i, Y6 + 6 * r + c]


@njit(cache=True, inline="always")
def ext_force_in_body(Rw, pw, w, out):
    """A lab-frame force w (6,) about the lab origin, expressed in the frame (Rw, pw):
    (Rwᵀ f, Rwᵀ (n − pw × f))."""
    m0 = w[3] - (pw[1] * w[2] - pw[2] * w[1])
    m1 = w[4] - (pw[2] * w[0] - pw[0] * w[2])
    m2 = w[5] - (pw[0] * w[1] - pw[1] * w[0])
    for r in range(3):
        out[r] = Rw[0, r] * w[0] + Rw[1, r] * w[1] + Rw[2, r] * w[2]
        out[3 + r] = Rw[0, r] * m0 + Rw[1, r] * m1 + Rw[2, r] * m2


@njit(cache=True, inline="always")
def world_placement(itab, i, R, t, Rw, pw):
    """Rw[i], pw[i] from the parent's and the joint's (R, t)."""
    p = itab[i, PARENT]
    if p < 0:
        Rw[i] = R
        pw[i] = t
        return
    for r in range(3):
        pw[i, r] = pw[p, r]
        for c in range(3):
            pw[i, r] += Rw[p, r, c] * t[c]
            acc = 0.0
            for k in range(3):
                acc += Rw[p, r, k] * R[k, c]
            Rw[i, r, c] = acc


@njit(cache=True)
def rnea(itab, ftab, g, Q, V, A, Fext, tau):
    """τ (N, nv) = rnea(q, v, a) with external forces Fext (N or 0, nseg, 6): the summed wrench
    on each segment, lab frame, about the lab origin; τ −= J_eᵀ w_e enters as f_i −= w_i in the
    body frame (Pinocchio's form)."""
    n, N = itab.shape[0], Q.shape[0]
    ext = Fext.shape[0] > 0
    qn = np.empty(Q.shape[1])
    RJ, R, Rw = np.empty((3, 3)), np.empty((3, 3)), np.empty((n, 3, 3))
    tJ, t, pw = np.empty(3), np.empty(3), np.empty((n, 3))
    X, S, Y = np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((6, 6))
    vel, acc, f = np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6))
    vJ, cJ, tmp, Yv, w = np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6)
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        v, a = V[s], A[s]
        for i in range(n):
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            placement(itab, ftab, i, qn, RJ, tJ, R, t, X[i])
            subspace(jt, ftab[i], RJ, S[i])
            joint_bias(jt, S[i], v, iv, cJ)
            Xi, Si = X[i], S[i]
            for r in range(6):
                x, y = 0.0, cJ[r]
                for k in range(nv):
                    x += Si[r, k] * v[iv + k]
                    y += Si[r, k] * a[iv + k]
                vJ[r] = x
                xv, xa = 0.0, 0.0
                if p >= 0:
                    for k in range(6):
                        xv += Xi[r, k] * vel[p, k]
                        xa += Xi[r, k] * acc[p, k]
                else:
                    for k in range(3):
                        xa -= Xi[r, k] * g[k]
                vel[i, r] = xv + x
                acc[i, r] = xa + y
            motion_cross(vel[i], vJ, tmp)
            for r in range(6):
                acc[i, r] += tmp[r]
            body_inertia(ftab, i, Y)
            for r in range(6):
                x, y = 0.0, 0.0
                for k in range(6):
                    x += Y[r, k] * vel[i, k]
                    y += Y[r, k] * acc[i, k]
                Yv[r] = x
                f[i, r] = y
            force_cross(vel[i], Yv, tmp)
            for r in range(6):
                f[i, r] += tmp[r]
            if ext:
                world_placement(itab, i, R, t, Rw, pw)
                ext_force_in_body(Rw[i], pw[i], Fext[s, i], w)
                for r in range(6):
                    f[i, r] -= w[r]
        for i in range(n - 1, -1, -1):
            p, iv, nv = itab[i, PARENT], itab[i, IV], itab[i, NV]
            for k in range(nv):
                x = 0.0
                for r in range(6):
                    x += S[i, r, k] * f[i, r]
                tau[s, iv + k] = x
            if p >= 0:
                for r in range(6):
                    x = 0.0
                    for k in range(6):
                        x += X[i, k, r] * f[i, k]
                    f[p, r] += x
    return -1


@njit(cache=True, inline="always")
def transform_inertia(X, Yc, out, tmp):
    """out += Xᵀ Yc X (a child's inertia in its parent's frame)."""
    for r in range(6):
        for c in range(6):
            x = 0.0
            for k in range(6):
                x += Yc[r, k] * X[k, c]
            tmp[r, c] = x
    for r in range(6):
        for c in range(6):
            x = 0.0
            for k in range(6):
                x += X[k, r] * tmp[k, c]
            out[r, c] += x


@njit(cache=True)
def crba(itab, ftab, Q, M):
    """M (N, nv, nv), the joint-space mass matrix (composite-rigid-body algorithm)."""
    n, N = itab.shape[0], Q.shape[0]
    qn = np.empty(Q.shape[1])
    RJ, R, tJ, t = np.empty((3, 3)), np.empty((3, 3)), np.empty(3), np.empty(3)
    X, S, Yc = np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((n, 6, 6))
    tmp, F, F2 = np.empty((6, 6)), np.empty((6, 6)), np.empty((6, 6))
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        for i in range(n):
            placement(itab, ftab, i, qn, RJ, tJ, R, t, X[i])
            subspace(itab[i, TYPE], ftab[i], RJ, S[i])
            body_inertia(ftab, i, Yc[i])
        for i in range(n - 1, -1, -1):
            p = itab[i, PARENT]
            if p >= 0:
                transform_inertia(X[i], Yc[i], Yc[p], tmp)
        Ms = M[s]
        Ms[:, :] = 0.0
        for i in range(n):
            iv, nv = itab[i, IV], itab[i, NV]
            if nv == 0:
                continue
            for r in range(6):
                for c in range(nv):
                    x = 0.0
                    for k in range(6):
                        x += Yc[i, r, k] * S[i, k, c]
                    F[r, c] = x
            j = i
            while True:
                jv, jn = itab[j, IV], itab[j, NV]
                for r in range(jn):
                    for c in range(nv):
                        x = 0.0
                        for k in range(6):
                            x += S[j, k, r] * F[k, c]
                        Ms[jv + r, iv + c] = x
                        Ms[iv + c, jv + r] = x
                p = itab[j, PARENT]
                if p < 0:
                    break
                for r in range(6):
                    for c in range(nv):
                        x = 0.0
                        for k in range(6):
                            x += X[j, k, r] * F[k, c]
                        F2[r, c] = x
                F[:, :nv] = F2[:, :nv]
                j = p
    return -1


@njit(cache=True, inline="always")
def ldl_inverse(D, k, Dinv, scale):
    """Dinv[:k, :k] = D⁻¹ for symmetric D[:k, :k] by LDLᵀ; False if a pivot is not above
    PIVOT_RTOL · scale (singular)."""
    L = np.zeros((6, 6))
    d = np.empty(6)
    for j in range(k):
        x = D[j, j]
        for m in range(j):
            x -= L[j, m] * L[j, m] * d[m]
        if not x > PIVOT_RTOL * scale:
            return False
        d[j] = x
        L[j, j] = 1.0
        for i in range(j + 1, k):
            y = D[i, j]
            for m in range(j):
                y -= L[i, m] * L[j, m] * d[m]
            L[i, j] = y / x
    for c in range(k):          # column c of D⁻¹: solve L d Lᵀ x = e_c
        y = np.zeros(6)
        for i in range(k):
            z = 1.0 if i == c else 0.0
            for m in range(i):
                z -= L[i, m] * y[m]
            y[i] = z
        for i in range(k - 1, -1, -1):
            z = y[i] / d[i]
            for m in range(i + 1, k):
                z -= L[m, i] * Dinv[m, c]
            Dinv[i, c] = z
    return True


@njit(cache=True)
def aba(itab, ftab, g, Q, V, T, Fext, out):
    """Accelerations (N, nv) = aba(q, v, τ) with external forces Fext as in rnea (p^A_i −= w_i in
    the body frame)."""
    n, N = itab.shape[0], Q.shape[0]
    ext = Fext.shape[0] > 0
    qn = np.empty(Q.shape[1])
    RJ, R, Rw, tJ, t, pw = np.empty((3, 3)), np.empty((3, 3)), np.empty((n, 3, 3)), np.empty(3), np.empty(3), np.empty((n, 3))
    X, S, YA = np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((n, 6, 6))
    U, Dinv, Ya, tmp = np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((6, 6)), np.empty((6, 6))
    vel, c, pA, acc, u = np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6))
    vJ, cJ, w, Yv, pa, ap, DU = np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6)
    D = np.empty((6, 6))
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        v, tau = V[s], T[s]
        for i in range(n):                     # pass 1: velocities, bias accelerations, bias forces
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            placement(itab, ftab, i, qn, RJ, tJ, R, t, X[i])
            subspace(jt, ftab[i], RJ, S[i])
            joint_bias(jt, S[i], v, iv, cJ)
            for r in range(6):
                x = 0.0
                for k in range(nv):
                    x += S[i, r, k] * v[iv + k]
                vJ[r] = x
                y = 0.0
                if p >= 0:
                    for k in range(6):
                        y += X[i, r, k] * vel[p, k]
                vel[i, r] = y + x
            motion_cross(vel[i], vJ, c[i])
            for r in range(6):
                c[i, r] += cJ[r]
            body_inertia(ftab, i, YA[i])
            for r in range(6):
                x = 0.0
                for k in range(6):
                    x += YA[i, r, k] * vel[i, k]
                Yv[r] = x
            force_cross(vel[i], Yv, pA[i])
            if ext:
                world_placement(itab, i, R, t, Rw, pw)
                ext_force_in_body(Rw[i], pw[i], Fext[s, i], w)
                for r in range(6):
                    pA[i, r] -= w[r]
        for i in range(n - 1, -1, -1):         # pass 2: articulated inertias and bias forces
            p, iv, nv = itab[i, PARENT], itab[i, IV], itab[i, NV]
            Ya[:, :] = YA[i]
            for r in range(6):
                pa[r] = pA[i, r]
            if nv > 0:
                for r in range(6):
                    for k in range(nv):
                        x = 0.0
                        for m in range(6):
                            x += YA[i, r, m] * S[i, m, k]
                        U[i, r, k] = x
                scale = 0.0
                for r in range(6):
                    scale = max(scale, abs(YA[i, r, r]))
                for a_ in range(nv):
                    x = tau[iv + a_]
                    for r in range(6):
                        x -= S[i, r, a_] * pA[i, r]
                    u[i, a_] = x
                    for b_ in range(nv):
                        y = 0.0
                        for r in range(6):
                            y += S[i, r, a_] * U[i, r, b_]
                        D[a_, b_] = y
                if not ldl_inverse(D, nv, Dinv[i], scale):
                    return s * n + i
                # Ya = YA − U D⁻¹ Uᵀ;  pa = pA + U D⁻¹ u (the Ya c term below)
                for r in range(6):
                    for k in range(nv):
                        x = 0.0
                        for m in range(nv):
                            x += U[i, r, m] * Dinv[i, m, k]
                        tmp[r, k] = x          # U D⁻¹
                for r in range(6):
                    for cc in range(6):
                        x = 0.0
                        for k in range(nv):
                            x += tmp[r, k] * U[i, cc, k]
                        Ya[r, cc] -= x
                    x = 0.0
                    for k in range(nv):
                        x += tmp[r, k] * u[i, k]
                    pa[r] += x
            if p < 0:
                continue
            for r in range(6):
                x = 0.0
                for k in range(6):
                    x += Ya[r, k] * c[i, k]
                pa[r] += x
            transform_inertia(X[i], Ya, YA[p], tmp)
            for r in range(6):
                x = 0.0
                for k in range(6):
                    x += X[i, k, r] * pa[k]
                pA[p, r] += x
        for i in range(n):                     # pass 3: accelerations
            p, iv, nv = itab[i, PARENT], itab[i, IV], itab[i, NV]
            for r in range(6):
                x = c[i, r]
                if p >= 0:
                    for k in range(6):
                        x += X[i, r, k] * acc[p, k]
                else:
                    for k in range(3):
                        x -= X[i, r, k] * g[k]
                ap[r] = x
            for k in range(nv):
                x = u[i, k]
                for r in range(6):
                    x -= U[i, r, k] * ap[r]
                DU[k] = x
            for k in range(nv):
                x = 0.0
                for m in range(nv):
                    x += Dinv[i, k, m] * DU[m]
                out[s, iv + k] = x
            for r in range(6):
                x = ap[r]
                for k in range(nv):
                    x += S[i, r, k] * out[s, iv + k]
                acc[i, r] = x
    return -1


@njit(cache=True)
def kinematics(itab, ftab, Q, V, A, Rw, pw, Slab, Vel, Acc):
    """Lab-frame kinematics: segment axes Rw (N, nseg, 3, 3) and origins pw (N, nseg, 3) m;
    motion subspace columns about the lab origin Slab (N, nv, 6); with V (N, nv) (else (0, nv))
    spatial velocities Vel (N, nseg, 6) about the lab origin, V_i = V_p + Σ_k S_k v_k; with A
    also accelerations Acc, A_i = A_p + Σ_k (S_k a_k + (V_c × S_k) v_k), V_c the velocity of the
    body S_k is fixed in (the parent for the planar joint's translations, else the child)."""
    n, N = itab.shape[0], Q.shape[0]
    order = 2 if A.shape[0] > 0 else 1 if V.shape[0] > 0 else 0
    qn = np.empty(Q.shape[1])
    RJ, R, tJ, t, X, S = np.empty((3, 3)), np.empty((3, 3)), np.empty(3), np.empty(3), np.empty((6, 6)), np.empty((6, 6))
    col, cr, Vc = np.empty(6), np.empty(6), np.empty(6)
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        Rws, pws = Rw[s], pw[s]
        for i in range(n):
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            placement(itab, ftab, i, qn, RJ, tJ, R, t, X)
            subspace(jt, ftab[i], RJ, S)
            world_placement(itab, i, R, t, Rws, pws)
            if order >= 1:
                for r in range(6):
                    Vel[s, i, r] = Vel[s, p, r] if p >= 0 else 0.0
            for k in range(nv):       # S_k in the lab about the origin: (R s_lin + p × R s_ang, R s_ang)
                for r in range(3):
                    col[3 + r] = Rws[i, r, 0] * S[3, k] + Rws[i, r, 1] * S[4, k] + Rws[i, r, 2] * S[5, k]
                for r in range(3):
                    col[r] = Rws[i, r, 0] * S[0, k] + Rws[i, r, 1] * S[1, k] + Rws[i, r, 2] * S[2, k]
                col[0] += pws[i, 1] * col[5] - pws[i, 2] * col[4]
                col[1] += pws[i, 2] * col[3] - pws[i, 0] * col[5]
                col[2] += pws[i, 0] * col[4] - pws[i, 1] * col[3]
                Slab[s, iv + k] = col
                if order >= 1:
                    for r in range(6):
                        Vel[s, i, r] += col[r] * V[s, iv + k]
        if order == 2:
            for i in range(n):
                jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
                for r in range(6):
                    Acc[s, i, r] = Acc[s, p, r] if p >= 0 else 0.0
                for k in range(nv):
                    in_parent = jt == PLANAR and k < 2
                    for r in range(6):
                        Vc[r] = (Vel[s, p, r] if p >= 0 else 0.0) if in_parent else Vel[s, i, r]
                    motion_cross(Vc, Slab[s, iv + k], cr)
                    for r in range(6):
                        Acc[s, i, r] += Slab[s, iv + k, r] * A[s, iv + k] + cr[r] * V[s, iv + k]
    return -1
