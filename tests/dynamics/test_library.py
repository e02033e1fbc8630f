"""The model library in configs/models/ (models.md sections 1, 5, 8).

Independent truths: the table sums, DOF and inferred parent lists printed in models.md; the
printed technical-unit values of the Surla cards (x 9.81); Pinocchio on the URDF export of each
file; the planar closed form (methods.md b.3) against the general RNEA; conservation of mass and
inertia for the Table 4.2 merge note; de Leva fractions for the human.
"""
import tomllib

import numpy as np
import pinocchio as pin
import pytest

import configs
import dynamics
from dynamics.anthropometry import DE_LEVA, REFERENCE, WHOLE_BODY
from dynamics.planar import planar_chain_from_model, planar_inverse_dynamics

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

ZINKOVSKY = {  # name: (sum of masses kg, DOF, parent list) as printed / inferred in models.md section 1
    "zinkovsky_4_1": (77.82, 9, [0, 1, 2, 3, 4, 5, 4]),
    "zinkovsky_4_2": (77.82, 8, [0, 1, 2, 3, 4, 3]),
    "zinkovsky_4_3": (60.00, 5, [0, 1, 2]),
    "zinkovsky_5_1": (73.0, 13, [0, 1, 2, 3, 4, 3, 6, 7, 5, 5, 10]),
    "zinkovsky_5_2": (79.82, 10, [0, 1, 2, 3, 4, 5, 6, 2]),
}
LIBRARY = [*ZINKOVSKY, "surla_bidyn", "human15", "exoskeleton"]


def raw(name):
    with open(configs.path(f"models/{name}.toml"), "rb") as f:
        return tomllib.load(f)


def to_pin(model):
    """The Model rebuilt in Pinocchio from its segment data (written here, independent of dynamics):
    planar -> PX, PY, RZ; revolute -> RevoluteUnaligned; free_flyer -> FreeFlyer; fixed bodies
    merged into the parent joint's body."""
    pm = pin.Model()
    pm.gravity = pin.Motion(np.concatenate([model.gravity, np.zeros(3)]))
    where = {}  # segment -> (pinocchio joint id, segment frame in that joint's frame)
    for s in model.segments:
        jid, frame = where[s.parent] if s.parent else (0, pin.SE3.Identity())
        place = frame * pin.SE3(np.asarray(s.joint.rotation), np.asarray(s.joint.translation))
        t = s.joint.type
        if t == "fixed":
            body = place  # rigidly on the parent joint's body
        else:
            if t == "planar":
                jid = pm.addJoint(jid, pin.JointModelPX(), place, s.name + "_x")
                jid = pm.addJoint(jid, pin.JointModelPY(), pin.SE3.Identity(), s.name + "_y")
                jid = pm.addJoint(jid, pin.JointModelRZ(), pin.SE3.Identity(), s.name)
            elif t == "revolute":
                jid = pm.addJoint(jid, pin.JointModelRevoluteUnaligned(np.asarray(s.joint.axis)), place, s.name)
            elif t == "free_flyer":
                jid = pm.addJoint(jid, pin.JointModelFreeFlyer(), place, s.name)
            else:
                raise AssertionError(f"test converter has no {t} joint")
            body = pin.SE3.Identity()
        inertia = pin.Inertia(s.mass, np.asarray(s.com), np.asarray(s.inertia))
        pm.appendBodyToJoint(jid, body.act(inertia), pin.SE3.Identity())
        where[s.name] = (jid, body)
    return pm


def random_states(model, rng, N):
    q = np.tile(model.neutral(), (N, 1))
    for s, iq in zip(model.segments, model.idx_q):
        t = s.joint.type
        if t in ("revolute", "prismatic"):
            q[:, iq] = rng.uniform(-1.5, 1.5, N)
        elif t == "planar":
            q[:, iq:iq + 3] = rng.uniform(-1.5, 1.5, (N, 3))
        elif t == "free_flyer":
            quat = rng.normal(size=(N, 4))
            q[:, iq:iq + 3] = rng.uniform(-1, 1, (N, 3))
            q[:, iq + 3:iq + 7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    return q, rng.uniform(-3, 3, (N, model.nv)), rng.uniform(-5, 5, (N, model.nv))


JOINT_DOF = {"free_flyer": 6, "planar": 3, "revolute": 1, "prismatic": 1, "fixed": 0}  # docs/models.md
# Published body mass (kg) and where the file must say the data come from: models.md 1 (Σm as
# printed), 5.2 (Surla: ≈ 60 kg, the file's stated trunk-mass assumption), 8.2 (de Leva's male
# reference subject, 73.0 kg; the exoskeleton adds its declared meta.exoskeleton_mass).
PUBLISHED = {**{n: (m, f"Table {n[-3]}.{n[-1]}") for n, (m, _, _) in ZINKOVSKY.items()},
             "surla_bidyn": (60.0, "Surla"), "human15": (73.0, "de Leva"), "exoskeleton": (73.0, "de Leva")}


@pytest.mark.parametrize("name", LIBRARY)
def test_library_model_loads_validates_and_documents_itself(name):
    """Every segment of the file (read here with tomllib) is in the model with its mass, the DOF are
    those of the file's joint types, the total is the published body mass, and the source cites it."""
    model = dynamics.load_model(name)
    assert isinstance(model, dynamics.Model)
    assert model.name == name
    data = raw(name)
    segments = data["segment"]
    assert [s.name for s in model.segments] == [s["name"] for s in segments]
    assert [s.mass for s in model.segments] == [s.get("mass", 0.0) for s in segments]
    assert model.nv == sum(JOINT_DOF[s["joint"]] for s in segments)
    mass, cited = PUBLISHED[name]
    mass += data.get("meta", {}).get("exoskeleton_mass", 0.0)
    assert model.total_mass == pytest.approx(mass, abs=1e-9)
    assert cited in data["source"] and data["notes"]


# models.md section 1, rows (m kg, l m, a1 m, a2 m, J_c kg*m^2) in segment order, as printed.
TABLES = {
    "zinkovsky_4_1": [
        (2.0, 0.2, 0.14, 0.0, 0.1),
        (5.18, 0.36, 0.21, 0.0, 0.26836),
        (23.29, 0.44, 0.27, 0.0, 1.08616),
        (34.16, 0.52, 0.27, 0.0, 3.58974),
        (5.37, 0.27, 0.13, 0.0, 0.09725),
        (4.3, 0.27, 0.14, 0.0, 0.03172),
        (3.52, 0.17, 0.17, 0.0, 0.20627),
    ],
    "zinkovsky_4_2": [
        (7.18, 0.36, 0.21, 0.0, 0.26836),
        (23.29, 0.44, 0.27, 0.0, 1.08616),
        (34.16, 0.52, 0.27, 0.0, 3.58974),
        (5.37, 0.27, 0.13, 0.0, 0.09725),
        (4.3, 0.27, 0.14, 0.0, 0.03172),
        (3.52, 0.17, 0.17, 0.0, 0.20627),
    ],
    "zinkovsky_4_3": [
        (7.02, 0.63, 0.39, 0.0, 0.26126),
        (33.24, 0.67, 0.21, 0.0, 2.08912),
        (19.74, 0.84, 0.35, 0.0, 1.30985),
    ],
    "zinkovsky_5_1": [
        (1.0, 0.18, 0.09, 0.0, 0.005),
        (5.0, 0.5, 0.3, 0.0, 0.15),
        (10.0, 0.5, 0.3, 0.0, 0.25),
        (1.0, 0.1, 0.05, 0.0, 0.0001),
        (26.0, 0.52, 0.26, 0.0, 0.5),
        (10.0, 0.5, 0.3, 0.0, 0.25),
        (5.0, 0.5, 0.3, 0.0, 0.15),
        (1.0, 0.18, 0.09, 0.0, 0.005),
        (2.0, 0.14, 0.07, 0.0, 0.01),
        (7.0, 0.36, 0.18, 0.0, 0.2),
        (5.0, 0.36, 0.18, 0.0, 0.1),
    ],
    "zinkovsky_5_2": [
        (4.3, 0.27, 0.14, 0.0, 0.03172),
        (5.37, 0.27, 0.13, 0.0, 0.09725),
        (34.16, 0.52, 0.27, 0.0, 3.58974),
        (2.0, 0.05, 0.02, 0.0, 0.1),
        (23.29, 0.44, 0.27, 0.0, 1.08616),
        (5.18, 0.36, 0.21, 0.0, 0.26836),
        (2.0, 0.2, 0.14, 0.0, 0.1),
        (3.52, 0.17, 0.17, 0.0, 0.20627),
    ],
}


@pytest.mark.parametrize("name", ZINKOVSKY)
def test_zinkovsky_rows_are_the_printed_tables(name):
    model = dynamics.load_model(name)
    chain = planar_chain_from_model(model)
    rows = np.array(TABLES[name])
    np.testing.assert_array_equal(chain.m, rows[:, 0])
    np.testing.assert_array_equal(chain.a1, rows[:, 2])
    np.testing.assert_array_equal(chain.a2, rows[:, 3])
    np.testing.assert_array_equal(chain.Jc, rows[:, 4])
    has_children = np.isin(np.arange(1, chain.n + 1), chain.parent)
    np.testing.assert_array_equal(chain.l[has_children], rows[has_children, 1])
    for s, l in zip(model.segments, rows[:, 1]):  # every distal joint point, leaves included
        np.testing.assert_array_equal(s.markers[f"{s.name}_distal"], [0.0, -l, 0.0])


def urdf_layout(model, pm):
    """Indices into the model's q and v of Pinocchio's q and v, matched by joint name (a planar
    joint J is exported as J_x, J_y, J_z; the floating base is Pinocchio's root_joint)."""
    where = {}
    for s, iq, iv in zip(model.segments, model.idx_q, model.idx_v):
        jn = s.joint_name or s.name
        if s.joint.type == "planar":
            where.update({f"{jn}_{a}": (iq + k, iv + k, 1, 1) for k, a in enumerate("xyz")})
        elif s.joint.type == "free_flyer":
            where["root_joint"] = (iq, iv, 7, 6)
        elif s.joint.type != "fixed":
            where[jn] = (iq, iv, s.joint.nq, s.joint.nv)
    iq = [i for n in pm.names[1:] for i in range(where[n][0], where[n][0] + where[n][2])]
    iv = [i for n in pm.names[1:] for i in range(where[n][1], where[n][1] + where[n][3])]
    return np.array(iq), np.array(iv)


@pytest.mark.parametrize("name", LIBRARY)
def test_library_model_opens_in_pinocchio_through_urdf(name):
    """save_urdf -> Pinocchio's own URDF parser: same DOF and mass, same inverse dynamics."""
    model = dynamics.load_model(name)
    text = dynamics.urdf_string(model)
    floating = model.segments[0].joint.type == "free_flyer"
    pm = pin.buildModelFromXML(text, pin.JointModelFreeFlyer()) if floating else pin.buildModelFromXML(text)
    pm.gravity = pin.Motion(np.concatenate([model.gravity, np.zeros(3)]))  # URDF has no gravity
    assert (pm.nq, pm.nv) == (model.nq, model.nv)
    assert sum(i.mass for i in pm.inertias) == pytest.approx(model.total_mass, rel=1e-12)
    iq, iv = urdf_layout(model, pm)
    if name in ("surla_bidyn", "human15", "exoskeleton"):
        # listed in Pinocchio's URDF order (siblings by joint name): the layouts are identical
        assert iq.tolist() == list(range(model.nq)) and iv.tolist() == list(range(model.nv))
    q, v, a = random_states(model, np.random.default_rng(9), 3)
    tau = dynamics.rnea(model, q, v, a)
    data = pm.createData()
    for k in range(3):
        np.testing.assert_allclose(pin.rnea(pm, data, q[k, iq], v[k, iv], a[k, iv]), tau[k, iv], rtol=0,
                                   atol=1e-9 * np.abs(tau).max())


@pytest.mark.parametrize("name", ZINKOVSKY)
def test_zinkovsky_totals_dof_and_tree(name):
    total, dof, parent = ZINKOVSKY[name]
    model = dynamics.load_model(name)
    assert model.total_mass == pytest.approx(total, abs=1e-9)
    assert model.nq == model.nv == dof
    assert np.allclose(model.gravity, [0.0, -9.81, 0.0])
    assert planar_chain_from_model(model).parent.tolist() == parent


@pytest.mark.parametrize("name", ZINKOVSKY)
def test_planar_closed_form_equals_general_rnea_on_tables(name):
    """methods.md b.6: closed form (b.3) = general RNEA (and Pinocchio on the same segments), to 1e-9."""
    model = dynamics.load_model(name)
    chain = planar_chain_from_model(model)
    rng = np.random.default_rng(3)
    q, v, a = random_states(model, rng, 8)   # model layout: (x0, y0, phi_1, psi_2..psi_n)
    mu = chain.mu
    absolute = lambda x: np.concatenate([x[:, :2], x[:, 2:] @ mu.T], axis=1)  # phi = mu psi
    Q = planar_inverse_dynamics(chain, absolute(q), absolute(v), absolute(a))
    expected = np.concatenate([Q[:, :2], Q[:, 2:] @ mu], axis=1)  # (N_x, N_y, M = mu^T U)
    tau = dynamics.rnea(model, q, v, a)
    scale = np.abs(tau).max()
    np.testing.assert_allclose(expected, tau, rtol=0, atol=1e-9 * scale)
    pm = to_pin(model)
    data = pm.createData()
    for k in range(q.shape[0]):
        np.testing.assert_allclose(pin.rnea(pm, data, q[k], v[k], a[k]), expected[k], rtol=0, atol=1e-9 * scale)


def test_table_4_2_inconsistency_is_reported_as_the_file_says():
    t41 = planar_chain_from_model(dynamics.load_model("zinkovsky_4_1"))
    t42 = planar_chain_from_model(dynamics.load_model("zinkovsky_4_2"))
    data = raw("zinkovsky_4_2")
    note = " ".join(data["notes"])
    comments = [l for l in configs.path("models/zinkovsky_4_2.toml").read_text().splitlines() if l.startswith("#")]
    assert any("MASS INCONSISTENCY" in l for l in comments)  # said in a comment as well as in notes
    # The claims of the note hold for the data: element 1 mass = feet + shanks of Table 4.1 ...
    assert "7.18 = 2.00 + 5.18" in note
    assert t42.m[0] == pytest.approx(t41.m[0] + t41.m[1], abs=1e-12)
    # ... but its a1, J_c and length are the shank's, not recomputed.
    assert (t42.a1[0], t42.Jc[0], t42.l[0]) == (t41.a1[1], t41.Jc[1], t41.l[1])
    # The rest of Table 4.2 is Table 4.1's elements 3..7.
    for field in ("m", "a1", "Jc"):
        np.testing.assert_array_equal(getattr(t42, field)[1:], getattr(t41, field)[2:])
    # The subject (1.6 m, 60 kg) is not the table's 77.82 kg.
    meta = data["meta"]
    assert "60 kg" in note and "1.6 m" in note and "77.82 kg" in note
    assert (meta["subject_mass"], meta["subject_height"]) == (60.0, 1.6)
    assert sum(t42.m) == pytest.approx(77.82) and abs(sum(t42.m) - meta["subject_mass"]) > 15
    # The consistent merge quoted in the file keeps mass moment and inertia about the toe
    # (methods.md f.4) of the straight feet + shanks of Table 4.1.
    m_f, m_s, l_f = t41.m[0], t41.m[1], t41.l[0]
    moment = m_f * t41.a1[0] + m_s * (l_f + t41.a1[1])
    J_toe = t41.Jc[0] + m_f * t41.a1[0] ** 2 + t41.Jc[1] + m_s * (l_f + t41.a1[1]) ** 2
    a1, Jc = meta["consistent_merge_a1"], meta["consistent_merge_Jc"]
    assert (m_f + m_s) * a1 == pytest.approx(moment, abs=1e-5)
    assert Jc + (m_f + m_s) * a1**2 == pytest.approx(J_toe, abs=1e-5)
    assert meta["consistent_merge_l"] == pytest.approx(l_f + t41.l[1])
    assert f"a1 = {a1:.4f} m" in note and f"J_c = {Jc:.4f}" in note


def test_bar_supports_are_in_the_files():
    """models.md 1.3 and 1.5: elastic bar support C, beta per axis."""
    for name, C in (("zinkovsky_4_3", 18000.0), ("zinkovsky_5_2", 20000.0)):
        meta = raw(name)["meta"]
        assert (meta["bar_stiffness"], meta["bar_damping"]) == (C, 500.0)


# Surla cards (models.md 5.2): segment -> printed kp*s^2/m mass; inertias (segment, axis) -> kp*m*s^2.
SURLA_MASS = {"shank_r": 0.321, "shank_l": 0.321, "thigh_r": 0.841, "thigh_l": 0.841, "pelvis": 0.693,
              "upper_arm_r": 0.207, "upper_arm_l": 0.207, "forearm_r": 0.114, "forearm_l": 0.114,
              "foot_r": 0.153, "foot_l": 0.153}
SURLA_INERTIA = {("shank_r", 1): 0.0039, ("thigh_r", 1): 0.0112, ("shank_r", 2): 0.0038, ("thigh_r", 2): 0.003,
                 ("trunk", 1): 0.137}


def test_surla_values_are_the_printed_cards_converted():
    model = dynamics.load_model("surla_bidyn")
    for seg, printed in SURLA_MASS.items():
        assert model.segment(seg).mass == pytest.approx(printed * 9.81, abs=1e-9), seg
    for (seg, axis), printed in SURLA_INERTIA.items():
        assert model.segment(seg).inertia[axis, axis] == pytest.approx(printed * 9.81, abs=1e-9), (seg, axis)
    # Half lengths a = 0.193 (shank), b = 0.214 (thigh): joint spacing and mid-length CoM.
    assert -model.segment("foot_r").joint.translation[2] == pytest.approx(2 * 0.193)
    assert -model.segment("shank_r").joint.translation[2] == pytest.approx(2 * 0.214)
    assert model.total_mass == pytest.approx(60.0, abs=1e-9)  # the stated assumption for the trunk mass
    assert len(model.segments) == 12
    assert sorted(s.joint.type for s in model.segments).count("fixed") == 4  # arms fixed to the trunk


def test_surla_states_every_low_confidence_value_as_assumed():
    text = configs.path("models/surla_bidyn.toml").read_text()
    notes = " ".join(raw("surla_bidyn")["notes"])
    for topic in ("trunk (+ head) mass", "Leg inertias", "geometry", "foot", "pelvis and arm inertias"):
        assert any(topic in n and "ASSUMED" in n for n in raw("surla_bidyn")["notes"]), topic
    assert "0.041" in notes  # the other reading of the thigh card
    # Every segment line whose value is not a printed card says so in its comment.
    for line in text.splitlines():
        if line.startswith(("inertia", "com")) and "#" in line and "ASSUMED" not in line:
            assert any(k in line for k in ("C5X", "CY(4)", "= a =", "= b =", "= c =", "= e =", "= s =")), line


def standing(model):
    q = model.neutral()
    q[2] = raw(model.name)["meta"]["standing_base_height"]
    return q


@pytest.mark.parametrize("name", ["human15", "exoskeleton"])
def test_human_stands_on_the_floor_with_its_stature(name):
    model = dynamics.load_model(name)
    q = standing(model)
    feet = dynamics.contact_positions(model, q)
    np.testing.assert_allclose(feet[:, 2], 0.0, atol=1e-9)
    vert = dynamics.marker_positions(model, q, ["VERT"])[0]
    assert vert[2] == pytest.approx(REFERENCE["male"][0], abs=1e-9)


def test_human15_masses_and_com_height():
    H, M = REFERENCE["male"]
    model = dynamics.load_model("human15")
    assert model.total_mass == pytest.approx(M, abs=1e-9)
    massive = [s for s in model.segments if s.mass > 0]
    assert len(massive) == 15
    t = DE_LEVA["male"]
    rows = {"thorax": ["upper_trunk_c7", "middle_trunk"], "pelvis": ["lower_trunk"], "shank": ["shank_ajc"]}
    for s in massive:
        kind = s.name[:-2] if s.name.endswith(("_r", "_l")) else s.name
        frac = sum(t[r].mass for r in rows.get(kind, [kind]))
        assert s.mass == pytest.approx(frac * M, abs=1e-9), s.name
    q = standing(model)
    c = dynamics.com(model, q)
    pm = to_pin(model)
    np.testing.assert_allclose(pin.centerOfMass(pm, pm.createData(), q), c, atol=1e-12)
    # Independent: whole-body CoM height from de Leva's one-piece trunk and the published CoM %
    # (landmark heights stacked from the table lengths; foot CoM on the sole, z = 0).
    z_cerv = H - t["head"].length
    z_midh = z_cerv - t["trunk"].length
    z_supr = z_cerv - (t["upper_trunk_c7"].length - t["upper_trunk"].length)
    z_elb, z_knee = z_supr - t["upper_arm"].length, z_midh - t["thigh"].length
    z_wri = z_elb - t["forearm"].length
    heights = {"head": H - t["head"].com * t["head"].length, "trunk": z_cerv - t["trunk"].com * t["trunk"].length,
               "upper_arm": z_supr - t["upper_arm"].com * t["upper_arm"].length,
               "forearm": z_elb - t["forearm"].com * t["forearm"].length,
               "hand": z_wri - t["hand"].com * t["hand"].length,
               "thigh": z_midh - t["thigh"].com * t["thigh"].length,
               "shank_ajc": z_knee - t["shank_ajc"].com * t["shank_ajc"].length, "foot": 0.0}
    z_table = sum(t[k].mass * heights[k] for k in WHOLE_BODY) / sum(t[k].mass for k in WHOLE_BODY)
    assert c[2] == pytest.approx(z_table, abs=3e-3)
    assert 0.53 < c[2] / H < 0.59
    assert abs(c[1]) < 1e-12


def test_human15_dynamics_match_pinocchio():
    model = dynamics.load_model("human15")
    pm = to_pin(model)
    data = pm.createData()
    q, v, a = random_states(model, np.random.default_rng(5), 3)
    tau = dynamics.rnea(model, q, v, a)
    for k in range(3):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, data, q[k], v[k], a[k]), atol=1e-9 * np.abs(tau).max())


def test_exoskeleton_is_the_human_plus_exo_bodies_with_actuators():
    human, exo = dynamics.load_model("human15"), dynamics.load_model("exoskeleton")
    meta = raw("exoskeleton")["meta"]
    assert exo.total_mass == pytest.approx(human.total_mass + meta["exoskeleton_mass"], abs=1e-9)
    for s in human.segments:  # the wearer is unchanged
        e = exo.segment(s.name)
        assert (e.parent, e.joint.type, e.mass) == (s.parent, s.joint.type, s.mass)
        np.testing.assert_array_equal(e.com, s.com)
        np.testing.assert_array_equal(e.inertia, s.inertia)
    extra = [s for s in exo.segments if s.name not in human.index]
    assert {s.parent for s in extra} == {"pelvis", "thigh_r", "thigh_l", "shank_r", "shank_l"}
    assert all(s.joint.type == "fixed" for s in extra)
    assert sum(s.mass for s in extra) == pytest.approx(meta["exoskeleton_mass"])
    driven = {exo.segment(a.joint).joint_name: a for a in exo.actuators}
    assert sorted(driven) == ["hip_flexion_l", "hip_flexion_r", "knee_l", "knee_r"]
    for jn, a in driven.items():
        j = exo.segment(a.joint).joint
        assert a.gear_ratio > 1 and np.isfinite(a.torque_limit) and np.isfinite(a.velocity_limit)
        assert np.isfinite(j.lower) and np.isfinite(j.upper) and j.lower < 0.01 < j.upper
        assert j.effort == a.torque_limit
    # methods.md k.3: a joint nearer the support needs at least its children's torque limit
    # (single support on one foot: knee then hip).
    for side in ("_r", "_l"):
        assert driven["hip_flexion" + side].torque_limit >= driven["knee" + side].torque_limit
    # Standing still, gravity torques at the actuated joints are within the motors' limits.
    g = dynamics.generalized_gravity(exo, standing(exo))
    for a in exo.actuators:
        assert abs(g[exo.idx_v[exo.index[a.joint]]]) <= a.torque_limit
