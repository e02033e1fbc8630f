"""Model adequacy and identification (methods.md (h)): a Sobol (LP-τ) scan, then Nelder–Mead
from the best points, over smoothing parameters and then segment parameters, minimising the
disagreement between the CoM acceleration of the model and the force plates.

Criterion (h.2, third integral, 3-D, in N²·s): with segment masses m_i, CoM accelerations a_i(t)
(N, S, 3) m/s² and the measured ground reaction on the body F(t) (N, 3) N,

    J = h Σ_t | Σ_i m_i (a_i(t) − g) − F(t) |²      over the samples kept (the ends trimmed, g.2)

i.e. Newton's law for the whole body, Ṗ = F + M g. Segment masses vary within ±band of their
nominal values with the total mass kept (h.3): m = m⁰ (1 + δ) · M / Σ m⁰ (1 + δ).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize
from scipy.stats import qmc

from .model import GRAVITY
from .smoothing import butterworth, differentiate

G = np.array(GRAVITY)


class IdentifyError(ValueError):
    """Bad input to an identification (names the argument)."""


@dataclass(frozen=True)
class Search:
    """x (d,) the best point; value J there; start: J at the initial guess x0; evaluations."""

    x: np.ndarray
    value: float
    start: float
    evaluations: int


def sobol_nelder_mead(f: Callable[[np.ndarray], float], bounds, x0=None, m: int = 10, starts: int = 3,
                      seed: int = 0, edge: float = 0.1) -> Search:
    """Minimise f over the box bounds (d, 2): the 2^m points of a Sobol sequence (h.4; m = 10 ≈ the
    book's 1000), then Nelder–Mead from the `starts` best points with a regular start simplex of
    edge `edge` × the box width (offsets d1 = t(√(n+1) + n − 1)/(n√2) in one coordinate,
    d2 = t(√(n+1) − 1)/(n√2) in the rest), kept inside the box. x0: the initial guess whose J is
    reported as ``start`` (default the box centre)."""
    b = np.asarray(bounds, float)
    if b.ndim != 2 or b.shape[1] != 2 or np.any(b[:, 1] <= b[:, 0]):
        raise IdentifyError(f"bounds must be (d, 2) with low < high, got {b.tolist()}")
    d = len(b)
    lo, hi = b[:, 0], b[:, 1]
    count = [0]

    def g(x):
        count[0] += 1
        v = f(np.clip(x, lo, hi))
        return v if np.isfinite(v) else np.inf

    x0 = (lo + hi) / 2 if x0 is None else np.asarray(x0, float)
    start = g(x0)
    pts = qmc.scale(qmc.Sobol(d, scramble=True, seed=seed).random_base2(m), lo, hi)
    vals = np.array([g(p) for p in pts])
    best_x, best_v = (x0, start)
    t = edge * (hi - lo)
    n = d
    d1 = t * (np.sqrt(n + 1) + n - 1) / (n * np.sqrt(2))
    d2 = t * (np.sqrt(n + 1) - 1) / (n * np.sqrt(2))
    for k in np.argsort(vals)[:starts]:
        simplex = [pts[k]]
        for j in range(n):
            v = pts[k] + d2
            v[j] = pts[k][j] + d1[j]
            simplex.append(v)
        r = optimize.minimize(g, pts[k], method="Nelder-Mead",
                              options={"initial_simplex": np.array(simplex), "xatol": 1e-6 * np.max(hi - lo),
                                       "fatol": 1e-12, "maxiter": 400 * d})
        if r.fun < best_v:
            best_x, best_v = np.clip(r.x, lo, hi), float(r.fun)
        if vals[k] < best_v:
            best_x, best_v = pts[k], float(vals[k])
    return Search(x=np.asarray(best_x, float), value=float(best_v), start=float(start), evaluations=count[0])


def com_criterion(masses, acc, force, dt: float, trim: int = 0) -> float:
    """J = h Σ |Σ_i m_i (a_i − g) − F|² (module doc). masses (S,) kg; acc (N, S, 3) m/s²; force
    (N, 3) N on the body; trim: samples dropped at each end (spline/filter end effects)."""
    a = np.asarray(acc, float)
    f = np.asarray(force, float)
    sl = slice(trim, len(a) - trim if trim else None)
    r = np.einsum("s,nsi->ni", np.asarray(masses, float), a[sl] - G) - f[sl]
    ok = np.all(np.isfinite(r), axis=1)
    if not ok.any():
        return float("nan")
    return float(dt * np.sum(r[ok] ** 2))


def scaled_masses(nominal, delta) -> np.ndarray:
    """m = m⁰ (1 + δ) rescaled to the nominal total (h.3: total mass kept)."""
    m0 = np.asarray(nominal, float)
    m = m0 * (1 + np.asarray(delta, float))
    return m * (m0.sum() / m.sum())


@dataclass(frozen=True)
class Identified:
    """cutoff Hz (marker smoothing), masses (S,) kg, and J before (nominal masses, start cutoff)
    and after each stage: j_start, j_smoothing, j_final (N²·s)."""

    cutoff: float
    masses: np.ndarray
    j_start: float
    j_smoothing: float
    j_final: float


def identify(positions, fs: float, force, nominal_masses, cutoff0: float = 6.0, cutoffs=(2.0, 20.0),
             band: float = 0.05, trim: int = 10, m: int = 6) -> Identified:
    """Identification in the order of h.3: (1) the marker low-pass cutoff (Hz, within `cutoffs`)
    with the nominal masses, (2) the segment masses within ±band keeping the total, (3) the
    cutoff again.

    positions (N, S, 3) m: each segment's CoM trajectory from the markers (raw); fs Hz;
    force (N, 3) N: the total ground reaction on the body at the same samples; nominal_masses (S,)
    kg. Accelerations: zero-lag Butterworth at the cutoff, then central differences twice; the
    force goes through the same Butterworth."""
    pos = np.asarray(positions, float)
    f = np.asarray(force, float)
    m0 = np.asarray(nominal_masses, float)
    if pos.ndim != 3 or pos.shape[1:] != (len(m0), 3) or f.shape != (len(pos), 3):
        raise IdentifyError(f"positions must be (N, {len(m0)}, 3) and force (N, 3), got {pos.shape}, {f.shape}")
    dt = 1.0 / fs

    def acc(fc):
        flat = pos.reshape(len(pos), -1)
        return differentiate(butterworth(flat, fs, fc), fs, 2).reshape(pos.shape)

    def j_cut(x, masses):
        # the force through the same filter as the markers (g.3: different cutoffs make artefacts)
        return com_criterion(masses, acc(float(x[0])), butterworth(f, fs, float(x[0])), dt, trim)

    j_start = j_cut([cutoff0], m0)
    s1 = sobol_nelder_mead(lambda x: j_cut(x, m0), [cutoffs], x0=[cutoff0], m=m, starts=2)
    fc = float(s1.x[0])
    a, fa = acc(fc), butterworth(f, fs, fc)
    s2 = sobol_nelder_mead(lambda d: com_criterion(scaled_masses(m0, d), a, fa, dt, trim),
                           [(-band, band)] * len(m0), x0=np.zeros(len(m0)), m=m, starts=2)
    masses = scaled_masses(m0, s2.x)
    s3 = sobol_nelder_mead(lambda x: j_cut(x, masses), [cutoffs], x0=[fc], m=m, starts=2)
    return Identified(cutoff=float(s3.x[0]), masses=masses, j_start=j_start, j_smoothing=s1.value,
                      j_final=s3.value)
