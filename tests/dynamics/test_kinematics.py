"""Kinematics: analytic double pendulum, Jacobians and point velocities/accelerations against
finite differences along trajectories, all joint types."""
import numpy as np
import pytest

import dynamics
from dynamics.model import Joint, Model, Segment
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

ALL = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")


def pendulum(l1=0.7, l2=0.5):
    """Planar double pendulum (x forward, y up), links pointing down at zero angles."""
    seg = lambda name, parent, origin, tip: Segment(  # noqa: E731
        name, parent, Joint("revolute", axis=np.array([0.0, 0.0, 1.0]), translation=np.array(origin)),
        mass=1.0, com=np.array(tip) / 2, inertia=np.eye(3) * 0.01, markers={f"{name}_tip": np.array(tip)})
    return Model("pendulum", (seg("upper", None, [0, 0, 0], [0, -l1, 0]), seg("lower", "upper", [0, -l1, 0], [0, -l2, 0])),
                 gravity=np.array([0.0, -9.81, 0.0]))


def test_double_pendulum_marker_positions_are_analytic():
    m = pendulum()
    th = np.array([[0.3, -0.4], [1.0, 2.0], [0.0, 0.0]])
    P = dynamics.marker_positions(m, th)
    a, b = th[:, 0], th[:, 0] + th[:, 1]
    np.testing.assert_allclose(P[:, 0, :2], np.stack((0.7 * np.sin(a), -0.7 * np.cos(a)), -1), atol=1e-15)
    np.testing.assert_allclose(P[:, 1, :2], P[:, 0, :2] + np.stack((0.5 * np.sin(b), -0.5 * np.cos(b)), -1), atol=1e-15)
    # single sample: no leading axis
    assert dynamics.marker_positions(m, th[0]).shape == (2, 3)


def _advance(model, q, v, a, h):
    """q(h), v(h) to second order: q̇ from configuration_derivative at a midpoint estimate."""
    vh = v + a * h
    qd = dynamics.configuration_derivative(model, q[None], (v + 0.5 * a * h)[None])[0]
    return q + qd * h, vh


@pytest.mark.parametrize("seed", range(6))
def test_point_jacobian_and_velocity_match_finite_differences(seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng, 7, ALL, root=("free_flyer", "planar", "revolute")[seed % 3])
    q = random_configuration(model, rng)
    v = rng.normal(size=model.nv)
    names = list(model.marker_names[:3]) + list(model.contact_names[-2:])
    h = 1e-6
    qd = dynamics.configuration_derivative(model, q[None], v[None])[0]
    fd = (dynamics.point_kinematics(model, q + h * qd, names=names)
          - dynamics.point_kinematics(model, q - h * qd, names=names)) / (2 * h)
    J = dynamics.point_jacobians(model, q, names)
    assert J.shape == (5, 3, model.nv)
    np.testing.assert_allclose(J @ v, fd, atol=1e-7)
    _, vel = dynamics.point_kinematics(model, q, v, names=names)
    np.testing.assert_allclose(vel, J @ v, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_point_and_com_accelerations_match_finite_differences(seed):
    rng = np.random.default_rng(10 + seed)
    model = random_model(rng, 6, ALL, root=("free_flyer", "planar")[seed % 2])
    q = random_configuration(model, rng)
    v, a = rng.normal(size=(2, model.nv))
    h = 1e-5
    qp, vp = _advance(model, q, v, a, h)
    qm, vm = _advance(model, q, v, a, -h)
    _, vel_p = dynamics.point_kinematics(model, qp, vp)
    _, vel_m = dynamics.point_kinematics(model, qm, vm)
    _, _, acc = dynamics.point_kinematics(model, q, v, a)
    np.testing.assert_allclose(acc, (vel_p - vel_m) / (2 * h), atol=1e-5)
    c, vc, ac = dynamics.com(model, q, v, a)
    np.testing.assert_allclose(ac, (dynamics.com(model, qp, vp)[1] - dynamics.com(model, qm, vm)[1]) / (2 * h), atol=1e-5)
    np.testing.assert_allclose(vc, (dynamics.com(model, qp) - dynamics.com(model, qm)) / (2 * h), atol=1e-5)


def test_frame_jacobian_gives_origin_velocity_and_angular_velocity():
    rng = np.random.default_rng(5)
    model = random_model(rng, 6, ALL, root="free_flyer")
    q = random_configuration(model, rng, 4)
    v = rng.normal(size=(4, model.nv))
    J = dynamics.frame_jacobian(model, q, "s4")
    h = 1e-6
    qd = dynamics.configuration_derivative(model, q, v)
    pp, pm = dynamics.forward_kinematics(model, q + h * qd), dynamics.forward_kinematics(model, q - h * qd)
    i = model.index["s4"]
    np.testing.assert_allclose(np.einsum("nij,nj->ni", J[:, :3], v), (pp.translation[:, i] - pm.translation[:, i]) / (2 * h), atol=1e-7)
    R = dynamics.forward_kinematics(model, q).rotation[:, i]
    Rdot = (pp.rotation[:, i] - pm.rotation[:, i]) / (2 * h)
    W = Rdot @ np.swapaxes(R, -1, -2)              # [ω]× = Ṙ Rᵀ
    np.testing.assert_allclose(np.einsum("nij,nj->ni", J[:, 3:], v), np.stack((W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]), -1), atol=1e-7)


def test_unknown_point_or_segment_is_a_lookup_error():
    m = pendulum()
    with pytest.raises(KeyError, match="no marker or contact point 'knee'"):
        dynamics.marker_positions(m, [0.0, 0.0], ["knee"])
    with pytest.raises(KeyError, match="no segment 'foot'"):
        dynamics.frame_jacobian(m, [0.0, 0.0], "foot")
    with pytest.raises(ValueError, match=r"^q: expected shape \(2,\) or \(N, 2\), got \(3,\)"):
        dynamics.forward_kinematics(m, [0.0, 0.0, 0.0])
