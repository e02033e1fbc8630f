"""dynamics.ground_stage: the fused ground stage of a walker.

Truths: the plate COP equals the contact ZMP when the plates carry exactly the contact forces
(the plates' raw channels built here from rigid-plate physics, methods.md d.2: on flat ground the
COP is the ZMP); the support margin of a ZMP that lies at a known place in a square of feet; and the
compiled stage equals the numpy path (each module's reference functions composed) to 1e-10,
live in blocks with the contact state carried, and as one batch.
"""
import numpy as np
import pytest

from dynamics import forceplate as fp
from dynamics import kernels
from dynamics.contact import ContactError, Friction, NormalLaw, Plane
from dynamics.ground_stage import GroundSample, GroundStage

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

N, C = 400, 6
RATE = 1000.0
MASS = 12.0


def feet(n=N, seed=0):
    """Six feet on cycloid-like paths (x forward, z up), three per side at y = ±0.15 m, lab frame."""
    t = np.arange(n) / RATE
    pos = np.empty((n, C, 3))
    for k in range(C):
        ph = 2 * np.pi * (2.0 * t + k / C)
        pos[:, k, 0] = 0.3 * (k % 3) + 0.05 * np.cos(ph)
        pos[:, k, 1] = 0.15 if k < 3 else -0.15
        pos[:, k, 2] = 0.01 * np.sin(ph) - 0.002         # below ground about half the cycle
    vel = np.gradient(pos, 1 / RATE, axis=0)
    rng = np.random.default_rng(seed)
    cent = np.column_stack([0.3 + 0.01 * rng.standard_normal(n), 0.01 * rng.standard_normal(n),
                            0.5 + 0.01 * rng.standard_normal(n), 10 * rng.standard_normal((n, 3)),
                            rng.standard_normal((n, 3))])
    return pos, vel, cent


def plate(kind, y0, name):
    """A 1.0 x 0.3 m plate with z-down axes over y in [y0, y0 + 0.3], surface at z = 0."""
    corners = np.array([[1.0, y0, 0.0], [-0.2, y0, 0.0], [-0.2, y0 + 0.3, 0.0], [1.0, y0 + 0.3, 0.0]])
    if kind == 4:
        cal = np.eye(6) + 0.01 * np.random.default_rng(3).standard_normal((6, 6))
        return fp.Plate(type=4, corners=corners, origin=np.array([0.0, 0.0, -0.04]), cal_matrix=cal, name=name)
    return fp.Plate(type=kind, corners=corners, origin=np.array([0.0, 0.0, -0.04]), name=name)


def raw_from_feet(pl, pos, force, sel):
    """Raw channels of plate `pl` carrying the foot forces `force[:, sel]` at `pos[:, sel]` (rigid plate:
    the force and its moment moved to the transducer, in plate axes; type 4 through the inverse
    calibration; type 1 the COP channels themselves)."""
    F = force[:, sel].sum(axis=1)
    n_o = np.cross(pos[:, sel], force[:, sel]).sum(axis=1)      # about the lab origin
    R = pl.rotation
    Fp = F @ R
    Ms = (n_o - np.cross(pl.centre, F)) @ R                     # about the surface centre, plate axes
    if pl.type == 1:
        fz = np.where(Fp[:, 2] != 0, Fp[:, 2], 1.0)
        cx, cy = -Ms[:, 1] / fz, Ms[:, 0] / fz
        return np.column_stack([Fp, cx, cy, Ms[:, 2] - (cx * Fp[:, 1] - cy * Fp[:, 0])])
    raw = np.column_stack([Fp, Ms - np.cross(Fp, pl.origin)])
    return raw @ np.linalg.inv(pl.cal_matrix).T if pl.type == 4 else raw


def law():
    return NormalLaw("lankarani_nikravesh", 2e4, restitution=0.5, v_min=1e-3), Friction(0.4, kind="tanh", v_s=1e-2)


def stage(plates=(), **kw):
    normal, friction = law()
    return GroundStage(normal, C, friction, min_fz=5.0, mass=MASS, plates=plates, threshold=5.0, **kw)


def test_plate_cop_equals_contact_zmp_when_plates_carry_the_feet():
    pos, vel, cent = feet()
    first = stage().step(pos, vel, centroidal=cent)
    force = first.force.copy()
    plates = [plate(2, 0.0, "FP1"), plate(4, -0.3, "FP2")]
    raws = [raw_from_feet(plates[0], pos, force, slice(0, 3)), raw_from_feet(plates[1], pos, force, slice(3, 6))]
    out = stage(plates).step(pos, vel, raws, cent)
    both = out.valid[:, 0] & out.valid[:, 2]
    assert both.sum() > N // 4
    np.testing.assert_allclose(out.cop[both], out.zmp_point[both], atol=1e-9)
    np.testing.assert_allclose(out.combined[:, :6], out.wrench, atol=1e-9 * np.abs(out.wrench).max())
    # each plate's own force is the sum of its feet
    np.testing.assert_allclose(out.plates[:, 0, :3], force[:, :3].sum(axis=1), atol=1e-9)


def test_margin_of_a_centred_load_in_a_square_of_feet():
    """Four feet at the corners of a 0.4 m square pressing equally, no motion: the ZMP is the
    centre and its margin 0.2 m (support.md: distance to the nearest edge)."""
    normal, _ = law()
    gs = GroundStage(normal, 4, None, min_fz=1.0)
    pos = np.array([[[0.0, 0.0, -1e-3], [0.4, 0.0, -1e-3], [0.4, 0.4, -1e-3], [0.0, 0.4, -1e-3]]])
    out = gs.step(pos, np.zeros_like(pos))
    np.testing.assert_allclose(out.zmp_point[0], [0.2, 0.2, 0.0], atol=1e-12)
    np.testing.assert_allclose(out.margin, [0.2], atol=1e-12)
    assert out.n_vertices.tolist() == [4] and out.in_contact.all()
    assert np.isnan(out.zmp_kinematic).all() and not out.valid[0, 1] and not out.valid[0, 2]   # no mass, no plates


@pytest.mark.parametrize("kinds", [(2, 4), (1, 3)])
def test_compiled_equals_numpy_path_live_and_batched(kinds):
    pos, vel, cent = feet(seed=1)
    with kernels.use_jit(False):
        force = stage().step(pos, vel, centroidal=cent).force.copy()
    plates = [plate(kinds[0], 0.0, "FP1"), plate(kinds[1], -0.3, "FP2")]
    if kinds[1] == 3:   # Kistler: 8 channels carrying the second side's load, with an FPCOPPOLY
        plates[1] = fp.Plate(type=3, corners=plates[1].corners, origin=np.array([0.2, 0.1, -0.03]),
                             cop_poly=1e-3 * np.arange(1.0, 13.0), name="FP2")
        F = force[:, 3:].sum(axis=1)
        raws = [raw_from_feet(plates[0], pos, force, slice(0, 3)),
                np.column_stack([F[:, 0] / 2, F[:, 0] / 2, F[:, 1] / 2, F[:, 1] / 2] + [F[:, 2] * w for w in (0.1, 0.2, 0.3, 0.4)])]
    else:
        raws = [raw_from_feet(p, pos, force, sl) for p, sl in zip(plates, (slice(0, 3), slice(3, 6)))]
    raws[0][5] = np.nan                               # an amplifier dropout: an invalid sample, no error
    results = {}
    for jit in (True, False):
        with kernels.use_jit(jit):
            live = stage(plates)
            live.set_offset(0, np.r_[0.5, -0.2, 1.0, np.zeros(plates[0].n_channels - 3)])
            parts = [live.step(pos[i:i + b], vel[i:i + b], [r[i:i + b] for r in raws], cent[i:i + b])
                     for i, b in zip(range(0, N, 10), [1, 3, 6] * 50) if i + b <= N]
            batch = stage(plates)
            batch.offsets[:] = live.offsets
            results[jit] = (parts, batch.step(pos, vel, raws, cent))
    for a, b in zip(results[True][0] + [results[True][1]], results[False][0] + [results[False][1]]):
        for name in GroundSample.__dataclass_fields__:
            x, y = getattr(a, name), getattr(b, name)
            if x.dtype == bool or x.dtype.kind == "i":
                assert np.array_equal(x, y), name
            else:
                np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-10 * max(1.0, np.nanmax(np.abs(y))),
                                           err_msg=name)
    assert results[True][1].flags[:, :, 1].any() and results[True][1].flags[:, :, 2].any()   # episodes open and close
    assert not results[True][1].plate_flags[5, 0, 0]


def test_live_steps_carry_the_contact_state_like_one_batch():
    pos, vel, cent = feet(seed=2)
    whole = stage().step(pos, vel, centroidal=cent)
    gs = stage()
    out = GroundSample.empty(1, C, 0)
    for i in range(N):
        gs.step(pos[i:i + 1], vel[i:i + 1], centroidal=cent[i:i + 1], out=out)   # one workspace, reused
        np.testing.assert_allclose(out.contact[0], whole.contact[i], rtol=1e-12, atol=1e-12)
        assert np.array_equal(out.flags[0], whole.flags[i])
        np.testing.assert_allclose(out.margin[0], whole.margin[i], rtol=1e-12, atol=1e-15)


def test_bad_input_named():
    pos, vel, cent = feet(n=5)
    gs = stage([plate(2, 0.0, "FP1")])
    with pytest.raises(ContactError, match=r"pos and vel must be \(N, 6, 3\)"):
        gs.step(pos[:, :4], vel[:, :4], [np.zeros((5, 6))], cent)
    with pytest.raises(fp.PlateError, match="1 plate"):
        gs.step(pos, vel, [], cent)
    with pytest.raises(fp.PlateError, match="'FP1'.*shape"):
        gs.step(pos, vel, [np.zeros((5, 8))], cent)
    with pytest.raises(ContactError, match="centroidal must be"):
        gs.step(pos, vel, [np.zeros((5, 6))])
    with pytest.raises(ContactError, match="level"):
        GroundStage(law()[0], C, ground=Plane(normal=np.array([0.0, 0.1, 1.0])))
    bad = pos.copy()
    bad[2, 0] = [np.nan, 0.0, -0.01]                   # a marker gap: δ is NaN, no contact, no error
    out = stage().step(bad, vel, centroidal=cent)
    assert not out.in_contact[2, 0] and out.f_normal[2, 0] == 0.0
