"""Centroidal momentum: its rate equals the time derivative along a trajectory; in flight (no
external load, torque-free) the momentum about the CoM is conserved and the CoM is ballistic
(methods.md b.5)."""
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import dynamics
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

ALL = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")


@pytest.mark.parametrize("seed", range(4))
def test_momentum_rate_is_the_time_derivative(seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng, 7, ALL, root=("free_flyer", "revolute")[seed % 2])
    q = random_configuration(model, rng)
    v, a = rng.normal(size=(2, model.nv))
    h = 1e-5

    def at(t):
        qd = dynamics.configuration_derivative(model, q[None], (v + 0.5 * a * t)[None])[0]
        return dynamics.centroidal_momentum(model, q + qd * t, v + a * t)

    hG, dhG = dynamics.centroidal_momentum(model, q, v, a)
    np.testing.assert_allclose(hG, at(0.0), atol=1e-14)
    np.testing.assert_allclose(dhG, (at(h) - at(-h)) / (2 * h), atol=1e-5 * max(1.0, np.abs(dhG).max()))
    _, vc = dynamics.com(model, q, v)
    np.testing.assert_allclose(hG[:3], model.total_mass * vc, atol=1e-12)


def test_flight_phase_conserves_centroidal_angular_momentum():
    rng = np.random.default_rng(3)
    model = random_model(rng, 5, ("revolute", "spherical"), root="free_flyer")
    q0 = random_configuration(model, rng)
    v0 = rng.normal(size=model.nv)
    nq = model.nq

    def f(t, x):
        q, v = x[:nq], x[nq:]
        qd = dynamics.configuration_derivative(model, q[None], v[None])[0]
        return np.concatenate((qd, dynamics.forward_dynamics(model, q, v, np.zeros(model.nv))))

    sol = solve_ivp(f, (0.0, 0.4), np.concatenate((q0, v0)), method="DOP853", rtol=1e-11, atol=1e-11, dense_output=True)
    t = np.linspace(0, 0.4, 9)
    X = sol.sol(t).T
    hG = dynamics.centroidal_momentum(model, X[:, :nq], X[:, nq:])
    np.testing.assert_allclose(hG[:, 3:], np.broadcast_to(hG[0, 3:], hG[:, 3:].shape), atol=1e-7)
    c = dynamics.com(model, X[:, :nq])
    ballistic = c[0] + np.outer(t, hG[0, :3] / model.total_mass) + 0.5 * np.outer(t ** 2, model.gravity)
    np.testing.assert_allclose(c, ballistic, atol=1e-7)
    # joints really moved: the motion is not a rigid drift
    assert np.abs(X[-1, 7:nq] - X[0, 7:nq]).max() > 1e-2
