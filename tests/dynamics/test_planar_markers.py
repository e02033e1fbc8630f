"""Planar models driven by markers (dynamics.planar_markers): markers synthesised by forward
kinematics of a known planar motion (written here from the model file's table values, not through
the code under test) must return the angles; the inverse dynamics must obey statics and the
momentum laws of the whole body computed from the segments' centres of mass:
    R = Σ m_k (a_ck + g ŷ)                                   (linear momentum)
    M₁ = Σ_k [(c_k − P) × m_k (a_ck + g ŷ)]_z + Jc_k φ̈_k      (angular momentum about the support P)
"""
import tomllib

import numpy as np
import pytest

import configs
from dynamics import load_model
from dynamics.markers import MarkerError, reference_frame
from dynamics.model import G
from dynamics.planar_markers import (ExternalForce, frozen_kinetics, joint_mobility, marker_points, nearest_segment,
                                     planar_coordinates,
                                     planar_kinetics, planar_model)

FS = 500.0


def table(name):
    """Segments of a planar model file as printed: name, parent index (−1 root), l, m, a1, a2, Jc."""
    d = tomllib.loads(configs.path(f"models/{name}.toml").read_text())
    names = [s["name"] for s in d["segment"]]
    rows = []
    for s in d["segment"]:
        (mk,) = s["markers"].values()
        rows.append(dict(name=s["name"], parent=names.index(s["parent"]) if s["parent"] != "world" else -1,
                         l=-mk[1], m=s["mass"], a1=-s["com"][1], a2=s["com"][0], Jc=s["inertia"][2]))
    return rows


def motion(rows, n=1000, still=False):
    """Analytic φ, φ̇, φ̈ (N, S) and support point P, Ṗ, P̈ (N, 2); φ about π: upright over the
    support, so atan2 meets its ±π cut."""
    t = np.arange(n) / FS
    rng = np.random.default_rng(5)
    S = len(rows)
    c = np.pi + rng.uniform(-0.8, 0.8, S)
    A = 0 if still else rng.uniform(0.1, 0.5, S)
    w = rng.uniform(2, 8, S)
    p = rng.uniform(0, 6, S)
    arg = w * t[:, None] + p
    phi, dphi, ddphi = c + A * np.sin(arg), A * w * np.cos(arg), -A * w**2 * np.sin(arg)
    b = 0 if still else 0.03
    P = np.stack([0.4 * t + b * np.sin(3 * t), b * np.cos(5 * t)], axis=1)
    dP = np.stack([0.4 + 3 * b * np.cos(3 * t), -5 * b * np.sin(5 * t)], axis=1) if not still else np.zeros((n, 2))
    ddP = np.stack([-9 * b * np.sin(3 * t), -25 * b * np.cos(5 * t)], axis=1)
    return phi, dphi, ddphi, P, dP, ddP


def e12(phi):
    return np.stack([np.sin(phi), -np.cos(phi)], -1), np.stack([np.cos(phi), np.sin(phi)], -1)


def kinematics(rows, phi, dphi, ddphi, P, dP, ddP):
    """Joint points R (N, S+1, 2) and CoM positions and accelerations (N, S, 2), analytic:
    ë₁ = φ̈ e₂ − φ̇² e₁, ë₂ = −φ̈ e₁ − φ̇² e₂."""
    n, S = phi.shape
    R = np.zeros((n, S + 1, 2))
    aR = np.zeros((n, S + 1, 2))
    R[:, 0], aR[:, 0] = P, ddP
    com, acom = np.zeros((n, S, 2)), np.zeros((n, S, 2))
    for i, r in enumerate(rows):
        e1, e2 = e12(phi[:, i])
        w, al = dphi[:, i, None], ddphi[:, i, None]
        dde1, dde2 = al * e2 - w**2 * e1, -al * e1 - w**2 * e2
        base, abase = R[:, r["parent"] + 1], aR[:, r["parent"] + 1]
        R[:, i + 1] = base + r["l"] * e1
        aR[:, i + 1] = abase + r["l"] * dde1
        com[:, i] = base + r["a1"] * e1 + r["a2"] * e2
        acom[:, i] = abase + r["a1"] * dde1 + r["a2"] * dde2
    return R, com, acom


def lab_markers(pm, R):
    """name → (N, 3) m lab (x, y, z): planar (x, y) → lab (x, z), y = 0.05 m."""
    return {k: np.stack([R[:, j, 0], np.full(len(R), 0.05), R[:, j, 1]], axis=1) for j, k in enumerate(pm.markers)}


@pytest.mark.parametrize("name", ["zinkovsky_4_1", "zinkovsky_5_1", "zinkovsky_5_2"])
def test_angles_from_synthesised_markers(name):
    rows = table(name)
    pm = planar_model(load_model(name))
    phi, dphi, ddphi, P, dP, ddP = motion(rows)
    R, _, _ = kinematics(rows, phi, dphi, ddphi, P, dP, ddP)
    c = planar_coordinates(pm, marker_points(pm, lab_markers(pm, R)))
    assert np.all(np.abs(np.diff(c.q[:, 2:], axis=0)) < 0.1)  # continuous in time
    np.testing.assert_allclose(wrap(c.q[:, 2:] - phi), 0, atol=1e-12)
    np.testing.assert_allclose(c.q[:, :2], P, atol=1e-12)
    par = [r["parent"] for r in rows]
    psi = np.stack([phi[:, i] - (phi[:, par[i]] if par[i] >= 0 else 0) for i in range(len(rows))], axis=1)
    np.testing.assert_allclose(c.psi[:, 1:], psi[:, 1:], atol=1e-12)  # small: no 2π offsets
    np.testing.assert_allclose(wrap(c.psi[:, 0] - psi[:, 0]), 0, atol=1e-12)
    np.testing.assert_allclose(c.lengths, np.broadcast_to([r["l"] for r in rows], c.lengths.shape), atol=1e-12)


def test_reference_line_frame_maps_a_tilted_scaled_record():
    """A record in another unit (cm) on tilted axes, with a horizontal reference segment of known
    length, returns the same angles."""
    rows = table("zinkovsky_4_1")
    pm = planar_model(load_model("zinkovsky_4_1"))
    phi, *rest = motion(rows, n=50)
    R, _, _ = kinematics(rows, phi, *rest[:1], *rest[1:])
    th = 0.3
    rot = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    raw = 100 * R @ rot.T + [7.0, -3.0]  # cm, rotated by 0.3 rad, shifted
    ref = 100 * np.array([[0.0, 0.0], [2.0, 0.0]]) @ rot.T + [7.0, -3.0]  # a 2 m floor line
    frame = reference_frame(ref[0], ref[1], 2.0)
    mk = {k: np.stack([raw[:, j, 0], np.zeros(len(raw)), raw[:, j, 1]], axis=1) for j, k in enumerate(pm.markers)}
    c = planar_coordinates(pm, marker_points(pm, mk, frame))
    np.testing.assert_allclose(wrap(c.q[:, 2:] - phi), 0, atol=1e-9)
    np.testing.assert_allclose(c.q[:, :2], R[:, 0], atol=1e-9)


def test_a_gap_keeps_the_angles_continuous():
    """Three frames lost in the middle of a motion through φ = ±π: after the gap the angles go on
    from where they were (np.unwrap alone makes everything after a NaN NaN)."""
    rows = table("zinkovsky_4_1")
    pm = planar_model(load_model("zinkovsky_4_1"))
    phi, dphi, ddphi, P, dP, ddP = motion(rows, n=400)
    R, _, _ = kinematics(rows, phi, dphi, ddphi, P, dP, ddP)
    R[200:203] = np.nan
    c = planar_coordinates(pm, marker_points(pm, lab_markers(pm, R)))
    assert np.isnan(c.q[200:203]).all() and np.isfinite(c.q[203:]).all()
    np.testing.assert_allclose(c.q[203:, 2:] - phi[203:], np.broadcast_to(c.q[0, 2:] - phi[0], (197, 7)), atol=1e-9)
    np.testing.assert_allclose(c.psi[203:, 1:], (phi - phi[:, [r["parent"] for r in rows]])[203:, 1:], atol=1e-9)


def wrap(x):
    return np.angle(np.exp(1j * np.asarray(x)))


def test_missing_marker_is_named():
    pm = planar_model(load_model("zinkovsky_4_1"))
    mk = {k: np.zeros((3, 3)) for k in pm.markers if k != "thighs_distal"}
    with pytest.raises(MarkerError, match="thighs_distal"):
        marker_points(pm, mk)


def test_statics_moments_are_the_gravity_moments_of_the_subtrees():
    rows = table("zinkovsky_4_1")
    pm = planar_model(load_model("zinkovsky_4_1"))
    phi, dphi, ddphi, P, dP, ddP = motion(rows, n=5, still=True)
    R, com, _ = kinematics(rows, phi, dphi, ddphi, P, dP, ddP)
    q = np.concatenate([P, phi], axis=1)
    kin = planar_kinetics(pm, q, np.zeros_like(q), np.zeros_like(q))
    S = len(rows)
    for i in range(S):
        sub = [k for k in range(S) if i in _path(rows, k)]
        joint_x = R[:, rows[i]["parent"] + 1, 0]
        want = G * sum(rows[k]["m"] * (com[:, k, 0] - joint_x) for k in sub)
        np.testing.assert_allclose(kin.moments[:, i], want, atol=1e-9)
    np.testing.assert_allclose(kin.reaction, np.broadcast_to([0, G * sum(r["m"] for r in rows)], (5, 2)), atol=1e-9)


def _path(rows, k):
    out = []
    while k >= 0:
        out.append(k)
        k = rows[k]["parent"]
    return out


def moving(name, n):
    """(rows, model, (φ, φ̇, φ̈, P, Ṗ, P̈), (R, com, acom), (q, v, a)) of a known motion."""
    rows = table(name)
    m = motion(rows, n=n)
    phi, dphi, ddphi, P, dP, ddP = m
    qva = tuple(np.concatenate(x, axis=1) for x in ((P, phi), (dP, dphi), (ddP, ddphi)))
    return rows, planar_model(load_model(name)), m, kinematics(rows, *m), qva


@pytest.mark.parametrize("name", ["zinkovsky_4_1", "zinkovsky_5_1"])
def test_support_reaction_and_moment_are_the_rates_of_momentum(name):
    rows, pm, (phi, dphi, ddphi, P, dP, ddP), (R, com, acom), (q, v, a) = moving(name, 200)
    kin = planar_kinetics(pm, q, v, a)
    m = np.array([r["m"] for r in rows])
    need = acom + [0.0, G]
    np.testing.assert_allclose(kin.reaction, np.einsum("k,nki->ni", m, need), rtol=1e-10, atol=1e-8)
    arm = com - P[:, None]
    h = np.einsum("k,nk->n", m, arm[..., 0] * need[..., 1] - arm[..., 1] * need[..., 0])
    h += ddphi @ np.array([r["Jc"] for r in rows])
    np.testing.assert_allclose(kin.moments[:, 0], h, rtol=1e-10, atol=1e-8)


def test_measured_external_force_moves_the_load_off_the_support():
    """A force F at a point X off the line of the last segment (5 cm from its distal point): the
    support reaction drops by F, the support moment by ((X − P) × F)_z, the joints on the path to X
    by ((X − R_j) × F)_z; the others do not change. With the required reaction measured at the
    support, the residual is 0."""
    rows, pm, (phi, *_, P, _, _), (R, _, _), (q, v, a) = moving("zinkovsky_4_1", 100)
    free = planar_kinetics(pm, q, v, a)
    S = len(rows)
    F = np.column_stack([10 + np.arange(100) * 0.1, -30.0 * np.ones(100)])
    X = R[:, S] + 0.05 * e12(phi[:, S - 1])[1] + [0.02, 0.0]
    kin = planar_kinetics(pm, q, v, a, [ExternalForce(np.full(100, S - 1), F, X)])
    np.testing.assert_allclose(kin.reaction, free.reaction - F, atol=1e-8)
    path = _path(rows, S - 1)
    for j in range(S):
        arm = X - R[:, rows[j]["parent"] + 1]
        d = arm[:, 0] * F[:, 1] - arm[:, 1] * F[:, 0] if j in path else 0.0
        np.testing.assert_allclose(kin.moments[:, j], free.moments[:, j] - d, atol=1e-8)
    support = ExternalForce(np.zeros(100, int), free.reaction, P)
    res = planar_kinetics(pm, q, v, a, [support])
    np.testing.assert_allclose(res.reaction, 0, atol=1e-8)
    np.testing.assert_allclose(res.moments[:, 1:], free.moments[:, 1:], atol=1e-8)


def test_nearest_segment_of_a_point():
    rows = table("zinkovsky_4_1")
    pm = planar_model(load_model("zinkovsky_4_1"))
    phi, *rest = motion(rows, n=3)
    R, _, _ = kinematics(rows, phi, *rest)
    q = np.concatenate([R[:, 0], phi], axis=1)
    mid = (R[:, 2] + R[:, 3]) / 2  # segment 3 (thighs): shanks' distal → thighs' distal
    np.testing.assert_array_equal(nearest_segment(pm, q, mid), [2, 2, 2])
    np.testing.assert_array_equal(nearest_segment(pm, q, mid + [5.0, 0.0]), [-1, -1, -1])


def test_not_a_planar_model():
    with pytest.raises(ValueError, match="planar"):
        planar_model(load_model("human15"))


def rigid(m, rows, joints):
    """The motion m = (φ, φ̇, φ̈, P, Ṗ, P̈) with each joint in ``joints`` held rigid: φ_c = φ_p + its
    first-frame angle (parents first, so a chain of rigid joints stays rigid)."""
    phi, dphi, ddphi = (x.copy() for x in m[:3])
    for c in sorted(joints):
        p = rows[c]["parent"]
        off = phi[0, c] - phi[0, p]
        phi[:, c], dphi[:, c], ddphi[:, c] = phi[:, p] + off, dphi[:, p], ddphi[:, p]
    return (phi, dphi, ddphi) + tuple(m[3:])


@pytest.mark.parametrize("joints", [[1], [5], [1, 2], [2, 5]])
def test_a_rigid_joint_is_frozen_and_the_merged_model_keeps_the_other_moments(joints):
    """Joints held rigid (a middle one, the forearms' leaf, a chain of two): their mobility S is 0
    and every moving joint's is not; the model with those segments merged (methods.md f.4) gives the
    unmerged model's moments at every other joint — a rigid joint transmits the same loads whether
    it is a joint or not (conservation), with a measured force on a merged segment too — and NaN
    at the frozen ones."""
    n = 300
    rows = table("zinkovsky_4_1")
    pm = planar_model(load_model("zinkovsky_4_1"))
    m = rigid(motion(rows, n=n), rows, joints)
    phi, dphi, ddphi, P, dP, ddP = m
    R, _, _ = kinematics(rows, *m)
    q, v, a = (np.concatenate(x, axis=1) for x in ((P, phi), (dP, dphi), (ddP, ddphi)))
    c = planar_coordinates(pm, marker_points(pm, lab_markers(pm, R)))
    s = joint_mobility(pm, c.psi, np.arange(n) / FS)
    assert np.isnan(s[0])
    np.testing.assert_allclose(s[joints], 0, atol=1e-9)
    assert np.all(np.delete(s, [0] + joints) > 0.05)
    F = np.column_stack([10 + np.arange(n) * 0.1, -30.0 * np.ones(n)])
    X = R[:, 2] + [0.03, 0.01]  # near the shanks' distal joint, on segment 1
    forces = [ExternalForce(np.full(n, 1), F, X)]
    full = planar_kinetics(pm, q, v, a, forces)
    kin = frozen_kinetics(pm, q, v, a, joints, forces)
    assert np.all(np.isnan(kin.moments[:, joints])) and np.all(np.isnan(kin.power[:, joints]))
    keep = np.delete(np.arange(len(rows)), joints)
    np.testing.assert_allclose(kin.moments[:, keep], full.moments[:, keep], rtol=1e-9, atol=1e-7)
    np.testing.assert_allclose(kin.power[:, keep], full.power[:, keep], rtol=1e-9, atol=1e-7)
    np.testing.assert_allclose(kin.reaction, full.reaction, rtol=1e-9, atol=1e-7)


def test_a_joint_whose_parent_has_another_child_is_not_merged():
    rows, pm, _, _, (q, v, a) = moving("zinkovsky_4_1", 20)
    with pytest.raises(MarkerError, match="upper_arms|head"):
        frozen_kinetics(pm, q, v, a, [4])  # the trunk carries the upper arms and the head
