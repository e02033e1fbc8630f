"""Dynamics service, tree-model path: live joint torques of a human or exoskeleton from its full-body
markers and the measured plates.

The walker process (`dynamics.service_torques`, ``module = "dynamics.service_torques"``) serves this
path when its ``--model`` file is a tree (``kind = "tree"``: configs/models/human15.toml,
exoskeleton.toml; its `service_from` branches on the kind). It subscribes to

- the full-body markers ``--markers`` (default ``markers/sim``: channels ``LABEL:x|y|z`` in m, lab
  frame z up, NaN where occluded): its samples are the output grid;
- each force plate's wrench ``dynamics/grf/NAME`` of the process's plate devices (``Fx Fy Fz`` N,
  ``Mx My Mz`` N·m about the plate's surface centre, lab axes; ``valid`` 1 where F_z > the plate
  service's threshold).

Per marker frame, as it arrives (the offline pieces of `dynamics.human15_markers`):

1. each marker coordinate low-passed by a centred window (``--filter-hz`` fc, default `FILTER_HZ` = 6 Hz;
   0: none): `smoothing.centred_lowpass` (scipy's ``firwin``, 2L + 1 taps, L = round(0.3 fs/fc): 10 at
   200 Hz and 6 Hz), x̄_i = Σ_k h_k x_{i−L+k} — linear phase applied centred, so zero phase: the value at
   sample i needs the L samples after it (L h = 50 ms added to the alignment wait ``wait_s``, not to
   ``latency_s``), never a lag in the values, as a causal filter's. Measured on the exoskeleton world with
   1 mm marker noise (tests/dynamics/test_service_tree_exo.py): hip torques 5 N·m rms off the truth (of a
   197 N·m peak) where unfiltered they are 152 N·m rms; a causal 2nd-order Butterworth at 6 Hz (sosfilt)
   is 23 N·m rms off (its 37 ms lag), 9 N·m against the truth 40 ms earlier (offline, that world without
   its frontal roll). The plates are not filtered:
   their wrench stays the measured one (filtering it with the same window, as for real impacts
   Kristianslund et al. 2012 advise, measured 8 instead of 5 N·m here: the world has no impact, and its
   feet's load shares change faster than 6 Hz). A NaN in a window (an occluded marker, a gap) gives NaN: an
   occlusion widens by L samples each side; the window carries nothing past it;
2. segment fits (`fit_segments`, marker set ``--markerset``) and joint coordinates
   (`joint_coordinates`), the angle unwrapping and the root quaternion's hemisphere carried from the
   frames before (``previous``: each coordinate's last finite value);
3. rates with a fixed look-ahead of `LOOKAHEAD` = 2 marker samples: `joint_rates` (central
   differences, np.gradient twice) over the 5 samples around each,
   v_i = (q_{i+1} − q_{i−1})/2h, a_i = (v_{i+1} − v_{i−1})/2h (the root as the model defines it,
   v = (Rᵀ ṫ, vee(Rᵀ Ṙ))) — the offline record's interior values exactly. A sample is computed once
   the marker sample L + 2 after it has arrived (2 h = 10 ms at 200 Hz, 60 ms with the filter, added to
   the alignment wait, not to ``latency_s``). The first L + 2 samples of the stream and the L + 2 on each
   side of a gap in it have NaN rates (their torques are NaN), as a NaN row does offline.

Then, as one batch, the samples every plate has covered, or past their deadline — the walker's rule
(`service_torques.due`, the same code): a
sample at t waits for a plate that does not reach t until t + that plate's measured lateness (never
less than its look-ahead's receipt), then ``--max-wait-s`` more; it is then computed with the plate
held (``stale``, ``STREAM:held_samples``):

4. the plates as `plate_id.PlateLoad`: moment about the lab origin = centre × F + M_centre,
   ``loaded`` = ``valid`` ≥ 0.5, linearly interpolated at the marker times;
5. `human15_markers.marker_inverse_dynamics` (plate_id bottom-up and top-down, compiled): a loaded
   plate under a point of a foot segment (``--feet``; its contact points at q, within
   ``--height-tol-m`` above the plate and ``--edge-tol-m`` outside its outline) loads that foot; a
   foot on an unloaded plate carries nothing, and so does a foot in swing — every contact point and
   every visible marker of it (placed by the foot's fitted segment) more than ``--height-tol-m`` above the plates' surface (live there
   are no gait events: its height says it); any other foot on no plate has an unknown load, and the
   torques of the joints above it are NaN.

Cycles: the touch-downs of the first foot of ``--feet`` (foot_l by default): a sample whose known
vertical load (the plate wrench assigned to it, step 5) exceeds ``--contact-n`` after a known load below
half of it (hysteresis, methods.md d.6; where its load is unknown, no touch-down is seen).

Published (stamps: the marker samples' ``t``/``t_host``/``t_device``; one frame per run of samples
computed together; ``meta["latency_s"]``: host time of publication minus the receipt of the newest
input sample used — the look-ahead marker sample or a plate's — also in the health frame as
``latency``; ``meta["wait_s"]``: that receipt minus the newest sample's own marker frame's, the
alignment wait):

- ``dynamics/torques``: ``tau:JOINT`` (N·m; N for a prismatic joint) bottom-up generalised force of
  each joint coordinate below the root, ``power:JOINT`` (W, τ q̇), the root residual ``res:Fx res:Fy
  res:Fz`` (N) ``res:Mx res:My res:Mz`` (N·m about the CoM; measured − required ground wrench, lab
  frame; NaN unless every coordinate and foot load is known), ``stale`` (1: a plate held past its
  newest sample);
- ``dynamics/zmp``: ``ZMPx ZMPy`` (m) of the plates' total wrench on the plane of their surfaces,
  ``margin`` (m, > 0 inside) to the support polygon of the stance feet (a foot carrying more than
  ``--contact-n`` vertical force): its markers and its sole — the model's contact points (heel, toe: the
  sole's length) each widened to a pair ``--sole-width-m`` apart across the foot (the model's points lie on
  its mid-line) —, placed by its fitted segment, ``support``
  (vertices), ``valid`` (total F_z > ``--min-fz-n``); where a foot's load is unknown (near the floor
  on no plate) the real ZMP is unknown: ``margin`` NaN, ``valid`` 0 — a foot in swing (step 5) is known
  unloaded, so single support on a plate has its margin; a standing foot whose segment is not fitted (a
  marker of it hidden) leaves the support unknown: ``margin`` NaN;
- ``dynamics/contact``: per foot ``FOOT:Fx :Fy :Fz`` (N) ``:Mx :My :Mz`` (N·m about the lab origin),
  the plate wrench assigned to it, and ``:known`` (1: its ground load is known);
- ``dynamics/energy``: one frame per completed cycle (touch-down to touch-down, at most `MAX_CYCLE_S`),
  one sample: ``net positive absolute`` (J) summed over every joint coordinate of the model (or those of
  ``--energy-joints``: an exoskeleton's actuated joints), ``period``
  (s), then per coordinate ``net:JOINT positive:JOINT absolute:JOINT`` (J) — `energetics.cycle_energy`
  of its ``power:JOINT`` over the cycle (W = ∫P dt, ∫max(P, 0) dt, ∫|P| dt; the ground-reaction moment
  is not a joint's: not in P); a coordinate whose torque is NaN at a sample of the cycle (a foot of
  unknown load below it), or a cycle with missing samples, has NaN work, and the sums over it are then NaN
  (counted, ``dynamics/energy:unknown_cycles``); stamped with the touch-down sample that ends it,
  ``meta = {"foot": FOOT, "cycle": k}`` (the walker's stream: its shafts' revolutions there).

A sample with a plate never seen (NaN) is published as NaN. Bad input never stops it: frames without
samples, rate or the plate channels, marker frames with none of the set's markers are counted
(``STREAM:rejected``); frames stamped further ahead of their receipt than the stream's history
allows (``STREAM:clock_faults``), repeats (``STREAM:repeated``) are skipped: the walker's rule,
`service_torques.Arrivals` (sample times from `Frame.sample_times`, on the lab clock). Each plate's
buffer holds `KEEP_S` at its frames' rate. docs/service.md.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from daq.context import ProcessContext
from daq.logthrottle import LogThrottle
from dynamics import forceplate as fp
from dynamics import human15_markers as h15
from dynamics.loader import read_toml, resolve
from dynamics.model import Model
from dynamics.plate_id import PlateLoad, plate_id_workspace
from dynamics.energetics import cycle_energy
from dynamics.service_torques import (CONTACT, ENERGY, ENERGY_CHANNELS, ENERGY_UNITS, MAX_BATCH, MAX_CYCLE_S, TORQUES,
                                      ZMP, ZMP_CHANNELS, ZMP_UNITS, Arrivals, _Input, due)
from dynamics.smoothing import centred_filter, centred_lowpass
from dynamics.spatial import cross
from dynamics.support import support_margin
from dynamics.zmp import zmp_of_wrench

log = logging.getLogger("walklab.dynamics.tree")

#: Marker samples after a sample that its rates need (central differences of central differences).
LOOKAHEAD = 2
#: Default cutoff [Hz] of the markers' centred low-pass (module doc step 1; 0 disables it).
FILTER_HZ = 6.0
PLATE_CHANNELS = ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "valid")
#: m: a shod adult foot's width at the heel and the metatarsal heads, about (the sole of the support polygon)
SOLE_WIDTH_M = 0.09
RESIDUAL = ("res:Fx", "res:Fy", "res:Fz", "res:Mx", "res:My", "res:Mz")


@dataclass(frozen=True)
class TreeSettings:
    """Service parameters (SI): longest a marker sample waits for a lagging plate [s]; least vertical
    force on a foot for it to stand [N]; least total vertical force for a ZMP [N]; how far above a
    plate [m] and outside its outline [m] a foot point still counts as on it (`plate_id.assign_plates`;
    marker-driven feet need generous values); the markers' centred low-pass cutoff [Hz] (0: none;
    module doc step 1); the joints whose work the energy frames sum (empty: every one); the width of a foot's
    sole for its support polygon [m]."""
    max_wait_s: float = 0.1
    contact_n: float = 20.0
    min_fz_n: float = 20.0
    height_tol_m: float = 0.15
    edge_tol_m: float = 0.03
    filter_hz: float = FILTER_HZ
    energy_joints: tuple[str, ...] = ()
    sole_width_m: float = SOLE_WIDTH_M

    def __post_init__(self) -> None:
        if not (self.max_wait_s > 0 and math.isfinite(self.max_wait_s)) or not all(
                math.isfinite(x) for x in (self.contact_n, self.min_fz_n)) or not (
                0 <= self.height_tol_m < 10 and 0 <= self.edge_tol_m < 10) or not (
                0 <= self.filter_hz < 1e4) or not 0 <= self.sole_width_m < 1:
            raise ValueError(f"dynamics tree: need --max-wait-s > 0, finite forces, tolerances in [0, 10) m, "
                             f"--filter-hz >= 0 and --sole-width-m in [0, 1), got {self}")


Publish = Callable[..., Any]


class _Strides:
    """The gait cycles of one foot and the joints' power over them (module doc, ``dynamics/energy``): a
    touch-down is a sample whose known vertical load exceeds `on` N after a known load below `on`/2
    (hysteresis, methods.md d.6; an unknown load forgets which it was); each completed cycle (touch-down to
    touch-down, at most `MAX_CYCLE_S`) gives each joint's `energetics.cycle_energy` — NaN for a joint
    whose power is NaN at a sample of it, or across missing samples (a gap of more than 1.5 sample periods)."""

    def __init__(self, on: float) -> None:
        self.on, self.off = on, 0.5 * on
        self.state: bool | None = None      # loaded, unloaded, unknown
        self.t: list[float] = []            # s, since the cycle's start (empty: none started)
        self.p: list[np.ndarray] = []       # (J,) W per sample
        self.count = 0

    def add(self, t: np.ndarray, fz: np.ndarray, known: np.ndarray, power: np.ndarray,
            period: float) -> list[tuple[int, np.ndarray]]:
        """Samples at t (n,) s: the foot's vertical load fz (n,) N, known (n,) bool, the joints' power
        (n, J) W; period: the sample period, s. Returns (index of the touch-down sample that completed it,
        [period s, then net, positive, absolute J per joint]) per completed cycle."""
        out: list[tuple[int, np.ndarray]] = []
        for i in range(t.size):
            ti = float(t[i])
            if self.t and not ti > self.t[-1]:                  # back in time (a re-anchored stream): start again
                self.t, self.p, self.state = [], [], None
            if self.t and ti - self.t[-1] > 1.5 * period:      # missing samples: the cycle's work is unknown
                self.t.append(self.t[-1] + period)
                self.p.append(np.full(power.shape[1], np.nan))
                self.state = None
            if self.t and ti - self.t[0] > MAX_CYCLE_S:         # a foot standing still: start again
                self.t, self.p = [], []
            if self.t:
                self.t.append(ti)
                self.p.append(power[i])
            f = float(fz[i])
            down = False
            if not (known[i] and math.isfinite(f)):
                self.state = None
            elif f > self.on:
                down, self.state = self.state is False, True
            elif f < self.off:
                self.state = False
            if not down:
                continue
            if self.t:
                tt, pp = np.array(self.t), np.array(self.p)
                row = np.full(1 + 3 * pp.shape[1], np.nan)
                row[0] = tt[-1] - tt[0]
                for j in range(pp.shape[1]):
                    if np.isfinite(pp[:, j]).all():
                        e = cycle_energy(tt, pp[:, j], [tt[0], tt[-1]])
                        row[1 + 3 * j:4 + 3 * j] = e.net[0], e.positive[0], e.absolute[0]
                self.count += 1
                out.append((i, row))
            self.t, self.p = [ti], [power[i]]
        return out


class TreeService:
    """Marker and plate-wrench frames in; ``dynamics/torques``, ``/zmp``, ``/contact`` out (module doc).
    model: a tree with a free-flyer root; mset: its marker set; feet: foot segment names (in the set,
    with contact points); plates: (name, `fp.Plate`) whose ``dynamics/grf/NAME`` it reads; markers: the
    marker stream. Give `feed` the received frames in arrival order."""

    def __init__(self, model: Model, mset: h15.MarkerSet, feet: Sequence[str], plates: Sequence[tuple[str, fp.Plate]],
                 markers: str, settings: TreeSettings, publish: Publish,
                 count: Callable[[str, int], None] = lambda subject, n=1: None,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.links = h15.chains(model, mset)        # MarkerError naming a segment the set cannot drive
        self.plan = h15.fit_plan(model, mset, self.links)
        missing = [f for f in feet if f not in mset.segments]
        if not feet or missing:
            raise ValueError(f"dynamics tree: feet {list(feet)}: need foot segments of the marker set {mset.name!r} "
                             f"({', '.join(mset.segments)})")
        if not plates:
            raise ValueError("dynamics tree: the process needs its force plates among its devices")
        plate_id_workspace(model, list(feet))      # PlateIDError: a root that is not a free flyer, feet without contacts
        self.model, self.mset, self.feet = model, mset, tuple(feet)
        self.settings, self.publish, self.count, self.clock = settings, publish, count, clock
        self.stream = markers
        self.plates = [_Input(f"dynamics/grf/{n}", len(PLATE_CHANNELS), 1000.0) for n, _ in plates]
        self.plate_geo = [(n, np.asarray(p.centre, float), np.asarray(p.corners, float)) for n, p in plates]
        self.ground_z = float(np.mean([c[:, 2].mean() for _, _, c in self.plate_geo]))
        self.inputs: dict[str, _Input | None] = {markers: None, **{p.stream: p for p in self.plates}}
        # output channels: every velocity coordinate below the root
        names = []
        for seg in model.segments[1:]:              # the model's velocity order (idx_v grows with the segments)
            j = seg.joint_name or seg.name
            names += [j] if seg.joint.nv == 1 else [f"{j}_{k}" for k in range(seg.joint.nv)]
        self.torque_channels = (*(f"tau:{j}" for j in names), *(f"power:{j}" for j in names), *RESIDUAL, "stale")
        self.torque_units = ("N*m",) * len(names) + ("W",) * len(names) + ("N",) * 3 + ("N*m",) * 3 + ("1",)
        # dynamics/energy: per cycle of the first foot, the sums over the joints, then each joint's
        self.energy_channels = (*ENERGY_CHANNELS, *(f"{k}:{j}" for j in names for k in ENERGY_CHANNELS[:3]))
        self.energy_units = ENERGY_UNITS + ("J",) * (3 * len(names))
        unknown = sorted(set(settings.energy_joints) - set(names))
        if unknown:
            raise ValueError(f"dynamics tree: --energy-joints {unknown[0]!r}: not a joint of {model.name} "
                             f"(its joints: {', '.join(names)})")
        #: the joints the energy frames' sums take (--energy-joints; all by default)
        self.summed = np.array([not settings.energy_joints or j in settings.energy_joints for j in names])
        self.strides = _Strides(settings.contact_n)
        self.contact_channels = tuple(f"{f}:{c}" for f in self.feet for c in ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "known"))
        self.contact_units = ("N",) * 3 + ("N*m",) * 3 + ("1",)
        self.contact_units *= len(self.feet)
        # the feet's markers and the model's contact points (heel, toe: the sole's extent), placed by the feet's
        # own fitted segments — the support polygon and the swing test; a marker hidden elsewhere on the body
        # (a coordinate of q NaN) leaves them in place, where the forward kinematics of q would not
        s = h15.scale(mset, model)
        marks = [s * np.array(list(mset.segments[f].values())) for f in self.feet]
        # the sole: each contact point widened to a pair ± half of --sole-width-m along the foot's lateral axis
        # (the model's heel and toe points lie on the foot's mid-line: a support of no width)
        half = np.array([0.0, 0.5 * settings.sole_width_m, 0.0])
        soles = [np.concatenate([[p - half, p + half] for p in (model.point(c)[1] for c in model.segment(f).contacts)])
                 .reshape(-1, 3) for f in self.feet]
        self.foot_points = [(f, np.concatenate([m, c])) for f, m, c in zip(self.feet, marks, soles)]
        self.point_foot = np.concatenate([np.full(len(m), k) for k, m in enumerate(marks)])
        self.contact_foot = np.concatenate([np.full(len(c), k) for k, c in enumerate(soles)])
        # the columns of the placed points: each foot's markers, then the contact points of each foot
        order = np.cumsum([0] + [len(m) + len(c) for m, c in zip(marks, soles)])
        self.mark_cols = np.concatenate([np.arange(o, o + len(m)) for o, m in zip(order, marks)])
        self.sole_cols = np.concatenate([np.arange(o + len(m), o + len(m) + len(c)) for o, m, c in zip(order, marks, soles)])
        # the support's points: every foot's markers, then every contact point (their columns, their feet); which
        # foot each marker and contact point is of, as (K, F) and (C, F) bool for one matrix product per test
        self.sup_cols = np.concatenate([self.mark_cols, self.sole_cols])
        self.sup_foot = np.concatenate([self.point_foot, self.contact_foot])
        self.point_of = self.point_foot[:, None] == np.arange(len(self.feet))
        self.contact_of = self.contact_foot[:, None] == np.arange(len(self.feet))
        # state carried from marker frame to frame
        self.layout: tuple[str, ...] = ()
        self.cols = np.empty(0, dtype=np.intp)
        self.previous = np.full(model.nq, np.nan)    # last finite value of each coordinate (unwrapping)
        self.rate = 0.0
        self.taps = np.ones(1)                      # the markers' centred low-pass at self.rate (1 tap: none)
        self.raw = np.full((0, len(mset.labels), 3), np.nan)   # its last 2L raw marker rows (start: NaN rows)
        self.raw_meta: list[tuple | None] = []      # per raw row: (t, (t_host, t_device), receipt), or None
        self.hist_q = np.full((LOOKAHEAD, model.nq), np.nan)   # the last 2 LOOKAHEAD samples (start: NaN rows)
        self.hist: list[tuple | None] = [None] * LOOKAHEAD     # per history row: its sample, or None (virtual)
        self.last_t: int | None = None
        # (t, q, v, a, foot points, (t_host, t_device), receipt of the newest marker used, its own receipt)
        self.pending: list[tuple] = []
        self.first_recv: int | None = None
        self.latencies: list[float] = []
        self.fault_log = LogThrottle(log, clock=clock)   # a bad stream repeats it every frame: a line a second
        self.arrivals = Arrivals(count, publish)    # the walker's frame acceptance (clock faults, repeats)
        # a root the coordinates cannot come from (not a free flyer at the origin, not in the set): MarkerError now
        h15.joint_coordinates(model, mset, h15.fit_segments(model, mset, {m: np.full((1, 3), np.nan) for m in mset.labels}))
        h15.joint_rates(model, np.repeat(model.neutral()[None], 3, axis=0), 200.0)   # a joint type without rates

    def warm(self) -> None:
        """Run the computation once on the neutral posture (loads the compiled kernels now, not in the
        first live batch); publishes nothing."""
        q = self.model.neutral()[None].astype(float)
        z = np.zeros((1, self.model.nv))
        loads = [PlateLoad(np.zeros((1, 3)), np.zeros((1, 3)), c, np.zeros(1, bool), n) for n, _, c in self.plate_geo]
        h15.marker_inverse_dynamics(self.model, q, z, z, loads, self.feet, None, self.settings.height_tol_m,
                                    self.settings.edge_tol_m)
        zmp_of_wrench(np.zeros((1, 3)), np.zeros((1, 3)))
        k = self.point_foot.size + self.contact_foot.size
        support_margin(np.zeros((1, k, 3)), np.zeros((1, k), bool), np.zeros((1, 2)))

    # -- input ------------------------------------------------------------------------------

    def feed(self, frames: Sequence[Any]) -> None:
        """Take received frames (`daq.frames.Frame`, in arrival order; other streams are ignored) and
        compute every marker sample that is ready."""
        for f in frames:
            if f.stream not in self.inputs:
                continue
            inp = self.inputs[f.stream]
            why = self._check(inp, f)
            if why is not None:
                self._reject(f, "rejected", why)
                continue
            step = 1e9 / f.rate_hz
            t, recv, skip, why = self.arrivals.admit(f, self.last_t if inp is None else inp.newest)
            if skip == "clock_faults":
                self._reject(f, skip, why)
                continue
            if skip == "reanchored":
                self._forget(inp, int(t[0]))
            elif skip is not None:
                self.count(f"{f.stream}:{skip}", 1)
                continue
            if inp is None:
                new = t > (self.last_t if self.last_t is not None else -(2 ** 62))    # a block overlapping the last
                th = f.t_host + np.round(np.arange(f.samples) * step).astype(np.int64)
                td = None if f.t_device is None else f.t_device + np.round(np.arange(f.samples) * step).astype(np.int64)
                self._markers(np.asarray(f.data, dtype=float)[new], t[new], th[new], None if td is None else td[new],
                              recv, f.rate_hz)
            else:
                inp.note_lateness(recv, int(t[0]))
                if f.rate_hz != inp.rate_hz:        # KEEP_S at the plate's own rate, not the nominal 1 kHz
                    inp.set_rate(f.rate_hz)
                cols = [f.channels.index(c) for c in PLATE_CHANNELS]
                inp.add(t, np.asarray(f.data, dtype=float)[:, cols], recv)
        self._compute()

    def _forget(self, inp: _Input | None, t0: int) -> None:
        """Input `inp` (None: the markers) re-anchored (`Arrivals`) at a frame starting at lab time t0 [ns]:
        its samples are forgotten — the markers' rate history (their next samples start again, rates NaN
        for the first LOOKAHEAD) and the samples waiting at or after t0 with them."""
        if inp is not None:
            inp.a, inp.since = inp.b, None
            return
        self.last_t = None
        self.hist_q = np.full((LOOKAHEAD, self.model.nq), np.nan)
        self.hist = [None] * LOOKAHEAD
        self._restart_filter(self.rate)
        self.pending = [s for s in self.pending if s[0] < t0]

    def _reject(self, f: Any, counter: str, why: str) -> None:
        self.count(f"{f.stream}:{counter}", 1)
        self.fault_log.log("%s: frame seq %d %s: %s", f.stream, f.seq, counter, why, key=(f.stream, counter))

    def _check(self, inp: _Input | None, f: Any) -> str | None:
        """Why frame `f` cannot be a block of input `inp` (None: the markers), or None."""
        data = np.asarray(f.data)
        if data.ndim != 2 or f.samples == 0 or data.dtype.kind not in "fiu":
            return f"data of shape {data.shape} and dtype {data.dtype}: expected (samples >= 1, channels), numbers"
        if not (f.rate_hz > 0 and math.isfinite(f.rate_hz)):
            return f"rate {f.rate_hz} Hz: expected a sample rate > 0"
        if inp is None and not f.rate_hz > 2 * self.settings.filter_hz:
            return f"rate {f.rate_hz} Hz: the markers' --filter-hz {self.settings.filter_hz:g} needs a rate above " \
                   f"{2 * self.settings.filter_hz:g} Hz"
        if inp is not None and not set(PLATE_CHANNELS) <= set(f.channels):
            return f"channels {list(f.channels)} lack {sorted(set(PLATE_CHANNELS) - set(f.channels))}"
        if inp is None and f.channels != self.layout:
            have = set(f.channels)
            labels = [m for m in self.mset.labels if all(f"{m}:{a}" in have for a in "xyz")]
            if not labels:
                return f"none of the {len(self.mset.labels)} markers of the set {self.mset.name!r}"
            index = {c: i for i, c in enumerate(f.channels)}
            # an absent marker reads the extra NaN column appended in _markers
            self.cols = np.array([[index.get(f"{m}:{a}", len(f.channels)) for a in "xyz"] for m in self.mset.labels])
            self.layout = tuple(f.channels)
        return None

    def _restart_filter(self, rate: float) -> None:
        """The markers' centred low-pass designed for `rate` Hz, its window history NaN (a new stream)."""
        fc = self.settings.filter_hz
        self.taps = centred_lowpass(fc, rate) if fc > 0 and rate > 2 * fc else np.ones(1)
        self.raw = np.full((self.taps.size - 1, len(self.mset.labels), 3), np.nan)
        self.raw_meta = [None] * (self.taps.size - 1)

    def _markers(self, data: np.ndarray, t: np.ndarray, th: np.ndarray, td: np.ndarray | None, recv: int,
                 rate: float) -> None:
        """Joint coordinates of a marker frame's samples (steps 1-3): data (n, channels) m at lab times
        t (n,) ns (host and device stamps th, td), received at recv ns; the samples L behind filtered,
        the rates of those LOOKAHEAD behind them."""
        data = np.concatenate([data, np.full((data.shape[0], 1), np.nan)], axis=1)
        pos = data[:, self.cols]                                            # (n, M, 3)
        meta: list[tuple | None] = [(int(t[i]), (int(th[i]), None if td is None else int(td[i])), recv)
                                    for i in range(t.size)]
        half = (self.taps.size - 1) // 2
        gap = 0
        if self.last_t is not None and self.rate == rate:
            missing = round((t[0] - self.last_t) * rate * 1e-9) - 1
            # a gap: NaN rows in the missing slots (enough to cut every window and stencil across it)
            gap = min(max(missing, 0), 2 * half + 2 * LOOKAHEAD)
        elif self.rate != rate:         # another rate (or the first frame): a new stream, start again
            self._restart_filter(rate)
            half = (self.taps.size - 1) // 2
            gap = 2 * LOOKAHEAD if self.last_t is not None else 0
        self.rate, self.last_t = rate, int(t[-1])
        X = np.concatenate([self.raw, np.full((gap, *pos.shape[1:]), np.nan), pos])
        slots = self.raw_meta + [None] * gap + meta
        if half:        # the centred low-pass: the value at slot c from slots c - L .. c + L
            pos = centred_filter(X, self.taps)
            # each filtered sample: its own stamps and receipt, and the receipt of the newest sample in its window
            meta = [None if slots[c] is None else (*slots[c], max(m[2] for m in slots[c:c + half + 1] if m is not None))
                    for c in range(half, len(slots) - half)]
            self.raw, self.raw_meta = X[len(X) - 2 * half:], slots[len(slots) - 2 * half:]
        else:
            pos, meta = X, [None if m is None else (*m, m[2]) for m in slots]
        if not meta:
            return
        fits = h15.fit_positions(self.plan, pos)
        q = h15.joint_coordinates(self.model, self.mset, fits, self.previous, self.links, self.plan)
        for row in q:       # each coordinate's last finite value (a few rows: two numpy calls each)
            self.previous = np.where(np.isfinite(row), row, self.previous)
        feet = np.concatenate([np.einsum("nij,kj->nki", fits.rotation[s], p) + fits.translation[s][:, None]
                               for s, p in self.foot_points], axis=1)     # (n, markers + contact points, 3)
        Q = np.concatenate([self.hist_q, q])
        # per row: (t, foot points, (t_host, t_device), receipt of the newest raw sample used, its own receipt)
        rows = self.hist + [None if m is None else (m[0], feet[i], m[1], m[3], m[2]) for i, m in enumerate(meta)]
        v, a = h15.joint_rates(self.model, Q, rate)
        for i in range(LOOKAHEAD, Q.shape[0] - LOOKAHEAD):
            if rows[i] is not None:
                ti, pts, stamps, _, own = rows[i]
                newest = max(r[3] for r in rows[i:i + LOOKAHEAD + 1] if r is not None)
                self.pending.append((ti, Q[i], v[i], a[i], pts, stamps, newest, own))
        self.hist_q, self.hist = Q[-2 * LOOKAHEAD:], rows[-2 * LOOKAHEAD:]

    # -- computation ------------------------------------------------------------------------

    def _compute(self) -> None:
        if not self.pending:
            return
        if self.first_recv is None:
            self.first_recv = self.pending[0][6]
        ready = due([p[0] for p in self.pending], self._receipts, self.plates, any(p.full for p in self.plates),
                    self.first_recv, self.clock(), self.settings.max_wait_s, self.count)
        if not ready:
            return
        batch, self.pending = self.pending[:ready], self.pending[ready:]
        period = 1e9 / self.rate
        cuts = [0] + [j for j in range(1, ready) if abs(batch[j][0] - batch[j - 1][0] - period) > period / 2] + [ready]
        for a, b in zip(cuts[:-1], cuts[1:]):
            for c in range(a, b, MAX_BATCH):
                self._run(batch[c:min(b, c + MAX_BATCH)])
        for p in self.plates:
            p.trim(batch[-1][0])

    def _receipts(self, a: int, b: int) -> np.ndarray:
        """Receipt [ns] of the look-ahead marker samples ``pending[a:b]`` wait for (their rates need it)."""
        return np.array([p[6] for p in self.pending[a:b]], dtype=np.int64)

    def _swing(self, cpos: np.ndarray, pts: np.ndarray) -> np.ndarray:
        """(n, F) bool: foot f is in swing with its contact points cpos (n, C, 3) m and its
        markers pts (n, K, 3) m (lab, NaN occluded): each of its contact points (known) and each visible
        marker more than ``--height-tol-m`` above the plates' surface — no point of it is near the floor,
        so it carries nothing (what `plate_id.assign_plates` counts as off every plate at that tolerance)."""
        above = self.ground_z + self.settings.height_tol_m
        with np.errstate(invalid="ignore"):
            low_c, low_m = ~(cpos[..., 2] > above), pts[..., 2] <= above      # an occluded marker says nothing
        # a foot is in swing unless one of its points is low (bool matrix products: any over the foot's points)
        return ~((low_c @ self.contact_of) | (low_m @ self.point_of))

    def _run(self, samples: list[tuple]) -> None:
        """Steps 4-5 and the outputs for consecutive marker samples."""
        n, m = len(samples), self.model
        t = np.array([s[0] for s in samples], dtype=np.int64)
        q, v, a = (np.array([s[k] for s in samples]) for k in (1, 2, 3))
        recv, known = [max(s[6] for s in samples)], np.ones(n, bool)
        loads, have = [], np.ones(n, bool)
        for p, (name, centre, corners) in zip(self.plates, self.plate_geo):
            w, kp, r = p.at(t)
            recv.append(r)
            known &= kp
            have &= np.isfinite(w).all(axis=1)
            loads.append(PlateLoad(w[:, :3], cross(centre, w[:, :3]) + w[:, 3:6], corners, w[:, 6] >= 0.5, name))
        sup = np.array([s[4] for s in samples])[:, self.sup_cols]           # (n, K + C, 3)
        pts, cpos = sup[:, :self.mark_cols.size], sup[:, self.mark_cols.size:]
        kin = h15.marker_inverse_dynamics(m, q, v, a, loads, self.feet, self._swing(cpos, pts),
                                          self.settings.height_tol_m, self.settings.edge_tol_m)
        tau = kin.tau_bottom_up[:, 6:]
        torques = np.concatenate([tau, tau * v[:, 6:], kin.residual_force, kin.residual_moment,
                                  (~known)[:, None].astype(float)], axis=1)
        # ZMP of the plates' total wrench, margin to the stance feet's support: their markers and soles (the
        # model's heel and toe widened across the foot: the sole's extent, which a foot's markers do not reach —
        # the toe marker is on the metatarsal head), both placed by the fitted segments
        f_tot = sum(ld.force for ld in loads)
        n_tot = sum(ld.moment for ld in loads)
        z = zmp_of_wrench(f_tot, n_tot, self.ground_z, self.settings.min_fz_n)
        stance = kin.foot_wrench[:, :, 2] > self.settings.contact_n         # (n, F)
        placed = np.isfinite(sup).all(axis=2)                               # (n, K + C)
        margin, nvert = support_margin(sup, stance[:, self.sup_foot] & placed, z.point)   # (only points in contact)
        # a foot whose ground load is unknown (on no plate: the bare floor) may carry weight the plates do
        # not see: the real ZMP and support are unknown, so no margin (NaN) and not valid — never a finite
        # margin of the plates' share alone (the control loop's ZMP guard reads it); nor of the other foot's
        # support alone where a standing foot's place is unknown (its segment not fitted: a marker hidden)
        unknown = ~kin.foot_known.all(axis=1)
        unplaced = (stance & (~placed[:, self.mark_cols.size:] @ self.contact_of)).any(axis=1)
        zmp = np.empty((n, len(ZMP_CHANNELS)))
        zmp[:, :2] = z.point[:, :2]
        zmp[:, 2] = np.where(unknown | unplaced, np.nan, margin)
        zmp[:, 3], zmp[:, 4] = nvert, z.valid & ~unknown
        contact = np.concatenate([kin.foot_wrench, kin.foot_known[..., None]], axis=2).reshape(n, -1)
        if not have.all():
            torques[~have, :-1] = zmp[~have] = contact[~have] = np.nan     # a plate never seen: nothing is known
        th0, td0 = samples[0][5]
        common = dict(rate_hz=self.rate, t=int(t[0]), t_host=th0, t_device=td0)
        latency = (self.clock() - max(recv)) * 1e-9
        # the alignment wait, as the walker's: receipt of the newest input used minus the newest sample's own
        meta = {"latency_s": latency, "wait_s": (max(recv) - samples[-1][7]) * 1e-9}
        self.publish(TORQUES, torques, kind="torques", channels=self.torque_channels, units=self.torque_units,
                     meta=meta, **common)
        self.publish(ZMP, zmp, kind="zmp", channels=ZMP_CHANNELS, units=ZMP_UNITS, meta=meta, **common)
        self.publish(CONTACT, contact, kind="contact", channels=self.contact_channels, units=self.contact_units,
                     meta=meta, **common)
        self.latencies.append(latency)
        self._energy(t, [s[5] for s in samples], kin.foot_wrench[:, 0, 2], kin.foot_known[:, 0] & have,
                     torques[:, tau.shape[1]:2 * tau.shape[1]])

    def _energy(self, t: np.ndarray, stamps: list, fz: np.ndarray, known: np.ndarray, power: np.ndarray) -> None:
        """Feed the first foot's load fz (n,) N (known (n,)) and the joints' power (n, J) W at the computed
        samples t (n,) ns (their (t_host, t_device) stamps) to its cycles; publish each completed one."""
        for i, row in self.strides.add(t * 1e-9, fz, known, power, 1.0 / self.rate):
            J = power.shape[1]
            per = row[1:].reshape(J, 3)
            total = per[self.summed].sum(axis=0)    # NaN when a summed joint's work is unknown
            if not np.isfinite(total).all():
                self.count(f"{ENERGY}:unknown_cycles", 1)
            th, td = stamps[i]
            self.publish(ENERGY, np.concatenate([total, row[:1], row[1:]])[None], kind="energy", rate_hz=0.0,
                         channels=self.energy_channels, units=self.energy_units, t=int(t[i]), t_host=th,
                         t_device=td, meta={"foot": self.feet[0], "cycle": self.strides.count})


# -------------------------------------------------------------------------------- process ----

def _parser() -> argparse.ArgumentParser:
    d = TreeSettings()
    p = argparse.ArgumentParser(prog="dynamics.service_torques", description="live joint torques of a tree model")
    p.add_argument("--model", default="human15", help="tree model file or shipped name (configs/models)")
    p.add_argument("--markerset", default=None, help="marker set (configs/markersets/NAME.toml); default: the model's name")
    p.add_argument("--markers", default="markers/sim", help="the full-body marker stream")
    p.add_argument("--feet", default="foot_l,foot_r", help="foot segments, comma-separated")
    p.add_argument("--mass", type=float, default=None, help="subject mass [kg]: human15 / exoskeleton scaled to it")
    p.add_argument("--height", type=float, default=None, help="subject stature [m] (with --mass)")
    p.add_argument("--sex", default="male", choices=("male", "female"), help="anthropometric table (with --mass)")
    p.add_argument("--max-wait-s", type=float, default=d.max_wait_s,
                   help="longest a marker sample waits for a lagging plate [s]")
    p.add_argument("--contact-n", type=float, default=d.contact_n, help="least vertical force on a standing foot [N]")
    p.add_argument("--min-fz-n", type=float, default=d.min_fz_n, help="least total vertical force for a ZMP [N]")
    p.add_argument("--height-tol-m", type=float, default=d.height_tol_m, help="foot point above a plate still on it [m]")
    p.add_argument("--edge-tol-m", type=float, default=d.edge_tol_m, help="plate outline grown by [m]")
    p.add_argument("--filter-hz", type=float, default=d.filter_hz,
                   help="cutoff of the markers' centred low-pass [Hz] (adds 0.3/cutoff s to the wait; 0: none)")
    p.add_argument("--sole-width-m", type=float, default=d.sole_width_m,
                   help="width of a foot's sole, across its heel-toe line, for the support polygon [m]")
    p.add_argument("--energy-joints", default="",
                   help="joints whose work the energy frames sum, comma-separated (default: every joint; e.g. an "
                        "exoskeleton's actuated ones)")
    return p


def model_kind(args: Sequence[str], default: str = "jansen_walker") -> str:
    """The ``kind`` (``tree`` or ``linkage``) of the model file ``--model`` in args names (`default`
    without one); ``linkage`` when the file is not found (the walker's own error then names it)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", default=default)
    name = parser.parse_known_args(list(args))[0].model
    try:
        return str(read_toml(resolve(name)).get("kind", "tree"))
    except FileNotFoundError:
        return "linkage"


def tree_model(name: str, mass: float | None, height: float | None, sex: str) -> Model:
    """The tree model `name`; human15 or exoskeleton scaled to mass [kg] and height [m]
    (`dynamics.anthropometry`) when both are given. ValueError naming a bad value."""
    from dynamics.anthropometry import exoskeleton_table, human15_table
    from dynamics.loader import load_model, model_from_dict

    if mass is None and height is None:
        model = load_model(name)
    elif mass is None or height is None or not (20 <= mass <= 300 and 1.0 <= height <= 2.5):
        raise ValueError(f"--mass and --height: give both, 20-300 kg and 1.0-2.5 m, got {mass}, {height}")
    elif name in ("human15", "exoskeleton"):
        table = human15_table if name == "human15" else exoskeleton_table
        model = model_from_dict(table(mass, height, sex), name)
    else:
        raise ValueError(f"--mass/--height scale the shipped human15 and exoskeleton models, not {name!r}")
    if not isinstance(model, Model):
        raise ValueError(f"--model {name!r} is not a tree model")
    return model


def service_from(ctx: ProcessContext, args: Sequence[str], publish: Publish | None = None) -> TreeService:
    """The `TreeService` of process `ctx` (its devices: force plates) with `args`, kernels loaded."""
    from daq.devices.markers_sim import load_marker_set

    o = _parser().parse_args(list(args))
    model = tree_model(o.model, o.mass, o.height, o.sex)
    try:
        mset = load_marker_set(o.markerset or model.name)
    except ValueError:
        if o.markerset:
            raise
        mset = load_marker_set("human15")     # e.g. the exoskeleton: the human wearing it carries the markers
    plates = [(n, fp.Plate(type=d.type, corners=d.corners, origin=d.origin, cal_matrix=d.cal_matrix, name=n))
              for n, d in ctx.devices.items() if d.kind == "forceplate"]
    service = TreeService(model, mset, [f for f in o.feet.split(",") if f], plates, o.markers,
                          TreeSettings(o.max_wait_s, o.contact_n, o.min_fz_n, o.height_tol_m, o.edge_tol_m, o.filter_hz,
                                       tuple(j for j in o.energy_joints.split(",") if j), o.sole_width_m),
                          publish or ctx.publisher.publish, ctx.health.count, ctx.clock)
    service.warm()
    log.info("tree model %s (%.1f kg), marker set %s, feet %s", model.name, model.total_mass, mset.name, o.feet)
    return service
