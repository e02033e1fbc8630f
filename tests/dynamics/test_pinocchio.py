"""Pinocchio as the oracle: random URDF trees (revolute, continuous, prismatic, fixed, floating
base, branching) written as URDF text, loaded by both libraries; joint order, rnea (with external
wrenches), crba, aba, kinematics, Jacobians, CoM and centroidal quantities must agree. Spherical
and planar joints (no URDF form) go through dynamics.pinocchio_model.to_pinocchio."""
import numpy as np
import pinocchio as pin
import pytest

import dynamics
from dynamics.pinocchio_model import to_pinocchio
from dynamics.samples import random_configuration, random_inertia, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

TOL = 1e-9


def _rpy(rng):
    return rng.uniform(-np.pi, np.pi, 3)


def random_urdf(rng, n_links, types=("revolute", "continuous", "prismatic", "fixed")):
    """URDF text of a random branching tree; joint names are random so that Pinocchio's
    name-ordered depth-first traversal differs from the writing order."""
    def fmt(a):
        return " ".join(f"{x:.17g}" for x in a)

    parts = ['<robot name="rand">']
    for k in range(n_links):
        m = rng.uniform(0.5, 3.0)
        I = random_inertia(rng, m)
        parts.append(
            f'<link name="L{k}"><inertial><origin xyz="{fmt(rng.normal(scale=0.2, size=3))}" rpy="{fmt(_rpy(rng))}"/>'
            f'<mass value="{m:.17g}"/><inertia ixx="{I[0, 0]:.17g}" iyy="{I[1, 1]:.17g}" izz="{I[2, 2]:.17g}" '
            f'ixy="{I[0, 1]:.17g}" ixz="{I[0, 2]:.17g}" iyz="{I[1, 2]:.17g}"/></inertial></link>')
    names = rng.permutation([f"joint_{chr(97 + i)}{i}" for i in range(n_links - 1)])
    for k in range(1, n_links):
        t = str(rng.choice(list(types)))
        axis = np.eye(3)[rng.integers(3)] if rng.random() < 0.5 else rng.normal(size=3)
        axis = axis / np.linalg.norm(axis)
        parts.append(
            f'<joint name="{names[k - 1]}" type="{t}"><parent link="L{rng.integers(k)}"/><child link="L{k}"/>'
            f'<origin xyz="{fmt(rng.normal(scale=0.4, size=3))}" rpy="{fmt(_rpy(rng))}"/><axis xyz="{fmt(axis)}"/>'
            f'<limit lower="-3" upper="3" effort="100" velocity="10"/></joint>')
    parts.append("</robot>")
    return "\n".join(parts)


def _state(model, rng, N):
    return (random_configuration(model, rng, N), rng.normal(size=(N, model.nv)), rng.normal(size=(N, model.nv)))


def _cases():
    for seed in range(8):
        yield pytest.param((seed, bool(seed % 2)), id=f"seed{seed}-{'floating' if seed % 2 else 'fixed'}")


@pytest.fixture(params=list(_cases()))
def urdf_pair(request, tmp_path):
    seed, floating = request.param
    rng = np.random.default_rng(seed)
    text = random_urdf(rng, n_links=int(rng.integers(4, 10)))
    path = tmp_path / "rand.urdf"
    path.write_text(text)
    model = dynamics.load_urdf(path, floating=floating)
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating else pin.buildModelFromUrdf(str(path))
    return model, pm, rng


def test_joint_order_and_layout_match_pinocchio(urdf_pair):
    model, pm, _ = urdf_pair
    assert (model.nq, model.nv) == (pm.nq, pm.nv)
    moving = [s for s in model.segments if s.joint.nv > 0]
    assert [s.joint_name for s in moving] == list(pm.names)[1:]
    assert [int(model.idx_q[model.index[s.name]]) for s in moving] == [j.idx_q for j in pm.joints][1:]
    assert [int(model.idx_v[model.index[s.name]]) for s in moving] == [j.idx_v for j in pm.joints][1:]


def test_rnea_crba_aba_match_pinocchio(urdf_pair):
    model, pm, rng = urdf_pair
    pd = pm.createData()
    q, v, a = _state(model, rng, 6)
    tau = dynamics.rnea(model, q, v, a)
    M = dynamics.crba(model, q)
    acc = dynamics.forward_dynamics(model, q, v, tau)
    acc_aba = dynamics.aba(model, q, v, tau)
    for k in range(len(q)):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=TOL, rtol=0)
        np.testing.assert_allclose(M[k], pin.crba(pm, pd, q[k]), atol=TOL, rtol=0)
        np.testing.assert_allclose(dynamics.nonlinear_effects(model, q[k], v[k]), pin.nonLinearEffects(pm, pd, q[k], v[k]), atol=TOL)
        np.testing.assert_allclose(dynamics.generalized_gravity(model, q[k]), pin.computeGeneralizedGravity(pm, pd, q[k]), atol=TOL)
        np.testing.assert_allclose(acc[k], pin.aba(pm, pd, q[k], v[k], tau[k]), atol=1e-7)
        np.testing.assert_allclose(acc_aba[k], pin.aba(pm, pd, q[k], v[k], tau[k]), atol=1e-7)


def test_rnea_with_external_wrenches_matches_pinocchio(urdf_pair):
    model, pm, rng = urdf_pair
    pd = pm.createData()
    q, v, a = _state(model, rng, 4)
    links = [s.name for s in model.segments]
    chosen = [links[i] for i in rng.choice(len(links), size=2, replace=False)]
    wrenches = [dynamics.Wrench(seg, force=rng.normal(scale=50, size=(4, 3)), point=rng.normal(size=(4, 3)),
                                moment=rng.normal(size=(4, 3))) for seg in chosen]
    tau = dynamics.rnea(model, q, v, a, f_ext=wrenches)
    for k in range(len(q)):
        pin.forwardKinematics(pm, pd, q[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        for w in wrenches:
            jid = pm.frames[pm.getFrameId(w.segment)].parentJoint
            F, P, T = w.force[k], w.point[k], w.moment[k]
            fext[jid] += pd.oMi[jid].actInv(pin.Force(F, np.cross(P, F) + T))
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k], fext), atol=TOL)


def test_kinematics_jacobians_com_centroidal_match_pinocchio(urdf_pair):
    model, pm, rng = urdf_pair
    pd = pm.createData()
    q, v, a = _state(model, rng, 3)
    pl = dynamics.forward_kinematics(model, q)
    c, vc, ac = dynamics.com(model, q, v, a)
    hg, dhg = dynamics.centroidal_momentum(model, q, v, a)
    for k in range(len(q)):
        pin.forwardKinematics(pm, pd, q[k], v[k], a[k])
        pin.updateFramePlacements(pm, pd)
        pin.computeJointJacobians(pm, pd, q[k])
        for i, s in enumerate(model.segments):
            fid = pm.getFrameId(s.name)
            np.testing.assert_allclose(pl.rotation[k, i], pd.oMf[fid].rotation, atol=TOL)
            np.testing.assert_allclose(pl.translation[k, i], pd.oMf[fid].translation, atol=TOL)
            J = pin.getFrameJacobian(pm, pd, fid, pin.LOCAL_WORLD_ALIGNED)
            np.testing.assert_allclose(dynamics.frame_jacobian(model, q[k], s.name), J, atol=TOL)
        # Pinocchio leaves the universe body (a fixed root link) out of its CoM; walklab counts
        # every segment. Add the fixed root link's mass to Pinocchio's figures.
        m_r, c_r = pm.inertias[0].mass, pm.inertias[0].lever
        M_p = pin.computeTotalMass(pm)
        M = M_p + m_r
        pin.centerOfMass(pm, pd, q[k], v[k], a[k])
        G = (M_p * pd.com[0] + m_r * c_r) / M
        np.testing.assert_allclose([c[k], vc[k], ac[k]], [G, M_p * pd.vcom[0] / M, M_p * pd.acom[0] / M], atol=TOL)
        pin.computeCentroidalMomentumTimeVariation(pm, pd, q[k], v[k], a[k])
        shift = pd.com[0] - G              # angular momentum (and rate) moved from Pinocchio's CoM to G
        np.testing.assert_allclose(hg[k, :3], pd.hg.linear, atol=TOL)
        np.testing.assert_allclose(hg[k, 3:], pd.hg.angular + np.cross(shift, pd.hg.linear), atol=TOL)
        np.testing.assert_allclose(dhg[k, :3], pd.dhg.linear, atol=TOL)
        np.testing.assert_allclose(dhg[k, 3:], pd.dhg.angular + np.cross(shift, pd.dhg.linear), atol=TOL)
    assert model.total_mass == pytest.approx(pin.computeTotalMass(pm) + pm.inertias[0].mass, abs=1e-12)


def test_urdf_export_reimported_by_pinocchio_gives_same_dynamics(tmp_path):
    """A TOML-style model (planar root, branching, prismatic, continuous, fixed) exported to URDF:
    Pinocchio's import has the same rnea once coordinates are matched by joint name."""
    rng = np.random.default_rng(42)
    model = random_model(rng, 9, ("revolute", "prismatic", "fixed", "revolute_unbounded"), root="planar")
    path = tmp_path / "out.urdf"
    dynamics.save_urdf(model, path)
    pm = pin.buildModelFromUrdf(str(path))
    pm.gravity = pin.Motion(np.concatenate((model.gravity, np.zeros(3))))
    pd = pm.createData()
    assert (pm.nq, pm.nv) == (model.nq, model.nv)
    # map walklab coordinates to Pinocchio's by joint name (the planar root became j0_x, j0_y, j0_z)
    qmap, vmap = [], []
    for name, jm in zip(list(pm.names)[1:], list(pm.joints)[1:]):
        seg = model.segments[0] if name.startswith("j0_") else next(s for s in model.segments if s.joint_name == name)
        i = model.index[seg.name]
        off = "xyz".index(name[-1]) if name.startswith("j0_") else 0
        if seg.joint.type == "revolute_unbounded":      # both store (cos θ, sin θ)
            qmap.extend(int(model.idx_q[i]) + d for d in range(2))
        else:
            qmap.extend(int(model.idx_q[i]) + off + d for d in range(jm.nq))
        vmap.extend(int(model.idx_v[i]) + off + d for d in range(jm.nv))
    q, v, a = _state(model, rng, 3)
    tau = dynamics.rnea(model, q, v, a)
    for k in range(3):
        np.testing.assert_allclose(pin.rnea(pm, pd, q[k, qmap], v[k, vmap], a[k, vmap]), tau[k, vmap], atol=TOL)
    # and walklab's own re-import of the file keeps masses, points and the total
    back = dynamics.load_urdf(path)
    assert back.total_mass == pytest.approx(model.total_mass, rel=1e-15)
    assert set(back.marker_names) == set(model.marker_names)


@pytest.mark.parametrize("seed", range(6))
def test_all_joint_types_match_pinocchio_built_model(seed):
    """Spherical, planar, free-flyer, unbounded joints (no URDF form) via to_pinocchio."""
    rng = np.random.default_rng(100 + seed)
    types = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")
    model = random_model(rng, 9, types, root=("free_flyer", "planar", "spherical")[seed % 3])
    pm = to_pinocchio(model)
    pd = pm.createData()
    q, v, a = _state(model, rng, 5)
    tau = dynamics.rnea(model, q, v, a)
    for k in range(5):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=TOL)
        pin.computeCentroidalMomentumTimeVariation(pm, pd, q[k], v[k], a[k])
        h, dh = dynamics.centroidal_momentum(model, q[k], v[k], a[k])
        np.testing.assert_allclose(h, pd.hg.vector, atol=TOL)
        np.testing.assert_allclose(dh, pd.dhg.vector, atol=TOL)


def _shipped_tree_models():
    import tomllib

    import configs

    for p in sorted((configs.ROOT / "models").glob("*.toml")):
        if tomllib.loads(p.read_text()).get("kind", "tree") == "tree":
            yield p.stem


@pytest.mark.parametrize("name", list(_shipped_tree_models()))
def test_every_shipped_tree_model_matches_pinocchio(name):
    model = dynamics.load_model(name)
    pm = to_pinocchio(model)
    pd = pm.createData()
    rng = np.random.default_rng(1)
    q, v, a = _state(model, rng, 3)
    tau = dynamics.rnea(model, q, v, a)
    for k in range(3):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=TOL * max(1.0, np.abs(tau).max()))
