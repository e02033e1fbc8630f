"""Contact of a kinematically driven Jansen foot (configs/models/jansen_leg.toml via dynamics.linkage):
properties of methods.md e.3, e.6, e.9 on real linkage kinematics."""
import numpy as np
import pytest

from dynamics.contact import NormalLaw, Plane, contact_forces, penetration
from dynamics.linkage.constraints import point_jacobian, point_positions
from dynamics.linkage.kinematics import velocities
from dynamics.linkage.model import read_linkage
from dynamics.linkage.position import assembled_positions


@pytest.fixture(scope="module")
def foot_path():
    """Foot F over one crank revolution on a 0.1° grid, starting 1° before touch-down; ground 8 mm
    above the lowest foot point (models.md 2). Returns (s, F (N, 2), dF/ds (N, 2), ground Plane)."""
    leg = read_linkage("jansen_leg")
    s = np.linspace(0.0, 2 * np.pi, 3601)[:-1]
    q = assembled_positions(leg, s)
    F = point_positions(leg, q, "F")
    dFds = np.einsum("nij,nj->ni", point_jacobian(leg, q, "F"), velocities(leg, q, s, np.ones(s.size)))
    ground = F[:, 1].min() + 0.008
    air = F[:, 1] > ground
    td = np.flatnonzero(air & ~np.roll(air, -1))[0] + 1  # first sample below ground after an airborne one
    k = (td - 10) % s.size
    roll = lambda x: np.roll(x, -k, axis=0)  # noqa: E731
    return roll(s), roll(F), roll(dFds), Plane(np.array([0.0, ground]), np.array([0.0, 1.0]))


def run(law, foot_path, omega):
    s, F, dFds, plane = foot_path
    kin = penetration(plane, F[:, None, :], omega * dFds[:, None, :])
    return kin, contact_forces(law, kin)


def test_one_episode_per_revolution_with_8mm_penetration(foot_path):
    kin, res = run(NormalLaw("lankarani_nikravesh", 2e4, restitution=0.5), foot_path, 2 * np.pi)
    assert res.touch_down.sum() == 1 and res.lift_off.sum() == 1
    assert kin.delta.max() == pytest.approx(0.008, abs=1e-5)
    assert np.all(res.f_normal >= 0)


def test_restitution_law_force_independent_of_crank_speed(foot_path):
    # δ̇/δ̇⁻ is purely geometric for a driven foot (methods.md e.9): same force at every crank angle.
    law = NormalLaw("hu_guo", 2e4, restitution=0.4, v_min=1e-6)
    slow = run(law, foot_path, np.pi)[1]
    fast = run(law, foot_path, 4 * np.pi)[1]
    assert np.nanmin(slow.v_latched) > 1e-3  # the floor is not active
    np.testing.assert_allclose(fast.v_latched, 4 * slow.v_latched, rtol=1e-12)
    np.testing.assert_allclose(fast.f_normal, slow.f_normal, rtol=1e-9, atol=1e-9)


def test_constant_damping_force_grows_with_crank_speed(foot_path):
    law = NormalLaw("hunt_crossley_constant", 2e4, damping=2.0)
    kin1, slow = run(law, foot_path, np.pi)
    _, fast = run(law, foot_path, 4 * np.pi)
    elastic = 2e4 * np.maximum(kin1.delta, 0) ** 1.5
    ok = (slow.f_normal > 0) & (fast.f_normal > 0)  # away from the clamp
    assert ok.sum() > 50
    np.testing.assert_allclose((fast.f_normal - elastic)[ok], 4 * (slow.f_normal - elastic)[ok], rtol=1e-9, atol=1e-9)


def test_loop_energy_zero_for_hertz_positive_for_damped(foot_path):
    e_hertz = run(NormalLaw("hertz", 2e4), foot_path, 2 * np.pi)[1]
    e_ln = run(NormalLaw("lankarani_nikravesh", 2e4, restitution=0.5), foot_path, 2 * np.pi)[1]
    peak_work = 0.4 * 2e4 * 0.008**2.5  # ∫ K δ^1.5 dδ up to the maximum penetration
    assert abs(e_hertz.energy[e_hertz.lift_off][0]) < 1e-4 * peak_work
    assert e_ln.energy[e_ln.lift_off][0] > 0.05 * peak_work


def test_real_touch_down_is_floor_independent(foot_path):
    # Sampled from the air, the episode latches the true approach velocity (> 0.1 m/s at 1 rev/s), above
    # any sensible floor: the floor only matters for tangential touch-downs (test_contact.py).
    kin = run(NormalLaw("hertz", 1.0), foot_path, 2 * np.pi)[0]
    res = {v: contact_forces(NormalLaw("lankarani_nikravesh", 2e4, restitution=0.0, v_min=v), kin) for v in (1e-2, 1e-4)}
    i = int(np.flatnonzero(res[1e-2].touch_down[:, 0])[0])
    assert np.nanmin(res[1e-2].v_latched) == np.nanmax(res[1e-2].v_latched) == kin.delta_dot[i, 0] > 0.1
    np.testing.assert_array_equal(res[1e-2].f_normal, res[1e-4].f_normal)
