"""Process health: per-stream rates, drops, queue depths and latency percentiles, published once a second.

Every walklab process owns one `Health` and calls `Health.tick` from its main loop; once per
period it publishes a frame on stream ``health/<name>`` through the process's Publisher:

- ``kind = "health"``, ``rate_hz = 1 / period_s``;
- ``data``: one sample, float64, shape (1, channels); channel names are ``"<subject>:<field>"``,
  e.g. ``"forceplate/FP1:rate_hz"``, ``"loop:latency_p99_s"``, ``"queue/writer:depth"``; a
  value that is not available (no latency yet) is NaN;
- ``units``: SI per channel (``"Hz"``, ``"1/s"``, ``"s"``, ``"1"`` for counts);
- ``meta``: ``{"process": name, "pid": int, "uptime_s": float, "state": str}``.

Fields per subject (a subject appears once it has something to report):

- streams this process publishes (read from the Publisher's counters): ``sent`` (total frames),
  ``sent_per_s`` (frames/s over the last period);
- streams it subscribes to (`Health.watch` a Subscriber): ``received``, ``rate_hz``,
  ``frames_per_s``, ``gaps``, ``dropped``, ``lost_samples``, ``restarts``, ``out_of_order``,
  ``missed_at_join``, ``malformed``, ``latency_p50_s``, ``latency_p99_s``, ``latency_max_s``
  (totals are cumulative, see `daq.bus.StreamStats`);
  plus ``bus:malformed`` (every malformed message of the watched subscribers);
- counters (`Health.count`): ``count`` (total), ``per_s`` (over the last period);
- queues (`Health.queue_depth`): ``depth`` (latest), ``depth_max`` (over the last period);
- latencies (`Health.latency`): ``latency_p50_s``, ``latency_p99_s``, ``latency_max_s`` over the
  last period, and ``latency_n`` (observations in it).

`parse_health` turns a health frame back into ``{subject: {field: value}}``.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from daq.bus import Publisher, Subscriber
from daq.frames import Frame, FrameError

HEALTH_KIND = "health"
HEALTH_PREFIX = "health/"

_STREAM_FIELDS = (
    ("received", "1"), ("rate_hz", "Hz"), ("frames_per_s", "1/s"), ("gaps", "1"), ("dropped", "1"),
    ("lost_samples", "1"), ("restarts", "1"), ("out_of_order", "1"), ("missed_at_join", "1"),
    ("malformed", "1"), ("latency_p50_s", "s"), ("latency_p99_s", "s"), ("latency_max_s", "s"),
)


class Health:
    """Accumulates a process's health figures and publishes ``health/<name>`` every ``period_s``.

    Args:
        name: process name (the stream is ``health/<name>``).
        publisher: the process's Publisher; its per-stream ``sent`` counters are reported too.
        period_s: publishing period [s].
        clock: monotonic clock in ns (injectable for tests).
    """

    def __init__(self, name: str, publisher: Publisher, *, period_s: float = 1.0,
                 clock: Any = time.monotonic_ns):
        if not name or "\x00" in name:
            raise ValueError(f"health name {name!r} must be a non-empty string")
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self.name = name
        self.stream = HEALTH_PREFIX + name
        self.state = "running"
        self._pub = publisher
        self._period_ns = int(period_s * 1e9)
        self._clock = clock
        self._t0 = clock()
        self._next = self._t0 + self._period_ns
        self._last_t = self._t0
        self._watched: list[Subscriber] = []
        self._counts: dict[str, int] = {}
        self._counts_prev: dict[str, int] = {}
        self._sent_prev: dict[str, int] = {}
        self._depth: dict[str, tuple[int, int]] = {}
        self._lat: dict[str, list[float]] = {}

    def watch(self, subscriber: Subscriber) -> None:
        """Report ``subscriber.stats()`` in every health frame."""
        self._watched.append(subscriber)

    def count(self, subject: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``subject`` (e.g. loop iterations, serial packets, overruns)."""
        self._counts[subject] = self._counts.get(subject, 0) + n

    def queue_depth(self, subject: str, depth: int) -> None:
        """Record the current depth of queue ``subject`` (items)."""
        _, peak = self._depth.get(subject, (0, 0))
        self._depth[subject] = (depth, max(peak, depth))

    def latency(self, subject: str, seconds: float) -> None:
        """Record one latency observation of ``subject`` [s] (e.g. loop lateness, processing time)."""
        self._lat.setdefault(subject, []).append(seconds)

    def snapshot(self, now_ns: int | None = None) -> tuple[list[str], list[str], np.ndarray]:
        """``(channels, units, values)`` of the health frame at ``now_ns``; resets the per-period figures."""
        now = self._clock() if now_ns is None else now_ns
        dt = max((now - self._last_t) * 1e-9, 1e-9)
        self._last_t = now
        chans: list[str] = []
        units: list[str] = []
        vals: list[float] = []

        def put(subject: str, fld: str, unit: str, value: float | None) -> None:
            chans.append(f"{subject}:{fld}")
            units.append(unit)
            vals.append(math.nan if value is None else float(value))

        for stream, sent in sorted(self._pub.sent.items()):
            if stream == self.stream:
                continue
            put(stream, "sent", "1", sent)
            put(stream, "sent_per_s", "1/s", (sent - self._sent_prev.get(stream, 0)) / dt)
        self._sent_prev = dict(self._pub.sent)
        malformed = 0
        for sub in self._watched:
            malformed += sub.malformed
            for stream, st in sorted(sub.stats().items()):
                for fld, unit in _STREAM_FIELDS:
                    put(stream, fld, unit, getattr(st, fld))
        if self._watched:
            put("bus", "malformed", "1", malformed)
        for subject, total in sorted(self._counts.items()):
            put(subject, "count", "1", total)
            put(subject, "per_s", "1/s", (total - self._counts_prev.get(subject, 0)) / dt)
        self._counts_prev = dict(self._counts)
        for subject, (depth, peak) in sorted(self._depth.items()):
            put(subject, "depth", "1", depth)
            put(subject, "depth_max", "1", peak)
            self._depth[subject] = (depth, depth)
        for subject, obs in sorted(self._lat.items()):
            arr = np.asarray(obs, dtype=float)
            p50, p99, mx = (np.percentile(arr, [50, 99]).tolist() + [arr.max()]) if arr.size else (None,) * 3
            put(subject, "latency_p50_s", "s", p50)
            put(subject, "latency_p99_s", "s", p99)
            put(subject, "latency_max_s", "s", mx)
            put(subject, "latency_n", "1", arr.size)
            obs.clear()
        return chans, units, np.asarray(vals, dtype=np.float64).reshape(1, -1)

    def publish(self, now_ns: int | None = None) -> Frame:
        """Publish a health frame now; returns it."""
        now = self._clock() if now_ns is None else now_ns
        chans, units, values = self.snapshot(now)
        meta = {"process": self.name, "pid": os.getpid(), "uptime_s": (now - self._t0) * 1e-9, "state": self.state}
        return self._pub.publish(self.stream, values, kind=HEALTH_KIND, rate_hz=1e9 / self._period_ns,
                                 channels=chans, units=units, meta=meta)

    def tick(self, now_ns: int | None = None) -> Frame | None:
        """Publish a health frame if the period has elapsed (call it from the main loop); returns it or None."""
        now = self._clock() if now_ns is None else now_ns
        if now < self._next:
            return None
        # Absolute schedule; after a long stall, skip the missed periods instead of bursting.
        self._next += self._period_ns * max(1, (now - self._next) // self._period_ns + 1)
        return self.publish(now)


def parse_health(frame: Frame) -> dict[str, dict[str, float]]:
    """``{subject: {field: value}}`` of a health frame; FrameError if ``frame`` is not one."""
    if frame.kind != HEALTH_KIND or not frame.stream.startswith(HEALTH_PREFIX) or frame.data.shape[0] != 1:
        raise FrameError(f"stream {frame.stream!r} (kind {frame.kind!r}) is not a one-sample health frame")
    out: dict[str, dict[str, float]] = {}
    for chan, value in zip(frame.channels, frame.data[0].tolist()):
        subject, sep, fld = chan.rpartition(":")
        if not sep:
            raise FrameError(f"health frame {frame.stream!r}: channel {chan!r} is not 'subject:field'")
        out.setdefault(subject, {})[fld] = float(value)
    return out
