"""Gait metrics of a foot path over one crank cycle (methods.md c.8; Batbaatar 2021 thesis, Ch. 4).

Input: the foot point over one cycle, sampled uniformly in time (constant crank speed), periodic
(the last sample is not a repeat of the first), shape (N, 2) in m, planar frame x forward, y up.

    ground level   y_G = min y_F + penetration                  (the thesis's relative indentation)
    stance         y_F < y_G (penetration delta = y_G - y_F > 0)
    step_length    horizontal extent of the stance part of the path
    step_height    vertical extent of the whole path (max y - min y, from the lowest point)
    path_width     horizontal extent of the whole path
    leg_length     y_pivot - min y_F  (vertical distance from the fixed pivot O2 to the lowest point)
    duty_factor    stance fraction of the cycle

The path is treated as piecewise linear between samples: the stance boundaries are the
interpolated crossings of y_G, so the metrics converge with the sampling (error O(1/N^2)).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import LinkageError


@dataclass(frozen=True)
class GaitMetrics:
    """Foot-path metrics (m, and fractions); lifting_capability = step_height / leg_length,
    stance_fraction_of_width = step_length / path_width (the thesis's "SL in trajectory length")."""

    step_length: float
    step_height: float
    path_width: float
    leg_length: float
    duty_factor: float
    ground_level: float
    lifting_capability: float
    stance_fraction_of_width: float


def gait_metrics(foot: np.ndarray, pivot: np.ndarray, penetration: float = 0.008) -> GaitMetrics:
    """Metrics of one periodic foot cycle foot (N, 2) m with fixed pivot (2,) m (see module doc)."""
    foot = np.asarray(foot, dtype=float)
    if foot.ndim != 2 or foot.shape[1] != 2 or foot.shape[0] < 4 or not np.all(np.isfinite(foot)):
        raise LinkageError(f"foot: expected a finite (N >= 4, 2) path in m, got shape {foot.shape}")
    if not (np.isfinite(penetration) and penetration > 0):
        raise LinkageError(f"ground_penetration: expected a positive length in m, got {penetration!r}")
    x, y = foot[:, 0], foot[:, 1]
    y_min = y.min()
    y_g = y_min + penetration
    if penetration >= y.max() - y_min:
        raise LinkageError(f"ground_penetration: {penetration} m is not below the path's vertical "
                           f"extent {y.max() - y_min:.4g} m: the foot would never leave the ground")
    x1, y1 = np.roll(x, -1), np.roll(y, -1)
    below, below1 = y < y_g, y1 < y_g
    cross = below != below1
    t = np.where(cross, (y_g - y) / np.where(cross, y1 - y, 1.0), 0.0)
    frac = np.where(below & below1, 1.0, np.where(cross, np.where(below, t, 1.0 - t), 0.0))
    xs = np.concatenate([x[below], (x + t * (x1 - x))[cross]])
    return GaitMetrics(
        step_length=float(xs.max() - xs.min()),
        step_height=float(y.max() - y_min),
        path_width=float(x.max() - x.min()),
        leg_length=float(pivot[1] - y_min),
        duty_factor=float(frac.sum() / foot.shape[0]),
        ground_level=float(y_g),
        lifting_capability=float((y.max() - y_min) / (pivot[1] - y_min)),
        stance_fraction_of_width=float((xs.max() - xs.min()) / (x.max() - x.min())),
    )
