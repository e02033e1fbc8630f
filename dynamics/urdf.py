"""URDF import and export of tree models, with Pinocchio's joint order and coordinate layouts.

Import (`load_urdf`): links become segments, joints their joints, in Pinocchio's order: depth
first from the root link, siblings in joint-name order (as urdfdom stores them). ``floating=True``
gives the root a free flyer named ``root_joint`` (q = [x, y, z, qx, qy, qz, qw, ...],
v = [linear, angular] in the base frame). URDF joint types: revolute, continuous
(revolute_unbounded, q = (cos θ, sin θ)), prismatic, fixed, floating (free_flyer). The
``<inertial>`` origin/rpy give the CoM and the axes of the inertia tensor in the link frame.

Export (`save_urdf`): the inverse map, so that a model opens in standard tools. URDF has no
spherical joint: models with spherical joints are refused (ModelError). A planar joint is written
as prismatic x → prismatic y → revolute z (limits ±1e9) through two massless links (same
q and v). Markers,
contact points and actuators are kept in ``<walklab_point>`` / ``<walklab_actuator>`` elements
that other URDF readers ignore, and actuators also as standard ``<transmission>`` elements.
A root free flyer is not written (load the file with ``floating=True``); other roots hang from a
massless ``world`` link when needed. Sibling joints are re-ordered by name by URDF readers, so
match exported coordinates by joint name.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .joints import TYPES, joint_type
from .loader import rpy_matrix
from .model import Actuator, Joint, Model, ModelError, Segment

WORLD_LINK = "world"


def _floats(text: str | None, n: int, where: str, default=None) -> np.ndarray:
    if text is None:
        if default is None:
            raise ModelError(f"{where}: missing")
        return np.array(default, dtype=float)
    try:
        vals = [float(x) for x in text.split()]
    except ValueError:
        raise ModelError(f"{where}: expected {n} numbers, got {text!r}") from None
    if len(vals) != n or not all(math.isfinite(x) for x in vals):
        raise ModelError(f"{where}: expected {n} finite numbers, got {text!r}")
    return np.array(vals)


def _origin(el: ET.Element | None, where: str) -> tuple[np.ndarray, np.ndarray]:
    if el is None:
        return np.eye(3), np.zeros(3)
    xyz = _floats(el.get("xyz"), 3, f"{where} origin xyz", [0, 0, 0])
    rpy = _floats(el.get("rpy"), 3, f"{where} origin rpy", [0, 0, 0])
    return rpy_matrix(rpy), xyz


def _attr_float(el: ET.Element | None, key: str, where: str, default: float) -> float:
    if el is None or el.get(key) is None:
        return default
    return float(_floats(el.get(key), 1, f"{where} {key}")[0])


def _link_inertia(link: ET.Element, where: str) -> tuple[float, np.ndarray, np.ndarray]:
    inertial = link.find("inertial")
    if inertial is None:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    R, c = _origin(inertial.find("origin"), where)
    mass_el = inertial.find("mass")
    mass = _attr_float(mass_el, "value", f"{where} mass", 0.0)
    i = inertial.find("inertia")
    vals = [_attr_float(i, k, f"{where} inertia", 0.0) for k in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")]
    ixx, iyy, izz, ixy, ixz, iyz = vals
    I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    return mass, c, R @ I @ R.T


def model_from_urdf_string(text: str, floating: bool = False, source: str = "<string>") -> Model:
    """Model from URDF XML text (see module docstring); ModelError naming `source` and the link
    or joint on a problem."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ModelError(f"{source}: not valid XML: {e}") from None
    if root.tag != "robot":
        raise ModelError(f"{source}: root element is <{root.tag}>, expected <robot>")
    links = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name or name in links:
            raise ModelError(f"{source}: link with missing or duplicate name {name!r}")
        links[name] = link
    children: dict[str, list[ET.Element]] = {n: [] for n in links}
    child_of: dict[str, str] = {}
    for j in root.findall("joint"):
        jn = j.get("name")
        p, c = j.find("parent"), j.find("child")
        pl, cl = (p.get("link") if p is not None else None), (c.get("link") if c is not None else None)
        if pl not in links or cl not in links:
            raise ModelError(f"{source}: joint {jn!r}: unknown parent or child link ({pl!r}, {cl!r})")
        if cl in child_of:
            raise ModelError(f"{source}: link {cl!r} has two parent joints")
        child_of[cl] = jn
        children[pl].append(j)
    roots = [n for n in links if n not in child_of]
    if len(roots) != 1:
        raise ModelError(f"{source}: expected one root link, found {roots or 'none (a cycle)'}")
    segments: list[Segment] = []
    markers, actuators = _extensions(root, source)

    def add(link_name: str, parent: str | None, joint: Joint, joint_name: str) -> None:
        where = f"{source}: link {link_name!r}"
        mass, com, inertia = _link_inertia(links[link_name], where)
        segments.append(Segment(name=link_name, parent=parent, joint=joint, joint_name=joint_name, mass=mass,
                                com=com, inertia=inertia, markers=markers.get(link_name, {}).get("marker", {}),
                                contacts=markers.get(link_name, {}).get("contact", {})))
        for j in sorted(children[link_name], key=lambda e: e.get("name")):
            add(j.find("child").get("link"), link_name, _joint(j, source), j.get("name"))

    root_joint = Joint("free_flyer") if floating else Joint("fixed")
    add(roots[0], None, root_joint, "root_joint")
    try:
        return Model(name=root.get("name", "robot"), segments=tuple(segments), actuators=actuators, source=source)
    except ModelError as e:
        raise ModelError(f"{source}: {e}") from None


def _joint(j: ET.Element, source: str) -> Joint:
    where = f"{source}: joint {j.get('name')!r}"
    jt = j.get("type")
    types = {t.URDF_TYPE: t.NAME for t in TYPES if t.URDF_TYPE}   # URDF type -> walklab joint type
    if jt not in types:
        raise ModelError(f"{where}: unsupported joint type {jt!r} (supported: {', '.join(types)})")
    if j.find("mimic") is not None:
        raise ModelError(f"{where}: mimic joints are not supported")
    R, t = _origin(j.find("origin"), where)
    axis_el = j.find("axis")
    axis = _floats(axis_el.get("xyz") if axis_el is not None else None, 3, f"{where} axis", [1, 0, 0])
    if np.linalg.norm(axis) < 1e-12:
        raise ModelError(f"{where}: zero axis")
    lim = j.find("limit")
    return Joint(type=types[jt], axis=axis / np.linalg.norm(axis), rotation=R, translation=t,
                 lower=_attr_float(lim, "lower", where, -np.inf) if jt in ("revolute", "prismatic") else -np.inf,
                 upper=_attr_float(lim, "upper", where, np.inf) if jt in ("revolute", "prismatic") else np.inf,
                 velocity=_attr_float(lim, "velocity", where, np.inf) or np.inf,
                 effort=_attr_float(lim, "effort", where, np.inf) or np.inf)


def _extensions(root: ET.Element, source: str) -> tuple[dict, tuple[Actuator, ...]]:
    points: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for el in root.findall("walklab_point"):
        kind = el.get("kind", "marker")
        if kind not in ("marker", "contact"):
            raise ModelError(f"{source}: walklab_point {el.get('name')!r}: kind must be marker or contact")
        pt = _floats(el.get("xyz"), 3, f"{source}: walklab_point {el.get('name')!r} xyz")
        points.setdefault(el.get("link"), {}).setdefault(kind, {})[el.get("name")] = pt
    acts = []
    for el in root.findall("walklab_actuator"):
        w = f"{source}: walklab_actuator {el.get('name')!r}"
        acts.append(Actuator(name=el.get("name"), joint=el.get("link"),
                             gear_ratio=_attr_float(el, "gear_ratio", w, 1.0),
                             torque_limit=_attr_float(el, "torque_limit", w, np.inf),
                             velocity_limit=_attr_float(el, "velocity_limit", w, np.inf),
                             rotor_inertia=_attr_float(el, "rotor_inertia", w, 0.0)))
    return points, tuple(acts)


def load_urdf(path: str | Path, floating: bool = False) -> Model:
    """Load a URDF file as a Model with Pinocchio's joint order and q/v layouts (module
    docstring). floating: give the root link a free-flyer joint. ModelError names the file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"URDF file {str(p)!r} not found")
    return model_from_urdf_string(p.read_text(), floating=floating, source=str(p))


def matrix_to_rpy(R: np.ndarray) -> np.ndarray:
    """URDF roll, pitch, yaw (rad) of a rotation matrix: the inverse of loader.rpy_matrix."""
    pitch = math.asin(max(-1.0, min(1.0, -R[2, 0])))
    if abs(R[2, 0]) < 1 - 1e-12:
        return np.array([math.atan2(R[2, 1], R[2, 2]), pitch, math.atan2(R[1, 0], R[0, 0])])
    return np.array([0.0, pitch, math.atan2(-R[0, 1], R[1, 1])])  # gimbal lock: roll folded into yaw


def _fmt(x) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(x))


def _add_link(robot: ET.Element, name: str, mass: float = 0.0, com=np.zeros(3), inertia=np.zeros((3, 3))) -> None:
    link = ET.SubElement(robot, "link", name=name)
    inertial = ET.SubElement(link, "inertial")
    ET.SubElement(inertial, "origin", xyz=_fmt(com), rpy="0 0 0")
    ET.SubElement(inertial, "mass", value=repr(float(mass)))
    I = np.asarray(inertia)
    ET.SubElement(inertial, "inertia", **{k: repr(float(I[i, j])) for k, (i, j) in
                                          {"ixx": (0, 0), "iyy": (1, 1), "izz": (2, 2), "ixy": (0, 1),
                                           "ixz": (0, 2), "iyz": (1, 2)}.items()})


def _add_joint(robot: ET.Element, name: str, jtype: str, parent: str, child: str, R=np.eye(3), t=np.zeros(3),
               axis=None, joint: Joint | None = None) -> None:
    el = ET.SubElement(robot, "joint", name=name, type=jtype)
    ET.SubElement(el, "parent", link=parent)
    ET.SubElement(el, "child", link=child)
    ET.SubElement(el, "origin", xyz=_fmt(t), rpy=_fmt(matrix_to_rpy(np.asarray(R))))
    if axis is not None:
        ET.SubElement(el, "axis", xyz=_fmt(axis))
    if jtype in ("revolute", "prismatic", "continuous"):
        # URDF needs finite numbers; an unlimited joint gets ±1e9, which readers treat as no limit
        big = 1e9
        lim = {"effort": min(joint.effort, big), "velocity": min(joint.velocity, big)}
        if jtype != "continuous":
            lim.update(lower=max(joint.lower, -big), upper=min(joint.upper, big))
        ET.SubElement(el, "limit", **{k: repr(float(v)) for k, v in lim.items()})


def urdf_string(model: Model) -> str:
    """URDF XML text of `model` (module docstring)."""
    robot = ET.Element("robot", name=model.name)
    roots = [s for s in model.segments if s.parent is None]
    floating_root = len(roots) == 1 and roots[0].joint.type == "free_flyer"
    if floating_root and not (np.allclose(roots[0].joint.rotation, np.eye(3))
                              and not np.any(roots[0].joint.translation)):
        raise ModelError(f"model {model.name!r}: a root free flyer with a non-identity placement "
                         "cannot be written to URDF")
    need_world = not (floating_root or (len(roots) == 1 and roots[0].joint.type == "fixed"))
    if need_world:
        if WORLD_LINK in model.index:
            raise ModelError(f"model {model.name!r}: a segment named {WORLD_LINK!r} clashes with the URDF world link")
        _add_link(robot, WORLD_LINK)
    for s in model.segments:
        j = s.joint
        _add_link(robot, s.name, s.mass, s.com, s.inertia)
        if s.parent is None and not need_world:
            continue
        parent = s.parent or WORLD_LINK
        name = s.joint_name or s.name
        chain = joint_type(j.type).urdf_chain(j)
        if chain is None:
            raise ModelError(f"model {model.name!r}: segment {s.name!r}: URDF has no {j.type} joint")
        # one URDF joint, or a chain through massless links (the planar joint: x, y, then z)
        for k, (suffix, jtype, axis) in enumerate(chain):
            last = k == len(chain) - 1
            child = s.name if last else f"{s.name}__p{suffix}"
            if not last:
                _add_link(robot, child)
            R, t = (j.rotation, j.translation) if k == 0 else (np.eye(3), np.zeros(3))
            _add_joint(robot, f"{name}_{suffix}" if suffix else name, jtype, parent, child, R, t, axis, j)
            parent = child
    for s in model.segments:
        for kind, pts in (("marker", s.markers), ("contact", s.contacts)):
            for n, p in pts.items():
                ET.SubElement(robot, "walklab_point", name=n, kind=kind, link=s.name, xyz=_fmt(p))
    for a in model.actuators:
        attrs = {"gear_ratio": a.gear_ratio, "torque_limit": a.torque_limit, "velocity_limit": a.velocity_limit,
                 "rotor_inertia": a.rotor_inertia}
        ET.SubElement(robot, "walklab_actuator", name=a.name, link=a.joint,
                      **{k: repr(float(v)) for k, v in attrs.items() if math.isfinite(v)})
        tr = ET.SubElement(robot, "transmission", name=f"{a.name}_transmission")
        ET.SubElement(tr, "type").text = "transmission_interface/SimpleTransmission"
        jn = model.segment(a.joint).joint_name or a.joint
        interface = "hardware_interface/EffortJointInterface"
        ET.SubElement(ET.SubElement(tr, "joint", name=jn), "hardwareInterface").text = interface
        ET.SubElement(ET.SubElement(tr, "actuator", name=a.name), "mechanicalReduction").text = repr(a.gear_ratio)
    ET.indent(robot)
    return ET.tostring(robot, encoding="unicode") + "\n"


def save_urdf(model: Model, path: str | Path) -> None:
    """Write `model` as a URDF file (module docstring). ModelError if it cannot be expressed."""
    text = urdf_string(model)
    Path(path).write_text(text)
