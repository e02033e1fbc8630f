"""``walklab bench live --minutes M [--config LAB]``: the soak and latency benchmark of a simulated lab
(bench/live.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks of a running lab",
                                   description="Benchmarks that run the lab itself (in a source checkout: bench/).")
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    live = sub.add_parser("live", help="a simulated lab at lab load: per-stage latency, drops, CPU per process",
                          description="walklab run on a simulated lab (the Jansen world, or with --config "
                                      "configs/sim_exo.toml the exoskeleton world and its tree dynamics service) on "
                                      "private ports with an extra load process (the bus at 2 plates x 1 kHz, 40 "
                                      "markers x 200 Hz, 8 encoders x 1 kHz), then the recording analysed: latency "
                                      "p50/p99/max per stage, seq gaps and subscribers' drops, CPU per process "
                                      "(psutil). docs/performance.md.")
    live.add_argument("--config", default="configs/sim.toml",
                      help="configs/sim.toml (the Jansen walker, default) or configs/sim_exo.toml (the exoskeleton)")
    live.add_argument("--minutes", type=float, default=10.0, help="length with the lab up (default 10)")
    live.add_argument("--record", metavar="FILE", help="keep the recording (default: a temporary file)")
    live.add_argument("--realtime", type=int, metavar="P",
                      help="SCHED_FIFO priority of the lab's simulated world, loop and dynamics services; 0 = normal "
                           "(default: as the config says)")
    live.set_defaults(func=live_handler)


def live_handler(args: argparse.Namespace) -> int:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "bench" / "live.py").is_file():
        raise OSError(f"{repo}: no bench/live.py (walklab bench needs a source checkout)")
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from bench.live import main

    return main(["--config", args.config, "--minutes", str(args.minutes)]
                + (["--record", args.record] if args.record else [])
                + (["--realtime", str(args.realtime)] if args.realtime is not None else []))
