"""Crank-angle programmes of a Theo-Jansen walker (methods.md c.6, e, e.9, l; models.md 2).

A walker file (``configs/models/jansen_walker.toml``) puts copies of one leg on a left and a right
crank shaft; each copy ("slot") has a phase p and may be mirrored (x -> -x about the crank centre).
The crank of a plain slot is at leg angle th = s + p, the crank of a mirrored slot at th = pi - s - p
(its bodies' absolute angles are pi minus the plain leg's, docs/linkage.md), so with sigma = +1 / -1

    th = sigma s + c,   th' = sigma s',   th'' = sigma s'',   tau_shaft = sum_slots sigma tau_leg(th, th', th'', F)

with tau_leg = I th'' + 1/2 I' th'^2 + G - J_P^T F from the leg's reduced table (methods.md c.6) and F
the ground force on the foot. Chassis fixed (the nominal's own frame: the feet are driven
kinematically against a ground line at the lowest foot point + penetration, models.md 2.5), normal
force only (the traction depends on the chassis load, not modelled here): F = (0, F_N) with F_N
from `dynamics.contact` (penetration delta = y_G - y_F > 0, rate delta' = -y_F').

Speed profile (methods.md e.9): the shaft rate as a function of the shaft angle,

    s'(s) = c exp(g(s)),   g(s) = sum_k a_k cos(k n s) + b_k sin(k n s)   (n = throws per shaft)

positive by construction; c is fixed by the period: T = int_0^2pi ds / s'(s) = 2 pi / w_mean, so the
mean shaft speed (and the walking speed) equals the constant programme's; s'' = s' ds'/ds. In the
kinematic contact model the peak foot force is mostly elastic (K delta_max^n, set by the ground
level): a profile acts on the damping part, F_N = K delta^n (1 + 1.5 alpha J_y s') for the constant-
damping law, and on the inertial crank terms; the contact dissipation int F_N delta' dt =
int K delta^n 1.5 alpha J_y^2 s' ds falls with s' in stance. (A c_r-normalised law gives a
speed-independent force: methods.md e.9.) `optimise_profile` picks the coefficients that minimise
absolute energy / constant energy with a penalty unless the peak force is 1 % below the
constant programme's (Powell, derivative-free): the
optimum slows the shaft while feet are loaded and speeds it up between loadings.

Walking speed from the foot path at constant crank speed (Batbaatar 2021, Ch. 4): the stance foot
covers the step length L in the stance time D T (duty factor D), v = L w / (2 pi D). Turning: left and
right mean speeds v -/+ r b/2 for a turn rate r (rad/s, + to the left) and track width b (m).
Planar leg frame: x forward, y up, angles counter-clockwise; arrays are time (phase) first.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline

from .. import energetics
from ..contact import ContactError, NormalLaw, Plane, contact_forces, penetration
from ..linkage.gait import gait_metrics
from ..linkage.model import LinkageError, read_linkage
from ..linkage.reduced import ReducedTable, crank_torque, lookup, tabulate
from ..loader import read_toml, resolve
from ..support import support_margin

PROFILES = ("constant", "fourier")
FINE = 4096  # shaft-angle grid of the profile's time map (periodic trapezoid: spectral accuracy)


class ProgrammeError(ValueError):
    """Bad programme argument (speed, profile, law); the message names it."""


@dataclass(frozen=True)
class Slot:
    """One leg copy on a shaft: prefix (e.g. "L1m"), side ("left"/"right"), phase (rad), mirror."""

    prefix: str
    side: str
    phase: float
    mirror: bool

    @property
    def sigma(self) -> float:
        """d th / d s: +1 for a plain slot, -1 for a mirrored one."""
        return -1.0 if self.mirror else 1.0

    def leg_angle(self, s):
        """Leg crank angle th (rad) of this slot at shaft angle s (rad)."""
        return s + self.phase if not self.mirror else math.pi - s - self.phase


@dataclass(frozen=True)
class Walker:
    """A walker's arrangement and its one-leg reduced table.

    ground_level y_G (m, leg frame); track (m) between the left and right leg planes; step_length (m)
    and duty_factor of the leg at constant crank speed; model_hash: sha256 of the walker and leg files.
    """

    name: str
    leg: str
    table: ReducedTable
    slots: tuple[Slot, ...]
    ground_level: float
    track: float
    step_length: float
    duty_factor: float
    model_hash: str

    def side(self, side: str) -> tuple[Slot, ...]:
        """The slots of side "left" or "right", or every slot for "both" (one shaft drives all legs,
        as in the walker file: its input s turns every crank)."""
        out = tuple(sl for sl in self.slots if side in ("both", sl.side))
        if not out:
            raise ProgrammeError(f"{self.name}: no legs on side {side!r}")
        return out

    def speed_to_rate(self, speed: float) -> float:
        """Mean shaft speed w (rad/s) for walking speed v (m/s): w = 2 pi D v / L."""
        return 2.0 * math.pi * self.duty_factor * speed / self.step_length


def load_walker(name: str = "jansen_walker", size: int = 720) -> Walker:
    """The walker file's slots (all on one leg model) and that leg's reduced table on `size` angles."""
    path = resolve(name)
    data = read_toml(path)
    legs = data.get("legs")
    if not isinstance(legs, list) or not legs:
        raise LinkageError(f"{path}: a crank programme needs a walker file with [[legs]]")
    models = {leg.get("model") for leg in legs}
    if len(models) != 1:
        raise LinkageError(f"{path}: legs.model: crank programmes need one leg model on every slot, got {sorted(map(str, models))}")
    leg_name = models.pop()
    leg = read_linkage(leg_name)
    slots = tuple(Slot(str(lg["prefix"]), str(lg.get("side", "left")), math.radians(float(lg.get("phase_deg", 0.0))),
                       bool(lg.get("mirror", False))) for lg in legs)
    table = tabulate(leg, size)
    th = 2.0 * np.pi * np.arange(1440) / 1440
    v = lookup(table, th)
    pen = float(leg.metadata.get("ground_penetration", 0.008))
    gait = gait_metrics(v[:, 3:5], leg.pivot_position(), pen)
    h = hashlib.sha256(path.read_bytes() + resolve(leg_name).read_bytes()).hexdigest()
    track = float(data.get("chassis", {}).get("width", 0.4))
    return Walker(name=str(data.get("name", path.stem)), leg=leg.name, table=table, slots=slots,
                  ground_level=gait.ground_level, track=track, step_length=gait.step_length,
                  duty_factor=gait.duty_factor, model_hash=h)


@dataclass(frozen=True)
class SpeedProfile:
    """Shaft-rate profile (module doc): kind "constant", or "fourier" with log-rate coefficients
    coef = (a_1, b_1, a_2, b_2, ...) of the harmonics k n (k = 1, 2, ...; n = `symmetry`, the number
    of crank throws per shaft, so every throw sees the same profile). label names it in the library."""

    kind: str = "constant"
    coef: tuple[float, ...] = ()
    symmetry: int = 3
    label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in PROFILES:
            raise ProgrammeError(f"profile: kind {self.kind!r} is not one of {PROFILES}")
        if self.kind == "constant" and any(self.coef):
            raise ProgrammeError("profile: a constant profile has no coefficients")
        if len(self.coef) % 2 or not all(math.isfinite(c) for c in self.coef):
            raise ProgrammeError(f"profile: coef must be finite (cos, sin) pairs, got {self.coef!r}")
        if not (isinstance(self.symmetry, int) and self.symmetry >= 1):
            raise ProgrammeError(f"profile: symmetry must be an integer >= 1, got {self.symmetry!r}")

    @property
    def name(self) -> str:
        return "constant" if self.kind == "constant" else (self.label or "fourier")

    def log_rate(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g(s) = sum a_k cos(k n s) + b_k sin(k n s) and dg/ds at shaft angles s (rad)."""
        g, dg = np.zeros_like(s), np.zeros_like(s)
        for i in range(len(self.coef) // 2):
            h = (i + 1) * self.symmetry
            a, b = self.coef[2 * i], self.coef[2 * i + 1]
            c, sn = np.cos(h * s), np.sin(h * s)
            g += a * c + b * sn
            dg += h * (b * c - a * sn)
        return g, dg


def touchdown_angles(walker: Walker, slots: tuple[Slot, ...]) -> np.ndarray:
    """Shaft angles (rad, in [0, 2 pi)) where each slot's foot crosses the ground line going down
    while the shaft turns forward (s' > 0); interpolated on a 0.1 deg grid."""
    s = 2.0 * np.pi * np.arange(3600) / 3600
    out = []
    for sl in slots:
        y = lookup(walker.table, sl.leg_angle(s))[:, 4] - walker.ground_level
        k = np.flatnonzero((y > 0) & (np.roll(y, -1) <= 0))
        for i in k:
            j = (i + 1) % s.size
            out.append((s[i] + y[i] / (y[i] - y[j]) * (2.0 * np.pi / s.size)) % (2.0 * np.pi))
    return np.sort(np.array(out))


def shaft_rate(profile: SpeedProfile, mean_rate: float, s, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """s'(s) = c exp(g(s + shift)) (rad/s) and ds'/ds = s' g'(s + shift) (1/s) at shaft angles s (rad),
    with c such that a revolution takes 2 pi / mean_rate seconds: c = mean_rate mean(exp(-g)) over a
    periodic grid. shift (rad) is the phase of the shaft's first leg slot, so that every leg meets
    the same rate at the same crank angle of its own on either shaft."""
    s = np.asarray(s, dtype=float) + shift
    fine = 2.0 * np.pi * np.arange(FINE) / FINE
    c = mean_rate * float(np.mean(np.exp(-profile.log_rate(fine)[0])))
    g, dg = profile.log_rate(s)
    r = c * np.exp(g)
    return r, r * dg


@dataclass(frozen=True)
class ShaftProgramme:
    """One shaft's programme over one revolution, sampled at M uniform phases u = t/T in [0, 1).

    theta (M,) rad (unwrapped, theta(0) = 0, theta(T) = 2 pi); theta_d (M,) rad/s; theta_dd (M,) rad/s^2;
    torque (M,) N m feed-forward shaft torque (about +z of the leg frame); inertia (M,) kg m^2 the
    shaft's effective inertia sum_slots I_leg(th) (the coefficient of s'' in the torque); foot_force (M, L) N normal
    ground force on each slot's foot; foot_x (M, L) m foot x in the walker frame (mirror applied);
    delta (M, L) m penetration; dissipated (L,) J contact energy per revolution per foot (loop area);
    energy: work of tau s' over the revolution (J): net, positive, absolute.
    """

    side: str
    slots: tuple[Slot, ...]
    period: float
    mean_rate: float
    u: np.ndarray
    theta: np.ndarray
    theta_d: np.ndarray
    theta_dd: np.ndarray
    torque: np.ndarray
    inertia: np.ndarray
    foot_force: np.ndarray
    foot_x: np.ndarray
    delta: np.ndarray
    dissipated: np.ndarray
    energy_net: float
    energy_positive: float
    energy_absolute: float


def shaft_programme(walker: Walker, side: str, mean_rate: float, profile: SpeedProfile, law: NormalLaw,
                    samples: int = 1440) -> ShaftProgramme:
    """Programme of one shaft turning forward at mean speed mean_rate (rad/s, > 0) with `profile`,
    feed-forward torque and foot forces under `law` (module doc)."""
    if not (isinstance(mean_rate, (int, float)) and math.isfinite(mean_rate) and mean_rate > 0):
        raise ProgrammeError(f"mean_rate: expected a finite shaft speed > 0 rad/s, got {mean_rate!r}")
    if not isinstance(law, NormalLaw):
        raise ContactError(f"law: expected a dynamics.contact.NormalLaw, got {type(law).__name__}")
    slots = walker.side(side)
    T = 2.0 * np.pi / mean_rate
    # time map t(s) on the fine grid, inverted at uniform phases
    fine = 2.0 * np.pi * np.arange(FINE + 1) / FINE
    shift = slots[0].phase
    r_f, _ = shaft_rate(profile, mean_rate, fine, shift)
    inv = 1.0 / r_f
    t_f = np.concatenate([[0.0], np.cumsum(0.5 * (inv[1:] + inv[:-1]) * np.diff(fine))])
    t_f *= T / t_f[-1]  # removes the O(h^2) trapezoid error of the partial sums' end (c made it exact)
    u = np.arange(samples) / samples
    s = CubicSpline(t_f, fine)(u * T)
    sd, dsd = shaft_rate(profile, mean_rate, s, shift)
    sdd = sd * dsd
    # two revolutions so each contact episode starts from the air (latching, methods.md e.3)
    s2 = np.concatenate([s, s + 2.0 * np.pi])
    sd2, sdd2 = np.tile(sd, 2), np.tile(sdd, 2)
    L = len(slots)
    th = np.stack([np.asarray(sl.leg_angle(s2)) for sl in slots], axis=1)       # (2M, L)
    sig = np.array([sl.sigma for sl in slots])
    thd, thdd = sd2[:, None] * sig, sdd2[:, None] * sig
    ch = lookup(walker.table, th.ravel()).reshape(th.shape + (7,))
    pos = ch[..., 3:5]
    vel = ch[..., 5:7] * thd[..., None]
    kin = penetration(Plane(np.array([0.0, walker.ground_level]), np.array([0.0, 1.0])), pos, vel)
    res = contact_forces(law, kin)
    M = samples
    fn = res.f_normal[M:]
    tau_leg = crank_torque(walker.table, th[M:].ravel(), thd[M:].ravel(), thdd[M:].ravel(),
                           res.force[M:].reshape(-1, 2)).reshape(M, L)
    tau = tau_leg @ sig
    # dissipated loop area per foot over the second revolution: running energy at lift-off
    dis = np.where(res.lift_off[M:], res.energy[M:], 0.0).sum(axis=0)
    tt = np.append(u * T, T)
    e = energetics.work(tt, energetics.power(np.append(tau, tau[0]), np.append(sd, sd[0])))
    mx = np.where(sig > 0, 1.0, -1.0)
    return ShaftProgramme(side=side, slots=slots, period=T, mean_rate=float(mean_rate), u=u, theta=s, theta_d=sd,
                          theta_dd=sdd, torque=tau, inertia=ch[M:, :, 0].sum(axis=1), foot_force=fn, foot_x=pos[M:, :, 0] * mx, delta=kin.delta[M:],
                          dissipated=dis, energy_net=float(e.net[0]), energy_positive=float(e.positive[0]),
                          energy_absolute=float(e.absolute[0]))


@dataclass(frozen=True)
class CrankProgramme:
    """Both shafts of a walker for a walking speed (m/s) and turn rate (rad/s, + left), one profile.

    min_margin (m): smallest distance of the chassis centre's ground projection inside the support
    polygon of the feet in contact (x along the walk, lateral +-track/2), over four revolutions of the
    slower shaft; peak_torque (N m) and peak_contact_force (N) over both shafts; energy_* (J) the sum
    over both shafts of one revolution each (methods.md l: net, positive, absolute).
    """

    walker: Walker
    speed: float
    turn: float
    profile: SpeedProfile
    law: NormalLaw
    left: ShaftProgramme
    right: ShaftProgramme
    min_margin: float

    @property
    def shafts(self) -> tuple[ShaftProgramme, ShaftProgramme]:
        return (self.left, self.right)

    @property
    def peak_torque(self) -> float:
        return float(max(np.abs(p.torque).max() for p in self.shafts))

    @property
    def peak_contact_force(self) -> float:
        return float(max(p.foot_force.max() for p in self.shafts))

    @property
    def energy_net(self) -> float:
        return self.left.energy_net + self.right.energy_net

    @property
    def energy_positive(self) -> float:
        return self.left.energy_positive + self.right.energy_positive

    @property
    def energy_absolute(self) -> float:
        return self.left.energy_absolute + self.right.energy_absolute


def _phase_values(p: ShaftProgramme, t: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Samples of a phase-indexed (M, ...) array at times t (s), nearest phase sample (for margins)."""
    k = np.rint((t / p.period % 1.0) * p.u.size).astype(int) % p.u.size
    return values[k]


def support_min_margin(shafts: list[ShaftProgramme], track: float, n: int = 720) -> float:
    """Minimum margin of the chassis centre (0, 0) in the support polygon of the feet in contact over
    4 revolutions of the slowest shaft (left feet at lateral +track/2, right feet at -track/2)."""
    T = 4.0 * max(p.period for p in shafts)
    t = T * np.arange(4 * n) / (4 * n)
    pts, on = [], []
    for p in shafts:
        x = _phase_values(p, t, p.foot_x)
        y = np.array([0.5 * track if sl.side == "left" else -0.5 * track for sl in p.slots])
        pts.append(np.stack([x, np.broadcast_to(y, x.shape)], axis=-1))
        on.append(_phase_values(p, t, p.delta) > 0)
    margin, _ = support_margin(np.concatenate(pts, axis=1), np.concatenate(on, axis=1), np.zeros((t.size, 2)))
    return float(np.nanmin(margin)) if np.any(np.isfinite(margin)) else float("-inf")


def optimise_profile(walker: Walker, speed: float, law: NormalLaw, harmonics: int = 4,
                     samples: int = 720, peak_cut: float = 0.01, max_evaluations: int = 600) -> SpeedProfile:
    """The "fourier" profile (module doc) with `harmonics` harmonics of the throw count that
    minimises E/E_0 + 20 max(0, P/P_0 - 1 + peak_cut) for one shaft at walking speed `speed` (m/s) under `law`: P peak foot
    force (N), E absolute work per revolution (J), subscript 0 the constant programme. Powell's
    method from the constant profile (g = 0); a score below 1 cuts both (the energy, and the peak by at least peak_cut)."""
    from scipy.optimize import minimize

    rate = walker.speed_to_rate(speed)
    throws = len({sl.phase for sl in walker.side("left")})

    def run(x) -> ShaftProgramme:
        return shaft_programme(walker, "left", rate, SpeedProfile("fourier", tuple(map(float, x)), throws), law, samples)

    base = run(np.zeros(2 * harmonics))
    p0, e0 = float(base.foot_force.max()), base.energy_absolute

    def score(x) -> float:
        p = run(x)
        return p.energy_absolute / e0 + 20.0 * max(0.0, float(p.foot_force.max()) / p0 - 1.0 + peak_cut)

    res = minimize(score, np.zeros(2 * harmonics), method="Powell",
                   options=dict(maxfev=max_evaluations, xtol=1e-3, ftol=1e-5))
    return SpeedProfile("fourier", tuple(float(c) for c in res.x), throws, label="contact_optimised")


def crank_programme(walker: Walker, speed: float, turn: float = 0.0, profile: SpeedProfile = SpeedProfile(),
                    law: NormalLaw | None = None, samples: int = 1440) -> CrankProgramme:
    """Programme for walking speed (m/s, > 0) and turn rate (rad/s): left/right shaft speeds from
    v -/+ turn track/2 (module doc). Default law: Hunt-Crossley with constant damping, K = 2e4
    N/m^1.5 (Batbaatar 2021), alpha = 2 s/m (OpenSim's dissipation; methods.md e.8)."""
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
        raise ProgrammeError(f"speed: expected a finite walking speed > 0 m/s, got {speed!r}")
    if not (isinstance(turn, (int, float)) and math.isfinite(turn)):
        raise ProgrammeError(f"turn: expected a finite turn rate in rad/s, got {turn!r}")
    vl, vr = speed - 0.5 * turn * walker.track, speed + 0.5 * turn * walker.track
    if vl <= 0 or vr <= 0:
        raise ProgrammeError(f"turn: {turn} rad/s at {speed} m/s needs a shaft turning backward "
                             f"(side speeds {vl:.3g}, {vr:.3g} m/s); at most |turn| < {2 * speed / walker.track:.3g} rad/s")
    law = law or NormalLaw("hunt_crossley_constant", 2e4, damping=2.0)
    left = shaft_programme(walker, "left", walker.speed_to_rate(vl), profile, law, samples)
    right = shaft_programme(walker, "right", walker.speed_to_rate(vr), profile, law, samples)
    return CrankProgramme(walker=walker, speed=float(speed), turn=float(turn), profile=profile, law=law,
                          left=left, right=right, min_margin=support_min_margin([left, right], walker.track))
