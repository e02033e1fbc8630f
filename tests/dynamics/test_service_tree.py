"""The tree-model path of the live dynamics service (`dynamics.service_tree.TreeService`) fed frames of
a synthetic human15 motion.

The motion is analytic (q, v, a known at any time): the base walks, bobs and turns from −2 to +2 rad
about a tilted axis (scipy's quaternion of it changes hemisphere), the left elbow swings through ±π
(its angle wraps), every other joint a sine. Markers (200 Hz, 2 samples per frame, the mocap daemon's layout) are
placed by the model's forward kinematics; the plate under the right foot (1 kHz, the plate service's
``dynamics/grf/NAME`` layout: moment about its surface centre) carries the ground wrench the motion
requires, computed by Pinocchio's rnea; a second plate elsewhere reads nothing.

Truths: Pinocchio's rnea with that wrench on the right foot (the joint torques), the analytic rates
(the joint power), the ZMP formula of methods.md d.2 on Pinocchio's wrench, scipy's convex hull of the
foot markers (the margin), and the offline pipeline run on the whole record at once (what the
incremental carrying must reproduce)."""
from __future__ import annotations

import functools
import tomllib

import numpy as np
import pytest
from scipy.spatial import ConvexHull
from scipy.spatial.transform import Rotation

import configs
from daq.frames import Frame
from dynamics import forceplate as fp
from dynamics import load_model
from dynamics.human15_markers import (fit_segments, joint_coordinates, joint_rates, marker_inverse_dynamics,
                                      marker_set_from_dict)
from dynamics.kinematics import contact_positions
from dynamics.plate_id import PlateLoad
from dynamics.service_torques import CONTACT, REANCHOR_FRAMES, TORQUES, ZMP
from dynamics.service_tree import LOOKAHEAD, SOLE_WIDTH_M, TreeService, TreeSettings

from .test_human15_markers import pinocchio_truth, synthetic_markers
from .test_service_torques import Bus

pytestmark = pytest.mark.usefixtures("kernel_path")     # the compiled plate_id and the numpy path

T0 = 10 ** 12          # lab time of the first sample [ns]
FS, FS_PLATE = 200.0, 1000.0
SECONDS = 1.5
FEET = ("foot_r",)
SETTINGS = TreeSettings(max_wait_s=1.0, height_tol_m=2.0, filter_hz=0.0)   # exact markers: no low-pass
PLATE = ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "valid")


@functools.lru_cache(maxsize=None)
def model(name: str = "human15"):
    return load_model(name)


@functools.lru_cache(maxsize=None)
def mset():
    return marker_set_from_dict(tomllib.loads(configs.path("markersets/human15.toml").read_text()))


def motion(t: np.ndarray, name: str = "human15"):
    """Analytic q (N, nq), v, a (N, nv) of model `name` at times t (N,) s (module doc)."""
    m = model(name)
    n, k = t.size, m.nv - 6
    rng = np.random.default_rng(5)
    amp, w, ph = rng.uniform(0.05, 0.25, k), 2 * np.pi * rng.uniform(0.7, 1.3, k), rng.uniform(0, 2 * np.pi, k)
    off = np.zeros(k)
    elbow = m.idx_v[m.index["forearm_l"]] - 6
    amp[elbow], off[elbow], w[elbow] = 2.0, 1.6, 2 * np.pi * 0.8      # through +-pi: the angle wraps
    q, v, a = np.zeros((n, m.nq)), np.zeros((n, m.nv)), np.zeros((n, m.nv))
    q[:, 7:] = off + amp * np.sin(w * t[:, None] + ph)
    v[:, 6:] = amp * w * np.cos(w * t[:, None] + ph)
    a[:, 6:] = -amp * w ** 2 * np.sin(w * t[:, None] + ph)
    u = np.array([0.1, 0.2, 1.0]) / np.linalg.norm([0.1, 0.2, 1.0])
    th, thd, thdd = -2.0 + 2.6 * t + 0.2 * np.sin(2 * t), 2.6 + 0.4 * np.cos(2 * t), -0.8 * np.sin(2 * t)
    R = Rotation.from_rotvec(th[:, None] * u).as_matrix()
    q[:, 3:7] = Rotation.from_matrix(R).as_quat()
    p = np.column_stack([0.3 * t, 0.01 * np.sin(3 * t), 0.95 + 0.02 * np.sin(6 * t)])
    pd = np.column_stack([np.full(n, 0.3), 0.03 * np.cos(3 * t), 0.12 * np.cos(6 * t)])
    pdd = np.column_stack([np.zeros(n), -0.09 * np.sin(3 * t), -0.72 * np.sin(6 * t)])
    q[:, :3] = p
    vl, om = np.einsum("nji,nj->ni", R, pd), thd[:, None] * u
    v[:, :3], v[:, 3:6] = vl, om
    a[:, :3] = np.einsum("nji,nj->ni", R, pdd) - np.cross(om, vl)      # d/dt (Rᵀ ṗ)
    a[:, 3:6] = thdd[:, None] * u
    return q, v, a


@functools.lru_cache(maxsize=None)
def record(name: str = "human15"):
    """(marker times, q, v, a at them, Pinocchio's torques there, plate times, the wrench (f, n) about
    the lab origin at the plate times, the plates)."""
    tp = np.arange(round(SECONDS * FS_PLATE)) / FS_PLATE
    qp, vp, ap = motion(tp, name)
    f, n, tau = pinocchio_truth(model(name), qp, vp, ap)
    every = round(FS_PLATE / FS)
    heel_toe = contact_positions(model(name), qp, ["heel_r", "toe_r"])
    lo, hi = heel_toe[..., :2].reshape(-1, 2).min(0) - 0.05, heel_toe[..., :2].reshape(-1, 2).max(0) + 0.05
    z = float(heel_toe[..., 2].min()) - 1e-3
    c1 = np.array([[hi[0], hi[1], z], [lo[0], hi[1], z], [lo[0], lo[1], z], [hi[0], lo[1], z]])
    c2 = c1 + [hi[0] - lo[0] + 0.5, 0.0, 0.0]                         # beyond the first: never stepped on
    plates = [(name, fp.Plate(type=2, corners=c, origin=np.array([0.0, 0.0, -0.04]), name=name))
              for name, c in (("FP1", c1), ("FP2", c2))]
    return (tp[::every], qp[::every], vp[::every], ap[::every], tau[::every], tp, f, n, plates)


def frames_of(drop_marker_frame: int | None = None, block: int = 2, occlude=None, name: str = "human15") -> list[Frame]:
    """Marker frames (`block` samples each, 200 Hz) and plate frames (5 samples, 1 kHz), in the order of
    their last sample's time; `drop_marker_frame`: that marker frame is lost; occlude: {label: slice of
    marker samples} NaN; name: the model moved."""
    tm, qm, _, _, _, tp, f, n, plates = record(name)
    pos = synthetic_markers(model(name), mset(), qm)
    for label, where in (occlude or {}).items():
        pos[label][where] = np.nan
    labels = list(pos)
    chans = tuple(f"{lab}:{ax}" for lab in labels for ax in "xyz")
    data = np.stack([pos[lab] for lab in labels], axis=1).reshape(len(tm), -1)
    out, seq = [], {}

    def frame(stream, kind, rate, channels, rows, t0_s, t_last_s):
        seq[stream] = seq.get(stream, -1) + 1
        t0 = T0 + round(t0_s * 1e9)
        out.append((T0 + round(t_last_s * 1e9), Frame(stream, kind, seq[stream], t0, t0, t0, rate, tuple(channels),
                                                      ("m",) * len(channels), np.asarray(rows, float))))

    for k, i in enumerate(range(0, len(tm) - block + 1, block)):
        if k != drop_marker_frame:
            frame("markers/sim", "markers", FS, chans, data[i:i + block], tm[i], tm[i + block - 1])
        else:
            seq["markers/sim"] += 1
    for name, plate in plates:
        centre = np.asarray(plate.corners, float).mean(axis=0)
        loaded = name == "FP1"
        F = f if loaded else np.zeros_like(f)
        M = (n - np.cross(centre, f)) if loaded else np.zeros_like(n)    # about the plate's surface centre
        valid = np.full((len(tp), 1), float(loaded))
        rows = np.column_stack([F, M, valid])
        for i in range(0, len(tp) - 4, 5):
            frame(f"dynamics/grf/{name}", "grf", FS_PLATE, ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "valid"),
                  rows[i:i + 5], tp[i], tp[i + 4])
    out.sort(key=lambda x: x[0])
    return [fr for _, fr in out]


def serve(frames, chunk: int = 3, settings: TreeSettings = SETTINGS, clock=lambda: 0, name: str = "human15") -> Bus:
    bus = Bus()
    svc = TreeService(model(name), mset(), FEET, record(name)[-1], "markers/sim", settings, bus.publish, clock=clock)
    for i in range(0, len(frames), chunk):
        svc.feed(frames[i:i + chunk])
    return bus


def counting_serve(frames, chunk: int = 3) -> tuple[Bus, dict[str, int]]:
    """`serve` with the service's counters: (bus, {subject: count})."""
    counts: dict[str, int] = {}
    bus = Bus()
    svc = TreeService(model(), mset(), FEET, record()[-1], "markers/sim", SETTINGS, bus.publish,
                      count=lambda s, n=1: counts.__setitem__(s, counts.get(s, 0) + n), clock=lambda: 0)
    for i in range(0, len(frames), chunk):
        svc.feed(frames[i:i + chunk])
    return bus, counts


def offline(pos):
    """The offline pipeline on the whole record's markers pos (label → (N, 3) m) with the plates at the
    marker times: (v (N, nv), MarkerKinetics)."""
    tm, _, _, _, _, _, f, n, plates = record()
    q = joint_coordinates(model(), mset(), fit_segments(model(), mset(), pos))
    v, a = joint_rates(model(), q, FS)
    every = round(FS_PLATE / FS)
    loads = [PlateLoad(f[::every] if name == "FP1" else 0 * f[::every], n[::every] if name == "FP1" else 0 * n[::every],
                       p.corners, np.full(len(tm), name == "FP1"), name) for name, p in plates]
    return v, marker_inverse_dynamics(model(), q, v, a, loads, FEET, None, SETTINGS.height_tol_m, SETTINGS.edge_tol_m)


def columns(channels, prefix):
    return [k for k, c in enumerate(channels) if c.startswith(prefix)]


def at_markers(t):
    """Marker sample index of lab times t (N,) ns."""
    return np.round((t - T0) * 1e-9 * FS).astype(int)


@pytest.mark.parametrize("name", ["human15", "exoskeleton"])
def test_torques_equal_pinocchios_rnea_with_the_plate_wrench_on_the_foot(name):
    """Every marker sample but the last 2 (the look-ahead) is published, the first 2 NaN (no sample
    before them for their rates); the others' bottom-up torques equal
    Pinocchio's rnea on the true motion with the plate's wrench on the right foot within the central
    differences' O(h²) error (measured 6.5e-5 of the peak torque, 274 N·m); the power is τ·q̇ of those; the root
    residual (measured − required wrench) is small against body weight. The exoskeleton model (human15
    wearing its rigidly strapped links, fixed joints) with the human15 marker set likewise."""
    tm, _, vm, _, tau, *_ = record(name)
    bus = serve(frames_of(name=name), name=name)
    t, tq, ch = bus.series(TORQUES)
    i = at_markers(t)
    assert np.array_equal(i, np.arange(len(tm) - 2))          # every sample, once, in order
    assert np.all(tq[:, ch.index("stale")] == 0)
    assert np.isnan(tq[:2, :-1]).all()
    t, tq, i = t[2:], tq[2:], i[2:]
    got, truth = tq[:, columns(ch, "tau:")], tau[i, 6:]
    scale = np.abs(truth).max()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, truth, atol=5e-4 * scale)
    np.testing.assert_allclose(tq[:, columns(ch, "power:")], truth * vm[i, 6:], atol=5e-4 * scale * np.abs(vm).max())
    weight = model(name).total_mass * 9.81
    assert np.abs(tq[:, columns(ch, "res:")]).max() < 5e-4 * weight
    assert [c[4:] for c in ch if c.startswith("tau:")] == [s.joint_name for s in model(name).segments[1:]
                                                           if s.joint.nv]


def test_the_incremental_service_equals_the_offline_pipeline_on_the_whole_record():
    """Frames of 2 marker samples carry the unwrapping (the elbow passes ±π, the root quaternion changes
    hemisphere in scipy's conversion) and the rates' look-ahead: q, v, a and the torques equal those of
    the offline pipeline run on all samples at once (its interior), whatever the feeding."""
    _, qm, *_ = record()
    raw = Rotation.from_matrix(Rotation.from_quat(qm[:, 3:7]).as_matrix()).as_quat()
    assert (np.einsum("ij,ij->i", raw[1:], raw[:-1]) < 0).any()        # the hemisphere does change
    elbow = model().idx_q[model().index["forearm_l"]]
    assert qm[:, elbow].max() > np.pi
    pos = synthetic_markers(model(), mset(), qm)
    _, kin = offline(pos)
    frames = frames_of()
    for chunk in (1, 5, len(frames)):
        t, tq, ch = serve(frames, chunk).series(TORQUES)
        t, tq = t[2:], tq[2:]
        i = at_markers(t)
        np.testing.assert_allclose(tq[:, columns(ch, "tau:")], kin.tau_bottom_up[i, 6:], rtol=1e-9, atol=1e-7)
        np.testing.assert_allclose(tq[:, columns(ch, "res:Fx")[0]:][:, :3], kin.residual_force[i], atol=1e-7)


def pinocchio_contacts(m, q: np.ndarray, segment: str, width: float = 0.0) -> np.ndarray:
    """Lab positions (N, C, 3) m of the segment's contact points (the model's) at configurations q (N, nq),
    by Pinocchio's forward kinematics; width > 0: each point widened to two, ± width/2 along the segment's
    y axis (N, 2 C, 3)."""
    import pinocchio as pin

    from dynamics.pinocchio_model import to_pinocchio

    pm = to_pinocchio(m)
    data = pm.createData()
    seg = m.segments[m.index[segment]]
    jid = pm.getJointId(seg.joint_name)
    pts = np.array(list(seg.contacts.values()), dtype=float)
    if width:
        pts = np.concatenate([pts - [0.0, width / 2, 0.0], pts + [0.0, width / 2, 0.0]])
    out = np.empty((q.shape[0], len(pts), 3))
    for k, qk in enumerate(q):
        pin.forwardKinematics(pm, data, qk)
        out[k] = pts @ data.oMi[jid].rotation.T + data.oMi[jid].translation
    return out


def test_zmp_margin_and_contact_follow_the_plate_wrench():
    """ZMP = ((z f_x − n_y)/f_z, (z f_y + n_x)/f_z) of Pinocchio's wrench on the plate plane (d.2); the
    margin is the signed distance to scipy's convex hull of the right foot's support: its 3 markers and
    its sole, the model's heel and toe contact points each widened to two SOLE_WIDTH_M apart across the
    foot, placed by Pinocchio's forward kinematics (inside: the least
    distance to an edge line; outside: negative); the right foot carries the plate's wrench, known."""
    _, qm, _, _, _, _, f, n, plates = record()
    bus = serve(frames_of())
    t, zmp, zch = bus.series(ZMP)
    _, con, cch = bus.series(CONTACT)
    t, zmp, con = t[2:], zmp[2:], con[2:]       # the first 2: no rates, NaN
    i = at_markers(t)
    j = i * round(FS_PLATE / FS)
    z = plates[0][1].corners[:, 2].mean()
    expected = np.column_stack([(z * f[j, 0] - n[j, 1]) / f[j, 2], (z * f[j, 1] + n[j, 0]) / f[j, 2]])
    np.testing.assert_allclose(zmp[:, :2], expected, atol=1e-9)
    assert np.all(zmp[:, zch.index("valid")] == 1)
    pos = synthetic_markers(model(), mset(), qm)
    foot = np.concatenate([np.stack([pos[m] for m in mset().segments["foot_r"]], axis=1)[i, :, :2],
                           pinocchio_contacts(model(), qm[i], "foot_r", SOLE_WIDTH_M)[..., :2]], axis=1)
    margin = zmp[:, zch.index("margin")]
    inside = 0
    for k in range(len(t)):
        hull = ConvexHull(foot[k])
        assert zmp[k, zch.index("support")] == len(hull.vertices)
        s = hull.equations[:, :2] @ expected[k] + hull.equations[:, 2]      # < 0 inside
        if s.max() < 0:
            inside += 1
            assert margin[k] == pytest.approx(-s.max(), abs=1e-9)
        else:
            assert margin[k] < 0 and -margin[k] >= s.max() - 1e-9
    assert inside > 0
    np.testing.assert_allclose(con[:, [cch.index(f"foot_r:{c}") for c in ("Fx", "Fy", "Fz")]], f[j], rtol=1e-12)
    np.testing.assert_allclose(con[:, [cch.index(f"foot_r:{c}") for c in ("Mx", "My", "Mz")]], n[j], rtol=1e-9,
                               atol=1e-9)
    assert np.all(con[:, cch.index("foot_r:known")] == 1)


def test_a_lost_marker_frame_leaves_its_neighbours_nan_and_the_rest_exact():
    """Marker frame 100 (samples 200, 201) lost: the 2 samples each side of the gap have no rates (NaN
    torques, as a NaN row offline), the output stamps jump over the gap, every other sample is as
    without the loss."""
    whole = serve(frames_of()).series(TORQUES)
    t, tq, ch = serve(frames_of(drop_marker_frame=100)).series(TORQUES)
    i = at_markers(t)
    assert not np.isin([200, 201], i).any()
    cut = np.isin(i, [198, 199, 202, 203])
    assert cut.sum() == 4 and np.isnan(tq[cut][:, columns(ch, "tau:")]).all()
    ref = dict(zip(at_markers(whole[0]), whole[1]))
    np.testing.assert_allclose(tq[~cut], np.array([ref[k] for k in i[~cut]]), rtol=1e-12, atol=1e-9)


def test_samples_wait_for_the_plates_and_a_silent_plate_is_held():
    """Markers fed long before the plates: nothing is computed until the plates cover the samples, then
    the same numbers. A plate that stops: once the samples waited --max-wait-s (host clock) they are
    computed with it held at its last value, flagged stale and counted."""
    frames = frames_of()
    markers = [fr for fr in frames if fr.stream == "markers/sim"]
    plates = [fr for fr in frames if fr.stream != "markers/sim"]
    bus = Bus()
    svc = TreeService(model(), mset(), FEET, record()[-1], "markers/sim", SETTINGS, bus.publish, clock=lambda: 0)
    svc.feed(markers)
    assert TORQUES not in bus.frames
    svc.feed(plates)
    np.testing.assert_allclose(bus.series(TORQUES)[1], serve(frames).series(TORQUES)[1], rtol=1e-12, atol=1e-9)
    now = [0]
    counts: dict[str, int] = {}
    bus = Bus()
    svc = TreeService(model(), mset(), FEET, record()[-1], "markers/sim", TreeSettings(max_wait_s=0.5, height_tol_m=2.0, filter_hz=0.0),
                      bus.publish, count=lambda s, k=1: counts.__setitem__(s, counts.get(s, 0) + k),
                      clock=lambda: now[0])
    stop = T0 + 500_000_000          # FP2 stops after 0.5 s
    for fr in frames:
        if not (fr.stream == "dynamics/grf/FP2" and fr.t >= stop):
            now[0] = fr.t_host
            svc.feed([fr])
    now[0] += 600_000_000
    svc.feed([])
    t, tq, ch = bus.series(TORQUES)
    t, tq = t[2:], tq[2:]
    late = t > stop - 1_000_000      # after FP2's last sample
    assert late.any() and np.all(tq[late, ch.index("stale")] == 1) and np.all(tq[~late, ch.index("stale")] == 0)
    assert counts["dynamics/grf/FP2:held_samples"] == late.sum()
    i = at_markers(t)
    # FP2 read nothing before it stopped: held at nothing, the torques are still the truth
    np.testing.assert_allclose(tq[:, columns(ch, "tau:")], record()[4][i, 6:], atol=2e-3 * np.abs(record()[4]).max())


def test_a_slow_plate_stream_is_waited_for_as_long_as_its_measured_lateness():
    """Plate frames received 0.3 s after their last sample, markers at once, --max-wait-s 0.1: once the
    plates have been seen, every sample waits for them (their measured lateness, then 0.1 s) — none is
    stale, each equals the truth, and each frame's meta.wait_s is that 0.3 s. (Waiting --max-wait-s from
    the marker receipt would compute them all with the plates held.)"""
    delay = {"markers/sim": 0, "dynamics/grf/FP1": 300_000_000, "dynamics/grf/FP2": 300_000_000}
    frames = frames_of()
    arrivals = sorted((fr.t + round((fr.samples - 1) * 1e9 / fr.rate_hz) + delay[fr.stream], k, fr)
                      for k, fr in enumerate(frames))
    now = [0]
    bus = Bus()
    svc = TreeService(model(), mset(), FEET, record()[-1], "markers/sim", TreeSettings(max_wait_s=0.1, height_tol_m=2.0, filter_hz=0.0),
                      bus.publish, clock=lambda: now[0])
    for r, _, fr in arrivals:
        fr.t_recv = now[0] = r
        svc.feed([fr])
    t, tq, ch = bus.series(TORQUES)
    after = t > T0 + 500_000_000
    assert after.sum() > 150 and np.all(tq[after, ch.index("stale")] == 0)
    tau = record()[4]
    np.testing.assert_allclose(tq[after][:, columns(ch, "tau:")], tau[at_markers(t[after]), 6:],
                               atol=5e-4 * np.abs(tau).max())
    # meta.wait_s: the receipt of the plate frame covering a frame's last sample minus that sample's own
    # (its marker frame's) receipt: the plates' 0.3 s, within a plate and a marker frame's span
    wait = [kw["meta"]["wait_s"] for _, kw in bus.frames[TORQUES] if kw["t"] > T0 + 500_000_000]
    assert len(wait) > 50 and all(0.29 <= w <= 0.31 for w in wait)


def test_bad_frames_are_counted_and_change_nothing():
    """A marker frame with none of the set's markers, a plate frame without `valid`, one without samples,
    a repeated marker frame and a plate frame stamped 60 s ahead of its receipt: each counted under its
    stream, skipped, and every sample the good frames determine is as without them."""
    frames = frames_of()
    good = serve(frames).series(TORQUES)
    junk = [Frame("markers/sim", "markers", 0, T0, T0, T0, FS, ("nose:x", "nose:y", "nose:z"), ("m",) * 3,
                  np.zeros((2, 3))),
            Frame("dynamics/grf/FP1", "grf", 0, T0, T0, T0, FS_PLATE, ("Fx", "Fy", "Fz", "Mx", "My", "Mz"),
                  ("1",) * 6, np.zeros((5, 6))),
            Frame("dynamics/grf/FP2", "grf", 0, T0, T0, T0, FS_PLATE, PLATE, ("1",) * 7, np.zeros((0, 7)))]
    mixed, repeated = [], False
    for k, fr in enumerate(frames):
        mixed.append(fr)
        if k == 40:
            mixed += junk
        if k >= 80 and fr.stream == "markers/sim" and not repeated:
            mixed.append(fr)
            repeated = True
    ahead = next(fr for fr in frames[200:] if fr.stream == "dynamics/grf/FP2")
    mixed.insert(150, Frame(ahead.stream, ahead.kind, 99, ahead.t + 60 * 10 ** 9, ahead.t_host, ahead.t + 60 * 10 ** 9,
                            FS_PLATE, ahead.channels, ahead.units, ahead.data))
    bus, counts = counting_serve(mixed)
    t, tq, _ = bus.series(TORQUES)
    assert np.array_equal(t, good[0])
    np.testing.assert_allclose(tq, good[1], rtol=1e-12, atol=1e-9)
    assert counts["markers/sim:rejected"] == 1 and counts["dynamics/grf/FP1:rejected"] == 1
    assert counts["dynamics/grf/FP2:rejected"] == 1 and counts["markers/sim:repeated"] == 1
    assert counts["dynamics/grf/FP2:clock_faults"] == 1


def test_bad_settings_are_one_line_errors():
    from dynamics.service_tree import tree_model

    plates = record()[-1]
    with pytest.raises(ValueError, match="feet \\['nose'\\]: need foot segments of the marker set"):
        TreeService(model(), mset(), ("nose",), plates, "markers/sim", SETTINGS, Bus().publish)
    with pytest.raises(ValueError, match="needs its force plates"):
        TreeService(model(), mset(), FEET, [], "markers/sim", SETTINGS, Bus().publish)
    with pytest.raises(ValueError, match="--mass and --height: give both"):
        tree_model("human15", 70.0, None, "male")
    with pytest.raises(ValueError, match="is not a tree model"):
        tree_model("jansen_walker", None, None, "male")
    with pytest.raises(ValueError, match="--max-wait-s > 0"):
        TreeSettings(max_wait_s=0.0)
    scaled = tree_model("human15", 60.0, 1.60, "female")
    assert scaled.total_mass == pytest.approx(60.0) and scaled.nv == model().nv


def test_occluded_markers_give_the_offline_pipelines_nan_and_numbers():
    """The left forearm's 4 markers hidden for 40 samples (its elbow and wrist angles unknown there, the
    joints above them NaN) and LASI for 20 (the pelvis fitted from the other 4, another visibility
    pattern): every published number, NaN included, is the offline pipeline's on the same markers."""
    occlude = {m: slice(100, 140) for m in ("LELB", "LFRM", "LWRA", "LWRB")} | {"LASI": slice(200, 220)}
    _, qm, *_ = record()
    pos = synthetic_markers(model(), mset(), qm)
    for label, where in occlude.items():
        pos[label][where] = np.nan
    v, kin = offline(pos)
    t, tq, ch = serve(frames_of(occlude=occlude)).series(TORQUES)
    t, tq = t[2:], tq[2:]
    i = at_markers(t)
    tau = tq[:, columns(ch, "tau:")]
    elbow = ch.index("tau:elbow_l")
    assert np.isnan(tau[(i >= 100) & (i < 140), elbow]).all() and np.isfinite(tau[(i >= 200) & (i < 220)]).all()
    np.testing.assert_allclose(tau, kin.tau_bottom_up[i, 6:], rtol=1e-9, atol=1e-7, equal_nan=True)
    np.testing.assert_allclose(tq[:, columns(ch, "power:")], (kin.tau_bottom_up * v)[i, 6:], rtol=1e-9, atol=1e-6,
                               equal_nan=True)


def test_a_plate_streams_first_frame_stamped_60_s_ahead_is_a_clock_fault_not_an_anchor():
    """FP2's FIRST frame stamped 60 s ahead of its receipt (no history of its own yet): judged against
    the other streams' least lead it is a clock fault, and every later FP2 frame is used — it does not
    set the stream's newest sample 60 s ahead and turn them all into repeats (found by review: 300
    repeated, no finite torque). Every sample after that frame's span is the clean run's."""
    frames = frames_of()
    good = serve(frames).series(TORQUES)
    k = next(i for i, fr in enumerate(frames) if fr.stream == "dynamics/grf/FP2")
    first = frames[k]
    assert any(fr.stream == "dynamics/grf/FP1" for fr in frames[:k])     # another stream's lead is known
    bad = list(frames)
    bad[k] = Frame(first.stream, first.kind, first.seq, first.t + 60 * 10 ** 9, first.t_host, first.t + 60 * 10 ** 9,
                   FS_PLATE, first.channels, first.units, first.data)
    bus, counts = counting_serve(bad)
    assert counts.get("dynamics/grf/FP2:clock_faults") == 1 and "dynamics/grf/FP2:repeated" not in counts, counts
    t, tq, _ = bus.series(TORQUES)
    after = t > first.t + 4 * 10 ** 6
    assert np.array_equal(t, good[0]) and after.sum() > 250
    np.testing.assert_allclose(tq[after], good[1][after], rtol=1e-12, atol=1e-9)


def test_a_fast_plate_is_held_keep_s_at_its_own_rate():
    """An 8 kHz plate (its frames' rate) arriving 1 s ahead of the markers (a motion-capture system's
    lag): its buffer holds KEEP_S (4 s) at 8 kHz, so every marker sample finds the plate samples around
    it — sized for the nominal 1 kHz (4000 samples: 0.5 s at 8 kHz) it dropped the oldest the markers
    still needed, and those samples were published NaN. Each 1 kHz
    plate sample is repeated 8 times (the marker times fall on the first of each: interpolation there
    is exact): the same torques as the clean run."""
    frames = frames_of()
    late = []
    for fr in frames:
        if fr.stream.startswith("dynamics/grf/"):
            fr = Frame(fr.stream, fr.kind, fr.seq, fr.t, fr.t_host, fr.t_device, 8 * FS_PLATE, fr.channels, fr.units,
                       np.repeat(fr.data, 8, axis=0)[:-7])      # t, t + 1/8 ms, ..., the last sample's time
        late.append(fr)
    end = lambda f: f.t + round((f.samples - 1) * 1e9 / f.rate_hz)     # noqa: E731 - its last sample's time
    late.sort(key=lambda f: end(f) + (10 ** 9 if f.stream == "markers/sim" else 0))
    good = serve(frames).series(TORQUES)
    t, tq, ch = serve(late).series(TORQUES)
    assert tq[:, ch.index("stale")].sum() == 0 and np.isfinite(tq[2:]).all()
    assert np.array_equal(t, good[0])
    np.testing.assert_allclose(tq, good[1], rtol=1e-9, atol=1e-7)


def test_margin_is_nan_and_zmp_not_valid_where_a_foot_stands_on_no_plate():
    """Both feet watched; the left one stands outside both plates' outlines (its load unknown: it may
    stand on the bare floor, carrying weight the plates do not see). The real ZMP is then unknown: the
    published margin is NaN and valid 0 — never the finite margin of the plates' share alone, which the
    control loop's ZMP guard would trust. The same frames with the right foot alone (its load known) give
    a finite, valid margin at those samples."""
    bus = Bus()
    svc = TreeService(model(), mset(), ("foot_r", "foot_l"), record()[-1], "markers/sim",
                      SETTINGS, bus.publish, clock=lambda: 0)
    frames = frames_of()
    for i in range(0, len(frames), 3):
        svc.feed(frames[i:i + 3])
    _, zmp, zch = bus.series(ZMP)
    _, con, cch = bus.series(CONTACT)
    zmp, con = zmp[2:], con[2:]
    unknown = con[:, cch.index("foot_l:known")] == 0
    assert unknown.sum() > 250
    assert np.isnan(zmp[unknown, zch.index("margin")]).all() and (zmp[unknown, zch.index("valid")] == 0).all()
    _, alone, _ = serve(frames).series(ZMP)
    alone = alone[2:]
    assert np.isfinite(alone[unknown, zch.index("margin")]).all() and (alone[unknown, zch.index("valid")] == 1).all()


def test_plate_sample_times_come_from_the_lab_clock_rate():
    """Plate frames whose nominal rate_hz (500) is not the device's rate on the lab clock
    (meta rate_lab_hz 1000, what the daemon's clock fit measured): the samples are placed at
    `Frame.sample_times` (1 ms apart on the lab clock), so every torque is the clean run's; placed by
    rate_hz they spread 2 ms apart, overlap the next frame and the wrench lands at the wrong times."""
    frames = frames_of()
    off = [Frame(f.stream, f.kind, f.seq, f.t_device, f.t_host, f.t, 500.0, f.channels, f.units, f.data,
                 meta={"rate_lab_hz": FS_PLATE}) if f.stream.startswith("dynamics/grf/") else f for f in frames]
    good = serve(frames).series(TORQUES)
    t, tq, _ = serve(off).series(TORQUES)
    assert np.array_equal(t, good[0])
    np.testing.assert_allclose(tq, good[1], rtol=1e-9, atol=1e-7)


def test_a_marker_frame_first_of_all_stamped_60_s_ahead_is_re_anchored_and_the_good_frames_computed():
    """The first frame of all a marker frame stamped 60 s ahead: nothing to judge it against, it is taken
    and set the marker stream 60 s on — every good marker frame was then a repeat and no torque came
    (found by review). REANCHOR_FRAMES good frames rejected in a row with one lead re-anchor the markers
    (the stream's history forgotten: its rates start again) and every marker sample from the one after
    the look-ahead restart is the clean run's (truth: its stamps and values; `serve` is checked against
    Pinocchio above)."""
    frames = frames_of()
    marks = [fr for fr in frames if fr.stream == "markers/sim"]
    bad = [Frame(marks[0].stream, marks[0].kind, 0, None, marks[0].t_host, marks[0].t + 60 * 10 ** 9, FS,
                 marks[0].channels, marks[0].units, marks[0].data)] + frames
    good = serve(frames).series(TORQUES)
    bus, counts = counting_serve(bad)
    assert counts.get("markers/sim:clock_resets") == 1 and counts.get("markers/sim:repeated") == REANCHOR_FRAMES - 1
    t, tq, _ = bus.series(TORQUES)
    anchor = marks[REANCHOR_FRAMES - 1].t
    # from the re-anchoring frame on: each marker sample the clean run computes (the first LOOKAHEAD with NaN rates)
    assert np.array_equal(t, good[0][good[0] >= anchor]) and t.size > 250
    later = t >= anchor + LOOKAHEAD * 5_000_000
    np.testing.assert_allclose(tq[later], good[1][good[0] >= anchor][later], rtol=1e-12, atol=1e-9)
    assert np.isnan(tq[~later, 0]).all()
    assert [kw["meta"]["stream"] for _, kw in bus.frames["events/clock"]] == ["markers/sim"]


def test_single_support_on_a_plate_has_a_margin_when_the_other_foot_is_in_the_air():
    """The exoskeleton world (`dynamics.plants.exo_world`: which foot stands is its truth) over one plate
    under the whole walk, its swing knee flexed a further 0.8 sin² rad through each single support (the
    nominal's swing foot skims the floor; the bump lifts it up to 12 cm, the ground reaction recomputed by
    the world for that motion). Without gait events the swing foot was a foot of unknown load (on no
    plate) and the margin NaN through single support (found by review); a foot whose every contact point
    and marker is more than --height-tol-m above the plate is in swing, unloaded: wherever the world says
    single support and the swing foot's contact points are high (Pinocchio's forward kinematics of the
    world's q, 1 cm beyond the tolerance), the margin is finite, the ZMP valid and the world's, and the
    swing foot known to carry nothing."""
    import pinocchio as pin

    from daq.formats.gait_cycle import read_cycle
    from daq.devices.markers_sim import load_marker_set
    from dynamics.pinocchio_model import to_pinocchio
    from dynamics.plants.exo_world import exo_world, ground_reaction, marker_positions, motion
    from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal

    joints = BipedJoints(("hip_flexion_l", "hip_flexion_r"), ("knee_l", "knee_r"), ("ankle_l", "ankle_r"),
                         "lumbar_flexion", ("foot_l", "foot_r"))
    exo = load_model("exoskeleton")
    human = load_marker_set("human15")
    world = exo_world(build_nominal(exo, joints, read_cycle(), 0.6, 1.2, samples=200),
                      ("hip_flexion_l", "knee_l", "hip_flexion_r", "knee_r"), human)
    m = world.model
    t = 0.0005 + np.arange(1400) * 1e-3
    q, v, a = motion(world, t, -0.3)
    P = 0.5 * world.period
    ds = P * world.share / 200.0                         # half a double support [s] (the world's split)
    tl = np.mod(t, P)
    x = np.clip((tl - ds) / (P - 2 * ds), 0.0, 1.0)
    w = np.pi / (P - 2 * ds)
    stance_of = (np.mod(t, world.period) >= P).astype(int)    # 0 left, 1 right (the world's)
    single = (tl >= ds) & (tl < P - ds)
    for k, shank in enumerate(("shank_l", "shank_r")):
        bump = single & (stance_of == 1 - k)
        iq, iv = m.idx_q[m.index[shank]], m.idx_v[m.index[shank]]
        q[:, iq] += np.where(bump, 0.8 * np.sin(np.pi * x) ** 2, 0.0)
        v[:, iv] += np.where(bump, 0.8 * w * np.sin(2 * np.pi * x), 0.0)
        a[:, iv] += np.where(bump, 1.6 * w ** 2 * np.cos(2 * np.pi * x), 0.0)
    g = ground_reaction(world, t, q, v, a)
    assert np.array_equal(g.stance, stance_of) and np.array_equal(~g.double, single)
    # one plate under the whole walk: the plate service's wrench about its surface centre
    corners = np.array([[2.0, -0.5, 0.0], [-1.0, -0.5, 0.0], [-1.0, 0.5, 0.0], [2.0, 0.5, 0.0]])
    plate = fp.Plate(type=2, corners=corners, origin=np.array([0.0, 0.0, -0.04]), name="FP1")
    centre = corners.mean(axis=0)
    rows = np.column_stack([g.force, g.moment - np.cross(centre, g.force), np.ones(t.size)])
    pos = marker_positions(world, q)
    chans = tuple(f"{lab}:{ax}" for lab in world.labels for ax in "xyz")
    stamp = lambda i: T0 + round(t[i] * 1e9)          # noqa: E731
    out = []
    for i in range(0, t.size - 9, 10):                # markers at 200 Hz, 2 samples a frame
        out.append((stamp(i + 5), Frame("markers/sim", "markers", i // 10, stamp(i), stamp(i), stamp(i), FS, chans,
                                        ("m",) * len(chans), pos[[i, i + 5]].reshape(2, -1))))
    for i in range(0, t.size - 4, 5):
        out.append((stamp(i + 4), Frame("dynamics/grf/FP1", "grf", i // 5, stamp(i), stamp(i), stamp(i), FS_PLATE,
                                        PLATE, ("1",) * 7, rows[i:i + 5])))
    out.sort(key=lambda o: o[0])
    tol = 0.05
    bus = Bus()
    svc = TreeService(m, human, ("foot_l", "foot_r"), [("FP1", plate)], "markers/sim",
                      TreeSettings(max_wait_s=1.0, height_tol_m=tol, filter_hz=0.0), bus.publish, clock=lambda: 0)
    for i in range(0, len(out), 3):
        svc.feed([f for _, f in out[i:i + 3]])
    tz, zmp, zch = bus.series(ZMP)
    tc, contact, cch = bus.series(CONTACT)
    i = np.round((tz - T0) * 1e-6 - 0.5).astype(int)   # world sample index of each published sample
    # truth: the swing foot's contact points by Pinocchio's forward kinematics of the world's q
    pm = to_pinocchio(m)
    data = pm.createData()
    swing_low = np.empty(i.size)
    for r, k in enumerate(i):
        pin.forwardKinematics(pm, data, q[k])
        foot = ("foot_l", "foot_r")[1 - g.stance[k]]
        seg = m.segment(foot)
        M = data.oMi[pm.getJointId(seg.joint_name or seg.name)]
        swing_low[r] = min((M.act(np.asarray(p, float)))[2] for p in seg.contacts.values())
    air = single[i] & (swing_low > tol + 0.01)
    assert air.sum() > 40, air.sum()
    margin = zmp[:, zch.index("margin")]
    assert np.isfinite(margin[air]).all(), f"{np.isnan(margin[air]).sum()} of {air.sum()} NaN"
    assert (zmp[air, zch.index("valid")] == 1).all()
    np.testing.assert_allclose(zmp[air][:, :2], g.zmp[i[air], :2], atol=1e-6)
    for k, foot in enumerate(("foot_l", "foot_r")):
        swinging = air & (g.stance[i] == 1 - k)
        assert swinging.any()
        assert (contact[swinging, cch.index(f"{foot}:known")] == 1).all()
        assert (contact[swinging, cch.index(f"{foot}:Fz")] == 0).all()
