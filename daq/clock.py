"""Online offset and drift of a device clock against the host monotonic clock (minimum-delay envelope).

Every sample that reaches the host was stamped twice: ``t_device`` by the device and ``t_host``
(``time.monotonic_ns()``) on arrival. With a device clock running at rate ``1 + drift`` relative to
the host and a transport delay ``d >= 0``::

    t_host - t_device = offset + drift * (t_device - t_ref) + d

The delay is random and never negative, so the lower envelope of ``t_host - t_device`` against
``t_device`` is the clock mapping itself (plus the minimum transport delay). `ClockSync` keeps the
minimum of each ``bin_s`` window and fits a straight line through those minima by least squares
with exponential forgetting (half-life ``half_life_s``, ~30 s as LSL recommends), as the
``natnet_zenoh`` bridge and LSL's minimum-round-trip rule do. `ClockSync.to_lab` then maps device
stamps to host time: ``t = t_device + offset + drift * (t_device - t_ref)``.

Device resets and jumps (a rebooted board, a counter that wrapped without being unwrapped, a clock
set by its owner) are detected and **re-anchored**, never averaged into the fit: a ``t_device``
that goes backwards, or a pair whose ``t_host - t_device`` lies more than ``reset_ms`` *below* the
envelope (a sample cannot arrive before it was taken: the device clock jumped forward), or lies
more than ``reset_ms`` above it for ``confirm_s`` of device time without a single pair back near
the envelope (a transport stall recovers; a clock set back does not), restarts the fit from that
pair. `ClockSync.resets` counts them and `ClockSync.last_reset` says why (for a daemon's event).

Daemons publish both: the raw ``t_device`` and the corrected ``t`` (see `daq.frames`); the raw
stamps stay recoverable, so a better offline fit is always possible. A known fixed device delay
(e.g. an analog filter) is the caller's to subtract; the envelope includes the minimum transport
delay, which no one-way method can separate from the offset.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClockEstimate:
    """The fitted mapping ``t_host = t_device + offset_ns + drift * (t_device - t_ref_ns)``.

    Attributes:
        offset_ns: host minus device time at ``t_ref_ns`` [ns] (including the minimum delay).
        drift: rate error of the device clock, dimensionless (50e-6 = the device loses 50 ppm).
        t_ref_ns: device time of reference [ns].
        bins: number of minimum-delay windows in the fit.
    """

    offset_ns: float
    drift: float
    t_ref_ns: int
    bins: int


class ClockSync:
    """Online estimate of one device clock (a lifetime object: one per device stream).

    Args:
        bin_s: width of the windows whose minimum delay is kept [s, device time].
        half_life_s: forgetting half-life of the line fit [s, device time].
        reset_ms: departure from the envelope that makes a reset [ms] (module doc).
        confirm_s: how long a departure above the envelope must last to be a reset [s, device time].

    Attributes: ``resets`` (re-anchorings so far), ``last_reset`` (why the last one happened, or None),
    ``late_windows`` (windows left out of the fit because all their pairs came more than ``reset_ms``
    late: a stalled reader, not the clock).
    """

    def __init__(self, *, bin_s: float = 1.0, half_life_s: float = 30.0, reset_ms: float = 50.0,
                 confirm_s: float = 2.0):
        if not bin_s > 0 or not half_life_s > 0 or not reset_ms > 0 or not confirm_s > 0:
            raise ValueError(f"bin_s, half_life_s, reset_ms and confirm_s must be > 0, got {bin_s!r}, "
                             f"{half_life_s!r}, {reset_ms!r}, {confirm_s!r}")
        self._bin_s, self._half_life_s = bin_s, half_life_s
        self._reset_ns = reset_ms * 1e6
        self._confirm_ns = int(confirm_s * 1e9)
        self.resets = 0
        self.last_reset: str | None = None
        self.late_windows = 0
        self._start()

    def _start(self) -> None:
        """Forget everything: the next pair anchors a new fit."""
        bin_s = self._bin_s
        self._bin_ns = int(bin_s * 1e9)
        self._decay = 0.5 ** (bin_s / self._half_life_s)
        self._last_device: int | None = None
        self._above_since: int | None = None  # device time since which every pair is far above the envelope
        self._t0: int | None = None  # device time origin [ns]
        self._y0 = 0  # host - device origin [ns]
        self._bin = 0
        self._bin_min: tuple[float, float] | None = None  # (x [s], y [ns]) of the open window
        self._sums = np.zeros(5)  # weighted S0, Sx, Sy, Sxx, Sxy of the closed windows
        self._bins = 0
        self._cached: ClockEstimate | None = None  # the estimate the departure test uses (kept until it changes)

    def update(self, t_device: int, t_host: int) -> None:
        """Add one pair of stamps of the same sample [ns]: device clock and host arrival time.

        A pair that shows a device reset or jump (module doc) re-anchors the fit on itself."""
        t_device, t_host = int(t_device), int(t_host)
        if self._t0 is not None:
            why = self._departure(t_device, t_host)
            if why is not None:
                self.resets += 1
                self.last_reset = why
                self._start()
        self._last_device = t_device
        if self._t0 is None:
            self._t0, self._y0 = int(t_device), int(t_host) - int(t_device)
        dx = int(t_device) - self._t0
        y = float(int(t_host) - int(t_device) - self._y0)
        b = dx // self._bin_ns
        if b != self._bin:
            self._close(b)
        if self._bin_min is None or y < self._bin_min[1]:
            self._bin_min = (dx * 1e-9, y)
            if self._bins < 2:
                self._cached = None

    def _departure(self, t_device: int, t_host: int) -> str | None:
        """Why this pair cannot belong to the current fit, or None."""
        if self._last_device is not None and t_device < self._last_device:
            return f"device clock went back {(self._last_device - t_device) * 1e-9:.6f} s"
        est = self._cached
        if est is None:
            est = self._cached = self.estimate()
        predicted = t_device + est.offset_ns + est.drift * (t_device - est.t_ref_ns)
        d = t_host - predicted
        if d < -self._reset_ns:
            return f"device clock jumped {-d * 1e-9:.6f} s ahead of the host"
        if d > self._reset_ns:
            if self._above_since is None:
                self._above_since = t_device
            elif t_device - self._above_since >= self._confirm_ns:
                return f"device clock fell {d * 1e-9:.6f} s behind the host for {self._confirm_ns * 1e-9:g} s"
        else:
            self._above_since = None
        return None

    def update_many(self, t_device: np.ndarray, t_host: np.ndarray) -> None:
        """`update` for arrays of stamps, shape (N,), int64 ns, in time order."""
        t_device = np.asarray(t_device, dtype=np.int64)
        t_host = np.asarray(t_host, dtype=np.int64)
        if t_device.shape != t_host.shape or t_device.ndim != 1:
            raise ValueError(f"t_device {t_device.shape} and t_host {t_host.shape} must be equal 1-D shapes")
        for td, th in zip(t_device.tolist(), t_host.tolist()):
            self.update(td, th)

    def _close(self, new_bin: int) -> None:
        if self._bin_min is not None:
            x, y = self._bin_min
            est = self.estimate() if self._bins >= 2 else None
            # a window whose every pair came late (a stalled reader, a congested link) is not the
            # envelope: leave it out of the fit (counted), or the line would bend towards it
            if est is not None and y + self._y0 - (est.offset_ns + est.drift * (self._t0 + x * 1e9 - est.t_ref_ns)) \
                    > self._reset_ns:
                self.late_windows += 1
            else:
                self._sums += (1.0, x, y, x * x, x * y)
                self._bins += 1
        # a window's weight is decay ** (its age in windows); only relative weights matter
        self._sums *= self._decay ** (new_bin - self._bin)
        self._bin, self._bin_min = new_bin, None
        self._cached = None

    def estimate(self) -> ClockEstimate | None:
        """The current fit, or None before the first update.

        Before two windows have closed the drift is taken as 0 and the offset is the smallest
        ``t_host - t_device`` seen.
        """
        if self._t0 is None:
            return None
        s0, sx, sy, sxx, sxy = self._sums.tolist()
        det = s0 * sxx - sx * sx
        if self._bins >= 2 and det > 1e-12 * max(s0 * sxx, 1e-300):
            slope = (s0 * sxy - sx * sy) / det  # ns of offset change per s of device time
            x_ref = sx / s0  # the line passes through the weighted means: offset there = sy / s0
            return ClockEstimate(self._y0 + sy / s0, slope * 1e-9, self._t0 + round(x_ref * 1e9), self._bins)
        y_min = self._bin_min[1] if self._bin_min is not None else math.inf
        if self._bins:
            y_min = min(y_min, sy / s0)
        return ClockEstimate(self._y0 + y_min, 0.0, self._t0, self._bins)

    def lab_rate_hz(self, nominal_hz: float) -> float:
        """The device's sample rate on the host (lab) clock [Hz]: ``nominal_hz / (1 + drift)``.

        Samples ``1 / nominal_hz`` apart on the device clock are ``(1 + drift) / nominal_hz`` apart
        on the host clock (``d t_host / d t_device = 1 + drift``). Before the first update: nominal.
        """
        est = self.estimate()
        return nominal_hz if est is None else nominal_hz / (1.0 + est.drift)

    def to_lab(self, t_device: int | np.ndarray) -> int | np.ndarray:
        """Host-clock times [ns] of device stamps ``t_device`` [ns] (int, or int64 array of any shape)."""
        est = self.estimate()
        if est is None:
            raise ValueError("ClockSync.to_lab: no stamps yet (call update first)")
        td = np.asarray(t_device, dtype=np.int64)
        # integer part and fractional correction kept apart so 1e18 ns stamps keep ns resolution
        corr = np.rint(est.offset_ns + est.drift * (td - est.t_ref_ns).astype(np.float64)).astype(np.int64)
        out = td + corr
        return int(out) if out.ndim == 0 else out
