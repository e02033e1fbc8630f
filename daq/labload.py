"""A synthetic lab load on the bus, for the recorder's tests and ``bench/daq.py``.

`lab_streams(scale)` describes the reference load of issue 10 (``scale`` = 1):

- 2 force plates ``forceplate/FP1..2``, 1 kHz, 6 channels (N, N*m), blocks of 5 samples;
- 1 marker set ``markers/mocap``, 40 markers at 200 Hz, one sample a frame: channels
  ``LABEL:x, LABEL:y, LABEL:z`` (m, lab frame), extra buffer ``residual`` (1, 40) m, NaN where a
  marker is occluded (about 2 % of samples);
- 8 encoders ``encoder/m1..m8``, 1 kHz, channels angle, velocity, current, blocks of 10, extra
  buffer ``flags`` (uint8).

That is 400 + 200 + 800 = 1400 frames/s. ``scale`` multiplies the number of streams of each kind.
Every value comes from a seeded generator, so two runs publish identical payloads; `LoadPublisher`
keeps what it published when asked (for frame-for-frame comparisons).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from daq.context import ProcessContext
from daq.frames import Frame


@dataclass
class StreamSpec:
    """One synthetic stream: name, kind, rate [Hz], samples per frame, channels and units."""

    stream: str
    kind: str
    rate_hz: float
    block: int
    channels: tuple[str, ...]
    units: tuple[str, ...]
    extra: str = ""  # "residual" (markers) or "flags" (encoders)
    next_sample: int = 0
    rng: Any = field(default=None, repr=False)

    def due_ns(self, t0: int) -> int:
        return t0 + round((self.next_sample + self.block) * 1e9 / self.rate_hz)


def lab_streams(scale: int = 1, markers: int = 40, seed: int = 0) -> list[StreamSpec]:
    """The reference lab load (module docstring) times ``scale``."""
    out = []
    labels = [f"M{i:02d}" for i in range(markers)]
    for k in range(scale):
        for i in range(2):
            out.append(StreamSpec(f"forceplate/FP{2 * k + i + 1}", "force", 1000.0, 5,
                                  ("Fx", "Fy", "Fz", "Mx", "My", "Mz"), ("N",) * 3 + ("N*m",) * 3))
        out.append(StreamSpec(f"markers/mocap{k or ''}", "markers", 200.0, 1,
                              tuple(f"{lab}:{ax}" for lab in labels for ax in "xyz"), ("m",) * 3 * markers,
                              extra="residual"))
        for i in range(8):
            out.append(StreamSpec(f"encoder/m{8 * k + i + 1}", "encoder", 1000.0, 10,
                                  ("angle", "velocity", "current"), ("rad", "rad/s", "A"), extra="flags"))
    for i, s in enumerate(out):
        s.rng = np.random.default_rng([seed, i])
    return out


def next_frame(spec: StreamSpec, t0: int) -> Frame:
    """The stream's next block as a Frame (seq = blocks so far; ``t_device`` counts from 0, ``t`` =
    ``t_host`` = ``t0`` + sample index / rate [ns])."""
    n0 = spec.next_sample
    data = spec.rng.normal(size=(spec.block, len(spec.channels)))
    extra: dict[str, np.ndarray] = {}
    if spec.extra == "residual":
        m = len(spec.channels) // 3
        occluded = spec.rng.random((spec.block, m)) < 0.02
        data.reshape(spec.block, m, 3)[occluded] = np.nan
        res = np.abs(spec.rng.normal(scale=1e-3, size=(spec.block, m)))
        res[occluded] = np.nan
        extra["residual"] = res
    elif spec.extra == "flags":
        extra["flags"] = spec.rng.integers(0, 4, size=spec.block, dtype=np.uint8)
    spec.next_sample += spec.block
    t_dev = round(n0 * 1e9 / spec.rate_hz)
    seq = n0 // spec.block
    return Frame(spec.stream, spec.kind, seq, t_dev, t0 + t_dev, t0 + t_dev, spec.rate_hz, spec.channels,
                 spec.units, data, extra)


def frames(specs: list[StreamSpec], duration_s: float, t0: int = 10**12) -> Iterator[Frame]:
    """Every frame of ``duration_s`` seconds of the load, in time order (no bus: for session files)."""
    end = t0 + round(duration_s * 1e9)
    while True:
        s = min(specs, key=lambda x: x.due_ns(t0))
        if s.due_ns(t0) > end:
            return
        yield next_frame(s, t0)


class LoadPublisher:
    """Publishes `lab_streams` on a `daq.bus.Publisher` at their real rates (a lifetime object).

    ``keep``: remember every published Frame in ``published`` (for comparisons; ``t_pub`` set).
    """

    def __init__(self, publisher: Any, specs: list[StreamSpec], keep: bool = False):
        self.pub = publisher
        self.specs = specs
        self.keep = keep
        self.published: list[Frame] = []
        self.frames = 0

    def run(self, duration_s: float, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Publish for ``duration_s`` seconds (or until ``should_stop()``); returns frames published."""
        t0 = time.monotonic_ns()
        end = t0 + round(duration_s * 1e9)
        while not should_stop():
            now = time.monotonic_ns()
            if now >= end:
                break
            due = min(s.due_ns(t0) for s in self.specs)
            if due > now:
                self.pub.poll_subscriptions()
                time.sleep(min(due - now, 5_000_000) * 1e-9)
                continue
            for s in self.specs:
                while s.due_ns(t0) <= now and s.due_ns(t0) <= end:
                    frame = next_frame(s, t0)
                    self.pub.send(frame)
                    self.frames += 1
                    if self.keep:
                        self.published.append(frame)
        return self.frames


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Process entry point: publish the lab load on the process's publisher until stopped.

    ``args``: ``--scale N`` (1), ``--duration S`` (until stopped), ``--seed`` (0),
    ``--wait-subscribers N`` (0: wait for N subscribers before the first frame).
    """
    p = argparse.ArgumentParser(prog="daq.labload", add_help=False)
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--duration", type=float, default=float("inf"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wait-subscribers", type=int, default=0)
    opts = p.parse_args(list(args))
    if opts.scale < 1 or not opts.duration > 0:
        raise ValueError(f"--scale must be >= 1 and --duration > 0, got {opts.scale}, {opts.duration}")
    while opts.wait_subscribers and not ctx.stopping and \
            not ctx.publisher.wait_for_subscribers(opts.wait_subscribers, 0.05):
        ctx.tick()
    load = LoadPublisher(ctx.publisher, lab_streams(opts.scale, seed=opts.seed))

    def stop() -> bool:
        ctx.tick()
        return ctx.stopping

    load.run(min(opts.duration, 1e9), stop)
    while ctx.sleep_until(time.monotonic_ns() + 1_000_000_000):  # done: idle until the lab stops
        pass
    return 0


def write_session(path: Any, duration_s: float, specs: list[StreamSpec] | None = None,
                  metadata: dict[str, dict[str, str]] | None = None) -> list[Frame]:
    """Write ``duration_s`` seconds of the load straight into a session file (no bus, no fsync);
    returns the frames written, in order."""
    from daq.record import SessionWriter, Settings

    written = list(frames(specs if specs is not None else lab_streams(), duration_s))
    w = SessionWriter(path, Settings(fsync=False), metadata=metadata)
    for i, f in enumerate(written):
        w.write(f)
        if i % 70 == 69:  # a chunk per ~50 ms of lab load, as the live recorder makes them
            w.poll(now_ns=2**62)
    w.close()
    return written
