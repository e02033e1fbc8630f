"""Energetics (methods.md l): exact integration of piecewise-linear power, cycle boundaries, and
energy balances of linkages driven at constant speed (analytic potential energy)."""
import math

import numpy as np
import pytest

from dynamics import energetics as E
from dynamics.linkage import constraints as C
from dynamics.linkage import forward as FW
from dynamics.linkage import inverse as INV
from dynamics.linkage import kinematics as K
from dynamics.linkage import position as P
from dynamics.linkage.model import load_linkage, read_linkage

from dynamics.model import G


def test_absolute_and_positive_work_of_a_sign_changing_ramp_are_exact():
    # P = -1 -> +1 linearly over 1 s: net 0, positive 1/4, absolute 1/2 (plain trapezoid of |P|: 1)
    w = E.work([0.0, 1.0], [-1.0, 1.0])
    assert w.net[0] == pytest.approx(0.0, abs=1e-15)
    assert w.positive[0] == pytest.approx(0.25) and w.absolute[0] == pytest.approx(0.5)


def test_stance_swing_split_is_exact_for_piecewise_linear_signals():
    t = np.linspace(0.0, 3.0, 7)                     # 0.5 s samples, 3 cycles of 1 s
    stance = np.tile([1.0, -1.0], 4)[:7]             # +1, -1, +1, ...: crossings at 0.25 s + k 0.5 s
    p = np.full(7, 2.0)
    e = E.cycle_energy(t, p, [0.0, 1.0, 2.0, 3.0], stance=stance)
    assert np.allclose(e.net, 2.0) and np.allclose(e.absolute, 2.0)
    # stance where the linear interpolant of the signal is > 0: [0, .25], [.75, 1.25], ...
    assert np.allclose(e.stance_net, [1.0, 1.0, 1.0]) and np.allclose(e.swing_net, [1.0, 1.0, 1.0])
    assert np.allclose(e.stance_absolute + e.swing_absolute, e.absolute)


@pytest.mark.parametrize("omega, theta0", [(2 * np.pi, 0.3), (-3.0, -1.0)])
def test_cycle_boundaries_are_the_interpolated_crossings(omega, theta0):
    t = np.linspace(0.0, 5.0, 501)
    th = theta0 + omega * t
    b = E.cycle_boundaries(t, th, theta0=0.0)
    k = np.arange(-20, 20)
    exact = (2 * np.pi * k - theta0) / omega
    exact = np.sort(exact[(exact > 0) & (exact < 5.0)])
    assert np.allclose(b, exact, atol=1e-12)


def crank_bar(L=0.4, m=1.5):
    return load_linkage({
        "kind": "linkage", "name": "crank_bar", "foot": "A", "pivot": "O", "gravity": G,
        "ground": {"O": [0.0, 0.0]},
        "bodies": [{"name": "bar", "minus": "O", "plus": "A", "length": L, "mass": m}],
        "joints": [{"type": "ground", "end": "bar-", "at": "O"},
                   {"type": "angle", "body": "bar", "driven": True}],
        "assembly": [{"point": "A", "crank": ["O", L]}],
    }, "crank bar (test)")


def _constant_speed(model, omega, t, theta0=0.0, foot_force=None):
    th = theta0 + omega * t
    q = P.assembled_positions(model, th)
    w = np.full_like(th, omega)
    qd = K.velocities(model, q, th, w)
    tau = INV.inverse_dynamics(model, q, qd, th, w, np.zeros_like(th), foot_force=foot_force).effort
    return th, q, qd, tau


def test_gravity_loaded_crank_cycle_energies_are_analytic():
    L, m, omega = 0.4, 1.5, 2.0
    t = np.linspace(0.0, 3 * 2 * np.pi / omega, 3 * 720 + 1)
    th, _, _, tau = _constant_speed(crank_bar(L, m), omega, t, theta0=0.3)
    # tau = m g (L/2) cos theta: the KKT torque of a bar held against gravity at constant speed
    assert np.allclose(tau, m * G * L / 2 * np.cos(th), atol=1e-12)
    e = E.cycle_energy(t, E.power(tau, np.full_like(t, omega)), E.cycle_boundaries(t, th))
    assert e.net.shape == (2,)                                  # two complete cycles inside the record
    assert np.allclose(e.net, 0.0, atol=1e-9)                   # a conservative load returns its work
    assert np.allclose(e.absolute, 2 * m * G * L, rtol=1e-5)    # int |m g L/2 cos| dtheta = 2 m g L
    assert np.allclose(e.positive, m * G * L, rtol=1e-5)
    # a quarter turn from theta = 0.3 lifts the bar's centre: net work = Delta V
    quarter = E.cycle_energy(t, tau * omega, [0.0, (np.pi / 2) / omega])
    assert quarter.net[0] == pytest.approx(m * G * L / 2 * (math.sin(0.3 + np.pi / 2) - math.sin(0.3)),
                                           rel=1e-5)


def test_jansen_constant_speed_work_equals_change_of_kinetic_and_potential_energy():
    model = read_linkage("jansen_leg")
    omega = 2 * np.pi
    F = np.array([3.0, 25.0])                # constant (conservative) force on the foot, N
    t = np.linspace(0.0, 1.0, 2001)
    th, q, qd, tau = _constant_speed(model, omega, t, foot_force=F)
    T, V = FW.mechanical_energy(model, q, qd)
    Vf = -C.point_positions(model, q, "F") @ F            # potential of the constant foot force
    p = E.power(tau, np.full_like(t, omega))
    whole = E.work(t, p)
    assert abs(whole.net[0]) < 1e-6 * whole.absolute[0]   # periodic: no net work over a revolution
    for k in (400, 1234):                                 # partial intervals: work = Delta(T + V)
        part = E.work(t[:k + 1], p[:k + 1])
        expected = (T[k] + V[k] + Vf[k]) - (T[0] + V[0] + Vf[0])
        assert part.net[0] == pytest.approx(expected, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("args, message", [
    (([0.0, 1.0], [1.0]), r"power: expected shape \(2,\)"),
    (([0.0, 0.0], [1.0, 1.0]), r"t: expected strictly increasing"),
    (([0.0, 1.0], [1.0, np.nan]), r"power: contains NaN"),
])
def test_bad_arrays_raise_naming_the_argument(args, message):
    with pytest.raises(E.EnergeticsError, match=message):
        E.work(*args)
    with pytest.raises(E.EnergeticsError, match="boundaries"):
        E.cycle_energy([0.0, 1.0], [1.0, 1.0], [0.5, 2.0])
    with pytest.raises(E.EnergeticsError, match="tau and omega"):
        E.power(np.ones(3), np.ones(4))
