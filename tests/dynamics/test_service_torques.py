"""The walker's live dynamics service (`dynamics.service_torques`) fed frames of a simulated walk.

The frames come from `dynamics.plants.jansen_world` run offline (its own integrator and contact
stage): shaft encoders at 1 kHz, the chassis corner markers at 200 Hz, the plates' wrenches at 1 kHz
(what `dynamics.service` publishes on ``dynamics/grf/NAME``). Truths: the reduced-form tables of the
one-leg linkage summed leg by leg (`linkage.reduced.crank_torque`, not the walker code), the world's
own foot forces and load torques, a plate's measured force, the CoM projection of a walker at rest,
and a trapezoid sum of the published power.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from daq.frames import Frame
from dynamics import forceplate as fp
from dynamics.linkage.reduced import crank_torque
from dynamics.plants import jansen_world as jw
from dynamics.service_torques import (CONTACT, ENERGY, TORQUES, ZMP, Settings, WalkerService)
from dynamics.synthesis.crank import load_walker

T0 = 10 ** 12          # lab time of the first sample [ns]
PLATES = [("FP1", fp.Plate(type=2, corners=np.array([[0.6, -0.4, 0], [0, -0.4, 0], [0, 0.4, 0], [0.6, 0.4, 0]], float),
                           origin=np.array([0, 0, -0.04]))),
          ("FP2", fp.Plate(type=2, corners=np.array([[1.2, -0.4, 0], [0.6, -0.4, 0], [0.6, 0.4, 0], [1.2, 0.4, 0]], float),
                           origin=np.array([0, 0, -0.04])))]
ENCODERS = ("encoder/left_shaft", "encoder/right_shaft")
pytestmark = pytest.mark.usefixtures("kernel_path")     # the walker's kernel (kernels/walker.py) and the numpy path


@functools.lru_cache(maxsize=None)
def world() -> jw.JansenWorld:
    return jw.jansen_world()


@functools.lru_cache(maxsize=None)
def walk(seconds: float = 1.6, torque: float = 3.0, x0: float = -0.3) -> jw.Samples:
    """The world driven by a constant torque on both shafts, sampled at 1 kHz (h = 0.5 ms)."""
    sim = jw.JansenSim(world(), 5e-4, record_every=2, x0=x0)
    for k in range(round(seconds / 5e-4)):
        jw.advance(sim, np.array([torque, torque]), k * 5e-4)
    return sim.take()


def frames_of(s: jw.Samples, marker_every: int = 5) -> list[Frame]:
    """Encoder (blocks of 10), marker (one sample per frame, 200 Hz) and plate-wrench (blocks of 5) frames of
    the samples, in the order of their last sample's time (a bus delivers them so)."""
    w = world()
    n = s.t.size
    ts = T0 + np.arange(n) * 1_000_000
    out = []
    seq: dict[str, int] = {}

    def frame(stream, kind, rate, channels, data, i0):
        seq[stream] = seq.get(stream, -1) + 1
        return (int(ts[i0 + len(data) - 1]), Frame(stream, kind, seq[stream], None, int(ts[i0]), int(ts[i0]), rate,
                                                    tuple(channels), ("1",) * len(channels), np.asarray(data, float)))

    for j, st in enumerate(ENCODERS):
        for i in range(0, n - 9, 10):
            out.append(frame(st, "encoder", 1000.0, ("angle", "velocity", "current"),
                             np.column_stack([s.q[i:i + 10, 3 + j], s.u[i:i + 10, 3 + j], np.zeros(10)]), i))
    loads = jw.plate_loads(s.foot, s.force, [p for _, p in PLATES])
    for (name, _), (F, M) in zip(PLATES, loads):
        for i in range(0, n - 4, 5):
            out.append(frame(f"dynamics/grf/{name}", "grf", 1000.0, ("Fx", "Fy", "Fz", "Mx", "My", "Mz"),
                             np.column_stack([F[i:i + 5], M[i:i + 5]]), i))
    pos = jw.marker_positions(w, s)
    labels = jw.marker_labels(w)
    chans = [f"{lab}:{a}" for lab in labels for a in "xyz"]
    for i in range(0, n, marker_every):
        out.append(frame("markers/walker", "markers", 1000.0 / marker_every, chans, pos[i].reshape(1, -1), i))
    out.sort(key=lambda x: x[0])
    return [f for _, f in out]


class Bus:
    """Collects what the service publishes."""

    def __init__(self) -> None:
        self.frames: dict[str, list] = {}

    def publish(self, stream, data, **kw):
        self.frames.setdefault(stream, []).append((np.array(data, dtype=float), kw))

    def series(self, stream: str) -> tuple[np.ndarray, np.ndarray, tuple]:
        """(t (N,) ns, data (N, C), channels) of a stream's frames joined."""
        fr = self.frames[stream]
        step = 1e9 / fr[0][1]["rate_hz"] if fr[0][1]["rate_hz"] else 0
        t = np.concatenate([kw["t"] + np.round(np.arange(d.shape[0]) * step).astype(np.int64) for d, kw in fr])
        return t, np.concatenate([d for d, _ in fr]), fr[0][1]["channels"]


def serve(frames, settings=Settings(), chunk: int = 7, clock=lambda: 0) -> Bus:
    bus = Bus()
    svc = WalkerService(world(), PLATES, ENCODERS, "markers/walker", settings, bus.publish, clock=clock)
    for i in range(0, len(frames), chunk):
        svc.feed(frames[i:i + chunk])
    return bus


def col(data, channels, name):
    return data[:, list(channels).index(name)]


def test_torque_equals_the_one_leg_reduced_table_summed_over_the_legs():
    s = walk()
    bus = serve(frames_of(s))
    t, tq, tch = bus.series(TORQUES)
    _, ct, cch = bus.series(CONTACT)
    n = t.size
    assert n >= s.t.size - 20          # every encoder sample but the tail waiting for the next marker
    i = ((t - T0) // 1_000_000).astype(int)
    # the service's inputs, rebuilt here: pose interpolated between the 200 Hz markers, backward differences
    pos = jw.marker_positions(world(), s)[::5]
    tm = s.t[::5]
    pitch = np.interp(s.t[i], tm, np.arctan2(pos[:, 0, 2] - pos[:, 2, 2], pos[:, 0, 0] - pos[:, 2, 0]))
    acc = np.vstack([np.zeros((1, 2)), np.diff(s.u[:, 3:5], axis=0) / 1e-3])[i]
    walker = load_walker("jansen_walker")
    w = world()
    tau = np.zeros((n, 2))
    for leg, slot in enumerate(walker.slots):
        sh, sg = w.shaft[leg], w.sigma[leg]
        lab = f"foot_{slot.prefix}"
        F = np.column_stack([col(ct, cch, f"{lab}:Fx"), col(ct, cch, f"{lab}:Fz")])
        c, sn = np.cos(pitch), np.sin(pitch)
        fc = np.column_stack([c * F[:, 0] + sn * F[:, 1], -sn * F[:, 0] + c * F[:, 1]])   # R(φ)ᵀ F, chassis frame
        f_leg = np.column_stack([w.bx[leg] * fc[:, 0], fc[:, 1]])                          # the leg table's frame
        th = sg * s.q[i, 3 + sh] + w.offset[leg]
        tau[:, sh] += sg * crank_torque(walker.table, th, sg * s.u[i, 3 + sh], sg * acc[:, sh], f_leg)
    got = np.column_stack([col(tq, tch, "tau_L"), col(tq, tch, "tau_R")])
    assert np.abs(got[1:] - tau[1:]).max() < 1e-9 * np.abs(tau).max()
    assert np.allclose(col(tq, tch, "power_L"), col(tq, tch, "tau_L") * s.u[i, 3])


def test_plate_forces_are_shared_exactly_and_the_loads_follow_the_world():
    s = walk()
    bus = serve(frames_of(s), Settings(velocity_window_s=0.0))     # noise-free markers: the last two poses
    t, ct, cch = bus.series(CONTACT)
    i = ((t - T0) // 1_000_000).astype(int)
    labels = [f"foot_{n}" for n in world().labels]
    fx = np.column_stack([col(ct, cch, f"{lab}:Fx") for lab in labels])
    fz = np.column_stack([col(ct, cch, f"{lab}:Fz") for lab in labels])
    x = np.column_stack([col(ct, cch, f"{lab}:x") for lab in labels])
    on_plate = np.column_stack([col(ct, cch, f"{lab}:plate") for lab in labels]) > 0
    # conservation: the feet the service put on a plate carry exactly its measured force
    for (name, plate), (F, _) in zip(PLATES, jw.plate_loads(s.foot, s.force, [p for _, p in PLATES])):
        on = on_plate & (x >= plate.corners[:, 0].min()) & (x <= plate.corners[:, 0].max())
        assert np.allclose((fz * on).sum(axis=1), F[i, 2], atol=1e-9 * np.abs(F).max())
        assert np.allclose((fx * on).sum(axis=1), F[i, 0], atol=1e-9 * np.abs(F).max())
    assert on_plate.any(axis=1).mean() > 0.5        # the walk crosses the plates
    # against the world's truth (its feet and its load torque): off only by the 200 Hz chassis estimate
    assert np.abs(x - s.foot[i, :, 0]).max() < 2e-3
    both = on_plate.any(axis=1) & ~((fz > 1.0) & ~on_plate).any(axis=1)     # every loaded foot on a plate
    assert both.sum() > 200
    _, tq, tch = bus.series(TORQUES)
    load = np.column_stack([col(tq, tch, "load_L"), col(tq, tch, "load_R")])
    err = np.abs(load[both] - s.tau_load[i[both]])
    assert np.median(err) < 0.02 * np.abs(s.tau_load).max()
    assert np.abs(fz[both] - s.force[i[both], :, 2]).sum(axis=1).max() < 0.05 * s.force[:, :, 2].sum(axis=1).max()


def test_zmp_of_a_walker_at_rest_is_the_com_projection():
    # shafts held, chassis settling on its feet (no plates: the contact law gives every force)
    w = world()
    sim = jw.JansenSim(w, 5e-4, record_every=2, x0=2.0)
    for k in range(6000):
        sim.load(k * 5e-4, np.zeros(2), np.zeros(2))
    s = sim.take()
    assert np.abs(s.u[-200:, :3]).max() < 1e-3      # at rest
    last = slice(s.t.size - 300, s.t.size)
    rest = jw.Samples(*(getattr(s, f)[last] for f in jw.Samples.__dataclass_fields__))
    bus = serve(frames_of(rest))
    _, z, zch = bus.series(ZMP)
    assert np.all(col(z, zch, "valid") == 1)
    # M g balanced by the feet, moment balance about the CoM (the crank centre): ZMP x = CoM x
    assert np.abs(col(z, zch, "ZMPx")[50:] - rest.q[0, 0]).max() < 2e-3
    assert np.all(col(z, zch, "margin")[50:] > 0)


def test_energy_per_cycle_is_the_work_of_the_published_power():
    s = walk(seconds=3.0)
    bus = serve(frames_of(s))
    t, tq, tch = bus.series(TORQUES)
    ts = (t - T0) * 1e-9
    energy = bus.frames[ENERGY]
    left = [(d[0], kw) for d, kw in energy if kw["meta"]["shaft"] == "left_shaft"]
    assert len(left) >= 2
    ang = s.q[((t - T0) // 1_000_000).astype(int), 3]
    rev = np.floor(ang / (2 * np.pi))
    for row, kw in left:
        # this cycle: between the two crossings of a multiple of 2π before the completing sample
        k = int(np.searchsorted(t, kw["t"]))
        starts = np.flatnonzero(np.diff(rev[:k + 1]) != 0)
        a, b = starts[-2], starts[-1]
        ta = ts[a] + (2 * np.pi * rev[a + 1] - ang[a]) / (ang[a + 1] - ang[a]) * 1e-3
        tb = ts[b] + (2 * np.pi * rev[b + 1] - ang[b]) / (ang[b + 1] - ang[b]) * 1e-3
        p = col(tq, tch, "power_L")
        grid = np.concatenate([[ta], ts[a + 1:b + 1], [tb]])
        pw = np.interp(grid, ts, p)
        assert row[3] == pytest.approx(tb - ta, abs=1e-9)
        net = np.trapezoid(pw, grid)
        assert row[0] == pytest.approx(net, rel=1e-6, abs=1e-9)
        assert row[2] >= abs(row[0]) and row[1] >= row[0]


def test_an_occluded_chassis_end_keeps_the_pose_from_the_other():
    s = walk()
    frames = frames_of(s)
    hidden = 0
    for k, f in enumerate(fr for fr in frames if fr.stream == "markers/walker"):
        if k % 10 < 3:      # the front corners, then the back ones, hidden in 30 % of the frames
            cols = [f.channels.index(f"chassis_{c}:{a}") for c in (("FL", "FR") if k % 20 < 10 else ("BL", "BR"))
                    for a in "xyz"]
            f.data[:, cols] = np.nan
            hidden += 1
    bus = serve(frames, Settings(velocity_window_s=0.0))
    t, ct, cch = bus.series(CONTACT)
    i = ((t - T0) // 1_000_000).astype(int)
    x = np.column_stack([col(ct, cch, f"foot_{n}:x") for n in world().labels])
    z = np.column_stack([col(ct, cch, f"foot_{n}:z") for n in world().labels])
    # NaN only before the first pose (the first frames hide one end, and nothing is there to hold)
    first = np.flatnonzero(np.isfinite(x).all(axis=1))[0]
    assert hidden > 50 and first < 25 and np.isfinite(x[first:]).all()
    # the pitch held over one marker period moves a foot by well under a millimetre here
    assert np.abs(x[first:] - s.foot[i[first:], :, 0]).max() < 2e-3
    assert np.abs(z[first:] - s.foot[i[first:], :, 2]).max() < 2e-3


def test_results_do_not_depend_on_how_the_inputs_interleave():
    # a replay as fast as it goes delivers the plates' wrenches seconds after the encoders (the plate service
    # zeroes first): every sample computed from bracketing inputs is the same number, the others are flagged
    s = walk()
    frames = frames_of(s)
    plates = [f for f in frames if f.stream.startswith("dynamics/grf/")]
    rest = [f for f in frames if not f.stream.startswith("dynamics/grf/")]
    late = rest[:400] + [f for pair in zip(rest[400:], plates) for f in pair] + rest[400 + len(plates):] \
        + plates[len(rest) - 400:]
    t1, a, _ = serve(frames).series(TORQUES)
    calls = iter(range(10 ** 9))
    # the host clock says "waited too long" at every 150th look: those waiting then are computed held
    t2, b, ch = serve(late, Settings(), clock=lambda: 10 ** 15 if next(calls) % 150 == 149 else 0).series(TORQUES)
    assert np.array_equal(t1, t2[:t1.size])       # b also computed the tail its clock said had waited
    b = b[:t1.size]
    stale = col(b, ch, "stale") > 0
    assert col(a, ch, "stale").sum() == 0 and 0 < stale.sum() < 0.9 * t1.size
    assert np.array_equal(a[~stale], b[~stale])


def test_an_input_holds_keep_s_of_samples_at_its_own_rate():
    # markers at 1 kHz (a fast motion-capture system) and the plates' wrenches 1 s behind everything else, no
    # host clock (a replay as fast as it goes): the markers wait 1 s for the plates in a buffer of KEEP_S (4 s)
    # at their rate, so every sample is computed from the inputs that bracket it, as in the clean order.
    # Sized for 200 Hz (800 samples: 0.8 s at 1 kHz) the buffer overflowed and samples were computed with
    # the plates held (stale)
    frames = frames_of(walk(), marker_every=1)
    end = lambda f: f.t + round((f.samples - 1) * 1e9 / f.rate_hz)     # noqa: E731 - its last sample's time
    late = sorted(frames, key=lambda f: end(f) + (10 ** 9 if f.stream.startswith("dynamics/grf/") else 0))
    t1, a, ch = serve(frames).series(TORQUES)
    t2, b, _ = serve(late).series(TORQUES)
    assert col(a, ch, "stale").sum() == 0 and col(b, ch, "stale").sum() == 0, col(b, ch, "stale").sum()
    assert np.array_equal(t1, t2) and np.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_shaft_that_stops_mid_revolution_keeps_a_bounded_buffer_and_restarts_its_cycles():
    from dynamics.service_torques import MAX_CYCLE_S, _Cycles

    cyc = _Cycles(1000.0)
    out = []
    w, tau = 2.0, 1.5            # rad/s and N m: 2π τ J per revolution
    t = np.arange(0, 8.0, 1e-3)
    for i in range(0, t.size, 10):       # turning: 2 revolutions and a half
        out += cyc.add(t[i:i + 10], w * t[i:i + 10], np.full(10, tau * w))
    assert len(out) == 1 and out[0][1][0] == pytest.approx(2 * np.pi * tau, rel=1e-9)
    assert out[0][1][3] == pytest.approx(np.pi, rel=1e-9)
    stop = w * t[-1]
    t2 = t[-1] + np.arange(1, round((MAX_CYCLE_S + 5) * 1000)) * 1e-3    # stopped longer than MAX_CYCLE_S
    for i in range(0, t2.size, 10):
        out += cyc.add(t2[i:i + 10], np.full(t2[i:i + 10].size, stop), np.zeros(t2[i:i + 10].size))
        assert cyc.t.size <= cyc.limit + 10
    t3 = t2[-1] + np.arange(1, 8000) * 1e-3                              # turning again
    for i in range(0, t3.size, 10):
        out += cyc.add(t3[i:i + 10], stop + w * (t3[i:i + 10] - t2[-1]), np.full(t3[i:i + 10].size, tau * w))
    assert len(out) >= 2      # the revolution across the stop is not reported; the next ones are, whole
    assert all(r[3] == pytest.approx(np.pi, rel=1e-6) for _, r in out[1:])


def test_an_input_buffer_interpolates_as_np_interp_through_growth_and_trimming():
    from dynamics.service_torques import KEEP_S, _Input

    inp = _Input("encoder/x", 2, 1000.0)
    rng = np.random.default_rng(3)
    n = inp.keep * 3          # past the preallocated rows: the arrays grow, none is lost
    t = T0 + np.cumsum(rng.integers(900_000, 1_100_000, n))
    v = rng.normal(size=(n, 2))
    for i in range(0, n, 7):
        inp.add(t[i:i + 7], v[i:i + 7], int(t[min(i + 6, n - 1)]) + 5)
    inp.add(t[n - 20:n - 10], v[n - 20:n - 10] + 1.0, 0)          # a repeated block: ignored
    assert inp.full and inp.t.size == n and np.array_equal(inp.t, t) and np.array_equal(inp.v, v)
    q = np.sort(rng.integers(t[0] - 10 ** 6, t[-1] + 10 ** 6, 500))
    out, known, recv = inp.at(q)
    for c in range(2):
        expected = np.interp(q.astype(float), t.astype(float), v[:, c])
        expected[q < t[0]] = np.nan
        np.testing.assert_allclose(out[:, c], expected, rtol=0, atol=1e-12)
    assert np.array_equal(known, (q >= t[0]) & (q <= t[-1]))
    k = min(int(np.searchsorted(t, q[-1], side="left")), n - 1)       # the newest sample used
    assert recv == int(t[min(k // 7 * 7 + 6, n - 1)]) + 5              # its frame's receipt
    inp.trim(int(t[n // 2]))          # keeps the sample at or before it and at most KEEP_S of samples
    assert inp.t[0] == t[max(n // 2, n - inp.keep)] and inp.t[-1] == t[-1] and inp.keep == int(KEEP_S * 1000)
    out2, _, _ = inp.at(t[-50:])
    np.testing.assert_array_equal(out2, v[-50:])


def test_only_the_samples_that_waited_past_max_wait_are_computed_held():
    # the plates' wrenches stall for 150 ms of the walk, then arrive together: of the encoder samples received
    # during the stall, those the host clock says waited longer than --max-wait-s (0.1 s) are computed with
    # the plates held (stale); the later ones wait for the plates and are computed from them
    s = walk()
    frames = frames_of(s)
    end = lambda f: (f.t - T0) // 1_000_000 + f.samples - 1     # noqa: E731 - index of a frame's last sample
    stalled = [f for f in frames if f.stream.startswith("dynamics/grf/") and 400 <= end(f) < 550]
    rest = [f for f in frames if not any(f is g for g in stalled)]
    at = next(i for i, f in enumerate(rest) if end(f) >= 550)
    order = rest[:at] + stalled + rest[at:]
    now = [0]
    bus = Bus()
    svc = WalkerService(world(), PLATES, ENCODERS, "markers/walker", Settings(max_wait_s=0.1), bus.publish,
                        clock=lambda: now[0])
    for f in order:
        now[0] = T0 + end(f) * 1_000_000      # the host clock: the lab time of the newest sample received
        svc.feed([f])
    t, tq, ch = bus.series(TORQUES)
    i = (t - T0) // 1_000_000
    stale = col(tq, ch, "stale") > 0
    # held: exactly the samples from the stall's first plate sample on whose deadline the clock outran by more
    # than 0.1 s before the plates came — the deadline of sample i: its receipt (its 10-sample encoder frame's,
    # at its last sample) or, if later, when the plates' measured lateness (4 ms: 5-sample frames received at
    # their last sample) says their sample i had come at the latest
    last = max(end(f) for f in rest[:at])
    deadline = np.maximum(i // 10 * 10 + 9, i + 4)
    assert np.array_equal(np.flatnonzero(stale), np.flatnonzero((i >= 400) & (deadline + 100 < last)))
    assert stale.sum() > 30 and (~stale & (i >= 450) & (i < 550)).sum() > 50


def test_a_slow_input_is_waited_for_as_long_as_its_measured_lateness():
    # the markers arrive 0.3 s after their samples' time (a motion-capture system's latency), the encoders and
    # plates as they are measured: an encoder sample waits for the markers that bracket it as long as their
    # measured lateness says they take (0.3 s), then is computed from them, as soon as they are there — not
    # computed with the markers held at their last value a fixed --max-wait-s (0.1 s) after its receipt, as
    # before (then every sample was stale). Truth: the same frames fed with no host clock (every sample from
    # the inputs that bracket it), and the order of the frames fed
    s = walk()
    frames = frames_of(s)
    end = lambda f: f.t + round((f.samples - 1) * 1e9 / f.rate_hz)     # noqa: E731 - its last sample's time
    lag = 300_000_000
    got = sorted((dataclasses.replace(f, t_recv=end(f) + (lag if f.stream == "markers/walker" else 0) + 1000)
                  for f in frames), key=lambda f: f.t_recv)
    now = [0]
    bus = Bus()
    svc = WalkerService(world(), PLATES, ENCODERS, "markers/walker", Settings(max_wait_s=0.1), bus.publish,
                        clock=lambda: now[0])
    computed_at = []            # per torques frame: the receipt of the frame whose feed computed it
    for f in got:
        now[0] = f.t_recv       # the host clock: a service that keeps up
        n = len(bus.frames.get(TORQUES, []))
        svc.feed([f])
        computed_at += [f.t_recv] * (len(bus.frames.get(TORQUES, [])) - n)
    t, tq, ch = bus.series(TORQUES)
    stale = col(tq, ch, "stale") > 0
    # before the markers' first frame comes (0.3 s), they are an input not seen yet: not waited for after 0.1 s
    steady = t > T0 + lag + 10_000_000
    assert steady.sum() > 1000 and not stale[steady].any(), f"{stale[steady].sum()} of {steady.sum()} stale"
    t1, a, _ = serve(frames).series(TORQUES)
    k = np.searchsorted(t1, t[steady])
    assert np.array_equal(t1[k], t[steady]) and np.allclose(a[k], tq[steady], rtol=1e-12, atol=1e-12)
    # each frame computed when the marker frame bracketing its last sample came, not before, not a fixed time later
    markers = sorted(f.t_recv for f in got if f.stream == "markers/walker")
    n = np.array([d.shape[0] for d, _ in bus.frames[TORQUES]])
    t_last = np.array([kw["t"] for _, kw in bus.frames[TORQUES]]) + (n - 1) * 1_000_000
    late = t_last > T0 + lag + 10_000_000
    expected = np.array(markers)[np.searchsorted(np.array(markers) - lag - 1000, t_last[late], side="left")]
    assert np.array_equal(np.array(computed_at)[late], expected)
    # meta.wait_s: that marker frame's receipt minus the receipt of the encoder frame holding the last sample
    enc_recv = T0 + ((t_last[late] - T0) // 10_000_000 * 10 + 9) * 1_000_000 + 1000
    wait = np.array([kw["meta"]["wait_s"] for _, kw in bus.frames[TORQUES]])[late]
    assert np.allclose(wait, (expected - enc_recv) * 1e-9, rtol=0, atol=1e-12) and wait.min() > 0.29


def test_an_input_silent_since_the_start_is_not_waited_for_after_max_wait():
    # the plates' wrenches start 0.3 s after the encoders and markers (the plate service zeroes first): once
    # --max-wait-s has passed since the first encoder sample, the samples are computed as their other inputs
    # arrive, without the plates (stale), instead of each waiting --max-wait-s; from the plates' first sample on
    # they are computed from them again
    s = walk()
    end = lambda f: (f.t - T0) // 1_000_000 + f.samples - 1     # noqa: E731 - index of a frame's last sample
    frames = [f for f in frames_of(s) if not (f.stream.startswith("dynamics/grf/") and end(f) < 300)]
    now = [0]
    bus = Bus()
    svc = WalkerService(world(), PLATES, ENCODERS, "markers/walker", Settings(max_wait_s=0.1), bus.publish,
                        clock=lambda: now[0])
    lat = []
    for f in frames:
        now[0] = T0 + end(f) * 1_000_000      # the host clock: the lab time of the newest sample received
        svc.feed([f])
    for d, kw in bus.frames[TORQUES]:
        lat += [kw["meta"]["latency_s"]] * d.shape[0]
    t, tq, ch = bus.series(TORQUES)
    i, lat = (t - T0) // 1_000_000, np.array(lat)
    stale = col(tq, ch, "stale") > 0
    assert np.all(stale[i < 300]) and not np.any(stale[(i >= 305) & (i < i.max() - 20)])
    # latency from the newest input used: at most a marker frame's wait, never --max-wait-s, once the wait is over
    late = (i >= 150) & (i < 295)
    assert late.sum() > 100 and lat[late].max() < 0.05
