"""Replay: a recorded session published on the bus again, frame for frame.

Every frame goes out with its recorded ``seq``, ``t``, ``t_host``, ``t_device``, channels, units,
meta and buffers (``t_pub`` is the replay's own publish time, as on any publisher), in the order
the recorder received them (file order: each stream's ``seq`` order is kept). Pacing:

- real time (``speed`` 1): frame ``k`` leaves at ``W0 + (t_k − t_0) / speed`` on the host monotonic
  clock, ``W0`` the start of the replay and ``t_0`` the lab time of the first frame replayed; a
  frame whose time has already passed leaves at once (never dropped);
- scaled (``speed`` 0.5, 4, ...): the same with another ``speed``;
- as fast as the consumers keep up (``speed`` None): no pacing; the publisher's socket is switched to
  ``ZMQ_XPUB_NODROP``, so a subscriber whose queue is full makes the replay *wait* (back-pressure)
  instead of losing frames. A subscriber that stops reading stops the replay, but not its stop:
  a send waits at most BACKPRESSURE_WAIT_MS for room, then ``should_stop`` is asked again.

Selection: stream names or ``prefix*`` patterns, and a time window [start, end) in seconds from the
first frame of the session. Deterministic: the same file and options give the same frames in the same
order, whatever the speed.

Process entry point `run(ctx, args)` (a ``[[processes]]`` entry ``module = "daq.replay"`` puts a
recording where the devices would be, e.g. in front of the dynamics service); stand-alone:
``walklab replay FILE`` (``controller/commands/replay.py``).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import msgpack
import zmq

from daq.frames import Frame, _check_dynamic, _dynamic_header, encode
from daq.record import MessageDecoder
from daq.sessions import SessionError, messages, read, session_parts

if TYPE_CHECKING:
    from daq.context import ProcessContext


def window(paths: Sequence[Path], start_s: float | None, end_s: float | None) -> tuple[int | None, int | None]:
    """Lab times [ns] of a window given in seconds from the session's first frame."""
    if start_s is None and end_s is None:
        return None, None
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise SessionError(f"time window: --end {end_s} s must be after --start {start_s} s")
    first = next(iter(read(paths)), None)
    if first is None:
        raise SessionError(f"{paths[0]}: the session holds no frame")
    t0 = first.t
    return (None if start_s is None else t0 + round(start_s * 1e9),
            None if end_s is None else t0 + round(end_s * 1e9))


def frames(path: str | Path, streams: Sequence[str] = (), start_s: float | None = None,
           end_s: float | None = None) -> Iterator[Frame]:
    """The frames a replay of ``path`` (and its rotated parts) publishes, in order."""
    paths = session_parts(path)
    start_ns, end_ns = window(paths, start_s, end_s)
    return read(paths, streams, start_ns=start_ns, end_ns=end_ns)


@dataclass
class WireFrame:
    """A recorded frame ready for the bus without a `Frame` in between (replay's fast path).

    ``prefix``: its header's bytes up to the fields that change per frame (as `daq.frames.encode`
    packs them); ``dynamic``: those fields but ``t_pub`` (seq, t_device, t_host, t, meta), checked;
    ``buffers``: the message parts after the header. `send` stamps ``t_pub`` and sends the same
    bytes ``Publisher.send`` would send for the decoded frame (tests/daq/test_replay.py).
    """

    stream: str
    seq: int
    t: int
    rate_hz: float
    prefix: bytes
    dynamic: dict[str, Any]
    buffers: list[bytes]

    def send(self, publisher: Any) -> None:
        """Publish on ``publisher`` (a `daq.bus.Publisher`), stamped now."""
        t_pub = time.monotonic_ns()
        d = self.dynamic
        # the key order of daq.frames._dynamic_header: the header is prefix + these pairs
        header = self.prefix + msgpack.packb({"seq": d["seq"], "t_device": d["t_device"], "t_host": d["t_host"],
                                              "t": d["t"], "t_pub": t_pub, "meta": d["meta"]})[1:]
        publisher.send_parts(self.stream, self.seq, self.rate_hz, [self.stream.encode(), header, *self.buffers],
                             t_pub)


class WireEncoder:
    """Recorded messages (`daq.record.pack_frame`) to `WireFrame`s (a lifetime object: one per replay).

    A channel's first message of each buffer layout (names, dtypes, shapes) goes the long way
    (`MessageDecoder.decode`, then `daq.frames.encode`, which validate everything) and teaches the
    header prefix; the next ones are split (`MessageDecoder.split`), their byte counts and changing
    fields checked (`daq.frames._check_dynamic`), and their buffers passed on as they are.
    """

    def __init__(self) -> None:
        self.decoder = MessageDecoder()
        self._layouts: dict[tuple, tuple[bytes, str, float, tuple[int, ...]]] = {}

    def wire(self, data: bytes, channel: Any) -> WireFrame:
        doc = self.decoder.split(data, channel)
        if doc is not None:
            try:
                bufs = doc["buffers"]
                known = self._layouts.get((channel, *[(b["name"], b["dtype"], tuple(b["shape"])) for b in bufs]))
                if known is not None:
                    prefix, stream, rate, sizes = known
                    datas = [b["data"] for b in bufs]
                    if [len(x) if type(x) is bytes else -1 for x in datas] == list(sizes):
                        dynamic = {"seq": doc["seq"], "t_device": doc["t_device"], "t_host": doc["t_host"],
                                   "t": doc["t"], "t_pub": 0, "meta": doc["meta"]}
                        _check_dynamic(dynamic)
                        return WireFrame(stream, dynamic["seq"], dynamic["t"], rate, prefix, dynamic, datas)
            except (KeyError, TypeError):  # not a frame map: the long way names the problem
                pass
        frame = self.decoder.decode(data, channel)
        frame.t_pub = 0
        parts = encode(frame)
        dynamic = _dynamic_header(frame)
        prefix = bytes(parts[1][:len(parts[1]) - len(msgpack.packb(dynamic)) + 1])
        buffers = [bytes(p) for p in parts[2:]]
        arrays = [("data", frame.data), *frame.extra.items()]
        self._layouts[(channel, *[(n, a.dtype.str, a.shape) for n, a in arrays])] = \
            (prefix, frame.stream, frame.rate_hz, tuple(len(b) for b in buffers))
        return WireFrame(frame.stream, frame.seq, frame.t, frame.rate_hz, prefix, dynamic, buffers)


def wire_frames(path: str | Path, streams: Sequence[str] = (), start_s: float | None = None,
                end_s: float | None = None) -> Iterator[WireFrame]:
    """`frames` as `WireFrame`s: the same frames, in the same order, for `replay` with ``send=WireFrame.send``."""
    paths = session_parts(path)
    start_ns, end_ns = window(paths, start_s, end_s)
    enc = WireEncoder()
    for key, m in messages(paths, streams, start_ns=start_ns, end_ns=end_ns):
        yield enc.wire(m.data, key)


#: Longest a send waits for room in a full subscriber queue under back-pressure [ms]; then it
#: raises zmq.Again (the frame not sent) and the replay checks for a stop before it tries again.
BACKPRESSURE_WAIT_MS = 50


def set_backpressure(publisher: Any, on: bool = True) -> None:
    """Make ``publisher`` (a `daq.bus.Publisher`) wait for a full subscriber queue instead of dropping
    (``on``), at most BACKPRESSURE_WAIT_MS per send (then zmq.Again); ``on=False`` restores dropping."""
    # daq.bus.Publisher has no option for it (yet): set it on its XPUB socket. Without a send
    # timeout a subscriber alive but not reading blocks the send for ever: no stop is ever seen.
    publisher._sock.setsockopt(zmq.XPUB_NODROP, int(on))
    publisher._sock.setsockopt(zmq.SNDTIMEO, BACKPRESSURE_WAIT_MS if on else -1)


def replay(source: Iterable[Frame] | Iterable[WireFrame], publisher: Any, *, speed: float | None = 1.0,
           should_stop: Callable[[], bool] = lambda: False,
           progress: Callable[[int, Any], None] | None = None,
           clock: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep) -> int:
    """Publish ``source``'s frames with their recorded seq and stamps; returns the frames sent.

    ``source``: `Frame`s (`frames`), or `WireFrame`s (`wire_frames`: the same bytes on the bus,
    about half the CPU per frame). ``speed``: replay speed (1 real time); None: as fast as the
    subscribers keep up (call `set_backpressure` on the publisher first, or frames beyond a
    subscriber's queue are dropped for it; a frame that finds no room within BACKPRESSURE_WAIT_MS
    is sent again until ``should_stop()``). ``progress(n, frame)`` is called after every 500th frame.
    """
    if speed is not None and not speed > 0:
        raise ValueError(f"replay speed must be > 0 (or None: as fast as possible), got {speed!r}")
    n = 0
    w0 = t0 = None
    for frame in source:
        if should_stop():
            break
        if speed is not None:
            if t0 is None:
                t0, w0 = frame.t, clock()
            due = w0 + (frame.t - t0) / speed
            while True:
                remaining = due - clock()
                if remaining <= 0 or should_stop():
                    break
                publisher.poll_subscriptions()
                sleep(min(remaining, 50_000_000) * 1e-9)
            if should_stop():
                break
        if not _send(frame, publisher, should_stop):
            break
        n += 1
        if progress is not None and n % 500 == 0:
            progress(n, frame)
    return n


def _send(frame: Frame | WireFrame, publisher: Any, should_stop: Callable[[], bool]) -> bool:
    """Send ``frame``, waiting for room while a subscriber's queue is full; False if stopped first."""
    while True:
        try:
            if type(frame) is WireFrame:
                frame.send(publisher)
            else:
                publisher.send(frame)
            return True
        except zmq.Again:  # back-pressure: nothing of the frame left (the first part waits for room)
            if should_stop():
                return False
            publisher.poll_subscriptions()


def add_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `run` and ``walklab replay``."""
    p.add_argument("--stream", metavar="PATTERN", action="append", default=[],
                   help="stream name or prefix* to replay (repeatable; default: every stream)")
    p.add_argument("--start", metavar="S", type=float, help="start S seconds after the session's first frame")
    p.add_argument("--end", metavar="S", type=float, help="end S seconds after the session's first frame")
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--speed", type=float, default=1.0, help="replay speed, 1 = real time (default)")
    speed.add_argument("--fast", action="store_true",
                       help="as fast as the subscribers keep up (back-pressure: a full subscriber makes it wait)")
    p.add_argument("--wait-subscribers", metavar="N", type=int, default=0,
                   help="wait until N subscribers are connected before the first frame (default 0)")


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Process entry point: replay ``--file FILE`` on the process's publisher (options as ``walklab replay``)."""
    p = argparse.ArgumentParser(prog="daq.replay", add_help=False)
    p.add_argument("--file", required=True, help="session file (.mcap)")
    add_options(p)
    opts = p.parse_args(list(args))
    source = wire_frames(opts.file, opts.stream, opts.start, opts.end)
    if opts.fast:
        set_backpressure(ctx.publisher)

    def stop() -> bool:
        try:
            ctx.tick()
        except zmq.Again:  # a health frame that found a subscriber's queue full: the next one follows
            pass
        return ctx.stopping

    if opts.wait_subscribers:
        while not stop() and not ctx.publisher.wait_for_subscribers(opts.wait_subscribers, 0.05):
            pass

    counted = [0]

    def progress(k: int, _frame: Any = None) -> None:  # health shows the replay advancing (or stuck)
        ctx.health.count("replay/frames", k - counted[0])
        counted[0] = k

    n = replay(source, ctx.publisher, speed=None if opts.fast else opts.speed, should_stop=stop, progress=progress)
    progress(n)
    if opts.fast:
        set_backpressure(ctx.publisher, False)  # health while idle never waits for a subscriber
    ctx.health.state = "finished"
    # a finished replay idles (health keeps flowing) until the lab stops, so the supervisor does not restart it
    while ctx.sleep_until(time.monotonic_ns() + 1_000_000_000):
        pass
    return 0
