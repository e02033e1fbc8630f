"""Load a tree model from walklab's TOML model format (docs/models.md).

This is the one place in `dynamics/` that reads files (the architecture's loader exception).
``load_model(path_or_name)`` takes a path or a shipped model name (``configs/models/NAME.toml``);
files with ``kind = "linkage"`` go to ``dynamics.linkage.load_linkage``.
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from .joints import joint_type
from .model import GRAVITY, JOINT_NQ_NV, Actuator, Joint, Model, ModelError, Segment

TOP_KEYS = {"name", "kind", "description", "source", "notes", "gravity", "meta", "segment", "actuator"}
SEGMENT_KEYS = {"name", "parent", "joint", "joint_name", "axis", "pitch", "origin", "rpy", "mass", "com",
                "inertia", "limits", "markers", "contacts", "notes"}
LIMIT_KEYS = {"lower", "upper", "velocity", "effort"}
ACTUATOR_KEYS = {"name", "joint", "gear_ratio", "torque_limit", "velocity_limit", "rotor_inertia", "notes"}
WORLD = "world"


def rpy_matrix(rpy) -> np.ndarray:
    """(3, 3) rotation of URDF roll-pitch-yaw (rad, fixed axes x, y, z): R = Rz(yaw) Ry(pitch) Rx(roll)."""
    r, p, y = (float(a) for a in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def inertia_matrix(values, where: str) -> np.ndarray:
    """(3, 3) inertia from [ixx, iyy, izz] or [ixx, iyy, izz, ixy, ixz, iyz] (kg·m²)."""
    v = _numbers(values, where, (3, 6))
    ixx, iyy, izz = v[:3]
    ixy, ixz, iyz = v[3:] if len(v) == 6 else (0.0, 0.0, 0.0)
    return np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _number(x, where: str) -> float:
    if not _is_number(x) or not math.isfinite(x):
        raise ModelError(f"{where}: expected a finite number, got {x!r}")
    return float(x)


def _numbers(x, where: str, lengths=(3,)) -> list[float]:
    if not isinstance(x, list) or len(x) not in lengths or not all(_is_number(a) and math.isfinite(a) for a in x):
        raise ModelError(f"{where}: expected a list of {' or '.join(map(str, lengths))} finite numbers, got {x!r}")
    return [float(a) for a in x]


def _string(x, where: str) -> str:
    if not isinstance(x, str) or not x:
        raise ModelError(f"{where}: expected a non-empty string, got {x!r}")
    return x


def _check_keys(table: Any, allowed: set[str], where: str) -> dict:
    if not isinstance(table, dict):
        raise ModelError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ModelError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return table


def _points(table: Any, where: str) -> dict[str, np.ndarray]:
    if not isinstance(table, dict):
        raise ModelError(f"{where}: expected a table of name = [x, y, z], got {table!r}")
    return {k: np.array(_numbers(v, f"{where}.{k}")) for k, v in table.items()}


def _segment(d: Any, k: int) -> Segment:
    where = f"segment #{k + 1}"
    if isinstance(d, dict) and isinstance(d.get("name"), str):
        where = f"segment {d['name']!r}"
    d = _check_keys(d, SEGMENT_KEYS, where)
    for req in ("name", "parent", "joint"):
        if req not in d:
            raise ModelError(f"{where}: missing key {req!r}")
    name = _string(d["name"], f"{where}: name")
    parent = _string(d["parent"], f"{where}: parent")
    jtype = _string(d["joint"], f"{where}: joint")
    if jtype not in JOINT_NQ_NV:
        raise ModelError(f"{where}: joint: unknown type {jtype!r} (expected one of {', '.join(JOINT_NQ_NV)})")
    jt = joint_type(jtype)
    for key, needed in (("axis", jt.AXIS_PARAMETER), ("pitch", jt.PITCH_PARAMETER)):
        if needed and key not in d:
            raise ModelError(f"{where}: a {jtype} joint needs {key!r}")
        if not needed and key in d:
            raise ModelError(f"{where}: a {jtype} joint takes no {key!r}")
    axis = np.array(_numbers(d.get("axis", [0.0, 0.0, 1.0]), f"{where}: axis"))
    norm = np.linalg.norm(axis)
    if norm < 1e-9:
        raise ModelError(f"{where}: axis must be non-zero")
    limits = _check_keys(d.get("limits", {}), LIMIT_KEYS, f"{where}: limits")
    lim = {key: _number(val, f"{where}: limits.{key}") for key, val in limits.items()}
    if "notes" in d and not isinstance(d["notes"], (str, list)):
        raise ModelError(f"{where}: notes must be a string or a list of strings")
    joint = Joint(
        type=jtype,
        axis=axis / norm,
        rotation=rpy_matrix(_numbers(d.get("rpy", [0.0, 0.0, 0.0]), f"{where}: rpy")),
        translation=np.array(_numbers(d.get("origin", [0.0, 0.0, 0.0]), f"{where}: origin")),
        lower=lim.get("lower", -np.inf), upper=lim.get("upper", np.inf),
        velocity=lim.get("velocity", np.inf), effort=lim.get("effort", np.inf),
        pitch=_number(d["pitch"], f"{where}: pitch") if "pitch" in d else 0.0,
    )
    return Segment(
        name=name,
        parent=None if parent == WORLD else parent,
        joint=joint,
        joint_name=_string(d["joint_name"], f"{where}: joint_name") if "joint_name" in d else name,
        mass=_number(d.get("mass", 0.0), f"{where}: mass"),
        com=np.array(_numbers(d.get("com", [0.0, 0.0, 0.0]), f"{where}: com")),
        inertia=inertia_matrix(d.get("inertia", [0.0, 0.0, 0.0]), f"{where}: inertia"),
        markers=_points(d.get("markers", {}), f"{where}: markers"),
        contacts=_points(d.get("contacts", {}), f"{where}: contacts"),
    )


def _actuator(d: Any, k: int) -> Actuator:
    where = f"actuator {d.get('name')!r}" if isinstance(d, dict) else f"actuator #{k + 1}"
    d = _check_keys(d, ACTUATOR_KEYS, where)
    for req in ("name", "joint"):
        if req not in d:
            raise ModelError(f"{where}: missing key {req!r}")
    return Actuator(
        name=_string(d["name"], f"{where}: name"),
        joint=_string(d["joint"], f"{where}: joint"),
        gear_ratio=_number(d.get("gear_ratio", 1.0), f"{where}: gear_ratio"),
        torque_limit=_number(d["torque_limit"], f"{where}: torque_limit") if "torque_limit" in d else np.inf,
        velocity_limit=_number(d["velocity_limit"], f"{where}: velocity_limit") if "velocity_limit" in d else np.inf,
        rotor_inertia=_number(d.get("rotor_inertia", 0.0), f"{where}: rotor_inertia"),
    )


def model_from_dict(data: dict, name: str = "model") -> Model:
    """Build a tree Model from the parsed TOML table `data` (docs/models.md); ModelError on any
    problem, naming the key or segment. `name` is used when the table has no ``name``."""
    _check_keys(data, TOP_KEYS, "top level")
    if data.get("kind", "tree") != "tree":
        raise ModelError(f"kind: expected 'tree' or 'linkage', got {data.get('kind')!r}")
    segs = data.get("segment")
    if not isinstance(segs, list) or not segs:
        raise ModelError("expected at least one [[segment]] table")
    acts = data.get("actuator", [])
    if not isinstance(acts, list):
        raise ModelError("actuator: expected [[actuator]] tables")
    return Model(
        name=_string(data.get("name", name), "name"),
        segments=tuple(_segment(d, k) for k, d in enumerate(segs)),
        actuators=tuple(_actuator(d, k) for k, d in enumerate(acts)),
        gravity=np.array(_numbers(data.get("gravity", list(GRAVITY)), "gravity")),
        source=str(data.get("source", "")),
    )


def resolve(path_or_name: str | Path) -> Path:
    """A model file path: an existing path as given, else the shipped ``configs/models/NAME.toml``."""
    p = Path(path_or_name)
    if p.suffix or p.exists():
        if not p.is_file():
            raise FileNotFoundError(f"model file {str(p)!r} not found")
        return p
    import configs

    try:
        return configs.path(f"models/{path_or_name}.toml")
    except FileNotFoundError:
        raise FileNotFoundError(f"no model file {str(p)!r} and no shipped model named {str(path_or_name)!r} "
                                f"under configs/models/") from None


def read_toml(path: Path) -> dict:
    """The parsed TOML file; ModelError naming the file if it is not valid TOML."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ModelError(f"{path}: not valid TOML: {e}") from None


def load_model(path_or_name: str | Path):
    """Load a model from a TOML file path or a shipped model name.

    Returns a `Model` for a tree, or what ``dynamics.linkage.load_linkage(data, source)`` returns
    for ``kind = "linkage"``. Raises ModelError (a ValueError) with a one-line message starting
    with the file name for a malformed or invalid file, FileNotFoundError when absent.
    """
    path = resolve(path_or_name)
    data = read_toml(path)
    if data.get("kind") == "linkage":
        from .linkage import load_linkage

        return load_linkage(data, str(path))
    try:
        return model_from_dict(data, name=path.stem)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
