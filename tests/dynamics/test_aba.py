"""Articulated-body algorithm: Pinocchio's pin.aba as the oracle (every joint type, external
wrenches), the inverse of rnea, agreement with CRBA + Cholesky, batching, and input errors."""
import sys

import numpy as np
import pinocchio as pin
import pytest

import dynamics
from dynamics.aba import aba
from dynamics.codegen import SCALAR_MAX_N
from dynamics.model import Joint, Model, Segment
from dynamics.pinocchio_model import to_pinocchio
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

ALL = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")
ROOTS = ("free_flyer", "planar", "spherical", "revolute", "prismatic")


def _case(seed, n=9):
    rng = np.random.default_rng(200 + seed)
    return random_model(rng, n, ALL, root=ROOTS[seed % len(ROOTS)]), rng


def _pin_joint(model, pm, segment):
    """Pinocchio joint id carrying a segment (fixed segments ride on their nearest moving ancestor)."""
    s = model.segment(segment)
    while s.joint.type == "fixed":
        if s.parent is None:
            return 0
        s = model.segment(s.parent)
    return pm.getJointId(s.joint_name or s.name)


@pytest.mark.parametrize("seed", range(8))
def test_aba_matches_pinocchio_with_and_without_external_wrenches(seed):
    model, rng = _case(seed)
    pm = to_pinocchio(model)
    pd = pm.createData()
    q = random_configuration(model, rng, 3)
    v, tau = rng.normal(scale=3.0, size=(2, 3, model.nv))
    segs = [model.segments[i].name for i in rng.choice(len(model.segments), size=2, replace=False)]
    wrenches = [dynamics.Wrench(s, force=rng.normal(scale=20, size=(3, 3)), point=rng.normal(size=(3, 3)),
                                moment=rng.normal(size=(3, 3))) for s in segs]
    free, a = aba(model, q, v, tau), aba(model, q, v, tau, f_ext=wrenches)
    for k in range(3):
        expected = pin.aba(pm, pd, q[k], v[k], tau[k])
        np.testing.assert_allclose(free[k], expected, rtol=0, atol=1e-9 * max(1.0, np.abs(expected).max()))
        pin.forwardKinematics(pm, pd, q[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        for w in wrenches:
            jid = _pin_joint(model, pm, w.segment)
            F, P, T = w.force[k], w.point[k], w.moment[k]
            fext[jid] += pd.oMi[jid].actInv(pin.Force(F, np.cross(P, F) + T))
        expected = pin.aba(pm, pd, q[k], v[k], tau[k], fext)
        np.testing.assert_allclose(a[k], expected, rtol=0, atol=1e-9 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("seed", range(5))
def test_aba_inverts_rnea_and_equals_crba_cholesky(seed):
    model, rng = _case(seed, n=12)
    q = random_configuration(model, rng, 20)
    v, a = rng.normal(size=(2, 20, model.nv))
    tau = dynamics.rnea(model, q, v, a)
    np.testing.assert_allclose(aba(model, q, v, tau), a, rtol=0, atol=1e-8)
    M = dynamics.crba(model, q)
    h = dynamics.nonlinear_effects(model, q, v)
    np.testing.assert_allclose(aba(model, q, v, tau), np.linalg.solve(M, (tau - h)[..., None])[..., 0], atol=1e-8)


def test_single_sample_batch_and_chunks_agree(monkeypatch):
    model, rng = _case(1)
    q = random_configuration(model, rng, 30)
    v, tau = rng.normal(size=(2, 30, model.nv))
    whole = aba(model, q, v, tau)
    assert aba(model, q[4], v[4], tau[4]).shape == (model.nv,)
    np.testing.assert_allclose(aba(model, q[4], v[4], tau[4]), whole[4], rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(sys.modules["dynamics.aba"], "CHUNK", 7)
    np.testing.assert_allclose(aba(model, q, v, tau), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("args, match", [
    (lambda m: (m.neutral(), np.zeros(m.nv), np.full(m.nv, np.nan)), r"^tau: non-finite value"),
    (lambda m: (m.neutral(), np.zeros(m.nv - 1), np.zeros(m.nv)), r"^v: expected shape"),
    (lambda m: (m.neutral(), np.zeros(m.nv), np.zeros((2, m.nv))), r"^tau: shape .* does not match q"),
    (lambda m: (np.full(m.nq, np.inf), np.zeros(m.nv), np.zeros(m.nv)), r"^q: non-finite value"),
])
def test_bad_state_raises_naming_the_argument(args, match):
    model, _ = _case(0)
    for forward in (aba, dynamics.forward_dynamics):
        with pytest.raises(ValueError, match=match):
            forward(model, *args(model))


def test_massless_leaf_names_the_segment():
    """A massless leaf with a joint makes M singular (methods.md a.5)."""
    body = Segment("body", None, Joint("revolute"), mass=1.0, com=np.array([0.3, 0.0, 0.0]), inertia=np.eye(3) * 0.01)
    leaf = Segment("leaf", "body", Joint("revolute", axis=np.array([0.0, 1.0, 0.0])))
    model = Model("singular", (body, leaf))
    for forward in (aba, dynamics.forward_dynamics):
        with pytest.raises(ValueError, match=r"segment 'leaf': articulated inertia .* not positive definite"):
            forward(model, [0.1, 0.2], [0.0, 0.0], [0.0, 0.0])


def test_configuration_dependent_singularity_is_reported_with_the_sample():
    """A point mass m sliding along y on a massless arm turning about z, at x = 1 m: the arm's
    articulated inertia is m y² (the slide absorbs the rest), singular at y = 0. Away from it,
    τ_arm = 1 N·m gives θ̈ = 1/(m y²) and ÿ = −θ̈ (the slider force vanishes along y)."""
    arm = Segment("arm", None, Joint("revolute"))
    slider = Segment("slider", "arm", Joint("prismatic", axis=np.array([0.0, 1.0, 0.0]),
                                            translation=np.array([1.0, 0.0, 0.0])), mass=2.0)
    model = Model("slider_on_massless_arm", (arm, slider), gravity=np.zeros(3))
    np.testing.assert_allclose(aba(model, [0.3, 0.5], [0.0, 0.0], [1.0, 0.0]), [2.0, -2.0], rtol=1e-14)
    with pytest.raises(ValueError, match="singular articulated inertia at sample 0"):
        aba(model, [0.3, 0.0], [0.0, 0.0], [1.0, 0.0])                       # one sample: float path
    with pytest.raises(ValueError, match="singular articulated inertia at sample 1"):
        aba(model, [[0.3, 0.5], [0.3, 0.0]], np.zeros((2, 2)), [[1.0, 0.0]] * 2)   # few samples: float path
    N = SCALAR_MAX_N + 8
    q = np.tile([0.3, 0.5], (N, 1))
    q[N - 3, 1] = 0.0
    with pytest.raises(ValueError, match=f"singular articulated inertia at sample {N - 3}"):
        aba(model, q, np.zeros((N, 2)), np.tile([1.0, 0.0], (N, 1)))          # batch: array path
