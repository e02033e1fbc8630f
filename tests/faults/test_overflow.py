"""Impossible but finite raw values (issue 8, A8): 1e308 N on a force plate.

Truths: the amplifier's declared range (a value at or beyond it cannot have been measured: the
sample is flagged ``saturated``) and the float64 limit (~1.8e308: a sample whose outputs overflow
it is invalid — NaN, ``valid`` 0 — never inf, never a value computed from inf); numpy's
floating-point warnings turned into errors in process, and the real service's stderr, show that
nothing is left to warn. The other samples are the analytic load, untouched.
"""
from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

from controller.config import ForcePlate, load
from daq.frames import Frame
from daq.health import parse_health
from dynamics import forceplate as fp
from dynamics.service import GRF_STREAM, GrfService, Settings

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000
CORNERS = ((0.6, 0.4, 0.0), (0.0, 0.4, 0.0), (0.0, 0.8, 0.0), (0.6, 0.8, 0.0))   # z-down plate axes
ORIGIN = (0.0, 0.0, -0.04)
UNITS = ("N", "N", "N", "N*m", "N*m", "N*m")
LOAD = np.array([30.0, -20.0, -700.0, 5.0, 8.0, 1.0])   # raw type-2 channels of a standing subject
ALL_HUGE = np.full(6, 1e308)                   # every channel: lab sums overflow float64
FZ_HUGE = np.array([0.0, 0.0, 1e308, 0.0, 0.0, 0.0])   # raw +Fz (lab −Fz, z-down): finite outputs


def plate(**ranges) -> fp.Plate:
    rng = np.array([[-ranges["f"]] * 2] * 3 + [[-ranges["m"]] * 2] * 3) * [1, -1] if ranges else None
    return fp.Plate(type=2, corners=np.array(CORNERS), origin=np.array(ORIGIN), channel_range=rng)


def test_process_flags_beyond_range_and_invalidates_overflow_without_a_warning():
    p = plate(f=5000.0, m=1000.0)
    raw = np.array([LOAD, ALL_HUGE, FZ_HUGE, -ALL_HUGE, LOAD])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sig = fp.process(p, raw, offset=LOAD * 0.01)
        total = fp.combine([p, p], [sig, sig])
    np.testing.assert_array_equal(sig.saturated, [False, True, True, True, False])
    # rows 1 and 3: lab force components of ±1e308 summed with moments: beyond float64
    for bad in (1, 3):
        assert np.isnan(sig.force[bad]).all() and np.isnan(sig.moment[bad]).all()
        assert np.isnan(sig.cop[bad]).all() and np.isnan(sig.free_moment[bad]).all() and not sig.valid[bad]
    # row 2: lab F_z = −1e308 exactly, finite: published as it is (not loaded), flagged saturated
    assert sig.force[2, 2] == -1e308 and not sig.valid[2] and np.isfinite(sig.moment[2]).all()
    # the ordinary rows: the plate's own reading of the zeroed load
    good = fp.process(p, np.array([LOAD, LOAD]), offset=LOAD * 0.01)
    np.testing.assert_array_equal(sig.force[[0, 4]], good.force)
    np.testing.assert_array_equal(sig.cop[[0, 4]], good.cop)
    # two plates of 1e308: the total overflows where a plate's value does not: invalid, NaN
    assert not total.valid[1:4].any() and np.isnan(total.force[[1, 3]]).all()
    assert np.isnan(total.force[2]).all() and np.isnan(total.cop[2]).all()
    np.testing.assert_allclose(total.force[[0, 4]], 2 * good.force)


def test_least_loaded_window_never_lands_on_an_overflowing_sample():
    """A running sum would turn every window after a 1e308 sample into inf − inf = NaN (and
    argmin picks a NaN); the windows are local, the unloaded one is found."""
    p = plate()
    raw = np.tile(LOAD, (40, 1))
    raw[5] = -ALL_HUGE
    raw[30:35] = 0.0             # unloaded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fp.least_loaded_window(p, raw, 5) == slice(30, 35)


def frame(raw: np.ndarray, k0: int) -> Frame:
    return Frame(stream="forceplate/FP1", kind="force", seq=k0 // 5, t_device=k0 * MS, t_host=k0 * MS,
                 t=k0 * MS, rate_hz=1000.0, channels=("Fx", "Fy", "Fz", "Mx", "My", "Mz"), units=UNITS,
                 data=raw[k0:k0 + 5], t_recv=(k0 + 5) * MS + 200_000)


def test_service_counts_saturated_and_overflow_samples_without_a_warning():
    """1 s of a standing load with a 1e308 block in it, zeroing on: the block's samples are
    saturated (the declared range), the overflowing ones invalid in the plate and total streams,
    counted; the zero offset and every other sample as without the block."""
    n = 1000
    raw = np.tile(LOAD, (n, 1))
    raw[:100] = 0.0                               # stepped on after 0.1 s: an unloaded window
    bad = np.arange(400, 405)
    raw[bad] = [ALL_HUGE, FZ_HUGE, -ALL_HUGE, ALL_HUGE, FZ_HUGE]
    device = ForcePlate(kind="forceplate", name="FP1", type=2, corners=CORNERS, origin=ORIGIN,
                        force_range_n=5000.0, moment_range_nm=1000.0)
    out: dict[str, list] = {}
    counts: dict[str, int] = {}
    svc = GrfService([device], Settings(zero_s=0.5), lambda s, d, **kw: out.setdefault(s, []).append(np.array(d)),
                     lambda subject, k=1: counts.__setitem__(subject, counts.get(subject, 0) + k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k0 in range(0, n, 5):
            svc.feed([frame(raw, k0)])
    assert svc.plates[0].zero.status == "zeroed" and np.array_equal(svc.plates[0].zero.offset, np.zeros(6))
    rows = np.concatenate(out[f"{GRF_STREAM}/FP1"])
    assert len(rows) == n
    np.testing.assert_array_equal(np.flatnonzero(rows[:, 11]), bad)         # saturated: the block only
    invalid = bad[[0, 2, 3]]
    assert np.isnan(rows[invalid, :10]).all() and (rows[invalid, 10] == 0).all()
    assert (rows[bad[[1, 4]], 2] == -1e308).all()
    assert counts["FP1:saturated_samples"] == 5 and counts["FP1:overflow_samples"] == 3
    total = np.concatenate(out[GRF_STREAM])
    assert len(total) == n and (total[bad, 9] == 0).all() and np.isnan(total[invalid, 0:9]).all()
    good = np.setdiff1d(np.arange(100, n), bad)
    np.testing.assert_array_equal(rows[good, 0:10], np.tile(rows[good[0], 0:10], (len(good), 1)))
    assert rows[good[0], 2] == 700.0 and (rows[good, 10] == 1).all()


def test_every_shipped_lab_declares_its_amplifier_ranges():
    labs = sorted((REPO / "configs").glob("*.toml"))
    plates = 0
    for path in labs:
        devices = tomllib.loads(path.read_text()).get("devices", {})
        for name, d in devices.items():
            if d.get("kind") == "forceplate":
                plates += 1
                assert d.get("force_range_n", 0) > 0 and d.get("moment_range_nm", 0) > 0, (path.name, name)
    assert plates >= 4
    lab = load(REPO / "configs" / "sim.toml")
    assert all(d.force_range_n and d.moment_range_nm for d in lab.devices.values() if d.kind == "forceplate")


def test_live_service_flags_a_1e308_block_and_writes_no_warning(tmp_path, service_lab):
    """The real service process (stderr in its log) with the plate's declared range: a block of
    1e308 N among real blocks at real time."""
    n_blocks, at = 160, 100
    raw = np.tile(LOAD, (5 * n_blocks, 1))
    raw[:150] = 0.0
    raw[5 * at:5 * at + 5] = ALL_HUGE
    ranges = "force_range_n = 5000.0\nmoment_range_nm = 1000.0\n"
    with service_lab(tmp_path, ["--zero-s", "0.3"], plate_toml=ranges) as lab:
        for b in range(n_blocks):
            lab.pump_until(lab.t0 + (b + 1) * 5 * MS)
            lab.send(raw[5 * b:5 * b + 5], 5 * b)
        seen = lab.wait_for(lambda f: f.stream == "health/dynamics" and parse_health(f).get(
            "FP1:overflow_samples", {}).get("count", 0) == 5, timeout_s=20.0)
        assert seen, f"health/dynamics never counted the overflow:\n{lab.log}"
        status = lab.stop()
        log, got = lab.log, lab.got
    assert status == 0, log
    assert "Warning" not in log and "overflow encountered" not in log and "Traceback" not in log, log
    frames = got[f"{GRF_STREAM}/FP1"]
    rows = np.concatenate([f.data for f in frames])
    t = np.concatenate([f.sample_times() for f in frames]) - lab.t0
    hit = (t >= 5 * at * MS) & (t < (5 * at + 5) * MS)
    assert hit.sum() == 5 and (rows[hit, 11] == 1).all() and np.isnan(rows[hit, :10]).all()
    assert (rows[~hit, 11] == 0).all() and np.isfinite(rows[~hit, :6]).all()
    total = np.concatenate([f.data for f in got[GRF_STREAM]])
    assert np.isfinite(total[:, 0:6]).sum(axis=1).tolist().count(0) == 5 and np.isfinite(total).any()
