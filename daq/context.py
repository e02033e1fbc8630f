"""The process contract: the typed context every walklab process receives, and the daemon skeleton.

Every process `walklab run` starts is ``MODULE.run(ctx, args) -> int`` (see `controller.proc`,
which builds the context). ``ctx`` is a `ProcessContext`:

- ``name`` and ``config``: the process's ``[[processes]]`` entry (`controller.config.Process`), and
  ``lab``, the whole lab config it came from;
- ``devices``: the ``[devices.NAME]`` sections the entry lists, by name (a daemon reads its
  device's port, rate, geometry there, not in ``args``; `ProcessContext.device` finds the one
  device of a kind);
- ``publisher`` (bound at the entry's ``bind``), ``subscriber(streams)`` (a factory: a Subscriber
  to every publisher of the lab, watched by the health figures), ``health`` (``health/NAME``);
- ``clock``: the host monotonic clock in integer ns (``time.monotonic_ns`` unless a test injects
  another); ``stop``: a `threading.Event` set when the process is asked to stop (SIGTERM/SIGINT),
  so reader threads can watch it too.

A process loops while ``not ctx.stopping``, never blocks longer than a fraction of a second
without `ProcessContext.tick` (health once a second, subscriber handshakes) — `sleep_until` does
both — and returns its exit status when asked to stop. A config or argument mistake raises
ValueError/OSError with one line, which the runtime logs and turns into exit status
`CONFIG_ERROR` (2); the supervisor does not restart a process that exits with it.

The daemon skeleton (`serve`) is the loop of a device daemon: a `Source` knows its device (open,
read a block, close); `serve` does the rest, the same way for every device::

    open ──▶ read a block ──▶ stamp ──▶ publish ──▶ health ──┐
     ▲  │          ▲                                        │
     │  └ fails: retry every retry_s     └──────────────────┘
     └── DeviceLost/OSError while reading: close, state "disconnected", reopen (a new session)

Stamps (see `daq.frames`): a `Block` carries ``t_device`` of its first sample (device clock, ns)
and ``t_recv``, the host monotonic time the block arrived (its last sample). Sample i of a block
is at ``t_device + i·1e9/rate_hz`` (sample counts, not clock reads); the frame's ``t_host`` is
``t_recv − (n−1)·1e9/rate_hz``, and ``t`` the `daq.clock.ClockSync` mapping of ``t_device``
(one fit per stream and session: a reconnected device may have rebooted its clock). A device
clock that goes back or jumps (`ClockSync`'s reset rules) re-anchors the stream's fit on that
block, so ``t`` stays on the host clock whatever the device stamps (``t_device`` is published as
received); each is counted, logged and published as a ``clock_reset`` event on ``events/NAME``
(`ProcessContext.event`: stream, reason, t_device, t_host). Within a block, sample i is at
``t + i·1e9/rate_lab_hz`` on the lab clock, ``rate_lab_hz`` = nominal rate / (1 + estimated
drift) (`ClockSync.lab_rate_hz`), published in the frame's ``meta`` and used by
`daq.frames.Frame.sample_times`. Health (``health/NAME``): state ``connecting`` / ``running`` /
``disconnected``; counters ``device/open_failures``, ``device/sessions``, ``device/lost``
(losses of a connected device), ``STREAM/samples`` and ``STREAM/clock_resets`` per stream.
docs/daemons.md shows a whole daemon.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from daq.clock import ClockSync
from daq.logthrottle import LogThrottle

if TYPE_CHECKING:  # typing only: daq never imports controller at run time (architecture.md)
    from controller.config import Device, Lab, Process
    from daq.bus import Publisher, Subscriber
    from daq.health import Health

log = logging.getLogger("walklab.daemon")

#: Exit status of a process stopped by a config or argument error (not restarted by the supervisor).
CONFIG_ERROR = 2

#: Longest a `ProcessContext.sleep_until` slice lasts [ns]: bounds the stop latency and health period.
_SLICE_NS = 50_000_000

#: ``subscribe(streams, expect)``: a Subscriber to every publisher of the lab.
SubscriberFactory = Callable[[Iterable[str], "Iterable[str] | None"], "Subscriber"]


@dataclass(eq=False)
class ProcessContext:
    """What a process's ``run(ctx, args)`` receives (see the module doc); it owns the sockets.

    Attributes:
        name: the process name (``config.name``); its health stream is ``health/NAME``.
        config: the process's ``[[processes]]`` entry.
        lab: the whole lab config.
        devices: the ``[devices.NAME]`` sections listed in ``config.devices``, by name.
        publisher: bound at ``config.bind``.
        health: publishes ``health/NAME`` (`tick`).
        subscribe: the factory behind `subscriber`.
        clock: host monotonic clock [ns].
        stop: set once the process is asked to stop.
    """

    name: str
    config: Process
    lab: Lab
    devices: Mapping[str, Device]
    publisher: Publisher
    health: Health
    subscribe: SubscriberFactory
    clock: Callable[[], int] = time.monotonic_ns
    stop: threading.Event = field(default_factory=threading.Event)
    _signalled: bool = field(default=False, init=False, repr=False)
    _subscribers: list[Subscriber] = field(default_factory=list, init=False, repr=False)

    # -- stopping ---------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """True once a stop was requested (signal or `request_stop`)."""
        if self._signalled and not self.stop.is_set():
            self.stop.set()  # here, not in the signal handler: Event.set takes a lock
        return self.stop.is_set()

    def request_stop(self) -> None:
        """Ask the process to stop (thread-safe; not from a signal handler: use `on_signal`)."""
        self.stop.set()

    def on_signal(self, *_: Any) -> None:
        """Signal-handler form of `request_stop`: only sets a flag, `stopping` sets ``stop``."""
        self._signalled = True

    # -- the bus ----------------------------------------------------------------------------

    def subscriber(self, streams: Iterable[str] = (), *, expect: Iterable[str] | None = None) -> Subscriber:
        """A Subscriber to every publisher of the lab (this one included), watched by `health`,
        closed with the context. `streams`: names or ``prefix*`` patterns (default all);
        `expect`: streams whose frames since their first must all arrive (see `daq.bus`)."""
        sub = self.subscribe(streams, expect)
        self.health.watch(sub)
        self._subscribers.append(sub)
        return sub

    def tick(self, now_ns: int | None = None) -> None:
        """Publish the health frame when due and answer subscriber handshakes (call it often)."""
        self.health.tick(self.clock() if now_ns is None else now_ns)
        self.publisher.poll_subscriptions()

    def sleep_until(self, deadline_ns: int) -> bool:
        """Sleep until ``clock() >= deadline_ns`` [ns], ticking every 50 ms at most.

        Returns False as soon as a stop is requested (check it and return from ``run``).
        """
        while not self.stopping:
            self.tick()
            remaining = deadline_ns - self.clock()
            if remaining <= 0:
                return True
            self.stop.wait(min(remaining, _SLICE_NS) * 1e-9)
        return False

    def event(self, name: str, severity: str = "info", **fields: Any) -> None:
        """Publish an event on ``events/NAME`` (this process's name): no samples, ``meta`` =
        ``{"event": name, "severity": severity, **fields}`` (recorded like any frame; `walklab
        sessions info` lists it, and clock events among the clock faults)."""
        self.publisher.publish(f"events/{self.name}", np.zeros((1, 0)), kind="event", rate_hz=0.0, channels=(),
                               units=(), meta={"event": name, "severity": severity, **fields})

    # -- devices ----------------------------------------------------------------------------

    def device(self, kind: str) -> Device:
        """The one device of `kind` this process serves; ValueError naming the key otherwise."""
        found = [d for d in self.devices.values() if d.kind == kind]
        if len(found) != 1:
            listed = ", ".join(f"{n} ({d.kind})" for n, d in self.devices.items()) or "none"
            raise ValueError(f"{self.lab.source}: process {self.name!r}: expected exactly one device of kind "
                             f"{kind!r} in its devices (listed: {listed})")
        return found[0]

    def close(self) -> None:
        """Publish a last health frame (state "stopped") and close every socket."""
        import zmq

        self.health.state = "stopped"
        try:
            self.health.publish()
        finally:
            for sub in self._subscribers:
                sub.close()
            self.publisher.close()
            zmq.Context.instance().term()


# ------------------------------------------------------------------------------ the skeleton ----

class DeviceLost(OSError):
    """The device went away (cable, power, port closed): `serve` closes it and reconnects."""


@dataclass
class Block:
    """One block of samples read from a device, before stamping.

    Attributes:
        stream: bus stream name, e.g. ``forceplate/FP1``.
        data: (samples, channels) in SI units (time first axis).
        t_device: device clock of sample 0 [ns].
        t_recv: host monotonic time the block arrived (its last sample) [ns].
        kind, rate_hz, channels, units: as in `daq.bus.Publisher.publish`.
        extra, meta: extra buffers (first axis = samples) and header entries, or None.
    """

    stream: str
    data: np.ndarray
    t_device: int
    t_recv: int
    kind: str
    rate_hz: float
    channels: tuple[str, ...]
    units: tuple[str, ...]
    extra: dict[str, np.ndarray] | None = None
    meta: dict[str, Any] | None = None


class Source(Protocol):
    """A device as the skeleton sees it (one per daemon; a daemon serving several devices reads
    them all in one `read`)."""

    def open(self) -> None:
        """Connect to the device; raise OSError (one line) while it is not there."""

    def read(self, timeout_s: float) -> Sequence[Block]:
        """The blocks that arrived, waiting at most `timeout_s` [s] for one ([] if none);
        raise `DeviceLost` (or another OSError) when the device went away."""

    def close(self) -> None:
        """Release the device (called after a loss and at the end; must not raise)."""


@dataclass
class _Stamper:
    """Per stream and session: the device clock fit (`ClockSync`, which re-anchors itself on a
    device clock reset or jump and counts it)."""

    bin_s: float
    clocks: dict[str, ClockSync] = field(default_factory=dict)

    def stamp(self, b: Block) -> tuple[int, int, float, str | None]:
        """(t_host, t) of sample 0 of `b` [ns] (module doc), the block's sample rate on the lab
        clock [Hz] (`ClockSync.lab_rate_hz`; 0 for an irregular stream), and why the device clock
        was reset at this block (None: it was not)."""
        n = b.data.shape[0] if b.data.ndim == 2 else 1
        span = round((n - 1) * 1e9 / b.rate_hz) if b.rate_hz > 0 else 0
        clock = self.clocks.setdefault(b.stream, ClockSync(bin_s=self.bin_s))
        resets = clock.resets
        clock.update(int(b.t_device) + span, int(b.t_recv))  # the last sample arrived at t_recv
        why = clock.last_reset if clock.resets > resets else None
        rate = clock.lab_rate_hz(b.rate_hz) if b.rate_hz > 0 else 0.0
        return int(b.t_recv) - span, int(clock.to_lab(int(b.t_device))), rate, why


def serve(ctx: ProcessContext, source: Source, *, retry_s: float = 0.5, read_timeout_s: float = 0.05,
          clock_bin_s: float = 1.0) -> int:
    """Run the daemon skeleton on `source` until `ctx` is asked to stop; returns 0.

    `retry_s`: delay between two attempts to open the device [s]; `read_timeout_s`: longest wait
    in one `Source.read` [s] (bounds the stop latency with the health period); `clock_bin_s`:
    `ClockSync` window [s]. ValueError from the source
    (a config mistake) propagates: the runtime exits with `CONFIG_ERROR`.
    """
    connected = False
    stamper = _Stamper(clock_bin_s)
    # a device whose clock keeps jumping re-anchors on every block: a line a second per stream (each
    # reset is still counted and published as an event)
    reset_log = LogThrottle(log, clock=ctx.clock)
    open_logged = False
    ctx.health.state = "connecting"  # "disconnected" after a loss, until the device is back
    try:
        while not ctx.stopping:
            if not connected:
                try:
                    source.open()
                except OSError as exc:
                    ctx.health.count("device/open_failures")
                    if not open_logged:  # once per outage, not once per retry
                        log.warning("%s; retrying every %.1f s", exc, retry_s)
                        open_logged = True
                    ctx.sleep_until(ctx.clock() + round(retry_s * 1e9))
                    continue
                connected, open_logged = True, False
                stamper = _Stamper(clock_bin_s)  # a new session: a new device clock
                ctx.health.count("device/sessions")
                ctx.health.state = "running"
            try:
                blocks = source.read(read_timeout_s)
            except OSError as exc:
                log.warning("device lost: %s; reconnecting", exc)
                ctx.health.count("device/lost")
                ctx.health.state = "disconnected"
                source.close()
                connected = False
                continue
            for b in blocks:
                t_host, t, lab_rate, reset = stamper.stamp(b)
                if reset is not None:
                    ctx.health.count(f"{b.stream}/clock_resets")
                    reset_log.log("%s: %s (block at t_device %d ns): clock fit re-anchored", b.stream, reset,
                                  b.t_device, key=b.stream)
                    ctx.event("clock_reset", "warning", stream=b.stream, reason=reset, t_device=int(b.t_device),
                              t_host=t_host)
                meta = b.meta
                if lab_rate > 0:
                    meta = {**(meta or {}), "rate_lab_hz": lab_rate}
                ctx.publisher.publish(b.stream, b.data, kind=b.kind, rate_hz=b.rate_hz, channels=b.channels,
                                      units=b.units, t_device=int(b.t_device), t_host=t_host, t=t,
                                      extra=b.extra, meta=meta)
                ctx.health.count(f"{b.stream}/samples", b.data.shape[0] if b.data.ndim == 2 else 1)
            ctx.tick()
    finally:
        source.close()
    return 0
