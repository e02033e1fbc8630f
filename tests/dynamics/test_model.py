"""Model description and the TOML loader: the documented example, shipped names, linkage
dispatch, and one-line errors naming file and segment for bad files."""
import re
from pathlib import Path

import numpy as np
import pytest

import dynamics
from dynamics import ModelError

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

REPO = Path(__file__).resolve().parents[2]


def doc_example() -> str:
    text = (REPO / "docs" / "models.md").read_text()
    return re.search(r"## Example\n\n```toml\n(.*?)```", text, re.S).group(1)


def write(tmp_path, text, name="m.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_documented_example_loads_with_the_documented_layout(tmp_path):
    m = dynamics.load_model(write(tmp_path, doc_example()))
    assert m.name == "leg_on_cart"
    assert (m.nq, m.nv) == (3, 3)
    assert [s.name for s in m.segments] == ["cart", "thigh", "shank"]
    assert m.parents.tolist() == [-1, 0, 1]
    assert m.total_mass == pytest.approx(15.2)
    assert m.marker_names == ("THI", "TIB") and m.contact_names == ("heel", "toe")
    assert m.segment("thigh").joint_name == "hip"
    assert m.segment("thigh").joint.upper == 2.0
    np.testing.assert_array_equal(m.segment("shank").joint.translation, [0, 0, -0.42])
    assert m.actuators[0].gear_ratio == 50.0 and m.actuators[0].joint == "shank"
    # the knee sits 0.42 m below the hip, which sits 1 m up on the cart: check with kinematics
    pl = dynamics.forward_kinematics(m, [0.3, 0.0, 0.0])
    np.testing.assert_allclose(pl.translation[2], [0.3, 0.0, 0.58])
    # hip flexed by 90° about +y swings the knee forward: R_y(π/2) (0, 0, −0.42) = (−0.42, 0, 0)
    pl = dynamics.forward_kinematics(m, [0.0, np.pi / 2, 0.0])
    np.testing.assert_allclose(pl.translation[2], [-0.42, 0.0, 1.0], atol=1e-15)


def test_rpy_and_full_inertia(tmp_path):
    text = doc_example().replace('joint_name = "knee"', 'joint_name = "knee"\nrpy = [0.0, 0.0, 1.5707963267948966]')
    text = text.replace("inertia = [0.04, 0.04, 0.005]", "inertia = [0.04, 0.05, 0.02, 0.001, 0.002, 0.003]")
    m = dynamics.load_model(write(tmp_path, text))
    s = m.segment("shank")
    np.testing.assert_allclose(s.joint.rotation, [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-15)
    np.testing.assert_array_equal(s.inertia, [[0.04, 0.001, 0.002], [0.001, 0.05, 0.003], [0.002, 0.003, 0.02]])


# models.md 8.2, de Leva (1996) male: segment mass in % of body mass, as printed; the reference subject
# (73.0 kg, 1.741 m) is the one human15 was generated for. human15's thorax is the C7 upper trunk
# plus the middle trunk, its pelvis the lower trunk (the file's notes).
DE_LEVA_MALE_MASS_PCT = {"head": 6.94, "thorax": 15.96 + 16.33, "pelvis": 11.17, "upper_arm": 2.71,
                         "forearm": 1.62, "hand": 0.61, "thigh": 14.16, "shank": 4.33, "foot": 1.37}
DE_LEVA_MALE_BODY_MASS = 73.0


def test_shipped_model_by_name():
    """A name is the file configs/models/NAME.toml, and human15 is the published subject: every
    segment's mass is its printed de Leva fraction of 73.0 kg, the floating base at the pelvis."""
    m = dynamics.load_model("human15")
    from_file = dynamics.load_model(REPO / "configs" / "models" / "human15.toml")
    assert m.name == "human15" and [s.name for s in m.segments] == [s.name for s in from_file.segments]
    assert m.segments[0].name == "pelvis" and m.segments[0].joint.type == "free_flyer"
    massive = {s.name: s.mass for s in m.segments if s.mass > 0}
    assert len(massive) == 15  # head, thorax, pelvis and six pairs of limb segments
    for name, mass in massive.items():
        kind = name.removesuffix("_l").removesuffix("_r")
        assert mass == pytest.approx(DE_LEVA_MALE_MASS_PCT[kind] / 100 * DE_LEVA_MALE_BODY_MASS, abs=1e-9), name
    assert m.total_mass == pytest.approx(DE_LEVA_MALE_BODY_MASS, abs=1e-9)  # the printed % sum to 100.00
    assert dynamics.load_model("exoskeleton").total_mass > m.total_mass  # a name reaches its own file


def test_linkage_files_go_to_the_linkage_loader(tmp_path):
    from dynamics.linkage.model import Linkage

    obj = dynamics.load_model("jansen_leg")
    assert isinstance(obj, Linkage) and len(obj.bodies) == 11   # the 11 bars of models.md 2.1


def test_missing_file_and_unknown_name():
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        dynamics.load_model("/no/such/dir/nope.toml")
    with pytest.raises(FileNotFoundError, match="no shipped model named 'no_such_model'"):
        dynamics.load_model("no_such_model")


BAD = [
    ('parent = "cart"\njoint = "revolute"\njoint_name = "hip"', 'parent = "pelvis"\njoint = "revolute"\njoint_name = "hip"',
     r"segment 'thigh': unknown parent 'pelvis'"),
    ('name = "cart"\nparent = "world"', 'name = "cart"\nparent = "shank"',
     r"segment 'cart': parent 'shank' is not defined before its child \(a cycle"),
    ("mass = 7.0", "mass = -7.0", r"segment 'thigh': mass must be finite and >= 0 kg, got -7.0"),
    ("inertia = [0.11, 0.11, 0.02]", "inertia = [0.11, -0.11, 0.02]", r"segment 'thigh': inertia not positive definite"),
    ("inertia = [0.11, 0.11, 0.02]", "inertia = [0.01, 0.01, 0.05]", r"segment 'thigh': inertia violates the triangle inequality"),
    ("mass = 7.0", "mass = 7.0\ncolour = 'red'", r"segment 'thigh': unknown key 'colour'"),
    ("mass = 7.0", 'mass = "seven"', r"segment 'thigh': mass: expected a finite number, got 'seven'"),
    ("com = [0.0, 0.0, -0.18]", "com = [0.0, -0.18]", r"segment 'thigh': com: expected a list of 3 finite numbers"),
    ('joint = "revolute"\njoint_name = "hip"', 'joint = "hinge"\njoint_name = "hip"', r"segment 'thigh': joint: unknown type 'hinge'"),
    ('axis = [0, 1, 0]\nmass = 7.0', 'mass = 7.0', r"segment 'thigh': a revolute joint needs 'axis'"),
    ('gravity = [0.0, 0.0, -9.81]', 'gravity = [0.0, 0.0, -9.81]\nfriction = 1', r"top level: unknown key 'friction'"),
    ('joint = "shank"\ngear_ratio = 50.0', 'joint = "ankle"\ngear_ratio = 50.0', r"actuator 'knee_motor': unknown joint segment 'ankle'"),
    ("limits = { lower = -0.5, upper = 2.0", "limits = { lower = 2.5, upper = 2.0", r"segment 'thigh': joint lower limit 2.5 above upper"),
]


@pytest.mark.parametrize("old, new, message", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_model_file_one_line_error_naming_file_and_segment(tmp_path, old, new, message):
    text = doc_example()
    assert old in text
    path = write(tmp_path, text.replace(old, new, 1), "bad_model.toml")
    with pytest.raises(ModelError) as e:
        dynamics.load_model(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    assert re.search(message, msg), msg
    assert isinstance(e.value, ValueError)


def test_invalid_toml_names_the_file(tmp_path):
    path = write(tmp_path, "name = \n", "broken.toml")
    with pytest.raises(ModelError, match=r"broken.toml: not valid TOML"):
        dynamics.load_model(path)


def test_duplicate_names_rejected(tmp_path):
    text = doc_example().replace('name = "shank"', 'name = "thigh"')
    with pytest.raises(ModelError, match=r"segment 'thigh': duplicate segment name"):
        dynamics.load_model(write(tmp_path, text))
    text = doc_example().replace("TIB =", "THI =")
    with pytest.raises(ModelError, match=r"segment 'shank': duplicate marker/contact name 'THI'"):
        dynamics.load_model(write(tmp_path, text))


def test_massless_segment_allowed_but_not_with_inertia(tmp_path):
    text = doc_example().replace("mass = 5.0\ninertia = [0.05, 0.05, 0.05]", "mass = 0.0")
    assert dynamics.load_model(write(tmp_path, text)).segment("cart").mass == 0
    text = doc_example().replace("mass = 5.0\n", "mass = 0.0\n")
    with pytest.raises(ModelError, match="massless segment with non-zero inertia"):
        dynamics.load_model(write(tmp_path, text))
