"""daq.formats.c3d_write: a C3D written from SI data reads back — in ezc3d and in daq.formats.c3d —
as what went in: markers (mm <-> m, gaps, residuals), analogs, plates of types 1-4 carrying a known
load, events, subject parameters, first frame."""
from __future__ import annotations

import ezc3d
import numpy as np
import pytest

from daq.formats import c3d
from daq.formats.c3d import Analogs, C3DError, Markers
from daq.formats.c3d_write import C3DPlate, Event, write
from dynamics import forceplate as fp

CORNERS = [np.array([[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]) + [x, 0.0, 0.0]
           for x in (0.0, 0.7, 1.4, 2.1)]


def plates() -> list[fp.Plate]:
    cal = np.eye(6) + 0.03 * np.sin(np.arange(36).reshape(6, 6))
    return [fp.Plate(type=1, corners=CORNERS[0], origin=np.zeros(3), name="FP1"),
            fp.Plate(type=2, corners=CORNERS[1], origin=np.array([0.002, -0.001, -0.04]), name="FP2"),
            fp.Plate(type=3, corners=CORNERS[2], origin=np.array([0.12, 0.2, -0.048]), name="FP3"),
            fp.Plate(type=4, corners=CORNERS[3], origin=np.array([0.0, 0.0, -0.035]), cal_matrix=cal, name="FP4")]


def test_round_trip_of_markers_analogs_plates_events_subject(tmp_path):
    rng = np.random.default_rng(1)
    n, ratio = 40, 5
    pos = rng.normal(scale=0.8, size=(n, 3, 3))
    pos[7, 1] = np.nan
    res = np.abs(rng.normal(scale=1e-3, size=(n, 3)))
    # a known load on each plate: a force near the centre, a free moment; raw channels by the plate's
    # inverse mechanics, so the truth is the load itself
    t = np.arange(n * ratio) / 500.0
    force = np.column_stack([20 * np.sin(t), -10 * np.cos(t), 600 + 100 * np.sin(3 * t)])
    cop = np.column_stack([0.05 * np.sin(t), 0.03 * np.cos(t), np.zeros_like(t)])
    moment = fp.load_moment(force, cop, 2.0 * np.sin(t))
    ps = plates()
    raws = [p.raw_channels(force, moment) for p in ps]
    extra = rng.normal(size=(n * ratio, 1))  # an EMG channel beside the plates
    values = np.hstack(raws + [extra])
    labels = tuple(f"ch{i}" for i in range(values.shape[1]))
    units = tuple(u for p in ps for u in {1: ("N", "N", "N", "m", "m", "N*m"), 2: ("N",) * 3 + ("N*m",) * 3,
                                         3: ("N",) * 8, 4: ("V",) * 6}[p.type]) + ("V",)
    starts = np.cumsum([0] + [p.n_channels for p in ps])
    out = write(tmp_path / "t.c3d", markers=Markers(("LASI", "RASI", "SACR"), pos, 100.0), residuals=res,
                analogs=Analogs(labels, units, values, 500.0),
                plates=[C3DPlate(p, tuple(range(starts[i], starts[i + 1]))) for i, p in enumerate(ps)],
                events=[Event(0.12, "Foot Strike", "Left"), Event(0.31, "Foot Off", "Right")],
                subject={"name": "S01", "Bodymass": 71.5, "Height": 1780.0}, first_frame=12)

    trial = c3d.load(out)
    assert trial.markers.labels == ("LASI", "RASI", "SACR") and trial.first_frame == 12 and trial.body_mass == 71.5
    ok = ~np.isnan(pos)
    assert np.array_equal(np.isnan(trial.markers.positions), ~ok)
    assert np.max(np.abs(trial.markers.positions[ok] - pos[ok])) < 1e-6 * np.abs(pos[ok]).max()  # float32 mm
    for p, got in zip(ps, trial.plates):
        assert got.type == p.type
        np.testing.assert_allclose(got.force, force, rtol=0, atol=1e-6 * np.abs(force).max() * 10)
        np.testing.assert_allclose(got.moment, moment, rtol=0, atol=1e-5 * np.abs(moment).max() * 10)
    np.testing.assert_allclose(trial.analogs.values[:, -1], extra[:, 0], rtol=1e-6)

    c = ezc3d.c3d(str(out))
    r = c["data"]["meta_points"]["residuals"][0].T  # (frames, markers), mm, -1 = gap
    assert r[7, 1] == -1
    seen = ok.all(axis=2)
    assert np.max(np.abs(r[seen] - res[seen] * 1000)) <= 0.05 + 1e-9  # 0.1 mm steps (POINT:SCALE = -0.1)
    ev = c["parameters"]["EVENT"]
    assert [s.strip() for s in ev["LABELS"]["value"]] == ["Foot Strike", "Foot Off"]
    assert [s.strip() for s in ev["CONTEXTS"]["value"]] == ["Left", "Right"]
    np.testing.assert_allclose(ev["TIMES"]["value"][1], [0.12, 0.31], rtol=1e-6)
    assert [s.strip() for s in c["parameters"]["SUBJECTS"]["NAMES"]["value"]] == ["S01"]
    assert c["parameters"]["PROCESSING"]["Height"]["value"][0] == pytest.approx(1780.0)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "nothing to write"),
    ({"markers": Markers(("A",), np.zeros((4, 1, 3)), 100.0),
      "analogs": Analogs(("a",), ("V",), np.zeros((10, 1)), 300.0)}, "10 analog samples, expected 4 point frames x 3"),
    ({"markers": Markers(("A",), np.zeros((4, 1, 3)), 100.0),
      "analogs": Analogs(("a",), ("V",), np.zeros((10, 1)), 250.0)}, "integer multiple"),
])
def test_inconsistent_input_is_a_one_line_error(tmp_path, kwargs, message):
    with pytest.raises(C3DError, match=message.replace("(", r"\(")):
        write(tmp_path / "bad.c3d", **kwargs)
