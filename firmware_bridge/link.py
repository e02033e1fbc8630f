"""Host side of the serial link to the MCU: a port (any pyserial URL), a reader thread, statistics,
heartbeats, request/acknowledge with retry, and reconnection with backoff.

    with Link("/dev/ttyACM0") as link:          # or "spy:///dev/ttyACM0", "socket://host:port", a pty path
        caps = link.hello()
        link.request(Config(watchdog_ms=100))    # ACK or raise NackError / LinkTimeout
        link.send(Command(...))                  # stream, no reply; feeds the MCU watchdog
        frame = link.recv(timeout=0.01)          # STATE, HEARTBEAT, LOG, FORCE, ... in arrival order

Heartbeats are sent by a background thread only while the application shows it is alive (calls
`alive()` or `send()` within `liveness_s`): a heartbeat thread unaware of the controller would keep
the MCU watchdog fed while the controller hangs (the MAVLink advice in ecosystem.md §7).

After a reconnect the link sends HELLO itself (retrying every `hello_timeout_s`, at most
`hello_tries` times), so `caps` always describes the device now on the port (after an unplug it may
be another board, or the same one reflashed); `wait_caps()` returns the current connection's CAPS.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

import serial

from . import protocol as P


class LinkError(OSError):
    """The serial link failed (port cannot be opened, link closed)."""


class LinkTimeout(LinkError, TimeoutError):
    """A request got no ACK/NACK (or HELLO no CAPS) after all retries."""


class NackError(ValueError):
    """The MCU refused a request; `error` is the NACK code (protocol.ERRORS)."""

    def __init__(self, nack: P.Nack):
        name = P.ERRORS.get(nack.error, f"error {nack.error}")
        super().__init__(f"MCU refused {P.TYPE_NAMES.get(nack.type, nack.type)} (seq {nack.seq}): {name}")
        self.error = nack.error


@dataclass
class LinkStats:
    """Counters since open. frames/crc_failures are per message type name (CRC failures by the
    claimed type byte of the corrupted frame); rejected is per decoder reason (cobs, crc, short,
    length, version, type, payload, overflow); lost_frames sums sequence gaps; late_heartbeats counts
    MCU heartbeat intervals (on the MCU's clock) longer than 1.5 periods; open_failures counts
    reconnection attempts that could not open the port (one per backoff period while unplugged);
    reconnect_backoff_s is the wait before the next attempt (s); auto_hellos counts the HELLOs the link
    sent by itself (after reconnects and for wait_caps), not those of hello(). tx_failed counts writes that raised:
    with a device that stops reading, pyserial's write timeout can fire after the whole frame was
    written (it then waits for room), so a "failed" frame may still arrive (seen on a full pty)."""

    frames: dict = field(default_factory=dict)
    crc_failures: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    lost_frames: int = 0
    gap_events: int = 0
    out_of_order: int = 0
    late_heartbeats: int = 0
    tx_frames: int = 0
    tx_failed: int = 0
    retries: int = 0
    timeouts: int = 0
    disconnects: int = 0
    reconnects: int = 0
    open_failures: int = 0
    reconnect_backoff_s: float = 0.0
    auto_hellos: int = 0
    rx_bytes: int = 0
    queue_overflow: int = 0


class _Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: P.Ack | P.Nack | None = None


class Link:
    """A serial link to one MCU; lifetime open() .. close() (or a `with` block).

    url: a device path or any pyserial URL; baudrate: bits/s (ignored by ptys and USB CDC);
    heartbeat_hz: host heartbeat rate (0 disables the thread); liveness_s: heartbeats stop when the
    application has not called alive()/send() for this long; reconnect: reopen the port with
    exponential backoff (backoff_s = (first, max)) after it fails; queue_size: received frames kept
    for recv() (oldest dropped, counted); hello_timeout_s, hello_tries: the wait for CAPS after each
    HELLO the link sends by itself, and how many it sends before giving up (wait_caps asks again)."""

    def __init__(self, url: str, *, baudrate: int = 1_000_000, heartbeat_hz: float = 20.0, liveness_s: float = 0.1,
                 reconnect: bool = True, backoff_s: tuple[float, float] = (0.02, 0.2), queue_size: int = 100_000,
                 read_timeout_s: float = 0.005, hello_timeout_s: float = 0.2, hello_tries: int = 10):
        if heartbeat_hz < 0 or liveness_s <= 0 or not 0 < backoff_s[0] <= backoff_s[1] or read_timeout_s <= 0 \
                or hello_timeout_s <= 0 or hello_tries < 1:
            raise ValueError(f"Link({url!r}): expected heartbeat_hz >= 0 (got {heartbeat_hz}), liveness_s > 0 "
                             f"(got {liveness_s}), 0 < backoff_s[0] <= backoff_s[1] (got {backoff_s}), "
                             f"read_timeout_s > 0 (got {read_timeout_s}), hello_timeout_s > 0 (got "
                             f"{hello_timeout_s}), hello_tries >= 1 (got {hello_tries})")
        self.url = url
        self.baudrate = baudrate
        self.heartbeat_hz = heartbeat_hz
        self.liveness_s = liveness_s
        self.reconnect = reconnect
        self.backoff_s = backoff_s
        self.read_timeout_s = read_timeout_s
        self.hello_timeout_s = hello_timeout_s
        self.hello_tries = hello_tries
        self.caps: P.Caps | None = None
        self._ser: serial.SerialBase | None = None
        self._decoder = P.StreamDecoder()
        self._stats = LinkStats()
        self._lock = threading.Lock()  # stats, waiters, seq
        self._wlock = threading.Lock()  # port writes
        self._queue: collections.deque[P.Frame] = collections.deque(maxlen=queue_size)
        self._qcond = threading.Condition()
        self._waiters: dict[int, _Waiter] = {}
        self._caps_event = threading.Event()
        self._caps_cond = threading.Condition(self._lock)  # notified when CAPS arrive
        self._connection = 0  # +1 at every port open
        self._caps_connection = -1  # the connection the current `caps` came on
        self._hello_due: float | None = None  # monotonic time of the link's next own HELLO (None: none asked)
        self._hellos_left = 0
        self._tx_seq = 0
        self._rx_seq: int | None = None
        self._prev_hb_us: int | None = None
        self._last_alive = 0.0
        self._closing = threading.Event()
        self.connected = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- lifetime

    def open(self) -> "Link":
        """Open the port (raise LinkError naming the URL if it cannot be opened) and start the threads."""
        self._open_port()
        self._threads = [threading.Thread(target=self._reader, name="link-reader", daemon=True)]
        if self.heartbeat_hz > 0:
            self._threads.append(threading.Thread(target=self._heartbeats, name="link-heartbeat", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        """Stop the threads, fail pending requests, close the port. Idempotent."""
        self._closing.set()
        with self._wlock:  # not while the reader thread closes the port (`_close_port`): its abort pipe with it
            ser = self._ser
            if ser is not None:
                try:
                    ser.cancel_read()
                except (AttributeError, OSError, serial.SerialException):
                    pass
        for t in self._threads:
            t.join(timeout=2)
        self._threads = []
        self._close_port()
        with self._lock:
            for w in self._waiters.values():
                w.event.set()
            self._waiters.clear()

    def __enter__(self) -> "Link":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _open_port(self) -> None:
        try:
            ser = serial.serial_for_url(self.url, baudrate=self.baudrate, timeout=self.read_timeout_s,
                                        write_timeout=0.2)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise LinkError(f"cannot open serial port {self.url!r}: {exc}") from None
        self._decoder = _continue_counts(self._decoder)
        with self._lock:
            self._rx_seq = None  # the device may have rebooted: no gap across a reconnect
            self._prev_hb_us = None
            self._connection += 1
            self._hello_due = None
        self._ser = ser
        try:
            ser.write(b"\x00")  # ends any partial frame the device may hold from before
        except (serial.SerialException, OSError):
            pass
        self.connected.set()

    def _close_port(self) -> None:
        self.connected.clear()
        # Under the write lock: a write in another thread (the application's, the heartbeat's) or `close`'s
        # cancel_read either ends before the close or sees no port. A close in the middle of pyserial's
        # write left it a closed descriptor: a TypeError out of `send` (8 in 200 stressed unplugs; it ends
        # the control loop) or a write into whatever file reused the number.
        with self._wlock:
            ser, self._ser = self._ser, None
            if ser is not None:
                try:
                    ser.close()
                except (serial.SerialException, OSError):
                    pass

    # ----------------------------------------------------------------- sending

    def _send_frame(self, msg: P.Message, waiter: _Waiter | None = None) -> int:
        # seq is taken and the frame written under one lock, so frames leave in seq order whatever
        # thread (application, heartbeat) sends them.
        ok = False
        with self._wlock:
            with self._lock:
                seq = self._tx_seq
                self._tx_seq = (seq + 1) & 0xFFFF
                ack = self._rx_seq or 0
                if waiter is not None:
                    self._waiters[seq] = waiter
            wire = P.encode_frame(msg, seq, ack, int(time.monotonic() * 1e6))
            ser = self._ser
            if ser is not None:
                try:
                    ser.write(wire)
                    ok = True
                except (serial.SerialException, OSError):
                    pass  # the reader thread notices the failure and reconnects
        with self._lock:
            if ok:
                self._stats.tx_frames += 1
            else:
                self._stats.tx_failed += 1
        return seq

    def send(self, msg: P.Message) -> int:
        """Send one frame (no reply expected); returns its seq. Counts as application liveness.
        A frame that cannot be written (port down) is counted in tx_failed, not raised."""
        self._last_alive = time.monotonic()
        return self._send_frame(msg)

    def alive(self) -> None:
        """Tell the link the application is alive, so heartbeats keep flowing without commands."""
        self._last_alive = time.monotonic()

    def request(self, msg: P.Message, timeout_s: float = 0.1, retries: int = 3) -> P.Ack:
        """Send a request (CONFIG, ESTOP, RESET) and wait for its ACK, resending up to `retries` times.
        Raise NackError if refused, LinkTimeout if unanswered, LinkError if the link is closed."""
        if not isinstance(msg, P.REQUESTS):
            raise ValueError(f"request(): {type(msg).__name__} is not acknowledged; use send() "
                             f"(requests are {', '.join(c.__name__ for c in P.REQUESTS)})")
        waiter = _Waiter()
        seqs = []
        try:
            for attempt in range(retries + 1):
                if self._closing.is_set():
                    raise LinkError(f"{P.TYPE_NAMES[msg.TYPE]} to {self.url}: the link was closed")
                if attempt:
                    with self._lock:
                        self._stats.retries += 1
                seqs.append(self._send_frame(msg, waiter))
                if waiter.event.wait(timeout_s):
                    if waiter.reply is None:  # woken by close()
                        raise LinkError(f"{P.TYPE_NAMES[msg.TYPE]} to {self.url}: the link was closed")
                    if isinstance(waiter.reply, P.Nack):
                        raise NackError(waiter.reply)
                    return waiter.reply
        finally:
            with self._lock:
                for s in seqs:
                    self._waiters.pop(s, None)
        with self._lock:
            self._stats.timeouts += 1
        raise LinkTimeout(f"{P.TYPE_NAMES[msg.TYPE]} to {self.url}: no ACK after {retries + 1} tries "
                          f"of {timeout_s * 1000:.0f} ms")

    def hello(self, timeout_s: float = 0.2, retries: int = 2) -> P.Caps:
        """Ask for the device's capabilities; stored in `caps`. Raise LinkTimeout if it does not answer."""
        for _ in range(retries + 1):
            self._caps_event.clear()
            self._send_frame(P.Hello())
            if self._caps_event.wait(timeout_s) and self.caps is not None:
                return self.caps
        raise LinkTimeout(f"no CAPS from {self.url} after {retries + 1} HELLOs of {timeout_s * 1000:.0f} ms"
                          f"{self._version_hint()}")

    def wait_caps(self, timeout_s: float = 2.0) -> P.Caps:
        """The CAPS of the device on the current connection, waiting up to timeout_s for them: after a
        reconnect the link has asked by itself; if nothing is asking (first connection, or the link's
        HELLOs went unanswered) the link starts asking now. Raise LinkTimeout if none arrive."""
        end = time.monotonic() + timeout_s
        with self._caps_cond:
            while self._caps_connection != self._connection or self.caps is None:
                if self._hello_due is None:
                    self._ask_caps()
                if self._closing.is_set():
                    raise LinkError(f"waiting for CAPS from {self.url}: the link was closed")
                left = end - time.monotonic()
                if left <= 0:
                    self._stats.timeouts += 1  # _caps_cond holds _lock
                    raise LinkTimeout(f"no CAPS from {self.url} within {timeout_s:g} s of HELLOs every "
                                      f"{self.hello_timeout_s * 1000:.0f} ms{self._version_hint()}")
                self._caps_cond.wait(min(left, self.hello_timeout_s))
            return self.caps

    def _ask_caps(self) -> None:
        """Have the reader thread send HELLO now and retry until CAPS come (caller holds _lock)."""
        self._hello_due = time.monotonic()
        self._hellos_left = self.hello_tries

    def _version_hint(self) -> str:
        other = self._decoder.errors.get("version", 0)
        return (f" ({other} frames of another protocol version than {P.PROTOCOL_VERSION} were received and "
                f"dropped: the device speaks another version)") if other else ""

    def _hello_if_due(self) -> None:
        """Reader thread: send the link's own HELLO when one is due (see _ask_caps)."""
        with self._lock:
            due = self._hello_due
            if due is None or time.monotonic() < due:
                return
            if self._caps_connection == self._connection or self._hellos_left <= 0:
                self._hello_due = None  # answered, or given up: wait_caps asks again
                return
            self._hellos_left -= 1
            self._hello_due = time.monotonic() + self.hello_timeout_s
            self._stats.auto_hellos += 1
        self._send_frame(P.Hello())

    # ----------------------------------------------------------------- receiving

    def recv(self, timeout_s: float | None = None) -> P.Frame | None:
        """The oldest received frame not yet taken (every type, ACK/NACK/CAPS included), or None if
        none arrives within timeout_s (None: wait forever)."""
        with self._qcond:
            if not self._queue:
                self._qcond.wait(timeout_s)
            return self._queue.popleft() if self._queue else None

    def drain(self) -> list[P.Frame]:
        """All frames received and not yet taken, oldest first."""
        with self._qcond:
            out = list(self._queue)
            self._queue.clear()
            return out

    @property
    def stats(self) -> LinkStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            s = LinkStats(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(self._stats).items()})
        s.rejected = dict(self._decoder.errors)
        s.crc_failures = {P.TYPE_NAMES.get(t, f"0x{t:02x}"): n for t, n in self._decoder.crc_by_type.items()}
        return s

    def _reader(self) -> None:
        backoff = self.backoff_s[0]
        while not self._closing.is_set():
            ser = self._ser
            if ser is None:
                if not self.reconnect or self._closing.wait(backoff):
                    return
                try:
                    self._open_port()
                    backoff = self.backoff_s[0]
                    with self._lock:
                        self._stats.reconnects += 1
                        self._stats.reconnect_backoff_s = backoff
                        self._ask_caps()  # the device on the port may have changed: refresh caps
                except LinkError:
                    backoff = min(2 * backoff, self.backoff_s[1])
                    with self._lock:
                        self._stats.open_failures += 1
                        self._stats.reconnect_backoff_s = backoff
                continue
            try:
                data = ser.read(max(1, ser.in_waiting))
            except (serial.SerialException, OSError, TypeError, AttributeError):
                # TypeError/AttributeError: pyserial internals after a concurrent close().
                if self._closing.is_set():
                    return
                with self._lock:
                    self._stats.disconnects += 1
                self._close_port()
                continue
            if data:
                self._dispatch(self._decoder.feed(data), len(data))
            self._hello_if_due()

    def _dispatch(self, frames: list[P.Frame], nbytes: int) -> None:
        with self._lock:
            st = self._stats
            st.rx_bytes += nbytes
            for f in frames:
                name = P.TYPE_NAMES[f.type]
                st.frames[name] = st.frames.get(name, 0) + 1
                if self._rx_seq is not None:
                    gap = P.seq_gap(self._rx_seq, f.seq)
                    if gap >= 0x8000:
                        st.out_of_order += 1
                    elif gap:
                        st.lost_frames += gap
                        st.gap_events += 1
                self._rx_seq = f.seq
                msg = f.msg
                if isinstance(msg, (P.Ack, P.Nack)):
                    w = self._waiters.get(msg.seq)
                    if w is not None:
                        w.reply = msg
                        w.event.set()
                elif isinstance(msg, P.Caps):
                    self.caps = msg
                    self._caps_connection = self._connection
                    self._caps_event.set()
                    self._caps_cond.notify_all()
                elif isinstance(msg, P.Heartbeat):
                    hz = self.caps.heartbeat_hz if self.caps and self.caps.heartbeat_hz else 20
                    if self._prev_hb_us is not None and \
                            (f.t_us - self._prev_hb_us) & 0xFFFFFFFF > 1.5e6 / hz:
                        st.late_heartbeats += 1
                    self._prev_hb_us = f.t_us
        with self._qcond:
            before = len(self._queue)
            self._queue.extend(frames)
            dropped = before + len(frames) - len(self._queue)
            self._qcond.notify_all()
        if dropped:
            with self._lock:
                self._stats.queue_overflow += dropped

    def _heartbeats(self) -> None:
        period = 1.0 / self.heartbeat_hz
        nxt = time.monotonic()
        while not self._closing.is_set():
            nxt += period
            if self._closing.wait(max(0.0, nxt - time.monotonic())):
                return
            if self._ser is not None and time.monotonic() - self._last_alive < self.liveness_s:
                self._send_frame(P.Heartbeat(0))


def _continue_counts(old: P.StreamDecoder) -> P.StreamDecoder:
    """A decoder with an empty buffer (a new connection starts clean) that keeps the old counters."""
    new = P.StreamDecoder(synchronised=False)
    new.skipped += old.skipped
    new.errors, new.crc_by_type, new.frames, new.bytes = old.errors, old.crc_by_type, old.frames, old.bytes
    return new
