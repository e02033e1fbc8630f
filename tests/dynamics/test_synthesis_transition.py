"""Quintic spline of defect 3 and the setpoint blend (dynamics.synthesis.transition; methods.md j.6).

Truths: exact reproduction of quadratics (each node parabola is the interpolating parabola), C^2
continuity measured from both sides of every node, prescribed end derivatives, convergence on sin,
and the blend's derivatives against finite differences of its own values.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamics.synthesis.transition import TransitionError, blend, defect3_spline


def test_reproduces_a_quadratic_exactly_on_uneven_nodes():
    x = np.array([0.0, 0.3, 0.5, 1.1, 1.4, 2.0])
    f = lambda t: 2 - 3 * t + 0.7 * t ** 2  # noqa: E731
    s = defect3_spline(x, f(x), (-3 + 1.4 * x[0], 1.4), (-3 + 1.4 * x[-1], 1.4))
    t = np.linspace(0, 2, 401)
    np.testing.assert_allclose(s(t), f(t), atol=1e-12)
    np.testing.assert_allclose(s(t, 1), -3 + 1.4 * t, atol=1e-11)
    np.testing.assert_allclose(s(t, 2), 1.4, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=4, max_size=9), st.integers(0, 10 ** 6))
def test_c2_at_every_node_interpolation_and_end_conditions(values, seed):
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.uniform(0.2, 1.0, len(values)))
    f = np.array(values)
    start, end = tuple(rng.normal(size=2)), tuple(rng.normal(size=2))
    s = defect3_spline(x, f, start, end)
    np.testing.assert_allclose(s(x), f, atol=1e-12)
    e = 1e-5
    for nu in (0, 1, 2):
        # one-sided limits by linear extrapolation from two points on each side: error O(e^2)
        left = 2 * s(x[1:-1] - e, nu) - s(x[1:-1] - 2 * e, nu)
        right = 2 * s(x[1:-1] + e, nu) - s(x[1:-1] + 2 * e, nu)
        scale = 1 + np.abs(s(x, nu)).max()
        assert np.all(np.abs(left - right) <= 1e-5 * scale), (nu, left, right)
    assert s(x[0], 1)[0] == pytest.approx(start[0]) and s(x[0], 2)[0] == pytest.approx(start[1])
    assert s(x[-1], 1)[0] == pytest.approx(end[0]) and s(x[-1], 2)[0] == pytest.approx(end[1])


def test_converges_on_a_smooth_function():
    errs = []
    for n in (10, 20, 40):
        x = np.linspace(0, np.pi, n + 1)
        s = defect3_spline(x, np.sin(x), (1.0, 0.0), (-1.0, 0.0))
        t = np.linspace(0, np.pi, 1001)
        errs.append(np.abs(s(t) - np.sin(t)).max())
    assert errs[0] < 2e-3 and errs[1] < errs[0] / 6 and errs[2] < errs[1] / 6  # ~h^3 or better


def test_vector_values_and_bad_nodes():
    x = np.array([0.0, 1.0, 2.0])
    s = defect3_spline(x, np.array([[0.0, 1.0], [1.0, 1.0], [4.0, 1.0]]), ([0.0, 0.0], [2.0, 0.0]), ([4.0, 0.0], [2.0, 0.0]))
    np.testing.assert_allclose(s([0.5, 1.5])[:, 0], [0.25, 2.25], atol=1e-12)
    np.testing.assert_allclose(s([0.5, 1.5])[:, 1], 1.0, atol=1e-12)
    with pytest.raises(TransitionError, match="x"):
        defect3_spline([0, 0, 1], [1, 2, 3], (0, 0), (0, 0))
    with pytest.raises(TransitionError, match="outside"):
        s(2.5)


def test_blend_is_continuous_with_consistent_derivatives():
    D = 0.8
    f = lambda t: (np.sin(t), np.cos(t), -np.sin(t))  # noqa: E731
    g = lambda t: (2 + 3 * t, 3 + 0 * t, 0 * t)  # noqa: E731
    t = np.linspace(-0.2, 1.0, 2401)
    q, qd, qdd = blend(t, D, f(t), g(t))
    np.testing.assert_allclose(q[t <= 0], np.sin(t[t <= 0]))
    np.testing.assert_allclose(q[t >= D], (2 + 3 * t)[t >= D])
    h = t[1] - t[0]
    np.testing.assert_allclose(np.gradient(q, h)[2:-2], qd[2:-2], atol=2e-4)
    # the third derivative jumps at both ends (a''' != 0): central differences are O(h) there
    away = (np.abs(t) > 2.5 * h) & (np.abs(t - D) > 2.5 * h)
    away[:2] = away[-2:] = False
    np.testing.assert_allclose(np.gradient(qd, h)[away], qdd[away], atol=5e-3)
