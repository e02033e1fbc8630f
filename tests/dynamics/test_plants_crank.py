"""The crank plant of sim mode (dynamics/plants/crank.py) against independent truths: the KKT inverse dynamics
of the full linkage (dynamics.linkage.inverse, no tables), the contact law written out, the energy
dissipated per contact episode by dynamics.contact, and conservation over a revolution."""
import numpy as np
import pytest

from dynamics.contact import ContactError, NormalLaw, Plane, contact_forces, penetration
from dynamics.linkage import inverse, kinematics, position
from dynamics.linkage.constraints import point_jacobian, point_positions
from dynamics.linkage.model import load_linkage, read_crank_legs, read_linkage
from dynamics.plants.crank import crank_load, crank_plant, crank_torque, motor_load

LAW = NormalLaw("hunt_crossley_constant", 2e4, damping=1.0)


@pytest.fixture(scope="module")
def leg():
    return read_linkage("jansen_leg")


@pytest.fixture(scope="module")
def walker_plant():
    return crank_plant(read_crank_legs("jansen_walker"))


def kkt_torque(model, th, om, al, foot_force=None):
    q = position.assembled_positions(model, th)
    qd = kinematics.velocities(model, q, th, om)
    return inverse.inverse_dynamics(model, q, qd, th, om, al, foot_force=foot_force).effort


def test_walker_torque_matches_kkt_inverse_dynamics_of_all_twelve_legs(walker_plant):
    # The plant shares one table between legs that differ by phase; the KKT solve of the composed
    # 132-body walker (each leg assembled at its own phase) is the independent truth.
    rng = np.random.default_rng(1)
    th = rng.uniform(0, 2 * np.pi, 12)
    om = rng.uniform(-8, 8, 12)
    al = rng.uniform(-30, 30, 12)
    truth = kkt_torque(read_linkage("jansen_walker"), th, om, al)
    assert np.abs(truth).max() > 1.0  # the inertial terms matter at these states
    np.testing.assert_allclose(crank_torque(walker_plant, th, om, al), truth, atol=1e-3)
    J, tau = motor_load(walker_plant, th, om)
    np.testing.assert_allclose(J * al + tau, truth, atol=1e-3)


def test_phase_shared_table_equals_a_leg_assembled_at_its_phase():
    mirrored_120 = load_linkage({"kind": "linkage", "name": "m", "legs": [
        {"model": "jansen_leg", "prefix": "L", "phase_deg": 120.0, "mirror": True}]}, "test")
    mirrored_0 = load_linkage({"kind": "linkage", "name": "m", "legs": [
        {"model": "jansen_leg", "prefix": "L", "phase_deg": 0.0, "mirror": True}]}, "test")
    th = np.linspace(0, 2 * np.pi, 37)
    a = crank_load(crank_plant([(mirrored_120, 0.0)]), th, np.full(37, 3.0))
    b = crank_load(crank_plant([(mirrored_0, np.radians(120.0))]), th, np.full(37, 3.0))
    for name in ("inertia", "d_inertia", "gravity", "foot", "foot_velocity"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-9, err_msg=name)


def test_contact_force_and_its_crank_torque_against_linkage_kinematics_and_kkt(leg):
    plant = crank_plant([(leg, 0.0)], ground_penetration=0.008, law=LAW)
    th = np.linspace(0, 2 * np.pi, 721)[:-1]
    om = np.full(th.size, 2 * np.pi)
    q = position.assembled_positions(leg, th)
    r = point_positions(leg, q, "F")
    rd = np.einsum("nij,nj->ni", point_jacobian(leg, q, "F"), kinematics.velocities(leg, q, th, om))
    assert plant.ground_y == pytest.approx(r[:, 1].min() + 0.008, abs=1e-6)
    delta, delta_dot = plant.ground_y - r[:, 1], -rd[:, 1]
    f_n = np.where(delta > 0, np.maximum(2e4 * np.maximum(delta, 0) ** 1.5 * (1 + 1.5 * 1.0 * delta_dot), 0), 0)
    ld = crank_load(plant, th, om)
    stance = f_n > 1.0
    assert 20 < stance.sum() < th.size / 2
    np.testing.assert_allclose(ld.foot_force[:, 0, 1], f_n, atol=2e-3 * f_n.max())
    np.testing.assert_allclose(ld.foot_force[:, 0, 0], 0.0)
    idx = np.flatnonzero(stance)[::4]
    F = ld.foot_force[idx, 0, :]
    truth = kkt_torque(leg, th[idx], om[idx], 0.0, foot_force=F)
    np.testing.assert_allclose(crank_torque(plant, th[idx], om[idx], 0.0), truth, atol=2e-4)
    assert np.abs(ld.contact[idx]).max() > 0.05  # the contact term is well above the tolerance


def test_energy_over_a_revolution_gravity_conservative_contact_dissipates_its_loop_area(leg):
    # At constant speed: ∮ τ dθ = 0 without contact (I, V periodic), and with a damped contact it is
    # the energy the contact dissipates per episode, ∮ F_N dδ, as dynamics.contact measures it.
    th = np.linspace(0, 2 * np.pi, 7201)
    om = 2 * np.pi
    free = crank_torque(crank_plant([(leg, 0.0)]), th, np.full(th.size, om), 0.0)
    assert np.abs(free).max() > 0.3
    assert abs(np.trapezoid(free, th)) < 1e-6 * np.abs(free).max() * 2 * np.pi
    plant = crank_plant([(leg, 0.0)], ground_penetration=0.008, law=LAW)
    work = np.trapezoid(crank_torque(plant, th, np.full(th.size, om), 0.0), th)
    q = position.assembled_positions(leg, th[:-1])
    r = point_positions(leg, q, "F")
    rd = np.einsum("nij,nj->ni", point_jacobian(leg, q, "F"), kinematics.velocities(leg, q, th[:-1], om))
    above = r[:, 1] > plant.ground_y
    lift = np.flatnonzero(above & ~np.roll(above, 1))[0]  # first airborne sample after the stance
    order = np.r_[np.arange(lift, th.size - 1), np.arange(lift + 1)]  # one revolution, air to air
    res = contact_forces(LAW, penetration(Plane(np.array([0.0, plant.ground_y]), np.array([0.0, 1.0])),
                                          r[order][:, None, :], rd[order][:, None, :]))
    assert res.touch_down.sum() == 1 and res.lift_off.sum() == 1
    dissipated = res.energy[res.lift_off][0]
    assert dissipated > 0.003
    assert work == pytest.approx(dissipated, rel=0.02)


def test_bad_input_is_a_clear_error(leg):
    with pytest.raises(ContactError, match="latches"):
        crank_plant([(leg, 0.0)], ground_penetration=0.008, law=NormalLaw("hunt_crossley", 2e4, restitution=0.5))
    with pytest.raises(ContactError, match="normal contact law"):
        crank_plant([(leg, 0.0)], ground_penetration=0.008)
    with pytest.raises(ValueError, match="legs\\[0\\]"):
        crank_plant([(leg, float("nan"))])
    with pytest.raises(ValueError, match="theta_d"):
        crank_load(crank_plant([(leg, 0.0)]), np.zeros(3), np.zeros(2))
