"""ZMP from kinematics (methods.md d.3, d.4) against Pinocchio and a simulated force plate."""
import numpy as np
import pinocchio as pin
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamics.forceplate import Plate, process
from dynamics.model import G
from dynamics.zmp import (
    ZMPError,
    ground_wrench,
    zmp_centroidal,
    zmp_deviation,
    zmp_of_wrench,
    zmp_planar,
    zmp_point_masses_planar,
)

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path


@pytest.fixture(scope="module")
def humanoid():
    model = pin.buildSampleModelHumanoid()
    return model, model.createData()


def random_state(model, rng, scale=1.0):
    q = pin.randomConfiguration(model, -np.ones(model.nq), np.ones(model.nq))
    q[:3] = [0.1, -0.05, 0.9]
    q[3:7] = pin.Quaternion(pin.rpy.rpyToMatrix(*(0.2 * rng.standard_normal(3)))).coeffs()
    return q, scale * rng.standard_normal(model.nv), scale * rng.standard_normal(model.nv)


def base_ground_wrench(model, data, q, v, a):
    """Wrench the ground must supply (free-flyer rows of RNEA), lab frame, moment about the lab origin."""
    tau = pin.rnea(model, data, q, v, a)
    pin.forwardKinematics(model, data, q)
    R, p = data.oMi[1].rotation, data.oMi[1].translation
    f = R @ tau[:3]
    return f, R @ tau[3:6] + np.cross(p, f)


def test_static_zmp_is_com_ground_projection(humanoid):
    model, data = humanoid
    rng = np.random.default_rng(0)
    mass = pin.computeTotalMass(model)
    for _ in range(5):
        q, _, _ = random_state(model, rng)
        zero = np.zeros(model.nv)
        f, n = base_ground_wrench(model, data, q, zero, zero)
        com = pin.centerOfMass(model, data, q)
        np.testing.assert_allclose(f, [0, 0, mass * G], atol=1e-10)
        p = zmp_of_wrench(f[None], n[None], ground_z=0.0).point[0]
        np.testing.assert_allclose(p, [com[0], com[1], 0.0], atol=1e-12)
        pin.computeCentroidalMomentumTimeVariation(model, data, q, zero, zero)
        p2 = zmp_centroidal(mass, data.com[0], data.dhg.linear, data.dhg.angular).point[0]
        np.testing.assert_allclose(p2, [com[0], com[1], 0.0], atol=1e-12)


def test_centroidal_zmp_equals_rnea_base_wrench_zmp(humanoid):
    model, data = humanoid
    rng = np.random.default_rng(1)
    mass = pin.computeTotalMass(model)
    rows = []
    for _ in range(20):
        q, v, a = random_state(model, rng, 0.5)
        f, n = base_ground_wrench(model, data, q, v, a)
        pin.computeCentroidalMomentumTimeVariation(model, data, q, v, a)
        rows.append((f, n, data.com[0].copy(), data.dhg.linear.copy(), data.dhg.angular.copy()))
    f, n, com, pdot, ldot = (np.array(x) for x in zip(*rows))
    fk, nk = ground_wrench(mass, com, pdot, ldot)
    np.testing.assert_allclose(fk, f, atol=1e-9)
    np.testing.assert_allclose(nk, n, atol=1e-9)
    kin = zmp_centroidal(mass, com, pdot, ldot, ground_z=0.02, min_fraction=0.05)
    ref = zmp_of_wrench(f, n, ground_z=0.02, min_fz=0.05 * mass * G)
    np.testing.assert_array_equal(kin.valid, ref.valid)
    assert kin.valid.sum() >= 10
    np.testing.assert_allclose(kin.point[kin.valid], ref.point[ref.valid], atol=1e-10)
    assert np.all(np.isnan(kin.point[~kin.valid]))


def plate_raw(plate: Plate, f_lab: np.ndarray, n_origin: np.ndarray) -> np.ndarray:
    """Raw channels of a plate carrying the ground reaction wrench (f_lab, n about the lab origin):
    the plate's inverse mechanics (`Plate.raw_channels`, checked against ezc3d's reader in
    tests/controller/test_simulated_plates.py) of the moment about its surface centre."""
    return plate.raw_channels(f_lab, n_origin - np.cross(plate.centre, f_lab))


def test_plate_cop_equals_kinematic_zmp_single_support(humanoid):
    """A model standing on one foot: its foot on a plate (z-down plate axes, transducer 40 mm below the
    surface), the plate loaded by what the ground must provide. Plate COP = kinematic ZMP to 1e-9 m."""
    model, data = humanoid
    rng = np.random.default_rng(2)
    mass = pin.computeTotalMass(model)
    # lab corners with C3D ordering: c0 − c1 = plate x = −lab x, c0 − c3 = plate y → plate z down
    corners = np.array([[-0.2, 0.3, 0.0], [0.4, 0.3, 0.0], [0.4, -0.3, 0.0], [-0.2, -0.3, 0.0]])
    plate = Plate(type=2, corners=corners, origin=np.array([0.001, -0.002, 0.04]), name="FP1")
    assert plate.rotation[2, 2] == pytest.approx(-1.0)
    rows = []
    for _ in range(30):
        q, v, a = random_state(model, rng, 0.3)
        f, n = base_ground_wrench(model, data, q, v, a)
        pin.computeCentroidalMomentumTimeVariation(model, data, q, v, a)
        rows.append((f, n, data.com[0].copy(), data.dhg.linear.copy(), data.dhg.angular.copy()))
    f, n, com, pdot, ldot = (np.array(x) for x in zip(*rows))
    sig = process(plate, plate_raw(plate, f, n), threshold=20.0)
    kin = zmp_centroidal(mass, com, pdot, ldot, ground_z=0.0, min_fraction=20.0 / (mass * G))
    np.testing.assert_array_equal(sig.valid, kin.valid)
    assert sig.valid.sum() >= 20
    np.testing.assert_allclose(sig.cop[sig.valid], kin.point[kin.valid], atol=1e-9, rtol=0)


def test_planar_centroidal_equals_point_mass_sum_and_3d_form():
    rng = np.random.default_rng(3)
    n_seg, N = 7, 50
    m = rng.uniform(0.5, 10, n_seg)
    J = rng.uniform(0.01, 0.5, n_seg)
    r = rng.uniform([-0.5, 0.05], [0.5, 1.6], (N, n_seg, 2))
    acc = rng.standard_normal((N, n_seg, 2)) * 2
    phidd = rng.standard_normal((N, n_seg)) * 5
    M = m.sum()
    com = np.einsum("i,nid->nd", m, r) / M
    pdot = np.einsum("i,nid->nd", m, acc)
    arm = r - com[:, None]
    kdot = np.einsum("i,ni->n", m, arm[..., 0] * acc[..., 1] - arm[..., 1] * acc[..., 0]) + phidd @ J
    a = zmp_planar(M, com, pdot, kdot)
    b = zmp_point_masses_planar(m, r, acc, J, phidd)
    np.testing.assert_array_equal(a.valid, b.valid)
    np.testing.assert_allclose(a.point[a.valid], b.point[b.valid], atol=1e-12)
    # The planar picture (x, y up, ccw about +z) is the 3-D sagittal plane (x, z up) with L̇_y = −k̇.
    z3 = lambda v: np.column_stack([v[:, 0], np.zeros(len(v)), v[:, 1]])  # noqa: E731
    c = zmp_centroidal(M, z3(com), z3(pdot), np.column_stack([np.zeros(N), -kdot, np.zeros(N)]))
    np.testing.assert_allclose(c.point[c.valid, 0], a.point[a.valid], atol=1e-12)
    np.testing.assert_allclose(c.point[c.valid, 1], 0.0, atol=1e-12)


def test_invalid_in_flight_is_nan_not_inf():
    # Free fall: Ṗ = −M g, no ground reaction; and pulling (f_z < 0).
    M = 70.0
    com = np.array([[0.1, 0, 1.0]] * 3)
    pdot = np.array([[0, 0, -M * G], [0.0, 0, -M * G * 1.5], [0, 0, 0.0]])
    z = zmp_centroidal(M, com, pdot, np.zeros((3, 3)))
    assert z.valid.tolist() == [False, False, True]
    assert np.isnan(z.point[:2]).all() and np.isfinite(z.point[2]).all()
    zp = zmp_planar(M, com[:, [0, 2]], pdot[:, [0, 2]], np.zeros(3))
    assert zp.valid.tolist() == [False, False, True] and np.isnan(zp.point[:2]).all()


def test_deviation_is_vector_from_nominal_to_actual():
    rng = np.random.default_rng(4)
    f = np.column_stack([rng.standard_normal((40, 2)) * 50, rng.uniform(300, 900, 40)])
    n = rng.standard_normal((40, 3)) * 100
    actual = zmp_of_wrench(f, n, ground_z=0.01).point
    nominal = np.column_stack([rng.uniform(-0.2, 0.2, (40, 2)), np.full(40, 0.01)])
    dev = zmp_deviation(f, n, nominal)
    np.testing.assert_allclose(dev.d, actual[:, :2] - nominal[:, :2], atol=1e-12)
    assert dev.max == pytest.approx(np.max(np.linalg.norm(actual[:, :2] - nominal[:, :2], axis=1)))
    at_actual = zmp_deviation(f, n, actual)
    np.testing.assert_allclose(at_actual.norm, 0.0, atol=1e-12)


def test_shape_errors_named():
    with pytest.raises(ZMPError, match="com"):
        zmp_centroidal(70.0, np.zeros((5, 2)), np.zeros((5, 3)), np.zeros((5, 3)))
    with pytest.raises(ZMPError, match="sample counts"):
        zmp_centroidal(70.0, np.zeros((5, 3)), np.zeros((4, 3)), np.zeros((5, 3)))
    with pytest.raises(ZMPError, match="mass"):
        zmp_planar(0.0, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(1))


def test_model_zmp_static_and_plate_cop_with_walklab_dynamics():
    """Same checks on walklab's own dynamics (human15): the static ZMP is the CoM projection, and the plate
    COP of the ground wrench from the free-flyer rows of walklab's rnea equals zmp_model to 1e-9 m."""
    from dynamics import com, forward_kinematics, load_model, rnea
    from dynamics.zmp import zmp_model

    model = load_model("human15")
    rng = np.random.default_rng(5)
    n = 25
    q = np.tile(model.neutral(), (n, 1))
    q[:, 2] = 0.8948
    q[:, 7:] = 0.1 * rng.standard_normal((n, model.nq - 7))
    quat = np.column_stack([0.02 * rng.standard_normal((n, 3)), np.ones(n)])
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1)[:, None]
    zero = np.zeros((n, model.nv))
    static = zmp_model(model, q, zero, zero)
    c = com(model, q)
    np.testing.assert_allclose(static.point, np.column_stack([c[:, :2], np.zeros(n)]), atol=1e-12)
    v, a = 0.5 * rng.standard_normal((n, model.nv)), 1.5 * rng.standard_normal((n, model.nv))
    tau = rnea(model, q, v, a)
    pl = forward_kinematics(model, q)
    R, p = pl.rotation[:, 0], pl.translation[:, 0]
    f = np.einsum("nij,nj->ni", R, tau[:, :3])
    nO = np.einsum("nij,nj->ni", R, tau[:, 3:6]) + np.cross(p, f)
    corners = np.array([[0.3, 0.2, 0.0], [-0.3, 0.2, 0.0], [-0.3, -0.2, 0.0], [0.3, -0.2, 0.0]])
    plate = Plate(type=2, corners=corners, origin=np.array([0.0, 0.0, -0.035]))
    sig = process(plate, plate_raw(plate, f, nO))
    kin = zmp_model(model, q, v, a, min_fraction=20.0 / (model.total_mass * G))
    np.testing.assert_array_equal(sig.valid, kin.valid)
    assert sig.valid.sum() >= 20
    np.testing.assert_allclose(sig.cop[sig.valid], kin.point[kin.valid], atol=1e-9, rtol=0)


def test_model_zmp_planar_chain():
    """A planar model (gravity −y): zmp_model equals the point-mass sum over its segments."""
    from dynamics import Joint, Model, Segment
    from dynamics.kinematics import check_state, lab_inertias, tree_state
    from dynamics.zmp import zmp_model

    ez = np.array([0.0, 0.0, 1.0])
    segs = [Segment("trunk", None, Joint("planar"), 30.0, np.array([0, 0.3, 0]), np.diag([1.0, 1.0, 1.2]))]
    for k, (name, par) in enumerate((("thigh", "trunk"), ("shank", "thigh"))):
        segs.append(Segment(name, par, Joint("revolute", ez, translation=np.array([0, -0.4 if k else 0.0, 0])),
                            6.0 - 2 * k, np.array([0, -0.2, 0]), np.diag([0.1, 0.02, 0.1 + 0.01 * k])))
    model = Model("planar3", tuple(segs), gravity=np.array([0.0, -G, 0.0]))
    rng = np.random.default_rng(6)
    q, v, a = (rng.standard_normal((30, model.nv)) for _ in range(3))
    q[:, 1] += 1.0
    z = zmp_model(model, q, v, a, ground=0.0, min_fraction=0.0)
    (qq, vv, aa), _ = check_state(model, q, v, a)
    st = tree_state(model, qq, vv, aa)
    m, cc, _, _ = lab_inertias(model, st)
    V, A = st.velocity, st.acceleration
    vc = V[..., :3] + np.cross(V[..., 3:], cc)
    ac = A[..., :3] + np.cross(A[..., 3:], cc) + np.cross(V[..., 3:], vc)
    J = np.array([s.inertia[2, 2] for s in model.segments])
    ref = zmp_point_masses_planar(m, cc[..., :2], ac[..., :2], J, A[..., 5], min_fraction=0.0)
    np.testing.assert_array_equal(z.valid, ref.valid)
    np.testing.assert_allclose(z.point[z.valid], ref.point[ref.valid], atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), pz=st.floats(-0.5, 0.5))
def test_horizontal_moment_vanishes_about_the_zmp(seed, pz):
    rng = np.random.default_rng(seed)
    f = np.column_stack([rng.normal(0, 100, (20, 2)), rng.uniform(50, 2000, 20)])
    n = rng.normal(0, 300, (20, 3))
    p = zmp_of_wrench(f, n, ground_z=pz).point
    about_p = n - np.cross(p, f)  # moment of the ground wrench about the ZMP
    np.testing.assert_allclose(about_p[:, :2], 0.0, atol=1e-9 * np.abs(n).max())
    np.testing.assert_allclose(p[:, 2], pz)
