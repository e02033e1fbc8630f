"""`dynamics.walker_inverse` on its compiled kernel (kernels/walker.py) against the numpy reference path.

States from the offline world (`dynamics.plants.jansen_world`, its own integrator and contact stage) walking
over two plates, with the plate readings varied so every branch of the plate sharing runs: readings
missing (NaN), a plate loaded where no foot stands (``unassigned``), a plate whose feet the contact law
leaves unloaded (equal shares), flight. Truths besides the numpy path: the feet on a plate carry exactly
its reading (Newton's third law at the plate), and a plate force on no foot is reported, not lost.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from dynamics import forceplate as fp
from dynamics import kernels
from dynamics.linkage.model import LinkageError
from dynamics.plants import jansen_world as jw
from dynamics.walker_inverse import walker_inverse, walker_model

PLATES = [fp.Plate(type=2, corners=np.array([[0.6, -0.4, 0], [0, -0.4, 0], [0, 0.4, 0], [0.6, 0.4, 0]], float),
                   origin=np.array([0, 0, -0.04])),
          fp.Plate(type=2, corners=np.array([[1.2, -0.4, 0], [0.6, -0.4, 0], [0.6, 0.4, 0], [1.2, 0.4, 0]], float),
                   origin=np.array([0, 0, -0.04]))]


@functools.lru_cache(maxsize=None)
def states() -> tuple[np.ndarray, ...]:
    """q, u (N, 5), sdd (N, 2) and the plates' wrenches (N, 2, 6) of a 1.2 s walk onto the plates."""
    world = jw.jansen_world()
    sim = jw.JansenSim(world, 5e-4, record_every=2, x0=-0.3)
    for k in range(2400):
        jw.advance(sim, np.array([3.0, 3.0]), k * 5e-4)
    s = sim.take()
    sdd = np.vstack([np.zeros((1, 2)), np.diff(s.u[:, 3:5], axis=0) / 1e-3])
    pw = np.stack([np.column_stack([F, M]) for F, M in jw.plate_loads(s.foot, s.force, PLATES)], axis=1)
    return s.q, s.u, sdd, pw


def varied() -> tuple[np.ndarray, ...]:
    q, u, sdd, pw = (a.copy() for a in states())
    n = q.shape[0]
    pw[::7, 0] = np.nan                         # FP1 without a reading
    pw[3::11, 1, 4] = np.inf                    # FP2 overflowed
    pw[5::13, 1] = [4.0, 0.0, 30.0, 0.0, 0.0, 0.0]   # FP2 loaded, also while no foot stands on it
    lifted = slice(n // 2, n // 2 + 40)
    q[lifted, 1] += 0.2                         # flight: the law gives no force, the plates still read
    return q, u, sdd, pw


def both(*args, **kw):
    model = walker_model(jw.jansen_world(), PLATES)
    with kernels.use_jit(True):
        a = walker_inverse(model, *args, **kw)
    with kernels.use_jit(False):
        b = walker_inverse(model, *args, **kw)
    return a, b


def test_compiled_equals_the_numpy_path_on_every_output():
    q, u, sdd, pw = varied()
    a, b = both(q, u, sdd, pw, contact_n=2.0, min_fz=5.0)
    scale = {"foot": 1.0, "zmp": 1.0, "margin": 1.0}
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and x.dtype == y.dtype, name
        if x.dtype == bool or x.dtype.kind == "i":
            assert np.array_equal(x, y), name
            continue
        assert np.array_equal(np.isnan(x), np.isnan(y)), name
        tol = 1e-12 * max(scale.get(name, np.nanmax(np.abs(y))), 1.0)
        assert np.nanmax(np.abs(x - y)) <= tol, name
    # the variations reached every branch
    assert b.unassigned.max() > 0 and (~b.zmp_valid).any() and (b.support == 0).any() and b.measured.any()
    n = q.shape[0]
    assert b.measured[n // 2:n // 2 + 40].any()         # equal shares: feet on a plate the law leaves unloaded


def test_the_feet_on_a_plate_carry_its_reading_and_a_plate_on_no_foot_is_reported():
    q, u, sdd, pw = varied()
    with kernels.use_jit(True):
        r = walker_inverse(walker_model(jw.jansen_world(), PLATES), q, u, sdd, pw)
    for k, plate in enumerate(PLATES):
        x0, x1 = plate.corners[:, 0].min(), plate.corners[:, 0].max()
        on = r.measured & (r.foot[..., 0] >= x0) & (r.foot[..., 0] <= x1)
        ok = np.isfinite(pw[:, k]).all(axis=1)
        carried = on.any(axis=1) & ok
        assert carried.sum() > 100
        np.testing.assert_allclose((r.force[..., 2] * on).sum(axis=1)[carried], pw[carried, k, 2], rtol=0, atol=1e-9)
        np.testing.assert_allclose((r.force[..., 0] * on).sum(axis=1)[carried], pw[carried, k, 0], rtol=0, atol=1e-9)
    # a reading on a plate no foot stands on is in `unassigned`, sample by sample
    expected = sum(np.where(np.isfinite(pw[:, k]).all(axis=1) & ~(r.measured & (
        (r.foot[..., 0] >= p.corners[:, 0].min()) & (r.foot[..., 0] <= p.corners[:, 0].max()))).any(axis=1),
        pw[:, k, 2], 0.0) for k, p in enumerate(PLATES))
    np.testing.assert_allclose(r.unassigned, expected, rtol=0, atol=1e-12)


def test_a_non_finite_shaft_angle_is_the_same_error_on_both_paths():
    q, u, sdd, pw = states()
    q = q[:5].copy()
    q[2, 3] = np.nan
    model = walker_model(jw.jansen_world(), PLATES)
    for jit in (True, False):
        with kernels.use_jit(jit), pytest.raises(LinkageError, match="theta: contains NaN"):
            walker_inverse(model, q, u[:5], sdd[:5], pw[:5])
