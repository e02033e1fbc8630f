"""Planar models (the Zinkovsky tables, docs/models.md) driven by markers: the reference-line
method of methods.md f.1, then the closed-form inverse dynamics of methods.md b.3 with measured
external forces.

Planar frame: x forward, y up, angles counter-clockwise about k = +z (for a lab record, z up and x
the walking direction: planar (x, y) = lab (x, z), k = lab −y, so "counter-clockwise" is seen
from the subject's right side). Arrays are time first: (N, ...) with N frames.

Markers: the support point, the root segment's proximal joint, is ``<root segment>_proximal``;
every segment's distal joint point is ``<segment>_distal`` (the markers the model files declare:
the book's digitised joint points). A segment's proximal joint is its parent's distal point.

1. Points to the plane (``marker_points``): lab (x, z), or the axes and scale of a reference
   segment of known length (``markers.reference_frame``, f.1).
2. Coordinates (``planar_coordinates``): r_i = R_distal(i) − R_proximal(i), absolute angles
   φ_i = atan2(r_i,x, −r_i,y) in (−π, π] at the first frame, unwrapped in time (across gaps),
   lengths |r_i| and their running means
   (``markers.planar_segments``); q = (x₀, y₀, φ₁..φ_n) with (x₀, y₀) the support point; relative
   joint angles ψ = μ⁻¹ φ (ψ_i = φ_i − φ_parent(i), ψ₁ = φ₁), each in (−π, π] at the first
   frame, then unwrapped.
3. Kinetics (``planar_kinetics``): Q = Â q̈ − b̂ − g D̂ of the motion (``planar.planar_inverse_dynamics``,
   the model's lengths l, masses and inertias), minus the generalised forces of the measured
   external forces F_j at lab points P_j on their segments (``planar.external_generalized_forces``):
   [R, U] = Q − Σ Q_ext,j. Joint moments M = μᵀ U (M_i acts +M_i on segment i, −M_i on its
   parent); R is the force the support would have to add at the root point and M₁ the moment
   there: both vanish when every external force on the body is measured (the residual of
   methods.md (h)), and with no measured force R is the predicted support reaction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .markers import MarkerError, PlanarFrame, merge_segments, mobility, planar_segments, to_planar_lab, unwrap_finite
from .model import G, Model
from .planar import PlanarChain, external_generalized_forces, joint_moments, planar_chain_from_model, \
    planar_inverse_dynamics

PROXIMAL, DISTAL = "_proximal", "_distal"


@dataclass(frozen=True)
class PlanarMarkerModel:
    """A planar model read for marker analysis. chain: its closed-form arrays; segments, joints:
    segment and joint names (joints[0] is the support point); lengths (n,) m proximal → distal
    point of every segment (a leaf's from its ``_distal`` marker); parent (n,) int, 0-based index
    of the parent segment, −1 for the root; markers: the support point then the distal points."""

    chain: PlanarChain
    segments: tuple[str, ...]
    joints: tuple[str, ...]
    lengths: np.ndarray
    parent: np.ndarray

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.segments[0] + PROXIMAL,) + tuple(s + DISTAL for s in self.segments)


def planar_model(model: Model, mass: float | None = None) -> PlanarMarkerModel:
    """The PlanarMarkerModel of a planar Zinkovsky tree (``planar.planar_chain_from_model``;
    ValueError if it is not one, or a segment has no ``<segment>_distal`` marker on its −y axis).
    mass (kg): masses and inertias scaled by mass / model mass (lengths kept)."""
    chain = planar_chain_from_model(model)
    lengths = np.empty(chain.n)
    for i, s in enumerate(model.segments):
        p = s.markers.get(s.name + DISTAL)
        if p is None or p[0] != 0 or p[2] != 0 or not p[1] < 0:
            raise ValueError(f"model {model.name!r}: segment {s.name!r} needs a marker {s.name + DISTAL} = [0, -l, 0]")
        lengths[i] = -p[1]
        if chain.l[i] > 0 and not np.isclose(chain.l[i], lengths[i]):
            raise ValueError(f"model {model.name!r}: segment {s.name!r}: marker {s.name + DISTAL} at {lengths[i]} m, "
                             f"its children's joints at {chain.l[i]} m")
    if mass is not None:
        if not mass > 0:
            raise ValueError(f"body mass must be > 0 kg, got {mass}")
        k = mass / float(chain.m.sum())
        chain = PlanarChain(parent=chain.parent, l=chain.l, m=chain.m * k, a1=chain.a1, a2=chain.a2, Jc=chain.Jc * k)
    return PlanarMarkerModel(chain=chain, segments=tuple(s.name for s in model.segments),
                             joints=tuple(s.joint_name or s.name for s in model.segments), lengths=lengths,
                             parent=chain.parent - 1)


def missing_markers(pm: PlanarMarkerModel, markers: Mapping[str, np.ndarray]) -> list[str]:
    """The model's marker names that ``markers`` lacks or never sees."""
    return [k for k in pm.markers if k not in markers or not np.isfinite(markers[k]).any()]


def to_plane(points, frame: PlanarFrame | None = None) -> np.ndarray:
    """(..., 3) m lab (z up) → (..., 2) planar (x forward, y up): (x, z), then through the axes
    and scale of ``frame`` (a reference segment, ``markers.reference_frame``) if given."""
    p = np.asarray(points, float)[..., [0, 2]]
    return p if frame is None else to_planar_lab(p, frame)


def vectors_to_plane(v, frame: PlanarFrame | None = None) -> np.ndarray:
    """(..., 3) lab vectors (forces, N) → (..., 2) planar components: rotated like ``to_plane``,
    never shifted or scaled."""
    p = np.asarray(v, float)[..., [0, 2]]
    return p if frame is None else np.stack([p @ frame.ex, p @ frame.ey], axis=-1)


def marker_points(pm: PlanarMarkerModel, markers: Mapping[str, np.ndarray],
                  frame: PlanarFrame | None = None) -> np.ndarray:
    """(N, n + 1, 2) m planar: the support point then each segment's distal point, from markers
    (name → (N, 3) m lab). MarkerError naming the missing markers."""
    gone = missing_markers(pm, markers)
    if gone:
        raise MarkerError(f"planar model needs markers {', '.join(gone)} (the support point <root>_proximal and "
                          "each segment's <segment>_distal)")
    return np.stack([to_plane(markers[k], frame) for k in pm.markers], axis=1)


@dataclass(frozen=True)
class PlanarCoordinates:
    """q (N, n + 2): (x₀, y₀) m the support point, φ (rad) absolute angles from the downward
    vertical, counter-clockwise, unwrapped; psi (N, n) rad relative joint angles ψ = μ⁻¹ φ;
    lengths, mean_length (N, n) m measured segment lengths and their running mean (f.1)."""

    q: np.ndarray
    psi: np.ndarray
    lengths: np.ndarray
    mean_length: np.ndarray


def planar_coordinates(pm: PlanarMarkerModel, points) -> PlanarCoordinates:
    """Coordinates of points (N, n + 1, 2) m planar (``marker_points``) by the reference-line
    method (module doc step 2)."""
    p = np.asarray(points, float)
    n = pm.chain.n
    if p.ndim != 3 or p.shape[1:] != (n + 1, 2):
        raise MarkerError(f"points must be (N, {n + 1}, 2) m, got {p.shape}")
    segs = planar_segments(p[:, pm.parent + 1], p[:, 1:])
    phi = segs.angles
    psi = phi.copy()
    # relative angles in (−π, π] at the first frame, then continuous: a standing body has φ ≈ ±π
    # and a segment at +179° on a parent at −179° is a 2° joint angle, not 358°
    psi[:, 1:] = unwrap_finite(np.angle(np.exp(1j * (phi[:, 1:] - phi[:, pm.parent[1:]]))))
    return PlanarCoordinates(q=np.concatenate([p[:, 0], phi], axis=1), psi=psi, lengths=segs.lengths,
                             mean_length=segs.mean_length)


def joint_points(pm: PlanarMarkerModel, q) -> np.ndarray:
    """(N, n + 1, 2) m: the support point and each segment's distal point of the model (its
    lengths) at q (N, n + 2): R_i = R_proximal(i) + l_i (sin φ_i, −cos φ_i)."""
    q = np.atleast_2d(np.asarray(q, float))
    out = np.empty((len(q), pm.chain.n + 1, 2))
    out[:, 0] = q[:, :2]
    phi = q[:, 2:]
    for i, par in enumerate(pm.parent):
        out[:, i + 1] = out[:, par + 1] + pm.lengths[i] * np.stack([np.sin(phi[:, i]), -np.cos(phi[:, i])], axis=1)
    return out


def nearest_segment(pm: PlanarMarkerModel, q, point, within: float = 0.15) -> np.ndarray:
    """(N,) int: per frame the segment (0-based) whose proximal–distal line of the model at q
    passes nearest the planar point (N, 2) m (a plate's COP), −1 if none is within ``within`` m
    or the point or q is NaN."""
    pts = joint_points(pm, q)
    a, b = pts[:, pm.parent + 1], pts[:, 1:]
    x = np.asarray(point, float)[:, None, :]
    d = b - a
    s = np.clip(np.sum((x - a) * d, axis=2) / np.maximum(np.sum(d * d, axis=2), 1e-12), 0.0, 1.0)
    dist = np.linalg.norm(a + s[..., None] * d - x, axis=2)
    dist = np.where(np.isfinite(dist), dist, np.inf)
    best = np.argmin(dist, axis=1)
    return np.where(dist[np.arange(len(best)), best] <= within, best, -1)


@dataclass(frozen=True)
class ExternalForce:
    """A measured force on the body: segment (N,) int 0-based (−1: on no segment in that frame);
    force (N, 2) N planar; point (N, 2) m planar lab, where it acts."""

    segment: np.ndarray
    force: np.ndarray
    point: np.ndarray


@dataclass(frozen=True)
class PlanarKinetics:
    """reaction (N, 2) N: the force the support must add at the root point (module doc step 3);
    moments (N, n) N·m joint moments M = μᵀ U, moments[:, 0] the moment at the support;
    power (N, n) W = M_i ψ̇_i. NaN where q, v or a is not finite."""

    reaction: np.ndarray
    moments: np.ndarray
    power: np.ndarray


def planar_kinetics(pm: PlanarMarkerModel, q, v, a, forces: Sequence[ExternalForce] = (),
                    g: float = G) -> PlanarKinetics:
    """Module doc step 3 on q, v, a (N, n + 2) (m, rad; per s, per s²) with the measured external
    forces. A force on segment k at lab point P enters at z' = ((P − R_k)·e₁, (P − R_k)·e₂) from
    the segment's proximal joint R_k of the model at q."""
    q, v, a = (np.atleast_2d(np.asarray(x, float)) for x in (q, v, a))
    n = pm.chain.n
    ok = np.all(np.isfinite(q) & np.isfinite(v) & np.isfinite(a), axis=1)
    Q = np.full(q.shape, np.nan)
    if ok.any():
        Q[ok] = planar_inverse_dynamics(pm.chain, q[ok], v[ok], a[ok], g)
    pts = joint_points(pm, q)
    phi = q[:, 2:]
    for f in forces:
        seg = np.asarray(f.segment)
        for k in np.unique(seg[ok & (seg >= 0)]):
            rows = ok & (seg == k)
            rel = f.point[rows] - pts[rows, pm.parent[k] + 1]
            e1 = np.stack([np.sin(phi[rows, k]), -np.cos(phi[rows, k])], axis=1)
            e2 = np.stack([np.cos(phi[rows, k]), np.sin(phi[rows, k])], axis=1)
            z = np.stack([np.sum(rel * e1, axis=1), np.sum(rel * e2, axis=1)], axis=1)
            Q[rows] -= external_generalized_forces(pm.chain, phi[rows], int(k) + 1, f.force[rows], z)
    moments = joint_moments(pm.chain, Q[:, 2:])
    psidot = v[:, 2:].copy()
    psidot[:, 1:] -= v[:, 2:][:, pm.parent[1:]]
    return PlanarKinetics(reaction=Q[:, :2], moments=moments, power=moments * psidot)


def joint_mobility(pm: PlanarMarkerModel, psi, t) -> np.ndarray:
    """(n,) rad: the mobility S of each joint's relative angle ψ (N, n) rad over times t (N,) s
    (``markers.mobility``, methods.md f.3) on its finite frames; NaN for the support (ψ₁ is
    absolute) and for a joint seen in fewer than 3 frames."""
    psi, t = np.asarray(psi, float), np.asarray(t, float)
    out = np.full(pm.chain.n, np.nan)
    for i in range(1, pm.chain.n):
        ok = np.isfinite(psi[:, i])
        if ok.sum() >= 3:
            out[i] = mobility(psi[ok, i], t[ok])
    return out


def merge_joint(pm: PlanarMarkerModel, c: int, psi0: float) -> tuple[PlanarMarkerModel, float]:
    """Freeze joint c (0-based segment c, c ≥ 1) at the relative angle psi0 (rad): segment c and
    its parent p become one body (``markers.merge_segments``, methods.md f.4) whose proximal joint
    is p's and whose distal joint is c's, taking p's place; c's children hang on it. Returns the
    model with n − 1 segments and δ (rad), the merged body's angle φ′ = φ_p + δ (its axis is
    p's proximal → c's distal joint in the frozen posture). MarkerError if p has another child
    (the merged body would have two distal joints)."""
    ch = pm.chain
    p = int(pm.parent[c]) if c >= 1 else -1
    if p < 0:
        raise MarkerError(f"joint {pm.joints[c]!r} is the support: it has no parent segment to merge with")
    if int(np.sum(pm.parent == p)) != 1:
        raise MarkerError(f"joint {pm.joints[c]!r}: its parent segment {pm.segments[p]!r} carries "
                          f"{', '.join(pm.segments[k] for k in np.flatnonzero(pm.parent == p))}: not merged "
                          "(the merged body would have two distal joints)")
    # the frozen posture in p's frame (φ_p = 0: e₁ = (0, −1), e₂ = (1, 0)), p's proximal joint at 0
    e1c, e2c = np.array([np.sin(psi0), -np.cos(psi0)]), np.array([np.cos(psi0), np.sin(psi0)])
    joint = np.array([0.0, -pm.lengths[p]])
    coms = [np.array([ch.a2[p], -ch.a1[p]]), joint + ch.a1[c] * e1c + ch.a2[c] * e2c]
    distal = joint + pm.lengths[c] * e1c
    mg = merge_segments(ch.m[[p, c]], coms, ch.Jc[[p, c]], np.zeros(2), distal)
    delta = float(np.arctan2(distal[0], -distal[1]))
    keep = [i for i in range(ch.n) if i != c]
    parent1 = ch.parent.copy()  # 1-based numbers: c's children → p, numbers above c shift down
    parent1[parent1 == c + 1] = p + 1
    parent1[parent1 > c + 1] -= 1
    l, m, a1, a2, jc, lengths = (x.astype(float) for x in (ch.l, ch.m, ch.a1, ch.a2, ch.Jc, pm.lengths))
    l[p] = mg.length if ch.l[c] > 0 else 0.0
    m[p], a1[p], a2[p], jc[p], lengths[p] = mg.mass, mg.a1, mg.a2, mg.jc, mg.length
    chain = PlanarChain(parent=parent1[keep], l=l[keep], m=m[keep], a1=a1[keep], a2=a2[keep], Jc=jc[keep])
    return PlanarMarkerModel(chain=chain, segments=tuple(pm.segments[i] for i in keep),
                             joints=tuple(pm.joints[i] for i in keep), lengths=lengths[keep],
                             parent=chain.parent - 1), delta


def frozen_kinetics(pm: PlanarMarkerModel, q, v, a, frozen: Sequence[int], forces: Sequence[ExternalForce] = (),
                    g: float = G) -> PlanarKinetics:
    """``planar_kinetics`` with the joints ``frozen`` (0-based segment indices ≥ 1) locked at their
    circular-mean relative angle over the trial and their two segments merged (``merge_joint``):
    q, v, a (N, n + 2) of the full model; the merged body moves as its proximal segment
    (φ′ = φ_p + δ). Results have the full model's n columns, NaN (not computed) at frozen joints."""
    q, v, a = (np.atleast_2d(np.asarray(x, float)).copy() for x in (q, v, a))
    cols = list(range(pm.chain.n))
    forces = list(forces)
    for c in sorted(set(int(k) for k in frozen), reverse=True):  # higher first: lower indices stay put
        p = int(pm.parent[c])
        d = q[:, 2 + c] - q[:, 2 + p]
        psi0 = float(np.angle(np.nanmean(np.exp(1j * d[np.isfinite(d)]))))
        pm, delta = merge_joint(pm, c, psi0)
        q, v, a = (np.delete(x, 2 + c, axis=1) for x in (q, v, a))
        q[:, 2 + p] += delta
        forces = [ExternalForce(np.where(f.segment == c, p, np.where(f.segment > c, f.segment - 1, f.segment)),
                                f.force, f.point) for f in forces]
        cols.pop(c)
    kin = planar_kinetics(pm, q, v, a, forces, g)
    moments, power = (np.full((len(q), len(cols) + len(set(frozen))), np.nan) for _ in range(2))
    moments[:, cols], power[:, cols] = kin.moments, kin.power
    return PlanarKinetics(reaction=kin.reaction, moments=moments, power=power)
