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
    """

    def __init__(self, *, bin_s: float = 1.0, half_life_s: float = 30.0):
        if not bin_s > 0 or not half_life_s > 0:
            raise ValueError(f"bin_s and half_life_s must be > 0, got {bin_s!r}, {half_life_s!r}")
        self._bin_ns = int(bin_s * 1e9)
        self._decay = 0.5 ** (bin_s / half_life_s)
        self._t0: int | None = None  # device time origin [ns]
        self._y0 = 0  # host - device origin [ns]
        self._bin = 0
        self._bin_min: tuple[float, float] | None = None  # (x [s], y [ns]) of the open window
        self._sums = np.zeros(5)  # weighted S0, Sx, Sy, Sxx, Sxy of the closed windows
        self._bins = 0

    def update(self, t_device: int, t_host: int) -> None:
        """Add one pair of stamps of the same sample [ns]: device clock and host arrival time."""
        if self._t0 is None:
            self._t0, self._y0 = int(t_device), int(t_host) - int(t_device)
        dx = int(t_device) - self._t0
        y = float(int(t_host) - int(t_device) - self._y0)
        b = dx // self._bin_ns
        if b != self._bin:
            self._close(b)
        if self._bin_min is None or y < self._bin_min[1]:
            self._bin_min = (dx * 1e-9, y)

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
            self._sums += (1.0, x, y, x * x, x * y)
            self._bins += 1
        # a window's weight is decay ** (its age in windows); only relative weights matter
        self._sums *= self._decay ** (new_bin - self._bin)
        self._bin, self._bin_min = new_bin, None

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
