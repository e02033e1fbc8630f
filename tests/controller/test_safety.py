"""Safety rules of the loop (controller.safety) and the update step's stops (controller.loop.Controller).

Truths: the configured limits themselves (every command the safety lets out must satisfy them, whatever
goes in: property tests), the latch semantics (a latched stop stays until reset, in the same cycle), and
the control law tau = tau_ff + kp (q_ref - q) + kd (q'_ref - q') recomputed from the gains on the setpoint
the update step commands.
"""
import dataclasses
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.safety import Safety
from controller.synergies.robot import load_robot

LIMITS = load_robot("jansen").limits
DT = 0.002


def fresh(s: Safety, t: int, q=(0.0, 0.0), qd=(0.0, 0.0)):
    return s.check(t, 0.0, np.array(q), np.array(qd))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3), st.floats(-50, 50), st.floats(-50, 50),
                          st.floats(-20, 20), st.floats(-20, 20), st.booleans()), min_size=1, max_size=60))
def test_commands_stay_within_every_limit_under_random_references(steps):
    s = Safety(LIMITS, DT)
    prev_tau, prev_q = np.zeros(2), None
    t = 0
    for ta, tb, qa, qb, va, vb, stale in steps:
        t += 2_000_000
        ev = s.check(t, 1.0 if stale else 0.0, np.zeros(2), np.array([va, vb]))
        q_ref = s.setpoint(np.array([qa, qb])) if not s.stale and s.latched is None else None  # as the loop
        d = s.shape(t, np.array([ta, tb]), q_ref, ev)
        assert np.all(np.abs(d.tau) <= np.asarray(LIMITS.torque))
        if d.enabled:  # torque moves at the slew limit (from zero after a stop); a stop cuts it at once
            assert np.all(np.abs(d.tau - prev_tau) <= np.asarray(LIMITS.torque_slew) * DT + 1e-12)
        if d.enabled and prev_q is not None and d.q_ref is not None:
            assert np.all(np.abs(d.q_ref - prev_q) <= np.asarray(LIMITS.slew) * DT + 1e-12)
        if not d.enabled:
            assert np.all(d.tau == 0)
        if np.any(np.abs([va, vb]) > np.asarray(LIMITS.velocity)) and not stale:
            assert s.latched is not None and not d.enabled
        prev_tau = d.tau
        prev_q = d.q_ref if d.enabled else None


def test_estop_stops_in_the_same_cycle_and_stays_latched_until_reset():
    s = Safety(LIMITS, DT)
    fresh(s, 0)
    for k in range(200):  # ramp up to a steady torque
        d = s.shape(k, np.array([1.0, -1.0]))
    assert d.enabled and d.tau.tolist() == [1.0, -1.0]
    ev = s.estop(10, "cli")
    assert ev.latched and ev.cause == "estop"
    d = s.shape(11, np.array([1.0, -1.0]), None, fresh(s, 11))
    assert not d.enabled and d.tau.tolist() == [0.0, 0.0]
    for k in range(5):
        assert not s.shape(12 + k, np.array([1.0, 1.0]), None, fresh(s, 12 + k)).enabled
    s.reset(20)
    d = s.shape(21, np.array([1.0, -1.0]), None, fresh(s, 21))
    assert d.enabled and np.allclose(np.abs(d.tau), np.asarray(LIMITS.torque_slew) * DT)  # ramps, no jump


def test_stale_data_turns_torque_off_without_latching_and_reports_once():
    s = Safety(LIMITS, DT)
    assert [e.cause for e in fresh(s, 0)] == ["fresh"]
    s.shape(0, np.ones(2))
    ev1 = s.check(1, 2 * LIMITS.stale_s, np.zeros(2), np.zeros(2))
    ev2 = s.check(2, 3 * LIMITS.stale_s, np.zeros(2), np.zeros(2))
    assert [e.cause for e in ev1] == ["stale"] and ev2 == []
    assert not s.shape(2, np.ones(2), None, ev1).enabled and s.latched is None
    assert [e.cause for e in fresh(s, 3)] == ["fresh"]
    assert s.shape(3, np.ones(2)).enabled


def test_position_limit_and_zmp_margin():
    lim = dataclasses.replace(LIMITS, position_min=(-1.0, -1.0), position_max=(1.0, 1.0), min_margin=0.02)
    s = Safety(lim, DT)
    # a margin with no ZMP age: the guard is not watching (no nominal tracked)
    assert [e.cause for e in s.check(0, 0.0, np.array([0.0, 0.0]), np.zeros(2), margin=0.01)] == ["fresh"]
    ev = s.check(0, 0.0, np.array([0.0, 0.0]), np.zeros(2), margin=0.01, zmp_age_s=0.0)
    assert [e.cause for e in ev] == ["zmp_margin"] and ev[0].latched and s.latched is ev[0]
    d = s.shape(0, np.zeros(2), None, ev)
    assert d.stop_requested
    ev = s.check(1, 0.0, np.array([0.0, 1.5]), np.zeros(2), margin=0.05)
    assert [e.cause for e in ev] == ["position_limit"] and "actuator 1" in ev[0].detail
    assert not s.shape(1, np.zeros(2), None, ev).enabled and s.latched.cause == "position_limit"


def walking(lim, tau=(3.0, -2.5), cycles=100) -> Safety:
    """A Safety whose torque has ramped up to `tau` (N m) through its slew limit."""
    s = Safety(lim, DT)
    for k in range(cycles):
        fresh(s, k)
        s.shape(k, np.array(tau), s.setpoint(np.zeros(2)))
    np.testing.assert_array_equal(s.tau, tau)
    return s


@pytest.mark.parametrize("margin, age, cause", [(0.01, 0.0, "zmp_margin"), (None, 0.5, "zmp_stale"),
                                                (None, float("inf"), "zmp_stale"), (float("nan"), 0.0, "zmp_margin")])
def test_zmp_guard_latches_a_torque_ramp_to_idle(margin, age, cause):
    """The ZMP guard's stop: latched, the torque ramps to zero at the torque slew limit (never a step
    beyond torque_slew x dt), then the motors idle until reset. Truth: the configured limits."""
    lim = dataclasses.replace(LIMITS, min_margin=0.02, zmp_stale_s=0.2)
    s = walking(lim)
    ev = s.check(100, 0.0, np.zeros(2), np.zeros(2), margin=margin, zmp_age_s=age)
    assert [e.cause for e in ev] == [cause] and ev[0].latched and s.latched is ev[0]
    assert s.check(101, 0.0, np.zeros(2), np.zeros(2), margin=0.0, zmp_age_s=9.0) == []  # latched: once
    taus, step = [s.tau.copy()], np.asarray(lim.torque_slew) * DT
    for k in range(101, 400):
        d = s.shape(k, np.array([5.0, 5.0]), None, ev if k == 101 else [])
        assert d.stop_requested == (k == 101)
        taus.append(d.tau)
        if not d.enabled:
            break
    taus = np.array(taus)
    assert np.all(np.abs(np.diff(taus, axis=0)) <= step + 1e-12) and np.all(taus[-1] == 0)
    assert len(taus) - 1 == int(np.ceil(np.abs(taus[0]).max() / step.max() - 1e-9))  # as fast as the slew allows
    assert not s.shape(500, np.ones(2)).enabled and s.latched.cause == cause   # idle until reset
    s.reset(501)
    fresh(s, 502)
    assert s.shape(502, np.ones(2)).enabled


def test_zmp_guard_quiet_above_the_margin_and_a_hard_stop_cuts_its_ramp():
    lim = dataclasses.replace(LIMITS, min_margin=0.02, zmp_stale_s=0.2)
    s = walking(lim)
    assert s.check(100, 0.0, np.zeros(2), np.zeros(2), margin=0.021, zmp_age_s=0.19) == []
    assert s.check(101, 0.0, np.zeros(2), np.zeros(2), margin=None, zmp_age_s=0.2) == []
    assert s.latched is None and s.shape(101, s.tau).enabled
    ev = s.check(102, 0.0, np.zeros(2), np.zeros(2), margin=-0.01, zmp_age_s=0.0)
    d = s.shape(102, np.zeros(2), None, ev)
    assert d.enabled and np.all(d.tau != 0)            # ramping down
    s.estop(103, "test")                                # an e-stop during the ramp: torque off at once
    d = s.shape(103, np.zeros(2))
    assert not d.enabled and np.all(d.tau == 0) and s.latched.cause == "estop"


def test_non_finite_command_latches():
    s = Safety(LIMITS, DT)
    fresh(s, 0)
    d = s.shape(0, np.array([np.nan, 0.0]))
    assert not d.enabled and s.latched.cause == "invalid_command"


@functools.cache
def nominal():
    """A crank programme of the shipped walker at 0.2 m/s (shaft speed 2π/4.46 s ≈ 1.41 rad/s)."""
    from controller.synergies.jansen import synergy_of
    from dynamics.contact import NormalLaw
    from dynamics.synthesis.crank import SpeedProfile, crank_programme, load_walker

    law = NormalLaw("hunt_crossley_constant", 2e4, damping=10.0)
    contact = {"kind": "hunt_crossley_constant", "stiffness": 2e4, "damping": 10.0}
    return synergy_of(crank_programme(load_walker(), 0.2, 0.0, SpeedProfile(), law, 360), "v0.2", contact)


@settings(max_examples=25, deadline=None)
@given(st.floats(1.5, 12.0), st.lists(st.tuples(st.floats(-0.5, 0.5), st.floats(-0.5, 0.5), st.floats(-2, 2),
                                                st.floats(-2, 2), st.one_of(st.just(0.0), st.floats(-0.3, 0.3))),
                                      min_size=30, max_size=30))
def test_update_commands_the_pd_of_the_slew_limited_setpoint(slew, states):
    # a step reference (the tracker's clock jumped: at cycle 5 by a quarter cycle, π/2 rad of crank, and at
    # random cycles by up to ±0.3 cycle; the nominal's own 1.41 rad/s stays below the slew limit, which
    # the tracker requires): the setpoint the update step reports moves at most slew x dt a cycle, and the
    # torque is the control law of that setpoint, not of the reference (torque limits wide open here, so
    # only the setpoint slew shapes the command)
    from controller.loop import Controller, Measured
    from controller.synergies.select import Request

    nom = nominal()
    cfg = load_robot("jansen")
    lim = dataclasses.replace(cfg.limits, slew=(slew, slew), torque=(1e6, 1e6), torque_slew=(1e9, 1e9),
                              velocity=(10.0, 10.0), min_margin=-1.0)
    ctl = Controller(dataclasses.replace(cfg, limits=lim), [nom], dt=DT)
    ctl.command(Request(0.2))
    q0 = nom.reference(np.zeros(2))[0]
    prev, slewed = None, 0
    for k, (da, db, va, vb, jump) in enumerate(states):
        t = k * 2_000_000
        q, qd = q0 + np.array([da, db]) + 1.41 * k * DT, np.array([va, vb])
        if ctl.tracker.phase is not None and k:
            ctl.tracker.phase = ctl.tracker.phase + (0.25 if k == 5 else jump)
        out = ctl.update(t, Measured(t, q, qd))
        d, r = out.decision, out.reference
        assert d.enabled and r is not None
        law = r.tau + np.asarray(cfg.kp) * (d.q_ref - q) + np.asarray(cfg.kd) * (r.qd - qd)
        np.testing.assert_allclose(d.tau, law, rtol=1e-12, atol=1e-12)
        if prev is not None:
            assert np.all(np.abs(d.q_ref - prev) <= slew * DT + 1e-12)
        slewed += "setpoint_slew" in d.shaped
        prev = d.q_ref
    assert slewed >= 1  # the limit acted on the step
    assert ctl.safety.counts["setpoint_slew"] == slewed
