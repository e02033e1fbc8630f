"""Linkage loading, constructive assembly and Newton position solve (methods.md c.2, c.3, c.7).

Truths: the joint-position fixture of models.md 2.6 (computed independently of this code), the
bar lengths themselves (every bar keeps its length), finite differences of the position solve for
the velocity solve, and the Grashof criterion for where a four-bar can be driven.
"""
import copy
import math

import numpy as np
import pytest

from dynamics.linkage import constraints as C
from dynamics.linkage import kinematics as K
from dynamics.linkage import position as P
from dynamics.linkage.assembly import joint_points
from dynamics.linkage.model import (AssemblyError, LinkageError, SingularConfigurationError,
                                    load_linkage, read_linkage)

# models.md 2.6: theta (deg) -> joint positions (m)
FIXTURE = {
    0: {"A": (0.1000, 0.0000), "B": (-0.1592, 0.2090), "C": (-0.4972, 0.0536), "D": (-0.1797, -0.3038),
        "E": (-0.3963, -0.1893), "F": (-0.2859, -0.6131)},
    90: {"A": (0.0000, 0.1000), "B": (-0.3112, 0.2186), "C": (-0.5160, -0.0919), "D": (-0.1396, -0.2887),
         "E": (-0.3828, -0.3187), "F": (-0.0497, -0.6031)},
    180: {"A": (-0.1000, 0.0000), "B": (-0.3659, 0.2005), "C": (-0.5020, -0.1457), "D": (-0.4399, -0.2346),
          "E": (-0.6474, -0.3648), "F": (-0.2252, -0.4811)},
    270: {"A": (0.0000, -0.1000), "B": (-0.1409, 0.2017), "C": (-0.4891, 0.0708), "D": (-0.3684, -0.2867),
          "E": (-0.5858, -0.1738), "F": (-0.4723, -0.5968)},
}


@pytest.fixture(scope="module")
def jansen():
    return read_linkage("jansen_leg")


def _check_fixture(model, q, thetas_deg):
    for k, deg in enumerate(thetas_deg):
        for name, xy in FIXTURE[deg].items():
            got = C.point_positions(model, q[k:k + 1], name)[0]
            assert np.allclose(got, xy, atol=1e-4), (deg, name, got, xy)


def test_jansen_structure(jansen):
    # models.md 2.3: 11 bodies, 16 pins (32 rows) + the crank driver = 33 rows for 33 coordinates
    assert jansen.n_bodies == 11 and jansen.n_coords == 33 and jansen.n_rows == 33
    assert list(jansen.driver_rows) == [32]
    assert np.allclose(jansen.mass_diag[2::3], [b.mass * b.length ** 2 / 12 for b in jansen.bodies])


def test_jansen_fixture_assembled_and_newton(jansen):
    th = np.radians([0, 90, 180, 270])
    q = P.assembled_positions(jansen, th)
    assert np.all(np.linalg.norm(C.residual(jansen, q, th), axis=1) < 1e-12)
    _check_fixture(jansen, q, [0, 90, 180, 270])


def test_jansen_fixture_by_continuation_over_two_revolutions(jansen):
    # Newton from the previous sample only (no constructive assembly after the first sample):
    # after 1.75 revolutions the tracked branch must still be the fixture's branch.
    th = np.radians(np.arange(0, 361 + 270, 3.0))
    q = P.track(jansen, th)
    assert np.all(np.linalg.norm(C.residual(jansen, q, th), axis=1) < 1e-12)
    idx = [int(np.flatnonzero(np.isclose(th, math.radians(360 + d)))[0]) for d in (0, 90, 180, 270)]
    _check_fixture(jansen, q[idx], [0, 90, 180, 270])


def test_bar_lengths_kept_on_the_whole_cycle(jansen):
    th = np.linspace(0, 2 * np.pi, 97)
    pts = joint_points(jansen, th)
    q = P.assembled_positions(jansen, th)
    for body, (mn, pl) in zip(jansen.bodies, jansen.body_ends):
        a = C.point_positions(jansen, q, mn)
        b = C.point_positions(jansen, q, pl)
        assert np.allclose(np.linalg.norm(b - a, axis=1), body.length, atol=1e-12)
    assert np.allclose(C.point_positions(jansen, q, "F"), pts["F"], atol=1e-12)


def test_condition_number_bounded_on_nominal_leg(jansen):
    """cond_2(Phi_q) over the cycle equals sigma_max / sigma_min of a Jacobian built here by central
    differences of the constraint residual (not the analytic Phi_q), and its worst value is the
    published one: methods.md c.3, "about 400 at worst" for the nominal Jansen leg."""
    th = np.linspace(0, 2 * np.pi, 181)
    q = P.assembled_positions(jansen, th)
    h = 1e-6
    J = np.stack([(C.residual(jansen, q + h * e, th) - C.residual(jansen, q - h * e, th)) / (2 * h)
                  for e in np.eye(jansen.n_coords)], axis=2)  # (N, rows, coords)
    sv = np.linalg.svd(J, compute_uv=False)
    expected = sv[:, 0] / sv[:, -1]
    cond = P.condition_numbers(jansen, q)
    np.testing.assert_allclose(cond, expected, rtol=1e-6)
    assert 300 < cond.max() < 500


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_velocity_and_acceleration_solves_match_finite_differences(jansen, direction):
    th0, h = 0.7, 1e-5
    th = th0 + direction * np.array([-h, 0.0, h])
    q = P.assembled_positions(jansen, th)
    w = direction * 3.0  # rad/s, crank turning either way
    qd = K.velocities(jansen, q[1:2], th[1:2], w)
    fd = (q[2] - q[0]) / (2 * h) * 3.0
    assert np.allclose(qd[0], fd, atol=1e-6)
    qdd = K.accelerations(jansen, q[1:2], qd, th[1:2], w, 0.0)
    fdd = (q[2] - 2 * q[1] + q[0]) / h ** 2 * 9.0
    assert np.allclose(qdd[0], fdd, atol=2e-3 * np.abs(fdd).max())


# --- a four-bar built in the test: ground 2.5, crank 1, coupler 1.2, rocker 2 (non-Grashof:
# s + l = 3.5 > p + q = 3.2, the crank cannot turn fully) -----------------------------------

def four_bar(crank=1.0, coupler=1.2, rocker=2.0, ground=2.5, masses=(1.0, 1.0, 1.0)):
    return {
        "kind": "linkage", "name": "four_bar", "gravity": 9.81, "foot": "B", "pivot": "O2",
        "ground": {"O1": [0.0, 0.0], "O2": [ground, 0.0]},
        "bodies": [
            {"name": "crank", "minus": "O1", "plus": "A", "length": crank, "mass": masses[0]},
            {"name": "coupler", "minus": "A", "plus": "B", "length": coupler, "mass": masses[1]},
            {"name": "rocker", "minus": "O2", "plus": "B", "length": rocker, "mass": masses[2]},
        ],
        "joints": [
            {"type": "ground", "end": "crank-", "at": "O1"},
            {"type": "pin", "ends": ["crank+", "coupler-"]},
            {"type": "pin", "ends": ["coupler+", "rocker+"]},
            {"type": "ground", "end": "rocker-", "at": "O2"},
            {"type": "angle", "body": "crank", "driven": True},
        ],
        "assembly": [
            {"point": "A", "crank": ["O1", crank]},
            {"point": "B", "circle": ["A", coupler, "O2", rocker], "sign": 1},
        ],
    }


def test_four_bar_limit_position_is_reported_not_flipped():
    model = load_linkage(four_bar(), "four_bar (test)")
    # limit where crank + coupler = 2.2 reaches from O1 to the rocker circle: |A B| collinear
    # crank angle th* with |O2 - A| = coupler + rocker? no: here |O2 - A| = rocker + coupler = 3.2
    # is unreachable (max 3.5 ok) and |O2 - A| = rocker - coupler = 0.8 is below the minimum 1.5;
    # the limit is |O2 - A| = 3.2: cos th* = (1 + 6.25 - 10.24) / (2 * 2.5)
    th_star = math.acos((1 + 6.25 - 3.2 ** 2) / (2 * 2.5))
    ok = np.linspace(0.0, th_star - 0.05, 40)
    q = P.track(model, ok)
    assert np.all(np.linalg.norm(C.residual(model, q, ok), axis=1) < 1e-12)
    with pytest.raises(SingularConfigurationError, match="singular"):
        P.track(model, np.linspace(0.0, th_star + 0.05, 80))
    with pytest.raises(AssemblyError, match=r"point B: .*discriminant"):
        P.assembled_positions(model, [th_star + 0.01])
    # just inside the limit the Jacobian is already ill-conditioned: a strict bound reports it
    with pytest.raises(SingularConfigurationError, match="cond"):
        P.assembled_positions(model, [th_star - 1e-7], cond_max=1e4)


def test_grashof_crank_rocker_turns_fully():
    # crank 1, coupler 3, rocker 2.5, ground 3 (s + l = 4 <= 5.5): a full revolution on one branch
    model = load_linkage(four_bar(1.0, 3.0, 2.5, 3.0), "grashof (test)")
    th = np.linspace(0, 4 * np.pi, 200)
    q = P.track(model, th)
    qa = P.assembled_positions(model, th)
    assert np.allclose(C.point_positions(model, q, "B"), C.point_positions(model, qa, "B"), atol=1e-10)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(kind="tree"), r"kind: expected \"linkage\""),
    (lambda d: d["bodies"][0].update(mass=-1.0), r"bodies\[0\]\.mass \(crank\): expected a non-negative"),
    (lambda d: d["bodies"][1].update(length=float("nan")), r"bodies\[1\]\.length \(coupler\)"),
    (lambda d: d["joints"][1].update(ends=["crank+", "nope-"]), r"joints\[1\]\.ends: unknown body 'nope'"),
    (lambda d: d["joints"][0].update(at="O9"), r"joints\[0\]\.at: expected a \[ground\] point"),
    (lambda d: d["joints"].pop(), r"no driver"),
    (lambda d: d["joints"].pop(1), r"joints: 7 constraint rows for 9 coordinates"),
    (lambda d: d["assembly"][1].update(sign=0), r"assembly\[1\]\.sign: expected \+1 or -1"),
    (lambda d: d["assembly"].pop(0), r"assembly\[0\]\.circle: point 'A' is not fixed or placed"),
    (lambda d: d.update(foot="Z"), r"foot: unknown moving point 'Z'"),
    (lambda d: d.update(colour="red"), r"colour: unknown key"),
    (lambda d: d["ground"].update(O2=[9.0, 0.0]),            # rocker and coupler cannot reach O2
     r"unreachable closed loop: .*point B: circles around A .* and O2 .* do not intersect"),
])
def test_bad_linkage_files_fail_with_one_line_naming_the_key(mutate, message):
    d = copy.deepcopy(four_bar())
    mutate(d)
    with pytest.raises(LinkageError, match=message) as exc:
        load_linkage(d, "bad.toml")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("bad.toml")


def test_bad_arrays_are_rejected(jansen):
    q = P.assembled_positions(jansen, [0.0])
    with pytest.raises(LinkageError, match=r"q: expected shape \(N, 33\)"):
        C.residual(jansen, q[:, :30], [0.0])
    bad = q.copy()
    bad[0, 4] = np.nan
    with pytest.raises(LinkageError, match="NaN"):
        C.jacobian(jansen, bad)
    with pytest.raises(LinkageError, match=r"s: expected shape \(1,\)"):
        C.residual(jansen, q, [0.0, 1.0])


def test_unknown_model_name_and_missing_file():
    with pytest.raises(FileNotFoundError, match="no shipped model named 'nope_leg'"):
        read_linkage("nope_leg")
    with pytest.raises(FileNotFoundError, match="not found"):
        read_linkage("/nonexistent/leg.toml")


@pytest.mark.parametrize("step", [0.5, 1.5, 2.5, 3.0])
def test_coarse_continuation_never_silently_changes_branch(step):
    # Newton from a far predictor may land on the crossed assembly of the four-bar; that must be
    # reported (det Phi_q changes sign), otherwise the result must be the assembled branch.
    model = load_linkage(four_bar(1.0, 3.0, 2.5, 3.0), "grashof (test)")
    th = np.array([0.0, step])
    try:
        q = P.track(model, th)
    except SingularConfigurationError as exc:
        assert "changed sign" in str(exc) and step == 3.0
        return
    qa = P.assembled_positions(model, th)
    assert np.allclose(C.point_positions(model, q, "B"), C.point_positions(model, qa, "B"), atol=1e-10)
    assert step != 3.0, "the jump onto the crossed branch went unreported"


def test_chebyshev_geometry_of_models_md_over_a_revolution():
    """models.md 3 (no printed fixture): O2 = (-0.222, 0); AB = O2B = BC = 0.282 with A, B, C collinear;
    CD vertical, D 0.793 m below C; DE horizontal, 0.05 m; 18 coordinates, 17 + 1 rows."""
    model = read_linkage("chebyshev_leg")
    assert (model.n_coords, model.n_rows, model.driver_rows.size) == (18, 18, 1)
    th = np.linspace(0.0, 2 * np.pi, 73)
    q = P.track(model, th)                               # continuation, not the constructive assembly
    assert np.all(np.linalg.norm(C.residual(model, q, th), axis=1) < 1e-12)
    pt = {k: C.point_positions(model, q, k) for k in "ABCDE"}
    O2 = np.array([-0.222, 0.0])
    np.testing.assert_allclose(pt["A"], 0.1 * np.c_[np.cos(th), np.sin(th)], atol=1e-12)
    for a, b in ((pt["A"], pt["B"]), (O2, pt["B"]), (pt["B"], pt["C"])):
        np.testing.assert_allclose(np.linalg.norm(b - a, axis=1), 0.282, atol=1e-12)
    AB, BC = pt["B"] - pt["A"], pt["C"] - pt["B"]
    np.testing.assert_allclose(AB[:, 0] * BC[:, 1] - AB[:, 1] * BC[:, 0], 0.0, atol=1e-12)   # collinear
    assert np.all(np.einsum("nc,nc->n", AB, BC) > 0)                                       # C beyond B
    np.testing.assert_allclose(pt["D"], pt["C"] - [0.0, 0.793], atol=1e-12)
    np.testing.assert_allclose(pt["E"] - pt["D"], np.broadcast_to([0.05, 0.0], (73, 2)), atol=1e-12)


def test_walker_with_an_invalid_leg_file_names_that_file(tmp_path):
    (tmp_path / "leg.toml").write_text("kind = \n")
    walker = tmp_path / "walker.toml"
    walker.write_text('kind = "linkage"\nname = "w"\n[[legs]]\nmodel = "leg.toml"\nprefix = "L"\n')
    with pytest.raises(ValueError, match=r"leg\.toml: not valid TOML") as exc:
        read_linkage(walker)
    assert "\n" not in str(exc.value)
