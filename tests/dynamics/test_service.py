"""`dynamics.service.GrfService` fed frames directly (no sockets; the live process is in
test_service_live.py): outputs against the simulator's analytic loads (`daq.simulated`), zeroing
of a known offset, sample gaps, lagging and late plates, rejected frames."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from controller.config import ForcePlate
from daq.frames import Frame
from daq.simulated import Gait, foot_wrench
from dynamics.service import (EVENTS_STREAM, GRF_STREAM, PLATE_CHANNELS, GrfService, Settings,
                              zero_from_record)
from dynamics import forceplate as fp

GAIT = Gait(body_mass_kg=70.0, stride_s=1.0, stance_fraction=0.62)
T0 = 5_000_000_000_000     # lab time of sample 0 [ns]
RECV_DELAY_NS = 300_000    # host receipt of a block after its last sample (same clock as T0)
YAW = np.deg2rad(20.0)
ROT = np.array([[np.cos(YAW), np.sin(YAW), 0.0], [np.sin(YAW), -np.cos(YAW), 0.0], [0.0, 0.0, -1.0]])
DEVICES = [
    ForcePlate(kind="forceplate", name="FP1", type=2, origin=(0.001, -0.002, -0.04),
               corners=((0.6, 0.4, 0.0), (0.0, 0.4, 0.0), (0.0, 0.8, 0.0), (0.6, 0.8, 0.0))),
    # yawed, raised 5 mm, type 4 with cross-talk: nothing lab-aligned to hide a frame error
    ForcePlate(kind="forceplate", name="FP2", type=4, origin=(0.0, 0.0, 0.035),
               corners=tuple(map(tuple, np.array([0.9, 0.1, 0.005]) + np.array(
                   [[0.3, 0.2, 0], [-0.3, 0.2, 0], [-0.3, -0.2, 0], [0.3, -0.2, 0]]) @ ROT.T)),
               cal_matrix=tuple(map(tuple, np.eye(6) + 0.02 * np.random.default_rng(1).standard_normal((6, 6))))),
]
FOOT = [(0.0, 1.0), (0.5, -1.0)]


def truth(i: int, n: int):
    """Analytic load of plate i over samples 0..n-1: force (n, 3), COP (n, 3) lab, Tz (n,)."""
    t = np.arange(n) / 1000.0
    force, cop, tz = foot_wrench(t, GAIT, *FOOT[i])
    return force, cop + np.mean(DEVICES[i].corners, axis=0), tz


def raw_of(i: int, n: int, offset=None, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """Raw channels (n, 6) of plate i under its analytic load; noise in N (N*m: x 0.05) as the simulator's."""
    d = DEVICES[i]
    t = np.arange(n) / 1000.0
    force, cop, tz = foot_wrench(t, GAIT, *FOOT[i])
    plate = fp.Plate(type=d.type, corners=d.corners, origin=d.origin, cal_matrix=d.cal_matrix)
    raw = plate.raw_channels(force, fp.load_moment(force, cop, tz))
    raw += np.random.default_rng(seed).normal(0.0, 1.0, raw.shape) * noise * np.array([1, 1, 1, 0.05, 0.05, 0.05])
    return raw if offset is None else raw + offset


def frame(i: int, raw: np.ndarray, k0: int, seq: int = 0, **changes) -> Frame:
    d = DEVICES[i]
    f = Frame(stream=d.stream_name, kind="force", seq=seq, t_device=k0 * 1_000_000, t_host=T0 + k0 * 1_000_000 + 7,
              t=T0 + k0 * 1_000_000, rate_hz=1000.0, channels=d.channels,
              units=("N", "N", "N", "N*m", "N*m", "N*m"), data=raw[k0:k0 + 5],
              t_recv=T0 + (k0 + 5) * 1_000_000 + RECV_DELAY_NS)
    for k, v in changes.items():
        setattr(f, k, v)
    return f


class Outbox:
    """Collects what the service publishes, and its health counters."""

    def __init__(self):
        self.frames: dict[str, list[dict]] = {}
        self.counts: dict[str, int] = {}

    def publish(self, stream, data, **kw):
        self.frames.setdefault(stream, []).append(dict(data=np.array(data), **kw))

    def count(self, subject, n=1):
        self.counts[subject] = self.counts.get(subject, 0) + n

    def rows(self, stream):
        return np.concatenate([f["data"] for f in self.frames[stream]])

    def times(self, stream, key="t"):
        return np.concatenate([f[key] + np.arange(len(f["data"])) * 1_000_000 for f in self.frames[stream]])


def serve(blocks, settings=Settings(zero_s=0.0), devices=DEVICES, batch: int = 1):
    """Feed `blocks` in batches of `batch` frames (what the process finds waiting on its socket)."""
    box = Outbox()
    svc = GrfService(devices, settings, box.publish, box.count)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(0, len(blocks), batch):
            svc.feed(blocks[i:i + batch])
    return box, svc


def lockstep(raws, n_blocks, skip=()):
    return [frame(i, raws[i], 5 * b, seq=b) for b in range(n_blocks) for i in range(len(raws))
            if (i, b) not in skip]


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_noise_free_stream_equals_the_analytic_load_per_plate_and_combined(batch):
    """Whatever the batching: every sample, its stamps, and the analytic load to 1e-9."""
    n = 2000
    raws = [raw_of(0, n), raw_of(1, n)]
    box, _ = serve(lockstep(raws, n // 5), batch=batch)
    if batch == 1:
        assert len(box.frames[f"{GRF_STREAM}/FP1"]) == n // 5    # one output frame per input frame
    f_tot = np.zeros((n, 3))
    n_tot = np.zeros((n, 3))
    for i, d in enumerate(DEVICES):
        rows = box.rows(f"{GRF_STREAM}/{d.name}")
        force, cop, tz = truth(i, n)
        np.testing.assert_allclose(rows[:, 0:3], force, atol=1e-9)
        valid = force[:, 2] > 20.0
        np.testing.assert_array_equal(rows[:, 10] == 1, valid)
        np.testing.assert_allclose(rows[valid, 6:9], cop[valid], atol=1e-9)
        np.testing.assert_allclose(rows[valid, 9], tz[valid], atol=1e-9)
        assert np.isnan(rows[~valid, 6:10]).all()
        assert (rows[:, 11] == 0).all()  # no amplifier range configured: never saturated
        np.testing.assert_array_equal(box.times(f"{GRF_STREAM}/{d.name}", "t_host"), T0 + 7 + np.arange(n) * 1_000_000)
        f_tot += force
        n_tot += np.cross(cop, force) + tz[:, None] * [0, 0, 1]
    total = box.rows(GRF_STREAM)
    np.testing.assert_array_equal(box.times(GRF_STREAM), T0 + np.arange(n) * 1_000_000)
    np.testing.assert_array_equal(box.times(GRF_STREAM, "t_device"), np.arange(n) * 1_000_000)
    np.testing.assert_allclose(total[:, 0:3], f_tot, atol=1e-9)
    # methods d.2 on the plane of the plate centres (z = 2.5 mm)
    pz = 0.0025
    cop = np.column_stack([(pz * f_tot[:, 0] - n_tot[:, 1]) / f_tot[:, 2], (pz * f_tot[:, 1] + n_tot[:, 0]) / f_tot[:, 2]])
    np.testing.assert_allclose(total[:, 6:8], cop, atol=1e-9)
    assert (total[:, 9] == 1).all() and (total[:, 8] == pz).all()


def test_saturation_from_the_configured_amplifier_range_is_flagged_per_sample_and_counted():
    """Plates declaring force_range_n = 600, moment_range_nm = 25: a sample is saturated where a
    raw force channel reaches ±600 N or a raw moment channel ±25 N·m (the raw channels as the
    amplifier sends them, type 4 before its calibration)."""
    n = 2000
    raws = [raw_of(0, n), raw_of(1, n)]
    ranged = [dataclasses.replace(d, force_range_n=600.0, moment_range_nm=25.0) for d in DEVICES]
    box, _ = serve(lockstep(raws, n // 5), devices=ranged)
    for i, d in enumerate(DEVICES):
        expected = (np.abs(raws[i][:, :3]) >= 600.0).any(axis=1) | (np.abs(raws[i][:, 3:]) >= 25.0).any(axis=1)
        assert 0 < expected.sum() < n  # the gait peaks cross the range, the swing does not
        rows = box.rows(f"{GRF_STREAM}/{d.name}")
        np.testing.assert_array_equal(rows[:, 11] == 1, expected)
        assert box.counts[f"{d.name}:saturated_samples"] == expected.sum()
        force, _, _ = truth(i, n)
        np.testing.assert_allclose(rows[:, 0:3], force, atol=1e-9)  # flagged, not altered


def test_blocks_that_straddle_the_end_of_the_ring_are_combined_whole():
    """7-sample blocks against a 2400-slot ring (not a multiple of 7): blocks and emitted chunks
    wrap around its end; every total sample still equals the analytic sum."""
    n = 7 * 1000
    raws = [raw_of(0, n), raw_of(1, n)]
    blocks = [frame(i, raws[i], 7 * b, seq=b, data=raws[i][7 * b:7 * b + 7]) for b in range(n // 7) for i in range(2)]
    box, svc = serve(blocks, batch=3)
    assert svc.capacity % 7 != 0 and n > 2 * svc.capacity
    force, n_sum = np.zeros((n, 3)), np.zeros((n, 3))
    for i in range(2):
        f, c, tz = truth(i, n)
        force += f
        n_sum += np.cross(c, f) + tz[:, None] * [0, 0, 1]
    total = box.rows(GRF_STREAM)
    np.testing.assert_array_equal(box.times(GRF_STREAM), T0 + np.arange(n) * 1_000_000)
    np.testing.assert_allclose(total[:, 0:3], force, atol=1e-9)
    np.testing.assert_allclose(total[:, 3:6], n_sum, atol=1e-9)


@pytest.mark.parametrize("batch", [1, 13])
def test_contact_events_at_the_analytic_stance_boundaries_and_streaming_equals_batch(batch):
    n = 3000
    raws = [raw_of(0, n, noise=1.0, seed=1), raw_of(1, n, noise=1.0, seed=2)]
    box, _ = serve(lockstep(raws, n // 5), batch=batch)
    events = box.frames[EVENTS_STREAM]
    for i, d in enumerate(DEVICES):
        mine = [e for e in events if e["meta"]["plate"] == d.name]
        # the same signal in one piece, with the state found at its first sample
        fz = box.rows(f"{GRF_STREAM}/{d.name}")[:, 2]
        c = fp.contact_events(fz, on=50.0, off=20.0, initial=bool(fz[0] > 35.0))
        assert [e["t_device"] // 1_000_000 for e in mine if e["meta"]["event"] == "touchdown"] == c.touchdown.tolist()
        assert [e["t_device"] // 1_000_000 for e in mine if e["meta"]["event"] == "liftoff"] == c.liftoff.tolist()
        phase = FOOT[i][0]
        for e in mine:
            t = e["t_device"] * 1e-9
            if e["meta"]["event"] == "touchdown":
                lag = (t + phase) % 1.0          # since the analytic start of stance
                assert 0.0 <= lag <= 0.015
            else:
                lead = (0.62 - phase - t) % 1.0  # before its end
                assert 0.0 <= lead <= 0.010
        assert len(mine) >= 5


def test_zeroing_removes_an_amplifier_offset_from_a_walking_record():
    n = 3000
    offset = np.array([12.0, -7.0, -80.0, 3.0, -2.5, 0.7])
    raws = [raw_of(0, n, offset, noise=1.0, seed=3), raw_of(1, n, noise=1.0, seed=4)]
    box, svc = serve(lockstep(raws, n // 5), Settings(zero_s=1.2))
    z = svc.plates[0].zero
    assert z.status == "zeroed"
    assert (np.abs(z.offset - offset) < [0.5, 0.5, 0.5, 0.05, 0.05, 0.05]).all(), z.offset
    assert box.counts["zero/FP1/zeroed"] == box.counts["zero/FP2/zeroed"] == 1
    # every sample is published, the held ones included, with the offset applied
    rows = box.rows(f"{GRF_STREAM}/FP1")
    force, cop, _ = truth(0, n)
    assert len(rows) == n
    np.testing.assert_allclose(rows[:, 0:3], force, atol=6.0)
    loaded = force[:, 2] > 200.0
    np.testing.assert_allclose(rows[loaded, 6:9], cop[loaded], atol=3e-3)
    assert {f["meta"]["zero"] for f in box.frames[f"{GRF_STREAM}/FP1"]} == {"zeroed"}
    (report,) = box.frames["dynamics/zero/FP1"]
    np.testing.assert_array_equal(report["data"], z.offset[None])
    assert report["meta"]["status"] == "zeroed" and report["t"] == T0
    assert len(box.rows(GRF_STREAM)) == n


def test_zeroing_does_not_depend_on_how_many_frames_arrive_together():
    """The zeroing record is exactly the first zero_s of samples, however many frames one feed brings
    (a replay as fast as possible arrives in larger batches than the live run did)."""
    n = 3000
    raws = [raw_of(0, n, noise=1.0, seed=5), raw_of(1, n, noise=1.0, seed=6)]
    (one, s1), (many, s2) = (serve(lockstep(raws, n // 5), Settings(zero_s=1.2), batch=b) for b in (1, 301))
    for a, b in zip(s1.plates, s2.plates):
        assert (a.zero.status, a.zero.base_n, a.zero.peak_n) == (b.zero.status, b.zero.base_n, b.zero.peak_n)
        np.testing.assert_array_equal(a.zero.offset, b.zero.offset)
    np.testing.assert_array_equal(one.rows(GRF_STREAM), many.rows(GRF_STREAM))


def test_zeroing_reports_a_plate_that_never_loads_or_stays_loaded():
    plate = fp.Plate(type=2, corners=np.array(DEVICES[0].corners), origin=np.array(DEVICES[0].origin))
    rng = np.random.default_rng(5)
    quiet = rng.normal(0.0, 1.0, (1000, 6)) + [1.0, 0.0, 8.0, 0.0, 0.0, 0.0]   # z-down plate: raw Fz < 0 loads
    z = zero_from_record(plate, quiet, 100, contrast_n=50.0, unloaded_n=20.0)
    assert z.status == "unloaded" and abs(z.offset[2] - 8.0) < 0.5
    # someone standing still on it (lab F_z 700 N with 10 N of sway): no unloaded window
    standing = quiet + [0.0, 0.0, -700.0, 0.0, 0.0, 0.0] + np.sin(np.arange(1000) / 100)[:, None] * [0, 0, 10, 0, 0, 0]
    z = zero_from_record(plate, standing, 100, contrast_n=50.0, unloaded_n=20.0)
    assert z.status == "loaded" and z.offset is None and z.base_n > 600
    # the service then uses the amplifier's zero: the load is reported, not absorbed
    d = ForcePlate(kind="forceplate", name="FP1", type=2, corners=DEVICES[0].corners, origin=DEVICES[0].origin)
    box, svc = serve([frame(0, standing, 5 * b, seq=b) for b in range(200)], Settings(zero_s=0.5), [d])
    assert svc.plates[0].zero.status == "loaded" and box.counts["zero/FP1/loaded"] == 1
    assert np.isnan(box.frames["dynamics/zero/FP1"][0]["data"]).all()
    assert abs(np.median(box.rows(f"{GRF_STREAM}/FP1")[:, 2]) - 700.0) < 20.0
    # NaN rows are left out of the record; too few finite rows: not zeroed
    z = zero_from_record(plate, np.full((1000, 6), np.nan), 100, 50.0, 20.0)
    assert z.status == "unusable" and z.offset is None


def test_a_gap_is_nan_in_the_total_absent_per_plate_and_holds_the_contact_state():
    n = 1500
    raws = [raw_of(0, n), raw_of(1, n)]
    # FP1 loses blocks 150..153: 20 samples in the stance of foot 1 (t = 0.75 s)
    box, _ = serve(lockstep(raws, n // 5, skip={(0, b) for b in range(150, 154)}), batch=9)
    assert box.counts["FP1:missing_samples"] == 20
    t1 = box.times(f"{GRF_STREAM}/FP1") - T0
    assert len(t1) == n - 20 and not np.isin(np.arange(750, 770) * 1_000_000, t1).any()
    total = box.rows(GRF_STREAM)
    assert len(total) == n
    gap = np.zeros(n, bool)
    gap[750:770] = True
    assert np.isnan(total[gap, :9]).all() and (total[gap, 9] == 0).all()
    assert np.isfinite(total[~gap, :6]).all()
    # FP1 was loaded before and after the gap: no lift-off/touch-down invented there
    assert not [e for e in box.frames[EVENTS_STREAM] if 0.7 < e["t_device"] * 1e-9 < 0.8]


def test_a_plate_that_never_publishes_does_not_block_the_others():
    n = 1000
    box, svc = serve([frame(1, raw_of(1, n), 5 * b, seq=b) for b in range(n // 5)],
                     Settings(zero_s=0.0, max_lag_s=0.05))
    assert len(box.rows(f"{GRF_STREAM}/FP2")) == n
    total = box.rows(GRF_STREAM)
    assert len(total) >= n - 50 - 5 and np.isnan(total[:, :9]).all() and (total[:, 9] == 0).all()


def test_a_late_plate_joins_the_total_where_its_samples_start():
    n = 1000
    raws = [raw_of(0, n), raw_of(1, n)]
    blocks = [f for f in lockstep(raws, n // 5) if not (f.stream == "forceplate/FP1" and f.t - T0 < 300_000_000)]
    box, _ = serve(blocks, Settings(zero_s=0.0, max_lag_s=0.05))
    total = box.rows(GRF_STREAM)
    t = box.times(GRF_STREAM) - T0
    np.testing.assert_array_equal(t, np.arange(len(t)) * 1_000_000)
    assert np.isnan(total[t < 300_000_000, 2]).all()
    force = truth(0, n)[0] + truth(1, n)[0]
    late = t >= 300_000_000
    np.testing.assert_allclose(total[late, 0:3], force[t[late] // 1_000_000], atol=1e-9)


def test_unusable_frames_are_rejected_counted_and_skipped():
    n = 100
    raws = [raw_of(0, n), raw_of(1, n)]
    good = lockstep(raws, n // 5)
    bad = [
        frame(0, raws[0], 0, units=("N", "N", "N", "N*mm", "N*mm", "N*mm")),
        frame(0, raws[0], 0, rate_hz=500.0),
        frame(0, raws[0], 0, kind="markers"),
        frame(0, raws[0], 0, data=np.zeros((0, 6))),
    ]
    repeat = frame(0, raws[0], 5, seq=99)      # the second block again: an overlap
    box, _ = serve(good[:4] + bad + [repeat] + good[4:], batch=3)
    assert box.counts["FP1:rejected"] == 5
    assert len(box.rows(f"{GRF_STREAM}/FP1")) == n
    np.testing.assert_allclose(box.rows(f"{GRF_STREAM}/FP1")[:, 0:3], truth(0, n)[0], atol=1e-9)


def test_a_flood_of_rejected_frames_is_counted_whole_and_logged_a_line_a_second_per_plate(caplog):
    """A misconfigured FP1 publisher (mm·N moments) sends 2000 frames, then FP2 one bad frame: every one
    counted, FP1 logged at once and then a line a second at most with the count since the last, and FP2's
    fault logged at once all the same (one plate's flood hides no other). Truths: the frames this test
    made, and the wall time it measured around the feed."""
    import math
    import re
    import time

    n = 100
    raws = [raw_of(0, n), raw_of(1, n)]
    bad = [frame(0, raws[0], 0, seq=k, units=("N", "N", "N", "N*mm", "N*mm", "N*mm")) for k in range(2000)]
    other = frame(1, raws[1], 0, rate_hz=500.0)
    with caplog.at_level("WARNING", "walklab.dynamics"):
        t0 = time.monotonic()
        box, _ = serve(bad + [other] + lockstep(raws, n // 5), batch=64)
        elapsed = time.monotonic() - t0
    assert box.counts["FP1:rejected"] == 2000 and box.counts["FP2:rejected"] == 1
    np.testing.assert_allclose(box.rows(f"{GRF_STREAM}/FP1")[:, 0:3], truth(0, n)[0], atol=1e-9)   # served on
    lines = [r.getMessage() for r in caplog.records if "rejected frame" in r.getMessage()]
    fp1 = [m for m in lines if m.startswith("FP1:")]
    assert fp1[0].startswith("FP1: rejected frame #1 of forceplate/FP1 (seq 0): units ")
    assert len(fp1) <= 1 + math.ceil(elapsed), (len(fp1), elapsed)
    nums = [int(re.search(r"frame #(\d+) ", m).group(1)) for m in fp1]
    counts = [int(c.group(1)) if (c := re.search(r"\((\d+) more like it since the last such line\)$", m)) else 0
              for m in fp1]
    assert counts[0] == 0 and all(c == b - a - 1 for a, b, c in zip(nums, nums[1:], counts[1:]))
    assert [m for m in lines if m.startswith("FP2:")] == [
        "FP2: rejected frame #1 of forceplate/FP2 (seq 0): rate 500.0 Hz, the lab config says 1000.0 Hz"]


def test_non_finite_raw_samples_give_nan_rows_without_warnings():
    n = 50
    raw = raw_of(0, n)
    raw[12, 2] = np.inf
    raw[13, 4] = np.nan
    box, _ = serve([frame(0, raw, 5 * b, seq=b) for b in range(n // 5)], devices=DEVICES[:1])
    rows = box.rows(f"{GRF_STREAM}/FP1")
    assert box.counts["FP1:nonfinite_samples"] == 2
    assert np.isnan(rows[[12, 13], :10]).all() and (rows[[12, 13], 10] == 0).all()
    assert np.isfinite(np.delete(rows, [12, 13], axis=0)[:, :6]).all()
    assert rows.shape == (n, len(PLATE_CHANNELS))


def test_bad_settings_and_plate_sets_are_clear_errors():
    with pytest.raises(ValueError, match="--off-n < --on-n"):
        Settings(on_n=20.0, off_n=30.0)
    with pytest.raises(ValueError, match="--zero-window-s"):
        Settings(zero_s=0.05, zero_window_s=0.1)
    with pytest.raises(ValueError, match="must be finite numbers"):
        Settings(clock_slack_s=float("nan"))
    with pytest.raises(ValueError, match="--clock-slack-s must be > 0"):
        Settings(clock_slack_s=0.0)
    fast = ForcePlate(kind="forceplate", name="FP9", corners=DEVICES[0].corners, rate_hz=2000.0)
    with pytest.raises(ValueError, match="different rate_hz"):
        GrfService([DEVICES[0], fast], Settings(), lambda *a, **k: None)
    with pytest.raises(ValueError, match="no force plate"):
        GrfService([], Settings(), lambda *a, **k: None)


def test_a_long_pause_gives_at_most_max_lag_s_of_nan_total_never_stale_rows():
    """Both plates pause 30 s (more than the combination's ring; the host clock says so too) and
    resume: the total fills the first max_lag_s (100 samples) of the gap with NaN, leaves out the
    rest (its stamps jump over it), then the analytic load again."""
    n = 500
    raws = [raw_of(0, n), raw_of(1, n)]
    blocks = lockstep(raws, 50)
    jump = 30_000
    later = [frame(i, raws[i], 5 * b, seq=b) for b in range(50, n // 5) for i in range(2)]
    for f in later:
        f.t += jump * 1_000_000
        f.t_host += jump * 1_000_000
        f.t_device += jump * 1_000_000
        f.t_recv += jump * 1_000_000
    box, svc = serve(blocks + later, batch=4)
    assert svc.capacity < jump and svc.lag == 100
    total = box.rows(GRF_STREAM)
    t = box.times(GRF_STREAM) - T0
    np.testing.assert_array_equal(t // 1_000_000, np.r_[np.arange(350), 250 + jump + np.arange(250)])
    force = truth(0, n)[0] + truth(1, n)[0]
    np.testing.assert_allclose(total[:250, 0:3], force[:250], atol=1e-9)
    assert np.isnan(total[250:350, :9]).all() and (total[250:350, 9] == 0).all()
    np.testing.assert_allclose(total[350:, 0:3], force[250:], atol=1e-9)
    assert box.counts["FP1:missing_samples"] == box.counts["FP2:missing_samples"] == jump
    assert box.counts["combine:skipped_samples"] == jump - 100
    assert not [k for k in box.counts if "clock" in k] and "events/clock" not in box.frames
