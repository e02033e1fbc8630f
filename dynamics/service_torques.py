"""Dynamics service, second stage: live shaft torques, ZMP and margin, foot forces and energy per cycle.

The process beside `dynamics.service` (which turns the raw plate channels into wrenches and stays
the plate path): for the configured walker model it subscribes to

- the two shaft encoders ``encoder/<motor>`` of its ``kind = "mcu"`` device (angle rad, velocity
  rad/s; the first motor's samples are the output grid),
- the markers ``--markers`` (default ``markers/walker``: channels ``LABEL:x|y|z`` in m, lab frame,
  NaN where occluded), from which the chassis pose (X, Z, pitch) comes: the mean of the visible front
  corners ``chassis_FL``/``chassis_FR`` and of the back ones, pitch = atan2(Δz, Δx) between them
  (one end hidden: the last pitch, X and Z from the visible end),
- each of its force plates' wrenches ``dynamics/grf/NAME`` (Fx..Mz about the plate centre),

aligns them on lab time and computes, per encoder sample, `dynamics.walker_inverse` (the equations
are there): shaft torques from the reduced-form tables with the measured foot forces (a plate's force
shared among the feet on it) and the contact law's for feet no plate covers, the ZMP and its
stability margin, and the actuators' power P = τ ω; each completed shaft revolution, the work of
that cycle (`energetics.cycle_energy`: net, positive, absolute).

Alignment: an encoder sample at lab time t is computed once every input has a sample at or after t
(the markers are interpolated linearly between their bracketing samples, the second encoder and
the plates likewise; the chassis velocity is the least-squares slope of the marker poses of the last
``--velocity-window-s`` (0.05 s: 1 mm marker noise gives ~2 cm/s),
the shaft acceleration that of consecutive encoder velocities). So the service buffers exactly as
long as its slowest input needs — each input's lag (receipt minus lab time of its newest sample)
is in the health frame (``lag/STREAM``), and each output frame says how long its newest encoder sample
waited for the slowest input (``meta["wait_s"]``: receipt of the newest input used minus its own). How long a lagging input is waited for is
measured, not fixed: its lateness (receipt minus the lab time of a frame's first sample, the largest
over the last 1–2 s) says when a sample at t has come from it at the latest, t + lateness; a sample
still waiting ``--max-wait-s`` (host time) past that (and past its own receipt), or while an input
holds more than `KEEP_S` of samples (a replay as fast as it goes), is computed with the lagging inputs
held at their last value (``STREAM:held_samples``; flagged ``stale`` in the torques); a sample no value exists for
(an input never seen, a chassis not seen yet) is published as NaN; a marker sample without a pose
(no corner visible) is skipped (``STREAM:pose_missing``).

Bad input never stops it: frames without the channels it needs, without samples or a sample rate
are counted (``STREAM:rejected``); frames stamped further ahead of their receipt than the stream's
history allows (its least lead, or zero when that is larger, minus 0.25 s: a device clock jump the
daemon did not catch; a stream without a confirmed floor against the other streams': `Arrivals`) are
clock faults (``STREAM:clock_faults``), repeats and frames back in time ``STREAM:repeated``; all
are skipped. Five of them in a row with one lead re-anchor the stream (``STREAM:clock_resets``, an
``events/clock`` frame): a floor or newest sample set by bad stamps rejects good frames for no longer.
Malformed messages are counted by the bus.

Published (stamps: the first motor's encoder samples' ``t``/``t_host``/``t_device``; one frame per
run of consecutive samples computed together; ``meta["latency_s"]``: host time of publication minus
the receipt of the newest input sample used — also in the health frame as ``latency``; ``meta["wait_s"]``:
how long before that the newest encoder sample was received, the alignment wait, not in the latency):

- ``dynamics/torques``: ``tau_L tau_R`` (N·m, motor to shaft), ``load_L load_R`` (N·m, the legs'
  load torque −Q_s), ``omega_L omega_R`` (rad/s), ``power_L power_R`` (W, τ ω), ``stale`` (1);
- ``dynamics/zmp``: ``ZMPx ZMPy`` (m, lab, on z = 0), ``margin`` (m, > 0 inside the support
  polygon), ``support`` (vertices of the polygon: 0 flight), ``valid`` (total F_z > ``--min-fz-n``);
- ``dynamics/contact``: per foot ``foot_LABEL:x``, ``:z`` (m), ``:Fx``, ``:Fz`` (N, ground on foot)
  and ``:plate`` (1 where the force is a plate's share, 0 the contact law's);
- ``dynamics/energy``: one frame per completed revolution of a shaft, one sample ``net positive
  absolute`` (J) and ``period`` (s), ``meta = {"shaft": MOTOR, "cycle": k}``, stamped with the
  encoder sample that completed it.

`WalkerService` is the computation with its state (no sockets: it calls ``publish`` with
`daq.bus.Publisher.publish`'s signature); `run(ctx, args)` the process. docs/service.md.
"""
from __future__ import annotations

import argparse
import bisect
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from daq.context import ProcessContext
from daq.logthrottle import LogThrottle
from dynamics import forceplate as fp
from dynamics import kernels
from dynamics.contact import Friction, NormalLaw
from dynamics.energetics import cycle_boundaries, cycle_energy
from dynamics.plants.jansen_world import JansenWorld, jansen_world
from dynamics.walker_inverse import WalkerModel, walker_inverse, walker_model

log = logging.getLogger("walklab.dynamics.torques")

TORQUES, ZMP, CONTACT, ENERGY = "dynamics/torques", "dynamics/zmp", "dynamics/contact", "dynamics/energy"
TORQUE_CHANNELS = ("tau_L", "tau_R", "load_L", "load_R", "omega_L", "omega_R", "power_L", "power_R", "stale")
TORQUE_UNITS = ("N*m",) * 4 + ("rad/s",) * 2 + ("W",) * 2 + ("1",)
ZMP_CHANNELS, ZMP_UNITS = ("ZMPx", "ZMPy", "margin", "support", "valid"), ("m", "m", "m", "1", "1")
ENERGY_CHANNELS, ENERGY_UNITS = ("net", "positive", "absolute", "period"), ("J", "J", "J", "s")
CHASSIS = ("chassis_FL", "chassis_FR", "chassis_BL", "chassis_BR")
#: Most samples an input keeps while waiting [s]: more makes the waiting samples computed (held). It
#: exceeds the plate service's start-up zeroing record (2 s), so a replay as fast as it goes waits for it.
KEEP_S = 4.0
MAX_BATCH = 64
#: Longest revolution reported in dynamics/energy [s]: a shaft that stops mid-revolution starts again.
MAX_CYCLE_S = 60.0
#: How far [ns] a frame's stamps may run ahead of its receipt, against the stream's least lead, before
#: it is a clock fault (the plate service's default --clock-slack-s).
CLOCK_SLACK_NS = 250_000_000
#: An input's lateness is the largest of its frames received in the last one to two of these [ns].
LATE_WINDOW_NS = 1_000_000_000
#: Columns of an encoder's (angle, velocity, acceleration) in a `WalkerService._run` state row, per shaft.
_ENC_COLS = ([3, 8, 10], [4, 9, 11])


@dataclass(frozen=True)
class Settings:
    """Service parameters (SI): how long an encoder sample waits for a lagging input past the time that input's
    measured lateness says its sample comes (and past the encoder sample's receipt) [s]; foot normal
    force above which it supports [N]; least total vertical force for a ZMP [N]; the window of past
    marker poses whose least-squares slope is the chassis velocity [s] (0: the last two poses)."""
    max_wait_s: float = 0.1
    contact_n: float = 1.0
    min_fz_n: float = 1.0
    velocity_window_s: float = 0.05

    def __post_init__(self) -> None:
        if not (self.max_wait_s > 0 and math.isfinite(self.max_wait_s)) or not (
                math.isfinite(self.contact_n) and math.isfinite(self.min_fz_n)) or not (
                0 <= self.velocity_window_s < 10):
            raise ValueError(f"dynamics torques: need --max-wait-s > 0, finite forces and 0 <= --velocity-window-s "
                             f"< 10, got {self}")


#: Consecutive frames of a stream rejected (clock faults, repeats) with leads within `CLOCK_SLACK_NS` of the
#: first's and away from the stream's floor that re-anchor it (the plate service's `service.RESET_FRAMES`).
REANCHOR_FRAMES = 5
#: Where a re-anchoring is announced (the plate service's clock episodes' stream).
CLOCK_STREAM = "events/clock"


@dataclass
class _Leads:
    """One stream's leads [ns]: its floor (the least lead of the frames taken since its anchoring; until
    confirmed, the last frame's) and whether a second consistent frame confirmed it."""
    floor: int
    confirmed: bool = False


class Arrivals:
    """The acceptance rule every live dynamics service applies to a received frame (`WalkerService`,
    `service_tree.TreeService`): its samples' lab times are `Frame.sample_times` (the device's rate on the
    lab clock, ``meta["rate_lab_hz"]``, when the daemon's clock fit gives it); its receipt is the
    subscriber's, or fed by hand, the host stamp of its last sample; its lead = receipt − lab time of the
    last sample [ns] (a sample is never received before it is measured).

    A frame whose lead is more than `CLOCK_SLACK_NS` below min(reference, 0) is a clock fault; the reference
    is the stream's floor once CONFIRMED — a second frame's lead within `CLOCK_SLACK_NS` of the first's
    (of the last unconfirmed one's) — and until then the least confirmed floor of the other streams (while
    none is confirmed, in the first frames of a run, their least provisional one). So a single frame's
    stamp, even the very first of all, anchors nothing for long: once any stream is confirmed, no stream is
    judged against it. Against the floor, never above
    zero: a backlog (a publisher catching up after a stall, the plate service after its zeroing) inflates
    the early leads, and its catching up lowers the lead by a frame's span at once — that is not a clock
    running ahead. A frame that ends at or before the stream's newest sample is a repeat.

    A stream whose floor came from bad stamps would reject every good frame after it (stamped ahead: all
    repeats of the stamp; a confirmed bad floor: all clock faults): `REANCHOR_FRAMES` rejected in a row
    whose leads agree (each within `CLOCK_SLACK_NS` of the first's) and differ from the stream's floor by
    more than that re-anchor it — the last of them is taken, on a floor confirmed by them, and the service
    forgets the stream's samples (`admit` says ``"reanchored"``); the frames before it are lost, counted.
    `count(subject, n)` counts ``STREAM:clock_resets``; `publish` (`daq.bus.Publisher.publish`'s
    signature) announces each re-anchoring on `CLOCK_STREAM` (``event = "clock_reset"``, ``stream``,
    ``jump_s`` = old floor − new, s: > 0 the old stamps ran ahead), also logged."""

    def __init__(self, count: Callable[[str, int], None] = lambda subject, n=1: None,
                 publish: Callable[..., Any] | None = None) -> None:
        self.leads: dict[str, _Leads] = {}
        self.runs: dict[str, list[int]] = {}     # leads of each stream's frames rejected in a row [ns]
        self.count, self.publish = count, publish

    def admit(self, f: Any, newest: int | None) -> tuple[np.ndarray, int, str | None, str]:
        """(lab times (samples,) ns, receipt ns, None, "") of frame `f` of a stream whose newest sample so
        far is at `newest` ns (None: none), taken; (..., "reanchored", why) taken after the stream's
        samples are forgotten (the caller forgets them); or (..., counter, why) when it is skipped:
        ``clock_faults`` or ``repeated``."""
        t = f.sample_times()
        recv = f.t_recv if f.t_recv is not None else (f.t_pub or int(f.t_host + t[-1] - t[0]))
        lead = recv - int(t[-1])
        s = self.leads.get(f.stream)
        if s is not None and s.confirmed:
            ref: int | None = s.floor
        else:       # the others' confirmed floors; none confirmed yet (the first frames): their provisional ones
            others = [x for k, x in self.leads.items() if k != f.stream]
            ref = min((x.floor for x in others if x.confirmed), default=None)
            if ref is None:
                ref = min((x.floor for x in others), default=None)
        skip, why = None, ""
        if ref is not None and lead < min(ref, 0) - CLOCK_SLACK_NS:
            skip, why = "clock_faults", f"stamped {(ref - lead) * 1e-9:.3f} s ahead of its receipt"
        elif newest is not None and t[-1] <= newest:
            skip, why = "repeated", "nothing new: a repeat or out of order"
        run = self.runs.setdefault(f.stream, [])
        if skip is None:
            run.clear()
            if s is None:
                self.leads[f.stream] = _Leads(lead)
            else:
                if s.confirmed:
                    s.floor = min(s.floor, lead)
                else:       # confirmed by a second consistent frame, or this one is the new candidate
                    s.confirmed = abs(lead - s.floor) <= CLOCK_SLACK_NS
                    s.floor = min(s.floor, lead) if s.confirmed else lead
            return t, recv, None, ""
        if s is None or abs(lead - s.floor) > CLOCK_SLACK_NS:     # not a repeat on the stream's own time base
            if run and abs(lead - run[0]) > CLOCK_SLACK_NS:
                run.clear()
            run.append(lead)
            if len(run) >= REANCHOR_FRAMES:
                return t, recv, "reanchored", self._reanchor(f, s, recv)
        return t, recv, skip, why

    def _reanchor(self, f: Any, s: _Leads | None, recv: int) -> str:
        run = self.runs.pop(f.stream)
        new = min(run)
        old = s.floor if s is not None else new
        why = (f"{len(run)} frames in a row rejected with leads {new * 1e-9:.3f} s "
               f"({(old - new) * 1e-9:+.3f} s from its floor): re-anchored there, its earlier samples forgotten")
        self.leads[f.stream] = _Leads(new, confirmed=True)
        self.count(f"{f.stream}:clock_resets", 1)
        log.warning("%s: clock reset: %s", f.stream, why)
        if self.publish is not None:
            self.publish(CLOCK_STREAM, np.zeros((1, 0)), kind="event", rate_hz=0.0, channels=(), units=(),
                         t_device=None, t_host=recv, t=recv,
                         meta={"stream": f.stream, "event": "clock_reset", "jump_s": (old - new) * 1e-9})
        return why


class _Input:
    """One input stream's recent samples: lab times [ns], values (rows), receipt time of each sample's
    frame [ns] (rows a:b of arrays kept between frames: a frame's samples are copied in once, trimming
    moves a); linear interpolation at given times and holding past the newest sample."""

    def __init__(self, stream: str, width: int, rate_hz: float) -> None:
        self.stream, self.width = stream, width
        self.rate_hz = rate_hz
        self.keep = max(8, int(KEEP_S * rate_hz))
        self._t = np.empty(self.keep + 256, dtype=np.int64)
        self._v = np.empty((self._t.size, width))
        self._r = np.empty(self._t.size, dtype=np.int64)
        self.a = self.b = 0
        self.since: int | None = None       # receipt [ns] that opened the current lateness window
        self.late_prev = self.late_cur = 0  # largest lateness in the previous and the current window [ns]

    @property
    def t(self) -> np.ndarray:
        return self._t[self.a:self.b]

    @property
    def v(self) -> np.ndarray:
        return self._v[self.a:self.b]

    @property
    def recv(self) -> np.ndarray:
        return self._r[self.a:self.b]

    def add(self, t: np.ndarray, v: np.ndarray, recv: int) -> None:
        if self.b > self.a and t[0] <= self._t[self.b - 1]:      # a repeated or out-of-order block
            keep = t > self._t[self.b - 1]
            t, v = t[keep], v[keep]
            if not t.size:
                return
        n, m = self.b - self.a, t.size
        if self.b + m > self._t.size:       # to the front (or into larger arrays: an input far ahead)
            size = max(self._t.size, 2 * (n + m))
            t_, v_, r_ = np.empty(size, dtype=np.int64), np.empty((size, self.width)), np.empty(size, dtype=np.int64)
            t_[:n], v_[:n], r_[:n] = self.t, self.v, self.recv
            self._t, self._v, self._r, self.a, self.b = t_, v_, r_, 0, n
        self._t[self.b:self.b + m] = t
        self._v[self.b:self.b + m] = v
        self._r[self.b:self.b + m] = recv
        self.b += m

    def set_rate(self, rate_hz: float) -> None:
        """Hold `KEEP_S` of samples at the stream's own rate [Hz] (its frames' ``rate_hz``; the arrays grow
        in `add` as needed)."""
        self.rate_hz, self.keep = rate_hz, max(8, int(KEEP_S * rate_hz))

    def note_lateness(self, recv: int, t_first: int) -> None:
        """Take a frame's lateness: its receipt `recv` minus the lab time `t_first` of its first sample [ns] —
        the longest any of its samples took to arrive."""
        late = recv - t_first
        if self.since is None:
            self.since, self.late_prev, self.late_cur = recv, late, late
        elif recv - self.since > LATE_WINDOW_NS:
            self.since, self.late_prev, self.late_cur = recv, self.late_cur, late
        elif late > self.late_cur:
            self.late_cur = late

    @property
    def lateness(self) -> int:
        """How long after its lab time a sample of this input arrives [ns]: the largest lateness of its frames
        received in the last one to two `LATE_WINDOW_NS` (the measured lag, its frame span and jitter included)."""
        return max(self.late_prev, self.late_cur)

    @property
    def full(self) -> bool:
        """More than `KEEP_S` of samples waiting: the samples that need them are computed now."""
        return self.b - self.a > self.keep

    @property
    def newest(self) -> int | None:
        return int(self._t[self.b - 1]) if self.b > self.a else None

    def at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Values (N, width) at lab times t (N,) ns (NaN when empty), whether each was known — bracketed by
        samples held, not a held last value — and the receipt [ns] of the newest sample used."""
        if self.b == self.a:
            return np.full((t.size, self.width), np.nan), np.zeros(t.size, dtype=bool), 0
        ts, vs = self.t, self.v
        if kernels.enabled():           # the same steps in one compiled loop (kernels/walker.py)
            out, known = np.empty((t.size, self.width)), np.empty(t.size, dtype=bool)
            k = kernels.kernel("walker.interp")(ts, vs, t, out, known)
            return out, known, int(self._r[self.a + k])
        # linear interpolation of every column at once (np.interp's rule: held past the ends)
        k = np.clip(np.searchsorted(ts, t, side="right"), 1, max(ts.size - 1, 1))
        if ts.size == 1:
            out = np.repeat(vs[:1], t.size, axis=0)
        else:
            t0, t1 = ts[k - 1], ts[k]
            w = np.clip((t - t0) / (t1 - t0), 0.0, 1.0)[:, None]
            out = vs[k - 1] + w * (vs[k] - vs[k - 1])
        out[t < ts[0]] = np.nan        # before what is kept: unknown, never the first value
        k = min(int(np.searchsorted(ts, t[-1], side="left")), ts.size - 1)
        return out, (t >= ts[0]) & (t <= ts[-1]), int(self._r[self.a + k])

    def trim(self, before: int) -> None:
        """Forget samples older than the last one at or before `before` (still needed to interpolate),
        and beyond the newest `KEEP_S` (an input far ahead of the encoders)."""
        k = max(int(np.searchsorted(self.t, before, side="right")) - 1, self.b - self.a - self.keep)
        if k > 0:
            self.a += k


def due(pending: Sequence[int], receipts: Callable[[int, int], np.ndarray], inputs: Sequence[_Input], full: bool,
        first_recv: int, now: int, max_wait_s: float, count: Callable[[str, int], None]) -> int:
    """How many of a live service's waiting output samples (lab times `pending` ns, ascending) are computed
    now — a prefix; the rule of every live dynamics service (`WalkerService`, `service_tree.TreeService`).
    A sample is ready once every awaited input (of `inputs`, the streams it is aligned with) has a sample
    at or after it; an input silent since the first output sample's receipt `first_recv` for longer than
    `max_wait_s` (a plate service still zeroing, a stream this lab does not have) is not awaited until it
    appears — waiting would only delay samples computed without it anyway. A sample not ready is computed
    with the laggards held once past its deadline (`_overdue`), or at once while an input holds `KEEP_S`
    of samples (`full`: a replay as fast as it goes). `receipts(a, b)`: receipt [ns] of what each of
    pending[a:b] waited for itself (its own frame, or the look-ahead it needs); `now` host time [ns]. Counts
    ``STREAM:held_samples``: per input, the samples computed past its newest sample."""
    slack = max_wait_s * 1e9
    absent = now - first_recv > slack
    awaited = [i for i in inputs if i.newest is not None or not absent]
    cover = min((i.newest if i.newest is not None else -(2 ** 62)) for i in awaited) if awaited else 2 ** 62
    ready = bisect.bisect_right(pending, cover)
    if ready < len(pending):
        ready = len(pending) if full else ready + _overdue(pending, ready, receipts, awaited, now, slack)
    for i in inputs:
        newest = i.newest
        behind = ready if newest is None else ready - bisect.bisect_right(pending, newest, 0, ready)
        if behind:
            count(f"{i.stream}:held_samples", behind)
    return ready


def _overdue(pending: Sequence[int], ready: int, receipts: Callable[[int, int], np.ndarray],
             awaited: list[_Input], now: int, slack: float) -> int:
    """How many of the waiting samples (``pending[ready:]``, a prefix) are past their deadline: a sample at
    lab time t, received at r, is awaited from an input that does not reach t yet as long as that input's
    measured lateness says it may still come, ``t + lateness``, and never less than from its own receipt,
    ``r``; then `slack` ns more (``--max-wait-s``: jitter beyond what was measured). So a slow input (a
    motion-capture system's 0.3 s) is waited for as long as it needs, and a stalled one only that long."""
    # the first waiting sample first: mostly it is not due, and nothing is built
    t0 = pending[ready]
    late = [i.lateness for i in awaited if i.newest is not None and i.newest < t0]
    if max([int(receipts(ready, ready + 1)[0])] + [t0 + x for x in late]) + slack >= now:
        return 0
    waiting = np.asarray(pending[ready:], dtype=np.int64)
    deadline = np.asarray(receipts(ready, len(pending)), dtype=np.int64)
    for i in awaited:
        if i.newest is not None:
            deadline = np.where(waiting > i.newest, np.maximum(deadline, waiting + i.lateness), deadline)
    over = deadline + slack < now
    return waiting.size if over.all() else int(np.argmin(over))


class _Cycles:
    """One shaft's power samples since the start of its current revolution (`energetics.cycle_energy`):
    only the last sample until a first crossing of a multiple of 2π starts one; a revolution longer than
    `MAX_CYCLE_S` (a shaft that stopped) is dropped and the next crossing starts again."""

    def __init__(self, rate_hz: float = 1000.0) -> None:
        self.t = np.empty(0)
        self.s = np.empty(0)
        self.p = np.empty(0)
        self.count = 0
        self.started = False
        self.limit = int(MAX_CYCLE_S * rate_hz)

    def add(self, t: np.ndarray, s: np.ndarray, p: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Append samples (t s, angle rad, power W; finite); returns (index into the added samples of the
        one that completed it, [net, positive, absolute, period]) per completed revolution."""
        n0 = self.t.size
        lo, hi = float(s.min()), float(s.max())
        if n0:
            lo, hi = min(lo, float(self.s[-1])), max(hi, float(self.s[-1]))
        self.t, self.s, self.p = np.append(self.t, t), np.append(self.s, s), np.append(self.p, p)
        out: list[tuple[int, np.ndarray]] = []
        if math.floor(lo / (2.0 * math.pi)) == math.floor(hi / (2.0 * math.pi)):    # no crossing in these samples
            if not self.started or self.t.size > self.limit:
                self.started = False
                self.t, self.s, self.p = self.t[-1:], self.s[-1:], self.p[-1:]
            return out
        b = cycle_boundaries(self.t, self.s)
        if not self.started:                  # the first crossing starts the first revolution
            b = b[-1:]
        while b.size >= 2:
            e = cycle_energy(self.t, self.p, b[:2])
            k = int(np.searchsorted(self.t, b[1], side="left"))
            out.append((max(k - n0, 0), np.array([e.net[0], e.positive[0], e.absolute[0], b[1] - b[0]])))
            self.count += 1
            b = b[1:]
        keep = max(int(np.searchsorted(self.t, b[0], side="left")) - 1, 0)   # the sample before the start
        self.t, self.s, self.p = self.t[keep:], self.s[keep:], self.p[keep:]
        self.started = True
        return out


Publish = Callable[..., Any]


def _slope(poses: list[tuple[int, np.ndarray]]) -> list[float]:
    """Least-squares slope (3 values) per second of the poses (t ns, (3,)) — the backward difference of
    the last two when the window holds only them; zero for one pose. Plain floats: a window holds ~10."""
    n = len(poses)
    if n < 2:
        return [0.0, 0.0, 0.0]
    t0 = poses[0][0]
    t = [(p[0] - t0) * 1e-9 for p in poses]
    tm = sum(t) / n
    tc = [x - tm for x in t]
    den = sum(x * x for x in tc)
    return [sum(c * p[1][j] for c, p in zip(tc, poses)) / den for j in range(3)]


class WalkerService:
    """Encoder, marker and plate-wrench frames in; ``dynamics/torques``, ``/zmp``, ``/contact``,
    ``/energy`` out (module doc). `plates`: (name, `fp.Plate`) of the plates whose
    ``dynamics/grf/NAME`` it reads; `encoders`: the two encoder streams (left, right shaft);
    `markers`: the marker stream. Give `feed` the received frames in arrival order."""

    def __init__(self, world: JansenWorld, plates: Sequence[tuple[str, fp.Plate]], encoders: Sequence[str],
                 markers: str, settings: Settings, publish: Publish,
                 count: Callable[[str, int], None] = lambda subject, n=1: None,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        if len(encoders) != 2:
            raise ValueError(f"dynamics torques: the walker needs two shaft encoders, got {list(encoders)}")
        self.world, self.settings, self.publish, self.count, self.clock = world, settings, publish, count, clock
        self.model: WalkerModel = walker_model(world, [p for _, p in plates])
        # buffers sized for nominal rates until each stream's first frame gives its own (`_Input.set_rate`)
        self.enc = [_Input(s, 3, 1000.0) for s in encoders]       # angle, velocity, acceleration
        self.markers = _Input(markers, 6, 200.0)                   # X, Z, pitch and their rates
        self.plates = [_Input(f"dynamics/grf/{n}", 6, 1000.0) for n, _ in plates]
        self.inputs = {i.stream: i for i in (*self.enc, self.markers, *self.plates)}
        self.labels = tuple(f"foot_{n}" for n in world.labels)
        self.contact_channels = tuple(f"{lab}:{c}" for lab in self.labels for c in ("x", "z", "Fx", "Fz", "plate"))
        self.contact_units = ("m", "m", "N", "N", "1") * len(self.labels)
        self.ref_rate = 0.0
        self.ref_stamps: list[tuple[int, int | None]] = []      # (t_host, t_device) of pending ref samples
        self.last_vel: dict[str, tuple[int, float]] = {}
        self.poses: list[tuple[int, np.ndarray]] = []           # recent (t, pose) for the velocity
        self.velocity_ns = round(settings.velocity_window_s * 1e9)
        self.marker_cols = np.empty(0, dtype=np.intp)
        self.marker_layout: tuple[str, ...] = ()
        self.cycles = [_Cycles(), _Cycles()]
        self.done = -(2 ** 62)                                     # lab time of the last computed sample
        self.pending: list[int] = []                              # pending ref sample times (ns)
        self.first_recv: int | None = None                         # receipt of the first ref sample (ns)
        self.latencies: list[float] = []
        self.fault_log = LogThrottle(log, clock=clock)   # a bad stream repeats it every frame: a line a second
        self.arrivals = Arrivals(count, publish)

    # -- input ------------------------------------------------------------------------------

    def feed(self, frames: Sequence[Any]) -> None:
        """Take received frames (`daq.frames.Frame`, in arrival order; other streams are ignored) and
        compute every encoder sample that is ready."""
        for f in frames:
            inp = self.inputs.get(f.stream)
            if inp is None:
                continue
            why = self._check(inp, f)
            if why is not None:
                self.count(f"{f.stream}:rejected", 1)
                self.fault_log.log("%s: frame seq %d rejected: %s", f.stream, f.seq, why, key=(f.stream, "rejected"))
                continue
            step = 1e9 / f.rate_hz
            t, recv, skip, why = self.arrivals.admit(f, inp.newest)
            if skip == "clock_faults":
                self.count(f"{f.stream}:clock_faults", 1)
                self.fault_log.log("%s: frame seq %d %s: clock fault, rejected", f.stream, f.seq, why,
                                   key=(f.stream, "clock_faults"))
                continue
            if skip == "reanchored":
                self._forget(inp, int(t[0]))
            elif skip is not None:
                self.count(f"{f.stream}:{skip}", 1)
                continue
            inp.note_lateness(recv, int(t[0]))
            if f.rate_hz != inp.rate_hz:        # KEEP_S at this stream's rate, not the nominal one
                inp.set_rate(f.rate_hz)
            if inp is self.markers:
                self._markers(f, t, recv)
            elif inp in self.enc:
                self._encoder(inp, f, t, recv, step)
            else:
                cols = [f.channels.index(c) for c in ("Fx", "Fy", "Fz", "Mx", "My", "Mz")]
                inp.add(t, np.asarray(f.data, dtype=float)[:, cols], recv)
        self._compute()

    def _forget(self, inp: _Input, t0: int) -> None:
        """Input `inp` re-anchored (`Arrivals`) at a frame starting at lab time t0 [ns]: its samples, and what
        was derived from them — a shaft's velocity and revolution, the chassis velocity's poses, the
        reference samples waiting at or after t0 — are forgotten."""
        inp.a = inp.b
        inp.since = None
        if inp is self.markers:
            self.poses.clear()
        elif inp in self.enc:
            self.last_vel.pop(inp.stream, None)
            self.cycles[self.enc.index(inp)] = _Cycles()
            if inp is self.enc[0]:
                keep = bisect.bisect_left(self.pending, t0)
                del self.pending[keep:], self.ref_stamps[keep:]

    def _check(self, inp: _Input, f: Any) -> str | None:
        """Why frame `f` cannot be input `inp`'s block, or None."""
        need = {"angle", "velocity"} if inp in self.enc else \
            {"Fx", "Fy", "Fz", "Mx", "My", "Mz"} if inp in self.plates else set()
        data = np.asarray(f.data)
        if data.ndim != 2 or f.samples == 0 or data.dtype.kind not in "fiu":
            return f"data of shape {data.shape} and dtype {data.dtype}: expected (samples >= 1, channels), numbers"
        if not need <= set(f.channels):
            return f"channels {list(f.channels)} lack {sorted(need - set(f.channels))}"
        if not (f.rate_hz > 0 and math.isfinite(f.rate_hz)):
            return f"rate {f.rate_hz} Hz: expected a sample rate > 0"
        return None

    def _encoder(self, inp: _Input, f: Any, t: np.ndarray, recv: int, step: float) -> None:
        data = np.asarray(f.data, dtype=float)
        ang, vel = data[:, f.channels.index("angle")], data[:, f.channels.index("velocity")]
        prev = self.last_vel.get(inp.stream)
        v_prev = np.concatenate([[prev[1] if prev else vel[0]], vel[:-1]])
        t_prev = np.concatenate([[prev[0] if prev else t[0] - 1], t[:-1]]).astype(float)
        acc = (vel - v_prev) / ((t - t_prev) * 1e-9)      # backward difference
        self.last_vel[inp.stream] = (int(t[-1]), float(vel[-1]))
        before = inp.newest
        inp.add(t, np.column_stack([ang, vel, acc]), recv)
        if inp is self.enc[0]:
            self.ref_rate = f.rate_hz
            new = t > (before if before is not None else -(2 ** 62))
            td = None if f.t_device is None else f.t_device + np.round(np.arange(f.samples) * step).astype(np.int64)
            th = f.t_host + np.round(np.arange(f.samples) * step).astype(np.int64)
            for i in np.flatnonzero(new):
                self.pending.append(int(t[i]))
                self.ref_stamps.append((int(th[i]), None if td is None else int(td[i])))

    def _markers(self, f: Any, t: np.ndarray, recv: int) -> None:
        if f.channels != self.marker_layout:
            try:
                self.marker_cols = np.array([f.channels.index(f"{m}:{a}") for m in CHASSIS for a in "xyz"])
            except ValueError:
                self.count(f"{f.stream}:rejected", 1)    # not the walker's chassis markers
                return
            self.marker_layout = f.channels
        p = np.asarray(f.data, dtype=float)[:, self.marker_cols].reshape(-1, 4, 3)
        rows, times = [], []
        for i in range(t.size):
            pose = self._pose(p[i])
            if pose is None:
                self.count(f"{f.stream}:pose_missing", 1)
                continue
            self.poses.append((int(t[i]), pose))
            while len(self.poses) > 2 and self.poses[0][0] < t[i] - self.velocity_ns:
                self.poses.pop(0)
            rows.append([*pose, *_slope(self.poses)])
            times.append(t[i])
        if rows:
            self.markers.add(np.array(times, dtype=np.int64), np.array(rows), recv)

    def _pose(self, corners: np.ndarray) -> np.ndarray | None:
        """Chassis (X, Z, pitch) from its corner markers (4, 3) (FL, FR, BL, BR; NaN occluded): the mean
        of the visible front and back corners (left and right share x and z); with one end hidden, the
        pitch is the last one's and X, Z follow from the visible end (±length/2 along the chassis)."""
        ok = np.isfinite(corners).all(axis=1)
        front = corners[:2][ok[:2]].mean(axis=0) if ok[:2].any() else None
        back = corners[2:][ok[2:]].mean(axis=0) if ok[2:].any() else None
        if front is not None and back is not None:
            return np.array([(front[0] + back[0]) / 2, (front[2] + back[2]) / 2,
                             math.atan2(front[2] - back[2], front[0] - back[0])])
        if self.poses and (front is not None or back is not None):
            phi = self.poses[-1][1][2]
            end, sign = (front, 1.0) if front is not None else (back, -1.0)
            half = 0.5 * self.world.chassis_length
            return np.array([end[0] - sign * half * math.cos(phi), end[2] - sign * half * math.sin(phi), phi])
        return None

    # -- computation ------------------------------------------------------------------------

    def _compute(self) -> None:
        if not self.pending:
            return
        ref = self.enc[0]
        if self.first_recv is None:
            self.first_recv = int(ref.recv[0])
        ready = due(self.pending, self._receipts, [i for i in self.inputs.values() if i is not ref],
                    any(i.full for i in self.inputs.values()), self.first_recv, self.clock(),
                    self.settings.max_wait_s, self.count)
        if not ready:
            return
        t_all = np.array(self.pending[:ready], dtype=np.int64)
        stamps = self.ref_stamps[:ready]
        del self.pending[:ready], self.ref_stamps[:ready]
        # split at gaps of the reference stream: a frame's stamps go by sample count
        period = 1e9 / self.ref_rate if self.ref_rate > 0 else 0.0
        cuts = [0] + [j for j in range(1, ready) if abs(t_all[j] - t_all[j - 1] - period) > period / 2] + [ready]
        for a, b in zip(cuts[:-1], cuts[1:]):
            for c in range(a, b, MAX_BATCH):
                self._run(t_all[c:min(b, c + MAX_BATCH)], stamps[c:min(b, c + MAX_BATCH)])
        self.done = int(t_all[-1])
        for i in self.inputs.values():
            i.trim(self.done)

    def _receipts(self, a: int, b: int) -> np.ndarray:
        """Receipt [ns] of the reference samples ``pending[a:b]`` (their own frames')."""
        ref = self.enc[0]
        k = np.searchsorted(ref.t, np.asarray(self.pending[a:b], dtype=np.int64), side="left")
        return ref.recv[np.minimum(k, ref.t.size - 1)]

    def _run(self, t: np.ndarray, stamps: list[tuple[int, int | None]]) -> None:
        n, L = t.size, self.world.n_legs
        (enc_l, k0, r0), (enc_r, k1, r1) = self.enc[0].at(t), self.enc[1].at(t)
        chassis, k2, r2 = self.markers.at(t)
        recv, known = [r0, r1, r2], k0 & k1 & k2
        wrench = np.empty((n, len(self.plates), 6))
        for k, p in enumerate(self.plates):
            wrench[:, k], kp, r = p.at(t)
            recv.append(r)
            known &= kp
        # one row per sample: q = (X, Z, φ, s_L, s_R), u = its rates, then (s̈_L, s̈_R)
        x = np.empty((n, 12))
        x[:, 0:3], x[:, 5:8] = chassis[:, :3], chassis[:, 3:]
        x[:, _ENC_COLS[0]], x[:, _ENC_COLS[1]] = enc_l, enc_r
        ok = np.isfinite(x).all(axis=1)
        every = bool(ok.all())
        torques = np.empty((n, len(TORQUE_CHANNELS))) if every else np.full((n, len(TORQUE_CHANNELS)), np.nan)
        zmp = np.empty((n, len(ZMP_CHANNELS))) if every else np.full((n, len(ZMP_CHANNELS)), np.nan)
        feet = np.empty((n, L, 5)) if every else np.full((n, L, 5), np.nan)
        if every or ok.any():
            xs = x if every else x[ok]
            r = walker_inverse(self.model, xs[:, :5], xs[:, 5:10], xs[:, 10:], wrench if every else wrench[ok],
                               self.settings.contact_n, self.settings.min_fz_n)
            omega = xs[:, 8:10]
            rows = torques if every else np.empty((xs.shape[0], len(TORQUE_CHANNELS)))
            rows[:, 0:2], rows[:, 2:4], rows[:, 4:6], rows[:, 6:8] = r.tau, r.load, omega, r.tau * omega
            z = zmp if every else np.empty((xs.shape[0], len(ZMP_CHANNELS)))
            z[:, 0:2], z[:, 2], z[:, 3], z[:, 4] = r.zmp[:, :2], r.margin, r.support, r.zmp_valid
            f = feet if every else np.empty((xs.shape[0], L, 5))
            f[..., 0], f[..., 1], f[..., 2], f[..., 3], f[..., 4] = (r.foot[..., 0], r.foot[..., 2], r.force[..., 0],
                                                                     r.force[..., 2], r.measured)
            if not every:
                torques[ok], zmp[ok], feet[ok] = rows, z, f
        torques[:, 8] = ~known      # an input held past its newest sample, or no longer held: stale
        th0, td0 = stamps[0]
        common = dict(rate_hz=self.ref_rate, t=int(t[0]), t_host=th0, t_device=td0)
        latency = (self.clock() - max(recv)) * 1e-9
        # wait_s: how long the newest reference sample waited for the slowest input (not in latency_s)
        meta = {"latency_s": latency, "wait_s": max(max(recv) - r0, 0) * 1e-9}
        self.publish(TORQUES, torques, kind="torques", channels=TORQUE_CHANNELS, units=TORQUE_UNITS, meta=meta,
                     **common)
        self.publish(ZMP, zmp, kind="zmp", channels=ZMP_CHANNELS, units=ZMP_UNITS, meta=meta, **common)
        self.publish(CONTACT, feet.reshape(n, -1), kind="contact", channels=self.contact_channels,
                     units=self.contact_units, meta=meta, **common)
        self.latencies.append(latency)
        self._energy(t, stamps, x[:, 3:5], torques[:, 6:8], ok, every)

    def _energy(self, t: np.ndarray, stamps: list, angle: np.ndarray, power: np.ndarray, ok: np.ndarray,
                every: bool) -> None:
        """Feed each shaft's angle (N, 2) rad and power (N, 2) W of the computed samples to its revolutions."""
        idx = np.arange(t.size) if every else np.flatnonzero(ok)
        if not idx.size:
            return
        ts = t * 1e-9 if every else t[idx] * 1e-9
        for j, cyc in enumerate(self.cycles):
            done = cyc.add(ts, angle[:, j] if every else angle[idx, j], power[:, j] if every else power[idx, j])
            for k, row in done:
                i = int(idx[min(k, idx.size - 1)])
                th, td = stamps[i]
                self.publish(ENERGY, row[None], kind="energy", rate_hz=0.0, channels=ENERGY_CHANNELS,
                             units=ENERGY_UNITS, t=int(t[i]), t_host=th, t_device=td,
                             meta={"shaft": self.enc[j].stream.split("/", 1)[-1], "cycle": cyc.count})


# -------------------------------------------------------------------------------- process ----

def _parser() -> argparse.ArgumentParser:
    d = Settings()
    p = argparse.ArgumentParser(prog="dynamics.service_torques", description="live walker torques, ZMP, energy")
    p.add_argument("--model", default="jansen_walker", help="walker model file (configs/models)")
    p.add_argument("--markers", default="markers/walker", help="marker stream with the chassis corners")
    p.add_argument("--max-wait-s", type=float, default=d.max_wait_s,
                   help="how long an encoder sample waits for a lagging input beyond that input's measured "
                        "lateness [s]")
    p.add_argument("--contact-n", type=float, default=d.contact_n, help="supporting foot's least normal force [N]")
    p.add_argument("--min-fz-n", type=float, default=d.min_fz_n, help="least total vertical force for a ZMP [N]")
    p.add_argument("--velocity-window-s", type=float, default=d.velocity_window_s,
                   help="past marker poses fitted for the chassis velocity [s]")
    p.add_argument("--stiffness", type=float, default=2e4, help="contact law K [N/m^1.5] (the world's)")
    p.add_argument("--damping", type=float, default=1.0, help="contact law damping alpha [s/m]")
    p.add_argument("--mu", type=float, default=0.8, help="friction coefficient")
    p.add_argument("--slip-velocity", type=float, default=0.02, help="tanh friction slip velocity [m/s]")
    return p


def service_from(ctx: ProcessContext, args: Sequence[str], publish: Publish | None = None) -> WalkerService:
    """The `WalkerService` of process `ctx` (its devices: force plates and one mcu) with `args`; for a
    ``--model`` file of kind tree (a human, an exoskeleton) the `dynamics.service_tree.TreeService`."""
    from dynamics import service_tree

    if service_tree.model_kind(args) == "tree":
        return service_tree.service_from(ctx, args, publish)
    o = _parser().parse_args(list(args))
    world = jansen_world(o.model, law=NormalLaw("hunt_crossley_constant", o.stiffness, damping=o.damping),
                         friction=Friction(o.mu, kind="tanh", v_s=o.slip_velocity))
    mcu = ctx.device("mcu")
    if len(mcu.motors) != 2:
        raise ValueError(f"process {ctx.name!r}: the walker's mcu device needs two motors (left, right shaft), "
                         f"got {list(mcu.motors)}")
    plates = [(n, fp.Plate(type=d.type, corners=d.corners, origin=d.origin, cal_matrix=d.cal_matrix, name=n))
              for n, d in ctx.devices.items() if d.kind == "forceplate"]
    return WalkerService(world, plates, mcu.streams, o.markers,
                         Settings(o.max_wait_s, o.contact_n, o.min_fz_n, o.velocity_window_s),
                         publish or ctx.publisher.publish, ctx.health.count, ctx.clock)


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Serve the walker's live dynamics until asked to stop (module doc)."""
    service = service_from(ctx, args)
    if kernels.enabled():       # loaded from numba's cache now (~1.5 s), not inside the first computation
        kernels.kernel("walker.inverse"), kernels.kernel("walker.interp")
    sub = ctx.subscriber(list(service.inputs))
    log.info("walker torques from %s", ", ".join(service.inputs))
    while not ctx.stopping:
        frame = sub.recv(timeout_s=0.02)
        if frame is None:
            service.feed(())        # computes what waited past --max-wait-s
            ctx.publisher.poll_subscriptions()
        else:
            if frame.stream in service.inputs and frame.t_recv is not None and frame.rate_hz > 0:
                end = int(frame.sample_times()[-1])
                ctx.health.latency(f"lag/{frame.stream}", (frame.t_recv - end) * 1e-9)
            # one frame at a time: what it completes is computed and published before the next is decoded
            service.feed((frame,))
        for lat in service.latencies:
            ctx.health.latency("latency", lat)
        service.latencies.clear()
        ctx.health.state = "running"
        ctx.health.tick()
    return 0
