"""dynamics.identify on analytic problems and synthetic motions with known masses."""
from __future__ import annotations

import numpy as np
import pytest

from dynamics import identify as ident


def test_sobol_then_nelder_mead_finds_the_rosenbrock_minimum():
    def rosen(x):
        return float((1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2)

    s = ident.sobol_nelder_mead(rosen, [(-2, 2), (-1, 3)], x0=[-1.5, 2.5], m=8)
    np.testing.assert_allclose(s.x, [1.0, 1.0], atol=1e-3)
    assert s.value < 1e-6 < s.start
    assert s.evaluations > 256


def test_scaled_masses_keep_the_total_within_the_band():
    m0 = np.array([10.0, 20.0, 30.0])
    m = ident.scaled_masses(m0, [0.05, -0.05, 0.0])
    assert m.sum() == pytest.approx(60.0)
    assert np.all(np.abs(m / m0 - 1) < 0.11)


def _synthetic(noise: float, seed: int = 0):
    """Four segments on independent sinusoids; the plate force from Newton's law, exactly."""
    fs = 200.0
    t = np.arange(0, 4.0, 1 / fs)
    truth = np.array([12.0, 25.0, 8.0, 30.0])
    freq = np.array([[0.7, 1.3, 1.1], [1.9, 0.9, 2.3], [2.9, 2.1, 1.6], [1.2, 2.6, 0.8]])
    amp = np.array([[0.2, 0.05, 0.03], [0.1, 0.08, 0.04], [0.15, 0.1, 0.06], [0.05, 0.04, 0.02]])
    w = 2 * np.pi * freq
    pos = amp[None] * np.sin(w[None] * t[:, None, None])
    acc = -amp[None] * w[None] ** 2 * np.sin(w[None] * t[:, None, None])
    force = np.einsum("s,nsi->ni", truth, acc - ident.G)
    rng = np.random.default_rng(seed)
    return fs, truth, pos + noise * rng.standard_normal(pos.shape), force


def test_criterion_is_zero_for_the_true_masses_and_exact_accelerations():
    fs, truth, pos, force = _synthetic(0.0)
    t = np.arange(len(pos)) / fs
    freq = np.array([[0.7, 1.3, 1.1], [1.9, 0.9, 2.3], [2.9, 2.1, 1.6], [1.2, 2.6, 0.8]])
    w = 2 * np.pi * freq
    amp = np.array([[0.2, 0.05, 0.03], [0.1, 0.08, 0.04], [0.15, 0.1, 0.06], [0.05, 0.04, 0.02]])
    acc = -amp[None] * w[None] ** 2 * np.sin(w[None] * t[:, None, None])
    assert ident.com_criterion(truth, acc, force, 1 / fs) == pytest.approx(0.0, abs=1e-18)
    assert ident.com_criterion(truth * 1.01, acc, force, 1 / fs) > 0


def test_identification_recovers_perturbed_masses_better_than_it_found_them():
    fs, truth, pos, force = _synthetic(0.0005)  # 0.5 mm marker noise
    perturbed = ident.scaled_masses(truth, [0.03, -0.03, 0.025, -0.02])  # truth inside the +-5 % band
    res = ident.identify(pos, fs, force, perturbed, cutoff0=6.0, cutoffs=(3.0, 15.0), band=0.05, trim=20)
    err_before = np.max(np.abs(perturbed / truth - 1))
    err_after = np.max(np.abs(res.masses / truth - 1))
    assert res.masses.sum() == pytest.approx(truth.sum())
    assert err_after < 0.25 * err_before, (err_before, err_after, res)
    assert res.j_final <= res.j_smoothing <= res.j_start
    assert 3.0 <= res.cutoff <= 15.0


def test_bad_shapes_are_named():
    with pytest.raises(ident.IdentifyError, match="positions must be"):
        ident.identify(np.zeros((10, 2, 3)), 100.0, np.zeros((10, 3)), [1.0, 2.0, 3.0])
