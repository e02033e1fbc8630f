"""The `walklab` command: argparse front end that dispatches to `controller.commands.*`.

A user mistake (bad file, wrong key, unreachable device) ends with one line on stderr and exit
status 2, never a traceback; set WALKLAB_DEBUG=1 to see the traceback anyway.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from importlib import metadata

from controller import commands


def _version() -> str:
    try:
        return metadata.version("walklab")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every subcommand module of `controller.commands` registered."""
    parser = argparse.ArgumentParser(
        prog="walklab",
        description="Controller and data acquisition for walking robots and force platforms.",
    )
    parser.add_argument("--version", action="version", version=f"walklab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `walklab ... | head`: the reader left; not an error of ours, and nothing more to print.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ValueError, OSError, LookupError) as exc:
        # User-facing errors (config, model, frame, serial, file) are all ValueError/OSError
        # subclasses with a message that names the problem.
        if os.environ.get("WALKLAB_DEBUG"):
            raise
        print(f"walklab {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
