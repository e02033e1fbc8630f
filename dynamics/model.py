"""Rigid multibody tree model: segments, joints, markers, contact points, actuators.

A `Model` is a constant description (Pinocchio's ``Model``); the algorithms (`rnea`, `crba`,
`forward_dynamics`, kinematics, CoM, centroidal) are functions of a model and arrays.

Frames. Every segment has a frame fixed to it, the *joint frame*: its origin is on the joint that
connects the segment to its parent. The joint frame of segment i, at zero joint coordinate, sits
at `Joint.rotation`, `Joint.translation` in the parent's frame (URDF ``<origin>``); the joint then
moves it (rotation about / translation along `Joint.axis` expressed in that frame). Mass, CoM,
inertia, markers and contact points are given in the segment's own frame. The root segments'
parent is the world (lab frame, z up; planar models: x forward, y up, rotations about z, with
``gravity = (0, -9.81, 0)``).

Joint types, with nq / nv (configuration size / velocity size) and the layouts of Pinocchio:

==================== == == ==================================================================
type                 nq nv q, v
==================== == == ==================================================================
``fixed``            0  0  —
``revolute``         1  1  angle (rad) about ``axis``; v its rate
``revolute_unbounded`` 2 1 (cos θ, sin θ) (URDF ``continuous``, Pinocchio's RUB); v = θ̇
``prismatic``        1  1  displacement (m) along ``axis``; v its rate
``spherical``        4  3  quaternion (x, y, z, w) of the child in the joint placement frame; v =
                           angular velocity in the child frame
``free_flyer``       7  6  (x, y, z, qx, qy, qz, qw) of the child in the joint placement frame;
                           v = (linear velocity of the child origin, angular velocity), both in the
                           child (base) frame
``planar``           3  3  (x, y, θ): translation along x, y and rotation θ about z of the
                           placement frame; v = q̇ (not Pinocchio's cos/sin planar joint; URDF
                           export writes it as prismatic x, prismatic y, revolute z)
``helical``          1  1  angle θ (rad) about ``axis`` with the translation ``pitch`` θ along it
                           (Pinocchio's HelicalUnaligned); v = θ̇
==================== == == ==================================================================

Each type is one module of `dynamics.joints` (its transform, motion subspace, q̇, URDF and
Pinocchio forms and compiled step); JOINT_NQ_NV is read from them.

Segments are stored parents-first; `Model.idx_q[i]`, `Model.idx_v[i]` give where segment i's
joint coordinates start in q and v.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from .joints import TYPES as _JOINT_TYPES, joint_type as _joint_type

#: joint type -> (nq, nv), in the kernels' type-code order (each dynamics/joints module's NAME, NQ, NV)
JOINT_NQ_NV: Mapping[str, tuple[int, int]] = MappingProxyType({t.NAME: (t.NQ, t.NV) for t in _JOINT_TYPES})

#: The one gravity constant of walklab [m/s²] (methods.md section 0: g = 9.81, as the sources use;
#: every default gravity, the simulators' body weight and the ZMP forms refer to it).
G = 9.81
GRAVITY = (0.0, 0.0, -G)  # m/s^2, lab frame z up (methods.md section 0)


class ModelError(ValueError):
    """An invalid model description; the message names the file (if any) and the segment."""


def _vec3(value, what: str) -> np.ndarray:
    a = np.asarray(value, dtype=float)
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ModelError(f"{what}: expected 3 finite numbers, got {value!r}")
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Joint:
    """The joint between a segment and its parent.

    type: one of JOINT_NQ_NV. axis: (3,) unit vector in the joint frame (revolute, prismatic,
    revolute_unbounded, helical; ignored otherwise). pitch: m/rad, the helical joint's
    translation per radian (0 for the other types). rotation (3, 3), translation (3,) m: placement of the
    joint frame in the parent segment's frame at zero joint coordinate. lower, upper: position
    limits (rad or m, 1-DoF joints; -inf/inf when absent); velocity (rad/s or m/s) and effort
    (N·m or N) limits, inf when absent.
    """

    type: str = "fixed"
    axis: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))
    lower: float = -np.inf
    upper: float = np.inf
    velocity: float = np.inf
    effort: float = np.inf
    pitch: float = 0.0

    @property
    def nq(self) -> int:
        return JOINT_NQ_NV[self.type][0]

    @property
    def nv(self) -> int:
        return JOINT_NQ_NV[self.type][1]


@dataclass(frozen=True, eq=False)
class Segment:
    """One rigid body of the tree with the joint to its parent.

    name: unique segment (URDF link) name. parent: parent segment name, or None for the world.
    joint: the joint to the parent; joint_name: its name (URDF joint name, defaults to
    ``name``). mass (kg, >= 0; 0 for a fictitious massless segment); com (3,) m in the segment
    frame; inertia (3, 3) kg·m² about the CoM, in the segment frame (symmetric, positive
    semi-definite, principal moments obeying the triangle inequality). markers, contacts: name ->
    (3,) m point in the segment frame.
    """

    name: str
    parent: str | None
    joint: Joint
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))
    markers: Mapping[str, np.ndarray] = field(default_factory=dict)
    contacts: Mapping[str, np.ndarray] = field(default_factory=dict)
    joint_name: str = ""


@dataclass(frozen=True)
class Actuator:
    """A motor driving one 1-DoF joint through a gear.

    joint: the segment whose joint it drives. gear_ratio: motor angle / joint angle (> 0).
    torque_limit (N·m, or N for prismatic) and velocity_limit (rad/s or m/s) are joint-side
    values. rotor_inertia: kg·m², motor side (reflected joint-side inertia is
    gear_ratio² · rotor_inertia; it is NOT added to the rigid-body dynamics).
    """

    name: str
    joint: str
    gear_ratio: float = 1.0
    torque_limit: float = np.inf
    velocity_limit: float = np.inf
    rotor_inertia: float = 0.0


@dataclass(frozen=True, eq=False)
class Model:
    """A validated tree of segments (parents first) with actuators and a gravity vector.

    Models, segments and joints compare (and hash) by identity. Constructing a Model validates it
    (ModelError naming the segment on failure) and derives:
    nq, nv; parents (nseg,) int (-1 = world); idx_q, idx_v (nseg,) start of each joint's
    coordinates; nqs, nvs (nseg,) their sizes; dof_segment (nv,) the segment each velocity
    coordinate belongs to; supports (nseg, nseg) float, supports[i, j] = 1 if segment j is on the
    path world → i (i included), the ancestor matrix μ of methods.md a.2; masses (nseg,), coms (nseg, 3), inertias
    (nseg, 3, 3) stacked from the segments; total_mass (kg); marker_names, contact_names in segment order.
    gravity: (3,) m/s² in the lab frame.
    """

    name: str
    segments: tuple[Segment, ...]
    actuators: tuple[Actuator, ...] = ()
    gravity: np.ndarray = field(default_factory=lambda: np.array(GRAVITY))
    source: str = ""

    def __getstate__(self) -> dict:
        # pickled (a worker process's nominal sent back) without its default workspace: its caches hold
        # generated functions, which do not pickle; the copy builds its own when first used
        return {k: v for k, v in self.__dict__.items() if k != "_workspace_data"}

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "actuators", tuple(self.actuators))
        object.__setattr__(self, "gravity", _vec3(self.gravity, f"model {self.name!r}: gravity"))
        _validate(self)
        index = {s.name: i for i, s in enumerate(self.segments)}
        parents = np.array([-1 if s.parent is None else index[s.parent] for s in self.segments], dtype=int)
        nqs = np.array([s.joint.nq for s in self.segments], dtype=int)
        nvs = np.array([s.joint.nv for s in self.segments], dtype=int)
        derived = {
            "index": MappingProxyType(index),
            "parents": parents,
            "nqs": nqs,
            "nvs": nvs,
            "idx_q": np.concatenate([[0], np.cumsum(nqs)[:-1]]).astype(int),
            "idx_v": np.concatenate([[0], np.cumsum(nvs)[:-1]]).astype(int),
            "nq": int(nqs.sum()),
            "nv": int(nvs.sum()),
            "dof_segment": np.repeat(np.arange(len(self.segments)), nvs),
            "supports": _supports(parents),
            "masses": np.array([s.mass for s in self.segments], dtype=float),
            "coms": np.array([s.com for s in self.segments], dtype=float).reshape(-1, 3),
            "inertias": np.array([s.inertia for s in self.segments], dtype=float).reshape(-1, 3, 3),
            "total_mass": float(sum(s.mass for s in self.segments)),
            "marker_names": tuple(m for s in self.segments for m in s.markers),
            "contact_names": tuple(c for s in self.segments for c in s.contacts),
        }
        for k, v in derived.items():
            if isinstance(v, np.ndarray):
                v.setflags(write=False)
            object.__setattr__(self, k, v)

    # Typing aids for the derived attributes set in __post_init__.
    index: Mapping[str, int] = field(init=False, repr=False, compare=False, default=None)
    parents: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    nqs: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    nvs: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    idx_q: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    idx_v: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    nq: int = field(init=False, repr=False, compare=False, default=0)
    nv: int = field(init=False, repr=False, compare=False, default=0)
    dof_segment: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    supports: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    masses: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    coms: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    inertias: np.ndarray = field(init=False, repr=False, compare=False, default=None)
    total_mass: float = field(init=False, repr=False, compare=False, default=0.0)
    marker_names: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())
    contact_names: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())

    def segment(self, name: str) -> Segment:
        """The segment called `name`; KeyError (LookupError) naming it if absent."""
        try:
            return self.segments[self.index[name]]
        except KeyError:
            raise KeyError(f"model {self.name!r} has no segment {name!r}") from None

    def point(self, name: str) -> tuple[int, np.ndarray]:
        """(segment index, (3,) point in the segment frame) of a marker or contact point."""
        for i, s in enumerate(self.segments):
            if name in s.markers:
                return i, s.markers[name]
            if name in s.contacts:
                return i, s.contacts[name]
        raise KeyError(f"model {self.name!r} has no marker or contact point {name!r}")

    def neutral(self) -> np.ndarray:
        """(nq,) neutral configuration: zeros, identity quaternions (w = 1), cos θ = 1."""
        q = np.zeros(self.nq)
        for s, iq in zip(self.segments, self.idx_q):
            q[iq:iq + s.joint.nq] = _joint_type(s.joint.type).NEUTRAL
        return q


def _supports(parents: np.ndarray) -> np.ndarray:
    mu = np.eye(len(parents))
    for i, p in enumerate(parents):
        if p >= 0:
            mu[i] += mu[p]
    return mu


def _validate(model: Model) -> None:
    """Raise ModelError naming the first bad segment: names, parents (known, earlier: no cycles),
    joint type and axis, mass, CoM, inertia (symmetric, PSD, triangle inequality), points,
    actuators."""
    where = f"model {model.name!r}"
    if not model.segments:
        raise ModelError(f"{where}: no segments")
    seen: set[str] = set()
    names = {s.name for s in model.segments}
    points: set[str] = set()
    joint_names: set[str] = set()
    for s in model.segments:
        w = f"{where}: segment {s.name!r}"
        if not isinstance(s.name, str) or not s.name:
            raise ModelError(f"{where}: segment name must be a non-empty string, got {s.name!r}")
        if s.name in seen:
            raise ModelError(f"{w}: duplicate segment name")
        if s.parent is not None and s.parent not in seen:
            if s.parent not in names:
                raise ModelError(f"{w}: unknown parent {s.parent!r}")
            raise ModelError(f"{w}: parent {s.parent!r} is not defined before its child "
                             "(a cycle, or segments not listed parents-first)")
        seen.add(s.name)
        jn = s.joint_name or s.name
        if jn in joint_names:
            raise ModelError(f"{w}: duplicate joint name {jn!r}")
        joint_names.add(jn)
        j = s.joint
        if j.type not in JOINT_NQ_NV:
            raise ModelError(f"{w}: unknown joint type {j.type!r} (expected one of {', '.join(JOINT_NQ_NV)})")
        axis = np.asarray(j.axis, dtype=float)
        if axis.shape != (3,) or not np.all(np.isfinite(axis)) or abs(np.linalg.norm(axis) - 1) > 1e-9:
            raise ModelError(f"{w}: joint axis must be a unit 3-vector, got {j.axis!r}")
        R = np.asarray(j.rotation, dtype=float)
        if R.shape != (3, 3) or not np.allclose(R @ R.T, np.eye(3), atol=1e-9) or np.linalg.det(R) < 0:
            raise ModelError(f"{w}: joint rotation must be a proper 3x3 rotation matrix")
        _vec3(j.translation, f"{w}: joint translation")
        if not np.isfinite(j.pitch) or (j.pitch and not _joint_type(j.type).PITCH_PARAMETER):
            raise ModelError(f"{w}: joint pitch must be finite, and 0 for a {j.type} joint, got {j.pitch!r}")
        if not (j.lower <= j.upper):
            raise ModelError(f"{w}: joint lower limit {j.lower} above upper limit {j.upper}")
        if not (j.velocity > 0 and j.effort > 0):
            raise ModelError(f"{w}: joint velocity and effort limits must be > 0")
        if not (np.isfinite(s.mass) and s.mass >= 0):
            raise ModelError(f"{w}: mass must be finite and >= 0 kg, got {s.mass}")
        _vec3(s.com, f"{w}: com")
        I = np.asarray(s.inertia, dtype=float)
        if I.shape != (3, 3) or not np.all(np.isfinite(I)) or not np.allclose(I, I.T, atol=1e-12):
            raise ModelError(f"{w}: inertia must be a finite symmetric 3x3 matrix")
        ev = np.linalg.eigvalsh(I)
        tol = 1e-12 * max(1.0, float(np.abs(ev).max()))
        if ev[0] < -tol:
            raise ModelError(f"{w}: inertia not positive definite (principal moments {ev.tolist()} kg*m^2)")
        if ev[0] + ev[1] < ev[2] - tol:
            raise ModelError(f"{w}: inertia violates the triangle inequality "
                             f"(principal moments {ev.tolist()} kg*m^2: I1 + I2 < I3)")
        if s.mass == 0 and ev[2] > tol:
            raise ModelError(f"{w}: massless segment with non-zero inertia")
        for kind, pts in (("marker", s.markers), ("contact", s.contacts)):
            for pname, p in pts.items():
                if pname in points:
                    raise ModelError(f"{w}: duplicate marker/contact name {pname!r}")
                points.add(pname)
                _vec3(p, f"{w}: {kind} {pname!r}")
    act_names: set[str] = set()
    for a in model.actuators:
        w = f"{where}: actuator {a.name!r}"
        if a.name in act_names:
            raise ModelError(f"{w}: duplicate actuator name")
        act_names.add(a.name)
        if a.joint not in names:
            raise ModelError(f"{w}: unknown joint segment {a.joint!r}")
        jt = next(s.joint.type for s in model.segments if s.name == a.joint)
        if JOINT_NQ_NV[jt][1] != 1:
            raise ModelError(f"{w}: drives segment {a.joint!r} whose joint is {jt!r}, expected a 1-DoF joint")
        if not (a.gear_ratio > 0 and a.torque_limit > 0 and a.velocity_limit > 0 and a.rotor_inertia >= 0):
            raise ModelError(f"{w}: gear_ratio, torque_limit, velocity_limit must be > 0 and rotor_inertia >= 0")
