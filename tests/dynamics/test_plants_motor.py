"""DC motor plant against its analytic steady states and free decay."""
from __future__ import annotations

import numpy as np
import pytest

from dynamics.plants import motor as plant

P0 = plant.MotorParams(tau_c=0.0, b=2e-5)


def run(bank, v, enabled, seconds, load=None, h=1e-3):
    for k in range(int(round(seconds / h))):
        plant.step(bank, v, enabled, k * h, h, load)


def test_constant_voltage_reaches_the_analytic_steady_state():
    # V = R i + Ke w, Kt i = b w  ->  w = Kt V / (Kt Ke + R b),  i = b w / Kt.
    bank = plant.MotorBank.from_params([P0, P0])
    v = np.array([6.0, -3.0])
    run(bank, v, np.array([True, True]), 2.0)
    w = P0.Kt * v / (P0.Kt * P0.Ke + P0.R * P0.b)
    np.testing.assert_allclose(bank.w_m, w, rtol=1e-6)
    np.testing.assert_allclose(bank.i, P0.b * w / P0.Kt, rtol=1e-5)
    np.testing.assert_allclose(bank.omega, w / P0.gear, rtol=1e-6)


def test_load_torque_callback_at_the_output_shaft():
    # With tau_L at the output: Kt i = b w + tau_L / N and V = R i + Ke w (2x2 linear system).
    tau_l = 0.4
    calls = []

    def load(t, theta, omega):
        calls.append(theta.shape)
        return np.full_like(theta, 1e-3), np.full_like(theta, tau_l)

    bank = plant.MotorBank.from_params([P0])
    run(bank, np.array([12.0]), np.array([True]), 2.0, load)
    a = np.array([[P0.R, P0.Ke], [P0.Kt, -P0.b]])
    i, w = np.linalg.solve(a, [12.0, tau_l / P0.gear])
    np.testing.assert_allclose([bank.i[0], bank.w_m[0]], [i, w], rtol=1e-6)
    assert calls and calls[0] == (1,)


def test_torque_off_is_open_circuit_and_decays_by_viscous_friction():
    bank = plant.MotorBank.from_params([P0])
    run(bank, np.array([10.0]), np.array([True]), 1.0)
    w0 = bank.w_m[0]
    j = P0.J_m + P0.J_load / P0.gear ** 2
    run(bank, np.array([10.0]), np.array([False]), 0.05, h=1e-4)
    assert bank.i[0] == 0.0
    # dw/dt = -b w / J  ->  w0 exp(-b t / J) (semi-implicit Euler, h = 0.1 ms: first-order accurate)
    assert bank.w_m[0] == pytest.approx(w0 * np.exp(-P0.b * 0.05 / j), rel=1e-3)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="MotorParams.R"):
        plant.MotorParams(R=0.0)
    with pytest.raises(ValueError, match="MotorParams.tau_c"):
        plant.MotorParams(tau_c=-1.0)
