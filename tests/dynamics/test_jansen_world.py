"""The Jansen world (dynamics/plants/jansen_world.py) against independent truths: its energy balance with the
legs' potential energy from the linkage position solve (not the tables) and the contact dissipation of
methods.md (e.6) (loop area per episode), first-order convergence of the residual; vertical momentum
(the feet carry the weight on average); the chassis speed against the no-slip v = L ω / (2π D) with L and
D from the linkage's position solve; the feet markers against that solve; the plates' wrenches read back
through dynamics.forceplate equal the feet's forces; the compiled and numpy contact stages agree; no
sample lost by `take` against a concurrent recorder."""
import numpy as np
import pytest

from dynamics import kernels
from dynamics.contact import ContactError, NormalLaw
from dynamics.forceplate import Plate, process
from dynamics.linkage.model import read_linkage
from dynamics.linkage.position import assembled_positions
from dynamics.plants.jansen_world import (JansenSim, advance, contact, jansen_world, marker_labels, marker_positions,
                                          plate_loads, rest_height)

OMEGA = 3.0  # rad/s shaft speed of the runs


@pytest.fixture(scope="module")
def world():
    return jansen_world()


def speed_torque(sim):
    """PD on the shaft speeds: a stand-in for the motor and its controller."""
    return 4.0 * (OMEGA - sim.u[3:5])


@pytest.fixture(scope="module")
def walk(world):
    """6 s of walking at h = 1 ms, every step recorded."""
    sim = JansenSim(world, 1e-3)
    for k in range(6000):
        advance(sim, speed_torque(sim), k * 1e-3)
    return sim.take()


def leg_potential(world, s):
    """Σ_legs Σ_bodies m_b g y_b from the leg's position solve at each slot's crank angle (J)."""
    leg = read_linkage("jansen_leg")
    m = leg.mass_diag.reshape(-1, 3)[:, 0]
    q = assembled_positions(leg, world.sigma * s[world.shaft] + world.offset)
    return float((q[:, 1::3] @ m).sum() * world.gravity)


def energy_residual(world, h, duration=2.0):
    """W_shafts − ΔE − E_damping − E_friction over a run from rest (J), and W_shafts."""
    sim = JansenSim(world, h)
    K, n = world.law.stiffness, world.law.exponent

    def energy():
        q, u = sim.q, sim.u
        ct = contact(world, q, u)
        d = np.maximum(ct.delta, 0.0)
        return (0.5 * world.mass * (u[0] ** 2 + u[1] ** 2) + 0.5 * world.pitch_inertia * u[2] ** 2
                + 0.5 * (ct.inertia * u[3:5] ** 2).sum() + world.mass * world.gravity * q[1]
                + leg_potential(world, q[3:5]) + (K * d ** (n + 1) / (n + 1)).sum())

    e0, work, damping, friction = energy(), 0.0, 0.0, 0.0
    for k in range(round(duration / h)):
        ct = contact(world, sim.q, sim.u)
        elastic = np.where(ct.delta > 0, K * np.maximum(ct.delta, 0.0) ** n, 0.0)
        damping += h * ((ct.force[:, 1] - elastic) * ct.delta_dot).sum()
        friction -= h * (ct.force[:, 0] * ct.foot_velocity[:, 0]).sum()
        tau, sd0 = speed_torque(sim), sim.u[3:5].copy()
        advance(sim, tau, k * h)
        work += h * (tau * 0.5 * (sd0 + sim.u[3:5])).sum()  # crank power = torque x speed
    return work - (energy() - e0) - damping - friction, work


def test_energy_balance_closes_at_first_order(world):
    # (W) of the module doc: shaft work = Δ(T + V + elastic) + contact damping + friction slip. The
    # residual is the integrator's: first order, so a quarter of the step leaves about a quarter of it.
    r1, w1 = energy_residual(world, 1e-3)
    r4, w4 = energy_residual(world, 2.5e-4)
    assert w1 > 3.0 and w4 > 3.0  # the shafts did real work (J)
    assert abs(r4) < 0.025 * w4
    assert 2.5 < abs(r1 / r4) < 6.0


def test_contact_episodes_dissipate_their_loop_area(world, walk):
    # methods.md (e.6): over an episode E_d = ∮ F_N dδ, the elastic part K δⁿ integrating to zero.
    # Loop area by the trapezoid rule over (δ, F_N) against the damping work ∫ (F_N − K δⁿ) δ̇ dt with
    # δ̇ from the recorded δ.
    K, n = world.law.stiffness, world.law.exponent
    d, f = walk.delta, walk.force[:, :, 2]
    checked = 0
    for leg in range(world.n_legs):
        on = d[:, leg] > 0
        starts = np.flatnonzero(on[1:] & ~on[:-1]) + 1
        ends = np.flatnonzero(~on[1:] & on[:-1]) + 1
        for a in starts:
            later = ends[ends > a]
            if not later.size:
                continue
            b = later[0]
            dl = np.clip(d[a - 1:b + 1, leg], 0, None)
            fn = f[a - 1:b + 1, leg]
            loop = np.trapezoid(fn, dl)
            damp = np.trapezoid(fn - K * dl ** n, dl)
            assert loop > 0
            assert abs(np.trapezoid(K * dl ** n, dl)) < 0.05 * loop  # elastic part ≈ 0 over the episode
            assert damp == pytest.approx(loop, rel=0.05)
            checked += 1
    assert checked >= 20


def test_feet_carry_the_weight_and_no_net_push_at_steady_speed(world, walk):
    # Momentum: over whole crank cycles at steady speed, mean Σ F_z = M g and mean Σ F_x ≈ M a ≈ 0.
    cycle = 2 * np.pi / OMEGA
    sel = (walk.t >= 6.0 - 2 * cycle) & (walk.t < 6.0)
    fz = walk.force[sel, :, 2].sum(axis=1).mean()
    fx = walk.force[sel, :, 0].sum(axis=1).mean()
    weight = world.mass * world.gravity
    dv = walk.u[sel, 0][-1] - walk.u[sel, 0][0]
    assert fz == pytest.approx(weight, rel=0.02)
    assert fx == pytest.approx(world.mass * dv / (2 * cycle), abs=0.02 * weight)


def leg_foot(s):
    """The leg's foot F (N, 2) m in its own frame (x forward, y up, origin at the crank centre) at crank
    angles s (N,) rad, from the linkage's position solve (constructive assembly + Newton), not the
    reduced tables the world runs on."""
    from dynamics.linkage import constraints

    leg = read_linkage("jansen_leg")
    return constraints.point_positions(leg, assembled_positions(leg, s), leg.foot), leg


def test_walker_advances_about_the_no_slip_distance_per_cycle(world, walk):
    # gait metrics (methods.md c.8; dynamics.linkage.gait, tested against an analytic path): a stance
    # foot covers the step length L in the stance share D of the cycle, so without slip the chassis
    # moves at v = L ω / (2π D), L/D per shaft revolution. L and D here from the foot path of the
    # linkage's position solve; the advance from the simulated chassis over whole shaft revolutions.
    from dynamics.linkage.gait import gait_metrics

    foot, leg = leg_foot(2 * np.pi * np.arange(3600) / 3600)
    g = gait_metrics(foot, leg.pivot_position(), leg.metadata["ground_penetration"])  # models.md 2.5
    assert 0.3 < g.step_length < 0.5 and 0.3 < g.duty_factor < 0.6
    assert world.step_length == pytest.approx(g.step_length, rel=1e-3)
    assert world.duty_factor == pytest.approx(g.duty_factor, rel=1e-3)
    s = walk.q[:, 3]
    k0 = int(np.ceil(s[walk.t >= 2.0][0] / (2 * np.pi)))  # whole revolutions after the start transient
    k1 = int(np.floor(s[-1] / (2 * np.pi)))
    assert k1 - k0 >= 1
    a, b = np.searchsorted(s, 2 * np.pi * k0), np.searchsorted(s, 2 * np.pi * k1)
    x = walk.q[:, 0]
    v = (x[b] - x[a]) / (walk.t[b] - walk.t[a])
    omega = (s[b] - s[a]) / (walk.t[b] - walk.t[a])
    assert v == pytest.approx(g.step_length * omega / (2 * np.pi * g.duty_factor), rel=0.10)
    assert abs(walk.q[walk.t >= 2.0, 2]).max() < 0.1  # pitch stays small (rad)


def test_plates_read_back_the_feet_forces(world, walk):
    # Two plates under the walkway (left feet at y = +0.2 m, right at −0.2 m): type 2 and a type 4 with a
    # calibration matrix, plus channel offsets; dynamics.forceplate.process from the raw channels gives
    # the force on the feet inside each plate and the centre of pressure of those point forces on the
    # surface, COP_x = Σ (F_z x − F_x z) / Σ F_z (z = the foot below the surface).
    rng = np.random.default_rng(3)
    cal = np.eye(6) + 0.02 * rng.normal(size=(6, 6))
    plates = [Plate(2, [[1.4, 0.4, 0], [0.8, 0.4, 0], [0.8, 0.0, 0], [1.4, 0.0, 0]], [0, 0, -0.04], name="FP1"),
              Plate(4, [[1.4, 0.0, 0], [0.8, 0.0, 0], [0.8, -0.4, 0], [1.4, -0.4, 0]], [0, 0, -0.04],
                    cal_matrix=cal, name="FP2")]
    loads = plate_loads(walk.foot, walk.force, plates)
    x, z = walk.foot[:, :, 0], walk.foot[:, :, 2]
    for p, (F, M), side in zip(plates, loads, (1.0, -1.0)):
        offset = rng.normal(scale=5.0, size=6)
        raw = p.raw_channels(F, M) + offset
        sig = process(p, raw, threshold=5.0, offset=offset)
        on = (x >= 0.8) & (x <= 1.4) & (np.sign(world.lateral) == side)
        truth = np.where(on[..., None], walk.force, 0.0).sum(axis=1)
        assert truth[:, 2].max() > 50.0  # the walker crossed the plate
        np.testing.assert_allclose(sig.force, truth, atol=1e-6 * truth[:, 2].max())
        fz = np.where(on, walk.force[:, :, 2], 0.0)
        fx = np.where(on, walk.force[:, :, 0], 0.0)
        v = sig.valid
        cop = ((fz * x - fx * z).sum(axis=1)[v]) / fz.sum(axis=1)[v]
        np.testing.assert_allclose(sig.cop[v, 0], cop, atol=1e-6)
        np.testing.assert_allclose(sig.cop[v, 1], 0.2 * side, atol=1e-6)


def test_markers_follow_the_chassis_and_feet(world, walk):
    pos = marker_positions(world, walk)
    labels = marker_labels(world)
    assert pos.shape == (walk.t.size, len(labels), 3)
    # the front and back chassis markers stay chassis_length apart (a rigid chassis)
    np.testing.assert_allclose(np.linalg.norm(pos[:, 0] - pos[:, 2], axis=1), world.chassis_length, rtol=1e-12)
    # the feet: r_l = (X, Z) + R(φ) (b_l x_F, y_F) at the slot's crank angle θ_l = σ_l s + c_l (module doc),
    # the foot F from the linkage's position solve (every 50th sample); lateral at the slot's plane
    sel = slice(None, None, 50)
    c, sn = np.cos(walk.q[sel, 2]), np.sin(walk.q[sel, 2])
    for leg in range(world.n_legs):
        th = world.sigma[leg] * walk.q[sel, 3 + world.shaft[leg]] + world.offset[leg]
        f, _ = leg_foot(th)
        rx, rz = world.bx[leg] * f[:, 0], f[:, 1]
        truth = np.column_stack([walk.q[sel, 0] + c * rx - sn * rz, np.full(th.size, world.lateral[leg]),
                                 walk.q[sel, 1] + sn * rx + c * rz])
        np.testing.assert_allclose(pos[sel, 4 + leg], truth, atol=1e-6)  # the tables' spline error is ~1e-8 m


@pytest.mark.parametrize("variant", ["default", "kelvin_voigt_frictionless", "hertz_stiction"])
def test_compiled_contact_equals_numpy_reference(world, variant):
    from dynamics.contact import Friction

    if variant == "kelvin_voigt_frictionless":
        world = jansen_world(law=NormalLaw("kelvin_voigt", 5e3, damping=50.0), friction=None)
        assert world.friction is None
    elif variant == "hertz_stiction":
        world = jansen_world(law=NormalLaw("hertz", 2e4), friction=Friction(0.6, kind="stiction", v_s=0.05,
                                                                               mu_static=0.9, mu_viscous=0.1))
    rng = np.random.default_rng(1)
    for _ in range(20):
        s = rng.uniform(0, 7, 2)
        q = np.array([0.3, rest_height(world, s) - 0.015 * rng.random(), 0.05 * rng.normal(), *s])
        u = 0.5 * rng.normal(size=5)
        a = contact(world, q, u)
        with kernels.use_jit(False):
            b = contact(world, q, u)
        assert (b.force[:, 1] > 0).sum() >= 2
        for name in ("foot", "foot_velocity", "force", "Q", "D", "K", "inertia"):
            x, y = getattr(a, name), getattr(b, name)
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9 * np.abs(y).max(), err_msg=name)


def test_bad_input_is_one_line(world):
    with pytest.raises(ContactError, match="latches the approach velocity"):
        jansen_world(law=NormalLaw("lankarani_nikravesh", 2e4, restitution=0.5))
    with pytest.raises(ValueError, match="need h > 0"):
        JansenSim(world, 0.0)


def test_frictionless_feet_conserve_horizontal_momentum():
    # no friction: no horizontal external force, so the chassis (whose legs' momentum the model leaves
    # out) keeps its horizontal momentum exactly, however the cranks turn
    w = jansen_world(friction=None)
    sim = JansenSim(w, 1e-3, x0=0.25)
    for k in range(2000):
        advance(sim, speed_torque(sim), k * 1e-3)
    s = sim.take()
    assert abs(s.q[:, 3]).max() > 3.0  # the shafts turned (rad)
    assert np.abs(s.force[:, :, 0]).max() == 0.0
    np.testing.assert_allclose(s.u[:, 0], 0.0, atol=1e-12)
    np.testing.assert_allclose(s.q[:, 0], 0.25, atol=1e-12)


def test_take_loses_no_sample_while_another_thread_records(world):
    # the MCU thread runs `load` (which appends a row) while the publisher thread calls `take`: every
    # recorded step must come out exactly once, in order. Truth: the step count, and each row's time
    # (the producer numbers its calls). A tiny switch interval makes the threads interleave inside
    # `take` thousands of times.
    import sys
    import threading

    sim = JansenSim(world, 1e-3)
    n = 6000
    s, sd = sim.q[3:5].copy(), np.zeros(2)
    done = threading.Event()

    def producer():
        for k in range(n):
            sim.load(float(k), s, sd)
        done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        th = threading.Thread(target=producer)
        th.start()
        times, takes = [], 0
        while not done.is_set() or sim.rows:
            got = sim.take()
            takes += 1
            if got is not None:
                times.append(got.t)
        th.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    t = np.concatenate(times)
    assert takes > 10  # the consumer really ran alongside the producer
    np.testing.assert_array_equal(t, np.arange(n, dtype=float))
