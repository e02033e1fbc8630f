"""Smoothing, differentiation and resampling of sampled signals (methods.md (g)).

Every function takes time as the first axis: ``x`` of shape (N,) or (N, ...) sampled at times
``t`` (s) or at a uniform rate ``fs`` (Hz); the units of ``x`` are kept (m, rad, N...) and a
k-th derivative is in those units per s^k.

* ``smoothing_spline`` / ``spline_smooth`` — the one-parameter cubic smoothing spline of Zinkovsky/Reinsch (g.1):
  minimise p ∫ f″² dt + Σ (f(t_i) − y_i)²/δ², which is scipy's
  ``make_smoothing_spline(lam = p·δ²/2)`` (the factor 1/2 is the book's; methods.md (g.1)).
  p = 0 interpolates, p → ∞ gives the least-squares line; ``p=None`` chooses lam by GCV.
* ``butterworth`` — zero-lag low-pass (``filtfilt``) with Winter's double-pass correction, so the
  −3 dB point of the whole forward-backward filter is the requested cutoff (g.3); NaN gaps are
  filtered around (each finite run separately) and stay NaN.
* ``CausalDifferentiator`` / ``causal_derivative`` — a live derivative from the last N samples
  (a least-squares line, i.e. Savitzky–Golay of degree 1, evaluated at the window centre), whose
  declared latency (N − 1)/2 samples is exact at every frequency (the kernel is antisymmetric:
  linear phase).
* ``centred_lowpass`` / ``centred_filter`` — a linear-phase FIR low-pass (scipy's ``firwin``) applied
  as a centred window of 2L + 1 samples: zero phase, so a live stream gets it by waiting L samples
  (its look-ahead) rather than by a lag in its values (g.4); a NaN in a window gives NaN.
* ``regular_times`` / ``resample`` — multi-rate streams onto one timeline: device timestamps are
  replaced by the least-squares line through them against the sample count, so that clock jitter
  is not read as motion (g.5).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import interpolate, signal


class SmoothingError(ValueError):
    """Arguments a smoother cannot honour (too few samples, a cutoff above Nyquist...)."""


def _series(x, name: str, min_len: int = 1) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 0 or a.shape[0] < min_len:
        raise SmoothingError(f"{name} needs at least {min_len} samples along axis 0, got shape {a.shape}")
    return a


# --- g.1 smoothing spline -------------------------------------------------------------------

def spline_lam(p: float, delta: float) -> float:
    """scipy's ``lam`` for the book's parameter p and measurement error δ: lam = p·δ²/2 (g.1)."""
    if p < 0 or delta <= 0:
        raise SmoothingError(f"smoothing spline needs p >= 0 and delta > 0, got p={p}, delta={delta}")
    return 0.5 * p * delta * delta


def smoothing_spline(t, y, p: float | None = None, delta: float = 1.0) -> interpolate.BSpline:
    """The cubic smoothing spline of y(t) with natural ends.

    t (N,) strictly increasing, s; y (N,) or (N, ...) any unit; p >= 0 the book's smoothing
    parameter (s³ per unit² of f″ weighting), delta the measurement error in y's unit, so
    I = p ∫ f″² dt + Σ ((f(t_i) − y_i)/δ)². ``p=None``: lam by generalised cross-validation.
    Returns a BSpline (evaluate ``s(t)``, derivatives ``s.derivative(k)(t)``); columns of a 2-D y
    are smoothed independently (each its own GCV lam when p is None).
    """
    t = _series(t, "t", 5)
    y = _series(y, "y", 5)
    if y.shape[0] != t.shape[0]:
        raise SmoothingError(f"t has {t.shape[0]} samples, y has {y.shape[0]}")
    if not np.all(np.isfinite(y)):
        raise SmoothingError("smoothing_spline: y holds NaN or inf; fill gaps first")
    lam = None if p is None else spline_lam(p, delta)
    if y.ndim == 1 or lam is not None:
        return interpolate.make_smoothing_spline(t, y, lam=lam)
    flat = y.reshape(len(t), -1)
    splines = [interpolate.make_smoothing_spline(t, flat[:, j]) for j in range(flat.shape[1])]
    c = np.stack([s.c for s in splines], axis=-1).reshape(splines[0].c.shape + y.shape[1:])
    return interpolate.BSpline(splines[0].t, c, 3)


def spline_derivatives(t, y, p: float | None = None, delta: float = 1.0,
                       orders: tuple[int, ...] = (0, 1, 2)) -> list[np.ndarray]:
    """Values and derivatives of the smoothing spline at the nodes t: one array per order, each
    shaped like y (unit of y per s^k). The 5–10 end samples carry the natural-end error (g.2)."""
    s = smoothing_spline(t, y, p, delta)
    t = np.asarray(t, float)
    return [s.derivative(k)(t) if k else s(t) for k in orders]


def spline_smooth(x, fs: float, p: float | None = None, delta: float = 1.0, min_run: int = 10) -> np.ndarray:
    """Values of the smoothing spline of each column of x (N, ...) sampled at fs Hz, fitted over
    each finite run separately (``smoothing_spline``; p=None: GCV per column and run). NaN stays
    NaN; runs shorter than min_run samples are returned unsmoothed (a spline needs some length,
    and its 5–10 end samples carry the natural-end error anyway, g.2)."""
    x = _series(x, "x")
    flat = x.reshape(len(x), -1)
    out = flat.copy()
    t = np.arange(len(x)) / fs
    for j in range(flat.shape[1]):
        for i0, i1 in _runs(np.isfinite(flat[:, j])):
            if i1 - i0 >= max(min_run, 5):
                out[i0:i1, j] = smoothing_spline(t[i0:i1], flat[i0:i1, j], p, delta)(t[i0:i1])
    return out.reshape(x.shape)


# --- g.3 zero-lag Butterworth ---------------------------------------------------------------

def butterworth_design_cutoff(fc: float, fs: float, order: int = 2, passes: int = 2) -> float:
    """Design cutoff (Hz) of an `order` Butterworth run `passes` times so that the cascade's −3 dB
    point is fc (Winter): C = (2^(1/n_p) − 1)^(1/(2 N_o)), f_d = (fs/π)·atan(tan(π fc/fs)/C)."""
    if not 0 < fc < fs / 2:
        raise SmoothingError(f"cutoff {fc} Hz must lie in (0, {fs / 2}) Hz (Nyquist of {fs} Hz)")
    if order < 1 or passes < 1:
        raise SmoothingError(f"order and passes must be >= 1, got {order}, {passes}")
    c = (2.0 ** (1.0 / passes) - 1.0) ** (1.0 / (2 * order))
    fd = fs / math.pi * math.atan(math.tan(math.pi * fc / fs) / c)
    if not fd < fs / 2:
        raise SmoothingError(f"cutoff {fc} Hz corrected for {passes} passes is {fd:.3g} Hz, "
                             f"above the Nyquist frequency {fs / 2} Hz")
    return fd


def _runs(finite: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of True in a 1-D mask."""
    d = np.diff(np.concatenate(([0], finite.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def butterworth(x, fs: float, fc: float = 6.0, order: int = 2) -> np.ndarray:
    """Zero-lag low-pass of x (N, ...) sampled at fs Hz: an `order` Butterworth run forward and
    backward (filtfilt, 2·order overall) whose combined −3 dB point is fc Hz (design cutoff from
    ``butterworth_design_cutoff``). Each column is filtered over its finite runs separately; NaN
    stays NaN, and a run too short for the filter's padding (3·(order+1) samples) is returned
    unfiltered. Offline only: the backward pass needs the future."""
    x = _series(x, "x")
    b, a = signal.butter(order, butterworth_design_cutoff(fc, fs, order, 2), fs=fs)
    flat = x.reshape(len(x), -1)
    out = flat.copy()
    pad = 3 * max(len(a), len(b))
    for j in range(flat.shape[1]):
        col = flat[:, j]
        for i0, i1 in _runs(np.isfinite(col)):
            if i1 - i0 > pad:
                out[i0:i1, j] = signal.filtfilt(b, a, col[i0:i1])
    return out.reshape(x.shape)


# --- g.4 causal differentiator ----------------------------------------------------------------

def _slope_kernel(window: int, h: float) -> np.ndarray:
    """Weights w_j (j = 0 newest ... window−1 oldest) of the least-squares slope over the window."""
    k = np.arange(window, dtype=float)
    centred = k - k.mean()
    # slope = Σ (t_j − t̄)(x_j − x̄)/Σ (t_j − t̄)²; the newest sample has the largest t.
    return centred[::-1] / (h * np.sum(centred ** 2))


def causal_derivative(x, fs: float, window: int = 5) -> np.ndarray:
    """First derivative of x (N, ...) at fs Hz using only past samples: the least-squares slope of
    the last `window` samples (unit of x per s). It estimates ẋ at (window − 1)/2 samples before
    the newest (``latency_samples``); the first window − 1 outputs are NaN."""
    x = _series(x, "x")
    if window < 2:
        raise SmoothingError(f"causal derivative window must be >= 2 samples, got {window}")
    w = _slope_kernel(window, 1.0 / fs)
    flat = x.reshape(len(x), -1)
    out = np.full_like(flat, np.nan)
    if len(x) >= window:
        acc = np.zeros((len(x) - window + 1, flat.shape[1]))
        for j in range(window):
            acc += w[j] * flat[window - 1 - j: len(x) - j]
        out[window - 1:] = acc
    return out.reshape(x.shape)


def latency_samples(window: int) -> float:
    """Declared latency of ``causal_derivative`` / ``CausalDifferentiator``, in samples."""
    return (window - 1) / 2.0


class CausalDifferentiator:
    """Live first derivative of a stream at a fixed rate: push one sample (a scalar or array of
    any fixed shape), get the derivative (unit per s) estimated ``latency`` seconds in the past,
    NaN until the window is full. Same numbers as ``causal_derivative``."""

    def __init__(self, fs: float, window: int = 5) -> None:
        if window < 2 or fs <= 0:
            raise SmoothingError(f"need window >= 2 and fs > 0, got window={window}, fs={fs}")
        self.fs = float(fs)
        self.window = int(window)
        self._w = _slope_kernel(self.window, 1.0 / self.fs)
        self._buf: list[np.ndarray] = []

    @property
    def latency_samples(self) -> float:
        return latency_samples(self.window)

    @property
    def latency(self) -> float:
        """Declared latency, s."""
        return self.latency_samples / self.fs

    def push(self, sample) -> np.ndarray:
        self._buf.append(np.asarray(sample, dtype=float))
        if len(self._buf) > self.window:
            self._buf.pop(0)
        if len(self._buf) < self.window:
            return np.full(self._buf[-1].shape, np.nan)
        return sum(self._w[j] * self._buf[-1 - j] for j in range(self.window))


# --- g.4 centred (look-ahead) low-pass ----------------------------------------------------------

#: Half-window of `centred_lowpass` in periods of its cutoff: L = round(CENTRED_HALF_WINDOW fs / fc) samples
#: (50 ms at 6 Hz: 21 taps at 200 Hz, 101 at 1 kHz).
CENTRED_HALF_WINDOW = 0.3


def centred_lowpass(fc: float, fs: float) -> np.ndarray:
    """Taps h (2L + 1,) of a linear-phase FIR low-pass at fs Hz, design cutoff fc Hz
    (``scipy.signal.firwin``, Hamming window; gain 1 at DC), L = max(1, round(0.3 fs/fc)) samples
    (`CENTRED_HALF_WINDOW`). The short window makes a gentle response (freqz, fc = 6 Hz, fs = 200 or
    1000 Hz): gain 0.97 at 2 Hz, 0.77 at 6 Hz, −3 dB at 7.0 Hz, −20 dB at 17 Hz. Symmetric taps: applied
    centred (`centred_filter`) its phase is zero at every frequency. SmoothingError unless 0 < fc < fs/2."""
    if not (fs > 0 and 0 < fc < fs / 2):
        raise SmoothingError(f"cutoff {fc} Hz must lie in (0, {fs / 2}) Hz (Nyquist of {fs} Hz)")
    half = max(1, round(CENTRED_HALF_WINDOW * fs / fc))
    return signal.firwin(2 * half + 1, fc, fs=fs)


def centred_filter(x, taps: np.ndarray) -> np.ndarray:
    """The centred FIR of x (N, ...) (any unit, time first): y_i = Σ_k h_k x_{i+k}, k = 0..2L, one
    output per full window, (N − 2L, ...), the value at the time of input sample i + L. A NaN in a
    window gives NaN there (an occlusion or gap widens by L samples each side; nothing is carried)."""
    x = _series(x, "x")
    h = np.asarray(taps, dtype=float)
    if h.ndim != 1 or h.size % 2 == 0:
        raise SmoothingError(f"centred filter needs an odd number of taps, got shape {h.shape}")
    if x.shape[0] < h.size:
        return np.empty((0,) + x.shape[1:])
    windows = np.lib.stride_tricks.sliding_window_view(x, h.size, axis=0)     # (N − 2L, ..., 2L + 1)
    return windows @ h[::-1]        # convolution (symmetric taps: the same as correlation)


# --- g.5 multi-rate streams --------------------------------------------------------------------

def regular_times(t_ns) -> np.ndarray:
    """Device timestamps (N,) int ns of a fixed-rate stream → the least-squares line
    t_k = t_0 + k·T through them (int ns): the rate and phase are kept, the jitter is removed."""
    t = np.asarray(t_ns)
    if t.ndim != 1 or len(t) < 2:
        raise SmoothingError(f"regular_times needs a 1-D array of >= 2 timestamps, got shape {t.shape}")
    k = np.arange(len(t), dtype=float)
    rel = (t - t[0]).astype(float)
    slope, icpt = np.polyfit(k, rel, 1)
    if slope <= 0:
        raise SmoothingError("timestamps do not increase with the sample count")
    return t[0] + np.round(icpt + slope * k).astype(np.int64)


def resample(t_ns, x, t_out_ns, regularize: bool = True) -> np.ndarray:
    """x (N, ...) stamped t_ns (N,) int ns → values at t_out_ns (M,) int ns by linear
    interpolation (NaN outside the recorded span). regularize: interpolate on
    ``regular_times(t_ns)`` so that timestamp jitter is not read as motion."""
    x = _series(x, "x", 2)
    t = regular_times(t_ns) if regularize else np.asarray(t_ns)
    if len(t) != len(x):
        raise SmoothingError(f"{len(t)} timestamps for {len(x)} samples")
    t0 = t[0]
    tt = (t - t0).astype(float)
    to = (np.asarray(t_out_ns) - t0).astype(float)
    flat = x.reshape(len(x), -1)
    out = np.stack([np.interp(to, tt, flat[:, j], left=np.nan, right=np.nan)
                    for j in range(flat.shape[1])], axis=1)
    return out.reshape((len(to),) + x.shape[1:])


def differentiate(x, fs: float, order: int = 1) -> np.ndarray:
    """Central-difference derivative(s) of x (N, ...) at fs Hz along time (np.gradient, one-sided
    second-order at the ends); NaN propagates to the neighbours. Unit of x per s^order."""
    x = _series(x, "x", 3)
    for _ in range(order):
        x = np.gradient(x, 1.0 / fs, axis=0, edge_order=2)
    return x
