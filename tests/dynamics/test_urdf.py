"""URDF import and export: round trip of a TOML model, errors on unsupported content."""
import re
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

import dynamics
from dynamics import ModelError
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

REPO = Path(__file__).resolve().parents[2]


def example_model(tmp_path):
    text = (REPO / "docs" / "models.md").read_text()
    p = tmp_path / "example.toml"
    p.write_text(re.search(r"## Example\n\n```toml\n(.*?)```", text, re.S).group(1))
    return dynamics.load_model(p)


def test_toml_model_round_trips_through_urdf(tmp_path):
    model = example_model(tmp_path)
    path = tmp_path / "leg.urdf"
    dynamics.save_urdf(model, path)
    back = dynamics.load_urdf(path)
    # the cart's prismatic joint needs a world link: one extra, massless, fixed segment
    assert back.segments[0].name == "world" and back.segments[0].mass == 0
    assert [s.name for s in back.segments[1:]] == [s.name for s in model.segments]
    assert [s.joint_name for s in back.segments[1:]] == [s.joint_name for s in model.segments]
    assert back.marker_names == model.marker_names and back.contact_names == model.contact_names
    assert back.actuators == model.actuators
    assert back.segment("thigh").joint.upper == 2.0
    rng = np.random.default_rng(3)
    q, v, a = rng.normal(size=(3, 5, 3))
    np.testing.assert_allclose(dynamics.rnea(back, q, v, a), dynamics.rnea(model, q, v, a), atol=1e-12)
    np.testing.assert_allclose(dynamics.marker_positions(back, q), dynamics.marker_positions(model, q), atol=1e-14)
    # and a standard reader (Pinocchio's urdfdom) gets the same dynamics
    pm = pin.buildModelFromUrdf(str(path))
    pd = pm.createData()
    np.testing.assert_allclose(pin.rnea(pm, pd, q[0], v[0], a[0]), dynamics.rnea(model, q[0], v[0], a[0]), atol=1e-9)


def test_floating_base_export_opens_in_pinocchio_with_the_same_dynamics(tmp_path):
    rng = np.random.default_rng(11)
    model = random_model(rng, 8, ("revolute", "prismatic", "fixed", "revolute_unbounded"), root="free_flyer")
    path = tmp_path / "floating.urdf"
    dynamics.save_urdf(model, path)
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    pm.gravity = pin.Motion(np.concatenate((model.gravity, np.zeros(3))))
    pd = pm.createData()
    by_name = {s.joint_name: model.index[s.name] for s in model.segments}
    by_name["root_joint"] = 0
    qmap, vmap = [], []
    for name, jm in zip(list(pm.names)[1:], list(pm.joints)[1:]):     # Pinocchio's order, by joint name
        i = by_name[name]
        qmap += range(model.idx_q[i], model.idx_q[i] + jm.nq)
        vmap += range(model.idx_v[i], model.idx_v[i] + jm.nv)
    q = random_configuration(model, rng, 3)
    v, a = rng.normal(size=(2, 3, model.nv))
    tau = dynamics.rnea(model, q, v, a)
    for k in range(3):
        np.testing.assert_allclose(pin.rnea(pm, pd, q[k, qmap], v[k, vmap], a[k, vmap]), tau[k, vmap], atol=1e-9)


def test_spherical_joint_cannot_be_exported(tmp_path):
    model = random_model(np.random.default_rng(0), 4, ("spherical",), root="revolute")
    with pytest.raises(ModelError, match=r"segment 's1': URDF has no spherical joint"):
        dynamics.save_urdf(model, tmp_path / "x.urdf")


@pytest.mark.parametrize("text, message", [
    ("<robot name='r'><link name='a'/><link name='b'/>", r"not valid XML"),
    ("<model/>", r"root element is <model>"),
    ("<robot name='r'><link name='a'/><link name='b'/><joint name='j' type='planar'><parent link='a'/>"
     "<child link='b'/></joint></robot>", r"joint 'j': unsupported joint type 'planar'"),
    ("<robot name='r'><link name='a'/><joint name='j' type='fixed'><parent link='a'/><child link='zz'/></joint></robot>",
     r"joint 'j': unknown parent or child link \('a', 'zz'\)"),
    ("<robot name='r'><link name='a'/><link name='b'/></robot>", r"expected one root link, found \['a', 'b'\]"),
    ("<robot name='r'><link name='a'><inertial><mass value='-1'/></inertial></link></robot>",
     r"segment 'a': mass must be finite and >= 0"),
    ("<robot name='r'><link name='a'/><link name='b'/><joint name='j' type='revolute'><parent link='a'/>"
     "<child link='b'/><axis xyz='0 0 x'/></joint></robot>", r"joint 'j' axis: expected 3 numbers"),
])
def test_bad_urdf_one_line_error(tmp_path, text, message):
    p = tmp_path / "bad.urdf"
    p.write_text(text)
    with pytest.raises(ModelError) as e:
        dynamics.load_urdf(p)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)
    assert re.search(message, str(e.value)), str(e.value)


def test_missing_urdf_file():
    with pytest.raises(FileNotFoundError, match="nothing.urdf"):
        dynamics.load_urdf("/no/where/nothing.urdf")
