"""Repair of a rejected transition stride (dynamics.synthesis.transition_repair; methods.md j.6, d.4).

Truths: the ZMP that `dynamics.zmp.zmp_model` computes again from the repaired stride's own 3-D motion
against its stored law path; the two nominals' own stored q, v, a at the stride's ends (C2 joins); finite
differences of the stored motion; the plain blend's deviation (`semi_inverse.transition`) as the
reference the repair must beat. Nominals: surla_bidyn with the frontal compensation (the shipped biped
config's), T = 1.2 s, law II/2, 64 phases; S 0.82 -> 0.85 is rejected as blended.
"""
import numpy as np
import pytest

from daq.formats.gait_cycle import read_cycle
from dynamics.loader import load_model
from dynamics.synthesis.biped import BipedError
from dynamics.synthesis.semi_inverse import (BipedJoints, blended_trunk, build_nominal, nominal_trunk,
                                               transition)
from dynamics.synthesis.transition_repair import repair
from dynamics.zmp import zmp_model

JOINTS = BipedJoints(("hip_l", "hip_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"), "waist", ("foot_l", "foot_r"))
EPS = 0.01


@pytest.fixture(scope="module")
def model():
    return load_model("surla_bidyn")


@pytest.fixture(scope="module")
def pair(model):
    c = read_cycle()
    a, b = (build_nominal(model, JOINTS, c, S, 1.2, single=(2, 2), double=(2, 2), samples=64, frontal=True)
            for S in (0.82, 0.85))
    return a, b, repair(a, b, EPS)


def test_the_repaired_stride_keeps_its_zmp_within_eps_where_the_blend_did_not(model, pair):
    a, b, rep = pair
    plain = transition(a, b, EPS)
    assert not plain.accepted and plain.d_max >= EPS and rep.d_before == plain.d_max
    tr = rep.transition
    assert rep.repaired and tr.accepted
    p = zmp_model(model, tr.q, tr.v, tr.a)
    assert p.valid.all()
    d = np.hypot(p.point[:, 0] - tr.zmp_law_x, p.point[:, 1] - tr.zmp_law_y)
    assert d.max() < EPS
    np.testing.assert_allclose(d.max(), tr.d_max, rtol=1e-9)
    assert tr.d_max <= rep.d_after + 1e-12 < EPS      # the samples are among the repair's instants
    # the same law path as the plain blend's: only the compensating coordinates moved, not the target
    np.testing.assert_allclose(tr.zmp_law_x, plain.zmp_law_x, atol=1e-12)
    np.testing.assert_allclose(tr.zmp_law_y, plain.zmp_law_y, atol=1e-12)
    assert 1 <= rep.iterations <= 8 and rep.evaluations <= 8 * (2 * (rep.nodes - 1) + 1 + 20) + 1


def test_the_repaired_stride_joins_both_nominals_c2(model, pair):
    """At t = 0 the stride is nominal a's stored state (every coordinate, value, rate, acceleration); the
    correction vanishes with its rate and acceleration at both ends, where the blend is a at 0 and b at T
    (b's own stored phase 0): the joins are C2, the setpoint does not step."""
    a, b, rep = pair
    tr = rep.transition
    np.testing.assert_allclose(tr.q[0], a.q[0], atol=1e-9)
    np.testing.assert_allclose(tr.v[0], a.v[0], atol=1e-9)
    np.testing.assert_allclose(tr.a[0], a.a[0], atol=1e-9)
    assert len(rep.correction) == 2           # psi and theta
    for s in rep.correction:
        for nu in (0, 1, 2):
            np.testing.assert_allclose(s([0.0, a.T], nu), 0.0, atol=1e-12)
    assert np.abs(rep.correction[0](a.t)).max() > 1e-2      # it did move the trunk (psi, rad)
    T = np.array([a.T])
    psi, roll = blended_trunk(a, b, T)
    for got, want in zip((*psi[:2], *roll[:2]), (b.psi, b.dpsi, b.theta, b.dtheta)):
        np.testing.assert_allclose(got[0], want[0], atol=1e-6)     # b's stored phase 0: value and rate
    # the acceleration at T is b's own at the end of its stride (its ZMP law's last piece: b's acceleration
    # jumps at its own support transfer, phase 0, by the law's jump there)
    (_, _, bpsi), (_, _, btheta) = nominal_trunk(b, T)
    np.testing.assert_allclose([psi[2][0], roll[2][0]], [bpsi[0], btheta[0]], rtol=1e-6)
    assert abs(bpsi[0] - b.ddpsi[0]) > 1.0


def test_the_stored_rates_and_accelerations_are_the_derivatives_of_the_motion(model, pair):
    """Five-point central differences (error O(h^4)) of the repaired trunk joint's angle and the roll's
    rate, minus the plain blend's (the correction: smooth; the blend itself jumps in acceleration at the
    law switches). At the stored samples (h = T/64) the rate; the correction's acceleration changes
    within its 50 ms intervals faster than h resolves, so the acceleration on the same repaired
    motion sampled 16 times finer (`transition` at those times with the same correction)."""
    a, b, rep = pair
    iq, iv = model.idx_q[model.index["trunk"]], model.idx_v[model.index["trunk"]]

    def d1(f, h):
        return (-f[4:] + 8 * f[3:-1] - 8 * f[1:-3] + f[:-4]) / (12 * h)

    def d2(f, h):
        return (-f[4:] + 16 * f[3:-1] - 30 * f[2:-2] + 16 * f[1:-3] - f[:-4]) / (12 * h * h)

    plain, tr = transition(a, b, EPS), rep.transition
    dq, dv = tr.q[:, iq] - plain.q[:, iq], tr.v[:, iv] - plain.v[:, iv]
    assert np.abs(dq).max() > 1e-2
    assert np.abs(d1(dq, a.T / 64) - dv[2:-2]).max() < 0.01 * np.abs(dv).max()
    t = np.arange(64 * 16) * a.T / (64 * 16)
    base = blended_trunk(a, b, t)
    moved = tuple(tuple(c[k] + s(t, k) for k in range(3)) for c, s in zip(base, rep.correction))
    plain, tr = transition(a, b, EPS, t, base), transition(a, b, EPS, t, moved)
    h = t[1]
    dq, dv, da = (x[:, i] - y[:, i] for x, y, i in ((tr.q, plain.q, iq), (tr.v, plain.v, iv), (tr.a, plain.a, iv)))
    assert np.abs(d1(dq, h) - dv[2:-2]).max() < 1e-3 * np.abs(dv).max()
    assert np.abs(d2(dq, h) - da[2:-2]).max() < 0.01 * np.abs(da).max()
    # the roll theta: the free flyer's angular rate and acceleration about x are theta', theta''
    dw, dal = tr.v[:, 3] - plain.v[:, 3], tr.a[:, 3] - plain.a[:, 3]
    assert np.abs(d1(dw, h) - dal[2:-2]).max() < 0.05 * np.abs(dal).max()   # theta''' jumps at the nodes


def test_a_pair_that_cannot_be_repaired_within_the_bound_comes_back_rejected(pair):
    """eps = 5 mm, below what the 24-interval correction reaches for this pair (~6.8 mm): the repair
    stops within its bound and returns the plain blend, rejected, with d̄ before and after."""
    a, b, _ = pair
    rep = repair(a, b, 0.005, max_iterations=3)
    assert not rep.repaired and not rep.transition.accepted
    assert rep.transition.d_max == rep.d_before == transition(a, b).d_max
    assert 0.005 <= rep.d_after < rep.d_before and rep.iterations <= 3


def test_bad_arguments_are_named(pair):
    a, b, _ = pair
    for kw, word in (({"nodes": 1}, "nodes"), ({"oversample": 0}, "oversample"), ({"max_iterations": -1}, "max_iterations")):
        with pytest.raises(BipedError, match=word):
            repair(a, b, **kw)
