"""`walklab command`: steer a running lab's control loop.

    walklab command speed SPEED [--turn RATE] [CONFIG] [--timeout S]

SPEED in m/s (0 stops: the torque ramps off), RATE in rad/s (+ to the left). The loop selects the
nearest valid nominal of its library and switches to it through a transition; the command prints
the loop's answer (the nominal chosen). Reaches the loop as `walklab estop` does (its operator
endpoint; CONFIG default configs/jansen_sim.toml).
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("command", help="steer the running control loop: walking speed and turn rate",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command_kind", metavar="WHAT", required=True)
    sp = sub.add_parser("speed", help="walking speed (m/s) and turn rate (rad/s)")
    sp.add_argument("speed", type=float, metavar="SPEED", help="m/s, >= 0 (0 stops)")
    sp.add_argument("--turn", type=float, default=0.0, metavar="RATE", help="rad/s, + to the left (default 0)")
    sp.add_argument("config", metavar="CONFIG", nargs="?", help="lab config (default: configs/jansen_sim.toml)")
    sp.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for the loop (default 5)")
    sp.set_defaults(func=_speed)


def _speed(args: argparse.Namespace) -> int:
    from controller.commands.estop import send_operator
    from controller.loop import REQUEST_STREAM

    if not (math.isfinite(args.speed) and args.speed >= 0 and math.isfinite(args.turn)):
        raise ValueError(f"speed {args.speed} m/s, --turn {args.turn} rad/s: expected a finite speed >= 0 and a finite turn")
    detail = send_operator(args.config, REQUEST_STREAM, np.array([[args.speed, args.turn]]), ["speed", "turn"],
                           ["m/s", "rad/s"], {"source": "cli"}, {"request"}, args.timeout)
    print(detail)
    return 0
