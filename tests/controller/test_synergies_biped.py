"""Exoskeleton nominals with an assistance ratio (controller.synergies.biped; docs/controller.md
"Biped and exoskeleton nominals"): the motors supply the share a of each actuated joint's torque,
the wearer the rest.

Truths: Pinocchio's recursive Newton-Euler (`pinocchio.rnea`) on the nominal's own motion with the
ground wrench that balances it (from Pinocchio's free-flyer rows: single support, the whole wrench on
the stance foot), the shipped config's motor limits, and the selector that the loop uses.
"""
import numpy as np
import pinocchio as pin
import pytest

from controller.synergies import biped
from controller.synergies.robot import load_robot
from controller.synergies.select import Request, select, valid
from daq.formats.gait_cycle import read_cycle
from dynamics.loader import load_model
from dynamics.pinocchio_model import to_pinocchio
from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal


@pytest.fixture(scope="module")
def exo():
    cfg = load_robot("exoskeleton")
    job = next(j for j in biped.jobs(cfg) if j["laws"] == [2, 2, 2, 2])
    job = {**job, "samples": 100}
    return cfg, job, biped.build(job, check=False)


def test_shipped_exoskeleton_assists_a_share_of_the_joint_torque(exo):
    cfg, job, syn = exo
    a = cfg.biped.assistance
    assert 0 < a < 1 and syn.meta["assistance"] == a


def test_selector_picks_an_exoskeleton_nominal_within_the_motor_limits(exo):
    cfg, job, syn = exo
    assert valid(syn, cfg.limits)
    assert select([syn], Request(speed=syn.meta["speed"]), cfg.limits) is syn
    assert (np.abs(syn.tau).max(axis=0) <= np.asarray(cfg.limits.torque)).all()
    # the whole joint torque would not fit the motors: the assistance is what makes it valid
    assert syn.meta["peak_joint_torque"] > max(cfg.limits.torque)


def test_actuator_and_wearer_shares_add_up_to_pinocchios_joint_torque(exo):
    """Rebuild the nominal's motion, balance it with the ground wrench from Pinocchio's own free-flyer
    rows (in single support all of it on the stance foot), and compare Pinocchio's joint torques with
    the stored motors' share plus the wearer's share (metadata peaks, and tau (1 - a) / a per sample)."""
    cfg, job, syn = exo
    a = job["assistance"]
    model = load_model(job["model"])
    j = job["joints"]
    joints = BipedJoints(tuple(j["hips"]), tuple(j["knees"]), tuple(j["ankles"]), j["trunk"], tuple(j["feet"]))
    lw = job["laws"]
    nom = build_nominal(model, joints, read_cycle(), job["S"], job["T"], single=(lw[0], lw[2]), double=(lw[1], lw[3]),
                        samples=job["samples"], frontal=job["frontal"])
    pm = to_pinocchio(model)
    pd = pm.createData()
    iv = [model.idx_v[next(i for i, s in enumerate(model.segments) if s.joint_name == n)] for n in job["actuators"]]
    P = nom.T / 2
    tau_ds = P * nom.laws[0].share / 200
    checked = 0
    for k in range(len(nom.t)):
        tl = nom.t[k] - nom.stance[k] * P
        if tl < tau_ds or tl >= P - tau_ds:
            continue                                  # double support: the split between the feet is a model choice
        q, v, acc = nom.q[k], nom.v[k], nom.a[k]
        free = pin.rnea(pm, pd, q, v, acc)            # no contact: the base rows are the wrench the ground must give
        pin.forwardKinematics(pm, pd, q)
        W = pd.oMi[1].act(pin.Force(free[:6]))        # base frame -> lab
        foot = pm.getJointId(joints.ankles[nom.stance[k]])   # the foot hangs on its ankle joint
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        fext[foot] = pd.oMi[foot].actInv(W)
        tau = pin.rnea(pm, pd, q, v, acc, fext)
        assert np.abs(tau[:6]).max() < 1e-6 * np.abs(free[:6]).max()
        joint = tau[iv]
        motor = syn.tau[k]
        wearer = (1 - a) * joint
        np.testing.assert_allclose(motor + wearer, joint, atol=1e-6 * np.abs(joint).max() + 1e-9)
        np.testing.assert_allclose(motor, a * joint, rtol=1e-6, atol=1e-6)
        checked += 1
    assert checked > len(nom.t) // 2
    m = syn.meta
    for n in job["actuators"]:
        assert m["peak_actuator_torques"][n] + m["peak_wearer_torques"][n] == pytest.approx(m["peak_torques"][n])
        assert m["peak_actuator_torques"][n] == pytest.approx(np.abs(syn.tau[:, job["actuators"].index(n)]).max())
    for n in ("ankle_l", "lumbar_flexion"):              # not actuated: all the wearer's
        assert m["peak_wearer_torques"][n] == m["peak_torques"][n] > 0
