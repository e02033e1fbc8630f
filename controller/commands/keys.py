"""``walklab keys [--dir DIR] [--force] NAME``: make a CurveZMQ keypair for a lab's bus."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keys", help="generate a CurveZMQ keypair (NAME.key, NAME.key_secret)",
        description="Generate a CurveZMQ keypair for the bus: DIR/NAME.key (public, give it to peers) "
                    "and DIR/NAME.key_secret (owner-readable only). A lab that binds a non-loopback "
                    "address needs a server pair and a client pair, referenced from [bus.curve].")
    parser.add_argument("name", metavar="NAME", help="key name, e.g. 'server' or 'monitor-pc'")
    parser.add_argument("--dir", default="keys", help="folder for the key files (default: ./keys)")
    parser.add_argument("--force", action="store_true", help="overwrite existing key files")
    parser.set_defaults(func=keys_handler)


def keys_handler(args: argparse.Namespace) -> int:
    from daq import security

    public, secret = security.generate_keys(args.dir, args.name, overwrite=args.force)
    print(f"public key: {public}")
    print(f"secret key: {secret} (mode 0600; never copy it to another machine)")
    return 0
