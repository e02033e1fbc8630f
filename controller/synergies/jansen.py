"""Jansen-walker nominals: `dynamics.synthesis.crank` programmes packed as synergies (format.py).

Actuators left_shaft, right_shaft (rad, + forward), each sampled over its own revolution; contact
forces (M, 12): the six feet of the left shaft at the left phase, then the right shaft's. No ZMP law is
prescribed for a crank programme: zmp_max_deviation is null and the zmp path NaN; min_margin is the
chassis centre's margin in the feet's support polygon (dynamics.synthesis.crank.CrankProgramme).
"""
from __future__ import annotations

import numpy as np

from dynamics.contact import NormalLaw
from dynamics.synthesis.crank import SpeedProfile, crank_programme, load_walker, optimise_profile

from .format import Synergy


def name_of(speed: float, turn: float, profile: str) -> str:
    return f"jansen_v{speed:.2f}_r{turn:+.2f}_{profile}"


def jobs(cfg) -> list[dict]:
    """One job per (speed, turn, profile) of the robot config's grid (plain dicts: picklable)."""
    return [{"robot": "jansen", "model": cfg.model, "speed": v, "turn": r, "profile": p, "samples": cfg.samples,
             "contact": cfg.contact, "name": name_of(v, r, p)}
            for v in cfg.speeds for r in cfg.turns for p in cfg.profiles]


def build(job: dict) -> Synergy | None:
    """The nominal of one job; None for an "optimised" profile that does not cut both the peak foot
    force and the absolute energy per cycle of the constant programme at the same speed and turn."""
    walker = load_walker(job["model"])
    law = NormalLaw(**job["contact"])
    const = crank_programme(walker, job["speed"], job["turn"], SpeedProfile(), law, job["samples"])
    prog = const
    if job["profile"] == "optimised":
        prof = optimise_profile(walker, job["speed"], law, samples=job["samples"])
        prog = crank_programme(walker, job["speed"], job["turn"], prof, law, job["samples"])
        if not (prog.peak_contact_force < const.peak_contact_force and prog.energy_absolute < const.energy_absolute):
            return None
    return synergy_of(prog, job["name"], job["contact"], const)


def synergy_of(prog, name: str, contact: dict, const=None) -> Synergy:
    """A `dynamics.synthesis.crank.CrankProgramme` as a nominal (module doc); const: the constant
    programme at the same speed and turn, whose figures are kept for comparison."""
    const = const or prog
    walker = prog.walker
    L, R = prog.left, prog.right
    meta = {
        "name": name, "robot": "jansen", "model": walker.name, "model_hash": walker.model_hash,
        "kind": "crank_programme", "gait": "walk", "speed": prog.speed, "turn": prog.turn,
        "period": max(L.period, R.period), "S": None, "T": None, "zmp_law": None, "double_support": None,
        "asymmetry": float(R.period / L.period - 1.0),
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
    col = lambda a, b: np.column_stack([a, b])  # noqa: E731
    return Synergy(meta=meta, actuators=("left_shaft", "right_shaft"), period=np.array([L.period, R.period]),
                   wrap=np.full(2, 2.0 * np.pi), u=L.u, q=col(L.theta, R.theta), qd=col(L.theta_d, R.theta_d),
                   qdd=col(L.theta_dd, R.theta_dd), tau=col(L.torque, R.torque), inertia=col(L.inertia, R.inertia),
                   contact_force=np.hstack([L.foot_force, R.foot_force]), zmp=np.full((L.u.size, 2), np.nan))
