"""The simulated world of the exoskeleton and its wearer: a prescribed walk, the ground reactions it
requires, the joint motors strapped to it, force plates and markers as instruments. Pure computation.

**Prescribed** (not integrated): the whole body follows one semi-inverse nominal
(`dynamics.synthesis.semi_inverse.build_nominal`: the prescribed leg synergy and the compensating trunk
whose ZMP follows its law, docs/controller.md), repeated stride after stride. The nominal's samples
(t_i, q_i, v_i, a_i), i = 0..M−1 over one stride of period T, plus the closing knot t_M = T with the
first sample moved forward by the stride's advance 2 S_h along x, are joined by the quintic Hermite
interpolant per interval and coordinate (`dynamics.hermite`), so q, v = q̇ and a = q̈ are continuous
(C²), consistent with each other and equal to the nominal's at its samples; stride k adds k·2 S_h to the base x. Two exceptions. `join_transfers`: the nominal's pelvis
position and velocity jump at each support transfer (it is placed from the stance foot, and the
closed chain of double support is not enforced), so the world spreads each jump over the half-step
centred on the transfer (a quintic smooth step): there the world's base differs from the nominal's by
up to the jump (1.9 cm in height for the exoskeleton at S = 0.6, T = 1.2 s), and its ZMP from the law.
And `on_the_floor` (below) sets the base height and the ankles so that the feet neither enter the floor
nor float above it while loaded.

**On the floor.** The nominal rolls its stance foot on a roll-over circle under the ankle, whereas the
model's foot is rigid with heel and toe points, which enter the floor whenever the foot is pitched; its
scaled swing leg (S times the measured knee flexion) carries the swing foot's toe up to 7 cm below the
floor (early swing, the foot still plantarflexed 45°) and its heel 1.5 cm (late swing); and the joined
base height of `join_transfers` no longer follows the stance foot (the stance foot 0.3 to 1.8 cm below the
floor). So, at each knot (`_grounded`; rates and accelerations by central differences):
1. the base height puts the reference foot's roll-over circle on the floor, as the nominal does: the foot
   that struck last, handed over to the next one (a quintic smooth step) over the time W before its
   heel strike, where the two feet's circles disagree by the nominal's transfer jump: W = HANDOVER·P,
   or with ZMP law 6 (the foot's contacts, `biped.zmp_law`) from the end of the stance foot's toe phase
   (u1 = 0.55 P after the transfer; on the toe from 0.54 P), W = (1 − u1/P − p/200) P, 0.39 P at p = 12 %: its heel stays down
   until the law has put the ZMP on its toe (`_handover`);
2. each ankle turns its foot's pitch φ into [lo, hi], the pitches that keep the sole points above a floor
   (softly, PITCH_SOFTNESS): a point p of the foot (foot frame, p_y = 0) is at
   z = a_z + cos θ |p| cos(φ + β), β = atan2(p_x, p_z), a_z the ankle's height and θ the base's roll; in
   swing that floor is raised by a clearance bump up to CLEARANCE at mid-swing (at most the flat foot's
   clearance a_z − h cos θ less 3 mm); from P − W − TOE_RAMP·P after its own heel strike (ramped in
   over TOE_RAMP·P; 0.35 P with W = HANDOVER·P, in single support) to TOE_RAMP·P after its own toe-off
   the foot is pitched onto its toe (φ = hi: while its ankle
   is at a flat foot's height this is the flat foot; as the base's handover raises the ankle the heel
   rises, and in double support the trailing toe meets the floor however far the nominal's legs disagree);
3. where no pitch can keep a foot out (an ankle lower than the sole's height h), the body is lifted so
   that its lowest sole point (soft minimum) is no more than δ = SOLE_PENETRATION below the floor.
The world has no contact compliance (its ground reaction is rnea of this motion), so δ = 1.5 mm is the
world's own bound: far below what a lab user sees (markers' noise, a shoe's sole); measured over three
strides (tests): no sole point below −1.5 mm, each loaded foot's lowest point within 0.1 mm above the floor,
the swing foot's up to 2 cm above it. The ankles are not actuated: the motors' references (hips, knees)
are the nominal's. The base's handover moves the ZMP off the law by up to 3.3 cm before heel strike.

**The ZMP law it walks.** At the other foot's heel strike the nominal's legs put the stance ankle 2 cm
(S = 0.6, T = 1.2 s) to 3.7 cm (S = 0.8, T = 1.4 s) above a flat foot's height, so late in single
support the rigid foot's toe is its only contact and the ZMP must be there. Law 6 puts it there (and in
double support between the trailing toe and the leading heel); the shipped world walks it
(configs/sim_exo.toml). Measured (`test_plates_cop_lies_within_the_feet_on_the_floor`, Pinocchio's
soles): the plates' centre of pressure within 0.79 cm of the feet's contacts on the floor over the whole
stride (sagittal, S = 0.6, T = 1.2 s); with the frontal roll 1.08 cm at worst, over 0.5 % of the stride
(the test's bound there is 1.5 cm, an open defect): the handover's vertical acceleration moves the lateral ZMP off its law by
up to 9 mm, which the nominal's closed double-support chain would remove. Surla's laws I–V keep the ZMP
within 3.5 cm of the ankle: their worlds' COP is up to 20 cm behind the only contact, the toe, for
12–30 % of the stride: the world process refuses them (`daq.devices.exo_world_sim`). The unloaded swing heel also stays within 1 mm of the floor
over its last ~0.15 s before heel strike (x moving 0.2–0.35 m).

The base (pelvis) is upright (the sagittal nominal) or rolled by θ about the lab's x axis (the
frontal nominal, `build_nominal(frontal=True)`; any other turn is refused): its position p, rates and
roll θ are interpolated in the lab, and the free flyer's local velocity and acceleration rebuilt from
them (`motion`). World time t = 0 is the support transfer to the left foot (mid double support), the
left foot's flat place at x = x0.

**On a treadmill** (``belt`` > 0, `motion`, `body_at`): the same walk seen from the lab while the ground
under it, a belt, moves at −belt along x — every x less belt·t, the base's velocity less (belt, 0, 0). A
uniform translation of the frame changes neither the accelerations nor the forces (Galilean invariance:
the ground reaction is the walk's on the floor; the tests check it against Pinocchio's rnea of the moved
motion). At belt = the nominal's speed the wearer stays in place over an instrumented split-belt
treadmill's two plates, one under each foot (configs/sim_exo.toml).

**Computed by `dynamics`**: the ground reaction the motion requires. `dynamics.rnea.rnea` of (q, v, a)
with no external load leaves the free flyer's six rows, the residual base wrench (force, moment about
the pelvis origin, base axes), which the ground alone must supply (the body has no other external load
than gravity):  F = R τ[0:3],  n_O = R τ[3:6] + p_base × F  (lab axes, about the lab origin; R = R_x(θ)).
Its ZMP p on z = 0 (`dynamics.zmp.zmp_of_wrench`, n_p = n_O − p × F = (0, 0, n_z)). Split between the feet
as the nominal's figures split it (`semi_inverse.figures`): all on the stance foot in single support; in
double support the stance foot carries s = clip((p_x − a_ox)/(a_sx − a_ox), 0, 1) (a the ankles), the
other foot 1 − s. Each foot k's share s_k F acts at its own ground point c_k = (a_kx, a_ky, 0) + d with the
common offset d = p − Σ s_j (a_jx, a_jy, 0) (so Σ s_k c_k = p, and the feet's forces give F and n_O
exactly), plus the free moment s_k n_z about z. In single support c = p: the COP is the ZMP, whose lateral
place the frontal nominal keeps near the stance foot's line and the sagittal one does not compensate
(about the body's mid-line, `zmp_lateral_max`).

**Integrated**: the exoskeleton's joint motors (`dynamics.plants.motor` in the virtual MCU) are strapped
to the wearer's joints by cuffs, a spring-damper between the motor's output angle θ and the prescribed
joint angle q_j(t):  τ_load = k (θ − q_j) + c (θ̇ − q̇_j)  (N·m at the output; `ExoSim.load` is the
motor plant's load callback, J_load = 0: the wearer's limb is prescribed). This is the PD that makes the
motor plants follow the nominal's joint trajectory when the motors are unpowered; a host commanding the
motors through the MCU adds its torque against the cuffs. The motors' torque is internal to the
wearer + exoskeleton: it does not change the ground reaction. Explicit in the cuff (the motor plant's
semi-implicit Euler): stable for h √(k/J) < 2 with J the motor's reflected inertia J_m N² (0.33 kg m²
for 3.3e-5 kg m² at 100:1; k = 1000 N m/rad, h = 1 ms: 0.055).

Arrays: time first; lab frame x walking direction, y left, z up; SI units (s, m, rad, N, N·m).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..hermite import POWERS, quintic_coefficients, quintic_eval
from ..kinematics import forward_kinematics
from ..model import Model
from ..rnea import rnea
from ..synthesis.biped import FOOT_LAW, TOE_PHASE
from ..zmp import zmp_of_wrench

#: Cuff stiffness (N m/rad) and damping (N m s/rad) between a motor's output and its joint (module doc):
#: critically damped with the 0.33 kg m² reflected inertia of a 100:1 harmonic drive.
CUFF_STIFFNESS = 1000.0
CUFF_DAMPING = 36.0
#: Putting the walk on the floor (module doc "On the floor"): the soft floor δ (m) no sole point goes below
#: by more (and its softness ε, m); the softness of a foot's pitch limits (rad); the swing foot's clearance
#: at mid-swing (m); the base's handover from foot to foot and the toe's ramps, fractions of the half-step P.
SOLE_PENETRATION = 1.5e-3
SOLE_SOFTNESS = 5e-4
PITCH_SOFTNESS = 0.01
CLEARANCE = 0.02
HANDOVER = 0.5
TOE_RAMP = 0.15


class ExoWorldError(ValueError):
    """A nominal or model the exoskeleton world cannot run (names the problem)."""


@dataclass(frozen=True, eq=False)
class ExoWorld:
    """The wearer + exoskeleton walking one nominal over and over (module doc): constant data.

    model; knots (M+1,) s from 0 to the stride period T; coef (M, n + 1, 6) the interpolant's polynomial
    coefficients of s⁰..s⁵ per interval and coordinate (module doc, after the support transfers are
    joined and the walk put on the floor; the last column the base's roll θ about x, rad); iq, iv (n,) the other coordinates' places in q and v (the base's x, y, z and every
    one-degree-of-freedom joint); advance (m per
    stride, x); share: double support, % of the stride; feet (2,) segment indices (left, right; their
    frames' origins are the ankles); actuated (A,) index into the n coordinates of each actuated joint,
    actuators (A,) their joint names; markers: labels (K,), segments (K,) and points (K, 3) m in the
    segment frames; cuff stiffness k and damping c (module doc); name, S, speed (m/s), step S_h (m),
    period T (s); jump (2, 4): the nominal's base position (m) and roll (rad), and their rates' jumps at a
    support transfer that `join_transfers` smoothed."""

    model: Model
    knots: np.ndarray
    coef: np.ndarray
    iq: np.ndarray
    iv: np.ndarray
    advance: float
    share: float
    feet: tuple[int, int]
    actuated: np.ndarray
    actuators: tuple[str, ...]
    labels: tuple[str, ...]
    marker_segments: np.ndarray
    marker_points: np.ndarray
    stiffness: float
    damping: float
    name: str
    S: float
    speed: float
    step: float
    period: float
    jump: np.ndarray
    handover: tuple[float, float] = (HANDOVER, HANDOVER)

    @property
    def mass(self) -> float:
        """Wearer + exoskeleton, kg."""
        return float(self.model.total_mass)


def _coordinates(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """(iq, iv): the interpolated coordinates' places in q and v: a free-flyer root's x, y, z, then every
    revolute or prismatic joint's coordinate. Other joints (a spherical joint; a free flyer below the root)
    have no such coordinates: ExoWorldError."""
    iq, iv = [], []
    for k, s in enumerate(model.segments):
        t = s.joint.type
        if t == "free_flyer" and k == 0:
            iq += [0, 1, 2]
            iv += [0, 1, 2]
        elif t in ("revolute", "prismatic"):
            iq.append(int(model.idx_q[k]))
            iv.append(int(model.idx_v[k]))
        elif t != "fixed":
            raise ExoWorldError(f"model {model.name!r}: segment {s.name!r} has a {t} joint; the exoskeleton world "
                                "interpolates a free-flyer root and one-degree-of-freedom joints")
    if model.segments[0].joint.type != "free_flyer":
        raise ExoWorldError(f"model {model.name!r}: the exoskeleton world needs a free-flyer root (the pelvis)")
    return np.array(iq), np.array(iv)


def exo_world(nominal, actuators: Sequence[str], marker_set=None, *, stiffness: float = CUFF_STIFFNESS,
              damping: float = CUFF_DAMPING, name: str = "") -> ExoWorld:
    """The world of a `semi_inverse.BipedNominal` (module doc). actuators: the exoskeleton's joint names
    (the MCU's motors, in order); marker_set: a `dynamics.human15_markers.MarkerSet` placed on the
    model's segments (scaled by `human15_markers.scale`; a label listed under two segments, a marker on
    a joint axis, is taken from the first), or None for the model's own markers."""
    from ..human15_markers import scale

    m = nominal.tree.model
    iq, iv = _coordinates(m)
    q, v, a = np.asarray(nominal.q), np.asarray(nominal.v), np.asarray(nominal.a)
    off_x = max(np.abs(q[:, 4:6]).max(), np.abs(v[:, 4:6]).max(), np.abs(a[:, 4:6]).max())
    if off_x > 1e-12:
        raise ExoWorldError(f"nominal of {m.name!r}: the base turns about another axis than the lab's x (by up to "
                            f"{off_x:.3g}); the exoskeleton world interpolates a base upright or rolled about x")
    if not (math.isfinite(stiffness) and stiffness > 0 and math.isfinite(damping) and damping >= 0):
        raise ExoWorldError(f"cuff stiffness {stiffness} N m/rad and damping {damping} N m s/rad: expected > 0 and >= 0")
    T = float(nominal.T)
    M = q.shape[0]
    if M % 2 or M < 8 or not np.allclose(nominal.t, np.arange(M) * T / M, atol=1e-12):
        raise ExoWorldError(f"nominal of {m.name!r}: expected an even number of uniform samples over the stride, "
                            f"got {M}")
    adv = 2.0 * float(nominal.step)
    shift = np.zeros(iq.size)
    shift[0] = adv
    knots = np.append(np.asarray(nominal.t, float), T)
    # the base in the lab frame: position p, rates ṗ = R v_b, p̈ = R (a_b + Ω × v_b) (the free flyer's local
    # v_b, a_b, Ω = θ̇ e_x), and the roll θ about x as one more coordinate, the last column
    th = 2.0 * np.arctan2(q[:, 3], q[:, 6])
    om = np.zeros((M, 3))
    om[:, 0] = v[:, 3]
    vv, aa = v[:, iv].copy(), a[:, iv].copy()
    vv[:, :3] = _roll(th, v[:, :3])
    aa[:, :3] = _roll(th, a[:, :3] + np.cross(om, v[:, :3]))
    Q = np.vstack([np.column_stack([q[:, iq], th]), np.append(q[0, iq] + shift, th[0])])
    V = np.vstack([np.column_stack([vv, v[:, 3]]), np.append(vv[0], v[0, 3])])
    A = np.vstack([np.column_stack([aa, a[:, 3]]), np.append(aa[0], a[0, 3])])
    jump = join_transfers(knots, Q, V, A, (0, 1, 2, iq.size))
    seg = {(s.joint_name or s.name): k for k, s in enumerate(m.segments)}
    col = {int(p): c for c, p in enumerate(iv)}
    bad = [j for j in actuators if j not in seg or m.segments[seg[j]].joint.type != "revolute"]
    if bad:
        raise ExoWorldError(f"model {m.name!r}: actuator {bad[0]!r} is not one of its revolute joints")
    actuated = np.array([col[int(m.idx_v[seg[j]])] for j in actuators], dtype=int)
    if marker_set is None:
        labels = m.marker_names
        pts = [m.point(n) for n in labels]
        msegs, mpts = [p[0] for p in pts], [p[1] for p in pts]
    else:
        f = scale(marker_set, m)
        placed: dict[str, tuple[int, np.ndarray]] = {}
        for s_name, table in marker_set.segments.items():
            if s_name in m.index:
                for label, p in table.items():
                    placed.setdefault(label, (m.index[s_name], f * np.asarray(p, float)))
        labels = tuple(placed)
        msegs, mpts = [placed[n][0] for n in labels], [placed[n][1] for n in labels]
    feet = tuple(m.index[f] for f in nominal.tree.joints.feet)
    for f, ankle in zip(feet, nominal.tree.joints.ankles):
        foot = m.segments[f]
        if foot.joint_name != ankle:     # on_the_floor pitches a foot by its own joint
            raise ExoWorldError(f"model {m.name!r}: foot {foot.name!r} does not hang from the ankle {ankle!r}")
        # on_the_floor bounds a foot's pitch below by its contact points behind the ankle and above by those
        # ahead of it, and turns the pitch (about y) by the ankle's angle: without either bound, or with the
        # ankle about another axis, its pitch would be NaN or divided by ~0
        px = np.array([p[0] for p in foot.contacts.values()])
        if not ((px < 0).any() and (px >= 0).any()):
            raise ExoWorldError(f"model {m.name!r}: foot {foot.name!r} needs contact points both behind and ahead "
                                f"of its ankle (a heel and a toe), got x = {px.tolist()} m")
        axis = foot.joint.rotation @ foot.joint.axis
        if abs(abs(axis[1]) - 1.0) > 1e-9:
            raise ExoWorldError(f"model {m.name!r}: the ankle {ankle!r} of foot {foot.name!r} turns about "
                                f"{axis.round(3).tolist()}, not the lateral (y) axis")
    joined = ExoWorld(model=m, knots=knots, coef=quintic_coefficients(knots, Q, V, A), iq=iq, iv=iv,
                      advance=adv, share=float(nominal.laws[0].share), feet=feet, actuated=actuated,
                      actuators=tuple(actuators), labels=tuple(labels), marker_segments=np.array(msegs, dtype=int),
                      marker_points=np.array(mpts, dtype=float).reshape(-1, 3), stiffness=float(stiffness),
                      damping=float(damping), name=name or m.name, S=float(nominal.S), speed=float(nominal.speed),
                      step=float(nominal.step), period=T, jump=jump, handover=tuple(_handover(law) for law in nominal.laws))
    return dataclasses.replace(joined, coef=quintic_coefficients(knots, *on_the_floor(joined, nominal.tree.roll,
                                                                                       nominal.tree.sole)))


def _handover(law) -> float:
    """The base's handover before the other foot's heel strike, as a fraction of the half-step, for a
    stance foot walking `law` (a `semi_inverse.GaitLaw`): HANDOVER, or with law 6 (the foot's contacts)
    from the end of its toe phase u1 to the heel strike, (1 − u1) − p/200: the handover raises the
    stance ankle, whose heel then leaves the floor, only once the law has put the ZMP on the toe."""
    w = (1.0 - TOE_PHASE[1]) - law.share / 200.0 if law.single == FOOT_LAW else HANDOVER
    if not w > 0.05:
        raise ExoWorldError(f"ZMP law 6 with {law.share:.1f} % double support leaves {w:.3f} of the half-step for the "
                            "base's handover before heel strike: expected more than 0.05")
    return w


def _soft_min(z: np.ndarray, eps: float) -> np.ndarray:
    """−ε ln Σ_k exp(−z_k/ε) over the last axis of z (m): smooth, within [min z − ε ln K, min z]."""
    zm = z.min(axis=-1, keepdims=True)
    return (zm - eps * np.log(np.exp(-(z - zm) / eps).sum(axis=-1, keepdims=True)))[..., 0]


def _soles(model: Model, feet: tuple[int, int], q: np.ndarray) -> np.ndarray:
    """Lab heights (N, 2, C) m of each foot's contact points (heel, toe: the model's `contacts`) at q (N, nq)."""
    pl = forward_kinematics(model, q)
    out = []
    for f in feet:
        pts = np.array(list(model.segments[f].contacts.values()), dtype=float).reshape(-1, 3)
        out.append((pl.rotation[:, f, 2] @ pts.T) + pl.translation[:, f, 2:3])
    return np.stack(out, axis=1)


def _soft_clamp(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, eps: float) -> np.ndarray:
    """x pushed above lo, then below hi, by softplus steps of softness eps: x where far inside [lo, hi]."""
    x = lo + eps * np.logaddexp(0.0, (x - lo) / eps)
    return hi - eps * np.logaddexp(0.0, (hi - x) / eps)


def _grounded(world: ExoWorld, t: np.ndarray, ankles: tuple[int, int], roll: float, sole: float) -> np.ndarray:
    """The body's q (N, nq) at times t (N,) s put on the floor (module doc "On the floor"); ankles: the
    q index of each foot's ankle joint (left, right); roll, sole: the roll-over radius R and the ankle's
    height over the sole h (m, `semi_inverse.PlanarTree`)."""
    m, eps = world.model, SOLE_SOFTNESS
    q = motion(world, t)[0]
    P = 0.5 * world.period
    tau = P * world.share / 200.0
    W, Wt = np.asarray(world.handover) * P, TOE_RAMP * P
    # 1. the base height from the reference foot's roll-over circle (radius R under the ankle, h the ankle's
    #    height over the sole, as the nominal rolls its stance foot): that circle on the floor. The reference
    #    is the foot that struck last, handed over to the other one over the time W before its heel strike
    #    (P − τ after a transfer), where the nominal's feet disagree by its transfer jump
    u = np.mod(t + tau, world.period)                  # since the left heel strike
    ref = (u >= P).astype(int)
    sig = _smoothstep(1.0 - (P - np.mod(u, P)) / W[ref])[0]
    rows = np.arange(t.size)
    pl = forward_kinematics(m, q)
    cth = np.cos(2.0 * np.arctan2(q[:, 3], q[:, 6]))
    R = pl.rotation[:, list(world.feet)]                                       # (N, 2, 3, 3)
    phi = np.arctan2(R[..., 0, 2], R[..., 0, 0])
    e = pl.translation[:, list(world.feet), 2] - cth[:, None] * (roll + (sole - roll) * np.cos(phi))
    dz = -((1.0 - sig) * e[rows, ref] + sig * e[rows, 1 - ref])
    q[:, 2] += dz
    pl.translation[..., 2] += dz[:, None]             # the whole body moves with its root
    # 2. each foot's pitch φ kept where none of its sole points is below the floor: point p (foot frame,
    #    p_y = 0) is at z = a_z + cos θ ρ cos(φ + β), ρ = |p|, β = atan2(p_x, p_z) (θ the base's roll), so
    #    z ≥ 0 ⇔ |φ + β| ≤ α = acos(−a_z / (ρ cos θ)): points ahead of the ankle bound φ above (hi: the toe on
    #    the floor), behind below (lo); from W before the other foot's heel strike (ramped in over Wt before
    #    that) to Wt after its own toe-off (τ after the transfer) the foot is pitched onto its toe (φ = hi:
    #    the push-off and the double support)
    for side, f in enumerate(world.feet):
        pts = np.array(list(m.segments[f].contacts.values()), dtype=float).reshape(-1, 3)
        rho, beta = np.hypot(pts[:, 0], pts[:, 2]), np.arctan2(pts[:, 0], pts[:, 2])
        R = pl.rotation[:, f]
        phi = np.arctan2(R[:, 0, 2], R[:, 0, 0])
        us = np.mod(t + tau - side * P, world.period)  # since this foot's heel strike
        az = pl.translation[:, f, 2]
        # in swing (from toe-off at P + 2τ to heel strike at T) the floor raised by a clearance bump, up to
        # CLEARANCE at mid-swing but never above what a flat foot clears (a_z − h cos θ) less 3 mm
        x = np.clip((us - P - 2 * tau) / (P - 2 * tau), 0.0, 1.0)
        fl = eps * np.logaddexp(0.0, (az - sole * cth - 3e-3) / eps)
        top = np.minimum(CLEARANCE, fl) - eps * np.log1p(np.exp(-np.abs(CLEARANCE - fl) / eps))
        floor = _smoothstep(np.minimum(2 * x, 2 - 2 * x))[0] * np.maximum(top, 0.0)
        alpha = np.arccos(np.clip((floor - az)[:, None] / (rho * cth[:, None]), -1.0, 1.0))   # (N, C)
        hi = np.min(np.where(pts[:, 0] >= 0, alpha - beta, np.inf), axis=1)
        lo = np.max(np.where(pts[:, 0] < 0, -alpha - beta, -np.inf), axis=1)
        kap = _smoothstep((us - (P - W[side] - Wt)) / Wt)[0] * _smoothstep((P + 2 * tau + Wt - us) / Wt)[0]
        c = _soft_clamp(phi, lo, hi, PITCH_SOFTNESS)
        sign = (m.segments[f].joint.rotation @ m.segments[f].joint.axis)[1]
        q[:, ankles[side]] += (c + kap * (hi - c) - phi) / sign
    # 3. where a foot's ankle is too low for any pitch to keep its sole above the floor (the base lowered by a
    #    handover), the whole body lifted so that its lowest sole point (soft minimum) is above −δ
    low = _soft_min(_soles(m, world.feet, q).reshape(t.size, -1), eps)
    q[:, 2] += eps * np.logaddexp(0.0, (-low - SOLE_PENETRATION) / eps)
    return q


def on_the_floor(world: ExoWorld, roll: float, sole: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The knots' (Q, V, A) (M+1, n+1) of `world`'s motion put on the floor (module doc "On the floor"):
    values at the knots, rates and accelerations by central differences (step 1e-4 s, where the motion
    is smooth: its errors ~1e-8 of the interpolant's); roll, sole: the roll-over radius R and the ankle's
    height over the sole h (m) the nominal rolls its stance foot with (`semi_inverse.PlanarTree`)."""
    m = world.model
    ankles = tuple(int(m.idx_q[f]) for f in world.feet)
    t = world.knots[:-1]
    d = 1e-4
    c = []
    for e in (-d, 0.0, d):
        q = _grounded(world, t + e, ankles, roll, sole)
        c.append(np.column_stack([q[:, world.iq], 2.0 * np.arctan2(q[:, 3], q[:, 6])]))
    V, A = (c[2] - c[0]) / (2 * d), (c[2] - 2 * c[1] + c[0]) / (d * d)
    Q0 = c[1][:1].copy()
    Q0[0, 0] += world.advance
    return np.vstack([c[1], Q0]), np.vstack([V, V[:1]]), np.vstack([A, A[:1]])


def _smoothstep(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """S(x) = 10x³ − 15x⁴ + 6x⁵ on [0, 1] (0 below, 1 above) and its first two derivatives in x."""
    x = np.clip(x, 0.0, 1.0)
    return (x ** 3 * (10 - 15 * x + 6 * x * x), 30 * x * x * (1 - x) ** 2, 60 * x * (1 - x) * (1 - 2 * x))


def join_transfers(knots: np.ndarray, Q: np.ndarray, V: np.ndarray, A: np.ndarray,
                   cols: Sequence[int] = (0, 1, 2)) -> np.ndarray:
    """Join the nominal's half-steps at its support transfers (t = P = T/2 and T), in place.

    The nominal places the pelvis from the stance foot, and the closed chain of double support is not
    enforced (docs/controller.md): the base position and velocity jump where the stance foot changes
    (1.9 cm and 0.09 m/s in z for the exoskeleton at S = 0.6, T = 1.2 s). Each transfer's jump (J, J_v)
    of the coordinates `cols` (the base x, y, z in the lab, and its roll) — the knot after it against the quintic Hermite
    extrapolation of the interval before it — is spread over the half-step centred on the transfer:
    with u = t − t_transfer, H(u) = [u ≥ 0] and S(u) the quintic smooth step from −P/2 to P/2,

        q ← q + (S − H)(J + J_v u),  q̇ ← q̇ + S′(J + J_v u) + (S − H) J_v,  q̈ ← q̈ + S″(J + J_v u) + 2 S′ J_v,

    which replaces the step H by S: no jump in position or velocity is left (a step in acceleration is,
    which the interpolant spreads over one interval), and the motion is the nominal's again from
    |u| = P/2 on. Needs
    knots uniform with P on a knot; Q[M] is the first knot's value plus the stride's advance. Returns
    the jumps (2, len(cols)) at t = P: J (m, rad) and J_v (m/s, rad/s)."""
    M = knots.size - 1
    T, P = knots[-1], 0.5 * knots[-1]
    cols = list(cols)
    jumps = []
    corr = np.zeros((3, M + 1, len(cols)))
    for k in (M // 2, M):
        # the interval [k-2, k-1] extrapolated to its s = 2: the left limit at the transfer
        c = quintic_coefficients(knots[k - 2:k], Q[k - 2:k, cols], V[k - 2:k, cols], A[k - 2:k, cols])[0]
        x, xd, _ = quintic_eval(c, 2.0, knots[k - 1] - knots[k - 2])
        J, Jv = Q[k, cols] - x, V[k, cols] - xd
        jumps.append((J, Jv))
        u = knots - knots[k]
        u = u - T * np.round(u / T) if k == M else u   # the transfer at T is also the one at 0
        if k == M:
            u[M] = 0.0
        H = (u >= 0).astype(float)[:, None]
        S, dS, ddS = (x[:, None] for x in _smoothstep(u / P + 0.5))
        dS, ddS = dS / P, ddS / P ** 2
        g = J + Jv * u[:, None]
        corr[0] += (S - H) * g
        corr[1] += dS * g + (S - H) * Jv
        corr[2] += ddS * g + 2 * dS * Jv
    Q[:, cols] += corr[0]
    V[:, cols] += corr[1]
    A[:, cols] += corr[2]
    return np.array(jumps[0])


def _interpolate(world: ExoWorld, t: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The quintic Hermite interpolant (module doc) of coordinates `cols` at times t (N,) s:
    values, rates, accelerations (N, n). Stride k = floor(t / T) adds k·advance to the base x."""
    T = world.period
    k = np.floor(t / T)
    tp = t - k * T
    i = np.clip(np.searchsorted(world.knots, tp, side="right") - 1, 0, world.knots.size - 2)
    d = (world.knots[i + 1] - world.knots[i])[:, None]
    x, xd, xdd = quintic_eval(world.coef[i][:, cols], (tp - world.knots[i])[:, None] / d, d)
    x[:, cols == 0] += (k * world.advance)[:, None]            # column 0 is the base x
    return x, xd, xdd


def _roll(th: np.ndarray, x: np.ndarray, sign: float = 1.0) -> np.ndarray:
    """R_x(θ) x for angles θ (N,) rad and vectors x (N, 3) (sign −1: R_x(θ)ᵀ x)."""
    c, s = np.cos(th), sign * np.sin(th)
    return np.column_stack([x[:, 0], c * x[:, 1] - s * x[:, 2], s * x[:, 1] + c * x[:, 2]])


def motion(world: ExoWorld, t, x0: float = 0.0, belt: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The body's q (N, nq), v, a (N, nv) at world times t (N,) s (module doc); x0: the base moved by x0
    along x (the left foot's first flat place, m); belt: a treadmill's belt speed (m/s, carrying the
    ground towards −x; module doc "On a treadmill"). The base: position p and roll θ about x interpolated
    in the lab, the free flyer's quaternion (sin θ/2, 0, 0, cos θ/2), local velocity v_b = Rᵀ ṗ, angular
    (θ̇, 0, 0), acceleration Rᵀ p̈ − Ω × v_b and (θ̈, 0, 0) (Pinocchio's free-flyer convention)."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    m = world.model
    n = world.iq.size
    x, xd, xdd = _interpolate(world, t, np.arange(n + 1))
    q = np.tile(m.neutral(), (t.size, 1))
    v, a = np.zeros((t.size, m.nv)), np.zeros((t.size, m.nv))
    q[:, world.iq], v[:, world.iv], a[:, world.iv] = x[:, :n], xd[:, :n], xdd[:, :n]
    th = x[:, n]
    q[:, 0] += x0 - belt * t
    q[:, 3], q[:, 6] = np.sin(th / 2), np.cos(th / 2)
    om = np.zeros((t.size, 3))
    om[:, 0] = xd[:, n]
    xd[:, 0] -= belt
    v[:, :3] = _roll(th, xd[:, :3], -1.0)
    a[:, :3] = _roll(th, xdd[:, :3], -1.0) - np.cross(om, v[:, :3])
    v[:, 3], a[:, 3] = xd[:, n], xdd[:, n]
    return q, v, a


def joint_reference(world: ExoWorld, t: float) -> tuple[np.ndarray, np.ndarray]:
    """The actuated joints' prescribed angles (A,) rad and rates (A,) rad/s at world time t (s): the
    interpolant of `_interpolate` for one instant (the motor plant's callback calls it every substep)."""
    T = world.period
    tp = t - math.floor(t / T) * T
    i = min(max(bisect_right(world.knots, tp) - 1, 0), world.knots.size - 2)
    d = world.knots[i + 1] - world.knots[i]
    s = (tp - world.knots[i]) / d
    sp = np.array([1.0, s, s * s, s ** 3, s ** 4, s ** 5])
    c = world.coef[i, world.actuated]
    return c @ sp, (c[:, 1:] @ (POWERS[1:] * sp[:5])) / d


@dataclass(frozen=True)
class Ground:
    """The ground reaction a motion requires (module doc), lab frame, time first: force (N, 3) N and
    moment (N, 3) N m about the lab origin (on the body); zmp (N, 3) m; per foot (left, right):
    point (N, 2, 3) m where its share acts, force (N, 2, 3) N and free moment (N, 2, 3) N m (z only);
    stance (N,) 0 left / 1 right, double (N,) bool double support."""

    force: np.ndarray
    moment: np.ndarray
    zmp: np.ndarray
    point: np.ndarray
    foot_force: np.ndarray
    foot_moment: np.ndarray
    stance: np.ndarray
    double: np.ndarray


def ground_reaction(world: ExoWorld, t, q: np.ndarray, v: np.ndarray, a: np.ndarray) -> Ground:
    """The ground reaction of the motion (q, v, a) (N, nq / nv) at world times t (N,) s, by
    `dynamics.rnea` (the free flyer's rows) and split between the feet as the nominal does (module doc)."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    tau = rnea(world.model, q, v, a)
    th = 2.0 * np.arctan2(q[:, 3], q[:, 6])           # the base's roll about x (module doc)
    F = _roll(th, tau[:, :3])
    n = _roll(th, tau[:, 3:6]) + np.cross(q[:, :3], F)
    p = zmp_of_wrench(F, n).point
    nz = (n - np.cross(p, F))[:, 2]                   # the free moment about the vertical at the ZMP
    N = t.size
    P = 0.5 * world.period
    tp = np.mod(t, world.period)
    stance = (tp >= P).astype(int)
    tl = tp - stance * P
    tau_ds = P * world.share / 200.0
    double = (tl < tau_ds) | (tl >= P - tau_ds)
    ank = forward_kinematics(world.model, q).translation[:, list(world.feet), :]   # (N, 2, 3)
    rows = np.arange(N)
    ax_st, ax_ot = ank[rows, stance, 0], ank[rows, 1 - stance, 0]
    span = ax_st - ax_ot
    ok = double & (np.abs(span) > 1e-9)
    frac = np.where(ok, np.clip((p[:, 0] - ax_ot) / np.where(ok, span, 1.0), 0.0, 1.0), 1.0)
    share = np.empty((N, 2))
    share[rows, stance], share[rows, 1 - stance] = frac, 1.0 - frac
    base = ank.copy()
    base[..., 2] = 0.0
    d = p - (share[..., None] * base).sum(axis=1)
    point = base + d[:, None, :]
    foot_force = share[..., None] * F[:, None, :]
    foot_moment = np.zeros((N, 2, 3))
    foot_moment[..., 2] = share * nz[:, None]
    return Ground(F, n, p, point, foot_force, foot_moment, stance, double)


def marker_positions(world: ExoWorld, q: np.ndarray) -> np.ndarray:
    """True marker positions (N, K, 3) m, lab frame, of configurations q (N, nq): x = R_s p + o_s."""
    pl = forward_kinematics(world.model, np.atleast_2d(q))
    R = pl.rotation[:, world.marker_segments]
    return np.einsum("nkij,kj->nki", R, world.marker_points) + pl.translation[:, world.marker_segments]


@dataclass(frozen=True, eq=False)
class StrideTable:
    """The body over one stride on the sample grid t_k = k h, k = 0..K−1 (K h = T), base at x0 = 0:
    q (K, nq), v, a (K, nv) (`motion`), ground (`Ground` of (K,) arrays, `ground_reaction`) and markers
    (K, M, 3) m (`marker_positions`) — computed once, so that a world sampled on that grid (the plates'
    1 kHz) costs an index per sample (`body_at`)."""

    h: float
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    ground: Ground
    markers: np.ndarray


def stride_table(world: ExoWorld, h: float) -> StrideTable:
    """`StrideTable` of `world` on the grid of step h (s), which must divide the stride period."""
    K = round(world.period / h)
    if not (h > 0 and K >= 2 and abs(K * h - world.period) < 1e-9):
        raise ExoWorldError(f"sample step {h} s: expected a whole fraction of the stride period {world.period} s")
    t = np.arange(K) * h
    q, v, a = motion(world, t)
    return StrideTable(float(h), q, v, a, ground_reaction(world, t, q, v, a), marker_positions(world, q))


def body_at(world: ExoWorld, table: StrideTable, t, x0: float = 0.0,
            belt: float = 0.0) -> tuple[np.ndarray, np.ndarray, Ground, np.ndarray]:
    """The body at grid times t (N,) s (multiples of table.h), base moved by x0 (m) along x, on a belt of
    speed belt (m/s; 0: the floor): (q (N, nq), v (N, nv), `Ground`, markers (N, M, 3)) equal to `motion`,
    `ground_reaction`, `marker_positions` there. Stride k shifts every x by s = x0 + k·advance − belt·t, and
    the ground moment about the lab origin by (s, 0, 0) × F; the base's velocity loses (belt, 0, 0) (its x
    axis is the lab's under a roll about x), its acceleration and the ground reaction do not change."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    K = table.q.shape[0]
    n = np.round(t / table.h).astype(np.int64)
    if np.abs(n * table.h - t).max(initial=0.0) > 1e-6 * table.h:
        raise ValueError(f"body_at: times off the {table.h} s grid")
    i = n % K
    s = x0 + (n // K) * world.advance - belt * t
    q = table.q[i]
    q[:, 0] += s
    v = table.v[i]
    v[:, 0] -= belt
    g = table.ground
    point = g.point[i]
    point[..., 0] += s[:, None]
    zmp = g.zmp[i]
    zmp[:, 0] += s
    F = g.force[i]
    moment = g.moment[i] + np.column_stack([np.zeros_like(s), -s * F[:, 2], s * F[:, 1]])
    markers = table.markers[i]
    markers[..., 0] += s[:, None]
    return q, v, Ground(F, moment, zmp, point, g.foot_force[i], g.foot_moment[i], g.stance[i],
                                 g.double[i]), markers


@dataclass(frozen=True)
class ExoSamples:
    """Recorded motor samples, time first: t (N,) s world time; theta, omega (N, A) the motors' output
    angle rad and rate rad/s; tau (N, A) N m the cuffs' load on each motor; aux (N, n_aux) (`ExoSim`)."""

    t: np.ndarray
    theta: np.ndarray
    omega: np.ndarray
    tau: np.ndarray
    aux: np.ndarray


class ExoSim:
    """A running exoskeleton world: the motors' load callback (the cuffs, module doc) and its samples.

    h: the step (s) between `load` calls (the motor plant's substep); record_every: keep one row every
    this many calls (drained by `take`); aux: values (n_aux,) recorded with each row (e.g. the motors'
    currents). The body needs no state: `motion` gives it at any time."""

    def __init__(self, world: ExoWorld, h: float, *, record_every: int = 1,
                 aux: Callable[[], np.ndarray] | None = None, n_aux: int = 0) -> None:
        if not (h > 0 and math.isfinite(h)) or record_every < 1:
            raise ValueError(f"ExoSim: need h > 0 s and record_every >= 1, got {h}, {record_every}")
        self.world, self.h, self.record_every = world, float(h), int(record_every)
        self.steps = 0
        self.rows: collections.deque[np.ndarray] = collections.deque()
        self.aux, self.n_aux = aux, (n_aux if aux is not None else 0)

    def load(self, t: float, theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Motor-plant callback (`dynamics.plants.motor.LoadFn`): outputs at theta (A,) rad, omega (A,)
        rad/s at world time t (s); returns (J_load = 0 (A,), τ_load (A,) N m the cuffs' torque)."""
        w = self.world
        qj, vj = joint_reference(w, t)
        tau = w.stiffness * (theta - qj) + w.damping * (omega - vj)
        if self.steps % self.record_every == 0:
            row = [np.array([t]), theta, omega, tau]
            if self.aux is not None:
                row.append(np.asarray(self.aux(), dtype=float))
            self.rows.append(np.concatenate(row))
        self.steps += 1
        return np.zeros_like(tau), tau

    def take(self, max_rows: int | None = None) -> ExoSamples | None:
        """The rows recorded since the last call, the oldest `max_rows` at most (None if none); safe against
        `load` running in another thread (rows popped one by one from the deque `load` appends to, as
        `JansenSim.take`)."""
        rows = []
        while max_rows is None or len(rows) < max_rows:
            try:
                rows.append(self.rows.popleft())
            except IndexError:
                break
        if not rows:
            return None
        r = np.array(rows)
        A = len(self.world.actuators)
        return ExoSamples(r[:, 0], r[:, 1:1 + A], r[:, 1 + A:1 + 2 * A], r[:, 1 + 2 * A:1 + 3 * A], r[:, 1 + 3 * A:])
