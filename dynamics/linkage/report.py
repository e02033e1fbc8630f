"""One-call summary of a crank-driven leg: foot-path gait metrics and crank torque and energy at
constant crank speed without ground contact (issue 3 part 7; methods.md c.5, c.8, l).

`walklab model linkage NAME --json` prints this dict.
"""
from __future__ import annotations

import math

import numpy as np

from .. import energetics
from . import constraints as C
from .gait import gait_metrics
from .inverse import inverse_dynamics
from .kinematics import velocities
from .model import LinkageError, read_linkage
from .position import assembled_positions, chunks

SAMPLES = 1440  # crank angles per revolution (0.25 deg); 360 for large linkages (walkers)


def linkage_report(name_or_path: str, crank_speed: float = 2 * np.pi,
                   ground_penetration: float = 0.008) -> dict:
    """Gait metrics and crank effort of a linkage model over one revolution.

    crank_speed (rad/s, + counter-clockwise) sets theta(t) = crank_speed t with theta(0) = 0;
    ground level = lowest foot point + ground_penetration (m). Keys (SI): step_length,
    step_height, path_width, leg_length (m), duty_factor (fraction), torque_min, torque_max (N m,
    crank torque from the driver multiplier, gravity only, no ground contact),
    energy_abs_per_cycle = int |tau omega| dt and energy_net_per_cycle = int tau omega dt (J),
    their stance/swing split, ground_level (m), and the model name, file and O2 choice.
    """
    if isinstance(crank_speed, bool) or not isinstance(crank_speed, (int, float)) \
            or not math.isfinite(crank_speed) or crank_speed == 0:
        raise LinkageError(f"crank_speed: expected a finite non-zero speed in rad/s, got {crank_speed!r}")
    if isinstance(ground_penetration, bool) or not isinstance(ground_penetration, (int, float)) \
            or not math.isfinite(ground_penetration) or ground_penetration <= 0:
        raise LinkageError(f"ground_penetration: expected a positive length in m, got {ground_penetration!r}")
    model = read_linkage(name_or_path)
    if model.input_kind != "angle":
        raise LinkageError(f"{model.source}: linkage_report needs a crank (angle) driver")
    w = float(crank_speed)
    period = 2.0 * np.pi / abs(w)
    N = SAMPLES if model.n_coords < 100 else SAMPLES // 4
    t = period * np.arange(N) / N
    th = w * t
    q = assembled_positions(model, th)
    foot = C.point_positions(model, q, model.foot)
    gait = gait_metrics(foot, model.pivot_position(), ground_penetration)
    wd, zero = np.full_like(th, w), np.zeros_like(th)
    tau = np.empty_like(th)
    for c in chunks(model, N, kkt=True):
        qd = velocities(model, q[c], th[c], wd[c])
        tau[c] = inverse_dynamics(model, q[c], qd, th[c], wd[c], zero[c]).effort
    # close the periodic cycle with the first sample at t = period
    tt = np.append(t, period)
    p = energetics.power(np.append(tau, tau[0]), np.full(tt.shape, w))
    delta = gait.ground_level - np.append(foot[:, 1], foot[0, 1])
    e = energetics.work(tt, p, stance=delta)
    return {
        "name": model.name,
        "file": model.source,
        "crank_speed": w,
        "ground_penetration": float(ground_penetration),
        "ground_level": gait.ground_level,
        "step_length": gait.step_length,
        "step_height": gait.step_height,
        "path_width": gait.path_width,
        "leg_length": gait.leg_length,
        "duty_factor": gait.duty_factor,
        "torque_min": float(tau.min()),
        "torque_max": float(tau.max()),
        "energy_abs_per_cycle": float(e.absolute[0]),
        "energy_net_per_cycle": float(e.net[0]),
        "energy_abs_stance": float(e.stance_absolute[0]),
        "energy_abs_swing": float(e.swing_absolute[0]),
        "ground_contact_in_torque": False,
        "o2_choice": model.metadata.get("o2_choice", ""),
    }
