"""Hostile time stamps on the dynamics service's input (issue 8, A1): a block stamped +60 s,
+1e6 s or −10 s off its plate's time base, a short run on a wrong base and back, and a true device
clock reset (the stream goes on, consistently, on a new base).

Truths: the plate's own history (sample count x rate) and the host clock the frames were received
by; the simulator's analytic load (`daq.simulated.foot_wrench`) for every real sample. Required:
bad stamps rejected and counted (``NAME:clock_faults``), one ``events/clock`` frame per episode, a
true reset re-anchors the plate (``NAME:clock_resets``), the output goes on unbroken for the real
samples, and no unbounded work: in process the published rows are capped (a run-away fill fails
the test instead of hanging it); live, the real service process keeps publishing its health frame
and obeys SIGTERM.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from controller.config import ForcePlate
from daq.frames import Frame
from daq.health import parse_health
from daq.simulated import Gait, foot_wrench
from dynamics import forceplate as fp
from dynamics.service import CLOCK_STREAM, GRF_STREAM, RESET_FRAMES, GrfService, Settings

GAIT = Gait(body_mass_kg=70.0, stride_s=1.0, stance_fraction=0.62)
T0 = 7_000_000_000_000          # lab (= host monotonic) time of sample 0 [ns]
MS = 1_000_000
BLOCK = 5
UNITS = ("N", "N", "N", "N*m", "N*m", "N*m")
# FP1 as the live lab's (tests/faults/conftest.py)
CORNERS = {"FP1": ((0.6, 0.4, 0.0), (0.0, 0.4, 0.0), (0.0, 0.8, 0.0), (0.6, 0.8, 0.0)),
           "FP2": ((0.6, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.4, 0.0), (0.6, 0.4, 0.0))}
DEVICES = [ForcePlate(kind="forceplate", name=n, type=2, corners=c, origin=(0.0, 0.0, -0.04))
           for n, c in CORNERS.items()]
FOOT = [(0.0, 1.0), (0.5, -1.0)]
N = 2000                        # samples per plate (2 s)
AT = 100                        # FP1 block after which the fault comes


def raw_of(i: int, n: int) -> np.ndarray:
    d = DEVICES[i]
    force, cop, tz = foot_wrench(np.arange(n) / 1000.0, GAIT, *FOOT[i])
    return fp.Plate(type=2, corners=d.corners, origin=d.origin).raw_channels(force, fp.load_moment(force, cop, tz))


def analytic_total(n: int) -> np.ndarray:
    return sum(foot_wrench(np.arange(n) / 1000.0, GAIT, *FOOT[i])[0] for i in range(2))


def block(i: int, raw: np.ndarray, b: int, jump_ns: int = 0) -> Frame:
    """Block b of plate i: stamps `jump_ns` off (all three clocks, as a device clock jump shows
    through its synchronised lab time), received by the host 0.3 ms after its last sample."""
    k0 = BLOCK * b
    return Frame(stream=DEVICES[i].stream_name, kind="force", seq=b, t_device=k0 * MS + jump_ns,
                 t_host=T0 + k0 * MS + jump_ns, t=T0 + k0 * MS + jump_ns, rate_hz=1000.0,
                 channels=DEVICES[i].channels, units=UNITS, data=raw[k0:k0 + BLOCK],
                 t_recv=T0 + (k0 + BLOCK) * MS + 300_000)


class Outbox:
    """What the service publishes; refuses more than `cap` rows on a stream (bounded work)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.frames: dict[str, list[dict]] = {}
        self.counts: dict[str, int] = {}

    def publish(self, stream, data, **kw):
        fs = self.frames.setdefault(stream, [])
        fs.append(dict(data=np.array(data), **kw))
        rows = sum(len(f["data"]) for f in fs)
        assert rows <= self.cap, f"{stream}: {rows} rows published for {N} input samples per plate"

    def count(self, subject, n=1):
        self.counts[subject] = self.counts.get(subject, 0) + n

    def rows(self, stream):
        return np.concatenate([f["data"] for f in self.frames[stream]])

    def times(self, stream, key="t"):
        return np.concatenate([f[key] + np.arange(len(f["data"])) * MS for f in self.frames[stream]])


def serve(frames) -> Outbox:
    box = Outbox(cap=2 * N)
    svc = GrfService(DEVICES, Settings(zero_s=0.0), box.publish, box.count)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for f in frames:
            svc.feed([f])
    return box


def lockstep(raws, fp1_jump=lambda b: 0):
    return [block(i, raws[i], b, fp1_jump(b) if i == 0 else 0) for b in range(N // BLOCK) for i in range(2)]


def assert_served_whole(box: Outbox, fp1_stamps: np.ndarray) -> None:
    """Every real FP1 sample once with its own stamps, the analytic load, and an unbroken,
    finite total of exactly the N real slots."""
    force1 = foot_wrench(np.arange(N) / 1000.0, GAIT, *FOOT[0])[0]
    np.testing.assert_array_equal(box.times(f"{GRF_STREAM}/FP1"), fp1_stamps)
    np.testing.assert_allclose(box.rows(f"{GRF_STREAM}/FP1")[:, 0:3], force1, atol=1e-9)
    np.testing.assert_array_equal(box.times(GRF_STREAM), T0 + np.arange(N) * MS)
    np.testing.assert_allclose(box.rows(GRF_STREAM)[:, 0:3], analytic_total(N), atol=1e-9)
    assert "FP1:missing_samples" not in box.counts and "FP1:rejected" not in box.counts
    assert "combine:skipped_samples" not in box.counts


@pytest.mark.parametrize("jump_s", [60.0, 1e6, -10.0])
def test_one_block_stamped_off_is_a_clock_fault_and_the_real_samples_go_on(jump_s):
    raws = [raw_of(0, N), raw_of(1, N)]
    frames = lockstep(raws)
    bad = block(0, raws[0], AT + 1, round(jump_s * 1e9))       # a copy of the next block, stamped off
    frames.insert(2 * (AT + 1), bad)
    box = serve(frames)
    assert_served_whole(box, T0 + np.arange(N) * MS)
    assert box.counts["FP1:clock_faults"] == 1 and "FP1:clock_resets" not in box.counts
    (event,) = box.frames[CLOCK_STREAM]
    assert event["meta"]["event"] == "clock_fault" and event["meta"]["plate"] == "FP1"
    assert event["meta"]["jump_s"] == pytest.approx(jump_s, abs=1e-9)   # from the plate's next sample
    assert event["t"] == bad.t_recv and event["kind"] == "event"


def test_a_short_run_on_a_wrong_base_then_back_is_one_episode_of_clock_faults():
    """RESET_FRAMES − 1 consecutive blocks 60 s ahead (consistent among themselves), then the
    plate's own base again: not a reset; each counted, one event."""
    raws = [raw_of(0, N), raw_of(1, N)]
    frames = lockstep(raws)
    run = [block(0, raws[0], AT + 1 + j, 60_000_000_000) for j in range(RESET_FRAMES - 1)]
    frames[2 * (AT + 1):2 * (AT + 1)] = run
    box = serve(frames)
    assert_served_whole(box, T0 + np.arange(N) * MS)
    assert box.counts["FP1:clock_faults"] == RESET_FRAMES - 1 and "FP1:clock_resets" not in box.counts
    assert [e["meta"]["event"] for e in box.frames[CLOCK_STREAM]] == ["clock_fault"]


@pytest.mark.parametrize("jump_s", [-10.0, 60.0])
def test_a_true_device_clock_reset_re_anchors_the_plate_and_loses_no_sample(jump_s):
    """From block AT + 1 on FP1's clocks run `jump_s` off (a device reset / resync) while the host
    clock goes on: after RESET_FRAMES consistent blocks the plate is re-anchored, the held blocks
    included; its own output keeps its input stamps, the total stays on the grid."""
    raws = [raw_of(0, N), raw_of(1, N)]
    jump = round(jump_s * 1e9)
    box = serve(lockstep(raws, lambda b: jump if b > AT else 0))
    k = np.arange(N)
    assert_served_whole(box, T0 + k * MS + np.where(k >= BLOCK * (AT + 1), jump, 0))
    assert box.counts["FP1:clock_resets"] == 1 and "FP1:clock_faults" not in box.counts
    events = box.frames[CLOCK_STREAM]
    assert [e["meta"]["event"] for e in events] == ["clock_fault", "clock_reset"]
    assert events[1]["meta"]["jump_s"] == pytest.approx(jump_s, abs=0.001)


def test_a_plate_whose_first_block_is_stamped_far_ahead_does_not_drag_the_total():
    """FP2's first block comes 1e6 s ahead of the lab clock FP1 set: rejected, FP2 joins on its
    real blocks, the total is never filled out to the bad stamp."""
    raws = [raw_of(0, N), raw_of(1, N)]
    frames = lockstep(raws)
    frames.insert(2 * AT + 1, block(1, raws[1], AT, 1_000_000_000_000_000))
    box = serve(frames)
    assert box.counts["FP2:clock_faults"] == 1
    np.testing.assert_array_equal(box.times(GRF_STREAM), T0 + np.arange(N) * MS)
    np.testing.assert_allclose(box.rows(GRF_STREAM)[:, 0:3], analytic_total(N), atol=1e-9)


# ------------------------------------------------------------------ the real service process ----

LIVE_BLOCKS = 800               # 4 s of FP1 at real time
FAULTS = {200: 1e6, 440: 60.0, 680: -10.0}   # block index -> stamp jump [s] of an extra block


def test_live_service_rejects_hostile_stamps_keeps_its_health_and_obeys_sigterm(tmp_path, service_lab):
    raw = raw_of(0, BLOCK * LIVE_BLOCKS)
    sent: list[int] = []
    # zeroing from a record that holds a swing; the first fault comes while it is held
    with service_lab(tmp_path, ["--zero-s", "1.2", "--max-lag-s", "0.1"]) as lab:
        for b in range(LIVE_BLOCKS):
            lab.pump_until(lab.t0 + (b + 1) * BLOCK * MS)
            k0 = BLOCK * b
            lab.send(raw[k0:k0 + BLOCK], k0)
            sent.append(lab.stamps(k0)["t"])
            if b in FAULTS:   # the next block's samples, stamped off
                lab.send(raw[k0 + BLOCK:k0 + 2 * BLOCK], k0 + BLOCK, round(FAULTS[b] * 1e9))
        # the health frame reports every fault while the service runs on
        counted = lab.wait_for(lambda f: f.stream == "health/dynamics" and parse_health(f).get(
            "FP1:clock_faults", {}).get("count", 0) == len(FAULTS), timeout_s=20.0)
        assert counted, f"health/dynamics never counted the faults:\n{lab.log}"
        status = lab.stop()
        log, got = lab.log, lab.got
    assert status == 0, log
    assert "Warning" not in log and "Traceback" not in log, log
    events = got[CLOCK_STREAM]
    assert [e.meta["event"] for e in events] == ["clock_fault"] * len(FAULTS)
    assert [e.meta["jump_s"] for e in events] == pytest.approx(list(FAULTS.values()), abs=1e-9)
    # every real sample served once with its own stamps, after zeroing as before the faults
    out = np.concatenate([f.sample_times() for f in got[f"{GRF_STREAM}/FP1"]])
    real = (np.array(sent)[:, None] + np.arange(BLOCK) * MS).ravel()
    np.testing.assert_array_equal(out, real[:len(out)])
    assert len(out) > BLOCK * (max(FAULTS) + 1)
    force = foot_wrench(np.arange(len(out)) / 1000.0, GAIT, *FOOT[0])[0]
    np.testing.assert_allclose(np.concatenate([f.data for f in got[f"{GRF_STREAM}/FP1"]])[:, 0:3], force, atol=1e-6)
    total = got[GRF_STREAM]
    t_total = np.concatenate([f.sample_times() for f in total])
    np.testing.assert_array_equal(t_total, real[:len(t_total)])
    assert np.isfinite(np.concatenate([f.data for f in total])[:, 0:6]).all()
