"""Planar closed-chain linkage description and its TOML loader (methods.md c.1-c.2, models.md 2-3).

Planar frame: x forward, y up, angles from +x counter-clockwise, gravity (0, -g). Each body is a
bar with its reference point at the centre, coordinates q_i = [x_i, y_i, phi_i]; its "-" end is
R_i - (L_i/2) u_i and its "+" end R_i + (L_i/2) u_i, u_i = (cos phi_i, sin phi_i).

The constraint rows are, in this order: pins (2 rows each: revolute between two body points, or
a body point pinned to a fixed ground point), distances (1 row each, squared form
|r_i - r_j|^2 - L^2), angles (1 row each, phi_j - phi_i - value; an absolute angle when i is the
ground; also x or y coordinates: x_j - x_i - value). A driver is a distance, angle or coordinate
row that also depends on the scalar input s (crank angle in rad, actuator extension or slider
position in m): angle driver phi_j - phi_i - value - s, distance driver |d|^2 - (L0 + s)^2.
With one input the driven linkage is kinematically determined (0 DOF).

`load_linkage(data, source)` builds a `Linkage` from a parsed TOML dict with kind = "linkage"
(format in docs/linkage.md); `read_linkage(name_or_path)` reads and loads one. This module is the
only one of the subpackage that reads files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..loader import read_toml, resolve
from ..model import G

GROUND = "ground"


class LinkageError(ValueError):
    """A linkage file or argument is invalid; the message names the file, key or argument."""


class AssemblyError(LinkageError):
    """The linkage cannot be assembled at the requested input (circles do not intersect)."""


class SingularConfigurationError(LinkageError):
    """The position solve met a singular configuration (branch point, dead centre, no assembly)."""


@dataclass(frozen=True)
class Body:
    """Uniform bar: full length L (m), mass m (kg), central inertia J (kg m^2, default m L^2/12)."""

    name: str
    length: float
    mass: float
    inertia: float


@dataclass(frozen=True)
class AssemblyStep:
    """One constructive-assembly step (methods.md c.7) placing joint point `point`.

    kind "crank":  point = centre + radius (cos(s + phase), sin(s + phase)); args (centre, radius, phase)
    kind "circle": point = circ(P0, r0, P1, r1, sign);                 args (P0, r0, P1, r1, sign)
    kind "slider": point = (P0_x + sign sqrt(r^2 - (y - P0_y)^2), y);  args (P0, r, y, sign)
    kind "extend": point = P1 + d (P1 - P0)/|P1 - P0|;                args (P0, P1, d)
    kind "offset": point = P0 + (dx, dy);                              args (P0, dx, dy)
    """

    point: str
    kind: str
    args: tuple


@dataclass(frozen=True, eq=False)
class Linkage:
    """A planar absolute-coordinate linkage (constant; algorithms take it as first argument).

    Arrays (nb bodies, n = 3 nb coordinates, m constraint rows; body index nb is the ground):
    pin_bi, pin_bj (P,) int; pin_ui, pin_uj (P, 2) body-frame vectors centre -> point (m) (for a
    ground pin, pin_uj is the fixed point in the planar frame); dist_* likewise plus dist_length
    (D,) and dist_driven (D,) bool; coord_bi, coord_bj, coord_axis (A,) int (axis 0 x, 1 y, 2 phi),
    coord_value (A,) m or rad, coord_driven (A,) bool. mass_diag (n,) = diag(M);
    gravity_force (n,) = h_gravity = [0, -m_i g, 0, ...].
    """

    name: str
    source: str
    bodies: tuple[Body, ...]
    row_names: tuple[str, ...]
    pin_bi: np.ndarray
    pin_ui: np.ndarray
    pin_bj: np.ndarray
    pin_uj: np.ndarray
    dist_bi: np.ndarray
    dist_ui: np.ndarray
    dist_bj: np.ndarray
    dist_uj: np.ndarray
    dist_length: np.ndarray
    dist_driven: np.ndarray
    coord_bi: np.ndarray
    coord_bj: np.ndarray
    coord_axis: np.ndarray
    coord_value: np.ndarray
    coord_driven: np.ndarray
    points: dict[str, tuple[int, tuple[float, float]]]
    body_ends: tuple[tuple[str, str], ...]
    ground_points: dict[str, tuple[float, float]]
    assembly: tuple[AssemblyStep, ...]
    foot: str
    pivot: str
    gravity: float
    input_kind: str
    metadata: dict = field(default_factory=dict)

    @property
    def n_bodies(self) -> int:
        return len(self.bodies)

    @property
    def n_coords(self) -> int:
        return 3 * len(self.bodies)

    @property
    def n_rows(self) -> int:
        return len(self.row_names)

    @cached_property
    def driver_rows(self) -> np.ndarray:
        """Indices of the rows that depend on the input s."""
        p, d = 2 * len(self.pin_bi), len(self.dist_bi)
        return _frozen(np.concatenate([p + np.flatnonzero(self.dist_driven),
                                       p + d + np.flatnonzero(self.coord_driven)]))

    @cached_property
    def kinematic_rows(self) -> np.ndarray:
        """Indices of the rows that do not depend on the input (the free linkage)."""
        return _frozen(np.setdiff1d(np.arange(self.n_rows), self.driver_rows))

    @cached_property
    def mass_diag(self) -> np.ndarray:
        return _frozen(np.array([v for b in self.bodies for v in (b.mass, b.mass, b.inertia)]))

    @cached_property
    def gravity_force(self) -> np.ndarray:
        return _frozen(np.array([v for b in self.bodies for v in (0.0, -b.mass * self.gravity, 0.0)]))

    @cached_property
    def components(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """(coordinate indices, row indices) of each independent sub-linkage (bodies connected by
        constraints other than through the ground; the legs of a walker). Each block of Phi_q is
        square for a driven linkage, so the solves split into independent blocks; a single block
        when the linkage is one connected mechanism or a block would not be square."""
        nb = self.n_bodies
        parent = list(range(nb + 1))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        pairs = [(int(i), int(j)) for i, j in zip(np.concatenate([self.pin_bi, self.dist_bi, self.coord_bi]),
                                                  np.concatenate([self.pin_bj, self.dist_bj, self.coord_bj]))]
        for i, j in pairs:
            if i != nb and j != nb:
                parent[find(i)] = find(j)
        row_body = [i if i != nb else j for i, j in pairs]
        row_body = [b for b in row_body[:len(self.pin_bi)] for _ in (0, 1)] + row_body[len(self.pin_bi):]
        roots = sorted({find(b) for b in range(nb)})
        comps = []
        for r in roots:
            bodies = [b for b in range(nb) if find(b) == r]
            cols = np.array([3 * b + k for b in bodies for k in range(3)])
            rows = np.array([k for k, b in enumerate(row_body) if find(b) == r])
            if rows.size != cols.size:
                return ((np.arange(self.n_coords), np.arange(self.n_rows)),)
            comps.append((_frozen(cols), _frozen(rows)))
        return tuple(comps)

    def point(self, name: str) -> tuple[int, np.ndarray]:
        """(body index, body-frame vector) of a named moving point; LinkageError if unknown."""
        if name not in self.points:
            raise LinkageError(f"{self.source}: unknown point {name!r} (known: {sorted(self.points)})")
        b, u = self.points[name]
        return b, np.asarray(u, dtype=float)

    def pivot_position(self) -> np.ndarray:
        """Fixed pivot used for the effective leg length, shape (2,), m."""
        return np.asarray(self.ground_points[self.pivot], dtype=float)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# ----------------------------------------------------------------------------------------------
# TOML loading

_TOP_KEYS = {"kind", "name", "description", "source", "gravity", "ground", "bodies", "joints",
             "driver", "assembly", "foot", "pivot", "legs", "chassis", "notes", "ground_penetration",
             "o2_choice"}


def _err(source: str, key: str, msg: str) -> LinkageError:
    return LinkageError(f"{source}: {key}: {msg}")


def _num(source: str, key: str, v: Any, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _err(source, key, f"expected a finite number, got {v!r}")
    if positive and v <= 0:
        raise _err(source, key, f"expected a positive number, got {v!r}")
    if nonneg and v < 0:
        raise _err(source, key, f"expected a non-negative number, got {v!r}")
    return float(v)


def _vec2(source: str, key: str, v: Any) -> tuple[float, float]:
    if not isinstance(v, list) or len(v) != 2:
        raise _err(source, key, f"expected [x, y] in m, got {v!r}")
    return (_num(source, key, v[0]), _num(source, key, v[1]))


def _table_list(source: str, data: dict, key: str, required: bool = True) -> list[dict]:
    v = data.get(key, [])
    if required and not v:
        raise _err(source, key, "missing: expected an array of tables [[" + key + "]]")
    if not isinstance(v, list) or not all(isinstance(t, dict) for t in v):
        raise _err(source, key, "expected an array of tables [[" + key + "]]")
    return v


def load_linkage(data: dict, source: str) -> Linkage:
    """Build a `Linkage` from a parsed TOML dict with kind = "linkage" (docs/linkage.md).

    A file with [[legs]] is a walker: copies of leg files (mirrored and phase-shifted) driven by one
    shaft angle. `source` names the file in error messages.
    """
    if not isinstance(data, dict):
        raise LinkageError(f"{source}: expected a TOML table")
    if data.get("kind") != "linkage":
        what = "a tree model (no kind key)" if data.get("kind") is None else f"kind {data.get('kind')!r}"
        raise _err(source, "kind", f"expected \"linkage\" (a closed-chain leg or walker), this file is {what}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _err(source, sorted(unknown)[0], f"unknown key (allowed: {sorted(_TOP_KEYS)})")
    if "legs" in data:
        data = _compose_walker(data, source)
    model = _build(data, source)
    from .assembly import check_closes  # the assembly module imports this one

    check_closes(model)
    return model


def read_linkage(name_or_path: str | Path) -> Linkage:
    """Read a linkage TOML file: a path, or a shipped model name ("jansen_leg" -> configs/models)."""
    p = resolve(name_or_path)
    return load_linkage(read_toml(p), str(p))


def read_crank_legs(name_or_path: str | Path) -> list[tuple[Linkage, float]]:
    """(leg linkage, crank phase rad) of every leg on the crank of a leg or walker TOML file (a
    path, or a shipped model name as for `read_linkage`): a leg file is one leg at phase 0.

    A walker's ``[[legs]]`` entries that differ only by phase share one Linkage (built at phase 0,
    a one-leg walker of the same file), so a crank plant (`dynamics.plants.crank.crank_plant`)
    tabulates each distinct leg once.
    """
    p = resolve(name_or_path)
    data, source = read_toml(p), str(p)
    if not isinstance(data, dict) or "legs" not in data:
        return [(load_linkage(data, source), 0.0)]
    built: dict[str, Linkage] = {}
    legs = []
    for k, leg in enumerate(_table_list(source, data, "legs")):
        key = repr((leg.get("model"), leg.get("mirror", False)))
        if key not in built:
            one = {**{n: v for n, v in data.items() if n != "legs"},
                   "name": f"{data.get('name', p.stem)}.{leg.get('prefix', k)}", "legs": [{**leg, "phase_deg": 0.0}]}
            built[key] = load_linkage(one, source)
        legs.append((built[key], math.radians(_num(source, f"legs[{k}].phase_deg", leg.get("phase_deg", 0.0)))))
    return legs


def _parse_end(source: str, key: str, spec: Any, body_index: dict[str, int]) -> tuple[int, str]:
    """'AB+' -> (index of body AB, '+')."""
    if not isinstance(spec, str) or len(spec) < 2 or spec[-1] not in "+-":
        raise _err(source, key, f"expected a body end like \"AB+\" or \"AB-\", got {spec!r}")
    if spec[:-1] not in body_index:
        raise _err(source, key, f"unknown body {spec[:-1]!r} in {spec!r}")
    return body_index[spec[:-1]], spec[-1]


def _build(data: dict, source: str) -> Linkage:
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise _err(source, "name", "expected a non-empty string")
    gravity = _num(source, "gravity", data.get("gravity", G), nonneg=True)
    ground = data.get("ground")
    if not isinstance(ground, dict) or not ground:
        raise _err(source, "ground", "expected a table of fixed points, e.g. O1 = [0.0, 0.0]")
    ground_pts = {k: _vec2(source, f"ground.{k}", v) for k, v in ground.items()}

    bodies: list[Body] = []
    body_index: dict[str, int] = {}
    ends: dict[str, list[tuple[int, str]]] = {}
    for k, t in enumerate(_table_list(source, data, "bodies")):
        key = f"bodies[{k}]"
        bname = t.get("name")
        if not isinstance(bname, str) or not bname or bname in body_index:
            raise _err(source, f"{key}.name", f"expected a unique body name, got {bname!r}")
        extra = set(t) - {"name", "minus", "plus", "length", "mass", "inertia"}
        if extra:
            raise _err(source, f"{key}.{sorted(extra)[0]}", "unknown key")
        L = _num(source, f"{key}.length ({bname})", t.get("length"), positive=True)
        m = _num(source, f"{key}.mass ({bname})", t.get("mass"), nonneg=True)
        J = _num(source, f"{key}.inertia ({bname})", t.get("inertia", m * L * L / 12.0), nonneg=True)
        body_index[bname] = len(bodies)
        bodies.append(Body(bname, L, m, J))
        for side in ("minus", "plus"):
            pt = t.get(side)
            if not isinstance(pt, str) or not pt:
                raise _err(source, f"{key}.{side} ({bname})", "expected the name of the joint point")
            ends.setdefault(pt, []).append((len(bodies) - 1, "-" if side == "minus" else "+"))
    nb = len(bodies)

    def u_of(b: int, sign: str) -> tuple[float, float]:
        half = bodies[b].length / 2.0
        return (half if sign == "+" else -half, 0.0)

    pins, dists, angs = [], [], []
    pin_names, dist_names, coord_names = [], [], []
    n_drivers = 0
    for k, t in enumerate(_table_list(source, data, "joints")):
        key = f"joints[{k}]"
        typ = t.get("type")
        if typ == "pin":
            e = t.get("ends")
            if not isinstance(e, list) or len(e) != 2:
                raise _err(source, f"{key}.ends", f"expected two body ends like [\"AB+\", \"BC-\"], got {e!r}")
            (bi, si), (bj, sj) = (_parse_end(source, f"{key}.ends", x, body_index) for x in e)
            if bi == bj:
                raise _err(source, f"{key}.ends", f"a pin joins two different bodies, got {e!r}")
            pins.append((bi, u_of(bi, si), bj, u_of(bj, sj)))
            nm = t.get("name", f"pin {e[0]} {e[1]}")
            pin_names += [f"{nm} x", f"{nm} y"]
        elif typ == "ground":
            bi, si = _parse_end(source, f"{key}.end", t.get("end"), body_index)
            at = t.get("at")
            if at not in ground_pts:
                raise _err(source, f"{key}.at", f"expected a [ground] point name, got {at!r}")
            pins.append((bi, u_of(bi, si), nb, ground_pts[at]))
            nm = t.get("name", f"ground {t['end']} {at}")
            pin_names += [f"{nm} x", f"{nm} y"]
        elif typ in ("angle", "relative_angle", "coordinate"):
            driven = bool(t.get("driven", False))
            val = _num(source, f"{key}.value", t.get("value", 0.0))
            axis = 2
            if typ == "coordinate":
                axis = {"x": 0, "y": 1, "phi": 2}.get(t.get("axis"), -1)
                if axis < 0:
                    raise _err(source, f"{key}.axis", f"expected \"x\", \"y\" or \"phi\", got {t.get('axis')!r}")
            if typ in ("angle", "coordinate"):
                b = t.get("body")
                if b not in body_index:
                    raise _err(source, f"{key}.body", f"unknown body {b!r}")
                bi, bj = nb, body_index[b]
            else:
                bs = t.get("bodies")
                if not isinstance(bs, list) or len(bs) != 2 or not all(x in body_index for x in bs):
                    raise _err(source, f"{key}.bodies", f"expected two body names, got {bs!r}")
                bi, bj = body_index[bs[0]], body_index[bs[1]]
            angs.append((bi, bj, val, driven, axis))
            coord_names.append(t.get("name", f"{typ} {k}" + (" (driver)" if driven else "")))
            n_drivers += driven
        elif typ == "distance":
            e = t.get("ends")
            if not isinstance(e, list) or len(e) != 2:
                raise _err(source, f"{key}.ends", f"expected two body ends, got {e!r}")
            parsed = []
            for x in e:
                if isinstance(x, str) and x in ground_pts:
                    parsed.append((nb, ground_pts[x]))
                else:
                    b, s = _parse_end(source, f"{key}.ends", x, body_index)
                    parsed.append((b, u_of(b, s)))
            driven = bool(t.get("driven", False))
            L0 = _num(source, f"{key}.length", t.get("length"), positive=True)
            dists.append((parsed[0][0], parsed[0][1], parsed[1][0], parsed[1][1], L0, driven))
            dist_names.append(t.get("name", f"distance {k}" + (" (driver)" if driven else "")))
            n_drivers += driven
        else:
            raise _err(source, f"{key}.type",
                       f"expected one of pin, ground, distance, angle, relative_angle, coordinate, got {typ!r}")
    row_names = pin_names + dist_names + coord_names

    if n_drivers == 0:
        raise _err(source, "joints", "no driver: mark one angle or distance joint with driven = true")
    kinds = {("distance" if t.get("type") == "distance" else
              "position" if t.get("type") == "coordinate" and t.get("axis") in ("x", "y") else "angle")
             for t in data["joints"] if t.get("driven")}
    if len(kinds) != 1:
        raise _err(source, "joints", "all drivers must be of one kind (angles, distances or positions)")

    points: dict[str, tuple[int, tuple[float, float]]] = {}
    for pt, lst in ends.items():
        b, s = lst[0]
        points[pt] = (b, u_of(b, s))
    for k in ("foot", "pivot"):
        if not isinstance(data.get(k), str):
            raise _err(source, k, "expected a point name")
    if data["foot"] not in points:
        raise _err(source, "foot", f"unknown moving point {data['foot']!r}")
    if data["pivot"] not in ground_pts:
        raise _err(source, "pivot", f"expected a [ground] point name, got {data['pivot']!r}")
    n_rows = len(row_names)
    if n_rows != 3 * nb:
        raise _err(source, "joints",
                   f"{n_rows} constraint rows for {3 * nb} coordinates of {nb} bodies: a driven "
                   "planar linkage needs exactly 3 rows per body (0 degrees of freedom)")
    steps = _parse_assembly(source, data, set(ground_pts), set(points))

    def arr(rows, i, shape=None):
        a = np.array([r[i] for r in rows], dtype=float if shape else int)
        return a.reshape((len(rows),) + shape) if shape else a.reshape(len(rows))

    return Linkage(
        name=name, source=source, bodies=tuple(bodies), row_names=tuple(row_names),
        pin_bi=arr(pins, 0), pin_ui=arr(pins, 1, (2,)), pin_bj=arr(pins, 2), pin_uj=arr(pins, 3, (2,)),
        dist_bi=arr(dists, 0), dist_ui=arr(dists, 1, (2,)), dist_bj=arr(dists, 2),
        dist_uj=arr(dists, 3, (2,)), dist_length=np.array([d[4] for d in dists], dtype=float),
        dist_driven=np.array([d[5] for d in dists], dtype=bool),
        coord_bi=arr(angs, 0), coord_bj=arr(angs, 1), coord_axis=arr(angs, 4),
        coord_value=np.array([a[2] for a in angs], dtype=float),
        coord_driven=np.array([a[3] for a in angs], dtype=bool),
        points=points, body_ends=tuple((t["minus"], t["plus"]) for t in data["bodies"]),
        ground_points=ground_pts, assembly=steps, foot=data["foot"],
        pivot=data["pivot"], gravity=gravity, input_kind=kinds.pop(),
        metadata={k: data[k] for k in ("description", "source", "notes", "ground_penetration",
                                       "o2_choice", "chassis") if k in data},
    )


def _parse_assembly(source: str, data: dict, ground: set[str], moving: set[str]) -> tuple:
    steps, known = [], set(ground)
    for k, t in enumerate(_table_list(source, data, "assembly")):
        key = f"assembly[{k}]"
        pt = t.get("point")
        if pt not in moving:
            raise _err(source, f"{key}.point", f"expected a body end point name, got {pt!r}")
        kinds = [x for x in ("crank", "circle", "slider", "extend", "offset") if x in t]
        if len(kinds) != 1:
            raise _err(source, key, "expected exactly one of crank, circle, slider, extend, offset")
        kind, a = kinds[0], t[kinds[0]]

        def ref(v: Any, sub: str) -> str:
            if v not in known:
                raise _err(source, f"{key}.{sub}", f"point {v!r} is not fixed or placed by an earlier step")
            return v

        def branch() -> float:
            sign = t.get("sign")
            if sign not in (1, -1):
                raise _err(source, f"{key}.sign", f"expected +1 or -1, got {sign!r}")
            return float(sign)

        if kind == "crank":
            if not isinstance(a, list) or len(a) not in (2, 3):
                raise _err(source, f"{key}.crank", "expected [centre, radius] or [centre, radius, phase_rad]")
            args = (ref(a[0], "crank"), _num(source, f"{key}.crank", a[1], positive=True),
                    _num(source, f"{key}.crank", a[2] if len(a) == 3 else 0.0))
        elif kind == "circle":
            if not isinstance(a, list) or len(a) != 4:
                raise _err(source, f"{key}.circle", "expected [P0, r0, P1, r1]")
            args = (ref(a[0], "circle"), _num(source, f"{key}.circle", a[1], positive=True),
                    ref(a[2], "circle"), _num(source, f"{key}.circle", a[3], positive=True), branch())
        elif kind == "slider":
            if not isinstance(a, list) or len(a) != 3:
                raise _err(source, f"{key}.slider", "expected [P0, r, y_line]")
            args = (ref(a[0], "slider"), _num(source, f"{key}.slider", a[1], positive=True),
                    _num(source, f"{key}.slider", a[2]), branch())
        elif kind == "extend":
            if not isinstance(a, list) or len(a) != 3:
                raise _err(source, f"{key}.extend", "expected [P0, P1, distance]")
            args = (ref(a[0], "extend"), ref(a[1], "extend"), _num(source, f"{key}.extend", a[2]))
        else:
            if not isinstance(a, list) or len(a) != 3:
                raise _err(source, f"{key}.offset", "expected [P0, dx, dy]")
            args = (ref(a[0], "offset"), _num(source, f"{key}.offset", a[1]),
                    _num(source, f"{key}.offset", a[2]))
        steps.append(AssemblyStep(pt, kind, args))
        known.add(pt)
    missing = moving - known
    if missing:
        raise _err(source, "assembly", f"points never placed: {sorted(missing)}")
    return tuple(steps)


# ----------------------------------------------------------------------------------------------
# walkers: copies of leg files, prefixed, optionally mirrored (x -> -x about the crank centre)

def _compose_walker(data: dict, source: str) -> dict:
    legs = _table_list(source, data, "legs")
    out: dict[str, Any] = {k: data[k] for k in data if k != "legs"}
    out.update(ground={}, bodies=[], joints=[], assembly=[])
    if "driver" in data:
        raise _err(source, "driver", "a walker's legs share the input; no [driver] table")
    for k, leg in enumerate(legs):
        key = f"legs[{k}]"
        extra = set(leg) - {"model", "prefix", "phase_deg", "mirror", "side"}
        if extra:
            raise _err(source, f"{key}.{sorted(extra)[0]}", "unknown key")
        model = leg.get("model")
        if not isinstance(model, str):
            raise _err(source, f"{key}.model", "expected a leg model name or file")
        p = resolve(model if not model.endswith(".toml") else Path(source).parent / model)
        ld = read_toml(p)          # an invalid leg file: a one-line error naming it (was a raw traceback)
        if "legs" in ld:
            raise _err(source, f"{key}.model", "a leg cannot itself be a walker")
        pre = leg.get("prefix")
        if not isinstance(pre, str) or not pre:
            raise _err(source, f"{key}.prefix", "expected a non-empty string")
        phase = math.radians(_num(source, f"{key}.phase_deg", leg.get("phase_deg", 0.0)))
        mirror = leg.get("mirror", False)
        if not isinstance(mirror, bool):
            raise _err(source, f"{key}.mirror", "expected true or false")
        mx = -1.0 if mirror else 1.0
        P = lambda n: f"{pre}.{n}"  # noqa: E731
        for g, v in ld["ground"].items():
            out["ground"][P(g)] = [mx * v[0], v[1]]
        for b in ld["bodies"]:
            out["bodies"].append({**b, "name": P(b["name"]), "minus": P(b["minus"]), "plus": P(b["plus"])})
        for j in ld["joints"]:
            j2 = dict(j)
            for f in ("ends",):
                if f in j2:
                    j2[f] = [P(e) for e in j2[f]]
            if "end" in j2:
                j2["end"] = P(j2["end"])
            if "at" in j2:
                j2["at"] = P(j2["at"])
            if "body" in j2:
                j2["body"] = P(j2["body"])
            if "bodies" in j2:
                j2["bodies"] = [P(b) for b in j2["bodies"]]
            if "name" in j2:
                j2["name"] = P(j2["name"])
            if j2.get("type") == "angle":
                # mirrored absolute angle: pi - value; the input angle enters with a phase and a
                # mirrored crank angle is pi - phi, so the driver row becomes phi' - s - phase
                # where the same physical crank pin is shared (phi' = s + phase for both copies).
                if j2.get("driven"):
                    j2["value"] = j.get("value", 0.0) + phase
                else:
                    j2["value"] = (math.pi - j.get("value", 0.0)) if mirror else j.get("value", 0.0)
            elif j2.get("type") == "relative_angle" and mirror:
                j2["value"] = -j.get("value", 0.0)
            elif j2.get("type") == "coordinate" and mirror and not j2.get("driven"):
                v = j.get("value", 0.0)
                j2["value"] = {"x": -v, "phi": math.pi - v}.get(j2.get("axis"), v)
            out["joints"].append(j2)
        for s in ld["assembly"]:
            s2 = {"point": P(s["point"])}
            if "crank" in s:
                c = s["crank"]
                s2["crank"] = [P(c[0]), c[1], (c[2] if len(c) == 3 else 0.0) + phase]
            elif "circle" in s:
                c = s["circle"]
                s2["circle"] = [P(c[0]), c[1], P(c[2]), c[3]]
                s2["sign"] = -s["sign"] if mirror else s["sign"]
            elif "slider" in s:
                c = s["slider"]
                s2["slider"] = [P(c[0]), c[1], c[2]]
                s2["sign"] = -s["sign"] if mirror else s["sign"]
            elif "extend" in s:
                c = s["extend"]
                s2["extend"] = [P(c[0]), P(c[1]), c[2]]
            elif "offset" in s:
                c = s["offset"]
                s2["offset"] = [P(c[0]), mx * c[1], c[2]]
            out["assembly"].append(s2)
        if k == 0:
            out.setdefault("foot", P(ld["foot"]))
            out.setdefault("pivot", P(ld["pivot"]))
    return out
