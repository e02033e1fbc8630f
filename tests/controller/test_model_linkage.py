"""`walklab model linkage` (real subprocess) and `linkage_report` against independent truths:
the quasi-static crank work is the total variation of the potential energy of the assembled leg,
the gait metrics agree with a brute-force scan of a 10x finer foot path, and the report is the
same for both senses of rotation (at constant speed the torque depends on the speed squared)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dynamics.linkage.assembly import joint_points
from dynamics.linkage.model import LinkageError, read_linkage
from dynamics.linkage.report import linkage_report

from dynamics.model import G


def cli(*args):
    return subprocess.run([sys.executable, "-m", "controller.cli", "model", "linkage", *args],
                          capture_output=True, text=True, timeout=120)


def potential_and_foot(name, theta):
    """V(theta) = sum m_i g y_centre_i from the constructed joint points, and the foot path."""
    model = read_linkage(name)
    pts = joint_points(model, theta)
    V = sum(b.mass * G * 0.5 * (pts[mn][:, 1] + pts[pl][:, 1])
            for b, (mn, pl) in zip(model.bodies, model.body_ends))
    return model, V, pts[model.foot]


@pytest.mark.parametrize("name", ["jansen_leg", "chebyshev_leg"])
def test_cli_json_quasi_static_energy_is_total_variation_of_potential(name):
    r = cli(name, "--crank-speed", "0.001", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    theta = np.linspace(0.0, 2 * np.pi, 20001)
    _, V, _ = potential_and_foot(name, theta)
    assert rep["energy_abs_per_cycle"] == pytest.approx(np.abs(np.diff(V)).sum(), rel=1e-4)
    dV = np.gradient(V, theta)                  # quasi-static crank torque = dV/dtheta
    assert rep["torque_max"] == pytest.approx(dV.max(), rel=1e-3)
    assert rep["torque_min"] == pytest.approx(dV.min(), rel=1e-3)
    assert abs(rep["energy_net_per_cycle"]) < 1e-9


@pytest.mark.parametrize("name, pen", [("jansen_leg", 0.008), ("chebyshev_leg", 0.002)])
def test_gait_metrics_match_a_brute_force_scan(name, pen):
    rep = linkage_report(name, ground_penetration=pen)
    theta = np.linspace(0.0, 2 * np.pi, 14400, endpoint=False)
    model, _, foot = potential_and_foot(name, theta)
    y_g = foot[:, 1].min() + pen
    stance = foot[:, 1] < y_g
    assert rep["ground_level"] == pytest.approx(y_g, abs=1e-6)
    assert rep["step_length"] == pytest.approx(np.ptp(foot[stance, 0]), abs=2e-4)
    assert rep["duty_factor"] == pytest.approx(stance.mean(), abs=2e-4)
    assert rep["step_height"] == pytest.approx(np.ptp(foot[:, 1]), abs=1e-6)
    assert rep["path_width"] == pytest.approx(np.ptp(foot[:, 0]), abs=1e-6)
    assert rep["leg_length"] == pytest.approx(model.ground_points["O2"][1] - foot[:, 1].min(), abs=1e-6)
    assert rep["energy_abs_stance"] + rep["energy_abs_swing"] == pytest.approx(rep["energy_abs_per_cycle"])


def test_report_is_the_same_for_both_senses_of_rotation():
    fwd, back = linkage_report("jansen_leg", 5.0), linkage_report("jansen_leg", -5.0)
    for k in ("step_length", "step_height", "path_width", "leg_length", "duty_factor", "torque_min",
              "torque_max", "energy_abs_per_cycle"):
        assert back[k] == pytest.approx(fwd[k], rel=1e-9, abs=1e-12), k


@pytest.mark.parametrize("kwargs, message", [
    ({"crank_speed": 0.0}, "crank_speed"),
    ({"crank_speed": float("nan")}, "crank_speed"),
    ({"ground_penetration": -0.01}, "ground_penetration"),
    ({"ground_penetration": 1.0}, "never leave the ground"),
])
def test_report_bad_arguments(kwargs, message):
    with pytest.raises(LinkageError, match=message):
        linkage_report("jansen_leg", **kwargs)


def test_cli_bad_linkage_file_is_one_line_error(tmp_path):
    bad = tmp_path / "leg.toml"
    bad.write_text('kind = "linkage"\nname = "leg"\n[ground]\nO1 = [0.0, 0.0]\n'
                   '[[bodies]]\nname = "crank"\nminus = "O1"\nplus = "A"\nlength = -0.1\nmass = 0.1\n')
    r = cli(str(bad), "--json")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "leg.toml" in lines[0] and "bodies[0].length (crank)" in lines[0]


UNREACHABLE = """kind = "linkage"
name = "four_bar"
foot = "B"
pivot = "O2"
[ground]
O1 = [0.0, 0.0]
O2 = [9.0, 0.0]
[[bodies]]
name = "crank"
minus = "O1"
plus = "A"
length = 1.0
mass = 1.0
[[bodies]]
name = "coupler"
minus = "A"
plus = "B"
length = 1.2
mass = 1.0
[[bodies]]
name = "rocker"
minus = "O2"
plus = "B"
length = 2.0
mass = 1.0
[[joints]]
type = "ground"
end = "crank-"
at = "O1"
[[joints]]
type = "pin"
ends = ["crank+", "coupler-"]
[[joints]]
type = "pin"
ends = ["coupler+", "rocker+"]
[[joints]]
type = "ground"
end = "rocker-"
at = "O2"
[[joints]]
type = "angle"
body = "crank"
driven = true
[[assembly]]
point = "A"
crank = ["O1", 1.0]
[[assembly]]
point = "B"
circle = ["A", 1.2, "O2", 2.0]
sign = 1
"""


@pytest.mark.parametrize("command", ["linkage", "show"])
def test_cli_unreachable_closed_loop_is_one_line_error(tmp_path, command):
    bad = tmp_path / "far.toml"
    bad.write_text(UNREACHABLE)
    r = subprocess.run([sys.executable, "-m", "controller.cli", "model", command, str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "far.toml" in lines[0] and "unreachable closed loop" in lines[0], r.stderr
    assert "point B" in lines[0]
