"""One module per `walklab` subcommand.

Each module defines ``register(subparsers)`` which adds its parser and sets ``func`` to a handler
``handler(args) -> int``. `controller.cli` discovers the modules here, so adding a subcommand means
adding a file. Handlers import heavy modules (scipy, zmq, ezc3d) inside the handler so that
``walklab --help`` stays fast.
"""
