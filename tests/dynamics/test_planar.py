"""Planar closed form (methods.md b.3) against independent oracles.

Oracles: Pinocchio's RNEA on the same tree built directly in the test (prismatic x, y root and
revolute z joints, relative angles psi = mu^-1 phi), a finite-differenced Lagrangian computed
from segment positions only, and the analytic double pendulum of methods.md b.3.
"""
import numpy as np
import pinocchio as pin
import pytest

from dynamics.planar import (PlanarChain, external_generalized_forces, joint_moments, planar_chain_from_model,
                             planar_inverse_dynamics, planar_terms, structure_matrix)

from dynamics.model import G


def random_chain(rng, n):
    parent = np.array([0] + [int(rng.integers(1, i + 1)) for i in range(1, n)])
    return PlanarChain(parent=parent, l=rng.uniform(0.1, 0.8, n), m=rng.uniform(0.5, 30, n),
                       a1=rng.uniform(-0.1, 0.5, n), a2=rng.uniform(-0.1, 0.1, n), Jc=rng.uniform(0.01, 2, n))


def pinocchio_model(chain):
    """The chain as a Pinocchio model: PX, PY root, then RZ per segment, gravity (0, -g, 0)."""
    model = pin.Model()
    model.gravity.linear = np.array([0.0, -G, 0.0])
    jx = model.addJoint(0, pin.JointModelPX(), pin.SE3.Identity(), "x0")
    jy = model.addJoint(jx, pin.JointModelPY(), pin.SE3.Identity(), "y0")
    ids = []
    for i in range(chain.n):
        p = chain.parent[i]
        if p == 0:
            parent_id, offset = jy, np.zeros(3)
        else:
            parent_id, offset = ids[p - 1], np.array([0.0, -chain.l[p - 1], 0.0])
        jid = model.addJoint(parent_id, pin.JointModelRZ(), pin.SE3(np.eye(3), offset), f"seg{i + 1}")
        lever = np.array([chain.a2[i], -chain.a1[i], 0.0])  # a1 along e1 = -y_local, a2 along e2 = +x_local
        model.appendBodyToJoint(jid, pin.Inertia(chain.m[i], lever, np.diag([1.0, 1.0, chain.Jc[i]])), pin.SE3.Identity())
        ids.append(jid)
    return model


def to_relative(chain, x):
    """(x0, y0, phi...) -> (x0, y0, psi...) with psi = mu^-1 phi."""
    return np.concatenate([x[:2], np.linalg.solve(chain.mu, x[2:])])


@pytest.mark.parametrize("seed", range(6))
def test_closed_form_equals_pinocchio_rnea(seed):
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, int(rng.integers(1, 12)))
    model = pinocchio_model(chain)
    data = model.createData()
    N = 5
    q, v, a = (rng.uniform(-3, 3, (N, chain.n + 2)) for _ in range(3))
    Q = planar_inverse_dynamics(chain, q, v, a)
    assert Q.shape == (N, chain.n + 2)
    for k in range(N):
        tau = pin.rnea(model, data, to_relative(chain, q[k]), to_relative(chain, v[k]), to_relative(chain, a[k]))
        expected = np.concatenate([Q[k, :2], joint_moments(chain, Q[k, 2:])])
        np.testing.assert_allclose(expected, tau, rtol=0, atol=1e-9 * max(1.0, np.abs(tau).max()))


def com_positions(chain, q):
    """(n, 2) CoM positions and (n,) angles from q = (x0, y0, phi), from the geometry only."""
    phi = q[2:]
    e1 = np.stack([np.sin(phi), -np.cos(phi)], axis=1)
    e2 = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    prox = np.zeros((chain.n, 2))
    for i in range(chain.n):
        p = chain.parent[i]
        prox[i] = q[:2] if p == 0 else prox[p - 1] + chain.l[p - 1] * e1[p - 1]
    return prox + chain.a1[:, None] * e1 + chain.a2[:, None] * e2


def lagrangian_Q(chain, q, v, a, h=1e-5):
    """Q = d/dt dL/dv - dL/dq by central differences of T = 1/2 v^T M(q) v, V = g sum m y_c."""
    nq = q.size

    def mass_matrix(q):
        J = np.zeros((chain.n, 2, nq))
        for k in range(nq):
            dq = np.zeros(nq); dq[k] = h
            J[:, :, k] = (com_positions(chain, q + dq) - com_positions(chain, q - dq)) / (2 * h)
        M = np.einsum("i,iak,ial->kl", chain.m, J, J)
        M[2:, 2:] += np.diag(chain.Jc)
        return M

    def potential(q):
        return G * chain.m @ com_positions(chain, q)[:, 1]

    M = mass_matrix(q)
    dM = np.zeros((nq, nq, nq))  # dM[k] = dM/dq_k
    dV = np.zeros(nq)
    for k in range(nq):
        dq = np.zeros(nq); dq[k] = h
        dM[k] = (mass_matrix(q + dq) - mass_matrix(q - dq)) / (2 * h)
        dV[k] = (potential(q + dq) - potential(q - dq)) / (2 * h)
    Mdot = np.einsum("kij,k->ij", dM, v)
    dT_dq = 0.5 * np.einsum("kij,i,j->k", dM, v, v)
    return M @ a + Mdot @ v - dT_dq + dV


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_equals_finite_difference_lagrangian(seed):
    rng = np.random.default_rng(100 + seed)
    chain = random_chain(rng, 5)
    q, v, a = (rng.uniform(-2, 2, chain.n + 2) for _ in range(3))
    expected = lagrangian_Q(chain, q, v, a)
    np.testing.assert_allclose(planar_inverse_dynamics(chain, q, v, a), expected, rtol=0,
                               atol=1e-5 * np.abs(expected).max())


def test_double_pendulum_second_row():
    """Point masses: m2 l2^2 f2'' + m2 l1 l2 cos(f2-f1) f1'' + m2 l1 l2 sin(f2-f1) f1'^2 + m2 g l2 sin f2 = U2."""
    m1, m2, l1, l2 = 1.3, 0.7, 0.9, 0.6
    eps = 1e-12  # Jc must be > 0; a point mass has none
    chain = PlanarChain(parent=np.array([0, 1]), l=np.array([l1, l2]), m=np.array([m1, m2]),
                        a1=np.array([l1, l2]), a2=np.zeros(2), Jc=np.array([eps, eps]))
    f1, f2, w1, w2, e1, e2 = 0.4, -1.1, 1.7, -0.8, 2.5, -3.0
    Q = planar_inverse_dynamics(chain, [0.0, 0.0, f1, f2], [0.0, 0.0, w1, w2], [0.0, 0.0, e1, e2])
    U2 = m2 * l2**2 * e2 + m2 * l1 * l2 * np.cos(f2 - f1) * e1 + m2 * l1 * l2 * np.sin(f2 - f1) * w1**2 \
        + m2 * G * l2 * np.sin(f2)
    assert Q[3] == pytest.approx(U2, abs=1e-10)
    # Hanging at rest, the support carries the weight: N_y = (m1 + m2) g.
    Q0 = planar_inverse_dynamics(chain, np.zeros(4), np.zeros(4), np.zeros(4))
    np.testing.assert_allclose(Q0, [0.0, (m1 + m2) * G, 0.0, 0.0], atol=1e-12)


def test_terms_are_symmetric_and_batch_matches_single():
    rng = np.random.default_rng(7)
    chain = random_chain(rng, 8)
    phi, dphi = rng.uniform(-3, 3, (4, 8)), rng.uniform(-3, 3, (4, 8))
    Ah, bh, Dh = planar_terms(chain, phi, dphi)
    np.testing.assert_allclose(Ah, np.swapaxes(Ah, 1, 2), atol=0)
    assert np.all(np.linalg.eigvalsh(Ah) > 0)  # kinetic energy is positive definite
    Ah1, bh1, Dh1 = planar_terms(chain, phi[2], dphi[2])
    np.testing.assert_allclose(Ah1, Ah[2], atol=1e-14)
    np.testing.assert_allclose(bh1, bh[2], atol=1e-12)
    np.testing.assert_allclose(Dh1, Dh[2], atol=1e-14)


def test_structure_matrix_example():
    mu = structure_matrix(np.array([0, 1, 2, 3, 4, 5, 4]))  # Table 4.1 tree
    assert mu[6].tolist() == [1, 1, 1, 1, 0, 0, 1]
    np.testing.assert_array_equal(np.linalg.inv(mu)[6], [0, 0, 0, -1, 0, 0, 1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(parent=np.array([0, 2])), "segment 2: parent 2"),
    (dict(m=np.array([1.0, -1.0])), "segment 2: mass"),
    (dict(l=np.array([1.0])), "l has shape"),
])
def test_bad_chain_is_named(kwargs, match):
    base = dict(parent=np.array([0, 1]), l=np.ones(2), m=np.ones(2), a1=np.ones(2) / 2, a2=np.zeros(2), Jc=np.ones(2))
    with pytest.raises(ValueError, match=match):
        PlanarChain(**{**base, **kwargs})


def test_bad_state_is_named():
    chain = PlanarChain(parent=np.array([0]), l=np.ones(1), m=np.ones(1), a1=np.ones(1), a2=np.zeros(1), Jc=np.ones(1))
    with pytest.raises(ValueError, match=r"v has shape \(2,\), expected \(3,\)"):
        planar_inverse_dynamics(chain, np.zeros(3), np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="a contains NaN"):
        planar_inverse_dynamics(chain, np.zeros(3), np.zeros(3), np.array([0, np.nan, 0]))


def test_external_force_equals_pinocchio_with_fext():
    """Q - Q_ext = joint torques of Pinocchio's RNEA with the same force as an external force."""
    rng = np.random.default_rng(11)
    chain = random_chain(rng, 6)
    model = pinocchio_model(chain)
    data = model.createData()
    q, v, a = (rng.uniform(-2, 2, chain.n + 2) for _ in range(3))
    seg = int(rng.integers(1, chain.n + 1))
    F, z = rng.uniform(-50, 50, 2), rng.uniform(-0.3, 0.3, 2)
    Q = planar_inverse_dynamics(chain, q, v, a) - external_generalized_forces(chain, q[2:], seg, F, z)
    # The same force for Pinocchio: a spatial force in the frame of segment seg's joint, at the
    # point z' = (along e1, along e2) = local (z2, -z1).
    phi = q[2:][seg - 1]
    R = np.array([[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]])
    f_local = np.append(R.T @ F, 0.0)
    p_local = np.array([z[1], -z[0], 0.0])
    fext = [pin.Force.Zero() for _ in range(model.njoints)]
    fext[seg + 2] = pin.Force(f_local, np.cross(p_local, f_local))
    tau = pin.rnea(model, data, to_relative(chain, q), to_relative(chain, v), to_relative(chain, a), fext)
    np.testing.assert_allclose(np.concatenate([Q[:2], joint_moments(chain, Q[2:])]), tau, atol=1e-9 * np.abs(tau).max())


def test_external_force_batch_and_errors():
    rng = np.random.default_rng(12)
    chain = random_chain(rng, 4)
    phi = rng.uniform(-2, 2, (5, 4))
    F, z = rng.uniform(-9, 9, (5, 2)), rng.uniform(-0.2, 0.2, (5, 2))
    batch = external_generalized_forces(chain, phi, 3, F, z)
    np.testing.assert_allclose(batch[2], external_generalized_forces(chain, phi[2], 3, F[2], z[2]), atol=1e-14)
    with pytest.raises(ValueError, match="segment must be a segment number 1..4"):
        external_generalized_forces(chain, phi, 5, F, z)
    with pytest.raises(ValueError, match="force has 3 samples"):
        external_generalized_forces(chain, phi, 1, F[:3], z)


def test_chain_from_non_planar_model_names_the_problem():
    import dynamics
    with pytest.raises(ValueError, match="gravity"):
        planar_chain_from_model(dynamics.load_model("human15"))
    data = {"gravity": [0.0, -9.81, 0.0], "segment": [
        {"name": "a", "parent": "world", "joint": "planar", "mass": 1.0, "com": [0.0, -0.1, 0.0], "inertia": [0.1, 0.1, 0.1]},
        {"name": "b", "parent": "a", "joint": "revolute", "axis": [0, 0, 1], "origin": [0.1, -0.3, 0.0], "mass": 1.0,
         "inertia": [0.1, 0.1, 0.1]}]}
    with pytest.raises(ValueError, match="segment 'b': joint origin"):
        planar_chain_from_model(dynamics.model_from_dict(data))
