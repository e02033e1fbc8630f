"""Semi-inverse biped nominals: prescribed leg synergy, compensating trunk synergy whose ZMP follows
its law (methods.md j.1-j.5, Surla 1980 thesis; the shooting and ZMP laws of `biped`). Pure computation.

**Sagittal reduction** (what is solved). The walker's tree (a `dynamics.Model` whose segment frames are
parallel to the lab in the neutral posture) is projected on the sagittal plane: x forward, z up, each
segment's joint a rotation about +y by sign * q (sign = the y component of a y-axis revolute joint;
any other joint is held at 0 and treated as fixed); masses, CoMs (x, z) and I_yy. The pelvis stays
upright (BIDYN's pelvis carries no sagittal rotation). The stance foot rolls without slip on a
circular roll-over shape of radius R under the ankle (heel -> flat -> toe in one smooth motion, as
BIDYN's heel/flat/toe phases; R = 0.3 leg length by default, the roll-over radius of walking in
Hansen, Childress & Knox 2004, Clin. Biomech. 19:407-414): with the foot pitch phi (about +y, + toes
down), the ankle is at (x_ref + R phi + (h - R) sin phi, R + (h - R) cos phi), h its height above the
sole, x_ref its place when the foot is flat (the origin of the half-step, the ZMP law's reference). Unknown: the trunk joint angle psi (with the pelvis upright, the
absolute trunk pitch); with `frontal`, also the frontal inclination theta of BIDYN's two-unknown
system (section "Frontal compensation" below; without it the lateral ZMP is not compensated, only
reported).

**Prescribed leg synergy** (j.3). One gait cycle of sagittal angles (`LegCycle`: hip, knee, ankle and
pelvis tilt over the stride phase, from a measured trial), made periodic, scaled by S: hip joint
q_h = S (hip - tilt) (the thigh's inclination, since the pelvis is upright), knee q_k = S knee; the
ankle elsewhere, q_a = S ankle (the measured foot pitch, rolling on the roll-over shape in stance). Each joint channel is then one
periodic cubic spline in phase (`CubicSpline(bc_type="periodic")`), differentiated for rates and
accelerations with d/dt = (1/T) d/dphase (T the stride period, the half-period P = T/2).

**Timing.** The half-step [0, P] starts at the support transfer to the left foot, in the middle of the
double support: the left heel strike is at t = -tau, tau = T p / 400 (j.5), so the left leg's phase is
(t + tau)/T and the right leg's half a cycle later. The second half-step is the same with the legs
exchanged, the right foot's flat place the origin, shifted forward by the step length S_h (the
distance of the two feet's flat places at the transfer, from the kinematics).

**Trunk equation** (j.1 with one unknown). The trunk and everything fixed to it (arms, head) is one
rigid body of mass m_T, CoM d = R(psi) c from the waist joint w(t), inertia I_T about its CoM. With
the rest of the body's sums A = sum m (z'' + g) x - sum m x'' z - sum I phi'' and B = sum m (z'' + g)
(prescribed), the zero moment about the law point p(t) on the ground (d.3, planar, phi about +y),

    A - p B + m_T [(z_T'' + g)(x_T - p) - x_T'' z_T] - I_T psi'' = 0,
    x_T'' = w_x'' + d_z psi'' - d_x psi'^2,   z_T'' = w_z'' - d_x psi'' - d_z psi'^2,

is linear in psi'': psi'' = -(rest)/(coefficient), the coefficient -(I_T + m_T[d_x (x_T - p) + d_z z_T])
(never 0 for an upright trunk; guarded). State Y = [psi, psi'] (rad, rad/s); symmetric gait: Y(P) = Y(0)
(W = +1: psi does not flip at the transfer); asymmetric (different laws per side): the full stride
Y(T) = Y(0). Solved by `biped.shoot` (gradient then Newton, BIDYN settings) and cross-checked by
`biped.collocate`.

**Frontal compensation** (BIDYN's two-unknown system, methods.md j.2; `build_nominal(frontal=True)`).
Unknowns theta and psi, state Y = [theta, psi, theta', psi']. theta is BIDYN's "frontal inclination of
the leg/pelvis system about the stance foot": the whole body's roll about the lab x axis through the
pivot K, the stance foot's ground contact under its roll-over circle (x_ref + R phi, on the foot's line
y_st, z = 0). The models have no frontal joint for it (surla_bidyn: "carried by the floating base
orientation"), so theta is the free-flyer pelvis's roll and the trunk and the stance foot roll with it
(an exact rigid version of BIDYN's kinematics, which keeps the trunk upright). Segment i: unrolled
position u_i from K (the sagittal kinematics above, its model y), rolled c_i = K + R_x(theta) u_i,
angular velocity in the rolled frame w_i = theta' e_x + phi_i' e_y, inertia J_i = R_y(phi_i) I_i R_y^T.
The moment about the law point p of the inertia and gravity forces,

    M = (K - p) x (m G + R L) + (R S) x G + R N,   G = K'' + (0, 0, g),   Omega = theta' e_x,
    S = sum m u,   L = sum m (u'' + 2 Omega x u' + Omega' x u + Omega x (Omega x u)),
    N = sum m u x (u'' + 2 Omega x u' + Omega' x u + Omega x (Omega x u)) + sum (J' w + J w' + Omega x J w),

is linear in theta'' and psi'': M_x = M_y = 0 (the ZMP at p) is the 2 x 2 system E11..E22 of j.2
(DET guarded); the rest of the body's sums are precomputed per half-step (`frontal_half_step`), the
trunk group (one rigid body, 3-D inertia) is added at each call. Lateral law (models.md 6.2): the ZMP
on the stance foot's line in single support; in double support the sagittal staircase's shares of the
way to the other foot's line (`lateral_law`; BIDYN's lateral scale 2d is the model's ankle spacing
here). Symmetric gait: Y(P) = W Y(0), W = diag(-1, 1, -1, 1) (j.4); asymmetric: the full stride with
theta the lab's roll, continuous at the transfer. Limits (reported): the stance foot is tilted by
theta (no ankle inversion joint), and since the pivot changes feet at a transfer, the pelvis moves
there by |(I - R_x(theta)) (K_l - K_r)| (`BipedNominal.transfer_jump`; BIDYN re-references its
coordinates at the transfer the same way); the swing foot is lifted or lowered by the roll.

**Figures from `dynamics`** (not the generator's equations): the full configuration q, v, a of the
3-D model (free-flyer pelvis, every joint) along the stride; the kinematic ZMP by
`dynamics.zmp.zmp_model`; the ground wrench (`zmp.ground_wrench`) put on the stance foot (in double
support split between the feet in proportion to the ZMP's position between the ankles) and the joint
torques by `dynamics.rnea.rnea`; energy per cycle by `dynamics.energetics.work` (l).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit
from scipy.interpolate import CubicSpline

from ..centroidal import centroidal_momentum
from ..energetics import work
from ..kinematics import forward_kinematics, tree_state
from ..model import G, Model
from ..rnea import Wrench, rnea
from ..zmp import com_of_state, ground_wrench, zmp_model
from .biped import (FOOT_LAW, SINGLE_SUPPORT, BipedError, ShootingSettings, collocate, flow, shoot, toe_breaks,
                    zmp_law)
from .transition import blend, blend_weight

ROLL = 0.3           # roll-over radius / leg length (Hansen et al. 2004)
SAMPLES_SPLINE = 400  # phases per cycle of the joint-channel splines
#: Shooting settings of the trunk: BIDYN's iteration rules (biped.ShootingSettings) with J weighted
#: 1 per rad and 0.1 per rad/s; RK45, since the prescribed channels are cubic splines (their
#: accelerations only C0), for which an 8th-order method gains nothing (measured: 3x the calls).
COLLOCATION_NODES = 2000   # mesh bound of the collocation per piece block: a grid point it cannot solve within it is skipped
SETTINGS = ShootingSettings(weights=(1.0, 0.1), accept_J=1e-7, rtol=1e-9, atol=1e-11, method="RK45")


@dataclass(frozen=True)
class LegCycle:
    """One gait cycle of one leg's sagittal angles: phase (K,) uniform in [0, 1) from the foot strike;
    hip flexion, knee flexion, ankle dorsiflexion and pelvis anterior tilt (K,) rad (Plug-in Gait
    signs); double_support p (% of the stride, both double supports together); source (provenance)."""

    phase: np.ndarray
    hip: np.ndarray
    knee: np.ndarray
    ankle: np.ndarray
    tilt: np.ndarray
    double_support: float
    source: str = ""

    def __post_init__(self) -> None:
        K = self.phase.shape[0]
        if K < 16 or not np.allclose(self.phase, np.arange(K) / K):
            raise BipedError("leg cycle: expected K >= 16 uniform phases k/K")
        for k in ("hip", "knee", "ankle", "tilt"):
            a = getattr(self, k)
            if a.shape != (K,) or not np.all(np.isfinite(a)):
                raise BipedError(f"leg cycle: {k}: expected {K} finite angles (rad)")
        if not 0 <= self.double_support < 50:
            raise BipedError(f"leg cycle: double support {self.double_support} % of the stride: expected 0..50")


def periodic(curve: np.ndarray) -> np.ndarray:
    """Samples (K + 1,) of a cycle over [0, 1] whose end differs from its start (a mean of measured
    strides) -> (K,) periodic samples at k/K, the linear drift removed: y_k - (y_K - y_0) k/K."""
    y = np.asarray(curve, dtype=float)
    K = y.shape[0] - 1
    return y[:K] - (y[K] - y[0]) * np.arange(K) / K


# -------------------------------------------------------------------------------- planar tree


@dataclass(frozen=True)
class BipedJoints:
    """Names of the model's joints the synergy uses: hips, knees, ankles (left, right), the trunk joint
    (psi, about +y), the feet segments (left, right) and their sole contact point names."""

    hips: tuple[str, str]
    knees: tuple[str, str]
    ankles: tuple[str, str]
    trunk: str
    feet: tuple[str, str]


@dataclass(frozen=True, eq=False)
class PlanarTree:
    """The model's sagittal projection (module doc): per segment parent index (-1 base), sign of its
    joint about +y (0: held), the model joint's q and v index (-1 none), origin and CoM (x, z) m in
    the parent / own frame, mass kg, I_yy kg m^2; trunk: the set of segments moving with the trunk
    joint; base: the free-flyer segment."""

    model: Model
    parent: np.ndarray
    sign: np.ndarray
    iq: np.ndarray
    iv: np.ndarray
    origin: np.ndarray
    com: np.ndarray
    mass: np.ndarray
    Iyy: np.ndarray
    trunk: np.ndarray
    joints: BipedJoints
    sole: float          # m, ankle height above the sole (from the foot's contact points)
    heel: float          # m, heel x from the ankle
    toe: float           # m, toe x from the ankle
    roll: float          # m, roll-over radius R of the stance foot


def planar_tree(model: Model, joints: BipedJoints, roll: float | None = None) -> PlanarTree:
    """Project `model` (module doc); BipedError naming a joint that is missing or not about y.
    roll: the roll-over radius R (m), default ROLL times the leg length (hip to sole)."""
    by_joint = {(s.joint_name or s.name): i for i, s in enumerate(model.segments)}
    n = len(model.segments)
    parent = np.asarray(model.parents, dtype=int)
    sign = np.zeros(n)
    for i, s in enumerate(model.segments):
        if s.joint.type == "revolute":
            ax = s.joint.rotation @ s.joint.axis
            if abs(abs(ax[1]) - 1.0) < 1e-9:
                sign[i] = ax[1]
        elif s.joint.type not in ("fixed", "free_flyer"):
            raise BipedError(f"model {model.name!r}: joint {s.joint_name!r} of type {s.joint.type} is not supported")
        if s.joint.type != "free_flyer" and np.abs(s.joint.rotation - np.eye(3)).max() > 1e-12:
            raise BipedError(f"model {model.name!r}: segment {s.name!r}: frames must be parallel to the lab at q = 0")
    if model.segments[0].joint.type != "free_flyer":
        raise BipedError(f"model {model.name!r}: expected a free-flyer base (the pelvis)")
    names = [*joints.hips, *joints.knees, *joints.ankles, joints.trunk]
    for j in names:
        if j not in by_joint or sign[by_joint[j]] == 0:
            raise BipedError(f"model {model.name!r}: no revolute joint {j!r} about the y axis")
    for f in joints.feet:
        if f not in model.index:
            raise BipedError(f"model {model.name!r}: no foot segment {f!r}")
    t = by_joint[joints.trunk]
    trunk = np.flatnonzero(model.supports[:, t] > 0)
    if sign[t] != 1.0:
        raise BipedError(f"model {model.name!r}: trunk joint {joints.trunk!r} must turn about +y (forward lean positive)")
    foot = model.segment(joints.feet[0])
    pts = np.array(list(foot.contacts.values()))
    if pts.shape[0] < 2:
        raise BipedError(f"model {model.name!r}: foot {foot.name!r} needs heel and toe contact points")
    sole = float(-pts[:, 2].min())
    leg = sole
    i = model.index[foot.name]
    while model.segments[i].joint_name != joints.hips[0]:
        leg -= model.segments[i].joint.translation[2]
        i = parent[i]
    R = ROLL * leg if roll is None else float(roll)
    if not R > 0:
        raise BipedError(f"roll-over radius: expected > 0 m, got {roll}")
    return PlanarTree(model=model, parent=parent, sign=sign, iq=np.array(model.idx_q), iv=np.array(model.idx_v),
                      origin=np.array([[s.joint.translation[0], s.joint.translation[2]] for s in model.segments]),
                      com=model.coms[:, [0, 2]].copy(), mass=model.masses.copy(),
                      Iyy=model.inertias[:, 1, 1].copy(), trunk=trunk, joints=joints,
                      sole=sole, heel=float(pts[:, 0].min()), toe=float(pts[:, 0].max()), roll=R)


def _rot(phi, r):
    """R(phi) r for a rotation about +y by phi in the x-z plane: (x cos + z sin, -x sin + z cos)."""
    c, s = np.cos(phi), np.sin(phi)
    return np.stack([r[..., 0] * c + r[..., 1] * s, -r[..., 0] * s + r[..., 1] * c], axis=-1)


def _perp(d):
    """d(R r)/dphi = (d_z, -d_x)."""
    return np.stack([d[..., 1], -d[..., 0]], axis=-1)


@dataclass(frozen=True)
class PlanarState:
    """Sagittal kinematics with the base fixed at the origin, upright: phi, w, al (N, nseg) rad, rad/s,
    rad/s^2; origin o, vo, ao and CoM c, vc, ac (N, nseg, 2) m, m/s, m/s^2 (x, z)."""

    phi: np.ndarray
    w: np.ndarray
    al: np.ndarray
    o: np.ndarray
    vo: np.ndarray
    ao: np.ndarray
    c: np.ndarray
    vc: np.ndarray
    ac: np.ndarray


def planar_state(tree: PlanarTree, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> PlanarState:
    """Kinematics of every segment for joint angles per segment q, qd, qdd (N, nseg) (module doc)."""
    N, n = q.shape
    phi, w, al = np.zeros((N, n)), np.zeros((N, n)), np.zeros((N, n))
    o, vo, ao = np.zeros((N, n, 2)), np.zeros((N, n, 2)), np.zeros((N, n, 2))
    for i in range(1, n):
        p = tree.parent[i]
        d = _rot(phi[:, p], tree.origin[i])
        o[:, i] = o[:, p] + d
        vo[:, i] = vo[:, p] + w[:, p, None] * _perp(d)
        ao[:, i] = ao[:, p] + al[:, p, None] * _perp(d) - (w[:, p] ** 2)[:, None] * d
        phi[:, i] = phi[:, p] + tree.sign[i] * q[:, i]
        w[:, i] = w[:, p] + tree.sign[i] * qd[:, i]
        al[:, i] = al[:, p] + tree.sign[i] * qdd[:, i]
    dc = _rot(phi, tree.com)
    c = o + dc
    vc = vo + w[..., None] * _perp(dc)
    ac = ao + al[..., None] * _perp(dc) - (w ** 2)[..., None] * dc
    return PlanarState(phi, w, al, o, vo, ao, c, vc, ac)


# ------------------------------------------------------------------------------ leg synergy


@dataclass(frozen=True, eq=False)
class LegSynergy:
    """The prescribed joint channels of one leg as periodic cubic splines of the stride phase (module
    doc): spline(phase) -> (3,) [hip, knee, ankle] rad; S, T; tau (s) half the double support."""

    spline: CubicSpline
    S: float
    T: float
    tau: float

    def at(self, t, offset: float = 0.0):
        """q, qd, qdd (N, 3) of [hip, knee, ankle] at times t (N,) s, leg phase (t + tau)/T + offset."""
        ph = np.mod((np.asarray(t, dtype=float) + self.tau) / self.T + offset, 1.0)
        return self.spline(ph), self.spline(ph, 1) / self.T, self.spline(ph, 2) / self.T ** 2


def leg_synergy(cycle: LegCycle, S: float, T: float, double_support: float | None = None) -> LegSynergy:
    """The scaled leg synergy (module doc) for step scale S and stride period T (s); the double support
    share p (%) defaults to the cycle's own. The left leg is the stance leg from its transfer at phase
    tau/T to the next at 0.5 + tau/T."""
    if not (S > 0 and T > 0 and math.isfinite(S) and math.isfinite(T)):
        raise BipedError(f"leg synergy: expected S > 0 and T > 0 s, got S = {S}, T = {T}")
    p = cycle.double_support if double_support is None else double_support
    tau = T * p / 400.0
    K = SAMPLES_SPLINE
    u = np.arange(K) / K
    src = CubicSpline(np.append(cycle.phase, 1.0),
                      np.column_stack([np.append(a, a[0]) for a in (cycle.hip, cycle.knee, cycle.ankle, cycle.tilt)]),
                      bc_type="periodic")(u)
    y = S * np.column_stack([src[:, 0] - src[:, 3], src[:, 1], src[:, 2]])
    return LegSynergy(CubicSpline(np.append(u, 1.0), np.vstack([y, y[:1]]), bc_type="periodic"), float(S), float(T), tau)


# ------------------------------------------------------------------------------ half-step


@dataclass(frozen=True, eq=False)
class HalfStep:
    """Prescribed motion of a half-step with the `stance` leg (0 left, 1 right) on the ground, its ankle
    rolling from the origin; precomputed rest-of-body sums on a fine grid and splined (module doc):
    channels A, B (N m, N), w_x'', w_z'' (m/s^2), w_x, w_z (m) of the waist joint, the stance ankle's x (m)."""

    tree: PlanarTree
    leg: LegSynergy
    P: float
    stance: int
    channels: CubicSpline
    mT: float
    cT: np.ndarray
    IT: float


def _joint_angles(tree: PlanarTree, leg: LegSynergy, t: np.ndarray, stance: int, psi=None, dpsi=None, ddpsi=None):
    """Per-segment q, qd, qdd (N, nseg) at times t of a half-step with `stance` on the ground (the stance
    leg's phase from its transfer; the other leg half a cycle on)."""
    m = tree.model
    N, n = len(t), len(m.segments)
    q, qd, qdd = np.zeros((N, n)), np.zeros((N, n)), np.zeros((N, n))
    seg = {(s.joint_name or s.name): i for i, s in enumerate(m.segments)}
    for side in (0, 1):
        a, ad, add = leg.at(t, 0.0 if side == stance else 0.5)
        for k, names in enumerate((tree.joints.hips, tree.joints.knees, tree.joints.ankles)):
            i = seg[names[side]]
            q[:, i], qd[:, i], qdd[:, i] = a[:, k], ad[:, k], add[:, k]
    if psi is not None:
        i = seg[tree.joints.trunk]
        q[:, i], qd[:, i], qdd[:, i] = psi, dpsi, ddpsi
    return q, qd, qdd


def _stance_ankle(tree: PlanarTree, stance: int) -> int:
    """Index of the stance foot segment (its origin is the ankle joint)."""
    return tree.model.index[tree.joints.feet[stance]]


def rolling_ankle(tree: PlanarTree, phi, dphi, ddphi, x_ref: float = 0.0):
    """Ankle position, velocity, acceleration (N, 2) (x, z) of a foot of pitch phi, dphi, ddphi (N,)
    rolling without slip on its roll-over circle (module doc)."""
    R, k = tree.roll, tree.sole - tree.roll
    s, c = np.sin(phi), np.cos(phi)
    pos = np.stack([x_ref + R * phi + k * s, R + k * c], axis=-1)
    d = np.stack([R + k * c, -k * s], axis=-1)            # d pos / d phi
    dd = np.stack([-k * s, -k * c], axis=-1)
    return pos, dphi[..., None] * d, ddphi[..., None] * d + (dphi ** 2)[..., None] * dd


def _on_ground(tree: PlanarTree, st: PlanarState, stance: int, x_ref: float = 0.0):
    """(shift, its velocity, its acceleration) (N, 2) that carry the base-fixed kinematics `st` to the
    lab with the stance foot rolling on the ground (add to every point's position / velocity / acceleration)."""
    f = _stance_ankle(tree, stance)
    p, v, a = rolling_ankle(tree, st.phi[:, f], st.w[:, f], st.al[:, f], x_ref)
    return p - st.o[:, f], v - st.vo[:, f], a - st.ao[:, f]


def half_step(tree: PlanarTree, leg: LegSynergy, stance: int = 0, grid: int = 1201) -> HalfStep:
    """Precompute the prescribed part of a half-step (module doc) on `grid` times over [0, P]."""
    P = leg.T / 2
    t = np.linspace(0.0, P, grid)
    q, qd, qdd = _joint_angles(tree, leg, t, stance)
    st = planar_state(tree, q, qd, qdd)
    sp, _, sa = _on_ground(tree, st, stance)
    f = _stance_ankle(tree, stance)
    c, ac = st.c + sp[:, None], st.ac + sa[:, None]
    rest = np.ones(len(tree.mass), bool)
    rest[tree.trunk] = False
    m, I = tree.mass[rest], tree.Iyy[rest]
    x, z = c[:, rest, 0], c[:, rest, 1]
    xdd, zdd = ac[:, rest, 0], ac[:, rest, 1]
    A = ((zdd + G) * x * m).sum(1) - (xdd * z * m).sum(1) - (st.al[:, rest] * I).sum(1)
    B = ((zdd + G) * m).sum(1)
    tj = tree.trunk[0]
    wpos = st.o[:, tj] + sp
    wacc = st.ao[:, tj] + sa
    # the trunk group as one rigid body about the trunk joint (its frame at psi = 0)
    qz = np.zeros((1, len(tree.mass)))
    s0 = planar_state(tree, qz, qz, qz)
    mg = tree.mass[tree.trunk]
    mT = float(mg.sum())
    cg = (s0.c[0, tree.trunk] * mg[:, None]).sum(0) / mT
    cT = cg - s0.o[0, tj]
    r2 = ((s0.c[0, tree.trunk] - cg) ** 2).sum(1)
    IT = float((tree.Iyy[tree.trunk] + mg * r2).sum())
    ankle = st.o[:, f, 0] + sp[:, 0]
    ch = CubicSpline(t, np.column_stack([A, B, wacc, wpos, ankle]))
    return HalfStep(tree, leg, P, stance, ch, mT, cT, IT)


@dataclass(frozen=True)
class GaitLaw:
    """ZMP law of a half-step: single-support law (1..5 = I..V, 6 the foot's contacts), double-support
    law (1..3), double support share p (% of the stride), step length S_h (m) from the kinematics;
    foot (heel x, toe x) m, the stance foot's contact extent from its ankle (law 6's, else None)."""

    single: int
    double: int
    share: float
    step: float
    foot: tuple[float, float] | None = None


def trunk_rhs(hs: HalfStep, law: GaitLaw):
    """The trunk's right-hand side Y' = [psi', psi''] on [0, P] (module doc), and its law's switch times.
    (Scalar code: the shooting calls it ~10^4 times per half-step.)"""
    P = hs.P
    mT, (cx, cz), IT = hs.mT, hs.cT, hs.IT
    knots, coef = hs.channels.x, hs.channels.c            # piecewise cubic: (4, K, channels)
    c0, c1, c2, c3 = (np.ascontiguousarray(coef[i]) for i in range(4))
    breaks = law_breaks(P, law)
    # the law on each piece between breaks, taken at the piece's middle (exact: piecewise constant)
    edges = (0.0, *breaks, P)
    values = [float(zmp_law(0.5 * (u + w), P, law.single, law.double, law.step, law.share, law.foot))
              for u, w in zip(edges[:-1], edges[1:])]
    last = len(knots) - 2

    def rhs(t, y):
        psi, dpsi = y
        k = min(max(bisect_right(knots, t) - 1, 0), last)
        h = t - knots[k]
        A, B, ax, az, wx, wz, ankle = ((c0[k] * h + c1[k]) * h + c2[k]) * h + c3[k]
        p = ankle + values[bisect_right(breaks, t)]
        c, s = math.cos(psi), math.sin(psi)
        dx, dz = cx * c + cz * s, -cx * s + cz * c
        xT, zT = wx + dx, wz + dz
        coef_ = -mT * (dx * (xT - p) + dz * zT) - IT
        rest = A - p * B + mT * ((az - dz * dpsi * dpsi + G) * (xT - p) - (ax - dx * dpsi * dpsi) * zT)
        if abs(coef_) < 1e-9:
            raise BipedError(f"trunk equation singular at t = {t:.4g} s (psi = {psi:.4g} rad)")
        return np.array([dpsi, -rest / coef_])

    return rhs, breaks


def law_breaks(P: float, law: GaitLaw) -> tuple[float, ...]:
    """Times (s) in (0, P) where the ZMP law of a half-step jumps."""
    if law.single == FOOT_LAW:
        b = toe_breaks(P)
    else:
        tsw1, tsw2, toe, heel = SINGLE_SUPPORT[law.single]
        b = [tsw1 * P if heel else None, tsw2 * P if toe else None]
    tau = P * law.share / 200.0
    if tau > 0:
        b += [tau * i / law.double for i in range(1, law.double + 1)]
        b += [P - tau + tau * i / law.double for i in range(law.double)]
    return tuple(sorted({x for x in b if x is not None and 0 < x < P}))


# ------------------------------------------------------------------------------ frontal compensation

EX, EY = np.eye(3)[:2]


def _roty(phi, I):
    """R_y(phi) I R_y(phi)^T for inertias I (3, 3) or (N, 3, 3) and pitches phi (N,) (rotation about +y,
    x' = x cos + z sin, z' = -x sin + z cos, as `_rot`)."""
    c, s = np.cos(phi), np.sin(phi)
    R = np.zeros(np.shape(phi) + (3, 3))
    R[..., 0, 0], R[..., 0, 2], R[..., 1, 1], R[..., 2, 0], R[..., 2, 2] = c, s, 1.0, -s, c
    return R @ I @ np.swapaxes(R, -1, -2)


def _lateral(tree: PlanarTree):
    """Per segment: the lab y (m) of its CoM and of its joint origin in the neutral posture (sagittal
    joints keep every y); the 3-D inertia about the CoM (nseg, 3, 3) kg m^2."""
    m = tree.model
    oy = np.zeros(len(m.segments))
    for i in range(1, len(m.segments)):
        oy[i] = oy[tree.parent[i]] + m.segments[i].joint.translation[1]
    return oy + m.coms[:, 1], oy, m.inertias


@dataclass(frozen=True, eq=False)
class FrontalHalfStep:
    """The prescribed part of a half-step for the two-unknown trunk system (module doc "Frontal
    compensation"): the leg synergy and P (s); splined over [0, P] the rest-of-body sums about the
    pivot K (the stance foot's ground contact, x = R phi_f, z = 0, y = the stance foot's line y_st),
    in the unrolled frame:
    S, Sd, L0, N0, N1, N2, N3 (3 each), the waist joint's w, w', w'' (3 each) from K, K'' x and the
    stance ankle x (m, the sagittal law's reference); the trunk group's mass mT, CoM cT (3) from the
    waist at psi = 0 and inertia IT (3, 3) about its CoM; the feet lines y_st, y_ot (m)."""

    leg: LegSynergy
    P: float
    channels: CubicSpline
    m_rest: float
    mT: float
    cT: np.ndarray
    IT: np.ndarray
    y_st: float
    y_ot: float


def frontal_half_step(tree: PlanarTree, leg: LegSynergy, stance: int = 0, grid: int = 1201) -> FrontalHalfStep:
    """Precompute the two-unknown system's prescribed sums of a half-step (FrontalHalfStep doc)."""
    P = leg.T / 2
    t = np.linspace(0.0, P, grid)
    q, qd, qdd = _joint_angles(tree, leg, t, stance)
    st = planar_state(tree, q, qd, qdd)
    sp, sv, sa = _on_ground(tree, st, stance)
    f = _stance_ankle(tree, stance)
    yc, yo, I0 = _lateral(tree)
    y_st, y_ot = yo[f], yo[_stance_ankle(tree, 1 - stance)]
    R = tree.roll
    kx, kvx, kax = R * st.phi[:, f], R * st.w[:, f], R * st.al[:, f]
    N = len(t)

    def lift(xz, y):              # (N, n, 2) x-z and (n,) y -> (N, n, 3)
        return np.stack([xz[..., 0], np.broadcast_to(y, xz.shape[:-1]), xz[..., 1]], axis=-1)

    nseg = len(tree.mass)
    u = lift(st.c + sp[:, None], yc - y_st)
    u[..., 0] -= kx[:, None]
    ud = lift(st.vc + sv[:, None], np.zeros(nseg))
    ud[..., 0] -= kvx[:, None]
    udd = lift(st.ac + sa[:, None], np.zeros(nseg))
    udd[..., 0] -= kax[:, None]
    rest = np.ones(nseg, bool)
    rest[tree.trunk] = False
    m = tree.mass[rest][None, :, None]
    u, ud, udd = u[:, rest], ud[:, rest], udd[:, rest]
    ph, w, al = st.phi[:, rest], st.w[:, rest], st.al[:, rest]
    J = _roty(ph, I0[rest])                                   # (N, n, 3, 3)
    Jx, Jy, Jz = J[..., 0], J[..., 1], J[..., 2]
    S = (m * u).sum(1)
    Sd = (m * ud).sum(1)
    L0 = (m * udd).sum(1)
    N0 = (m * np.cross(u, udd)).sum(1) + ((w ** 2)[..., None] * np.cross(EY, Jy) + al[..., None] * Jy).sum(1)
    N1 = ((2 * m * np.cross(u, np.cross(EX, ud))).sum(1)
          + (w[..., None] * (np.cross(EY, Jx) + Jz + np.cross(EX, Jy))).sum(1))
    N2 = (m * np.cross(u, np.cross(EX, np.cross(EX, u)))).sum(1) + np.cross(EX, Jx).sum(1)
    N3 = (m * np.cross(u, np.cross(EX, u))).sum(1) + Jx.sum(1)
    tj = tree.trunk[0]
    wp = lift(st.o[:, tj] + sp, np.full(N, yo[tj] - y_st))
    wp[:, 0] -= kx
    wv = lift(st.vo[:, tj] + sv, np.zeros(N))
    wv[:, 0] -= kvx
    wa = lift(st.ao[:, tj] + sa, np.zeros(N))
    wa[:, 0] -= kax
    ankle = st.o[:, f, 0] + sp[:, 0]
    ch = CubicSpline(t, np.column_stack([S, Sd, L0, N0, N1, N2, N3, wp, wv, wa, kx, kax, ankle]))
    # the trunk group as one rigid body about the trunk joint, its frame at psi = 0 (3-D)
    qz = np.zeros((1, nseg))
    s0 = planar_state(tree, qz, qz, qz)
    grp = tree.trunk
    mg = tree.mass[grp]
    mT = float(mg.sum())
    cg3 = lift(s0.c[0, grp], yc[grp])
    cg = (cg3 * mg[:, None]).sum(0) / mT
    r = cg3 - cg
    steiner = (r * r).sum(1)[:, None, None] * np.eye(3) - r[:, :, None] * r[:, None, :]   # parallel axes
    IT = (I0[grp] + mg[:, None, None] * steiner).sum(0)
    cT = cg - np.array([s0.o[0, tj, 0], yo[tj], s0.o[0, tj, 1]])
    return FrontalHalfStep(leg, P, ch, float(tree.mass[rest].sum()), mT, cT, IT, float(y_st), float(y_ot))


def lateral_law(t, P: float, law: "GaitLaw") -> np.ndarray:
    """Share (0..1) of the way from the stance foot's line to the other foot's at times t (s) of a
    half-step: 0 in single support; in double support law k's staircase, the same shares as the
    sagittal law's (models.md 6.2: the ZMP goes from the trailing foot to the new stance foot, and on
    toward the next one, along the line between the feet): |zmp_law(single I, step 1)|."""
    return np.abs(zmp_law(t, P, 1, law.double, 1.0, law.share))


@njit(cache=True, inline="always")
def _cross(a0, a1, a2, b0, b1, b2):
    """a x b, componentwise."""
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit(cache=True)
def _frontal_accel(t, th, psi, dth, dpsi, kn, c0, c1, c2, c3, breaks, px, py, k):
    """(theta'', psi'', DET) of the two-unknown system at time t (frontal_rhs doc). kn, c0..c3: the
    prescribed channels' cubic pieces (FrontalHalfStep.channels); breaks, px, py: the law's switch times
    and its point per piece (x from the stance ankle, y from the stance foot's line); k: mT, cT (3),
    m, I_T (xx, xy, xz, yy, yz, zz), g."""
    i = min(max(np.searchsorted(kn, t, side="right") - 1, 0), kn.shape[0] - 2)
    h = t - kn[i]
    v = ((c0[i] * h + c1[i]) * h + c2[i]) * h + c3[i]
    j = np.searchsorted(breaks, t, side="right")
    mT, cx, cy, cz, mtot = k[0], k[1], k[2], k[3], k[4]
    Ixx, Ixy, Ixz, Iyy, Iyz, Izz, g = k[5], k[6], k[7], k[8], k[9], k[10], k[11]
    c, s = math.cos(psi), math.sin(psi)
    dx, dy, dz = cx * c + cz * s, cy, -cx * s + cz * c
    ex, ez = dz, -dx                                       # e_y x d = (dz, 0, -dx)
    ux, uy, uz = v[21] + dx, v[22] + dy, v[23] + dz        # trunk CoM from the pivot
    vx, vy, vz = v[24] + dpsi * ex, v[25], v[26] + dpsi * ez
    ax, ay, az = v[27] - dpsi * dpsi * dx, v[28], v[29] - dpsi * dpsi * dz
    cc, ss, cs = c * c, s * s, c * s
    jxx = cc * Ixx + 2 * cs * Ixz + ss * Izz
    jzz = ss * Ixx - 2 * cs * Ixz + cc * Izz
    jxz = (cc - ss) * Ixz + cs * (Izz - Ixx)
    jxy = c * Ixy + s * Iyz
    jyz = -s * Ixy + c * Iyz
    Sx, Sy, Sz = v[0] + mT * ux, v[1] + mT * uy, v[2] + mT * uz
    Dx, Dy, Dz = v[3] + mT * vx, v[4] + mT * vy, v[5] + mT * vz
    # L = L0 + mT u''_T + 2 theta' e_x x Sd + theta'^2 e_x x (e_x x S)
    Lx = v[6] + mT * ax
    Ly = v[7] + mT * ay - 2 * dth * Dz - dth * dth * Sy
    Lz = v[8] + mT * az + 2 * dth * Dy - dth * dth * Sz
    # N0 + theta' N1 + theta'^2 N2 with the trunk group's terms
    p0, p1, p2 = _cross(ux, uy, uz, ax, ay, az)
    n0x = v[9] + mT * p0 + dpsi * dpsi * jyz               # e_y x J e_y = (J_zy, 0, -J_xy)
    n0y = v[10] + mT * p1
    n0z = v[11] + mT * p2 - dpsi * dpsi * jxy
    q0, q1, q2 = _cross(ux, uy, uz, 0.0, -vz, vy)          # u x (e_x x u')
    # e_y x J e_x + J e_z + e_x x J e_y = (J_zx, 0, -J_xx) + J e_z + (0, -J_zy, J_yy)
    n1x = v[12] + 2 * mT * q0 + dpsi * (jxz + jxz)
    n1y = v[13] + 2 * mT * q1 + dpsi * (jyz - jyz)
    n1z = v[14] + 2 * mT * q2 + dpsi * (-jxx + jzz + Iyy)
    r0, r1, r2 = _cross(ux, uy, uz, 0.0, -uy, -uz)        # u x (e_x x (e_x x u))
    n2x = v[15] + mT * r0
    n2y = v[16] + mT * r1 - jxz                            # e_x x J e_x = (0, -J_zx, J_yx)
    n2z = v[17] + mT * r2 + jxy
    Nx = n0x + dth * n1x + dth * dth * n2x
    Ny = n0y + dth * n1y + dth * dth * n2y
    Nz = n0z + dth * n1z + dth * dth * n2z
    w0, w1, w2 = _cross(ux, uy, uz, 0.0, -uz, uy)          # u x (e_x x u)
    N3x, N3y, N3z = v[18] + mT * w0 + jxx, v[19] + mT * w1 + jxy, v[20] + mT * w2 + jxz
    L3x, L3y, L3z = 0.0, -Sz, Sy
    Lpx, Lpy, Lpz = mT * ex, 0.0, mT * ez
    o0, o1, o2 = _cross(ux, uy, uz, ex, 0.0, ez)
    Npx, Npy, Npz = mT * o0 + jxy, mT * o1 + Iyy, mT * o2 + jyz
    ct, st = math.cos(th), math.sin(th)
    rx, ry = v[30] - v[32] - px[j], -py[j]                 # K - p (z = 0)
    gx, gz = v[31], g
    # rotated vectors R_x(theta) a = (a_x, ct a_y - st a_z, st a_y + ct a_z)
    RLx, RLy, RLz = Lx, ct * Ly - st * Lz, st * Ly + ct * Lz
    RSx, RSy, RSz = Sx, ct * Sy - st * Sz, st * Sy + ct * Sz
    RNx, RNy = Nx, ct * Ny - st * Nz
    Fx, Fy, Fz = mtot * gx + RLx, RLy, mtot * gz + RLz
    Mbx = ry * Fz + (RSy * gz) + RNx                       # (r x F)_x = ry Fz - 0 Fy; (RS x G)_x = RSy gz - RSz 0
    Mby = -rx * Fz + (RSz * gx - RSx * gz) + RNy           # (r x F)_y = 0 Fx - rx Fz
    RL3y, RL3z = ct * L3y - st * L3z, st * L3y + ct * L3z
    Mtx = ry * RL3z + N3x
    Mty = -rx * RL3z + ct * N3y - st * N3z
    RLpy, RLpz = ct * Lpy - st * Lpz, st * Lpy + ct * Lpz
    Mpx = ry * RLpz + Npx
    Mpy = -rx * RLpz + ct * Npy - st * Npz
    det = Mtx * Mpy - Mty * Mpx
    if det == 0.0:
        return 0.0, 0.0, 0.0
    return (Mby * Mpx - Mbx * Mpy) / det, (Mbx * Mty - Mby * Mtx) / det, det


def frontal_rhs(fh: FrontalHalfStep, law: "GaitLaw"):
    """Y' for Y = [theta, psi, theta', psi'] on [0, P] (module doc "Frontal compensation"), and the
    law's switch times. theta: the whole body's roll about the lab x axis through the pivot K (+: the
    right side down); psi: the trunk joint. Both ZMP moments about the law point p vanish:
    M = (K - p) x (m G + R L) + (R S) x G + R N = M_b + theta'' M_theta + psi'' M_psi (module doc),
    a 2 x 2 linear system in theta'', psi'' (BIDYN's E11..E22, methods.md j.2), solved by the compiled
    `_frontal_accel` (the shooting calls it ~10^5 times per nominal)."""
    P = fh.P
    breaks = law_breaks(P, law)
    edges = (0.0, *breaks, P)
    mids = [0.5 * (u + w) for u, w in zip(edges[:-1], edges[1:])]
    px = np.array([float(zmp_law(x, P, law.single, law.double, law.step, law.share, law.foot)) for x in mids])
    py = np.array([float(lateral_law(x, P, law)) * (fh.y_ot - fh.y_st) for x in mids])   # from the stance foot's line
    coef = fh.channels.c
    kn = np.ascontiguousarray(fh.channels.x)
    c0, c1, c2, c3 = (np.ascontiguousarray(coef[i]) for i in range(4))
    I = fh.IT
    k = np.array([fh.mT, *fh.cT, fh.m_rest + fh.mT, I[0, 0], I[0, 1], I[0, 2], I[1, 1], I[1, 2], I[2, 2], G])
    br = np.array(breaks, dtype=float)

    def rhs(t, y):
        th, psi, dth, dpsi = y
        a, b, det = _frontal_accel(float(t), th, psi, dth, dpsi, kn, c0, c1, c2, c3, br, px, py, k)
        if abs(det) < 1e-9:
            raise BipedError(f"two-unknown trunk system singular at t = {t:.4g} s "
                             f"(theta = {th:.4g}, psi = {psi:.4g} rad)")
        return np.array([dth, dpsi, a, b])

    return rhs, breaks


def step_length(tree: PlanarTree, leg: LegSynergy) -> tuple[float, float, float]:
    """(S_h m, height m and speed m/s of the trailing foot off its roll-over shape) at the transfer t = 0:
    the distance of the two feet's flat places sets the ZMP staircase; the height and speed measure how
    far the prescribed trailing foot is from rolling on the ground there (the semi-inverse method does
    not enforce the closed chain of double support)."""
    q, qd, qdd = _joint_angles(tree, leg, np.zeros(1), 0)
    st = planar_state(tree, q, qd, qdd)
    sp, sv, _ = _on_ground(tree, st, 0)
    fr = _stance_ankle(tree, 1)
    pos, vel = st.o[0, fr] + sp[0], st.vo[0, fr] + sv[0]
    roll0, rv, _ = rolling_ankle(tree, st.phi[:, fr], st.w[:, fr], st.al[:, fr])
    x_ref = pos[0] - roll0[0, 0]
    return float(-x_ref), float(pos[1] - roll0[0, 1]), float(np.hypot(*(vel - rv[0])))


# ------------------------------------------------------------------------------ nominal


@dataclass(frozen=True)
class TrunkSolution:
    """The periodic trunk: y0 [psi, psi'] (with the frontal compensation [theta, psi, theta', psi']) at
    the start of the stride; how it was found (shooting
    iterations, Newton steps, residual J, history); the collocation's y0 when cross-checked or used as
    the start (started_from: "guess" or "collocation"); other_y0: a second periodic trunk when shooting
    and collocation found different ones (the one with the smaller initial lean |psi| is kept)."""

    y0: np.ndarray
    iterations: int
    newton_steps: int
    J: float
    history: tuple[float, ...]
    collocation_y0: np.ndarray | None = None
    started_from: str = "guess"
    other_y0: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class BipedNominal:
    """A stride (two half-steps, left stance first) at M uniform phases: t (M,) s; psi, dpsi, ddpsi (M,);
    the 3-D model's q (M, nq), v, a (M, nv) (free-flyer pelvis, lab frame x forward, z up, the left
    stance ankle above x = 0 at t = 0); the law ZMP x (M,) m in the lab; stance (M,) 0/1; S_h, speed;
    trunk solution; landing figures (step_length doc). With the frontal compensation: theta, dtheta,
    ddtheta (M,) the roll (rad, rad/s, rad/s^2), the law ZMP y (M,) m in the lab, and transfer_jump (m):
    how far the pelvis moves at a support transfer because the roll's pivot changes feet (module doc)."""

    tree: PlanarTree
    S: float
    T: float
    laws: tuple[GaitLaw, GaitLaw]
    t: np.ndarray
    psi: np.ndarray
    dpsi: np.ndarray
    ddpsi: np.ndarray
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    zmp_law_x: np.ndarray
    stance: np.ndarray
    ankle_x: np.ndarray
    step: float
    speed: float
    trunk: TrunkSolution
    trailing_height: float
    trailing_speed: float
    cycle_source: str = ""
    halves: tuple = field(default=(), repr=False)
    theta: np.ndarray | None = None
    dtheta: np.ndarray | None = None
    ddtheta: np.ndarray | None = None
    zmp_law_y: np.ndarray | None = None
    transfer_jump: float = 0.0


def solve_trunk(halves, laws, y0=None, symmetric: bool = True, settings: ShootingSettings | None = None,
                check: bool = False) -> TrunkSolution:
    """Periodic trunk by shooting (symmetric: the half-step with Y(P) = W Y(0), W = I for [psi, psi'],
    diag(-1, 1, -1, 1) for [theta, psi, theta', psi']: the roll flips at the transfer; else the full
    stride with Y(T) = Y(0)); halves: `HalfStep`s (psi alone) or `FrontalHalfStep`s (theta and psi);
    y0: the guess (default at rest, upright); check: the collocation solution from the same guess as
    well. When shooting from y0 fails (the trunk falls within the half-step: long half-periods), it
    restarts from the collocation solution (collocation does not integrate through the instability);
    `started_from` says which."""
    frontal = isinstance(halves[0], FrontalHalfStep)
    n = 4 if frontal else 2
    settings = settings or SETTINGS
    if frontal and (settings.weights is None or len(settings.weights) != n):
        w = settings.weights or (1.0, 1.0)
        settings = replace(settings, weights=(w[0], w[0], w[-1], w[-1]))
    if symmetric:
        rhs, br = _rhs(halves[0], laws[0])
        P = halves[0].P
    else:
        rhs, br, P = stride_rhs(halves, laws)
    W = (-1.0, 1.0, -1.0, 1.0) if frontal and symmetric else (1.0,) * n
    guess = np.zeros(n) if y0 is None else np.asarray(y0, float)
    col = None
    try:
        res = shoot(rhs, guess, P, W=W, angles=n // 2, settings=settings, breaks=br)
        start = "guess"
    except BipedError:
        res = None
    if res is None or not res.converged:
        col, _ = collocate(rhs, guess, P, W=W, nodes=41, tol=1e-6, breaks=br, max_nodes=COLLOCATION_NODES)
        res = shoot(rhs, col, P, W=W, angles=n // 2, settings=settings, breaks=br)
        start = "collocation"
    if not res.converged:
        raise BipedError(f"trunk shooting did not converge: J = {res.J:.3g} after {res.iterations} iterations")
    if check and col is None:
        col, _ = collocate(rhs, guess, P, W=W, nodes=41, tol=1e-6, breaks=br, max_nodes=COLLOCATION_NODES)
    other = None
    if col is not None and np.abs(col - res.y0).max() > 1e-4:
        # two periodic trunks (the problem is nonlinear): keep the one leaning less, record the other
        res2 = shoot(rhs, col, P, W=W, angles=n // 2, settings=settings, breaks=br)
        if res2.converged and np.abs(res2.y0 - res.y0).max() > 1e-4:
            if abs(res2.y0[0]) < abs(res.y0[0]):
                res, other, start = res2, res.y0, "collocation"
            else:
                other = res2.y0
    return TrunkSolution(res.y0, res.iterations, res.newton_steps, res.J, res.history, col, start, other)


def _rhs(half, law):
    """The trunk's right-hand side of a half-step: psi alone (`trunk_rhs`) or theta and psi (`frontal_rhs`)."""
    return frontal_rhs(half, law) if isinstance(half, FrontalHalfStep) else trunk_rhs(half, law)


def stride_rhs(halves, laws):
    """The full stride's right-hand side on [0, T]: the left half-step, then the right one (the roll
    theta is the lab's: continuous at the transfer)."""
    (r0, b0), (r1, b1) = _rhs(halves[0], laws[0]), _rhs(halves[1], laws[1])
    P = halves[0].P

    def rhs(t, y):
        return r0(t, y) if t < P else r1(t - P, y)

    return rhs, (*b0, P, *(P + b for b in b1)), 2 * P


def foot_extent(model: Model, foot: str) -> tuple[float, float]:
    """(heel x, toe x) m: the rearmost and foremost of the foot segment's contact points along its x axis
    (its frame's origin is the ankle; law 6's `foot`). BipedError if it has none on either side."""
    px = [float(p[0]) for p in model.segments[model.index[foot]].contacts.values()]
    if not (px and min(px) < 0 <= max(px)):
        raise BipedError(f"ZMP law 6: foot {foot!r} needs contact points behind and ahead of its ankle (a heel and a "
                         f"toe), got x = {px} m")
    return min(px), max(px)


def build_nominal(model: Model, joints: BipedJoints, cycle: LegCycle, S: float, T: float,
                  single: tuple[int, int] = (1, 1), double: tuple[int, int] = (1, 1),
                  share: float | None = None, samples: int = 200, check: bool = False,
                  settings: ShootingSettings | None = None, roll: float | None = None,
                  frontal: bool = False) -> BipedNominal:
    """A periodic stride (module doc) of step scale S and stride period T (s) with single/double-support
    ZMP laws per side (left, right); symmetric when both sides' laws are equal. frontal: solve BIDYN's
    two-unknown system (theta and psi: the lateral ZMP follows its law too; module doc "Frontal
    compensation"), else psi alone (the lateral ZMP is not compensated)."""
    tree = planar_tree(model, joints, roll)
    p = cycle.double_support if share is None else float(share)
    leg = leg_synergy(cycle, S, T, p)
    Sh, h, vtr = step_length(tree, leg)
    if not Sh > 0:
        raise BipedError(f"S = {S}: the prescribed legs give a step length {Sh:.3f} m <= 0")
    feet = [foot_extent(model, joints.feet[k]) if single[k] == FOOT_LAW else None for k in (0, 1)]
    if FOOT_LAW in single:
        # law 6's double-support staircase runs from the trailing foot's toe to the leading foot's heel,
        # both taken from the stance foot's extent: both sides on law 6, with mirror-image feet
        if single[0] != single[1]:
            raise BipedError(f"ZMP law 6 (the foot's contacts) on one side only ({single[0]} left, {single[1]} "
                             "right): its double support runs between both feet's contacts; use it on both sides")
        if not np.allclose(feet[0], feet[1], atol=1e-3):
            raise BipedError(f"ZMP law 6: the feet's contact extents differ (left {feet[0]}, right {feet[1]} m): "
                             "it needs mirror-image feet")
    laws = tuple(GaitLaw(single[k], double[k], p, Sh, feet[k]) for k in (0, 1))
    make = frontal_half_step if frontal else half_step
    halves = (make(tree, leg, 0), make(tree, leg, 1))
    sym = laws[0] == laws[1]
    trunk = solve_trunk(halves, laws, symmetric=sym, settings=settings, check=check)
    t = np.arange(samples) * 2 * halves[0].P / samples
    (psi, dpsi, ddpsi), roll = stride_trunk(halves, laws, trunk.y0, t, settings)
    q, v, a, ankle_x, stance, zx, zy, jump = _full_state(tree, leg, laws, halves[0].P, t, psi, dpsi, ddpsi, Sh, roll)
    extra = ({"theta": roll[0], "dtheta": roll[1], "ddtheta": roll[2], "zmp_law_y": zy, "transfer_jump": jump}
             if frontal else {})
    return BipedNominal(tree, float(S), float(T), laws, t, psi, dpsi, ddpsi, q, v, a, zx, stance, ankle_x, Sh,
                        Sh / halves[0].P, trunk, h, vtr, cycle.source, halves, **extra)


def stride_trunk(halves, laws, y0, t, settings: ShootingSettings | None = None):
    """The compensating coordinates along the stride at times t (M,) s in [0, T), integrated from the
    periodic start y0 (`TrunkSolution.y0`): ((psi, psi', psi'') (M,) each, (theta, theta', theta'') or
    None without the frontal compensation), rad, rad/s, rad/s^2; the accelerations from the right-hand
    side (they jump at the ZMP law's switches)."""
    rhs, br, Tt = stride_rhs(halves, laws)
    fl = flow(rhs, y0, Tt, settings or SETTINGS, t_eval=t, breaks=br)
    n = fl.y.shape[0] // 2
    acc = np.array([rhs(ti, yi)[n:] for ti, yi in zip(t, fl.y.T)]).T
    roll = (fl.y[0], fl.y[n], acc[0]) if n == 2 else None
    return (fl.y[n - 1], fl.y[-1], acc[-1]), roll


def _full_state(tree, leg, laws, P, t, psi, dpsi, ddpsi, Sh, roll=None):
    """The 3-D model's q, v, a along the stride (pelvis upright, or rolled by theta about the stance
    foot's pivot: roll = (theta, theta', theta'') (M,) each; its position from the stance foot); leg: one
    leg synergy, or one per half-step. Also the stance ankle's x, the stance side, the law ZMP x and y
    (lab) and the pelvis's move at the transfers (m, 0 without roll)."""
    m = tree.model
    M = len(t)
    q = np.tile(m.neutral(), (M, 1))
    v, a = np.zeros((M, m.nv)), np.zeros((M, m.nv))
    stance = (t >= P).astype(int)
    ankle_x = np.empty(M)
    _, yo, _ = _lateral(tree)
    y_feet = [yo[_stance_ankle(tree, s)] for s in (0, 1)]
    for side in (0, 1):
        k = stance == side
        tl = t[k] - side * P
        jq, jd, jdd = _joint_angles(tree, leg[side] if isinstance(leg, tuple) else leg, tl, side,
                                    psi[k], dpsi[k], ddpsi[k])
        st = planar_state(tree, jq, jd, jdd)
        sp, sv, sa = _on_ground(tree, st, side, side * Sh)
        f = _stance_ankle(tree, side)
        ankle_x[k] = st.o[:, f, 0] + sp[:, 0]
        # the base (pelvis origin) sits at the planar origin; rolled about the pivot K on the ground
        b = [np.stack([x[:, 0], np.zeros(len(tl)), x[:, 1]], axis=-1) for x in (sp, sv, sa)]
        if roll is None:
            q[k, :3], v[k, :3], a[k, :3] = b
        else:
            th, dth, ddth = (r[k] for r in roll)
            K = [np.stack([side * Sh + tree.roll * x[:, f], np.full(len(tl), y_feet[side] if j == 0 else 0.0),
                           np.zeros(len(tl))], axis=-1) for j, x in enumerate((st.phi, st.w, st.al))]
            u, ud, udd = (bj - Kj for bj, Kj in zip(b, K))
            Om, dOm = dth[:, None] * EX, ddth[:, None] * EX
            c, s = np.cos(th), np.sin(th)

            def rot(x, sg=1.0):        # R_x(theta) x (sg = -1: the transpose)
                return np.stack([x[:, 0], c * x[:, 1] - sg * s * x[:, 2], sg * s * x[:, 1] + c * x[:, 2]], axis=-1)

            pos = K[0] + rot(u)
            vel = K[1] + rot(ud + np.cross(Om, u))
            ac = K[2] + rot(udd + 2 * np.cross(Om, ud) + np.cross(dOm, u) + np.cross(Om, np.cross(Om, u)))
            vb = rot(vel, -1.0)                       # free flyer: velocities in the base frame
            q[k, :3], v[k, :3], a[k, :3] = pos, vb, rot(ac, -1.0) - np.cross(Om, vb)
            q[k, 3], q[k, 6] = np.sin(th / 2), np.cos(th / 2)
            v[k, 3], a[k, 3] = dth, ddth
        for i in range(1, len(m.segments)):
            if tree.sign[i] != 0:
                q[k, tree.iq[i]], v[k, tree.iv[i]], a[k, tree.iv[i]] = jq[:, i], jd[:, i], jdd[:, i]
    zx, zy = law_path(tree, laws, P, t, ankle_x)
    jump = 0.0
    if roll is not None:       # the same roll about the other foot's pivot: the pelvis moves by (I - R) dK
        th = roll[0][np.flatnonzero(stance == 1)[0]]
        dy = y_feet[0] - y_feet[1]
        jump = float(np.hypot(dy * (1 - math.cos(th)), dy * math.sin(th)))
    return q, v, a, ankle_x, stance, zx, zy, jump


def law_path(tree: PlanarTree, laws, P: float, t: np.ndarray, ankle_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The law's ZMP point (x, y) (M,) m in the lab at times t (M,) s of the stride (left stance on
    [0, P), right on [P, T)): x the stance ankle's x `ankle_x` (M,) m plus the law's offset (j.5), y the
    stance foot's line plus the lateral law's share of the way to the other foot's (`lateral_law`)."""
    _, yo, _ = _lateral(tree)
    y_feet = [yo[_stance_ankle(tree, s)] for s in (0, 1)]
    stance = (t >= P).astype(int)
    zx, zy = np.empty(len(t)), np.empty(len(t))
    for side in (0, 1):
        k = stance == side
        tl, law = t[k] - side * P, laws[side]
        zx[k] = ankle_x[k] + zmp_law(tl, P, law.single, law.double, law.step, law.share, law.foot)
        zy[k] = y_feet[side] + lateral_law(tl, P, law) * (y_feet[1 - side] - y_feet[side])
    return zx, zy


# ------------------------------------------------------------------------------ figures by dynamics


@dataclass(frozen=True)
class NominalFigures:
    """What `dynamics` computes from a nominal's own motion: zmp (M, 2) m (lab x, y), the deviation
    |zmp_x - law| (M,) m, sagittal margin (M,) m (distance of zmp_x inside the feet's x extent: the stance
    foot, in double support from the trailing heel to the leading toe), foot normal forces (M, 2) N
    (left, right), joint torques tau (M, nv) N m (rnea, base rows ~ 0), lateral ZMP offset from the
    stance ankle (M,) m; with the frontal compensation the deviation is the distance from the law
    point (x and y), and lateral_deviation (M,) m = |zmp_y - law y| (None without: not compensated)."""

    zmp: np.ndarray
    deviation: np.ndarray
    margin: np.ndarray
    foot_force: np.ndarray
    tau: np.ndarray
    lateral: np.ndarray
    base_residual: float
    lateral_deviation: np.ndarray | None = None


def figures(nom: BipedNominal) -> NominalFigures:
    """ZMP, margins, contact forces and torques of a nominal by `dynamics` (module doc)."""
    tree, m = nom.tree, nom.tree.model
    z = zmp_model(m, nom.q, nom.v, nom.a)
    p = np.asarray(z.point)
    _, dh = centroidal_momentum(m, nom.q, nom.v, nom.a)
    c = com_of_state(m, tree_state(m, nom.q))
    f, nO = ground_wrench(m.total_mass, c, dh[:, :3], dh[:, 3:])
    pl = forward_kinematics(m, nom.q)
    fi = [m.index[s] for s in tree.joints.feet]
    ank = pl.translation[:, fi, :]                                # (M, 2, 3) ankle (foot frame origin)
    st = nom.stance
    other = 1 - st
    ax_st = ank[np.arange(len(st)), st, 0]
    ax_ot = ank[np.arange(len(st)), other, 0]
    # share of the load on the stance foot: 1 in single support; in double support (the other foot
    # behind at the start of the half-step, ahead at its end) linear in the ZMP between the ankles
    P = nom.T / 2
    tl = nom.t - st * P
    tau_ds = P * nom.laws[0].share / 200.0
    ds = (tl < tau_ds) | (tl >= P - tau_ds)
    span = ax_st - ax_ot
    frac = np.where(ds & (np.abs(span) > 1e-9), np.clip((p[:, 0] - ax_ot) / np.where(span == 0, 1, span), 0, 1), 1.0)
    mom = nO - np.cross(p, f)
    wrenches = []
    feet = tree.joints.feet
    for side in (0, 1):
        share = np.where(st == side, frac, 1 - frac)[:, None]
        wrenches.append(Wrench(feet[side], force=share * f, point=p, moment=share * mom))
    tau = rnea(m, nom.q, nom.v, nom.a, wrenches)
    forces = np.column_stack([np.where(st == s, frac, 1 - frac) * f[:, 2] for s in (0, 1)])
    lo_st, hi_st = ax_st + tree.heel, ax_st + tree.toe
    lo = np.where(ds, np.minimum(lo_st, ax_ot + tree.heel), lo_st)
    hi = np.where(ds, np.maximum(hi_st, ax_ot + tree.toe), hi_st)
    margin = np.minimum(p[:, 0] - lo, hi - p[:, 0])
    lateral = p[:, 1] - ank[np.arange(len(st)), st, 1]
    dev = np.abs(p[:, 0] - nom.zmp_law_x)
    dy = None if nom.zmp_law_y is None else np.abs(p[:, 1] - nom.zmp_law_y)
    return NominalFigures(p[:, :2], dev if dy is None else np.hypot(dev, dy), margin, forces, tau, lateral,
                          float(np.abs(tau[:, :6]).max()), dy)


def energy(nom: BipedNominal, tau: np.ndarray, v_index) -> tuple[float, float, float]:
    """(net, positive, absolute) J per stride of the actuators at v indices `v_index` (methods.md l),
    the power summed over actuators, the periodic record closed by its first sample."""
    P = (tau[:, v_index] * nom.v[:, v_index]).sum(1)
    t = np.append(nom.t, nom.T)
    e = work(t, np.append(P, P[0]))
    return float(e.net[0]), float(e.positive[0]), float(e.absolute[0])


# ------------------------------------------------------------------------------ transitions


@dataclass(frozen=True, eq=False)
class BlendedLeg:
    """The prescribed legs during a transition from nominal a's to b's over one stride (T s): the
    controller's setpoint blend (`transition.blend`, quintic weight, C2 at both ends) of the two leg
    synergies; t0 (s) the half-step's start within the stride."""

    a: LegSynergy
    b: LegSynergy
    t0: float
    T: float

    def at(self, t, offset: float = 0.0):
        ga, gb = self.a.at(t, offset), self.b.at(t, offset)
        tt = (np.asarray(t, dtype=float) + self.t0)[:, None]
        return blend(tt, self.T, ga, gb)


@dataclass(frozen=True)
class Transition:
    """A stride from nominal a to nominal b (same T and double support) at times t (M,) s in [0, T):
    q, v, a (M, nq / nv) of the 3-D model, the nominal ZMP path x (M,) m and, for frontal nominals, y
    (M,) m (None without a lateral law) — the stance ankle's x in the transition plus the blend of the
    two nominals' law offsets from it, and the blend of their lateral laws — and the ZMP by
    `dynamics.zmp.zmp_model`: deviation (M,) m from the law point (|ZMP_x − law_x|, or the 2-D distance
    with a lateral law, as the nominals themselves are judged), its maximum d_max (methods.md d.4, j.6)
    and accepted (d_max < eps)."""

    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    zmp_law_x: np.ndarray
    deviation: np.ndarray
    d_max: float
    accepted: bool
    zmp_law_y: np.ndarray | None = None
    t: np.ndarray | None = None
    zmp: np.ndarray | None = None


def nominal_trunk(nom: BipedNominal, t: np.ndarray):
    """A nominal's compensating coordinates at times t (M,) s in [0, T) (`stride_trunk`'s form): its
    stored samples when t is its own grid, else integrated again from its periodic start (with the
    default `SETTINGS`, as the library builds it)."""
    t = np.asarray(t, dtype=float)
    if t.shape == nom.t.shape and np.array_equal(t, nom.t):
        roll = None if nom.theta is None else (nom.theta, nom.dtheta, nom.ddtheta)
        return (nom.psi, nom.dpsi, nom.ddpsi), roll
    return stride_trunk(nom.halves, nom.laws, nom.trunk.y0, t)


def blended_trunk(a: BipedNominal, b: BipedNominal, t: np.ndarray):
    """The quintic setpoint blend (`transition.blend`, over one stride T) of the two nominals'
    compensating coordinates at times t: (psi, psi', psi''), and (theta, theta', theta'') or None."""
    (pa, ra), (pb, rb) = nominal_trunk(a, t), nominal_trunk(b, t)
    return blend(t, a.T, pa, pb), None if ra is None else blend(t, a.T, ra, rb)


def transition(a: BipedNominal, b: BipedNominal, eps: float = 0.01, t: np.ndarray | None = None,
               trunk=None) -> Transition:
    """The transition stride from a to b (module doc; methods.md j.6) at times t (M,) s in [0, T)
    (default a's samples): legs blended over one stride with the quintic weight (C2 joins at both
    ends, so no setpoint step), the compensating coordinates `trunk` ((psi, psi', psi''), (theta,
    theta', theta'') or None; default `blended_trunk`), the feet placed by the blended motion (the right
    foot's flat place the blend of the two step lengths at mid-stride), the ZMP recomputed by dynamics
    from the motion and compared with the law path: the stance ankle's x plus the blend of the two
    nominals' law offsets from their stance ankles (the law is a place on the stance foot, j.5: in the
    second half-step the two nominals' lab paths are a.step and b.step from the start, the transition's
    foot is at their mean), y the blend of their lateral laws. Accepted when d_max < eps (m). A
    rejected blend is repaired by moving the compensating coordinates (`transition_repair`, Surla's
    iterations of j.6)."""
    if not (a.T == b.T and len(a.t) == len(b.t) and a.laws[0].share == b.laws[0].share and a.tree.model is b.tree.model):
        raise BipedError("transition: the two nominals need the same model, period T, samples and double support")
    if (a.theta is None) != (b.theta is None):
        raise BipedError("transition: both nominals need the frontal compensation, or neither")
    T, P = a.T, a.T / 2
    t = a.t if t is None else np.asarray(t, dtype=float)
    legs = tuple(BlendedLeg(a.halves[0].leg, b.halves[0].leg, side * P, T) for side in (0, 1))
    (psi, dpsi, ddpsi), roll = blended_trunk(a, b, t) if trunk is None else trunk
    Sh = 0.5 * (a.step + b.step)
    q, v, acc, ankle_x, _, _, _, _ = _full_state(a.tree, legs, a.laws, P, t, psi, dpsi, ddpsi, Sh, roll)
    w = blend_weight(t / T)[0]
    (xa, ya), (xb, yb) = (law_path(a.tree, n.laws, P, t, ankle_x) for n in (a, b))
    law_x = (1 - w) * xa + w * xb
    p = zmp_model(a.tree.model, q, v, acc).point
    dev = np.abs(p[:, 0] - law_x)
    law_y = None
    if a.zmp_law_y is not None:
        law_y = (1 - w) * ya + w * yb
        dev = np.hypot(dev, p[:, 1] - law_y)
    d = float(dev.max())
    return Transition(q, v, acc, law_x, dev, d, d < eps, law_y, t, p[:, :2])
