"""Bad input on the walker dynamics service (`dynamics.service_torques`): unusable frames, a device clock
jump on an encoder, an input that stops — each counted, nothing raised, and every sample the good
frames determine is the number the clean run gives (`tests/dynamics/test_service_torques.py` checks those
against the reduced tables and the world). In process; the process on real sockets is
`tests/dynamics/test_service_torques_live.py`."""
from __future__ import annotations

import dataclasses

import numpy as np

from dynamics.service_torques import REANCHOR_FRAMES, TORQUES, Settings, WalkerService

from ..dynamics.test_service_torques import ENCODERS, PLATES, Bus, frames_of, serve, walk, world


def counting_serve(frames, clock=None):
    """Feed `frames` 7 at a time; the host clock is `clock`, or else the host stamp of the newest sample fed
    (a service that keeps up)."""
    bus, counts = Bus(), {}
    now = [0]
    clock = clock or (lambda: now[0])

    def count(subject, n=1):
        counts[subject] = counts.get(subject, 0) + n

    svc = WalkerService(world(), PLATES, ENCODERS, "markers/walker", Settings(), bus.publish, count, clock=clock)
    for i in range(0, len(frames), 7):
        now[0] = max([now[0]] + [f.t_host + round((f.samples - 1) * 1e9 / f.rate_hz) for f in frames[i:i + 7]
                                 if f.rate_hz > 0 and f.samples])
        svc.feed(frames[i:i + 7])
    return bus, counts


def test_unusable_frames_and_a_clock_jump_are_counted_and_change_nothing():
    clean = frames_of(walk())
    bad = []
    for k, f in enumerate(clean):
        if k % 19 == 3 and f.stream == "markers/walker":      # before the real frame of that time
            bad.append(dataclasses.replace(f, channels=tuple(c.replace("chassis", "torso") for c in f.channels)))
            bad.append(dataclasses.replace(f, data=np.full_like(f.data, np.nan)))       # every marker occluded
        bad.append(f)
        if k % 23 == 5 and f.stream in ENCODERS:
            bad.append(dataclasses.replace(f, channels=("a", "b", "c")))                  # another layout
            bad.append(dataclasses.replace(f, rate_hz=0.0))                               # no rate
            bad.append(dataclasses.replace(f, data=np.zeros((0, 3))))                     # no samples
            bad.append(dataclasses.replace(f, seq=f.seq + 10 ** 6))                       # a repeat
            bad.append(dataclasses.replace(f, t=f.t + 60 * 10 ** 9, t_host=f.t_host))     # stamped 60 s ahead
    t1, a, _ = serve(clean).series(TORQUES)
    bus, counts = counting_serve(bad, clock=lambda: 0)
    t2, b, ch = bus.series(TORQUES)
    assert np.array_equal(t1, t2)
    assert np.array_equal(a, b)
    n_enc = sum(1 for k, f in enumerate(clean) if k % 23 == 5 and f.stream in ENCODERS)
    n_mk = sum(1 for k, f in enumerate(clean) if k % 19 == 3 and f.stream == "markers/walker")
    assert n_enc > 5 and n_mk > 5
    assert sum(v for k, v in counts.items() if k.endswith(":rejected")) == 3 * n_enc + n_mk
    assert sum(v for k, v in counts.items() if k.endswith(":clock_faults")) == n_enc
    assert sum(v for k, v in counts.items() if k.endswith(":repeated")) == n_enc
    assert counts["markers/walker:pose_missing"] == n_mk


def test_an_input_that_stops_is_held_flagged_and_bounded():
    clean = frames_of(walk())
    # the plates stop after 0.4 s; the rest goes on, and the host clock with it
    cut = [f for f in clean if not (f.stream.startswith("dynamics/grf/") and f.t > clean[0].t + 400_000_000)]
    bus, counts = counting_serve(cut)
    t, b, ch = bus.series(TORQUES)
    stale = b[:, ch.index("stale")] > 0
    late = t > clean[0].t + 400_000_000
    assert stale[late].mean() > 0.95 and not stale[~late][:-20].any()
    assert counts["dynamics/grf/FP1:held_samples"] > 0.8 * late.sum()
    assert np.isfinite(b[:, 0]).all()          # the law carries the feet where no plate reads


def test_a_plate_stream_catching_up_a_backlog_is_not_a_clock_fault():
    # the plate service's first frame comes 0.5 s late (its start-up), then it catches up with one frame of the
    # next 0.5 s of samples, received a moment later: that frame's lead (receipt minus its last sample's time)
    # is 0.5 s below the first one's — a backlog drained, not a clock running ahead: every frame is used
    clean = frames_of(walk())
    t0 = clean[0].t
    end = lambda f: f.t + round((f.samples - 1) * 1e9 / f.rate_hz)     # noqa: E731 - its last sample's time
    out = [dataclasses.replace(f, t_recv=end(f) + 1_000_000) for f in clean if not f.stream.startswith("dynamics/grf/")]
    for name, _ in PLATES:
        grf = [f for f in clean if f.stream == f"dynamics/grf/{name}"]
        first, backlog, rest = grf[0], grf[1:100], grf[100:]
        out.append(dataclasses.replace(first, t_recv=t0 + 500_000_000))
        out.append(dataclasses.replace(backlog[0], data=np.concatenate([f.data for f in backlog]),
                                       t_recv=t0 + 501_000_000))
        out += [dataclasses.replace(f, seq=f.seq - 98, t_recv=end(f) + 1_000_000) for f in rest]
    bus, counts = counting_serve(sorted(out, key=lambda f: f.t_recv), clock=lambda: 0)
    assert not any(k.endswith(":clock_faults") for k in counts), counts
    t, b, ch = bus.series(TORQUES)
    t1, a, _ = serve(clean).series(TORQUES)
    assert np.array_equal(t, t1) and np.array_equal(a, b)        # the same numbers as the clean run


def test_a_streams_first_frame_stamped_60_s_ahead_is_a_clock_fault_not_an_anchor():
    # FP2's first frame stamped 60 s ahead of its receipt: with no history of its own it is judged against
    # the other streams' least lead, a clock fault; it must not set the stream's newest sample 60 s ahead,
    # which turned every later FP2 frame into a repeat and left FP2 held for the whole run
    clean = frames_of(walk())
    k = next(i for i, f in enumerate(clean) if f.stream == "dynamics/grf/FP2")
    assert any(f.stream == "dynamics/grf/FP1" for f in clean[:k])
    bad = list(clean)
    bad[k] = dataclasses.replace(clean[k], t=clean[k].t + 60 * 10 ** 9)
    bus, counts = counting_serve(bad, clock=lambda: 0)
    assert counts.get("dynamics/grf/FP2:clock_faults") == 1 and "dynamics/grf/FP2:repeated" not in counts, counts
    t1, a, ch = serve(clean).series(TORQUES)
    t2, b, _ = bus.series(TORQUES)
    after = t1 > clean[k].t + 5_000_000
    assert np.array_equal(t1, t2) and after.sum() > 1000
    assert b[after, ch.index("stale")].sum() == 0 and np.array_equal(a[after], b[after])


def test_the_very_first_frame_stamped_60_s_ahead_is_re_anchored_and_the_good_frames_computed():
    # the first frame of all — the reference shaft's, stamped 60 s ahead — has no other stream to be judged
    # against: it is taken, and set the shaft's newest sample 60 s on, so every good frame after it was a
    # repeat and no torque was ever computed for them (found by review). REANCHOR_FRAMES good frames rejected
    # in a row with one lead re-anchor the shaft: the last of them is taken and every sample from there on
    # is the clean run's (truth: the clean frames' stamps and `serve`'s values, checked against the world in
    # tests/dynamics/test_service_torques.py)
    clean = frames_of(walk())
    left = [f for f in clean if f.stream == ENCODERS[0]]
    bad = [dataclasses.replace(left[0], t=left[0].t + 60 * 10 ** 9, t_device=None)] + clean
    bus, counts = counting_serve(bad, clock=lambda: 0)
    assert counts.get(f"{ENCODERS[0]}:clock_resets") == 1, counts
    assert counts.get(f"{ENCODERS[0]}:repeated") == REANCHOR_FRAMES - 1, counts     # the good frames lost
    t1, a, _ = serve(clean).series(TORQUES)
    t2, b, _ = bus.series(TORQUES)
    anchor = left[REANCHOR_FRAMES - 1].t                     # the frame that re-anchored the shaft
    expected = np.concatenate([f.sample_times() for f in left[REANCHOR_FRAMES - 1:]])
    expected = expected[expected <= t1[-1]]     # the last few wait for inputs that never come, as in the clean run
    assert np.array_equal(t2[t2 >= anchor], expected) and expected.size > 1000
    assert not (t2 > clean[-1].t + 10 ** 9).any()           # nothing published at the bad stamp
    # from 20 ms on (the shaft's acceleration and the legs' velocities have their history again)
    later = t1 >= anchor + 20_000_000
    k = np.searchsorted(t2, t1[later])
    np.testing.assert_allclose(b[k], a[later], rtol=1e-12, atol=1e-9)     # batched otherwise: rounding
    events = bus.frames["events/clock"]
    assert len(events) == 1 and events[0][1]["meta"]["stream"] == ENCODERS[0]
    assert events[0][1]["meta"]["event"] == "clock_reset" and abs(events[0][1]["meta"]["jump_s"] + 60) < 0.3
