"""Semi-inverse biped machinery (dynamics.synthesis.biped; methods.md j.4-j.5, models.md 6).

Truths: the closed-form periodic solution of Beletsky's linear biped (Surla 1980 thesis, Ch. 1.1),
the fact that Newton on an affine shooting map converges in one step, scipy's collocation solver
(solve_bvp) on the same boundary-value problem, and the ZMP-law tables of models.md 6.
"""
import math

import numpy as np
import pytest

from dynamics.synthesis.biped import Beletsky, BipedError, ShootingSettings, collocate, flow, shoot, zmp_law

P = 0.75  # s, BIDYN's half-period


@pytest.mark.parametrize("W", [(1.0, 1.0), (-1.0, -1.0)])
def test_newton_converges_in_one_step_to_the_closed_form_periodic_trunk(W):
    b = Beletsky()
    psi0, dpsi0 = b.periodic(0.0, P, W)
    guess = np.array([psi0 + 0.05, dpsi0 - 0.1])
    res = shoot(b.rhs, guess, P, W=W, settings=ShootingSettings(accept_J=1e-8))
    assert res.converged and res.newton_steps == 1 and res.iterations == 1
    np.testing.assert_allclose(res.y0, [psi0, dpsi0], atol=1e-7)
    t = np.linspace(0, P, 31)
    sol = flow(b.rhs, res.y0, P, t_eval=t)
    psi, dpsi = b.periodic(t, P, W)
    np.testing.assert_allclose(sol.y[0], psi, atol=1e-7)
    np.testing.assert_allclose(sol.y[1], dpsi, atol=1e-6)
    np.testing.assert_allclose(sol.y[:, 0], np.array(W) * sol.y[:, -1], atol=1e-7)  # Y(0) = W Y(P)


def test_gradient_phase_far_from_the_solution_then_newton():
    b = Beletsky()
    psi0, dpsi0 = b.periodic(0.0, P)
    guess = np.array([psi0 + 0.3, dpsi0 + 1.0])  # J ~ 8.8 > 4: BIDYN starts with gradient steps
    res = shoot(b.rhs, guess, P, settings=ShootingSettings(accept_J=1e-8))
    assert res.history[0] > 4.0 and res.iterations > res.newton_steps >= 1
    assert all(a > c for a, c in zip(res.history, res.history[1:]))  # J decreases strictly
    np.testing.assert_allclose(res.y0, [psi0, dpsi0], atol=1e-7)
    with pytest.raises(BipedError, match="rejected"):
        shoot(b.rhs, np.array([psi0 + 3.0, dpsi0 + 20.0]), P)


def test_shooting_and_collocation_agree():
    b = Beletsky(C=8.0, S=-3.0)
    res = shoot(b.rhs, np.zeros(2), P, settings=ShootingSettings(accept_J=1e-9))
    y0, bvp = collocate(b.rhs, np.zeros(2), P)
    np.testing.assert_allclose(y0, res.y0, atol=1e-6)
    np.testing.assert_allclose(res.y0, b.periodic(0.0, P), atol=1e-7)


def test_zmp_laws_follow_the_tables():
    t = np.array([0.05, 0.25, 0.35, 0.55, 0.65, 0.95]) * P
    np.testing.assert_allclose(zmp_law(t, P, 1), 0.0)
    np.testing.assert_allclose(zmp_law(t, P, 2), [0, 0, 0.035, 0.035, 0.035, 0.035])
    np.testing.assert_allclose(zmp_law(t, P, 3), [0, 0, 0, 0.035, 0.035, 0.035])
    np.testing.assert_allclose(zmp_law(t, P, 4), [-0.02, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(zmp_law(t, P, 5), [-0.02, 0, 0, 0, 0.035, 0.035])
    # double support: p = 40 % of the stride -> tau = 0.15 s at P = 0.75 s (BIDYN's sample output)
    tau, S = 0.15, 0.26
    for k, start in ((1, [-0.5]), (2, [-0.75, -0.25]), (3, [-5 / 6, -0.5, -1 / 6])):
        mid = (np.arange(k) + 0.5) / k * tau
        np.testing.assert_allclose(zmp_law(mid, P, 1, k, S, 40), np.array(start) * S)
        np.testing.assert_allclose(zmp_law(P - mid[::-1], P, 1, k, S, 40), -np.array(start)[::-1] * S)
        # the ZMP moves monotonically from the trailing foot to the next stance foot
        x = zmp_law(np.linspace(0, P, 301, endpoint=False), P, 1, k, S, 40)
        assert np.all(np.diff(x) >= 0) and x[0] > -S and x[-1] < S
    with pytest.raises(BipedError, match="law"):
        zmp_law(0.1, P, 7)


def test_zmp_law_6_goes_to_the_toe_and_steps_between_the_feet_contacts():
    """Law 6 (the foot's contacts, biped.zmp_law) against its definition: at the ankle until 0.45 P, then
    rising in 10 equal steps at 0.45, 0.46, ... 0.54 P to the toe contact; in double support (p = 40 %: tau = 0.15 s at
    P = 0.75 s) law k's staircase runs from the trailing foot's toe (S_h behind the stance ankle, plus the
    toe's x) to the leading foot's heel, not from ankle to ankle."""
    heel, toe, S = -0.06, 0.2, 0.26
    u = np.array([0.2, 0.3, 0.4, 0.449, 0.451, 0.499, 0.501, 0.549, 0.551, 0.7, 0.79])
    np.testing.assert_allclose(zmp_law(u * P, P, 6, 1, S, 0.0, (heel, toe)),
                               toe * np.array([0, 0, 0, 0, 1, 5, 6, 10, 10, 10, 10]) / 10, atol=1e-12)
    tau = 0.15
    for k in (1, 2, 3):
        mid = (np.arange(k) + 0.5) / k * tau
        a, b = toe - S, heel                       # start of the half-step: trailing toe -> new stance heel
        np.testing.assert_allclose(zmp_law(mid, P, 6, k, S, 40, (heel, toe)), a + (np.arange(k) + 0.5) / k * (b - a))
        a, b = toe, S + heel                       # end: this foot's toe -> the next stance foot's heel
        np.testing.assert_allclose(zmp_law(P - tau + mid, P, 6, k, S, 40, (heel, toe)),
                                   a + (np.arange(k) + 0.5) / k * (b - a))
        x = zmp_law(np.linspace(0, P, 301, endpoint=False), P, 6, k, S, 40, (heel, toe))
        assert np.all(np.diff(x) >= 0)
    # with a foot of no extent it is law I (ankle to ankle)
    t = np.linspace(0, 0.45 * P, 301, endpoint=False)
    np.testing.assert_allclose(zmp_law(t, P, 6, 2, S, 40, (-1e-300, 0.0)), zmp_law(t, P, 1, 2, S, 40), atol=1e-12)
    for foot in (None, (0.05, 0.2), (-0.06, float("nan"))):
        with pytest.raises(BipedError, match="law 6"):
            zmp_law(0.1, P, 6, 1, S, 0.0, foot)
