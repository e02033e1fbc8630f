"""``walklab run [CONFIG] [--duration S] [--record FILE] [--script FILE]``: start a lab's processes under the
supervisor until Ctrl-C/SIGTERM (or for S seconds); the shipped configs/sim.toml (the default) runs the
simulated Jansen world through the command script configs/walk_script.toml under a live status
(`controller.status.run_live`)."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="start the processes of a lab config under the supervisor",
        description="Start every process of a lab config, restart crashed ones with exponential "
                    "backoff, print a status line periodically, and stop them all cleanly on "
                    "Ctrl-C or SIGTERM. Watch the streams with `walklab bus monitor` from "
                    "another terminal.")
    parser.add_argument("config", metavar="CONFIG", nargs="?", default=None,
                        help="lab config (default: the shipped configs/sim.toml)")
    parser.add_argument("--record", metavar="FILE.mcap",
                        help="record every stream of the lab into FILE.mcap meanwhile (see `walklab record`)")
    parser.add_argument("--duration", metavar="S", type=float,
                        help="stop after S seconds with the lab up (start-up excluded); a live status and a summary")
    parser.add_argument("--script", metavar="FILE",
                        help="operator commands for the lab's control loop at set times (TOML, docs/sim.md); "
                             "default for the shipped configs/sim.toml: configs/walk_script.toml; 'none': no script")
    parser.add_argument("--supervise-only", action="store_true", help=argparse.SUPPRESS)  # run_live's supervisor
    parser.set_defaults(func=run_handler)


def run_handler(args: argparse.Namespace) -> int:
    import configs
    from controller import config
    from controller.supervisor import run_lab

    lab = config.load(args.config if args.config is not None else configs.path("sim.toml"))
    config.check_processes(lab)  # refuse a lab whose process modules cannot be imported: one line
    default = lab.source.resolve() == configs.path("sim.toml").resolve()  # the shipped sim lab: scripted
    if not args.supervise_only and (default or args.duration is not None or args.script is not None):
        from controller.status import load_script, run_live

        if args.script == "none" or (args.script is None and not default):
            script = []
        else:
            script = load_script(args.script or configs.path("walk_script.toml"))
        return run_live(lab, duration=args.duration, script=script, record=args.record)
    if args.record is None:
        return run_lab(lab)
    from controller.commands.record import start_beside, stop_beside

    recorder = start_beside(lab, args.record)
    try:
        return run_lab(lab)
    finally:
        stop_beside(recorder)
