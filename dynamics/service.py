"""Dynamics service: live ground reaction forces, centres of pressure and contact events.

The thin process that applies `dynamics.forceplate` to the force-plate streams of a lab
(docs/service.md). For every plate in the process's ``devices`` it subscribes to the plate's raw
stream (``forceplate/NAME``, C3D channel layout of its type, SI) and publishes:

- ``dynamics/grf/NAME``: the input samples with the input frames' ``t``/``t_host``/``t_device``
  stamps: one frame per accepted input frame, or one per run of consecutive input frames whose
  stamps continue by sample count (when the service catches up after a stall), channels
  ``Fx Fy Fz`` [N] (reaction in lab axes, +z on a loaded plate), ``Mx My Mz`` [N·m] (about the
  plate's surface centre, lab axes), ``COPx COPy COPz`` [m] (lab frame), ``Tz`` [N·m] (free
  moment, lab z component of ``T_z n̂``), ``valid`` [1] (``F_z > threshold``; COP and Tz
  are NaN where 0) and ``saturated`` [1] (a raw force channel at or beyond ±``force_range_n``
  or a moment channel at or beyond ±``moment_range_nm``, the amplifier's range declared in the
  plate's config section; always 0 when not declared; also counted as
  ``NAME:saturated_samples``). A sample whose finite raw values overflow the arithmetic (1e308 N)
  is invalid: NaN, ``valid`` 0, ``NAME:overflow_samples``. ``meta``: ``{"zero": status}``.
- ``dynamics/zero/NAME``: once, when the plate is zeroed: the raw offset subtracted (1, channels)
  in the raw channels' units (NaN: not used), ``meta`` ``status``, ``base_n``, ``peak_n``,
  ``record_s``, ``window_s``; stamped with the first sample of the zeroing record.
- ``dynamics/grf``: the plates combined (methods.md d.2): ``Fx Fy Fz`` [N], ``Mx My Mz`` [N·m]
  about the lab origin, global ``COPx COPy COPz`` [m] on the plane of the plate centres, ``valid``.
  Samples are aligned on the nominal sample grid of the plates (common ``rate_hz``), anchored on
  the first frame received; its stamps are the anchor frame's stamps plus
  ``round(k · 1e9 / rate_hz)`` (the source samples' stamps when the plates share a clock, as the
  simulated ones do). A sample that a plate did not deliver (stream gap, non-finite raw values,
  a plate that never published or lags more than ``max_lag_s``) makes the total NaN and invalid
  there: the total of a subset of plates would be wrong.
- ``events/contact``: one frame per touch-down / lift-off per plate (hysteresis ``on``/``off`` on
  the plate's vertical force, state carried across frames; missing samples hold the state),
  ``kind = "event"``, one sample ``Fz`` [N] at the event, stamped with the event sample's
  ``t``/``t_host``/``t_device``; ``meta = {"plate": NAME, "event": "touchdown" | "liftoff"}``.

Zeroing: the first ``zero_s`` of each plate's samples are held back; the offset is the mean raw
channels over the ``zero_window_s`` window of least mean vertical force (`zero_from_record`),
then the held frames are processed and published. A plate that never loaded during the record is
zeroed and reported (status ``unloaded``); a plate loaded through the whole record (or with an
offset beyond the threshold) is reported and *not* zeroed (status ``loaded``: the amplifier's
own zero is used).

Bad input never stops the service: malformed messages are counted by the bus subscriber;
well-formed frames that do not fit the plate (channels, units, rate, kind, an overlap with
samples already received) are counted as ``NAME:rejected`` in the health frame and skipped;
missing samples (a jump in sample time) are counted as ``NAME:missing_samples``.

Stamps are checked against the plate's own history (sample count x rate) and the host clock
(receipt time): a block that jumps further ahead than the host clock allows, or back beyond a
repeat, is a clock fault (held; rejected and counted as ``NAME:clock_faults`` when the old time
base goes on; ``events/clock`` once per episode); `RESET_FRAMES` consistent blocks on a new base
are a device clock reset (``NAME:clock_resets``, ``events/clock``): the plate is re-anchored and
the held blocks served. A run of slots no plate delivered is NaN in the total for at most
``max_lag_s``, the rest skipped (``combine:skipped_samples``): every step is bounded work.
docs/service.md, "Time stamps".

`GrfService` is the computation with its state (no sockets: it calls a ``publish`` function with
`daq.bus.Publisher.publish`'s signature); `run(ctx, args)` is the process (see `controller.proc`):
it hands the service every frame waiting on its socket at once (up to `MAX_BATCH`), and reports
``processing`` latency (receipt of an input frame to its outputs handed to ZeroMQ) and the
``batch`` size in its health frame.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from daq.context import ProcessContext
from daq.logthrottle import LogThrottle
from dynamics import forceplate as fp

log = logging.getLogger("walklab.dynamics")

PLATE_CHANNELS = ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "COPx", "COPy", "COPz", "Tz", "valid", "saturated")
PLATE_UNITS = ("N", "N", "N", "N*m", "N*m", "N*m", "m", "m", "m", "N*m", "1", "1")
TOTAL_CHANNELS = ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "COPx", "COPy", "COPz", "valid")
TOTAL_UNITS = ("N", "N", "N", "N*m", "N*m", "N*m", "m", "m", "m", "1")
GRF_STREAM = "dynamics/grf"
ZERO_STREAM = "dynamics/zero"
EVENTS_STREAM = "events/contact"
CLOCK_STREAM = "events/clock"
#: Consecutive frames on a new time base (and none on the old one between) that make a clock reset.
RESET_FRAMES = 5
#: Most input frames computed together (what is waiting after a stall, up to this many).
MAX_BATCH = 64


@dataclass(frozen=True)
class Settings:
    """Service parameters (SI): COP validity threshold [N], contact hysteresis on/off [N],
    zeroing record and window lengths [s] (zero_s = 0: no zeroing), how long [s] the
    combination waits for a lagging plate before reporting its samples as missing (also the most
    NaN it fills in for them), and how far [s] a stamp may run ahead of the host clock before it
    is a clock fault. (Amplifier ranges are the plates' own: ``force_range_n``,
    ``moment_range_nm`` of their config sections.)"""
    threshold_n: float = fp.DEFAULT_THRESHOLD
    on_n: float = 50.0
    off_n: float = fp.DEFAULT_THRESHOLD
    zero_s: float = 2.0
    zero_window_s: float = 0.1
    max_lag_s: float = 0.1
    clock_slack_s: float = 0.25

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in vars(self).values()):
            raise ValueError(f"dynamics service settings must be finite numbers, got {self}")
        if not self.off_n < self.on_n:
            raise ValueError(f"dynamics service: contact hysteresis needs --off-n < --on-n, "
                             f"got {self.off_n} and {self.on_n}")
        if not self.clock_slack_s > 0:
            raise ValueError(f"dynamics service: --clock-slack-s must be > 0, got {self.clock_slack_s}")
        if self.zero_s < 0 or self.max_lag_s <= 0 or (self.zero_s > 0 and not
                                                       0 < self.zero_window_s <= self.zero_s):
            raise ValueError("dynamics service: need --zero-s >= 0, 0 < --zero-window-s <= --zero-s "
                             f"and --max-lag-s > 0, got {self.zero_s}, {self.zero_window_s}, "
                             f"{self.max_lag_s}")


@dataclass(frozen=True)
class ZeroResult:
    """Outcome of zeroing one plate: ``status`` ``"zeroed"`` (load seen and unloaded window found),
    ``"unloaded"`` (no load during the record), ``"loaded"`` (no unloaded window: not zeroed),
    ``"unusable"`` (fewer finite samples than one window: not zeroed) or ``"off"`` (disabled); ``offset`` (n_channels,) raw units, or None when not used;
    ``base_n`` / ``peak_n``: least / greatest windowed mean vertical force of the record [N]."""
    status: str
    offset: np.ndarray | None
    base_n: float = math.nan
    peak_n: float = math.nan


def zero_from_record(plate: fp.Plate, raw: np.ndarray, window: int, contrast_n: float,
                     unloaded_n: float) -> ZeroResult:
    """Zero offset of `plate` from a start-up record `raw` (N, n_channels), SI raw channels.

    With ``F(w)`` the mean lab vertical force over a `window`-sample window w (the offset
    unknown), ``base = min_w F(w)`` at the least-loaded window ``w*`` and ``peak = max_w F(w)``:

    - ``peak − base >= contrast_n``: a load came or went, so ``w*`` is unloaded: ``zeroed``,
      offset = mean raw over ``w*`` (`dynamics.forceplate.zero_offset`);
    - else ``|base| <= unloaded_n``: constant near-zero reading, never loaded: ``unloaded``,
      offset as above (removes the small baseline);
    - else: constant non-zero load (someone stood on it the whole time, or a large offset —
      indistinguishable): ``loaded``, offset None (never silently absorb a load).
    Rows with a non-finite or saturated value are left out, and windows whose force overflows;
    fewer than `window` rows left, no such window, or an offset beyond float64: ``unusable``.
    """
    r = np.asarray(raw, dtype=float)
    # A saturated sample (beyond the amplifier's range) was not measured: no zero from it.
    r = r[np.isfinite(r).all(axis=1) & ~fp.saturated(plate, r)]
    if len(r) < window:
        return ZeroResult("unusable", None)
    w = fp.least_loaded_window(plate, r, window)
    means = fp.window_means(fp.vertical_force(plate, r), window)
    finite = means[np.isfinite(means)]     # a window holding an overflowing sample is left out
    if not len(finite):
        return ZeroResult("unusable", None)
    base, peak = float(means[w.start]), float(finite.max())
    if peak - base < contrast_n and abs(base) > unloaded_n:
        return ZeroResult("loaded", None, base, peak)
    with np.errstate(over="ignore", invalid="ignore"):
        offset = fp.zero_offset(plate, r, w)
    if not np.isfinite(offset).all():   # absurd values and no declared range to exclude them
        return ZeroResult("unusable", None, base, peak)
    return ZeroResult("zeroed" if peak - base >= contrast_n else "unloaded", offset, base, peak)


def _raw_units(channels: Sequence[str]) -> tuple[str, ...]:
    # C3D raw channel names: forces F*, moments M*/T*, type-1 COP positions in m.
    return tuple("m" if c.startswith("COP") else "N*m" if c[0] in "MT" else "N" for c in channels)


class _PlateStream:
    """Live state of one plate: expected layout, zeroing, contact state, sample continuity and
    where its processed rows wait for the combination (its columns of the service's ring)."""

    def __init__(self, device: Any, column: int) -> None:
        self.name = device.name
        self.stream = device.stream_name
        self.channels = tuple(device.channels)
        self.units = _raw_units(self.channels)
        ranges = {"N": device.force_range_n, "N*m": device.moment_range_nm, "m": None}
        # An unconfigured channel gets the largest float as its limit: never reached.
        hi = np.array([np.finfo(float).max if ranges[u] is None else float(ranges[u]) for u in self.units])
        configured = device.force_range_n is not None or device.moment_range_nm is not None
        self.plate = fp.Plate(type=device.type, corners=device.corners, origin=device.origin,
                              cal_matrix=device.cal_matrix, name=device.name,
                              channel_range=np.column_stack([-hi, hi]) if configured else None)
        self.rate_hz = float(device.rate_hz)
        self.zero: ZeroResult | None = None
        self.held: list[tuple[Any, int, np.ndarray]] = []
        self.held_samples = 0
        self.contact: bool | None = None
        self.first_k: int | None = None      # slot of the first accepted sample
        self.next_k: int | None = None       # slot after the last accepted sample
        self.processed_end: int | None = None
        self.columns = slice(6 * column, 6 * column + 6)   # its [F, M] in the combination's ring
        self.rejected = 0
        self.meta: dict[str, Any] = {}
        # Time base: slot = round((t - anchor t) / period) + shift (re-anchored on a clock reset);
        # floor: least lead (host receipt − stamp of the block's end, ns) of its accepted frames.
        self.shift = 0
        self.floor: float | None = None
        # Frames that did not fit the time base, consecutive on a base of their own: a device
        # clock reset once RESET_FRAMES of them have come with nothing on the old base between.
        self.candidate: list[tuple[Any, int, float]] = []   # (frame, slot, lead) on the old shift
        self.faulted = False          # the clock_fault event of this episode is out
        self.fault_k = 0              # the plate's next slot at its last clock fault

    def check(self, frame: Any) -> str | None:
        """Why `frame` cannot be this plate's raw block, or None."""
        if frame.kind != "force":
            return f"kind {frame.kind!r}, expected 'force'"
        if frame.channels != self.channels:
            return f"channels {list(frame.channels)}, expected {list(self.channels)} (type {self.plate.type})"
        if frame.units != self.units:
            return f"units {list(frame.units)}, expected {list(self.units)}"
        if frame.rate_hz != self.rate_hz:
            return f"rate {frame.rate_hz} Hz, the lab config says {self.rate_hz} Hz"
        if frame.samples == 0:
            return "no samples"
        if frame.data.dtype.kind not in "fiu":
            return f"dtype {frame.data.dtype}, expected a real number type"
        return None


Publish = Callable[..., Any]


class GrfService:
    """Raw force-plate frames in, `dynamics/grf/*`, `dynamics/grf` and `events/contact` out.

    `devices`: the lab config's force-plate sections (`controller.config.ForcePlate`), all with
    the same ``rate_hz``; `publish(stream, data, *, kind, rate_hz, channels, units, t_device,
    t_host, t, meta)` sends one frame (`daq.bus.Publisher.publish`); `count(subject, n)` reports
    a counter (`daq.health.Health.count`). Give `feed` the received frames, in arrival order.
    """

    def __init__(self, devices: Sequence[Any], settings: Settings, publish: Publish,
                 count: Callable[[str, int], None] = lambda subject, n=1: None) -> None:
        if not devices:
            raise ValueError("dynamics service: no force plate to serve (list them in the process's devices)")
        rates = {float(d.rate_hz) for d in devices}
        if len(rates) != 1:
            raise ValueError(f"dynamics service: plates {', '.join(d.name for d in devices)} have "
                             f"different rate_hz {sorted(rates)}; the combination needs one rate")
        self.settings = settings
        self.rate_hz = rates.pop()
        self.period_ns = 1e9 / self.rate_hz
        self.lag = max(1, round(settings.max_lag_s * self.rate_hz))
        self.zero_n = round(settings.zero_s * self.rate_hz)
        self.window_n = max(1, round(settings.zero_window_s * self.rate_hz))
        capacity = self.zero_n + 4 * self.lag + round(2.0 * self.rate_hz)
        self.plates = [_PlateStream(d, i) for i, d in enumerate(devices)]
        self.by_stream = {p.stream: p for p in self.plates}
        self.slack_ns = settings.clock_slack_s * 1e9
        self.floor: float | None = None   # least lead of any plate's accepted frames [ns]
        if len(self.by_stream) != len(self.plates):
            raise ValueError("dynamics service: two plates share one stream name")
        self.capacity = capacity
        # Lab wrenches [F, M] of every plate side by side per sample slot (slot k at row
        # k % capacity), waiting for the combination; NaN: not delivered (yet).
        self.ring = np.full((capacity, 6 * len(self.plates)), np.nan)
        self.empty_run = 0       # empty slots (all NaN) at the end of what was published
        self.plate_models = [p.plate for p in self.plates]
        self.publish = publish
        self.count = count
        self.anchor: tuple[int, int, int | None] | None = None   # t, t_host, t_device of slot 0
        self.k_emit = 0          # next slot of the combination to publish
        self.k_max = 0           # greatest slot received from any plate (exclusive)
        self.pz = float(np.mean([p.plate.centre[2] for p in self.plates]))
        # faults a bad stream repeats on every block: a line a second at most per (plate, fault)
        self.fault_log = LogThrottle(log)
        if settings.zero_s == 0:
            for p in self.plates:
                p.zero = ZeroResult("off", None)
                p.meta = {"zero": "off"}

    @property
    def zeroing(self) -> bool:
        """True while a plate that has sent samples is still collecting its zeroing record."""
        return any(p.zero is None and p.first_k is not None for p in self.plates)

    # -- input ------------------------------------------------------------------------------

    def feed(self, frames: Sequence[Any]) -> None:
        """Take received frames (`daq.frames.Frame`, in arrival order); other streams are ignored.

        Give it everything that is waiting: consecutive blocks of a plate are computed (and
        published) together, which is how a service that fell behind catches up.
        """
        pending: dict[str, list[tuple[Any, int, np.ndarray]]] = {}
        for frame in frames:
            p = self.by_stream.get(frame.stream)
            if p is not None:
                items = self._accept(p, frame)
                if items:
                    pending.setdefault(p.name, []).extend(items)
        for p in self.plates:
            items = pending.get(p.name)
            if not items:
                continue
            if p.zero is not None:
                self._process(p, items)
                continue
            p.held.extend(items)
            p.held_samples += sum(len(raw) for _, _, raw in items)
            if p.held_samples >= self.zero_n:
                self._finish_zeroing(p)
        self._combine()

    def _accept(self, p: _PlateStream, frame: Any) -> list[tuple[Any, int, np.ndarray]]:
        """Check `frame` and place it on the sample grid: [(frame, first slot, raw SI)]; empty when
        it is rejected or held as the possible start of a clock reset, several when that reset
        is confirmed (the held frames come with it)."""
        reason = p.check(frame)
        if reason is not None:
            self._reject(p, frame, reason)
            return []
        if self.anchor is None:
            self.anchor = (frame.t, frame.t_host, frame.t_device)
        # Stamps are not trusted alone: a block must continue the plate's samples (sample count x
        # rate), or jump forward no further than the host clock allows.
        k0 = round((frame.t - self.anchor[0]) / self.period_ns) + p.shift
        host = frame.t_recv if frame.t_recv is not None else frame.t_pub
        lead = host - self.anchor[0] - (k0 + frame.samples) * self.period_ns
        if p.next_k is None:
            # A plate's first block: against the other plates' floor (they share the lab clock).
            fault = self.floor is not None and lead < self.floor - self.slack_ns
        elif k0 < p.next_k:
            if (p.next_k - k0) * self.period_ns <= self.slack_ns:
                self._reject(p, frame, f"starts at sample slot {k0}, before the next expected slot "
                                       f"{p.next_k} (a repeated or out-of-order block)")
                return []
            fault = True
        else:
            fault = k0 > p.next_k and lead < p.floor - self.slack_ns
        if fault:
            return self._clock_fault(p, frame, k0, lead)
        if p.candidate:   # the old time base goes on: what did not fit it had bad stamps
            self._drop_candidate(p)
        return [self._take(p, frame, k0, lead)]

    def _reject(self, p: _PlateStream, frame: Any, reason: str) -> None:
        p.rejected += 1
        self.count(f"{p.name}:rejected", 1)
        self.fault_log.log("%s: rejected frame #%d of %s (seq %d): %s", p.name, p.rejected,
                           frame.stream, frame.seq, reason, key=(p.name, "rejected"))

    def _take(self, p: _PlateStream, frame: Any, k0: int, lead: float) -> tuple[Any, int, np.ndarray]:
        """Accept `frame` at slot `k0` (its lead [ns]: host receipt − lab time of its last sample's
        end): raw SI values, continuity counters, the plate's and the service's lead floor."""
        raw = np.array(frame.data, dtype=float)
        if p.next_k is None:
            p.first_k = k0
        elif k0 > p.next_k:
            self.count(f"{p.name}:missing_samples", k0 - p.next_k)
            self.fault_log.log("%s: %d sample(s) missing before t=%d ns", p.name, k0 - p.next_k, frame.t,
                               key=(p.name, "missing"))
        p.next_k = k0 + len(raw)
        if p.faulted and p.next_k - p.fault_k >= self.rate_hz:
            p.faulted = False   # 1 s on the time base since the last fault: the episode is over
        # A sample is never received before it is measured: on one time base the lead only
        # dips below its least value by clock jitter (`clock_slack_s`).
        p.floor = lead if p.floor is None else min(p.floor, lead)
        self.floor = lead if self.floor is None else min(self.floor, lead)
        self.k_max = max(self.k_max, p.next_k)
        return frame, k0, raw

    # -- time base ------------------------------------------------------------------------

    def _clock_fault(self, p: _PlateStream, frame: Any, k0: int, lead: float) -> list:
        """A block whose stamp the plate's history and the host clock rule out: held as the
        possible start of a new time base (a device clock reset); counted as a clock fault when
        the old base goes on, or the held run is broken."""
        c = p.candidate
        if c and k0 == c[-1][1] + c[-1][0].samples and lead >= min(x[2] for x in c) - self.slack_ns:
            c.append((frame, k0, lead))
        else:
            self._drop_candidate(p)
            p.candidate = [(frame, k0, lead)]
        p.fault_k = p.next_k if p.next_k is not None else k0
        if not p.faulted:
            p.faulted = True
            # How far the stamp is from the plate's next sample (its first block: from where the
            # other plates' lead puts it).
            jump_s = ((k0 - p.next_k) / self.rate_hz if p.next_k is not None
                      else (self.floor - lead) * 1e-9)
            log.warning("%s: clock fault: a block of %s stamped t=%d ns is %.6g s %s the plate's time base "
                        "(held: %d consistent blocks on a new base make a clock reset)", p.name, p.stream,
                        frame.t, abs(jump_s), "ahead of" if jump_s > 0 else "behind", RESET_FRAMES)
            self._clock_event(p, frame, "clock_fault", jump_s)
        if len(p.candidate) < RESET_FRAMES:
            return []
        return self._reset(p)

    def _drop_candidate(self, p: _PlateStream) -> None:
        if p.candidate:
            self.count(f"{p.name}:clock_faults", len(p.candidate))
            self.fault_log.log("%s: %d block(s) with bad stamps rejected (clock faults)", p.name, len(p.candidate),
                               key=(p.name, "clock_faults"))
            p.candidate = []

    def _reset(self, p: _PlateStream) -> list[tuple[Any, int, np.ndarray]]:
        """Re-anchor the plate on the held run's time base: shift its slots so that the run's
        least lead equals the plate's (the host clock says where the run lies); within
        `clock_slack_s` of the plate's next slot it continues there (no sample lost)."""
        c, p.candidate = p.candidate, []
        floor = p.floor if p.floor is not None else self.floor
        shift = round((min(x[2] for x in c) - floor) / self.period_ns)
        if p.next_k is not None and abs(c[0][1] + shift - p.next_k) * self.period_ns <= self.slack_ns:
            shift = p.next_k - c[0][1]
        p.shift += shift
        p.faulted = False
        self.count(f"{p.name}:clock_resets", 1)
        log.warning("%s: clock reset: %d consistent blocks on a time base %.6g s from the old one; "
                    "re-anchored", p.name, len(c), -shift / self.rate_hz)
        self._clock_event(p, c[0][0], "clock_reset", -shift / self.rate_hz)
        return [self._take(p, f, k + shift, lead - shift * self.period_ns) for f, k, lead in c]

    def _clock_event(self, p: _PlateStream, frame: Any, event: str, jump_s: float) -> None:
        host = frame.t_recv if frame.t_recv is not None else frame.t_pub
        self.publish(CLOCK_STREAM, np.zeros((1, 0)), kind="event", rate_hz=0.0, channels=(), units=(),
                     t_device=None, t_host=host, t=host,
                     meta={"plate": p.name, "stream": p.stream, "event": event, "jump_s": float(jump_s)})

    def _finish_zeroing(self, p: _PlateStream) -> None:
        s = self.settings
        first = p.held[0][0]
        # Exactly the first zero_s of samples: the blocks held may run past it by however many frames
        # arrived in the last feed, which would make the zero depend on receipt batching (a replay
        # as fast as possible then zeroed differently from the live run).
        record = np.concatenate([raw for _, _, raw in p.held])[:self.zero_n]
        z = zero_from_record(p.plate, record, self.window_n, s.on_n, s.threshold_n)
        p.zero = z
        p.meta = {"zero": z.status}
        self.count(f"zero/{p.name}/{z.status}", 1)
        offset = np.full((1, len(p.channels)), np.nan) if z.offset is None else z.offset[None]
        self.publish(f"{ZERO_STREAM}/{p.name}", offset, kind="zero", rate_hz=0.0, channels=p.channels,
                     units=p.units, t_device=first.t_device, t_host=first.t_host, t=first.t,
                     meta={"status": z.status, "base_n": z.base_n, "peak_n": z.peak_n,
                           "record_s": s.zero_s, "window_s": s.zero_window_s})
        if z.status == "zeroed":
            log.info("%s: zeroed from the least-loaded %.2f s of %.1f s (offset F_z %.1f N, load seen %.0f N)",
                     p.name, s.zero_window_s, s.zero_s, z.base_n, z.peak_n - z.base_n)
        elif z.status == "unloaded":
            log.warning("%s: never loaded during the %.1f s zeroing record (F_z %.1f N): zeroed; its COP "
                        "stays NaN until it carries more than %.0f N", p.name, s.zero_s, z.base_n, s.threshold_n)
        elif z.status == "loaded":
            log.warning("%s: loaded through the whole %.1f s zeroing record (least F_z %.1f N), or a large "
                        "offset: NOT zeroed, the amplifier's zero is used", p.name, s.zero_s, z.base_n)
        else:
            log.warning("%s: fewer than %.2f s of finite samples in the %.1f s zeroing record: NOT zeroed, "
                        "the amplifier's zero is used", p.name, s.zero_window_s, s.zero_s)
        held, p.held, p.held_samples = p.held, [], 0
        self._process(p, held)

    # -- per plate ------------------------------------------------------------------------

    def _process(self, p: _PlateStream, items: list[tuple[Any, int, np.ndarray]]) -> None:
        """Compute and publish accepted blocks of one plate, consecutive ones as one frame."""
        run = [items[0]]
        for item in items[1:]:
            if self._continues(run[0], run[-1], item):
                run.append(item)
            else:
                self._process_run(p, run)
                run = [item]
        self._process_run(p, run)

    def _continues(self, first: tuple, last: tuple, item: tuple) -> bool:
        """True when block `item` follows `last` on the grid and its stamps are those of `first`
        plus the sample count (so one frame stamped like `first` gives every sample its own time)."""
        (f0, k0, _), (_, k1, raw1), (f, k, _) = first, last, item
        if k != k1 + len(raw1):
            return False
        dt = round((k - k0) * self.period_ns)
        return (f.t == f0.t + dt and f.t_host == f0.t_host + dt
                and (f.t_device is None) == (f0.t_device is None)
                and (f.t_device is None or f.t_device == f0.t_device + dt))

    def _process_run(self, p: _PlateStream, run: list[tuple[Any, int, np.ndarray]]) -> None:
        s = self.settings
        frame, k0, _ = run[0]
        raw = run[0][2] if len(run) == 1 else np.concatenate([r for _, _, r in run])
        sig = fp.process(p.plate, raw, threshold=s.threshold_n, offset=p.zero.offset)
        n = len(raw)
        out = np.concatenate([sig.force, sig.moment, sig.cop, sig.free_moment[:, 2:3],
                              sig.valid[:, None], sig.saturated[:, None]], axis=1, dtype=float)
        if p.plate.channel_range is not None and sig.saturated.any():
            self.count(f"{p.name}:saturated_samples", int(sig.saturated.sum()))
        if not math.isfinite(sig.force[:, 2].sum()):   # invalid samples (process makes them NaN)
            invalid = np.isnan(sig.force[:, 2])
            nonfinite = ~np.isfinite(raw).all(axis=1)
            if (invalid & nonfinite).any():
                self.count(f"{p.name}:nonfinite_samples", int((invalid & nonfinite).sum()))
            overflow = int((invalid & ~nonfinite).sum())
            if overflow:
                self.count(f"{p.name}:overflow_samples", overflow)
                self.fault_log.log("%s: %d sample(s) with finite raw values beyond float64 arithmetic (e.g. "
                                   "1e308 N): invalid", p.name, overflow, key=(p.name, "overflow"))
        self.publish(f"{GRF_STREAM}/{p.name}", out, kind="grf", rate_hz=frame.rate_hz,
                     channels=PLATE_CHANNELS, units=PLATE_UNITS, t_device=frame.t_device,
                     t_host=frame.t_host, t=frame.t, meta=p.meta)
        self._contacts(p, frame, sig.force[:, 2])
        # Keep the rows for the combination (slots already combined are late for it).
        if k0 + n - self.k_emit > self.capacity:
            self._emit(k0 + n - self.capacity)  # a stuck plate must not make us overwrite slots
        lo = max(k0, self.k_emit)
        if lo < k0 + n:
            rows = out[lo - k0:, 0:6]
            for ring_rows, part in self._slots(lo, k0 + n):
                self.ring[ring_rows, p.columns] = rows[part]
        if lo > k0:
            self.count("combine:late_samples", min(lo - k0, n))
        p.processed_end = k0 + n

    def _contacts(self, p: _PlateStream, frame: Any, fz: np.ndarray) -> None:
        s = self.settings
        # A missing sample holds the state: a value inside the hysteresis band changes nothing.
        if p.contact is None:
            p.contact = bool(fz[0] > 0.5 * (s.on_n + s.off_n))  # no event for the state found at start
        # No sample crosses the level that could change the state (most blocks); NaN compares
        # False, so a missing sample changes nothing here either.
        if not ((fz < s.off_n) if p.contact else (fz > s.on_n)).any():
            return
        f = np.where(np.isfinite(fz), fz, 0.5 * (s.on_n + s.off_n))
        c = fp.contact_events(f, on=s.on_n, off=s.off_n, initial=p.contact)
        p.contact = bool(c.contact[-1])
        events = [(int(i), "touchdown") for i in c.touchdown] + [(int(i), "liftoff") for i in c.liftoff]
        for i, kind in sorted(events):
            dt = round(i * 1e9 / frame.rate_hz)
            self.publish(EVENTS_STREAM, np.array([[fz[i]]]), kind="event", rate_hz=0.0,
                         channels=("Fz",), units=("N",),
                         t_device=None if frame.t_device is None else frame.t_device + dt,
                         t_host=frame.t_host + dt, t=frame.t + dt, meta={"plate": p.name, "event": kind})

    # -- combination ----------------------------------------------------------------------

    def _combine(self) -> None:
        """Publish the slots every plate has delivered, or is known not to deliver."""
        horizon = self.k_max - self.lag
        ready = []
        for p in self.plates:
            if p.first_k is None:
                bound = horizon                       # never heard from
            else:
                bound = max(p.first_k, p.processed_end if p.processed_end is not None else p.first_k)
                if p.next_k < horizon:
                    bound = max(bound, horizon)        # lagging: stop waiting for it
            ready.append(bound)
        self._emit(min(ready))

    def _emit(self, until: int) -> None:
        """Publish the total for slots [k_emit, until). Empty slots (nothing from any plate: not
        delivered, or non-finite) are NaN, at most `lag` of them in a row: the rest of such a run
        is left out (the next frame's stamps jump over it) and counted as
        ``combine:skipped_samples``. Bounded work whatever `until`: the ring holds nothing beyond
        one ring's worth of slots from `k_emit`."""
        if self.k_emit >= until:
            return
        a = self.k_emit
        b = min(until, a + self.capacity)
        w = np.empty((b - a, self.ring.shape[1]))
        for ring_rows, part in self._slots(a, b):
            w[part] = self.ring[ring_rows]
            self.ring[ring_rows] = np.nan
        self._emit_rows(a, w)
        if b < until:   # slots never written: one run of empty ones
            n = min(until - b, max(0, self.lag - self.empty_run))
            self._emit_rows(b, np.full((n, w.shape[1]), np.nan))
            self.empty_run += until - b - n
            self.count("combine:skipped_samples", until - b - n)
        self.k_emit = until

    def _slots(self, a: int, b: int) -> list[tuple[slice, slice]]:
        """Slots [a, b) (b - a <= capacity) as (ring rows, block rows) slice pairs: one, or two
        where the ring wraps."""
        i, n = a % self.capacity, b - a
        if i + n <= self.capacity:
            return [(slice(i, i + n), slice(0, n))]
        m = self.capacity - i
        return [(slice(i, self.capacity), slice(0, m)), (slice(0, n - m), slice(m, n))]

    def _emit_rows(self, a: int, w: np.ndarray) -> None:
        """Publish wrench rows `w` of slots a.., leaving out the empty (all-NaN) slots of a run
        beyond its first `lag`."""
        n = len(w)
        if not n:
            return
        if self.empty_run + n <= self.lag:   # no run can pass `lag` here (the live case)
            self._publish_total(a, w)
            if not math.isnan(w[-1, 0]):
                self.empty_run = 0
                return
        empty = np.isnan(w).all(axis=1)
        idx = np.arange(n)
        last = np.maximum.accumulate(np.where(empty, -1, idx))
        run = np.where(last < 0, idx + self.empty_run, idx - last - 1)   # place in its empty run
        if self.empty_run + n > self.lag:
            keep = ~empty | (run < self.lag)
            edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
            for i, j in zip(edges[0::2], edges[1::2]):
                self._publish_total(a + int(i), w[i:j])
            if not keep.all():
                self.count("combine:skipped_samples", int((~keep).sum()))
        self.empty_run = int(run[-1]) + 1 if empty[-1] else 0

    def _publish_total(self, a: int, w: np.ndarray) -> None:
        total = fp.combine_wrenches(self.plate_models, w, threshold=self.settings.threshold_n, pz=self.pz)
        out = np.concatenate([total.force, total.moment, total.cop, total.valid[:, None]], axis=1,
                             dtype=float)
        t0, th0, td0 = self.anchor
        dt = round(a * self.period_ns)
        self.publish(GRF_STREAM, out, kind="grf", rate_hz=self.rate_hz, channels=TOTAL_CHANNELS,
                     units=TOTAL_UNITS, t_device=None if td0 is None else td0 + dt, t_host=th0 + dt,
                     t=t0 + dt)


# -------------------------------------------------------------------------------- process ----

def _parser() -> argparse.ArgumentParser:
    d = Settings()
    p = argparse.ArgumentParser(prog="dynamics.service", description="live ground reaction forces")
    p.add_argument("--threshold-n", type=float, default=d.threshold_n,
                   help="vertical force below which COP and free moment are NaN [N]")
    p.add_argument("--on-n", type=float, default=d.on_n, help="touch-down level [N]")
    p.add_argument("--off-n", type=float, default=d.off_n, help="lift-off level [N]")
    p.add_argument("--zero-s", type=float, default=d.zero_s, help="zeroing record at start [s] (0: none)")
    p.add_argument("--zero-window-s", type=float, default=d.zero_window_s, help="zeroing window [s]")
    p.add_argument("--max-lag-s", type=float, default=d.max_lag_s,
                   help="how long the combination waits for a lagging plate [s]")
    p.add_argument("--clock-slack-s", type=float, default=d.clock_slack_s,
                   help="how far [s] a block's stamp may run ahead of the host clock before it is a clock fault")
    return p


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Serve the force plates of process `ctx` until asked to stop (see module doc)."""
    opts = _parser().parse_args(list(args))
    settings = Settings(opts.threshold_n, opts.on_n, opts.off_n, opts.zero_s, opts.zero_window_s,
                        opts.max_lag_s, opts.clock_slack_s)
    others = [name for name, d in ctx.devices.items() if d.kind != "forceplate"]
    if others:
        raise ValueError(f"process {ctx.name!r}: dynamics.service serves force plates only, not "
                         f"{', '.join(others)}")
    service = GrfService(list(ctx.devices.values()), settings, ctx.publisher.publish, ctx.health.count)
    sub = ctx.subscriber([p.stream for p in service.plates])
    log.info("serving %s; zeroing from the first %.1f s", ", ".join(p.name for p in service.plates),
             settings.zero_s)
    while not ctx.stopping:
        frame = sub.recv(timeout_s=0.02)
        if frame is None:
            ctx.publisher.poll_subscriptions()  # welcome subscribers while nothing is published
        else:
            batch = [frame]
            while len(batch) < MAX_BATCH and (frame := sub.recv(timeout_s=0)) is not None:
                batch.append(frame)
            service.feed(batch)
            now = time.monotonic_ns()
            for f in batch:  # receipt of the input frame -> its outputs handed to ZeroMQ
                ctx.health.latency("processing", (now - f.t_recv) * 1e-9)
            ctx.health.queue_depth("batch", len(batch))
        ctx.health.state = "zeroing" if service.zeroing else "running"
        ctx.health.tick()
    return 0
