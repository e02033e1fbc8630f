"""Zero-moment point from whole-body kinematics, and ZMP deviation about a nominal (methods.md d.3, d.4).

All functions are batched over time (first axis, N samples) and take plain arrays in SI units, lab
frame (z up, g = 9.81 m/s² along −z); the planar forms use x forward, y up, counter-clockwise
rotations about +z, and say so.

The ZMP is the point p of the ground plane z = p_z about which the horizontal moment of the ground
reaction wrench vanishes. From the centroidal momentum rate (Ṗ = M c̈, L̇_G about the CoM):

    f   = Ṗ + M g e_z                    ground reaction force on the body (N)
    n_O = L̇_G + c × f                    its moment about the lab origin (N·m)
    p_x = (p_z f_x − n_y)/f_z ,  p_y = (p_z f_y + n_x)/f_z
        = c_x − [(c_z − p_z) Ṗ_x + L̇_G,y]/(M g + Ṗ_z),  c_y − [(c_z − p_z) Ṗ_y − L̇_G,x]/(M g + Ṗ_z)

The same wrench-to-point formula gives the combined COP of several plates (methods.md d.2): on flat
ground the COP is the ZMP. The ZMP is invalid (NaN + flag, never inf) where f_z < min_fraction·M g
(flight, pulling; methods.md d.6).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import kernels
from .model import G
from .spatial import cross, matvec
_FLIP = np.array([-1.0, 1.0])  # (n_y, n_x) → (−n_y, n_x)


class ZMPError(ValueError):
    """Bad ZMP input (names the argument and the expected shape)."""


@dataclass(frozen=True)
class ZMP:
    """ZMP result: point (N, 3) m on the ground plane (planar: (N,) x in m), NaN where not valid;
    valid (N,) bool: vertical ground reaction f_z ≥ min_fraction · M g."""

    point: np.ndarray
    valid: np.ndarray


def _series(a, name: str, width: int | None) -> np.ndarray:
    """a as (N, width) (or (N,) for width None), promoting one sample to N = 1; ZMPError naming `name`."""
    a = np.asarray(a, dtype=float)
    if a.ndim == (1 if width is None else 2) - 1:  # one sample: promote to N = 1
        a = a[None]
    if (width is None and a.ndim != 1) or (width is not None and (a.ndim != 2 or a.shape[1] != width)):
        want = "(N,)" if width is None else f"(N, {width})"
        raise ZMPError(f"{name} must have shape {want}, got {a.shape}")
    return a


def _check_n(**arrays: np.ndarray) -> int:
    sizes = [v.shape[0] for v in arrays.values()]
    if sizes.count(sizes[0]) != len(sizes):
        raise ZMPError(f"sample counts differ: {dict(zip(arrays, sizes))}")
    return sizes[0]


def _mass(mass: float) -> float:
    if not (math.isfinite(mass) and mass > 0):
        raise ZMPError(f"mass must be finite and > 0 kg, got {mass}")
    return float(mass)


def ground_wrench(mass: float, com, pdot, ldot, g: float | np.ndarray = G) -> tuple[np.ndarray, np.ndarray]:
    """Ground reaction wrench that the motion requires, from the centroidal momentum rate.

    f = Ṗ − M g⃗ (= Ṗ + M g e_z for g⃗ = (0, 0, −g)) in N, n_O = L̇_G + c × f in N·m about the lab origin.
    mass M in kg; com c (N, 3) m; pdot Ṗ = M c̈ (N, 3) N; ldot L̇_G (N, 3) N·m, rate of angular momentum
    about the CoM; lab frame. g: scalar g in m/s² (gravity along −z), or the gravity vector g⃗ (3,) m/s²
    (e.g. a planar model's (0, −9.81, 0)). Exact when the ground is the only external load besides
    gravity. Returns (f, n_O), each (N, 3).
    """
    mass = _mass(mass)
    com, pdot, ldot = _series(com, "com", 3), _series(pdot, "pdot", 3), _series(ldot, "ldot", 3)
    _check_n(com=com, pdot=pdot, ldot=ldot)
    gvec = np.array([0.0, 0.0, -float(g)]) if np.ndim(g) == 0 else np.asarray(g, dtype=float)
    if gvec.shape != (3,):
        raise ZMPError(f"g must be a scalar or a 3-vector (m/s²), got shape {gvec.shape}")
    f = pdot - mass * gvec
    return f, ldot + cross(com, f)


def zmp_of_wrench(force, moment, ground_z: float = 0.0, min_fz: float = 0.0) -> ZMP:
    """Point of the plane z = ground_z where the horizontal moment of a wrench vanishes.

    p_x = (p_z f_x − n_y)/f_z, p_y = (p_z f_y + n_x)/f_z (methods.md d.2). force (N, 3) N and moment
    (N, 3) N·m about the lab origin, lab frame: the ground reaction on the body. min_fz: N, samples with
    f_z ≤ min_fz are NaN and flagged invalid (no division happens there).
    """
    f, n = _series(force, "force", 3), _series(moment, "moment", 3)
    _check_n(force=f, moment=n)
    if kernels.enabled():       # one compiled loop (kernels/ground.py)
        p, valid = np.empty(f.shape), np.empty(f.shape[0], dtype=bool)
        kernels.kernel("ground.zmp_of_wrench")(np.ascontiguousarray(f), np.ascontiguousarray(n), float(ground_z),
                                               float(min_fz), p, valid)
        return ZMP(p, valid)
    fz = f[:, 2:]
    valid = fz[:, 0] > max(min_fz, 0.0)
    p = np.full(f.shape, np.nan)
    # (p_x, p_y) = (p_z (f_x, f_y) + (−n_y, n_x)) / f_z in one division, only where valid
    np.divide(ground_z * f[:, :2] + n[:, 1::-1] * _FLIP, fz, out=p[:, :2], where=valid[:, None])
    p[valid, 2] = ground_z
    return ZMP(p, valid)


def zmp_centroidal(mass: float, com, pdot, ldot, ground_z: float = 0.0, g: float = G, min_fraction: float = 0.1) -> ZMP:
    """Whole-body 3-D ZMP from the centroidal momentum rate (module equations, methods.md d.3).

    mass M kg; com (N, 3) m; pdot Ṗ (N, 3) N; ldot L̇_G (N, 3) N·m; ground_z m; lab frame, z up.
    Invalid where M g + Ṗ_z < min_fraction · M g. Returns :class:`ZMP` with point (N, 3).
    """
    f, n = ground_wrench(mass, com, pdot, ldot, g)
    return zmp_of_wrench(f, n, ground_z, min_fraction * _mass(mass) * g)


def zmp_planar(mass: float, com, pdot, kdot, ground_y: float = 0.0, g: float = G, min_fraction: float = 0.1) -> ZMP:
    """Planar ZMP (x forward, y up, k̇_c counter-clockwise about +z), methods.md d.3:

        p = x_c − [(y_c − y_g) Ṗ_x − k̇_c] / (M g + Ṗ_y)

    mass M kg; com (N, 2) m; pdot Ṗ = M c̈ (N, 2) N; kdot k̇_c (N,) N·m, rate of angular momentum about
    the CoM; ground_y m. Returns :class:`ZMP` with point (N,) = the x of the ZMP on the ground line,
    NaN where M g + Ṗ_y < min_fraction · M g.
    """
    mass = _mass(mass)
    com, pdot, kdot = _series(com, "com", 2), _series(pdot, "pdot", 2), _series(kdot, "kdot", None)
    _check_n(com=com, pdot=pdot, kdot=kdot)
    fy = mass * g + pdot[:, 1]
    valid = (fy > 0.0) & (fy >= min_fraction * mass * g)
    p = np.full(fy.shape, np.nan)
    num = (com[:, 1] - ground_y) * pdot[:, 0] - kdot
    np.divide(-num, fy, out=p, where=valid)
    return ZMP(np.where(valid, com[:, 0] + p, np.nan), valid)


def zmp_point_masses_planar(masses, positions, accelerations, inertias=None, angular_accelerations=None,
                            ground_y: float = 0.0, g: float = G, min_fraction: float = 0.1) -> ZMP:
    """Planar ZMP of a system of n segments (x forward, y up, angles counter-clockwise), methods.md d.3:

        p = [Σ m_i (ÿ_i + g) x_i − Σ m_i ẍ_i (y_i − y_g) + Σ J_i φ̈_i] / Σ m_i (ÿ_i + g)

    masses (n,) kg; positions, accelerations (N, n, 2) of the segment CoMs, m and m/s²; inertias (n,)
    kg·m² central; angular_accelerations φ̈ (N, n) rad/s² (both optional: point masses).
    """
    m = np.asarray(masses, dtype=float)
    r = np.asarray(positions, dtype=float)
    a = np.asarray(accelerations, dtype=float)
    if m.ndim != 1 or r.ndim != 3 or r.shape[1:] != (m.size, 2) or a.shape != r.shape:
        raise ZMPError(f"positions and accelerations must be (N, {m.size}, 2), got {r.shape} and {a.shape}")
    wy = m * (a[..., 1] + g)
    num = np.sum(wy * r[..., 0] - m * a[..., 0] * (r[..., 1] - ground_y), axis=1)
    if inertias is not None:
        j = np.asarray(inertias, dtype=float)
        phi = np.asarray(angular_accelerations, dtype=float)
        if j.shape != m.shape or phi.shape != r.shape[:2]:
            raise ZMPError(f"inertias must be ({m.size},) and angular_accelerations ({r.shape[0]}, {m.size}), got {j.shape}, {phi.shape}")
        num = num + phi @ j
    den = wy.sum(axis=1)
    valid = (den > 0.0) & (den >= min_fraction * m.sum() * g)
    p = np.full(den.shape, np.nan)
    np.divide(num, den, out=p, where=valid)
    return ZMP(p, valid)


@dataclass(frozen=True)
class ZMPDeviation:
    """d (N, 2) m: actual ZMP minus the nominal, on the ground; norm (N,) |d| m; max d̄ = max_t |d| m
    (over valid samples); valid (N,) bool (f_z above the threshold)."""

    d: np.ndarray
    norm: np.ndarray
    max: float
    valid: np.ndarray


def zmp_deviation(force, moment, nominal, min_fz: float = 0.0) -> ZMPDeviation:
    """ZMP deviation about a nominal ZMP p_n (Surla 1980, Eqs. 3.44–3.45; methods.md d.4):

        M = n_O − p_n × f ,   d_x = −M_y / f_z ,   d_y = M_x / f_z

    force f (N, 3) N and moment n_O (N, 3) N·m about the lab origin: the ground reaction on the body
    (e.g. from :func:`ground_wrench`, or measured plates); nominal p_n (N, 3) or (3,) m on the ground
    plane, lab frame. d is the vector from the nominal to the actual ZMP.
    """
    f, n = _series(force, "force", 3), _series(moment, "moment", 3)
    nn = _check_n(force=f, moment=n)
    pn = np.broadcast_to(np.asarray(nominal, dtype=float), (nn, 3)) if np.ndim(nominal) == 1 else _series(nominal, "nominal", 3)
    _check_n(force=f, nominal=pn)
    mom = n - cross(pn, f)
    valid = f[:, 2] > max(min_fz, 0.0)
    d = np.full((nn, 2), np.nan)
    np.divide(-mom[:, 1], f[:, 2], out=d[:, 0], where=valid)
    np.divide(mom[:, 0], f[:, 2], out=d[:, 1], where=valid)
    norm = np.hypot(d[:, 0], d[:, 1])
    return ZMPDeviation(d, norm, float(np.max(norm[valid])) if valid.any() else float("nan"), valid)


def com_of_state(model, st) -> np.ndarray:
    """CoM c = Σ m_i (p_i + R_i c_i) / M (N, 3) m, lab frame, of a ``dynamics.Model`` from a
    ``kinematics.TreeState`` (segment origins p_i, axes R_i; c_i the local segment CoMs): one
    weighted sum, without the segment inertias that ``com.com`` also builds."""
    return np.einsum("s,nsj->nj", model.masses / model.total_mass, st.position + matvec(st.rotation, model.coms))


def _gravity_axis(gvec: np.ndarray) -> tuple[int, float]:
    """(axis, g) with gravity g⃗ = −g e_axis (np.allclose's tolerances), axis −1 if along no −axis."""
    comps = [float(x) for x in gvec]
    g = math.sqrt(sum(x * x for x in comps))
    for axis in (2, 1):
        want = [0.0, 0.0, 0.0]
        want[axis] = -g
        if all(abs(x - w) <= 1e-8 + 1e-5 * abs(w) for x, w in zip(comps, want)):
            return axis, g
    return -1, g


def zmp_model(model, q, v, a, ground: float = 0.0, min_fraction: float = 0.1) -> ZMP:
    """Kinematic ZMP of a tree model (``dynamics.Model``) from its CoM and centroidal momentum rate.

    q (N, nq), v, a (N, nv) (or single samples). 3-D models (gravity along −z): :func:`zmp_centroidal`
    on the plane z = ground, point (N, 3). Planar models (gravity along −y; x forward, y up):
    :func:`zmp_planar` on the line y = ground, point (N,) = x, with k̇_c = L̇_G,z.
    """
    from .centroidal import centroidal_momentum, centroidal_state
    from .kinematics import check_state, tree_state

    axis, g = _gravity_axis(np.asarray(model.gravity, dtype=float))
    if axis < 0:
        raise ZMPError(f"model {model.name!r}: gravity {model.gravity.tolist()} is along neither −z (3-D) nor −y (planar)")
    if kernels.enabled():       # c and ḣ_G from one compiled pass
        (qb, vb, ab), _ = check_state(model, q, v, a)
        if vb is None or ab is None:
            raise ValueError("zmp_model needs q, v and a")
        X = centroidal_state(model, qb, vb, ab)
        c, dh = X[:, :3], X[:, 9:15]
    else:
        (qb, _, _), _ = check_state(model, q)
        _, dh = centroidal_momentum(model, q, v, a)
        dh = np.atleast_2d(dh)
        c = com_of_state(model, tree_state(model, qb))
    if axis == 2:
        return zmp_centroidal(model.total_mass, c, dh[:, :3], dh[:, 3:], ground, g, min_fraction)
    return zmp_planar(model.total_mass, c[:, :2], dh[:, :2], dh[:, 5], ground, g, min_fraction)
