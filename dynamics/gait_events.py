"""Gait events and spatio-temporal metrics.

* ``plate_events`` — foot strike / foot off from a plate's vertical force (hysteresis thresholds,
  ``dynamics.forceplate.contact_events``).
* ``zeni_events`` — the kinematic method of Zeni, Richards & Higginson 2008 (Gait & Posture
  27:710–714): along the walking direction, foot strike is a maximum of (heel − sacrum) and foot
  off a minimum of (toe − sacrum).
* ``match_events`` — pairs detected events with reference ones (e.g. those stored in a C3D).
* ``gait_metrics`` — stride time and length, cadence, speed, stance and double-support %,
  left/right symmetry.

Times are s, positions (N, 3) m in the lab frame (z up); sides are "L" and "R".
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import signal

from .forceplate import contact_events


class GaitEventError(ValueError):
    """Inputs from which no events can be found (names the problem)."""


@dataclass(frozen=True)
class Events:
    """Foot strikes and foot offs per side, s, sorted: {"L": array, "R": array}; source names
    where they came from per side ("plate", "zeni", "file")."""

    strike: dict[str, np.ndarray]
    off: dict[str, np.ndarray]
    source: dict[str, str] = field(default_factory=dict)


def plate_events(fz, rate: float, t0: float = 0.0, on: float = 50.0, off: float = 20.0) -> tuple[np.ndarray, np.ndarray]:
    """(strike times, off times) s from one plate's vertical force fz (N,) N at rate Hz; t0 the
    time of sample 0. A contact already running at the first sample has no strike (and one
    running at the end no off): only true transitions are events."""
    f = np.asarray(fz, float)
    c = contact_events(f, on=on, off=off)
    strikes = c.touchdown[c.touchdown > 0]
    if len(f) and f[0] > off and len(c.liftoff):
        # loaded from the first sample (even below `on`): that stance began before the trial
        strikes = strikes[strikes > c.liftoff[0]]
    return t0 + strikes / rate, t0 + c.liftoff / rate


def progression_axis(sacrum, front=None) -> np.ndarray:
    """Unit horizontal walking direction (3,): the sacrum's net displacement (N, 3) m; if the
    pelvis stays within 0.1 m (a treadmill) and ``front`` (N, 3) m (mid-ASIS) is given, the mean
    horizontal direction from the sacrum to it (the way the subject faces)."""
    p = np.asarray(sacrum, float)
    ok = np.flatnonzero(np.all(np.isfinite(p), axis=1))
    if ok.size < 2:
        raise GaitEventError("the sacrum (SACR or PSIS markers) is never visible twice: no walking direction")
    d = p[ok[-1]] - p[ok[0]]
    d[2] = 0.0
    if np.linalg.norm(d) < 0.1:
        if front is None:
            raise GaitEventError(f"the pelvis moves {np.linalg.norm(d):.2f} m and no facing direction is "
                                 "given: not a walking trial")
        d = np.nanmean(np.asarray(front, float) - p, axis=0)
        d[2] = 0.0
        if not np.linalg.norm(d) > 0:
            raise GaitEventError("the pelvis facing direction is not defined (front markers at the sacrum)")
    return d / np.linalg.norm(d)


def zeni_events(heel, toe, sacrum, rate: float, t0: float = 0.0,
                min_stride: float = 0.6, front=None) -> tuple[np.ndarray, np.ndarray]:
    """Zeni's coordinate-based events for one foot: (strike times, off times) s.

    heel, toe, sacrum (N, 3) m at rate Hz (t0 = time of frame 0). Strike at the maxima of
    (heel − sacrum)·e, off at the minima of (toe − sacrum)·e, e the walking direction; peaks at
    least ``min_stride`` s apart, refined to sub-frame by a parabola through the peak's 3 samples.
    front (N, 3) m, mid-ASIS: the walking direction on a treadmill (``progression_axis``).
    """
    e = progression_axis(sacrum, front)
    for name, x in (("heel", heel), ("toe", toe)):
        if np.sum(np.all(np.isfinite(np.asarray(x, float)), axis=1)) < 3:
            raise GaitEventError(f"the {name} marker is (almost) never seen")
    out = []
    for x, sign in ((heel, 1.0), (toe, -1.0)):
        s = sign * np.einsum("ni,i->n", np.asarray(x, float) - np.asarray(sacrum, float), e)
        good = np.isfinite(s)
        s_f = np.where(good, s, -np.inf)
        prominence = 0.1 * (np.nanmax(s) - np.nanmin(s)) if good.any() else 1.0
        peaks, _ = signal.find_peaks(s_f, distance=max(1, int(min_stride * rate)), prominence=prominence)
        peaks = peaks[(peaks > 0) & (peaks < len(s) - 1)]
        peaks = peaks[np.isfinite(s[peaks - 1]) & np.isfinite(s[peaks + 1])]
        y0, y1, y2 = s[peaks - 1], s[peaks], s[peaks + 1]
        den = y0 - 2 * y1 + y2
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(den != 0, 0.5 * (y0 - y2) / den, 0.0)
        out.append(t0 + (peaks + frac) / rate)
    return out[0], out[1]


def match_events(found, reference, tolerance: float = 0.1) -> np.ndarray:
    """found − reference (s) for each reference event with a found event within tolerance s
    (nearest), as an array (only the matched ones)."""
    f = np.asarray(found, float)
    d = []
    for r in np.asarray(reference, float):
        if f.size:
            k = int(np.argmin(np.abs(f - r)))
            if abs(f[k] - r) <= tolerance:
                d.append(f[k] - r)
    return np.asarray(d)


def _last_next(events: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per time: the last event at or before it (−inf if none) and the next one after it (+inf)."""
    e = np.concatenate(([-np.inf], np.sort(events), [np.inf]))
    k = np.searchsorted(e, t, side="right")
    return e[k - 1], e[k]


def stance_mask(events: Events, side: str, times) -> np.ndarray:
    """(N,) float: 1 where the foot is in stance at times (s), 0 in swing: the state after the
    last event at or before each time; before the first event, the state the next event ends
    (a strike next means swing, an off next stance); NaN without events."""
    t = np.asarray(times, float)
    last_s, next_s = _last_next(events.strike[side], t)
    last_o, next_o = _last_next(events.off[side], t)
    out = np.where(last_s > last_o, 1.0, 0.0)
    before = ~np.isfinite(np.maximum(last_s, last_o))
    out[before] = np.where(next_o < next_s, 1.0, 0.0)[before]
    out[before & ~np.isfinite(np.minimum(next_s, next_o))] = np.nan
    return out


def gait_metrics(events: Events, heel: dict[str, np.ndarray], rate: float, t0: float,
                 axis) -> dict[str, float]:
    """Spatio-temporal metrics from events and heel trajectories (N, 3) m at rate Hz.

    Per side: stride time (s) between consecutive strikes; stride length (m): the heel's
    displacement along the walking axis between them; stance % of the stride (strike → next off);
    double support % (both feet in stance). Overall: cadence (steps/min) = 120/mean stride time,
    speed (m/s) = stride length / stride time; symmetry index % = 200 |L − R|/(L + R) of the stride
    times and stance %. Metrics without a full stride are NaN.
    """
    e = np.asarray(axis, float)
    out: dict[str, float] = {}
    for side in ("L", "R"):
        st = np.sort(events.strike[side])
        of = np.sort(events.off[side])
        other = "R" if side == "L" else "L"
        times, lengths, stance, double = [], [], [], []
        for a, b in zip(st[:-1], st[1:]):
            times.append(b - a)
            ia, ib = int(round((a - t0) * rate)), int(round((b - t0) * rate))
            h = heel[side]
            if 0 <= ia < len(h) and 0 <= ib < len(h):
                lengths.append(abs(float((h[ib] - h[ia]) @ e)))
            offs = of[(of > a) & (of < b)]
            if offs.size:
                stance.append(100 * (offs[0] - a) / (b - a))
            grid = np.linspace(a, b, 201)[:-1]
            both = stance_mask(events, side, grid) * stance_mask(events, other, grid)
            if np.all(np.isfinite(both)):
                double.append(100 * float(np.mean(both)))
        mean = lambda v: float(np.mean(v)) if len(v) else float("nan")  # noqa: E731
        out[f"{side}_stride_time_s"] = mean(times)
        out[f"{side}_stride_length_m"] = mean(lengths)
        out[f"{side}_stance_pct"] = mean(stance)
        out[f"{side}_double_support_pct"] = mean(double)
        out[f"{side}_strides"] = float(len(times))
    st_time = np.nanmean([out["L_stride_time_s"], out["R_stride_time_s"]]) if any(
        np.isfinite([out["L_stride_time_s"], out["R_stride_time_s"]])) else float("nan")
    st_len = np.nanmean([out["L_stride_length_m"], out["R_stride_length_m"]]) if any(
        np.isfinite([out["L_stride_length_m"], out["R_stride_length_m"]])) else float("nan")
    out["cadence_steps_per_min"] = 120.0 / st_time if np.isfinite(st_time) else float("nan")
    out["speed_m_s"] = st_len / st_time if np.isfinite(st_len) and np.isfinite(st_time) else float("nan")
    for key in ("stride_time_s", "stance_pct"):
        a, b = out[f"L_{key}"], out[f"R_{key}"]
        out[f"symmetry_{key}_pct"] = 200 * abs(a - b) / (a + b) if np.isfinite(a + b) and a + b else float("nan")
    return out


def normalise_cycles(series, time, strikes, points: int = 101) -> np.ndarray:
    """Curves over each gait cycle, 0–100 %: series (N, ...) sampled at time (N,) s, cut at
    consecutive strikes (s) and linearly resampled to `points` samples each →
    (n_cycles, points, ...). Cycles not wholly inside the time span are skipped."""
    x = np.asarray(series, float)
    t = np.asarray(time, float)
    st = np.sort(np.asarray(strikes, float))
    flat = x.reshape(len(x), -1)
    out = []
    for a, b in zip(st[:-1], st[1:]):
        if a < t[0] or b > t[-1]:
            continue
        grid = np.linspace(a, b, points)
        out.append(np.stack([np.interp(grid, t, flat[:, j]) for j in range(flat.shape[1])], axis=1))
    return np.array(out).reshape((len(out), points) + x.shape[1:])


def stride_work(power, time, strikes) -> np.ndarray:
    """Work per stride (n_strides, 3): positive ∫ max(P, 0) dt, negative ∫ min(P, 0) dt and net
    ∫ P dt (trapezoid rule on the samples plus the stride ends, interpolated), from a power
    (N,) W or W/kg at time (N,) s, between consecutive strikes (s) wholly inside the samples.
    A stride with a NaN power at any sample inside it is NaN (an end next to a NaN sample takes
    the nearest inside value)."""
    p = np.asarray(power, float)
    t = np.asarray(time, float)
    st = np.sort(np.asarray(strikes, float))
    out = []
    for a, b in zip(st[:-1], st[1:]):
        if a < t[0] or b > t[-1]:
            continue
        inside = (t > a) & (t < b)
        pin = p[inside]
        ends = [np.interp(a, t, p), np.interp(b, t, p)]
        # an end that falls next to an unknown sample holds the nearest inside one (< 1 frame)
        ends = [e if np.isfinite(e) or not len(pin) else near for e, near in zip(ends, (pin[0], pin[-1]))]
        tt = np.concatenate(([a], t[inside], [b]))
        pp = np.concatenate(([ends[0]], pin, [ends[1]]))
        if not np.all(np.isfinite(pp)):
            out.append([np.nan] * 3)
            continue
        out.append([np.trapezoid(np.maximum(pp, 0), tt), np.trapezoid(np.minimum(pp, 0), tt), np.trapezoid(pp, tt)])
    return np.array(out).reshape(-1, 3)
