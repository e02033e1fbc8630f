"""Robot controller configuration (``configs/jansen.toml``, ``configs/exoskeleton.toml``): which model
the synergies are built for, the library's grid, the loop's rate and gains and the safety limits.

Validated on load: an unknown or missing key or a value out of range is a `RobotConfigError` with one
line ``FILE: dotted.key = value: what was expected``. Units SI (m/s, rad, rad/s, N m, Hz, s); paths
relative to the working directory. Every key is documented in docs/controller.md.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import configs

ROBOT_KINDS = ("jansen", "biped", "exoskeleton")


class RobotConfigError(ValueError):
    """A robot config is missing, unreadable or invalid (one line naming file and key)."""


@dataclass(frozen=True)
class Limits:
    """Per-actuator limits (tuples of A values; position limits None for a continuous crank)."""

    position_min: tuple[float, ...] | None
    position_max: tuple[float, ...] | None
    velocity: tuple[float, ...]
    torque: tuple[float, ...]
    slew: tuple[float, ...]           # rad/s: the largest rate of change of the position setpoint
    torque_slew: tuple[float, ...]    # N m/s: the largest rate of change of the torque command
    stale_s: float                    # s: sensor data older than this is a safety event
    min_margin: float                 # m: ZMP stability-margin guard (biped / exoskeleton)
    zmp_stale_s: float = 0.2          # s: a ZMP stream older than this stops a guarded walk
    margin_tolerance: float = 0.01    # m: how far the measured margin may fall below a plan nearer the edge
    margin_window_s: float = 0.1      # s: the plan taken around a ZMP sample (its lag, the phase's error)


@dataclass(frozen=True)
class RobotConfig:
    """A parsed robot config (module doc)."""

    source: str
    robot: str
    model: str
    actuators: tuple[str, ...]
    library: Path
    speeds: tuple[float, ...]
    turns: tuple[float, ...]
    profiles: tuple[str, ...]
    samples: int
    contact: dict
    rate_hz: float
    kp: tuple[float, ...]
    kd: tuple[float, ...]
    limits: Limits
    biped: "BipedGrid | None" = None
    phase_gain: float = 0.0           # 1/s: the nominal's clock pulled to the measured gait's phase (0: a clock)


@dataclass(frozen=True)
class BipedGrid:
    """The semi-inverse grid of a biped / exoskeleton config ([synergies] scales, periods, zmp_laws,
    double_support, gait; [biped] joint names): step scales S, stride periods T (s), ZMP laws per nominal
    as (single_l, double_l, single_r, double_r) (equal sides: symmetric gait), double support p (% of
    the stride; None: the gait cycle's own), the gait-cycle CSV (None: the shipped one), the model's
    hips, knees, ankles (left, right), trunk joint and feet segments, roll-over radius (m, None: default),
    assistance: the share of each actuated joint's torque the motors supply (0 < a <= 1; an exoskeleton's
    wearer supplies the rest, 1 - a; 1 for a robot that carries its whole weight); frontal: solve the
    frontal roll too (the lateral ZMP follows its law; dynamics.synthesis.semi_inverse)."""

    scales: tuple[float, ...]
    periods: tuple[float, ...]
    laws: tuple[tuple[int, int, int, int], ...]
    double_support: float | None
    gait: str | None
    hips: tuple[str, str]
    knees: tuple[str, str]
    ankles: tuple[str, str]
    trunk: str
    feet: tuple[str, str]
    roll: float | None
    assistance: float = 1.0
    frontal: bool = False


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, key: str, value, what: str) -> RobotConfigError:
        return RobotConfigError(f"{self.source}: {key} = {value!r}: {what}")

    def table(self, data: dict, key: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
        t = data.get(key.rsplit(".", 1)[-1], {})
        if not isinstance(t, dict):
            raise self.err(key, t, "expected a table")
        for k in t:
            if k not in allowed:
                raise self.err(f"{key}.{k}", t[k], f"unknown key (expected one of {', '.join(sorted(allowed))})")
        for k in required:
            if k not in t:
                raise self.err(f"{key}.{k}", None, "missing required key")
        return t

    def num(self, t: dict, key: str, name: str, default=None, gt=None, ge=None) -> float:
        v = t.get(name, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.err(f"{key}.{name}", v, "expected a finite number")
        if (gt is not None and not v > gt) or (ge is not None and not v >= ge):
            raise self.err(f"{key}.{name}", v, f"expected a number {'>' if gt is not None else '>='} {gt if gt is not None else ge}")
        return float(v)

    def nums(self, t: dict, key: str, name: str, n: int | None, default=None, gt=None) -> tuple[float, ...]:
        v = t.get(name, default)
        if not isinstance(v, list) or not v or (n is not None and len(v) != n):
            raise self.err(f"{key}.{name}", v, f"expected a list of {n or 'one or more'} numbers")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or (gt is not None and not x > gt):
                raise self.err(f"{key}.{name}", v, f"expected finite numbers{f' > {gt}' if gt is not None else ''}")
        return tuple(float(x) for x in v)


def load_robot(path_or_name: str | Path) -> RobotConfig:
    """Read a robot config: a path, or a shipped name (``jansen`` -> configs/jansen.toml)."""
    p = Path(path_or_name)
    if not p.suffix and not p.exists():
        try:
            p = configs.path(f"{path_or_name}.toml")
        except FileNotFoundError:
            raise RobotConfigError(f"no robot config {str(path_or_name)!r} (a file, or a shipped name such as jansen)") from None
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise RobotConfigError(f"{p}: cannot read ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise RobotConfigError(f"{p}: not valid TOML: {e}") from None
    c = _Ctx(str(p))
    top = c.table({"": data}, "", {"kind", "robot", "model", "description", "actuators", "synergies", "loop", "limits",
                                   "biped"},
                  {"kind", "robot", "model", "actuators"})
    if top["kind"] != "robot":
        raise c.err("kind", top["kind"], 'expected "robot"')
    if top["robot"] not in ROBOT_KINDS:
        raise c.err("robot", top["robot"], f"expected one of {', '.join(ROBOT_KINDS)}")
    acts = top["actuators"]
    if not isinstance(acts, list) or not acts or not all(isinstance(a, str) and a for a in acts) or len(set(acts)) != len(acts):
        raise c.err("actuators", acts, "expected a list of distinct actuator (motor) names")
    A = len(acts)
    syn = c.table(data, "synergies", {"library", "speeds", "turns", "profiles", "samples", "contact", "scales",
                                      "periods", "zmp_laws", "double_support", "gait"})
    contact = syn.get("contact", {"kind": "hunt_crossley_constant", "stiffness": 2e4, "damping": 10.0})
    if not isinstance(contact, dict) or "kind" not in contact or "stiffness" not in contact:
        raise c.err("synergies.contact", contact, "expected a table with kind and stiffness (dynamics.contact.NormalLaw)")
    profiles = syn.get("profiles", ["constant"])
    if not isinstance(profiles, list) or not profiles or not all(x in ("constant", "optimised") for x in profiles):
        raise c.err("synergies.profiles", profiles, 'expected a list of "constant" and/or "optimised"')
    biped = _biped(c, data, syn) if top["robot"] != "jansen" else None
    samples = syn.get("samples", 720)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 64:
        raise c.err("synergies.samples", samples, "expected an integer >= 64 phases per cycle")
    loop = c.table(data, "loop", {"rate_hz", "kp", "kd", "phase_gain"})
    lim = c.table(data, "limits", {"position_min", "position_max", "velocity", "torque", "slew", "torque_slew",
                                   "stale_s", "min_margin", "zmp_stale_s", "margin_tolerance", "margin_window_s"},
                  {"velocity", "torque", "slew", "torque_slew"})
    pmin = c.nums(lim, "limits", "position_min", A) if "position_min" in lim else None
    pmax = c.nums(lim, "limits", "position_max", A) if "position_max" in lim else None
    if (pmin is None) != (pmax is None) or (pmin and any(a >= b for a, b in zip(pmin, pmax))):
        raise c.err("limits.position_max", pmax, "expected position_min and position_max together, min < max")
    limits = Limits(position_min=pmin, position_max=pmax,
                    velocity=c.nums(lim, "limits", "velocity", A, gt=0), torque=c.nums(lim, "limits", "torque", A, gt=0),
                    slew=c.nums(lim, "limits", "slew", A, gt=0), torque_slew=c.nums(lim, "limits", "torque_slew", A, gt=0),
                    stale_s=c.num(lim, "limits", "stale_s", 0.02, gt=0), min_margin=c.num(lim, "limits", "min_margin", 0.0, ge=0),
                    zmp_stale_s=c.num(lim, "limits", "zmp_stale_s", 0.2, gt=0),
                    margin_tolerance=c.num(lim, "limits", "margin_tolerance", 0.01, ge=0),
                    margin_window_s=c.num(lim, "limits", "margin_window_s", 0.1, gt=0))
    return RobotConfig(source=str(p), robot=top["robot"], model=str(top["model"]), actuators=tuple(acts),
                       library=Path(str(syn.get("library", f"synergies/{top['robot']}"))).expanduser(),
                       speeds=c.nums(syn, "synergies", "speeds", None, default=[0.3], gt=0),
                       turns=c.nums(syn, "synergies", "turns", None, default=[0.0]),
                       profiles=tuple(profiles), samples=samples, contact=dict(contact),
                       rate_hz=c.num(loop, "loop", "rate_hz", 500.0, gt=0),
                       kp=c.nums(loop, "loop", "kp", A, default=[1.0] * A),
                       kd=c.nums(loop, "loop", "kd", A, default=[0.1] * A), limits=limits, biped=biped,
                       phase_gain=c.num(loop, "loop", "phase_gain", 0.0, ge=0))


def _biped(c: _Ctx, data: dict, syn: dict) -> BipedGrid:
    """The [synergies] grid and [biped] joints of a biped / exoskeleton config (BipedGrid doc)."""
    b = c.table(data, "biped", {"hips", "knees", "ankles", "trunk", "feet", "roll", "assistance", "frontal"},
                {"hips", "knees", "ankles", "trunk", "feet"})

    def pair(k):
        v = b[k]
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) and x for x in v)):
            raise c.err(f"biped.{k}", v, "expected [left, right] names")
        return tuple(v)

    if not isinstance(b["trunk"], str) or not b["trunk"]:
        raise c.err("biped.trunk", b["trunk"], "expected the trunk joint's name")
    laws = syn.get("zmp_laws", [[1, 1]])
    ok = isinstance(laws, list) and laws and all(
        isinstance(x, list) and len(x) in (2, 4) and all(isinstance(k, int) and not isinstance(k, bool) for k in x)
        and all(1 <= k <= 6 for k in x[0::2]) and all(1 <= k <= 3 for k in x[1::2]) for x in laws)
    if not ok:
        raise c.err("synergies.zmp_laws", laws, "expected a list of [single 1..6, double 1..3] or "
                    "[single_l, double_l, single_r, double_r]")
    if any(len(x) == 4 and 6 in x[0::2] and x[0] != x[2] for x in laws):
        raise c.err("synergies.zmp_laws", laws, "single-support law 6 (the foot's contacts) goes on both sides or "
                    "neither")
    p = syn.get("double_support")
    if p is not None:
        p = c.num(syn, "synergies", "double_support", ge=0)
        if not p < 50:
            raise c.err("synergies.double_support", p, "expected a share of the stride in % below 50")
    gait = syn.get("gait")
    if gait is not None and not isinstance(gait, str):
        raise c.err("synergies.gait", gait, "expected the path of a gait-cycle CSV")
    assistance = c.num(b, "biped", "assistance", 1.0, gt=0)
    if assistance > 1:
        raise c.err("biped.assistance", assistance, "expected the motors' share of the joint torque, 0 < a <= 1")
    frontal = b.get("frontal", False)
    if not isinstance(frontal, bool):
        raise c.err("biped.frontal", frontal, "expected true or false")
    return BipedGrid(scales=c.nums(syn, "synergies", "scales", None, default=[1.0], gt=0),
                     periods=c.nums(syn, "synergies", "periods", None, default=[1.1], gt=0),
                     laws=tuple(tuple(x * 2 if len(x) == 2 else x) for x in laws), double_support=p, gait=gait,
                     hips=pair("hips"), knees=pair("knees"), ankles=pair("ankles"), trunk=b["trunk"], feet=pair("feet"),
                     roll=c.num(b, "biped", "roll", gt=0) if "roll" in b else None, assistance=assistance,
                     frontal=frontal)
