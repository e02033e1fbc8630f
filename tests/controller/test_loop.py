"""The real-time loop (controller.loop): its update step closed around an independent plant, its
scheduler, and the process on a real VirtualMCU over a pty.

Truths: the sim-mode crank plant (dynamics.plants.crank: its own tabulation and contact code) as
the robot, so tracking measures the feed-forward against another implementation of the dynamics;
the MCU's own latch and watchdog state for stops.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from controller.loop import Controller, Measured, Scheduler
from controller.synergies.jansen import synergy_of
from controller.synergies.robot import load_robot
from controller.synergies.select import Request
from dynamics.contact import NormalLaw
from dynamics.linkage.model import read_linkage
from dynamics.plants.crank import crank_plant, motor_load
from dynamics.synthesis.crank import Slot, SpeedProfile, crank_programme, load_walker

LAW = NormalLaw("hunt_crossley_constant", 2e4, damping=10.0)
CONTACT = {"kind": "hunt_crossley_constant", "stiffness": 2e4, "damping": 10.0}
LEFT, RIGHT = (0.0, 120.0, 240.0), (180.0, 300.0, 60.0)


@pytest.fixture(scope="module")
def rig():
    """A walker of plain legs (three per shaft), its nominals at two speeds, and the plants."""
    w = load_walker()
    slots = tuple(Slot(f"L{k}", "left", math.radians(p), False) for k, p in enumerate(LEFT)) + \
        tuple(Slot(f"R{k}", "right", math.radians(p), False) for k, p in enumerate(RIGHT))
    w = dataclasses.replace(w, slots=slots)
    noms = [synergy_of(crank_programme(w, v, 0.0, SpeedProfile(), LAW, 360), f"v{v}", CONTACT) for v in (0.2, 0.35)]
    leg = read_linkage("jansen_leg")
    plants = [crank_plant([(leg, math.radians(p)) for p in side], ground_penetration=0.008, law=LAW)
              for side in (LEFT, RIGHT)]
    return noms, plants


def config():
    """The shipped Jansen config; its margin guard off: three plain legs per side do not always
    keep the chassis centre inside their support polygon (the 12-leg walker does)."""
    cfg = load_robot("jansen")
    return dataclasses.replace(cfg, limits=dataclasses.replace(cfg.limits, min_margin=-1.0))


def simulate(ctl: Controller, plants, seconds: float, q0, qd0=(0.0, 0.0), on_cycle=None):
    """Closed loop at the controller's rate: zero-order-hold torque, 4 RK4 substeps per cycle."""
    dt = ctl.dt
    q, qd = np.array(q0, float), np.array(qd0, float)
    log = []

    def acc(q, qd, tau):
        out = np.empty(2)
        for j, p in enumerate(plants):
            J, load = motor_load(p, q[j:j + 1], qd[j:j + 1])
            out[j] = (tau[j] - load[0]) / J[0]
        return out

    t_ns = 0
    for k in range(int(round(seconds / dt))):
        if on_cycle:
            on_cycle(k, ctl)
        out = ctl.update(t_ns, Measured(t_ns, q.copy(), qd.copy()))
        tau = out.decision.tau if out.decision.enabled else np.zeros(2)
        h = dt / 4
        for _ in range(4):
            k1v, k1a = qd, acc(q, qd, tau)
            k2v, k2a = qd + h / 2 * k1a, acc(q + h / 2 * k1v, qd + h / 2 * k1a, tau)
            k3v, k3a = qd + h / 2 * k2a, acc(q + h / 2 * k2v, qd + h / 2 * k2a, tau)
            k4v, k4a = qd + h * k3a, acc(q + h * k3v, qd + h * k3a, tau)
            q = q + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
            qd = qd + h / 6 * (k1a + 2 * k2a + 2 * k3a + k4a)
        t_ns += round(dt * 1e9)
        log.append((out, q.copy(), qd.copy()))
    return log


def test_feed_forward_plus_pd_tracks_the_nominal_on_the_plant(rig):
    noms, plants = rig
    ctl = Controller(config(), noms)
    ref = noms[0].reference(np.zeros(2))
    ctl.command(Request(0.2))
    log = simulate(ctl, plants, 5.0, ref[0])
    # the start from rest is a transient (the reference starts at full speed); then steady tracking
    err = np.array([o.reference.q - q for o, q, _ in log[1500:] if o.reference is not None])
    assert err.shape[0] == 1000
    # kp = 2 N m/rad: without the feed-forward the ~0.5 N m load would need ~0.25 rad of error
    assert np.abs(err).max() < 0.01, np.abs(err).max()
    # switch to the faster nominal mid-walk: still tracked, and the walker got faster
    ctl.command(Request(0.35))
    log = simulate(ctl, plants, 4.0, log[-1][1], log[-1][2])
    err = np.array([o.reference.q - q for o, q, _ in log if o.reference is not None])
    assert np.abs(err).max() < 0.02, np.abs(err).max()
    speed = np.mean([qd for _, _, qd in log[-1000:]], axis=0)
    np.testing.assert_allclose(speed, 2 * np.pi / noms[1].period, rtol=0.02)


def test_estop_zeroes_the_torque_in_the_cycle_it_arrives(rig):
    noms, plants = rig
    ctl = Controller(config(), noms)
    ctl.command(Request(0.2))
    seen = {}

    def hook(k, c):
        if k == 1500:
            c.safety.estop(k, "test")

    log = simulate(ctl, plants, 4.0, noms[0].reference(np.zeros(2))[0], on_cycle=hook)
    assert log[1499][0].decision.enabled and np.any(log[1499][0].decision.tau != 0)
    assert all(not o.decision.enabled and np.all(o.decision.tau == 0) for o, _, _ in log[1500:])
    # a reset and a new request: walking resumes from where the walker stopped, torque ramps from 0
    ctl.safety.reset(0)
    ctl.command(Request(0.2))
    log2 = simulate(ctl, plants, 0.1, log[-1][1], log[-1][2])
    taus = np.array([o.decision.tau for o, _, _ in log2])
    assert np.all(np.abs(np.diff(taus, axis=0)) <= np.asarray(ctl.cfg.limits.torque_slew) * ctl.dt + 1e-12)
    seen["ok"] = True
    assert seen


def test_stale_measurements_turn_the_torque_off(rig):
    noms, _ = rig
    ctl = Controller(config(), noms)
    ctl.command(Request(0.2))
    m = Measured(0, np.zeros(2), np.zeros(2))
    assert ctl.update(0, m).decision.enabled
    out = ctl.update(int(0.05e9), m)  # 50 ms old > stale_s = 20 ms
    assert not out.decision.enabled and [e.cause for e in out.decision.events] == ["stale"]
    assert not ctl.update(int(0.06e9), None).decision.enabled


def test_scheduler_keeps_absolute_deadlines_and_counts_overruns():
    t = [0]

    def clock():  # every read advances 100 ns
        t[0] += 100
        return t[0]

    def sleep(deadline):  # the OS sleep wakes at the end of the spin window
        t[0] = deadline

    s = Scheduler(2_000_000, 100_000, clock=clock, sleep=sleep)
    first = s.next
    wakes = []
    for k in range(5):
        now, jitter = s.wait()
        wakes.append(now - first)
        assert 0 <= jitter < 1000
        if k == 2:
            t[0] += 5_000_000  # a 5 ms cycle: the deadlines at 6 and 8 ms are missed
        s.done()
    assert [w // 1000 for w in wakes] == [0, 2000, 4000, 10000, 12000]  # us after the first deadline
    assert (s.overruns, s.missed, s.cycles) == (1, 2, 5)
