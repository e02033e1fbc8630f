"""Health monitor process: subscribes to every ``health/*`` stream of the lab, logs and aggregates.

It keeps the latest health frame of every process and

- prints one compact line every ``--interval`` seconds (default: the supervisor's
  ``status_interval_s``): per process, the age of its last health frame and the rates of the
  streams it publishes (``sent_per_s``) or receives;
- logs a warning when a process's health goes silent for more than ``--silent-s`` seconds (3),
  and when a process reports new sequence gaps, dropped or malformed frames on a stream it
  receives (the counters are cumulative, so the monitor reports their increase).

Like every process, it publishes its own ``health/healthmon`` (including the rates and gaps of
the health streams it receives). Entry point `run(ctx, args)`, see `controller.proc`.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

log = logging.getLogger("walklab.healthmon")

_LOSS_FIELDS = ("gaps", "dropped", "malformed")


@dataclass
class ProcessHealth:
    """The latest health figures of one process, as parsed by `daq.health.parse_health`."""
    name: str
    fields: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    t_recv_ns: int = 0
    silent: bool = False


class HealthBook:
    """Latest health per process, the increases of loss counters, the one-line summary."""

    def __init__(self, silent_s: float) -> None:
        self.silent_ns = int(silent_s * 1e9)
        self.processes: dict[str, ProcessHealth] = {}

    def update(self, frame: Any) -> list[str]:
        """Take a health frame; return warnings for loss counters that increased since the last one."""
        from daq.health import parse_health

        name = frame.stream.removeprefix("health/")
        entry = self.processes.setdefault(name, ProcessHealth(name))
        fields = parse_health(frame)
        warnings = []
        if entry.silent:
            warnings.append(f"{name}: health is back after {(frame.t_recv - entry.t_recv_ns) * 1e-9:.1f} s of silence")
        for subject, values in fields.items():
            before = entry.fields.get(subject, {})
            for f in _LOSS_FIELDS:
                new, old = values.get(f, math.nan), before.get(f, 0.0)
                if math.isfinite(new) and new > (old if math.isfinite(old) else 0.0):
                    warnings.append(f"{name}: {subject} {f} {old:.0f} -> {new:.0f}")
        entry.fields, entry.meta, entry.t_recv_ns, entry.silent = fields, dict(frame.meta), frame.t_recv, False
        return warnings

    def check_silence(self, now_ns: int) -> list[str]:
        """Warnings for processes whose health stopped arriving (once per silence)."""
        out = []
        for e in self.processes.values():
            if e.meta.get("state") == "stopped" or e.silent:
                continue
            if now_ns - e.t_recv_ns > self.silent_ns:
                e.silent = True
                out.append(f"{e.name}: no health frame for {(now_ns - e.t_recv_ns) * 1e-9:.1f} s")
        return out

    def summary(self, now_ns: int) -> str:
        """``health: NAME (age) stream rate ... | ...`` over every process seen."""
        parts = []
        for name in sorted(self.processes):
            e = self.processes[name]
            age = (now_ns - e.t_recv_ns) * 1e-9
            state = e.meta.get("state", "?")
            rates = []
            for subject, values in sorted(e.fields.items()):
                if "sent_per_s" in values:
                    rates.append(f"{subject} {values['sent_per_s']:.0f}/s")
                elif "rate_hz" in values and not subject.startswith("health/"):
                    loss = int(sum(values.get(f, 0.0) for f in ("dropped", "malformed") if math.isfinite(values.get(f, 0.0))))
                    rates.append(f"{subject} in {values['rate_hz']:.0f}Hz" + (f" lost {loss}" if loss else ""))
            text = f"{name} {state} {age:.1f}s ago"
            if rates:
                text += ": " + ", ".join(rates)
            parts.append(text)
        return "health: " + (" | ".join(parts) if parts else "no health frames yet")


def _parser(default_interval: float) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="controller.healthmon", description="lab health monitor")
    p.add_argument("--interval", type=float, default=default_interval,
                   help="seconds between summary lines (0 = none)")
    p.add_argument("--silent-s", type=float, default=3.0,
                   help="warn when a process's health is older than this [s]")
    return p


def run(ctx: Any, args: Sequence[str]) -> int:
    """Monitor the lab's health streams until asked to stop (see module doc)."""
    opts = _parser(ctx.lab.supervisor.status_interval_s).parse_args(list(args))
    book = HealthBook(opts.silent_s)
    # Joining health streams late is normal here, and this process's own losses come back through
    # its own health frame (health/NAME), which the book checks like any other.
    logging.getLogger("walklab.bus").setLevel(logging.ERROR)
    sub = ctx.subscriber(["health/*"])
    # A first summary soon after start (once every process had time to send its first health).
    next_summary = time.monotonic_ns() + int(min(opts.interval, 3.0) * 1e9)
    while not ctx.stopping:
        frame = sub.recv(timeout_s=0.05)
        if frame is not None:
            try:
                warnings = book.update(frame)
            except ValueError as exc:  # daq.frames.FrameError: not a health frame
                warnings = [f"{frame.stream}: ignored: {exc}"]
            for w in warnings:
                log.warning("%s", w)
        now = time.monotonic_ns()
        for w in book.check_silence(now):
            log.warning("%s", w)
        if opts.interval > 0 and now >= next_summary:
            next_summary = now + int(opts.interval * 1e9)
            print(book.summary(now), flush=True)
        ctx.health.tick(now)
        ctx.publisher.poll_subscriptions()
    return 0
