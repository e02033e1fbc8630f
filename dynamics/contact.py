"""Viscoelastic foot–ground contact: normal laws, friction, episodes, wrenches, parameter fitting.

Mathematics: ``methods.md`` (e). Conventions:

- Penetration δ = (ground point − P)·n̂ > 0 in contact (overlap positive), rate δ̇ = −ṙ_P·n̂ (> 0 while
  penetrating), tangential slip v_T = ṙ_P − (ṙ_P·n̂) n̂. Works in 3-D (lab frame, z up) and in planar
  models (x forward, y up: 2-vectors, moments are scalars about +z).
- A contact **episode** starts at the first sample with δ > 0 and ends at the first sample with δ ≤ 0.
  The approach velocity δ̇⁻ of the c_r-normalised laws is latched at the first sample of the episode
  with a floor v_min: δ̇⁻ = max(δ̇(t_first), v_min) (``methods.md`` e.3), so the damping term stays
  finite when a foot touches down tangentially.
- F_N ≥ 0 always (clamped), and F_N = 0 where δ ≤ 0.

Arrays are batched: time first, then contacts, then the space dimension: δ (N, C), v_T (N, C, d).
A live 1-sample step is the same call with N = 1; the contact episode state (latched velocity,
running dissipated energy) is a small dataclass passed in and returned.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from . import kernels
from .kernels import ground as G
from .spatial import cross

#: Normal-force laws (``methods.md`` e.2 table).
LAWS = (
    "hertz",
    "kelvin_voigt",
    "hunt_crossley",
    "hunt_crossley_constant",
    "lankarani_nikravesh",
    "flores",
    "hu_guo",
)
#: Laws of the form K δⁿ (1 + χ̂ δ̇/δ̇⁻) with χ̂ a function of the coefficient of restitution c_r.
RESTITUTION_LAWS = ("hunt_crossley", "lankarani_nikravesh", "flores", "hu_guo")


class ContactError(ValueError):
    """Bad contact-law parameters or contact input (names the argument and what was expected)."""


def damping_factor(kind: str, restitution: float) -> float:
    """Dimensionless hysteresis factor χ̂(c_r) of a c_r-normalised law (``methods.md`` e.2).

    hunt_crossley 3(1 − c_r)/2; lankarani_nikravesh 3(1 − c_r²)/4; flores 8(1 − c_r)/(5 c_r);
    hu_guo 3(1 − c_r)/(2 c_r); hertz 0.
    """
    c = float(restitution)
    if kind == "hertz":
        return 0.0
    if kind == "hunt_crossley":
        return 1.5 * (1.0 - c)
    if kind == "lankarani_nikravesh":
        return 0.75 * (1.0 - c * c)
    if kind == "flores":
        return 8.0 * (1.0 - c) / (5.0 * c)
    if kind == "hu_guo":
        return 1.5 * (1.0 - c) / c
    raise ContactError(f"damping_factor: kind {kind!r} has no c_r factor; expected one of {('hertz',) + RESTITUTION_LAWS}")


def restitution_from_factor(kind: str, chi: float) -> float:
    """Inverse of :func:`damping_factor`: the c_r that gives hysteresis factor χ̂ (dimensionless)."""
    chi = float(chi)
    if not np.isfinite(chi) or chi < 0:
        raise ContactError(f"restitution_from_factor: chi must be finite and >= 0, got {chi}")
    if kind == "hunt_crossley":
        c = 1.0 - chi / 1.5
    elif kind == "lankarani_nikravesh":
        c = float(np.sqrt(1.0 - chi / 0.75)) if chi <= 0.75 else -1.0
    elif kind == "flores":
        c = 8.0 / (5.0 * chi + 8.0)
    elif kind == "hu_guo":
        c = 1.5 / (chi + 1.5)
    else:
        raise ContactError(f"restitution_from_factor: kind {kind!r} is not one of {RESTITUTION_LAWS}")
    if not 0.0 <= c <= 1.0:
        raise ContactError(f"restitution_from_factor: chi = {chi:.4g} is beyond what the {kind} law reaches with c_r in [0, 1]")
    return c


def hertz_stiffness(radius: float, e1: float, nu1: float, e2: float, nu2: float) -> float:
    """Sphere–plane Hertz stiffness K = (4/3) E* √R in N/m^1.5, 1/E* = (1−ν₁²)/E₁ + (1−ν₂²)/E₂.

    radius in m, Young's moduli e1, e2 in Pa, Poisson ratios nu1, nu2 dimensionless.
    """
    for name, val in (("radius", radius), ("e1", e1), ("e2", e2)):
        if not (np.isfinite(val) and val > 0):
            raise ContactError(f"hertz_stiffness: {name} must be > 0, got {val}")
    for name, val in (("nu1", nu1), ("nu2", nu2)):
        if not -1.0 < val < 0.5 + 1e-12:
            raise ContactError(f"hertz_stiffness: {name} must be in (-1, 0.5], got {val}")
    e_star = 1.0 / ((1.0 - nu1**2) / e1 + (1.0 - nu2**2) / e2)
    return 4.0 / 3.0 * e_star * float(np.sqrt(radius))


@dataclass(frozen=True)
class NormalLaw:
    """A normal contact-force law (``methods.md`` e.2).

    kind: one of :data:`LAWS`.
    stiffness: K in N/m^n (Kelvin–Voigt: k in N/m).
    exponent: n (default 3/2; Kelvin–Voigt is linear and takes n = 1).
    restitution: c_r in [0, 1] for :data:`RESTITUTION_LAWS` (flores, hu_guo need c_r > 0).
    damping: Kelvin–Voigt c in N·s/m; hunt_crossley_constant α in s/m (λ = 1.5 α K). Unused otherwise.
    v_min: floor of the latched approach velocity δ̇⁻ in m/s (> 0), reported with every result.
    """

    kind: str
    stiffness: float
    exponent: float | None = None
    restitution: float = 1.0
    damping: float = 0.0
    v_min: float = 1e-3

    def __post_init__(self) -> None:
        if self.kind not in LAWS:
            raise ContactError(f"NormalLaw: kind {self.kind!r} is not one of {LAWS}")
        if not (np.isfinite(self.stiffness) and self.stiffness > 0):
            raise ContactError(f"NormalLaw({self.kind}): stiffness must be finite and > 0, got {self.stiffness}")
        n = self.exponent
        if n is None:
            object.__setattr__(self, "exponent", 1.0 if self.kind == "kelvin_voigt" else 1.5)
        elif not (np.isfinite(n) and n > 0):
            raise ContactError(f"NormalLaw({self.kind}): exponent must be finite and > 0, got {n}")
        if self.kind == "kelvin_voigt" and self.exponent != 1.0:
            raise ContactError(f"NormalLaw(kelvin_voigt): the law is linear, exponent must be 1, got {self.exponent}")
        if not 0.0 <= self.restitution <= 1.0:
            raise ContactError(f"NormalLaw({self.kind}): restitution must be in [0, 1], got {self.restitution}")
        if self.kind in ("flores", "hu_guo") and self.restitution <= 0.0:
            raise ContactError(f"NormalLaw({self.kind}): restitution must be > 0 for this law, got {self.restitution}")
        if not (np.isfinite(self.damping) and self.damping >= 0):
            raise ContactError(f"NormalLaw({self.kind}): damping must be finite and >= 0, got {self.damping}")
        if not (np.isfinite(self.v_min) and self.v_min > 0):
            raise ContactError(f"NormalLaw({self.kind}): v_min (latch floor, m/s) must be > 0, got {self.v_min}")

    @property
    def chi(self) -> float:
        """χ̂ of the c_r-normalised laws (0 for Hertz, NaN for the laws that do not use δ̇⁻)."""
        if self.kind in ("kelvin_voigt", "hunt_crossley_constant"):
            return float("nan")
        return damping_factor(self.kind, self.restitution)

    @property
    def uses_latch(self) -> bool:
        """True if the force depends on the latched approach velocity δ̇⁻."""
        return self.kind in RESTITUTION_LAWS


def normal_force(law: NormalLaw, delta: np.ndarray, delta_dot: np.ndarray, v_latched: np.ndarray | float | None = None) -> np.ndarray:
    """Normal force F_N ≥ 0 in N, any broadcastable shape.

    Hertz-type: F_N = K δⁿ (1 + χ̂ δ̇/max(δ̇⁻, v_min)); constant damping: F_N = K δⁿ (1 + 1.5 α δ̇);
    Kelvin–Voigt: F_N = k δ + c δ̇; all clamped to max(F_N, 0) and zero where δ ≤ 0.

    delta: penetration δ in m (> 0 in contact); delta_dot: δ̇ in m/s (> 0 penetrating);
    v_latched: latched approach velocity δ̇⁻ in m/s, required by :data:`RESTITUTION_LAWS` (ignored otherwise).
    """
    delta = np.asarray(delta, dtype=float)
    delta_dot = np.asarray(delta_dot, dtype=float)
    d = np.maximum(delta, 0.0)
    if law.kind == "kelvin_voigt":
        f = law.stiffness * d + law.damping * delta_dot
    else:
        elastic = law.stiffness * d**law.exponent
        if law.kind == "hertz":
            f = elastic
        elif law.kind == "hunt_crossley_constant":
            f = elastic * (1.0 + 1.5 * law.damping * delta_dot)
        else:
            if v_latched is None:
                raise ContactError(f"normal_force: the {law.kind} law needs v_latched (latched approach velocity, m/s)")
            v = np.maximum(np.asarray(v_latched, dtype=float), law.v_min)
            f = elastic * (1.0 + law.chi * delta_dot / v)
    return np.where(delta > 0.0, np.maximum(f, 0.0), 0.0)


# --------------------------------------------------------------------------------------------- friction

FRICTION_KINDS = ("ramp", "tanh", "stiction")


@dataclass(frozen=True)
class Friction:
    """Tangential friction law, F_T = −μ(|v_T|) F_N v_T/|v_T| (``methods.md`` e.4).

    kind "ramp" (Batbaatar Eqs. 3.10–3.11, sign corrected): μ(v) = mu · c_d(v), c_d = 0 below v0, linear
    from v0 to v1, 1 above v1 — a non-slipping foot gets no traction below v0.
    kind "tanh" (regularised Coulomb): μ(v) = mu · tanh(v / v_s).
    kind "stiction" (regularised stiction, Brown & McPhee 2016 as in OpenSim's smooth contact):
    μ(v) = mu · tanh(4 v/v_s) + (mu_static − mu) (v/v_s) / (¼ (v/v_s)² + ¾)² + mu_viscous · v,
    which peaks near mu_static at v = v_s and tends to mu + mu_viscous·v.

    mu, mu_static dimensionless; v0, v1, v_s in m/s; mu_viscous in s/m.
    """

    mu: float
    kind: str = "tanh"
    v0: float = 0.0
    v1: float = 1e-2
    v_s: float = 1e-2
    mu_static: float | None = None
    mu_viscous: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FRICTION_KINDS:
            raise ContactError(f"Friction: kind {self.kind!r} is not one of {FRICTION_KINDS}")
        if not (np.isfinite(self.mu) and self.mu >= 0):
            raise ContactError(f"Friction: mu must be finite and >= 0, got {self.mu}")
        if self.kind == "ramp" and not (0.0 <= self.v0 < self.v1 and np.isfinite(self.v1)):
            raise ContactError(f"Friction(ramp): need 0 <= v0 < v1 (m/s), got v0={self.v0}, v1={self.v1}")
        if self.kind != "ramp" and not (np.isfinite(self.v_s) and self.v_s > 0):
            raise ContactError(f"Friction({self.kind}): v_s (m/s) must be > 0, got {self.v_s}")
        if self.kind == "stiction":
            if self.mu_static is None:
                object.__setattr__(self, "mu_static", self.mu)
            if not (np.isfinite(self.mu_static) and self.mu_static >= self.mu):
                raise ContactError(f"Friction(stiction): mu_static must be >= mu = {self.mu}, got {self.mu_static}")
            if not (np.isfinite(self.mu_viscous) and self.mu_viscous >= 0):
                raise ContactError(f"Friction(stiction): mu_viscous (s/m) must be >= 0, got {self.mu_viscous}")

    def coefficient(self, speed: np.ndarray) -> np.ndarray:
        """μ(|v_T|) (dimensionless) for slip speeds |v_T| ≥ 0 in m/s, any shape."""
        v = np.abs(np.asarray(speed, dtype=float))
        if self.kind == "ramp":
            return self.mu * np.clip((v - self.v0) / (self.v1 - self.v0), 0.0, 1.0)
        if self.kind == "tanh":
            return self.mu * np.tanh(v / self.v_s)
        r = v / self.v_s
        return self.mu * np.tanh(4.0 * r) + (self.mu_static - self.mu) * r / (0.25 * r * r + 0.75) ** 2 + self.mu_viscous * v


def friction_force(friction: Friction, f_normal: np.ndarray, v_t: np.ndarray) -> np.ndarray:
    """Friction force F_T = −μ(|v_T|) F_N v_T/|v_T| in N, shape of v_t (…, d); zero where v_T = 0.

    f_normal: F_N ≥ 0 in N, shape (…); v_t: tangential slip velocity in m/s, shape (…, d), lab frame.
    """
    v_t = np.asarray(v_t, dtype=float)
    speed = np.sqrt((v_t * v_t).sum(axis=-1))
    scale = friction.coefficient(speed) * np.asarray(f_normal, dtype=float)
    # Where v_T = 0 the divisor is 1 and v_T itself makes F_T = 0 (μ(0) F_N is finite).
    return -(scale / np.where(speed > 0.0, speed, 1.0))[..., None] * v_t


# --------------------------------------------------------------------------------------------- ground


@dataclass(frozen=True)
class Plane:
    """Flat ground through ``point`` with unit upward ``normal`` (lab frame; 3-vectors, or 2-vectors in
    planar models with x forward, y up). Default: the 3-D floor z = 0."""

    point: np.ndarray = field(default_factory=lambda: np.zeros(3))
    normal: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))

    def __post_init__(self) -> None:
        p = np.asarray(self.point, dtype=float)
        n = np.asarray(self.normal, dtype=float)
        if p.shape not in ((2,), (3,)) or n.shape != p.shape:
            raise ContactError(f"Plane: point and normal must both be 2- or 3-vectors, got shapes {p.shape} and {n.shape}")
        norm = float(np.linalg.norm(n))
        if not norm > 0:
            raise ContactError("Plane: normal must be non-zero")
        object.__setattr__(self, "point", p)
        object.__setattr__(self, "normal", n / norm)


@dataclass(frozen=True)
class HeightMap:
    """Uneven 3-D ground z = h(x, y), bilinear between grid nodes (lab frame, m).

    x: (nx,) strictly increasing; y: (ny,) strictly increasing; z: (nx, ny) heights, z[i, j] at (x[i], y[j]).
    """

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray

    def __post_init__(self) -> None:
        x, y, z = (np.asarray(a, dtype=float) for a in (self.x, self.y, self.z))
        for name, a in (("x", x), ("y", y)):
            if a.ndim != 1 or a.size < 2 or not np.all(np.diff(a) > 0):
                raise ContactError(f"HeightMap: {name} must be a strictly increasing 1-D grid of >= 2 nodes")
        if z.shape != (x.size, y.size) or not np.all(np.isfinite(z)):
            raise ContactError(f"HeightMap: z must be finite with shape (len(x), len(y)) = {(x.size, y.size)}, got {z.shape}")
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "z", z)

    def height(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Height h (…,) in m and gradient ∇h (…, 2) at ground positions xy (…, 2) in m.

        Raises ContactError for a point outside the grid (no silent extrapolation).
        """
        xy = np.asarray(xy, dtype=float)
        px, py = xy[..., 0], xy[..., 1]
        for name, p, g in (("x", px, self.x), ("y", py, self.y)):
            if np.any(~((p >= g[0]) & (p <= g[-1]))):
                raise ContactError(f"HeightMap: contact point {name} outside the map [{g[0]}, {g[-1]}] m (or NaN)")
        i = np.clip(np.searchsorted(self.x, px, side="right") - 1, 0, self.x.size - 2)
        j = np.clip(np.searchsorted(self.y, py, side="right") - 1, 0, self.y.size - 2)
        hx = self.x[i + 1] - self.x[i]
        hy = self.y[j + 1] - self.y[j]
        u = (px - self.x[i]) / hx
        w = (py - self.y[j]) / hy
        z00, z10, z01, z11 = self.z[i, j], self.z[i + 1, j], self.z[i, j + 1], self.z[i + 1, j + 1]
        h = z00 * (1 - u) * (1 - w) + z10 * u * (1 - w) + z01 * (1 - u) * w + z11 * u * w
        dhdx = ((z10 - z00) * (1 - w) + (z11 - z01) * w) / hx
        dhdy = ((z01 - z00) * (1 - u) + (z11 - z10) * u) / hy
        return h, np.stack([dhdx, dhdy], axis=-1)


@dataclass(frozen=True)
class ContactKinematics:
    """Penetration and rates of contact points against the ground, batched (…, C).

    delta: δ (…, C) in m, > 0 = overlap; delta_dot: δ̇ (…, C) in m/s, > 0 while penetrating;
    v_t: tangential slip (…, C, d) in m/s; normal: ground unit normal n̂ (…, C, d) at the point, lab frame.
    """

    delta: np.ndarray
    delta_dot: np.ndarray
    v_t: np.ndarray
    normal: np.ndarray


def penetration(ground: Plane | HeightMap, points: np.ndarray, velocities: np.ndarray) -> ContactKinematics:
    """Contact kinematics δ = (ground point − P)·n̂, δ̇ = −ṙ_P·n̂, v_T = ṙ_P − (ṙ_P·n̂) n̂.

    points, velocities: (…, C, d) contact point positions (m) and velocities (m/s) in the lab frame,
    d = 3 (or 2 for a planar model against a 2-D Plane). For a HeightMap δ = (h(x, y) − z)/√(1 + |∇h|²)
    with n̂ = (−∇h, 1)/√(1 + |∇h|²) (exact on a locally planar patch; curvature neglected).
    """
    points = np.asarray(points, dtype=float)
    velocities = np.asarray(velocities, dtype=float)
    if points.shape != velocities.shape:
        raise ContactError(f"penetration: points {points.shape} and velocities {velocities.shape} must have the same shape")
    if isinstance(ground, Plane):
        d = ground.normal.size
        if points.ndim < 1 or points.shape[-1] != d:
            raise ContactError(f"penetration: points must end in the ground dimension {d}, got shape {points.shape}")
        normal = np.broadcast_to(ground.normal, points.shape)
        delta = (ground.point - points) @ ground.normal
    elif isinstance(ground, HeightMap):
        if points.ndim < 1 or points.shape[-1] != 3:
            raise ContactError(f"penetration: a HeightMap needs 3-D points (…, 3), got shape {points.shape}")
        h, grad = ground.height(points[..., :2])
        scale = 1.0 / np.sqrt(1.0 + np.sum(grad * grad, axis=-1))
        normal = np.concatenate([-grad, np.ones(grad.shape[:-1] + (1,))], axis=-1) * scale[..., None]
        delta = (h - points[..., 2]) * scale
    else:
        raise ContactError(f"penetration: ground must be a Plane or a HeightMap, got {type(ground).__name__}")
    vn = np.sum(velocities * normal, axis=-1)
    return ContactKinematics(delta=delta, delta_dot=-vn, v_t=velocities - vn[..., None] * normal, normal=normal)


# --------------------------------------------------------------------------------------------- episodes


@dataclass
class ContactState:
    """Per-contact episode state carried between calls (batched over C contacts).

    in_contact: (C,) bool, δ > 0 at the last sample; v_latched: (C,) latched δ̇⁻ in m/s (NaN out of contact);
    energy: (C,) J dissipated so far in the current (or just-closed) episode, ∮ F_N dδ;
    last_delta, last_force: (C,) clipped δ (m) and F_N (N) at the last sample, for the loop integral.
    """

    in_contact: np.ndarray
    v_latched: np.ndarray
    energy: np.ndarray
    last_delta: np.ndarray
    last_force: np.ndarray

    @classmethod
    def initial(cls, n_contacts: int) -> "ContactState":
        """All C contacts out of contact, no history."""
        z = np.zeros(int(n_contacts))
        return cls(np.zeros(int(n_contacts), bool), np.full(int(n_contacts), np.nan), z.copy(), z.copy(), z.copy())


@dataclass(frozen=True)
class ContactForces:
    """Result of :func:`contact_forces`, batched (N, C[, d]).

    f_normal: F_N (N, C) in N ≥ 0; f_tangent: F_T (N, C, d) in N; force: F = F_N n̂ + F_T (N, C, d), the force
    the ground applies to the body at the contact point (lab frame); v_latched: δ̇⁻ (N, C) in m/s (NaN out of
    contact); v_min: the latch floor used (m/s); energy: (N, C) J dissipated so far in the running episode;
    lift_off: (N, C) bool, True at the first sample after an episode (energy there = the episode's total);
    touch_down: (N, C) bool, True at the first sample of an episode; state: state after the last sample.
    """

    f_normal: np.ndarray
    f_tangent: np.ndarray
    force: np.ndarray
    v_latched: np.ndarray
    v_min: float
    energy: np.ndarray
    touch_down: np.ndarray
    lift_off: np.ndarray
    state: ContactState


def _shift(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """x delayed by one sample along axis 0, with `first` (the previous call's last sample) in front."""
    out = np.empty_like(x)
    out[0] = first
    out[1:] = x[:-1]
    return out


def _ffill_index(mask: np.ndarray) -> np.ndarray:
    """For each (t, c), the last t' ≤ t with mask[t', c] (−1 if none)."""
    idx = np.where(mask, np.arange(mask.shape[0])[:, None], -1)
    return np.maximum.accumulate(idx, axis=0)


def contact_forces(
    law: NormalLaw,
    kin: ContactKinematics,
    friction: Friction | None = None,
    state: ContactState | None = None,
) -> ContactForces:
    """Contact forces of C points over N samples (or one live step, N = 1), with per-episode latching.

    kin: :class:`ContactKinematics` with delta (N, C), delta_dot (N, C), v_t and normal (N, C, d).
    δ̇⁻ = max(δ̇ at the episode's first sample, v_min) (``methods.md`` e.3); F_N by :func:`normal_force`;
    F_T by :func:`friction_force` (none if friction is None); energy dissipated per episode
    E_d = ∮ F_N dδ (trapezoid on the (δ, F_N) loop, the elastic part integrates to zero).
    state: the :class:`ContactState` returned by the previous call (default: all out of contact).
    By default one compiled loop over the samples carries the episode state (kernels/ground.py); the
    numpy path (kernels.enabled() False) computes the same with array operations.
    """
    delta = np.asarray(kin.delta, dtype=float)
    ddot = np.asarray(kin.delta_dot, dtype=float)
    if delta.ndim != 2 or ddot.shape != delta.shape:
        raise ContactError(f"contact_forces: delta and delta_dot must both be (N, C), got {delta.shape} and {ddot.shape}")
    n, c = delta.shape
    v_t = np.asarray(kin.v_t, dtype=float)
    normal = np.asarray(kin.normal, dtype=float)
    if v_t.shape[:2] != (n, c) or v_t.ndim != 3 or normal.shape != v_t.shape:
        raise ContactError(f"contact_forces: v_t and normal must be (N, C, d) = ({n}, {c}, d), got {v_t.shape} and {normal.shape}")
    if state is None:
        state = ContactState.initial(c)
    if state.in_contact.shape != (c,):
        raise ContactError(f"contact_forces: state is for {state.in_contact.shape[0]} contacts, kinematics has {c}")
    if kernels.enabled():
        return _contact_forces_compiled(law, friction, delta, ddot, v_t, normal, state)

    in_c = delta > 0.0
    prev = _shift(in_c, state.in_contact)
    touch = in_c & ~prev
    lift = prev & ~in_c

    # Latch: the value at the last touch-down sample, else the carried-in value of an ongoing episode.
    if n == 1:  # a live step: an episode started at this sample or before the call
        has_start, at_start = touch, 0
    else:
        start = _ffill_index(touch)
        has_start = start >= 0
        at_start = (np.maximum(start, 0), np.arange(c))  # fancy index of each sample's episode start
    v_lat = np.where(has_start, np.maximum(ddot, law.v_min)[at_start], state.v_latched)
    v_lat[~in_c] = np.nan

    f_n = normal_force(law, delta, ddot, np.where(in_c, v_lat, np.inf) if law.uses_latch else None)
    f_t = friction_force(friction, f_n, v_t) if friction is not None else np.zeros_like(v_t)

    # Loop integral ∮ F_N dδ on clipped δ: outside episodes δ = F = 0, so dE vanishes there and the
    # first sample after lift-off closes the loop back to (0, 0).
    dc = np.where(in_c, delta, 0.0)  # a NaN δ (marker gap) counts as no contact, never poisons the sums
    d_e = 0.5 * (f_n + _shift(f_n, state.last_force)) * (dc - _shift(dc, state.last_delta))
    cum = d_e.cumsum(axis=0)
    energy = cum - np.where(has_start, (cum - d_e)[at_start], -state.energy)

    new_state = ContactState(
        in_contact=in_c[-1].copy(),
        v_latched=v_lat[-1].copy(),
        energy=energy[-1].copy(),
        last_delta=dc[-1].copy(),
        last_force=f_n[-1].copy(),
    )
    force = f_n[..., None] * normal + f_t
    return ContactForces(f_n, f_t, force, v_lat, law.v_min, energy, touch, lift, new_state)


@functools.lru_cache(maxsize=64)
def _law_codes(law: NormalLaw, friction: Friction | None) -> tuple[int, np.ndarray, int, np.ndarray]:
    """The compiled kernel's law and friction codes and parameters (kernels/ground.py), built once
    per (frozen) law pair: a live one-sample call must not rebuild them. Read-only arrays."""
    lcode = {"kelvin_voigt": G.KELVIN_VOIGT, "hertz": G.HERTZ, "hunt_crossley_constant": G.CONSTANT_DAMPING}.get(
        law.kind, G.RESTITUTION)
    lp = np.array([law.stiffness, law.exponent, law.damping, law.v_min, law.chi if law.uses_latch else 0.0])
    fcode, fp = G.NO_FRICTION, np.zeros(6)
    if friction is not None:
        fcode = {"ramp": G.RAMP, "tanh": G.TANH, "stiction": G.STICTION}[friction.kind]
        fp = np.array([friction.mu, friction.v0, friction.v1, friction.v_s,
                       friction.mu if friction.mu_static is None else friction.mu_static, friction.mu_viscous])
    lp.flags.writeable = fp.flags.writeable = False
    return lcode, lp, fcode, fp


def _contact_forces_compiled(law, friction, delta, ddot, v_t, normal, state) -> ContactForces:
    """contact_forces on the compiled kernel: one loop over samples carrying the episode state."""
    n, c, d = v_t.shape
    lcode, lp, fcode, fp = _law_codes(law, friction)
    new = ContactState(np.array(state.in_contact, dtype=bool), np.array(state.v_latched, dtype=float),
                       np.array(state.energy, dtype=float), np.array(state.last_delta, dtype=float),
                       np.array(state.last_force, dtype=float))
    f_n, v_lat, energy = np.empty((n, c)), np.empty((n, c)), np.empty((n, c))
    f_t, force = np.empty((n, c, d)), np.empty((n, c, d))
    touch, lift = np.empty((n, c), bool), np.empty((n, c), bool)
    kernels.kernel("ground.contact_forces")(
        lcode, lp, fcode, fp, np.ascontiguousarray(delta), np.ascontiguousarray(ddot), np.ascontiguousarray(v_t),
        np.ascontiguousarray(normal), new.in_contact, new.v_latched, new.energy, new.last_delta, new.last_force,
        f_n, f_t, force, v_lat, energy, touch, lift)
    return ContactForces(f_n, f_t, force, v_lat, law.v_min, energy, touch, lift, new)


# --------------------------------------------------------------------------------------------- wrenches


def contact_wrench(points: np.ndarray, forces: np.ndarray, refs: np.ndarray, foot: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sum contact forces per foot into a force and its moment about each foot's reference point.

    F_f = Σ_{c∈f} F_c,   M_f = Σ_{c∈f} (p_c − r_f) × F_c   (``methods.md`` e.5: the force acts at the
    contact point, never at the body reference without its moment).

    points, forces: (N, C, d) contact positions (m) and ground-on-body forces (N), lab frame, d = 3 or 2
    (planar: x forward, y up). refs: (N, F, d) reference points r_f (m), e.g. the foot segment origin.
    foot: (C,) int foot index in [0, F) of each contact (default: contact c belongs to foot c).
    Returns force (N, F, d) in N and moment (N, F, 3) in N·m ((N, F) scalar about +z when d = 2).
    """
    points = np.asarray(points, dtype=float)
    forces = np.asarray(forces, dtype=float)
    refs = np.asarray(refs, dtype=float)
    if points.ndim != 3 or forces.shape != points.shape or points.shape[-1] not in (2, 3):
        raise ContactError(f"contact_wrench: points and forces must be (N, C, 2|3) of equal shape, got {points.shape}, {forces.shape}")
    n, c, d = points.shape
    if refs.ndim != 3 or refs.shape[0] != n or refs.shape[2] != d:
        raise ContactError(f"contact_wrench: refs must be (N, F, {d}) with N = {n}, got {refs.shape}")
    n_feet = refs.shape[1]
    foot = np.arange(c) if foot is None else np.asarray(foot)
    if (foot.shape != (c,) or not np.issubdtype(foot.dtype, np.integer)
            or (c and (foot.min() < 0 or foot.max() >= n_feet))):
        raise ContactError(f"contact_wrench: foot must be ({c},) integers in [0, {n_feet}), got {foot!r}")
    if kernels.enabled():       # one compiled loop (kernels/ground.py)
        f_out, m_out = np.empty((n, n_feet, d)), np.empty((n, n_feet, 3))
        kernels.kernel("ground.contact_wrench")(np.ascontiguousarray(points), np.ascontiguousarray(forces),
                                                np.ascontiguousarray(refs), np.ascontiguousarray(foot, dtype=np.int64),
                                                f_out, m_out)
        return f_out, (m_out if d == 3 else m_out[..., 0])
    # Σ over the contacts of each foot as one (F, C) @ (N, C, ·) product: cheaper than einsum on the
    # few contacts of a live step.
    to_feet = np.zeros((n_feet, c))
    to_feet[foot, np.arange(c)] = 1.0
    arm = points - refs[:, foot, :]
    if d == 3:
        m_c = cross(arm, forces)
        return to_feet @ forces, to_feet @ m_c
    m_c = arm[..., 0] * forces[..., 1] - arm[..., 1] * forces[..., 0]
    return to_feet @ forces, m_c @ to_feet.T


# --------------------------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class LawFit:
    """Result of :func:`fit_normal_law`: the fitted law, the RMS force residual (N) and the sample count."""

    law: NormalLaw
    rms: float
    n_samples: int


def fit_normal_law(
    kind: str,
    delta: np.ndarray,
    delta_dot: np.ndarray,
    force: np.ndarray,
    v_latched: np.ndarray | None = None,
    exponent: float | None = None,
    v_min: float = 1e-3,
) -> LawFit:
    """Fit stiffness, exponent and damping of a normal law to measured force and penetration.

    delta (N,) m, delta_dot (N,) m/s (penetration e.g. from markers or encoders), force (N,) measured
    normal force in N (e.g. plate F_z); only samples with δ > 0 are used. v_latched (N,) m/s is required
    for the c_r-normalised laws (e.g. ``contact_forces(...).v_latched``). exponent: fix n instead of
    fitting it. Kelvin–Voigt is linear least squares in (k, c); the others are
    ``scipy.optimize.least_squares`` on F_model − F in (log K, n, damping), the damping being χ̂
    (converted to c_r), or α for hunt_crossley_constant.
    """
    if kind not in LAWS:
        raise ContactError(f"fit_normal_law: kind {kind!r} is not one of {LAWS}")
    delta, delta_dot, force = (np.asarray(a, dtype=float).ravel() for a in (delta, delta_dot, force))
    if not (delta.shape == delta_dot.shape == force.shape):
        raise ContactError(f"fit_normal_law: delta, delta_dot, force must have equal length, got {delta.size}, {delta_dot.size}, {force.size}")
    use = (delta > 0) & np.isfinite(force) & np.isfinite(delta_dot)
    if kind in RESTITUTION_LAWS:
        if v_latched is None:
            raise ContactError(f"fit_normal_law: the {kind} law needs v_latched (N,) m/s")
        v_latched = np.asarray(v_latched, dtype=float).ravel()
        if v_latched.shape != delta.shape:
            raise ContactError(f"fit_normal_law: v_latched must have length {delta.size}, got {v_latched.size}")
        use &= np.isfinite(v_latched)
    n_use = int(np.count_nonzero(use))
    if n_use < 4:
        raise ContactError(f"fit_normal_law: need at least 4 samples with delta > 0, got {n_use}")
    d, dd, f = delta[use], delta_dot[use], force[use]
    vl = np.maximum(v_latched[use], v_min) if kind in RESTITUTION_LAWS else None

    if kind == "kelvin_voigt":
        (k, c), *_ = np.linalg.lstsq(np.column_stack([d, dd]), f, rcond=None)
        law = NormalLaw("kelvin_voigt", stiffness=float(k), damping=max(float(c), 0.0), v_min=v_min)
    else:
        damped = kind != "hertz"

        fit_n = exponent is None
        # Parameters: log K, then n unless fixed, then the damping (χ̂ or α) unless Hertz.
        def model(x: np.ndarray) -> np.ndarray:
            nexp = x[1] if fit_n else float(exponent)
            el = np.exp(x[0]) * d**nexp
            if not damped:
                return el
            rate = dd / vl if kind in RESTITUTION_LAWS else 1.5 * dd
            return el * (1.0 + x[-1] * rate)

        # Start: K from the elastic law through the median sample, n = 3/2 (or the fixed one).
        n0 = 1.5 if fit_n else float(exponent)
        mid = np.argsort(d)[d.size // 2]
        x0 = [np.log(max(f[mid], 1e-9) / d[mid] ** n0)] + ([n0] if fit_n else []) + ([0.1] if damped else [])
        lo = [-np.inf] + ([0.5] if fit_n else []) + ([0.0] if damped else [])
        hi = [np.inf] + ([4.0] if fit_n else []) + ([np.inf] if damped else [])
        sol = least_squares(lambda x: model(x) - f, x0, bounds=(lo, hi), x_scale="jac", method="trf")
        k, nexp = float(np.exp(sol.x[0])), float(sol.x[1] if fit_n else exponent)
        if kind == "hertz":
            law = NormalLaw("hertz", stiffness=k, exponent=nexp, v_min=v_min)
        elif kind == "hunt_crossley_constant":
            law = NormalLaw(kind, stiffness=k, exponent=nexp, damping=float(sol.x[-1]), v_min=v_min)
        else:
            law = NormalLaw(kind, stiffness=k, exponent=nexp, restitution=restitution_from_factor(kind, sol.x[-1]), v_min=v_min)
    resid = normal_force(law, d, dd, vl if law.uses_latch else None) - f
    return LawFit(law=law, rms=float(np.sqrt(np.mean(resid**2))), n_samples=n_use)
