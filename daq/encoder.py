"""Encoder daemon: the MCU's serial link on one side, ``encoder/<motor>`` streams and commands on the bus.

The process (``run(ctx, args)``, see `daq.context`) serves the one ``kind = "mcu"`` device in
its ``devices`` (`controller.config.Mcu`: ``port``, ``baud``, ``watchdog_ms``, ``motors``). It
opens that port with the host link (`firmware_bridge.link.Link`: reader thread, heartbeats,
requests with retry, reconnection), and for every connection (a *session*):

1. HELLO -> CAPS; the MCU's motor count must equal the device's ``motors``;
2. CONFIG (gains, limits, the device's ``watchdog_ms``, STATE rate ``--stream-hz``) to every
   motor, then RESET (the watchdog of a device that lost its host is latched: docs/protocol.md,
   Reconnection);
3. COMMAND at ``--command-hz`` with the current setpoints (default: ``--mode``/``--setpoint`` on
   every motor, e.g. hold the crank at 2π rad/s so a walker walks with no controller running),
   which feeds the MCU watchdog.

STATE frames become SI samples (`firmware_bridge.telemetry.StateUnwrapper`: angle rad unwrapped,
velocity rad/s, current A, device time µs unwrapped to ns) published per motor on
``encoder/<name>`` (kind ``"encoder"``, channels ``angle, velocity, current``, units
``rad, rad/s, A``) in blocks of ``--block`` samples, plus the raw flags as extra buffer
``flags`` (uint8, (samples,)). Stamps of sample 0: ``t_device`` (MCU clock, ns), ``t_host``
(host monotonic ns when the daemon took the STATE off the link) and ``t`` =
`daq.clock.ClockSync` mapping of ``t_device`` (one estimate per session: a reconnected MCU may
have rebooted). Sample i of a block is at ``t + i·1e9/rate_lab_hz`` (`Frame.sample_times`), with
``meta["rate_lab_hz"]`` = the STATE rate on the lab clock, ``rate_hz / (1 + drift)`` from the same
fit (`ClockSync.lab_rate_hz`: a crystal 50 ppm off moves a 1 s block's last sample by 50 µs); a
block never spans missing samples. A STATE whose device time is not the next sample time (a lost frame) closes the block;
the missing samples are counted (``encoder/<name>/samples_lost``), never hidden. STATE frames that
arrive before the session's CONFIG is acknowledged (at the boot rate) are counted as
``link/discarded`` and not published.

Commands: frames of ``controller/command`` (kind ``"command"``) carry one column per motor they
set (channel = motor name), the unit giving the mode: ``rad/s`` velocity, ``rad`` position,
``N*m`` torque, ``1`` idle (value ignored); the last row applies at once. A frame naming an
unknown motor or unit is rejected whole (counted in ``command/rejected``, logged: the first at once,
then at most a line a second with the count since the last, `daq.logthrottle`; so is a STATE whose
device time goes back).

Health (``health/NAME``, counters total and per second): ``link/<counter>`` from `LinkStats`
(crc_failures, rejected, lost_frames, gap_events, disconnects, reconnects, timeouts, retries,
tx_failed, queue_overflow), ``link/sessions``, ``link/open_failures``, ``command/received``,
``command/rejected``, ``command/sent``, ``encoder/<name>/samples_lost``, ``link/discarded``
(STATE frames not published: before the session's CONFIG is acknowledged, or drained after a
disconnect without continuing the old session's sample clock); the health state is
``connecting``, ``running`` or ``disconnected``.

``args`` (the daemon's own settings; what the device is comes from its config section):
``--stream-hz`` (500), ``--block`` (10), ``--mode`` (velocity), ``--setpoint`` (6.283185 rad/s),
``--kp`` (2.0), ``--ki`` (20.0), ``--kd`` (0.0), ``--max-current`` (5.0 A), ``--max-velocity``
(50 rad/s), ``--command-hz`` (50), ``--clock-bin-s`` (1.0), ``--reset-on-latch`` (off: RESET an MCU whose
watchdog latched while connected, at most once a second, never an e-stop; for simulated robots,
whose Python firmware loop can stall on a loaded machine; counted in ``mcu/resets``).
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from daq.clock import ClockSync
from daq.context import ProcessContext
from daq.logthrottle import LogThrottle
from firmware_bridge import protocol as P
from firmware_bridge.link import Link, LinkError, NackError
from firmware_bridge.telemetry import StateUnwrapper

if TYPE_CHECKING:  # typing only: daq never imports controller at run time
    from controller.config import Mcu

log = logging.getLogger("walklab.encoder")

COMMAND_STREAM = "controller/command"
CHANNELS = ("angle", "velocity", "current")
UNITS = ("rad", "rad/s", "A")
MODE_OF_UNIT = {"rad/s": P.MODE_VELOCITY, "rad": P.MODE_POSITION, "N*m": P.MODE_TORQUE, "1": P.MODE_IDLE}
MODES = {"idle": P.MODE_IDLE, "velocity": P.MODE_VELOCITY, "position": P.MODE_POSITION, "torque": P.MODE_TORQUE}
_LINK_COUNTERS = ("lost_frames", "gap_events", "disconnects", "reconnects", "timeouts", "retries", "tx_failed",
                  "queue_overflow")


class CommandError(ValueError):
    """A ``controller/command`` frame the daemon cannot apply (names the motor, unit or shape)."""


def command_setpoints(frame: Any, motors: Sequence[str]) -> dict[int, tuple[int, float]]:
    """{motor index: (mode, setpoint SI)} from the last row of a ``controller/command`` frame.

    Raises CommandError for an unknown motor name or unit, a non-finite value or an empty frame.
    """
    if frame.data.ndim != 2 or frame.data.shape[0] < 1:
        raise CommandError(f"{frame.stream}: data shape {frame.data.shape}: expected at least one row")
    out = {}
    row = frame.data[-1]
    for ch, unit, value in zip(frame.channels, frame.units, row.tolist()):
        if ch not in motors:
            raise CommandError(f"{frame.stream}: channel {ch!r} is not a motor of this MCU ({', '.join(motors)})")
        if unit not in MODE_OF_UNIT:
            raise CommandError(f"{frame.stream}: channel {ch!r} unit {unit!r}: expected one of {sorted(MODE_OF_UNIT)}")
        if not np.isfinite(value):
            raise CommandError(f"{frame.stream}: channel {ch!r} setpoint {value!r} is not finite")
        out[motors.index(ch)] = (MODE_OF_UNIT[unit], float(value))
    return out


@dataclass
class Block:
    """Samples of one motor waiting to be published (time-contiguous, one session)."""

    t_device: list[int] = field(default_factory=list)
    t_host: list[int] = field(default_factory=list)
    rows: list[tuple[float, float, float]] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)


class EncoderDaemon:
    """State of the daemon between loop iterations (one per process; the link lives across sessions)."""

    def __init__(self, ctx: ProcessContext, opts: argparse.Namespace, mcu: Mcu) -> None:
        self.ctx = ctx
        self.opts = opts
        self.mcu = mcu
        self.motors = list(mcu.motors)
        self.period_ns = round(1e9 / opts.stream_hz)
        self.modes = [MODES[opts.mode]] * len(self.motors)
        self.setpoints = [float(opts.setpoint)] * len(self.motors)
        self.link: Link | None = None
        self.session = 0
        self.session_seen = (-1, -1)  # (disconnects, reconnects) at the last session start
        self.ready = False  # the session is set up (HELLO, CONFIG, RESET answered)
        self.config_ack: int | None = None  # seq of our CONFIG request whose ACK opens the stream
        self.accepting = False  # STATE is published (after that ACK, until the session ends)
        self.open_logged = False
        self.unwrap: StateUnwrapper | None = None
        self.clock = ClockSync(bin_s=opts.clock_bin_s)
        self.blocks = [Block() for _ in self.motors]
        self.next_t: int | None = None
        self.reported: dict[str, int] = {}
        self.next_command = 0
        self.next_report = 0
        self.next_reset = 0
        # faults a bad link or a bad command publisher repeats on every frame: a line a second at most
        self.time_log = LogThrottle(log)
        self.command_log = LogThrottle(log)

    # ---------------------------------------------------------------- health

    def count_total(self, subject: str, total: int) -> None:
        """Report a cumulative counter through `Health.count` (which takes increments)."""
        self.ctx.health.count(subject, total - self.reported.get(subject, 0))
        self.reported[subject] = total

    def report_link(self) -> None:
        st = self.link.stats
        for key in _LINK_COUNTERS:
            self.count_total(f"link/{key}", getattr(st, key))
        self.count_total("link/crc_failures", sum(st.crc_failures.values()))
        self.count_total("link/rejected", sum(st.rejected.values()))

    # ---------------------------------------------------------------- sessions

    def connect(self) -> bool:
        """Open the port once (the link reconnects by itself afterwards); False if it is not there yet."""
        link = Link(self.mcu.port, baudrate=self.mcu.baud, heartbeat_hz=20.0, liveness_s=0.2)
        try:
            link.open()
        except LinkError as exc:
            self.ctx.health.count("link/open_failures")
            if not self.open_logged:
                log.info("%s; retrying", exc)
                self.open_logged = True
            return False
        self.link = link
        return True

    def start_session(self) -> None:
        """HELLO, CONFIG, RESET on a freshly (re)opened port; raises LinkError/NackError/ValueError."""
        link = self.link
        self.flush_all()
        self.accepting = False
        caps = link.wait_caps(timeout_s=2.0)  # after a reconnect the link has sent HELLO itself
        if caps.n_motors != len(self.motors):
            raise ValueError(f"{self.mcu.port}: the MCU {caps.name!r} has {caps.n_motors} motor(s), "
                             f"devices.{self.mcu.name}.motors names {len(self.motors)} ({','.join(self.motors)})")
        if self.opts.stream_hz not in caps.rates_hz:
            raise ValueError(f"--stream-hz {self.opts.stream_hz}: the MCU {caps.name!r} supports {list(caps.rates_hz)}")
        o = self.opts
        ack = link.request(P.Config(0xFF, o.kp, o.ki, o.kd, o.max_current, o.max_velocity,
                                    self.mcu.watchdog_ms, o.stream_hz))
        link.request(P.Reset())
        self.config_ack = ack.seq
        self.unwrap = StateUnwrapper(caps.cpr)
        self.clock = ClockSync(bin_s=o.clock_bin_s)
        self.next_t = None
        self.session += 1
        self.ctx.health.count("link/sessions")
        self.send_command()
        log.info("session %d: %s firmware %s, %d motor(s) (%s), STATE at %d Hz", self.session, caps.name,
                 ".".join(map(str, caps.firmware)), caps.n_motors, ",".join(self.motors), o.stream_hz)

    def send_command(self) -> None:
        self.link.send(P.Command(tuple(P.MotorCommand(m, s) for m, s in zip(self.modes, self.setpoints))))
        self.ctx.health.count("command/sent")
        self.next_command = time.monotonic_ns() + round(1e9 / self.opts.command_hz)

    # ---------------------------------------------------------------- samples

    def flush(self, k: int) -> None:
        b = self.blocks[k]
        if not b.rows:
            return
        t_dev = b.t_device[0]
        self.ctx.publisher.publish(
            f"encoder/{self.motors[k]}", np.array(b.rows, dtype=np.float64), kind="encoder",
            rate_hz=float(self.opts.stream_hz), channels=CHANNELS, units=UNITS, t_device=t_dev,
            t_host=b.t_host[0], t=int(self.clock.to_lab(t_dev)),
            extra={"flags": np.array(b.flags, dtype=np.uint8)},
            meta={"session": self.session, "rate_lab_hz": self.clock.lab_rate_hz(float(self.opts.stream_hz))})
        self.blocks[k] = Block()

    def flush_all(self) -> None:
        for k in range(len(self.motors)):
            self.flush(k)

    def on_state(self, frame: P.Frame, t_host: int, ending: bool = False) -> None:
        """Add one STATE to the blocks. `ending`: frames drained after the link dropped; those not
        continuing the session's sample clock (a new connection's) are discarded, not unwrapped."""
        if ending and self.accepting and (self.next_t is None or
                                         P.unwrap(self.next_t // 1000, frame.t_us, 32) * 1000 != self.next_t):
            self.accepting = False
        if not self.accepting:
            self.ctx.health.count("link/discarded")
            return
        s = self.unwrap(frame)
        if self.next_t is not None and s.t_ns != self.next_t:
            lost = round((s.t_ns - self.next_t) / self.period_ns)
            self.flush_all()  # sample times inside a block come from sample counts: never across a gap
            if lost > 0:
                for name in self.motors:
                    self.ctx.health.count(f"encoder/{name}/samples_lost", lost)
            else:
                self.time_log.log("STATE seq %d: device time %d ns, expected %d ns", frame.seq, s.t_ns, self.next_t)
        self.next_t = s.t_ns + self.period_ns
        self.clock.update(s.t_ns, t_host)
        for k, b in enumerate(self.blocks):
            b.t_device.append(s.t_ns)
            b.t_host.append(t_host)
            b.rows.append((float(s.theta[k]), float(s.omega[k]), float(s.current[k])))
            b.flags.append(int(s.flags[k]))
            if len(b.rows) >= self.opts.block:
                self.flush(k)

    def end_session(self) -> None:
        """The port dropped: publish what the old session still holds, discard the rest (counted)."""
        t_host = time.monotonic_ns()
        for f in self.link.drain():
            if isinstance(f.msg, P.State):
                self.on_state(f, t_host, ending=True)
            else:
                self.on_frame(f, t_host)
        self.flush_all()
        self.accepting = False
        self.ready = False

    def on_frame(self, frame: P.Frame, t_host: int) -> None:
        msg = frame.msg
        if isinstance(msg, P.State):
            self.on_state(frame, t_host)
        elif isinstance(msg, P.Ack) and msg.type == P.Config.TYPE and msg.seq == self.config_ack:
            self.accepting = True  # STATE after this ACK is at the configured rate
        elif isinstance(msg, P.Log):
            log.log(msg.level, "MCU: %s", msg.text)
        elif isinstance(msg, P.Heartbeat) and msg.status & (P.STATUS_WATCHDOG | P.STATUS_ESTOP):
            self.ctx.health.count("mcu/latched_heartbeats")
            if self.opts.reset_on_latch and msg.status == P.STATUS_WATCHDOG | P.STATUS_ARMED \
                    and t_host >= self.next_reset:
                # sim only: a stalled host tripped the watchdog; an e-stop is never cleared here
                self.next_reset = t_host + 1_000_000_000
                log.warning("MCU watchdog latched; --reset-on-latch: RESET")
                try:
                    self.link.request(P.Reset())
                except (LinkError, NackError) as exc:  # the link dropped meanwhile: a new session resets
                    log.warning("RESET failed: %s", exc)
                    return
                self.ctx.health.count("mcu/resets")
                self.send_command()

    # ---------------------------------------------------------------- commands from the bus

    def on_command(self, frame: Any) -> None:
        try:
            new = command_setpoints(frame, self.motors)
        except CommandError as exc:
            self.ctx.health.count("command/rejected")
            self.command_log.log("%s", exc)
            return
        self.ctx.health.count("command/received")
        for k, (mode, value) in new.items():
            self.modes[k], self.setpoints[k] = mode, value
        if self.ready:
            self.send_command()

    # ---------------------------------------------------------------- loop

    def step(self, commands: Any) -> None:
        """One loop iteration: (re)connect, take link frames, apply bus commands, send COMMAND, report."""
        ctx = self.ctx
        while (frame := commands.recv(timeout_s=0)) is not None:
            self.on_command(frame)
        if self.link is None:
            ctx.health.state = "connecting"
            if not self.connect():
                ctx.sleep_until(time.monotonic_ns() + 100_000_000)
                return
        link = self.link
        st = link.stats
        seen = (st.disconnects, st.reconnects)
        if seen != self.session_seen:  # first open, or the port went away (and maybe came back)
            if self.ready:
                log.warning("lost %s (disconnects %d, reconnects %d)", self.mcu.port, *seen)
                self.end_session()
            if not link.connected.is_set():
                ctx.health.state = "disconnected"
                self.report_link()
                ctx.sleep_until(time.monotonic_ns() + 20_000_000)
                return
            try:
                self.start_session()
            except (LinkError, NackError) as exc:
                log.warning("session set-up on %s failed: %s; retrying", self.mcu.port, exc)
                ctx.sleep_until(time.monotonic_ns() + 200_000_000)
                return
            self.session_seen = seen
            self.ready = True
            ctx.health.state = "running"
        frame = link.recv(timeout_s=0.01)
        if frame is not None:
            time.sleep(0.005)  # let a few frames gather: one pass per batch, not per STATE
            t_host = time.monotonic_ns()
            for f in [frame] + link.drain():
                self.on_frame(f, t_host)
        now = time.monotonic_ns()
        if now >= self.next_command:
            self.send_command()
        if now >= self.next_report:
            self.next_report = now + 100_000_000
            self.report_link()
        ctx.health.tick()
        ctx.publisher.poll_subscriptions()

    def close(self) -> None:
        if self.link is not None:
            self.flush_all()
            self.link.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="daq.encoder", description="encoder/MCU daemon")
    p.add_argument("--stream-hz", type=int, default=500, help="STATE rate asked with CONFIG")
    p.add_argument("--block", type=int, default=10, help="samples per encoder frame")
    p.add_argument("--mode", choices=sorted(MODES), default="velocity", help="default command mode")
    p.add_argument("--setpoint", type=float, default=6.283185307179586, help="default setpoint (SI of the mode)")
    p.add_argument("--kp", type=float, default=2.0)
    p.add_argument("--ki", type=float, default=20.0)
    p.add_argument("--kd", type=float, default=0.0)
    p.add_argument("--max-current", type=float, default=5.0, help="A")
    p.add_argument("--max-velocity", type=float, default=50.0, help="rad/s")
    p.add_argument("--command-hz", type=float, default=50.0, help="COMMAND resend rate (feeds the watchdog)")
    p.add_argument("--clock-bin-s", type=float, default=1.0, help="ClockSync window, s")
    p.add_argument("--reset-on-latch", action="store_true",
                   help="RESET an MCU whose watchdog latched (never an e-stop); for simulated robots only")
    return p


def parse_args(name: str, args: Sequence[str]) -> argparse.Namespace:
    """Parsed and checked ``args`` (ValueError naming the option and the expected value)."""
    o = _parser().parse_args(list(args))
    problems = []
    if o.block < 1:
        problems.append(f"--block {o.block}: expected >= 1")
    if not 0 < o.stream_hz <= 65535:
        problems.append(f"--stream-hz {o.stream_hz}: expected 1..65535 (one of the MCU's rates)")
    if not (o.command_hz > 0 and o.clock_bin_s > 0):
        problems.append(f"--command-hz {o.command_hz} and --clock-bin-s {o.clock_bin_s}: expected > 0")
    if not all(np.isfinite(v) and v >= 0 for v in (o.kp, o.ki, o.kd, o.max_current, o.max_velocity)):
        problems.append("--kp/--ki/--kd/--max-current/--max-velocity: expected finite values >= 0")
    if not np.isfinite(o.setpoint):
        problems.append(f"--setpoint {o.setpoint}: expected a finite number")
    if problems:
        raise ValueError(f"process {name!r}: " + "; ".join(problems))
    return o


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Run the encoder daemon of process `ctx` until it is asked to stop (see module doc)."""
    mcu = ctx.device("mcu")
    if not 0 < mcu.watchdog_ms <= 65535:  # the protocol's field is 16 bits
        raise ValueError(f"{ctx.lab.source}: devices.{mcu.name}.watchdog_ms = {mcu.watchdog_ms}: "
                         "expected 1..65535 (ms)")
    daemon = EncoderDaemon(ctx, parse_args(ctx.name, args), mcu)
    commands = ctx.subscriber([COMMAND_STREAM], expect=())
    try:
        while not ctx.stopping:
            daemon.step(commands)
    finally:
        daemon.close()
    return 0
