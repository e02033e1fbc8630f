"""Inverse dynamics with measured ground reactions (methods.md b.2, h.2) on simulated human15 data:
the plate wrenches are what the ground must provide, from walklab's centroidal momentum rate, so they
are consistent with the motion (plate_id computes the requirement from the rnea free-flyer rows)."""
import numpy as np
import pytest

from dynamics import Wrench, centroidal_momentum, com, contact_positions, load_model, rnea
from dynamics.forceplate import Plate, process
from dynamics.model import G
from dynamics.plate_id import PlateIDError, PlateLoad, adequacy, assign_plates, plate_inverse_dynamics, plate_load
from dynamics.zmp import ground_wrench

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

N = 40


@pytest.fixture(scope="module")
def human():
    model = load_model("human15")
    rng = np.random.default_rng(7)
    q = np.tile(model.neutral(), (N, 1))
    q[:, 2] = 0.8948
    q[:, 7:] = 0.02 * rng.standard_normal((N, model.nq - 7))  # all joints revolute: q = angles
    for seg, angle in (("hip_flex_l", 0.6), ("shank_l", 1.2)):  # left leg swings, lifted
        q[:, model.idx_q[model.index[seg]]] += angle
    q[:, :3] += 0.005 * rng.standard_normal((N, 3))
    quat = np.column_stack([0.005 * rng.standard_normal((N, 3)), np.ones(N)])
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1)[:, None]
    v = 0.5 * rng.standard_normal((N, model.nv))
    a = 2.0 * rng.standard_normal((N, model.nv))
    # Required ground wrench, lab frame about the origin, from the centroidal momentum rate (plate_id
    # itself takes it from rnea's free-flyer rows: the two routes must agree).
    c = com(model, q)
    _, dh = centroidal_momentum(model, q, v, a)
    f, n = ground_wrench(model.total_mass, c, dh[:, :3], dh[:, 3:])
    tau = rnea(model, q, v, a)
    return model, q, v, a, f, n, tau


def box(points_xy, pad=0.05, z=0.0):
    lo, hi = points_xy.min(axis=0) - pad, points_xy.max(axis=0) + pad
    return np.array([[hi[0], hi[1], z], [lo[0], hi[1], z], [lo[0], lo[1], z], [hi[0], lo[1], z]])


def plate_under(model, q, names, pad=0.05):
    pts = contact_positions(model, q, names)
    return box(pts[..., :2].reshape(-1, 2), pad, z=float(pts[..., 2].min()) - 1e-3)


def joints_of(model, segment):
    """Velocity indices of the joints supporting `segment` (oracle for which rows a foot load moves)."""
    i = model.index[segment]
    return np.flatnonzero(model.supports[i][model.dof_segment] > 0)


def check_bottom_up_is_rnea_with_f_ext(model, q, v, a, res):
    """Bottom-up torques = walklab rnea with the assigned foot wrenches as external wrenches."""
    f_ext = [Wrench(f, res.foot_wrench[:, i, :3], np.zeros(3), res.foot_wrench[:, i, 3:]) for i, f in enumerate(res.feet)]
    ref = rnea(model, q, v, a, f_ext)
    np.testing.assert_allclose(res.tau_bottom_up, ref, atol=1e-9 * np.abs(ref).max())


def test_single_support_consistent_data(human):
    model, q, v, a, f, n, tau_free = human
    corners = plate_under(model, q, ["heel_r", "toe_r"])
    plate = PlateLoad(f, n, corners, f[:, 2] > 20, "FP1")
    res = plate_inverse_dynamics(model, q, v, a, [plate], ["foot_r", "foot_l"])
    assert res.assignment.weights[:, 0, 0].tolist() == [1.0] * N and not res.assignment.weights[:, 0, 1].any()
    assert not (res.assignment.shared.any() or res.assignment.unassigned.any() or res.assignment.straddling.any())
    check_bottom_up_is_rnea_with_f_ext(model, q, v, a, res)
    scale = np.abs(res.tau_bottom_up).max()
    np.testing.assert_allclose(res.tau_bottom_up, res.tau_top_down, atol=1e-9 * scale)
    np.testing.assert_allclose(res.tau_bottom_up[:, :6], 0.0, atol=1e-9 * scale)  # no base residual
    np.testing.assert_allclose(res.residual_force, 0.0, atol=1e-9)
    np.testing.assert_allclose(res.residual_moment, 0.0, atol=1e-9)
    np.testing.assert_allclose(res.com_acc_kinematic, res.com_acc_plates, atol=1e-11)
    assert adequacy(res, 1e-3) < 1e-20
    # the stance leg's torques do depend on the plate; the swing leg's and arms' do not
    stance = joints_of(model, "foot_r")[6:]
    assert np.all(res.plate_below[:, stance]) and not res.plate_below[:, joints_of(model, "foot_l")[6:]].any()
    assert np.abs(res.tau_bottom_up[:, stance] - tau_free[:, stance]).min() > 1e-3
    assert not res.indeterminate.any()


def test_perturbed_plate_residual_equals_perturbation(human):
    model, q, v, a, f, n, _ = human
    corners = plate_under(model, q, ["heel_r", "toe_r"])
    rng = np.random.default_rng(8)
    dF = rng.standard_normal((N, 3)) * [5, 5, 20]
    at = contact_positions(model, q, ["toe_r"])[:, 0]
    dT = np.column_stack([np.zeros((N, 2)), rng.standard_normal(N)])
    plate = PlateLoad(f + dF, n + np.cross(at, dF) + dT, corners, np.ones(N, bool))
    res = plate_inverse_dynamics(model, q, v, a, [plate], ["foot_r", "foot_l"])
    np.testing.assert_allclose(res.residual_force, dF, atol=1e-9)
    np.testing.assert_allclose(res.residual_moment, np.cross(at - res.com, dF) + dT, atol=1e-9)
    np.testing.assert_allclose(res.com_acc_plates - res.com_acc_kinematic, dF / model.total_mass, atol=1e-11)
    # bottom-up − top-down = −S_kᵀ ΔW = the generalised force of ΔW on the stance foot (rnea difference)
    oracle = rnea(model, q, v, a, [Wrench("foot_r", dF, at, dT)]) - rnea(model, q, v, a)
    np.testing.assert_allclose(res.disagreement, oracle, atol=1e-9 * np.abs(oracle).max())
    assert adequacy(res, 1e-3, trim=2) == pytest.approx(1e-3 * np.sum((dF[2:-2] / model.total_mass) ** 2), rel=1e-9)


def test_double_support_split_is_consistent_and_flagged(human):
    model, q, v, a, f, n, _ = human
    right = plate_under(model, q, ["heel_r", "toe_r"])
    left = plate_under(model, q, ["heel_l", "toe_l"])
    # any split that sums to the required wrench is consistent (statically indeterminate)
    cop_l = contact_positions(model, q, ["heel_l"])[:, 0]
    F1 = 0.4 * f + [3.0, -2.0, 0.0]
    W1 = (F1, np.cross(cop_l, F1))
    plates = [PlateLoad(W1[0], W1[1], left, np.ones(N, bool), "L"), PlateLoad(f - W1[0], n - W1[1], right, np.ones(N, bool), "R")]
    res = plate_inverse_dynamics(model, q, v, a, plates, ["foot_r", "foot_l"])
    assert res.assignment.weights[:, 0, 1].all() and res.assignment.weights[:, 1, 0].all()
    check_bottom_up_is_rnea_with_f_ext(model, q, v, a, res)
    scale = np.abs(res.tau_bottom_up).max()
    np.testing.assert_allclose(res.disagreement, 0.0, atol=1e-9 * scale)
    np.testing.assert_allclose(res.residual_force, 0.0, atol=1e-9)
    # base rows have both feet below (and nothing above); each leg's joints have the other foot above
    legs = np.r_[joints_of(model, "foot_r")[6:], joints_of(model, "foot_l")[6:]]
    assert res.indeterminate[:, legs].all() and not res.indeterminate[:, :6].any()


def test_foot_straddling_two_plates_gets_both(human):
    model, q, v, a, f, n, _ = human
    heel = contact_positions(model, q, ["heel_r"])[:, 0]
    toe = contact_positions(model, q, ["toe_r"])[:, 0]
    split = 0.5 * (heel[:, 0].max() + toe[:, 0].min())  # plate boundary between heel and toe
    z = min(heel[:, 2].min(), toe[:, 2].min()) - 1e-3
    y0, y1 = heel[:, 1].min() - 0.05, heel[:, 1].max() + 0.05
    back = np.array([[split, y1, z], [split - 0.6, y1, z], [split - 0.6, y0, z], [split, y0, z]])
    front = back + [0.6, 0.0, 0.0]
    Fh = 0.6 * f
    plates = [PlateLoad(Fh, np.cross(heel, Fh), back, np.ones(N, bool)), PlateLoad(f - Fh, n - np.cross(heel, Fh), front, np.ones(N, bool))]
    res = plate_inverse_dynamics(model, q, v, a, plates, ["foot_r", "foot_l"])
    assert res.assignment.straddling[:, 0].all() and not res.assignment.straddling[:, 1].any()
    assert res.assignment.weights[:, :, 0].all()
    check_bottom_up_is_rnea_with_f_ext(model, q, v, a, res)
    np.testing.assert_allclose(res.disagreement, 0.0, atol=1e-9 * np.abs(res.tau_bottom_up).max())


def test_two_feet_on_one_plate_flagged_and_unassigned_plate(human):
    model, q, v, a, f, n, _ = human
    both = plate_under(model, q, ["heel_r", "toe_r", "heel_l", "toe_l"])
    far = both + [3.0, 0.0, 0.0]
    cop = contact_positions(model, q, ["toe_l"])[:, 0]
    plates = [PlateLoad(f, np.cross(cop, f), both, np.ones(N, bool)), PlateLoad(np.tile([0, 0, 50.0], (N, 1)), np.zeros((N, 3)), far, np.ones(N, bool))]
    asg = assign_plates(plates, contact_positions(model, q, ["heel_r", "toe_r", "heel_l", "toe_l"]), np.array([0, 0, 1, 1]), 2, height_tol=0.3)
    assert asg.shared[:, 0].all() and asg.unassigned[:, 1].all()
    # the whole wrench goes to the foot whose point is nearest the COP: the left foot (COP at its toe)
    assert asg.weights[:, 0, 1].all() and not asg.weights[:, 0, 0].any()


def test_plate_load_from_forceplate_signals_standing():
    # Quiet standing on a type-2 plate (z-down plate axes): the ground reaction on the body is +m g.
    corners = np.array([[0.3, 0.2, 0.0], [-0.3, 0.2, 0.0], [-0.3, -0.2, 0.0], [0.3, -0.2, 0.0]])
    corners = corners[[1, 0, 3, 2]]  # c0 − c1 = −x lab: z-down plate
    plate = Plate(type=2, corners=corners, origin=np.array([0.0, 0.0, -0.04]), name="FP1")
    F_lab = np.array([[0.0, 0.0, 716.0]])
    cop = np.array([0.05, -0.02, 0.0])
    R = plate.rotation
    F = F_lab @ R
    Ms = np.cross(cop - plate.centre, F_lab[0]) @ R
    raw = np.column_stack([F, Ms - np.cross(F, plate.origin)])
    load = plate_load(plate, process(plate, raw))
    np.testing.assert_allclose(load.force, F_lab, atol=1e-12)
    np.testing.assert_allclose(load.moment, np.cross(cop, F_lab), atol=1e-12)
    assert load.loaded.all()


def test_errors_named(human):
    model, q, v, a, f, n, _ = human
    with pytest.raises(PlateIDError, match="corners"):
        plate_inverse_dynamics(model, q, v, a, [PlateLoad(f, n, np.zeros((3, 3)), np.ones(N, bool))], ["foot_r"])
    ok = PlateLoad(f, n, plate_under(model, q, ["heel_r", "toe_r"]), np.ones(N, bool))
    with pytest.raises(PlateIDError, match="no contact points"):
        plate_inverse_dynamics(model, q, v, a, [ok], ["thigh_r"])
    with pytest.raises(PlateIDError, match="at least one PlateLoad"):
        plate_inverse_dynamics(model, q, v, a, [], ["foot_r"])
    with pytest.raises(KeyError, match="foot_x"):
        plate_inverse_dynamics(model, q, v, a, [ok], ["foot_x"])


def test_live_calls_equal_batch_and_workspace_per_foot_set(human):
    """The per-model workspace (cached) changes nothing: 1-sample calls equal the batch rows, another foot
    order or the explicit point mapping is its own workspace, and bad input is refused on every call."""
    model, q, v, a, f, n, _ = human
    corners = plate_under(model, q, ["heel_r", "toe_r"])
    plate = PlateLoad(f, n, corners, f[:, 2] > 20, "FP1")
    batch = plate_inverse_dynamics(model, q, v, a, [plate], ["foot_r", "foot_l"])
    for t in (0, 17, N - 1):
        one = PlateLoad(f[t:t + 1], n[t:t + 1], corners, plate.loaded[t:t + 1], "FP1")
        live = plate_inverse_dynamics(model, q[t], v[t], a[t], [one], ["foot_r", "foot_l"])
        np.testing.assert_allclose(live.tau_bottom_up[0], batch.tau_bottom_up[t], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(live.tau_top_down[0], batch.tau_top_down[t], rtol=1e-12, atol=1e-9)
    swapped = plate_inverse_dynamics(model, q, v, a, [plate], ["foot_l", "foot_r"])
    assert swapped.feet == ("foot_l", "foot_r")
    np.testing.assert_array_equal(swapped.foot_wrench, batch.foot_wrench[:, ::-1])
    mapped = plate_inverse_dynamics(model, q, v, a, [plate], {"foot_r": ["heel_r", "toe_r"], "foot_l": ["heel_l", "toe_l"]})
    np.testing.assert_array_equal(mapped.foot_wrench, batch.foot_wrench)
    for _ in range(2):  # a refused foot set is not cached as valid
        with pytest.raises(PlateIDError, match="no contact points"):
            plate_inverse_dynamics(model, q, v, a, [plate], ["thigh_r"])


@pytest.mark.parametrize(
    "name, markers",
    [
        ("gait-raw.c3d", ["LTOE", "LANK", "RTOE", "RANK"]),  # its heel markers are empty
        ("Walking_Hybrid_1_1.c3d", ["L_HEEL", "L_MT_1", "L_MT_5", "R_HEEL", "R_MT_1", "R_MT_5"]),
    ],
)
def test_real_gait_one_foot_per_plate(shared_data, name, markers):
    """Real walks over two plates (data README: one foot on each plate, consecutive stances): by foot
    markers, every loaded sample of a plate goes to one and the same foot, a different foot on each
    plate; where the swing foot passes over a loaded plate (shared) the nearest-COP rule keeps the stance foot."""
    from daq.formats import c3d

    trial = c3d.load(shared_data / name, zero=True)
    labels = list(trial.markers.labels)
    pts = trial.markers.positions[:, [labels.index(m) for m in markers]]
    n_m = pts.shape[0]
    step = trial.plates[0].force.shape[0] // n_m  # analog samples per marker frame
    loads = []
    for k, p in enumerate(trial.plates):
        F, cop, T, ok = p.force[::step][:n_m], p.cop[::step][:n_m], p.free_moment[::step][:n_m], p.valid[::step][:n_m]
        moment = np.where(ok[:, None], np.cross(np.nan_to_num(cop), F) + np.nan_to_num(T), 0.0)
        loads.append(PlateLoad(F, moment, p.corners, ok, f"FP{k + 1}"))
    half = len(markers) // 2
    asg = assign_plates(loads, pts, np.repeat([0, 1], half), 2, height_tol=0.08)
    feet = []
    for k, load in enumerate(loads):
        assert load.loaded.sum() > 20
        w = asg.weights[load.loaded, k]
        assert not asg.unassigned[:, k].any()
        assert np.all(w.sum(axis=1) == 1)  # one foot at every loaded sample
        foot = int(np.argmax(w.sum(axis=0)))
        assert np.all(w[:, foot] == 1), f"{name} plate {k}: the foot changes during the stance"
        feet.append(foot)
    assert sorted(feet) == [0, 1]
    assert asg.shared.any()  # the swing foot did pass over a loaded plate, and did not get its wrench


def test_flight_phase_is_ballistic(human):
    """Flight (methods.md b.5): motion from forward dynamics with no base wrench and no ground; unloaded
    plates. The CoM falls at g, k_G is constant (zero moment residual) and the residual vanishes."""
    from dynamics import forward_dynamics

    model, q, v, *_ = human
    rng = np.random.default_rng(9)
    tau = np.column_stack([np.zeros((N, 6)), 5.0 * rng.standard_normal((N, model.nv - 6))])
    a = forward_dynamics(model, q, v, tau)
    zero = np.zeros((N, 3))
    plate = PlateLoad(zero, zero, plate_under(model, q, ["heel_r", "toe_r"]), np.zeros(N, bool))
    res = plate_inverse_dynamics(model, q, v, a, [plate], ["foot_r", "foot_l"])
    np.testing.assert_allclose(res.com_acc_kinematic, np.tile([0, 0, -G], (N, 1)), atol=1e-9)
    np.testing.assert_allclose(res.residual_force, 0.0, atol=1e-8)
    np.testing.assert_allclose(res.residual_moment, 0.0, atol=1e-8)
    np.testing.assert_allclose(res.tau_bottom_up, tau, atol=1e-8)
    assert not res.plate_below.any() and not res.assignment.weights.any()

