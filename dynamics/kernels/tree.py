"""Compiled tree recursions (numba): kinematics, rnea with external wrenches, crba, aba.

One generic recursion over the model's arrays (Featherstone's and Pinocchio's form), compiled
once for every model: the model enters as two tables built by `dynamics.workspace.Data`, itab
(int64: parent, joint type code, q/v offsets and sizes, ...) and ftab (float: joint axis,
placement, mass, CoM, inertias, ...; the columns in kernels/layout.py), and gravity g (3,) m/s²
(lab frame). Segments are parents-first. Spatial vectors are (linear,
angular) in each segment's frame; ⁱX_p is the 6×6 motion transform parent → child,

    ⁱX_p = [[Rᵀ, −Rᵀ[t]×], [0, Rᵀ]]       (R, t: child axes and origin in the parent frame)

and ⁱX_pᵀ takes a force from the child to the parent. Y (v, ω) = (m v − h × ω, I_O ω + h × v)
with h = m c and I_O = I_c + m (|c|² E − c cᵀ).

Every kernel runs a batch: (N, ·) C-contiguous float64 inputs, a loop over samples inside the
compiled code, outputs written into arrays the caller allocates; one sample is N = 1 (rnea also
has rnea_one, 1-D and fewer arguments, and rnea_parallel over the cores). A kernel returns −1, or
the first failure encoded as sample · nseg + segment (a quaternion or (cos θ, sin θ) block of q
off unit norm by more than QUAT_TOL; in aba, a non-positive articulated inertia pivot), or in rnea
and aba −2 − sample for a non-finite q, v, a (τ), which the Python side turns into its clear error. Quaternion and (cos θ, sin θ)
blocks are normalised as in the numpy path (joints.normalized_configuration).

Nothing here knows a joint type: each type's transform, joint motion with its bias c_J, subspace
columns and projection τ = Sᵀ f are its module's compiled step (dynamics/joints/<type>.py),
reached through the one switch of dynamics/joints/switch.py (`switch.rt`, `switch.motion`,
`switch.column`, `switch.project`, `switch.cos_sin`, and for a joint about ±e_k rnea's
`switch.axis_step` and `switch.axis_force`, all inlined); its unit-norm block of q and
which of its columns are fixed in the parent come from itab (UNIT_Q, UNIT_W, IN_PARENT). rnea
writes the body step out (with the helpers `child_motion` and `body_force` it measured 1.6×
slower: 3.9 against 2.45 µs of CPU per human15 sample).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..joints import switch
from .layout import (AXIS, AXIS_K, COM, IN_PARENT, INERTIA, IQ, IV, MASS, NV, PARENT, PLAIN, ROT, SCOL, SCONST, TRANS,
                     TYPE, UNIT_Q, UNIT_W, Y6)

QUAT_TOL = 1e-3   # = joints.QUAT_TOL (a literal: numba freezes globals at compile time)
PARALLEL_BLOCKS = 16  # rnea_parallel's sample blocks, split evenly among the threads (NUMBA_NUM_THREADS)
PIVOT_RTOL = 1e-12  # an articulated-inertia pivot below this times the body's inertia scale is singular
# rnea, crba and aba let LLVM fuse a product and the sum that follows into one multiply-add (one
# rounding instead of two; 8-16 % less CPU per sample, docs/kernels.md). Only that flag: NaN and inf
# behave as in IEEE arithmetic (the finiteness checks rely on it), nothing is reassociated.
FMA = {"contract"}


@njit(cache=True, inline="always")
def normalize(itab, q, qn):
    """qn = q with unit blocks normalised; −1, or the segment whose block is off unit norm."""
    qn[:] = q
    for i in range(itab.shape[0]):
        k, w = itab[i, UNIT_Q], itab[i, UNIT_W]
        if w == 0:
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
def finite(x):
    """Whether every entry of the 1-D x is finite (x · 0 is 0 for a finite x, NaN otherwise)."""
    z = 0.0
    for k in range(x.shape[0]):
        z += x[k] * 0.0
    return z == 0.0


@njit(cache=True, inline="always")
def subspace(jt, ftab, i, nv, RJ, S):
    """Motion subspace columns S[i, :, :nv] of joint i (nv coordinates) in the child frame (RJ[i]:
    its R_J row-major)."""
    for c in range(nv):
        col = switch.column(jt, ftab, i, RJ, c)
        for r in range(6):
            S[i, r, c] = col[r]


@njit(cache=True, inline="always")
def joint_rt(jt, ftab, i, q, iq):
    """(RJ row-major (9), tJ (3)) of joint i as one 12-tuple of floats (its type's compiled step):
    rnea keeps a body's quantities in local scalars (several times faster than through scratch
    arrays in numba)."""
    return switch.rt(jt, ftab, i, q, iq)


@njit(cache=True, inline="always")
def placement(itab, ftab, i, qn, RJ, R, t):
    """Joint i: RJ[i] (9, row-major) the joint rotation; R[i], t[i] the child frame's axes and
    origin in the parent frame (R = R0 RJ, t = t0 + R0 tJ). The joint transform comes from joint_rt
    as scalars."""
    r = joint_rt(itab[i, TYPE], ftab, i, qn, itab[i, IQ])
    for row in range(3):
        e0, e1, e2 = ftab[i, ROT + 3 * row], ftab[i, ROT + 3 * row + 1], ftab[i, ROT + 3 * row + 2]
        RJ[i, 3 * row], RJ[i, 3 * row + 1], RJ[i, 3 * row + 2] = r[3 * row], r[3 * row + 1], r[3 * row + 2]
        R[i, row, 0] = e0 * r[0] + e1 * r[3] + e2 * r[6]
        R[i, row, 1] = e0 * r[1] + e1 * r[4] + e2 * r[7]
        R[i, row, 2] = e0 * r[2] + e1 * r[5] + e2 * r[8]
        t[i, row] = ftab[i, TRANS + row] + e0 * r[9] + e1 * r[10] + e2 * r[11]


@njit(cache=True, inline="always")
def motion_cross(a, ia, b, ib):
    """a[ia] × b[ib] for motions (lin, ang): (ω_a × v_b + v_a × ω_b, ω_a × ω_b), a 6-tuple."""
    a0, a1, a2, a3, a4, a5 = a[ia, 0], a[ia, 1], a[ia, 2], a[ia, 3], a[ia, 4], a[ia, 5]
    b0, b1, b2, b3, b4, b5 = b[ib, 0], b[ib, 1], b[ib, 2], b[ib, 3], b[ib, 4], b[ib, 5]
    return (a4 * b2 - a5 * b1 + a1 * b5 - a2 * b4,
            a5 * b0 - a3 * b2 + a2 * b3 - a0 * b5,
            a3 * b1 - a4 * b0 + a0 * b4 - a1 * b3,
            a4 * b5 - a5 * b4,
            a5 * b3 - a3 * b5,
            a3 * b4 - a4 * b3)


@njit(cache=True, inline="always")
def world_placement(itab, i, R, t, Rw, pw):
    """Rw[i], pw[i]: segment i's axes and origin in the lab, from its parent's and (R[i], t[i])."""
    p = itab[i, PARENT]
    for r in range(3):
        if p < 0:
            pw[i, r] = t[i, r]
            for c in range(3):
                Rw[i, r, c] = R[i, r, c]
        else:
            pw[i, r] = pw[p, r] + Rw[p, r, 0] * t[i, 0] + Rw[p, r, 1] * t[i, 1] + Rw[p, r, 2] * t[i, 2]
            for c in range(3):
                Rw[i, r, c] = Rw[p, r, 0] * R[i, 0, c] + Rw[p, r, 1] * R[i, 1, c] + Rw[p, r, 2] * R[i, 2, c]


@njit(cache=True, inline="always")
def world_rt(p, i, R, t, Rw, pw):
    """Rw[i] (9, row-major), pw[i]: body i's axes and origin in the lab from its parent p's (−1:
    the world) and its placement R[i] (9), t[i]."""
    for row in range(3):
        for col in range(3):
            x = R[i, 3 * row + col]
            if p >= 0:
                x = Rw[p, 3 * row] * R[i, col] + Rw[p, 3 * row + 1] * R[i, 3 + col] + Rw[p, 3 * row + 2] * R[i, 6 + col]
            Rw[i, 3 * row + col] = x
        pw[i, row] = t[i, row] if p < 0 else (pw[p, row] + Rw[p, 3 * row] * t[i, 0] + Rw[p, 3 * row + 1] * t[i, 1]
                                              + Rw[p, 3 * row + 2] * t[i, 2])


@njit(cache=True, inline="always")
def force_to_parent(Rm, tv, i, l0, l1, l2, n0, n1, n2):
    """The force (l, n) of body i moved into the frame in which body i's axes are Rm[i] (9,
    row-major) and its origin tv[i]: (Rm l, Rm n + tv × Rm l), a 6-tuple — its parent's frame for
    (R, t), the lab for (Rw, pw)."""
    L0 = Rm[i, 0] * l0 + Rm[i, 1] * l1 + Rm[i, 2] * l2
    L1 = Rm[i, 3] * l0 + Rm[i, 4] * l1 + Rm[i, 5] * l2
    L2 = Rm[i, 6] * l0 + Rm[i, 7] * l1 + Rm[i, 8] * l2
    return (L0, L1, L2, Rm[i, 0] * n0 + Rm[i, 1] * n1 + Rm[i, 2] * n2 + tv[i, 1] * L2 - tv[i, 2] * L1,
            Rm[i, 3] * n0 + Rm[i, 4] * n1 + Rm[i, 5] * n2 + tv[i, 2] * L0 - tv[i, 0] * L2,
            Rm[i, 6] * n0 + Rm[i, 7] * n1 + Rm[i, 8] * n2 + tv[i, 0] * L1 - tv[i, 1] * L0)


@njit(cache=True, inline="always")
def add_force(Rm, tv, i, l0, l1, l2, n0, n1, n2, out, row, col):
    """out[row, col:col + 6] += the force (l, n) of body i moved into the frame in which body i's axes
    are Rm[i] (9, row-major) and its origin tv[i]: (Rm l, Rm n + tv × Rm l) — its parent's frame
    for (R, t), the lab for (Rw, pw)."""
    L0 = Rm[i, 0] * l0 + Rm[i, 1] * l1 + Rm[i, 2] * l2
    L1 = Rm[i, 3] * l0 + Rm[i, 4] * l1 + Rm[i, 5] * l2
    L2 = Rm[i, 6] * l0 + Rm[i, 7] * l1 + Rm[i, 8] * l2
    out[row, col] += L0
    out[row, col + 1] += L1
    out[row, col + 2] += L2
    out[row, col + 3] += Rm[i, 0] * n0 + Rm[i, 1] * n1 + Rm[i, 2] * n2 + tv[i, 1] * L2 - tv[i, 2] * L1
    out[row, col + 4] += Rm[i, 3] * n0 + Rm[i, 4] * n1 + Rm[i, 5] * n2 + tv[i, 2] * L0 - tv[i, 0] * L2
    out[row, col + 5] += Rm[i, 6] * n0 + Rm[i, 7] * n1 + Rm[i, 8] * n2 + tv[i, 0] * L1 - tv[i, 1] * L0


@njit(cache=True, inline="always")
def set_placement(itab, ftab, i, r, R, t):
    """R[i] (9, row-major), t[i]: joint i's child axes and origin in the parent frame, R = R0 RJ,
    t = t0 + R0 tJ, from joint_rt's r (R = RJ, t = t0 + tJ when R0 is the identity: itab PLAIN)."""
    if itab[i, PLAIN]:
        for k in range(9):
            R[i, k] = r[k]
        for row in range(3):
            t[i, row] = ftab[i, TRANS + row] + r[9 + row]
        return
    for row in range(3):
        e0, e1, e2 = ftab[i, ROT + 3 * row], ftab[i, ROT + 3 * row + 1], ftab[i, ROT + 3 * row + 2]
        R[i, 3 * row] = e0 * r[0] + e1 * r[3] + e2 * r[6]
        R[i, 3 * row + 1] = e0 * r[1] + e1 * r[4] + e2 * r[7]
        R[i, 3 * row + 2] = e0 * r[2] + e1 * r[5] + e2 * r[8]
        t[i, row] = ftab[i, TRANS + row] + e0 * r[9] + e1 * r[10] + e2 * r[11]


@njit(cache=True, inline="always")
def into_child(R, t, i, l0, l1, l2, a0, a1, a2):
    """ⁱX_p (l, a): a motion of the parent in body i's frame, (Rᵀ (l + a × t), Rᵀ a), a 6-tuple
    (R[i] (9, row-major), t[i])."""
    x0, x1, x2 = l0 + a1 * t[i, 2] - a2 * t[i, 1], l1 + a2 * t[i, 0] - a0 * t[i, 2], l2 + a0 * t[i, 1] - a1 * t[i, 0]
    return (R[i, 0] * x0 + R[i, 3] * x1 + R[i, 6] * x2, R[i, 1] * x0 + R[i, 4] * x1 + R[i, 7] * x2,
            R[i, 2] * x0 + R[i, 5] * x1 + R[i, 8] * x2, R[i, 0] * a0 + R[i, 3] * a1 + R[i, 6] * a2,
            R[i, 1] * a0 + R[i, 4] * a1 + R[i, 7] * a2, R[i, 2] * a0 + R[i, 5] * a1 + R[i, 8] * a2)


@njit(cache=True, inline="always")
def child_motion(jt, ftab, i, RJ, R, t, v, a, iv, pv, pa):
    """Body i's velocity and acceleration (a 12-tuple: v (6), a (6)) from its parent's pv, pa
    (6-tuples; the world: 0 and (−g, 0)), joint rates v[iv:] and accelerations a[iv:]:
    v = X v_p + v_J, a = X a_p + S q̈ + c_J + v × v_J (RJ[i]: R_J, for a joint of several coordinates)."""
    v0, v1, v2, w0, w1, w2 = into_child(R, t, i, pv[0], pv[1], pv[2], pv[3], pv[4], pv[5])
    a0, a1, a2, b0, b1, b2 = into_child(R, t, i, pa[0], pa[1], pa[2], pa[3], pa[4], pa[5])
    # joint velocity v_J = S q̇ = (j, k); S q̈ + c_J added to (a, b)
    j0, j1, j2, k0, k1, k2, a0, a1, a2, b0, b1, b2 = switch.motion(jt, ftab, i, RJ, v, a, iv, a0, a1, a2, b0, b1, b2)
    # + v × v_J with v = X v_p + v_J (v_J × v_J = 0)
    a0 += w1 * j2 - w2 * j1 + v1 * k2 - v2 * k1
    a1 += w2 * j0 - w0 * j2 + v2 * k0 - v0 * k2
    a2 += w0 * j1 - w1 * j0 + v0 * k1 - v1 * k0
    b0 += w1 * k2 - w2 * k1
    b1 += w2 * k0 - w0 * k2
    b2 += w0 * k1 - w1 * k0
    return v0 + j0, v1 + j1, v2 + j2, w0 + k0, w1 + k1, w2 + k2, a0, a1, a2, b0, b1, b2


@njit(cache=True, inline="always")
def body_force(ftab, i, v0, v1, v2, w0, w1, w2, a0, a1, a2, b0, b1, b2):
    """Body i's (f, Y v), a 12-tuple: f = Y a + v ×* Y v (6), Y v = (m (v − c × ω), I_c ω + c × (Y v)_lin) (6)."""
    m = ftab[i, MASS]
    if not m > 0.0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    c0, c1, c2 = ftab[i, COM], ftab[i, COM + 1], ftab[i, COM + 2]
    h0, h1, h2 = m * (v0 - (c1 * w2 - c2 * w1)), m * (v1 - (c2 * w0 - c0 * w2)), m * (v2 - (c0 * w1 - c1 * w0))
    g0 = ftab[i, INERTIA] * w0 + ftab[i, INERTIA + 1] * w1 + ftab[i, INERTIA + 2] * w2 + c1 * h2 - c2 * h1
    g1 = ftab[i, INERTIA + 3] * w0 + ftab[i, INERTIA + 4] * w1 + ftab[i, INERTIA + 5] * w2 + c2 * h0 - c0 * h2
    g2 = ftab[i, INERTIA + 6] * w0 + ftab[i, INERTIA + 7] * w1 + ftab[i, INERTIA + 8] * w2 + c0 * h1 - c1 * h0
    f0, f1, f2 = m * (a0 - (c1 * b2 - c2 * b1)), m * (a1 - (c2 * b0 - c0 * b2)), m * (a2 - (c0 * b1 - c1 * b0))
    n0 = ftab[i, INERTIA] * b0 + ftab[i, INERTIA + 1] * b1 + ftab[i, INERTIA + 2] * b2 + c1 * f2 - c2 * f1
    n1 = ftab[i, INERTIA + 3] * b0 + ftab[i, INERTIA + 4] * b1 + ftab[i, INERTIA + 5] * b2 + c2 * f0 - c0 * f2
    n2 = ftab[i, INERTIA + 6] * b0 + ftab[i, INERTIA + 7] * b1 + ftab[i, INERTIA + 8] * b2 + c0 * f1 - c1 * f0
    # + v ×* (Y v) = (ω × h, ω × g + v × h)
    return (f0 + w1 * h2 - w2 * h1, f1 + w2 * h0 - w0 * h2, f2 + w0 * h1 - w1 * h0,
            n0 + w1 * g2 - w2 * g1 + v1 * h2 - v2 * h1, n1 + w2 * g0 - w0 * g2 + v2 * h0 - v0 * h2,
            n2 + w0 * g1 - w1 * g0 + v0 * h1 - v1 * h0, h0, h1, h2, g0, g1, g2)


@njit(cache=True, inline="always")
def external_in_body(Rw, pw, i, Fext, s):
    """The lab-frame wrench Fext[s, i] (about the lab origin) in body i's frame, a 6-tuple:
    (Rwᵀ F, Rwᵀ (n − pw × F)) (Rw[i] (9, row-major), pw[i])."""
    F0, F1, F2 = Fext[s, i, 0], Fext[s, i, 1], Fext[s, i, 2]
    m0 = Fext[s, i, 3] - (pw[i, 1] * F2 - pw[i, 2] * F1)
    m1 = Fext[s, i, 4] - (pw[i, 2] * F0 - pw[i, 0] * F2)
    m2 = Fext[s, i, 5] - (pw[i, 0] * F1 - pw[i, 1] * F0)
    return (Rw[i, 0] * F0 + Rw[i, 3] * F1 + Rw[i, 6] * F2, Rw[i, 1] * F0 + Rw[i, 4] * F1 + Rw[i, 7] * F2,
            Rw[i, 2] * F0 + Rw[i, 5] * F1 + Rw[i, 8] * F2, Rw[i, 0] * m0 + Rw[i, 3] * m1 + Rw[i, 6] * m2,
            Rw[i, 1] * m0 + Rw[i, 4] * m1 + Rw[i, 7] * m2, Rw[i, 2] * m0 + Rw[i, 5] * m1 + Rw[i, 8] * m2)


def rnea_work_size(nseg: int, nq: int) -> int:
    """Floats of rnea_one's gw: gravity (3), then rnea_range's scratch W: R, RJ (9), t (3), M
    (18), Rw (9), pw (3) per segment, the normalised q (nq) and the two momentum sums (12)."""
    return 3 + 51 * nseg + nq + 12


@njit(cache=True)
def rnea(itab, ftab, g, Q, V, A, Fext, tau, cent):
    """rnea_range over every sample (see there); one thread."""
    W = np.empty(51 * itab.shape[0] + Q.shape[1] + 12)
    return rnea_range(itab, ftab, g, Q, V, A, Fext, tau, cent, 0, Q.shape[0], W)


@njit(cache=True)
def rnea_one(itab, ftab, gw, q, v, a, tau):
    """One sample without external wrenches: τ (nv) = rnea(q (nq), v, a (nv)), gravity gw[:3], the
    scratch gw[3:] (rnea_work_size floats, e.g. the workspace's: a kernel holds the GIL, so one
    serves every thread); −1 or a status as rnea's. Fewer and 1-D arguments than rnea, no
    allocation: the one-sample call's unboxing and allocations are a large part of its time."""
    n = itab.shape[0]
    return rnea_range(itab, ftab, gw[:3], q.reshape((1, q.shape[0])), v.reshape((1, v.shape[0])),
                      a.reshape((1, a.shape[0])), gw[:0].reshape((0, n, 6)), tau.reshape((1, tau.shape[0])),
                      gw[:0].reshape((0, 15)), 0, 1, gw[3:])


@njit(cache=True, parallel=True)
def rnea_parallel(itab, ftab, g, Q, V, A, Fext, tau, cent):
    """rnea over PARALLEL_BLOCKS contiguous blocks of samples shared among numba's threads
    (prange; each block has its own scratch arrays); the first failure in sample order, or −1, as
    rnea. (A fixed block count: numba.get_num_threads() inside would keep the kernel off the disk cache.)"""
    N = Q.shape[0]
    nb = min(N, PARALLEL_BLOCKS)
    status = np.empty(nb, dtype=np.int64)
    for b in prange(nb):
        W = np.empty(51 * itab.shape[0] + Q.shape[1] + 12)
        status[b] = rnea_range(itab, ftab, g, Q, V, A, Fext, tau, cent, b * N // nb, (b + 1) * N // nb, W)
    for b in range(nb):
        if status[b] != -1:
            return status[b]
    return -1


@njit(cache=True, fastmath=FMA)
def rnea_range(itab, ftab, g, Q, V, A, Fext, tau, cent, s0, s1, W):
    """Samples s0 ≤ s < s1 (scratch W: rnea_work_size floats) of: τ (N, nv) = rnea(q, v, a) with external forces Fext (N or 0, nseg, 6): the summed wrench
    on each segment, lab frame, about the lab origin; τ −= J_eᵀ w_e enters as f_i −= w_i in the
    body frame (Pinocchio's form). Per body: (R, t) = placement, v = X v_p + S q̇,
    a = X a_p + S q̈ + c_J + v × v_J, f = Y a + v ×* Y v (Y v = (m (v − c × ω), I_c ω + c × (Y v)_lin));
    backward τ = Sᵀ f, f_p += Xᵀ f. The body's quantities live in local scalars; arrays hold only
    what the other bodies read (R, t, RJ, v, a, f).

    With cent (N, 15) (else (0, 15)) it also writes per sample the CoM c (3) m, the centroidal
    momentum h_G = (P, L_G) (6) and its rate ḣ_G (6) (run with g = 0 and a = 0 when only h_G is
    wanted: the sums over the bodies of Y v and of f = Y a + v ×* Y v moved to the lab origin, then
    L_G = L_O − c × P); a tau of shape (0, nv) skips the backward pass. A non-finite entry in
    Q[s], V[s] or A[s] stops it with the status −2 − s (the Python side then names it)."""
    n = itab.shape[0]
    ext = Fext.shape[0] > 0
    R, RJs, t = W[:9 * n].reshape((n, 9)), W[9 * n:18 * n].reshape((n, 9)), W[18 * n:21 * n].reshape((n, 3))
    M = W[21 * n:39 * n].reshape((n, 18))           # v 0:6, a 6:12, f 12:18
    Rw, pw = W[39 * n:48 * n].reshape((n, 9)), W[48 * n:51 * n].reshape((n, 3))
    qn, tot = W[51 * n:51 * n + Q.shape[1]], W[51 * n + Q.shape[1]:51 * n + Q.shape[1] + 12].reshape((2, 6))
    want_cent, want_tau = cent.shape[0] > 0, tau.shape[0] > 0
    mass = 0.0
    for i in range(n):
        mass += ftab[i, MASS]
    for s in range(s0, s1):
        v, a = V[s], A[s]
        if not (finite(Q[s]) and finite(v) and finite(a)):
            return -2 - s
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        tot[:, :] = 0.0
        cc0 = cc1 = cc2 = 0.0
        for i in range(n):
            jt, p, iq, iv, ax = itab[i, TYPE], itab[i, PARENT], itab[i, IQ], itab[i, IV], itab[i, AXIS_K]
            if p >= 0:
                pv0, pv1, pv2, pw0, pw1, pw2 = M[p, 0], M[p, 1], M[p, 2], M[p, 3], M[p, 4], M[p, 5]
                pa0, pa1, pa2, pb0, pb1, pb2 = M[p, 6], M[p, 7], M[p, 8], M[p, 9], M[p, 10], M[p, 11]
            else:                                 # the world: at rest, gravity as the base acceleration
                pv0 = pv1 = pv2 = pw0 = pw1 = pw2 = pb0 = pb1 = pb2 = 0.0
                pa0, pa1, pa2 = -g[0], -g[1], -g[2]
            if ax >= 0:                           # a rotation about ±e_ax (ABOUT_AXIS), R0 = E: R = RJ, t = t0
                cq, sq = switch.cos_sin(jt, qn, iq)
                sg = ftab[i, AXIS + ax]           # the axis' sign
                sq *= sg
                RJs[i, 0], RJs[i, 1] = cq, sq     # for the backward pass
                if ext or want_cent:              # world_rt reads R[i], t[i]
                    set_placement(itab, ftab, i, joint_rt(jt, ftab, i, qn, iq), R, t)
                t0, t1, t2, K, Kd = ftab[i, TRANS], ftab[i, TRANS + 1], ftab[i, TRANS + 2], sg * v[iv], sg * a[iv]
                # the step about e_2; e_0, e_1 by the cyclic permutation (k, k+1, k+2) -> (2, 0, 1)
                if ax == 2:
                    v0, v1, v2, w0, w1, w2, a0, a1, a2, b0, b1, b2 = switch.axis_step(
                        cq, sq, K, Kd, t0, t1, t2, pv0, pv1, pv2, pw0, pw1, pw2, pa0, pa1, pa2, pb0, pb1, pb2)
                elif ax == 0:
                    v1, v2, v0, w1, w2, w0, a1, a2, a0, b1, b2, b0 = switch.axis_step(
                        cq, sq, K, Kd, t1, t2, t0, pv1, pv2, pv0, pw1, pw2, pw0, pa1, pa2, pa0, pb1, pb2, pb0)
                else:
                    v2, v0, v1, w2, w0, w1, a2, a0, a1, b2, b0, b1 = switch.axis_step(
                        cq, sq, K, Kd, t2, t0, t1, pv2, pv0, pv1, pw2, pw0, pw1, pa2, pa0, pa1, pb2, pb0, pb1)
            else:
                r = joint_rt(jt, ftab, i, qn, iq)
                if itab[i, NV] > 1:               # the joint motion and projection may need RJ
                    for k in range(9):
                        RJs[i, k] = r[k]
                set_placement(itab, ftab, i, r, R, t)
                R00, R01, R02, R10, R11, R12 = R[i, 0], R[i, 1], R[i, 2], R[i, 3], R[i, 4], R[i, 5]
                R20, R21, R22, t0, t1, t2 = R[i, 6], R[i, 7], R[i, 8], t[i, 0], t[i, 1], t[i, 2]
                # into the child: lin' = Rᵀ (lin + ang × t), ang' = Rᵀ ang
                x0, x1, x2 = pv0 + pw1 * t2 - pw2 * t1, pv1 + pw2 * t0 - pw0 * t2, pv2 + pw0 * t1 - pw1 * t0
                v0, v1, v2 = R00 * x0 + R10 * x1 + R20 * x2, R01 * x0 + R11 * x1 + R21 * x2, R02 * x0 + R12 * x1 + R22 * x2
                w0, w1, w2 = R00 * pw0 + R10 * pw1 + R20 * pw2, R01 * pw0 + R11 * pw1 + R21 * pw2, R02 * pw0 + R12 * pw1 + R22 * pw2
                x0, x1, x2 = pa0 + pb1 * t2 - pb2 * t1, pa1 + pb2 * t0 - pb0 * t2, pa2 + pb0 * t1 - pb1 * t0
                a0, a1, a2 = R00 * x0 + R10 * x1 + R20 * x2, R01 * x0 + R11 * x1 + R21 * x2, R02 * x0 + R12 * x1 + R22 * x2
                b0, b1, b2 = R00 * pb0 + R10 * pb1 + R20 * pb2, R01 * pb0 + R11 * pb1 + R21 * pb2, R02 * pb0 + R12 * pb1 + R22 * pb2
                # joint velocity v_J = S q̇ = (j, k); S q̈ + c_J added to (a, b)
                if itab[i, SCONST]:                   # one coordinate, S constant (ftab SCOL), c_J = 0
                    qd, qdd = v[iv], a[iv]
                    s0, s1, s2, s3, s4, s5 = ftab[i, SCOL], ftab[i, SCOL + 1], ftab[i, SCOL + 2], ftab[i, SCOL + 3], \
                        ftab[i, SCOL + 4], ftab[i, SCOL + 5]
                    j0, j1, j2, k0, k1, k2 = s0 * qd, s1 * qd, s2 * qd, s3 * qd, s4 * qd, s5 * qd
                    a0, a1, a2, b0, b1, b2 = a0 + s0 * qdd, a1 + s1 * qdd, a2 + s2 * qdd, b0 + s3 * qdd, b1 + s4 * qdd, \
                        b2 + s5 * qdd
                else:
                    j0, j1, j2, k0, k1, k2, a0, a1, a2, b0, b1, b2 = switch.motion(jt, ftab, i, RJs, v, a, iv, a0, a1, a2,
                                                                                   b0, b1, b2)
                # + v × v_J with v = X v_p + v_J (v_J × v_J = 0)
                a0 += w1 * j2 - w2 * j1 + v1 * k2 - v2 * k1
                a1 += w2 * j0 - w0 * j2 + v2 * k0 - v0 * k2
                a2 += w0 * j1 - w1 * j0 + v0 * k1 - v1 * k0
                b0 += w1 * k2 - w2 * k1
                b1 += w2 * k0 - w0 * k2
                b2 += w0 * k1 - w1 * k0
                v0, v1, v2, w0, w1, w2 = v0 + j0, v1 + j1, v2 + j2, w0 + k0, w1 + k1, w2 + k2
            M[i, 0], M[i, 1], M[i, 2], M[i, 3], M[i, 4], M[i, 5] = v0, v1, v2, w0, w1, w2
            M[i, 6], M[i, 7], M[i, 8], M[i, 9], M[i, 10], M[i, 11] = a0, a1, a2, b0, b1, b2
            m = ftab[i, MASS]
            f0 = f1 = f2 = n0 = n1 = n2 = h0 = h1 = h2 = g0 = g1 = g2 = 0.0
            if m > 0.0:
                c0, c1, c2 = ftab[i, COM], ftab[i, COM + 1], ftab[i, COM + 2]
                h0, h1, h2 = m * (v0 - (c1 * w2 - c2 * w1)), m * (v1 - (c2 * w0 - c0 * w2)), m * (v2 - (c0 * w1 - c1 * w0))
                g0 = ftab[i, INERTIA] * w0 + ftab[i, INERTIA + 1] * w1 + ftab[i, INERTIA + 2] * w2 + c1 * h2 - c2 * h1
                g1 = ftab[i, INERTIA + 3] * w0 + ftab[i, INERTIA + 4] * w1 + ftab[i, INERTIA + 5] * w2 + c2 * h0 - c0 * h2
                g2 = ftab[i, INERTIA + 6] * w0 + ftab[i, INERTIA + 7] * w1 + ftab[i, INERTIA + 8] * w2 + c0 * h1 - c1 * h0
                f0, f1, f2 = m * (a0 - (c1 * b2 - c2 * b1)), m * (a1 - (c2 * b0 - c0 * b2)), m * (a2 - (c0 * b1 - c1 * b0))
                n0 = ftab[i, INERTIA] * b0 + ftab[i, INERTIA + 1] * b1 + ftab[i, INERTIA + 2] * b2 + c1 * f2 - c2 * f1
                n1 = ftab[i, INERTIA + 3] * b0 + ftab[i, INERTIA + 4] * b1 + ftab[i, INERTIA + 5] * b2 + c2 * f0 - c0 * f2
                n2 = ftab[i, INERTIA + 6] * b0 + ftab[i, INERTIA + 7] * b1 + ftab[i, INERTIA + 8] * b2 + c0 * f1 - c1 * f0
                # + v ×* (Y v) = (ω × h, ω × g + v × h)
                f0, f1, f2 = f0 + w1 * h2 - w2 * h1, f1 + w2 * h0 - w0 * h2, f2 + w0 * h1 - w1 * h0
                n0 += w1 * g2 - w2 * g1 + v1 * h2 - v2 * h1
                n1 += w2 * g0 - w0 * g2 + v2 * h0 - v0 * h2
                n2 += w0 * g1 - w1 * g0 + v0 * h1 - v1 * h0
            if ext or want_cent:
                world_rt(p, i, R, t, Rw, pw)
            if want_cent and m > 0.0:             # CoM, momentum (h, g) and its rate f at the lab origin
                x0, x1, x2 = ftab[i, COM], ftab[i, COM + 1], ftab[i, COM + 2]
                cc0 += m * (pw[i, 0] + Rw[i, 0] * x0 + Rw[i, 1] * x1 + Rw[i, 2] * x2)
                cc1 += m * (pw[i, 1] + Rw[i, 3] * x0 + Rw[i, 4] * x1 + Rw[i, 5] * x2)
                cc2 += m * (pw[i, 2] + Rw[i, 6] * x0 + Rw[i, 7] * x1 + Rw[i, 8] * x2)
                add_force(Rw, pw, i, h0, h1, h2, g0, g1, g2, tot, 0, 0)
                add_force(Rw, pw, i, f0, f1, f2, n0, n1, n2, tot, 1, 0)
            if ext:                               # f −= the external wrench in the body frame
                F0, F1, F2 = Fext[s, i, 0], Fext[s, i, 1], Fext[s, i, 2]
                m0 = Fext[s, i, 3] - (pw[i, 1] * F2 - pw[i, 2] * F1)
                m1 = Fext[s, i, 4] - (pw[i, 2] * F0 - pw[i, 0] * F2)
                m2 = Fext[s, i, 5] - (pw[i, 0] * F1 - pw[i, 1] * F0)
                f0 -= Rw[i, 0] * F0 + Rw[i, 3] * F1 + Rw[i, 6] * F2
                f1 -= Rw[i, 1] * F0 + Rw[i, 4] * F1 + Rw[i, 7] * F2
                f2 -= Rw[i, 2] * F0 + Rw[i, 5] * F1 + Rw[i, 8] * F2
                n0 -= Rw[i, 0] * m0 + Rw[i, 3] * m1 + Rw[i, 6] * m2
                n1 -= Rw[i, 1] * m0 + Rw[i, 4] * m1 + Rw[i, 7] * m2
                n2 -= Rw[i, 2] * m0 + Rw[i, 5] * m1 + Rw[i, 8] * m2
            M[i, 12], M[i, 13], M[i, 14], M[i, 15], M[i, 16], M[i, 17] = f0, f1, f2, n0, n1, n2
        if want_cent:                             # about the CoM: L_G = L_O − c × P
            cc0, cc1, cc2 = cc0 / mass, cc1 / mass, cc2 / mass
            cent[s, 0], cent[s, 1], cent[s, 2] = cc0, cc1, cc2
            for row in range(2):
                P0, P1, P2 = tot[row, 0], tot[row, 1], tot[row, 2]
                o = 3 + 6 * row
                cent[s, o], cent[s, o + 1], cent[s, o + 2] = P0, P1, P2
                cent[s, o + 3] = tot[row, 3] - (cc1 * P2 - cc2 * P1)
                cent[s, o + 4] = tot[row, 4] - (cc2 * P0 - cc0 * P2)
                cent[s, o + 5] = tot[row, 5] - (cc0 * P1 - cc1 * P0)
        if not want_tau:
            continue
        for i in range(n - 1, -1, -1):
            jt, p, iv = itab[i, TYPE], itab[i, PARENT], itab[i, IV]
            f0, f1, f2, n0, n1, n2 = M[i, 12], M[i, 13], M[i, 14], M[i, 15], M[i, 16], M[i, 17]
            ax = itab[i, AXIS_K]
            if ax >= 0:                           # τ = ±n_ax; f_p += Xᵀ f = (R f, R n + t × R f), R about e_ax
                sg, cq, sq = ftab[i, AXIS + ax], RJs[i, 0], RJs[i, 1]
                t0, t1, t2 = ftab[i, TRANS], ftab[i, TRANS + 1], ftab[i, TRANS + 2]
                if ax == 2:
                    tau[s, iv] = sg * n2
                    L0, L1, L2, N0, N1, N2 = switch.axis_force(cq, sq, t0, t1, t2, f0, f1, f2, n0, n1, n2)
                elif ax == 0:
                    tau[s, iv] = sg * n0
                    L1, L2, L0, N1, N2, N0 = switch.axis_force(cq, sq, t1, t2, t0, f1, f2, f0, n1, n2, n0)
                else:
                    tau[s, iv] = sg * n1
                    L2, L0, L1, N2, N0, N1 = switch.axis_force(cq, sq, t2, t0, t1, f2, f0, f1, n2, n0, n1)
                if p >= 0:
                    M[p, 12] += L0
                    M[p, 13] += L1
                    M[p, 14] += L2
                    M[p, 15] += N0
                    M[p, 16] += N1
                    M[p, 17] += N2
                continue
            if itab[i, SCONST]:                   # τ = Sᵀ f
                tau[s, iv] = (ftab[i, SCOL] * f0 + ftab[i, SCOL + 1] * f1 + ftab[i, SCOL + 2] * f2
                              + ftab[i, SCOL + 3] * n0 + ftab[i, SCOL + 4] * n1 + ftab[i, SCOL + 5] * n2)
            else:
                switch.project(jt, ftab, i, RJs, f0, f1, f2, n0, n1, n2, tau, s, iv)
            if p >= 0:                            # f_p += Xᵀ f = (R f, R n + t × R f)
                add_force(R, t, i, f0, f1, f2, n0, n1, n2, M, p, 12)
    return -1


@njit(cache=True, inline="always")
def column(itab, ftab, S, i, k):
    """Column k of joint i's motion subspace, a 6-tuple: the constant column of an SCONST joint from
    ftab, else S[i] (filled by subspace)."""
    if itab[i, SCONST]:
        return ftab[i, SCOL], ftab[i, SCOL + 1], ftab[i, SCOL + 2], ftab[i, SCOL + 3], ftab[i, SCOL + 4], ftab[i, SCOL + 5]
    return S[i, 0, k], S[i, 1, k], S[i, 2, k], S[i, 3, k], S[i, 4, k], S[i, 5, k]


@njit(cache=True, fastmath=FMA)
def crba(itab, ftab, Q, M):
    """M (N, nv, nv), the joint-space mass matrix (composite-rigid-body algorithm): composite
    inertias Y^c_p += ⁱX_pᵀ Y^c_i ⁱX_p backwards, then per column k of joint i the force
    F = Y^c_i S_k (local scalars) carried up the ancestors j, M[j, i] = S_jᵀ F."""
    n, N = itab.shape[0], Q.shape[0]
    qn = np.empty(Q.shape[1])
    R, t, RJ, S, Yc = np.empty((n, 9)), np.empty((n, 3)), np.empty((n, 9)), np.empty((n, 6, 6)), np.empty((n, 6, 6))
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        for i in range(n):
            jt, nv = itab[i, TYPE], itab[i, NV]
            r = joint_rt(jt, ftab, i, qn, itab[i, IQ])
            set_placement(itab, ftab, i, r, R, t)
            for k in range(9):
                RJ[i, k] = r[k]
            subspace(jt, ftab, i, nv, RJ, S)
            for r_ in range(6):
                for k in range(6):
                    Yc[i, r_, k] = ftab[i, Y6 + 6 * r_ + k]
        for i in range(n - 1, -1, -1):
            p = itab[i, PARENT]
            if p >= 0:
                add_inertia(R, t, i, Yc, Yc, p)
        for r_ in range(M.shape[1]):
            for k in range(M.shape[2]):
                M[s, r_, k] = 0.0
        for i in range(n):
            jt, iv, nv = itab[i, TYPE], itab[i, IV], itab[i, NV]
            for c in range(nv):
                sc = S[i, 0, c], S[i, 1, c], S[i, 2, c], S[i, 3, c], S[i, 4, c], S[i, 5, c]
                F = (Yc[i, 0, 0] * sc[0] + Yc[i, 0, 1] * sc[1] + Yc[i, 0, 2] * sc[2] + Yc[i, 0, 3] * sc[3] + Yc[i, 0, 4] * sc[4] + Yc[i, 0, 5] * sc[5],
                     Yc[i, 1, 0] * sc[0] + Yc[i, 1, 1] * sc[1] + Yc[i, 1, 2] * sc[2] + Yc[i, 1, 3] * sc[3] + Yc[i, 1, 4] * sc[4] + Yc[i, 1, 5] * sc[5],
                     Yc[i, 2, 0] * sc[0] + Yc[i, 2, 1] * sc[1] + Yc[i, 2, 2] * sc[2] + Yc[i, 2, 3] * sc[3] + Yc[i, 2, 4] * sc[4] + Yc[i, 2, 5] * sc[5],
                     Yc[i, 3, 0] * sc[0] + Yc[i, 3, 1] * sc[1] + Yc[i, 3, 2] * sc[2] + Yc[i, 3, 3] * sc[3] + Yc[i, 3, 4] * sc[4] + Yc[i, 3, 5] * sc[5],
                     Yc[i, 4, 0] * sc[0] + Yc[i, 4, 1] * sc[1] + Yc[i, 4, 2] * sc[2] + Yc[i, 4, 3] * sc[3] + Yc[i, 4, 4] * sc[4] + Yc[i, 4, 5] * sc[5],
                     Yc[i, 5, 0] * sc[0] + Yc[i, 5, 1] * sc[1] + Yc[i, 5, 2] * sc[2] + Yc[i, 5, 3] * sc[3] + Yc[i, 5, 4] * sc[4] + Yc[i, 5, 5] * sc[5])
                j = i
                while True:                     # M[j, i] = S_jᵀ F up the ancestors, F moved to j's frame
                    jv, jn = itab[j, IV], itab[j, NV]
                    for r_ in range(jn):
                        sr = S[j, 0, r_], S[j, 1, r_], S[j, 2, r_], S[j, 3, r_], S[j, 4, r_], S[j, 5, r_]
                        x = sr[0] * F[0] + sr[1] * F[1] + sr[2] * F[2] + sr[3] * F[3] + sr[4] * F[4] + sr[5] * F[5]
                        M[s, jv + r_, iv + c] = x
                        M[s, iv + c, jv + r_] = x
                    p = itab[j, PARENT]
                    if p < 0:
                        break
                    F = force_to_parent(R, t, j, F[0], F[1], F[2], F[3], F[4], F[5])
                    j = p
    return -1


@njit(cache=True, inline="always")
def ldl_inverse(D, k, Dinv, i, scale, L, d, y):
    """Dinv[i, :k, :k] = D⁻¹ for symmetric D[:k, :k] by LDLᵀ; False if a pivot is not above
    PIVOT_RTOL · scale (singular). L (6, 6), d, y (6,): scratch."""
    for j in range(k):
        x = D[j, j]
        for m in range(j):
            x -= L[j, m] * L[j, m] * d[m]
        if not x > PIVOT_RTOL * scale:
            return False
        d[j] = x
        for r in range(j + 1, k):
            z = D[r, j]
            for m in range(j):
                z -= L[r, m] * L[j, m] * d[m]
            L[r, j] = z / x
    for c in range(k):          # column c of D⁻¹: solve L diag(d) Lᵀ x = e_c
        for r in range(k):
            z = 1.0 if r == c else 0.0
            for m in range(r):
                z -= L[r, m] * y[m]
            y[r] = z
        for r in range(k - 1, -1, -1):
            z = y[r] / d[r]
            for m in range(r + 1, k):
                z -= L[m, r] * Dinv[i, m, c]
            Dinv[i, r, c] = z
    return True


@njit(cache=True, inline="always")
def rotate_block(R, i, Y, j, r0, c0):
    """R B Rᵀ for the 3×3 block B = Y[j, r0:r0 + 3, c0:c0 + 3], R = R[i] (9, row-major); a 9-tuple."""
    r_0, r_1, r_2, r_3, r_4, r_5, r_6, r_7, r_8 = R[i, 0], R[i, 1], R[i, 2], R[i, 3], R[i, 4], R[i, 5], R[i, 6], R[i, 7], R[i, 8]
    m0, m1, m2 = Y[j, r0, c0], Y[j, r0, c0 + 1], Y[j, r0, c0 + 2]
    m3, m4, m5 = Y[j, r0 + 1, c0], Y[j, r0 + 1, c0 + 1], Y[j, r0 + 1, c0 + 2]
    m6, m7, m8 = Y[j, r0 + 2, c0], Y[j, r0 + 2, c0 + 1], Y[j, r0 + 2, c0 + 2]
    w00, w01, w02 = m0 * r_0 + m1 * r_1 + m2 * r_2, m0 * r_3 + m1 * r_4 + m2 * r_5, m0 * r_6 + m1 * r_7 + m2 * r_8
    w10, w11, w12 = m3 * r_0 + m4 * r_1 + m5 * r_2, m3 * r_3 + m4 * r_4 + m5 * r_5, m3 * r_6 + m4 * r_7 + m5 * r_8
    w20, w21, w22 = m6 * r_0 + m7 * r_1 + m8 * r_2, m6 * r_3 + m7 * r_4 + m8 * r_5, m6 * r_6 + m7 * r_7 + m8 * r_8
    return (r_0 * w00 + r_1 * w10 + r_2 * w20, r_0 * w01 + r_1 * w11 + r_2 * w21, r_0 * w02 + r_1 * w12 + r_2 * w22,
            r_3 * w00 + r_4 * w10 + r_5 * w20, r_3 * w01 + r_4 * w11 + r_5 * w21, r_3 * w02 + r_4 * w12 + r_5 * w22,
            r_6 * w00 + r_7 * w10 + r_8 * w20, r_6 * w01 + r_7 * w11 + r_8 * w21, r_6 * w02 + r_7 * w12 + r_8 * w22)


@njit(cache=True, inline="always")
def add_inertia(R, t, i, Y, out, p):
    """out[p] += ⁱX_pᵀ Y[i] ⁱX_p, the 6×6 inertia Y[i] = [[A, B], [Bᵀ, C]] of body i in its parent's
    frame (R[i] (9, row-major), t[i]): rotate the blocks (A' = R A Rᵀ, ...), then move the origin by
    T = [t]×: A'' = A', K = B'' = B' − A'T, C'' = C' + T K + (T B')ᵀ (= C' + T B' − B'ᵀ T − T A' T)."""
    A = rotate_block(R, i, Y, i, 0, 0)
    B = rotate_block(R, i, Y, i, 0, 3)
    C = rotate_block(R, i, Y, i, 3, 3)
    t0, t1, t2 = t[i, 0], t[i, 1], t[i, 2]
    K = (B[0] - (A[1] * t2 - A[2] * t1), B[1] - (A[2] * t0 - A[0] * t2), B[2] - (A[0] * t1 - A[1] * t0),
         B[3] - (A[4] * t2 - A[5] * t1), B[4] - (A[5] * t0 - A[3] * t2), B[5] - (A[3] * t1 - A[4] * t0),
         B[6] - (A[7] * t2 - A[8] * t1), B[7] - (A[8] * t0 - A[6] * t2), B[8] - (A[6] * t1 - A[7] * t0))
    for a in range(3):
        for b in range(3):
            out[p, a, b] += A[3 * a + b]
            out[p, a, 3 + b] += K[3 * a + b]
            out[p, 3 + b, a] += K[3 * a + b]
    for b in range(3):
        TK = cross_column(t0, t1, t2, K, b)          # column b of T K
        TB = cross_column(t0, t1, t2, B, b)          # column b of T B' = row b of (T B')ᵀ
        for a in range(3):
            out[p, 3 + a, 3 + b] += C[3 * a + b] + TK[a]
            out[p, 3 + b, 3 + a] += TB[a]


@njit(cache=True, inline="always")
def cross_column(t0, t1, t2, M, b):
    """t × column b of the 3×3 M (9-tuple, row-major), a 3-tuple."""
    x0, x1, x2 = M[b], M[3 + b], M[6 + b]
    return t1 * x2 - t2 * x1, t2 * x0 - t0 * x2, t0 * x1 - t1 * x0


@njit(cache=True, fastmath=FMA)
def aba(itab, ftab, g, Q, V, T, Fext, out):
    """Accelerations (N, nv) = aba(q, v, τ) with external forces Fext as in rnea (p^A_i −= w_i in
    the body frame); a non-finite entry in Q[s], V[s] or T[s] stops it with the status −2 − s.
    A one-coordinate joint (revolute, prismatic) keeps U = Y^A s, D and u in local scalars; the others go through S, U, D⁻¹ arrays (LDLᵀ). Y^A_i is overwritten by Y^a_i and
    p^A_i by p^a_i in pass 2 (pass 3 needs neither)."""
    n, N = itab.shape[0], Q.shape[0]
    ext = Fext.shape[0] > 0
    qn, RJ, zero = np.empty(Q.shape[1]), np.empty((n, 9)), np.zeros(V.shape[1])
    R, t, Rw, pw = np.empty((n, 9)), np.empty((n, 3)), np.empty((n, 9)), np.empty((n, 3))
    S, YA, U, Dinv = np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((n, 6, 6)), np.empty((n, 6, 6))
    vel, c, pA, acc, u = np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6)), np.empty((n, 6))
    D, L, tmp = np.empty((6, 6)), np.empty((6, 6)), np.empty((6, 6))
    DU, d, ys = np.empty(6), np.empty(6), np.empty(6)
    for s in range(N):
        v, tau = V[s], T[s]
        if not (finite(Q[s]) and finite(v) and finite(tau)):
            return -2 - s
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        for i in range(n):                     # pass 1: velocities, bias accelerations c, bias forces p^A
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            r = joint_rt(jt, ftab, i, qn, itab[i, IQ])
            set_placement(itab, ftab, i, r, R, t)
            if itab[i, SCONST] == 0:           # S (and R_J) in arrays unless it is the table's column
                for k in range(9):
                    RJ[i, k] = r[k]
                subspace(jt, ftab, i, nv, RJ, S)
            if p >= 0:
                pv = (vel[p, 0], vel[p, 1], vel[p, 2], vel[p, 3], vel[p, 4], vel[p, 5])
            else:
                pv = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            mo = child_motion(jt, ftab, i, RJ, R, t, v, zero, iv, pv, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            fb = body_force(ftab, i, mo[0], mo[1], mo[2], mo[3], mo[4], mo[5], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for k in range(6):
                vel[i, k], c[i, k], pA[i, k] = mo[k], mo[6 + k], fb[k]
            if ext:
                world_rt(p, i, R, t, Rw, pw)
                e = external_in_body(Rw, pw, i, Fext, s)
                for k in range(6):
                    pA[i, k] -= e[k]
            for r_ in range(6):
                for k in range(6):
                    YA[i, r_, k] = ftab[i, Y6 + 6 * r_ + k]
        for i in range(n - 1, -1, -1):         # pass 2: articulated inertias and bias forces
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            scale = 0.0
            for k in range(6):
                scale = max(scale, abs(YA[i, k, k]))
            if nv == 1:
                s0, s1, s2, s3, s4, s5 = column(itab, ftab, S, i, 0)
                for k in range(6):             # U = Y^A s
                    U[i, k, 0] = (YA[i, k, 0] * s0 + YA[i, k, 1] * s1 + YA[i, k, 2] * s2 + YA[i, k, 3] * s3
                                  + YA[i, k, 4] * s4 + YA[i, k, 5] * s5)
                Dk = (s0 * U[i, 0, 0] + s1 * U[i, 1, 0] + s2 * U[i, 2, 0] + s3 * U[i, 3, 0] + s4 * U[i, 4, 0]
                      + s5 * U[i, 5, 0])
                if not Dk > PIVOT_RTOL * scale:
                    return s * n + i
                di = 1.0 / Dk
                uk = tau[iv] - (s0 * pA[i, 0] + s1 * pA[i, 1] + s2 * pA[i, 2] + s3 * pA[i, 3] + s4 * pA[i, 4]
                                + s5 * pA[i, 5])
                Dinv[i, 0, 0], u[i, 0] = di, uk
                if p < 0:
                    continue
                for r_ in range(6):            # Y^a = Y^A − U Uᵀ / D,  p^a = p^A + U u / D (+ Y^a c below)
                    x = U[i, r_, 0] * di
                    for k in range(6):
                        YA[i, r_, k] -= x * U[i, k, 0]
                    pA[i, r_] += x * uk
            elif nv > 1:
                for r_ in range(6):
                    for k in range(nv):
                        x = 0.0
                        for m in range(6):
                            x += YA[i, r_, m] * S[i, m, k]
                        U[i, r_, k] = x        # U = Y^A S
                for a_ in range(nv):
                    x = tau[iv + a_]
                    for r_ in range(6):
                        x -= S[i, r_, a_] * pA[i, r_]
                    u[i, a_] = x               # u = τ − Sᵀ p^A
                    for b_ in range(nv):
                        z = 0.0
                        for r_ in range(6):
                            z += S[i, r_, a_] * U[i, r_, b_]
                        D[a_, b_] = z          # D = Sᵀ U
                if not ldl_inverse(D, nv, Dinv, i, scale, L, d, ys):
                    return s * n + i
                if p < 0:
                    continue
                for r_ in range(6):            # Y^a = Y^A − U D⁻¹ Uᵀ,  p^a = p^A + U D⁻¹ u
                    for k in range(nv):
                        x = 0.0
                        for m in range(nv):
                            x += U[i, r_, m] * Dinv[i, m, k]
                        tmp[r_, k] = x
                for r_ in range(6):
                    for cc in range(6):
                        x = 0.0
                        for k in range(nv):
                            x += tmp[r_, k] * U[i, cc, k]
                        YA[i, r_, cc] -= x
                    x = 0.0
                    for k in range(nv):
                        x += tmp[r_, k] * u[i, k]
                    pA[i, r_] += x
            if p < 0:
                continue
            for r_ in range(6):                # + Y^a c
                pA[i, r_] += (YA[i, r_, 0] * c[i, 0] + YA[i, r_, 1] * c[i, 1] + YA[i, r_, 2] * c[i, 2]
                              + YA[i, r_, 3] * c[i, 3] + YA[i, r_, 4] * c[i, 4] + YA[i, r_, 5] * c[i, 5])
            add_inertia(R, t, i, YA, YA, p)
            add_force(R, t, i, pA[i, 0], pA[i, 1], pA[i, 2], pA[i, 3], pA[i, 4], pA[i, 5], pA, p, 0)
        for i in range(n):                     # pass 3: accelerations
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            if p >= 0:
                ap = into_child(R, t, i, acc[p, 0], acc[p, 1], acc[p, 2], acc[p, 3], acc[p, 4], acc[p, 5])
            else:                              # the world: gravity as the base acceleration (−g, 0)
                ap = into_child(R, t, i, -g[0], -g[1], -g[2], 0.0, 0.0, 0.0)
            for k in range(6):
                acc[i, k] = ap[k] + c[i, k]
            if nv == 1:
                s0, s1, s2, s3, s4, s5 = column(itab, ftab, S, i, 0)
                x = (u[i, 0] - (U[i, 0, 0] * acc[i, 0] + U[i, 1, 0] * acc[i, 1] + U[i, 2, 0] * acc[i, 2]
                                + U[i, 3, 0] * acc[i, 3] + U[i, 4, 0] * acc[i, 4] + U[i, 5, 0] * acc[i, 5])) * Dinv[i, 0, 0]
                out[s, iv] = x
                acc[i, 0] += s0 * x
                acc[i, 1] += s1 * x
                acc[i, 2] += s2 * x
                acc[i, 3] += s3 * x
                acc[i, 4] += s4 * x
                acc[i, 5] += s5 * x
            elif nv > 1:
                for k in range(nv):
                    x = u[i, k]
                    for r_ in range(6):
                        x -= U[i, r_, k] * acc[i, r_]
                    DU[k] = x
                for k in range(nv):
                    x = 0.0
                    for m in range(nv):
                        x += Dinv[i, k, m] * DU[m]
                    out[s, iv + k] = x
                for r_ in range(6):
                    x = 0.0
                    for k in range(nv):
                        x += S[i, r_, k] * out[s, iv + k]
                    acc[i, r_] += x
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
    qn, RJ = np.empty(Q.shape[1]), np.empty((n, 9))
    R, t, S = np.empty((n, 3, 3)), np.empty((n, 3)), np.empty((n, 6, 6))
    Vc = np.empty((1, 6))
    for s in range(N):
        bad = normalize(itab, Q[s], qn)
        if bad >= 0:
            return s * n + bad
        Rws, pws, Ss = Rw[s], pw[s], Slab[s]
        for i in range(n):
            jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
            placement(itab, ftab, i, qn, RJ, R, t)
            subspace(jt, ftab, i, itab[i, NV], RJ, S)
            world_placement(itab, i, R, t, Rws, pws)
            if order >= 1:
                for r in range(6):
                    Vel[s, i, r] = Vel[s, p, r] if p >= 0 else 0.0
            for k in range(nv):       # S_k in the lab about the origin: (R s_lin + p × R s_ang, R s_ang)
                for r in range(3):
                    Ss[iv + k, 3 + r] = Rws[i, r, 0] * S[i, 3, k] + Rws[i, r, 1] * S[i, 4, k] + Rws[i, r, 2] * S[i, 5, k]
                w0, w1, w2 = Ss[iv + k, 3], Ss[iv + k, 4], Ss[iv + k, 5]
                p0, p1, p2 = pws[i, 0], pws[i, 1], pws[i, 2]
                Ss[iv + k, 0] = Rws[i, 0, 0] * S[i, 0, k] + Rws[i, 0, 1] * S[i, 1, k] + Rws[i, 0, 2] * S[i, 2, k] + p1 * w2 - p2 * w1
                Ss[iv + k, 1] = Rws[i, 1, 0] * S[i, 0, k] + Rws[i, 1, 1] * S[i, 1, k] + Rws[i, 1, 2] * S[i, 2, k] + p2 * w0 - p0 * w2
                Ss[iv + k, 2] = Rws[i, 2, 0] * S[i, 0, k] + Rws[i, 2, 1] * S[i, 1, k] + Rws[i, 2, 2] * S[i, 2, k] + p0 * w1 - p1 * w0
                if order >= 1:
                    for r in range(6):
                        Vel[s, i, r] += Ss[iv + k, r] * V[s, iv + k]
        if order == 2:
            Vs, As = Vel[s], Acc[s]
            for i in range(n):
                jt, p, iv, nv = itab[i, TYPE], itab[i, PARENT], itab[i, IV], itab[i, NV]
                for r in range(6):
                    As[i, r] = As[p, r] if p >= 0 else 0.0
                for k in range(nv):
                    in_parent = (itab[i, IN_PARENT] >> k) & 1 == 1
                    for r in range(6):
                        Vc[0, r] = (Vs[p, r] if p >= 0 else 0.0) if in_parent else Vs[i, r]
                    cr = motion_cross(Vc, 0, Ss, iv + k)
                    for r in range(6):
                        As[i, r] += Ss[iv + k, r] * A[s, iv + k] + cr[r] * V[s, iv + k]
    return -1
