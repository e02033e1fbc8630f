"""Compiled segment fits of a marker set (numba): the per-frame loop of
`human15_markers.fit_positions` (its numpy path: `markers.masked_rigid_fit` on every segment at once,
then level by level), one segment after the other, parents first.

Per frame and segment: the seen markers (finite x, y, z); where fewer than 3, the proximal joint
centre placed by the parent's fit of the same frame as a further point (reference: the segment
origin); then, with r̄, x̄ the means of the points used, H = Σ (r_i − r̄)(x_i − x̄)ᵀ = U S Vᵀ,
R = V diag(1, 1, sign det(V Uᵀ)) Uᵀ, t = x̄ − R r̄, residual √(mean |R r_i + t − x_i|²); NaN where
fewer than 3 points or collinear ones (σ₂ ≤ 1e-9 σ₁ of the centred reference points). Lab frame,
metres; outputs written into arrays the caller allocates.
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
            u, _, vt = np.linalg.svd(h)
            # V Uᵀ; its determinant's sign is the reflection fix
            vu = np.empty((3, 3))
            for a in range(3):
                for b in range(3):
                    vu[a, b] = vt[0, a] * u[b, 0] + vt[1, a] * u[b, 1] + vt[2, a] * u[b, 2]
            det = vu[0, 0] * (vu[1, 1] * vu[2, 2] - vu[1, 2] * vu[2, 1]) \
                - vu[0, 1] * (vu[1, 0] * vu[2, 2] - vu[1, 2] * vu[2, 0]) \
                + vu[0, 2] * (vu[1, 0] * vu[2, 1] - vu[1, 1] * vu[2, 0])
            d = 1.0 if det > 0 else (-1.0 if det < 0 else 0.0)
            for a in range(3):
                for b in range(3):
                    rot[s, i, a, b] = vt[0, a] * u[b, 0] + vt[1, a] * u[b, 1] + d * vt[2, a] * u[b, 2]
            for a in range(3):
                tr[s, i, a] = xc[a] - (rot[s, i, a, 0] * rc[0] + rot[s, i, a, 1] * rc[1] + rot[s, i, a, 2] * rc[2])
            e = 0.0
            for j in range(k):
                for a in range(3):
                    f = tr[s, i, a] + rot[s, i, a, 0] * r[j, 0] + rot[s, i, a, 1] * r[j, 1] \
                        + rot[s, i, a, 2] * r[j, 2] - x[j, a]
                    e += f * f
            res[s, i] = math.sqrt(e / k)
