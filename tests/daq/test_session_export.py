"""Session exports: C3D read back by ezc3d (points, analogs and its own force-platform module) and
the Foxglove MCAP read back by the mcap library, every JSON payload checked against its JSON schema."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import ezc3d
import jsonschema
import numpy as np
import pytest
from mcap.reader import make_reader

from controller import config
from daq.frames import Frame
from daq.labload import frames, lab_streams
from daq.record import SessionWriter, Settings, event_frame, lab_metadata
from daq.simulated import Gait, SimulatedPlate
from dynamics import forceplate as fp

REPO = Path(__file__).resolve().parents[2]
CAL = (np.eye(6) + 0.02 * np.arange(36).reshape(6, 6) / 36.0).round(4)  # off-diagonal, asymmetric

LAB = """
[lab]
name = "export"
[[processes]]
name = "plates"
module = "daq.simulated"
bind = "tcp://127.0.0.1:5901"
devices = ["FP1", "FP2"]
[devices.FP1]
kind = "forceplate"
type = 2
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
origin = [0.001, -0.002, -0.04]
[devices.FP2]
kind = "forceplate"
type = 4
corners = [[0.6, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.4, 0.0], [0.6, 0.4, 0.0]]
origin = [0.0, 0.0, 0.035]
cal_matrix = CAL
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """2 s: two simulated plates under a walking subject (types 2 and 4), 40 markers with gaps, events."""
    d = tmp_path_factory.mktemp("export")
    cfg = d / "lab.toml"
    cfg.write_text(LAB.replace("CAL", json.dumps(CAL.tolist())))
    lab = config.load(cfg)
    path = d / "s.mcap"
    w = SessionWriter(path, Settings(fsync=False), metadata=lab_metadata(lab))
    marker_spec = [s for s in lab_streams() if s.kind == "markers"]
    t0 = 10**12
    plates = {}
    for i, name in enumerate(("FP1", "FP2")):
        dev = lab.devices[name]
        sim = SimulatedPlate(dev, Gait(), phase=0.5 * i, side=1.0 - 2 * i, noise_n=1.0,
                             rng=np.random.default_rng(i))
        raw = np.vstack([sim.next_block()[1] for _ in range(400)])  # 2 s at 1 kHz
        plates[dev.stream_name] = (dev, raw)
        for k in range(0, 2000, 5):
            w.write(Frame(dev.stream_name, "force", k // 5, k * 10**6, t0 + k * 10**6, t0 + k * 10**6, 1000.0,
                          dev.channels, ("N",) * 3 + ("N*m",) * 3, raw[k:k + 5]))
    markers = list(frames(marker_spec, 2.0, t0))
    for f in markers:
        w.write(f)
    w.write(event_frame("foot_strike", 0, t0 + 500_000_000, side="left"))
    for k, chans in enumerate((("a:count",), ("a:count", "b:count"))):  # a health stream gaining a subject
        w.write(Frame("health/x", "health", k, None, t0 + k * 10**9, t0 + k * 10**9, 1.0, chans, ("1",) * len(chans),
                      np.ones((1, len(chans)))))
    w.close()
    return path, plates, markers, t0


def test_c3d_export_reads_back_in_ezc3d(session, tmp_path):
    path, plates, markers, t0 = session
    out = tmp_path / "s.c3d"
    res = cli("sessions", "export", str(path), "--c3d", str(out))
    assert res.returncode == 0, res.stderr
    c = ezc3d.c3d(str(out), extract_forceplat_data=True)
    assert c["parameters"]["POINT"]["RATE"]["value"][0] == 200 and c["parameters"]["ANALOG"]["RATE"]["value"][0] == 1000
    pos = np.stack([f.data.reshape(40, 3) for f in markers])  # (400, 40, 3) m
    got = c["data"]["points"][:3].transpose(2, 1, 0) / 1000.0  # mm -> m
    assert got.shape == pos.shape
    assert np.array_equal(np.isnan(got), np.isnan(pos)) and np.isnan(pos).any()  # gaps stay gaps
    ok = ~np.isnan(pos)
    assert np.max(np.abs(got[ok] - pos[ok])) <= 1e-6 * np.max(np.abs(pos[ok]))
    labels = [l.strip() for l in c["parameters"]["POINT"]["LABELS"]["value"]]
    assert labels == [f"M{i:02d}" for i in range(40)]
    fpp = c["parameters"]["FORCE_PLATFORM"]
    assert list(fpp["TYPE"]["value"]) == [2, 4] and fpp["USED"]["value"][0] == 2
    for i, (stream, (dev, raw)) in enumerate(plates.items()):
        plate = fp.Plate(type=dev.type, corners=np.array(dev.corners), origin=np.array(dev.origin),
                         cal_matrix=None if dev.cal_matrix is None else np.array(dev.cal_matrix))
        ours = fp.process(plate, raw)  # walklab's plate processing of the recorded raw channels
        theirs = c["data"]["platform"][i]
        force = theirs["force"].T
        assert force.shape == ours.force.shape
        assert np.max(np.abs(force - ours.force)) <= 1e-6 * np.max(np.abs(ours.force))
        cop = theirs["center_of_pressure"].T / 1000.0
        v = ours.valid
        assert v.sum() > 500
        assert np.max(np.abs(cop[v] - ours.cop[v])) <= 1e-6 * np.max(np.abs(ours.cop[v]))
    ev = c["parameters"]["EVENT"]
    assert [l.strip() for l in ev["LABELS"]["value"]] == ["foot_strike"]
    assert ev["TIMES"]["value"][1][0] == pytest.approx(0.5, abs=1e-6)


def test_foxglove_export_is_json_with_valid_schemas(session, tmp_path):
    path, plates, markers, t0 = session
    out = tmp_path / "fox.mcap"
    res = cli("sessions", "export", str(path), "--foxglove", str(out))
    assert res.returncode == 0, res.stderr
    seen: dict[str, list] = {}
    with open(out, "rb") as fh:
        for schema, ch, m in make_reader(fh).iter_messages(log_time_order=False):
            assert ch.message_encoding == "json" and schema.encoding == "jsonschema"
            msg = json.loads(m.data)
            jsonschema.validate(msg, json.loads(schema.data))  # the reference validator, draft from $schema
            assert m.log_time == msg["t_ns"]
            seen.setdefault(ch.topic, []).append(msg)
    assert set(seen) == {"/forceplate/FP1", "/forceplate/FP2", "/markers/mocap", "/events/recorder", "/health/x"}
    dev, raw = plates["forceplate/FP1"]
    fz = [msg["Fz"] for msg in seen["/forceplate/FP1"]]
    assert fz == raw[:, 2].tolist() and [msg["t_ns"] for msg in seen["/forceplate/FP1"]] == \
        [t0 + k * 10**6 for k in range(2000)]
    for msg, f in zip(seen["/markers/mocap"], markers):
        p = f.data[0].reshape(40, 3)
        for k in range(40):
            want = [None if math.isnan(x) else x for x in p[k]]
            assert [msg["markers"][f"M{k:02d}"][a] for a in "xyz"] == want
    assert seen["/events/recorder"][0]["event"] == "foot_strike"
