"""Compiled glue of `human15_markers.marker_inverse_dynamics` (numba): the per-sample steps around the
compiled plate inverse dynamics that its numpy path does with ~60 array operations a call — what a
live 2-sample batch pays in call overhead, not in arithmetic.

`fill`: which coordinates are known and the finite input the dynamics kernels take (the numpy path's
`_filled`); `finish`: the feet on the bare floor (`_on_floor`), which feet's ground load is known and
the torques kept where computable (`_masked`, module doc step 4 of human15_markers). Lab frame, SI;
time first; outputs written into arrays the caller allocates.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .ground import _margin


@njit(cache=True)
def fill(q, v, a, q_segment, v_segment, neutral, fin, qf, vf, af):
    """q (N, nq), v, a (N, nv) (NaN where not measured); q_segment (nq,), v_segment (nv,) int64: the
    segment whose joint each column belongs to; neutral (nq,) the neutral posture. Out: fin (N, nv)
    bool, coordinate k known (v_k and a_k finite, every q of its joint finite); qf (N, nq): q, but
    a joint with a coordinate not known at its neutral posture; vf, af (N, nv): v, a, 0 where not
    known."""
    n, nq, nv = q.shape[0], q.shape[1], v.shape[1]
    ns = 0
    for c in range(nq):
        ns = max(ns, q_segment[c] + 1)
    for c in range(nv):
        ns = max(ns, v_segment[c] + 1)
    bad = np.empty(ns, dtype=np.bool_)
    for i in range(n):
        for s in range(ns):
            bad[s] = False
        for c in range(nq):             # a joint with a q not finite
            if not math.isfinite(q[i, c]):
                bad[q_segment[c]] = True
        for c in range(nv):
            fin[i, c] = math.isfinite(v[i, c]) and math.isfinite(a[i, c]) and not bad[v_segment[c]]
        for s in range(ns):
            bad[s] = False
        for c in range(nv):             # a joint with a coordinate not known
            if not fin[i, c]:
                bad[v_segment[c]] = True
        for c in range(nq):
            qf[i, c] = neutral[c] if bad[q_segment[c]] else q[i, c]
        for c in range(nv):
            vf[i, c] = v[i, c] if fin[i, c] else 0.0
            af[i, c] = a[i, c] if fin[i, c] else 0.0


@njit(cache=True)
def finish(Rw, pw, point_segment, point_local, point_foot, outline_x, outline_y, outline_k, surface, height_tol,
           edge_tol, weights, on, straddling, shared, loaded, swing, fin, need, below, tau_bu, tau_td, res_f, res_m,
           known, out_bu, out_td, out_f, out_m):
    """After the plate inverse dynamics (plate_id's compiled stage) of the filled input: Rw (N, nseg, 3, 3),
    pw (N, nseg, 3) the segment placements; point_segment (C,), point_local (C, 3) m, point_foot (C,): the
    feet's contact points; outline_x, outline_y (P, K), outline_k (P,): the plates' outlines; surface: their
    mean surface height, m; weights, on (N, P, F), straddling (N, F), shared (N, P): the assignment;
    loaded (N, P); swing (N, F) bool: known in swing; fin (N, nv); need (nv, nv), below (nv, F) bool as in
    `_Layout`; tau_bu, tau_td (N, nv), res_f, res_m (N, 3) of the plate inverse dynamics.

    Out: known (N, F): the foot's ground load is known — assigned to it and not straddling nor on a shared
    plate, or on a plate that carries no load and assigned none; not with a contact point on the bare floor
    (less than height_tol above the surface, outside every outline grown by edge_tol: the margin of
    `plate_id`'s compiled assignment); or known in swing and assigned none. out_bu (N, nv): tau_bu where
    the coordinates `need` and the feet `below` are known; out_td, out_f, out_m: where everything is;
    NaN elsewhere."""
    n, n_p, n_f = weights.shape[0], weights.shape[1], weights.shape[2]
    nv, n_c = fin.shape[1], point_segment.shape[0]
    floor = np.empty(n_f, dtype=np.bool_)
    for i in range(n):
        for f in range(n_f):
            floor[f] = False
        for c in range(n_c):            # contact points on the bare floor
            s = point_segment[c]
            x = pw[i, s, 0] + Rw[i, s, 0, 0] * point_local[c, 0] + Rw[i, s, 0, 1] * point_local[c, 1] \
                + Rw[i, s, 0, 2] * point_local[c, 2]
            y = pw[i, s, 1] + Rw[i, s, 1, 0] * point_local[c, 0] + Rw[i, s, 1, 1] * point_local[c, 1] \
                + Rw[i, s, 1, 2] * point_local[c, 2]
            z = pw[i, s, 2] + Rw[i, s, 2, 0] * point_local[c, 0] + Rw[i, s, 2, 1] * point_local[c, 1] \
                + Rw[i, s, 2, 2] * point_local[c, 2]
            if not z - surface < height_tol:
                continue
            on_any = False
            for p in range(n_p):
                if _margin(x, y, outline_x[p], outline_y[p], outline_k[p]) >= -edge_tol:
                    on_any = True
                    break
            if not on_any:
                floor[point_foot[c]] = True
        every = True
        for f in range(n_f):
            assigned, bad, unloaded = False, straddling[i, f], False
            for p in range(n_p):
                assigned = assigned or weights[i, p, f] > 0.0
                bad = bad or (shared[i, p] and on[i, p, f])
                unloaded = unloaded or (on[i, p, f] and not loaded[i, p])
            k = ((assigned and not bad) or (unloaded and not assigned)) and not floor[f]
            known[i, f] = k or (swing[i, f] and not assigned)
            every = every and known[i, f]
        for k in range(nv):
            every = every and fin[i, k]
        for k in range(nv):
            ok = True
            for j in range(nv):
                if need[k, j] and not fin[i, j]:
                    ok = False
                    break
            if ok:
                for f in range(n_f):
                    if below[k, f] and not known[i, f]:
                        ok = False
                        break
            out_bu[i, k] = tau_bu[i, k] if ok else np.nan
            out_td[i, k] = tau_td[i, k] if every else np.nan
        for r in range(3):
            out_f[i, r] = res_f[i, r] if every else np.nan
            out_m[i, r] = res_m[i, r] if every else np.nan
