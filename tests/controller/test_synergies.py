"""Synergy format, library and the `walklab synergies` command (controller.synergies; methods.md j).

Truths: the crank programme's own analytic rates (the stored splines must reproduce them), the
walking-speed relation v = L w / (2 pi D) of the leg's gait metrics, and the real CLI in a subprocess.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from controller.synergies import jansen
from controller.synergies.format import SynergyError, load, save
from controller.synergies.library import get, load_index
from dynamics.synthesis.crank import load_walker

CONTACT = {"kind": "hunt_crossley_constant", "stiffness": 2e4, "damping": 10.0}


@pytest.fixture(scope="module")
def nominal():
    return jansen.build({"robot": "jansen", "model": "jansen_walker", "speed": 0.3, "turn": 0.2, "profile": "constant",
                         "samples": 360, "contact": CONTACT, "name": "t"})


def test_round_trip_and_reference_matches_the_programme(tmp_path, nominal):
    back = load(save(nominal, tmp_path / "t.npz"))
    assert back.meta == json.loads(json.dumps(back.meta)) and back.meta["name"] == "t"
    for k in ("q", "qd", "qdd", "tau", "contact_force", "period", "wrap"):
        np.testing.assert_array_equal(getattr(back, k), getattr(nominal, k))
    # between samples: the q spline's time derivative equals the programme's shaft rate there
    u = (np.arange(50) + 0.37) / 50
    for j in range(2):
        qs = [back.reference(np.full(2, x)) for x in u]
        dq = back._spline("q")(u, 1)[:, j] + back.wrap[j]
        np.testing.assert_allclose(dq / back.period[j], [r[1][j] for r in qs], rtol=2e-4)
    q0 = back.reference(np.array([0.25, 0.25]))[0]
    q1 = back.reference(np.array([1.25, 1.25]))[0]
    np.testing.assert_allclose(q1 - q0, 2 * np.pi)


def test_walking_speed_and_turn_from_the_shaft_periods(nominal):
    w = load_walker()
    wl, wr = 2 * np.pi / nominal.period
    v = lambda om: om * w.step_length / (2 * np.pi * w.duty_factor)  # noqa: E731
    assert (v(wl) + v(wr)) / 2 == pytest.approx(0.3, rel=1e-9)
    assert (v(wr) - v(wl)) / w.track == pytest.approx(0.2, rel=1e-9)


def test_bad_file_is_a_one_line_error(tmp_path):
    (tmp_path / "x.npz").write_bytes(b"not a zip")
    with pytest.raises(SynergyError, match="x.npz: not a readable nominal file"):
        load(tmp_path / "x.npz")
    with pytest.raises(SynergyError, match="no synergy library"):
        load_index(tmp_path)


def _walklab(*args, cwd):
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_cli_build_list_show(tmp_path):
    (tmp_path / "r.toml").write_text(
        'kind = "robot"\nrobot = "jansen"\nmodel = "jansen_walker"\nactuators = ["left_shaft", "right_shaft"]\n'
        '[synergies]\nlibrary = "lib"\nspeeds = [0.2, 0.4]\nturns = [0.0]\nprofiles = ["constant"]\nsamples = 128\n'
        '[limits]\nvelocity = [8.0, 8.0]\ntorque = [4.0, 4.0]\nslew = [10.0, 10.0]\ntorque_slew = [200.0, 200.0]\n')
    r = _walklab("synergies", "build", "--config", "r.toml", "--jobs", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 nominals written" in r.stdout
    r = _walklab("synergies", "list", "--config", "r.toml", "--json", cwd=tmp_path)
    rows = json.loads(r.stdout)
    assert [x["speed"] for x in rows] == [0.2, 0.4]
    for x in rows:
        assert {"name", "robot", "speed", "period", "zmp_max_deviation", "min_margin", "peak_torque",
                "peak_contact_force", "energy_abs_per_cycle", "profile"} <= set(x)
        assert x["robot"] == "jansen" and x["profile"] == "constant" and x["peak_contact_force"] > 0
    assert rows[0]["period"] == pytest.approx(2 * rows[1]["period"])  # half the speed, twice the period
    r = _walklab("synergies", "show", rows[0]["name"], "--config", "r.toml", "--plot", "p.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert get(tmp_path / "lib", rows[0]["name"]).meta["speed"] == 0.2
    r = _walklab("synergies", "show", "nope", "--config", "r.toml", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no nominal 'nope'" in r.stderr
    r = _walklab("synergies", "build", "--robot", "exo", cwd=tmp_path)
    assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr
