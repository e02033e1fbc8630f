"""``walklab bench live --minutes M``: the soak and latency benchmark of the simulated lab (bench/live.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks of a running lab",
                                   description="Benchmarks that run the lab itself (in a source checkout: bench/).")
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    live = sub.add_parser("live", help="the simulated lab at lab load: per-stage latency, drops, CPU per process",
                          description="walklab run on the simulated Jansen world on private ports with an extra load "
                                      "process (the bus at 2 plates x 1 kHz, 40 markers x 200 Hz, 8 encoders x 1 kHz), "
                                      "then the recording analysed: latency p50/p99/max per stage, seq gaps and "
                                      "subscribers' drops, CPU per process (psutil). docs/performance.md.")
    live.add_argument("--minutes", type=float, default=10.0, help="length with the lab up (default 10)")
    live.add_argument("--record", metavar="FILE", help="keep the recording (default: a temporary file)")
    live.set_defaults(func=live_handler)


def live_handler(args: argparse.Namespace) -> int:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "bench" / "live.py").is_file():
        raise OSError(f"{repo}: no bench/live.py (walklab bench needs a source checkout)")
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from bench.live import main

    return main(["--minutes", str(args.minutes)] + (["--record", args.record] if args.record else []))
