"""Jansen-walker nominals: `dynamics.synthesis.crank` programmes packed as synergies (format.py).

Two actuators (a robot config with actuators left and right shaft, rad, + forward), each sampled
over its own revolution; contact forces (M, 12): the six feet of the left shaft at the left phase,
then the right shaft's. One actuator (a walker whose single shaft turns every crank, as the sim
robot of daq.simulated_robot): the whole walker on that shaft, turn rate 0 only. No ZMP law is
prescribed for a crank programme: zmp_max_deviation is null and the zmp path NaN; min_margin is the
chassis centre's margin in the feet's support polygon (dynamics.synthesis.crank.CrankProgramme).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamics.contact import NormalLaw
from dynamics.synthesis.crank import (ProgrammeError, ShaftProgramme, SpeedProfile, crank_programme, load_walker,
                                      optimise_profile, shaft_programme, support_min_margin)

from .format import Synergy


def name_of(speed: float, turn: float, profile: str) -> str:
    return f"jansen_v{speed:.2f}_r{turn:+.2f}_{profile}"


def jobs(cfg) -> list[dict]:
    """One job per (speed, turn, profile) of the robot config's grid (plain dicts: picklable)."""
    shafts = len(cfg.actuators)
    if shafts not in (1, 2) or (shafts == 1 and any(cfg.turns)):
        raise ValueError(f"{cfg.source}: a Jansen walker has one shaft (turns = [0.0] only) or a left and a right "
                         f"shaft; got actuators {list(cfg.actuators)} and turns {list(cfg.turns)}")
    return [{"robot": "jansen", "model": cfg.model, "speed": v, "turn": r, "profile": p, "samples": cfg.samples,
             "contact": cfg.contact, "name": name_of(v, r, p), "actuators": list(cfg.actuators)}
            for v in cfg.speeds for r in cfg.turns for p in cfg.profiles]


def build(job: dict) -> Synergy | None:
    """The nominal of one job; None for an "optimised" profile that does not cut both the peak foot
    force and the absolute energy per cycle of the constant programme at the same speed and turn."""
    walker = load_walker(job["model"])
    law = NormalLaw(**job["contact"])
    acts = tuple(job.get("actuators", ("left_shaft", "right_shaft")))

    def make(profile):
        if len(acts) == 2:
            return crank_programme(walker, job["speed"], job["turn"], profile, law, job["samples"])
        return single_shaft(walker, job["speed"], profile, law, job["samples"])

    const = make(SpeedProfile())
    prog = const
    if job["profile"] == "optimised":
        prog = make(optimise_profile(walker, job["speed"], law, samples=job["samples"]))
        if not (prog.peak_contact_force < const.peak_contact_force and prog.energy_absolute < const.energy_absolute):
            return None
    return synergy_of(prog, job["name"], job["contact"], const, acts)


@dataclass(frozen=True)
class SingleShaft:
    """A walker on one shaft: the figures `synergy_of` reads, from one ShaftProgramme of side "both"."""

    walker: object
    speed: float
    profile: SpeedProfile
    shaft: ShaftProgramme
    min_margin: float

    turn = 0.0
    shafts = property(lambda self: (self.shaft,))
    peak_torque = property(lambda self: float(np.abs(self.shaft.torque).max()))
    peak_contact_force = property(lambda self: float(self.shaft.foot_force.max()))
    energy_net = property(lambda self: self.shaft.energy_net)
    energy_positive = property(lambda self: self.shaft.energy_positive)
    energy_absolute = property(lambda self: self.shaft.energy_absolute)


def single_shaft(walker, speed: float, profile: SpeedProfile, law: NormalLaw, samples: int) -> SingleShaft:
    """The programme of a walker whose one shaft turns every crank (side "both")."""
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
        raise ProgrammeError(f"speed: expected a finite walking speed > 0 m/s, got {speed!r}")
    p = shaft_programme(walker, "both", walker.speed_to_rate(speed), profile, law, samples)
    return SingleShaft(walker, float(speed), profile, p, support_min_margin([p], walker.track))


def synergy_of(prog, name: str, contact: dict, const=None,
               actuators: tuple[str, ...] = ("left_shaft", "right_shaft")) -> Synergy:
    """A `dynamics.synthesis.crank.CrankProgramme` (or a `SingleShaft`) as a nominal (module doc);
    const: the constant programme at the same speed and turn, whose figures are kept for comparison."""
    const = const or prog
    walker = prog.walker
    sh = prog.shafts
    meta = {
        "name": name, "robot": "jansen", "model": walker.name, "model_hash": walker.model_hash,
        "kind": "crank_programme", "gait": "walk", "speed": prog.speed, "turn": prog.turn,
        "period": max(p.period for p in sh), "S": None, "T": None, "zmp_law": None, "double_support": None,
        "asymmetry": float(sh[-1].period / sh[0].period - 1.0),
        "profile": prog.profile.name, "profile_coef": list(prog.profile.coef),
        "contact_law": dict(contact),
        "zmp_max_deviation": None, "min_margin": prog.min_margin,
        "peak_torque": prog.peak_torque, "peak_contact_force": prog.peak_contact_force,
        "energy_net_per_cycle": prog.energy_net, "energy_positive_per_cycle": prog.energy_positive,
        "energy_abs_per_cycle": prog.energy_absolute,
        "constant_peak_contact_force": const.peak_contact_force,
        "constant_energy_abs_per_cycle": const.energy_absolute,
        "safe_switch": "any phase (both shafts keep turning forward; the blend limits the setpoint slew)",
    }
    col = lambda key: np.column_stack([getattr(p, key) for p in sh])  # noqa: E731
    return Synergy(meta=meta, actuators=tuple(actuators), period=np.array([p.period for p in sh]),
                   wrap=np.full(len(sh), 2.0 * np.pi), u=sh[0].u, q=col("theta"), qd=col("theta_d"), qdd=col("theta_dd"),
                   tau=col("torque"), inertia=col("inertia"), contact_force=np.hstack([p.foot_force for p in sh]),
                   zmp=np.full((sh[0].u.size, 2), np.nan))
