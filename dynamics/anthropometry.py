"""Segment inertia parameters of a human scaled from body mass and stature (de Leva 1996).

Source: de Leva P. (1996) Adjustments to Zatsiorsky-Seluyanov's segment inertia parameters.
Journal of Biomechanics 29(9):1223-1230, Table 4 (values as matched across public transcriptions,
models.md section 8). Scaling recipe (models.md 8.4), for body mass M (kg) and stature H (m)::

    m_i = (m%_i / sum_j m%_j) M          (the female table sums to 99.99 %: renormalised to M)
    L_i = L_ref,i H / H_ref               (geometric similarity)
    p_cm = p_origin + CoM%_i (p_end - p_origin)
    I_i = m_i (r_i L_i)^2                 for r_sag, r_trans, r_long (central principal moments)

Frames: lab frame z up, x forward, y to the left; the body stands in the anatomical posture with
every segment frame parallel to the lab frame. Long-axis-vertical segments take I_xx from r_sag,
I_yy from r_trans, I_zz from r_long; the foot (long axis along x) takes I_xx from r_long, I_yy
from r_trans, I_zz from r_sag.

Pure computation: numbers in, numbers out (no I/O).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DeLevaRow:
    """One row of de Leva's Table 4: a segment between two landmarks.

    length: reference length L_ref (m); mass: fraction of body mass; com: CoM distance from the
    origin landmark as a fraction of L; r_sag, r_trans, r_long: radii of gyration about the
    sagittal (antero-posterior), transverse (medio-lateral) and longitudinal axes through the
    CoM, fractions of L.
    """

    origin: str
    end: str
    length: float
    mass: float
    com: float
    r_sag: float
    r_trans: float
    r_long: float


def _rows(table: dict[str, tuple]) -> dict[str, DeLevaRow]:
    # Percentages and millimetres as printed (models.md 8.2, 8.3) -> fractions and metres.
    return {name: DeLevaRow(o, e, L / 1000, m / 100, c / 100, rs / 100, rt / 100, rl / 100)
            for name, (o, e, L, m, c, rs, rt, rl) in table.items()}


# name: (origin, end, L_ref mm, m %, CoM %, r_sag %, r_trans %, r_long %)
DE_LEVA: dict[str, dict[str, DeLevaRow]] = {
    "male": _rows({
        "head": ("VERT", "CERV", 242.9, 6.94, 50.02, 30.3, 31.5, 26.1),
        "trunk": ("CERV", "MIDH", 603.3, 43.46, 51.38, 32.8, 30.6, 16.9),
        "upper_trunk": ("SUPR", "XYPH", 170.7, 15.96, 29.99, 71.6, 45.4, 65.9),
        "upper_trunk_c7": ("CERV", "XYPH", 242.1, 15.96, 50.66, 50.5, 32.0, 46.5),
        "middle_trunk": ("XYPH", "OMPH", 215.5, 16.33, 45.02, 48.2, 38.3, 46.8),
        "lower_trunk": ("OMPH", "MIDH", 145.7, 11.17, 61.15, 61.5, 55.1, 58.7),
        "upper_arm": ("SJC", "EJC", 281.7, 2.71, 57.72, 28.5, 26.9, 15.8),
        "forearm": ("EJC", "WJC", 268.9, 1.62, 45.74, 27.6, 26.5, 12.1),
        "hand": ("WJC", "MET3", 86.2, 0.61, 79.00, 62.8, 51.3, 40.1),
        "thigh": ("HJC", "KJC", 422.2, 14.16, 40.95, 32.9, 32.9, 14.9),
        "shank": ("KJC", "LMAL", 434.0, 4.33, 44.59, 25.5, 24.9, 10.3),
        "shank_ajc": ("KJC", "AJC", 440.3, 4.33, 43.95, 25.1, 24.6, 10.2),
        "foot": ("HEEL", "TTIP", 258.1, 1.37, 44.15, 25.7, 24.5, 12.4),
    }),
    "female": _rows({
        "head": ("VERT", "CERV", 243.7, 6.68, 48.41, 27.1, 29.5, 26.1),
        "trunk": ("CERV", "MIDH", 614.8, 42.57, 49.64, 30.7, 29.2, 14.7),
        "upper_trunk": ("SUPR", "XYPH", 142.5, 15.45, 20.77, 74.6, 50.2, 71.8),
        "upper_trunk_c7": ("CERV", "XYPH", 228.0, 15.45, 50.50, 46.6, 31.4, 44.9),
        "middle_trunk": ("XYPH", "OMPH", 205.3, 14.65, 45.12, 43.3, 35.4, 41.5),
        "lower_trunk": ("OMPH", "MIDH", 181.5, 12.47, 49.20, 43.3, 40.2, 44.4),
        "upper_arm": ("SJC", "EJC", 275.1, 2.55, 57.54, 27.8, 26.0, 14.8),
        "forearm": ("EJC", "WJC", 264.3, 1.38, 45.59, 26.1, 25.7, 9.4),
        "hand": ("WJC", "MET3", 78.0, 0.56, 74.74, 53.1, 45.4, 33.5),
        "thigh": ("HJC", "KJC", 368.5, 14.78, 36.12, 36.9, 36.4, 16.2),
        "shank": ("KJC", "LMAL", 432.3, 4.81, 44.16, 27.1, 26.7, 9.3),
        "shank_ajc": ("KJC", "AJC", 438.6, 4.81, 43.52, 26.7, 26.3, 9.2),
        "foot": ("HEEL", "TTIP", 228.3, 1.29, 40.14, 29.9, 27.9, 13.9),
    }),
}

# Reference subjects of Table 4: (stature m, body mass kg).
REFERENCE = {"male": (1.741, 73.0), "female": (1.735, 61.9)}

# The 14 pieces that make up the whole body (head, one-piece trunk, both sides of six limb segments).
WHOLE_BODY = ("head", "trunk") + 2 * ("upper_arm", "forearm", "hand", "thigh", "shank_ajc", "foot")

# Geometry that de Leva does not give, as fractions of stature H or of foot length (assumptions,
# written into every generated model file): lateral joint-centre spacing and the ankle's position
# along the foot.
HIP_WIDTH = 0.10       # distance between the hip joint centres / H
SHOULDER_WIDTH = 0.20  # distance between the shoulder joint centres / H
ANKLE_FROM_HEEL = 0.25  # horizontal heel -> ankle-centre distance / foot length


@dataclass(frozen=True)
class ScaledSegment:
    """One de Leva segment scaled to a subject.

    mass (kg), length (m), com: CoM distance from the origin landmark (m), inertia: central
    principal moments (I_sag, I_trans, I_long) in kg*m^2.
    """

    mass: float
    length: float
    com: float
    inertia: tuple[float, float, float]


def _check_subject(mass: float, height: float, sex: str) -> None:
    if sex not in DE_LEVA:
        raise ValueError(f"sex must be one of {sorted(DE_LEVA)}, got {sex!r}")
    if not (np.isfinite(mass) and 20.0 <= mass <= 250.0):
        raise ValueError(f"body mass must be 20..250 kg (an adult), got {mass!r}")
    if not (np.isfinite(height) and 1.2 <= height <= 2.3):
        raise ValueError(f"stature must be 1.2..2.3 m (an adult), got {height!r}")


def scale_segment(name: str, mass: float, height: float, sex: str = "male") -> ScaledSegment:
    """Scale de Leva row `name` to body mass `mass` (kg) and stature `height` (m) (models.md 8.4)."""
    _check_subject(mass, height, sex)
    table = DE_LEVA[sex]
    if name not in table:
        raise ValueError(f"no de Leva segment {name!r}; known: {', '.join(table)}")
    row = table[name]
    total = sum(table[s].mass for s in WHOLE_BODY)
    m = row.mass / total * mass
    L = row.length * height / REFERENCE[sex][0]
    inertia = tuple(m * (r * L) ** 2 for r in (row.r_sag, row.r_trans, row.r_long))
    return ScaledSegment(mass=m, length=L, com=row.com * L, inertia=inertia)


@dataclass(frozen=True)
class HumanSegment:
    """One body of the generated human, in the standing posture (lab frame, z up, x forward, y left).

    joint: "free" (the floating base), "spherical" or "revolute" (a flexion axis, medio-lateral);
    joint_pos: joint centre (m); com: CoM (m); inertia: (3, 3) central inertia tensor in kg*m^2,
    axes of the segment frame = lab axes in this posture; points: named points on the segment
    (m, lab frame) such as landmarks and foot contact points.
    """

    name: str
    parent: str | None
    joint: str
    joint_pos: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray
    points: dict[str, np.ndarray]


def _vertical(s: ScaledSegment) -> np.ndarray:
    return np.diag(s.inertia)  # x: sagittal axis (a-p), y: transverse (m-l), z: longitudinal


def human15(mass: float, height: float, sex: str = "male") -> list[HumanSegment]:
    """The 15-segment human, scaled from body mass (kg) and stature (m), standing, sole at z = 0.

    Segments (parents before children): pelvis (de Leva lower trunk OMPH -> MIDH, floating base,
    frame origin at MIDH); thorax (upper trunk CERV -> XYPH merged with middle trunk XYPH -> OMPH,
    spherical lumbar joint at OMPH); head (VERT -> CERV, spherical neck at CERV); per side
    (suffix _r, _l): upper_arm (spherical shoulder at SJC), forearm (elbow, revolute y), hand (wrist,
    revolute y), thigh (spherical hip at HJC), shank (knee, revolute y; KJC -> AJC row), foot (ankle,
    revolute y; HEEL -> TTIP). Vertical stack: VERT at H, then the head, trunk, thigh and shank
    lengths downwards; the ankle centre sits above the sole by what is left of H. The shoulder
    joint centres are at SUPR height (CERV minus the difference of the two upper-trunk variants'
    lengths). Masses sum to `mass` exactly.
    """
    _check_subject(mass, height, sex)

    def seg(name: str) -> ScaledSegment:
        return scale_segment(name, mass, height, sex)

    head, upper, middle, lower = seg("head"), seg("upper_trunk_c7"), seg("middle_trunk"), seg("lower_trunk")
    arm, fore, hand, thigh, shank, foot = (seg(s) for s in ("upper_arm", "forearm", "hand", "thigh", "shank_ajc", "foot"))
    z_vert = height
    z_cerv = z_vert - head.length
    z_xyph = z_cerv - upper.length
    z_omph = z_xyph - middle.length
    z_midh = z_omph - lower.length
    z_knee = z_midh - thigh.length
    z_ankle = z_knee - shank.length
    if z_ankle <= 0:
        raise ValueError(f"stacked segment lengths exceed the stature {height} m (ankle at {z_ankle:.4f} m)")
    z_supr = z_cerv - (upper.length - seg("upper_trunk").length)

    # Thorax = upper + middle trunk pieces on one vertical axis: parallel-axis theorem about the
    # merged CoM (x and y moments gain m d^2, z is unchanged).
    pieces = [(upper, z_cerv - upper.com), (middle, z_xyph - middle.com)]
    m_th = sum(p.mass for p, _ in pieces)
    z_th = sum(p.mass * z for p, z in pieces) / m_th
    I_th = sum(np.diag(p.inertia) + p.mass * (z - z_th) ** 2 * np.diag([1.0, 1.0, 0.0]) for p, z in pieces)

    def at(z: float, y: float = 0.0, x: float = 0.0) -> np.ndarray:
        return np.array([x, y, z])

    segments = [
        HumanSegment("pelvis", None, "free", at(z_midh), lower.mass, at(z_omph - lower.com), _vertical(lower),
                     {"OMPH": at(z_omph), "MIDH": at(z_midh)}),
        HumanSegment("thorax", "pelvis", "spherical", at(z_omph), m_th, at(z_th), I_th,
                     {"CERV": at(z_cerv), "SUPR": at(z_supr), "XYPH": at(z_xyph)}),
        HumanSegment("head", "thorax", "spherical", at(z_cerv), head.mass, at(z_vert - head.com),
                     _vertical(head), {"VERT": at(z_vert)}),
    ]
    for side, sign in (("r", -1.0), ("l", 1.0)):
        ys, yh = sign * SHOULDER_WIDTH * height / 2, sign * HIP_WIDTH * height / 2
        z_elbow = z_supr - arm.length
        z_wrist = z_elbow - fore.length
        x_heel = -ANKLE_FROM_HEEL * foot.length  # the ankle centre is at x = 0
        segments += [
            HumanSegment(f"upper_arm_{side}", "thorax", "spherical", at(z_supr, ys), arm.mass,
                         at(z_supr - arm.com, ys), _vertical(arm), {}),
            HumanSegment(f"forearm_{side}", f"upper_arm_{side}", "revolute", at(z_elbow, ys), fore.mass,
                         at(z_elbow - fore.com, ys), _vertical(fore), {}),
            HumanSegment(f"hand_{side}", f"forearm_{side}", "revolute", at(z_wrist, ys), hand.mass,
                         at(z_wrist - hand.com, ys), _vertical(hand), {"MET3": at(z_wrist - hand.length, ys)}),
            HumanSegment(f"thigh_{side}", "pelvis", "spherical", at(z_midh, yh), thigh.mass,
                         at(z_midh - thigh.com, yh), _vertical(thigh), {}),
            HumanSegment(f"shank_{side}", f"thigh_{side}", "revolute", at(z_knee, yh), shank.mass,
                         at(z_knee - shank.com, yh), _vertical(shank), {}),
            HumanSegment(f"foot_{side}", f"shank_{side}", "revolute", at(z_ankle, yh), foot.mass,
                         at(0.0, yh, x_heel + foot.com), np.diag([foot.inertia[2], foot.inertia[1], foot.inertia[0]]),
                         {"HEEL": at(0.0, yh, x_heel), "TTIP": at(0.0, yh, x_heel + foot.length)}),
        ]
    return segments


# Joint axes in the segment frame (parallel to the lab in the standing posture, y to the left),
# oriented so that flexion / dorsiflexion is positive.
FLEXION_AXIS = {"forearm": (0.0, -1.0, 0.0), "hand": (0.0, -1.0, 0.0), "shank": (0.0, 1.0, 0.0),
                "foot": (0.0, -1.0, 0.0)}
JOINT_NAMES = {"pelvis": "base", "thorax": "lumbar", "head": "neck", "upper_arm": "shoulder", "forearm": "elbow",
               "hand": "wrist", "thigh": "hip", "shank": "knee", "foot": "ankle"}
# Three-DOF joints as three revolutes (flexion, then adduction / lateral bending, then axial
# rotation), axes for the right side and the midline; the left side mirrors x and z.
REVOLUTE3 = {
    "thorax": (("flexion", (0.0, 1.0, 0.0)), ("bending", (0.0, 0.0, 0.0)), ("rotation", (0.0, 0.0, 1.0))),
    "head": (("flexion", (0.0, 1.0, 0.0)), ("bending", (0.0, 0.0, 0.0)), ("rotation", (0.0, 0.0, 1.0))),
    "upper_arm": (("flexion", (0.0, -1.0, 0.0)), ("adduction", (1.0, 0.0, 0.0)), ("rotation", (0.0, 0.0, 1.0))),
    "thigh": (("flexion", (0.0, -1.0, 0.0)), ("adduction", (1.0, 0.0, 0.0)), ("rotation", (0.0, 0.0, 1.0))),
}
BENDING_AXIS = (-1.0, 0.0, 0.0)  # lateral bending of trunk and neck, to the left positive


def _vec(x) -> list[float]:
    return [round(float(v), 12) + 0.0 for v in x]  # + 0.0 turns -0.0 into 0.0


def urdf_order(rows: list[dict]) -> list[dict]:
    """Segment tables in the order Pinocchio's URDF reader gives their joints: depth first from the
    world, siblings sorted by joint name (urdfdom keeps joints in a name-sorted map). With this
    order a model's q and v layouts equal Pinocchio's for its exported URDF."""
    children: dict[str, list[dict]] = {}
    for r in rows:
        children.setdefault(r["parent"], []).append(r)
    out: list[dict] = []

    def visit(parent: str) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: r.get("joint_name", r["name"])):
            out.append(r)
            visit(r["name"])

    visit("world")
    return out


def human15_table(mass: float, height: float, sex: str = "male", ball_joints: bool = False) -> dict:
    """The 15-segment human as a model table in the TOML model format of docs/models.md.

    mass (kg), height (m), sex "male" or "female". The three-DOF joints (lumbar, neck, shoulders,
    hips) are, by default, three revolute joints each (flexion, adduction or lateral bending,
    axial rotation; flexion, adduction, internal rotation and bending to the left positive)
    through two massless link segments, so that the model exports to URDF and an actuator can
    drive one axis; ball_joints=True makes them single spherical joints. Segments are listed in
    Pinocchio's URDF order (`urdf_order`). Segment frames are
    parallel to the lab frame in the standing posture, origins on the joint centres; the floating
    base (pelvis, origin MIDH) has q = 0 at the lab origin, so standing on the floor needs base
    z = meta.standing_base_height.
    """
    segs = human15(mass, height, sex)
    pos = {s.name: s.joint_pos for s in segs}
    out = []
    for s in segs:
        kind = s.name.rsplit("_", 1)[0] if s.name.endswith(("_r", "_l")) else s.name
        side = s.name[-2:] if s.name.endswith(("_r", "_l")) else ""
        mirror = np.array([-1.0, 1.0, -1.0]) if side == "_l" else np.ones(3)
        # The floating base's placement stays at the lab origin (URDF and Pinocchio have none).
        origin = s.joint_pos - pos[s.parent] if s.parent else np.zeros(3)
        joint = JOINT_NAMES[kind]
        row: dict = {"name": s.name, "parent": s.parent or "world"}
        if s.joint == "spherical" and not ball_joints:
            dofs = [(dof, BENDING_AXIS if dof == "bending" else axis) for dof, axis in REVOLUTE3[kind]]
            for dof, axis in dofs[:2]:
                link = f"{joint}_{dof[:4]}{side}"
                out.append({"name": link, "parent": row["parent"], "joint": "revolute",
                            "joint_name": f"{joint}_{dof}{side}", "axis": _vec(mirror * axis), "origin": _vec(origin),
                            "notes": f"massless link of the three-revolute {joint}"})
                row["parent"], origin = link, np.zeros(3)
            dof, axis = dofs[2]
            row.update(joint="revolute", joint_name=f"{joint}_{dof}{side}", axis=_vec(mirror * axis))
        elif s.joint == "free":
            row.update(joint="free_flyer", joint_name=joint)
        elif s.joint == "spherical":
            row.update(joint="spherical", joint_name=joint + side)
        else:
            row.update(joint="revolute", joint_name=joint + side, axis=list(FLEXION_AXIS[kind]))
        I = s.inertia
        row.update(origin=_vec(origin), mass=round(s.mass, 12), com=_vec(s.com - s.joint_pos),
                   inertia=_vec([I[0, 0], I[1, 1], I[2, 2]]))
        marks = {f"{k}{side}": _vec(p - s.joint_pos) for k, p in s.points.items() if k not in ("HEEL", "TTIP")}
        if marks:
            row["markers"] = marks
        if kind == "foot":
            row["contacts"] = {f"heel{side}": _vec(s.points["HEEL"] - s.joint_pos),
                               f"toe{side}": _vec(s.points["TTIP"] - s.joint_pos)}
        out.append(row)
    ref_h, ref_m = REFERENCE[sex]
    return {
        "name": "human15",
        "description": (f"3-D 15-segment human ({sex}, {mass:g} kg, {height:g} m), floating base at the pelvis, "
                        "standing anatomical posture at q = neutral (base at the lab origin)."),
        "source": ("de Leva P. (1996) Adjustments to Zatsiorsky-Seluyanov's segment inertia parameters. "
                   "J. Biomech. 29(9):1223-1230, Table 4 (models.md section 8), scaled by dynamics.anthropometry."),
        "notes": [
            f"Masses m_i = m%_i M (table fractions renormalised to sum to 1); lengths L_ref H / {ref_h} m "
            f"(reference subject {ref_h} m, {ref_m} kg); CoM and central principal moments m (r L)^2 per models.md 8.4.",
            "Segments: pelvis = lower trunk OMPH->MIDH; thorax = upper trunk CERV->XYPH (C7 variant) merged with "
            "middle trunk XYPH->OMPH (parallel-axis theorem); head VERT->CERV; shank KJC->AJC; foot HEEL->TTIP.",
            "Axes: x forward, y left, z up. I_xx from r_sag, I_yy from r_trans, I_zz from r_long; the foot "
            "(long axis x) takes I_xx from r_long, I_zz from r_sag (models.md 8.4; the sag/trans naming of Table 4 "
            "is ambiguous, see its caveat).",
            "Standing stack: VERT at H, then head, C7 trunk, thigh and shank lengths straight down; the ankle sits "
            "above the sole by what is left of H (1.9 % H male, 4.0 % H female: de Leva's mean lengths overshoot "
            "a real ankle height for the male set). Foot CoM on the heel-toe line (the sole), as Table 4 defines it.",
            f"Assumptions not in de Leva: shoulder joint centres at SUPR height (CERV minus the length difference of "
            f"the two upper-trunk rows), {SHOULDER_WIDTH:g} H apart; hip joint centres at MIDH height, "
            f"{HIP_WIDTH:g} H apart; ankle centre above the sole at {ANKLE_FROM_HEEL:g} of the foot length from "
            "the heel; arms hanging straight, palms forward.",
            ("Lumbar, neck, shoulders and hips are single spherical joints." if ball_joints else
             "Lumbar, neck, shoulders and hips are three revolute joints each (flexion, adduction or lateral "
             "bending, axial rotation) through two massless link segments: the model exports to URDF."),
            "Joint signs: flexion positive (trunk and neck flexion about +y; shoulder, hip, elbow, wrist flexion "
            "about -y; knee about +y; ankle dorsiflexion about -y); adduction, internal rotation and bending to "
            "the left positive. Generated file: regenerate with `walklab model human --mass M --height H "
            "[--sex S] -o FILE`.",
        ],
        "meta": {"sex": sex, "body_mass": float(mass), "stature": float(height),
                 "standing_base_height": round(float(pos["pelvis"][2]), 12),
                 "joints3": "spherical" if ball_joints else "revolute"},
        "segment": urdf_order(out),
    }


# Generic lower-limb exoskeleton worn over human15: design values for a prototype of this class.
# Body masses (kg) per human segment they are strapped to; motors and joint limits joint side.
EXO_MASS = {"pelvis": 4.0, "thigh": 2.2, "shank": 0.7}
EXO_MOTOR = {"gear_ratio": 100.0, "torque_limit": 80.0, "velocity_limit": 6.0, "rotor_inertia": 3.3e-5}
EXO_LIMITS = {"hip_flexion": (-0.5, 2.0), "knee": (0.0, 2.1)}


def _box(mass: float, size) -> list[float]:
    """Central principal moments (kg*m^2) of a uniform box of size (x, y, z) m."""
    a, b, c = size
    return _vec(mass / 12 * np.array([b * b + c * c, a * a + c * c, a * a + b * b]))


def exoskeleton_table(mass: float, height: float, sex: str = "male") -> dict:
    """human15 (three-revolute joints) wearing a lower-limb exoskeleton, as a model table.

    Exoskeleton bodies are rigidly attached (fixed joints) to the human segment they are strapped
    to: a hip belt with the two hip motors and the battery on the pelvis, per leg a thigh link
    carrying the knee motor near its distal end and a shank link with the cuff (EXO_MASS).
    Actuators: hip flexion and knee per leg (EXO_MOTOR), with joint limits EXO_LIMITS.
    """
    table = human15_table(mass, height, sex)
    segs = table["segment"]
    by = {s["name"]: s for s in segs}
    H = height
    # (name, human segment, mass, CoM in that segment's frame, uniform-box size x, y, z), all m
    extra = [("exo_pelvis", "pelvis", EXO_MASS["pelvis"], [-0.12, 0.0, 0.02], (0.12, HIP_WIDTH * H + 0.14, 0.15))]
    for side, sign in (("_r", -1.0), ("_l", 1.0)):
        thigh_len = -by[f"shank{side}"]["origin"][2]
        shank_len = -by[f"foot{side}"]["origin"][2]
        extra += [
            (f"exo_thigh{side}", f"thigh{side}", EXO_MASS["thigh"], [0.0, sign * 0.09, -0.75 * thigh_len],
             (0.06, 0.05, thigh_len)),
            (f"exo_shank{side}", f"shank{side}", EXO_MASS["shank"], [0.0, sign * 0.07, -0.35 * shank_len],
             (0.05, 0.04, 0.6 * shank_len)),
        ]
    for name, parent, m, com, size in extra:
        segs.insert(next(i for i, s in enumerate(segs) if s["name"] == parent) + 1, {
            "name": name, "parent": parent, "joint": "fixed", "mass": m, "com": _vec(com), "inertia": _box(m, size),
            "notes": "exoskeleton body strapped to the human segment (fixed joint); uniform box inertia"})
    for seg in segs:
        for joint, (lo, hi) in EXO_LIMITS.items():
            if seg.get("joint_name", "").startswith(joint + "_"):
                seg["limits"] = {"lower": lo, "upper": hi, "velocity": EXO_MOTOR["velocity_limit"],
                                 "effort": EXO_MOTOR["torque_limit"]}
    table["segment"] = urdf_order(segs)
    table["actuator"] = [
        {"name": f"{joint}_motor{side}", "joint": f"{seg}{side}", **EXO_MOTOR}
        for side in ("_r", "_l") for joint, seg in (("hip", "hip_flex"), ("knee", "shank"))]
    table["name"] = "exoskeleton"
    table["source"] = (table["source"] + " Exoskeleton: walklab generic design values "
                       "(dynamics.anthropometry.exoskeleton_table).")
    table["description"] = (f"Lower-limb exoskeleton (hip flexion and knee actuators per leg) worn by the human15 "
                            f"subject ({sex}, {mass:g} kg, {height:g} m); floating base at the pelvis.")
    table["notes"] = table["notes"] + [
        f"Exoskeleton: generic design values for a prototype of this class, not a product datasheet. Hip belt "
        f"{EXO_MASS['pelvis']:g} kg (hip motors, battery, electronics) on the pelvis; per leg a "
        f"{EXO_MASS['thigh']:g} kg thigh link (knee motor near the knee) and a {EXO_MASS['shank']:g} kg shank "
        "link, each a uniform box rigidly strapped (fixed joint) to the human segment. The hip motor drives the "
        "human's hip flexion revolute joint.",
        f"Actuators: harmonic-drive motors, gear {EXO_MOTOR['gear_ratio']:g}:1, {EXO_MOTOR['torque_limit']:g} N*m "
        f"and {EXO_MOTOR['velocity_limit']:g} rad/s joint side, rotor {EXO_MOTOR['rotor_inertia']:g} kg*m^2; "
        f"joint limits hip flexion {EXO_LIMITS['hip_flexion']} rad, knee {EXO_LIMITS['knee']} rad.",
    ]
    table["meta"]["exoskeleton_mass"] = round(sum(m for _, _, m, _, _ in extra), 9)
    return table
