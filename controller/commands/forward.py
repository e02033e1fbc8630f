"""``walklab forward``: run one device process of a lab config on this machine (the acquisition PC)."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "forward", help="run one device process of a lab on this machine (a remote acquisition PC)",
        description="Run the [[processes]] entry NAME of a lab config here, alone, as the supervisor would: "
                    "it reads its devices (a serial force board, a mocap PC, an LSL stream) and publishes "
                    "their streams on its `bind` endpoint. On a remote acquisition PC give that process a "
                    "non-loopback `bind` (e.g. tcp://0.0.0.0:5601) with `connect` = the PC's address, and "
                    "[bus.curve] keys: the bus refuses to leave the machine without CurveZMQ. Ctrl-C stops "
                    "it. See docs/devices.md.")
    parser.add_argument("--config", metavar="FILE", required=True, help="lab config")
    parser.add_argument("process", metavar="NAME", help="the [[processes]] entry to run here")
    parser.set_defaults(func=forward_handler)


def forward_handler(args: argparse.Namespace) -> int:
    from controller import config
    from controller.proc import main

    lab = config.load(args.config)
    spec = lab.process(args.process)
    config.process_entry(lab, spec)  # an unimportable module: one line, before anything starts
    devices = ", ".join(spec.devices) or "no device"
    print(f"forwarding {devices} ({spec.module}) on {spec.bind}; subscribers connect to {spec.endpoint}",
          flush=True)
    return main(["--config", str(args.config), "--name", spec.name, *spec.args])
