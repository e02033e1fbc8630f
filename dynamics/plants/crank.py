"""The crank plant of sim mode: the load a Jansen leg or walker puts on its crank motor (methods.md c.6, e).

A walker is L legs on one shaft; leg l's crank is at θ + p_l (phase p_l, rad). Each leg's reduced
one-degree-of-freedom form (`dynamics.linkage.reduced`) gives, summed over the legs,

    τ(θ, θ̇, θ̈) = I(θ) θ̈ + ½ I′(θ) θ̇² + G(θ) − Σ_l J_l(θ)ᵀ F_l            (N·m about +z)
    I = Σ_l I_leg(θ + p_l),  I′ = Σ_l I′_leg(θ + p_l),  G = Σ_l G_leg(θ + p_l)

the torque the crank must supply (a motor's load). The chassis is the linkage's ground frame and is
held fixed (a walker on a stand); with a ground line at height y_g (planar frame: x forward, y up,
origin at the crank centre), a foot below it is pushed by a penalty contact
(`dynamics.contact`): penetration δ_l = y_g − y_l, rate δ̇_l = −ẏ_l with ṙ_l = J_l θ̇, normal
force F_N = law(δ, δ̇) ≥ 0, friction F_T = −μ(|v_T|) F_N v_T/|v_T| on the slip v_T = ẋ_l, and
F_l = (F_T, F_N). Only laws without a latched approach velocity (Hertz, Kelvin–Voigt, constant
damping Hunt–Crossley, the one methods.md e.3 recommends for sustained stance) are accepted: the
load is then a function of (θ, θ̇) alone, with no episode state.

Legs that differ only by phase share one table (`crank_plant` tabulates each distinct Linkage
object once): a copy of a leg with phase p is the phase-0 copy evaluated at θ + p (the walker
composer adds the phase to the crank driver and to the assembly). The motor-plant callback is
`motor_load` (J_load = I, τ_load = τ − I θ̈), ~0.1 ms a call for 12 legs.

Energy: at constant θ̇ = ω over one revolution ∮ (½ I′ ω² + G) dθ = 0 (I and the potential are
periodic), so the mean of τ·ω over a revolution is the power the contact dissipates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..contact import ContactError, Friction, NormalLaw, friction_force, normal_force
from ..linkage.model import Linkage, LinkageError
from ..linkage.reduced import lookup, tabulate

_I, _DI, _G, _X, _Y, _JX, _JY = range(7)  # reduced.CHANNELS


@dataclass(frozen=True, eq=False)
class CrankPlant:
    """Constant model of a crank load: stacked leg tables, phases, ground and contact law.

    coef (T, K, 4, 7): the piecewise-cubic coefficients of the T distinct leg tables
    (`ReducedTable.coef`, channels `reduced.CHANNELS`, K intervals of width step rad);
    table (L,): which table each leg uses; phase (L,): each leg's crank phase, rad;
    ground_y: ground line height (m, planar frame), None = no contact; law, friction: the contact
    laws (friction None = frictionless); name: model name.
    """

    name: str
    step: float
    coef: np.ndarray
    table: np.ndarray
    phase: np.ndarray
    ground_y: float | None = None
    law: NormalLaw | None = None
    friction: Friction | None = None

    @property
    def n_legs(self) -> int:
        return int(self.phase.size)


@dataclass(frozen=True)
class CrankLoad:
    """Load terms at N states (batched, planar frame x forward y up).

    inertia I (N,) kg·m²; d_inertia I′ (N,) kg·m²/rad; gravity G (N,) N·m; contact −Σ J_lᵀ F_l (N,) N·m;
    foot r_l (N, L, 2) m; foot_velocity ṙ_l (N, L, 2) m/s; foot_force F_l (N, L, 2) N (ground on foot).
    """

    inertia: np.ndarray
    d_inertia: np.ndarray
    gravity: np.ndarray
    contact: np.ndarray
    foot: np.ndarray
    foot_velocity: np.ndarray
    foot_force: np.ndarray


def crank_plant(legs: Sequence[tuple[Linkage, float]], *, size: int = 720, ground_penetration: float | None = None,
                law: NormalLaw | None = None, friction: Friction | None = None, name: str = "") -> CrankPlant:
    """Tabulate the legs (linkage, phase rad) of a crank: one table per distinct Linkage object.

    ground_penetration (m): the ground line is the lowest foot point of all legs plus this depth
    (models.md 2.5: 0.008 m); None = no ground contact. law: the normal law (required with a ground;
    non-latching kinds only), friction: optional.
    """
    if not legs:
        raise LinkageError("crank_plant: no legs")
    distinct: dict[int, tuple[Linkage, list[float]]] = {}
    for k, (model, phase) in enumerate(legs):
        if not isinstance(model, Linkage) or not np.isfinite(phase):
            raise LinkageError(f"crank_plant: legs[{k}] must be (Linkage, finite phase rad), "
                               f"got ({model!r}, {phase!r})")
        distinct.setdefault(id(model), (model, []))[1].append(float(phase))
    tables = [tabulate(m, size) for m, _ in distinct.values()]
    table = np.concatenate([np.full(len(p), j) for j, (_, p) in enumerate(distinct.values())])
    phase = np.concatenate([p for _, p in distinct.values()])
    ground_y = None
    if ground_penetration is not None:
        if not (np.isfinite(ground_penetration) and ground_penetration >= 0):
            raise ContactError(f"crank_plant: ground_penetration must be >= 0 m, got {ground_penetration}")
        if law is None:
            raise ContactError("crank_plant: a ground needs a normal contact law (law=NormalLaw(...))")
        if law.uses_latch:
            raise ContactError(f"crank_plant: the {law.kind} law latches the approach velocity per episode; "
                               "use hertz, kelvin_voigt or hunt_crossley_constant")
        grid = np.linspace(0.0, 2.0 * np.pi, 8 * size, endpoint=False)
        lowest = min(float(lookup(t, grid)[:, _Y].min()) for t in tables)
        ground_y = lowest + float(ground_penetration)
    coef = np.stack([t.coef for t in tables])
    coef.setflags(write=False)
    return CrankPlant(name or "+".join(t.name for t in tables), tables[0].step, coef, table, phase, ground_y,
                      law if ground_y is not None else None, friction if ground_y is not None else None)


def _legs(plant: CrankPlant, th: np.ndarray, om: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Table values v (N, L, 7) of every leg (`reduced.lookup` for all legs at once), foot velocities
    (N, L, 2) m/s and ground-on-foot forces (N, L, 2) N."""
    x = np.mod(th[:, None] + plant.phase, 2.0 * np.pi) / plant.step
    k = np.minimum(x.astype(np.intp), plant.coef.shape[1] - 1)
    t = ((x - k) * plant.step)[..., None]
    c = plant.coef[plant.table, k]  # (N, L, 4, 7)
    v = ((c[..., 0, :] * t + c[..., 1, :]) * t + c[..., 2, :]) * t + c[..., 3, :]
    vel = v[..., _JX:_JY + 1] * om[:, None, None]
    force = np.zeros_like(vel)
    if plant.ground_y is not None:
        # flat ground, normal +y: δ = y_g − y, δ̇ = −ẏ, slip v_T = (ẋ, 0)
        f_n = normal_force(plant.law, plant.ground_y - v[..., _Y], -vel[..., 1])
        force[..., 1] = f_n
        if plant.friction is not None:
            force[..., :1] = friction_force(plant.friction, f_n, vel[..., :1])
    return v, vel, force


def _states(theta, theta_d) -> tuple[np.ndarray, np.ndarray]:
    th = np.asarray(theta, dtype=float).reshape(-1)
    om = np.asarray(theta_d, dtype=float).reshape(-1)
    if om.shape != th.shape or np.ndim(theta) > 1:
        raise ValueError(f"crank plant: theta {np.shape(theta)} and theta_d {np.shape(theta_d)} "
                         "must be equal (N,) shapes")
    return th, om


def crank_load(plant: CrankPlant, theta, theta_d) -> CrankLoad:
    """The load terms at crank angles `theta` (N,) rad and rates `theta_d` (N,) rad/s (see `CrankLoad`)."""
    th, om = _states(theta, theta_d)
    v, vel, force = _legs(plant, th, om)
    jac = v[..., _JX:_JY + 1]
    return CrankLoad(inertia=v[..., _I].sum(axis=1), d_inertia=v[..., _DI].sum(axis=1), gravity=v[..., _G].sum(axis=1),
                     contact=-np.einsum("nlc,nlc->n", jac, force), foot=v[..., _X:_Y + 1], foot_velocity=vel,
                     foot_force=force)


def motor_load(plant: CrankPlant, theta, theta_d) -> tuple[np.ndarray, np.ndarray]:
    """(J_load, τ_load) at the output shaft for a motor plant: J_load = I(θ) kg·m² and
    τ_load = ½ I′ θ̇² + G − Σ J_lᵀ F_l N·m (so that J_load θ̈ + τ_load = τ), shapes (N,).
    The live path (called every plant substep): no `CrankLoad` is built."""
    th, om = _states(theta, theta_d)
    v, _, force = _legs(plant, th, om)
    s = v[..., :_G + 1].sum(axis=1)  # I, I', G summed over the legs
    contact = (v[..., _JX] * force[..., 0] + v[..., _JY] * force[..., 1]).sum(axis=1)
    return s[:, _I], 0.5 * s[:, _DI] * om * om + s[:, _G] - contact


def crank_torque(plant: CrankPlant, theta, theta_d, theta_dd) -> np.ndarray:
    """τ = I θ̈ + ½ I′ θ̇² + G − Σ J_lᵀ F_l (N,) N·m for angles, rates and accelerations (N,) rad, rad/s, rad/s²."""
    inertia, tau_load = motor_load(plant, theta, theta_d)
    return inertia * np.asarray(theta_dd, dtype=float) + tau_load
