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
