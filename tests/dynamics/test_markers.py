"""dynamics.markers on synthetic clusters moved along known rigid motions (the truth is the motion)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from dynamics import markers as mk


def _motion(n: int, seed: int = 0):
    t = np.linspace(0, 2, n)
    rot = Rotation.from_rotvec(np.stack([0.8 * np.sin(2 * t), 0.4 * np.cos(3 * t), 1.5 * t], axis=1))
    trans = np.stack([1.2 * t, 0.05 * np.sin(4 * t), 0.9 + 0.02 * np.cos(5 * t)], axis=1)
    ref = np.random.default_rng(seed).uniform(-0.08, 0.08, (5, 3))
    obs = np.einsum("nij,mj->nmi", rot.as_matrix(), ref) + trans[:, None]
    return ref, rot.as_matrix(), trans, obs


def test_rigid_fit_recovers_the_motion_exactly_without_noise_and_within_noise_with_it():
    ref, r_true, t_true, obs = _motion(200)
    fit = mk.rigid_fit(ref, obs)
    np.testing.assert_allclose(fit.rotation, r_true, atol=1e-10)
    np.testing.assert_allclose(fit.translation, t_true, atol=1e-10)
    np.testing.assert_allclose(np.linalg.det(fit.rotation), 1.0)
    assert np.max(fit.residual) < 1e-10
    noisy = obs + 0.001 * np.random.default_rng(1).standard_normal(obs.shape)
    fit = mk.rigid_fit(ref, noisy)
    ang = Rotation.from_matrix(np.swapaxes(fit.rotation, 1, 2) @ r_true).magnitude()
    assert np.degrees(np.max(ang)) < 2.0
    assert np.median(fit.residual) == pytest.approx(0.001 * np.sqrt(3 * (5 - 2) / 5), rel=0.3)


def test_rigid_fit_never_returns_a_reflection_and_skips_frames_with_two_markers():
    ref = np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0], [0.1, 0.1, 0.001]], float)  # near-planar
    mirrored = ref * np.array([1, 1, -1])
    fit = mk.rigid_fit(ref, np.stack([mirrored, ref]))
    np.testing.assert_allclose(np.linalg.det(fit.rotation), 1.0)
    obs = np.stack([ref, ref])
    obs[1, :2] = np.nan
    fit = mk.rigid_fit(ref, obs)
    assert np.isfinite(fit.residual[0]) and np.isnan(fit.residual[1])


def test_fill_gaps_spline_for_short_rigid_for_long_nan_otherwise():
    ref, _, _, obs = _motion(300)
    truth = obs.copy()
    obs = obs.copy()
    obs[100:106, 0] = np.nan     # short: spline
    obs[150:220, 1] = np.nan     # long, in a cluster: rigid
    obs[150:220, 2] = np.nan     # long, also a different marker: clusters still have 3 others
    filled, flags = mk.fill_gaps(obs, max_spline_gap=10, clusters={"seg": [0, 1, 2, 3, 4]})
    assert np.all(flags[100:106, 0] == mk.SPLINE)
    assert np.max(np.abs(filled[100:106, 0] - truth[100:106, 0])) < 2e-4
    assert np.all(flags[150:220, 1] == mk.RIGID)
    np.testing.assert_allclose(filled[150:220, 1:3], truth[150:220, 1:3], atol=1e-9)
    assert np.all(flags[~np.isnan(obs).any(axis=2)] == mk.MEASURED)
    # no cluster: the long gap stays NaN and flagged
    filled, flags = mk.fill_gaps(obs, max_spline_gap=10)
    assert np.all(np.isnan(filled[150:220, 1])) and np.all(flags[150:220, 1] == mk.UNFILLED)


def test_mobility_is_zero_for_a_frozen_joint_and_the_drift_for_a_ramp():
    t = np.linspace(0, 1, 50)
    assert mk.mobility(np.full(50, 0.3), t) == pytest.approx(0.0, abs=1e-12)
    assert mk.mobility(0.3 + 0.2 * t, t) == pytest.approx(0.2, rel=1e-9)  # (Omega tau)^2 only
    noise = np.random.default_rng(2).standard_normal(50) * 0.01
    noise -= np.polyval(np.polyfit(t, noise, 1), t)  # residual exactly the noise, no drift
    assert mk.mobility(noise, t) == pytest.approx(np.sqrt(np.sum(noise ** 2) / 48), rel=1e-9)


def test_reference_line_and_planar_angles_recover_a_known_chain():
    """A 3-segment planar chain with known absolute angles, photographed: rotated 20 deg,
    scaled to pixels (1 px = 2 mm) and shifted. The reference line is a 1 m horizontal bar."""
    t = np.linspace(0, 2, 200)
    phi = np.stack([0.4 * np.sin(2 * t), -0.3 + 0.5 * np.sin(3 * t), 3.0 + 0.5 * t], axis=1)  # from down
    lengths = np.array([0.45, 0.42, 0.25])
    pts = [np.zeros((len(t), 2)) + [0.2, 1.0]]
    for i in range(3):
        pts.append(pts[-1] + lengths[i] * np.stack([np.sin(phi[:, i]), -np.cos(phi[:, i])], axis=1))
    pts = np.stack(pts, axis=1)  # (N, 4, 2) lab m
    ang = np.radians(20)
    R = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])

    def to_image(p):
        return (p @ R.T) / 0.002 + [300.0, 50.0]

    bar = to_image(np.array([[0.0, 0.0], [1.0, 0.0]]))
    frame = mk.reference_frame(bar[0], bar[1], 1.0)
    assert frame.scale == pytest.approx(0.002)
    lab = mk.to_planar_lab(to_image(pts), frame)
    np.testing.assert_allclose(lab, pts, atol=1e-12)
    seg = mk.planar_segments(lab[:, :-1], lab[:, 1:])
    np.testing.assert_allclose(seg.angles, phi, atol=1e-9)  # unwrapped through pi for segment 3
    np.testing.assert_allclose(seg.mean_length[-1], lengths, atol=1e-12)
    vert = mk.reference_frame(to_image(np.array([0.0, 0.0])), to_image(np.array([0.0, 1.0])), 1.0, vertical=True)
    np.testing.assert_allclose(mk.to_planar_lab(to_image(pts), vert), pts, atol=1e-12)


def test_merging_keeps_mass_and_inertia_and_gets_the_com_side():
    # two uniform rods end to end, the second bent up by 90 deg: L-shape
    m = np.array([2.0, 1.0])
    coms = np.array([[0.25, 0.0], [0.5, 0.15]])  # rod 1 along x (0.5 m), rod 2 along y (0.3 m)
    jcs = m * np.array([0.5, 0.3]) ** 2 / 12
    merged = mk.merge_segments(m, coms, jcs, proximal=[0.0, 0.0], distal=[0.5, 0.3])
    assert merged.mass == pytest.approx(3.0)
    rho = (2 * coms[0] + coms[1]) / 3
    j = float(np.sum(m * np.sum(coms ** 2, axis=1)) + jcs.sum())
    assert merged.j_proximal == pytest.approx(j)
    assert merged.jc == pytest.approx(j - 3 * rho @ rho)
    assert merged.a1 ** 2 + merged.a2 ** 2 == pytest.approx(rho @ rho)
    assert merged.a2 < 0  # CoM below the proximal->distal line: clockwise side of r'
    mirrored = mk.merge_segments(m, coms * [1, -1], jcs, [0.0, 0.0], [0.5, -0.3])
    assert mirrored.a2 == pytest.approx(-merged.a2)
    end = mk.merge_segments(m, coms, jcs, [0.0, 0.0])
    assert (end.a1, end.a2) == (pytest.approx(np.linalg.norm(rho)), 0.0)


def _oracle_fit(ref: np.ndarray, obs: np.ndarray):
    """(R, t) of the seen rows of one cluster by scipy's Rotation.align_vectors (Kabsch) on the
    centred points, or NaN when fewer than 3 are seen or they lie on a line."""
    seen = np.isfinite(obs).all(axis=1)
    r, x = ref[seen], obs[seen]
    if len(r) < 3 or np.linalg.matrix_rank(r - r.mean(axis=0), tol=1e-9 * np.abs(r - r.mean(axis=0)).max()) < 2:
        return np.full((3, 3), np.nan), np.full(3, np.nan)
    rot = Rotation.align_vectors(x - x.mean(axis=0), r - r.mean(axis=0))[0].as_matrix()
    return rot, x.mean(axis=0) - rot @ r.mean(axis=0)


def test_masked_rigid_fit_of_a_stack_equals_scipys_align_vectors_per_cluster():
    """50 frames × 6 clusters of 5 markers, each moved by its own random rigid motion with 2 mm noise,
    markers hidden at random (NaN; 0-5 seen); cluster 5's markers 0-2 lie on a line, so a frame that sees
    only those has no fit. Every (frame, cluster) equals scipy's fit of its seen markers alone; NaN
    exactly where that has fewer than 3 or collinear markers; residual the RMS of the fitted points."""
    rng = np.random.default_rng(7)
    n, s = 50, 6
    ref = rng.uniform(-0.1, 0.1, (s, 5, 3))
    ref[5, :3] = np.array([0.0, 0.0, 0.0]) + np.outer([0.0, 0.05, 0.12], [0.3, -0.5, 0.8])
    rot = Rotation.random(n * s, random_state=1).as_matrix().reshape(n, s, 3, 3)
    obs = np.einsum("nsij,smj->nsmi", rot, ref) + rng.uniform(-1, 1, (n, s, 1, 3))
    obs += 0.002 * rng.standard_normal(obs.shape)
    hidden = rng.random((n, s, 5)) < 0.35
    hidden[:, 5, 3:] = rng.random((n, 2)) < 0.7          # cluster 5 often sees only its collinear three
    obs[hidden] = np.nan
    R, t, res = mk.masked_rigid_fit(ref, obs, ~hidden)
    kinds = {"fitted": 0, "too few": 0, "collinear": 0}
    for i in range(n):
        for k in range(s):
            Ro, to = _oracle_fit(ref[k], obs[i, k])
            seen = ~hidden[i, k]
            if np.isnan(Ro).any():
                kinds["too few" if seen.sum() < 3 else "collinear"] += 1
                assert np.isnan(R[i, k]).all() and np.isnan(t[i, k]).all() and np.isnan(res[i, k])
                continue
            kinds["fitted"] += 1
            np.testing.assert_allclose(R[i, k], Ro, atol=1e-9)
            np.testing.assert_allclose(t[i, k], to, atol=1e-9)
            err = ref[k, seen] @ Ro.T + to - obs[i, k, seen]
            assert res[i, k] == pytest.approx(np.sqrt(np.mean(np.sum(err ** 2, axis=1))), rel=1e-9)
    assert min(kinds.values()) >= 3, kinds                # every case occurs
    fit = mk.rigid_fit(ref[0], obs[:, 0])                 # the per-cluster entry point is the same fit
    np.testing.assert_array_equal(fit.rotation, R[:, 0])


def test_unwrap_finite_is_numpys_unwrap_of_each_columns_finite_samples():
    """Random angle walks wrapped to (−π, π], with NaN / ±inf gaps (also leading, and columns never
    seen), with and without a previous block's last values: every finite sample equals np.unwrap of
    its column's finite samples alone (after the start value where there is one), exactly; the rest
    stays as it was. Blockwise (start = the last block's last finite value) equals the whole record
    (to rounding: the start is an unwrapped value, p + Σ corrections)."""
    rng = np.random.default_rng(4)
    for trial in range(200):
        n, c = int(rng.integers(1, 25)), int(rng.integers(1, 6))
        x = np.angle(np.exp(1j * (np.cumsum(rng.normal(0, 2.5, (n, c)), axis=0) + rng.uniform(-9, 9, c))))
        x[rng.random((n, c)) < rng.uniform(0, 0.8)] = rng.choice([np.nan, np.inf, -np.inf])
        start = None if trial % 3 == 0 else np.where(rng.random(c) < 0.5, rng.uniform(-20, 20, c), np.nan)
        got = mk.unwrap_finite(x, start)
        for j in range(c):
            ok = np.isfinite(x[:, j])
            s = [] if start is None or not np.isfinite(start[j]) else [start[j]]
            want = np.unwrap(np.concatenate([s, x[ok, j]]))[len(s):]
            np.testing.assert_array_equal(got[ok, j], want)
            np.testing.assert_array_equal(got[~ok, j], x[~ok, j])
        cut = n // 2
        a = mk.unwrap_finite(x[:cut], start) if cut else np.empty((0, c))
        prev = start if start is not None else np.full(c, np.nan)
        for row in a:
            prev = np.where(np.isfinite(row), row, prev)
        np.testing.assert_allclose(np.concatenate([a, mk.unwrap_finite(x[cut:], prev)]), got, rtol=0, atol=1e-12)
