"""Support polygon and stability margin (methods.md d.5).

The support polygon is the convex hull of the ground projections (x, y of the lab frame, z up) of
the contact points that are in contact (a foot's points: plate F_z above threshold, or contact-law
penetration δ > 0); single and double support are the same computation. With hull vertices v_k
counter-clockwise, edge e_k = v_{k+1} − v_k, inward normal n_k = (−e_y, e_x)/|e_k| and signed edge
distance s_k = n_k·(p − v_k):

    inside (all s_k ≥ 0):  margin = min_k s_k               (distance to the nearest edge)
    outside:               margin = −dist(p, polygon)        (Euclidean; min_k s_k is wrong near corners)

One contact point: margin = −|p − v|; two (or collinear points): −(distance to the segment); none
(flight): NaN. The margin is continuous in p and changes sign exactly where p crosses the boundary.
Planar models (x forward, y up) use :func:`interval_margin` on the ground line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import kernels


class SupportError(ValueError):
    """Bad support-polygon input (names the argument and the expected shape)."""


@dataclass(frozen=True)
class SupportPolygon:
    """vertices (K, 2) m, lab x, y, counter-clockwise, no repeated or collinear vertices; K = 0 in flight,
    1 for a point contact, 2 for a segment (collinear contacts), ≥ 3 for a polygon.
    Derived on construction: edges (K, 2) = v_{k+1} − v_k, inward unit normals n_k (K, 2) and offsets
    n_k·v_k (K,) m (meaningful for K ≥ 3)."""

    vertices: np.ndarray
    edges: np.ndarray = field(init=False, repr=False, compare=False)
    normals: np.ndarray = field(init=False, repr=False, compare=False)
    offsets: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        v = np.asarray(self.vertices, dtype=float).reshape(-1, 2)
        # Plain Python over the few vertices of a support polygon: cheaper than a dozen array calls.
        vl = v.tolist()
        edges, normals, offsets = [], [], []
        for (x, y), (x1, y1) in zip(vl, vl[1:] + vl[:1]):
            ex, ey = x1 - x, y1 - y
            length = math.hypot(ex, ey) or 1.0
            nx, ny = -ey / length, ex / length
            edges.append((ex, ey))
            normals.append((nx, ny))
            offsets.append(nx * x + ny * y)  # s_k = n_k·p − n_k·v_k
        object.__setattr__(self, "vertices", v)
        object.__setattr__(self, "edges", np.array(edges, dtype=float).reshape(-1, 2))
        object.__setattr__(self, "normals", np.array(normals, dtype=float).reshape(-1, 2))
        object.__setattr__(self, "offsets", np.array(offsets, dtype=float))

    @property
    def n_vertices(self) -> int:
        return int(self.vertices.shape[0])


def _hull(pts: np.ndarray, tol: float) -> np.ndarray:
    """Andrew's monotone chain on (M, 2) points: CCW vertices without collinear points (tol m²).
    Plain Python on the few points of a support polygon: cheaper than array calls or Qhull."""
    p = sorted(set(map(tuple, pts.tolist())))
    if len(p) <= 2:
        return np.array(p, dtype=float).reshape(-1, 2)

    def half(seq):
        out: list = []
        for q in seq:
            while len(out) >= 2:
                (ax, ay), (bx, by) = out[-2], out[-1]
                if (bx - ax) * (q[1] - ay) - (by - ay) * (q[0] - ax) > tol:
                    break
                out.pop()
            out.append(q)
        return out

    lower, upper = half(p), half(p[::-1])
    hull = lower[:-1] + upper[:-1]
    return np.array(hull if len(hull) != 2 or hull[0] != hull[1] else hull[:1], dtype=float)


def support_polygon(points, in_contact=None, tol: float = 1e-12) -> SupportPolygon:
    """Support polygon of one sample: convex hull of the ground projections of the contact points in contact.

    points: (C, 2) or (C, 3) contact positions, m, lab frame (only x, y are used); in_contact: (C,) bool
    (default all). tol: m², cross products below it count as collinear.
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise SupportError(f"points must have shape (C, 2) or (C, 3), got {pts.shape}")
    if in_contact is not None:
        mask = np.asarray(in_contact, dtype=bool)
        if mask.shape != (pts.shape[0],):
            raise SupportError(f"in_contact must have shape ({pts.shape[0]},), got {mask.shape}")
        pts = pts[mask]
    pts = pts[:, :2]
    if not np.isfinite(pts).all():
        raise SupportError("points in contact must be finite (a NaN marker cannot bound the support polygon)")
    return SupportPolygon(_hull(pts, tol) if len(pts) else np.zeros((0, 2)))


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance (M, K) from points p (M, 2) to segments a→b (K, 2)."""
    ab = b - a
    ap = p[:, None, :] - a[None]
    den = np.sum(ab * ab, axis=-1)
    t = np.clip(np.sum(ap * ab, axis=-1) / np.where(den > 0, den, 1.0), 0.0, 1.0)
    return np.linalg.norm(ap - t[..., None] * ab, axis=-1)


def stability_margin(p, polygon: SupportPolygon) -> np.ndarray:
    """Signed distance (M,) in m of points p (M, 2) (or (2,); x, y in m, lab frame, the ZMP or COP) to
    the support polygon: > 0 inside (distance to the nearest edge), < 0 outside (−Euclidean distance),
    NaN for an empty polygon. Equations: module doc."""
    p = np.asarray(p, dtype=float)
    p = p[None] if p.ndim == 1 else p
    if p.ndim != 2 or p.shape[1] < 2:
        raise SupportError(f"p must have shape (M, 2) (x, y of the ZMP or COP), got {p.shape}")
    p = p[:, :2]
    v = polygon.vertices
    k = v.shape[0]
    if k == 0:
        return np.full(p.shape[0], np.nan)
    if k == 1:
        return -np.hypot(p[:, 0] - v[0, 0], p[:, 1] - v[0, 1])
    if k == 2:
        return -_segment_distance(p, v[:1], v[1:])[:, 0]
    s = p @ polygon.normals.T - polygon.offsets
    smin = s.min(axis=1)
    inside = smin >= 0.0
    if inside.all():  # the usual live case: no distance to the edges needed
        return smin
    out = ~inside  # edge distances for the outside (or NaN) points only
    smin[out] = -_segment_distance(p[out], v, v + polygon.edges).min(axis=1)
    return smin


def within(p, polygon: SupportPolygon, tol: float = 0.0) -> np.ndarray:
    """(M,) bool: the points p (M, 2) (x, y in m, lab frame) lie in the polygon grown by tol ≥ 0 m,
    i.e. stability_margin(p) ≥ −tol; False for NaN points and for an empty polygon.

    For K ≥ 3 only the points with −tol ≤ min_k s_k < 0 need the edge distance: outside a convex
    polygon dist(p, polygon) ≥ max_k(−s_k), so min_k s_k < −tol already means margin < −tol.
    """
    p = np.asarray(p, dtype=float)
    if p.ndim != 2 or p.shape[1] < 2:
        raise SupportError(f"p must have shape (M, 2) (x, y of the points), got {p.shape}")
    if polygon.n_vertices < 3:
        with np.errstate(invalid="ignore"):
            return stability_margin(p, polygon) >= -tol
    smin = (p[:, :2] @ polygon.normals.T - polygon.offsets).min(axis=1)
    inside = smin >= 0.0
    band = ~inside & (smin >= -tol)
    if band.any():
        inside[band] = stability_margin(p[band], polygon) >= -tol
    return inside


def support_margin(points, in_contact, p, tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Stability margin over time: for each sample the support polygon of the points in contact and the
    signed distance of p to it.

    points: (N, C, 2|3) m contact positions; in_contact: (N, C) bool; p: (N, 2|3) m ZMP or COP (NaN
    allowed: margin NaN); lab frame. Returns (margin (N,) m, n_vertices (N,) int: 0 flight, 1, 2, ≥ 3).
    """
    pts = np.asarray(points, dtype=float)
    mask = np.asarray(in_contact, dtype=bool)
    pp = np.asarray(p, dtype=float)
    if pts.ndim != 3 or mask.shape != pts.shape[:2] or pp.ndim != 2 or pp.shape[0] != pts.shape[0]:
        raise SupportError(f"points (N, C, 2|3), in_contact (N, C), p (N, 2|3) disagree: {pts.shape}, {mask.shape}, {pp.shape}")
    if kernels.enabled():       # the same hull and margin, compiled (kernels/ground.py)
        margin, nv = np.empty(pts.shape[0]), np.empty(pts.shape[0], dtype=np.int64)
        bad = kernels.kernel("ground.support_margin")(np.ascontiguousarray(pts[..., :2]), np.ascontiguousarray(mask),
                                                      np.ascontiguousarray(pp[:, :2]), float(tol), margin, nv)
        if bad >= 0:
            support_polygon(pts[bad], mask[bad], tol)     # raises SupportError naming the problem
        return margin, nv
    margin = np.full(pts.shape[0], np.nan)
    nv = np.zeros(pts.shape[0], int)
    for i in range(pts.shape[0]):
        poly = support_polygon(pts[i], mask[i], tol)
        nv[i] = poly.n_vertices
        if nv[i] and math.isfinite(pp[i, 0]) and math.isfinite(pp[i, 1]):
            margin[i] = stability_margin(pp[i, :2], poly)[0]
    return margin, nv


def interval_margin(x_contacts, in_contact, p) -> np.ndarray:
    """Planar models (x forward, y up): the support polygon is the interval [min x, max x] of the contact
    points in contact on the ground line. margin = min(p − x_min, x_max − p) (negative outside; a single
    point gives −|p − x|), NaN in flight or for NaN p.

    x_contacts: (N, C) m; in_contact: (N, C) bool; p: (N,) m ZMP or COP x. Returns (N,) m.
    """
    x = np.asarray(x_contacts, dtype=float)
    mask = np.asarray(in_contact, dtype=bool)
    p = np.asarray(p, dtype=float)
    if x.ndim != 2 or mask.shape != x.shape or p.shape != x.shape[:1]:
        raise SupportError(f"x_contacts (N, C), in_contact (N, C), p (N,) disagree: {x.shape}, {mask.shape}, {p.shape}")
    any_c = mask.any(axis=1)
    lo = np.min(np.where(mask, x, np.inf), axis=1)
    hi = np.max(np.where(mask, x, -np.inf), axis=1)
    inner = np.minimum(p - np.where(any_c, lo, 0.0), np.where(any_c, hi, 0.0) - p)
    return np.where(any_c, inner, np.nan)
