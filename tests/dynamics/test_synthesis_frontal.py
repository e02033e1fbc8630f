"""Frontal compensation of the semi-inverse biped nominals: BIDYN's two-unknown trunk system (the roll
theta about the stance foot and the trunk psi; methods.md j.2, j.4; dynamics.synthesis.semi_inverse).

Truths: `dynamics.zmp.zmp_model` (the centroidal ZMP of the 3-D model, not the generator's two-unknown
equations) on the nominal's own motion against the law built here from the ZMP-law tables
(`biped.zmp_law`, models.md 6.2: the lateral staircase has the sagittal one's shares) and the feet's
lines from the model's neutral posture by `dynamics.kinematics`; the CoM's velocity from
`dynamics.centroidal` against finite differences of the CoM positions (the free flyer's velocity
convention); an independent integration of the stride at a tighter tolerance with another integrator;
the left/right mirror symmetry of a symmetric gait.
"""
import numpy as np
import pytest

from daq.formats.gait_cycle import read_cycle
from dynamics.centroidal import centroidal_momentum
from dynamics.kinematics import forward_kinematics, tree_state
from dynamics.loader import load_model
from dynamics.synthesis.biped import ShootingSettings, flow, zmp_law
from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal, figures, stride_rhs
from dynamics.zmp import com_of_state, zmp_model

BIDYN = BipedJoints(("hip_l", "hip_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"), "waist", ("foot_l", "foot_r"))
EXO = BipedJoints(("hip_flexion_l", "hip_flexion_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"),
                  "lumbar_flexion", ("foot_l", "foot_r"))
EPS = 1e-6   # m: the ZMP deviation accepted (the law is exact up to the integration and the splines)


@pytest.fixture(scope="module")
def noms():
    c = read_cycle()
    bidyn, exo = load_model("surla_bidyn"), load_model("exoskeleton")
    return {"bidyn": (bidyn, build_nominal(bidyn, BIDYN, c, 0.8, 1.2, single=(2, 2), double=(2, 2), samples=200,
                                           frontal=True, check=True)),
            "bidyn_sagittal": (bidyn, build_nominal(bidyn, BIDYN, c, 0.8, 1.2, single=(2, 2), double=(2, 2),
                                                    samples=200)),
            "exo": (exo, build_nominal(exo, EXO, c, 0.6, 1.4, single=(1, 1), double=(1, 1), samples=200, frontal=True))}


def _law(model, joints, nom):
    """The law's ZMP (x, y) along the stride: x from the stance ankle's x by forward kinematics plus the
    sagittal law; y the stance foot's line plus the sagittal staircase's share of the way to the other
    foot's line (feet lines: the ankles' y in the neutral posture)."""
    feet = [model.index[f] for f in joints.feet]
    fk = forward_kinematics(model, nom.q)
    y_line = forward_kinematics(model, model.neutral()).translation[feet, 1]
    P = nom.T / 2
    x, y = np.empty(len(nom.t)), np.empty(len(nom.t))
    for side in (0, 1):
        k = nom.stance == side
        law = nom.laws[side]
        tl = nom.t[k] - side * P
        x[k] = fk.translation[k, feet[side], 0] + zmp_law(tl, P, law.single, law.double, law.step, law.share)
        share = np.abs(zmp_law(tl, P, 1, law.double, law.step, law.share)) / law.step
        y[k] = y_line[side] + share * (y_line[1 - side] - y_line[side])
    return x, y


@pytest.mark.parametrize("key", ["bidyn", "exo"])
def test_zmp_recomputed_by_dynamics_follows_both_laws(noms, key):
    model, nom = noms[key]
    joints = BIDYN if key == "bidyn" else EXO
    z = zmp_model(model, nom.q, nom.v, nom.a)
    assert z.valid.all()
    x, y = _law(model, joints, nom)
    assert np.abs(z.point[:, 0] - x).max() < EPS, np.abs(z.point[:, 0] - x).max()
    assert np.abs(z.point[:, 1] - y).max() < EPS, np.abs(z.point[:, 1] - y).max()
    assert np.ptp(y) > 0.15                      # the lateral law really goes from one foot to the other
    assert figures(nom).deviation.max() < EPS    # what the library stores agrees
    # the body rolls, a little (a few degrees) and both ways
    assert 0.005 < np.abs(nom.theta).max() < 0.2 and nom.theta.min() < 0 < nom.theta.max()


def test_without_the_frontal_unknown_the_lateral_zmp_is_off_its_law(noms):
    """The sagittal-only nominal (same S, T, laws) leaves the lateral ZMP near the pelvis's middle:
    several cm off the lateral law that the two-unknown nominal follows to 1e-6 m."""
    model, nom = noms["bidyn_sagittal"]
    _, y = _law(model, BIDYN, nom)
    assert np.abs(zmp_model(model, nom.q, nom.v, nom.a).point[:, 1] - y).max() > 0.05


def test_velocities_are_the_derivatives_of_the_rolled_motion(noms):
    """The CoM velocity from the centroidal momentum (v with the free flyer's base-frame convention)
    equals central differences of the CoM positions of q; the same for the CoM acceleration."""
    model, nom = noms["bidyn"]
    h = nom.T / len(nom.t)
    c = com_of_state(model, tree_state(model, nom.q))
    hg, dhg = centroidal_momentum(model, nom.q, nom.v, nom.a)
    vc, ac = hg[:, :3] / model.total_mass, dhg[:, :3] / model.total_mass
    fd = (np.roll(c, -1, 0) - np.roll(c, 1, 0)) / (2 * h)
    fd[0] = fd[len(c) // 2] = np.nan          # the CoM moves a little at the transfers (pivot change): skip them
    fd[-1] = fd[len(c) // 2 - 1] = np.nan
    ok = np.isfinite(fd[:, 0])
    assert np.abs(fd[ok] - vc[ok]).max() < 0.01 * np.abs(vc[:, 1:]).max() + 2e-3
    fdd = (np.roll(c, -1, 0) - 2 * c + np.roll(c, 1, 0)) / h ** 2
    assert np.median(np.abs(fdd[ok] - ac[ok])) < 0.02 * np.abs(ac).max()


def test_periodic_to_the_solver_tolerance_and_mirrored(noms):
    model, nom = noms["bidyn"]
    rhs, br, T = stride_rhs(nom.halves, nom.laws)
    fl = flow(rhs, nom.trunk.y0, T, ShootingSettings(rtol=1e-11, atol=1e-13, method="DOP853"), breaks=br)
    np.testing.assert_allclose(fl.y[:, -1], nom.trunk.y0, atol=2e-6)
    assert nom.trunk.J <= 1e-7
    h = len(nom.t) // 2
    np.testing.assert_allclose(nom.theta[h:], -nom.theta[:h], atol=1e-6)     # W = diag(-1, 1, -1, 1)
    np.testing.assert_allclose(nom.psi[h:], nom.psi[:h], atol=1e-6)
    z = zmp_model(model, nom.q, nom.v, nom.a).point
    np.testing.assert_allclose(z[h:, 1], -z[:h, 1], atol=1e-5)
    np.testing.assert_allclose(z[h:, 0], z[:h, 0] + nom.step, atol=1e-5)


def test_shooting_and_collocation_agree(noms):
    tr = noms["bidyn"][1].trunk
    np.testing.assert_allclose(tr.collocation_y0, tr.y0, atol=1e-5)


def test_shorter_period_lowers_the_frontal_compensation_as_methods_j9(noms):
    """Faster via smaller T: the frontal compensation down (methods.md j.9), measured here by the roll's
    amplitude max |theta| (the models have no frontal actuator whose torque BIDYN's figures show):
    surla_bidyn, S = 0.8, law II/2, T = 1.0 s against the fixture's 1.2 s."""
    model, slow = noms["bidyn"]
    fast = build_nominal(model, BIDYN, read_cycle(), 0.8, 1.0, single=(2, 2), double=(2, 2), samples=200,
                         frontal=True)
    assert fast.speed > slow.speed
    assert np.abs(fast.theta).max() < 0.9 * np.abs(slow.theta).max()
