"""Compiled per-sample ground stage (numba): support polygon and stability margin.

The same algorithm and floating-point steps as dynamics/support.py (Andrew's monotone chain on the
ground projections of the points in contact, then the signed margin of methods.md d.5), looped over
samples in compiled code. Arrays: points (N, C, 2) m (lab x, y), in_contact (N, C) bool, p (N, 2)
m; outputs margin (N,) m and n_vertices (N,) int64, written in place.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _hull(px, py, m, tol, hx, hy):
    """CCW hull of the m points (px, py) (sorted in place, duplicates removed) into hx, hy; returns
    the vertex count (collinear points dropped: cross products ≤ tol m²)."""
    for i in range(1, m):               # insertion sort by (x, y): a few points per sample
        x, y = px[i], py[i]
        j = i - 1
        while j >= 0 and (px[j] > x or (px[j] == x and py[j] > y)):
            px[j + 1], py[j + 1] = px[j], py[j]
            j -= 1
        px[j + 1], py[j + 1] = x, y
    u = 0
    for i in range(m):                  # unique points (the set() of support._hull)
        if u == 0 or px[i] != px[u - 1] or py[i] != py[u - 1]:
            px[u], py[u] = px[i], py[i]
            u += 1
    if u <= 2:
        for i in range(u):
            hx[i], hy[i] = px[i], py[i]
        return u
    k = 0
    for i in range(u):                  # lower chain
        while k >= 2 and not ((hx[k - 1] - hx[k - 2]) * (py[i] - hy[k - 2])
                              - (hy[k - 1] - hy[k - 2]) * (px[i] - hx[k - 2]) > tol):
            k -= 1
        hx[k], hy[k] = px[i], py[i]
        k += 1
    lower = k - 1                       # lower[:-1]
    k2 = 0
    base = lower                        # the upper chain is built after it
    for i in range(u - 1, -1, -1):
        while k2 >= 2 and not ((hx[base + k2 - 1] - hx[base + k2 - 2]) * (py[i] - hy[base + k2 - 2])
                               - (hy[base + k2 - 1] - hy[base + k2 - 2]) * (px[i] - hx[base + k2 - 2]) > tol):
            k2 -= 1
        hx[base + k2], hy[base + k2] = px[i], py[i]
        k2 += 1
    n = lower + k2 - 1                  # + upper[:-1]
    if n == 2 and hx[0] == hx[1] and hy[0] == hy[1]:
        n = 1
    return n


@njit(cache=True, inline="always")
def _segment_distance(x, y, ax, ay, bx, by):
    ex, ey = bx - ax, by - ay
    qx, qy = x - ax, y - ay
    den = ex * ex + ey * ey
    t = (qx * ex + qy * ey) / (den if den > 0 else 1.0)
    t = min(max(t, 0.0), 1.0)
    return math.hypot(qx - t * ex, qy - t * ey)


@njit(cache=True)
def support_margin(points, in_contact, p, tol, margin, n_vertices):
    """Per sample: the support polygon of the points in contact and the signed margin of p.
    Returns −1, or the first sample with a non-finite point in contact (nothing after it written)."""
    N, C = in_contact.shape
    px, py = np.empty(C), np.empty(C)
    hx, hy = np.empty(2 * C + 1), np.empty(2 * C + 1)
    for s in range(N):
        m = 0
        for c in range(C):
            if in_contact[s, c]:
                if not (math.isfinite(points[s, c, 0]) and math.isfinite(points[s, c, 1])):
                    return s
                px[m], py[m] = points[s, c, 0], points[s, c, 1]
                m += 1
        k = _hull(px, py, m, tol, hx, hy) if m else 0
        n_vertices[s] = k
        x, y = p[s, 0], p[s, 1]
        margin[s] = np.nan
        if k == 0 or not (math.isfinite(x) and math.isfinite(y)):
            continue
        if k == 1:
            margin[s] = -math.hypot(x - hx[0], y - hy[0])
            continue
        if k == 2:
            margin[s] = -_segment_distance(x, y, hx[0], hy[0], hx[1], hy[1])
            continue
        smin = np.inf
        for e in range(k):
            x0, y0, x1, y1 = hx[e], hy[e], hx[(e + 1) % k], hy[(e + 1) % k]
            ex, ey = x1 - x0, y1 - y0
            length = math.hypot(ex, ey)
            if length == 0.0:
                length = 1.0
            nx, ny = -ey / length, ex / length
            smin = min(smin, (x * nx + y * ny) - (nx * x0 + ny * y0))
        if smin >= 0.0:
            margin[s] = smin
            continue
        d = np.inf
        for e in range(k):
            d = min(d, _segment_distance(x, y, hx[e], hy[e], hx[(e + 1) % k], hy[(e + 1) % k]))
        margin[s] = -d
    return -1
