"""Constructive assembly of a linkage from its joint points (methods.md c.7, models.md 2.4 and 3).

    circ(P0, r0, P1, r1, s) = P0 + a u + s h n,   d = |P1 - P0|, u = (P1 - P0)/d, n = (-u_y, u_x),
                              a = (r0^2 - r1^2 + d^2)/(2d),  h = sqrt(r0^2 - a^2)

The discriminant r0^2 - a^2 < 0 means the two circles do not meet: no assembly at that input, an
`AssemblyError` naming the point and the input value. Batched over the input s (N,).
"""
from __future__ import annotations

import numpy as np

from .model import AssemblyError, Linkage, LinkageError


def circle_intersection(p0: np.ndarray, r0: float, p1: np.ndarray, r1: float, sign: float):
    """circ(P0, r0, P1, r1, s) for p0, p1 (N, 2) in m; returns (point (N, 2), discriminant (N,) m^2)."""
    d_vec = p1 - p0
    d = np.hypot(d_vec[:, 0], d_vec[:, 1])
    u = d_vec / d[:, None]
    n = np.stack([-u[:, 1], u[:, 0]], axis=1)
    a = (r0 * r0 - r1 * r1 + d * d) / (2.0 * d)
    disc = r0 * r0 - a * a
    h = np.sqrt(np.maximum(disc, 0.0))
    return p0 + a[:, None] * u + sign * h[:, None] * n, disc


def joint_points(model: Linkage, s) -> dict[str, np.ndarray]:
    """Every joint point of the assembled linkage at inputs s (N,): name -> (N, 2), m."""
    s = np.atleast_1d(np.asarray(s, dtype=float))
    if s.ndim != 1 or not np.all(np.isfinite(s)):
        raise AssemblyError(f"s: expected a finite 1-D array of inputs, got shape {s.shape}")
    N = s.shape[0]
    pts = {k: np.broadcast_to(np.asarray(v), (N, 2)) for k, v in model.ground_points.items()}
    for st in model.assembly:
        if st.kind == "crank":
            c, r, ph = st.args
            pts[st.point] = pts[c] + r * np.stack([np.cos(s + ph), np.sin(s + ph)], axis=1)
        elif st.kind == "circle":
            p0, r0, p1, r1, sign = st.args
            p, disc = circle_intersection(pts[p0], r0, pts[p1], r1, sign)
            bad = disc < 0.0
            if np.any(bad):
                k = int(np.argmax(bad))
                raise AssemblyError(
                    f"{model.name}: point {st.point}: circles around {p0} (r={r0}) and {p1} "
                    f"(r={r1}) do not intersect at input s={s[k]:.6g} (discriminant r0^2-a^2 = "
                    f"{disc[k]:.3g} m^2 < 0): the linkage cannot be assembled there")
            pts[st.point] = p
        elif st.kind == "slider":
            p0, r, y, sign = st.args
            disc = r * r - (y - pts[p0][:, 1]) ** 2
            if np.any(disc < 0.0):
                k = int(np.argmax(disc < 0.0))
                raise AssemblyError(
                    f"{model.name}: point {st.point}: circle around {p0} (r={r}) does not reach the "
                    f"line y={y} at input s={s[k]:.6g} (discriminant {disc[k]:.3g} m^2 < 0)")
            x = pts[p0][:, 0] + sign * np.sqrt(np.maximum(disc, 0.0))
            pts[st.point] = np.stack([x, np.full_like(x, y)], axis=1)
        elif st.kind == "extend":
            p0, p1, dist = st.args
            v = pts[p1] - pts[p0]
            pts[st.point] = pts[p1] + dist * v / np.hypot(v[:, 0], v[:, 1])[:, None]
        else:
            p0, dx, dy = st.args
            pts[st.point] = pts[p0] + np.array([dx, dy])
    return pts


def assemble(model: Linkage, s) -> np.ndarray:
    """Body coordinates q (N, n) from the constructed joint points: centre = mid-point of the two
    ends, phi = angle of (plus end - minus end) from +x. Exact up to the rounding of the lengths."""
    pts = joint_points(model, s)
    N = next(iter(pts.values())).shape[0]
    q = np.empty((N, model.n_coords))
    for i, (mn, pl) in enumerate(model.body_ends):
        a, b = pts[mn], pts[pl]
        q[:, 3 * i:3 * i + 2] = 0.5 * (a + b)
        q[:, 3 * i + 2] = np.arctan2(b[:, 1] - a[:, 1], b[:, 0] - a[:, 0])
    return q



def check_closes(model: Linkage, samples: int = 36) -> None:
    """LinkageError naming the file and the point whose loop cannot close if the linkage assembles
    at none of `samples` crank angles 2 pi k/samples (angle input) or at its nominal input s = 0."""
    s = 2.0 * np.pi * np.arange(samples) / samples if model.input_kind == "angle" else np.zeros(1)
    first = None
    for value in s:      # one input at a time: AssemblyError reports only the first failing one
        try:
            joint_points(model, [value])
            return
        except AssemblyError as exc:
            first = first or exc
    raise LinkageError(f"{model.source}: unreachable closed loop: no assembly at any input tried "
                       f"({first})") from None
