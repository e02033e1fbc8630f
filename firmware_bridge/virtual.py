"""Virtual MCU: the firmware's logic in Python behind a real pseudo-terminal.

The MCU owns the master side of an ``os.openpty`` pair; the host opens the slave through a stable
path (a symlink in a private temp folder, like /dev/serial/by-id, to /proc/<pid>/fd/<slave>, so it
dies with the process) with pyserial, exactly as it would open a USB CDC device. Unplugging closes the pty (the path disappears, the host's reads fail);
replugging creates a new pty and re-points the symlink.

MCU time is tick-based (the injected-clock approach): tick k happens at t_us = t0 + k * period_us,
and the loop paces ticks against the host monotonic clock with absolute deadlines, catching up
after a stall. Watchdog and stream timing are therefore exact in MCU time, whatever the scheduler
does. Within a tick: receive and handle frames, watchdog check, control + plant step, transmit
(STATE at the stream rate, HEARTBEAT at heartbeat_hz), so a STATE's header ``ack`` covers every
host frame handled at or before its timestamp.

Control (output-shaft SI): torque mode tau = setpoint; velocity mode tau = kp e_w + ki ∫e_w;
position mode tau = kp e_theta + ki ∫e_theta - kd omega; i_ref = tau / (Kt N) clipped to
max_current; the current loop applies V = R i_ref + Ke w_m + (L / T)(i_ref - i) (T = period).
Measurements are what firmware sees: the quantised encoder (counts per output revolution) and a
velocity from the count difference over `vel_window` ticks; the reported current has Gaussian noise.

Watchdog: armed by the first COMMAND; fed by COMMAND and HEARTBEAT only (never CONFIG, HELLO,
ESTOP or RESET); when now - last_feed >= timeout every motor goes idle, torque off, and the fault
latches until RESET. ESTOP latches likewise.
"""
from __future__ import annotations

import argparse
import errno
import math
import os
import select
import signal
import sys
import tempfile
import threading
import time
import tty
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from dynamics.plants import motor as plant
from . import protocol as P

FIRMWARE = (1, 0, 0)
SUPPORTED_RATES = (100, 200, 250, 500, 1000)
TX_BUFFER_LIMIT = 4 << 20  # bytes queued when the host does not read (a USB CDC driver's buffer)


@dataclass(frozen=True)
class Faults:
    """Fault injection, MCU -> host unless named rx_.

    corrupt_rate: probability per transmitted byte (delimiters included) of being XORed with a
    random non-zero byte; drop_rate: probability per frame of not being sent; delay_s: latency added
    to every frame; unplug_at_s / unplug_for_s: a scheduled unplug (MCU time since start) and its
    duration; seed: RNG seed; rx_corrupt_rate: the same corruption on the bytes the MCU receives
    from the host (host -> MCU); stall_at_s / stall_for_s: a scheduled stall of the host's frames
    (MCU time since start) and its duration: the bytes the host sends meanwhile are lost before the
    firmware sees them, as from a host that stalled, so the watchdog trips when stall_for_s is at
    least its timeout."""

    corrupt_rate: float = 0.0
    drop_rate: float = 0.0
    delay_s: float = 0.0
    unplug_at_s: float | None = None
    unplug_for_s: float = 0.3
    seed: int = 0
    rx_corrupt_rate: float = 0.0
    stall_at_s: float | None = None
    stall_for_s: float = 0.3

    def __post_init__(self) -> None:
        for name in ("corrupt_rate", "drop_rate", "rx_corrupt_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"Faults.{name} = {getattr(self, name)!r}: expected a probability in [0, 1]")
        times = {"delay_s": self.delay_s, "unplug_for_s": self.unplug_for_s, "unplug_at_s": self.unplug_at_s,
                 "stall_at_s": self.stall_at_s, "stall_for_s": self.stall_for_s}
        bad = {k: v for k, v in times.items() if v is not None and not 0 <= v < math.inf}
        if bad:
            raise ValueError(f"Faults: {', '.join(f'{k} = {v!r}' for k, v in bad.items())}: expected a finite "
                             f"time >= 0 s")


@dataclass
class McuStats:
    """Counters of the virtual MCU (a snapshot is returned by VirtualMCU.stats)."""

    ticks: int = 0
    t_us: int = 0
    tx_frames: int = 0
    tx_bytes: int = 0
    tx_overflow: int = 0
    rx_frames: int = 0
    rx_lost: int = 0  # host frames missing by seq gaps
    rx_errors: dict = field(default_factory=dict)
    watchdog_trips: int = 0
    estops: int = 0
    corrupted_frames: int = 0
    rx_corrupted_bytes: int = 0
    dropped_frames: int = 0
    unplugs: int = 0
    stalls: int = 0
    rx_stalled_bytes: int = 0  # host bytes lost to a stall (Faults.stall_at_s)
    max_catch_up_ticks: int = 0


class VirtualMCU:
    """A virtual motor controller on a pty; use as a context manager or start()/close().

    n_motors motors with `motor` parameters (one MotorParams or a list), encoder `cpr` counts per
    output revolution, control at control_hz, STATE at stream_hz, HEARTBEAT at heartbeat_hz,
    watchdog timeout watchdog_ms, current noise sigma current_noise_a (A), output-shaft load callback
    `load(t, theta, omega) -> (J_load, tau_load)` (shapes (n,)), fault injection `faults`
    (changeable at run time with set_faults), MCU clock start clock_start_us (to exercise the
    2**32 µs wrap), its crystal's rate error clock_ppm (+: the MCU clock runs fast, its ticks come
    period / (1 + clock_ppm·1e-6) apart on the host clock; a real crystal is within ±50), record=True keeps every frame by seq in `sent` as encoded (before fault injection)
    and in `transmitted` as handed to the pty (after it; dropped frames absent) (tests).
    A force-plate amplifier / load-cell board: n_force = 6 or 8 and `force(t) -> channels` (SI, N and
    N·m, called at each STATE period with the MCU time in s) adds a FORCE frame per stream period;
    n_motors = 0 makes a force-only board (no STATE)."""

    def __init__(self, n_motors: int = 8, *, motor: plant.MotorParams | list[plant.MotorParams] | None = None,
                 cpr: int = 4096, control_hz: int = 1000, stream_hz: int = 1000, heartbeat_hz: int = 20,
                 watchdog_ms: int = 100, current_noise_a: float = 0.0, load: plant.LoadFn | None = None,
                 faults: Faults = Faults(), clock_start_us: int = 0, clock_ppm: float = 0.0, vel_window: int = 10,
                 name: str = "walklab-virtual", record: bool = False, seed: int = 0,
                 n_force: int = 0, force: Callable[[float], Sequence[float]] | None = None):
        if not 0 <= n_motors <= 32:
            raise ValueError(f"n_motors = {n_motors}: expected 0..32")
        if not abs(clock_ppm) <= 10_000:
            raise ValueError(f"clock_ppm = {clock_ppm}: expected -10000..10000 (a crystal is within ±50)")
        if n_force not in (0, 6, 8) or (n_force > 0) != (force is not None):
            raise ValueError(f"n_force = {n_force}: expected 0, or 6 / 8 together with a force(t) callback")
        if control_hz <= 0 or 1_000_000 % control_hz:
            raise ValueError(f"control_hz = {control_hz}: expected a divisor of 1 000 000 (integer µs period)")
        if stream_hz not in SUPPORTED_RATES or control_hz % stream_hz:
            raise ValueError(f"stream_hz = {stream_hz}: expected one of {SUPPORTED_RATES} dividing control_hz")
        if cpr <= 0 or watchdog_ms <= 0 or heartbeat_hz <= 0 or current_noise_a < 0 or vel_window < 1:
            raise ValueError(f"VirtualMCU: expected cpr > 0 (got {cpr}), watchdog_ms > 0 (got {watchdog_ms}), "
                             f"heartbeat_hz > 0 (got {heartbeat_hz}), current_noise_a >= 0 (got {current_noise_a}), "
                             f"vel_window >= 1 (got {vel_window})")
        params = motor if isinstance(motor, list) else [motor or plant.MotorParams()] * n_motors
        if len(params) != n_motors:
            raise ValueError(f"motor: {len(params)} MotorParams for n_motors = {n_motors}")
        self.n = n_motors
        self.n_force = n_force
        self.force = force
        self.cpr = int(cpr)
        self.control_hz = control_hz
        self.rates_hz = tuple(r for r in SUPPORTED_RATES if control_hz % r == 0)  # announced in CAPS
        self.period_us = 1_000_000 // control_hz
        self.heartbeat_hz = heartbeat_hz
        self.name = name
        self.load = load
        self.current_noise_a = current_noise_a
        self.record = record
        self.sent: dict[int, bytes] = {}
        self.transmitted: dict[int, bytes] = {}
        self.affected: set[int] = set()  # seqs the host cannot receive intact (corrupted, merged, dropped)
        self.bank = plant.MotorBank.from_params(params)
        self._rng = np.random.default_rng(seed)
        self._fault_rng = np.random.default_rng(faults.seed)
        self.faults = faults
        self._stream_every = control_hz // stream_hz
        self._hb_every = max(1, round(control_hz / heartbeat_hz))
        self.watchdog_us = watchdog_ms * 1000
        n = n_motors
        self.mode = np.zeros(n, dtype=np.int64)
        self.setpoint = np.zeros(n)
        boot = P.Config()
        self.kp = np.full(n, boot.kp)
        self.ki = np.full(n, boot.ki)
        self.kd = np.full(n, boot.kd)
        self.max_current = np.full(n, boot.max_current)
        self.max_velocity = np.full(n, boot.max_velocity)
        self._integ = np.zeros(n)
        self._count_hist = np.zeros((vel_window + 1, n), dtype=np.int64)
        self._last_counts = np.zeros(n, dtype=np.int64)
        self._last_vel = np.zeros(n)
        self.estop = False
        self.wd_tripped = False
        self.wd_armed = False
        self._t_feed = 0
        self._t0_us = clock_start_us
        self.clock_ppm = float(clock_ppm)
        self._tick = 0
        self._tx_seq = 0
        self._rx_ack = 0
        self._rx_seen = False
        self._decoder = P.StreamDecoder(on_reject=self._refuse)
        self._stats = McuStats()
        self._txq: list[tuple[float, int, bytes]] = []  # (due time, seq, wire bytes)
        self._outbuf = bytearray()
        self._merge_next = False
        self._lock = threading.RLock()
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._master = self._slave = -1
        self._dir = tempfile.mkdtemp(prefix="walklab-vmcu-")
        self.port = os.path.join(self._dir, "ttyWALKLAB0")
        self._unplugged_until: int | None = None
        self._stalled_until: int | None = None
        self._plug()
        # The UART transmitter drains the output buffer on its own, as a real board's DMA-driven UART
        # does while the firmware loop runs or waits: bytes the host was too slow to take at a tick
        # must not wait for the next tick (in lockstep use there may be none).
        self._tx_pending = threading.Event()
        self._uart = threading.Thread(target=self._uart_tx, name="virtual-mcu-uart", daemon=True)
        self._uart.start()

    # ----------------------------------------------------------------- lifetime

    def start(self) -> "VirtualMCU":
        """Start the real-time firmware loop thread (ticks paced against the monotonic clock); returns self."""
        if self._thread is not None:
            raise RuntimeError("VirtualMCU.start(): already running")
        self._thread = threading.Thread(target=self._run, name="virtual-mcu", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the loop, close the pty and remove the port path."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._tx_pending.set()
        self._uart.join(timeout=5)
        self._unplug_io()
        try:
            os.rmdir(self._dir)
        except OSError:
            pass

    def __enter__(self) -> "VirtualMCU":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self) -> McuStats:
        with self._lock:
            s = replace(self._stats, rx_errors=dict(self._decoder.errors))
            s.rx_frames = self._decoder.frames
            return s

    @property
    def t_us(self) -> int:
        """Current MCU time (µs, unwrapped)."""
        return self._t0_us + self._tick * self.period_us

    def set_faults(self, **changes) -> None:
        """Change fault injection at run time, e.g. set_faults(corrupt_rate=0.01)."""
        with self._lock:
            self.faults = replace(self.faults, **changes)

    # ----------------------------------------------------------------- the device path

    def _plug(self) -> None:
        with self._io_lock:
            m, s = os.openpty()
            tty.setraw(s)  # no echo, no CR/LF translation: a byte pipe
            os.set_blocking(m, False)
            self._master, self._slave = m, s
            tmp = self.port + ".new"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            # Point at this process's own descriptor of the slave, not at /dev/pts/N: if the process
            # dies without cleaning up (SIGKILL), the link dangles instead of leading a reconnecting
            # host into whichever program gets pty number N next (seen: another test's host frames
            # arriving in this MCU). /dev/pts/N where /proc is missing.
            fd_path = f"/proc/{os.getpid()}/fd/{s}"
            os.symlink(fd_path if os.path.exists(fd_path) else os.ttyname(s), tmp)
            os.replace(tmp, self.port)
            self._outbuf.clear()

    def _unplug_io(self) -> None:
        with self._io_lock:
            if os.path.lexists(self.port):
                os.unlink(self.port)
            for fd in (self._master, self._slave):
                if fd >= 0:
                    os.close(fd)
            self._master = self._slave = -1
            self._outbuf.clear()

    def unplug(self) -> None:
        """Simulate pulling the cable: the pty closes and the port path disappears. The firmware keeps
        running (self-powered board), so its watchdog trips when the host's frames stop."""
        with self._lock:
            self._stats.unplugs += 1
            self._txq.clear()
        self._unplug_io()

    def replug(self) -> None:
        """Plug the cable back: a new pty appears at the same port path."""
        self._plug()

    @property
    def plugged(self) -> bool:
        return self._master >= 0

    # ----------------------------------------------------------------- loop

    def _run(self) -> None:
        period_s = self.period_us * 1e-6 / (1.0 + self.clock_ppm * 1e-6)  # one tick of MCU time, on the host clock
        start = time.monotonic()
        while not self._stop.is_set():
            deadline = start + (self._tick + 1) * period_s
            now = time.monotonic()
            if now < deadline:
                time.sleep(deadline - now)
            else:
                with self._lock:
                    behind = int((now - deadline) / period_s)
                    self._stats.max_catch_up_ticks = max(self._stats.max_catch_up_ticks, behind)
            with self._lock:
                self._step()

    @property
    def running(self) -> bool:
        """True while the real-time loop thread started by `start` runs (False if it died or stopped)."""
        return self._thread is not None and self._thread.is_alive()

    def step(self, ticks: int = 1) -> None:
        """Run `ticks` control ticks now, without pacing (lockstep use, e.g. with a simulator; only
        when the real-time thread was not started)."""
        if self._thread is not None:
            raise RuntimeError("VirtualMCU.step(): the real-time loop is running; use one or the other")
        with self._lock:
            for _ in range(ticks):
                self._step()

    def wait_rx(self, timeout_s: float = 5.0) -> bool:
        """Block until host bytes are waiting on the pty (True) or timeout_s passes (False). Lockstep
        use: a pty hands written bytes over asynchronously, so a frame just sent may not yet be
        readable at the next step(); waiting here makes the tick that handles it deterministic."""
        fd = self._master
        if fd < 0:
            return False
        return bool(select.select([fd], [], [], timeout_s)[0])

    def _step(self) -> None:
        if self._tick == 0:
            self._send(P.Log(20, f"{self.name}: firmware {'.'.join(map(str, FIRMWARE))} up, {self.n} motors"))
        self._tick += 1
        t = self.t_us
        self._stats.ticks = self._tick
        self._stats.t_us = t
        f = self.faults
        if f.unplug_at_s is not None and self.plugged and self._unplugged_until is None \
                and t - self._t0_us >= f.unplug_at_s * 1e6:
            self.faults = replace(f, unplug_at_s=None)
            self._unplugged_until = t + int(f.unplug_for_s * 1e6)
            self._stats.unplugs += 1
            self._txq.clear()
            self._unplug_io()
        if self._unplugged_until is not None and t >= self._unplugged_until:
            self._unplugged_until = None
            self._plug()
        if f.stall_at_s is not None and self._stalled_until is None and t - self._t0_us >= f.stall_at_s * 1e6:
            self.faults = replace(self.faults, stall_at_s=None)
            self._stalled_until = t + int(f.stall_for_s * 1e6)
            self._stats.stalls += 1
        received = self._read()
        if self._stalled_until is not None:
            if t < self._stalled_until:
                self._stats.rx_stalled_bytes += len(received)
                received = b""
            else:
                self._stalled_until = None
        data, hit = self._corrupt(received, f.rx_corrupt_rate)
        if hit is not None:
            self._stats.rx_corrupted_bytes += int(hit.sum())
        for frame in self._decoder.feed(data):
            if self._rx_seen:
                gap = P.seq_gap(self._rx_ack, frame.seq)
                self._stats.rx_lost += gap if gap < 0x8000 else 0
            self._rx_seen = True
            self._rx_ack = frame.seq
            self._handle(frame, t)
        if self.wd_armed and not self.wd_tripped and t - self._t_feed >= self.watchdog_us:
            self.wd_tripped = True
            self._stats.watchdog_trips += 1
            self._torque_off()
            self._send(P.Log(40, f"watchdog: no COMMAND/HEARTBEAT for {(t - self._t_feed) / 1000:.0f} ms, torque off"))
        flags = self._control(t)
        if self._tick % self._stream_every == 0:
            if self.n:
                self._send(P.State(self._motor_states(flags)))
            if self.n_force:
                ch = tuple(float(c) for c in self.force(t * 1e-6))
                if len(ch) != self.n_force:
                    raise ValueError(f"VirtualMCU force(t) returned {len(ch)} channels, expected {self.n_force}")
                self._send(P.Force(ch))
        if self._tick % self._hb_every == 0:
            self._send(P.Heartbeat(self._status()))
        self._flush()

    def _status(self) -> int:
        return (P.STATUS_ESTOP * self.estop) | (P.STATUS_WATCHDOG * self.wd_tripped) | (P.STATUS_ARMED * self.wd_armed)

    def _torque_off(self) -> None:
        self.mode[:] = P.MODE_IDLE
        self.setpoint[:] = 0.0
        self._integ[:] = 0.0

    # ----------------------------------------------------------------- frames in

    def _read(self) -> bytes:
        with self._io_lock:
            if self._master < 0:
                return b""
            chunks = []
            while True:
                try:
                    data = os.read(self._master, 65536)
                except BlockingIOError:
                    break
                except OSError as exc:  # EIO: no slave open; nothing to read
                    if exc.errno != errno.EIO:
                        raise
                    break
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks)

    def _refuse(self, reason: str, raw: bytes) -> None:
        """NACK a well-framed host frame the firmware cannot use: unknown type, or a payload whose
        size does not fit its type (docs/protocol.md, "NACK errors")."""
        if reason in ("type", "payload"):
            seq = int.from_bytes(raw[2:4], "little")
            self._send(P.Nack(seq, raw[1], P.ERR_UNKNOWN_TYPE if reason == "type" else P.ERR_BAD_LENGTH))

    def _corrupt(self, data: bytes, rate: float) -> tuple[bytes, np.ndarray | None]:
        """`data` with each byte, with probability `rate`, XORed by a random non-zero byte; and the
        mask of the bytes hit (None if none was)."""
        if not rate or not data:
            return data, None
        hit = self._fault_rng.random(len(data)) < rate
        if not hit.any():
            return data, None
        arr = np.frombuffer(data, dtype=np.uint8).copy()
        arr[hit] ^= self._fault_rng.integers(1, 256, int(hit.sum()), dtype=np.uint8)
        return arr.tobytes(), hit

    def _reply(self, frame: P.Frame, error: int = 0) -> None:
        self._send(P.Nack(frame.seq, frame.type, error) if error else P.Ack(frame.seq, frame.type))

    def _handle(self, frame: P.Frame, t: int) -> None:
        msg = frame.msg
        if isinstance(msg, P.Hello):
            self._send(P.Caps(FIRMWARE, (self.cpr,) * self.n, self.n_force, self.heartbeat_hz, self.rates_hz,
                              self.name))
        elif isinstance(msg, P.Heartbeat):
            self._t_feed = t
        elif isinstance(msg, P.Command):
            if len(msg.motors) != self.n:
                self._reply(frame, P.ERR_BAD_LENGTH)
                return
            if any(m.mode not in P.MODE_NAMES or not math.isfinite(m.setpoint) for m in msg.motors):
                self._reply(frame, P.ERR_BAD_VALUE)
                return
            self._t_feed = t
            self.wd_armed = True
            if self.estop or self.wd_tripped:
                return  # latched: commands feed nothing but the watchdog until RESET
            new_mode = np.array([m.mode for m in msg.motors])
            self._integ[new_mode != self.mode] = 0.0
            self.mode[:] = new_mode
            self.setpoint[:] = [m.setpoint for m in msg.motors]
        elif isinstance(msg, P.Config):
            self._configure(frame, msg)
        elif isinstance(msg, P.Estop):
            self.estop = True
            self._stats.estops += 1
            self._torque_off()
            self._reply(frame)
            self._send(P.Log(40, f"e-stop latched (reason {msg.reason})"))
        elif isinstance(msg, P.Reset):
            self.estop = self.wd_tripped = self.wd_armed = False
            self._torque_off()
            self._reply(frame)
        else:
            self._reply(frame, P.ERR_UNKNOWN_TYPE)

    def _configure(self, frame: P.Frame, c: P.Config) -> None:
        if c.motor != 0xFF and c.motor >= self.n:
            self._reply(frame, P.ERR_BAD_MOTOR)
            return
        values = (c.kp, c.ki, c.kd, c.max_current, c.max_velocity)
        if not all(math.isfinite(v) and v >= 0 for v in values) or \
                (c.stream_hz and c.stream_hz not in self.rates_hz):
            self._reply(frame, P.ERR_BAD_VALUE)
            return
        sel = slice(None) if c.motor == 0xFF else c.motor
        self.kp[sel], self.ki[sel], self.kd[sel] = c.kp, c.ki, c.kd
        self.max_current[sel], self.max_velocity[sel] = c.max_current, c.max_velocity
        if c.watchdog_ms:
            self.watchdog_us = c.watchdog_ms * 1000
        if c.stream_hz:
            self._stream_every = self.control_hz // c.stream_hz
        self._reply(frame)

    # ----------------------------------------------------------------- control and plant

    def _control(self, t: int) -> np.ndarray:
        b = self.bank
        dt = self.period_us * 1e-6
        counts = np.floor(b.theta * (self.cpr / (2 * math.pi))).astype(np.int64)
        w = len(self._count_hist) - 1  # ring of the last w + 1 count samples
        slot = self._tick % (w + 1)
        if self._tick <= 1:  # the first reading fills the window: no count before it (a motor may start anywhere)
            self._count_hist[:] = counts
        self._count_hist[slot] = counts
        vel_cps = (counts - self._count_hist[(slot + 1) % (w + 1)]) / (w * dt)
        theta_meas = counts * (2 * math.pi / self.cpr)
        omega_meas = vel_cps * (2 * math.pi / self.cpr)
        mode = self.mode
        enabled = (mode != P.MODE_IDLE) & (not self.estop) & (not self.wd_tripped)
        sp = self.setpoint
        sp_vel = np.clip(sp, -self.max_velocity, self.max_velocity)
        err = np.where(mode == P.MODE_VELOCITY, sp_vel - omega_meas,
                       np.where(mode == P.MODE_POSITION, sp - theta_meas, 0.0))
        self._integ = np.where(enabled, self._integ + err * dt, 0.0)
        tau = np.where(mode == P.MODE_TORQUE, sp, self.kp * err + self.ki * self._integ)
        tau = tau - np.where(mode == P.MODE_POSITION, self.kd * omega_meas, 0.0)
        i_ref = np.where(enabled, tau / (b.Kt * b.gear), 0.0)
        limited = np.abs(i_ref) > self.max_current
        i_ref = np.clip(i_ref, -self.max_current, self.max_current)
        v = b.R * i_ref + b.Ke * b.w_m + (b.L / dt) * (i_ref - b.i)
        plant.step(b, np.where(enabled, v, 0.0), enabled, t * 1e-6, dt, self.load)
        self._last_counts = counts
        self._last_vel = vel_cps
        flags = (P.FLAG_ENABLED * enabled) | (P.FLAG_CURRENT_LIMIT * (limited & enabled)) | (mode << P.MODE_SHIFT)
        flags |= P.FLAG_WATCHDOG * self.wd_tripped | P.FLAG_ESTOP * self.estop
        return flags

    def _motor_states(self, flags: np.ndarray) -> tuple[P.MotorState, ...]:
        count32 = ((self._last_counts + (1 << 31)) % (1 << 32)) - (1 << 31)
        vel = np.rint(self._last_vel / P.VEL_LSB_CPS)
        sat = np.abs(vel) > 32767
        vel = np.clip(vel, -32767, 32767).astype(np.int64)
        cur = self.bank.i
        if self.current_noise_a:
            cur = cur + self._rng.normal(0.0, self.current_noise_a, self.n)
        cur_ma = np.clip(np.rint(cur / P.CUR_LSB_A), -32767, 32767).astype(np.int64)
        fl = flags | (P.FLAG_VEL_SATURATED * sat)
        return tuple(P.MotorState(int(c), int(v), int(i), int(f)) for c, v, i, f in zip(count32, vel, cur_ma, fl))

    # ----------------------------------------------------------------- frames out

    def _send(self, msg: P.Message) -> None:
        seq = self._tx_seq
        self._tx_seq = (seq + 1) & 0xFFFF
        wire = P.encode_frame(msg, seq, self._rx_ack, self.t_us)
        f = self.faults
        if self.record:
            self.sent[seq] = wire
        if self._merge_next:
            self.affected.add(seq)
            self._merge_next = False
        if f.drop_rate and self._fault_rng.random() < f.drop_rate:
            self._stats.dropped_frames += 1
            self.affected.add(seq)
            return
        wire, hit = self._corrupt(wire, f.corrupt_rate)
        if hit is not None:
            self._stats.corrupted_frames += 1
            self.affected.add(seq)
            if hit[-1]:  # the delimiter is gone: the next frame merges into this one
                self._merge_next = True
        if not self.plugged:
            return
        self._txq.append((time.monotonic() + f.delay_s, seq, wire))

    def _flush(self) -> None:
        now = time.monotonic()
        due = 0
        while due < len(self._txq) and self._txq[due][0] <= now:
            due += 1
        for _, seq, wire in self._txq[:due]:
            if len(self._outbuf) + len(wire) > TX_BUFFER_LIMIT:
                self._stats.tx_overflow += 1
                continue
            with self._io_lock:  # the transmitter thread may be inside os.write(_outbuf): no resize then
                self._outbuf += wire
            if self.record:
                self.transmitted[seq] = wire
            self._stats.tx_frames += 1
            self._stats.tx_bytes += len(wire)
        del self._txq[:due]
        if not self._write_out():
            self._tx_pending.set()

    def _write_out(self) -> bool:
        """Write what the pty takes now, without blocking; True when nothing is left to send."""
        with self._io_lock:
            if self._master < 0 or not self._outbuf:
                return True
            try:
                n = os.write(self._master, self._outbuf)
            except BlockingIOError:
                return False
            except OSError:  # the pty went away under us (unplug in progress)
                return True
            del self._outbuf[:n]
            return not self._outbuf

    def _uart_tx(self) -> None:
        """Transmitter thread: whenever bytes are left over, wait until the pty has room and write them."""
        while not self._stop.is_set():
            self._tx_pending.wait()
            self._tx_pending.clear()
            while not self._stop.is_set() and not self._write_out():
                fd = self._master
                try:
                    select.select([], [fd], [], 0.05) if fd >= 0 else self._stop.wait(0.05)
                except (OSError, ValueError):  # closed by an unplug between the read of fd and select
                    self._stop.wait(0.05)


PROG = "python -m firmware_bridge.virtual"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`PROG: error: ...`, exit 2), as the walklab commands print them."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _check_args(a: argparse.Namespace) -> None:
    """Raise ValueError naming the first option whose value the virtual MCU cannot run with."""
    def finite(x: float | None) -> bool:
        return x is None or math.isfinite(x)

    checks = [
        (0 <= a.motors <= 32, f"--motors {a.motors}: expected 0..32"),
        (0 < a.cpr < 2**32, f"--cpr {a.cpr}: expected 1..{2**32 - 1} counts per revolution"),
        (a.control_hz > 0 and 1_000_000 % a.control_hz == 0,
         f"--control-hz {a.control_hz}: expected a divisor of 1 000 000 (an integer µs period)"),
        (a.stream_hz in SUPPORTED_RATES and a.control_hz % a.stream_hz == 0,
         f"--stream-hz {a.stream_hz}: expected one of {', '.join(map(str, SUPPORTED_RATES))} "
         f"dividing --control-hz {a.control_hz}"),
        (0 < a.heartbeat_hz <= 0xFFFF, f"--heartbeat-hz {a.heartbeat_hz}: expected 1..65535"),
        (0 < a.watchdog_ms <= 0xFFFF, f"--watchdog-ms {a.watchdog_ms}: expected 1..65535"),
        (0 <= a.current_noise_a < math.inf, f"--current-noise-a {a.current_noise_a}: expected a finite value >= 0 A"),
        (0 < len(a.name.encode()) <= 255, f"--name {a.name!r}: expected 1..255 bytes of UTF-8"),
    ]
    for flag in ("drop_rate", "corrupt_rate", "rx_corrupt_rate"):
        v = getattr(a, flag)
        checks.append((0.0 <= v <= 1.0, f"--{flag.replace('_', '-')} {v}: expected a probability in [0, 1]"))
    for flag in ("delay_s", "unplug_at_s", "unplug_for_s", "stall_at_s", "stall_for_s"):
        v = getattr(a, flag)
        checks.append((finite(v) and (v is None or v >= 0),
                       f"--{flag.replace('_', '-')} {v}: expected a finite time >= 0 s"))
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def _counters(mcu: VirtualMCU) -> str:
    """The MCU's counters (McuStats), one `name value` line each; per-reason dicts as name/reason."""
    lines = []
    for key, value in vars(mcu.stats).items():
        if isinstance(value, dict):
            lines.append(f"{key} {sum(value.values())}")
            lines += [f"{key}/{reason} {n}" for reason, n in sorted(value.items())]
        else:
            lines.append(f"{key} {value}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m firmware_bridge.virtual`: run a virtual MCU in real time, print its port path (first
    line of stdout), inject the faults asked for, and on SIGTERM/SIGINT stop and print its counters."""
    ap = _Parser(prog=PROG, description=main.__doc__, allow_abbrev=False)
    ap.add_argument("--motors", type=int, default=8, help="motors (0..32)")
    ap.add_argument("--cpr", type=int, default=4096, help="encoder counts per output revolution")
    ap.add_argument("--control-hz", type=int, default=1000, help="control loop rate")
    ap.add_argument("--stream-hz", type=int, default=1000, help=f"STATE rate at boot: one of {SUPPORTED_RATES}")
    ap.add_argument("--heartbeat-hz", type=int, default=20, help="MCU heartbeat rate")
    ap.add_argument("--watchdog-ms", type=int, default=100, help="boot watchdog timeout (CONFIG overrides it)")
    ap.add_argument("--current-noise-a", type=float, default=0.0, help="current measurement noise sigma, A")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault injection and of the noise")
    ap.add_argument("--clock-ppm", type=float, default=0.0,
                    help="rate error of the MCU clock, ppm (+: fast; a crystal is within ±50)")
    ap.add_argument("--name", default="walklab-virtual", help="device name announced in CAPS")
    g = ap.add_argument_group("fault injection (MCU time counts from start; MCU -> host unless rx)")
    g.add_argument("--drop-rate", type=float, default=0.0, help="probability per frame of not sending it")
    g.add_argument("--corrupt-rate", type=float, default=0.0, help="probability per sent byte of corrupting it")
    g.add_argument("--rx-corrupt-rate", type=float, default=0.0, help="the same on the bytes received from the host")
    g.add_argument("--delay-s", type=float, default=0.0, help="latency added to every sent frame, s")
    g.add_argument("--unplug-at-s", type=float, default=None, help="unplug the port at this MCU time, s")
    g.add_argument("--unplug-for-s", type=float, default=0.3, help="and replug it after this long, s")
    g.add_argument("--stall-at-s", type=float, default=None,
                   help="from this MCU time, lose the host's frames (a stalled host: trips the watchdog)")
    g.add_argument("--stall-for-s", type=float, default=0.3, help="for this long, s")
    args = ap.parse_args(argv)
    try:
        _check_args(args)
    except ValueError as exc:
        ap.error(str(exc))
    faults = Faults(corrupt_rate=args.corrupt_rate, drop_rate=args.drop_rate, delay_s=args.delay_s,
                    unplug_at_s=args.unplug_at_s, unplug_for_s=args.unplug_for_s, seed=args.seed,
                    rx_corrupt_rate=args.rx_corrupt_rate, stall_at_s=args.stall_at_s, stall_for_s=args.stall_for_s)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        mcu = VirtualMCU(args.motors, cpr=args.cpr, control_hz=args.control_hz, stream_hz=args.stream_hz,
                         heartbeat_hz=args.heartbeat_hz, watchdog_ms=args.watchdog_ms,
                         current_noise_a=args.current_noise_a, faults=faults, name=args.name, seed=args.seed,
                         clock_ppm=args.clock_ppm)
    except (ValueError, OSError) as exc:
        ap.error(str(exc))
    with mcu:
        print(mcu.port, flush=True)
        stop.wait()
    try:
        print(f"{args.name}: stopped at MCU time {mcu.stats.t_us * 1e-6:.3f} s; counters:", flush=True)
        print(_counters(mcu), flush=True)
    except BrokenPipeError:  # the reader of stdout left first (e.g. `| head -1`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
