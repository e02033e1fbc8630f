"""Biped / exoskeleton nominals: `dynamics.synthesis.semi_inverse` strides packed as synergies (format.py).

One nominal per (S, T, ZMP laws) of the robot config's grid (robot.BipedGrid): actuators are model
joints named in the config (q rad, qd, qdd, tau N m from `dynamics.rnea`), one stride of period T per
actuator (wrap 0), sampled at `samples` phases from the support transfer to the left foot; contact
forces (M, 2) the left and right feet's normal forces (N); zmp (M, 2) the ZMP by `dynamics.zmp.zmp_model`
(lab x, y; x from the left foot's flat place at phase 0). Validity: zmp_max_deviation = max |ZMP_x - law|
(m; with the frontal compensation the distance from the law point in x and y), from dynamics, not
the generator's equations; min_margin = the least of the ZMP's sagittal margin inside the
feet (m), stored per phase as the nominal's ``margin`` (the loop's ZMP guard holds the measured margin to
it: law 6 plans the ZMP on the toe, margin 0, through the heel-off). Extra metadata: the key parameters (S, T, laws, double support, step length), the shooting's
iterations, Newton steps and residual history, the collocation cross-check, peak torque per joint,
the trunk's range, the lateral ZMP offset from the stance ankle, with ``biped.frontal`` the lateral
deviation from its law, the roll's range and the pelvis's move at the transfer, and the trailing foot's
height and speed off the ground at the transfer (the closed chain of double support is not enforced).
Safe switching phase: the support transfers (phase 0 and 0.5), where the ZMP is between the feet.

**Assistance** (an exoskeleton's motors and its wearer share each actuated joint's torque): the
config's ``biped.assistance`` a (0 < a <= 1) is the share the motors supply, as lower-limb exoskeletons
are specified (a fraction of the biological joint moment; the wearer supplies 1 - a). The stored
feed-forward ``tau`` and ``peak_torque`` (what the selector checks against the motors' limits) are the
motors' share a tau_joint; the full joint torque tau_joint (rnea) stays in the metadata beside it:
``peak_joint_torque``, ``peak_torques`` per joint (full), ``peak_actuator_torques`` and
``peak_wearer_torques`` per joint (the unactuated ankles and trunk are all the wearer's), and the
energies of the motors (``energy_*_per_cycle``) and of the whole actuated joints (``joint_energy_*``).
The stored effective inertia is the motors' share too (a M_ii: the transition feed-forward they supply).
a = 1 (the default; the biped) is a robot that carries all of it.
"""
from __future__ import annotations

import hashlib
import itertools

import numpy as np

from daq.formats.gait_cycle import read_cycle
from dynamics.crba import crba
from dynamics.loader import load_model, resolve
from dynamics.synthesis.biped import BipedError
from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal, energy, figures

from .format import Synergy


def name_of(robot: str, S: float, T: float, laws) -> str:
    tag = f"{laws[0]}{laws[1]}" if tuple(laws[:2]) == tuple(laws[2:]) else f"{laws[0]}{laws[1]}-{laws[2]}{laws[3]}"
    return f"{robot}_S{S:.2f}_T{T:.2f}_z{tag}"


def jobs(cfg) -> list[dict]:
    """One job per (S, T, laws) of the config's grid (plain dicts: picklable)."""
    g = cfg.biped
    if g is None:
        raise ValueError(f"{cfg.source}: a {cfg.robot} config needs a [biped] table (joint names)")
    return [{"robot": cfg.robot, "model": cfg.model, "S": S, "T": T, "laws": list(lw), "samples": cfg.samples,
             "share": g.double_support, "gait": g.gait, "actuators": list(cfg.actuators), "roll": g.roll,
             "assistance": g.assistance, "frontal": g.frontal,
             "joints": {"hips": g.hips, "knees": g.knees, "ankles": g.ankles, "trunk": g.trunk, "feet": g.feet},
             "name": name_of(cfg.robot, S, T, lw)}
            for S, T, lw in itertools.product(g.scales, g.periods, g.laws)]


def build(job: dict, check: bool = True) -> Synergy | None:
    """The nominal of one job (module doc); check: the collocation cross-check too. None when the
    shooting and the collocation find no periodic trunk (e.g. a large S at a long period: the trunk
    would have to lean back past the singular posture)."""
    made = build_with_nominal(job, check)
    return None if made is None else made[0]


def build_with_nominal(job: dict, check: bool = True) -> tuple[Synergy, object] | None:
    """`build`, with the `semi_inverse.BipedNominal` it packs (the library's transitions need it)."""
    model = load_model(job["model"])
    j = job["joints"]
    joints = BipedJoints(tuple(j["hips"]), tuple(j["knees"]), tuple(j["ankles"]), j["trunk"], tuple(j["feet"]))
    lw = job["laws"]
    try:
        nom = build_nominal(model, joints, read_cycle(job.get("gait")), job["S"], job["T"], single=(lw[0], lw[2]),
                            double=(lw[1], lw[3]), share=job.get("share"), samples=job["samples"], check=check,
                            roll=job.get("roll"), frontal=bool(job.get("frontal", False)))
    except BipedError:
        return None     # no periodic trunk for this grid point (it falls): listed as skipped by the build
    fg = figures(nom)
    return synergy_of(nom, fg, job, hashlib.sha256(resolve(job["model"]).read_bytes()).hexdigest()), nom


def synergy_of(nom, fg, job: dict, model_hash: str) -> Synergy:
    """A `BipedNominal` and its `NominalFigures` as a nominal (module doc)."""
    m = nom.tree.model
    seg = {(s.joint_name or s.name): i for i, s in enumerate(m.segments)}
    missing = [a for a in job["actuators"] if a not in seg or m.segments[seg[a]].joint.type != "revolute"]
    if missing:
        raise ValueError(f"{job['model']}: actuator {missing[0]!r} is not a revolute joint of the model")
    iq = np.array([m.idx_q[seg[a]] for a in job["actuators"]])
    iv = np.array([m.idx_v[seg[a]] for a in job["actuators"]])
    Mm = crba(m, nom.q)
    peaks = {name: float(np.abs(fg.tau[:, m.idx_v[i]]).max()) for name, i in seg.items()
             if m.segments[i].joint.type == "revolute" and nom.tree.sign[i] != 0}
    a = float(job.get("assistance", 1.0))
    if not 0 < a <= 1:
        raise ValueError(f"{job['name']}: assistance {a}: expected the motors' share of the joint torque, 0 < a <= 1")
    joint_tau = fg.tau[:, iv]
    tau = a * joint_tau                      # the motors' share; the wearer supplies (1 - a) joint_tau
    actuated = set(job["actuators"])
    e_net, e_pos, e_abs = energy(nom, a * fg.tau, iv)
    j_net, j_pos, j_abs = energy(nom, fg.tau, iv)
    tr = nom.trunk
    laws = [[lw.single, lw.double] for lw in nom.laws]
    meta = {
        "name": job["name"], "robot": job["robot"], "model": m.name, "model_hash": model_hash,
        "kind": "semi_inverse", "gait": "walk", "speed": nom.speed, "turn": 0.0, "period": nom.T,
        "S": nom.S, "T": nom.T, "zmp_law": laws, "double_support": nom.laws[0].share,
        "asymmetry": 0.0 if laws[0] == laws[1] else 1.0, "symmetric": laws[0] == laws[1], "profile": None,
        "step_length": nom.step, "roll_radius": nom.tree.roll,
        "zmp_max_deviation": float(fg.deviation.max()), "min_margin": float(fg.margin.min()),
        "assistance": a, "peak_torque": float(np.abs(tau).max()), "peak_joint_torque": float(np.abs(joint_tau).max()),
        "peak_torques": peaks,
        "peak_actuator_torques": {n: a * peaks[n] for n in job["actuators"]},
        "peak_wearer_torques": {n: (1 - a) * v if n in actuated else v for n, v in peaks.items()},
        "joint_energy_net_per_cycle": j_net, "joint_energy_positive_per_cycle": j_pos,
        "joint_energy_abs_per_cycle": j_abs,
        "peak_contact_force": float(fg.foot_force.max()),
        "energy_net_per_cycle": e_net, "energy_positive_per_cycle": e_pos, "energy_abs_per_cycle": e_abs,
        "energy_note": "motors' tau * qd summed (their share a of the joint torque), over one stride; joint_energy_*: "
                       "the whole actuated joints' torque; the ground-reaction moment is not an actuator",
        "trunk_range": [float(nom.psi.min()), float(nom.psi.max())],
        "shooting": {"iterations": tr.iterations, "newton_steps": tr.newton_steps, "J": tr.J,
                     "history": list(tr.history), "y0": [float(x) for x in tr.y0],
                     "started_from": tr.started_from},
        "collocation_y0": None if tr.collocation_y0 is None else [float(x) for x in tr.collocation_y0],
        "other_periodic_y0": None if tr.other_y0 is None else [float(x) for x in tr.other_y0],
        "zmp_lateral_max": float(np.abs(fg.lateral).max()),
        "frontal": nom.theta is not None,
        "zmp_lateral_max_deviation": None if fg.lateral_deviation is None else float(fg.lateral_deviation.max()),
        "theta_range": None if nom.theta is None else [float(nom.theta.min()), float(nom.theta.max())],
        "frontal_transfer_jump": nom.transfer_jump,
        "trailing_foot_height": nom.trailing_height, "trailing_foot_speed": nom.trailing_speed,
        "base_residual": fg.base_residual,
        "leg_cycle": nom.cycle_source,
        "safe_switch": "at a support transfer (phase 0 or 0.5: mid double support, ZMP between the feet)",
    }
    A = len(iv)
    return Synergy(meta=meta, actuators=tuple(job["actuators"]), period=np.full(A, nom.T), wrap=np.zeros(A),
                   u=np.arange(len(nom.t)) / len(nom.t), q=nom.q[:, iq], qd=nom.v[:, iv], qdd=nom.a[:, iv],
                   tau=tau, inertia=a * Mm[:, iv, iv], contact_force=fg.foot_force, zmp=fg.zmp, margin=fg.margin)
