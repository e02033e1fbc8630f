"""Marker processing (methods.md (f)): rigid-body fit of segment frames, gap filling, and the
joint-mobility (freeze) test.

Positions are (N, M, 3) m in the lab frame (N frames, M markers, NaN = not seen); time first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import interpolate

# gap-fill flags per (frame, marker)
MEASURED, SPLINE, RIGID, UNFILLED = 0, 1, 2, 3


class MarkerError(ValueError):
    """Marker data a processing step cannot use (shape, too few markers); names the problem."""


@dataclass(frozen=True)
class RigidFit:
    """Per frame: rotation (N, 3, 3) and translation (N, 3) m with x_lab = R x_ref + t;
    residual (N,) m, RMS distance of the fitted cluster from the observed markers; NaN where
    fewer than 3 markers, or only collinear ones (in the reference), were seen."""

    rotation: np.ndarray
    translation: np.ndarray
    residual: np.ndarray


def rigid_fit(reference, observed) -> RigidFit:
    """Least-squares rigid transform of a marker cluster (Söderkvist & Wedin 1993; Kabsch).

    reference (M, 3) m: the cluster in its own frame (e.g. a static trial); observed (N, M, 3) m,
    NaN for unseen markers. Each frame uses its seen markers (>= 3, not collinear):
    H = Σ (r_i − r̄)(x_i − x̄)ᵀ = U S Vᵀ, R = V diag(1, 1, det(V Uᵀ)) Uᵀ (det R = +1), t = x̄ − R r̄.
    """
    ref = np.asarray(reference, float)
    obs = np.asarray(observed, float)
    if ref.ndim != 2 or ref.shape[1] != 3 or obs.ndim != 3 or obs.shape[1:] != ref.shape:
        raise MarkerError(f"rigid_fit needs reference (M, 3) and observed (N, M, 3), got {ref.shape}, {obs.shape}")
    rot, tr, res = masked_rigid_fit(ref, obs, np.all(np.isfinite(obs), axis=2))
    return RigidFit(rotation=rot, translation=tr, residual=res)


def masked_rigid_fit(reference: np.ndarray, observed: np.ndarray,
                     seen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`rigid_fit` of a stack of clusters at once, markers weighted by a visibility mask.

    reference (..., M, 3) m, each cluster in its own frame (broadcast against observed); observed
    (..., M, 3) m lab (NaN allowed where not seen); seen (..., M) bool: the markers each fit uses
    (0/1 weights w_i). With r̄ = Σ w_i r_i / Σ w_i, x̄ likewise, H = Σ w_i (r_i − r̄)(x_i − x̄)ᵀ = U S Vᵀ
    (one batched SVD of every 3×3 H), R = V diag(1, 1, sign det(V Uᵀ)) Uᵀ, t = x̄ − R r̄, residual
    √(Σ w_i |R r_i + t − x_i|² / Σ w_i). Returns rotation (..., 3, 3), translation (..., 3), residual
    (...); NaN where fewer than 3 markers are seen or the seen ones are collinear in the reference
    (singular values σ₂ ≤ 1e-9 σ₁ of their centred positions: the rotation about their line is
    undetermined)."""
    seen = np.asarray(seen, bool)
    obs = np.where(seen[..., None], observed, 0.0)
    ref = np.broadcast_to(reference, obs.shape)
    w = seen.astype(float)
    k = w.sum(axis=-1)
    many = k >= 3
    kk = np.maximum(k, 1.0)[..., None]              # no 0/0 (the SVDs need finite input); masked below
    rc = np.einsum("...m,...mi->...i", w, ref) / kk
    xc = np.einsum("...m,...mi->...i", w, obs) / kk
    r0 = (ref - rc[..., None, :]) * w[..., None]    # unseen rows zero: they change neither H nor σ
    h = np.einsum("...mi,...mj->...ij", r0, obs - xc[..., None, :])
    many &= _spread(np.asarray(reference, float), seen)
    u, _, vt = np.linalg.svd(h)
    v = np.swapaxes(vt, -1, -2)
    ut = np.swapaxes(u, -1, -2)
    d = np.ones(h.shape[:-1])
    d[..., 2] = np.sign(np.linalg.det(v @ ut))     # the reflection fix: det R = +1
    R = (v * d[..., None, :]) @ ut
    t = xc - np.einsum("...ij,...j->...i", R, rc)
    err = np.einsum("...ij,...mj->...mi", R, ref) + t[..., None, :] - obs
    res = np.sqrt(np.einsum("...m,...mi,...mi->...", w, err, err) / kk[..., 0])
    return (np.where(many[..., None, None], R, np.nan), np.where(many[..., None], t, np.nan),
            np.where(many, res, np.nan))


def _spread(reference: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """seen.shape[:-1] bool: the seen markers of reference (..., M, 3) (broadcast over seen's leading
    frame axes) are not collinear: σ₂ > 1e-9 σ₁ of their centred positions. It depends on the
    visibility pattern alone, so each distinct pattern is tested once (the SVDs of every frame's
    would cost more than the fits)."""
    if reference.shape[-2] < 2:
        return np.zeros(seen.shape[:-1], bool)
    m = reference.shape[-2]
    ref = reference.reshape(-1, m, 3)                           # (C, M, 3): the clusters of one frame
    c = len(ref)
    flat = seen.reshape(-1, c, m)                               # (frames, C, M)
    if (flat == flat[:1]).all():        # one pattern in every frame (the usual case)
        cluster, pat, inverse = np.arange(c), flat[0], np.tile(np.arange(c), len(flat))
    elif m + c.bit_length() < 63:       # each (cluster, pattern) pair once, as one integer key
        keys = (flat.astype(np.int64) << np.arange(m)).sum(axis=2) + (np.arange(c, dtype=np.int64) << m)
        uniq, inverse = np.unique(keys.ravel(), return_inverse=True)
        cluster, pat = uniq >> m, (uniq[:, None] >> np.arange(m) & 1).astype(bool)
    else:
        keys = np.concatenate([np.broadcast_to(np.arange(c)[None, :, None], (len(flat), c, 1)), flat], axis=2)
        uniq, inverse = np.unique(keys.reshape(-1, m + 1), axis=0, return_inverse=True)
        cluster, pat = uniq[:, 0], uniq[:, 1:].astype(bool)
    w = pat.astype(float)
    r = ref[cluster]
    rc = np.einsum("km,kmi->ki", w, r) / np.maximum(w.sum(axis=1), 1.0)[:, None]
    sv = np.linalg.svd((r - rc[:, None]) * w[..., None], compute_uv=False)
    return (sv[:, 1] > 1e-9 * sv[:, 0])[inverse.ravel()].reshape(seen.shape[:-1])


def _gaps(finite: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each interior or end run of False."""
    d = np.diff(np.concatenate(([1], finite.astype(np.int8), [1])))
    return list(zip(np.flatnonzero(d == -1), np.flatnonzero(d == 1)))


def fill_gaps(positions, max_spline_gap: int = 10,
              clusters: Mapping[str, Sequence[int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fill marker gaps; returns (filled (N, M, 3) m, flags (N, M) int: MEASURED, SPLINE, RIGID,
    UNFILLED).

    Interior gaps of at most ``max_spline_gap`` frames: cubic spline through the seen samples.
    Longer gaps (and gaps at the ends) of a marker in a cluster (segment name → marker indices,
    >= 4 markers): the marker follows the rigid fit of the cluster's other seen markers, the
    cluster shape taken as the mean of the frames where all its markers were seen, rigidly
    aligned. Anything else stays NaN and is flagged UNFILLED (never extrapolated).
    """
    pos = np.array(positions, float)
    if pos.ndim != 3 or pos.shape[2] != 3:
        raise MarkerError(f"positions must be (N, M, 3) m, got {pos.shape}")
    n, m, _ = pos.shape
    seen = np.all(np.isfinite(pos), axis=2)
    flags = np.where(seen, MEASURED, UNFILLED)
    idx = np.arange(n)
    for j in range(m):
        ok = seen[:, j]
        if ok.sum() < 4 or ok.all():
            continue
        spline = interpolate.CubicSpline(idx[ok], pos[ok, j], axis=0)
        for a, b in _gaps(ok):
            if a > 0 and b < n and b - a <= max_spline_gap:
                pos[a:b, j] = spline(idx[a:b])
                flags[a:b, j] = SPLINE
    for members in (clusters or {}).values():
        members = list(members)
        if len(members) < 4:
            continue
        full = np.all(seen[:, members], axis=1)
        if not full.any() or full.all():
            continue
        ref = _cluster_reference(pos[full][:, members])
        for j in members:
            need = flags[:, j] == UNFILLED
            if not need.any():
                continue
            others = [k for k in members if k != j]
            obs = np.where(seen[:, others, None], pos[:, others], np.nan)[need]
            fit = rigid_fit(ref[[members.index(k) for k in others]], obs)
            est = np.einsum("nij,j->ni", fit.rotation, ref[members.index(j)]) + fit.translation
            good = np.all(np.isfinite(est), axis=1)
            rows = np.flatnonzero(need)[good]
            pos[rows, j] = est[good]
            flags[rows, j] = RIGID
    return pos, flags


def _cluster_reference(frames: np.ndarray) -> np.ndarray:
    """Mean shape (M, 3) of a cluster seen fully in frames (K, M, 3): each frame rigidly
    aligned onto the first, then averaged (one Procrustes pass)."""
    first = frames[0] - frames[0].mean(axis=0)
    fit = rigid_fit(first, frames)
    back = np.einsum("nji,nmj->nmi", fit.rotation, frames - fit.translation[:, None])
    return back.mean(axis=0)


def mobility(angle, t) -> float:
    """Joint-mobility statistic S (rad) over a window (methods.md f.3):
    S² = Σ (ψ̃(t_j) − ψ(t_j))²/(k − 2) + (Ω τ)², with ψ̃ = Ω t + ψ⁰ the least-squares line
    (centred time) and τ the window duration. A small S (below the angle error) means freeze."""
    psi = np.asarray(angle, float)
    tt = np.asarray(t, float)
    if psi.ndim != 1 or psi.shape != tt.shape or len(psi) < 3:
        raise MarkerError(f"mobility needs angle and t of the same shape (k >= 3,), got {psi.shape}, {tt.shape}")
    tc = tt - tt.mean()
    omega = np.sum(tc * (psi - psi.mean())) / np.sum(tc * tc)
    resid = psi - (psi.mean() + omega * tc)
    tau = tt[-1] - tt[0]
    return float(np.sqrt(np.sum(resid ** 2) / (len(psi) - 2) + (omega * tau) ** 2))


# --- f.1 planar reference-line method -----------------------------------------------------------

@dataclass(frozen=True)
class PlanarFrame:
    """Lab axes of a planar (image or digitiser) record: origin (2,) in input units, ex, ey (2,)
    unit axes (x forward, y up) in input coordinates, scale m per input unit."""

    origin: np.ndarray
    ex: np.ndarray
    ey: np.ndarray
    scale: float


def reference_frame(r_start, r_end, length: float, vertical: bool = False) -> PlanarFrame:
    """Lab axes from a reference segment of known length (m) (methods.md f.1): e_G = unit(R_H − R_R)
    is the forward axis (or the up axis if ``vertical``), the other by a +90° rotation (down → the
    forward axis then is −90°); scale = length / |R_H − R_R|. r_start, r_end (2,) or (N, 2), the
    mean over frames is used."""
    a = np.atleast_2d(np.asarray(r_start, float)).mean(axis=0)
    b = np.atleast_2d(np.asarray(r_end, float)).mean(axis=0)
    d = b - a
    n = float(np.linalg.norm(d))
    if not n > 0 or not length > 0:
        raise MarkerError(f"reference segment needs two distinct points and a length > 0, got |d| = {n}, {length}")
    e = d / n
    perp = np.array([-e[1], e[0]])
    ex, ey = (np.array([e[1], -e[0]]), e) if vertical else (e, perp)
    return PlanarFrame(origin=a, ex=ex, ey=ey, scale=length / n)


def to_planar_lab(points, frame: PlanarFrame) -> np.ndarray:
    """(…, 2) input coordinates → (…, 2) m in the lab axes of ``frame``."""
    p = np.asarray(points, float) - frame.origin
    return frame.scale * np.stack([p @ frame.ex, p @ frame.ey], axis=-1)


@dataclass(frozen=True)
class PlanarSegments:
    """angles (N, S) rad from the downward vertical, counter-clockwise, unwrapped in time
    (methods.md a.6: r = l (sin φ, −cos φ)); lengths (N, S) m; mean_length (N, S): the running mean
    l̄_k = [(k − 1) l̄_{k−1} + l_k]/k, whose drift flags marker error or out-of-plane motion."""

    angles: np.ndarray
    lengths: np.ndarray
    mean_length: np.ndarray


def unwrap_finite(x, start=None) -> np.ndarray:
    """np.unwrap along time (axis 0) of each column of x (N, ...) rad over its finite samples: a
    NaN gap does not break continuity (np.unwrap turns everything after a NaN into NaN).

    start (...) rad, or None: each column's last unwrapped value before x (a live stream's previous
    block; NaN where there was none): the column continues from it, so block by block gives the
    same angles as the whole record at once."""
    x = np.asarray(x, float)
    out = x.copy()
    flat, src = out.reshape(len(x), -1), x.reshape(len(x), -1)
    first = np.full(flat.shape[1], np.nan) if start is None else np.broadcast_to(np.asarray(start, float),
                                                                                 x.shape[1:]).reshape(-1)
    if np.isfinite(src).all():      # no gap: every column at once (a live block's usual case)
        start_ok = np.isfinite(first)
        if start_ok.all() or not start_ok.any():
            if start_ok.any():
                flat[:] = np.unwrap(np.concatenate([first[None], src]), axis=0)[1:]
            elif len(src):
                flat[:] = np.unwrap(src, axis=0)
            return out
    # every column in one np.unwrap: a sample not finite takes the column's last finite value before
    # it (the first one's before any): a step of 0, which unwrap leaves as it is (its correction adds
    # 0.0), so each finite sample gets what unwrapping the column's finite samples alone gives
    seq = np.concatenate([first[None], src])
    fin = np.isfinite(seq)
    cols = np.arange(seq.shape[1])
    last = np.maximum.accumulate(np.where(fin, np.arange(len(seq))[:, None], 0), axis=0)
    filled = np.where(fin.any(axis=0) & ~np.maximum.accumulate(fin, axis=0),
                      seq[np.argmax(fin, axis=0), cols], seq[last, cols])
    ok = fin[1:]
    flat[ok] = np.unwrap(filled, axis=0)[1:][ok]
    return out


def planar_segments(proximal, distal) -> PlanarSegments:
    """Absolute angles and lengths of segments r_i = distal − proximal, (N, S, 2) m lab (x forward,
    y up): φ_i = atan2(r_x, −r_y), in (−π, π] at a segment's first seen frame, then unwrapped along
    time across gaps (methods.md f.1)."""
    r = np.asarray(distal, float) - np.asarray(proximal, float)
    if r.ndim != 3 or r.shape[2] != 2:
        raise MarkerError(f"proximal and distal points must be (N, S, 2), got {r.shape}")
    phi = unwrap_finite(np.arctan2(r[..., 0], -r[..., 1]))
    lengths = np.linalg.norm(r, axis=2)
    k = np.arange(1, len(r) + 1)[:, None]
    return PlanarSegments(angles=phi, lengths=lengths, mean_length=np.cumsum(lengths, axis=0) / k)


# --- f.4 merging frozen segments ----------------------------------------------------------------

@dataclass(frozen=True)
class Merged:
    """The merged body (planar GMIC, methods.md a.3): mass kg, length m (its proximal → distal
    joint), a1, a2 m (CoM from the proximal joint along e₁ = unit(r′) and e₂ = k × e₁), j_proximal
    and jc kg·m² (about the proximal joint and the CoM)."""

    mass: float
    length: float
    a1: float
    a2: float
    j_proximal: float
    jc: float


def merge_segments(masses, coms, jcs, proximal, distal=None) -> Merged:
    """Merge frozen planar segments into one body (methods.md f.4, Zinkovsky et al. 1996 Eqs.
    3.7–3.13). masses (K,) kg; coms (K, 2) m lab, each member's CoM in the frozen posture; jcs (K,)
    kg·m² central inertias; proximal (2,) the new body's proximal joint, distal (2,) its distal
    joint (None: an end body, a1 = |ρ′|, a2 = 0).
    m′ = Σ m_k, m′ ρ′ = Σ m_k R_c,k, J′ = Σ (m_k |R_c,k|² + Jc_k), Jc′ = J′ − m′ |ρ′|²,
    a1′ = r′·ρ′/l′, a2′ = ±√(|ρ′|² − a1′²) with the sign of (r′ × ρ′)·k."""
    m = np.asarray(masses, float)
    rc = np.asarray(coms, float) - np.asarray(proximal, float)
    jc = np.asarray(jcs, float)
    if rc.shape != (len(m), 2) or jc.shape != m.shape or not np.all(m > 0):
        raise MarkerError(f"merge needs masses (K,) > 0, coms (K, 2), jcs (K,); got {m.shape}, {rc.shape}, {jc.shape}")
    mass = float(m.sum())
    rho = (m[:, None] * rc).sum(axis=0) / mass
    j = float(np.sum(m * np.sum(rc ** 2, axis=1)) + jc.sum())
    jcp = j - mass * float(rho @ rho)
    if distal is None:
        return Merged(mass, float(np.linalg.norm(rho)), float(np.linalg.norm(rho)), 0.0, j, jcp)
    r = np.asarray(distal, float) - np.asarray(proximal, float)
    length = float(np.linalg.norm(r))
    a1 = float(r @ rho) / length
    a2 = float(np.sqrt(max(float(rho @ rho) - a1 * a1, 0.0)))
    cross = r[0] * rho[1] - r[1] * rho[0]
    return Merged(mass, length, a1, a2 if cross >= 0 else -a2, j, jcp)
