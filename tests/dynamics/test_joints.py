"""Joint types (dynamics/joints: one module per type): every registered type, on both paths, against
Pinocchio built from the type's own Pinocchio mapping; the helical joint (added as one module)
against Pinocchio's JointModelHelicalUnaligned; model files and URDF export for a type with a
parameter."""
import dataclasses

import numpy as np
import pinocchio as pin
import pytest

import dynamics
from dynamics import joints
from dynamics.loader import model_from_dict
from dynamics.model import Model, ModelError
from dynamics.pinocchio_model import to_pinocchio
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

TOL = 1e-9


def _with_types(base: Model, rng, types) -> Model:
    """base with the joints of its non-root segments replaced by joints of `types` (round robin), a
    helical joint getting a random pitch (m/rad)."""
    segs = []
    for k, s in enumerate(base.segments):
        j = s.joint
        if k > 0:
            t = types[k % len(types)]
            j = dataclasses.replace(j, type=t, pitch=float(rng.uniform(-0.3, 0.3)) if t == "helical" else 0.0)
        segs.append(dataclasses.replace(s, joint=j))
    return Model(base.name, tuple(segs), gravity=base.gravity)


def _chain(model: Model) -> Model:
    """model as a chain (each segment hangs on the one before): depth-first, as pin.crba needs."""
    segs = [dataclasses.replace(s, parent=None if k == 0 else model.segments[k - 1].name)
            for k, s in enumerate(model.segments)]
    return Model(model.name, tuple(segs), gravity=model.gravity)


def _check_against_pinocchio(model: Model, rng, N: int = 4, crba: bool = True) -> None:
    pm = to_pinocchio(model)
    pd = pm.createData()
    assert (pm.nq, pm.nv) == (model.nq, model.nv)
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    tau = dynamics.rnea(model, q, v, a)
    acc = dynamics.aba(model, q, v, tau)
    M = dynamics.crba(model, q)
    fk = dynamics.forward_kinematics(model, q)
    h, dh = dynamics.centroidal_momentum(model, q, v, a)
    for k in range(N):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=TOL)
        np.testing.assert_allclose(acc[k], pin.aba(pm, pd, q[k], v[k], tau[k]), atol=1e-7)
        np.testing.assert_allclose(acc[k], a[k], atol=1e-7)
        if crba:
            np.testing.assert_allclose(M[k], pin.crba(pm, pd, q[k]), atol=TOL)
        pin.forwardKinematics(pm, pd, q[k])
        pin.updateFramePlacements(pm, pd)
        for i, s in enumerate(model.segments):
            if s.joint.nv:       # to_pinocchio names the joint of a moving segment after it
                oM = pd.oMi[pm.getJointId(s.joint_name)]
                _, R_a = joints.joint_type(s.joint.type).pinocchio(pin, s.joint)   # a joint frame turned by R_a
                R = oM.rotation if R_a is None else oM.rotation @ R_a.T
                np.testing.assert_allclose(fk.rotation[k, i], R, atol=TOL)
                np.testing.assert_allclose(fk.translation[k, i], oM.translation, atol=TOL)
        pin.computeCentroidalMomentumTimeVariation(pm, pd, q[k], v[k], a[k])
        if model.segments[0].joint.nv:     # Pinocchio's CoM leaves out a fixed root's body
            np.testing.assert_allclose(h[k], pd.hg.vector, atol=TOL)
            np.testing.assert_allclose(dh[k], pd.dhg.vector, atol=TOL)


@pytest.mark.parametrize("name", [t.NAME for t in joints.TYPES if t.NQ])
def test_every_joint_type_matches_pinocchio_in_a_chain(name):
    """A chain of joints of one type (random axes, placements, and pitch for the helical joint) on
    a free flyer: rnea, aba (inverting rnea), crba, placements and centroidal momentum equal
    Pinocchio's (the type's own `pinocchio` mapping) to 1e-9. A type added to joints.TYPES is
    tested here with no further change."""
    rng = np.random.default_rng(sum(map(ord, name)))
    base = random_model(rng, 6, ("revolute",), root="free_flyer", name=name)
    _check_against_pinocchio(_chain(_with_types(base, rng, (name,))), rng)


@pytest.mark.parametrize("seed", range(4))
def test_helical_joints_in_branching_trees_match_pinocchio(seed):
    """Helical joints (random axes, some axis-aligned, random pitch) among revolute, prismatic,
    spherical and planar joints in a branching tree: Pinocchio's JointModelHelicalUnaligned gives
    the same torques, accelerations, placements and centroidal momentum; external wrenches too."""
    rng = np.random.default_rng(700 + seed)
    base = random_model(rng, 10, ("revolute",), root=("free_flyer", "revolute")[seed % 2])
    model = _with_types(base, rng, ("helical", "revolute", "helical", "prismatic", "spherical", "planar"))
    assert sum(s.joint.type == "helical" for s in model.segments) >= 3
    _check_against_pinocchio(model, rng, crba=False)      # pin.crba needs depth-first order
    _check_against_pinocchio(_chain(model), rng)


def test_helical_joint_with_external_wrench_matches_pinocchio():
    rng = np.random.default_rng(7)
    model = _chain(_with_types(random_model(rng, 5, ("revolute",), root="free_flyer"), rng, ("helical",)))
    pm = to_pinocchio(model)
    pd = pm.createData()
    N = 3
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    F, P = rng.normal(scale=30, size=(N, 3)), rng.normal(size=(N, 3))
    tau = dynamics.rnea(model, q, v, a, f_ext=[dynamics.Wrench(model.segments[-1].name, force=F, point=P)])
    for k in range(N):
        pin.forwardKinematics(pm, pd, q[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        fext[-1] = pd.oMi[pm.njoints - 1].actInv(pin.Force(F[k], np.cross(P[k], F[k])))
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k], fext), atol=TOL)


def _segment(**extra) -> dict:
    return {"name": "screw", "parent": "world", "mass": 1.0, "inertia": [0.1, 0.1, 0.1], **extra}


def test_model_files_give_a_helical_joint_its_pitch_and_refuse_it_elsewhere():
    m = model_from_dict({"segment": [_segment(joint="helical", axis=[0, 0, 2], pitch=0.01)]})
    assert (m.segments[0].joint.pitch, m.nq, m.nv) == (0.01, 1, 1)
    np.testing.assert_allclose(m.segments[0].joint.axis, [0, 0, 1])
    with pytest.raises(ModelError, match="a helical joint needs 'pitch'"):
        model_from_dict({"segment": [_segment(joint="helical", axis=[0, 0, 1])]})
    with pytest.raises(ModelError, match="a revolute joint takes no 'pitch'"):
        model_from_dict({"segment": [_segment(joint="revolute", axis=[0, 0, 1], pitch=0.01)]})
    with pytest.raises(ModelError, match="pitch"):
        model_from_dict({"segment": [_segment(joint="helical", axis=[0, 0, 1], pitch=float("nan"))]})


def test_urdf_export_names_a_joint_type_it_cannot_write():
    rng = np.random.default_rng(3)
    model = _with_types(random_model(rng, 3, ("revolute",)), rng, ("helical",))
    with pytest.raises(ModelError, match="URDF has no helical joint"):
        dynamics.urdf_string(model)


def test_configuration_derivative_integrates_to_the_next_configuration():
    """q̇(q, v) of every type with coordinates, against a finite difference of Pinocchio's
    integrate (q ⊕ v dt) — the independent definition of v for quaternion and (cos θ, sin θ) blocks."""
    rng = np.random.default_rng(11)
    names = [t.NAME for t in joints.TYPES if t.NQ]
    model = _chain(_with_types(random_model(rng, len(names) + 1, ("revolute",), root="free_flyer"), rng, names))
    pm = to_pinocchio(model)
    q = random_configuration(model, rng, 3)
    v = rng.normal(size=(3, model.nv))
    qd = dynamics.configuration_derivative(model, q, v)
    dt = 1e-6
    for k in range(3):
        fd = (pin.integrate(pm, q[k], v[k] * dt) - pin.integrate(pm, q[k], -v[k] * dt)) / (2 * dt)
        np.testing.assert_allclose(qd[k], fd, atol=1e-6)
