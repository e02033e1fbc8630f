"""The real-time control loop: a process (``run(ctx, args)``, daq/context.py) and its update step.

Each cycle, in the shape of ros2_control's read -> update -> write:

1. **read** (non-blocking): the newest STATE of the robot's MCU (firmware_bridge.link.Link, over its
   serial port or pty), operator requests (``controller/request``: speed, turn) and e-stops
   (``controller/estop``: 1 latch, 0 reset) from the bus and from the operator endpoint
   (``--operator``, where `walklab estop` and `walklab command` bind for a moment), and with the ZMP
   guard (``--zmp-guard``, on by default for biped and exoskeleton robots) the ``dynamics/zmp``
   frames waiting (`ZmpWatch`: the new samples' ``margin``, the newest sample's time). Stale input is a
   safety event, never a wait: a stale ZMP stream under a guarded walk stops it (``zmp_stale``), as a
   margin below its floor does (``zmp_margin``; the floor min(limits.min_margin, P - limits.margin_tolerance)
   follows the nominal's planned margin P around the sample's time, `Controller.floor`, controller.safety
   rule 4): latched, the torque ramped to zero through
   its slew limit, then idle, and the MCU's e-stop latched once the ramp is over (controller.safety).
2. **update** (`Controller.update`, pure computation): safety checks of the measured state; the
   phase estimate (the nominal's clock, `controller.synergies.track.Tracker`); the reference from
   the nominal (or the transition); its setpoint slew-limited (`Safety.setpoint`), then feed-forward +
   PD on that setpoint, tau = tau_ff + kp (q_ref - q) + kd (q'_ref - q'); safety shaping (torque slew,
   torque limits, latched stops).
3. **write**: a torque COMMAND to the MCU (every motor idle while stopped).

Scheduling: absolute deadlines t_k = t_0 + k T (no drift), sleep until ``spin_us`` before the
deadline, then spin on the clock; jitter = wake time - deadline; an overrun is a cycle whose work
ended after the next deadline (the loop then skips to the next future deadline, counting the
missed ones). Published: ``controller/state`` (one row per cycle in blocks: walking, jitter (s),
then phase, q_ref, q, tau per actuator; t_host = t = the wake time of the block's first cycle), ``controller/events`` (safety events, operator requests and refusals,
link events; kind "event", cause and detail in the header meta; a request's meta also holds its
``speed`` and ``turn``), and health (``health/NAME``): ``loop/jitter``
latency p50 / p99 / max (s) per second, counters ``loop/cycles``, ``loop/overruns``, ``loop/missed``,
``safety/CAUSE`` (every event's cause, and ``safety/setpoint_slew`` / ``safety/clipped`` per cycle
the setpoint slew or the torque limits acted), ``operator/rejected``; the health state is running, stale, latched or disconnected.
The MCU watchdog is the last line: the link feeds it only
while this loop calls it, so a stalled loop stops the motors within ``watchdog_ms``. When the MCU reports
(a STATE's flags, after the loop's last RESET) that its watchdog tripped under a running loop, the loop
latches too (an ``estop`` event naming the MCU, until `walklab estop --reset`); with
``--reset-on-latch`` (simulated robots, whose Python firmware thread can starve on a loaded machine) it
sends RESET a cycle later, at most once a second, and clears its latch (``mcu_reset`` and ``reset``
events, ``mcu/resets``), the torque restarting from zero through its slew limit. Before, it went on
"walking" at motors that no longer moved.

The serial link (`McuIo`): its counters are in the health frame as ``link/COUNTER`` totals (the
names of `firmware_bridge.link.LinkStats`, as the encoder daemon reports them: lost_frames,
gap_events, crc_failures, rejected, disconnects, reconnects, ...), and what happens to it is an event
on ``controller/events``: ``link_errors`` (frames lost or rejected since the last such event; at most
one a second), ``link_lost`` (the port went away: the measurements go stale, the torque is off, and
the link reopens the port by itself), ``link_back`` (the port is back: a new session, CAPS checked,
CONFIG and RESET sent again — the MCU's watchdog tripped while nobody fed it — or ESTOP again if this
loop is latched, or nothing if the MCU's own e-stop is latched: the loop latches then), ``link_refused`` (the device now on the port cannot be set up: named, retried every
0.5 s). Setting up a new session blocks the loop for up to about 1.5 s (the cycles are counted as
overruns); it is stale meanwhile, so no torque is commanded.

**The MCU's latches outlive the loop.** The loop is restarted by the supervisor when it fails; a new loop
never clears what the MCU latched: when its first session finds the MCU's e-stop latched or its
watchdog tripped (the loop before it crashed or was killed while commanding) — in the first HEARTBEAT
or STATE after the ACK of its CONFIG, not in the older frames queued while no host read — it sends no RESET and
latches itself (an ``estop`` event naming the MCU) — only `walklab estop --reset` clears both. An
ESTOP the MCU does not acknowledge (a timeout, a NACK, the port gone) raises nothing: the loop stays
latched, an ``mcu_estop_failed`` event says so, and the ESTOP is retried every 0.5 s. A loop asked to
stop with nothing latched sends RESET after its last idle COMMAND, so the MCU's watchdog is disarmed
and the next loop starts unlatched. A session that fails to set up closes its link (no reader or
heartbeat thread is left on the port while `_connect` retries).

**Shadow mode** (``--shadow``, for `walklab replay --shadow`): the MCU is never opened and nothing is
commanded; the measured state comes from the bus, the robot's encoder streams ``encoder/<actuator>``
(channels ``angle`` rad and ``velocity`` rad/s, as `daq.encoder` and the simulated world publish them).
The cycles follow the data's clock, not the host's: cycle k runs at lab time t_k = t_first + k T (t_first
the first encoder sample's time) once every actuator's stream covers t_k — or once the newest sample of
any actuator is more than `BusState.HOLD_S` ahead (the lagging one is then stale: a stream that
stopped) —, with each actuator's newest sample at or before t_k, and a measurement's age the data time
since it; operator frames take effect at the first cycle at or after their ``t``. Under the ZMP guard a
cycle also waits for the ``dynamics/zmp`` stream to cover t_k (or for the encoders to be `BusState.HOLD_S`
past it: the stream stopped), since a replay's recomputed ZMP arrives after its encoder samples. So a
replay at any speed computes the same cycles. (The streams of two actuators do not arrive in step: a device daemon
that fell behind publishes one motor's blocks of a batch before the other's — 330 ms apart in a
recording of the simulated world on a loaded machine.)
The ``jitter`` column is NaN (there is no deadline).

Planar/robot conventions: actuator coordinates in rad (cranks + forward), torques in N m; times in ns.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from controller.safety import RAMPED, Decision, Event, Safety
from controller.synergies.format import StoredTransition, Synergy
from controller.synergies.robot import RobotConfig
from controller.synergies.select import Request, select
from controller.synergies.track import Reference, Tracker
from daq.logthrottle import LogThrottle

log = logging.getLogger("walklab.loop")

REQUEST_STREAM = "controller/request"
#: s of planned margins kept for the ZMP guard's floor (`Controller.floor`): its window plus the ZMP's lag
PLAN_KEEP_S = 2.0
ZMP_STREAM = "dynamics/zmp"
#: robot kinds whose walk the ZMP stability-margin guard watches by default (``--zmp-guard``)
GUARDED = ("biped", "exoskeleton")
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
    latched: Event | None = None


class Controller:
    """Selection, tracking and safety of one robot (module doc, step 2); holds the loop's state."""

    def __init__(self, cfg: RobotConfig, nominals: list[Synergy], dt: float | None = None,
                 min_transition_s: float = 0.5, zmp_guard: bool | None = None,
                 transitions: Sequence[StoredTransition] = ()) -> None:
        if not nominals:
            raise ValueError(f"{cfg.library}: the synergy library is empty (run `walklab synergies build`)")
        self.cfg = cfg
        self.nominals = nominals
        self.transitions = tuple(transitions)  # the library's precomputed ones (biped, exoskeleton)
        self.dt = dt if dt is not None else 1.0 / cfg.rate_hz
        self.kp, self.kd = np.asarray(cfg.kp), np.asarray(cfg.kd)
        self.safety = Safety(cfg.limits, self.dt)
        self.min_transition_s = min_transition_s
        #: the ZMP stability-margin guard watches a walk (default: biped and exoskeleton robots)
        self.zmp_guard = cfg.robot in GUARDED if zmp_guard is None else bool(zmp_guard)
        self.tracker: Tracker | None = None
        self.request = Request(0.0)
        self._aligned = False
        self._last_ns: int | None = None   # the previous cycle's time (ns)
        self._walk_ns = 0                  # when the walk last (re)started (ns): the guard judges samples from then
        #: the planned margins (m) of the last cycles at their times (ns), a ring: the guard's floor (`floor`)
        keep = max(8, round(PLAN_KEEP_S / self.dt))
        self._plan_t, self._plan_m, self._plan_k = np.zeros(keep, np.int64), np.full(keep, np.nan), 0
        for s in nominals:  # build every spline table now, not inside a cycle
            s.reference(np.zeros(len(s.actuators)))

    def command(self, request: Request, measured_speed: float | None = None) -> Synergy | None:
        """A new operator request: speed 0 stops (torque ramps off through the slew limit), any other
        selects the nearest valid nominal and queues the switch (returns it; SelectionError if the
        switch is refused: controller.synergies.track)."""
        if request.speed == 0:
            self.request = request
            self.tracker = None
            return None
        nom = select(self.nominals, request, self.cfg.limits, measured_speed)
        if self.tracker is None:
            self.tracker = Tracker(nom, self.cfg.limits.slew, self.min_transition_s, self.transitions,
                                   nominals=self.nominals)
            self._aligned = False
        else:
            self.tracker.request(nom)
        self.request = request
        return nom

    def floor(self, t_ns: np.ndarray) -> np.ndarray:
        """The margin (m) the guard requires of ZMP samples at times t_ns (n,) on the clock of the cycles:
        min(limits.min_margin, P - limits.margin_tolerance), P the least planned margin within
        limits.margin_window_s of the sample (the measurement's lag and the phase estimate's error): the
        cycles' recorded plans, and past the last cycle the tracked nominal's plan ahead on its clock (so the
        floor is the same however late the sample is judged); no plan there: limits.min_margin alone; -inf
        (not judged) for a sample measured at or before the walk's (re)start — the first ZMP samples a walk
        sees, measured before it."""
        lim = self.cfg.limits
        w = round(lim.margin_window_s * 1e9)
        t = np.asarray(t_ns, np.int64)[:, None]
        near = (np.abs(self._plan_t[None, :] - t) <= w) & np.isfinite(self._plan_m)[None, :]   # (n, keep)
        least = np.where(near, self._plan_m[None, :], np.inf).min(axis=1)
        # the window's part after the last cycle (a sample judged less than w after it was measured): the plan
        # ahead on the tracked nominal's clock, so the floor does not depend on how late the sample came
        last = int(self._plan_t[(self._plan_k - 1) % self._plan_t.size]) if self._plan_k else None
        if self.tracker is not None and last is not None:
            nom = self.tracker.nominal
            T, M = float(nom.period[0]), nom.u.size
            for i, ti in enumerate(t[:, 0]):
                ahead = (int(ti) + w - last) * 1e-9
                if ahead > 0:      # the plan from the clock to `ahead` on, two points per stored sample
                    plan = nom.planned_margin(float(self.tracker.phase[0])
                                              + np.linspace(0.0, ahead / T, int(2 * M * ahead / T) + 2))
                    if np.isfinite(plan).any():
                        least[i] = min(least[i], float(np.nanmin(plan)))
        # a sample measured before the walk (re)started is not judged: the robot was not following the plan
        return np.where(t[:, 0] <= self._walk_ns, -np.inf, np.minimum(lim.min_margin, least - lim.margin_tolerance))

    def update(self, now_ns: int, measured: Measured | None, zmp: tuple[np.ndarray, np.ndarray] | None = None,
               zmp_t_ns: int | None = None) -> Output:
        """One cycle (module doc, step 2): read nothing, write nothing. zmp: the ZMP samples new this cycle,
        their times (n,) ns on the clock of now_ns and stability margins (n,) m (None: none new; `ZmpWatch.take`);
        zmp_t_ns: the time of the newest ZMP sample (None: none yet). The guard watches while a nominal is
        tracked: the sample furthest below its floor (`floor`) is checked."""
        age = math.inf if measured is None else (now_ns - measured.t_ns) * 1e-9
        # the time this cycle covers: since the previous cycle (the period; more when cycles were missed, an
        # overrun on a loaded machine; a late wake-up's extra is taken from the next), so the nominal's clock
        # follows time, not the count of cycles run (the safety's slew limits stay per cycle: the stricter); a gap
        # longer than stale_s (the loop stalled) re-aligns the clock to the measured angles instead
        gap = self.dt if self._last_ns is None else max((now_ns - self._last_ns) * 1e-9, 0.0)
        span = min(gap, max(self.dt, self.cfg.limits.stale_s))
        if gap > span:
            self._aligned = False
        self._last_ns = now_ns
        n = len(self.cfg.actuators)
        q = measured.q if measured is not None else np.zeros(n)
        qd = measured.qd if measured is not None else np.zeros(n)
        zmp_age = margin = floor = None
        if self.tracker is not None and not self._aligned:   # the walk (re)starts: its plan from this cycle on
            self._walk_ns = now_ns
            self._plan_m[:] = np.nan
        if self.zmp_guard and self.tracker is not None:
            zmp_age = math.inf if zmp_t_ns is None else (now_ns - zmp_t_ns) * 1e-9
            known = np.isfinite(zmp[1]) if zmp is not None else None
            if known is not None and known.any():      # (NaN: unknown off the plates, --zmp-guard plates)
                floors = self.floor(zmp[0][known])
                k = int(np.argmin(zmp[1][known] - floors))
                margin, floor = float(zmp[1][known][k]), float(floors[k])
        events = self.safety.check(now_ns, age, q, qd, margin, zmp_age, floor)
        ref = None
        if self.tracker is not None and not self.safety.stale and self.safety.latched is None:
            if not self._aligned:  # (re)start: the clock from the measured angles, no jump, then one period on
                self.tracker.align(q)
                self._aligned = True
                span = self.dt
            else:                  # the clock pulled toward the measured gait's phase ([loop] phase_gain)
                self.tracker.follow(q, self.cfg.phase_gain, span)
            ref = self.tracker.step(span)
            k = self._plan_k % self._plan_t.size
            self._plan_t[k], self._plan_m[k], self._plan_k = now_ns, ref.margin, self._plan_k + 1
            q_ref = self.safety.setpoint(ref.q)  # slew-limited first: the PD term acts on what may move
            tau = ref.tau + self.kp * (q_ref - q) + self.kd * (ref.qd - qd)
            dec = self.safety.shape(now_ns, tau, q_ref, events)
        else:
            self._aligned = False  # a stop or stale data: re-align when walking resumes
            dec = self.safety.shape(now_ns, np.zeros(n), None, events)
            if self.tracker is None and self.safety.latched is None and not self.safety.stale:
                dec = replace(dec, enabled=bool(np.any(dec.tau != 0)), q_ref=None)  # the stop's ramp down
        if dec.stop_requested and self.tracker is not None:
            self.command(Request(0.0, 0.0, self.request.gait))
        return Output(now_ns, dec, ref, self.tracker is not None, self.safety.latched)


# ------------------------------------------------------------------------------------ the process


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="controller.loop", description="real-time control loop")
    p.add_argument("--robot", default="jansen", help="robot config: shipped name or file (default jansen)")
    p.add_argument("--library", help="synergy library folder (default: the robot config's)")
    p.add_argument("--rate-hz", type=float, help="loop rate (default: the robot config's loop.rate_hz)")
    p.add_argument("--spin-us", type=float, default=300.0, help="busy-wait this long before each deadline")
    p.add_argument("--shadow", action="store_true", help="compute and publish, command nothing")
    p.add_argument("--reset-on-latch", action="store_true",
                   help="RESET an MCU whose watchdog tripped while the loop ran (never an e-stop); simulated "
                        "robots only (default: the loop latches too)")
    p.add_argument("--block", type=int, default=10, help="cycles per controller/state frame")
    p.add_argument("--speed", type=float, default=0.0, help="initial walking speed request, m/s")
    p.add_argument("--turn", type=float, default=0.0, help="initial turn-rate request, rad/s")
    p.add_argument("--operator", default=OPERATOR_ENDPOINT,
                   help="endpoint where `walklab estop` / `walklab command` bind to reach this loop")
    p.add_argument("--zmp-guard", choices=("auto", "on", "plates", "off"), default="auto",
                   help=f"watch {ZMP_STREAM}'s margin while walking (auto: for {' and '.join(GUARDED)} robots; "
                        "plates: where the plates measure it, a margin unknown off them is not a stop, a silent "
                        "stream still is)")
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


#: LinkStats counters reported as ``link/COUNTER`` totals (daq/encoder.py reports the same names).
LINK_COUNTERS = ("lost_frames", "gap_events", "disconnects", "reconnects", "open_failures", "timeouts", "retries",
                 "tx_failed", "queue_overflow")


class McuIo:
    """The robot side of the loop: the MCU link, STATE -> Measured, torque COMMANDs, e-stop, and the
    link's sessions, counters and events (module doc)."""

    REPORT_NS = 100_000_000    # link counters into health every 0.1 s
    ERRORS_NS = 1_000_000_000  # at most one link_errors event a second
    RETRY_NS = 500_000_000     # a refused session set-up is retried after this

    def __init__(self, port: str, baud: int, watchdog_ms: int, n_motors: int) -> None:
        from firmware_bridge import protocol as P
        from firmware_bridge.link import Link

        self.P = P
        self.port, self.watchdog_ms, self.n = port, watchdog_ms, n_motors
        self.link = Link(port, baudrate=baud, liveness_s=max(0.05, watchdog_ms / 2000))
        self.latest: Measured | None = None
        self.mcu_latch: str | None = None  # the MCU was found latched (`session`): the loop latches too
        self.estop_pending = False          # an ESTOP the MCU has not acknowledged yet (`estop`)
        self.notes: list[Event] = []        # events of `estop`, returned by the next `poll`
        self.reset_seq: int | None = None   # seq of our last acknowledged RESET (STATE flags before it are old)
        self.tripped = False                # the MCU reported its watchdog tripped since that RESET (`read`)
        self.next_reset = 0                 # --reset-on-latch: no second RESET before this (host ns)
        self.reset_due: Event | None = None  # --reset-on-latch: the loop's latch that a RESET will clear
        self.ramp_latched: Event | None = None  # the ramped stop whose end latched the MCU (`_events`)
        self.link.open()
        try:
            self.session(5.0, latched=False, first=True)
        except BaseException:  # a refused or silent device: no reader or heartbeat thread left behind
            self.link.close()
            raise
        st = self.link.stats
        self.disconnects = st.disconnects   # at the current session's set-up
        self.up = True                      # a session is set up on the port now open
        self.retry_at = 0
        self.reported: dict[str, int] = {}
        self.errors = (st.lost_frames, sum(st.rejected.values()))  # at the last link_errors event
        self.next_report = self.next_errors = 0

    def session(self, timeout_s: float, latched: bool, first: bool = False) -> None:
        """Set up the device now on the port: its CAPS (as many motors as the robot), CONFIG (watchdog),
        its latches (the first HEARTBEAT or STATE after), then ESTOP if the loop is latched, else RESET
        — unless the MCU itself is latched: its e-stop, or at the loop's `first` session its tripped
        watchdog (the controller before this one stopped feeding it: it crashed or was killed). Then
        nothing is sent and `mcu_latch` says why; the loop latches too, and only an operator's reset
        (`walklab estop --reset`) clears both. Raises LinkError, NackError or ValueError."""
        from firmware_bridge.telemetry import StateUnwrapper

        P = self.P
        caps = self.link.wait_caps(timeout_s)
        if caps.n_motors != self.n:
            raise ValueError(f"{self.port}: the MCU has {caps.n_motors} motors, the robot config {self.n}")
        self.unwrap = StateUnwrapper(caps.cpr)
        config = self.link.request(P.Config(watchdog_ms=self.watchdog_ms, stream_hz=0))
        status = self._status(config.seq, timeout_s)
        if latched:
            self.link.request(P.Estop(reason=1))
            self.estop_pending = False
        elif status & P.STATUS_ESTOP or (first and status & P.STATUS_WATCHDOG):
            why = "its e-stop latched" if status & P.STATUS_ESTOP else "its watchdog tripped: the last controller stopped"
            self.mcu_latch = f"the MCU on {self.port} ({why})"
        else:
            self._reset()

    def _reset(self) -> None:
        self.reset_seq = self.link.request(self.P.Reset()).seq
        self.tripped = False

    def _status(self, config_seq: int, timeout_s: float) -> int:
        """The MCU's STATUS_* latch bits from the first HEARTBEAT (status) or STATE (motor flags) the MCU
        sent after acknowledging this session's CONFIG (seq `config_seq`). Not an earlier one: what the
        MCU queued while no host read its port (up to its transmit buffer, seconds of frames) arrives
        first, and may predate a latch — a watchdog tripped 1 s after a killed loop's last COMMAND was
        read as no latch, and the restarted loop RESET it."""
        from firmware_bridge.link import LinkTimeout

        P = self.P
        end = time.monotonic() + timeout_s
        acked = False
        while (left := end - time.monotonic()) > 0 and (f := self.link.recv(left)) is not None:
            if not acked:   # the link's queue is in the MCU's sending order
                acked = isinstance(f.msg, P.Ack) and f.msg.seq == config_seq
            elif isinstance(f.msg, P.Heartbeat):
                return f.msg.status
            elif isinstance(f.msg, P.State):
                flags = [m.flags for m in f.msg.motors]
                return (P.STATUS_ESTOP * any(x & P.FLAG_ESTOP for x in flags)) | \
                    (P.STATUS_WATCHDOG * any(x & P.FLAG_WATCHDOG for x in flags))
        raise LinkTimeout(f"{self.port}: no HEARTBEAT or STATE after the ACK of CONFIG within {timeout_s:g} s: the "
                          "MCU's latches are unknown")

    def read(self) -> Measured | None:
        P = self.P
        for f in self.link.drain():
            if isinstance(f.msg, P.State) and self.up:
                s = self.unwrap(f)
                self.latest = Measured(time.monotonic_ns(), s.theta.copy(), s.omega.copy())
                # the MCU's watchdog tripped while this loop ran: in a STATE that acknowledges our last RESET
                if self.reset_seq is not None and (f.ack - self.reset_seq) & 0xFFFF < 0x8000 \
                        and np.any(s.flags & P.FLAG_WATCHDOG):
                    self.tripped, self.reset_seq = True, None  # reported once, until the next RESET
        self.link.alive()
        return self.latest

    def poll(self, now: int, health, latched: bool) -> list[Event]:
        """The link's state this cycle (module doc): events to publish; counters into `health`."""
        from firmware_bridge.link import LinkError, NackError

        events, self.notes = self.notes, []
        if self.estop_pending and self.up and now >= self.retry_at:
            self.retry_at = now + self.RETRY_NS
            self.estop()
        if self.up and not self.link.connected.is_set():
            self.up = False
            events.append(Event(now, "link_lost", f"{self.port}: the MCU's port went away; torque off, reopening"))
        if now >= self.next_report:
            self.next_report = now + self.REPORT_NS
            st = self.link.stats
            if self.up and st.disconnects != self.disconnects:  # gone and back between two looks
                self.up = False
                events.append(Event(now, "link_lost", f"{self.port}: the MCU's port went away and came back"))
            for key in LINK_COUNTERS:
                self._total(health, f"link/{key}", getattr(st, key))
            rejected = sum(st.rejected.values())
            self._total(health, "link/crc_failures", sum(st.crc_failures.values()))
            self._total(health, "link/rejected", rejected)
            if (st.lost_frames, rejected) != self.errors and now >= self.next_errors:
                lost, bad = st.lost_frames - self.errors[0], rejected - self.errors[1]
                events.append(Event(now, "link_errors", f"{self.port}: {lost} frame(s) lost, {bad} rejected "
                                                        f"({', '.join(f'{k} {v}' for k, v in st.rejected.items())} "
                                                        f"in all)"))
                self.errors, self.next_errors = (st.lost_frames, rejected), now + self.ERRORS_NS
            if not self.up and self.link.connected.is_set() and now >= self.retry_at:
                try:
                    self.session(1.0, latched)
                except (LinkError, NackError, ValueError) as exc:
                    self.retry_at = now + self.RETRY_NS
                    events.append(Event(now, "link_refused", f"{exc}; retrying"))
                else:
                    self.up, self.disconnects = True, self.link.stats.disconnects
                    sent = "ESTOP sent" if latched else "nothing sent: the MCU's e-stop is latched" \
                        if self.mcu_latch else "RESET sent"
                    events.append(Event(now, "link_back", f"{self.port}: reconnected, session set up again "
                                                          f"({sent})"))
        health.state = health.state if self.up else "disconnected"
        return events

    def _total(self, health, subject: str, total: int) -> None:
        health.count(subject, total - self.reported.get(subject, 0))
        self.reported[subject] = total

    def write(self, dec: Decision) -> None:
        P = self.P
        if dec.enabled:
            cmd = P.Command(tuple(P.MotorCommand(P.MODE_TORQUE, float(t)) for t in dec.tau))
        else:
            cmd = P.Command(tuple(P.MotorCommand(P.MODE_IDLE, 0.0) for _ in dec.tau))
        self.link.send(cmd)

    def estop(self) -> None:
        """Latch the MCU's e-stop. Unacknowledged (a link error: a timeout, a NACK, the port gone) it
        stays pending, an ``mcu_estop_failed`` event says so, and `poll` retries it every RETRY_NS (a
        new session sends it too) — never an exception out of the loop, which stays latched."""
        from firmware_bridge.link import LinkError, NackError

        try:
            self.link.request(self.P.Estop(reason=1))
        except (LinkError, NackError) as exc:
            if not self.estop_pending:
                self.notes.append(Event(time.monotonic_ns(), "mcu_estop_failed",
                                        f"{exc}; the loop stays latched, ESTOP retried", True))
            self.estop_pending = True
        else:
            self.estop_pending = False

    def reset(self) -> None:
        """Clear the MCU's latches (RESET; LinkError or NackError if unacknowledged)."""
        self._reset()
        self.estop_pending = False

    def release(self) -> None:
        """A clean stop of the loop: RESET after the last idle COMMAND, so the MCU's watchdog is
        disarmed and does not trip (a trip would latch the next loop, as after a crash)."""
        self.link.request(self.P.Reset())

    def close(self) -> None:
        self.link.close()


class BusState:
    """Shadow mode's measured state (module doc): the actuators' encoder samples by lab time [ns],
    angle [rad] and velocity [rad/s]; `cycles` yields the data-clocked cycles they cover."""

    #: How far [s of lab time] one actuator's stream may run ahead of another's before the cycles go on
    #: without the laggard (as the walker dynamics' input buffer, dynamics.service_torques.KEEP_S).
    HOLD_S = 4.0
    KEEP_NS = 1_000_000_000  # samples kept behind the current cycle (a stale actuator's newest is kept too)

    def __init__(self, actuators: Sequence[str], period_ns: int) -> None:
        self.index = {f"encoder/{a}": j for j, a in enumerate(actuators)}
        n = len(actuators)
        self.t = [np.empty(0, np.int64) for _ in range(n)]
        self.qq = [np.empty((0, 2)) for _ in range(n)]  # (angle, velocity) per sample
        self.period = int(period_ns)
        self.hold_ns = round(self.HOLD_S * 1e9)
        self.next: int | None = None

    def feed(self, frame) -> None:
        """Take one encoder frame (ValueError if it lacks the angle or velocity channel)."""
        j = self.index[frame.stream]
        ch = list(frame.channels)
        if "angle" not in ch or "velocity" not in ch:
            raise ValueError(f"{frame.stream}: channels {ch}: expected 'angle' and 'velocity'")
        t = frame.sample_times()
        if self.t[j].size and t[0] <= self.t[j][-1]:  # a repeat or a frame back in time: not a newer state
            keep = t > self.t[j][-1]
            t, rows = t[keep], frame.data[keep]
        else:
            rows = frame.data
        self.t[j] = np.concatenate([self.t[j], t])
        self.qq[j] = np.concatenate([self.qq[j], rows[:, [ch.index("angle"), ch.index("velocity")]]])
        if self.next is None and t.size:
            self.next = int(t[0])

    @property
    def newest(self) -> int | None:
        """The newest sample time of any actuator [ns] (None before the first)."""
        return max((int(t[-1]) for t in self.t if t.size), default=None)

    def cycles(self):
        """Yield (t_k [ns], Measured or None) for every cycle the samples now cover (class doc)."""
        newest = [int(t[-1]) for t in self.t if t.size]
        if self.next is None or not newest:
            return
        cover = max(min(newest) if len(newest) == len(self.t) else -(2 ** 62), max(newest) - self.hold_ns)
        while self.next <= cover:
            d = self.next
            k = [int(np.searchsorted(t, d, side="right")) - 1 for t in self.t]
            meas = None
            if min(k) >= 0:
                meas = Measured(min(int(t[i]) for t, i in zip(self.t, k)),
                                np.array([q[i, 0] for q, i in zip(self.qq, k)]),
                                np.array([q[i, 1] for q, i in zip(self.qq, k)]))
            self.next = d + self.period
            yield d, meas
        for j, t in enumerate(self.t):  # forget what no later cycle can use
            drop = max(0, int(np.searchsorted(t, self.next - self.KEEP_NS)) - 1)
            if drop:
                self.t[j], self.qq[j] = t[drop:], self.qq[j][drop:]


class ZmpWatch:
    """The ZMP stability-margin guard's input (module doc): the ``margin`` channel (m) of ``dynamics/zmp``
    by sample time on one clock — ``t_host`` live (the host time of the measurements the ZMP was computed
    from, so the dynamics service's lag counts in the age), ``t`` in shadow mode (the data clock). A
    sample with a non-finite margin (no ZMP: no support force, an input missing, a foot on no plate) carries
    no margin and does not refresh the stream — unless `unknown_ok` (``--zmp-guard plates``: a walkway only
    partly on plates, where the margin is unknown off them): then it refreshes the stream (the service is
    alive) and `take` returns it as NaN, which the guard does not check. `take(now)` returns the samples at or before now not taken yet, their
    times (n,) ns and margins (n,) m (None if none), and `newest` is the time of the newest sample taken. `host_clock` (ns)
    paces the log lines of rejected frames (`_feed_zmp`)."""

    KEEP = 100_000  # samples held ahead of the cycles at most (shadow mode: a replay as fast as it goes)

    def __init__(self, clock: str, host_clock: Callable[[], int] = time.monotonic_ns, unknown_ok: bool = False) -> None:
        self.clock = clock
        self.unknown_ok = unknown_ok
        self.t = np.empty(0, np.int64)
        self.m = np.empty(0)
        self.newest: int | None = None
        self.rejected_log = LogThrottle(log, clock=host_clock)  # `_feed_zmp`'s lines, a second apart at least
        self.covered: int | None = None  # the newest sample time fed, margin or not (how far the stream got)

    def feed(self, frame) -> None:
        """Take one ``dynamics/zmp`` frame (ValueError if it has no margin channel or sample times)."""
        ch = list(frame.channels)
        if "margin" not in ch:
            raise ValueError(f"{frame.stream}: channels {ch}: expected 'margin'")
        t = frame.sample_times(self.clock)
        m = np.asarray(frame.data[:, ch.index("margin")], dtype=float)
        if t.size:
            self.covered = int(t[-1]) if self.covered is None else max(self.covered, int(t[-1]))
        ok = np.ones(m.shape, bool) if self.unknown_ok else np.isfinite(m)
        self.t = np.concatenate([self.t, t[ok]])[-self.KEEP:]
        self.m = np.concatenate([self.m, m[ok]])[-self.KEEP:]

    def take(self, now_ns: int) -> tuple[np.ndarray, np.ndarray] | None:
        due = self.t <= now_ns
        if not due.any():
            return None
        out = self.t[due], self.m[due]
        t = int(out[0].max())
        self.newest = t if self.newest is None else max(self.newest, t)
        self.t, self.m = self.t[~due], self.m[~due]
        return out


def _feed_zmp(ctx, watch: ZmpWatch, frame) -> None:
    """Feed one frame to `watch`; a rejected one is counted (``zmp/rejected``) and logged, the first at
    once and then at most one line a second with the count since the last line (`daq.logthrottle`)."""
    try:
        watch.feed(frame)
    except ValueError as exc:
        ctx.health.count("zmp/rejected")
        # throttled: the loop's stderr is drained by the supervisor's relay thread at normal priority, so
        # a line per frame of a bad stream (500 a second) could fill the pipe and block a SCHED_FIFO loop
        watch.rejected_log.log("%s", exc)


def _connect(ctx, mcu, n_motors: int) -> McuIo | None:
    """Open the MCU, retrying every 0.2 s while it is absent or silent (a USB device plugged in late, a
    simulated world still starting; health state "connecting", ``mcu/open_failures`` counted). The first
    failure is logged at INFO; after 10 s of them a WARNING says why, then at most one line every 10 s.
    None if asked to stop meanwhile."""
    from firmware_bridge.link import LinkError

    failures = LogThrottle(log, 10.0, clock=ctx.clock)
    first: int | None = None
    while not ctx.stopping:
        try:
            return McuIo(mcu.port, mcu.baud, mcu.watchdog_ms, n_motors)
        except LinkError as exc:
            ctx.health.state = "connecting"
            ctx.health.count("mcu/open_failures")
            now = ctx.clock()
            if first is None:
                first = now
                log.info("%s; retrying", exc)
            elif now - first >= 10_000_000_000:
                failures.log("%s; retrying for %.0f s", exc, (now - first) * 1e-9)
            ctx.sleep_until(time.monotonic_ns() + 200_000_000)
    return None


def _publish_event(ctx, ev: Event, t: int | None = None, **meta) -> None:
    ctx.publisher.publish(EVENT_STREAM, np.array([[1.0 if ev.latched else 0.0]]), kind="event", rate_hz=0.0,
                          channels=["latched"], units=["1"], t_host=t, t=t,
                          meta={"cause": ev.cause, "detail": ev.detail, **meta})


class _States:
    """``controller/state`` rows gathered into blocks of `block` cycles (module doc)."""

    def __init__(self, ctx, actuators: Sequence[str], block: int, rate: float) -> None:
        A = len(actuators)
        self.ctx, self.A, self.rate = ctx, A, rate
        self.rows = np.zeros((block, 2 + 4 * A))
        self.k, self.t = 0, 0
        self.channels = ["walking", "jitter"] + [f"{a}/{c}" for a in actuators for c in ("phase", "q_ref", "q", "tau")]
        self.units = ["1", "s"] + ["cycles", "rad", "rad", "N*m"] * A

    def add(self, t: int, jitter_s: float, out: Output, meas: Measured | None) -> None:
        r, A = out.reference, self.A
        q = meas.q if meas is not None else np.full(A, np.nan)
        if self.k == 0:
            self.t = t  # the block's t_host and t: the time of its first cycle
        row = self.rows[self.k]
        row[0], row[1] = float(out.walking), jitter_s
        for j in range(A):
            row[2 + 4 * j:6 + 4 * j] = (r.phase[j] if r else np.nan, r.q[j] if r else np.nan, q[j],
                                        out.decision.tau[j])
        self.k += 1
        if self.k == self.rows.shape[0]:
            self.ctx.publisher.publish(STATE_STREAM, self.rows.copy(), kind="controller", rate_hz=self.rate,
                                       channels=self.channels, units=self.units, t_host=self.t, t=self.t)
            self.k = 0


def _events(ctx, out: Output, io: McuIo | None, t: int | None = None) -> None:
    """Publish and count the cycle's safety events; a latching one latches the MCU too (live mode)."""
    for name in out.decision.shaped:
        ctx.health.count(f"safety/{name}")
    for ev in out.decision.events:
        _publish_event(ctx, ev, t)
        ctx.health.count(f"safety/{ev.cause}")
        if ev.latched and io is not None and ev.cause not in RAMPED:
            io.estop()  # the MCU latches too: a fault stops the motors even if this loop dies
    # a ramped stop (the ZMP guard's) latches the MCU once its ramp has ended
    lat = out.latched
    if io is not None and lat is not None and lat.cause in RAMPED and not out.decision.enabled and \
            io.ramp_latched is not lat:
        io.estop()
        io.ramp_latched = lat


def run(ctx, args: Sequence[str]) -> int:
    """The loop process (module doc); its robot's MCU is the process's ``mcu`` device."""
    from controller.synergies.library import load_all, load_transitions
    from controller.synergies.robot import load_robot

    o = parse_args(ctx.name, args)
    cfg = load_robot(o.robot)
    if o.library:
        import dataclasses
        from pathlib import Path

        cfg = dataclasses.replace(cfg, library=Path(o.library))
    rate = o.rate_hz or cfg.rate_hz
    if o.spin_us * 1e-6 >= 0.5 / rate:  # the spin must leave the core most of each period (a realtime loop)
        raise ValueError(f"process {ctx.name!r}: --spin-us {o.spin_us:g}: expected below half the period "
                         f"({0.5e6 / rate:g} us at {rate:g} Hz)")
    ctl = Controller(cfg, load_all(cfg.library), dt=1.0 / rate,
                     zmp_guard={"auto": None, "on": True, "plates": True, "off": False}[o.zmp_guard],
                     transitions=load_transitions(cfg.library))
    mcu = ctx.device("mcu")
    if tuple(mcu.motors) != cfg.actuators:
        raise ValueError(f"{ctx.lab.source}: devices.{mcu.name}.motors = {list(mcu.motors)}: expected the robot's "
                         f"actuators {list(cfg.actuators)} ({cfg.source})")
    initial = Request(o.speed, o.turn) if o.speed else None   # applied once its inputs are live (`_start_walk`)
    if initial is not None:
        select(ctl.nominals, initial, cfg.limits)    # a request no nominal serves: a one-line error at the start
    if o.shadow:
        return _run_shadow(ctx, o, cfg, ctl, rate, initial)
    io = _connect(ctx, mcu, len(cfg.actuators))
    if io is None:
        return 0
    from controller.proc import subscriber_for

    ops = [ctx.subscriber([REQUEST_STREAM, ESTOP_STREAM], expect=()),
           subscriber_for(ctx.lab, [o.operator], [REQUEST_STREAM, ESTOP_STREAM], expect=())]
    zmp = ZmpWatch("t_host", unknown_ok=o.zmp_guard == "plates") if ctl.zmp_guard else None
    zsub = ctx.subscriber([ZMP_STREAM], expect=()) if zmp else None
    sched = Scheduler(round(1e9 / rate), round(o.spin_us * 1e3), sleep=lambda d: ctx.sleep_until(d))
    A = len(cfg.actuators)
    states = _States(ctx, cfg.actuators, o.block, rate)
    h = ctx.health
    clean = False
    try:
        while not ctx.stopping:
            now, jitter = sched.wait()
            h.latency("loop/jitter", jitter * 1e-9)
            h.count("loop/cycles")
            meas = io.read()
            if io.tripped and ctl.safety.latched is None:
                _watchdog_tripped(ctx, ctl, io, o.reset_on_latch, now)
            elif io.reset_due is not None and ctl.safety.latched is io.reset_due and now >= io.next_reset:
                _reset_after_trip(ctx, ctl, io, now)
            if io.mcu_latch is not None:  # the MCU was latched when its session was set up: so is the loop
                _publish_event(ctx, ctl.safety.estop(now, io.mcu_latch), now)
                io.mcu_latch = None
            for sub in ops:
                while (f := sub.recv(timeout_s=0)) is not None:
                    _operator(ctx, ctl, io, f, now)
                    initial = None      # the operator's word wins over a start request not applied yet
            new = None
            if zmp is not None:
                while (f := zsub.recv(timeout_s=0)) is not None:
                    _feed_zmp(ctx, zmp, f)
                new = zmp.take(now)
            initial = _start_walk(ctx, ctl, initial, now, meas, zmp)
            out = ctl.update(now, meas, new, zmp.newest if zmp else None)
            io.write(out.decision)
            _events(ctx, out, io)
            states.add(now, jitter * 1e-9, out, meas)
            h.state = "latched" if ctl.safety.latched else ("stale" if ctl.safety.stale else "running")
            for ev in io.poll(now, h, ctl.safety.latched is not None):
                _publish_event(ctx, ev)
            missed = sched.done()
            if missed:
                h.count("loop/overruns")
                h.count("loop/missed", missed)
        clean = ctl.safety.latched is None  # asked to stop with nothing latched (not a crash)
    finally:
        try:
            io.write(Decision(False, np.zeros(A), None))
            if clean:
                io.release()
        except (OSError, ValueError):
            pass
        io.close()
        ops[1].close()
    return 0


def _watchdog_tripped(ctx, ctl: Controller, io: McuIo, reset: bool, now: int) -> None:
    """The MCU says its watchdog tripped while this loop ran (the loop, or the machine, stalled longer than
    ``watchdog_ms``): its motors are off until a RESET. The loop latches too: without ``--reset-on-latch``
    like an MCU found latched (an ``estop`` event naming the MCU; `walklab estop --reset` clears both);
    with it (simulated robots: a Python firmware thread starved on a loaded machine trips its own
    watchdog) the latch holds one cycle at least — the commanded torque is then zero — and
    `_reset_after_trip` clears both, so the torque restarts from zero through the torque slew."""
    io.tripped = False
    why = f"the MCU on {io.port} (its watchdog tripped: no COMMAND within {io.watchdog_ms} ms)"
    if not reset:
        io.mcu_latch = why
        return
    ev = ctl.safety.estop(now, why + "; --reset-on-latch: RESET next")
    _publish_event(ctx, ev, now)
    ctx.health.count(f"safety/{ev.cause}")
    io.reset_due = ev
    io.next_reset = max(io.next_reset, now + 1)  # not in this cycle: one latched cycle zeroes the torque


def _reset_after_trip(ctx, ctl: Controller, io: McuIo, now: int) -> None:
    """--reset-on-latch, a cycle after the trip: RESET the MCU (at most once a second; ``mcu/resets``) and
    clear the loop's latch (``reset`` event); a RESET the MCU does not acknowledge is retried a second later."""
    from firmware_bridge.link import LinkError, NackError

    io.next_reset = now + 1_000_000_000
    try:
        io.reset()
    except (LinkError, NackError) as exc:
        _publish_event(ctx, Event(now, "mcu_reset", f"RESET after the watchdog trip failed: {exc}; retrying"), now)
        return
    io.reset_due = None
    ctx.health.count("mcu/resets")
    _publish_event(ctx, Event(now, "mcu_reset", f"the MCU on {io.port}: RESET after its watchdog tripped"), now)
    _publish_event(ctx, ctl.safety.reset(now), now)


def _start_walk(ctx, ctl: Controller, initial: Request | None, now: int, meas: Measured | None,
                zmp: ZmpWatch | None) -> Request | None:
    """The initial request (``--speed``, ``--turn``) at the first cycle whose measurement is fresh and, live
    under the ZMP guard (`zmp` given), whose newest ZMP sample is fresh too (within ``limits.zmp_stale_s``: a
    lab's processes start in any order, and a dynamics service catches up with its inputs for its first
    seconds; a walk requested before its guard's input is live would stop at once, ``zmp_stale``); published as an
    operator request's event, or a ``rejected`` one if the controller refuses it. Returns what is still to
    apply (None once applied; the caller drops it when an operator frame comes first: the operator's word
    wins)."""
    if initial is None or meas is None or (now - meas.t_ns) * 1e-9 > ctl.cfg.limits.stale_s:
        return initial
    if zmp is not None and (zmp.newest is None or (now - zmp.newest) * 1e-9 > ctl.cfg.limits.zmp_stale_s):
        return initial      # no ZMP yet, or only old ones (a dynamics service still catching up at its start)
    try:
        nom = ctl.command(initial)
    except (ValueError, LookupError) as exc:
        log.warning("initial request refused: %s", exc)
        _publish_event(ctx, Event(now, "rejected", f"initial request: {exc}"), now)
        return None
    _publish_event(ctx, Event(now, "request", f"initial request: speed {initial.speed} m/s, turn {initial.turn} "
                                              f"rad/s -> {nom.name if nom else 'stop'}"), now,
                   speed=initial.speed, turn=initial.turn)
    return None


def _run_shadow(ctx, o: argparse.Namespace, cfg: RobotConfig, ctl: Controller, rate: float,
                initial: Request | None) -> int:
    """Shadow mode (module doc): encoder streams in, cycles on the data's clock, nothing commanded."""
    from controller.proc import subscriber_for

    state = BusState(cfg.actuators, round(1e9 / rate))
    zmp = ZmpWatch("t", unknown_ok=o.zmp_guard == "plates") if ctl.zmp_guard else None
    sub = ctx.subscriber([*state.index, REQUEST_STREAM, ESTOP_STREAM] + ([ZMP_STREAM] if zmp else []), expect=())
    operator = subscriber_for(ctx.lab, [o.operator], [REQUEST_STREAM, ESTOP_STREAM], expect=())
    states = _States(ctx, cfg.actuators, o.block, rate)
    pending: list = []  # operator frames, applied at the first cycle at or after their t
    ready: deque = deque()  # cycles the encoder streams cover, waiting for the ZMP stream to cover them too
    rejected_log = LogThrottle(log)  # a bad encoder stream repeats it every frame: a line a second
    h = ctx.health
    try:
        while not ctx.stopping:
            ctx.tick()
            f = sub.recv(timeout_s=0.05)
            while (g := operator.recv(timeout_s=0)) is not None:
                pending.append(g)
            if f is None:
                continue
            if f.stream in (REQUEST_STREAM, ESTOP_STREAM):
                pending.append(f)
                continue
            if f.stream == ZMP_STREAM:
                _feed_zmp(ctx, zmp, f)
            else:
                try:
                    state.feed(f)
                except ValueError as exc:
                    h.count("encoder/rejected")
                    rejected_log.log("%s", exc)
                    continue
                ready.extend(state.cycles())
            # the guard's input on the data's clock too: a cycle runs once the ZMP stream covers it, or once the
            # encoders are HOLD_S past it (the stream stopped or never came: the guard finds it stale) — a replay's
            # recomputed ZMP arrives after its encoder samples (the guard latched zmp_stale at the first cycle)
            while ready and (zmp is None or (zmp.covered is not None and zmp.covered >= ready[0][0])
                             or state.newest - ready[0][0] > state.hold_ns):
                t, meas = ready.popleft()
                h.count("loop/cycles")
                due = [g for g in pending if g.t is None or g.t <= t]
                for g in due:
                    pending.remove(g)
                    _operator(ctx, ctl, None, g, t)
                    initial = None
                new = zmp.take(t) if zmp else None
                # on the data's clock: the first cycle with a fresh measurement and, under the guard, a fresh ZMP
                # sample (as live), whatever order the streams arrive in
                initial = _start_walk(ctx, ctl, initial, t, meas, zmp)
                out = ctl.update(t, meas, new, zmp.newest if zmp else None)
                _events(ctx, out, None, t)
                states.add(t, math.nan, out, meas)
                h.state = "latched" if ctl.safety.latched else ("stale" if ctl.safety.stale else "running")
    finally:
        operator.close()
    return 0


def _operator(ctx, ctl: Controller, io: McuIo | None, frame, now: int) -> None:
    """Apply one operator frame: a request (speed, turn) or an e-stop latch/reset (the MCU's too, unless
    `io` is None: shadow mode). Events are stamped `now`."""
    try:
        if frame.stream == ESTOP_STREAM:
            latch = bool(frame.data[-1, 0])
            if latch:
                ev = ctl.safety.estop(now, str(frame.meta.get("source", "bus")) if frame.meta else "bus")
                if io is not None:
                    io.estop()
            else:
                if io is not None:
                    io.reset()
                ev = ctl.safety.reset(now)
            _publish_event(ctx, ev, now)
        elif frame.stream == REQUEST_STREAM:
            names = list(frame.channels)
            row = frame.data[-1]
            req = Request(float(row[names.index("speed")]), float(row[names.index("turn")]) if "turn" in names else 0.0)
            nom = ctl.command(req)
            lat = ctl.safety.latched
            # a walk requested under a latch is held, not refused: say so (the command exits 0 and prints this)
            held = f" (held: latched by {lat.cause} until `walklab estop --reset`)" if nom and lat else ""
            _publish_event(ctx, Event(now, "request", f"speed {req.speed} m/s, turn {req.turn} rad/s -> "
                                                     f"{nom.name if nom else 'stop'}{held}"), now,
                           speed=req.speed, turn=req.turn)
    except (ValueError, LookupError, OSError) as exc:
        log.warning("operator frame on %s refused: %s", frame.stream, exc)
        ctx.health.count("operator/rejected")
        _publish_event(ctx, Event(now, "rejected", f"{frame.stream}: {exc}"), now)
