"""daq.formats.opensim on the shared OpenSim trial (figures from the data README) and round trips."""
from __future__ import annotations

import numpy as np
import pytest

from daq.formats import opensim as osim
from daq.formats.c3d import Markers
from dynamics import gait_events as ge


def test_trc_reads_the_shared_trial_in_metres_z_up(shared_data):
    trc = osim.read_trc(shared_data / "subject01_walk1.trc")
    m = trc.markers
    assert (len(m.labels), m.positions.shape, m.rate) == (41, (151, 41, 3), 60.0)
    assert not np.isnan(m.positions).any()  # README: no gaps
    lab = m.labels
    pelvis_z = m.positions[:, lab.index("V.Sacral"), 2]
    assert 0.8 < pelvis_z.mean() < 1.2  # metres, vertical is z
    assert np.all(m.positions[:, lab.index("Top.Head"), 2] > m.positions[:, lab.index("R.Heel"), 2])
    # y points left: the left ASIS has the larger y
    assert np.all(m.positions[:, lab.index("L.ASIS"), 1] > m.positions[:, lab.index("R.ASIS"), 1])
    assert trc.time[-1] == pytest.approx(2.5, abs=0.01)


def test_trc_round_trip_keeps_positions_and_gaps(tmp_path):
    rng = np.random.default_rng(0)
    pos = rng.uniform(-1, 1, (20, 3, 3))
    pos[5, 1] = np.nan
    path = tmp_path / "x.trc"
    osim.write_trc(path, Markers(("A", "B", "C"), pos, 100.0))
    back = osim.read_trc(path)
    assert back.markers.labels == ("A", "B", "C") and back.markers.rate == 100.0
    np.testing.assert_allclose(back.markers.positions, pos, atol=1e-9, equal_nan=True)
    np.testing.assert_allclose(back.time, np.arange(20) / 100.0, atol=1e-6)


def test_grf_mot_gives_the_readme_peaks_and_stances(shared_data):
    table = osim.read_mot(shared_data / "subject01_walk1_grf.mot")
    assert table.data.shape == (1501, 18)
    right, left = osim.grf_per_foot(table)
    assert right.force[:, 2].max() == pytest.approx(805, abs=1)
    assert left.force[:, 2].max() == pytest.approx(811, abs=1)
    np.testing.assert_allclose(right.cop[:, 2], -0.0075)  # README: COP height -0.0075 m (OpenSim Y = our z)
    rate = (len(table.time) - 1) / (table.time[-1] - table.time[0])  # times are rounded to 0.1 ms
    for foot, stance in ((right, (0.62, 1.41)), (left, (1.25, 2.02))):
        s, o = ge.plate_events(foot.force[:, 2], rate)
        k = int(np.argmin(np.abs(s - stance[0])))  # partial stances at the start and end too
        assert (s[k], o[o > s[k]][0]) == pytest.approx(stance, abs=0.02)


def test_mot_round_trip_and_bad_files(tmp_path):
    t = osim.Table(("a", "b"), np.arange(5) * 0.01, np.arange(10.0).reshape(5, 2))
    osim.write_mot(tmp_path / "t.mot", t)
    back = osim.read_mot(tmp_path / "t.mot")
    assert back.labels == ("a", "b")
    np.testing.assert_allclose(back.data, t.data)
    (tmp_path / "bad.trc").write_text("hello\n")
    with pytest.raises(osim.OpenSimFormatError, match="not a TRC file"):
        osim.read_trc(tmp_path / "bad.trc")
    with pytest.raises(osim.OpenSimFormatError, match="endheader"):
        osim.read_mot(tmp_path / "bad.trc")


def test_grf_table_writes_what_grf_per_foot_reads(shared_data, tmp_path):
    table = osim.read_mot(shared_data / "subject01_walk1_grf.mot")
    feet = osim.grf_per_foot(table)
    again = osim.grf_table(feet, table.time)
    assert again.labels == table.labels  # the example file's column order
    np.testing.assert_allclose(again.data, table.data, atol=1e-12)
    osim.write_mot(tmp_path / "grf.mot", again)
    back = osim.grf_per_foot(osim.read_mot(tmp_path / "grf.mot"))
    for a, b in zip(back, feet):
        np.testing.assert_allclose(a.force, b.force, rtol=1e-7, atol=1e-6)
        np.testing.assert_allclose(a.cop, b.cop, rtol=1e-7, atol=1e-9)
