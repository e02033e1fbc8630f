"""The 15-segment human from its full-body marker set (configs/markersets/human15.toml) on synthetic
data: human15 moved along known joint trajectories, segment poses from dynamics.kinematics, markers
generated from them (with noise); the fitted joint coordinates must return the trajectories, and the
inverse dynamics of the recovered motion with the model's own ground reaction on a plate must agree
bottom-up, top-down and with Pinocchio's rnea."""
import tomllib

import numpy as np
import pytest

import configs
from dynamics import kernels, load_model
from dynamics.human15_markers import (fit_segments, joint_coordinates, joint_rates, marker_inverse_dynamics,
                                      marker_set_from_dict, missing_markers)
from dynamics.kinematics import contact_positions, forward_kinematics
from dynamics.markers import MarkerError
from dynamics.pinocchio_model import to_pinocchio
from dynamics.plate_id import PlateLoad, plate_inverse_dynamics
from dynamics.smoothing import butterworth

FS = 200.0


@pytest.fixture(scope="module")
def model():
    return load_model("human15")


@pytest.fixture(scope="module")
def mset():
    return marker_set_from_dict(tomllib.loads(configs.path("markersets/human15.toml").read_text()))


def trajectory(model, n=300):
    """Known motion, analytic q, v, a (N, ·): revolute joints sines of 0.1-0.5 rad at 0.7-1.3 Hz;
    the base walks forward 1.2 m/s with a vertical bob and turns about a fixed body axis u by
    θ(t) (so ω_body = θ̇ u, ω̇_body = θ̈ u exactly)."""
    t = np.arange(n) / FS
    rng = np.random.default_rng(3)
    q = np.zeros((n, model.nq))
    v = np.zeros((n, model.nv))
    a = np.zeros((n, model.nv))
    amp = rng.uniform(0.1, 0.5, model.nv - 6)
    w = 2 * np.pi * rng.uniform(0.7, 1.3, model.nv - 6)
    ph = rng.uniform(0, 2 * np.pi, model.nv - 6)
    q[:, 7:] = amp * np.sin(w * t[:, None] + ph)
    v[:, 6:] = amp * w * np.cos(w * t[:, None] + ph)
    a[:, 6:] = -amp * w**2 * np.sin(w * t[:, None] + ph)
    u = np.array([0.2, 0.3, 1.0]) / np.linalg.norm([0.2, 0.3, 1.0])
    th, thd, thdd = 0.3 * np.sin(2 * t), 0.6 * np.cos(2 * t), -1.2 * np.sin(2 * t)
    from scipy.spatial.transform import Rotation
    R = Rotation.from_rotvec(th[:, None] * u).as_matrix()
    q[:, 3:7] = Rotation.from_matrix(R).as_quat()
    p = np.column_stack([1.2 * t, 0.02 * np.sin(3 * t), 0.9 + 0.03 * np.sin(6 * t)])
    pd = np.column_stack([np.full(n, 1.2), 0.06 * np.cos(3 * t), 0.18 * np.cos(6 * t)])
    pdd = np.column_stack([np.zeros(n), -0.18 * np.sin(3 * t), -1.08 * np.sin(6 * t)])
    q[:, :3] = p
    vl = np.einsum("nji,nj->ni", R, pd)
    om = thd[:, None] * u
    v[:, :3], v[:, 3:6] = vl, om
    a[:, :3] = np.einsum("nji,nj->ni", R, pdd) - np.cross(om, vl)  # d/dt (Rᵀ ṗ)
    a[:, 3:6] = thdd[:, None] * u
    return q, v, a


def synthetic_markers(model, mset, q, noise=0.0, seed=0):
    """label → (N, 3) m: each marker placed by its segment's pose (kinematics), + N(0, noise²)."""
    pl = forward_kinematics(model, q)
    rng = np.random.default_rng(seed)
    out = {}
    for seg, table in mset.segments.items():
        i = model.index[seg]
        for label, p in table.items():
            if label not in out:  # a marker on a joint axis: the first segment's placement
                x = np.einsum("nij,j->ni", pl.rotation[:, i], p) + pl.translation[:, i]
                out[label] = x + noise * rng.standard_normal(x.shape)
    return out


def test_marker_set_is_consistent_with_the_model(model, mset):
    """Every segment of the set is a model segment with 3 points (markers, or 2 + its joint
    centre); a marker listed on two segments is at the same lab point at any posture."""
    assert set(mset.segments) <= set(model.index) and len(mset.segments) == 15
    assert all(model.segment(s).mass > 0 for s in mset.segments)
    q, _, _ = trajectory(model, 50)
    pl = forward_kinematics(model, q)
    where = {}
    for seg, table in mset.segments.items():
        for label, p in table.items():
            x = np.einsum("nij,j->ni", pl.rotation[:, model.index[seg]], p) + pl.translation[:, model.index[seg]]
            if label in where:
                np.testing.assert_allclose(x, where[label], atol=1e-12)
            where[label] = x


@pytest.mark.parametrize("jit", [True, False])
def test_exact_markers_return_the_joint_trajectories(model, mset, jit):
    q, _, _ = trajectory(model)
    with kernels.use_jit(jit):      # compiled: kernels.markers.segment_fits and joint_coordinates
        fits = fit_segments(model, mset, synthetic_markers(model, mset, q))
        qh = joint_coordinates(model, mset, fits)
    np.testing.assert_allclose(qh[:, :3], q[:, :3], atol=1e-10)
    np.testing.assert_allclose(np.abs(np.einsum("ij,ij->i", qh[:, 3:7], q[:, 3:7])), 1.0, atol=1e-10)
    np.testing.assert_allclose(qh[:, 7:], q[:, 7:], atol=1e-9)
    assert max(np.nanmax(r) for r in fits.residual.values()) < 1e-10


def test_noisy_markers_return_the_joint_angles_within_the_noise(model, mset):
    """1 mm marker noise: every joint angle within 5 σ of its error predicted from the cluster size,
    σ_angle ≈ σ / (smallest lever ≈ 30 mm) ≈ 1.9 deg; the RMS error across joints is far below."""
    q, _, _ = trajectory(model)
    sigma = 1e-3
    qh = joint_coordinates(model, mset, fit_segments(model, mset, synthetic_markers(model, mset, q, sigma, 1)))
    err = np.degrees(qh[:, 7:] - q[:, 7:])
    assert np.all(np.isfinite(err))
    assert np.abs(err).max() < 5 * np.degrees(sigma / 0.03)
    assert np.sqrt(np.mean(err**2)) < 1.0
    assert np.abs(qh[:, :3] - q[:, :3]).max() < 5 * sigma


@pytest.mark.parametrize("jit", [True, False])
def test_rates_converge_to_the_analytic_ones(model, mset, jit):
    q, v, a = trajectory(model)
    with kernels.use_jit(jit):      # compiled: kernels.markers.joint_rates
        qh = joint_coordinates(model, mset, fit_segments(model, mset, synthetic_markers(model, mset, q)))
        vh, ah = joint_rates(model, qh, FS)
    inner = slice(2, -2)  # central differences inside, one-sided at the ends
    # O(h²) at 200 Hz: measured 2e-4 and 5e-4 of the largest rate
    assert np.abs(vh - v)[inner].max() < 1e-3 * np.abs(v).max()
    assert np.abs(ah - a)[inner].max() < 2e-3 * np.abs(a).max()


def test_missing_segment_markers_are_named_and_left_nan(model, mset):
    """LFIN lost: the hand keeps LWRA, LWRB and the wrist centre, all on the wrist axis (collinear):
    no fit, the wrist angle is NaN. LHEE lost: the foot is fitted from LANK, LTOE and the ankle
    centre, its angle still exact."""
    q, _, _ = trajectory(model, 40)
    mk = synthetic_markers(model, mset, q)
    del mk["LFIN"], mk["LHEE"]
    assert missing_markers(mset, mk) == {"hand_l": ["LFIN"], "foot_l": ["LHEE"]}
    qh = joint_coordinates(model, mset, fit_segments(model, mset, mk))
    wrist = model.idx_q[model.index["hand_l"]]
    assert np.isnan(qh[:, wrist]).all()
    np.testing.assert_allclose(np.delete(qh[:, 7:], wrist - 7, axis=1), np.delete(q[:, 7:], wrist - 7, axis=1), atol=1e-9)


def test_a_bad_marker_set_is_one_error(model):
    thigh_only = marker_set_from_dict({"kind": "markerset", "segment": {"thigh_l": {"LTHI": [0, 0.07, -0.2]}}})
    with pytest.raises(MarkerError, match="proximal segment 'pelvis' is not in the marker set"):
        fit_segments(model, thigh_only, {"LTHI": np.zeros((5, 3))})
    with pytest.raises(MarkerError, match="none of the 1 markers"):
        fit_segments(model, thigh_only, {"XXX": np.zeros((5, 3))})
    with pytest.raises(MarkerError, match="kind"):
        marker_set_from_dict({"segment": {}})
    with pytest.raises(MarkerError, match="pelvis.LASI"):
        marker_set_from_dict({"kind": "markerset", "segment": {"pelvis": {"LASI": [1, 2]}}})


def pinocchio_truth(model, q, v, a):
    """Pinocchio (independent rnea): the ground wrench the motion requires (lab frame, about the lab
    origin: the free-flyer rows of the ground-free rnea turned out of the base frame) and the joint
    torques with that wrench applied to the right foot (its free-flyer rows are then zero)."""
    import pinocchio as pin

    pm = to_pinocchio(model)
    pd = pm.createData()
    jid = pm.getJointId(model.segment("foot_r").joint_name)
    f, n, tau = np.zeros((len(q), 3)), np.zeros((len(q), 3)), np.zeros((len(q), model.nv))
    for k in range(len(q)):
        base = pin.rnea(pm, pd, q[k], v[k], a[k])[:6].copy()
        pin.forwardKinematics(pm, pd, q[k])  # rnea leaves pd.oMi alone
        M0 = pd.oMi[1]
        f[k] = M0.rotation @ base[:3]
        n[k] = M0.rotation @ base[3:] + np.cross(M0.translation, f[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        fext[jid] = pd.oMi[jid].actInv(pin.Force(f[k], n[k]))
        tau[k] = pin.rnea(pm, pd, q[k], v[k], a[k], fext)
    return f, n, tau


def _plate_under_right_foot(model, q, f, n, keep):
    heel_toe = contact_positions(model, q, ["heel_r", "toe_r"])
    lo, hi = heel_toe[..., :2].reshape(-1, 2).min(0) - 0.01, heel_toe[..., :2].reshape(-1, 2).max(0) + 0.01
    z = float(heel_toe[..., 2].min()) - 1e-3
    corners = np.array([[hi[0], hi[1], z], [lo[0], hi[1], z], [lo[0], lo[1], z], [hi[0], lo[1], z]])
    return PlateLoad(f[keep], n[keep], corners, np.ones(len(f[keep]), bool), "FP1")


def _inverse_dynamics(model, mset, markers, plate, keep):
    qh = joint_coordinates(model, mset, fit_segments(model, mset, markers))
    vh, ah = joint_rates(model, qh, FS)
    # the plate is the right foot's only (the left foot's random swing crosses the right one's path
    # here; plate_id's assignment rules are tested in test_plate_id)
    res = plate_inverse_dynamics(model, qh[keep], vh[keep], ah[keep], [plate], ["foot_r"], height_tol=2.0)
    assert res.assignment.weights[:, 0, 0].all()
    return res


@pytest.mark.parametrize("noise, fc, tol_bu, tol_td, tol_root", [(0.0, None, 1e-3, 1e-3, 1e-3),
                                                                 (1e-3, 4.0, 0.03, 0.15, 0.05)])
def test_moments_bottom_up_top_down_and_pinocchio_agree(model, mset, noise, fc, tol_bu, tol_td, tol_root):
    """Single support on one plate carrying the model's own required ground wrench (Pinocchio): from
    the markers, the recovered motion's bottom-up and top-down joint torques agree with each other
    and with Pinocchio's rnea on the true motion (tolerances: fractions of the peak joint torque,
    ~285 N·m), and the residual force at the root is small against body weight.

    Noise-free: only the O(h²) differentiation errs (measured 5e-5 bottom-up, 1.2e-4 top-down).
    1 mm noise through the 4 Hz zero-lag Butterworth: measured 0.014 bottom-up, 0.088 top-down (the
    top-down torques carry the whole body's accelerations, the bottom-up ones only the leg's)."""
    n_frames = 300 if fc is None else 600
    q, v, a = trajectory(model, n_frames)
    f, n, tau = pinocchio_truth(model, q, v, a)
    np.testing.assert_allclose(tau[:, :6], 0.0, atol=1e-8 * np.abs(f).max())  # the wrench is the required one
    keep = slice(2, -2) if fc is None else slice(100, -100)  # central differences / filter end effects
    markers = synthetic_markers(model, mset, q, noise, 2)
    if fc is not None:
        markers = {k: butterworth(x, FS, fc) for k, x in markers.items()}
    res = _inverse_dynamics(model, mset, markers, _plate_under_right_foot(model, q, f, n, keep), keep)
    joints = slice(6, None)
    truth = tau[keep, joints]
    scale = np.abs(truth).max()
    legs = res.plate_below[:, joints]  # joints with the plate below them: bottom-up differs from free rnea
    assert legs.sum(axis=0).max() == len(truth) and not res.indeterminate.any()
    np.testing.assert_allclose(res.tau_bottom_up[:, joints][legs], truth[legs], atol=tol_bu * scale)
    np.testing.assert_allclose(res.tau_top_down[:, joints], truth, atol=tol_td * scale)
    np.testing.assert_allclose(res.tau_bottom_up[:, joints], res.tau_top_down[:, joints], atol=(tol_bu + tol_td) * scale)
    # the root: the residual wrench (measured − required; force in N, moment about the CoM in N·m)
    # and the bottom-up free-flyer rows (the same residual, base frame) are small against body
    # weight (per metre): measured 1.2e-4 / 3e-5 noise-free, 0.023 / 0.011 with noise
    weight = model.total_mass * 9.81
    for root in (res.residual_force, res.residual_moment, res.tau_bottom_up[:, :3], res.tau_bottom_up[:, 3:6]):
        assert np.abs(root).max() < tol_root * weight


def test_torques_are_kept_only_where_computable(model, mset):
    """A hand never seen: every joint with the hand below it (wrist, elbow, shoulder, lumbar) and the
    top-down torques are NaN; the legs' bottom-up torques are those of the complete data (they do
    not depend on the arm). A stance foot on no plate and not in swing makes its leg NaN."""
    q, v, a = trajectory(model, 60)
    f, n, _ = pinocchio_truth(model, q, v, a)
    keep = slice(2, -2)
    plate = _plate_under_right_foot(model, q, f, n, keep)
    full_mk = synthetic_markers(model, mset, q)
    part_mk = {k: x for k, x in full_mk.items() if k != "LFIN"}
    out = []
    for mk in (full_mk, part_mk):
        qh = joint_coordinates(model, mset, fit_segments(model, mset, mk))
        vh, ah = joint_rates(model, qh, FS)
        out.append(marker_inverse_dynamics(model, qh[keep], vh[keep], ah[keep], [plate], ("foot_r", "foot_l"),
                                           swing=np.column_stack([np.zeros(56, bool), np.ones(56, bool)]), height_tol=2.0))
    full, part = out
    assert np.isfinite(full.tau_bottom_up).all() and np.isfinite(full.tau_top_down).all()
    hand = model.index["hand_l"]
    above_hand = model.supports[hand][model.dof_segment] > 0          # coordinates with the hand below them
    assert np.isnan(part.tau_bottom_up[:, above_hand]).all() and np.isnan(part.tau_top_down).all()
    assert np.isnan(part.residual_force).all()
    right_leg = model.supports[model.index["foot_r"]][model.dof_segment] > 0
    right_leg[:6] = False
    np.testing.assert_allclose(part.tau_bottom_up[:, right_leg], full.tau_bottom_up[:, right_leg], rtol=1e-9)
    qh = joint_coordinates(model, mset, fit_segments(model, mset, full_mk))
    vh, ah = joint_rates(model, qh, FS)
    nobody = marker_inverse_dynamics(model, qh[keep], vh[keep], ah[keep], [plate], ("foot_r", "foot_l"), swing=None,
                                     height_tol=2.0)  # the left foot: no plate, no events
    left_leg = model.supports[model.index["foot_l"]][model.dof_segment] > 0
    left_leg[:6] = False
    assert np.isnan(nobody.tau_bottom_up[:, left_leg]).all() and np.isfinite(nobody.tau_bottom_up[:, right_leg]).all()


def test_per_foot_wrenches_obey_the_momentum_law(model):
    """foot_inverse_dynamics (ground reactions given per foot, an OpenSim GRF file): the required
    ground wrench split between the feet (60-40 % varying in time), taken from Pinocchio's
    centroidal momentum rate (f = ḣ_lin − M g⃗, moment about the CoM = ḣ_ang). Exact: residual 0,
    bottom-up = top-down = Pinocchio's rnea under the same foot wrenches. With 5, −3, 20 N more on
    the left foot: the residual is that force (and −c × ΔF about the CoM), bottom-up still equals
    Pinocchio's rnea under the wrenches applied."""
    import pinocchio as pin

    from dynamics.human15_markers import foot_inverse_dynamics

    q, v, a = trajectory(model, n=40)
    pm = to_pinocchio(model)
    pd = pm.createData()
    n = len(q)
    g = np.array([0.0, 0.0, -9.81])
    f_req, n_req, com = np.zeros((n, 3)), np.zeros((n, 3)), np.zeros((n, 3))
    for k in range(n):
        dh = pin.computeCentroidalMomentumTimeVariation(pm, pd, q[k], v[k], a[k])
        com[k] = pd.com[0]
        f_req[k] = dh.linear - model.total_mass * g
        n_req[k] = dh.angular + np.cross(com[k], f_req[k])  # about the lab origin
    share = 0.6 + 0.2 * np.sin(np.arange(n) / 7)[:, None]
    feet = ("foot_r", "foot_l")
    for extra in (np.zeros(3), np.array([5.0, -3.0, 20.0])):
        w = np.zeros((n, 2, 6))
        w[:, 0] = share * np.hstack([f_req, n_req])
        w[:, 1] = (1 - share) * np.hstack([f_req, n_req])
        w[:, 1, :3] += extra
        kin = foot_inverse_dynamics(model, q, v, a, w, feet)
        scale = np.abs(f_req).max()
        np.testing.assert_allclose(kin.residual_force, np.broadcast_to(extra, (n, 3)), atol=1e-8 * scale)
        np.testing.assert_allclose(kin.residual_moment, -np.cross(com, extra), atol=1e-8 * scale)
        tau = np.zeros((n, model.nv))
        for k in range(n):
            pin.forwardKinematics(pm, pd, q[k])
            fext = [pin.Force.Zero() for _ in range(pm.njoints)]
            for i, f in enumerate(feet):
                jid = pm.getJointId(model.segment(f).joint_name)
                fext[jid] = pd.oMi[jid].actInv(pin.Force(w[k, i, :3], w[k, i, 3:]))
            tau[k] = pin.rnea(pm, pd, q[k], v[k], a[k], fext)
        peak = np.abs(tau[:, 6:]).max()
        np.testing.assert_allclose(kin.tau_bottom_up[:, 6:], tau[:, 6:], atol=1e-9 * peak)
        if not extra.any():
            np.testing.assert_allclose(kin.tau_top_down[:, 6:], tau[:, 6:], atol=1e-9 * peak)
    # top-down of the right leg: its foot carries what the motion requires beyond the left foot's
    # measured load (ΔF included), so its joints see w_req − W_left on the right foot
    td = np.zeros((n, model.nv))
    for k in range(n):
        pin.forwardKinematics(pm, pd, q[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        for f, wk in (("foot_r", np.hstack([f_req[k], n_req[k]]) - w[k, 1]), ("foot_l", w[k, 1])):
            jid = pm.getJointId(model.segment(f).joint_name)
            fext[jid] = pd.oMi[jid].actInv(pin.Force(wk[:3], wk[3:]))
        td[k] = pin.rnea(pm, pd, q[k], v[k], a[k], fext)
    right_leg = [model.idx_v[model.index[s]] for s in ("thigh_r", "shank_r", "foot_r")]
    np.testing.assert_allclose(kin.tau_top_down[:, right_leg], td[:, right_leg], atol=1e-9 * peak)
    assert kin.foot_known.all()
    w[5, 1] = np.nan  # the left foot's load unknown in frame 5: its leg's bottom-up torques are NaN there
    kin = foot_inverse_dynamics(model, q, v, a, w, feet)
    left = model.idx_v[model.index["shank_l"]]
    right = model.idx_v[model.index["shank_r"]]
    assert np.isnan(kin.tau_bottom_up[5, left]) and np.isfinite(kin.tau_bottom_up[5, right])
    assert np.isnan(kin.residual_force[5]).all() and np.isfinite(kin.residual_force[4]).all()


def test_exact_markers_of_a_taller_subject_return_the_joint_trajectories(mset):
    """human15 scaled to 1.90 m (dynamics.anthropometry): the set's positions scale by the thigh
    ratio; the joint centres that complete the two-marker thigh and upper arm come from the scaled
    model as they are (scaling them again put the hip 9 % of its offset too far out)."""
    from dynamics.anthropometry import human15_table
    from dynamics.human15_markers import scale
    from dynamics.loader import model_from_dict

    tall = model_from_dict(human15_table(85.0, 1.90), "human15")
    s = scale(mset, tall)
    assert s == pytest.approx(1.90 / 1.741, rel=1e-3)
    q, _, _ = trajectory(tall, n=60)
    big = type(mset)(mset.name, mset.model, {k: {m: s * p for m, p in t.items()} for k, t in mset.segments.items()})
    qh = joint_coordinates(tall, mset, fit_segments(tall, mset, synthetic_markers(tall, big, q)))
    np.testing.assert_allclose(qh[:, 7:], q[:, 7:], atol=1e-9)


def test_static_calibration_places_the_subjects_markers(model, mset):
    """A subject whose markers sit up to 3 cm from the set's positions (the pelvis's where the set
    has them): with the set's positions the joint angles are degrees off; calibrated from a static
    trial (the model's neutral posture, turned 0.4 rad and moved, 1 s at 200 Hz) they are the
    trajectories again, to 1e-9 rad."""
    from scipy.spatial.transform import Rotation

    from dynamics.human15_markers import MarkerSet, calibrate

    rng = np.random.default_rng(8)
    # a marker listed on two segments (LKNE, LANK, LELB, LWRA...) sits on the hinge axis between
    # them, rigid on both only there: those stay where the set has them
    shared = {m for m in mset.labels if sum(m in t for t in mset.segments.values()) > 1}
    moved = {seg: {m: p + (0 if seg == "pelvis" or m in shared else rng.uniform(-0.03, 0.03, 3))
                   for m, p in t.items()} for seg, t in mset.segments.items()}
    subject = MarkerSet("subject", "human15", moved)
    q0 = np.tile(model.neutral(), (200, 1))
    q0[:, :3] = [0.3, -0.2, 0.9]
    q0[:, 3:7] = Rotation.from_euler("z", 0.4).as_quat()
    static = synthetic_markers(model, subject, q0)
    q, _, _ = trajectory(model, n=80)
    walk = synthetic_markers(model, subject, q)
    before = joint_coordinates(model, mset, fit_segments(model, mset, walk))
    assert np.nanmax(np.abs(before[:, 7:] - q[:, 7:])) > np.radians(3)
    cal = calibrate(model, mset, static)
    after = joint_coordinates(model, cal, fit_segments(model, cal, walk))
    np.testing.assert_allclose(after[:, 7:], q[:, 7:], atol=1e-9)
    np.testing.assert_allclose(after[:, :3], q[:, :3], atol=1e-9)


def test_a_foot_with_a_point_on_the_floor_beside_an_unloaded_plate_has_an_unknown_load(model):
    """The right foot's toe over an unloaded plate, its heel on the bare floor beside it (0.05 m outside
    the outline, at the surface's height): the floor may carry the foot's load, which no plate measures —
    its load is unknown and the right leg's bottom-up torques NaN. It was taken as on the unloaded plate:
    load known zero, finite torques of a weightless leg (found on the exoskeleton world: the stance hip
    and knee 50 N m off). The same plate under the whole foot: known zero. Geometry: the contact points
    by forward kinematics of the neutral posture."""
    q = model.neutral()[None].astype(float)
    z = np.zeros((1, model.nv))
    heel, toe = contact_positions(model, q, ["heel_r", "toe_r"])[0]
    surface = min(heel[2], toe[2]) - 1e-3

    def plate(x_lo, x_hi):
        y_lo, y_hi = toe[1] - 0.1, toe[1] + 0.1
        corners = np.array([[x_hi, y_hi, surface], [x_lo, y_hi, surface], [x_lo, y_lo, surface], [x_hi, y_lo, surface]])
        return PlateLoad(np.zeros((1, 3)), np.zeros((1, 3)), corners, np.zeros(1, bool), "P")

    assert toe[0] - heel[0] > 0.2                                  # the foot points along +x
    toe_only = plate(heel[0] + 0.6 * (toe[0] - heel[0]), toe[0] + 0.1)     # the heel 0.15 m behind its edge
    whole = plate(heel[0] - 0.1, toe[0] + 0.1)
    knee = model.idx_v[model.index["shank_r"]]
    part = marker_inverse_dynamics(model, q, z, z, [toe_only], ("foot_r",), None, 0.15, 0.03)
    full = marker_inverse_dynamics(model, q, z, z, [whole], ("foot_r",), None, 0.15, 0.03)
    assert not part.foot_known[0, 0] and np.isnan(part.tau_bottom_up[0, knee])
    assert full.foot_known[0, 0] and np.isfinite(full.tau_bottom_up[0, knee])


@pytest.mark.parametrize("jit", [True, False])
def test_batched_segment_fits_equal_scipys_fit_of_each_segment_in_turn(model, mset, jit):
    """All 15 segments fitted at once (`fit_segments`; compiled: kernels.markers.segment_fits, numpy
    path: one batched SVD, then the segments seeing < 3 markers level by level) equal the documented
    fit done segment by segment, parents first, with scipy's Rotation.align_vectors: the segment's seen
    markers, plus its proximal joint centre placed by the parent's fit where fewer than 3 are seen; NaN
    where that has < 3 points or only collinear ones (the hand without LFIN: the wrist markers and
    centre on the wrist axis). Noisy markers (3 mm), 30 % hidden at random (NaN)."""
    from scipy.spatial.transform import Rotation

    from dynamics import kernels
    from dynamics.human15_markers import chains, scale

    q, _, _ = trajectory(model, 60)
    mk = synthetic_markers(model, mset, q, 0.003, 5)
    rng = np.random.default_rng(11)
    for label in mk:
        mk[label][rng.random(len(q)) < 0.3] = np.nan
    with kernels.use_jit(jit):
        fits = fit_segments(model, mset, mk)
    s = scale(mset, model)
    link = {c.segment: c for c in chains(model, mset)}
    oracle_R, oracle_t = {}, {}
    counts = {"fitted": 0, "with the joint centre": 0, "too few": 0, "collinear": 0}
    for seg in (x.name for x in model.segments if x.name in mset.segments):
        table = mset.segments[seg]
        oracle_R[seg], oracle_t[seg] = np.full((len(q), 3, 3), np.nan), np.full((len(q), 3), np.nan)
        for i in range(len(q)):
            ref = [s * p for m, p in table.items() if np.isfinite(mk[m][i]).all()]
            obs = [mk[m][i] for m in table if np.isfinite(mk[m][i]).all()]
            c = link.get(seg)
            if len(ref) < 3 and c is not None and np.isfinite(oracle_R[c.parent][i]).all():
                ref.append(np.zeros(3))
                obs.append(oracle_R[c.parent][i] @ c.centre + oracle_t[c.parent][i])
            r, x = np.array(ref).reshape(-1, 3), np.array(obs).reshape(-1, 3)
            if len(r) < 3 or np.linalg.matrix_rank(r - r.mean(axis=0), tol=1e-6) < 2:
                counts["too few" if len(r) < 3 else "collinear"] += 1
                assert np.isnan(fits.rotation[seg][i]).all() and np.isnan(fits.translation[seg][i]).all()
                continue
            counts["with the joint centre" if len(r) > sum(np.isfinite(mk[m][i]).all() for m in table)
                   else "fitted"] += 1
            R = Rotation.align_vectors(x - x.mean(axis=0), r - r.mean(axis=0))[0].as_matrix()
            oracle_R[seg][i], oracle_t[seg][i] = R, x.mean(axis=0) - R @ r.mean(axis=0)
            np.testing.assert_allclose(fits.rotation[seg][i], R, atol=1e-9, err_msg=f"{seg} frame {i}")
            np.testing.assert_allclose(fits.translation[seg][i], oracle_t[seg][i], atol=1e-9)
    assert min(counts.values()) > 0 and counts["fitted"] > 100 and counts["with the joint centre"] > 100, counts


def _turning_trajectory(model, n):
    """trajectory(model, n) with the base turning from −2.5 to +2.5 rad about a tilted axis (scipy's
    quaternion of it changes hemisphere) and the left elbow swinging through ±π (its angle wraps)."""
    from scipy.spatial.transform import Rotation

    q, _, _ = trajectory(model, n)
    t = np.arange(n) / FS
    u = np.array([0.1, 0.2, 1.0]) / np.linalg.norm([0.1, 0.2, 1.0])
    q[:, 3:7] = Rotation.from_rotvec((-2.5 + 5.0 * t / t[-1])[:, None] * u).as_quat()
    q[:, model.idx_q[model.index["forearm_l"]]] = 1.6 + 2.0 * np.sin(2 * np.pi * 0.8 * t)
    return q


def _rows(fits, a, b):
    """The SegmentFits of frames a:b."""
    from dynamics.human15_markers import SegmentFits

    return SegmentFits(*({g: x[a:b] for g, x in d.items()} for d in (fits.rotation, fits.translation, fits.residual)))


@pytest.mark.parametrize("hidden", [0.0, 0.3])
def test_compiled_joint_coordinates_equal_the_numpy_path_in_any_blocks(model, mset, hidden):
    """kernels.markers.joint_coordinates (scipy's matrix → quaternion → Euler conversions and np.unwrap
    written out) against the numpy path (scipy's Rotation, np.unwrap) on the whole record, fed the
    record at once, sample by sample and 2 samples at a time (carrying `previous`): the same NaN and
    every number to 1e-12 (rad, m). The motion turns the base's quaternion through a hemisphere change
    and the elbow through ±π; markers 2 mm noisy, none or 30 % of them hidden at random. The truth
    behind both: the trajectory itself (exact markers, `test_exact_markers_return_the_joint_trajectories`)."""
    from dynamics.human15_markers import chains, fit_plan

    q = _turning_trajectory(model, 160)
    mk = synthetic_markers(model, mset, q, 0.002, 4)
    rng = np.random.default_rng(12)
    for label in mk:
        mk[label][rng.random(len(q)) < hidden] = np.nan
    fits = fit_segments(model, mset, mk)
    with kernels.use_jit(False):
        truth = joint_coordinates(model, mset, fits)
    from scipy.spatial.transform import Rotation

    elbow = model.idx_q[model.index["forearm_l"]]
    R0 = fits.rotation[model.segments[0].name]
    raw = Rotation.from_matrix(R0[np.isfinite(R0).all(axis=(1, 2))]).as_quat()
    assert (np.einsum("ij,ij->i", raw[1:], raw[:-1]) < 0).any()        # scipy's quaternion changes hemisphere
    assert np.nanmax(np.abs(truth[:, elbow])) > np.pi
    assert (np.isnan(truth).mean() > 0.2) == (hidden > 0)
    links = chains(model, mset)
    plan = fit_plan(model, mset, links)
    with kernels.use_jit(True):
        whole = joint_coordinates(model, mset, fits)
        for step in (1, 2):
            parts, previous = [], np.full(model.nq, np.nan)
            for a in range(0, len(q), step):
                part = joint_coordinates(model, mset, _rows(fits, a, a + step), previous, links, plan)
                seen = np.isfinite(part)
                last = part[::-1][np.argmax(seen[::-1], axis=0), np.arange(model.nq)]
                previous = np.where(seen.any(axis=0), last, previous)
                parts.append(part)
            np.testing.assert_allclose(np.concatenate(parts), truth, rtol=0, atol=1e-12, err_msg=f"{step}-sample blocks")
    np.testing.assert_allclose(whole, truth, rtol=0, atol=1e-12)
    with kernels.use_jit(True), pytest.raises(MarkerError, match=r"previous must be \(33,\)"):
        joint_coordinates(model, mset, fits, np.zeros(7), links, plan)


@pytest.mark.parametrize("hidden", [0.0, 0.3])
def test_compiled_joint_rates_equal_the_numpy_path_in_any_windows(model, mset, hidden):
    """kernels.markers.joint_rates (np.gradient's differences and the free flyer's Rᵀ ṫ, vee(Rᵀ Ṙ) as
    loops) against the numpy path (np.gradient, scipy's quaternion → matrix) on the same q: the whole
    record, and 5-sample windows (the live service's: a sample and its 2 neighbours each side), whose
    middle rows are the record's interior values. NaN where the numpy path has it, numbers to 1e-12
    relative. The truth behind both: the analytic rates (`test_rates_converge_to_the_analytic_ones`)."""
    q = _turning_trajectory(model, 80)
    mk = synthetic_markers(model, mset, q, 0.002, 6)
    rng = np.random.default_rng(13)
    for label in mk:
        mk[label][rng.random(len(q)) < hidden] = np.nan
    with kernels.use_jit(False):
        qh = joint_coordinates(model, mset, fit_segments(model, mset, mk))
        v, a = joint_rates(model, qh, FS)
    assert (np.isnan(a).mean() > 0.3) == (hidden > 0)
    scale_v, scale_a = np.nanmax(np.abs(v)), np.nanmax(np.abs(a))
    with kernels.use_jit(True):
        vc, ac = joint_rates(model, qh, FS)
        np.testing.assert_allclose(vc, v, rtol=0, atol=1e-12 * scale_v)
        np.testing.assert_allclose(ac, a, rtol=0, atol=1e-12 * scale_a)
        for i in range(2, len(q) - 2):
            vw, aw = joint_rates(model, qh[i - 2:i + 3], FS)
            np.testing.assert_allclose(vw[2], v[i], rtol=0, atol=1e-12 * scale_v)
            np.testing.assert_allclose(aw[2], a[i], rtol=0, atol=1e-12 * scale_a)
        with pytest.raises(ValueError, match="at least 3 samples"):
            joint_rates(model, qh[:2], FS)
        with pytest.raises(MarkerError, match=r"q must be \(N, 33\)"):
            joint_rates(model, qh[:, :-1], FS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_marker_inverse_dynamics_equals_the_numpy_path(model, seed):
    """kernels.marker_id (the known coordinates and the finite input; the feet on the bare floor, which
    feet's load is known, the torques kept where computable) against the numpy path (`_filled`,
    `_on_floor`, `_masked`, the numpy plate inverse dynamics) on random input that takes every branch:
    a coordinate's q, v or a hidden at random in a tenth of the samples; three plates in a row along the
    walk (gaps of 1 and 20 cm: feet straddle them, step between them onto the bare floor, two feet share
    one), each loaded at random (70 %) with random wrenches, 10 % of their samples NaN; a height tolerance
    (8 cm) the feet's points rise above; the feet known in swing at random (or no swing). The same booleans
    and NaN, every number to 1e-9 relative — on the whole record and in 2-sample batches (the live
    service's). The truth behind the numpy path: Pinocchio (`test_moments_bottom_up_top_down_and_pinocchio_agree`)
    and the rules' own tests above."""
    from dynamics.human15_markers import _filled, _measured, _on_floor

    n, feet = 120, ("foot_l", "foot_r")
    q, v, a = trajectory(model, n)
    rng = np.random.default_rng(seed)
    for x in (q, v, a):
        x[rng.random(x.shape) < 0.003] = np.nan
    pts = contact_positions(model, trajectory(model, n)[0], [c for f in feet for c in model.segment(f).contacts])
    x0, x1 = pts[..., 0].min() - 0.05, pts[..., 0].max() + 0.05
    y0, y1 = pts[..., 1].min() - 0.05, pts[..., 1].max() + 0.05
    z = float(np.median(pts[..., 2].min(axis=1))) - 0.01
    edges = [(x0, x0 + 0.35 * (x1 - x0)), (x0 + 0.35 * (x1 - x0) + 0.01, x0 + 0.6 * (x1 - x0)),
             (x0 + 0.6 * (x1 - x0) + 0.2, x1)]
    plates = []
    for k, (lo, hi) in enumerate(edges):
        corners = np.array([[hi, y1, z], [lo, y1, z], [lo, y0, z], [hi, y0, z]])
        f = rng.normal(0, 50, (n, 3)) + [0, 0, 400]
        m = rng.normal(0, 20, (n, 3))
        f[rng.random(n) < 0.1] = np.nan
        plates.append(PlateLoad(f, m, corners, rng.random(n) < 0.7, f"P{k}"))
    with kernels.use_jit(False):            # every branch is taken: a foot on the floor beside the plates
        assert _on_floor(model, _filled(model, q, v, a)[1], _measured(plates), feet, 0.08, 0.03).any(axis=0).all()
    for swing in (None, rng.random((n, 2)) < 0.3):
        with kernels.use_jit(False):
            ref = marker_inverse_dynamics(model, q, v, a, plates, feet, swing, 0.08, 0.03)
        assert ref.foot_known.any() and (~ref.foot_known).any()
        assert np.isnan(ref.tau_bottom_up[:, 6:]).any() and np.isfinite(ref.tau_bottom_up[:, 6:]).any()
        assert np.isfinite(ref.residual_force).any() and np.isnan(ref.residual_force).any()
        scale = np.nanmax(np.abs(ref.tau_bottom_up))
        with kernels.use_jit(True):
            whole = marker_inverse_dynamics(model, q, v, a, plates, feet, swing, 0.08, 0.03)
            parts = [marker_inverse_dynamics(model, q[i:i + 2], v[i:i + 2], a[i:i + 2],
                                             [PlateLoad(p.force[i:i + 2], p.moment[i:i + 2], p.corners,
                                                        p.loaded[i:i + 2], p.name) for p in plates],
                                             feet, None if swing is None else swing[i:i + 2], 0.08, 0.03)
                     for i in range(0, n, 2)]
        for rows, got in [(slice(None), whole)] + [(slice(2 * k, 2 * k + 2), p) for k, p in enumerate(parts)]:
            for name in ("foot_known", "plate_below", "indeterminate"):
                np.testing.assert_array_equal(getattr(got, name), getattr(ref, name)[rows], err_msg=name)
            for name in ("tau_bottom_up", "tau_top_down", "residual_force", "residual_moment", "foot_wrench"):
                np.testing.assert_allclose(getattr(got, name), getattr(ref, name)[rows], rtol=0, atol=1e-9 * scale,
                                           err_msg=name)
            assert got.feet == ref.feet
    with kernels.use_jit(True), pytest.raises(MarkerError, match=r"q, v, a must be \(N, 33\)"):
        marker_inverse_dynamics(model, q[:, :-1], v, a, plates, feet)


def test_compiled_segment_fit_equals_the_svd_fit_on_random_clusters():
    """kernels.markers.segment_fits (its rotation by Horn's quaternion, Jacobi) against `markers.rigid_fit`
    (the numpy SVD of Kabsch / Söderkvist-Wedin) on 600 random clusters of 3-6 markers, 1-30 cm across,
    a third of them flat (3 markers are always planar) down to 1e-3 of their size, in any rotation, observed
    with 0.01-10 mm noise: the same rotation and translation to 1e-12 where the fit is well conditioned
    ((σ₂ + σ₃)/σ₁ of H above 1e-3; below it both are exact to ~1e-15/((σ₂ + σ₃)/σ₁)); the same residual;
    each rotation proper (det +1)."""
    from scipy.spatial.transform import Rotation

    from dynamics.markers import rigid_fit

    rng = np.random.default_rng(21)
    fit = kernels.kernel("markers.segment_fits")
    n_cond = 0
    for trial in range(600):
        k = int(rng.integers(3, 7))
        ref = rng.normal(size=(k, 3)) * rng.uniform(0.01, 0.3, 3)
        if trial % 3 == 0:
            ref[:, 2] *= 10 ** rng.uniform(-3, 0)
        R = Rotation.random(random_state=int(rng.integers(1 << 30))).as_matrix()
        obs = ref @ R.T + rng.normal(size=3) + rng.normal(scale=10 ** rng.uniform(-5, -2), size=(k, 3))
        truth = rigid_fit(ref, obs[None])
        rot, tr, res = np.empty((1, 1, 3, 3)), np.empty((1, 1, 3)), np.empty((1, 1))
        fit(np.concatenate([obs, np.full((1, 3), np.nan)])[None], np.arange(k)[None].astype(np.int64),
            np.concatenate([ref, np.zeros((1, 3))])[None], np.array([-1]), np.zeros((1, 3)), rot, tr, res)
        r0, x0 = ref - ref.mean(axis=0), obs - obs.mean(axis=0)
        sv = np.linalg.svd(r0.T @ x0, compute_uv=False)
        cond = (sv[1] + sv[2]) / sv[0]
        tol = 1e-12 if cond > 1e-3 else 1e-14 / cond
        n_cond += cond > 1e-3
        np.testing.assert_allclose(rot[0, 0], truth.rotation[0], rtol=0, atol=tol, err_msg=f"trial {trial}")
        np.testing.assert_allclose(tr[0, 0], truth.translation[0], rtol=0, atol=tol)
        np.testing.assert_allclose(res[0, 0], truth.residual[0], rtol=1e-9, atol=1e-15)
        assert np.linalg.det(rot[0, 0]) == pytest.approx(1.0, abs=1e-12)
    assert n_cond > 500
