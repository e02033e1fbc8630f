"""The reference generator of the real-time loop: phase clocks over the current nominal and the
transition to the next one (methods.md j.6; the lower level of the two-level scheme).

Phase: each actuator of a crank programme has its own clock (cycles; the shafts turn at different
rates while turning); a joint nominal (wrap 0: biped, exoskeleton) has one clock shared by all
actuators. The clock is the phase estimate: the loop's PD corrects the tracking error, and
`Tracker.align` re-synchronises it to a measured state (start, resume after a stop).

Nominal coordinate over phase: Q(p) = periodic part + wrap p, so q(t) = Q(p(t)) with p' = 1/T and
Q' = T q', Q'' = T^2 q''. Every nominal of one robot starts its cycle at the same configuration
event (a crank programme: shaft angle 0 at phase 0; a gait: the same gait event), so two nominals
are compared at the same phase.

Switching: `request` queues a nominal; it starts at the next safe phase of the current one
(meta["switch_phases"], cycles, e.g. the start of double support of a stride; any phase when absent:
a Jansen walker's shafts keep turning forward). During the transition (duration D, quintic weight
a(s) of `dynamics.synthesis.transition.blend_weight`, s = t/D) the clock rate and the shape blend:

    p' = (1 - a)/T_f + a/T_t,    q = (1 - a) Q_f(p) + a Q_t(p)
    q' = [(1 - a) Q_f' + a Q_t'] p' + (a'/D) (Q_t - Q_f)

(the clock advances by the exact integral of p', `_weight_integral`, so every setpoint lies on this law)

so q, q', q'' are continuous at both ends (no setpoint jump). The rate is at most
B + (15/8) max|Q_t - Q_f| / D, B the bound of the first term (`Tracker._rate_bound`, 15/8 = max a'), so
D = max(min_transition_s, (15/8) max|Q_t - Q_f| / (slew - B)) keeps every setpoint step within slew x dt. A request during a transition waits for its end.

Precomputed transitions (biped / exoskeleton, `controller.synergies.transitions`): a switch between two
semi-inverse nominals (meta kind ``semi_inverse``) never uses the online blend above (its ZMP is not
checked). It goes through the library's stored transition from the current nominal to the requested
one, if that transition was accepted (its ZMP deviation d_max < eps) and its ZMP stays inside the support
(its margin >= 0; the loop's margin guard then holds the measured margin to the stored one): the switch starts when the phase
next crosses a whole stride (the stored stride starts at nominal a's phase 0), the setpoint follows the
stored stride for one period T (`StoredTransition.reference`), then nominal b from its phase 0 (both
nominals share T, so the clock's rate does not change). A nominal that is not a neighbour (a step scale
S two grid steps away) is reached through a chain of neighbours: the route with the fewest usable stored
transitions (breadth-first over the library's nominals, `Tracker.route`), each stride of it followed by
the next from its end (a stored stride ends on its nominal's phase 0, where the next one starts: no
stride of the nominals in between). The next hop is always the queued switch: a re-align (a resume after
a stop or stale data) keeps it, so the route goes on from a whole stride of the nominal reached; a new
request during a stride replaces the rest of the route by one from that stride's nominal, started where
the stride ends. A request for which no such route exists (another T or ZMP law; a
transition on every route rejected, or below the margin) is refused with a `SelectionError` naming the
pair and, for a direct pair, d_max: the operator stops (speed 0: the torque ramps off) and starts the other
nominal from rest.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from dynamics.synthesis.transition import blend_weight

from .format import StoredTransition, Synergy
from .select import INSIDE, SelectionError

#: cycles: how far from the clock `Tracker.follow` looks for the measured gait's phase (a wearer 10 % of a
#: stride off the clock is a different situation: a stop and a re-align, not a correction)
FOLLOW_WIDTH = 0.1


@dataclass(frozen=True)
class Reference:
    """Setpoint of one cycle, each (A,): q rad, qd rad/s, qdd rad/s^2, tau N m (feed-forward); margin
    (m): the planned ZMP stability margin there (the nominal's or the stored transition's; an online
    blend the lesser of its two nominals'; NaN where none is planned)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    nominal: str
    phase: np.ndarray
    blending: bool
    margin: float = math.nan


class Tracker:
    """Phase clocks, switching and transitions (module doc). slew (A,) rad/s; `nominals`: the library's, the
    waypoints of a route through neighbours."""

    def __init__(self, nominal: Synergy, slew, min_transition_s: float = 0.5,
                 transitions: tuple[StoredTransition, ...] | list = (),
                 nominals: tuple[Synergy, ...] | list = ()) -> None:
        self.slew = np.asarray(slew, dtype=float)
        self.min_transition_s = float(min_transition_s)
        self._rate_bound(nominal, nominal)
        self.nominal = nominal
        self.phase = np.zeros(len(nominal.actuators))
        self.pending: Synergy | None = None
        self.transitions = {(t.meta["from"], t.meta["to"]): t for t in transitions}
        self._pending_via: StoredTransition | None = None  # the stored transition to the pending nominal
        self._via: StoredTransition | None = None          # the stored transition being followed
        self._route: list[tuple[Synergy, StoredTransition]] = []  # the hops after the pending one
        self.library = {s.name: s for s in nominals}
        self._p0 = 0.0                                      # the whole phase where it started
        self._from: Synergy | None = None
        self._t = 0.0
        self._D = 0.0
        self.switches = 0

    def _rate_bound(self, f: Synergy, t: Synergy) -> np.ndarray:
        """Bound of the shape-blend rate [(1 - a) Q_f' + a Q_t'] p' per actuator: with |Q'| <= v T,
        max over a in [0, 1] of ((1 - a) v_f T_f + a v_t T_t)((1 - a)/T_f + a/T_t) (= max(v_f, v_t)
        for constant-rate cranks). SelectionError if it reaches the slew limit."""
        a = np.linspace(0.0, 1.0, 101)[:, None]
        vf, vt = np.abs(f.qd).max(axis=0), np.abs(t.qd).max(axis=0)
        bound = (((1 - a) * vf * f.period + a * vt * t.period) * ((1 - a) / f.period + a / t.period)).max(axis=0)
        if np.any(bound >= self.slew):
            raise SelectionError(f"nominals {f.name} -> {t.name}: rates up to {bound.round(3).tolist()} rad/s "
                                 f"reach the setpoint slew limits {self.slew.tolist()} rad/s")
        return bound

    def align(self, q) -> None:
        """Set the clock to the phase of the current nominal nearest the measured coordinates q (A,); a
        transition under way ends (a resume after a stop starts on the current nominal)."""
        self.phase = nearest_phase(self.nominal, np.asarray(q, dtype=float))
        self._from = self._via = None

    def follow(self, q, gain: float, dt: float) -> None:
        """Pull the clock toward the measured gait, before a `step` of dt (s): with φ the clock at the end of
        that step and φ_m the phase of the current nominal nearest the measured coordinates q (A,) within
        ±`FOLLOW_WIDTH` cycles of φ (`local_phase`), φ += min(gain dt, 1) (φ_m − φ) — a first-order
        phase-locked loop of time constant 1/gain s (gain 1/s). So a wearer who walks slower or faster than
        the nominal's period T keeps the setpoint with it: the clock's rate settles at the wearer's, its
        phase lag at (1/T_wearer − 1/T)/gain cycles. Joint nominals only (a crank programme's shafts follow
        the setpoint), never during a transition; gain 0: the clock alone."""
        if gain <= 0 or self._from is not None or np.any(self.nominal.wrap != 0):
            return
        phi = float(self.phase[0]) + dt / float(self.nominal.period[0])
        err = local_phase(self.nominal, np.asarray(q, dtype=float), phi, FOLLOW_WIDTH) - phi
        self.phase = self.phase + min(gain * dt, 1.0) * err

    def request(self, nominal: Synergy) -> None:
        """Queue a switch to `nominal` (the current one: cancel a queued switch). SelectionError if the
        switch is not allowed (module doc: rates beyond the slew limit; between semi-inverse nominals,
        no accepted stored transition)."""
        if nominal is self.nominal:
            self.pending = self._pending_via = None
            self._route = []
            return
        if tuple(nominal.actuators) != tuple(self.nominal.actuators) or np.any(nominal.wrap != self.nominal.wrap):
            raise SelectionError(f"nominal {nominal.name}: actuators {nominal.actuators} (wrap {nominal.wrap.tolist()}) "
                                 f"differ from {self.nominal.actuators}")
        route: list[tuple[Synergy, StoredTransition]] = []
        if "semi_inverse" in (nominal.meta.get("kind"), self.nominal.meta.get("kind")):
            route = self.route(self.nominal, nominal)
        else:
            self._rate_bound(self.nominal, nominal)
            route = [(nominal, None)]
        (self.pending, self._pending_via), self._route = route[0], route[1:]

    def refusal(self, tr: StoredTransition) -> str | None:
        """Why the stored transition `tr` may not be followed (module doc), None if it may."""
        if not tr.meta["accepted"]:
            return (f"its transition was rejected (ZMP deviation {tr.meta['zmp_max_deviation']:.4f} m >= eps "
                    f"{tr.meta['eps']:.4f} m)")
        if not tr.meta["min_margin"] >= -INSIDE:
            return f"its transition's ZMP leaves the support (stability margin {tr.meta['min_margin']:.4f} m < 0)"
        fast = np.abs(tr.qd).max(axis=0)
        if np.any(fast >= self.slew):
            return f"its transition's rates up to {fast.round(3).tolist()} rad/s reach the setpoint slew limits " \
                   f"{self.slew.tolist()} rad/s"
        return None

    def route(self, a: Synergy, b: Synergy) -> list[tuple[Synergy, StoredTransition]]:
        """The hops (nominal, stored transition into it) from a to b with the fewest strides of transition
        (breadth-first; ties by name): b's direct transition when it may be followed, else a chain through
        the library's nominals. SelectionError naming why there is none."""
        prev: dict[str, StoredTransition] = {}
        seen, todo = {a.name}, deque([a.name])
        while todo and b.name not in prev:
            here = todo.popleft()
            for (f, t), tr in sorted(self.transitions.items()):
                if f == here and t not in seen and (t == b.name or t in self.library) and self.refusal(tr) is None:
                    seen.add(t)
                    prev[t] = tr
                    todo.append(t)
        if b.name not in prev:
            stop = "stop first (speed 0) and start it from rest"
            direct = self.transitions.get((a.name, b.name))
            if direct is not None:  # refused, and no detour either
                raise SelectionError(f"{a.name} -> {b.name}: {self.refusal(direct)}: {stop}")
            raise SelectionError(f"{a.name} -> {b.name}: no chain of usable precomputed transitions (the library has "
                                 f"them between neighbouring step scales of one period and ZMP law): {stop}")
        hops, name = [], b.name
        while name != a.name:
            tr = prev[name]
            hops.append((b if name == b.name else self.library[name], tr))
            name = tr.meta["from"]
        return hops[::-1]

    @property
    def blending(self) -> bool:
        return self._from is not None

    def _safe(self, old: np.ndarray, new: np.ndarray) -> bool:
        if self._pending_via is not None:  # a stored transition starts at a whole stride
            return bool(np.floor(new[0]) > np.floor(old[0]))
        sp = self.nominal.meta.get("switch_phases")
        if not sp:
            return True
        return any(np.floor(new[0] - s) > np.floor(old[0] - s) for s in sp)  # a safe phase crossed in (old, new]

    def step(self, dt: float) -> Reference:
        """Advance the clocks by dt (s) and return the setpoint (switching when due)."""
        if self._from is None:
            old = self.phase
            self.phase = self.phase + dt / self.nominal.period
            if self.pending is not None and self._safe(old, self.phase):
                self._start(self.pending)
            else:
                q, qd, qdd, tau = self.nominal.reference(self.phase)
                return self._on_nominal()
        elif self._via is not None:
            self.phase = self.phase + dt / self.nominal.period
        else:  # the clock's exact integral (forward Euler would leave the setpoint off the blend law by O(dt))
            W = _weight_integral(self._t + dt, self._D) - _weight_integral(self._t, self._D)
            self.phase = self.phase + dt / self._from.period + W * (1 / self.nominal.period - 1 / self._from.period)
            self._t += dt
            if self._t >= self._D:
                self._from = None
                q, qd, qdd, tau = self.nominal.reference(self.phase)
                return self._on_nominal()
        if self._via is not None:
            x = float(self.phase[0] - self._p0)
            if x >= 1.0 and self._pending_via is not None:  # the next stride starts where this one ends (phase 0)
                self._from = self._via = None
                self._start(self.pending)
                x = float(self.phase[0] - self._p0)
            if x < 1.0:
                q, qd, qdd, tau = self._via.reference(x)
                return Reference(q, qd, qdd, tau, self.nominal.name, self.phase.copy(), True,
                                 self._via.planned_margin(x))
            self._from = self._via = None
            return self._on_nominal()
        return self._blended()

    def _on_nominal(self) -> Reference:
        q, qd, qdd, tau = self.nominal.reference(self.phase)
        return Reference(q, qd, qdd, tau, self.nominal.name, self.phase.copy(), False,
                         self.nominal.planned_margin(float(self.phase[0])))

    def _blended(self) -> Reference:
        f, t, D = self._from, self.nominal, self._D
        a, da, dda = (float(x) for x in blend_weight(self._t / D))
        qf, vf, af, tf = f.reference(self.phase)
        qt, vt, at, tt = t.reference(self.phase)
        Qf1, Qt1 = vf * f.period, vt * t.period        # dQ/dp
        Qf2, Qt2 = af * f.period ** 2, at * t.period ** 2
        dQ = qt - qf
        p1 = (1 - a) / f.period + a / t.period
        p2 = da / D * (1 / t.period - 1 / f.period)
        q = qf + a * dQ
        qd = ((1 - a) * Qf1 + a * Qt1) * p1 + da / D * dQ
        qdd = (((1 - a) * Qf2 + a * Qt2) * p1 ** 2 + ((1 - a) * Qf1 + a * Qt1) * p2
               + 2 * da / D * (Qt1 - Qf1) * p1 + dda / D ** 2 * dQ)
        # feed-forward: the blended torques plus the inertia times the blend's extra acceleration
        # (the velocity-product terms of the blend are neglected)
        inertia = (1 - a) * _at_phase(f, f.inertia, self.phase) + a * _at_phase(t, t.inertia, self.phase)
        tau = (1 - a) * tf + a * tt + inertia * (qdd - ((1 - a) * af + a * at))
        ph = float(self.phase[0])
        return Reference(q, qd, qdd, tau, t.name, self.phase.copy(), True,
                         float(np.fmin(f.planned_margin(ph), t.planned_margin(ph))))

    def _start(self, new: Synergy) -> None:
        if self._pending_via is not None:
            self._via, self._p0 = self._pending_via, float(np.floor(self.phase[0]))
            self._from, self.nominal, self.pending, self._pending_via = self.nominal, new, None, None
            if self._route:  # a route's next hop is queued at once: a re-align keeps it, a new request replaces it
                (self.pending, self._pending_via), self._route = self._route[0], self._route[1:]
            self.switches += 1
            return
        bound = self._rate_bound(self.nominal, new)
        dQ = np.abs(periodic_part(new, new.u) - periodic_part(self.nominal, new.u)).max(axis=0)
        self._D = float(max(self.min_transition_s, np.max(1.875 * dQ / (self.slew - bound))))
        self._from, self._t = self.nominal, 0.0
        self.nominal, self.pending = new, None
        self.switches += 1


def nearest_phase(syn: Synergy, q: np.ndarray) -> np.ndarray:
    """Phase (A,) cycles of `syn` nearest coordinates q (A,): per actuator for wrapped coordinates
    (cranks: the angle modulo wrap, with the nearest whole cycle), one shared phase for joints
    (least squares over the coordinates)."""
    if np.all(syn.wrap != 0):
        out = np.empty(len(syn.actuators))
        for j, w in enumerate(syn.wrap):
            k = np.round((q[j] - syn.q[:, j]) / w)
            m = int(np.argmin(np.abs(q[j] - syn.q[:, j] - w * k)))
            out[j] = k[m] + syn.u[m]
        return out
    return np.full(len(syn.actuators), syn.u[int(np.argmin(((syn.q - q) ** 2).sum(axis=1)))])


def local_phase(syn: Synergy, q: np.ndarray, around: float, width: float) -> float:
    """The phase (cycles, near `around`) of joint nominal `syn` whose coordinates are nearest q (A,) rad in
    the least-squares sense, searched over the stored samples within ±width cycles of `around`, refined
    between samples by the parabola through the best one and its neighbours' squared distances."""
    M = syn.u.size
    k0 = int(np.floor(around * M))
    ks = np.arange(k0 - int(np.ceil(width * M)), k0 + int(np.ceil(width * M)) + 2)
    d = ((syn.q[ks % M] - q) ** 2).sum(axis=1)
    i = int(np.clip(np.argmin(d), 1, ks.size - 2))
    a, b, c = d[i - 1], d[i], d[i + 1]
    den = a - 2 * b + c
    shift = 0.5 * (a - c) / den if den > 0 else 0.0
    return float((ks[i] + np.clip(shift, -1.0, 1.0)) / M)


def _weight_integral(t: float, D: float) -> float:
    """Integral (s) of the blend weight a(t'/D) over t' in [0, t]: D s^4 (5/2 - 3 s + s^2) with s = t/D <= 1
    (the integral of 10 s^3 - 15 s^4 + 6 s^5), plus t - D after the blend's end (a = 1), so the clock
    p' = 1/T_f + a (1/T_t - 1/T_f) advances by dt/T_f + (1/T_t - 1/T_f) [W(t + dt) - W(t)]."""
    s = min(t / D, 1.0)
    return D * s ** 4 * (2.5 - 3 * s + s * s) + max(t - D, 0.0)


def _at_phase(syn: Synergy, values: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """A periodic (M, A) table at one phase per actuator (A,), linear between samples."""
    x = (phase - np.floor(phase)) * syn.u.size
    k = x.astype(np.intp) % syn.u.size
    f = x - np.floor(x)
    idx = np.arange(values.shape[1])
    return (1 - f) * values[k, idx] + f * values[(k + 1) % syn.u.size, idx]


def periodic_part(syn: Synergy, u: np.ndarray) -> np.ndarray:
    """Q(p) - wrap p (rad), shape (K, A), at phases u (K,) in [0, 1), linear between the stored samples
    (for transition sizing: cheap, no spline)."""
    y = syn.q - syn.wrap * syn.u[:, None]
    x = np.append(syn.u, 1.0)
    y = np.vstack([y, y[:1]])
    return np.column_stack([np.interp(u, x, y[:, j]) for j in range(y.shape[1])])
