"""Linkage inverse dynamics (KKT), power identity, reduced crank form, forward dynamics.

Independent truths: a slider-crank with a massless rod solved by hand (two-force member), a
pendulum held by a linear actuator (moment balance), the power identity (no multipliers), the
potential energy differentiated numerically, energy conservation and the work-energy theorem in
simulation, and the mirror symmetry of the walker's legs.
"""
import math

import numpy as np
import pytest

from dynamics.linkage import constraints as C
from dynamics.linkage import forward as FW
from dynamics.linkage import inverse as INV
from dynamics.linkage import kinematics as K
from dynamics.linkage import position as P
from dynamics.linkage import reduced as R
from dynamics.linkage.model import LinkageError, load_linkage, read_linkage

from dynamics.model import G


@pytest.fixture(scope="module")
def jansen():
    return read_linkage("jansen_leg")


@pytest.fixture(scope="module")
def jansen_table(jansen):
    return R.tabulate(jansen, 1440)


def _state(model, th, thd, thdd):
    q = P.assembled_positions(model, th)
    qd = K.velocities(model, q, th, thd)
    return q, qd, K.accelerations(model, q, qd, th, thd, thdd)


# --- slider-crank: crank r (uniform bar, mass m1), massless rod l, slider mass ms on y = 0 ------

def slider_crank(r=0.1, l=0.35, m1=0.4, ms=1.3):
    return {
        "kind": "linkage", "name": "slider_crank", "gravity": G, "foot": "P", "pivot": "O",
        "ground": {"O": [0.0, 0.0]},
        "bodies": [
            {"name": "crank", "minus": "O", "plus": "A", "length": r, "mass": m1},
            {"name": "rod", "minus": "A", "plus": "P", "length": l, "mass": 0.0, "inertia": 0.0},
            {"name": "slider", "minus": "P", "plus": "Q", "length": 0.1, "mass": ms, "inertia": 0.0},
        ],
        "joints": [
            {"type": "ground", "end": "crank-", "at": "O", "name": "O"},
            {"type": "pin", "ends": ["crank+", "rod-"], "name": "A"},
            {"type": "pin", "ends": ["rod+", "slider-"], "name": "P"},
            {"type": "coordinate", "body": "slider", "axis": "y", "value": 0.0, "name": "guide"},
            {"type": "coordinate", "body": "slider", "axis": "phi", "value": 0.0, "name": "no tilt"},
            {"type": "angle", "body": "crank", "driven": True, "name": "crank driver"},
        ],
        "assembly": [
            {"point": "A", "crank": ["O", r]},
            {"point": "P", "slider": ["A", l, 0.0], "sign": 1},
            {"point": "Q", "offset": ["P", 0.1, 0.0]},
        ],
    }


def test_slider_crank_kkt_matches_hand_solution():
    r, l, m1, ms = 0.1, 0.35, 0.4, 1.3
    model = load_linkage(slider_crank(r, l, m1, ms), "slider_crank (test)")
    rng = np.random.default_rng(1)
    th = rng.uniform(-np.pi, np.pi, 25)
    thd, thdd = rng.uniform(-20, 20, 25), rng.uniform(-200, 200, 25)
    q, qd, qdd = _state(model, th, thd, thdd)
    out = INV.inverse_dynamics(model, q, qd, th, thd, thdd)
    # hand solution: x_P = r c + w, w = sqrt(l^2 - r^2 s^2); derivatives in theta
    s, c = np.sin(th), np.cos(th)
    w = np.sqrt(l * l - r * r * s * s)
    x1 = -r * s - r * r * s * c / w
    x2 = -r * c - r * r * (c * c - s * s) / w - r ** 4 * s * s * c * c / w ** 3
    xdd = x2 * thd ** 2 + x1 * thdd
    A = np.stack([r * c, r * s], axis=1)
    Pp = np.stack([r * c + w, np.zeros_like(th)], axis=1)
    e = (Pp - A) / l
    f = ms * xdd / e[:, 0]                      # rod force on the slider, along e
    F_rs = f[:, None] * e
    tau = m1 * r * r / 3 * thdd + m1 * G * r / 2 * c + (A[:, 0] * F_rs[:, 1] - A[:, 1] * F_rs[:, 0])
    assert np.allclose(out.effort, tau, rtol=1e-9, atol=1e-9)
    # pin A (crank+, rod-): force of the pin on the crank = -(force of the crank on the rod) = -F_rs
    assert np.allclose(out.pin_forces[:, 1], -F_rs, rtol=1e-9, atol=1e-9)
    # guide row: the guide's force on the slider is -lambda = ms g - F_rs_y (vertical balance)
    assert np.allclose(-out.lam[:, model.row_names.index("guide")], ms * G - F_rs[:, 1], atol=1e-9)
    assert np.allclose(C.point_positions(model, q, "P"), Pp, atol=1e-12)
    # the KKT accelerations are the kinematic ones
    assert np.allclose(out.qdd, qdd, atol=1e-9)


# --- pendulum held by a linear actuator (distance driver) -----------------------------------

@pytest.mark.parametrize("L0", [0.45, 0.6, 0.8])
def test_distance_driver_static_force_is_the_moment_balance(L0):
    L, m, d = 0.5, 2.0, 0.4
    model = load_linkage({
        "kind": "linkage", "name": "actuated_pendulum", "foot": "E", "pivot": "O",
        "ground": {"O": [0.0, 0.0], "G": [d, -0.3]},
        "bodies": [{"name": "bar", "minus": "O", "plus": "E", "length": L, "mass": m}],
        "joints": [{"type": "ground", "end": "bar-", "at": "O"},
                   {"type": "distance", "ends": ["bar+", "G"], "length": L0, "driven": True}],
        "assembly": [{"point": "E", "circle": ["O", L, "G", L0], "sign": 1}],
    }, "pendulum (test)")
    q = P.assembled_positions(model, [0.0])
    out = INV.inverse_dynamics(model, q, np.zeros_like(q), 0.0, 0.0, 0.0)
    E = C.point_positions(model, q, "E")[0]
    phi = math.atan2(E[1], E[0])
    ehat = (E - np.array([d, -0.3])) / L0
    moment_arm = E[0] * ehat[1] - E[1] * ehat[0]
    assert out.effort[0] == pytest.approx(m * G * L / 2 * math.cos(phi) / moment_arm, rel=1e-10)
    # moving: multiplier and power identity agree for the distance driver too
    qd = K.velocities(model, q, 0.0, 0.3)
    mov = INV.inverse_dynamics(model, q, qd, 0.0, 0.3, -1.1)
    assert mov.effort[0] == pytest.approx(INV.effort_from_power(model, q, qd, mov.qdd, 0.3)[0], rel=1e-10)


@pytest.mark.parametrize("name", ["jansen_leg", "chebyshev_leg"])
@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_crank_torque_multiplier_equals_power_identity(name, direction):
    model = read_linkage(name)
    rng = np.random.default_rng(2)
    th = rng.uniform(0, 2 * np.pi, 40)
    thd = direction * rng.uniform(0.5, 12.0, 40)          # both senses of rotation (methods c.2)
    thdd = rng.uniform(-40, 40, 40)
    F = rng.normal(0.0, 30.0, (40, 2))                    # a foot force during stance
    q, qd, _ = _state(model, th, thd, thdd)
    out = INV.inverse_dynamics(model, q, qd, th, thd, thdd, foot_force=F)
    power = INV.effort_from_power(model, q, qd, out.qdd, thd, foot_force=F)
    assert np.allclose(out.effort, power, rtol=1e-9, atol=1e-11)
    assert np.allclose(out.effort, -out.lam[:, model.driver_rows[0]])


def test_power_identity_refuses_zero_crank_speed(jansen):
    q, qd, qdd = _state(jansen, np.array([0.3]), np.array([0.0]), np.array([1.0]))
    with pytest.raises(LinkageError, match="divides by the input rate"):
        INV.effort_from_power(jansen, q, qd, qdd, [0.0])


def test_reduced_form_equals_kkt_off_grid(jansen, jansen_table):
    rng = np.random.default_rng(3)
    th = rng.uniform(-10, 10, 60)                        # any real angle, off the grid
    thd, thdd = rng.uniform(-12, 12, 60), rng.uniform(-60, 60, 60)
    F = rng.normal(0.0, 30.0, (60, 2))
    q, qd, _ = _state(jansen, th, thd, thdd)
    kkt = INV.inverse_dynamics(jansen, q, qd, th, thd, thdd, foot_force=F).effort
    red = R.crank_torque(jansen_table, th, thd, thdd, F)
    assert np.max(np.abs(red - kkt)) < 1e-4 * np.max(np.abs(kkt))
    one = [R.crank_torque_one(jansen_table, *a, *f) for a, f in zip(zip(th, thd, thdd), F)]
    assert np.allclose(one, red, rtol=1e-12, atol=1e-12)


def test_reduced_tables_are_exact_at_nodes_and_G_is_dV_dtheta(jansen, jansen_table):
    th = 2 * np.pi * np.arange(0, 1440, 37) / 1440
    v = R.lookup(jansen_table, th)
    q = P.assembled_positions(jansen, th)
    h = 1e-5
    qp, qm = P.assembled_positions(jansen, th + h), P.assembled_positions(jansen, th - h)
    # I = q_th^T M q_th with q_th from central differences of the assembled positions (no velocity solve)
    T, _ = FW.mechanical_energy(jansen, q, (qp - qm) / (2 * h))
    assert np.allclose(v[:, 0], 2 * T, rtol=1e-7)
    _, Vp = FW.mechanical_energy(jansen, qp, q)
    _, Vm = FW.mechanical_energy(jansen, qm, q)
    assert np.allclose(v[:, 2], (Vp - Vm) / (2 * h), atol=1e-7)    # G = dV/dtheta
    assert np.allclose(v[:, 3:5], C.point_positions(jansen, q, "F"), atol=1e-12)
    assert np.allclose(v[:, 5:7], (C.point_positions(jansen, qp, "F") - C.point_positions(jansen, qm, "F"))
                       / (2 * h), atol=1e-8)


def test_forward_of_inverse_is_identity(jansen):
    th, thd, thdd = np.array([1.1]), np.array([4.0]), np.array([-7.0])
    q, qd, qdd = _state(jansen, th, thd, thdd)
    tau = INV.inverse_dynamics(jansen, q, qd, th, thd, thdd).effort[0]
    assert np.allclose(FW.accelerations(jansen, q[0], qd[0], tau), qdd[0], atol=1e-9)


@pytest.mark.parametrize("projection", [True, False])
def test_torque_free_simulation_conserves_energy_and_constraints(jansen, projection):
    q0 = P.assembled_positions(jansen, [0.3])[0]
    tr = FW.simulate(jansen, q0, np.zeros_like(q0), t_end=0.3, dt=2e-3, method="rk4", projection=projection)
    T, V = FW.mechanical_energy(jansen, tr.q, tr.qd)
    assert T.max() > 1e-3                                       # it does swing
    assert np.max(np.abs(T + V - (T[0] + V[0]))) < 1e-7 * T.max()
    # with projection: on the manifold to Newton tolerance; Baumgarte alone: drift stays tiny
    bound = 1e-11 if projection else 1e-8
    assert np.sqrt(tr.E_p.max()) < bound and np.sqrt(tr.E_v.max()) < 100 * bound


def test_constant_torque_work_equals_energy_gain(jansen):
    q0 = P.assembled_positions(jansen, [0.3])[0]
    tau = 0.6  # N m, enough to drive the crank round against gravity

    def gap(dt):
        tr = FW.simulate(jansen, q0, np.zeros_like(q0), t_end=0.3, dt=dt, torque=lambda t, q, v: tau)
        T, V = FW.mechanical_energy(jansen, tr.q, tr.qd)
        crank = tr.q[:, 2]
        assert crank[-1] - crank[0] > 3.0                     # half a revolution and more
        return abs(T[-1] + V[-1] - T[0] - V[0] - tau * (crank[-1] - crank[0])) / (T[-1] + V[-1] - T[0] - V[0])

    coarse, fine = gap(4e-3), gap(2e-3)
    # work-energy theorem holds up to RK4's global error O(dt^4): 16x smaller per halving
    assert fine < 1e-5 and coarse / fine > 10


def test_baumgarte_bounds_drift_of_explicit_euler(jansen):
    q0 = P.assembled_positions(jansen, [0.3])[0]
    kw = dict(t_end=0.25, dt=1e-3, method="euler", projection=False)
    stab = FW.simulate(jansen, q0, np.zeros_like(q0), **kw)
    free = FW.simulate(jansen, q0, np.zeros_like(q0), alpha=0.0, beta=0.0, **kw)
    drift_stab, drift_free = np.sqrt(stab.E_p[-1]), np.sqrt(free.E_p[-1])
    # methods.md c: about 2 mm per cycle with Baumgarte at dt = 1 ms, more without
    assert drift_stab < 2e-3 and drift_stab < 0.7 * drift_free
    proj = FW.simulate(jansen, q0, np.zeros_like(q0), t_end=0.25, dt=1e-3, method="euler")
    assert np.sqrt(proj.E_p.max()) < 1e-11


def test_walker_shaft_torque_is_the_sum_of_its_legs_by_mirror_symmetry(jansen):
    walker = read_linkage("jansen_walker")
    assert walker.n_bodies == 132 and walker.driver_rows.size == 12
    th = np.array([0.2, 1.9, 4.4])
    w = 2 * np.pi
    qw, qdw, _ = _state(walker, th, np.full(3, w), np.zeros(3))
    tau_w = INV.inverse_dynamics(walker, qw, qdw, th, np.full(3, w), np.zeros(3)).effort

    def leg(angle):  # torque of one forward leg at constant speed w (depends on w^2 only)
        q, qd, _ = _state(jansen, angle, np.full(angle.shape, w), np.zeros(angle.shape))
        return INV.inverse_dynamics(jansen, q, qd, angle, np.full(angle.shape, w), np.zeros(angle.shape)).effort

    expected = np.zeros(3)
    for phase in np.radians([0, 120, 240, 180, 300, 60]):
        # a mirrored leg at crank angle a is the mirror image of a forward leg at pi - a turning the
        # other way: its torque is minus the forward leg's torque there
        expected += leg(th + phase) - leg(np.pi - th - phase)
    assert np.allclose(tau_w, expected, rtol=1e-9, atol=1e-9)


def test_walker_forward_dynamics_inverts_its_inverse_dynamics():
    """Twelve legs on one shaft (12 driver rows, one input): released, the couplings keep the
    cranks together and the shaft torque of the KKT inverse gives back the kinematic q''."""
    walker = read_linkage("jansen_walker")
    th, thd, thdd = np.array([0.7]), np.array([5.0]), np.array([-9.0])
    q, qd, qdd = _state(walker, th, thd, thdd)
    tau = INV.inverse_dynamics(walker, q, qd, th, thd, thdd).effort[0]
    assert abs(tau) > 0.1
    np.testing.assert_allclose(FW.accelerations(walker, q[0], qd[0], tau), qdd[0], rtol=0,
                               atol=1e-8 * np.abs(qdd).max())
    # another torque gives another motion that still turns every crank together
    other = FW.accelerations(walker, q[0], qd[0], tau + 5.0)
    cranks = 3 * np.array([k for k, b in enumerate(walker.bodies) if b.name.endswith(".O1A")]) + 2
    assert cranks.size == 12
    assert np.ptp(other[cranks]) < 1e-9 * np.abs(other[cranks]).max()
    assert other[cranks[0]] - thdd[0] > 1e-3          # more torque, more crank acceleration


def test_walker_torque_free_simulation_conserves_energy():
    walker = read_linkage("jansen_walker")
    q0 = P.assembled_positions(walker, [0.3])[0]
    qd0 = K.velocities(walker, q0[None], [0.3], [4.0])[0]
    tr = FW.simulate(walker, q0, qd0, t_end=0.01, dt=2e-3)
    T, V = FW.mechanical_energy(walker, tr.q, tr.qd)
    assert np.max(np.abs(T + V - T[0] - V[0])) < 1e-7 * T[0]
    assert np.sqrt(tr.E_p.max()) < 1e-11
