"""Compiled live inverse dynamics of the Jansen walker (numba): the same quantities and steps as
`dynamics.walker_inverse.walker_inverse` (the numpy reference, whose module doc has the equations),
in one loop over the samples of a batch.

Inputs: lcode, lp, fcode, fp the contact laws' codes (`JansenWorld.codes`, non-latching laws only);
coef (K, 4, 7) the leg's reduced table and step its angle step (rad); per leg (L,): shaft int64,
sigma, offset, bx, lateral (m); per plate (P,): normals (P, E, 2) and offsets (P, E) of its outline
(`support.SupportPolygon`, E ≥ 3 edges, inward), centres (P, 3) m; q, u (N, 5), sdd (N, 2), pw
(N, P, 6) = [F (N), M about the plate centre (N·m)] (NaN: no reading); contact_n, min_fz (N).
Outputs written in place: foot, force (N, L, 3) m and N lab frame, measured (N, L) bool, tau, load,
inertia (N, 2) N·m and kg m², zmp (N, 3) m, valid (N,) bool, margin (N,) m, support (N,) int64,
unassigned (N,) N.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .ground import _hull, _margin
from .world import _fn, _ft

SUPPORT_TOL = 1e-12  # m², as support.support_margin's default


@njit(cache=True)
def inverse(lcode, lp, fcode, fp, coef, step, shaft, sigma, offset, bx, lateral, normals, offsets, centres,
                   q, u, sdd, pw, contact_n, min_fz, foot, force, measured, tau, load, inertia, zmp, valid, margin,
                   support, unassigned):
    N, L = q.shape[0], shaft.shape[0]
    P, E = normals.shape[0], normals.shape[1]
    K = coef.shape[0]
    two_pi = 2.0 * math.pi
    law = np.empty((L, 2))          # the contact law's (F_T, F_N) per foot
    f = np.empty((L, 2))            # the forces used: law, or plate share
    bl = np.empty((L, 2))           # R(φ) ∂ρ_l/∂s
    free = np.empty(L, dtype=np.bool_)
    on = np.empty(L, dtype=np.bool_)
    v = np.empty(7)
    px, py = np.empty(L), np.empty(L)
    hx, hy = np.empty(2 * L + 1), np.empty(2 * L + 1)
    lim = max(min_fz, 0.0)
    for s in range(N):
        c, sn = math.cos(q[s, 2]), math.sin(q[s, 2])
        qs0 = qs1 = 0.0             # Σ σ I_s′ and Σ σ G_s per shaft
        gs0 = gs1 = 0.0
        inertia[s, 0] = inertia[s, 1] = 0.0
        for l in range(L):
            th = sigma[l] * q[s, 3 + shaft[l]] + offset[l]
            x = (th % two_pi) / step
            k = min(int(x), K - 1)
            t = (x - k) * step
            for ch in range(7):
                v[ch] = ((coef[k, 0, ch] * t + coef[k, 1, ch]) * t + coef[k, 2, ch]) * t + coef[k, 3, ch]
            ax, az = bx[l] * v[3], v[4]
            rx, rz = c * ax - sn * az, sn * ax + c * az
            jx, jz = bx[l] * sigma[l] * v[5], sigma[l] * v[6]
            bl[l, 0], bl[l, 1] = c * jx - sn * jz, sn * jx + c * jz
            fx, fz = q[s, 0] + rx, q[s, 1] + rz
            foot[s, l, 0], foot[s, l, 1], foot[s, l, 2] = fx, lateral[l], fz
            sd = u[s, 3 + shaft[l]]
            vx = u[s, 0] - u[s, 2] * rz + bl[l, 0] * sd
            vz = u[s, 1] + u[s, 2] * rx + bl[l, 1] * sd
            fn = _fn(lcode, lp, -fz, -vz)
            law[l, 0], law[l, 1] = _ft(fcode, fp, fn, vx), fn
            f[l, 0], f[l, 1] = law[l, 0], fn
            free[l] = True
            if shaft[l] == 0:
                qs0 += sigma[l] * v[1]
                gs0 += sigma[l] * v[2]
                inertia[s, 0] += v[0]
            else:
                qs1 += sigma[l] * v[1]
                gs1 += sigma[l] * v[2]
                inertia[s, 1] += v[0]
        # the plates: each one's measured force shared among the free feet on it (module doc of walker_inverse)
        tf0 = tf1 = tf2 = 0.0
        tm0 = tm1 = tm2 = 0.0
        unassigned[s] = 0.0
        for p in range(P):
            ok = True
            for a in range(6):
                if not math.isfinite(pw[s, p, a]):
                    ok = False
            if not ok:
                continue
            wx, wy, wz = pw[s, p, 0], pw[s, p, 1], pw[s, p, 2]
            cx, cy, cz = centres[p, 0], centres[p, 1], centres[p, 2]
            tf0 += wx
            tf1 += wy
            tf2 += wz
            tm0 += pw[s, p, 3] + (cy * wz - cz * wy)
            tm1 += pw[s, p, 4] + (cz * wx - cx * wz)
            tm2 += pw[s, p, 5] + (cx * wy - cy * wx)
            count = 0
            sum_t = sum_n = 0.0
            for l in range(L):
                inside = False
                if free[l]:
                    smin = np.inf
                    for e in range(E):
                        smin = min(smin, foot[s, l, 0] * normals[p, e, 0] + lateral[l] * normals[p, e, 1]
                                   - offsets[p, e])
                    inside = smin >= 0.0
                on[l] = inside
                if inside:
                    count += 1
                    sum_t += law[l, 0]
                    sum_n += law[l, 1]
            if count == 0:
                unassigned[s] += wz
                continue
            dt, dn = wx - sum_t, wz - sum_n
            for l in range(L):
                if on[l]:
                    share = law[l, 1] / sum_n if sum_n > 0 else 1.0 / count
                    f[l, 0] += share * dt
                    f[l, 1] += share * dn
                    free[l] = False
        m = 0
        ld0 = ld1 = 0.0
        for l in range(L):
            ft, fn = f[l, 0], f[l, 1]
            force[s, l, 0], force[s, l, 1], force[s, l, 2] = ft, 0.0, fn
            measured[s, l] = not free[l]
            if free[l]:
                rx_, ry_, rz_ = foot[s, l, 0], lateral[l], foot[s, l, 2]
                tf0 += ft
                tf2 += fn
                tm0 += ry_ * fn
                tm1 += rz_ * ft - rx_ * fn
                tm2 += -ry_ * ft
            w = bl[l, 0] * ft + bl[l, 1] * fn
            if shaft[l] == 0:
                ld0 += w
            else:
                ld1 += w
            if fn > contact_n:
                px[m], py[m] = foot[s, l, 0], lateral[l]
                m += 1
        sd0, sd1 = u[s, 3], u[s, 4]
        load[s, 0] = -(-(0.5 * qs0 * sd0 * sd0 + gs0) + ld0)
        load[s, 1] = -(-(0.5 * qs1 * sd1 * sd1 + gs1) + ld1)
        tau[s, 0] = inertia[s, 0] * sdd[s, 0] + load[s, 0]
        tau[s, 1] = inertia[s, 1] * sdd[s, 1] + load[s, 1]
        # ZMP of the total ground wrench on z = 0 (zmp.zmp_of_wrench)
        valid[s] = tf2 > lim
        if valid[s]:
            zmp[s, 0], zmp[s, 1], zmp[s, 2] = -tm1 / tf2, tm0 / tf2, 0.0
        else:
            zmp[s, 0] = zmp[s, 1] = zmp[s, 2] = np.nan
        # support polygon of the loaded feet and the ZMP's margin (support.support_margin)
        k = _hull(px, py, m, SUPPORT_TOL, hx, hy) if m else 0
        support[s] = k
        margin[s] = _margin(zmp[s, 0], zmp[s, 1], hx, hy, k)


@njit(cache=True)
def interp(ts, vs, t, out, known):
    """An input's samples (times ts (M,) ns ascending, M ≥ 1, values vs (M, W)) at the times t (N,) ns:
    linear interpolation of every column between the bracketing samples, held past the newest, NaN
    before the oldest (the numpy path of `service_torques._Input.at`); known (N,) = ts[0] ≤ t ≤ ts[-1].
    Returns the index of the newest sample used: the first at or after t[-1], else the last."""
    M, W = vs.shape
    for i in range(t.shape[0]):
        ti = t[i]
        known[i] = ts[0] <= ti <= ts[M - 1]
        if ti < ts[0]:
            for c in range(W):
                out[i, c] = np.nan
            continue
        if M == 1:
            for c in range(W):
                out[i, c] = vs[0, c]
            continue
        k = np.searchsorted(ts, ti, side="right")
        k = min(max(k, 1), M - 1)
        w = (ti - ts[k - 1]) / (ts[k] - ts[k - 1])
        w = min(max(w, 0.0), 1.0)
        for c in range(W):
            out[i, c] = vs[k - 1, c] + w * (vs[k, c] - vs[k - 1, c])
    return min(np.searchsorted(ts, t[t.shape[0] - 1], side="left"), M - 1)
