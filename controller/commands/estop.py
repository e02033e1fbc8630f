"""`walklab estop`: latch (or with --reset clear) the e-stop of a running lab's control loop.

    walklab estop [CONFIG] [--reset] [--timeout S]

CONFIG is the lab config whose ``controller.loop`` process to reach (default: the shipped
configs/jansen_sim.toml). The command binds the loop's operator endpoint (its ``--operator``,
tcp://127.0.0.1:5610 by default) for a moment, waits until the loop has subscribed, publishes
``controller/estop`` and waits for the loop's confirmation on ``controller/events``; no loop or no
confirmation within --timeout is an error (exit 2). The loop also latches the MCU's own e-stop, so
the motors stay off even if the loop dies; only --reset (or a RESET from the bridge) clears it.
"""
from __future__ import annotations

import argparse
import threading
import time
from typing import Any, Callable

import numpy as np


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("estop", help="latch (--reset: clear) the e-stop of the running control loop",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", nargs="?", help="lab config (default: configs/jansen_sim.toml)")
    p.add_argument("--reset", action="store_true", help="clear a latched e-stop (motors stay idle until a request)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for the loop (default 5)")
    p.set_defaults(func=_estop)


def _estop(args: argparse.Namespace) -> int:
    from controller.loop import ESTOP_STREAM

    cause = "reset" if args.reset else "estop"
    detail = send_operator(args.config, ESTOP_STREAM, np.array([[0.0 if args.reset else 1.0]]), ["latch"], ["1"],
                           {"source": "cli"}, {cause}, args.timeout)
    print(f"{'e-stop cleared' if args.reset else 'e-stop latched'}: {detail}")
    return 0


def send_operator(config: str | None, stream: str, data, channels, units, meta: dict, confirm: set[str],
                  timeout_s: float) -> str:
    """`send_to_loop` to the control loop of the lab config `config` (default configs/jansen_sim.toml)."""
    import configs
    from controller.config import load

    if not (timeout_s > 0):
        raise ValueError(f"--timeout: expected > 0 s, got {timeout_s}")
    return send_to_loop(load(config or configs.path("jansen_sim.toml")), stream, data, channels, units, meta, confirm,
                        timeout_s)


def loop_of(lab: Any) -> tuple[Any, str]:
    """The lab's one enabled ``controller.loop`` process and its operator endpoint; LookupError otherwise."""
    from controller.loop import parse_args

    loops = [p for p in lab.processes if p.module == "controller.loop" and p.enabled]
    if len(loops) != 1:
        raise LookupError(f"{lab.source}: expected one process with module = \"controller.loop\", found {len(loops)}")
    return loops[0], parse_args(loops[0].name, loops[0].args).operator


def send_to_loop(lab: Any, stream: str, data, channels, units, meta: dict, confirm: set[str], timeout_s: float,
                 cancel: threading.Event | None = None) -> str:
    """Publish one operator frame (`data`: (1, C) array, time first) to the control loop of the loaded `lab`
    and wait for its event whose cause is in `confirm` (returns its detail). The loop's operator endpoint is
    bound only for this call — the one publisher a moment, so `walklab estop`, `walklab command` and a
    scripted `walklab run` each get their turn. ``timeout_s`` bounds the whole call (subscription, delivery
    and confirmation); setting ``cancel`` ends it within 0.1 s (InterruptedError). OSError with one line
    if the endpoint is taken or the loop is not there or does not answer; ValueError if the loop refuses
    the request."""
    from controller.loop import EVENT_STREAM
    from controller.proc import publisher_for, subscriber_for

    spec, operator = loop_of(lab)
    end = time.monotonic() + timeout_s

    def until(done: Callable[[float], bool], what: str) -> None:
        """Call ``done(slice_s)`` in slices of at most 0.1 s until it is true, the deadline or a cancel."""
        while not done(max(0.0, min(0.1, end - time.monotonic()))):
            if cancel is not None and cancel.is_set():
                raise InterruptedError(f"{what}: cancelled")
            if time.monotonic() >= end:
                raise TimeoutError(what)

    pub = publisher_for(lab, operator)
    try:
        sub = subscriber_for(lab, [spec.connect or spec.bind], [EVENT_STREAM], expect=())
    except BaseException:
        pub.close()
        raise
    try:
        until(lambda t: pub.wait_for_subscribers(1, t), f"no control loop subscribed at {operator} within "
              f"{timeout_s} s (is process {spec.name!r} of {lab.source} running?)")
        until(sub.wait_connected, f"process {spec.name!r} did not answer within {timeout_s} s")
        pub.publish(stream, data, kind="operator", rate_hz=0.0, channels=channels, units=units, meta=meta)
        answer: list[str] = []

        def confirmed(t: float) -> bool:
            f = sub.recv(timeout_s=t)
            if f is not None and f.meta and f.meta.get("cause") in confirm | {"rejected"}:
                if f.meta["cause"] == "rejected":
                    raise ValueError(f"the control loop refused the request: {f.meta.get('detail')}")
                answer.append(str(f.meta.get("detail", "")))
            return bool(answer)

        until(confirmed, f"process {spec.name!r} did not confirm within {timeout_s} s")
        return answer[0]
    finally:
        pub.close()
        sub.close()
