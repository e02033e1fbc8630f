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


# contact law codes (contact.py passes them): the normal law's form and the friction kind
KELVIN_VOIGT, HERTZ, CONSTANT_DAMPING, RESTITUTION = 0, 1, 2, 3
NO_FRICTION, RAMP, TANH, STICTION = -1, 0, 1, 2


@njit(cache=True, inline="always")
def _mu(fcode, fp, v):
    """Friction coefficient μ(v) for slip speed v ≥ 0 (contact.Friction.coefficient); fp = (mu, v0,
    v1, v_s, mu_static, mu_viscous)."""
    mu = fp[0]
    if fcode == RAMP:
        return mu * min(max((v - fp[1]) / (fp[2] - fp[1]), 0.0), 1.0)
    if fcode == TANH:
        return mu * math.tanh(v / fp[3])
    r = v / fp[3]
    return mu * math.tanh(4.0 * r) + (fp[4] - mu) * r / (0.25 * r * r + 0.75) ** 2 + fp[5] * v


@njit(cache=True)
def contact_forces(lcode, lp, fcode, fp, delta, ddot, v_t, normal, in_contact, v_latched, energy, last_delta,
                   last_force, f_n, f_t, force, v_lat, e_out, touch, lift):
    """Contact forces of C points over N samples with per-episode latching (contact.contact_forces).

    lp = (K, n, damping, v_min, χ̂); delta, ddot (N, C); v_t, normal (N, C, d); the state arrays
    (C,) are read and updated in place (the state after the last sample); outputs f_n, v_lat,
    e_out (N, C), f_t, force (N, C, d), touch, lift (N, C) bool."""
    N, C = delta.shape
    d = v_t.shape[2]
    K, n, damping, v_min, chi = lp[0], lp[1], lp[2], lp[3], lp[4]
    for s in range(N):
        for c in range(C):
            dl, dd = delta[s, c], ddot[s, c]
            inc = dl > 0.0                           # a NaN δ (marker gap) is no contact
            prev = in_contact[c]
            touch[s, c] = inc and not prev
            lift[s, c] = prev and not inc
            if touch[s, c]:                          # latch δ̇⁻ = max(δ̇, v_min) (NaN stays NaN)
                v_latched[c] = dd if (dd > v_min or dd != dd) else v_min
            if not inc:
                v_latched[c] = np.nan
            v_lat[s, c] = v_latched[c]
            f = 0.0
            if inc:
                if lcode == KELVIN_VOIGT:
                    f = K * dl + damping * dd
                else:
                    f = K * dl ** n
                    if lcode == CONSTANT_DAMPING:
                        f = f * (1.0 + 1.5 * damping * dd)
                    elif lcode == RESTITUTION:
                        vl = v_latched[c] if v_latched[c] > v_min or v_latched[c] != v_latched[c] else v_min
                        f = f * (1.0 + chi * dd / vl)
                if f < 0.0:
                    f = 0.0
            f_n[s, c] = f
            speed2 = 0.0
            for k in range(d):
                speed2 += v_t[s, c, k] * v_t[s, c, k]
            speed = math.sqrt(speed2)
            scale = 0.0
            if fcode != NO_FRICTION:
                scale = _mu(fcode, fp, speed) * f / (speed if speed > 0.0 else 1.0)
            for k in range(d):
                f_t[s, c, k] = -scale * v_t[s, c, k]
                force[s, c, k] = f * normal[s, c, k] + f_t[s, c, k]
            # loop integral ∮ F_N dδ on clipped δ, restarted at touch-down
            dc = dl if inc else 0.0
            de = 0.5 * (f + last_force[c]) * (dc - last_delta[c])
            energy[c] = de if touch[s, c] else energy[c] + de
            e_out[s, c] = energy[c]
            in_contact[c] = inc
            last_delta[c] = dc
            last_force[c] = f


@njit(cache=True)
def contact_wrench(points, forces, refs, foot, force_out, moment_out):
    """Per sample, per foot f: F_f = Σ_{c∈f} F_c and M_f = Σ_{c∈f} (p_c − r_f) × F_c (contact.
    contact_wrench). points, forces (N, C, d), refs (N, F, d), foot (C,); outputs force_out
    (N, F, d) and moment_out (N, F, 3) (d = 2: the z moment in moment_out[..., 0])."""
    N, C, d = points.shape
    force_out[:, :, :] = 0.0
    moment_out[:, :, :] = 0.0
    for s in range(N):
        for c in range(C):
            f = foot[c]
            for k in range(d):
                force_out[s, f, k] += forces[s, c, k]
            ax, ay = points[s, c, 0] - refs[s, f, 0], points[s, c, 1] - refs[s, f, 1]
            if d == 3:
                az = points[s, c, 2] - refs[s, f, 2]
                fx, fy, fz = forces[s, c, 0], forces[s, c, 1], forces[s, c, 2]
                moment_out[s, f, 0] += ay * fz - az * fy
                moment_out[s, f, 1] += az * fx - ax * fz
                moment_out[s, f, 2] += ax * fy - ay * fx
            else:
                moment_out[s, f, 0] += ax * forces[s, c, 1] - ay * forces[s, c, 0]


@njit(cache=True)
def zmp_of_wrench(force, moment, ground_z, min_fz, point, valid):
    """Per sample the point of the plane z = ground_z where the horizontal moment vanishes,
    p = ((p_z f_x − n_y)/f_z, (p_z f_y + n_x)/f_z, p_z) where f_z > max(min_fz, 0), else NaN
    (zmp.zmp_of_wrench)."""
    lim = max(min_fz, 0.0)
    for s in range(force.shape[0]):
        fz = force[s, 2]
        valid[s] = fz > lim
        if valid[s]:
            point[s, 0] = (ground_z * force[s, 0] - moment[s, 1]) / fz
            point[s, 1] = (ground_z * force[s, 1] + moment[s, 0]) / fz
            point[s, 2] = ground_z
        else:
            point[s, 0] = point[s, 1] = point[s, 2] = np.nan
