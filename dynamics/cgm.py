"""Conventional Gait Model 1.0 / Plug-in Gait lower body: joint centres, segment frames, joint
angles, moments and powers, equation by equation from ../shared/design/cgm.md.

Conventions (cgm.md §1): lab frame z up, positions in **m** (cgm.md writes mm; the regression
constants are converted here), angles in rad inside and degrees in the outputs. A segment frame
is R (N, 3, 3) whose columns are the segment's unit axes in lab coordinates; every segment has
X anterior, Y to the subject's left, Z proximal, except the foot (Z from TOE back to the ankle,
X up). s = +1 left, −1 right. Arrays are (N, 3) per marker, time first; NaN propagates.

Outputs use the Plug-in Gait names and component order (cgm.md §10, §11): ``LHipAngles`` ...
in degrees; ``LHipMoment`` ... in N·m/kg (internal moment of the proximal segment on the distal
one, expressed in the distal frame); ``LHipPower`` ... in W/kg in the Z component.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .model import GRAVITY

MARKER_RADIUS = 0.007  # m, 14 mm markers (pyCGM2 default)
SIDES = ("L", "R")
SIGN = {"L": 1.0, "R": -1.0}
# Davis/PiG regression constants (cgm.md §5): C = 0.115 L̄ − 15.3 mm; θ, β in rad.
DAVIS_THETA = 0.5
DAVIS_BETA = 0.314
# Segment parameters (cgm.md §11, Vicon's table): mass fraction, CoM fraction from distal to
# proximal joint centre, radius of gyration / length.
BSP = {"femur": (0.100, 0.567, 0.540), "tibia": (0.0465, 0.567, 0.528), "foot": (0.0145, 0.5, 0.690)}
PELVIS_MARKERS = ("LASI", "RASI")  # and SACR, or LPSI + RPSI
LEG_MARKERS = ("THI", "KNE", "TIB", "ANK", "TOE")  # with the side prefix
REQUIRED_MARKERS = PELVIS_MARKERS + tuple(s + k for s in SIDES for k in LEG_MARKERS)
G = np.array(GRAVITY)


class CGMError(ValueError):
    """Missing markers or subject parameters for the CGM (names what is missing)."""


@dataclass(frozen=True)
class CGMSubject:
    """Subject measurements, SI. Per-side values are dicts {"L": ..., "R": ...}.

    mass kg; leg_length m (ASIS to medial malleolus); knee_width, ankle_width m;
    asis_trochanter m (None: 0.1288·LegLength − 0.04856 m); inter_asis m (None: mean LASI–RASI
    distance of the trial); angles rad: thigh_rotation, shank_rotation, tibial_torsion,
    ankle_abadd, static_plantflex, static_rotoff (default 0); marker_radius m; height m (None:
    mean leg length / 0.52, used only for the pelvis residual).
    """

    mass: float
    leg_length: Mapping[str, float]
    knee_width: Mapping[str, float]
    ankle_width: Mapping[str, float]
    asis_trochanter: Mapping[str, float] | None = None
    inter_asis: float | None = None
    thigh_rotation: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    shank_rotation: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    tibial_torsion: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    ankle_abadd: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    static_plantflex: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    static_rotoff: Mapping[str, float] = field(default_factory=lambda: {"L": 0.0, "R": 0.0})
    marker_radius: float = MARKER_RADIUS
    height: float | None = None


# PROCESSING parameter → (field, unit factor to SI). Angles are already rad in C3D (cgm.md §2).
_PROCESSING = {"LegLength": ("leg_length", 1e-3), "KneeWidth": ("knee_width", 1e-3),
               "AnkleWidth": ("ankle_width", 1e-3), "AsisTrocanterDistance": ("asis_trochanter", 1e-3),
               "ThighRotation": ("thigh_rotation", 1.0), "ShankRotation": ("shank_rotation", 1.0),
               "TibialTorsion": ("tibial_torsion", 1.0), "AnkleAbAdd": ("ankle_abadd", 1.0),
               "StaticPlantFlex": ("static_plantflex", 1.0), "StaticRotOff": ("static_rotoff", 1.0)}


def subject_from_processing(params: Mapping[str, float], mass: float | None = None) -> CGMSubject:
    """A CGMSubject from Vicon PROCESSING parameters as the C3D holds them (lengths mm, angles rad;
    e.g. ``LLegLength``, ``RKneeWidth``, ``InterAsisDistance``, ``Bodymass``). mass overrides
    Bodymass. Raises CGMError naming the first missing required parameter."""
    kw: dict = {}
    for name, (fld, k) in _PROCESSING.items():
        vals = {s: params.get(s + name) for s in SIDES}
        if all(v is not None for v in vals.values()):
            kw[fld] = {s: float(v) * k for s, v in vals.items()}
        elif fld in ("leg_length", "knee_width", "ankle_width"):
            missing = [s + name for s, v in vals.items() if v is None]
            raise CGMError(f"CGM needs subject parameter {missing[0]} (mm)")
    if kw.get("asis_trochanter") and any(v <= 0 for v in kw["asis_trochanter"].values()):
        kw.pop("asis_trochanter")
    ia = params.get("InterAsisDistance")
    kw["inter_asis"] = float(ia) * 1e-3 if ia else None
    m = mass if mass is not None else params.get("Bodymass")
    if m is None or not m > 0:
        raise CGMError("CGM kinetics need the body mass: PROCESSING:Bodymass or --mass KG")
    h = params.get("Height")
    return CGMSubject(mass=float(m), height=float(h) * 1e-3 if h else None, **kw)


# --- small vector helpers (N, 3) -------------------------------------------------------------

def _unit(v: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _frame(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.stack([x, y, z], axis=-1)


def _rot(axis: str, ang) -> np.ndarray:
    """Elementary right-handed rotation(s) (…, 3, 3) about x, y or z by ang rad."""
    a = np.asarray(ang, float)
    c, s = np.cos(a), np.sin(a)
    o, z = np.ones_like(a), np.zeros_like(a)
    rows = {"x": [[o, z, z], [z, c, -s], [z, s, c]],
            "y": [[c, z, s], [z, o, z], [-s, z, c]],
            "z": [[c, -s, z], [s, c, z], [z, z, o]]}[axis]
    return np.moveaxis(np.array(rows), (0, 1), (-2, -1))


def _rotate_about(v: np.ndarray, axis: np.ndarray, ang: float) -> np.ndarray:
    """Rodrigues: v (N, 3) rotated about unit axis (N, 3) by ang rad."""
    c, s = np.cos(ang), np.sin(ang)
    return v * c + np.cross(axis, v) * s + axis * np.sum(axis * v, axis=-1, keepdims=True) * (1 - c)


# --- §4 pelvis, §5 hip joint centre ----------------------------------------------------------

def pelvis_frame(lasi, rasi, sacr) -> tuple[np.ndarray, np.ndarray]:
    """Origin midASIS (N, 3) m and frame R (N, 3, 3): Y = unit(LASI − RASI),
    Z = unit(Y × (SACR − RASI)), X = Y × Z (cgm.md §4)."""
    y = _unit(lasi - rasi)
    z = _unit(np.cross(y, sacr - rasi))
    return (lasi + rasi) / 2, _frame(np.cross(y, z), y, z)


def hip_joint_centre_local(subject: CGMSubject, side: str, inter_asis: float) -> np.ndarray:
    """Davis/PiG HJC in the pelvis frame, m (cgm.md §5), with C = 0.115 L̄ − 0.0153 m,
    θ = 0.5 rad, β = 0.314 rad, x_d the side's ASIS–trochanter distance, a = InterAsis/2."""
    s = SIGN[side]
    mean_leg = (subject.leg_length["L"] + subject.leg_length["R"]) / 2
    c = 0.115 * mean_leg - 0.0153
    xd = (subject.asis_trochanter[side] if subject.asis_trochanter
          else 0.1288 * subject.leg_length[side] - 0.04856)
    r = subject.marker_radius
    th, be = DAVIS_THETA, DAVIS_BETA
    return np.array([c * np.cos(th) * np.sin(be) - (xd + r) * np.cos(be),
                     s * (inter_asis / 2 - c * np.sin(th)),
                     -c * np.cos(th) * np.cos(be) - (xd + r) * np.sin(be)])


# --- §6 chord function -----------------------------------------------------------------------

def _chord_angle(c, j, p, w) -> np.ndarray:
    """Signed angle (rad) from (J − C) to (W − C), both projected ⟂ n̂ = unit(P − C), about n̂."""
    n = _unit(p - c)
    a = j - c
    b = w - c
    a = a - n * np.sum(a * n, axis=-1, keepdims=True)
    b = b - n * np.sum(b * n, axis=-1, keepdims=True)
    return np.arctan2(np.sum(np.cross(a, b) * n, axis=-1), np.sum(a * b, axis=-1))


def chord(joint, proximal, wand, radius: float, offset: float = 0.0, iterations: int = 8) -> np.ndarray:
    """PiG chord function (cgm.md §6): the point C (N, 3) m with |C − J| = radius,
    (P − C)·(J − C) = 0 and the signed angle from J to W seen along unit(P − C) equal to
    ``offset`` rad (ψ* = 0: C in the plane (P, J, W) on the side away from the wand).

    Solved on the circle C(φ) = O + ρ(−cos φ ê₁ + sin φ ê₂), O = J + (r²/d) x̂, ρ = r√(1 − r²/d²),
    by Newton's method on φ (numerical derivative) from φ = 0."""
    j, p, w = (np.asarray(a, float) for a in (joint, proximal, wand))
    d = np.linalg.norm(p - j, axis=-1, keepdims=True)
    x = (p - j) / d
    e1 = _unit((w - j) - x * np.sum((w - j) * x, axis=-1, keepdims=True))
    e2 = np.cross(x, e1)
    o = j + (radius ** 2 / d) * x
    rho = radius * np.sqrt(1 - radius ** 2 / d ** 2)

    def point(phi):
        return o + rho * (-np.cos(phi)[..., None] * e1 + np.sin(phi)[..., None] * e2)

    phi = np.zeros(d.shape[:-1])
    if offset == 0.0:
        return point(phi)
    h = 1e-6
    for _ in range(iterations):
        f = _chord_angle(point(phi), j, p, w) - offset
        if not np.nanmax(np.abs(f), initial=0.0) > 1e-12:  # converged (usually 3-4 steps)
            break
        df = (_chord_angle(point(phi + h), j, p, w) - offset - f) / h
        with np.errstate(invalid="ignore", divide="ignore"):
            phi = phi - np.where(np.abs(df) > 1e-12, f / df, 0.0)
    return point(phi)


# --- §7–9 thigh, shank, foot -----------------------------------------------------------------

def _long_axis_frame(prox, dist, lateral_marker, s: float) -> np.ndarray:
    """Z = unit(prox − dist), X = unit(s·(marker − dist) × Z), Y = Z × X (thigh and tibia)."""
    z = _unit(prox - dist)
    x = _unit(np.cross(s * (lateral_marker - dist), z))
    return _frame(x, np.cross(z, x), z)


def euler_yxz(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R = Ry(a)·Rx(b)·Rz(c) → (a, b, c) rad: b = asin(−R₂₃), a = atan2(R₁₃, R₃₃),
    c = atan2(R₂₁, R₂₂) (1-based; cgm.md §10)."""
    b = np.arcsin(np.clip(-r[..., 1, 2], -1.0, 1.0))
    return np.arctan2(r[..., 0, 2], r[..., 2, 2]), b, np.arctan2(r[..., 1, 0], r[..., 1, 1])


def _wrap_deg(a: np.ndarray) -> np.ndarray:
    return -((-np.degrees(a) + 180.0) % 360.0 - 180.0)  # (−180, 180]


def progression_frame(lasi: np.ndarray, pelvis_r: np.ndarray) -> np.ndarray:
    """PiG progression frame (3, 3) (cgm.md §3): the lab axis (±X or ±Y) of the LASI displacement
    if the first and last valid LASI are > 0.8 m apart, else the nearest lab axis to the mean
    pelvis X over the middle 10 % of frames. Z = lab z, Y = Z × X."""
    ok = np.flatnonzero(np.all(np.isfinite(lasi), axis=1))
    if ok.size == 0:
        raise CGMError("LASI is never visible: no progression frame")
    disp = lasi[ok[-1]] - lasi[ok[0]]
    if np.linalg.norm(disp) > 0.8:
        v = disp
    else:
        n = len(lasi)
        mid = slice(int(0.45 * n), max(int(0.55 * n), int(0.45 * n) + 1))
        v = np.nanmean(pelvis_r[mid, :, 0], axis=0)
    k = int(np.argmax(np.abs(v[:2])))
    x = np.zeros(3)
    x[k] = np.sign(v[k]) or 1.0
    z = np.array([0.0, 0.0, 1.0])
    return _frame(x, np.cross(z, x), z)


@dataclass(frozen=True)
class CGMKinematics:
    """Per frame (N): joint centres (N, 3) m keyed HJC/KJC/AJC/TOE with side prefix (``LHJC``);
    frames (N, 3, 3) keyed ``Pelvis``, ``LFemur``, ``LTibia`` (untorsioned), ``LTibiaTorsioned``,
    ``LFoot`` (corrected), ``LFootUncorrected`` ...; angles: PiG names → (N, 3) degrees."""

    centres: dict[str, np.ndarray]
    frames: dict[str, np.ndarray]
    angles: dict[str, np.ndarray]


def missing_markers(labels, sides: tuple[str, ...] = SIDES) -> list[str]:
    """The CGM lower-body markers absent from labels for the pelvis and the given sides (SACR may be
    replaced by LPSI + RPSI)."""
    have = set(labels)
    missing = [k for k in PELVIS_MARKERS if k not in have]
    if "SACR" not in have and not ("LPSI" in have and "RPSI" in have):
        missing.append("SACR or LPSI+RPSI")
    return missing + [s + k for s in sides for k in LEG_MARKERS if s + k not in have]


def _markers(markers: Mapping[str, np.ndarray], sides: tuple[str, ...]) -> dict[str, np.ndarray]:
    m = {k: np.asarray(v, float) for k, v in markers.items()}
    missing = missing_markers(m, sides)
    if missing:
        raise CGMError(f"CGM lower body needs markers {', '.join(missing)}")
    if "SACR" not in m:
        m["SACR"] = (m["LPSI"] + m["RPSI"]) / 2
    return m


def kinematics(markers: Mapping[str, np.ndarray], subject: CGMSubject,
               sides: tuple[str, ...] = SIDES) -> CGMKinematics:
    """CGM 1.0 joint centres, frames and angles from marker trajectories (N, 3) m keyed by PiG
    label (LASI RASI LPSI RPSI|SACR LTHI LKNE LTIB LANK LTOE and the right side); sides: the legs
    to compute ("L", "R"; the pelvis is always computed).

    Angle outputs (degrees, cgm.md §10 table): LHipAngles, LKneeAngles, LAnkleAngles,
    LPelvisAngles, LFootProgressAngles and the right side."""
    m = _markers(markers, sides)
    origin, rp = pelvis_frame(m["LASI"], m["RASI"], m["SACR"])
    inter_asis = subject.inter_asis or float(np.nanmean(np.linalg.norm(m["LASI"] - m["RASI"], axis=1)))
    prog = progression_frame(m["LASI"], rp)
    centres: dict[str, np.ndarray] = {}
    frames: dict[str, np.ndarray] = {"Pelvis": rp}
    angles: dict[str, np.ndarray] = {}
    rm = subject.marker_radius
    for side in sides:
        s = SIGN[side]
        hjc = origin + np.einsum("nij,j->ni", rp, hip_joint_centre_local(subject, side, inter_asis))
        kne, ank = m[side + "KNE"], m[side + "ANK"]
        kjc = chord(kne, hjc, m[side + "THI"], subject.knee_width[side] / 2 + rm,
                    s * subject.thigh_rotation[side])
        ajc0 = chord(ank, kjc, m[side + "TIB"], subject.ankle_width[side] / 2 + rm,
                     s * subject.shank_rotation[side])
        axis = _unit(np.cross(kjc - ajc0, ank - ajc0))
        ajc = ank + _rotate_about(ajc0 - ank, axis, s * subject.ankle_abadd[side])
        r_fem = _long_axis_frame(hjc, kjc, kne, s)
        r_tor = _long_axis_frame(kjc, ajc, ank, s)
        r_tib = r_tor @ _rot("z", s * subject.tibial_torsion[side])
        toe = m[side + "TOE"]
        zf = _unit(ajc - toe)
        xf = _unit(np.cross(r_tib[..., 1], zf))
        r_fu = _frame(xf, np.cross(zf, xf), zf)
        r_foot = r_fu @ _rot("y", -subject.static_plantflex[side]) @ _rot("x", -s * subject.static_rotoff[side])
        centres.update({side + "HJC": hjc, side + "KJC": kjc, side + "AJC": ajc, side + "TOE": toe})
        frames.update({side + "Femur": r_fem, side + "Tibia": r_tib, side + "TibiaTorsioned": r_tor,
                       side + "Foot": r_foot, side + "FootUncorrected": r_fu})

        def rel(prox, dist):
            return euler_yxz(np.swapaxes(prox, -1, -2) @ dist)

        a, b, c = rel(rp, r_fem)
        angles[side + "HipAngles"] = np.stack([-a, -s * b, -s * c], axis=1)
        a, b, c = rel(r_fem, r_tib)
        angles[side + "KneeAngles"] = np.stack([a, -s * b, -s * c], axis=1)
        a, b, c = rel(r_tor, r_foot)
        angles[side + "AnkleAngles"] = np.stack([-(a + np.pi / 2), -s * c, -s * b], axis=1)
        a, b, c = rel(np.broadcast_to(prog, rp.shape), rp)
        angles[side + "PelvisAngles"] = np.stack([a, s * b, -s * c], axis=1)
        a, b, c = rel(np.broadcast_to(prog, rp.shape), r_foot)
        angles[side + "FootProgressAngles"] = np.stack([a, s * c, -s * b], axis=1)
    angles = {k: _wrap_deg(v) for k, v in angles.items()}
    return CGMKinematics(centres=centres, frames=frames, angles=angles)


def static_foot_offsets(markers: Mapping[str, np.ndarray], subject: CGMSubject, sides: tuple[str, ...] = SIDES,
                        sole_delta: Mapping[str, float] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """StaticPlantFlex and StaticRotOff (rad) per side from a static trial (cgm.md §9, "Static
    derivation"): the uncorrected foot of ``kinematics`` and the heel–toe foot Z_ht = unit(HEE −
    TOE), X_ht = unit(Y_ut × Z_ht), Y_ht = Z_ht × X_ht (Y_ut the untorsioned tibia's Y);
    R_uncorrᵀ R_ht = Ry(a) Rx(b) Rz(c) (YXZ), StaticPlantFlex = −a, StaticRotOff = −s·b (c
    discarded), as the mean over the static frames. The corrected foot R_uncorr Ry(−StaticPlantFlex)
    Rx(−s StaticRotOff) then has its Z along the heel–toe line. sole_delta (m, per side): the
    foot-flat option, HEE_z = TOE_z + SoleDelta first (the foot axis then is level but for it).
    markers (N, 3) m keyed by PiG label, with LHEE/RHEE; CGMError naming a missing marker."""
    kin = kinematics(markers, subject, sides)
    plantflex, rotoff = {}, {}
    for side in sides:
        if side + "HEE" not in markers or not np.isfinite(markers[side + "HEE"]).any():
            raise CGMError(f"static trial: no {side}HEE marker (the heel–toe foot needs it)")
        hee = np.array(markers[side + "HEE"], float)
        toe = kin.centres[side + "TOE"]
        if sole_delta is not None:
            hee[:, 2] = toe[:, 2] + sole_delta[side]
        z = _unit(hee - toe)
        x = _unit(np.cross(kin.frames[side + "Tibia"][..., 1], z))
        r_ht = _frame(x, np.cross(z, x), z)
        a, b, _ = euler_yxz(np.swapaxes(kin.frames[side + "FootUncorrected"], -1, -2) @ r_ht)
        ok = np.isfinite(a) & np.isfinite(b)
        if not ok.any():
            raise CGMError(f"static trial: the {side} foot is never computable (TOE, HEE, ANK, tibia markers)")
        plantflex[side] = float(-np.mean(a[ok]))
        rotoff[side] = float(-SIGN[side] * np.mean(b[ok]))
    return plantflex, rotoff


# --- §11 kinetics ------------------------------------------------------------------------------

def angular_velocity(r: np.ndarray, fs: float) -> np.ndarray:
    """ω (N, 3) rad/s in lab axes from frames R (N, 3, 3) at fs Hz: skew(ω) = Ṙ Rᵀ, Ṙ by central
    differences (the symmetric part, a differencing error, is dropped)."""
    rd = np.gradient(r, 1.0 / fs, axis=0)
    w = rd @ np.swapaxes(r, -1, -2)
    return 0.5 * np.stack([w[:, 2, 1] - w[:, 1, 2], w[:, 0, 2] - w[:, 2, 0], w[:, 1, 0] - w[:, 0, 1]], axis=1)


@dataclass(frozen=True)
class FootLoad:
    """External load on one foot at the marker rate, lab frame: force (N, 3) N on the foot,
    cop (N, 3) m, free_moment (N, 3) N·m (T_z ẑ); known (N,) bool: the load is known (on an
    assigned plate, or in swing with zero load); elsewhere kinetics are NaN."""

    force: np.ndarray
    cop: np.ndarray
    free_moment: np.ndarray
    known: np.ndarray


@dataclass(frozen=True)
class CGMKinetics:
    """PiG-named outputs (N, 3): ``LHipMoment`` ... N·m/kg, ``LHipForce`` ... N/kg,
    ``LHipPower`` ... W/kg (Z component; X, Y zero); also ``proximal`` raw joint loads
    {"LHip": (F (N,3) N, M (N,3) N·m)} in lab axes, for checks."""

    outputs: dict[str, np.ndarray]
    proximal: dict[str, tuple[np.ndarray, np.ndarray]]


def _segment_inertia(r: np.ndarray, m: float, k: float, length: np.ndarray) -> np.ndarray:
    """Lab inertia (N, 3, 3) about the CoM: R diag(I, I, 0) Rᵀ, I = m (k L)² (cgm.md §11)."""
    i = m * (k * length) ** 2
    d = np.zeros(r.shape)
    d[:, 0, 0] = i
    d[:, 1, 1] = i
    return r @ d @ np.swapaxes(r, -1, -2)


def kinetics(kin: CGMKinematics, loads: Mapping[str, FootLoad], subject: CGMSubject, fs: float,
             bsp: Mapping[str, tuple[float, float, float]] = BSP) -> CGMKinetics:
    """Bottom-up Newton–Euler foot → tibia → femur (cgm.md §11) with the PiG output mapping.

    loads: {"L": FootLoad, "R": FootLoad} at the marker rate fs Hz. Per segment with mass m, CoM c,
    distal load (F_d, M_d) at p_d: F_p = m (a_c − g) − F_d,
    M_p = I α + ω × I ω − M_d − (p_d − c) × F_d − (p_p − c) × F_p. Velocities and accelerations
    by central differences of the given (already smoothed) trajectories.
    Moments are expressed in the distal segment frame (hip: femur, knee: untorsioned tibia, ankle:
    corrected foot) and divided by the body mass; power P = M_p·(ω_distal − ω_proximal)/M.
    bsp: segment → (mass fraction, CoM fraction from distal, radius of gyration / length); default
    Vicon's table (``BSP``), identification varies the mass fractions.
    """
    mass = subject.mass
    out: dict[str, np.ndarray] = {}
    prox: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    c = kin.centres
    f = kin.frames
    for side in (sd for sd in SIDES if sd + "HJC" in kin.centres):
        s = SIGN[side]
        load = loads[side]
        hjc, kjc, ajc, toe = (c[side + k] for k in ("HJC", "KJC", "AJC", "TOE"))
        segs = [  # (name, frame for inertia, proximal point, distal point, bsp, joint, output frame)
            ("foot", f[side + "FootUncorrected"], ajc, toe, bsp["foot"], "Ankle", f[side + "Foot"]),
            ("tibia", f[side + "TibiaTorsioned"], kjc, ajc, bsp["tibia"], "Knee", f[side + "Tibia"]),
            ("femur", f[side + "Femur"], hjc, kjc, bsp["femur"], "Hip", f[side + "Femur"]),
        ]
        fd, md, pd = load.force, load.free_moment, load.cop
        pd = np.where(np.isfinite(pd), pd, ajc)  # zero load in swing: any point will do
        omegas = {"foot": angular_velocity(f[side + "FootUncorrected"], fs),
                  "tibia": angular_velocity(f[side + "TibiaTorsioned"], fs),
                  "femur": angular_velocity(f[side + "Femur"], fs),
                  "pelvis": angular_velocity(f["Pelvis"], fs)}
        parent = {"foot": "tibia", "tibia": "femur", "femur": "pelvis"}
        for name, r, pp, pdist, (mf, cf, kf), joint, r_out in segs:
            m = mf * mass
            com = pdist + cf * (pp - pdist)  # the foot's fraction is 0.5: the AJC–TOE midpoint
            length = np.linalg.norm(pp - pdist, axis=1)
            acc = np.gradient(np.gradient(com, 1.0 / fs, axis=0), 1.0 / fs, axis=0)
            w = omegas[name]
            alpha = np.gradient(w, 1.0 / fs, axis=0)
            inertia = _segment_inertia(r, m, kf, length)
            iw = np.einsum("nij,nj->ni", inertia, w)
            fp = m * (acc - G) - fd
            mp = (np.einsum("nij,nj->ni", inertia, alpha) + np.cross(w, iw) - md
                  - np.cross(pd - com, fd) - np.cross(pp - com, fp))
            ml = np.einsum("nji,nj->ni", r_out, mp) / mass  # components in the distal frame
            fl = np.einsum("nji,nj->ni", r_out, fp) / mass
            if joint == "Hip":
                mom = np.stack([ml[:, 1], s * ml[:, 0], s * ml[:, 2]], axis=1)
                frc = fl
            elif joint == "Knee":
                mom = np.stack([-ml[:, 1], s * ml[:, 0], s * ml[:, 2]], axis=1)
                frc = fl
            else:
                mom = np.stack([ml[:, 1], -s * ml[:, 2], s * ml[:, 0]], axis=1)
                frc = np.stack([-fl[:, 0], fl[:, 1], -fl[:, 2]], axis=1)
            pw = np.zeros_like(mom)
            pw[:, 2] = np.sum(mp * (w - omegas[parent[name]]), axis=1) / mass
            bad = ~load.known
            for arr in (mom, frc, pw):
                arr[bad] = np.nan
            prox[side + joint] = (np.where(bad[:, None], np.nan, fp), np.where(bad[:, None], np.nan, mp))
            out[side + joint + "Moment"] = mom
            out[side + joint + "Force"] = frc
            out[side + joint + "Power"] = pw
            # next segment up: the negated proximal load of this one, at the shared joint centre
            fd, md, pd = -fp, -mp, pp
    return CGMKinetics(outputs=out, proximal=prox)


# Head-arms-trunk (Dempster via Winter): mass = body − both legs; CoM 0.626 of the greater
# trochanter → glenohumeral length (0.288 × height) above the hips; radius of gyration about the
# CoM 0.496 of that length (transverse axes; the long axis taken as 0, as for the leg segments).
HAT_LENGTH = 0.288
HAT_COM_HEIGHT = 0.626 * HAT_LENGTH
HAT_GYRATION = 0.496


def _hat(kin: CGMKinematics, subject: CGMSubject, bsp) -> tuple[float, np.ndarray, float]:
    """HAT mass kg, CoM (N, 3) m and length m (rigid with the pelvis)."""
    m_hat = subject.mass * (1 - 2 * sum(bsp[k][0] for k in ("femur", "tibia", "foot")))
    height = subject.height or (subject.leg_length["L"] + subject.leg_length["R"]) / 2 / 0.52
    c = (kin.centres["LHJC"] + kin.centres["RHJC"]) / 2 + HAT_COM_HEIGHT * height * kin.frames["Pelvis"][:, :, 2]
    return m_hat, c, HAT_LENGTH * height


def pelvis_residual(kin: CGMKinematics, kt: CGMKinetics, subject: CGMSubject, fs: float,
                    bsp: Mapping[str, tuple[float, float, float]] = BSP) -> np.ndarray:
    """Residual force (N, 3) N on the pelvis + head-arms-trunk (HAT), lab axes: what the measured
    ground reactions, carried up both legs (``kinetics``), leave unexplained by the HAT's motion,
    R = m_HAT (a_HAT − g) + F_hip,L + F_hip,R (F_hip: force of the pelvis on the femur).

    The HAT is taken rigid with the pelvis: mass M (1 − 2 (0.100 + 0.0465 + 0.0145)), CoM
    0.18 × height above mid-HJC along the pelvis Z. Zero for consistent data; NaN where a side's
    load is unknown. A quality figure (divide by M g), not a correction: arm and trunk swing
    relative to the pelvis show in its horizontal components. bsp: as in ``kinetics`` (the same
    table must be used for both)."""
    m_hat, c, _ = _hat(kin, subject, bsp)
    acc = np.gradient(np.gradient(c, 1.0 / fs, axis=0), 1.0 / fs, axis=0)
    return m_hat * (acc - G) + kt.proximal["LHip"][0] + kt.proximal["RHip"][0]


def pelvis_residual_moment(kin: CGMKinematics, kt: CGMKinetics, subject: CGMSubject, fs: float,
                           bsp: Mapping[str, tuple[float, float, float]] = BSP) -> np.ndarray:
    """Residual moment (N, 3) N·m about the HAT CoM, lab axes, the companion of
    ``pelvis_residual``: R_M = I α + ω × I ω + Σ_sides [M_hip + (HJC − c) × F_hip], with (F_hip,
    M_hip) the load of the pelvis on each femur, ω, α the pelvis's, and I = R diag(I_t, I_t, 0) Rᵀ,
    I_t = m_HAT (0.496 L_HAT)² (Winter's HAT). NaN where a side's load is unknown. A quality figure:
    the trunk and arms turning relative to the pelvis show in it."""
    m_hat, c, length = _hat(kin, subject, bsp)
    r = kin.frames["Pelvis"]
    w = angular_velocity(r, fs)
    alpha = np.gradient(w, 1.0 / fs, axis=0)
    inertia = _segment_inertia(r, m_hat, HAT_GYRATION, np.full(len(r), length))
    out = np.einsum("nij,nj->ni", inertia, alpha) + np.cross(w, np.einsum("nij,nj->ni", inertia, w))
    for side in SIDES:
        f, m = kt.proximal[side + "Hip"]
        out = out + m + np.cross(kin.centres[side + "HJC"] - c, f)
    return out
