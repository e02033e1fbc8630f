"""The real-time control loop: a process (``run(ctx, args)``, daq/context.py) and its update step.

Each cycle, in the shape of ros2_control's read -> update -> write:

1. **read** (non-blocking): the newest STATE of the robot's MCU (firmware_bridge.link.Link, over its
   serial port or pty), operator requests (``controller/request``: speed, turn) and e-stops
   (``controller/estop``: 1 latch, 0 reset) from the bus and from the operator endpoint
   (``--operator``, where `walklab estop` and `walklab command` bind for a moment). Stale input is a
   safety event, never a wait.
2. **update** (`Controller.update`, pure computation): safety checks of the measured state; the
   phase estimate (the nominal's clock, `controller.synergies.track.Tracker`); the reference from
   the nominal (or the transition); feed-forward + PD, tau = tau_ff + kp (q_ref - q) + kd (q'_ref - q');
   safety shaping (torque and setpoint slew, torque limits, latched stops).
3. **write**: a torque COMMAND to the MCU (every motor idle while stopped); nothing in shadow mode,
   which computes and publishes everything but commands nothing (for replay).

Scheduling: absolute deadlines t_k = t_0 + k T (no drift), sleep until ``spin_us`` before the
deadline, then spin on the clock; jitter = wake time - deadline; an overrun is a cycle whose work
ended after the next deadline (the loop then skips to the next future deadline, counting the
missed ones). Published: ``controller/state`` (one row per cycle in blocks: walking, jitter (s),
then phase, q_ref, q, tau per actuator; t_host = the wake time of the block's first cycle), ``controller/events`` (safety events, operator requests and refusals,
kind "event", cause and detail in the header meta), and health (``health/NAME``): ``loop/jitter``
latency p50 / p99 / max (s) per second, counters ``loop/cycles``, ``loop/overruns``, ``loop/missed``,
``safety/CAUSE``, ``operator/rejected``; the health state is running, stale or latched. The MCU watchdog is the last line: the link feeds it only
while this loop calls it, so a stalled loop stops the motors within ``watchdog_ms``.

Planar/robot conventions: actuator coordinates in rad (cranks + forward), torques in N m.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from controller.safety import Decision, Event, Safety
from controller.synergies.format import Synergy
from controller.synergies.robot import RobotConfig
from controller.synergies.select import Request, select
from controller.synergies.track import Reference, Tracker

log = logging.getLogger("walklab.loop")

REQUEST_STREAM = "controller/request"
ESTOP_STREAM = "controller/estop"
STATE_STREAM = "controller/state"
EVENT_STREAM = "controller/events"
OPERATOR_ENDPOINT = "tcp://127.0.0.1:5610"


@dataclass(frozen=True)
class Measured:
    """Newest measurement: t_ns host monotonic receive time, q (A,) rad, qd (A,) rad/s."""

    t_ns: int
    q: np.ndarray
    qd: np.ndarray


@dataclass(frozen=True)
class Output:
    """Result of one update: decision (what may reach the motors), reference (None while stopped)."""

    t_ns: int
    decision: Decision
    reference: Reference | None
    walking: bool


class Controller:
    """Selection, tracking and safety of one robot (module doc, step 2); holds the loop's state."""

    def __init__(self, cfg: RobotConfig, nominals: list[Synergy], dt: float | None = None,
                 min_transition_s: float = 0.5) -> None:
        if not nominals:
            raise ValueError(f"{cfg.library}: the synergy library is empty (run `walklab synergies build`)")
        self.cfg = cfg
        self.nominals = nominals
        self.dt = dt if dt is not None else 1.0 / cfg.rate_hz
        self.kp, self.kd = np.asarray(cfg.kp), np.asarray(cfg.kd)
        self.safety = Safety(cfg.limits, self.dt)
        self.min_transition_s = min_transition_s
        self.tracker: Tracker | None = None
        self.request = Request(0.0)
        self._aligned = False
        for s in nominals:  # build every spline table now, not inside a cycle
            s.reference(np.zeros(len(s.actuators)))

    def command(self, request: Request, measured_speed: float | None = None) -> Synergy | None:
        """A new operator request: speed 0 stops (torque ramps off through the slew limit), any other
        selects the nearest valid nominal and queues the switch (returns it)."""
        self.request = request
        if request.speed == 0:
            self.tracker = None
            return None
        nom = select(self.nominals, request, self.cfg.limits, measured_speed)
        if self.tracker is None:
            self.tracker = Tracker(nom, self.cfg.limits.slew, self.min_transition_s)
            self._aligned = False
        else:
            self.tracker.request(nom)
        return nom

    def update(self, now_ns: int, measured: Measured | None, margin: float | None = None) -> Output:
        """One cycle (module doc, step 2): read nothing, write nothing."""
        age = math.inf if measured is None else (now_ns - measured.t_ns) * 1e-9
        n = len(self.cfg.actuators)
        q = measured.q if measured is not None else np.zeros(n)
        qd = measured.qd if measured is not None else np.zeros(n)
        events = self.safety.check(now_ns, age, q, qd, margin)
        ref = None
        if self.tracker is not None and not self.safety.stale and self.safety.latched is None:
            if not self._aligned:  # (re)start: the clock from the measured angles, no jump
                self.tracker.align(q)
                self._aligned = True
            ref = self.tracker.step(self.dt)
            tau = ref.tau + self.kp * (ref.q - q) + self.kd * (ref.qd - qd)
            dec = self.safety.shape(now_ns, tau, ref.q, events)
        else:
            self._aligned = False  # a stop or stale data: re-align when walking resumes
            dec = self.safety.shape(now_ns, np.zeros(n), None, events)
            if self.tracker is None and self.safety.latched is None and not self.safety.stale:
                dec = Decision(bool(np.any(dec.tau != 0)), dec.tau, None, dec.events, dec.stop_requested)
        if dec.stop_requested and self.tracker is not None:
            self.command(Request(0.0, 0.0, self.request.gait))
        return Output(now_ns, dec, ref, self.tracker is not None)


# ------------------------------------------------------------------------------------ the process


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="controller.loop", description="real-time control loop")
    p.add_argument("--robot", default="jansen", help="robot config: shipped name or file (default jansen)")
    p.add_argument("--library", help="synergy library folder (default: the robot config's)")
    p.add_argument("--rate-hz", type=float, help="loop rate (default: the robot config's loop.rate_hz)")
    p.add_argument("--spin-us", type=float, default=300.0, help="busy-wait this long before each deadline")
    p.add_argument("--shadow", action="store_true", help="compute and publish, command nothing")
    p.add_argument("--block", type=int, default=10, help="cycles per controller/state frame")
    p.add_argument("--speed", type=float, default=0.0, help="initial walking speed request, m/s")
    p.add_argument("--turn", type=float, default=0.0, help="initial turn-rate request, rad/s")
    p.add_argument("--operator", default=OPERATOR_ENDPOINT,
                   help="endpoint where `walklab estop` / `walklab command` bind to reach this loop")
    return p


def parse_args(name: str, args: Sequence[str]) -> argparse.Namespace:
    o = _parser().parse_args(list(args))
    problems = []
    if o.rate_hz is not None and not (math.isfinite(o.rate_hz) and 1.0 <= o.rate_hz <= 10_000.0):
        problems.append(f"--rate-hz {o.rate_hz}: expected 1..10000 Hz")
    if not (0.0 <= o.spin_us <= 5000.0):
        problems.append(f"--spin-us {o.spin_us}: expected 0..5000")
    if o.block < 1:
        problems.append(f"--block {o.block}: expected >= 1")
    if problems:
        raise ValueError(f"process {name!r}: " + "; ".join(problems))
    return o


class Scheduler:
    """Absolute-deadline sleep-then-spin timing with jitter and overrun counts (module doc).

    sleep(deadline_ns) sleeps until about deadline_ns (the process's `ctx.sleep_until`, which also
    ticks health); the last spin_ns before each deadline are spent spinning on `clock`."""

    def __init__(self, period_ns: int, spin_ns: int, clock=time.monotonic_ns, sleep=None) -> None:
        self.period = int(period_ns)
        self.spin = int(spin_ns)
        self.clock = clock
        self.sleep = sleep or (lambda deadline: time.sleep(max(0.0, (deadline - clock()) * 1e-9)))
        self.next = clock() + self.period
        self.cycles = self.overruns = self.missed = 0

    def wait(self) -> tuple[int, int]:
        """Sleep, then spin, until the next deadline; returns (wake time ns, jitter ns)."""
        if self.next - self.clock() > self.spin:
            self.sleep(self.next - self.spin)
        while (now := self.clock()) < self.next:
            pass
        self.cycles += 1
        return now, now - self.next

    def done(self) -> int:
        """End of the cycle's work: the next deadline; returns the deadlines missed (0 normally)."""
        self.next += self.period
        now = self.clock()
        if now <= self.next:
            return 0
        late = int((now - self.next) // self.period + 1)
        self.overruns += 1
        self.missed += late
        self.next += late * self.period
        return late


class McuIo:
    """The robot side of the loop: the MCU link, STATE -> Measured, torque COMMANDs, e-stop."""

    def __init__(self, port: str, baud: int, watchdog_ms: int, n_motors: int) -> None:
        from firmware_bridge import protocol as P
        from firmware_bridge.link import Link
        from firmware_bridge.telemetry import StateUnwrapper

        self.P = P
        self.link = Link(port, baudrate=baud, liveness_s=max(0.05, watchdog_ms / 2000))
        self.link.open()
        caps = self.link.wait_caps(5.0)
        if caps.n_motors != n_motors:
            raise ValueError(f"{port}: the MCU has {caps.n_motors} motors, the robot config {n_motors}")
        self.unwrap = StateUnwrapper(caps.cpr)
        self.link.request(P.Config(watchdog_ms=watchdog_ms, stream_hz=0))
        self.link.request(P.Reset())
        self.latest: Measured | None = None

    def read(self) -> Measured | None:
        for f in self.link.drain():
            if isinstance(f.msg, self.P.State):
                s = self.unwrap(f)
                self.latest = Measured(time.monotonic_ns(), s.theta.copy(), s.omega.copy())
        self.link.alive()
        return self.latest

    def write(self, dec: Decision) -> None:
        P = self.P
        if dec.enabled:
            cmd = P.Command(tuple(P.MotorCommand(P.MODE_TORQUE, float(t)) for t in dec.tau))
        else:
            cmd = P.Command(tuple(P.MotorCommand(P.MODE_IDLE, 0.0) for _ in dec.tau))
        self.link.send(cmd)

    def estop(self) -> None:
        self.link.request(self.P.Estop(reason=1))

    def reset(self) -> None:
        self.link.request(self.P.Reset())

    def close(self) -> None:
        self.link.close()


def _connect(ctx, mcu, n_motors: int) -> McuIo | None:
    """Open the MCU, retrying every 0.2 s while it is absent (a USB device plugged in late; health
    state "connecting"); None if asked to stop meanwhile."""
    from firmware_bridge.link import LinkError

    while not ctx.stopping:
        try:
            return McuIo(mcu.port, mcu.baud, mcu.watchdog_ms, n_motors)
        except LinkError as exc:
            ctx.health.state = "connecting"
            ctx.health.count("mcu/open_failures")
            log.debug("%s", exc)
            ctx.sleep_until(time.monotonic_ns() + 200_000_000)
    return None


def _publish_event(ctx, ev: Event) -> None:
    ctx.publisher.publish(EVENT_STREAM, np.array([[1.0 if ev.latched else 0.0]]), kind="event", rate_hz=0.0,
                          channels=["latched"], units=["1"], meta={"cause": ev.cause, "detail": ev.detail})


def run(ctx, args: Sequence[str]) -> int:
    """The loop process (module doc); its robot's MCU is the process's ``mcu`` device."""
    from controller.synergies.library import load_all
    from controller.synergies.robot import load_robot

    o = parse_args(ctx.name, args)
    cfg = load_robot(o.robot)
    if o.library:
        import dataclasses
        from pathlib import Path

        cfg = dataclasses.replace(cfg, library=Path(o.library))
    rate = o.rate_hz or cfg.rate_hz
    ctl = Controller(cfg, load_all(cfg.library), dt=1.0 / rate)
    mcu = ctx.device("mcu")
    if tuple(mcu.motors) != cfg.actuators:
        raise ValueError(f"{ctx.lab.source}: devices.{mcu.name}.motors = {list(mcu.motors)}: expected the robot's "
                         f"actuators {list(cfg.actuators)} ({cfg.source})")
    io = _connect(ctx, mcu, len(cfg.actuators))
    if io is None:
        return 0
    from controller.proc import subscriber_for

    ops = [ctx.subscriber([REQUEST_STREAM, ESTOP_STREAM], expect=()),
           subscriber_for(ctx.lab, [o.operator], [REQUEST_STREAM, ESTOP_STREAM], expect=())]
    if o.speed:
        ctl.command(Request(o.speed, o.turn))
    sched = Scheduler(round(1e9 / rate), round(o.spin_us * 1e3), sleep=lambda d: ctx.sleep_until(d))
    A = len(cfg.actuators)
    rows = np.zeros((o.block, 2 + 4 * A))
    k, t_block = 0, 0
    channels = ["walking", "jitter"] + [f"{a}/{c}" for a in cfg.actuators for c in ("phase", "q_ref", "q", "tau")]
    units = ["1", "s"] + ["cycles", "rad", "rad", "N*m"] * A
    h = ctx.health
    try:
        while not ctx.stopping:
            now, jitter = sched.wait()
            h.latency("loop/jitter", jitter * 1e-9)
            h.count("loop/cycles")
            meas = io.read()
            for sub in ops:
                while (f := sub.recv(timeout_s=0)) is not None:
                    _operator(ctx, ctl, io, f, now)
            out = ctl.update(now, meas)
            if not o.shadow:
                io.write(out.decision)
            for ev in out.decision.events:
                _publish_event(ctx, ev)
                h.count(f"safety/{ev.cause}")
                if ev.latched and not o.shadow:
                    io.estop()  # the MCU latches too: a fault stops the motors even if this loop dies
            r = out.reference
            q = meas.q if meas is not None else np.full(A, np.nan)
            if k == 0:
                t_block = now  # the block's t_host: the wake time of its first cycle
            rows[k, 0], rows[k, 1] = float(out.walking), jitter * 1e-9
            for j in range(A):
                rows[k, 2 + 4 * j:6 + 4 * j] = (r.phase[j] if r else np.nan, r.q[j] if r else np.nan, q[j],
                                                out.decision.tau[j])
            k += 1
            if k == o.block:
                ctx.publisher.publish(STATE_STREAM, rows.copy(), kind="controller", rate_hz=rate,
                                      channels=channels, units=units, t_host=t_block)
                k = 0
            h.state = "latched" if ctl.safety.latched else ("stale" if ctl.safety.stale else "running")
            missed = sched.done()
            if missed:
                h.count("loop/overruns")
                h.count("loop/missed", missed)
    finally:
        if not o.shadow:
            try:
                io.write(Decision(False, np.zeros(A), None))
            except OSError:
                pass
        io.close()
        ops[1].close()
    return 0


def _operator(ctx, ctl: Controller, io: McuIo, frame, now: int) -> None:
    """Apply one operator frame: a request (speed, turn) or an e-stop latch/reset."""
    try:
        if frame.stream == ESTOP_STREAM:
            latch = bool(frame.data[-1, 0])
            if latch:
                ev = ctl.safety.estop(now, str(frame.meta.get("source", "bus")) if frame.meta else "bus")
                io.estop()
            else:
                io.reset()
                ev = ctl.safety.reset(now)
            _publish_event(ctx, ev)
        elif frame.stream == REQUEST_STREAM:
            names = list(frame.channels)
            row = frame.data[-1]
            req = Request(float(row[names.index("speed")]), float(row[names.index("turn")]) if "turn" in names else 0.0)
            nom = ctl.command(req)
            _publish_event(ctx, Event(now, "request", f"speed {req.speed} m/s, turn {req.turn} rad/s -> "
                                                     f"{nom.name if nom else 'stop'}"))
    except (ValueError, LookupError, OSError) as exc:
        log.warning("operator frame on %s refused: %s", frame.stream, exc)
        ctx.health.count("operator/rejected")
        _publish_event(ctx, Event(now, "rejected", f"{frame.stream}: {exc}"))
