"""Process runtime: the entry point of every process `walklab run` starts, and the bus set-up of a lab.

The supervisor starts each ``[[processes]]`` entry as::

    python -m controller.proc --config FILE --name NAME [ARGS...]

which, before anything else, asks the kernel to send it SIGTERM when the supervisor dies
(``PR_SET_PDEATHSIG``; it exits at once if the supervisor is already gone), turns SIGTERM and
SIGINT into a stop request, loads the lab config, imports ``MODULE`` (an import that fails is
one line naming the module file, the line and the error), builds the process's
`daq.context.ProcessContext` (`make_context`: publisher bound on ``bind``, ``health/NAME``,
devices, subscriber factory), moves every object created so far out of the garbage collector's
reach (``gc.freeze()``) and calls::

    MODULE.run(ctx: ProcessContext, args: list[str]) -> int     # exit status

``run`` loops while ``not ctx.stopping``, sleeping with `ProcessContext.sleep_until` (which also
publishes the health frame once a second) and returns when asked to stop; the runtime then closes
the sockets (no hanging ``zmq.Context.term``). A config, argument or import error exits with
status 2 (`daq.context.CONFIG_ERROR`) and one log line; the supervisor does not restart it.

`publisher_for` and `subscriber_for` map a lab config onto `daq.bus` (high-water marks, CurveZMQ
keys); the supervisor and `walklab bus monitor` use them too.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import signal
import sys
from typing import Any, Iterable, Sequence

from controller.config import Lab, Process
from daq.context import CONFIG_ERROR, ProcessContext

log = logging.getLogger("walklab.proc")

SUPERVISOR_PID_ENV = "WALKLAB_SUPERVISOR_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None) -> None:
    """Ask Linux to SIGTERM this process when its parent dies; exit now if it already has.

    `expected_parent`: the supervisor's pid (None: no check). Elsewhere than Linux: nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    # The supervisor may have died between our fork and the prctl: then we are already orphaned.
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(0)


def logging_setup(name: str) -> None:
    """Log lines as ``HH:MM:SS.mmm NAME LEVEL message`` on stderr."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s.%(msecs)03d {name} %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


def publisher_for(lab: Lab, bind: str):
    """A `daq.bus.Publisher` bound at `bind` with the lab's sndhwm and CurveZMQ server keys."""
    from daq.bus import Publisher
    from daq.security import CurveServer

    curve = lab.bus.curve
    server = None if curve is None else CurveServer.from_files(curve.server_key, curve.authorized_keys)
    return Publisher(bind, sndhwm=lab.bus.sndhwm, curve=server)


def subscriber_for(lab: Lab | None, endpoints: Sequence[str], streams: Iterable[str] = (), *,
                   expect: Iterable[str] | None = None):
    """A `daq.bus.Subscriber` of `endpoints` with the lab's rcvhwm and CurveZMQ client keys.

    `lab` None (bare endpoints): default high-water mark, no keys.
    """
    from daq.bus import DEFAULT_RCVHWM, Subscriber
    from daq.security import CurveClient

    if lab is None:
        return Subscriber(list(endpoints), streams, expect=expect, rcvhwm=DEFAULT_RCVHWM)
    curve = lab.bus.curve
    client = None if curve is None else CurveClient.from_files(curve.server_public, curve.client_key)
    return Subscriber(list(endpoints), streams, rcvhwm=lab.bus.rcvhwm, curve=client, expect=expect)


def make_context(lab: Lab, spec: Process) -> ProcessContext:
    """The `daq.context.ProcessContext` of process `spec`: its publisher bound at ``spec.bind``, its
    ``health/NAME``, its devices, and a subscriber factory connected to every publisher of `lab`."""
    from daq.health import Health

    publisher = publisher_for(lab, spec.bind)
    endpoints = list(lab.endpoints().values())

    def subscribe(streams: Iterable[str], expect: Iterable[str] | None) -> Any:
        return subscriber_for(lab, endpoints, streams, expect=expect)

    return ProcessContext(name=spec.name, config=spec, lab=lab,
                          devices={d: lab.devices[d] for d in spec.devices}, publisher=publisher,
                          health=Health(spec.name, publisher), subscribe=subscribe)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m controller.proc --config FILE --name NAME [ARGS...]``; returns the exit status."""
    parent = os.environ.get(SUPERVISOR_PID_ENV)
    die_with_parent(int(parent) if parent and parent.isdigit() else None)
    ctx: ProcessContext | None = None
    stop_early = {"flag": False}

    def on_signal(signum: int, frame: Any) -> None:
        if ctx is not None:
            ctx.on_signal()
        stop_early["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    parser = argparse.ArgumentParser(prog="python -m controller.proc",
                                     description="Run one process of a walklab lab config.")
    parser.add_argument("--config", required=True, help="lab config (TOML)")
    parser.add_argument("--name", required=True, help="the [[processes]] entry to run")
    opts, rest = parser.parse_known_args(argv)
    logging_setup(opts.name)
    from controller.config import load, process_entry
    try:
        lab = load(opts.config)
        spec = lab.process(opts.name)
        run = process_entry(lab, spec)  # one line (module, line, message) if it cannot be imported
        ctx = make_context(lab, spec)
    except (ValueError, OSError, LookupError) as exc:
        log.error("%s", exc)
        return CONFIG_ERROR
    # What exists now (modules, config, sockets) lives as long as the process: keep it out of the
    # cyclic collector's scans, so collections during the loop stay short (ecosystem.md section 9).
    gc.freeze()
    try:
        if stop_early["flag"]:
            ctx.request_stop()
        status = int(run(ctx, list(rest)) or 0)
    except SystemExit as exc:  # argparse inside run() on bad ARGS
        status = exc.code if isinstance(exc.code, int) else CONFIG_ERROR
    except (ValueError, OSError, LookupError) as exc:
        log.error("%s", exc)
        status = CONFIG_ERROR
    finally:
        ctx.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
