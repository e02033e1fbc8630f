"""de Leva 1996 scaling: transcription invariants of models.md 8.2-8.3 and the scaled 15-segment human.

Independent truths: the invariants printed in models.md (trunk pieces sum to the one-piece trunk,
endpoint variants agree on the CoM and r*L, body fractions sum to 100 %), de Leva's one-piece
trunk row (the generated thorax + pelvis are built from the three trunk pieces instead), and
whole-body CoM height from the 14-piece one-trunk set.
"""
import numpy as np
import pytest

from dynamics.anthropometry import DE_LEVA, REFERENCE, WHOLE_BODY, human15, scale_segment


@pytest.mark.parametrize("sex, total", [("male", 1.0000), ("female", 0.9999)])
def test_table_fractions_sum_to_whole_body(sex, total):
    assert sum(DE_LEVA[sex][s].mass for s in WHOLE_BODY) == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("sex, trunk_mass, supr_midh, cerv_midh", [("male", 0.4346, 0.5319, 0.6033),
                                                                   ("female", 0.4257, 0.5293, 0.6148)])
def test_trunk_pieces_sum_to_one_piece_trunk(sex, trunk_mass, supr_midh, cerv_midh):
    t = DE_LEVA[sex]
    assert t["upper_trunk"].mass + t["middle_trunk"].mass + t["lower_trunk"].mass == pytest.approx(trunk_mass, abs=1e-9)
    assert t["upper_trunk"].length + t["middle_trunk"].length + t["lower_trunk"].length == pytest.approx(supr_midh, abs=1e-9)
    assert t["upper_trunk_c7"].length + t["middle_trunk"].length + t["lower_trunk"].length == pytest.approx(cerv_midh, abs=1e-9)
    assert t["trunk"].length == pytest.approx(cerv_midh, abs=1e-9)


@pytest.mark.parametrize("sex", ["male", "female"])
def test_shank_variants_agree_on_com_and_gyration(sex):
    a, b = DE_LEVA[sex]["shank"], DE_LEVA[sex]["shank_ajc"]
    assert a.mass == b.mass
    assert a.com * a.length == pytest.approx(b.com * b.length, abs=0.5e-3)  # both from KJC
    for r in ("r_sag", "r_trans", "r_long"):
        assert getattr(a, r) * a.length == pytest.approx(getattr(b, r) * b.length, abs=0.5e-3)


def test_female_shank_fixture():
    """models.md 8.3: 0.4416 x 432.3 = 0.4352 x 438.6 = 190.9 mm."""
    assert DE_LEVA["female"]["shank"].com * DE_LEVA["female"]["shank"].length == pytest.approx(0.1909, abs=1e-4)


@pytest.mark.parametrize("sex", ["male", "female"])
def test_reference_subject_reproduces_table(sex):
    H, M = REFERENCE[sex]
    norm = sum(DE_LEVA[sex][s].mass for s in WHOLE_BODY)
    for name, row in DE_LEVA[sex].items():
        s = scale_segment(name, M, H, sex)
        assert s.length == pytest.approx(row.length, rel=1e-12)
        assert s.mass == pytest.approx(row.mass * M / norm, rel=1e-12)
        assert s.com / s.length == pytest.approx(row.com, rel=1e-12)
        radii = np.sqrt(np.array(s.inertia) / s.mass) / s.length
        np.testing.assert_allclose(radii, [row.r_sag, row.r_trans, row.r_long], rtol=1e-12)


@pytest.mark.parametrize("sex, mass, height", [("male", 72.6, 1.78), ("male", 95.0, 1.92), ("female", 55.0, 1.60),
                                               ("female", 61.9, 1.735)])
def test_human15_masses_sum_to_body_mass(sex, mass, height):
    segs = human15(mass, height, sex)
    assert len(segs) == 15
    assert sum(s.mass for s in segs) == pytest.approx(mass, rel=1e-12)
    names = [s.name for s in segs]
    assert all(s.parent is None or names.index(s.parent) < names.index(s.name) for s in segs)
    assert [s.joint for s in segs].count("free") == 1


@pytest.mark.parametrize("sex", ["male", "female"])
def test_thorax_and_pelvis_reproduce_one_piece_trunk(sex):
    """The three-piece trunk (merged into thorax + pelvis) vs de Leva's separate one-piece trunk row."""
    H, M = REFERENCE[sex]
    segs = {s.name: s for s in human15(M, H, sex)}
    th, pe = segs["thorax"], segs["pelvis"]
    m = th.mass + pe.mass
    z = (th.mass * th.com[2] + pe.mass * pe.com[2]) / m
    trunk = scale_segment("trunk", M, H, sex)
    assert m == pytest.approx(trunk.mass, rel=1e-9)
    cerv = segs["head"].joint_pos[2]
    assert cerv - z == pytest.approx(trunk.com, abs=5e-3)  # CoM distance below CERV
    I = sum(s.inertia + s.mass * (s.com[2] - z) ** 2 * np.diag([1.0, 1.0, 0.0]) for s in (th, pe))
    np.testing.assert_allclose(np.diag(I), trunk.inertia, rtol=0.01)  # (sag, trans, long) = (x, y, z)


@pytest.mark.parametrize("sex, mass, height", [("male", 73.0, 1.741), ("male", 72.6, 1.78), ("female", 61.9, 1.735)])
def test_whole_body_com_height(sex, mass, height):
    """Standing CoM height from the 15 bodies vs the 14-piece one-trunk set stacked from the table."""
    segs = human15(mass, height, sex)
    com = sum(s.mass * s.com for s in segs) / mass
    t = {k: scale_segment(k, mass, height, sex) for k in DE_LEVA[sex]}
    head, trunk, thigh, shank = t["head"], t["trunk"], t["thigh"], t["shank_ajc"]
    z_cerv = height - head.length
    z_hip = z_cerv - trunk.length
    z_knee = z_hip - thigh.length
    z_ankle = z_knee - shank.length
    z_supr = z_cerv - (t["upper_trunk_c7"].length - t["upper_trunk"].length)
    arm = [(t["upper_arm"], z_supr), (t["forearm"], z_supr - t["upper_arm"].length),
           (t["hand"], z_supr - t["upper_arm"].length - t["forearm"].length)]
    pieces = [(head, height), (trunk, z_cerv)] + 2 * (arm + [(thigh, z_hip), (shank, z_knee)])
    moment = sum(p.mass * (z0 - p.com) for p, z0 in pieces) + 2 * t["foot"].mass * 0.0  # foot CoM on the sole
    expected = moment / sum(p.mass for p, _ in pieces + [(t["foot"], 0), (t["foot"], 0)])
    assert com[2] == pytest.approx(expected, abs=3e-3)
    assert 0.53 < com[2] / height < 0.59  # adult standing CoM height, about 55-57 % of stature
    assert abs(com[1]) < 1e-12  # left-right symmetric
    assert z_ankle > 0


@pytest.mark.parametrize("args, match", [((70.0, 1.75, "robot"), "sex must be one of"),
                                         ((-3.0, 1.75, "male"), "body mass must be"),
                                         ((70.0, 175.0, "male"), "stature must be"),
                                         ((70.0, float("nan"), "male"), "stature must be")])
def test_bad_subject_is_named(args, match):
    with pytest.raises(ValueError, match=match):
        human15(*args)


def test_unknown_segment_is_named():
    with pytest.raises(ValueError, match="no de Leva segment 'neck'"):
        scale_segment("neck", 70.0, 1.75)
