"""Compiled segment fits of a marker set (numba): the per-frame loop of
`human15_markers.fit_positions` (its numpy path: `markers.masked_rigid_fit` on every segment at once,
then level by level), one segment after the other, parents first.

Per frame and segment: the seen markers (finite x, y, z); where fewer than 3, the proximal joint
centre placed by the parent's fit of the same frame as a further point (reference: the segment
origin); then, with r̄, x̄ the means of the points used, H = Σ (r_i − r̄)(x_i − x̄)ᵀ = U S Vᵀ,
R = V diag(1, 1, sign det(V Uᵀ)) Uᵀ, t = x̄ − R r̄, residual √(mean |R r_i + t − x_i|²); NaN where
fewer than 3 points or collinear ones (σ₂ ≤ 1e-9 σ₁ of the centred reference points). Lab frame,
metres; outputs written into arrays the caller allocates.

R is computed as Horn's (1987) unit quaternion, the eigenvector of the largest eigenvalue of the
symmetric 4×4 matrix N(H) (cyclic Jacobi): the same rotation as the SVD's (the best proper rotation;
both as well conditioned, through σ₂ + σ₃), without numba's LAPACK call (~4 µs a fit, 30 fits a
2-sample frame).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _spread(r0, k):
    """σ₂ > 1e-9 σ₁ of the centred points r0[:k] (k, 3). The sum of the principal 2×2 minors of
    G = r0ᵀ r0 is e₂ = σ₁²σ₂² + σ₁²σ₃² + σ₂²σ₃² ≤ 3 σ₁²σ₂², and tr G ≥ σ₁²: where e₂ > 1e-12 (tr G)²
    (its rounding error is ~1e-15 (tr G)²), σ₂ > 1e-9 σ₁ for certain and the SVD is not needed."""
    g = np.zeros((3, 3))
    for j in range(k):
        for a in range(3):
            for b in range(3):
                g[a, b] += r0[j, a] * r0[j, b]
    e2 = g[0, 0] * g[1, 1] - g[0, 1] * g[1, 0] + g[0, 0] * g[2, 2] - g[0, 2] * g[2, 0] \
        + g[1, 1] * g[2, 2] - g[1, 2] * g[2, 1]
    tr = g[0, 0] + g[1, 1] + g[2, 2]
    if e2 > 1e-12 * tr * tr:
        return True
    sv = np.linalg.svd(r0, full_matrices=False)[1]
    return sv[1] > 1e-9 * sv[0]


@njit(cache=True)
def segment_fits(pos, marker, ref, parent, centre, rot, tr, res):
    """pos (N, M + 1, 3) m lab, NaN where not seen (column M: a never-seen padding marker); marker
    (S, P) int64 each segment's markers (M: none); ref (S, P + 1, 3) m their positions in the segment
    frame, slot P the joint centre; parent (S,) int64 (-1: none; parents before children); centre
    (S, 3) m the joint centre in the parent frame. Out: rot (S, N, 3, 3), tr (S, N, 3), res (S, N)."""
    n = pos.shape[0]
    ns, width = marker.shape
    r = np.empty((width + 1, 3))
    x = np.empty((width + 1, 3))
    c = np.empty(3)
    h = np.empty((3, 3))
    for i in range(n):
        for s in range(ns):
            k = 0
            for j in range(width):
                m = marker[s, j]
                if math.isfinite(pos[i, m, 0]) and math.isfinite(pos[i, m, 1]) and math.isfinite(pos[i, m, 2]):
                    for a in range(3):
                        r[k, a] = ref[s, j, a]
                        x[k, a] = pos[i, m, a]
                    k += 1
            p = parent[s]
            if k < 3 and p >= 0:
                ok = True
                for a in range(3):
                    c[a] = tr[p, i, a] + rot[p, i, a, 0] * centre[s, 0] + rot[p, i, a, 1] * centre[s, 1] \
                        + rot[p, i, a, 2] * centre[s, 2]
                    ok = ok and math.isfinite(c[a])
                if ok:
                    for a in range(3):
                        r[k, a] = ref[s, width, a]
                        x[k, a] = c[a]
                    k += 1
            for a in range(3):
                tr[s, i, a] = np.nan
                for b in range(3):
                    rot[s, i, a, b] = np.nan
            res[s, i] = np.nan
            if k < 3:
                continue
            rc = np.zeros(3)
            xc = np.zeros(3)
            for j in range(k):
                for a in range(3):
                    rc[a] += r[j, a]
                    xc[a] += x[j, a]
            for a in range(3):
                rc[a] /= k
                xc[a] /= k
            r0 = np.empty((k, 3))
            for j in range(k):
                for a in range(3):
                    r0[j, a] = r[j, a] - rc[a]
            if not _spread(r0, k):            # collinear: the rotation about their line is undetermined
                continue
            for a in range(3):
                for b in range(3):
                    acc = 0.0
                    for j in range(k):
                        acc += r0[j, a] * (x[j, b] - xc[b])
                    h[a, b] = acc
            _horn(h, rot[s, i])
            for a in range(3):
                tr[s, i, a] = xc[a] - (rot[s, i, a, 0] * rc[0] + rot[s, i, a, 1] * rc[1] + rot[s, i, a, 2] * rc[2])
            e = 0.0
            for j in range(k):
                for a in range(3):
                    f = tr[s, i, a] + rot[s, i, a, 0] * r[j, 0] + rot[s, i, a, 1] * r[j, 1] \
                        + rot[s, i, a, 2] * r[j, 2] - x[j, a]
                    e += f * f
            res[s, i] = math.sqrt(e / k)


@njit(cache=True, inline="always")
def _horn(h, rot):
    """rot (3, 3) := the proper rotation R minimising Σ |R r_i − x_i|² given h = Σ r_i x_iᵀ (3, 3) of the
    centred points (Kabsch's R = V diag(1, 1, d) Uᵀ): Horn's quaternion, the eigenvector of N's largest
    eigenvalue, N = [[tr h, Δᵀ], [Δ, h + hᵀ − tr h E]] with Δ = (h₁₂ − h₂₁, h₂₀ − h₀₂, h₀₁ − h₁₀), by cyclic
    Jacobi rotations until no off-diagonal entry is above 1e-18 of its diagonal pair."""
    a = np.empty((4, 4))
    v = np.zeros((4, 4))
    tr = h[0, 0] + h[1, 1] + h[2, 2]
    a[0, 0], a[1, 1], a[2, 2], a[3, 3] = tr, 2 * h[0, 0] - tr, 2 * h[1, 1] - tr, 2 * h[2, 2] - tr
    a[0, 1] = a[1, 0] = h[1, 2] - h[2, 1]
    a[0, 2] = a[2, 0] = h[2, 0] - h[0, 2]
    a[0, 3] = a[3, 0] = h[0, 1] - h[1, 0]
    a[1, 2] = a[2, 1] = h[0, 1] + h[1, 0]
    a[1, 3] = a[3, 1] = h[2, 0] + h[0, 2]
    a[2, 3] = a[3, 2] = h[1, 2] + h[2, 1]
    for k in range(4):
        v[k, k] = 1.0
    for _ in range(50):
        turned = False
        for p in range(3):
            for q in range(p + 1, 4):
                apq = a[p, q]
                if abs(apq) <= 1e-18 * (abs(a[p, p]) + abs(a[q, q])):
                    continue
                turned = True
                theta = (a[q, q] - a[p, p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
                if theta < 0:
                    t = -t
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(4):
                    akp, akq = a[k, p], a[k, q]
                    a[k, p], a[k, q] = c * akp - s * akq, s * akp + c * akq
                for k in range(4):
                    apk, aqk = a[p, k], a[q, k]
                    a[p, k], a[q, k] = c * apk - s * aqk, s * apk + c * aqk
                for k in range(4):
                    vkp, vkq = v[k, p], v[k, q]
                    v[k, p], v[k, q] = c * vkp - s * vkq, s * vkp + c * vkq
        if not turned:
            break
    best = 0
    for k in range(1, 4):
        if a[k, k] > a[best, best]:
            best = k
    w, x, y, z = v[0, best], v[1, best], v[2, best], v[3, best]
    n = math.sqrt(w * w + x * x + y * y + z * z)
    w, x, y, z = w / n, x / n, y / n, z / n
    rot[0, 0], rot[0, 1], rot[0, 2] = w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)
    rot[1, 0], rot[1, 1], rot[1, 2] = 2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)
    rot[2, 0], rot[2, 1], rot[2, 2] = 2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z


# ---- joint coordinates and rates (behind human15_markers.joint_coordinates / joint_rates) ----------------

@njit(cache=True, inline="always")
def _mod(x, m):
    """x mod m with the sign of m, as numpy's remainder (fmod, then shifted into m's sign)."""
    r = np.fmod(x, m)
    if r != 0.0:
        if (m < 0) != (r < 0):
            r += m
    else:
        r = math.copysign(0.0, m)
    return r


@njit(cache=True, inline="always")
def _quat(m, out):
    """Unit quaternion (x, y, z, w) of the rotation matrix m (3, 3) into out (4,): scipy's
    `Rotation.from_matrix` of an orthonormal matrix (Markley 2008: the largest of m₀₀, m₁₁, m₂₂ and
    tr m picks the formula, then normalised)."""
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    c, best = 3, tr
    for i in range(3):
        if m[i, i] > best:
            c, best = i, m[i, i]
    if c == 3:
        out[0] = m[2, 1] - m[1, 2]
        out[1] = m[0, 2] - m[2, 0]
        out[2] = m[1, 0] - m[0, 1]
        out[3] = 1.0 + tr
    else:
        i = c
        j = (i + 1) % 3
        k = (j + 1) % 3
        out[i] = 1.0 - tr + 2.0 * m[i, i]
        out[j] = m[j, i] + m[i, j]
        out[k] = m[k, i] + m[i, k]
        out[3] = m[k, j] - m[j, k]
    s = math.sqrt(out[0] * out[0] + out[1] * out[1] + out[2] * out[2] + out[3] * out[3])
    for a in range(4):
        out[a] /= s


@njit(cache=True)
def joint_coordinates(rot, tr, root, chain, sign, axis, angles, previous, q):
    """Joint coordinates of fitted segment frames (human15_markers.joint_coordinates, module doc step
    2). rot (S, N, 3, 3), tr (S, N, 3): the fits of the plan's segments (lab, m; NaN: not fitted); root:
    the root's index in them (free flyer, q[:, 0:7] = t, quaternion x y z w); chain (C, 9) int64 per
    chain: parent and child segment index, number of joints (3 or 1), their q indices (unused -1), and
    for 3 the index triple (i, j, k) of scipy's Euler-from-quaternion for its intrinsic sequence (the
    sequence reversed); sign (C, 3): each joint's axis sign along its lab axis; axis (C, 3): the one
    joint's axis; angles (A,) int64: every chain's q indices; previous (nq,): the last finite value of
    each coordinate before these frames (NaN: none). Out q (N, nq), every column written (NaN where not
    known).

    Per frame: R_rel = R_parentᵀ R_child; three joints: scipy's quaternion of R_rel, then its intrinsic
    Euler angles (Bernardes & Viollet 2022, as `Rotation.as_euler`: half sum and difference of atan2's,
    the middle angle 2 atan2(|(c, d)|, |(a, b)|) − π/2, gimbal lock within 1e-7 rad: the third angle 0)
    times the signs; one joint about a: atan2(a · vee(R_rel), (tr R_rel − aᵀ R_rel a)/2). Root: the
    quaternion of its R, its sign flipped wherever its dot product with the frame before's (or with
    previous's) is < 0. Then every angle unwrapped along time over its finite samples from previous (as
    np.unwrap: steps of |Δ| ≥ π wrapped into [−π, π), the corrections summed)."""
    n = rot.shape[1]
    nq = q.shape[1]
    rel = np.empty((3, 3))
    quat = np.empty(4)
    last = np.empty(4)
    have = True
    for a in range(4):
        last[a] = previous[3 + a]
        have = have and math.isfinite(last[a])
    flip = False
    for i in range(n):
        for col in range(nq):
            q[i, col] = np.nan
        for a in range(3):
            q[i, a] = tr[root, i, a]
        ok = True
        for a in range(3):
            for b in range(3):
                ok = ok and math.isfinite(rot[root, i, a, b])
        if ok:
            _quat(rot[root, i], quat)
            if have and quat[0] * last[0] + quat[1] * last[1] + quat[2] * last[2] + quat[3] * last[3] < 0:
                flip = not flip
            have = True
            for a in range(4):
                last[a] = quat[a]
                q[i, 3 + a] = -quat[a] if flip else quat[a]
        for c in range(chain.shape[0]):
            p, s = chain[c, 0], chain[c, 1]
            ok = True
            for a in range(3):
                for b in range(3):
                    ok = ok and math.isfinite(rot[p, i, a, b]) and math.isfinite(rot[s, i, a, b])
            if not ok:
                continue
            for a in range(3):
                for b in range(3):
                    rel[a, b] = rot[p, i, 0, a] * rot[s, i, 0, b] + rot[p, i, 1, a] * rot[s, i, 1, b] \
                        + rot[p, i, 2, a] * rot[s, i, 2, b]
            if chain[c, 2] == 3:
                _quat(rel, quat)
                ii, jj, kk = chain[c, 6], chain[c, 7], chain[c, 8]
                e = float((ii - jj) * (jj - kk) * (kk - ii) // 2)
                qa = quat[3] - quat[jj]
                qb = quat[ii] + quat[kk] * e
                qc = quat[jj] + quat[3]
                qd = quat[kk] * e - quat[ii]
                half_sum = math.atan2(qb, qa)
                half_diff = math.atan2(qd, qc)
                mid = 2.0 * math.atan2(math.hypot(qc, qd), math.hypot(qa, qb))
                lock0 = abs(mid) <= 1e-7
                lock = lock0 or abs(mid - math.pi) <= 1e-7
                if lock:
                    first = (2.0 * half_sum if lock0 else 2.0 * half_diff) * e
                    third = 0.0
                else:
                    first = (half_sum + half_diff) * e
                    third = half_sum - half_diff
                ang = (first, mid - 0.5 * math.pi, third)
                for m in range(3):
                    q[i, chain[c, 3 + m]] = (_mod(ang[m] + math.pi, 2.0 * math.pi) - math.pi) * sign[c, m]
            else:
                w0 = 0.5 * (rel[2, 1] - rel[1, 2])
                w1 = 0.5 * (rel[0, 2] - rel[2, 0])
                w2 = 0.5 * (rel[1, 0] - rel[0, 1])
                ara = 0.0
                for a in range(3):
                    for b in range(3):
                        ara += axis[c, a] * rel[a, b] * axis[c, b]
                cos = 0.5 * (rel[0, 0] + rel[1, 1] + rel[2, 2] - ara)
                q[i, chain[c, 3]] = math.atan2(w0 * axis[c, 0] + w1 * axis[c, 1] + w2 * axis[c, 2], cos)
    for col in angles:
        before = previous[col]
        shift = 0.0
        for i in range(n):
            x = q[i, col]
            if not math.isfinite(x):
                continue
            if math.isfinite(before):
                dd = x - before
                dm = _mod(dd + math.pi, 2.0 * math.pi) - math.pi
                if dm == -math.pi and dd > 0:
                    dm = math.pi
                if abs(dd) >= math.pi:
                    shift += dm - dd
            before = x
            q[i, col] = x + shift


@njit(cache=True, inline="always")
def _gradient(x, col, dx, out, ocol):
    """np.gradient(x[:, col], dx, edge_order=2) into out[:, ocol] (at least 3 rows): central differences
    inside, one-sided second order at the ends, written as numpy evaluates them."""
    n = x.shape[0]
    for i in range(1, n - 1):
        out[i, ocol] = (x[i + 1, col] - x[i - 1, col]) / (2.0 * dx)
    out[0, ocol] = -1.5 / dx * x[0, col] + 2.0 / dx * x[1, col] + -0.5 / dx * x[2, col]
    out[n - 1, ocol] = 0.5 / dx * x[n - 3, col] + -2.0 / dx * x[n - 2, col] + 1.5 / dx * x[n - 1, col]


@njit(cache=True)
def joint_rates(q, dx, rev, root, v, a):
    """Rates of joint coordinates (human15_markers.joint_rates, module doc step 3). q (N, nq), N ≥ 3,
    sampled every dx s; rev (R, 2) int64: each revolute joint's q and v index; root (2,) int64: the
    free flyer's q and v index (q index −1: none). Out v, a (N, nv): revolute v = q̇; free flyer
    v = (Rᵀ ṫ, vee(Rᵀ Ṙ)) with R the matrix of its unit quaternion (NaN where any of the 4 is not
    finite); a = v̇; every derivative np.gradient's (`_gradient`), NaN spreading to the neighbours.
    Columns of v that are neither stay NaN (a too)."""
    n = q.shape[0]
    for i in range(n):
        for c in range(v.shape[1]):
            v[i, c] = np.nan
    for r in range(rev.shape[0]):
        _gradient(q, rev[r, 0], dx, v, rev[r, 1])
    iq, iv = root[0], root[1]
    if iq >= 0:
        R = np.empty((n, 9))
        dR = np.empty((n, 9))
        dt = np.empty((n, 3))
        for i in range(n):
            x, y, z, w = q[i, iq + 3], q[i, iq + 4], q[i, iq + 5], q[i, iq + 6]
            if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z) and math.isfinite(w)):
                for k in range(9):
                    R[i, k] = np.nan
                continue
            s = math.sqrt(x * x + y * y + z * z + w * w)
            x, y, z, w = x / s, y / s, z / s, w / s
            x2, y2, z2, w2 = x * x, y * y, z * z, w * w
            xy, zw, xz, yw, yz, xw = x * y, z * w, x * z, y * w, y * z, x * w
            R[i, 0], R[i, 1], R[i, 2] = x2 - y2 - z2 + w2, 2 * (xy - zw), 2 * (xz + yw)
            R[i, 3], R[i, 4], R[i, 5] = 2 * (xy + zw), -x2 + y2 - z2 + w2, 2 * (yz - xw)
            R[i, 6], R[i, 7], R[i, 8] = 2 * (xz - yw), 2 * (yz + xw), -x2 - y2 + z2 + w2
        for k in range(9):
            _gradient(R, k, dx, dR, k)
        for k in range(3):
            _gradient(q, iq + k, dx, dt, k)
        for i in range(n):
            for k in range(3):          # Rᵀ ṫ, the velocity in the base frame
                v[i, iv + k] = R[i, k] * dt[i, 0] + R[i, 3 + k] * dt[i, 1] + R[i, 6 + k] * dt[i, 2]
            # W = Rᵀ Ṙ = [ω]×: ω = vee(W) = ((W₂₁ − W₁₂)/2, (W₀₂ − W₂₀)/2, (W₁₀ − W₀₁)/2)
            w21 = R[i, 2] * dR[i, 1] + R[i, 5] * dR[i, 4] + R[i, 8] * dR[i, 7]
            w12 = R[i, 1] * dR[i, 2] + R[i, 4] * dR[i, 5] + R[i, 7] * dR[i, 8]
            w02 = R[i, 0] * dR[i, 2] + R[i, 3] * dR[i, 5] + R[i, 6] * dR[i, 8]
            w20 = R[i, 2] * dR[i, 0] + R[i, 5] * dR[i, 3] + R[i, 8] * dR[i, 6]
            w10 = R[i, 1] * dR[i, 0] + R[i, 4] * dR[i, 3] + R[i, 7] * dR[i, 6]
            w01 = R[i, 0] * dR[i, 1] + R[i, 3] * dR[i, 4] + R[i, 6] * dR[i, 7]
            v[i, iv + 3] = 0.5 * (w21 - w12)
            v[i, iv + 4] = 0.5 * (w02 - w20)
            v[i, iv + 5] = 0.5 * (w10 - w01)
    for c in range(v.shape[1]):
        _gradient(v, c, dx, a, c)
