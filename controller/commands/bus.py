"""``walklab bus monitor``: a live table of the streams on a lab's bus (like ``ros2 topic hz``)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

_CLEAR = "\x1b[H\x1b[J"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bus", help="inspect the stream bus",
                                   description="Inspect the ZeroMQ stream bus of a running lab.")
    sub = parser.add_subparsers(dest="bus_command", metavar="ACTION", required=True)
    mon = sub.add_parser(
        "monitor", help="live table of streams: rate, seq gaps, drops, latency",
        description="Subscribe to every publisher of a lab (or to given endpoints) and show, per "
                    "stream: measured sample rate and frame rate over the last 2 s, frames "
                    "received, sequence gaps and frames dropped (inside the gaps, and a restarted "
                    "publisher's frames sent before the monitor reconnected), samples lost by the "
                    "sample times (LOST_SAMPLES: across gaps and restarts), publisher restarts, "
                    "frames whose seq does not continue the stream (OUT_OF_ORDER: a second "
                    "publisher on the name, a corrupt seq; never counted as lost), frames published "
                    "before the monitor joined (BEFORE_JOIN, not a loss), malformed frames (BAD) and the "
                    "publish->receive latency p50/p99/max (local endpoints only). Runs until "
                    "Ctrl-C, or for --duration seconds and then prints the final table; its first "
                    "line totals restarts, losses and faults (docs/bus.md).")
    src = mon.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="FILE",
                     help="lab config whose publishers to watch (default: the shipped configs/sim.toml)")
    src.add_argument("--connect", metavar="ENDPOINT", action="append",
                     help="publisher endpoint to watch, e.g. tcp://127.0.0.1:5601 (repeatable; no keys)")
    mon.add_argument("--stream", metavar="PATTERN", action="append", default=[],
                     help="stream name or prefix* to watch, e.g. 'forceplate/*' (repeatable; default all)")
    until = mon.add_mutually_exclusive_group()
    until.add_argument("--duration", metavar="S", type=float,
                       help="watch for S seconds, print the final table and exit")
    until.add_argument("--once", action="store_true",
                       help="watch for 2.5 s (one full rate window), print one table and exit")
    mon.add_argument("--interval", metavar="S", type=float, default=1.0,
                     help="seconds between table refreshes in live mode (default 1)")
    mon.set_defaults(func=monitor_handler)


def format_table(stats: dict[str, Any], kinds: dict[str, str], header: str) -> str:
    """The monitor table: one row per stream (`daq.bus.StreamStats`), sorted by name."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.2f}"

    cols = ("STREAM", "KIND", "RATE_HZ", "FRAMES/S", "RECEIVED", "GAPS", "DROPPED", "LOST_SAMPLES", "RESTARTS",
            "OUT_OF_ORDER", "BEFORE_JOIN", "BAD", "LAT_P50_MS", "LAT_P99_MS", "LAT_MAX_MS")
    rows = [cols]
    for name in sorted(stats):
        st = stats[name]
        rows.append((name, kinds.get(name, "?"), f"{st.rate_hz:.1f}", f"{st.frames_per_s:.1f}",
                     str(st.received), str(st.gaps), str(st.dropped), str(st.lost_samples), str(st.restarts),
                     str(st.out_of_order), str(st.missed_at_join), str(st.malformed),
                     ms(st.latency_p50_s), ms(st.latency_p99_s), ms(st.latency_max_s)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    if stats:  # the totals on the header line: the rows below stay one per stream
        total = {f: sum(getattr(st, f) for st in stats.values())
                 for f in ("restarts", "dropped", "lost_samples", "out_of_order", "malformed")}
        header += (f" | restarts {total['restarts']}, lost {total['dropped']} frame(s) / "
                   f"{total['lost_samples']} sample(s), out of order {total['out_of_order']}, "
                   f"malformed {total['malformed']}")
    lines = [header]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    if len(rows) == 1:
        lines.append("(no frames yet)")
    return "\n".join(lines)


def monitor_handler(args: argparse.Namespace) -> int:
    import logging

    import configs
    from controller import config
    from controller.proc import subscriber_for

    if args.connect:
        lab, endpoints = None, list(args.connect)
    else:
        lab = config.load(args.config if args.config else configs.path("sim.toml"))
        endpoints = list(lab.endpoints().values())
    if args.interval <= 0 or (args.duration is not None and args.duration <= 0):
        raise ValueError("--interval and --duration must be > 0 seconds")
    # The table shows late joins (BEFORE_JOIN) and malformed frames (BAD); no log line per stream.
    logging.getLogger("walklab.bus").setLevel(logging.ERROR)
    duration = 2.5 if args.once else args.duration
    live = duration is None
    tty = live and sys.stdout.isatty()
    kinds: dict[str, str] = {}
    t_start = time.monotonic()
    end = None if duration is None else t_start + duration
    next_draw = t_start + args.interval
    with subscriber_for(lab, endpoints, args.stream) as sub:
        def table() -> str:
            src = lab.lab.name if lab is not None else "endpoints"
            head = (f"bus monitor: {src} ({len(endpoints)} publisher(s): {', '.join(endpoints)}) "
                    f"{time.monotonic() - t_start:.1f} s")
            return format_table(sub.stats(), kinds, head)
        try:
            while end is None or time.monotonic() < end:
                deadline = next_draw if end is None else min(next_draw, end)
                frame = sub.recv(timeout_s=max(deadline - time.monotonic(), 0.0))
                if frame is not None:
                    kinds.setdefault(frame.stream, frame.kind)
                if live and time.monotonic() >= next_draw:
                    next_draw += args.interval
                    print((_CLEAR if tty else "") + table() + ("" if tty else "\n"), flush=True)
            # Frames that arrived by the end but were not read yet (a monitor starved of CPU on a
            # loaded machine wakes up late) belong in the final table; bounded, should they keep coming.
            stop_draining = time.monotonic() + 1.0
            while time.monotonic() < stop_draining and (frame := sub.recv(timeout_s=0)) is not None:
                kinds.setdefault(frame.stream, frame.kind)
        except KeyboardInterrupt:
            pass
        final = table()
        received = sum(st.received for st in sub.stats().values())
    print(final, flush=True)
    if not received:
        raise LookupError(f"no frames received from {', '.join(endpoints)} in "
                          f"{time.monotonic() - t_start:.1f} s (is `walklab run` running?)")
    return 0
