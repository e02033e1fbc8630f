"""dynamics.forceplate against analytic point loads on each plate type.

The raw channels are built here from the physics of a rigid plate carrying a point load at a known
surface point (force on the transducer, moments about the transducer origin or the sensor
positions), never from the module's own inverse; the COP must come back as that point.
"""
import warnings

import numpy as np
import pytest

from dynamics import forceplate as fp

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

RNG = np.random.default_rng(4)


def yaw_z_down(theta):
    """Plate axes in the lab: yawed by theta, z pointing down (as AMTI and Kistler plates are)."""
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def corners_for(R, centre, half_x, half_y):
    """C3D corner order: c0 − c1 along +x_plate, c0 − c3 along +y_plate."""
    local = np.array([[half_x, half_y, 0], [-half_x, half_y, 0], [-half_x, -half_y, 0], [half_x, -half_y, 0]])
    return centre + local @ R.T


def tilted_z_up(yaw, tilt):
    """Plate axes with z up: yawed, then tilted about the plate x axis (a plate not quite level)."""
    c, s = np.cos(yaw), np.sin(yaw)
    ct, st = np.cos(tilt), np.sin(tilt)
    Rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    Rx = np.array([[1.0, 0.0, 0.0], [0.0, ct, -st], [0.0, st, ct]])
    return Rz @ Rx


R0 = yaw_z_down(np.deg2rad(30.0))
R_UP = tilted_z_up(np.deg2rad(-50.0), np.deg2rad(2.0))
CENTRE = np.array([0.8, 0.3, 0.012])
CORNERS = corners_for(R0, CENTRE, 0.25, 0.30)
FRAMES = pytest.mark.parametrize("R", [R0, R_UP], ids=["z-down-yawed", "z-up-tilted"])


def loads(n, R=R0):
    """n lab-frame reactions (mostly vertical, up) at n surface points, and free torques."""
    F = np.column_stack([RNG.uniform(-150, 150, n), RNG.uniform(-150, 150, n), RNG.uniform(100, 1200, n)])
    q = np.column_stack([RNG.uniform(-0.2, 0.2, n), RNG.uniform(-0.25, 0.25, n), np.zeros(n)])
    P = CENTRE + q @ R.T  # lab points on the surface
    tz = RNG.uniform(-5, 5, n)
    return F, P, tz


def plate_frame(F, P, R=R0):
    return F @ R, (P - CENTRE) @ R  # f, p in plate axes (p_z = 0)


def below_surface(R, depth, xy=(0.0, 0.0)):
    """Plate-axes position of a point ``depth`` m below the surface centre in the lab."""
    return np.array([xy[0], xy[1], 0.0]) + R.T @ np.array([0.0, 0.0, -depth])


def raw_six(F, P, tz, transducer, R=R0):
    """Fx Fy Fz Mx My Mz about the transducer origin (plate axes) for loads applied at P."""
    f, p = plate_frame(F, P, R)
    m = np.cross(p - transducer, f)
    m[:, 2] += tz
    return np.hstack([f, m])


def raw_kistler(F, P, tz, a, b, depth, R=R0):
    """Kistler channels from the equilibrium of a rigid plate on 4 sensors at (±a, ±b, depth).

    Sensor 1 (a, b), 2 (−a, b), 3 (−a, −b), 4 (a, −b); the shear is split so that the sensors'
    moments about the surface centre balance the load's (including its free torque), and the
    vertical split takes no twist (g1 − g2 + g3 − g4 = 0).
    """
    f, p = plate_frame(F, P, R)
    fx, fy, fz = f.T
    delta = (p[:, 0] * fy - p[:, 1] * fx + tz) / (2 * b)
    fx12, fx34 = fx / 2 - delta, fx / 2 + delta
    fy14 = fy23 = fy / 2
    Y = (p[:, 1] * fz + depth * fy) / b
    X = (p[:, 0] * fz + depth * fx) / a
    g = np.column_stack([fz + Y + X, fz + Y - X, fz - Y - X, fz - Y + X]) / 4
    raw = np.column_stack([fx12, fx34, fy14, fy23, g])
    # The sensors' loads alone carry the moment of the load about the surface centre:
    s = np.array([[a, b, depth], [-a, b, depth], [-a, -b, depth], [a, -b, depth]])
    gx = np.column_stack([fx12 / 2, fx12 / 2, fx34 / 2, fx34 / 2])
    gy = np.column_stack([fy14 / 2, fy23 / 2, fy23 / 2, fy14 / 2])
    gv = np.stack([gx, gy, g], axis=2)
    m_sensors = np.cross(s[None], gv).sum(axis=1)
    m_load = np.cross(p, f)
    m_load[:, 2] += tz
    np.testing.assert_allclose(m_sensors, m_load, atol=1e-9)
    return raw


def check_point_load(plate, raw, F, P, tz, R=R0):
    s = fp.process(plate, raw)
    assert s.valid.all()
    np.testing.assert_allclose(s.force, F, atol=1e-9)
    np.testing.assert_allclose(s.cop, P, atol=1e-12)
    np.testing.assert_allclose(s.free_moment, tz[:, None] * R[:, 2], atol=1e-9)
    return s


@FRAMES
def test_plate_axes_from_corners_match_construction(R):
    np.testing.assert_allclose(fp.plate_axes(corners_for(R, CENTRE, 0.25, 0.3)), R, atol=1e-15)


@FRAMES
@pytest.mark.parametrize("origin_sign", [1.0, -1.0])
def test_type2_point_load_cop_and_free_moment(R, origin_sign):
    F, P, tz = loads(200, R)
    transducer = below_surface(R, 0.04, (0.002, -0.001))
    # C3D stores the vector between transducer and surface centre, in either direction by vendor.
    plate = fp.Plate(type=2, corners=corners_for(R, CENTRE, 0.25, 0.3), origin=origin_sign * -transducer)
    np.testing.assert_allclose(plate.origin, -transducer)
    check_point_load(plate, raw_six(F, P, tz, transducer, R), F, P, tz, R)


def test_type4_crosstalk_matrix_is_corrected():
    F, P, tz = loads(200)
    transducer = np.array([0.0, 0.001, 0.0375])
    true = raw_six(F, P, tz, transducer)
    cal = np.eye(6) + RNG.uniform(-0.03, 0.03, (6, 6)) * (1 - np.eye(6))
    cal[3:, :3] *= 0.05  # m: force -> moment crosstalk
    cal[:3, 3:] *= 20.0  # 1/m
    measured = true @ np.linalg.inv(cal).T  # what the amplifier delivers before calibration
    plate = fp.Plate(type=4, corners=CORNERS, origin=-transducer, cal_matrix=cal)
    check_point_load(plate, measured, F, P, tz)
    # Without the matrix (type 2 on the same channels) the COP is visibly off: the test can fail.
    naive = fp.process(fp.Plate(type=2, corners=CORNERS, origin=-transducer), measured)
    assert np.max(np.linalg.norm(naive.cop - P, axis=1)) > 5e-3


@FRAMES
@pytest.mark.parametrize("az0_sign", [1.0, -1.0])
def test_type3_kistler_point_load(R, az0_sign):
    F, P, tz = loads(200, R)
    a, b = 0.12, 0.20
    depth = below_surface(R, 0.048)[2]  # plate-z of the sensor plane, ~48 mm below the surface
    plate = fp.Plate(type=3, corners=corners_for(R, CENTRE, 0.25, 0.3), origin=[a, b, az0_sign * abs(depth)])
    check_point_load(plate, raw_kistler(F, P, tz, a, b, depth, R), F, P, tz, R)
    np.testing.assert_allclose(plate.origin, [a, b, -depth])  # a, b are spacings: never negated


def test_type3_cop_polynomial_is_subtracted():
    F, P, tz = loads(50)
    a, b, depth = 0.12, 0.20, 0.048
    raw = raw_kistler(F, P, tz, a, b, depth)
    poly = np.array([3.0, -2.0, 0.5, 1.0, 0.2, 0.01, -4.0, 1.5, 0.3, 2.0, -0.1, -0.02])
    plate = fp.Plate(type=3, corners=CORNERS, origin=[a, b, -depth], cop_poly=poly)
    s = fp.process(plate, raw)
    x, y = ((P - CENTRE) @ R0)[:, :2].T
    dx = (3.0 * y**4 - 2.0 * y**2 + 0.5) * x**3 + (1.0 * y**4 + 0.2 * y**2 + 0.01) * x
    dy = (-4.0 * x**4 + 1.5 * x**2 + 0.3) * y**3 + (2.0 * x**4 - 0.1 * x**2 - 0.02) * y
    expected = CENTRE + np.column_stack([x - dx, y - dy, np.zeros_like(x)]) @ R0.T
    np.testing.assert_allclose(s.cop, expected, atol=1e-12)


def test_type1_cop_given_and_moment_equals_type2():
    F, P, tz = loads(100)
    f, p = plate_frame(F, P)
    raw1 = np.column_stack([f, p[:, 0], p[:, 1], tz])
    s1 = check_point_load(fp.Plate(type=1, corners=CORNERS, origin=[0.01, 0.02, 0.03]), raw1, F, P, tz)
    # The same load on a type-2 plate with the transducer at the surface centre: same wrench.
    s2 = fp.process(fp.Plate(type=2, corners=CORNERS, origin=[0, 0, 0]), raw_six(F, P, tz, np.zeros(3)))
    np.testing.assert_allclose(s1.moment, s2.moment, atol=1e-9)


def test_moment_is_about_surface_centre():
    F, P, tz = loads(30)
    s = fp.process(fp.Plate(type=2, corners=CORNERS, origin=[0, 0, -0.04]),
                   raw_six(F, P, tz, np.array([0, 0, 0.04])))
    expected = np.cross(P - CENTRE, F) + tz[:, None] * R0[:, 2]
    np.testing.assert_allclose(s.moment, expected, atol=1e-9)


def test_cop_nan_flagged_as_fz_goes_to_zero_and_flips():
    n = 401
    fz = np.linspace(300.0, -100.0, n)  # through 0 and below, as an unzeroed offset would
    F = np.column_stack([0.1 * fz, -0.05 * fz, fz])
    P = np.tile(CENTRE + np.array([0.05, -0.1, 0.0]) @ R0.T, (n, 1))
    transducer = np.array([0.0, 0.0, 0.04])
    plate = fp.Plate(type=2, corners=CORNERS, origin=-transducer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a 0/0 or x/0 would warn
        s = fp.process(plate, raw_six(F, P, np.zeros(n), transducer), threshold=20.0)
    above = fz > 20.0
    np.testing.assert_array_equal(s.valid, above)
    assert not np.isinf(s.cop).any() and not np.isinf(s.free_moment).any()
    assert np.isnan(s.cop[~above]).all() and np.isnan(s.free_moment[~above]).all()
    np.testing.assert_allclose(s.cop[above], P[above], atol=1e-12)
    assert np.isfinite(s.force).all()


def test_zeroing_removes_a_synthetic_offset():
    n = 600
    F, P, tz = loads(n)
    F[:150] = 0.0  # unloaded start, then a stance
    tz[:150] = 0.0
    transducer = np.array([0.0, 0.0, 0.04])
    plate = fp.Plate(type=2, corners=CORNERS, origin=-transducer)
    offset = np.array([3.0, -4.0, 150.0, 2.0, -1.5, 0.7])  # a +Fz_plate offset reads as −150 N up
    noise = RNG.normal(0, 1, (n, 6)) * [0.2, 0.2, 0.2, 0.02, 0.02, 0.02]  # N, N·m
    raw = raw_six(F, P, tz, transducer) + offset + noise
    w = fp.least_loaded_window(plate, raw, 50)
    assert w.stop <= 150
    est = fp.zero_offset(plate, raw, w)
    np.testing.assert_allclose(est, offset, atol=0.15)
    s = fp.process(plate, raw, offset=est)
    loaded = F[:, 2] > 100
    assert np.all(np.linalg.norm(s.cop[loaded] - P[loaded], axis=1) < 2e-3)
    unzeroed = fp.process(plate, raw)
    assert not unzeroed.valid[:150].any()  # the negative offset reads as a sign flip: NaN, flagged
    assert np.nanmax(np.linalg.norm(unzeroed.cop[loaded] - P[loaded], axis=1)) > 5e-3


def test_zeroing_leaves_type1_cop_channels():
    plate = fp.Plate(type=1, corners=CORNERS, origin=[0, 0, 0])
    raw = np.tile([1.0, 2.0, 3.0, 0.1, 0.2, 0.5], (10, 1))
    np.testing.assert_array_equal(fp.zero_offset(plate, raw, slice(0, 10)), [1.0, 2.0, 3.0, 0, 0, 0.5])


def test_combine_two_plates_and_a_plate_below_threshold():
    n = 100
    F1, P1, t1 = loads(n)
    F2, P2, t2 = loads(n)
    R2 = yaw_z_down(0.0)
    c2 = np.array([1.5, 0.4, 0.012])
    corners2 = corners_for(R2, c2, 0.2, 0.3)
    P2 = c2 + np.column_stack([RNG.uniform(-0.15, 0.15, n), RNG.uniform(-0.25, 0.25, n), np.zeros(n)])
    F1[:, :2] = 0.0  # vertical loads: the global COP is the Fz-weighted mean of the points
    F2[:, :2] = 0.0
    F2[:10, 2] = 5.0  # plate 2 below threshold: its wrench still counts
    t1[:] = 0.0
    t2[:] = 0.0
    tr = np.array([0.0, 0.0, 0.04])
    p1 = fp.Plate(type=2, corners=CORNERS, origin=-tr)
    p2 = fp.Plate(type=2, corners=corners2, origin=-tr)
    f2, q2 = F2 @ R2, (P2 - c2) @ R2
    raw2 = np.hstack([f2, np.cross(q2 - tr, f2)])
    s1, s2 = fp.process(p1, raw_six(F1, P1, t1, tr)), fp.process(p2, raw2)
    assert not s2.valid[:10].any()
    comb = fp.combine([p1, p2], [s1, s2], pz=0.012)
    expected = (F1[:, 2:] * P1 + F2[:, 2:] * P2) / (F1[:, 2:] + F2[:, 2:])
    np.testing.assert_allclose(comb.cop, expected, atol=1e-12)
    np.testing.assert_allclose(comb.force, F1 + F2, atol=1e-9)
    np.testing.assert_allclose(comb.moment, np.cross(P1, F1) + np.cross(P2, F2), atol=1e-9)


def test_contact_events_with_hysteresis():
    fz = np.array([0, 30, 45, 60, 40, 25, 30, 15, 10, 35, 49, 51, 70, 19, np.nan, 80, 80], float)
    ev = fp.contact_events(fz, on=50.0, off=20.0)
    np.testing.assert_array_equal(ev.touchdown, [3, 11, 15])
    np.testing.assert_array_equal(ev.liftoff, [7, 13])
    expected = np.zeros(len(fz), bool)
    expected[3:7] = expected[11:13] = expected[15:] = True
    np.testing.assert_array_equal(ev.contact, expected)
    # Noise around one level alone never toggles the state (that is what hysteresis is for).
    t = np.arange(2000) / 1000
    noisy = 35.0 + 10.0 * np.sin(2 * np.pi * 40 * t)  # always between off and on
    assert len(fp.contact_events(noisy, 50.0, 20.0).touchdown) == 0
    # Block by block with the carried state equals the whole signal at once.
    sig = np.concatenate([np.zeros(50), 600 * np.sin(np.linspace(0, np.pi, 300)), np.zeros(50)] * 3)
    sig += RNG.normal(0, 8, sig.size)
    whole = fp.contact_events(sig, 50.0, 20.0).contact
    state, blocks = False, []
    for k in range(0, sig.size, 7):
        c = fp.contact_events(sig[k:k + 7], 50.0, 20.0, initial=state).contact
        blocks.append(c)
        state = bool(c[-1])
    np.testing.assert_array_equal(np.concatenate(blocks), whole)
    assert len(fp.contact_events(sig, 50.0, 20.0).touchdown) == 3


def test_saturation_flagged_per_sample():
    F, P, tz = loads(20)
    tr = np.array([0.0, 0.0, 0.04])
    rng = np.tile([-2000.0, 2000.0], (6, 1))
    plate = fp.Plate(type=2, corners=CORNERS, origin=-tr, channel_range=rng)
    raw = raw_six(F, P, tz, tr) * 0.01
    raw[5, 2] = 2000.0
    raw[9, 4] = -2500.0
    s = fp.process(plate, raw)
    np.testing.assert_array_equal(np.flatnonzero(s.saturated), [5, 9])


@pytest.mark.parametrize("kwargs, match", [
    (dict(type=7, corners=CORNERS, origin=[0, 0, 0]), "type 7 is not supported"),
    (dict(type=4, corners=CORNERS, origin=[0, 0, 0]), "needs a \\(6, 6\\) cal_matrix"),
    (dict(type=2, corners=CORNERS[:3], origin=[0, 0, 0]), "corners must have shape \\(4, 3\\)"),
    (dict(type=2, corners=np.zeros((4, 3)), origin=[0, 0, 0]), "degenerate"),
    (dict(type=2, corners=CORNERS, origin=[0, 0, 0], cal_matrix=np.eye(6)), "only used by type 4"),
])
def test_bad_plate_descriptions_are_clear_errors(kwargs, match):
    with pytest.raises(fp.PlateError, match=match):
        fp.Plate(**kwargs)


def test_bad_raw_shape_names_the_plate():
    plate = fp.Plate(type=3, corners=CORNERS, origin=[0.1, 0.2, -0.05], name="FP2")
    with pytest.raises(fp.PlateError, match="'FP2'.*\\(N, 8\\)"):
        fp.process(plate, np.zeros((10, 6)))
    with pytest.raises(fp.PlateError, match="window length"):
        fp.least_loaded_window(plate, np.zeros((10, 8)), 11)


@pytest.mark.parametrize("plate_type", [1, 2, 3, 4])
def test_raw_channels_are_the_inverse_of_process(plate_type):
    """Plate.raw_channels (a plate's inverse mechanics, used by the simulator) read back through
    `process` (checked against ezc3d and Visual3D above) gives the load it was given: force and
    moment about the surface centre, lab axes, on a yawed z-down plate with the transducer off
    centre. Type 1 holds a moment only through its COP, so its loads are forces at a surface
    point plus a free moment along the plate normal."""
    rng = np.random.default_rng(11)
    yaw = 0.4
    rot = np.array([[np.cos(yaw), np.sin(yaw), 0.0], [np.sin(yaw), -np.cos(yaw), 0.0], [0.0, 0.0, -1.0]])
    corners = np.array([1.0, 0.5, 0.01]) + np.array([[0.3, 0.2, 0], [-0.3, 0.2, 0], [-0.3, -0.2, 0], [0.3, -0.2, 0]]) @ rot.T
    origin = {3: [0.21, 0.14, -0.045]}.get(plate_type, [0.003, -0.002, -0.04])
    cal = np.eye(6) + 0.03 * rng.standard_normal((6, 6)) if plate_type == 4 else None
    plate = fp.Plate(type=plate_type, corners=corners, origin=np.array(origin), cal_matrix=cal)
    n = 40
    force = np.column_stack([rng.uniform(-90, 90, n), rng.uniform(-90, 90, n), rng.uniform(100, 900, n)])
    cop = np.column_stack([rng.uniform(-0.25, 0.25, n), rng.uniform(-0.15, 0.15, n), np.zeros(n)])
    moment = fp.load_moment(force, cop, rng.uniform(-5, 5, n))
    if plate_type != 1:
        moment += rng.uniform(-20, 20, (n, 3))     # any moment: the linear types carry all six
    raw = plate.raw_channels(force, moment)
    assert raw.shape == (n, plate.n_channels)
    got = fp.process(plate, raw)
    np.testing.assert_allclose(got.force, force, atol=1e-9)
    np.testing.assert_allclose(got.moment, moment, atol=1e-9)
    if plate_type == 1:
        np.testing.assert_allclose(got.cop, cop + plate.centre, atol=1e-12)


def test_raw_channels_refuse_what_they_cannot_invert():
    corners = np.array([[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]])
    plate = fp.Plate(type=3, corners=corners, origin=np.array([0.2, 0.1, -0.04]), cop_poly=np.zeros(12), name="K1")
    with pytest.raises(fp.PlateError, match="FPCOPPOLY"):
        plate.raw_channels(np.zeros((1, 3)), np.zeros((1, 3)))
    with pytest.raises(fp.PlateError, match=r"shape \(N, 3\)"):
        fp.Plate(type=2, corners=corners, origin=np.zeros(3)).raw_channels(np.zeros((2, 3)), np.zeros((3, 3)))


@pytest.mark.parametrize("plate_type", [1, 2, 3, 4])
def test_compiled_process_equals_numpy_path(plate_type):
    """forceplate.process on the compiled kernel against the numpy path, every output to 1e-10: loads
    on and off the plate, an offset, a channel range (saturation), samples below threshold, a NaN
    channel and a sample of 1.7e308 channels whose sums overflow (both invalid, all NaN), FPCOPPOLY for type 3."""
    from dynamics import kernels

    n = 60
    rng = np.random.default_rng(30 + plate_type)
    extra = {4: dict(cal_matrix=np.eye(6) + 0.02 * rng.standard_normal((6, 6))),
             3: dict(cop_poly=1e-3 * rng.standard_normal(12))}.get(plate_type, {})
    nch = fp.N_CHANNELS[plate_type]
    plate = fp.Plate(type=plate_type, corners=corners_for(yaw_z_down(0.4), np.array([0.3, 0.1, 0.01]), 0.25, 0.2),
                     origin=np.array([0.03, -0.02, -0.04]) if plate_type != 3 else np.array([0.2, 0.15, -0.03]),
                     channel_range=np.tile([-900.0, 900.0], (nch, 1)), name="FPx", **extra)
    raw = rng.normal(scale=40.0, size=(n, nch))
    if plate_type == 1:
        raw[:, 2] = rng.uniform(-50, 800, n)            # F_z (plate axes z down: a load is negative in the lab)
        raw[:, 3:5] = rng.uniform(-0.2, 0.2, (n, 2))    # the COP channels, m
    else:
        raw[:, 2 if plate_type != 3 else 4:] += rng.uniform(-50, 300, (n, 1)) if plate_type != 3 else 0.0
    raw[3, 0] = np.nan
    raw[7] = 1.7e308
    raw[11, 2] = 950.0                                  # beyond the range: saturated
    offset = rng.normal(scale=2.0, size=nch)
    out = {}
    for jit in (True, False):
        with kernels.use_jit(jit), warnings.catch_warnings():
            warnings.simplefilter("error")              # neither path warns on NaN or overflow
            out[jit] = fp.process(plate, raw, threshold=20.0, offset=offset)
    a, b = out[True], out[False]
    for name in ("force", "moment", "cop", "free_moment"):
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-10 * np.nanmax(np.abs(y)), err_msg=name)
    np.testing.assert_array_equal(a.valid, b.valid)
    np.testing.assert_array_equal(a.saturated, b.saturated)
    assert a.valid.any() and not a.valid.all() and not a.valid[[3, 7]].any() and a.saturated[11]
    assert np.isnan(a.force[[3, 7]]).all()


def test_compiled_combine_equals_numpy_path():
    """combine and combine_wrenches on the compiled kernel against the numpy path: three plates, a
    plate below threshold, a NaN plate sample and an overflowing one (NaN, invalid on both paths),
    the default and a given pz."""
    from dynamics import kernels

    n = 40
    rng = np.random.default_rng(41)
    plates = [fp.Plate(type=2, corners=corners_for(yaw_z_down(0.3 * k), np.array([0.6 * k, 0.1 * k, 0.01 * k]), 0.25, 0.2),
                       origin=np.array([0.0, 0.0, -0.04]), name=f"FP{k + 1}") for k in range(3)]
    sigs = []
    for k, p in enumerate(plates):
        force = np.column_stack([rng.normal(scale=30, size=(n, 2)), rng.uniform(-10, 500, n)])
        sigs.append(fp.PlateSignals(force, rng.normal(scale=20, size=(n, 3)), np.zeros((n, 3)), np.zeros((n, 3)),
                                    np.ones(n, bool), np.zeros(n, bool)))
    sigs[1].force[4] = np.nan
    sigs[0].force[9, 2] = sigs[2].force[9, 2] = 1.7e308         # their sum overflows
    w = np.concatenate([np.hstack([s.force, s.moment]) for s in sigs], axis=1)
    out = {}
    for jit in (True, False):
        with kernels.use_jit(jit), warnings.catch_warnings():
            warnings.simplefilter("error")
            out[jit] = [fp.combine(plates, sigs), fp.combine(plates, sigs, threshold=50.0, pz=0.02),
                        fp.combine_wrenches(plates, w), fp.combine_wrenches(plates[:1], w[:, :6], pz=0.0)]
    for a, b in zip(out[True], out[False]):
        for name in ("force", "moment", "cop"):
            x, y = getattr(a, name), getattr(b, name)
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-10 * np.nanmax(np.abs(y)), err_msg=name)
        np.testing.assert_array_equal(a.valid, b.valid)
    first = out[True][0]
    assert not first.valid[[4, 9]].any() and np.isnan(first.force[[4, 9]]).all() and first.valid.sum() > n // 2
