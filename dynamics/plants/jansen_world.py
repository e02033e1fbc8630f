"""The simulated world of a Theo-Jansen walker: a free chassis carried by crank-driven legs on the ground.

Planar model (the sagittal plane: x forward, z up; lab frame x walking direction, y left, z up; the
left and right leg planes at y = ±track/2 share the ground). Generalised coordinates

    q = (X, Z, φ, s_L, s_R)      chassis crank centre X, Z (m), pitch φ (rad, + nose up),
                                 left and right crank-shaft angles s (rad, + walks forward)

Each leg copy ("slot" of `dynamics.synthesis.crank.load_walker`) follows its shaft through the one-leg
reduced tables (`dynamics.linkage.reduced`, methods.md c.6): leg crank angle θ_l = σ_l s + c_l
(σ = −1 for a mirrored slot), foot in the chassis frame ρ_l = (b_l x(θ_l), y(θ_l)) with b_l = −1 for a
plain leg (its foot sweeps backward in stance while s grows: the walker goes +x) and +1 for a mirrored
one, dρ_l/ds = (b_l σ_l J_x, σ_l J_y). In the lab: r_l = (X, Z) + R(φ) ρ_l,

    ṙ_l = (Ẋ, Ż) + φ̇ (−(Rρ_l)_z, (Rρ_l)_x) + R(φ) dρ_l/ds ṡ = B_l u,    u = q̇.

Kinetic and potential energy (the legs' mass moves with the chassis; their internal motion enters
through the reduced form only):

    T = ½ M (Ẋ² + Ż²) + ½ I_p φ̇² + Σ_shafts ½ I_s(s) ṡ²,      V = M g Z + Σ_shafts V_s(s)
    I_s = Σ_{l on s} I(θ_l),   dI_s/ds = Σ σ_l I′(θ_l),   dV_s/ds = G_s = Σ σ_l G(θ_l)

with M the chassis plus every leg's mass, I_p the chassis bar's pitch inertia plus the legs' inertia
about the crank centre averaged over a revolution (`dynamics.linkage.position.assembled_positions`).
Neglected (stated in docs/sim.md): the coupling of the legs' internal momentum with the chassis
motion, the legs' centre of mass offset from the crank centre, and the pitch in the legs' gravity
term. The model stays Lagrangian, so its energy balance is exact in continuous time:

    d(T + V + Σ E_el)/dt = Σ_s τ_s ṡ_s − Σ_l [F_N,l − K δ_lⁿ] δ̇_l + Σ_l F_T,l v_T,l      (W)

Equations of motion: M_q u̇ = Q(q, u) + (0, 0, 0, τ_L, τ_R), M_q = diag(M, M, I_p, I_L, I_R),
Q = Σ_l B_lᵀ F_l + (0, −M g, 0, −½ I′_L ṡ_L² − G_L, −½ I′_R ṡ_R² − G_R), with the foot forces of
`dynamics.contact` on the ground plane z = 0 (methods.md e.1): δ_l = −r_l,z, δ̇_l = −ṙ_l,z,
F_N = law(δ, δ̇) ≥ 0, F_T = −μ(|v_T|) F_N sign(v_T) on v_T = ṙ_l,x, F_l = (F_T, F_N).

Integration (methods.md e.7): linearly implicit Euler (Rosenbrock-W of order 1 with the contact
Jacobians D = ∂Q/∂u ≈ Σ B_lᵀ (∂F_l/∂ṙ_l) B_l and K = ∂Q/∂q ≈ Σ B_lᵀ (∂F_l/∂r_l) B_l, partial
derivatives of the laws by finite differences):

    (M_q − h D − h² K) Δu = h (Q + τ + h K u),   u ← u + Δu,   q ← q + h u

partitioned: the chassis block (X, Z, φ) here, each shaft's diagonal entry inside the virtual MCU's
motor plant (`dynamics.plants.motor.step`, which adds the motor's reflected inertia): `JansenSim.load`
returns J_load = I_s − h D_ss − h² K_ss and τ_load = −(Q_s + h K_ss ṡ), so the motor's own
semi-implicit update becomes this step for its shaft. The couplings between the blocks are explicit
(each block sees the other's values at the start of the step); for the stiff slip damping of a
regularised friction that Jacobi splitting stays bounded (amplification (1 − r)/(1 + r) per step
for r = h c/m), where explicit Euler needs h c/m < 2. docs/sim.md gives the step sizes.
Arrays: time first, then legs, then the space axis; SI units.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from .. import kernels
from ..contact import ContactError, Friction, NormalLaw, _law_codes, friction_force, normal_force
from ..forceplate import Plate
from ..linkage.model import read_linkage
from ..linkage.position import assembled_positions
from ..loader import read_toml, resolve
from ..synthesis.crank import load_walker

SHAFTS = ("left_shaft", "right_shaft")
_I, _DI, _G, _X, _Y, _JX, _JY = range(7)  # reduced.CHANNELS
_EPS_D, _EPS_V = 1e-7, 1e-6               # finite-difference steps of the contact laws (m, m/s)


@dataclass(frozen=True, eq=False)
class JansenWorld:
    """A walker on flat ground z = 0: constant model data.

    step, coef (K, 4, 7): the leg's reduced table (`ReducedTable.step`/`coef`); per slot (L,):
    shaft (0 left, 1 right), sigma σ, offset c (θ = σ s + c, rad), bx (foot x sign in the chassis
    frame), lateral y (m, lab); mass M (kg, chassis + legs), pitch_inertia I_p (kg m²), gravity g
    (m/s²), law / friction (`dynamics.contact`), chassis_length / track (m), step_length (m) and
    duty_factor of a leg at constant crank speed (`dynamics.linkage.gait`), labels of the slots.
    """

    name: str
    step: float
    coef: np.ndarray
    shaft: np.ndarray
    sigma: np.ndarray
    offset: np.ndarray
    bx: np.ndarray
    lateral: np.ndarray
    labels: tuple[str, ...]
    mass: float
    pitch_inertia: float
    gravity: float
    law: NormalLaw
    friction: Friction | None
    chassis_length: float
    track: float
    step_length: float
    duty_factor: float

    @property
    def n_legs(self) -> int:
        return int(self.shaft.size)

    @cached_property
    def codes(self) -> tuple:
        """(lcode, lp, fcode, fp) of the contact laws for the compiled kernel."""
        return _law_codes(self.law, self.friction)

    @cached_property
    def par(self) -> np.ndarray:
        return np.array([self.step, self.mass, self.gravity])

    @property
    def advance_per_cycle(self) -> float:
        """Kinematic advance per shaft revolution with no slip, m: a stance foot covers the step
        length L in the stance share D of the cycle, so the chassis moves L/D (Batbaatar 2021 Ch. 4;
        the synthesis's v = L ω / (2π D))."""
        return self.step_length / self.duty_factor


#: The thesis's soft ground (K = 2e4 N/m^1.5) with constant damping α = 1 s/m, and a gripping foot.
DEFAULT_LAW = NormalLaw("hunt_crossley_constant", 2e4, damping=1.0)
DEFAULT_FRICTION = Friction(0.8, kind="tanh", v_s=0.02)


def jansen_world(model: str = "jansen_walker", *, law: NormalLaw = DEFAULT_LAW,
                 friction: Friction | None = DEFAULT_FRICTION, size: int = 720) -> JansenWorld:
    """The world of a walker file (slots, leg table, masses) with the contact `law` and `friction`
    (None: frictionless feet, which slide and do not propel). Only laws without a latched approach
    velocity are accepted (the load is then a function of the state alone)."""
    if law.uses_latch:
        raise ContactError(f"jansen_world: the {law.kind} law latches the approach velocity per episode; "
                           "use hertz, kelvin_voigt or hunt_crossley_constant")
    walker = load_walker(model, size)
    data = read_toml(resolve(model))
    chassis = data.get("chassis", {})
    leg = read_linkage(walker.leg)
    # legs' inertia about the crank centre, averaged over a revolution: Σ m_b |R_b|² + J_b
    q = assembled_positions(leg, 2.0 * np.pi * np.arange(72) / 72)
    m = leg.mass_diag.reshape(-1, 3)
    leg_pitch = float(np.mean((q[:, 0::3] ** 2 + q[:, 1::3] ** 2) @ m[:, 0] + m[:, 2].sum()))
    leg_mass = float(m[:, 0].sum())
    mc, length = float(chassis.get("mass", 2.0)), float(chassis.get("length", 0.6))
    slots = walker.slots
    sigma = np.array([sl.sigma for sl in slots])
    return JansenWorld(
        name=walker.name, step=walker.table.step, coef=walker.table.coef,
        shaft=np.array([0 if sl.side == "left" else 1 for sl in slots]),
        sigma=sigma, offset=np.array([sl.phase if not sl.mirror else math.pi - sl.phase for sl in slots]),
        bx=np.where(sigma > 0, -1.0, 1.0),
        lateral=np.array([0.5 * walker.track if sl.side == "left" else -0.5 * walker.track for sl in slots]),
        labels=tuple(sl.prefix for sl in slots), mass=mc + leg_mass * len(slots),
        pitch_inertia=mc * length ** 2 / 12.0 + leg_pitch * len(slots), gravity=float(leg.gravity),
        law=law, friction=friction, chassis_length=length, track=walker.track,
        step_length=walker.step_length, duty_factor=walker.duty_factor)


def _table(world: JansenWorld, s: np.ndarray) -> np.ndarray:
    """Reduced-table channels (L, 7) of every slot at shaft angles s (2,) rad."""
    th = world.sigma * s[world.shaft] + world.offset
    x = np.mod(th, 2.0 * np.pi) / world.step
    k = np.minimum(x.astype(np.intp), world.coef.shape[0] - 1)
    t = ((x - k) * world.step)[:, None]
    c = world.coef[k]
    return ((c[:, 0] * t + c[:, 1]) * t + c[:, 2]) * t + c[:, 3]


def feet_chassis(world: JansenWorld, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feet in the chassis frame ρ (L, 2) m (x forward, z up, origin at the crank centre), dρ/ds (L, 2)
    m/rad, and the table channels (L, 7) at shaft angles s (2,) rad."""
    v = _table(world, np.asarray(s, dtype=float))
    rho = np.column_stack([world.bx * v[:, _X], v[:, _Y]])
    drho = np.column_stack([world.bx * world.sigma * v[:, _JX], world.sigma * v[:, _JY]])
    return rho, drho, v


def rest_height(world: JansenWorld, s: Sequence[float] = (0.0, 0.0)) -> float:
    """Crank-centre height Z (m) at which the lowest foot just touches z = 0 at shaft angles s, level."""
    rho, _, _ = feet_chassis(world, np.asarray(s, dtype=float))
    return float(-rho[:, 1].min())


@dataclass(frozen=True)
class Contact:
    """Contact state of the walker at one instant (lab frame, planar x/z components).

    foot (L, 2) m and foot_velocity (L, 2) m/s; force (L, 2) N ground on foot (F_T, F_N); delta δ
    (L,) m; delta_dot δ̇ (L,) m/s; generalised force Q (5,) (N, N, N m, N m, N m) including gravity and
    the shafts' velocity terms; D, K (5, 5): its approximate Jacobians ∂Q/∂u, ∂Q/∂q (module doc);
    inertia (2,) I_s kg m² of each shaft.
    """

    foot: np.ndarray
    foot_velocity: np.ndarray
    force: np.ndarray
    delta: np.ndarray
    delta_dot: np.ndarray
    Q: np.ndarray
    D: np.ndarray
    K: np.ndarray
    inertia: np.ndarray


def contact(world: JansenWorld, q: np.ndarray, u: np.ndarray) -> Contact:
    """Foot kinematics, ground forces and generalised forces at q = (X, Z, φ, s_L, s_R) and u = q̇ (module doc).
    Called every plant step: the compiled kernel (kernels/world.py) unless `dynamics.kernels.use_jit(False)`;
    this numpy body is the reference."""
    L = world.n_legs
    if kernels.enabled():
        foot, vel, force = np.empty((L, 2)), np.empty((L, 2)), np.empty((L, 2))
        Q, DK, inertia = np.empty(5), np.empty((2, 5, 5)), np.empty(2)
        kernels.kernel("world.jansen_contact")(*world.codes, world.coef, world.shaft, world.sigma, world.offset,
                                               world.bx, world.par, q, u, foot, vel, force, Q, DK, inertia)
        return Contact(foot, vel, force, -foot[:, 1], -vel[:, 1], Q, DK[0], DK[1], inertia)
    v = _table(world, q[3:5])
    c, sn = math.cos(q[2]), math.sin(q[2])
    # B_l (L, 2, 5) = ∂ṙ_l/∂u: rows x, z; columns X, Z, φ, s_L, s_R
    B = np.zeros((L, 2, 5))
    B[:, 0, 0] = B[:, 1, 1] = 1.0
    rx, rz = world.bx * v[:, _X], v[:, _Y]                                   # ρ, chassis frame
    jx, jz = world.bx * world.sigma * v[:, _JX], world.sigma * v[:, _JY]     # dρ/ds
    foot = np.empty((L, 2))
    foot[:, 0], foot[:, 1] = q[0] + c * rx - sn * rz, q[1] + sn * rx + c * rz
    B[:, 0, 2], B[:, 1, 2] = q[1] - foot[:, 1], foot[:, 0] - q[0]             # ∂r/∂φ = (−(Rρ)_z, (Rρ)_x)
    col = 3 + world.shaft
    B[np.arange(L), 0, col], B[np.arange(L), 1, col] = c * jx - sn * jz, sn * jx + c * jz
    vel = B @ u
    law = world.law
    d, dd = -foot[:, 1], -vel[:, 1]
    fn = normal_force(law, d, dd)
    fn_d = (normal_force(law, d + _EPS_D, dd) - fn) / _EPS_D
    fn_v = (normal_force(law, d, dd + _EPS_V) - fn) / _EPS_V
    force = np.empty((L, 2))
    force[:, 1] = fn
    jac = np.zeros((2, L, 2, 2))  # ∂F/∂ṙ and ∂F/∂r of each foot (only z moves δ; F_T follows F_N)
    if world.friction is not None:
        vx = vel[:, :1]
        ft = friction_force(world.friction, fn, vx)[:, 0]
        ft_n = np.divide(ft, fn, out=np.zeros_like(ft), where=fn > 0)  # ∂F_T/∂F_N
        jac[0, :, 0, 0] = (friction_force(world.friction, fn, vx + _EPS_V)[:, 0] - ft) / _EPS_V
        jac[0, :, 0, 1], jac[1, :, 0, 1] = -ft_n * fn_v, -ft_n * fn_d
        force[:, 0] = ft
    else:
        force[:, 0] = 0.0
    jac[0, :, 1, 1], jac[1, :, 1, 1] = -fn_v, -fn_d
    Bt = B.transpose(0, 2, 1)
    DK = (Bt @ jac @ B).sum(axis=1)
    Q = (Bt @ force[:, :, None]).sum(axis=0)[:, 0]
    Q[1] -= world.mass * world.gravity
    ud = u[3:5]
    Q[3:5] -= (0.5 * np.bincount(world.shaft, world.sigma * v[:, _DI], minlength=2) * ud * ud
               + np.bincount(world.shaft, world.sigma * v[:, _G], minlength=2))
    inertia = np.bincount(world.shaft, v[:, _I], minlength=2)
    return Contact(foot, vel, force, d, dd, Q, DK[0], DK[1], inertia)


#: Columns of a recorded sample row (`JansenSim.rows`): time, chassis, shafts, shaft loads, then per
#: leg foot x, foot z, F_T, F_N, δ (lab frame, SI).
HEAD = ("t", "X", "Z", "pitch", "Xd", "Zd", "pitchd", "s_L", "s_R", "sd_L", "sd_R", "tau_L", "tau_R")


@dataclass(frozen=True)
class Samples:
    """Recorded world samples, time first: t (N,) s; q (N, 5) and u (N, 5) (module doc); tau_load (N, 2) N m
    the load torque the legs put on each shaft (−Q_s: the crank torque of the reduced form with the
    foot forces, methods.md c.6); foot (N, L, 3) m and force (N, L, 3) N ground on foot, lab frame
    (x forward, y left, z up); delta (N, L) m; aux (N, n_aux) the `JansenSim` aux values."""

    t: np.ndarray
    q: np.ndarray
    u: np.ndarray
    tau_load: np.ndarray
    foot: np.ndarray
    force: np.ndarray
    delta: np.ndarray
    aux: np.ndarray


class JansenSim:
    """A running world: its state, the partitioned linearly implicit step (module doc), the samples.

    h: the step (s) of each `load` call (the motor plant's substep); record_every: keep one sample
    row every this many steps (rows in `rows`, drained by `take`); x0: initial chassis x (m), set
    down level with the lowest foot `settle` m into the ground; aux: values (n_aux,) recorded with
    each row (e.g. the motors' currents, read where the plant runs). Shaft angles and rates come from
    the caller (the motor plant) at each `load`.
    """

    def __init__(self, world: JansenWorld, h: float, *, record_every: int = 1, x0: float = 0.0,
                 settle: float = 0.002, aux: Callable[[], np.ndarray] | None = None, n_aux: int = 0) -> None:
        if not (h > 0 and math.isfinite(h)) or record_every < 1:
            raise ValueError(f"JansenSim: need h > 0 s and record_every >= 1, got {h}, {record_every}")
        self.world, self.h, self.record_every = world, float(h), int(record_every)
        self.q = np.array([x0, rest_height(world) - settle, 0.0, 0.0, 0.0])
        self.u = np.zeros(5)
        self.steps = 0
        self.rows: collections.deque[np.ndarray] = collections.deque()  # see `take`
        self.aux, self.n_aux = aux, (n_aux if aux is not None else 0)
        self._row = np.empty(len(HEAD) + 5 * world.n_legs + self.n_aux)

    def load(self, t: float, theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Motor-plant callback (`dynamics.plants.motor.LoadFn`): shafts at theta (2,) rad, omega (2,) rad/s
        at time t (s); advances the chassis by h and returns (J_load (2,) kg m², τ_load (2,) N m)."""
        h, w = self.h, self.world
        self.q[3:5], self.u[3:5] = theta, omega
        ct = contact(w, self.q, self.u)
        # the shafts' linearly implicit entries (module doc); only added inertia, never removed
        dss, kss = ct.D[[3, 4], [3, 4]], ct.K[[3, 4], [3, 4]]
        j_load = ct.inertia + np.maximum(0.0, -h * dss - h * h * kss)
        tau_load = -(ct.Q[3:5] + h * kss * omega)
        if self.steps % self.record_every == 0:
            self._record(t, ct, -ct.Q[3:5])
        # the chassis block, shafts held at (theta, omega)
        mq = np.diag([w.mass, w.mass, w.pitch_inertia])
        a = mq - h * ct.D[:3, :3] - h * h * ct.K[:3, :3]
        du = np.linalg.solve(a, h * (ct.Q[:3] + h * ct.K[:3, :3] @ self.u[:3]))
        self.u[:3] += du
        self.q[:3] += h * self.u[:3]
        self.steps += 1
        return j_load, tau_load

    def _record(self, t: float, ct: Contact, tau: np.ndarray) -> None:
        L = self.world.n_legs
        r = self._row
        r[0], r[1:6], r[6:11], r[11:13] = t, self.q[[0, 1, 2]].tolist() + self.u[[0, 1]].tolist(), \
            [self.u[2], self.q[3], self.q[4], self.u[3], self.u[4]], tau
        n = len(HEAD)
        r[n:n + L], r[n + L:n + 2 * L] = ct.foot[:, 0], ct.foot[:, 1]
        r[n + 2 * L:n + 3 * L], r[n + 3 * L:n + 4 * L] = ct.force[:, 0], ct.force[:, 1]
        r[n + 4 * L:n + 5 * L] = ct.delta
        if self.aux is not None:
            r[n + 5 * L:] = self.aux()
        self.rows.append(r.copy())

    def take(self) -> Samples | None:
        """The samples recorded since the last call (None if none); thread-safe against `load` running
        in another thread (the MCU's): rows are popped one by one from the deque `load` appends to
        (both atomic), so a row appended meanwhile is taken now or by the next call, never lost."""
        rows = []
        while True:
            try:
                rows.append(self.rows.popleft())
            except IndexError:
                break
        return samples(self.world, np.array(rows)) if rows else None


def samples(world: JansenWorld, rows: np.ndarray) -> Samples:
    """`Samples` of row array (N, len(HEAD) + 5 L + n_aux) (`JansenSim` rows)."""
    n, L = len(HEAD), world.n_legs
    q = rows[:, [1, 2, 3, 7, 8]]
    u = rows[:, [4, 5, 6, 9, 10]]
    N = rows.shape[0]
    foot = np.empty((N, L, 3))
    foot[:, :, 0], foot[:, :, 1], foot[:, :, 2] = rows[:, n:n + L], world.lateral, rows[:, n + L:n + 2 * L]
    force = np.zeros((N, L, 3))
    force[:, :, 0], force[:, :, 2] = rows[:, n + 2 * L:n + 3 * L], rows[:, n + 3 * L:n + 4 * L]
    return Samples(rows[:, 0], q, u, rows[:, 11:13], foot, force, rows[:, n + 4 * L:n + 5 * L], rows[:, n + 5 * L:])


def advance(sim: JansenSim, tau: np.ndarray, t: float) -> None:
    """One step of the whole world without a motor plant: shaft torques `tau` (2,) N m applied directly
    (the same shaft update the motor plant makes, with no motor inertia); for tests and offline runs."""
    s, sd = sim.q[3:5].copy(), sim.u[3:5].copy()
    j, tl = sim.load(t, s, sd)
    sd = sd + sim.h * (np.asarray(tau, dtype=float) - tl) / j
    sim.q[3:5], sim.u[3:5] = s + sim.h * sd, sd


# ------------------------------------------------------------------------------- instruments


def plate_loads(foot: np.ndarray, force: np.ndarray, plates: Sequence[Plate],
                moment: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per plate, the load (F (N, 3) N, M (N, 3) N m about its surface centre, lab axes) of the foot
    forces on it: feet foot (N, L, 3) m and forces force (N, L, 3) N (ground on foot, lab frame), a foot
    counted where its ground projection lies inside the plate's corners (the form `Plate.raw_channels`
    takes: F = Σ F_l, M = Σ (r_l − c) × F_l [+ Σ T_l with free moments `moment` (N, L, 3) N m])."""
    out = []
    for p in plates:
        rel = foot - p.centre
        local = rel @ p.rotation  # plate axes
        half = np.abs((p.corners - p.centre) @ p.rotation).max(axis=0)
        on = (np.abs(local[..., 0]) <= half[0]) & (np.abs(local[..., 1]) <= half[1])
        f = np.where(on[..., None], force, 0.0)
        M = np.cross(rel, f).sum(axis=1)
        if moment is not None:
            M = M + np.where(on[..., None], moment, 0.0).sum(axis=1)
        out.append((f.sum(axis=1), M))
    return out


def marker_labels(world: JansenWorld) -> tuple[str, ...]:
    """Marker labels: four chassis corners, then one marker on each foot (`marker_positions` order)."""
    return ("chassis_FL", "chassis_FR", "chassis_BL", "chassis_BR") + tuple(f"foot_{n}" for n in world.labels)


def marker_positions(world: JansenWorld, s: Samples) -> np.ndarray:
    """True marker positions (N, 4 + L, 3) m, lab frame: chassis corners at ±length/2 along the chassis
    and ±track/2 sideways at the crank-centre height (pitched with the chassis), then the feet."""
    half = 0.5 * world.chassis_length
    c, sn = np.cos(s.q[:, 2]), np.sin(s.q[:, 2])
    out = np.empty((s.t.size, 4 + world.n_legs, 3))
    for k, (dx, y) in enumerate(((half, 0.5), (half, -0.5), (-half, 0.5), (-half, -0.5))):
        out[:, k, 0] = s.q[:, 0] + c * dx
        out[:, k, 1] = y * world.track
        out[:, k, 2] = s.q[:, 1] + sn * dx
    out[:, 4:] = s.foot
    return out
