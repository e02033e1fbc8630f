"""``walklab replay FILE``: publish a recorded session on the bus again (original seq and stamps)."""
from __future__ import annotations

import argparse
import signal
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay", help="publish a recorded session on the bus again",
        description="Publish the frames of a session file (and its rotated parts) with their recorded seq and "
                    "stamps, at real time, at a scaled --speed, or --fast (as fast as the subscribers keep up: "
                    "a full subscriber makes the replay wait, nothing is dropped). Subscribers (`walklab bus "
                    "monitor --connect ENDPOINT`, the dynamics service, a recorder) connect to --bind.")
    parser.add_argument("file", metavar="FILE", help="session file (.mcap) written by `walklab record`")
    parser.add_argument("--bind", metavar="ENDPOINT", default="tcp://127.0.0.1:5610",
                        help="where to publish (default tcp://127.0.0.1:5610)")
    from daq.replay import add_options

    add_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=replay_handler)


def replay_handler(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from daq.bus import REPLAY_S, Publisher
    from daq.replay import frames, replay, set_backpressure
    from daq.sessions import scan

    if args.wait_subscribers < 0:
        raise ValueError("--wait-subscribers must be >= 0")
    total = None if (args.stream or args.start is not None or args.end is not None) else \
        sum(s.messages for s in scan(args.file))
    source = frames(args.file, args.stream, args.start, args.end)
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
            task = bar.add_task("replay", total=total)
            n = replay(source, pub, speed=None if args.fast else args.speed, should_stop=lambda: stop["flag"],
                       progress=lambda k, f: bar.update(task, completed=k))
            bar.update(task, completed=n)
    print(f"{n} frames published")
    return 0
