"""``walklab config check FILE``: validate a lab config and print what it describes."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("config", help="lab configuration files",
                                   description="Lab configuration files (TOML, see docs/config.md).")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a lab config and print a summary",
                           description="Validate a lab config: exit 0 and print a summary, or exit 2 "
                                       "with one line naming the file, key, value and what was expected.")
    check.add_argument("file", metavar="FILE", help="lab config, e.g. configs/sim.toml")
    check.set_defaults(func=check_handler)


def check_handler(args: argparse.Namespace) -> int:
    from controller import config

    lab = config.load(args.file)
    config.check_processes(lab)  # what `walklab run` will call in each process: importable, with run()
    print(lab.summary())
    print("ok")
    return 0
