"""A lab process that puts malformed messages on the bus (for fault tests; ``module = "tests.faults.bus_junk"``).

``args``: ``--subscribers K`` (wait until K subscribers are connected, at most 120 s), ``--go FILE`` (then
wait until FILE exists: the test says when), ``--topics T ...``
(stream names the lab's processes subscribe to), ``--rounds N``, ``--every-s S`` (between rounds). Each
round sends, on each topic, the `KINDS` of broken message — bytes that are not msgpack, a msgpack
header with no frame fields, a topic with no header, a valid frame whose buffer is cut short — straight
onto the process's publisher socket (a broken publisher, not `Publisher.publish`, which only sends
valid frames). Health: ``junk/sent`` (messages sent), ``junk/subscribers`` (connected when it started sending);
``junk/done`` 1 once every round is out. Then it idles until stopped.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Sequence

import msgpack
import numpy as np

from daq.context import ProcessContext
from daq.frames import Frame, encode

KINDS = ("not msgpack", "no frame fields", "no header", "short buffer")


def messages(topic: str) -> list[list[bytes]]:
    """One broken message of each of `KINDS` on `topic` (multipart, topic first)."""
    t = topic.encode()
    good = [bytes(p) for p in encode(Frame(topic, "junk", 0, None, 0, 0, 1000.0, ("a",), ("1",), np.zeros((4, 1))))]
    return [[t, b"\xc1"], [t, msgpack.packb({"v": 1})], [t], [t, *good[1:-1], good[-1][:3]]]


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.bus_junk")
    p.add_argument("--subscribers", type=int, required=True)
    p.add_argument("--topics", nargs="+", required=True)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--every-s", type=float, default=0.1)
    p.add_argument("--go", required=True)
    o = p.parse_args(list(args))
    pub = ctx.publisher
    deadline = time.monotonic() + 120.0
    while not ctx.stopping and not pub.wait_for_subscribers(o.subscribers, 0.1):
        ctx.tick()
        if time.monotonic() > deadline:
            raise OSError(f"only {pub.subscribers} of {o.subscribers} subscribers connected in 120 s")
    while not ctx.stopping and not os.path.exists(o.go):
        ctx.sleep_until(time.monotonic_ns() + 50_000_000)
    ctx.health.count("junk/subscribers", pub.subscribers)
    sock = pub._sock  # noqa: SLF001 (the raw socket: this process plays a broken publisher)
    for _ in range(o.rounds):
        if ctx.stopping:
            return 0
        for topic in o.topics:
            for parts in messages(topic):
                sock.send_multipart(parts)
                ctx.health.count("junk/sent")
        ctx.sleep_until(time.monotonic_ns() + round(o.every_s * 1e9))
    ctx.health.count("junk/done")
    while ctx.sleep_until(time.monotonic_ns() + 1_000_000_000):
        pass
    return 0
