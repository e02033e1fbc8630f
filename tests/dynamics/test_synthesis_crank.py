"""Crank programmes of the Jansen walker (dynamics.synthesis.crank; methods.md c.6, e, e.9, l).

Independent truths: the KKT inverse dynamics of the walker composition code (dynamics.linkage) for a
mirrored slot; the energy balance of a periodic, kinematically driven linkage (net crank work per
revolution = contact dissipation, the loop area of dynamics.contact); the period as the integral of
dtheta / theta' of the programme's own samples.
"""
import dataclasses
import math

import numpy as np
import pytest
from scipy.interpolate import CubicSpline

from dynamics.contact import NormalLaw
from dynamics.linkage import load_linkage
from dynamics.linkage.inverse import inverse_dynamics
from dynamics.linkage.kinematics import velocities
from dynamics.linkage.position import assembled_positions
from dynamics.synthesis.crank import (ProgrammeError, Slot, SpeedProfile, crank_programme, load_walker,
                                      optimise_profile, shaft_programme)

LAW = NormalLaw("hunt_crossley_constant", 2e4, damping=10.0)
WAVY = SpeedProfile("fourier", (0.1, -0.2, 0.05, 0.03), 3, "test")


@pytest.fixture(scope="module")
def walker():
    return load_walker()


def test_feed_forward_torque_equals_kkt_of_the_composed_mirrored_leg(walker):
    slot = Slot("m", "left", math.radians(120.0), True)
    one = dataclasses.replace(walker, slots=(slot,))
    p = shaft_programme(one, "left", 2.0, WAVY, LAW, samples=360)
    data = {"kind": "linkage", "name": "one", "gravity": 9.81,
            "legs": [{"model": "jansen_leg", "prefix": "m", "side": "left", "phase_deg": 120.0, "mirror": True}]}
    model = load_linkage(data, "one.toml")
    k = np.arange(0, 360, 7)
    s, sd, sdd = p.theta[k], p.theta_d[k], p.theta_dd[k]
    q = assembled_positions(model, s)
    qd = velocities(model, q, s, sd)
    F = np.column_stack([np.zeros(k.size), p.foot_force[k, 0]])
    kkt = inverse_dynamics(model, q, qd, s, sd, sdd, foot_force=F).effort
    assert np.abs(F[:, 1]).max() > 5.0  # some samples in stance
    np.testing.assert_allclose(p.torque[k], kkt, atol=2e-4)


@pytest.mark.parametrize("profile", [SpeedProfile(), WAVY])
def test_net_work_per_revolution_equals_contact_dissipation(walker, profile):
    # gravity and kinetic energy are periodic: the crank's net work goes into the contact hysteresis
    p = shaft_programme(walker, "left", 3.0, profile, LAW)
    assert p.dissipated.sum() > 0.01
    assert p.energy_net == pytest.approx(p.dissipated.sum(), rel=2e-3)


def test_profile_keeps_the_period_and_consistent_derivatives(walker):
    p = shaft_programme(walker, "right", 2.5, WAVY, LAW)
    th = np.append(p.theta, 2 * np.pi)
    inv = 1.0 / np.append(p.theta_d, p.theta_d[0])
    assert np.sum(0.5 * (inv[1:] + inv[:-1]) * np.diff(th)) == pytest.approx(2 * np.pi / 2.5, rel=1e-5)
    assert p.theta_d.max() / p.theta_d.min() > 1.3  # the profile is not constant
    t = np.append(p.u, 1.0) * p.period
    spl = CubicSpline(t, np.append(p.theta - 2 * np.pi * p.u, 0.0), bc_type="periodic")
    np.testing.assert_allclose(spl(t[:-1], 1) + 2 * np.pi / p.period, p.theta_d, rtol=1e-5)
    np.testing.assert_allclose(spl(t[:-1], 2), p.theta_dd, atol=1e-3 * np.abs(p.theta_dd).max())


def test_profiled_programme_cuts_peak_force_and_energy_at_the_same_mean_speed(walker):
    speed = 0.3
    prof = optimise_profile(walker, speed, LAW)
    const = crank_programme(walker, speed, 0.0, SpeedProfile(), LAW, samples=720)
    opt = crank_programme(walker, speed, 0.0, prof, LAW, samples=720)
    for a, b in zip(const.shafts, opt.shafts):
        assert a.period == pytest.approx(b.period, rel=1e-12)
        assert b.theta_d.max() / b.theta_d.min() > 1.1
    assert opt.peak_contact_force < 0.995 * const.peak_contact_force
    assert opt.energy_absolute < 0.99 * const.energy_absolute


def test_turn_rate_splits_shaft_speeds_and_bad_input_is_refused(walker):
    p = crank_programme(walker, 0.3, 0.2, SpeedProfile(), LAW, samples=360)
    v_left, v_right = (2 * np.pi / s.period * walker.step_length / (2 * np.pi * walker.duty_factor) for s in p.shafts)
    assert v_left == pytest.approx(0.3 - 0.1 * walker.track)
    assert v_right == pytest.approx(0.3 + 0.1 * walker.track)
    assert p.min_margin > 0  # the chassis centre stays inside the feet's support polygon
    with pytest.raises(ProgrammeError, match="speed"):
        crank_programme(walker, -0.1)
    with pytest.raises(ProgrammeError, match="turn"):
        crank_programme(walker, 0.1, 5.0)
    with pytest.raises(ProgrammeError, match="depth|coef"):
        SpeedProfile("fourier", (0.1,))
