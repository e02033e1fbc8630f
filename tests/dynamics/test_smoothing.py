"""dynamics.smoothing against analytic signals, the book's own spline equations, and measured lags."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from dynamics import smoothing as sm


def _book_spline_values(y: np.ndarray, h: float, p: float, delta: float) -> np.ndarray:
    """Zinkovsky, Sholuha & Ivanov 1996 Eqs. 3.21-3.22 with natural ends (c_1 = c_nu = 0):
    (3 p d^2 Q^T Q + h^3 T) C = 3 h Q^T y,  a = y - p d^2 Q C / h. Written from methods.md (g.1)."""
    n = len(y)
    Q = np.zeros((n, n - 2))
    for j in range(n - 2):
        Q[j:j + 3, j] = (1.0, -2.0, 1.0)
    T = 4 * np.eye(n - 2) + np.eye(n - 2, k=1) + np.eye(n - 2, k=-1)
    C = np.linalg.solve(3 * p * delta ** 2 * Q.T @ Q + h ** 3 * T, 3 * h * Q.T @ y)
    return y - p * delta ** 2 * Q @ C / h


def test_spline_equals_the_books_algorithm_with_lam_p_delta2_over_2():
    rng = np.random.default_rng(1)
    h = 0.01
    t = np.arange(40) * h
    y = np.sin(7 * t) + 0.05 * rng.standard_normal(40)
    for p, delta in ((1e-4, 0.05), (3e-3, 0.02), (0.5, 0.1)):
        got = sm.smoothing_spline(t, y, p=p, delta=delta)(t)
        np.testing.assert_allclose(got, _book_spline_values(y, h, p, delta), atol=1e-10)


def test_spline_limits_interpolate_and_least_squares_line():
    rng = np.random.default_rng(2)
    t = np.linspace(0, 1, 30)
    y = rng.standard_normal(30)
    np.testing.assert_allclose(sm.smoothing_spline(t, y, p=0.0)(t), y, atol=1e-9)
    line = np.polyval(np.polyfit(t, y, 1), t)
    np.testing.assert_allclose(sm.smoothing_spline(t, y, p=1e6, delta=1.0)(t), line, atol=1e-5)


@pytest.mark.parametrize("k, expected_order", [(0, 4), (1, 3), (2, 2)])
def test_interpolating_spline_derivatives_converge_at_the_expected_order(k, expected_order):
    errors = []
    hs = []
    for n in (41, 81, 161):
        t = np.linspace(0.0, 2.0, n)
        s = sm.smoothing_spline(t, np.sin(3 * t), p=0.0)
        mid = (t[1:] + t[:-1]) / 2  # between nodes (at the nodes the values are exact)
        mid = mid[(mid > 0.5) & (mid < 1.5)]  # natural ends disturb 5-10 nodes (methods.md g.2)
        f = [np.sin(3 * mid), 3 * np.cos(3 * mid), -9 * np.sin(3 * mid)]
        got = s.derivative(k)(mid) if k else s(mid)
        errors.append(np.max(np.abs(got - f[k])))
        hs.append(t[1] - t[0])
    orders = np.diff(np.log(errors)) / np.diff(np.log(hs))
    assert np.all(orders > expected_order - 0.3), orders


def test_gcv_recovers_a_smooth_signal_from_noise_better_than_the_raw_data():
    rng = np.random.default_rng(3)
    t = np.linspace(0, 2, 200)
    truth = np.sin(2 * np.pi * t)
    y = np.stack([truth, 2 * truth], axis=1) + 0.02 * rng.standard_normal((200, 2))
    s = sm.smoothing_spline(t, y)
    err = np.abs(s(t) - np.stack([truth, 2 * truth], axis=1))
    assert np.sqrt(np.mean(err ** 2)) < 0.5 * 0.02


def test_butterworth_minus_3db_point_is_the_requested_cutoff_and_zero_phase():
    fs, fc = 100.0, 6.0
    assert sm.butterworth_design_cutoff(fc, fs) == pytest.approx(
        fs / np.pi * np.arctan(np.tan(np.pi * fc / fs) / 0.802), rel=1e-3)
    t = np.arange(4000) / fs
    x = np.sin(2 * np.pi * fc * t)
    y = sm.butterworth(x, fs, fc)
    mid = slice(1000, 3000)
    # amplitude and phase of the steady-state output by least squares on sin/cos
    A = np.stack([np.sin(2 * np.pi * fc * t[mid]), np.cos(2 * np.pi * fc * t[mid])], axis=1)
    s, c = np.linalg.lstsq(A, y[mid], rcond=None)[0]
    assert np.hypot(s, c) == pytest.approx(1 / np.sqrt(2), abs=2e-3)
    assert abs(np.arctan2(c, s)) < 1e-3  # zero lag
    # the uncorrected design would sit lower: the cascade's -3 dB is below its design cutoff
    b, a = signal.butter(2, fc, fs=fs)
    assert np.max(np.abs(signal.filtfilt(b, a, x)[mid])) < 0.6


def test_butterworth_keeps_gaps_nan_and_filters_the_runs_around_them():
    fs = 100.0
    t = np.arange(600) / fs
    x = np.sin(2 * np.pi * 1.0 * t)
    x[300:310] = np.nan
    y = sm.butterworth(x, fs, 6.0)
    assert np.all(np.isnan(y[300:310]))
    assert np.all(np.isfinite(y[:300])) and np.all(np.isfinite(y[310:]))
    np.testing.assert_allclose(y[50:250], x[50:250], atol=5e-3)  # 1 Hz passes unchanged


@pytest.mark.parametrize("window", [2, 5, 9])
def test_causal_differentiator_declared_latency_equals_measured_lag(window):
    fs = 200.0
    t = np.arange(2000) / fs
    lags = []
    for f in (0.5, 2.0, 5.0):
        w = 2 * np.pi * f
        d = sm.causal_derivative(np.sin(w * t), fs, window)
        ok = np.isfinite(d)
        # fit d = A cos(w (t - tau)): tau from the phase of the fitted sinusoid
        A = np.stack([np.cos(w * t[ok]), np.sin(w * t[ok])], axis=1)
        c, s = np.linalg.lstsq(A, d[ok], rcond=None)[0]
        lags.append(np.arctan2(s, c) / w)
    declared = sm.latency_samples(window) / fs
    np.testing.assert_allclose(lags, declared, atol=1e-9)


def test_live_differentiator_equals_batch_and_recovers_a_ramp_slope():
    fs = 100.0
    rng = np.random.default_rng(4)
    x = np.cumsum(rng.standard_normal((50, 3)), axis=0)
    live = sm.CausalDifferentiator(fs, window=4)
    out = np.array([live.push(row) for row in x])
    np.testing.assert_allclose(out, sm.causal_derivative(x, fs, 4), atol=1e-12, equal_nan=True)
    ramp = 0.3 * np.arange(20) / fs
    assert sm.causal_derivative(ramp, fs, 6)[-1] == pytest.approx(0.3)
    assert live.latency == pytest.approx(1.5 / fs)


def test_resample_does_not_read_timestamp_jitter_as_motion():
    rng = np.random.default_rng(5)
    rate = 1000.0
    k = np.arange(5000)
    true_t = 1_000_000_000 + (k * 1e9 / rate).astype(np.int64)
    stamps = true_t + rng.integers(-300_000, 300_000, size=k.size)  # +-0.3 ms receive jitter
    x = np.sin(2 * np.pi * 10 * (true_t - true_t[0]) / 1e9)  # 10 Hz, sampled on the true clock
    t_out = true_t[100:4900:7] + 3_000_000
    truth = np.sin(2 * np.pi * 10 * (t_out - true_t[0]) / 1e9)
    good = sm.resample(stamps, x, t_out)
    raw = sm.resample(stamps, x, t_out, regularize=False)
    assert np.max(np.abs(good - truth)) < 0.2 * np.max(np.abs(raw - truth))
    assert np.max(np.abs(good - truth)) < 5e-3
    assert np.all(np.isnan(sm.resample(stamps, x, np.array([true_t[0] - 10**9]))))


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(sm.SmoothingError, match="Nyquist"):
        sm.butterworth(np.zeros(100), 10.0, 6.0)
    with pytest.raises(sm.SmoothingError, match="NaN"):
        sm.smoothing_spline(np.arange(10.0), np.r_[np.zeros(9), np.nan])
    with pytest.raises(sm.SmoothingError, match="window"):
        sm.causal_derivative(np.zeros(10), 100.0, 1)


def test_spline_smooth_by_gcv_around_gaps():
    rng = np.random.default_rng(6)
    fs = 100.0
    t = np.arange(400) / fs
    truth = np.stack([np.sin(2 * np.pi * t), np.cos(3 * t)], axis=1)
    x = truth + 0.01 * rng.standard_normal(truth.shape)
    x[150:160, 0] = np.nan
    y = sm.spline_smooth(x, fs)
    assert np.all(np.isnan(y[150:160, 0])) and np.all(np.isfinite(y[:150])) and np.all(np.isfinite(y[160:]))
    inner = np.r_[20:130, 180:380]  # away from the run ends
    err = np.sqrt(np.mean((y[inner] - truth[inner]) ** 2))
    assert err < 0.5 * 0.01  # less than half the noise
    # a given p is the book's parameter: p = 0 interpolates
    np.testing.assert_allclose(sm.spline_smooth(x, fs, p=0.0)[:150], x[:150], atol=1e-9)
