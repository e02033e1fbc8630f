"""Rate-limited log lines for faults that can repeat on every frame.

A bad stream (a corrupted serial line, a misconfigured publisher) repeats its fault on every frame,
500-1000 times a second. A log line each would flood a researcher's terminal and the supervisor's
stderr relay pipe, which a normal-priority thread drains: a SCHED_FIFO process writing into a full
pipe blocks. `LogThrottle` writes the first occurrence of a fault at once, then at most one line per
``interval_s`` while it goes on: the occurrence at hand, as the caller words it, followed by
``(N more like it since the last such line)``, N the occurrences not written since the previous
line (no suffix when there were none). So each occurrence is either written or counted in the next
line (`LogThrottle.pending` until then); the exact totals stay with the health counters, which the
callers count on every occurrence.

It uses only the stdlib `logging` and a monotonic clock (``time.monotonic_ns`` unless one is passed),
so the services of `dynamics` use it too (docs/daemons.md, "The rules every process keeps").
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Hashable


class LogThrottle:
    """At most one log line per ``interval_s`` for each key (one kind of fault of one source).

    Args:
        logger: where the lines go.
        interval_s: least time between two lines of one key [s] (> 0).
        level: the lines' level (`logging.WARNING` by default).
        clock: monotonic clock [ns] (injectable for tests; a process passes its ``ctx.clock``).

    Not thread-safe: use each instance from one thread (as the bus sockets it sits beside).
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 1.0, *, level: int = logging.WARNING,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        if not interval_s > 0:
            raise ValueError(f"LogThrottle: interval_s must be > 0, got {interval_s!r}")
        self.logger, self.level, self.clock = logger, level, clock
        self.interval_ns = round(interval_s * 1e9)
        # key -> [occurrences not written since its last line, host time [ns] before which none is written]
        self._keys: dict[Hashable, list[int]] = {}

    def log(self, msg: str, *args: Any, key: Hashable = None) -> None:
        """One occurrence of the fault `key`: written now (`msg % args`, as `logging.Logger.log`) if
        ``interval_s`` has passed since the key's last line, else counted for its next line. Keys
        must come from a bounded set (configured streams, plates), never from received data: each
        holds a little state for the life of the throttle."""
        now = self.clock()
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = [0, now]
        if now < k[1]:
            k[0] += 1
            return
        if k[0]:
            # a message logged without args is not %-formatted by logging: escape its % before adding one
            text = msg if args else msg.replace("%", "%%")
            msg, args = f"{text} (%d more like it since the last such line)", (*args, k[0])
        # stacklevel 2: the record names the caller's file and line, not this one
        self.logger.log(self.level, msg, *args, stacklevel=2)
        k[0], k[1] = 0, now + self.interval_ns

    def pending(self, key: Hashable = None) -> int:
        """Occurrences of `key` not written and not yet counted in a line (the next line reports them)."""
        k = self._keys.get(key)
        return 0 if k is None else k[0]
