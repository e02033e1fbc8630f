"""The tree-model path (`dynamics.service_tree.TreeService`) on the exoskeleton world
(`dynamics.plants.exo_world`, the lab's: configs/sim_exo.toml's robot, S = 0.6, T = 1.2 s, ZMP law 6/1,
the frontal roll): the markers' centred low-pass under 1 mm marker noise, and the energy per gait cycle.

Frames as the lab's: Plug-in Gait markers (`exo_world.marker_positions` of the world's prescribed q) at
200 Hz, 2 samples a frame; two force plates at 1 kHz, 5 samples a frame, in the plate service's
``dynamics/grf/NAME`` layout (moment about the surface centre; ``valid`` where F_z > 20 N, the lab's
``--threshold-n``). The plates lie side by side along the whole walk, the left one under the left foot's
track (y > 0), the right one under the right's (an instrumented split-belt treadmill's layout): each foot
stands on its own plate, so its load is known at every sample — in the shipped lab's row of plates the
swing foot passes within ``--height-tol-m`` over the stance foot's plate (a shared plate: both loads
unknown), and no whole gait cycle has every torque known.

Truth: Pinocchio's rnea of the world's q, v, a with the world's ground reaction on each foot (its share of
the force at its point, its free moment; `exo_world.ground_reaction`) — the torques; those times the
world's joint rates integrated by `energetics.cycle_energy` at the world's 1 kHz — the work per cycle;
the world's left-foot load crossing 20 N — the touch-downs; scipy's ``freqz`` — the filter's response."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from scipy import signal

from daq.frames import Frame
from dynamics import forceplate as fp
from dynamics.energetics import cycle_energy
from dynamics.service_torques import ENERGY, TORQUES
from dynamics.service_tree import FILTER_HZ, TreeService, TreeSettings
from dynamics.smoothing import centred_filter, centred_lowpass

from .test_service_torques import Bus

pytestmark = pytest.mark.usefixtures("kernel_path")     # the compiled plate_id and the numpy path

T0 = 10 ** 12
FS, FS_PLATE = 200.0, 1000.0
SECONDS = 4.0           # 3.3 strides: two whole cycles of the left foot
PLATE = ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "valid")
THRESHOLD_N = 20.0
LEGS = ("hip_flexion_l", "knee_l", "hip_flexion_r", "knee_r")     # the exoskeleton's actuated joints


@functools.lru_cache(maxsize=None)
def world():
    """The lab's world (configs/sim_exo.toml's `world` process: `exo_world_sim.build_world` of these)."""
    from daq.formats.gait_cycle import read_cycle
    from controller.synergies.robot import load_robot
    from daq.devices.markers_sim import load_marker_set
    from dynamics.loader import load_model
    from dynamics.plants.exo_world import exo_world
    from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal

    cfg = load_robot("exoskeleton")
    b = cfg.biped
    joints = BipedJoints(tuple(b.hips), tuple(b.knees), tuple(b.ankles), b.trunk, tuple(b.feet))
    nominal = build_nominal(load_model(cfg.model), joints, read_cycle(b.gait), 0.6, 1.2, single=(6, 6), double=(1, 1),
                            share=b.double_support, samples=200, roll=b.roll, frontal=b.frontal)
    return exo_world(nominal, cfg.actuators, load_marker_set("human15"))


@functools.lru_cache(maxsize=None)
def truth():
    """(t (N,) s at 1 kHz, q, v, a, Ground, Pinocchio's joint torques (N, nv − 6)) of the world."""
    import pinocchio as pin

    from dynamics.pinocchio_model import to_pinocchio
    from dynamics.plants.exo_world import ground_reaction, motion

    w = world()
    t = np.arange(round(SECONDS * FS_PLATE)) / FS_PLATE
    q, v, a = motion(w, t)
    g = ground_reaction(w, t, q, v, a)
    pm = to_pinocchio(w.model)
    data = pm.createData()
    tau = np.empty((t.size, w.model.nv - 6))
    jids = [pm.getJointId(w.model.segments[s].joint_name or w.model.segments[s].name) for s in w.feet]
    for k in range(t.size):
        pin.forwardKinematics(pm, data, q[k])
        fext = pin.StdVec_Force()
        for _ in range(pm.njoints):
            fext.append(pin.Force.Zero())
        for side, jid in enumerate(jids):
            F = g.foot_force[k, side]
            fext[jid] = data.oMi[jid].actInv(pin.Force(F, np.cross(g.point[k, side], F) + g.foot_moment[k, side]))
        tau[k] = pin.rnea(pm, data, q[k], v[k], a[k], fext)[6:]
    return t, q, v, a, g, tau


def plates():
    """The two plates side by side along the walk (module doc): FP_L under y > 0, FP_R under y < 0."""
    out = []
    for name, (y0, y1) in (("FP_L", (0.0, 0.5)), ("FP_R", (-0.5, 0.0))):
        c = np.array([[6.0, y0, 0.0], [-1.0, y0, 0.0], [-1.0, y1, 0.0], [6.0, y1, 0.0]])
        out.append((name, fp.Plate(type=2, corners=c, origin=np.array([0.0, 0.0, -0.04]), name=name)))
    return out


def frames(noise_m: float = 0.0, seed: int = 0, layout=None) -> list[Frame]:
    """The world's marker frames (+ N(0, noise²) per coordinate) and the frames of the plates `layout`
    (default `plates()`; each carries the feet whose load point lies on it, as the world process's:
    `jansen_world.plate_loads`), in the order of their last sample's time."""
    from dynamics.plants.exo_world import marker_positions
    from dynamics.plants.jansen_world import plate_loads

    t, q, _, _, g, _ = truth()
    w = world()
    every = round(FS_PLATE / FS)
    pos = marker_positions(w, q[::every])
    pos = pos + np.random.default_rng(seed).normal(scale=noise_m, size=pos.shape)
    chans = tuple(f"{lab}:{ax}" for lab in w.labels for ax in "xyz")
    data = pos.reshape(pos.shape[0], -1)
    stamp = lambda s: T0 + round(s * 1e9)          # noqa: E731
    out = []
    for k, i in enumerate(range(0, data.shape[0] - 1, 2)):
        ts = t[::every][i]
        out.append((stamp(t[::every][i + 1]), Frame("markers/exo", "markers", k, stamp(ts), stamp(ts), stamp(ts), FS,
                                                     chans, ("m",) * len(chans), data[i:i + 2])))
    layout = plates() if layout is None else layout
    for (name, plate), (F, M) in zip(layout, plate_loads(g.point, g.foot_force, [p for _, p in layout],
                                                         g.foot_moment)):
        rows = np.column_stack([F, M, F[:, 2] > THRESHOLD_N])
        for k, i in enumerate(range(0, t.size - 4, 5)):
            out.append((stamp(t[i + 4]), Frame(f"dynamics/grf/{name}", "grf", k, stamp(t[i]), stamp(t[i]), stamp(t[i]),
                                               FS_PLATE, PLATE, ("1",) * 7, rows[i:i + 5])))
    out.sort(key=lambda o: o[0])
    return [f for _, f in out]


def serve(fr: list[Frame], filter_hz: float = FILTER_HZ, layout=None,
          energy_joints: tuple[str, ...] = ()) -> tuple[Bus, dict[str, int]]:
    """The service's outputs and counters for frames `fr` over the plates `layout` (default `plates()`)."""
    from daq.devices.markers_sim import load_marker_set

    counts: dict[str, int] = {}
    bus = Bus()
    svc = TreeService(world().model, load_marker_set("human15"), ("foot_l", "foot_r"),
                      plates() if layout is None else layout, "markers/exo",
                      TreeSettings(max_wait_s=1.0, contact_n=THRESHOLD_N, filter_hz=filter_hz,
                                   energy_joints=energy_joints), bus.publish,
                      count=lambda s, k=1: counts.__setitem__(s, counts.get(s, 0) + k), clock=lambda: 0)
    for i in range(0, len(fr), 3):
        svc.feed(fr[i:i + 3])
    return bus, counts


def world_index(t_ns: np.ndarray) -> np.ndarray:
    return np.round((t_ns - T0) * 1e-6).astype(int)


def leg_errors(bus: Bus) -> tuple[np.ndarray, np.ndarray]:
    """(rms error (4,) N·m of the published leg torques against Pinocchio's over the samples where all four
    are numbers, the truth's peak (4,))."""
    ts, tq, ch = bus.series(TORQUES)
    cols = [ch.index(f"tau:{j}") for j in LEGS]
    names = [s.joint_name for s in world().model.segments[1:] if s.joint.nv]
    tcols = [names.index(j) for j in LEGS]
    ok = np.isfinite(tq[:, cols]).all(axis=1)
    tau = truth()[5]
    e = tq[ok][:, cols] - tau[world_index(ts[ok])][:, tcols]
    print("leg samples compared", ok.sum(), "of", ts.size)
    return np.sqrt((e ** 2).mean(axis=0)), np.abs(tau[:, tcols]).max(axis=0)


def test_the_filter_makes_the_torques_usable_under_1_mm_marker_noise():
    """1 mm marker noise (the lab's), differentiated twice over h = 5 ms without a filter: hip torque errors
    of ~150 N·m rms (measured 151-165, of a 197 N·m peak; knees 37-42 of 98) — noise. With the default centred
    6 Hz low-pass (21 taps, 50 ms): measured 4.8-5.2 N·m rms at the hips, 1.3-1.4 at the knees over three noise
    seeds, of which 3.5 and 1.1 are the filter's own smoothing of the noise-free motion (the world's
    ground-reaction shares switch at the double-support bounds faster than 6 Hz). Asserted: every actuated
    joint within 5 % of its peak (hip 9.9, knee 4.9 N·m), and without the filter above 30 %."""
    noisy = frames(1e-3, seed=1)
    rms, peak = leg_errors(serve(noisy)[0])
    print("filtered rms", rms.round(2), "peak", peak.round(1))
    assert np.all(rms < 0.05 * peak), rms
    raw, _ = leg_errors(serve(noisy, filter_hz=0.0)[0])
    print("unfiltered rms", raw.round(2))
    assert np.all(raw > 0.3 * peak), raw


@pytest.mark.parametrize("f", [0.5, 2.0, 6.0, 20.0])
def test_the_centred_lowpass_passes_a_sine_with_the_gain_of_freqz_and_no_phase(f):
    """A sine of f Hz at 200 Hz through `centred_filter` with the 6 Hz taps: each output is the input's
    sine at the same time (zero phase: the output of a window is stamped at its centre) scaled by the
    magnitude scipy's freqz gives for those taps at f, to 1e-12; a constant passes unchanged."""
    taps = centred_lowpass(6.0, FS)
    assert taps.size == 21 and np.allclose(taps, taps[::-1])
    _, h = signal.freqz(taps, worN=[f], fs=FS)
    gain = np.abs(h[0])
    half = taps.size // 2
    t = np.arange(400) / FS
    x = np.column_stack([np.sin(2 * np.pi * f * t + 0.3), 2.0 + np.cos(2 * np.pi * f * t)])
    y = centred_filter(x, taps)
    ti = t[half:t.size - half]
    np.testing.assert_allclose(y[:, 0], gain * np.sin(2 * np.pi * f * ti + 0.3), atol=1e-12)
    np.testing.assert_allclose(y[:, 1], 2.0 * taps.sum() + gain * np.cos(2 * np.pi * f * ti), atol=1e-12)
    assert taps.sum() == pytest.approx(1.0, abs=1e-12)          # steady state: a constant passes unchanged
    # the short window's gentle response (freqz): gait's 0.5-2 Hz pass within 3 %, 6 Hz at 0.77 (−3 dB at 7 Hz), 20 Hz below −20 dB
    assert gain > 0.97 if f <= 2.0 else (0.7 < gain < 0.8 if f == 6.0 else gain < 0.1)


def test_a_lost_marker_frame_widens_by_the_filter_window_and_nothing_after_changes():
    """Marker frame 200 (samples 400, 401) lost, 1 mm noise, the default filter: the samples whose filter
    window (±10) or rate stencil (±2 more) reaches the gap are NaN, every other sample is exactly the
    complete run's — the window carries no state past it (an IIR's state would be NaN from then on)."""
    fr = frames(1e-3, seed=2)
    lost = [f for f in fr if not (f.stream == "markers/exo" and f.seq == 200)]
    t0, full, ch = serve(fr)[0].series(TORQUES)
    t1, got, _ = serve(lost)[0].series(TORQUES)
    i0, i1 = (np.round((t - T0) * 1e-9 * FS).astype(int) for t in (t0, t1))
    reach = 10 + 2
    assert not np.isin([400, 401], i1).any()
    near = (i1 >= 400 - reach) & (i1 <= 401 + reach)
    assert near.sum() == 2 * reach and np.isnan(got[near][:, ch.index("tau:knee_l")]).all()
    ref = dict(zip(i0, full))
    assert i1[~near].size > 700
    np.testing.assert_array_equal(got[~near], np.array([ref[k] for k in i1[~near]]))


def cycles(bus: Bus) -> list[tuple[int, np.ndarray, list[str]]]:
    return [(kw["t"], d[0], list(kw["channels"])) for d, kw in bus.frames.get(ENERGY, [])]


@pytest.mark.parametrize("filter_hz", [0.0, FILTER_HZ])
def test_energy_per_cycle_is_the_worlds_work_between_left_touch_downs(filter_hz):
    """Noise-free markers walking 4 s over the plates: a dynamics/energy frame per cycle of the left foot,
    stamped at its touch-down — the world's left-foot load first above 20 N after being below 10 N (the
    marker sample there) — with period 1.2 s (the stride), and per joint the net, positive and absolute
    work of Pinocchio's torques times the world's rates integrated at 1 kHz over that cycle; the sums over
    the joints in net positive absolute. Tolerance per joint: 2 % of its absolute work in the cycle + 0.1 J
    (measured without the filter: the knees 0.53 J of 32 J, the hips 0.26 of 21 — the central differences'
    O(h²) and the plates' 20 N threshold, a loading foot's first 20 N unseen). The 6 Hz filter smooths the
    trunk's compensating motion, faster than the legs': lumbar flexion 1.22 J of 15.3 J (8 %) off, the
    actuated joints and ankles within 0.26 J (1.1 %): with it, the actuated joints within 2 % + 0.1 J,
    every joint within 10 % + 0.1 J."""
    bus, counts = serve(frames(), filter_hz)
    got = cycles(bus)
    t, _, v, _, g, tau = truth()
    left = g.foot_force[:, 0, 2][::5]
    tm = t[::5]
    down = [k for k in range(1, tm.size) if left[k] > THRESHOLD_N and
            left[:k][::-1][np.argmax((left[:k][::-1] > THRESHOLD_N) | (left[:k][::-1] < THRESHOLD_N / 2))] < THRESHOLD_N / 2]
    assert [T0 + round(tm[k] * 1e9) for k in down[1:]] == [c[0] for c in got]
    assert len(got) == 2 and "unknown_cycles" not in str(counts)
    names = [s.joint_name for s in world().model.segments[1:] if s.joint.nv]
    power = tau * v[:, 6:]
    for stamp, row, ch in got:
        b1 = (stamp - T0) * 1e-9
        b0 = b1 - row[ch.index("period")]
        assert row[ch.index("period")] == pytest.approx(1.2, abs=1e-9)
        worst = 0.0
        for j, name in enumerate(names):
            e = cycle_energy(t, power[:, j], [b0, b1])
            want = np.array([e.net[0], e.positive[0], e.absolute[0]])
            have = row[[ch.index(f"{k}:{name}") for k in ("net", "positive", "absolute")]]
            worst = max(worst, np.abs(have - want).max())
            rel = 0.02 if filter_hz == 0 or name in LEGS else 0.1
            np.testing.assert_allclose(have, want, atol=rel * e.absolute[0] + 0.1, err_msg=name)
        print("cycle at", b1, "worst joint error", round(worst, 3), "J; total absolute", row[ch.index("absolute")])
        for k in ("net", "positive", "absolute"):
            assert row[ch.index(k)] == pytest.approx(sum(row[ch.index(f"{k}:{n}")] for n in names), rel=1e-12)


def test_a_cycle_with_an_unknown_load_or_lost_samples_has_nan_work_and_is_counted():
    """The right plate cut short at x = 1.7 m: from the right foot's first step beyond it (on the bare
    floor: its load unknown, its leg's torques NaN) the cycles have NaN work for the right leg's joints and
    in the sums, and are counted (``dynamics/energy:unknown_cycles``); the left leg's work, whose foot stays on
    its plate, is still the complete run's. A lost marker frame in the first cycle makes every joint's work
    of that cycle NaN (its samples are missing, not integrated across)."""
    t1, full, ch = cycles(serve(frames(), 0.0)[0])[1]
    short = dict(plates())
    c = short["FP_R"].corners.copy()
    c[[0, 3], 0] = 1.7
    cut = [("FP_L", short["FP_L"]), ("FP_R", fp.Plate(type=2, corners=c, origin=np.array([0.0, 0.0, -0.04]),
                                                      name="FP_R"))]
    bus, counts = serve(frames(layout=cut), 0.0, cut)
    got = cycles(bus)
    assert [g[0] for g in got][-1] == t1
    row = got[-1][1]
    right = [ch.index(f"{k}:{j}") for j in ("hip_flexion_r", "knee_r", "ankle_r") for k in ("net", "absolute")]
    left = [ch.index(f"{k}:{j}") for j in ("hip_flexion_l", "knee_l", "ankle_l") for k in ("net", "absolute")]
    assert np.isnan(row[right]).all() and np.isnan(row[[ch.index(k) for k in ("net", "positive", "absolute")]]).all()
    np.testing.assert_array_equal(row[left], full[left])
    assert counts[f"{ENERGY}:unknown_cycles"] >= 1
    # a lost marker frame in the first cycle (1.165-2.365 s): samples 350, 351
    lost = [f for f in frames() if not (f.stream == "markers/exo" and f.seq == 175)]
    bus, counts = serve(lost, 0.0)
    (_, first, _), (_, second, _) = cycles(bus)
    assert np.isnan(first[4:]).all() and first[ch.index("period")] == pytest.approx(1.2)
    np.testing.assert_array_equal(second, full)
    assert counts[f"{ENERGY}:unknown_cycles"] == 1


def test_a_negative_cutoff_is_a_one_line_error_and_markers_too_slow_for_it_are_rejected():
    """--filter-hz below 0 is refused when the settings are made; marker frames at 10 Hz (Nyquist 5 Hz, below
    the 6 Hz cutoff) are rejected and counted, nothing computed from them; with --filter-hz 0 they are taken."""
    with pytest.raises(ValueError, match="--filter-hz >= 0"):
        TreeSettings(filter_hz=-1.0)
    slow = [Frame(f.stream, f.kind, f.seq, f.t, f.t_host, f.t_device, 10.0, f.channels, f.units, f.data)
            if f.stream == "markers/exo" else f for f in frames()[:400]]
    bus, counts = serve(slow)
    assert counts["markers/exo:rejected"] == sum(f.stream == "markers/exo" for f in slow) and TORQUES not in bus.frames
    bus, counts = serve(slow, 0.0)
    assert "markers/exo:rejected" not in counts and TORQUES in bus.frames


def test_a_marker_hidden_elsewhere_leaves_the_stance_foots_support_whole():
    """The left upper-arm marker hidden throughout (the left shoulder's and elbow's coordinates NaN): the
    stance foot's support polygon — its markers and its contact points (heel, toe: the sole's
    extent), placed by its own fitted segment — is the same as with every marker seen, so in right single
    support the margin is the same to 0.1 mm at every sample, including the push-off on the toe (law 6: the
    ZMP on the toe's edge, margin about 0). Before, the contact points came from the forward kinematics of
    q, NaN when any coordinate was: the polygon shrank to the stance foot's markers (the toe marker on the
    metatarsal head) and the margin at push-off fell to -6.6 cm (the shipped lab's loop latched its ZMP
    guard on it). Truth: the same service on the complete markers, the world's foot loads."""
    fr = frames()
    chans = next(f for f in fr if f.stream == "markers/exo").channels
    hide = [k for k, c in enumerate(chans) if c.startswith("LUPA:")]
    assert len(hide) == 3
    hidden = []
    for f in fr:
        if f.stream == "markers/exo":
            d = f.data.copy()
            d[:, hide] = np.nan
            f = dataclasses.replace(f, data=d)
        hidden.append(f)
    t_all, z_all, zch = serve(fr, filter_hz=0)[0].series("dynamics/zmp")
    t_hid, z_hid, _ = serve(hidden, filter_hz=0)[0].series("dynamics/zmp")
    assert np.array_equal(t_all, t_hid)
    g = truth()[4]
    i = world_index(t_all)
    right_single = (g.foot_force[i, 0, 2] < 1.0) & (g.foot_force[i, 1, 2] > THRESHOLD_N)
    m_all, m_hid = z_all[:, zch.index("margin")], z_hid[:, zch.index("margin")]
    rows = right_single & np.isfinite(m_all)
    assert rows.sum() > 50
    assert np.isfinite(m_hid[rows]).all()
    assert np.abs(m_hid[rows] - m_all[rows]).max() < 1e-4
    assert m_all[rows].min() < 0.005          # the push-off on the toe was among them


def test_energy_joints_choose_what_the_sums_take_and_an_unknown_one_is_named():
    """--energy-joints (an exoskeleton's actuated joints): the frames' net positive absolute are the sums over
    those joints' own columns (the same run's per-joint work), not over the body; a name that is not a joint
    of the model is a one-line error naming it and the model's joints."""
    bus, _ = serve(frames(), 0.0, energy_joints=LEGS)
    got = cycles(bus)
    assert got
    for _, row, ch in got:
        for k in ("net", "positive", "absolute"):
            legs = sum(row[ch.index(f"{k}:{n}")] for n in LEGS)
            assert row[ch.index(k)] == pytest.approx(legs, rel=1e-12)
        body = sum(row[ch.index(c)] for c in ch if c.startswith("absolute:"))
        assert row[ch.index("absolute")] < 0.9 * body       # the trunk, ankles and arms work too
    with pytest.raises(ValueError, match=r"--energy-joints 'knee_left': not a joint of .*hip_flexion_l"):
        serve([], 0.0, energy_joints=("knee_l", "knee_left"))
