"""``walklab replay FILE``: publish a recorded session on the bus again (original seq and stamps)."""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Any


#: Longest `walklab replay` waits at the end for its subscribers to take the frames still queued [s].
DRAIN_S = 120.0
#: Where `walklab replay` publishes by default: a port no shipped lab config binds or connects to — above
#: all not a control loop's operator endpoint (tcp://127.0.0.1:5610), where a live loop would take the
#: recording's replayed controller/request and controller/estop frames as the operator's.
DEFAULT_BIND = "tcp://127.0.0.1:5690"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay", help="publish a recorded session on the bus again",
        description="Publish the frames of a session file (and its rotated parts) with their recorded seq and "
                    "stamps, at real time, at a scaled --speed, or --fast (as fast as the subscribers keep up: "
                    "a full subscriber makes the replay wait, nothing is dropped). Subscribers (`walklab bus "
                    "monitor --connect ENDPOINT`, the dynamics service, a recorder) connect to --bind.")
    parser.add_argument("file", metavar="FILE", help="session file (.mcap) written by `walklab record`")
    parser.add_argument("--bind", metavar="ENDPOINT", default=DEFAULT_BIND,
                        help=f"where to publish (default {DEFAULT_BIND}, used by no lab config)")
    from daq.replay import add_options

    add_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--shadow", action="store_true",
                        help="re-analyse: replay the session's input streams into its lab's dynamics processes "
                             "(started here on free ports) and record what they compute (--out)")
    parser.add_argument("--out", metavar="FILE.mcap", help="--shadow: the output session (default FILE.shadow.mcap)")
    parser.add_argument("--config", metavar="LAB", help="--shadow: the lab config (default: the one recorded in FILE)")
    parser.set_defaults(func=replay_handler)


def replay_handler(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from daq.bus import REPLAY_S, Publisher
    from daq.replay import replay, set_backpressure, wire_frames

    if args.wait_subscribers < 0:
        raise ValueError("--wait-subscribers must be >= 0")
    if args.shadow:
        return shadow_handler(args)
    if args.out or args.config:
        raise ValueError("--out and --config go with --shadow")
    source = wire_frames(args.file, args.stream, args.start, args.end)
    stop = {"flag": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["flag"] = True

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)
    # --fast: no late-joiner buffer (daq.bus replays a publisher's first 10 s to late subscribers;
    # at full speed that would hold the whole file): wait for the subscribers instead
    with Publisher(args.bind, replay_s=0.0 if args.fast else REPLAY_S) as pub:
        print(f"replaying {args.file} on {pub.endpoint}", flush=True)
        if args.fast:
            set_backpressure(pub)
        if args.wait_subscribers:
            while not stop["flag"] and not pub.wait_for_subscribers(args.wait_subscribers, 0.2):
                pass
        with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=args.quiet) as bar:
            task = bar.add_task("replay", total=None)
            n = replay(source, pub, speed=None if args.fast else args.speed, should_stop=lambda: stop["flag"],
                       progress=lambda k, f: bar.update(task, completed=k))
            bar.update(task, completed=n)
        # the frames still queued for slower subscribers are theirs too: wait for them to be taken
        # (closing at once dropped the tail of a --fast replay, unseen: no later frame shows a gap)
        if not stop["flag"] and not pub.drain(DRAIN_S):
            print(f"the subscribers did not take the last frames within {DRAIN_S:g} s: those were dropped",
                  file=sys.stderr)
    print(f"{n} frames published")
    return 0


def shadow_handler(args: argparse.Namespace) -> int:
    """``--shadow``: `controller.shadow.run_shadow` with a progress bar and a summary."""
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from controller.shadow import run_shadow

    if args.stream or args.start is not None or args.end is not None:
        raise ValueError("--shadow replays every input stream of the whole session (no --stream/--start/--end)")
    if args.speed <= 0:
        raise ValueError(f"--speed must be > 0, got {args.speed}")
    src = Path(args.file)
    out = Path(args.out) if args.out else src.with_name(src.stem + ".shadow.mcap")
    if out.resolve() == src.resolve():
        raise ValueError(f"--out {out}: that is the session being replayed")
    stop = {"flag": False}
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.__setitem__("flag", True))
    with Progress(TextColumn("shadow replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=args.quiet) as bar:
        task = bar.add_task("replay", total=None)
        res = run_shadow(src, out, config=args.config, speed=None if args.fast else args.speed,
                         should_stop=lambda: stop["flag"], progress=lambda k: bar.update(task, completed=k))
        bar.update(task, completed=res.replayed)
    print(f"{res.replayed} input frames replayed; recomputed: "
          + ", ".join(f"{s} {n}" for s, n in sorted(res.recorded.items())))
    print(f"output: {res.output.resolve()}")
    return 0
