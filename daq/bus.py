"""The stream bus: ZeroMQ publish/subscribe of `daq.frames` frames.

A `Publisher` binds one endpoint and publishes frames of any number of streams, numbering each
stream's frames 0, 1, 2, ... (``seq``) and stamping them with ``time.monotonic_ns()``. A
`Subscriber` connects to one or more publishers, receives the streams it asked for, and keeps per
stream counters (`StreamStats`): frames received, sequence gaps and dropped frames, samples lost
by the sample times, publisher restarts, out-of-order (foreign) seqs, frames missed because it
joined late, malformed frames, measured rate and publish->receive latency (docs/bus.md, "What the
counters mean").

Endpoints: ``tcp://127.0.0.1:PORT`` (``PORT`` may be ``*`` to pick a free one; read
`Publisher.endpoint`), ``ipc:///path/to/socket``, ``inproc://name``, and remote
``tcp://HOST:PORT``. A non-loopback tcp endpoint (including ``tcp://*:PORT`` and
``tcp://0.0.0.0:PORT``) requires CurveZMQ keys (`daq.security`): otherwise `EndpointError`.

Slow joiners (ZeroMQ drops whatever a PUB publishes before a new subscription has arrived):

1. *Handshake.* Each Subscriber subscribes to a private control topic
   ``b"\\x00walklab/sub/<id>"``. The Publisher uses an XPUB socket, sees that subscription arrive
   (which proves every subscription sent before it on that connection is in place) and answers on
   that topic with a *welcome* carrying its next ``seq`` per stream. `Publisher.wait_for_subscribers`
   blocks a publisher until N subscribers have arrived (use it before publishing the first frame
   when nothing may be lost); `Subscriber.wait_connected` blocks a subscriber until every endpoint
   has welcomed it. Publishers answer during `publish`/`send`/`poll_subscriptions`.
2. *Replay.* A Publisher keeps the frames of its first `REPLAY_S` seconds (bounded) and sends
   them with the welcome, in the same multipart message; the Subscriber holds a stream's first
   live frames until that welcome (at most `HOLD_NS`) and delivers the replayed frames it missed
   first, in ``seq`` order. A process started with the lab misses nothing.
3. *Late-join detection.* Whatever happens, a subscriber never loses frames silently: the first
   frame of a stream with ``seq = s > 0`` records ``missed_at_join = s`` (frames 0..s-1 were
   published before it joined; a warning is logged), and later jumps in ``seq`` count as gaps.

Publishers are lossy (a PUB at its high-water mark drops frames for the slow subscriber and never
blocks the acquisition loop); the subscriber counts every such loss from ``seq`` and the sample
times. A restart (a dropped connection, then a seq that does not continue) is counted as such,
and a seq no publisher run can explain (a second publisher on the name, a corrupt seq) as out of
order, never as a loss.

Sockets are not thread-safe: use each Publisher/Subscriber from one thread. `close` (or the
``with`` block) sets a short linger so ``zmq.Context.term`` never hangs.
"""
from __future__ import annotations

import ipaddress
import logging
import math
import os
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import msgpack
import numpy as np
import zmq
import zmq.utils.monitor

from daq.frames import Frame, FrameError, decode, encode
from daq.logthrottle import LogThrottle
from daq.security import CurveClient, CurveServer

log = logging.getLogger("walklab.bus")

DEFAULT_SNDHWM = 10_000
DEFAULT_RCVHWM = 10_000
#: How long a closing publisher keeps trying to deliver queued frames [ms].
PUBLISHER_LINGER_MS = 200
#: How long a bind waits for an address still held by a just-closed socket [s].
BIND_RETRY_S = 1.0
#: Topics starting with this prefix are bus control messages, never frames.
CONTROL_PREFIX = b"\x00walklab/"
_SUB_TOKEN_PREFIX = CONTROL_PREFIX + b"sub/"
_REPLAY_FLAG = b"r"  # first byte after the token prefix: this subscriber wants the replay
_SNDMORE, _NOBLOCK = int(zmq.SNDMORE), int(zmq.NOBLOCK)
# pyzmq's compiled send (data, flags, copy, track), without the Python wrapper of zmq.Socket.send
# (routing_id/group handling the bus never uses): 1.0 against 1.6 us per message part, measured
_send = zmq.backend.Socket.send
_COPY_THRESHOLD = zmq.COPY_THRESHOLD
_IPC_PATH_MAX = 107  # sockaddr_un.sun_path minus the terminating NUL
#: Sliding window for the measured rates [ns].
RATE_WINDOW_NS = 2_000_000_000
#: A new publisher keeps the frames of its first REPLAY_S seconds for subscribers that join late [s] ...
REPLAY_S = 10.0
#: ... at most this many per stream and this many bytes in all (beyond: the replay window ends).
REPLAY_FRAMES = 4096
REPLAY_BYTES = 64 << 20
#: How long a subscriber holds a late-joined stream's first frames waiting for its publisher's welcome [ns].
HOLD_NS = 1_000_000_000
#: No publisher sends frames faster than one per microsecond: a seq jump larger than the time
#: between two frames allows is not a loss but a foreign seq value (a second publisher, a corrupt seq).
MIN_FRAME_NS = 1_000


class EndpointError(ValueError):
    """An endpoint string that is malformed, unsupported or insecure (message names it)."""


class BusError(OSError):
    """A bind or connect that failed at the operating-system level (address in use, no such path)."""


# ----------------------------------------------------------------------------------- endpoints


def is_local_endpoint(endpoint: str) -> bool:
    """True for ipc, inproc and tcp on a loopback address (127.0.0.0/8, ::1, localhost).

    Raises EndpointError for a malformed or unsupported endpoint.
    """
    if not isinstance(endpoint, str):
        raise EndpointError(f"endpoint must be a string like 'tcp://127.0.0.1:5555', got {endpoint!r}")
    transport, sep, address = endpoint.partition("://")
    if not sep or not address:
        raise EndpointError(f"endpoint {endpoint!r}: expected TRANSPORT://ADDRESS (tcp, ipc or inproc)")
    if transport == "ipc":
        path = address[1:] if address.startswith("@") else address  # '@' = Linux abstract namespace
        if len(os.fsencode(path)) > _IPC_PATH_MAX:
            raise EndpointError(f"endpoint {endpoint!r}: ipc path longer than {_IPC_PATH_MAX} bytes")
        return True
    if transport == "inproc":
        return True
    if transport != "tcp":
        raise EndpointError(f"endpoint {endpoint!r}: transport {transport!r} not supported (tcp, ipc, inproc)")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not (port == "*" or port.isdigit()):
        raise EndpointError(f"endpoint {endpoint!r}: expected tcp://HOST:PORT (PORT a number or *)")
    host = host.strip("[]")
    if ";" in host:  # tcp://src;dst form: judge the destination
        host = host.split(";")[-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or interface name (or '*'): not provably loopback


def check_endpoint(endpoint: str, *, secured: bool, action: str) -> None:
    """Refuse a non-loopback tcp endpoint without CurveZMQ keys (EndpointError names it)."""
    if not is_local_endpoint(endpoint) and not secured:
        raise EndpointError(
            f"refusing to {action} {endpoint!r} without CurveZMQ keys: endpoints that are not loopback "
            "or ipc must be secured (generate keys with `walklab keys` and set them in the lab config)")


def _ipc_in_use(path: str) -> bool:
    """True if a process accepts connections on the unix socket ``path``."""
    if path.startswith("@"):
        path = "\0" + path[1:]  # Linux abstract namespace
    elif not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _socket_file(endpoint: str) -> tuple[str, int] | None:
    """(path, inode) of the unix socket file behind a bound ipc endpoint; None for other transports."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return None  # tcp, inproc, or the Linux abstract namespace (no file)
    path = endpoint[len("ipc://"):]
    try:
        return path, os.stat(path).st_ino
    except OSError:
        return None


# ----------------------------------------------------------------------------------- publisher


class _KeySet:
    """ZAP credentials provider accepting the given client public keys."""

    def __init__(self, keys: Iterable[bytes]):
        self.keys = {bytes(k) for k in keys}

    def callback(self, domain: str, key: bytes) -> bool:
        return bytes(key) in self.keys  # pyzmq passes the client key Z85-encoded


class Publisher:
    """Binds ``endpoint`` and publishes frames; numbers each stream's frames from 0.

    Args:
        endpoint: where to bind (see module docstring); ``tcp://127.0.0.1:*`` picks a free port.
        sndhwm: frames queued per subscriber before frames are dropped for that subscriber.
        curve: server keys; required for a non-loopback tcp endpoint. With
            ``curve.authorized_clients`` the publisher gets its own context running a ZAP
            authenticator that admits only those client keys.
        context: ZeroMQ context (default: the process-wide ``zmq.Context.instance()``).
        replay_s: keep the frames of sampled streams (``rate_hz > 0``) of the first ``replay_s``
            seconds (at most `REPLAY_FRAMES` per stream, `REPLAY_BYTES` in all) and send them with
            the welcome to a subscriber that asks for them, so a process started with the lab
            misses none (0: keep nothing). Irregular streams (``rate_hz`` 0: commands, requests,
            events) are never replayed: a consumer would act on stale commands again.

    Attributes:
        endpoint: the bound endpoint, with the actual port when ``*`` was asked.
        sent: frames sent per stream.
    """

    def __init__(self, endpoint: str, *, sndhwm: int = DEFAULT_SNDHWM, curve: CurveServer | None = None,
                 context: zmq.Context | None = None, replay_s: float = REPLAY_S):
        check_endpoint(endpoint, secured=curve is not None, action="bind")
        if not isinstance(sndhwm, int) or sndhwm < 0:
            raise ValueError(f"sndhwm must be an integer >= 0 (0 = unlimited), got {sndhwm!r}")
        if not (isinstance(replay_s, (int, float)) and 0 <= replay_s < math.inf):
            raise ValueError(f"replay_s must be a number of seconds >= 0, got {replay_s!r}")
        self._own_context = curve is not None and curve.authorized_clients is not None
        if self._own_context and context is not None:
            raise ValueError("a publisher that authorizes client keys needs its own context: do not pass context=")
        self._ctx = zmq.Context() if self._own_context else (context or zmq.Context.instance())
        self._auth = None
        self._ipc_file: tuple[str, int] | None = None
        self._sock = self._ctx.socket(zmq.XPUB)
        self._closed = False
        try:
            self._sock.linger = PUBLISHER_LINGER_MS
            self._sock.sndhwm = sndhwm
            if curve is not None:
                if curve.authorized_clients is not None:
                    from zmq.auth.thread import ThreadAuthenticator

                    self._auth = ThreadAuthenticator(self._ctx)
                    self._auth.start()
                    self._auth.configure_curve_callback("*", credentials_provider=_KeySet(curve.authorized_clients))
                curve.apply(self._sock)
            # A socket closed a moment ago (a restarting daemon) releases its address asynchronously:
            # retry for BIND_RETRY_S. For ipc, check first that nobody listens: libzmq would
            # silently unlink a live socket file and take the address over.
            deadline = time.monotonic() + BIND_RETRY_S
            while True:
                try:
                    if endpoint.startswith("ipc://") and _ipc_in_use(endpoint[6:]):
                        raise zmq.ZMQError(zmq.EADDRINUSE, "another process is listening on it")
                    self._sock.bind(endpoint)
                    break
                except zmq.ZMQError as exc:
                    if exc.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                        raise BusError(f"cannot bind {endpoint!r}: {exc}") from None
                    time.sleep(0.02)
            self.endpoint: str = self._sock.last_endpoint.decode()
            self._ipc_file = _socket_file(self.endpoint)
        except BaseException:
            self.close()
            raise
        self._seq: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self._id = uuid.uuid4().hex
        self._subscribers: set[bytes] = set()
        self._next_sub_check = 0
        # The replay buffer: encoded frames of the first replay_s seconds, by stream (None: window over).
        self._retained: dict[str, deque[tuple[bytes | memoryview, ...]]] | None = {} if replay_s > 0 else None
        self._retained_bytes = 0
        self._replay_until = time.monotonic_ns() + int(replay_s * 1e9)

    # -- subscriptions and the handshake

    @property
    def subscribers(self) -> int:
        """Number of walklab Subscribers whose subscription has reached this publisher."""
        return len(self._subscribers)

    def poll_subscriptions(self, timeout_s: float = 0.0) -> int:
        """Handle subscription messages (welcoming new subscribers); returns the subscriber count.

        Waits at most ``timeout_s`` for the first message. `send` calls it at most every 5 ms.
        """
        sock = self._sock
        if timeout_s > 0 and not sock.poll(int(math.ceil(timeout_s * 1000))):
            return len(self._subscribers)
        while True:
            try:
                msg = sock.recv(_NOBLOCK)
            except zmq.Again:
                break
            if not msg.startswith(b"\x01" + _SUB_TOKEN_PREFIX) and not msg.startswith(b"\x00" + _SUB_TOKEN_PREFIX):
                continue  # an ordinary stream subscription
            token = msg[1:]
            if msg[0] == 1:
                self._subscribers.add(token)
                self._welcome(token)
            else:
                self._subscribers.discard(token)
        return len(self._subscribers)

    def _welcome(self, token: bytes) -> None:
        """Answer a new subscriber: ``[token, welcome, *replayed frames' parts]``, one message.

        One multipart message is delivered whole or not at all, and before any frame published
        after it, so the subscriber can put the replayed frames ahead of the live ones.
        """
        welcome: dict[str, Any] = {"publisher": self._id, "endpoint": self.endpoint, "next_seq": dict(self._seq)}
        parts: list[bytes | memoryview] = []
        if self._retained is not None and token[len(_SUB_TOKEN_PREFIX):].startswith(_REPLAY_FLAG):
            counts = []
            for frames in self._retained.values():
                for frame_parts in frames:
                    counts.append(len(frame_parts))
                    parts.extend(frame_parts)
            welcome["replay"] = counts
        self._sock.send_multipart([token, msgpack.packb(welcome), *parts])

    def _retain(self, stream: str, parts: list[bytes | memoryview], now: int) -> None:
        """Keep a sent frame for the replay while the window lasts (small buffers copied: callers reuse them)."""
        if now > self._replay_until:
            self._retained = None
            return
        kept = [parts[0], parts[1]]  # topic and header: bytes already
        size = len(parts[0]) + len(parts[1])
        for p in parts[2:]:  # plain loop: a comprehension and a generator cost twice as much here
            n = len(p)
            kept.append(p if n >= _COPY_THRESHOLD else bytes(p))
            size += n
        self._retained_bytes += size
        if self._retained_bytes > REPLAY_BYTES:
            log.info("replay buffer over %d MiB: the replay window ends (late subscribers count what "
                     "they missed)", REPLAY_BYTES >> 20)
            self._retained = None
            return
        frames = self._retained.get(stream)
        if frames is None:
            frames = self._retained[stream] = deque(maxlen=REPLAY_FRAMES)
        elif len(frames) == REPLAY_FRAMES:
            self._retained_bytes -= sum(len(p) for p in frames[0])
        frames.append(tuple(kept))  # a tuple of bytes leaves the cyclic collector's scans, a list would not

    def wait_for_subscribers(self, n: int, timeout_s: float) -> bool:
        """Block until at least ``n`` Subscribers are connected and subscribed, or ``timeout_s`` passes.

        Returns True when they are there. Frames published afterwards reach all of them (up to
        their high-water marks).
        """
        deadline = time.monotonic() + timeout_s
        while self.poll_subscriptions() < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.poll_subscriptions(min(remaining, 0.05))
        return True

    # -- publishing

    def publish(self, stream: str, data: np.ndarray, *, kind: str, rate_hz: float, channels: Sequence[str],
                units: Sequence[str], t_device: int | None = None, t_host: int | None = None, t: int | None = None,
                extra: dict[str, np.ndarray] | None = None, meta: dict[str, Any] | None = None) -> Frame:
        """Publish one block of ``stream``; returns the Frame sent (with its ``seq`` and stamps).

        Args:
            data: shape (samples, channels), or (channels,) for a single sample; units per ``units``.
            rate_hz: nominal sample rate [Hz] (0 for irregular streams).
            t_device: device clock of sample 0 [ns] if the device has one.
            t_host: host monotonic time of sample 0 [ns]; default: now minus (samples - 1) / rate_hz,
                i.e. the last sample is taken as just acquired.
            t: lab time of sample 0 [ns]; default ``t_host``.
        Raises FrameError for data that cannot be framed (wrong shape, dtype, channel count).
        Buffers of 64 KiB or more leave without a copy: do not modify ``data`` in place afterwards
        (ZeroMQ may still be sending it); publish a new array instead.
        """
        arr = np.asarray(data)
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2 or arr.shape[1] != len(channels):
            raise FrameError(f"stream {stream!r}: data shape {np.shape(data)} does not match "
                             f"(samples, {len(channels)} channels)")
        if t_host is None:
            t_host = time.monotonic_ns()
            if rate_hz > 0 and arr.shape[0] > 1:
                t_host -= round((arr.shape[0] - 1) * 1e9 / rate_hz)
        frame = Frame(stream=stream, kind=kind, seq=self._seq.get(stream, 0), t_device=t_device, t_host=t_host,
                      t=t_host if t is None else t, rate_hz=rate_hz, channels=tuple(channels), units=tuple(units),
                      data=arr, extra=extra or {}, meta=meta or {})
        self.send(frame)
        return frame

    def send(self, frame: Frame) -> None:
        """Send a complete Frame as is (its own ``seq``, e.g. in replay); stamps ``frame.t_pub``.

        The next `publish` of that stream continues at ``frame.seq + 1``.
        """
        self._check_subscriptions()
        frame.t_pub = time.monotonic_ns()
        self._send_encoded(frame.stream, frame.seq, frame.rate_hz, encode(frame), frame.t_pub)

    def _check_subscriptions(self) -> None:
        if self._closed:
            raise BusError(f"publisher {self.endpoint!r} is closed")
        now = time.monotonic_ns()
        if now >= self._next_sub_check:  # at most every 5 ms: a recv attempt costs as much as a send
            self._next_sub_check = now + 5_000_000
            self.poll_subscriptions()

    def send_parts(self, stream: str, seq: int, rate_hz: float, parts: list[bytes | memoryview], t_pub: int) -> None:
        """Send a frame already encoded (``parts`` as `daq.frames.encode` makes them, its header's
        ``t_pub`` = ``t_pub``, ``stream``, ``seq`` and ``rate_hz`` its own): `send` without the
        encoding, for replay's fast path (`daq.replay.WireFrame`)."""
        self._check_subscriptions()
        self._send_encoded(stream, seq, rate_hz, parts, t_pub)

    def _send_encoded(self, stream: str, seq: int, rate_hz: float, parts: list[bytes | memoryview], t_pub: int) -> None:
        sock = self._sock
        last = len(parts) - 1
        for i, part in enumerate(parts):
            # int flags: pyzmq's send_multipart spends more time combining enum flags than sending;
            # zero-copy only pays off for large buffers (pyzmq copies small ones anyway)
            _send(sock, part, 0 if i == last else _SNDMORE, len(part) < _COPY_THRESHOLD, False)
        self._seq[stream] = seq + 1
        self.sent[stream] = self.sent.get(stream, 0) + 1
        if self._retained is not None and rate_hz > 0:
            self._retain(stream, parts, t_pub)

    def close(self, linger_s: float | None = None) -> None:
        """Close the socket; idempotent. Queued frames get ``linger_s`` seconds (default
        PUBLISHER_LINGER_MS) to leave, but only while the context lives: a process that must
        deliver its queue before it exits terminates the context after this (`drain`)."""
        if self._closed:
            return
        self._closed = True
        self._sock.close(linger=PUBLISHER_LINGER_MS if linger_s is None else max(0, round(linger_s * 1000)))
        if self._ipc_file is not None:
            # libzmq 4.3.5 leaves the socket file behind (measured): remove it, unless it is no
            # longer ours (another publisher bound the path since). Established connections and
            # frames still lingering are unaffected: unlink removes only the name.
            path, inode = self._ipc_file
            try:
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except OSError:
                pass
        if self._auth is not None:
            self._auth.stop()
        if self._own_context:
            self._ctx.term()

    def drain(self, timeout_s: float) -> bool:
        """Close, then wait until every queued frame has reached its subscriber (they read slower
        than this publisher sent: a ``--fast`` replay's tail), at most ``timeout_s`` seconds, by
        terminating the socket's context (the process-wide one unless it has its own: call it last,
        before exit). Returns False if the time ran out (the rest is dropped)."""
        self.close(linger_s=timeout_s)
        t0 = time.monotonic()
        self._ctx.term()
        return time.monotonic() - t0 < timeout_s

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------- subscriber


@dataclass
class StreamStats:
    """Counters of one stream as seen by a Subscriber (docs/bus.md, "What the counters mean").

    Attributes:
        stream: stream name.
        received: frames received and decoded (replayed ones included).
        samples: samples received (sum of the frames' rows).
        gaps: jumps in ``seq`` inside one run of the publisher (frames lost on the way).
        dropped: frames published but never received: those inside the gaps, and those a restarted
            publisher sent before this subscriber was connected to it again.
        lost_samples: samples missing from the stream's sample times, across the gaps and the
            restarts: ``round((t_next - t_expected) * rate_hz)`` with ``t_expected`` the time of the
            sample after the last one received (0 for streams with ``rate_hz`` 0: see ``dropped``).
        missed_at_join: frames published before this subscriber first joined (BEFORE_JOIN: not a
            loss; 0 when it saw the stream from its start, e.g. through the publisher's replay).
        restarts: times the publisher started a new run: its connection dropped, and the next
            frame's ``seq`` did not continue the last one.
        out_of_order: frames whose ``seq`` does not continue the stream and no restart explains:
            repeated, backwards, or a jump larger than the time between the frames allows (a
            second publisher on the name, a corrupt ``seq``). Delivered, never turned into a loss.
        malformed: messages on this topic rejected by `daq.frames.decode` (counted per stream once
            the stream is known: expected, or a valid frame seen; always in `Subscriber.malformed`).
        first_seq, last_seq: first and latest ``seq`` of the current run (None before the first frame).
        rate_hz: measured sample rate over the last 2 s [Hz] (replayed frames not included).
        frames_per_s: measured frame rate over the last 2 s [1/s].
        latency_p50_s, latency_p99_s, latency_max_s: publish->receive latency over the last frames
            [s] (None without frames, or when an endpoint is remote and the clocks differ).
    """

    stream: str
    received: int = 0
    samples: int = 0
    gaps: int = 0
    dropped: int = 0
    lost_samples: int = 0
    missed_at_join: int = 0
    restarts: int = 0
    out_of_order: int = 0
    malformed: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    rate_hz: float = 0.0
    frames_per_s: float = 0.0
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None


class _Tracker:
    """Mutable per-stream state behind a StreamStats.

    ``prev``: the last frame of the current run; ``held``: frames held until the publisher's welcome.
    """

    __slots__ = ("stats", "lat", "lat_n", "arrivals", "join_seq", "t_first", "prev", "held", "held_until")

    def __init__(self, stream: str, history: int):
        self.stats = StreamStats(stream)
        self.lat = np.zeros(history, dtype=np.int64)
        self.lat_n = 0
        self.arrivals: deque[tuple[int, int]] = deque()
        self.join_seq: int | None = None
        self.t_first: int | None = None
        self.prev: Frame | None = None
        self.held: list[Frame] | None = None
        self.held_until = 0


def _samples_between(prev: Frame, nxt: Frame) -> int:
    """Samples missing between ``prev`` and ``nxt`` by their sample times at ``prev``'s rate (0 if unknown)."""
    if not prev.rate_hz > 0:
        return 0
    expected = prev.t + round(prev.samples * 1e9 / prev.rate_hz)
    return max(0, round((nxt.t - expected) * prev.rate_hz * 1e-9))


class Subscriber:
    """Connects to publishers and receives frames of the chosen streams, counting every loss.

    Args:
        endpoints: one endpoint or several (one per publisher).
        streams: stream names to receive (exact), or prefixes ending in ``*`` (``"forceplate/*"``);
            empty: every stream.
        rcvhwm: frames queued in this subscriber before further frames are dropped (and counted
            as gaps).
        curve: client keys; required for a non-loopback tcp endpoint.
        context: ZeroMQ context (default: ``zmq.Context.instance()``).
        expect: streams that must arrive (default: the exact names in ``streams``); they appear in
            `stats` from the start, and `missing` lists those not yet seen.
        history: number of recent frames per stream kept for the latency percentiles.
        replay: ask each publisher for the frames it kept from its start (`Publisher` ``replay_s``)
            and deliver those this subscriber missed ahead of the live ones, in ``seq`` order: a
            process started with the lab misses nothing. False for a consumer that wants only
            fresh data (it then counts what it missed in ``missed_at_join``).
    """

    def __init__(self, endpoints: str | Sequence[str], streams: Iterable[str] = (), *, rcvhwm: int = DEFAULT_RCVHWM,
                 curve: CurveClient | None = None, context: zmq.Context | None = None,
                 expect: Iterable[str] | None = None, history: int = 1000, replay: bool = True):
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not self.endpoints:
            raise EndpointError("a subscriber needs at least one endpoint")
        local = [is_local_endpoint(e) for e in self.endpoints]
        for e in self.endpoints:
            check_endpoint(e, secured=curve is not None, action="connect to")
        if not isinstance(rcvhwm, int) or rcvhwm < 0:
            raise ValueError(f"rcvhwm must be an integer >= 0 (0 = unlimited), got {rcvhwm!r}")
        if not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an integer >= 1 (frames kept for latency percentiles), got {history!r}")
        streams = list(streams)
        for s in streams:
            if not isinstance(s, str) or not s or s.startswith("\x00"):
                raise ValueError(f"stream pattern {s!r} must be a non-empty name or 'prefix*'")
        self._exact = {s for s in streams if not s.endswith("*")}
        self._prefixes = tuple(s[:-1] for s in streams if s.endswith("*"))
        self._all = not streams
        self._latency_ok = all(local)  # monotonic clocks are comparable only on one host
        self._history = history
        self._trackers: dict[str, _Tracker] = {}
        self.malformed = 0
        self.seq_faults = 0  # out_of_order over all streams
        # a flood of garbage or of foreign seqs: one line a second each, with the count since the last
        self._malformed_log = LogThrottle(log)
        self._seq_fault_log = LogThrottle(log)
        self.last_error: str | None = None
        self._welcomed: set[str] = set()
        self._join_seq: dict[str, int] = {}
        self._pending: deque[Frame] = deque()
        self._replay = bool(replay)
        self._holding: set[str] = set()  # streams whose first frames wait for their publisher's welcome
        self._token = _SUB_TOKEN_PREFIX + (_REPLAY_FLAG if replay else b"-") + uuid.uuid4().hex.encode()
        self._closed = False
        self._monitor: zmq.Socket | None = None
        self._lost: set[str] = set()  # endpoints to reconnect once nothing is queued
        self._disconnected_ns = 0  # when a connection drop was last noticed
        self._since_check = 0
        self._sock = (context or zmq.Context.instance()).socket(zmq.SUB)
        try:
            self._sock.linger = 0
            self._sock.rcvhwm = rcvhwm
            if curve is not None:
                curve.apply(self._sock)
            if self._all:
                self._sock.subscribe(b"")
            else:
                for s in self._exact:
                    self._sock.subscribe(s.encode())
                for p in self._prefixes:
                    self._sock.subscribe(p.encode())
            self._sock.subscribe(self._token)  # last: its arrival proves the ones above arrived
            self._monitor = self._sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            for e in self.endpoints:
                try:
                    self._sock.connect(e)
                except zmq.ZMQError as exc:
                    raise BusError(f"cannot connect to {e!r}: {exc}") from None
        except BaseException:
            self.close()
            raise
        self.expected = set(self._exact if expect is None else expect)
        for s in self.expected:
            self._tracker(s)

    def _tracker(self, stream: str) -> _Tracker:
        tr = self._trackers.get(stream)
        if tr is None:
            tr = self._trackers[stream] = _Tracker(stream, self._history)
            tr.join_seq = self._join_seq.get(stream)
        return tr

    def _wanted(self, topic: str) -> bool:
        return self._all or topic in self._exact or topic.startswith(self._prefixes)

    # -- receiving

    def recv(self, timeout_s: float | None = None) -> Frame | None:
        """The next frame of a subscribed stream, or None after ``timeout_s`` seconds (None: wait forever).

        Malformed messages are counted (`malformed`, per-stream ``malformed``), logged with their
        reason (a line a second at most, `daq.logthrottle`) and skipped; control messages are handled
        internally. ``frame.t_recv`` is set.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        sock = self._sock
        while True:
            if self._holding:
                self._release_due()
            if self._pending:
                return self._pending.popleft()
            try:
                part = sock.recv(_NOBLOCK, copy=False)
                parts = [part]
                while part.more:
                    part = sock.recv(_NOBLOCK, copy=False)
                    parts.append(part)
            except zmq.Again:
                self._check_connections()
                if deadline is None:
                    wait_ms = 100
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait_ms = max(1, min(100, int(math.ceil(remaining * 1000))))
                if self._holding:  # wake up in time to release held frames whose publisher never answers
                    wait_ms = min(wait_ms, 50)
                sock.poll(wait_ms)
                continue
            self._since_check += 1
            if self._since_check >= 256:  # a busy stream must not hide another publisher's restart
                self._check_connections()
            frame = self._handle(parts)
            if frame is not None:
                return frame

    def _check_connections(self) -> None:
        """Reconnect endpoints whose publisher went away.

        libzmq re-sends the subscriptions of an automatically re-established connection, but an
        XPUB does not report them to the publisher (libzmq 4.3.5, measured), so a restarted
        publisher would never welcome us. A fresh connect() behaves like the first one. But
        disconnect() discards frames already received and not yet read, so it waits until the
        socket has nothing queued (ZMQ_EVENTS processes pending commands, unlike a failed recv).
        """
        self._since_check = 0
        self._read_monitor()
        if not self._lost or self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return
        for e in sorted(self._lost):
            log.info("publisher at %s went away; reconnecting", e)
            self._sock.disconnect(e)
            self._sock.connect(e)
        self._lost.clear()

    def _read_monitor(self) -> None:
        """Note the endpoints whose connection dropped, and when we learnt it (`_disconnected_ns`)."""
        mon = self._monitor
        if mon is None:
            return
        while mon.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            e = zmq.utils.monitor.recv_monitor_message(mon)["endpoint"].decode(errors="replace")
            self._lost.update([e] if e in self.endpoints else self.endpoints)
            self._disconnected_ns = time.monotonic_ns()

    def _disconnected_since(self, t_ns: int) -> bool:
        """True if a publisher's connection dropped after ``t_ns`` (the evidence of a restart)."""
        self._read_monitor()
        return self._disconnected_ns > t_ns

    def _handle(self, parts: list[Any]) -> Frame | None:
        """Decode and account one message; returns the frame to deliver now, or None."""
        t_recv = time.monotonic_ns()
        topic_bytes = parts[0].bytes
        if topic_bytes.startswith(CONTROL_PREFIX):
            if topic_bytes == self._token and len(parts) >= 2:
                self._welcome(parts, t_recv)
            return None
        try:
            topic = topic_bytes.decode("utf-8")
        except UnicodeDecodeError:
            topic = None
        if topic is not None and not self._wanted(topic):
            return None  # a longer name sharing a subscribed prefix (FP1 vs FP10)
        frame = self._decode(parts, topic)
        if frame is None:
            return None
        frame.t_recv = t_recv
        tr = self._tracker(frame.stream)
        if tr.prev is None or tr.held is not None:
            return self._first_frames(tr, frame)
        self._account(tr, frame)
        return frame

    def _decode(self, parts: list[Any], topic: str | None) -> Frame | None:
        try:
            return decode(parts)
        except FrameError as exc:
            self.malformed += 1
            self.last_error = str(exc)
            tr = self._trackers.get(topic) if topic is not None else None
            if tr is not None:  # no new tracker per garbage topic: a flood must not grow memory
                tr.stats.malformed += 1
            self._malformed_log.log("dropped malformed frame #%d: %s", self.malformed, exc)
            return None

    def _first_frames(self, tr: _Tracker, frame: Frame) -> Frame | None:
        """A stream's first frames: hold them while its publisher's welcome (and replay) may still come.

        A first frame with ``seq > 0`` from a publisher that has not welcomed us yet means frames
        were published before our subscription arrived; the welcome, at most a few ms behind, may
        bring them. Held at most HOLD_NS (a publisher that never welcomes: a raw ZeroMQ one).
        """
        if tr.held is not None:
            tr.held.append(frame)
            return None
        if (self._replay and frame.seq > 0 and frame.stream not in self._join_seq
                and len(self._welcomed) < len(self.endpoints)):
            tr.held = [frame]
            tr.held_until = frame.t_recv + HOLD_NS
            self._holding.add(frame.stream)
            return None
        self._account(tr, frame)
        return frame

    def _release(self, tr: _Tracker, replayed: list[Frame]) -> None:
        """Queue for `recv`, in seq order, the replayed frames missed before the held ones, then those."""
        held = tr.held or []
        first = held[0].seq if held else None
        if tr.prev is None:
            for f in replayed:
                if first is None or f.seq < first:
                    self._account(tr, f, replayed=True)
                    self._pending.append(f)
        for f in held:
            self._account(tr, f)
            self._pending.append(f)
        tr.held = None
        self._holding.discard(tr.stats.stream)

    def _release_due(self) -> None:
        """Release held streams whose wait is over: every endpoint welcomed us, or HOLD_NS passed."""
        everyone = len(self._welcomed) >= len(self.endpoints)
        now = time.monotonic_ns()
        for stream in sorted(self._holding):
            tr = self._trackers[stream]
            if everyone or now >= tr.held_until:
                self._release(tr, [])

    def _welcome(self, parts: list[Any], t_recv: int) -> None:
        """A publisher's answer to our token: its next seq per stream, and the frames it replays."""
        try:
            w = msgpack.unpackb(parts[1].bytes, raw=False, max_str_len=65536, max_map_len=10000,
                                max_array_len=len(parts))
            pub, next_seq, counts = w["publisher"], w["next_seq"], w.get("replay", [])
            if not isinstance(pub, str) or not isinstance(next_seq, dict) or not isinstance(counts, list):
                raise TypeError("bad field types")
            if not all(type(n) is int and n >= 3 for n in counts) or sum(counts) != len(parts) - 2:
                raise ValueError(f"replay part counts do not add up to the {len(parts) - 2} parts sent")
        except Exception as exc:  # a bad control message is counted like a malformed frame
            self.malformed += 1
            self.last_error = f"malformed welcome: {exc}"
            log.warning("dropped malformed welcome message: %s", exc)
            return
        self._welcomed.add(pub)
        for stream, seq in next_seq.items():
            if isinstance(stream, str) and type(seq) is int:
                self._join_seq.setdefault(stream, seq)
                tr = self._trackers.get(stream)
                if tr is not None and tr.join_seq is None:
                    tr.join_seq = seq
        replayed: dict[str, list[Frame]] = {}
        at = 2
        for n in counts:
            topic = parts[at].bytes.decode("utf-8", "replace")
            if self._wanted(topic):
                tr = self._trackers.get(topic)
                if tr is None or tr.prev is None:  # nothing of it delivered yet: the replay fills the start
                    frame = self._decode(parts[at:at + n], topic)
                    if frame is not None:
                        frame.t_recv = t_recv
                        replayed.setdefault(frame.stream, []).append(frame)
            at += n
        for stream in sorted(replayed.keys() | (self._holding & next_seq.keys())):
            self._release(self._tracker(stream), replayed.get(stream, []))

    def _account(self, tr: _Tracker, frame: Frame, replayed: bool = False) -> None:
        """Update the stream's counters with ``frame`` (see `StreamStats`)."""
        st = tr.stats
        prev = tr.prev
        if prev is not None and frame.seq == prev.seq + 1:  # the usual case first
            tr.prev = frame
        elif prev is None:
            self._start(tr, frame)
        else:
            self._discontinuity(tr, frame)
        st.last_seq = tr.prev.seq if tr.prev is not None else None
        st.received += 1
        samples = frame.data.shape[0]
        st.samples += samples
        if replayed:
            return  # arrived in one burst, published long ago: not a rate or latency measurement
        t_recv = frame.t_recv
        if self._latency_ok:
            tr.lat[tr.lat_n % self._history] = t_recv - frame.t_pub
            tr.lat_n += 1
        if tr.t_first is None:
            tr.t_first = t_recv
        tr.arrivals.append((t_recv, samples))
        limit = t_recv - RATE_WINDOW_NS
        while tr.arrivals[0][0] < limit:
            tr.arrivals.popleft()

    def _discontinuity(self, tr: _Tracker, frame: Frame) -> None:
        """A seq that does not follow the last one: a restart, a gap, or a foreign seq value.

        - Restart: a publisher's connection dropped since the run's last frame, and the seq does
          not continue it. The new run's frames before this one are ``dropped``; the samples
          between the two runs' sample times are ``lost_samples``.
        - Gap: a jump forward no larger than the time since the last frame allows
          (``MIN_FRAME_NS`` per frame): ``dropped`` frames, ``lost_samples`` from the sample times.
        - Anything else (repeated, backwards, impossibly far ahead: a second publisher on the
          name, a corrupt seq) is ``out_of_order`` and leaves the run's state alone.
        """
        st = tr.stats
        prev = tr.prev
        seq = frame.seq
        if self._disconnected_since(prev.t_recv):
            lost = _samples_between(prev, frame)
            st.restarts += 1
            st.dropped += seq
            st.lost_samples += lost
            st.first_seq = seq
            log.warning("stream %r restarted (seq %d after %d): %d frame(s) of the new run and %d sample(s) "
                        "lost across the restart", frame.stream, seq, prev.seq, seq, lost)
            tr.prev = frame
            return
        # Frames inside a jump were published between prev and this frame's arrival (or
        # publication, for a remote publisher whose clock is not ours).
        elapsed = (frame.t_recv if self._latency_ok else frame.t_pub) - prev.t_pub
        missing = seq - prev.seq - 1
        if 0 < missing <= max(elapsed, 0) // MIN_FRAME_NS + 1:
            st.gaps += 1
            st.dropped += missing
            st.lost_samples += _samples_between(prev, frame)
            tr.prev = frame
            return
        st.out_of_order += 1
        why = (f"seq {seq} repeated" if missing == -1 else f"seq {seq} after {prev.seq}, no restart"
               if missing < 0 else f"seq {seq} after {prev.seq}: a jump of {missing} frames in {elapsed * 1e-9:.6f} s")
        self._seq_fault(frame, why)

    def _start(self, tr: _Tracker, frame: Frame) -> None:
        """The first frame of a stream: what was published before we joined, and what was lost since."""
        st = tr.stats
        seq = frame.seq
        # frames 0..seq-1 were published before this one, each taking >= MIN_FRAME_NS since the
        # publisher's host booted (monotonic clock)
        if seq > max(frame.t_pub, 0) // MIN_FRAME_NS + 1:
            st.out_of_order += 1
            self._seq_fault(frame, f"first seq {seq} is more frames than its host can have published")
            return
        tr.prev = frame
        st.first_seq = seq
        late = seq if tr.join_seq is None else min(seq, tr.join_seq)
        st.missed_at_join = late
        if seq > late:  # published after we joined, lost before reaching us
            st.gaps += 1
            st.dropped += seq - late
        if late:  # expected streams warn; for others (a monitor joining a running lab) it is normal
            log.log(logging.WARNING if frame.stream in self.expected else logging.INFO,
                    "joined stream %r late: first seq %d, missed %d frame(s) published before joining",
                    frame.stream, seq, late)

    def _seq_fault(self, frame: Frame, why: str) -> None:
        self.seq_faults += 1
        self._seq_fault_log.log("stream %r: %s: counted out of order, not as a loss (a second publisher on this "
                                "name?)", frame.stream, why)

    def wait_connected(self, timeout_s: float) -> bool:
        """Block until every endpoint's publisher has welcomed this subscriber (see module docstring).

        Frames received meanwhile are kept for `recv`. Returns False on timeout (a publisher that is
        down, or idle: publishers answer while publishing or in `Publisher.wait_for_subscribers`).
        """
        deadline = time.monotonic() + timeout_s
        while len(self._welcomed) < len(self.endpoints):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._check_connections()
            if self._sock.poll(max(1, min(100, int(remaining * 1000)))):
                frame = self._handle(self._sock.recv_multipart(copy=False))
                if frame is not None:
                    self._pending.append(frame)
        if self._holding:
            self._release_due()
        return True

    # -- counters

    def stats(self) -> dict[str, StreamStats]:
        """A snapshot of the counters of every stream seen or expected, by stream name."""
        now = time.monotonic_ns()
        out = {}
        for name, tr in self._trackers.items():
            st = StreamStats(**vars(tr.stats))
            recent = [n for t, n in tr.arrivals if t >= now - RATE_WINDOW_NS]
            if len(recent) > 1:
                # over the window, or since the first frame for a stream younger than the window
                span_ns = max(min(RATE_WINDOW_NS, now - tr.t_first), 1)
                st.frames_per_s = len(recent) * 1e9 / span_ns
                st.rate_hz = sum(recent) * 1e9 / span_ns
            n = min(tr.lat_n, len(tr.lat))
            if n:
                lat = tr.lat[:n] * 1e-9
                st.latency_p50_s, st.latency_p99_s = (float(v) for v in np.percentile(lat, [50, 99]))
                st.latency_max_s = float(lat.max())
            out[name] = st
        return out

    def missing(self) -> list[str]:
        """Expected streams from which no frame has arrived yet."""
        return sorted(s for s in self.expected if self._trackers[s].stats.received == 0)

    def close(self) -> None:
        """Close the socket at once (linger 0); idempotent."""
        if not self._closed:
            self._closed = True
            if self._monitor is not None:
                self._sock.disable_monitor()
                self._monitor.close(linger=0)
            self._sock.close(linger=0)

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
