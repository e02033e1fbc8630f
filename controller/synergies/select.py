"""Selection of the nominal nearest a command (methods.md j: the upper level of the two-level scheme).

Key space: (speed m/s, turn rad/s), each divided by its spread in the library (max - min, 1 where
all nominals share the value), so a step of one grid spacing weighs the same in either key. Only
nominals of the command's gait whose figures pass the limits are candidates ("valid"): peak torque
within the actuators' torque limits, ZMP deviation from the law at most `zmp_epsilon` (where a law
is prescribed), and a stability margin: a nominal with a planned margin per phase (biped,
exoskeleton) has its planned ZMP inside its support everywhere (min_margin >= 0; the loop's guard
holds the measured margin to that plan, controller.safety rule 4), any other at least limits.min_margin. The measured speed, when given, adds
measured_weight x its normalised distance, so between two nominals equally near the command the one
nearer what the robot does now wins (a smaller jump for the transition).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .format import Synergy, SynergyError

KEYS = ("speed", "turn")
#: m: a planned stability margin this far below zero is rounding (law 6 plans the ZMP on the toe's edge)
INSIDE = 1e-9


class SelectionError(SynergyError):
    """No valid nominal for a command (names the command and why)."""


@dataclass(frozen=True)
class Request:
    """An operator command: walking speed (m/s, >= 0), turn rate (rad/s, + left), gait type."""

    speed: float
    turn: float = 0.0
    gait: str = "walk"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.speed) and self.speed >= 0 and math.isfinite(self.turn)):
            raise SelectionError(f"command: expected a finite speed >= 0 m/s and turn rad/s, got {self.speed!r}, {self.turn!r}")


def valid(syn: Synergy, limits, zmp_epsilon: float = 0.02) -> bool:
    """Whether a nominal's figures pass the limits (module doc)."""
    m = syn.meta
    torque_ok = bool(np.all(np.abs(syn.tau).max(axis=0) <= np.asarray(limits.torque)))
    if np.isfinite(syn.margin).all():   # a planned margin: the guard holds the walk to it (controller.safety)
        margin_ok = m["min_margin"] is not None and m["min_margin"] >= -INSIDE
    else:
        margin_ok = m["min_margin"] is not None and m["min_margin"] >= limits.min_margin
    zmp_ok = m["zmp_max_deviation"] is None or m["zmp_max_deviation"] <= zmp_epsilon
    return torque_ok and margin_ok and zmp_ok


def select(nominals: list[Synergy], request: Request, limits, measured_speed: float | None = None,
           measured_weight: float = 0.25, zmp_epsilon: float = 0.02) -> Synergy:
    """The valid nominal nearest `request` in normalised key space (module doc)."""
    cand = [s for s in nominals if s.meta.get("gait", "walk") == request.gait and valid(s, limits, zmp_epsilon)]
    if not cand:
        raise SelectionError(f"no valid nominal for gait {request.gait!r} within the limits "
                             f"({len(nominals)} in the library)")
    k = np.array([[float(s.meta[key]) for key in KEYS] for s in cand])
    span = k.max(axis=0) - k.min(axis=0)
    span[span == 0] = 1.0
    d = (((k - [request.speed, request.turn]) / span) ** 2).sum(axis=1)
    if measured_speed is not None and math.isfinite(measured_speed):
        d = d + measured_weight * ((k[:, 0] - measured_speed) / span[0]) ** 2
    return cand[int(np.argmin(d))]
