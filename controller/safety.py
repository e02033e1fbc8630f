"""Safety of the real-time loop: limits, stale-data watchdog, ZMP-margin guard, latched e-stop.

Every cycle the loop passes the measured state and the commands it wants through `Safety`; what
comes out is what may reach the motors. Rules, in order (docs/controller.md, Safety):

1. **Latched stop** (e-stop from the command line or the bus, or a limit fault): torque off on every
   motor until `reset`. Causes ``estop`` (with its source), ``position_limit``, ``velocity_limit``,
   ``invalid_command``. The ZMP guard's stops (`RAMPED`: ``zmp_margin``, ``zmp_stale``) are latched
   too, but the torque ramps down through the torque slew (the stop behaviour of a speed-0 request),
   then the motors idle; any other latching cause arriving during that ramp cuts the torque at once.
2. **Stale data**: the newest measurement older than ``limits.stale_s`` (or none yet): torque off
   while stale, an event at the onset (``stale``) and at the recovery (``fresh``); not latched, and
   never a wait (the loop keeps its period).
3. **Position and velocity limits** on the measured state (position limits only where configured:
   a crank turns freely): a breach latches a fault.
4. **ZMP stability-margin guard** (biped / exoskeleton; only where the caller gives a ZMP age, i.e.
   while a nominal is tracked): a ZMP sample new this cycle whose margin is below its floor latches
   ``zmp_margin``. The floor (the caller's, `controller.loop.Controller.floor`) is min(``limits.min_margin``,
   P - ``limits.margin_tolerance``), P the nominal's planned margin: ``min_margin`` where the plan keeps more
   room than that, the plan less the tolerance where it comes nearer the edge (law 6 plans the ZMP on the toe's edge through the heel-off, a human's push-off:
   margin 0; an absolute floor would stop every stride there) — the plan taken over
   ``limits.margin_window_s`` around the sample (its lag, the phase estimate's error). The newest ZMP sample older than
   ``limits.zmp_stale_s`` (or none yet) latches ``zmp_stale`` (the guard cannot guard). Both ask the
   controller for its stop (`Decision.stop_requested`: the nominal is dropped, the torque ramps to
   zero, then idle) and hold until `reset`.
5. **Command shaping** (dt: the loop's period, also after missed cycles — a cycle never moves further than
   one period allows, so the setpoint may lag a reference that moved on in time, then catches up): the
   position setpoint moves at most ``slew x dt`` per cycle (`setpoint`,
   applied before the PD term is computed from it, so the torque follows the limited setpoint), the
   torque at most ``torque_slew x dt`` per cycle and never beyond +-``torque`` (`shape`). A cycle
   where either limit acted names it in `Decision.shaped` (``setpoint_slew``, ``clipped``; the loop
   counts them as health counters ``safety/setpoint_slew`` and ``safety/clipped``). The torque
   leaving a stop ramps from zero at the torque slew, never jumps; the setpoint restarts where the
   reference is.

Events are returned with the decision (the loop publishes each on ``controller/events`` with its
cause); the MCU watchdog stays the last line (a stalled loop stops feeding it).
Arrays are (A,) per actuator in SI (rad, rad/s, N m).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: Latched stops that ramp the torque down through the torque slew instead of cutting it (module doc, rule 1).
RAMPED = frozenset({"zmp_margin", "zmp_stale"})


@dataclass(frozen=True)
class Event:
    """A safety event: t_ns host monotonic time, cause, detail (one line), latched (a stop until reset)."""

    t_ns: int
    cause: str
    detail: str
    latched: bool = False


@dataclass(frozen=True)
class Decision:
    """What may reach the motors this cycle: enabled (False = torque off), tau (A,) N m, q_ref (A,)
    rad (slew-limited setpoint), events, stop_requested (switch to the stop nominal), shaped (the
    shaping limits that acted this cycle: "setpoint_slew", "clipped")."""

    enabled: bool
    tau: np.ndarray
    q_ref: np.ndarray | None
    events: tuple[Event, ...] = ()
    stop_requested: bool = False
    shaped: tuple[str, ...] = ()


@dataclass
class Safety:
    """The loop's safety state (module doc). limits: `controller.synergies.robot.Limits`; dt: period (s)."""

    limits: object
    dt: float
    latched: Event | None = None
    stale: bool = True
    tau: np.ndarray = field(default=None)
    q_ref: np.ndarray | None = None
    counts: dict = field(default_factory=dict)
    slewed: bool = False  # `setpoint` limited the setpoint this cycle (reported by the next `shape`)

    def __post_init__(self) -> None:
        n = len(self.limits.torque)
        if self.tau is None:
            self.tau = np.zeros(n)
        self._tmax = np.asarray(self.limits.torque, dtype=float)
        self._vmax = np.asarray(self.limits.velocity, dtype=float)
        self._slew = np.asarray(self.limits.slew, dtype=float) * self.dt
        self._tslew = np.asarray(self.limits.torque_slew, dtype=float) * self.dt

    def _count(self, ev: Event) -> Event:
        self.counts[ev.cause] = self.counts.get(ev.cause, 0) + 1
        return ev

    def _latch(self, ev: Event) -> bool:
        """Latch ev unless a stop is latched already; a hard stop replaces a ramped one (rule 1)."""
        if self.latched is None or (self.latched.cause in RAMPED and ev.cause not in RAMPED):
            self.latched = ev
            return True
        return False

    def estop(self, t_ns: int, source: str) -> Event:
        """Latch the e-stop (from `source`: "cli", "bus", ...)."""
        ev = self._count(Event(t_ns, "estop", f"e-stop from {source}", True))
        self._latch(ev)
        return ev

    def reset(self, t_ns: int) -> Event:
        """Clear a latched stop; the torque restarts from zero through the torque slew."""
        was = self.latched.cause if self.latched else "nothing"
        self.latched = None
        self.tau = np.zeros_like(self.tau)
        self.q_ref = None
        return self._count(Event(t_ns, "reset", f"reset (was {was})"))

    def check(self, t_ns: int, age_s: float, q, qd, margin: float | None = None,
              zmp_age_s: float | None = None, floor: float | None = None) -> list[Event]:
        """Rules 2-4 on the measured state (age_s: age of the newest measurement, s; inf if none).
        margin: the ZMP stability margin (m) of the sample new since the last call furthest below its floor
        (None: no new sample), floor: that sample's floor (m; None: ``limits.min_margin``); zmp_age_s: age
        (s) of the newest ZMP sample (inf: none yet; None: the guard is not watching, e.g. no nominal
        tracked)."""
        events: list[Event] = []
        fresh = math.isfinite(age_s) and age_s <= self.limits.stale_s
        if not fresh and not self.stale:
            events.append(self._count(Event(t_ns, "stale", f"newest measurement {age_s * 1e3:.1f} ms old "
                                                           f"(limit {self.limits.stale_s * 1e3:.1f} ms): torque off")))
        elif fresh and self.stale:
            events.append(self._count(Event(t_ns, "fresh", "measurements fresh again")))
        self.stale = not fresh
        if not fresh:
            return events
        q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
        bad_v = np.flatnonzero(~(np.abs(qd) <= self._vmax))
        if bad_v.size:
            j = int(bad_v[0])
            ev = Event(t_ns, "velocity_limit", f"actuator {j}: |{qd[j]:.4g}| rad/s > {self._vmax[j]:.4g}", True)
            if self._latch(ev):
                events.append(self._count(ev))
        lo, hi = self.limits.position_min, self.limits.position_max
        if lo is not None:
            bad_q = np.flatnonzero(~((q >= np.asarray(lo)) & (q <= np.asarray(hi))))
            if bad_q.size:
                j = int(bad_q[0])
                ev = Event(t_ns, "position_limit", f"actuator {j}: {q[j]:.4g} rad outside [{lo[j]:.4g}, {hi[j]:.4g}]",
                           True)
                if self._latch(ev):
                    events.append(self._count(ev))
        if zmp_age_s is not None and self.latched is None:
            lim = self.limits
            least = lim.min_margin if floor is None else floor
            if margin is not None and not (margin >= least):
                why = "limits.min_margin" if least == lim.min_margin else "the plan's margin less margin_tolerance"
                ev = Event(t_ns, "zmp_margin", f"stability margin {margin:.4g} m < {least:.4g} m ({why}): stop, "
                                               f"then idle", True)
            elif not zmp_age_s <= lim.zmp_stale_s:
                ev = Event(t_ns, "zmp_stale", (f"newest ZMP sample {zmp_age_s:.3f} s old" if math.isfinite(zmp_age_s)
                                               else "no ZMP sample yet") +
                           f" (limit {lim.zmp_stale_s:.3f} s): the margin guard is blind; stop, then idle", True)
            else:
                ev = None
            if ev is not None:
                self._latch(ev)
                events.append(self._count(ev))
        return events

    def setpoint(self, q_ref) -> np.ndarray:
        """Rule 5's setpoint slew: the reference q_ref (A,) rad moved at most ``slew x dt`` from the
        previous cycle's setpoint (the first after a stop is taken as it is); the PD term is computed
        from what this returns, then `shape` is called with the torque and this setpoint."""
        q = np.asarray(q_ref, dtype=float)
        if self.q_ref is not None:
            lim = np.clip(q, self.q_ref - self._slew, self.q_ref + self._slew)
            self.slewed = bool(np.any(lim != q))
            if self.slewed:
                self.counts["setpoint_slew"] = self.counts.get("setpoint_slew", 0) + 1
            q = lim
        self.q_ref = q
        return q.copy()

    def shape(self, t_ns: int, tau, q_ref=None, events: list[Event] | None = None) -> Decision:
        """Rules 1, 2 and 5: the torque (A,) N m that may be commanded, computed from the setpoint
        q_ref (A,) rad that `setpoint` returned this cycle (None: no setpoint, e.g. a stop ramp)."""
        events = list(events or [])
        stop = any(e.cause in RAMPED for e in events)
        shaped = ("setpoint_slew",) if self.slewed and q_ref is not None else ()
        self.slewed = False
        if self.latched is not None and self.latched.cause in RAMPED and not self.stale:
            # the ZMP guard's stop: the torque ramps to zero through the torque slew, then idle
            self.tau = np.clip(0.0, self.tau - self._tslew, self.tau + self._tslew)
            self.q_ref = None
            return Decision(bool(np.any(self.tau != 0)), self.tau.copy(), None, tuple(events), stop)
        if self.latched is not None or self.stale:
            self.tau = np.zeros_like(self.tau)
            self.q_ref = None
            return Decision(False, self.tau.copy(), None, tuple(events), stop)
        want = np.asarray(tau, dtype=float)
        if not np.all(np.isfinite(want)):
            self._latch(self._count(Event(t_ns, "invalid_command", "non-finite torque command", True)))
            self.tau = np.zeros_like(self.tau)
            self.q_ref = None
            return Decision(False, self.tau.copy(), None, tuple(events) + (self.latched,), stop)
        out = np.clip(want, self.tau - self._tslew, self.tau + self._tslew)
        out = np.clip(out, -self._tmax, self._tmax)
        if np.any(out != want):
            self.counts["clipped"] = self.counts.get("clipped", 0) + 1
            shaped += ("clipped",)
        self.tau = out
        if q_ref is None:
            self.q_ref = None  # no setpoint this cycle: the next one starts where its reference is
        return Decision(True, out.copy(), None if q_ref is None else np.array(q_ref, dtype=float), tuple(events),
                        stop, shaped)
