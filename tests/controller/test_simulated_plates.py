"""The simulated force plates of `walklab run` (daq.simulated): raw channels checked against
ezc3d's force-platform reader as the oracle, and the gait against the momentum balance of steady
walking. (Lives here because it tests the sim lab `controller` runs; daq.simulated is engineer G's.)"""
from __future__ import annotations

import ezc3d
import numpy as np
import pytest
from ezc3d import ezc3d as ezc3d_swig

from controller.config import ForcePlate
from daq.simulated import Gait, SimulatedPlate, foot_wrench
from dynamics.model import G
from dynamics import forceplate as fp

RATE = 1000.0
# Two plates as in configs/sim.toml (C3D corner order, plate z down), the second yawed by 30 deg
# and both with their transducer 40 mm below the surface.
YAW = np.deg2rad(30.0)
ROT = np.array([[np.cos(YAW), np.sin(YAW), 0.0], [np.sin(YAW), -np.cos(YAW), 0.0], [0.0, 0.0, -1.0]])
CORNERS = [
    np.array([[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]),
    np.array([1.5, -0.3, 0.0]) + np.array([[0.3, 0.2, 0], [-0.3, 0.2, 0], [-0.3, -0.2, 0], [0.3, -0.2, 0]]) @ ROT.T,
]
ORIGIN = np.array([0.002, -0.001, -0.04])
CAL = np.eye(6) + 0.02 * np.random.default_rng(1).standard_normal((6, 6))


def _int_param(c3d, name, values):
    arr = np.asarray(values, dtype=int)
    p = ezc3d_swig.Parameter(name, "")
    p.set(ezc3d_swig.VecInt([int(v) for v in arr.reshape(-1, order="F")]), [int(s) for s in arr.shape])
    c3d._storage["parameters"].add_parameter("FORCE_PLATFORM", p)


@pytest.mark.parametrize("plate_type", [2, 4])
def test_raw_channels_read_back_by_ezc3d(tmp_path, plate_type):
    """Write the simulated analogs into a C3D with FORCE_PLATFORM parameters: ezc3d must find the
    ground reaction, the COP path and the free moment the simulation put in (lab frame)."""
    n = 1100
    t = np.arange(n) / RATE
    cal = CAL if plate_type == 4 else None
    truth, analogs = [], []
    for i, (phase, side) in enumerate([(0.0, 1.0), (0.5, -1.0)]):
        force, cop, tz = foot_wrench(t, Gait(), phase, side)
        truth.append((force, CORNERS[i].mean(axis=0) + cop, tz))
        plate = fp.Plate(type=plate_type, corners=CORNERS[i], origin=ORIGIN, cal_matrix=cal)
        analogs.append(plate.raw_channels(force, fp.load_moment(force, cop, tz)).T)
    c = ezc3d.c3d()
    c["parameters"]["POINT"]["RATE"]["value"] = [RATE / 10]
    c["parameters"]["POINT"]["UNITS"]["value"] = ["m"]
    c["parameters"]["POINT"]["LABELS"]["value"] = ["dummy"]
    c["parameters"]["ANALOG"]["RATE"]["value"] = [RATE]
    c["parameters"]["ANALOG"]["LABELS"]["value"] = [f"{ch}{i}" for i in (1, 2) for ch in
                                                    ("Fx", "Fy", "Fz", "Mx", "My", "Mz")]
    c["parameters"]["ANALOG"]["UNITS"]["value"] = (["N"] * 3 + ["Nm"] * 3) * 2
    c["data"]["points"] = np.ones((4, 1, n // 10))
    c["data"]["analogs"] = np.concatenate(analogs)[None]
    _int_param(c, "USED", [2])
    _int_param(c, "TYPE", [plate_type, plate_type])
    _int_param(c, "ZERO", [1, 0])
    _int_param(c, "CHANNEL", np.arange(1, 13).reshape(2, 6).T)
    c.add_parameter("FORCE_PLATFORM", "CORNERS", np.stack([k.T for k in CORNERS], axis=-1))
    c.add_parameter("FORCE_PLATFORM", "ORIGIN", np.stack([ORIGIN, ORIGIN], axis=-1))
    c.add_parameter("FORCE_PLATFORM", "CAL_MATRIX", np.stack([CAL if cal is not None else np.zeros((6, 6))] * 2, -1))
    path = tmp_path / "sim.c3d"
    c.write(str(path))
    plates = ezc3d.c3d(str(path), extract_forceplat_data=True)["data"]["platform"]
    for (force, cop, tz), p in zip(truth, plates):
        loaded = force[:, 2] > 20.0
        assert loaded.sum() > 500
        # analogs are stored as float32: errors at 1e-7 relative
        np.testing.assert_allclose(p["force"].T, force, atol=2e-4 * force[:, 2].max())
        np.testing.assert_allclose(p["center_of_pressure"].T[loaded], cop[loaded], atol=1e-5)
        np.testing.assert_allclose(p["Tz"].T[loaded][:, 2], tz[loaded], atol=2e-3)


def test_steady_walking_momentum_balance():
    """Over whole strides the two feet's mean ground reaction is (0, 0, m g): the centre of mass
    does not accelerate on average; one foot's mean force is vertical and weight-sharing."""
    gait = Gait(body_mass_kg=81.0, stride_s=1.05, stance_fraction=0.6)
    t = np.arange(0, 10 * gait.stride_s, 1 / RATE)
    left, _, tz_l = foot_wrench(t, gait, 0.0, 1.0)
    right, _, tz_r = foot_wrench(t, gait, 0.5, -1.0)
    total = (left + right).mean(axis=0)
    np.testing.assert_allclose(total, [0.0, 0.0, 81.0 * G], atol=1e-6 * 81.0 * G * 100)
    assert left[:, 2].mean() == pytest.approx(81.0 * G / 2, rel=1e-3)
    assert abs(left[:, 0].mean()) < 1e-3 * 81.0 * G
    assert abs((tz_l + tz_r).mean()) < 1e-3
    # Double support: both feet loaded for (2 beta - 1) of the stride; never in the air.
    both = (left[:, 2] > 0) & (right[:, 2] > 0)
    assert both.mean() == pytest.approx(2 * 0.6 - 1, abs=0.01)
    assert ((left[:, 2] > 0) | (right[:, 2] > 0)).all()


def test_unsupported_plate_type_is_a_clear_error():
    device = ForcePlate(kind="forceplate", name="FP9", type=3, corners=tuple(map(tuple, CORNERS[0])))
    with pytest.raises(ValueError, match="types 1, 2 and 4, not type 3"):
        SimulatedPlate(device, Gait(), 0.0, 1.0, 1.0, np.random.default_rng(0))


@pytest.mark.parametrize("z_up", [False, True], ids=["plate z down", "plate z up"])
@pytest.mark.parametrize("origin_z", [-0.04, 0.04])
def test_simulator_and_reader_share_the_origin_rule(z_up, origin_z):
    """Whichever way the plate axes point and whichever sign ORIGIN z is stored with, the raw
    channels the simulator writes for a known load (horizontal force included, so F × o matters)
    read back through dynamics.forceplate as that load: force and COP of the analytic input."""
    corners = CORNERS[0][::-1] if z_up else CORNERS[0]      # reversed order flips the plate normal
    origin = np.array([0.002, -0.001, origin_z])
    n = 50
    rng = np.random.default_rng(3)
    force = np.column_stack([rng.uniform(-80, 80, n), rng.uniform(-80, 80, n), rng.uniform(300, 900, n)])
    centre = corners.mean(axis=0)
    cop = centre + np.column_stack([rng.uniform(-0.2, 0.2, n), rng.uniform(-0.1, 0.1, n), np.zeros(n)])
    plate = fp.Plate(type=2, corners=corners, origin=origin)
    raw = plate.raw_channels(force, fp.load_moment(force, cop - centre, np.zeros(n)))
    got = fp.process(fp.Plate(type=2, corners=corners, origin=origin), raw)
    np.testing.assert_allclose(got.force, force, atol=1e-9)
    np.testing.assert_allclose(got.cop, cop, atol=1e-9)
