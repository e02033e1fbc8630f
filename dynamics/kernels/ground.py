"""Compiled per-sample ground stage (numba): support polygon and stability margin, contact forces
with latching, contact wrenches, the ZMP of a wrench, and the plate inverse dynamics after the tree
kernels.

Each kernel follows the numpy reference of its module (support.py, contact.py, zmp.py, plate_id.py)
step by step, looped over samples in compiled code, outputs written into arrays the caller
allocates. Lab frame, z up, SI units.
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


@njit(cache=True, inline="always")
def _margin(x, y, hx, hy, k):
    """Signed margin of (x, y) to the convex polygon hx[:k], hy[:k] (CCW; support.stability_margin):
    NaN for k = 0 or a non-finite point, −distance for a point or a segment, min edge distance
    inside, −Euclidean distance outside."""
    if k == 0 or not (math.isfinite(x) and math.isfinite(y)):
        return np.nan
    if k == 1:
        return -math.hypot(x - hx[0], y - hy[0])
    if k == 2:
        return -_segment_distance(x, y, hx[0], hy[0], hx[1], hy[1])
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
        return smin
    d = np.inf
    for e in range(k):
        d = min(d, _segment_distance(x, y, hx[e], hy[e], hx[(e + 1) % k], hy[(e + 1) % k]))
    return -d


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
        margin[s] = _margin(p[s, 0], p[s, 1], hx, hy, k)
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


@njit(cache=True, inline="always")
def _normal_step(lcode, lp, dl, dd, c, in_contact, v_latched):
    """One contact's episode bookkeeping and normal force at one sample (contact.contact_forces):
    the latch δ̇⁻ = max(δ̇, v_min) at touch-down, F_N ≥ 0 by the law. lp = (K, n, damping, v_min,
    χ̂); reads and updates in_contact[c], v_latched[c]. Returns (F_N, in contact, touch, lift)."""
    K, n, damping, v_min, chi = lp[0], lp[1], lp[2], lp[3], lp[4]
    inc = dl > 0.0                           # a NaN δ (marker gap) is no contact
    prev = in_contact[c]
    touch = inc and not prev
    lift = prev and not inc
    if touch:                                # latch δ̇⁻ = max(δ̇, v_min) (NaN stays NaN)
        v_latched[c] = dd if (dd > v_min or dd != dd) else v_min
    if not inc:
        v_latched[c] = np.nan
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
    in_contact[c] = inc
    return f, inc, touch, lift


@njit(cache=True, inline="always")
def _energy_step(f, dl, inc, touch, c, energy, last_delta, last_force):
    """The loop integral ∮ F_N dδ on clipped δ, restarted at touch-down (trapezoid); updates the
    state of contact c and returns the episode's energy so far (J)."""
    dc = dl if inc else 0.0
    de = 0.5 * (f + last_force[c]) * (dc - last_delta[c])
    energy[c] = de if touch else energy[c] + de
    last_delta[c] = dc
    last_force[c] = f
    return energy[c]


@njit(cache=True, inline="always")
def _friction_scale(fcode, fp, f, speed):
    """μ(|v_T|) F_N / |v_T| (1 where v_T = 0): F_T = −scale v_T (contact.friction_force)."""
    if fcode == NO_FRICTION:
        return 0.0
    return _mu(fcode, fp, speed) * f / (speed if speed > 0.0 else 1.0)


@njit(cache=True)
def contact_forces(lcode, lp, fcode, fp, delta, ddot, v_t, normal, in_contact, v_latched, energy, last_delta,
                   last_force, f_n, f_t, force, v_lat, e_out, touch, lift):
    """Contact forces of C points over N samples with per-episode latching (contact.contact_forces).

    lp = (K, n, damping, v_min, χ̂); delta, ddot (N, C); v_t, normal (N, C, d); the state arrays
    (C,) are read and updated in place (the state after the last sample); outputs f_n, v_lat,
    e_out (N, C), f_t, force (N, C, d), touch, lift (N, C) bool."""
    N, C = delta.shape
    d = v_t.shape[2]
    for s in range(N):
        for c in range(C):
            dl = delta[s, c]
            f, inc, touch[s, c], lift[s, c] = _normal_step(lcode, lp, dl, ddot[s, c], c, in_contact, v_latched)
            v_lat[s, c] = v_latched[c]
            f_n[s, c] = f
            speed2 = 0.0
            for k in range(d):
                speed2 += v_t[s, c, k] * v_t[s, c, k]
            scale = _friction_scale(fcode, fp, f, math.sqrt(speed2))
            for k in range(d):
                f_t[s, c, k] = -scale * v_t[s, c, k]
                force[s, c, k] = f * normal[s, c, k] + f_t[s, c, k]
            e_out[s, c] = _energy_step(f, dl, inc, touch[s, c], c, energy, last_delta, last_force)


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


@njit(cache=True, inline="always")
def _zmp_point(fx, fy, fz, nx, ny, ground_z, lim, out):
    """out[:3] = the point of z = ground_z where the horizontal moment (nx, ny) of force f vanishes,
    ((p_z f_x − n_y)/f_z, (p_z f_y + n_x)/f_z, p_z), where f_z > lim, else NaN; returns valid."""
    if fz > lim:
        out[0] = (ground_z * fx - ny) / fz
        out[1] = (ground_z * fy + nx) / fz
        out[2] = ground_z
        return True
    out[0] = out[1] = out[2] = np.nan
    return False


@njit(cache=True)
def zmp_of_wrench(force, moment, ground_z, min_fz, point, valid):
    """Per sample the point of the plane z = ground_z where the horizontal moment vanishes,
    p = ((p_z f_x − n_y)/f_z, (p_z f_y + n_x)/f_z, p_z) where f_z > max(min_fz, 0), else NaN
    (zmp.zmp_of_wrench)."""
    lim = max(min_fz, 0.0)
    for s in range(force.shape[0]):
        valid[s] = _zmp_point(force[s, 0], force[s, 1], force[s, 2], moment[s, 0], moment[s, 1], ground_z, lim, point[s])


@njit(cache=True)
def plate_id(Rw, pw, S, tau_free, masses, coms, point_segment, point_local, point_foot, below_weight,
             plate_w, plate_loaded, outline_x, outline_y, outline_k, surface, height_tol, edge_tol,
             gravity, weights, on, pflags, straddling, tau, jflags, vec, foot_wrench):
    """The per-sample part of plate_id.plate_inverse_dynamics after the tree kernels (its module
    doc): foot points from the segment placements Rw (N, nseg, 3, 3), pw (N, nseg, 3); plate
    assignment (a point is on plate p when its margin to the outline is ≥ −edge_tol and it lies
    less than height_tol above the surface; a plate with several feet goes to the foot of the
    point nearest its COP); the plate wrenches per foot; the required ground wrench from the
    ground-free τ (free-flyer rows, base frame) and lab subspaces S (N, nv, 6); bottom-up and
    top-down torques, residual about the CoM, CoM accelerations. plate_w (N, P, 6): each plate's
    force and moment about the lab origin; outputs as PlateID/Assignment, several in one array
    (fewer arrays for a one-sample call to allocate and pass): pflags (2, N, P) = shared,
    unassigned; tau (3, N, nv) = bottom-up, top-down, their difference; jflags (2, N, nv) = plate
    below, indeterminate; vec (5, N, 3) = residual force, residual moment about the CoM, CoM
    acceleration from the kinematics and from the plates, CoM."""
    shared, unassigned = pflags[0], pflags[1]
    tau_bu, tau_td, disagreement = tau[0], tau[1], tau[2]
    plate_below, indeterminate = jflags[0], jflags[1]
    res_f, res_m, com_acc_kin, com_acc_plates, com = vec[0], vec[1], vec[2], vec[3], vec[4]
    N, K = Rw.shape[0], point_segment.shape[0]
    P, F = plate_w.shape[1], below_weight.shape[1]
    nv = S.shape[1]
    mass = 0.0
    for i in range(masses.shape[0]):
        mass += masses[i]
    pts = np.empty((K, 3))
    inside = np.empty((P, K), dtype=np.bool_)
    wf = np.empty((F, 6))
    wreq, wmeas, wapp, wb = np.empty(6), np.empty(6), np.empty(6), np.empty(6)
    for s in range(N):
        for k in range(K):                       # foot points in the lab
            i = point_segment[k]
            for r in range(3):
                pts[k, r] = pw[s, i, r] + Rw[s, i, r, 0] * point_local[k, 0] + Rw[s, i, r, 1] * point_local[k, 1] \
                    + Rw[s, i, r, 2] * point_local[k, 2]
        for p in range(P):                       # assignment
            count = 0
            for f in range(F):
                on[s, p, f] = False
            for k in range(K):
                m = _margin(pts[k, 0], pts[k, 1], outline_x[p], outline_y[p], outline_k[p])
                inside[p, k] = m >= -edge_tol and pts[k, 2] - surface[p] < height_tol
                if inside[p, k]:
                    on[s, p, point_foot[k]] = True
            for f in range(F):
                count += on[s, p, f]
            loaded = plate_loaded[s, p]
            shared[s, p] = loaded and count > 1
            unassigned[s, p] = loaded and count == 0
            for f in range(F):
                weights[s, p, f] = 1.0 if (on[s, p, f] and loaded and count == 1) else 0.0
            if shared[s, p]:                     # the foot of the point nearest the plate's COP
                fz = plate_w[s, p, 2]
                cx = (surface[p] * plate_w[s, p, 0] - plate_w[s, p, 4]) / fz if fz > 0.0 else np.nan
                cy = (surface[p] * plate_w[s, p, 1] + plate_w[s, p, 3]) / fz if fz > 0.0 else np.nan
                best, best_d = -1, np.inf
                for k in range(K):
                    if not inside[p, k]:
                        continue
                    dist = math.hypot(pts[k, 0] - cx, pts[k, 1] - cy)
                    if best < 0 or dist < best_d:    # the first minimum (the first point if the COP is NaN)
                        best, best_d = k, dist
                weights[s, p, point_foot[best]] = 1.0
        for f in range(F):
            n_on = 0
            for p in range(P):
                n_on += weights[s, p, f] > 0.0
            straddling[s, f] = n_on > 1
        # wrenches: per foot, measured, applied, required
        for r in range(6):
            wmeas[r] = 0.0
            wapp[r] = 0.0
            for f in range(F):
                wf[f, r] = 0.0
        for p in range(P):
            for r in range(6):
                wmeas[r] += plate_w[s, p, r]
            for f in range(F):
                if weights[s, p, f] != 0.0:
                    for r in range(6):
                        wf[f, r] += weights[s, p, f] * plate_w[s, p, r]
        for f in range(F):
            for r in range(6):
                foot_wrench[s, f, r] = wf[f, r]
                wapp[r] += wf[f, r]
        for r in range(3):
            wreq[r] = Rw[s, 0, r, 0] * tau_free[s, 0] + Rw[s, 0, r, 1] * tau_free[s, 1] + Rw[s, 0, r, 2] * tau_free[s, 2]
            wreq[3 + r] = Rw[s, 0, r, 0] * tau_free[s, 3] + Rw[s, 0, r, 1] * tau_free[s, 4] + Rw[s, 0, r, 2] * tau_free[s, 5]
        p0, p1, p2 = pw[s, 0, 0], pw[s, 0, 1], pw[s, 0, 2]
        wreq[3] += p1 * wreq[2] - p2 * wreq[1]
        wreq[4] += p2 * wreq[0] - p0 * wreq[2]
        wreq[5] += p0 * wreq[1] - p1 * wreq[0]
        # CoM
        c0, c1, c2 = 0.0, 0.0, 0.0
        for i in range(masses.shape[0]):
            for r in range(3):
                x = masses[i] * (pw[s, i, r] + Rw[s, i, r, 0] * coms[i, 0] + Rw[s, i, r, 1] * coms[i, 1]
                                 + Rw[s, i, r, 2] * coms[i, 2])
                if r == 0:
                    c0 += x
                elif r == 1:
                    c1 += x
                else:
                    c2 += x
        c0, c1, c2 = c0 / mass, c1 / mass, c2 / mass
        com[s, 0], com[s, 1], com[s, 2] = c0, c1, c2
        # joints: plate wrench below, bottom-up and top-down torques
        for k in range(nv):
            below_any, above_any = False, False
            for r in range(6):
                wb[r] = 0.0
            for f in range(F):
                loaded_foot = False
                for p in range(P):
                    loaded_foot = loaded_foot or weights[s, p, f] > 0.0
                if loaded_foot:
                    if below_weight[k, f] > 0.0:
                        below_any = True
                    else:
                        above_any = True
                for r in range(6):
                    wb[r] += below_weight[k, f] * wf[f, r]
            plate_below[s, k] = below_any
            indeterminate[s, k] = below_any and above_any
            x, y = 0.0, 0.0
            for r in range(6):
                x += S[s, k, r] * wb[r]
                y += S[s, k, r] * (wreq[r] - (wapp[r] - wb[r]))
            tau_bu[s, k] = tau_free[s, k] - x
            tau_td[s, k] = tau_free[s, k] - y if below_any else tau_free[s, k]
            disagreement[s, k] = tau_bu[s, k] - tau_td[s, k]
        for r in range(3):
            res_f[s, r] = wmeas[r] - wreq[r]
            res_m[s, r] = wmeas[3 + r] - wreq[3 + r]
        f0, f1, f2 = res_f[s, 0], res_f[s, 1], res_f[s, 2]
        res_m[s, 0] -= c1 * f2 - c2 * f1
        res_m[s, 1] -= c2 * f0 - c0 * f2
        res_m[s, 2] -= c0 * f1 - c1 * f0
        for r in range(3):
            com_acc_kin[s, r] = wreq[r] / mass + gravity[r]
            com_acc_plates[s, r] = wmeas[r] / mass + gravity[r]


# Layout of one plate's constants (forceplate.Plate._kernel_consts; module doc of forceplate.py):
# the linear raw -> 16-column map (types 2-4, channels x 16, rows zero-padded to 8), R (3, 3) row
# by row, the surface centre, FPCOPPOLY, the channel range low / high, and [F, M] -> [F, n, −n_y,
# n_x] about the lab origin (6 x 8). PLATE_META: (type, n_channels, has a range, has FPCOPPOLY).
PLATE_MAP, PLATE_R, PLATE_CENTRE, PLATE_POLY, PLATE_LO, PLATE_HI, PLATE_ORIGIN, PLATE_WIDTH = \
    0, 128, 137, 140, 152, 160, 168, 216


@njit(cache=True, inline="always")
def _plate_finish(cx, cy, w, k, valid, out):
    """out (12,) from the 16 columns w and the plate-axes COP (cx, cy): lab force, moment about the
    surface centre, COP = R (cx, cy, 0) + centre, free moment T_z R ẑ with T_z = M_s,z − (cx F_y −
    cy F_x); a sample whose outputs are not finite is all NaN, invalid. Returns valid."""
    tz = w[5] - (cx * w[14] + cy * w[15])
    for i in range(3):
        out[i], out[3 + i] = w[6 + i], w[9 + i]
        out[6 + i] = cx * k[PLATE_R + 3 * i] + cy * k[PLATE_R + 3 * i + 1] + k[PLATE_CENTRE + i]
        out[9 + i] = tz * k[PLATE_R + 3 * i + 2]
    total = out[0] + out[1] + out[2] + (out[3] + out[4] + out[5])
    if valid:
        total += out[9] + out[10] + out[11]
    if not math.isfinite(total):    # a non-finite raw value, or an overflow
        for i in range(12):
            out[i] = np.nan
        return False
    return valid


@njit(cache=True, inline="always")
def _plate_saturated(r, k, meta):
    """Any of the raw channels r at or beyond the plate's range (never without a range)."""
    if meta[2]:
        for i in range(meta[1]):
            if r[i] <= k[PLATE_LO + i] or r[i] >= k[PLATE_HI + i]:
                return True
    return False


@njit(cache=True, inline="always")
def _plate_type1(r, off, k, threshold, w, out):
    """Type 1 at one sample: M_s = (cx, cy, 0) × F + (0, 0, Tz), lab = R (plate); returns valid."""
    fx, fy, fz, cx, cy = r[0] - off[0], r[1] - off[1], r[2] - off[2], r[3] - off[3], r[4] - off[4]
    w[0], w[1], w[2] = fx, fy, fz
    w[3], w[4], w[5] = cy * fz, -cx * fz, cx * fy - cy * fx + (r[5] - off[5])
    for i in range(3):
        R0, R1, R2 = k[PLATE_R + 3 * i], k[PLATE_R + 3 * i + 1], k[PLATE_R + 3 * i + 2]
        w[6 + i] = w[0] * R0 + w[1] * R1 + w[2] * R2
        w[9 + i] = w[3] * R0 + w[4] * R1 + w[5] * R2
    w[12], w[13], w[14], w[15] = -w[4], w[3], fy, -fx
    valid = w[8] > threshold and w[2] != 0.0
    if not valid:
        cx = cy = np.nan
    return _plate_finish(cx, cy, w, k, valid, out)


@njit(cache=True, inline="always")
def _plate_linear(r, off, k, meta, threshold, w, out, nch):
    """Types 2-4 at one sample (nch channels, a constant where it is inlined: the compiler unrolls
    the sums, ~2x per sample): w = (r − off) @ map, COP = (−M_s,y, M_s,x) / F_z, the FPCOPPOLY
    correction; returns valid."""
    for j in range(16):
        acc = 0.0
        for i in range(nch):
            acc += (r[i] - off[i]) * k[PLATE_MAP + 16 * i + j]
        w[j] = acc
    valid = w[8] > threshold and w[2] != 0.0
    inv = 1.0 / (w[2] if valid else np.nan)
    cx, cy = w[12] * inv, w[13] * inv
    if meta[3]:
        p = k[PLATE_POLY:PLATE_POLY + 12]
        x2, y2 = cx * cx, cy * cy
        dx = (p[0] * y2 * y2 + p[1] * y2 + p[2]) * x2 * cx + (p[3] * y2 * y2 + p[4] * y2 + p[5]) * cx
        dy = (p[6] * x2 * x2 + p[7] * x2 + p[8]) * y2 * cy + (p[9] * x2 * x2 + p[10] * x2 + p[11]) * cy
        cx, cy = cx - dx, cy - dy
    return _plate_finish(cx, cy, w, k, valid, out)


@njit(cache=True, inline="always")
def _plate_sample(r, off, k, meta, threshold, w, out):
    """One plate at one sample (forceplate.process): raw channels r, offset off, constants k,
    meta; w (16,) scratch: the columns of forceplate._wrench. out (12,) = lab force, moment about
    the surface centre, COP, free moment; returns (valid, saturated)."""
    sat = _plate_saturated(r, k, meta)
    if meta[0] == 1:
        return _plate_type1(r, off, k, threshold, w, out), sat
    if meta[1] == 6:
        return _plate_linear(r, off, k, meta, threshold, w, out, 6), sat
    return _plate_linear(r, off, k, meta, threshold, w, out, 8), sat


@njit(cache=True)
def plate_process(raw, off, k, meta, threshold, out, valid, saturated):
    """forceplate.process of one plate over N samples: raw (N, n_channels) SI, off (8,), k, meta
    (the layout above); out (N, 12) = lab force N, moment N·m about the surface centre, COP m, free
    moment N·m; valid, saturated (N,) bool. The plate type's branch is taken once, outside the loop."""
    w = np.empty(16)
    N = raw.shape[0]
    for s in range(N):
        saturated[s] = _plate_saturated(raw[s], k, meta)
    if meta[0] == 1:
        for s in range(N):
            valid[s] = _plate_type1(raw[s], off, k, threshold, w, out[s])
    elif meta[1] == 6:
        for s in range(N):
            valid[s] = _plate_linear(raw[s], off, k, meta, threshold, w, out[s], 6)
    else:
        for s in range(N):
            valid[s] = _plate_linear(raw[s], off, k, meta, threshold, w, out[s], 8)


@njit(cache=True, inline="always")
def _to_origin(fm, k, tot):
    """tot (8,) += [F, M] @ the plate's [F, M] -> [F, n, −n_y, n_x] about the lab origin (forceplate.
    combine: F k[F rows], then M k[M rows]); fm (6,) lab force and moment about the surface centre."""
    for j in range(8):
        tot[j] += fm[0] * k[PLATE_ORIGIN + j] + fm[1] * k[PLATE_ORIGIN + 8 + j] + fm[2] * k[PLATE_ORIGIN + 16 + j]
        tot[j] += fm[3] * k[PLATE_ORIGIN + 24 + j] + fm[4] * k[PLATE_ORIGIN + 32 + j] + fm[5] * k[PLATE_ORIGIN + 40 + j]


@njit(cache=True, inline="always")
def _combined_cop(tot, threshold, pz):
    """(valid, COP x, y) of the total [F, n, −n_y, n_x] (forceplate._combined): valid where F_z >
    threshold, p = (p_z F_xy + (−n_y, n_x)) / F_z, NaN (no division) where not valid."""
    ok = tot[2] > threshold
    d = tot[2] if ok else np.nan
    inv = math.copysign(np.inf, d) if d == 0.0 else 1.0 / d    # numpy's 1/±0 (a threshold below 0)
    return ok, (pz * tot[0] + tot[6]) * inv, (pz * tot[1] + tot[7]) * inv


@njit(cache=True)
def plate_combine(w, k, threshold, pz, out, valid):
    """forceplate.combine / combine_wrenches over N samples: w (N, 6 K) = [F_1, M_1, F_2, ...] lab
    force and moment about each plate's surface centre, k (K, PLATE_WIDTH) the plates' constants;
    out (N, 9) = total force, moment about the lab origin, COP on z = pz; valid (N,): F_z > threshold.
    As forceplate._combined: when the F_z column sums to a non-finite value, every sample whose
    total or COP is not finite is NaN and invalid."""
    N, K = w.shape[0], k.shape[0]
    tot = np.empty(8)
    fz_sum = 0.0
    for s in range(N):
        for j in range(8):
            tot[j] = 0.0
        for p in range(K):
            _to_origin(w[s, 6 * p:6 * p + 6], k[p], tot)
        valid[s], out[s, 6], out[s, 7] = _combined_cop(tot, threshold, pz)
        for j in range(6):
            out[s, j] = tot[j]
        fz_sum += tot[2]
    if not math.isfinite(fz_sum):       # a NaN plate, or an overflow
        for s in range(N):
            chk = out[s, 0] + out[s, 1] + out[s, 2] + out[s, 3] + out[s, 4] + out[s, 5]
            if not math.isfinite(chk + ((out[s, 6] + out[s, 7]) if valid[s] else 0.0)):
                for j in range(8):
                    out[s, j] = np.nan
                valid[s] = False
    for s in range(N):
        out[s, 8] = pz if valid[s] else np.nan


@njit(cache=True)
def stage(lcode, lp, fcode, fp, plane, pos, vel, in_contact, v_latched, energy, last_delta, last_force,
          par, cent, raw, off, pk, pmeta, contact, flags, wrench, zmp, margin, n_vertices, plates, plate_flags,
          combined, valid):
    """The ground stage of N samples in one loop (ground_stage.GroundStage; each step as its module):

    contact   δ = (point − P)·n̂, δ̇ = −ṙ·n̂, v_T = ṙ − (ṙ·n̂) n̂ of C points pos, vel (N, C, 3) against
              the plane (6,) = (point, n̂); the law (lcode, lp, fcode, fp as contact._law_codes) with
              latching, state (C,) carried in place; contact (N, C, 6) = F_N, F (3), δ̇⁻, episode
              energy; flags (N, C, 3) = in contact, touch-down, lift-off;
    wrench    (N, 6) = Σ F_c and Σ p_c × F_c about the lab origin;
    zmp       (N, 6) = its ZMP on z = par[0] (f_z > par[1]), and the kinematic ZMP of cent (N, 9) =
              (c, Ṗ, L̇_G) with mass par[3] (skipped, NaN, when par[3] ≤ 0), g par[4] (f_z ≥ par[5] M g);
    margin    (N,) m of the contact ZMP to the support polygon of the points in contact (tol par[2]
              m²); n_vertices (N,);
    plates    raw (N, P, 8) channels, offsets off (P, 8), constants pk (P, PLATE_WIDTH) and pmeta
              (P, 4), threshold par[6] N: plates (N, P, 12), plate_flags (N, P, 2) (valid, saturated);
              combined (N, 9) = F, moment about the origin, COP on z = par[7]
              (valid: F_z > par[6]);
    valid     (N, 3) bool: contact ZMP, kinematic ZMP, combined COP."""
    N, C = pos.shape[0], pos.shape[1]
    P = raw.shape[1]
    ground_z, min_fz, tol, mass, g, min_fraction, threshold, pz = \
        par[0], par[1], par[2], par[3], par[4], par[5], par[6], par[7]
    n0, n1, n2 = plane[3], plane[4], plane[5]
    px, py = np.empty(C), np.empty(C)
    hx, hy = np.empty(2 * C + 1), np.empty(2 * C + 1)
    w = np.empty(16)
    tot = np.empty(8)
    for s in range(N):
        F0 = F1 = F2 = M0 = M1 = M2 = 0.0
        m = 0
        for c in range(C):
            x, y, z = pos[s, c, 0], pos[s, c, 1], pos[s, c, 2]
            dl = (plane[0] - x) * n0 + (plane[1] - y) * n1 + (plane[2] - z) * n2
            vn = vel[s, c, 0] * n0 + vel[s, c, 1] * n1 + vel[s, c, 2] * n2
            t0, t1, t2 = vel[s, c, 0] - vn * n0, vel[s, c, 1] - vn * n1, vel[s, c, 2] - vn * n2
            f, inc, touch, lift = _normal_step(lcode, lp, dl, -vn, c, in_contact, v_latched)
            scale = _friction_scale(fcode, fp, f, math.sqrt(t0 * t0 + t1 * t1 + t2 * t2))
            fx, fy, fz = f * n0 - scale * t0, f * n1 - scale * t1, f * n2 - scale * t2
            contact[s, c, 0], contact[s, c, 1], contact[s, c, 2], contact[s, c, 3] = f, fx, fy, fz
            contact[s, c, 4] = v_latched[c]
            contact[s, c, 5] = _energy_step(f, dl, inc, touch, c, energy, last_delta, last_force)
            flags[s, c, 0], flags[s, c, 1], flags[s, c, 2] = inc, touch, lift
            F0 += fx
            F1 += fy
            F2 += fz
            M0 += y * fz - z * fy
            M1 += z * fx - x * fz
            M2 += x * fy - y * fx
            if inc:     # δ > 0 needs finite x, y (a NaN coordinate makes δ NaN: no contact)
                px[m], py[m] = x, y
                m += 1
        wrench[s, 0], wrench[s, 1], wrench[s, 2], wrench[s, 3], wrench[s, 4], wrench[s, 5] = F0, F1, F2, M0, M1, M2
        valid[s, 0] = _zmp_point(F0, F1, F2, M0, M1, ground_z, max(min_fz, 0.0), zmp[s, 0:3])
        if mass > 0.0:      # f = Ṗ + M g e_z, n_O = L̇_G + c × f
            c0, c1, c2 = cent[s, 0], cent[s, 1], cent[s, 2]
            f0, f1, f2 = cent[s, 3], cent[s, 4], cent[s, 5] + mass * g
            valid[s, 1] = _zmp_point(f0, f1, f2, cent[s, 6] + (c1 * f2 - c2 * f1), cent[s, 7] + (c2 * f0 - c0 * f2),
                                     ground_z, max(min_fraction * mass * g, 0.0), zmp[s, 3:6])
        else:
            zmp[s, 3] = zmp[s, 4] = zmp[s, 5] = np.nan
            valid[s, 1] = False
        k = _hull(px, py, m, tol, hx, hy) if m else 0
        n_vertices[s] = k
        margin[s] = _margin(zmp[s, 0], zmp[s, 1], hx, hy, k)
        for j in range(8):
            tot[j] = 0.0
        for p in range(P):
            plate_flags[s, p, 0], plate_flags[s, p, 1] = _plate_sample(raw[s, p], off[p], pk[p], pmeta[p], threshold,
                                                                       w, plates[s, p])
            _to_origin(plates[s, p], pk[p], tot)
        ok, cx, cy = _combined_cop(tot, threshold, pz)
        ok = ok and P > 0
        if not math.isfinite(tot[2]):   # a NaN plate, or an overflow (forceplate._combined)
            chk = tot[0] + tot[1] + tot[2] + tot[3] + tot[4] + tot[5] + ((cx + cy) if ok else 0.0)
            if not math.isfinite(chk):
                for j in range(6):
                    tot[j] = np.nan
                cx = cy = np.nan
                ok = False
        for j in range(6):
            combined[s, j] = tot[j]
        combined[s, 6], combined[s, 7], combined[s, 8] = cx, cy, (pz if ok else np.nan)
        valid[s, 2] = ok
