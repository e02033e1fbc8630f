"""`walklab model` through real subprocesses (python -m controller.cli model ...).

Truths: the model files' own contents (segment names, table sums of models.md), invariances of the
linkage metrics (the foot path does not depend on crank speed; a higher ground level can only
lengthen the stance), and the generated human's body mass and stature.
"""
import json
import subprocess
import sys
import tomllib

import numpy as np
import pytest

import configs
import dynamics


def walklab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "controller.cli", "model", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def one_line_error(result, *words):
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("walklab model: error: ")
    for w in words:
        assert w in lines[0], lines[0]


def test_show_planar_table_lists_segments_joints_and_totals():
    r = walklab("show", "zinkovsky_4_1")
    assert r.returncode == 0, r.stderr
    for seg, joint in [("feet", "toe"), ("shanks", "ankle"), ("thighs", "knee"), ("trunk", "hip"),
                       ("upper_arms", "shoulder"), ("forearms", "elbow"), ("head", "neck")]:
        line = next(l for l in r.stdout.splitlines() if f" {seg} " in l and f" {joint} " in l)
        assert "revolute" in line or "planar" in line
    assert "mass 77.8200 kg" in r.stdout  # models.md 1.1: sum m = 77.82 kg
    assert "nq = 9, nv = 9" in r.stdout   # 7 + 2 DOF


def test_show_file_path_with_actuators(tmp_path):
    path = tmp_path / "cart.toml"
    path.write_text("""name = "cart_leg"
[[segment]]
name = "cart"
parent = "world"
joint = "prismatic"
axis = [1, 0, 0]
mass = 5.0
inertia = [0.05, 0.05, 0.05]
[[segment]]
name = "thigh"
parent = "cart"
joint = "revolute"
joint_name = "hip"
axis = [0, 1, 0]
mass = 7.25
com = [0.0, 0.0, -0.18]
inertia = [0.11, 0.11, 0.02]
[[actuator]]
name = "hip_motor"
joint = "thigh"
gear_ratio = 50.0
torque_limit = 80.0
""")
    r = walklab("show", str(path))
    assert r.returncode == 0, r.stderr
    assert "model cart_leg" in r.stdout
    assert "mass 12.2500 kg" in r.stdout and "nq = 2, nv = 2" in r.stdout
    assert "hip_motor" in r.stdout and "hip" in r.stdout


def test_show_exoskeleton_reports_actuators_and_total():
    r = walklab("show", "exoskeleton")
    assert r.returncode == 0, r.stderr
    exo = dynamics.load_model("exoskeleton")
    for a in exo.actuators:
        assert a.name in r.stdout
    assert f"mass {exo.total_mass:.4f} kg" in r.stdout
    assert "(20 with mass)" in r.stdout  # 15 human segments + 5 exoskeleton bodies
    for side in ("_r", "_l"):
        assert f"foot{side}: contacts heel{side}, toe{side}" in r.stdout


def test_show_linkage_lists_bodies():
    r = walklab("show", "jansen_leg")
    assert r.returncode == 0, r.stderr
    with open(configs.path("models/jansen_leg.toml"), "rb") as f:
        bodies = tomllib.load(f)["bodies"]
    for b in bodies:
        assert f" {b['name']} " in r.stdout
    assert f"{len(bodies)} bodies" in r.stdout
    assert f"mass {sum(b['mass'] for b in bodies):.4f} kg" in r.stdout


def test_show_unknown_name_is_one_line_error():
    one_line_error(walklab("show", "no_such_model"), "no_such_model")


def test_show_bad_file_names_the_segment(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[segment]]\nname = "shank"\nparent = "world"\njoint = "fixed"\nmass = -2.0\n')
    one_line_error(walklab("show", str(bad)), "bad.toml", "shank", "mass")


KEYS = ("step_length", "step_height", "path_width", "leg_length", "duty_factor", "torque_min", "torque_max",
        "energy_abs_per_cycle")


def linkage_json(*args):
    r = walklab("linkage", *args, "--json")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip().splitlines()) == 1
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", ["jansen_leg", "chebyshev_leg"])
def test_linkage_json_metrics_and_invariances(name):
    base = linkage_json(name)
    for k in KEYS:
        assert isinstance(base[k], float) and np.isfinite(base[k]), k
    assert 0 < base["duty_factor"] < 1
    assert 0 < base["step_length"] <= base["path_width"]
    assert base["step_height"] > 0 and base["leg_length"] > 0
    assert base["torque_min"] < 0 < base["torque_max"]  # gravity and inertia both ways over a turn
    # |tau omega| integrated over one turn is at least |net work| and at most max|tau| * 2 pi.
    assert abs(base["energy_net_per_cycle"]) <= base["energy_abs_per_cycle"]
    assert base["energy_abs_per_cycle"] <= max(-base["torque_min"], base["torque_max"]) * 2 * np.pi * (1 + 1e-9)
    # The foot path is kinematic: independent of the crank speed; the torque is not.
    fast = linkage_json(name, "--crank-speed", "12.0")
    for k in ("step_length", "step_height", "path_width", "leg_length", "duty_factor"):
        assert fast[k] == pytest.approx(base[k], abs=1e-6), k
    assert fast["torque_max"] != pytest.approx(base["torque_max"], rel=1e-3)
    # A higher ground level (more penetration) lengthens the stance; the whole path is unchanged.
    deep = linkage_json(name, "--ground-penetration", "0.02")
    assert deep["duty_factor"] > base["duty_factor"] and deep["step_length"] >= base["step_length"]
    for k in ("step_height", "path_width", "leg_length"):
        assert deep[k] == pytest.approx(base[k], abs=1e-9), k


def test_linkage_table_output():
    r = walklab("linkage", "jansen_leg")
    assert r.returncode == 0, r.stderr
    for k in KEYS:
        assert any(line.split()[:1] == [k] for line in r.stdout.splitlines()), k


def test_linkage_bad_inputs_are_one_line_errors():
    one_line_error(walklab("linkage", "no_such_leg", "--json"), "no_such_leg")
    one_line_error(walklab("linkage", "jansen_leg", "--json", "--ground-penetration", "-0.01"), "ground_penetration")


def test_human_generator_makes_a_subject_specific_model(tmp_path):
    out = tmp_path / "subject.toml"
    r = walklab("human", "--mass", "72.6", "--height", "1.78", "-o", str(out))
    assert r.returncode == 0, r.stderr
    model = dynamics.load_model(out)
    assert model.total_mass == pytest.approx(72.6, abs=1e-9)
    assert sum(s.mass > 0 for s in model.segments) == 15
    with open(out, "rb") as f:
        base_z = tomllib.load(f)["meta"]["standing_base_height"]
    q = model.neutral()
    q[2] = base_z
    assert dynamics.marker_positions(model, q, ["VERT"])[0, 2] == pytest.approx(1.78, abs=1e-9)
    np.testing.assert_allclose(dynamics.contact_positions(model, q)[:, 2], 0.0, atol=1e-9)


def test_human_generator_female_ball_joints_to_stdout():
    r = walklab("human", "--mass", "58", "--height", "1.65", "--sex", "female", "--ball-joints")
    assert r.returncode == 0, r.stderr
    model = dynamics.model_from_dict(tomllib.loads(r.stdout))
    assert model.total_mass == pytest.approx(58.0, abs=1e-9)
    assert len(model.segments) == 15
    assert [s.joint.type for s in model.segments].count("spherical") == 6  # lumbar, neck, 2 shoulders, 2 hips


@pytest.mark.parametrize("name, args", [("human15", ()), ("exoskeleton", ("--exoskeleton",))])
def test_shipped_human_files_are_the_generator_output(name, args):
    r = walklab("human", "--mass", "73", "--height", "1.741", *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == configs.path(f"models/{name}.toml").read_text()


def test_human_generator_bad_subject_is_one_line_error():
    one_line_error(walklab("human", "--mass", "72.6", "--height", "178"), "stature", "178")


def test_urdf_export_opens_in_pinocchio_and_shows_back(tmp_path):
    import pinocchio as pin

    out = tmp_path / "exo.urdf"
    r = walklab("urdf", "exoskeleton", "-o", str(out))
    assert r.returncode == 0, r.stderr
    exo = dynamics.load_model("exoskeleton")
    pm = pin.buildModelFromUrdf(str(out), pin.JointModelFreeFlyer())
    assert (pm.nq, pm.nv) == (exo.nq, exo.nv)
    assert sum(i.mass for i in pm.inertias) == pytest.approx(exo.total_mass, rel=1e-12)
    shown = walklab("show", str(out), "--floating")
    assert shown.returncode == 0, shown.stderr
    assert f"mass {exo.total_mass:.4f} kg, nq = {exo.nq}, nv = {exo.nv}, 4 actuators" in shown.stdout


def test_urdf_of_a_linkage_is_one_line_error():
    one_line_error(walklab("urdf", "jansen_leg"), "jansen_leg", "linkage")
