"""``walklab record``: record a lab's bus (or chosen streams) into an MCAP session file."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "record", help="record the bus into an MCAP session file",
        description="Subscribe to every publisher of a lab (or to given endpoints) and write every frame, "
                    "or the chosen streams, into an MCAP file (msgpack messages, one per frame; format in "
                    "docs/recording.md). Runs until Ctrl-C/SIGTERM or --duration; a full disk stops it "
                    "cleanly with a complete file. `walklab run CONFIG --record FILE` does the same "
                    "beside a running lab.")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="FILE",
                     help="lab config whose publishers to record (default: the shipped configs/sim.toml); "
                          "its TOML, plate calibrations and models go into the file's metadata")
    src.add_argument("--connect", metavar="ENDPOINT", action="append",
                     help="publisher endpoint to record, e.g. tcp://127.0.0.1:5601 (repeatable; no keys)")
    from daq.record import add_options

    add_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.set_defaults(func=record_handler)


def record_handler(args: argparse.Namespace) -> int:
    import configs
    from controller import config
    from controller.proc import SUPERVISOR_PID_ENV, die_with_parent, logging_setup, subscriber_for
    from daq.record import SessionWriter, lab_metadata, loss_stats, record, settings_from

    parent = os.environ.get(SUPERVISOR_PID_ENV)
    if parent and parent.isdigit():  # started by `walklab run --record`: die with it
        die_with_parent(int(parent))
    logging_setup("recorder")
    if args.duration is not None and args.duration <= 0:
        raise ValueError("--duration must be > 0 seconds")
    settings = settings_from(args)
    if args.connect:
        lab, endpoints, metadata = None, list(args.connect), {}
    else:
        lab = config.load(args.config if args.config else configs.path("sim.toml"))
        endpoints, metadata = list(lab.endpoints().values()), lab_metadata(lab)
    stop = {"flag": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["flag"] = True

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)
    writer = SessionWriter(args.output, settings, metadata=metadata, streams=args.stream)

    def progress(w: SessionWriter) -> None:
        frames = sum(c.frames for c in w.counts.values())
        size = sum(p.stat().st_size for p in w.files if p.exists())
        print(f"\rrecording {w.files[-1]}: {len(w.counts)} streams, {frames} frames, {size / 2**20:.1f} MB",
              end="", file=sys.stderr, flush=True)

    with subscriber_for(lab, endpoints, args.stream) as sub:
        reason = record(sub, writer, lambda: stop["flag"], duration_s=args.duration,
                        progress=None if args.quiet else progress)
        writer.close(reason, loss_stats(sub))
    if not args.quiet:
        print(file=sys.stderr)
    frames = sum(c.frames for c in writer.counts.values())
    print(f"{', '.join(map(str, writer.files))}: {frames} frames of {len(writer.counts)} streams; "
          f"stopped: {writer.stop_reason}")
    if writer.stop_reason not in ("stopped", "duration"):
        raise OSError(f"recording stopped early ({writer.stop_reason}); the file is readable")
    return 0


def start_beside(lab: Any, output: str) -> subprocess.Popen:
    """`walklab run --record`: a `walklab record` subprocess for `lab` that dies with this process."""
    from controller.proc import SUPERVISOR_PID_ENV
    from daq.record import SessionWriter

    SessionWriter.check_path(output)  # a bad name is a one-line error before the lab starts
    env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
    return subprocess.Popen([sys.executable, "-m", "controller.cli", "record", "--quiet", "--config",
                             str(lab.source), "-o", str(output)], env=env)


def stop_beside(proc: subprocess.Popen, timeout_s: float | None = None) -> None:
    """Stop the recorder cleanly (SIGINT: it writes what it holds, what is still queued in its socket
    and its index), SIGKILL if it hangs past ``timeout_s`` (default: its longest drain, and 15 s)."""
    from daq.record import DRAIN_CAP_S

    timeout_s = DRAIN_CAP_S + 15.0 if timeout_s is None else timeout_s
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
