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
    fewer than 3 markers were seen."""

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
    n = obs.shape[0]
    rot = np.full((n, 3, 3), np.nan)
    tr = np.full((n, 3), np.nan)
    res = np.full(n, np.nan)
    seen = np.all(np.isfinite(obs), axis=2)
    patterns, inverse = np.unique(seen, axis=0, return_inverse=True)
    for k, pat in enumerate(patterns):
        if pat.sum() < 3:
            continue
        rows = np.flatnonzero(inverse.ravel() == k)
        r = ref[pat]
        x = obs[rows][:, pat]
        rc = r.mean(axis=0)
        xc = x.mean(axis=1)
        h = np.einsum("mi,nmj->nij", r - rc, x - xc[:, None])
        u, _, vt = np.linalg.svd(h)
        d = np.sign(np.linalg.det(np.swapaxes(vt, 1, 2) @ np.swapaxes(u, 1, 2)))
        fix = np.broadcast_to(np.eye(3), (len(rows), 3, 3)).copy()
        fix[:, 2, 2] = d
        R = np.swapaxes(vt, 1, 2) @ fix @ np.swapaxes(u, 1, 2)
        t = xc - np.einsum("nij,j->ni", R, rc)
        fitted = np.einsum("nij,mj->nmi", R, r) + t[:, None]
        rot[rows], tr[rows] = R, t
        res[rows] = np.sqrt(np.mean(np.sum((fitted - x) ** 2, axis=2), axis=1))
    return RigidFit(rotation=rot, translation=tr, residual=res)


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
