"""Health monitor process: subscribes to every ``health/*`` stream of the lab, logs and aggregates.

It keeps the latest health frame of every process and

- prints one compact line every ``--interval`` seconds (default: the supervisor's
  ``status_interval_s``): per process, the age of its last health frame and the rates of the
  streams it publishes (``sent_per_s``) or receives;
- shows and logs a process as ``SILENT`` when its health frames stop for more than ``--silent-s``
  seconds (3; a process that said it stopped is not silent), and logs when they come back;
- logs a process that restarted (its health frame's pid changed);
- logs what a process reports on a stream it receives, as the cumulative counters increase
  (`daq.bus.StreamStats`): losses (``gaps``, ``dropped`` frames, ``lost_samples``), publisher
  ``restarts``, ``out_of_order`` frames (a second publisher, a corrupt seq: not a loss) and
  ``malformed`` messages (not a loss either: nothing of the stream was lost, garbage was refused).

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

from daq.context import ProcessContext

log = logging.getLogger("walklab.healthmon")

#: Cumulative counters whose increase is logged, in this order.
_COUNTER_FIELDS = ("gaps", "dropped", "lost_samples", "restarts", "out_of_order", "malformed")


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
        pid, old_pid = frame.meta.get("pid"), entry.meta.get("pid")
        restarted = old_pid is not None and pid != old_pid
        if restarted:
            warnings.append(f"{name}: process restarted (pid {old_pid} -> {pid})")
        for subject, values in fields.items():
            # a restarted process counts from zero again: its new totals are all new
            before = {} if restarted else entry.fields.get(subject, {})
            for f in _COUNTER_FIELDS:
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
                out.append(f"{e.name}: SILENT: no health frame for {(now_ns - e.t_recv_ns) * 1e-9:.1f} s "
                           f"(last state {e.meta.get('state', '?')})")
        return out

    def summary(self, now_ns: int) -> str:
        """``health: NAME (age) stream rate ... | ...`` over every process seen."""
        parts = []
        for name in sorted(self.processes):
            e = self.processes[name]
            age = (now_ns - e.t_recv_ns) * 1e-9
            # a silent process's last figures are history, not its present: only the silence is shown
            if e.silent:
                parts.append(f"{name} SILENT {age:.1f}s")
                continue
            state = e.meta.get("state", "?")
            rates = []
            for subject, values in sorted(e.fields.items()):
                if "sent_per_s" in values:
                    rates.append(f"{subject} {values['sent_per_s']:.0f}/s")
                elif "rate_hz" in values and not subject.startswith("health/"):
                    n = {f: int(v) if math.isfinite(v := values.get(f, 0.0)) else 0 for f in _COUNTER_FIELDS}
                    text = f"{subject} in {values['rate_hz']:.0f}Hz"
                    if n["dropped"] or n["lost_samples"]:
                        text += f" lost {n['dropped']} frames/{n['lost_samples']} samples"
                    if n["restarts"]:
                        text += f" restarts {n['restarts']}"
                    if n["out_of_order"]:
                        text += f" out-of-order {n['out_of_order']}"
                    if n["malformed"]:
                        text += f" bad {n['malformed']}"
                    rates.append(text)
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


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
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
