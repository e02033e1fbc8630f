"""Inverse dynamics of a Jansen walker from measured state: shaft torques, foot forces, ZMP and margin.

The live form of the world model of `dynamics.plants.jansen_world` (its module doc has the
equations): generalised coordinates q = (X, Z, φ, s_L, s_R) — chassis crank centre (m), pitch
(rad, + nose up), shaft angles (rad) — and u = q̇, measured (chassis from markers, shafts from
encoders). Per sample:

- foot forces (ground on foot, lab frame x forward, y left, z up, N): the contact law of the world
  (`jansen_world.contact`) for every foot; where a force plate with a finite reading covers feet,
  the plate's measured force replaces the law's for them: each foot keeps its law force plus a
  share of the difference F_p − Σ_{l on p} F_law,l, shared in proportion to the law's normal forces
  (equal shares when the law gives none), so Σ_{l on p} F_l = F_p exactly and a law that is right
  is kept foot by foot (the tangential forces differ per foot with each foot's slip). The plate's lateral force is not used (the model is planar) and a plate force that
  covers no foot is reported as ``unassigned``.
- shaft torques (methods.md c.6, the reduced form summed over the legs on each shaft):

      τ_s = I_s(s) s̈ − Q_s(q, u, F)     Q_s = Σ_{l on s} (R(φ) ∂ρ_l/∂s)·F_l − ½ I_s′ ṡ² − G_s

  (N·m, what the motor must deliver to the shaft, motor inertia excluded); ``load`` = −Q_s, the
  legs' load torque (the world's ``tau_load``).
- the ZMP: the point of z = 0 where the horizontal moment of the total ground wrench vanishes
  (`zmp.zmp_of_wrench`; on flat ground the centre of pressure of all contacts): the plates' measured
  wrenches (moment about their surface centre, carried to the lab origin: M_O = M_c + c × F) plus
  r_l × F_l of the feet no plate covers; valid where F_z > ``min_fz``;
- the stability margin: signed distance of the ZMP to the support polygon of the feet whose
  normal force exceeds ``contact_n`` (`support.support_margin`: > 0 inside, m).

Arrays: time first (N samples), then feet (L) or plates (P), then the space axis; SI units.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import kernels
from .contact import friction_force, normal_force
from .forceplate import Plate
from .linkage.reduced import LinkageError, ReducedTable, lookup
from .plants.jansen_world import JansenWorld
from .support import support_margin, support_polygon, within
from .zmp import zmp_of_wrench

_I, _DI, _G, _X, _Y, _JX, _JY = range(7)  # reduced.CHANNELS


@dataclass(frozen=True)
class WalkerLoads:
    """Per sample (N first): foot (N, L, 3) m and force (N, L, 3) N ground on foot, lab frame;
    measured (N, L) bool (the force is a plate's share, else the contact law's); tau (N, 2) and
    load (N, 2) N·m per shaft (left, right; module doc); inertia (N, 2) kg m² (I_s);
    zmp (N, 3) m (NaN where not valid), zmp_valid (N,) bool; margin (N,) m (NaN in flight);
    support (N,) int vertices of the support polygon; unassigned (N,) N plate F_z on no foot."""

    foot: np.ndarray
    force: np.ndarray
    measured: np.ndarray
    tau: np.ndarray
    load: np.ndarray
    inertia: np.ndarray
    zmp: np.ndarray
    zmp_valid: np.ndarray
    margin: np.ndarray
    support: np.ndarray
    unassigned: np.ndarray


def _state(q, u, sdd, n_plates: int, plate_wrench) -> tuple[np.ndarray, ...]:
    q, u, sdd = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, u, sdd))
    n = q.shape[0]
    if q.shape != (n, 5) or u.shape != (n, 5) or sdd.shape != (n, 2):
        raise ValueError(f"walker_inverse: expected q (N, 5), u (N, 5) and sdd (N, 2), got {q.shape}, {u.shape}, "
                         f"{sdd.shape}")
    if plate_wrench is not None and np.shape(plate_wrench) != (n, n_plates, 6):
        raise ValueError(f"walker_inverse: plate_wrench must be (N, {n_plates}, 6) [F, M about the plate centre], "
                         f"got {np.shape(plate_wrench)}")
    pw = np.full((n, n_plates, 6), np.nan) if plate_wrench is None else np.asarray(plate_wrench, dtype=float)
    return q, u, sdd, pw


@dataclass(frozen=True, eq=False)
class WalkerModel:
    """What `walker_inverse` needs besides the samples, built once (`walker_model`): the world, its
    leg table as a `ReducedTable`, per_shaft (2, L) the 0/1 matrix of the legs on each shaft, the
    plates with their outlines (`support.SupportPolygon`) and surface centres (P, 3) m, and the
    outlines' inward edge normals (P, E, 2) and offsets (P, E) m packed for the compiled kernel (None
    when the plates' outlines differ in edge count or one has fewer than 3: the numpy path then)."""

    world: JansenWorld
    table: ReducedTable
    per_shaft: np.ndarray
    plates: tuple[Plate, ...]
    outlines: tuple
    centres: np.ndarray
    normals: np.ndarray | None
    offsets: np.ndarray | None


def walker_model(world: JansenWorld, plates: Sequence[Plate] = ()) -> WalkerModel:
    """The constant part of the walker's live inverse dynamics (plates fixed in the lab)."""
    L = world.n_legs
    per_shaft = np.zeros((2, L))
    per_shaft[world.shaft, np.arange(L)] = 1.0
    outlines = tuple(support_polygon(p.corners) for p in plates)
    edges = {o.n_vertices for o in outlines} or {3}
    packed = len(edges) == 1 and min(edges) >= 3
    e = edges.pop()
    return WalkerModel(world, ReducedTable(world.name, world.step, world.coef, ()), per_shaft, tuple(plates),
                       outlines, np.array([p.centre for p in plates], dtype=float).reshape(-1, 3),
                       np.array([o.normals for o in outlines], dtype=float).reshape(-1, e, 2) if packed else None,
                       np.array([o.offsets for o in outlines], dtype=float).reshape(-1, e) if packed else None)


def _rotate(c: np.ndarray, s: np.ndarray, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return c * x - s * z, s * x + c * z


def _cross(r: np.ndarray, f: np.ndarray) -> np.ndarray:
    """r × f over the last axis (3,), without numpy.cross's axis shuffling (the live path)."""
    out = np.empty(np.broadcast_shapes(r.shape, f.shape))
    out[..., 0] = r[..., 1] * f[..., 2] - r[..., 2] * f[..., 1]
    out[..., 1] = r[..., 2] * f[..., 0] - r[..., 0] * f[..., 2]
    out[..., 2] = r[..., 0] * f[..., 1] - r[..., 1] * f[..., 0]
    return out


def legs(model: WalkerModel, q: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, ...]:
    """The world's leg kinematics and contact-law forces for N samples at once (the batch form of
    `jansen_world.contact`, without its Jacobians): q, u (N, 5). Returns foot (N, L, 2) and foot
    velocity (N, L, 2) (x, z; m, m/s), law force (N, L, 2) (F_T, F_N; N), b (N, L, 2) = R(φ) ∂ρ_l/∂s
    (m/rad), Q_s without the foot forces (N, 2) = −½ I_s′ ṡ² − G_s (N·m) and I_s (N, 2) kg m²."""
    world = model.world
    n, L = q.shape[0], world.n_legs
    th = world.sigma * q[:, 3 + world.shaft] + world.offset                   # (N, L)
    v = lookup(model.table, th.ravel()).reshape(n, L, 7)
    c, sn = np.cos(q[:, 2])[:, None], np.sin(q[:, 2])[:, None]
    foot, vel, b = np.empty((n, L, 2)), np.empty((n, L, 2)), np.empty((n, L, 2))
    rx, rz = _rotate(c, sn, world.bx * v[..., _X], v[..., _Y])                 # R ρ
    b[..., 0], b[..., 1] = _rotate(c, sn, world.bx * world.sigma * v[..., _JX], world.sigma * v[..., _JY])
    foot[..., 0], foot[..., 1] = q[:, 0, None] + rx, q[:, 1, None] + rz
    sd_leg = u[:, 3 + world.shaft]
    vel[..., 0] = u[:, 0, None] - u[:, 2, None] * rz + b[..., 0] * sd_leg
    vel[..., 1] = u[:, 1, None] + u[:, 2, None] * rx + b[..., 1] * sd_leg
    force = np.zeros((n, L, 2))
    force[..., 1] = normal_force(world.law, -foot[..., 1], -vel[..., 1])
    if world.friction is not None:
        force[..., 0] = friction_force(world.friction, force[..., 1], vel[..., :1])[..., 0]
    sd = u[:, 3:5]
    q_s = -(0.5 * ((world.sigma * v[..., _DI]) @ model.per_shaft.T) * sd * sd
            + (world.sigma * v[..., _G]) @ model.per_shaft.T)
    return foot, vel, force, b, q_s, v[..., _I] @ model.per_shaft.T


def walker_inverse(model: WalkerModel, q, u, sdd, plate_wrench=None, contact_n: float = 1.0,
                   min_fz: float = 1.0) -> WalkerLoads:
    """Shaft torques, foot forces, ZMP and margin (module doc) of samples q (N, 5), u (N, 5) and shaft
    accelerations sdd (N, 2) rad/s², with the plates' lab wrenches plate_wrench (N, P, 6) = [F (N),
    M (N·m) about each plate's surface centre] (NaN: no reading; None: no plates). contact_n (N): normal
    force above which a foot supports; min_fz (N): least total F_z for a ZMP. One compiled loop over the
    samples (`kernels/walker.py`) unless the numpy path is selected (`dynamics.kernels`)."""
    world = model.world
    q, u, sdd, plate_wrench = _state(q, u, sdd, len(model.plates), plate_wrench)
    if kernels.enabled() and model.normals is not None:
        return _compiled(model, q, u, sdd, plate_wrench, contact_n, min_fz)
    n, L = q.shape[0], world.n_legs
    foot2, _, f_law, b, q_s, inertia = legs(model, q, u)
    foot = np.empty((n, L, 3))
    foot[..., 0], foot[..., 1], foot[..., 2] = foot2[..., 0], world.lateral, foot2[..., 1]
    f = f_law.copy()
    free = np.ones((n, L), dtype=bool)
    total_f, total_m = np.zeros((n, 3)), np.zeros((n, 3))
    unassigned = np.zeros(n)
    for k, outline in enumerate(model.outlines):
        w = plate_wrench[:, k]
        ok = np.isfinite(w).all(axis=1)
        wz = np.where(ok[:, None], w, 0.0)
        total_f += wz[:, :3]
        total_m += wz[:, 3:] + _cross(model.centres[k], wz[:, :3])
        on = within(foot[..., :2].reshape(-1, 2), outline).reshape(n, L) & free & ok[:, None]
        if not on.any():
            unassigned += wz[:, 2]
            continue
        count = on.sum(axis=1)
        unassigned += np.where(count == 0, wz[:, 2], 0.0)
        law_on = np.where(on[..., None], f_law, 0.0)
        sum_n = law_on[..., 1].sum(axis=1, keepdims=True)
        share = np.divide(law_on[..., 1], sum_n, out=on / np.maximum(count, 1)[:, None], where=sum_n > 0)
        # the law's forces plus a share of what they miss: exact where the law is right
        f += share[..., None] * (wz[:, None, [0, 2]] - law_on.sum(axis=1, keepdims=True))
        free &= ~on
    force = np.zeros((n, L, 3))
    force[..., 0], force[..., 2] = f[..., 0], f[..., 1]
    fr = np.where(free[..., None], force, 0.0)
    total_f += fr.sum(axis=1)
    total_m += _cross(foot, fr).sum(axis=1)
    load = -(q_s + (b[..., 0] * f[..., 0] + b[..., 1] * f[..., 1]) @ model.per_shaft.T)
    tau = inertia * sdd + load
    z = zmp_of_wrench(total_f, total_m, 0.0, min_fz)
    margin, nv = support_margin(foot, force[..., 2] > contact_n, z.point)
    return WalkerLoads(foot, force, ~free, tau, load, inertia, z.point, z.valid, margin, nv, unassigned)


def _compiled(model: WalkerModel, q: np.ndarray, u: np.ndarray, sdd: np.ndarray, pw: np.ndarray, contact_n: float,
              min_fz: float) -> WalkerLoads:
    """`walker_inverse` on the compiled kernel: the same numbers as the numpy path (tests/dynamics)."""
    world = model.world
    if not np.isfinite(q[:, 3:5].sum()):
        raise LinkageError("theta: contains NaN or inf")        # as the table lookup of the numpy path
    n, L = q.shape[0], world.n_legs
    foot, force = np.empty((n, L, 3)), np.empty((n, L, 3))
    measured = np.empty((n, L), dtype=bool)
    tau, load, inertia = np.empty((n, 2)), np.empty((n, 2)), np.empty((n, 2))
    zmp, valid, margin = np.empty((n, 3)), np.empty(n, dtype=bool), np.empty(n)
    support, unassigned = np.empty(n, dtype=np.int64), np.empty(n)
    c = np.ascontiguousarray
    kernels.kernel("walker.inverse")(*world.codes, world.coef, float(world.step), world.shaft, world.sigma,
                                     world.offset, world.bx, world.lateral, model.normals, model.offsets,
                                     model.centres, c(q), c(u), c(sdd), c(pw), float(contact_n), float(min_fz),
                                     foot, force, measured, tau, load, inertia, zmp, valid, margin, support,
                                     unassigned)
    return WalkerLoads(foot, force, measured, tau, load, inertia, zmp, valid, margin, support, unassigned)
