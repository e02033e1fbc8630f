"""Support polygon and stability margin (methods.md d.5) against analytic cases and Qhull."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import ConvexHull

from dynamics.support import (
    SupportError,
    interval_margin,
    stability_margin,
    support_margin,
    support_polygon,
    within,
)

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

SQUARE = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.5]])  # interior + edge points


def test_within_grown_square_analytic():
    """Unit square grown by tol: a point off an edge is in iff its distance <= tol; off a corner the
    Euclidean distance decides (|(0.06, 0.06)| = 0.0849 m), not min_k s_k = -0.06; NaN is never in."""
    poly = support_polygon(SQUARE)
    p = np.array([[0.5, 0.5], [1.05, 0.5], [1.06, 1.06], [np.nan, 0.5], [3.0, 0.5]])
    assert within(p, poly).tolist() == [True, False, False, False, False]
    assert within(p, poly, 0.1).tolist() == [True, True, True, False, False]
    assert within(p, poly, 0.08).tolist() == [True, True, False, False, False]
    assert within(p, poly, 0.09).tolist() == [True, True, True, False, False]
    # degenerate polygons (a point, a segment) by the Euclidean distance as well
    assert within([[0.0, 0.3]], support_polygon(np.zeros((1, 2))), 0.31).tolist() == [True]
    assert within([[0.5, 0.3]], support_polygon([[0.0, 0.0], [1.0, 0.0]]), 0.29).tolist() == [False]
    with pytest.raises(SupportError, match="p must have shape"):
        within([0.5, 0.5], poly)


def test_square_hull_and_analytic_margin():
    poly = support_polygon(SQUARE)
    assert poly.n_vertices == 4
    v = poly.vertices
    area2 = np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
    assert area2 == pytest.approx(2.0)  # counter-clockwise, area 1
    assert stability_margin([0.5, 0.5], poly)[0] == pytest.approx(0.5)
    assert stability_margin([0.9, 0.3], poly)[0] == pytest.approx(0.1)
    assert stability_margin([1.5, 0.5], poly)[0] == pytest.approx(-0.5)
    # near a corner the margin is the Euclidean distance, not min_k s_k (which would give -0.5)
    assert stability_margin([1.5, 1.5], poly)[0] == pytest.approx(-np.sqrt(0.5))


def test_margin_sign_flips_exactly_at_the_edge():
    poly = support_polygon(SQUARE)
    eps = 1e-12
    xs = np.array([1 - 1e-3, 1 - eps, 1.0, 1 + eps, 1 + 1e-3])
    m = stability_margin(np.column_stack([xs, np.full(5, 0.3)]), poly)
    np.testing.assert_allclose(m, [1e-3, eps, 0.0, -eps, -1e-3], atol=1e-15)
    assert m[1] > 0 > m[3] and m[2] == 0.0
    # along a slanted crossing of a slanted edge: the margin is linear in the crossing parameter near it
    tri = support_polygon(np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]]))
    t = np.linspace(-0.01, 0.01, 21)
    edge_pt, normal = np.array([1.0, 0.5]), np.array([1.0, 2.0]) / np.sqrt(5)
    m = stability_margin(edge_pt - t[:, None] * normal, tri)
    np.testing.assert_allclose(m, t, atol=1e-15)
    assert np.all(np.sign(m) == np.sign(t))


def test_single_double_and_flight():
    # one point, two points, collinear points, no point
    assert stability_margin([3.0, 4.0], support_polygon(np.zeros((1, 3))))[0] == pytest.approx(-5.0)
    seg = support_polygon(np.array([[0.0, 0, 0], [2, 0, 0], [1, 0, 0]]))
    assert seg.n_vertices == 2
    assert stability_margin([1.0, 0.3], seg)[0] == pytest.approx(-0.3)
    assert stability_margin([3.0, 0.0], seg)[0] == pytest.approx(-1.0)
    flight = support_polygon(np.ones((3, 3)), np.zeros(3, bool))
    assert flight.n_vertices == 0 and np.isnan(stability_margin([0.0, 0.0], flight)[0])
    # double support: two feet (heel/toe x lateral edges), the hull spans both
    foot = np.array([[0.0, -0.05], [0.25, -0.05], [0.25, 0.05], [0.0, 0.05]])
    left, right = foot + [0.3, 0.15], foot + [0.0, -0.15]
    pts = np.vstack([left, right])
    both = support_polygon(pts)
    only_right = support_polygon(pts, np.r_[np.zeros(4, bool), np.ones(4, bool)])
    assert only_right.n_vertices == 4
    p = np.array([0.27, 0.0])  # between the feet: outside each foot, inside the double-support hull
    assert stability_margin(p, both)[0] > 0 > stability_margin(p, only_right)[0]
    assert stability_margin(p, only_right)[0] == pytest.approx(-np.hypot(0.02, 0.1))  # nearest corner (0.25, -0.1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 20))
def test_random_polygons_against_qhull(seed, n):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-0.3, 0.3, (n, 2))
    try:
        hull = ConvexHull(pts)
    except Exception:  # degenerate input for Qhull (collinear): nothing to compare
        return
    poly = support_polygon(pts)
    assert set(map(tuple, poly.vertices)) == set(map(tuple, pts[hull.vertices]))
    probes = rng.uniform(-0.5, 0.5, (200, 2))
    m = stability_margin(probes, poly)
    # Qhull facets: A p + b <= 0 inside, with unit outward normals A
    s = probes @ hull.equations[:, :2].T + hull.equations[:, 2]
    inside = np.all(s <= 0, axis=1)
    assert np.array_equal(m > 0, inside)
    np.testing.assert_allclose(m[inside], -s[inside].max(axis=1), atol=1e-12)
    # outside: distance to the densely sampled boundary (upper bound on the true distance)
    loop = pts[np.r_[hull.vertices, hull.vertices[0]]]
    tt = np.linspace(0, 1, 501)[:, None]
    boundary = np.concatenate([a + tt * (b - a) for a, b in zip(loop[:-1], loop[1:])])
    out = ~inside
    dist = np.min(np.linalg.norm(probes[out, None] - boundary[None], axis=-1), axis=1)
    seg = np.max(np.linalg.norm(np.diff(loop, axis=0), axis=1)) / 500
    assert np.all(-m[out] <= dist + 1e-12) and np.all(-m[out] >= dist - seg)


def test_support_margin_over_time_and_nan():
    foot = np.array([[0.0, -0.05, 0.0], [0.2, -0.05, 0.0], [0.2, 0.05, 0.0], [0.0, 0.05, 0.0]])
    pts = np.stack([foot + [0.01 * k, 0, 0] for k in range(5)])
    mask = np.ones((5, 4), bool)
    mask[3] = False
    p = np.array([[0.1, 0, 0], [0.3, 0, 0], [np.nan, np.nan, 0], [0.1, 0, 0], [0.14, 0.0, 0]])
    m, nv = support_margin(pts, mask, p)
    assert nv.tolist() == [4, 4, 4, 0, 4]
    np.testing.assert_allclose(m[[0, 1, 4]], [0.05, -0.09, 0.05])
    assert np.isnan(m[2]) and np.isnan(m[3])
    with pytest.raises(SupportError, match="disagree"):
        support_margin(pts, mask[:4], p)
    pts[2, 1, 0] = np.nan                              # a NaN point in contact: named, never a silent margin
    with pytest.raises(SupportError, match="finite"):
        support_margin(pts, mask, p)


def test_support_margin_compiled_equals_numpy_path_on_degenerate_clouds():
    """Points on a coarse grid (duplicates, collinear runs, single points, segments, flight) and
    probes inside, outside and NaN: both paths give the same vertex counts and margins."""
    from dynamics import kernels

    rng = np.random.default_rng(7)
    N, C = 400, 9
    pts = rng.integers(0, 3, size=(N, C, 3)).astype(float) * 0.1
    mask = rng.random((N, C)) < rng.uniform(0.0, 1.0, (N, 1))
    p = rng.uniform(-0.1, 0.3, (N, 3))
    p[::37] = np.nan
    with kernels.use_jit(True):
        m1, n1 = support_margin(pts, mask, p)
    with kernels.use_jit(False):
        m0, n0 = support_margin(pts, mask, p)
    assert set(n0.tolist()) >= {0, 1, 2, 3, 4}
    np.testing.assert_array_equal(n1, n0)
    np.testing.assert_allclose(m1, m0, rtol=1e-12, atol=1e-15)


def test_interval_margin_planar():
    x = np.array([[0.0, 0.2], [0.0, 0.2], [0.1, 0.5], [0.1, 0.5]])
    mask = np.array([[True, True], [True, False], [False, False], [True, True]])
    p = np.array([0.05, 0.03, 0.2, 0.6])
    np.testing.assert_allclose(interval_margin(x, mask, p)[[0, 1, 3]], [0.05, -0.03, -0.1])
    assert np.isnan(interval_margin(x, mask, p)[2])


def test_bad_points_named():
    with pytest.raises(SupportError, match="finite"):
        support_polygon(np.array([[0.0, np.nan], [1.0, 0.0]]))
    with pytest.raises(SupportError, match="in_contact"):
        support_polygon(np.zeros((3, 2)), np.ones(2, bool))
