"""`walklab run` on the simulated exoskeleton world (configs/sim_exo.toml with private ports and pty): a real
supervisor, world, dynamics service and recorder as subprocesses. Truths: the recording read with the mcap
library and msgpack (not walklab's reader): the plate, marker and joint (encoder) streams, no seq gaps;
Pinocchio (forward kinematics and rnea with the free flyer) of the prescribed motion at the recorded
samples' times: the markers within their 1 mm noise, the plates' total vertical force read back through
dynamics.forceplate (offsets taken before the wearer reached them) within their noise while every
loaded foot is on them; the encoders on the prescribed joint angles within the cuffs' give."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pinocchio as pin

import configs
from controller.config import load
from daq.devices.exo_world_sim import build_world, parse_args
from daq.ports import free_tcp_ports
from dynamics.forceplate import Plate, process
from dynamics.pinocchio_model import to_pinocchio
from dynamics.plants.exo_world import ground_reaction, motion
from tests.controller.test_run_sim import frames, samples  # the recording read with mcap + msgpack


REPO = Path(__file__).resolve().parents[2]
X0 = -1.0  # the left foot's first flat place: 1 m before FP1


def private_lab(tmp_path: Path) -> Path:
    """configs/sim_exo.toml on free ports with its pty under tmp_path, the wearer starting at X0."""
    text = configs.path("sim_exo.toml").read_text()
    ports = sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", text)))
    for old, new in zip(ports, free_tcp_ports(len(ports))):
        text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    text = text.replace("/tmp/walklab-sim/exo-mcu", str(tmp_path / "pty" / "mcu"))
    assert '"--x0", "-2.0"' in text
    text = text.replace('"--x0", "-2.0"', f'"--x0", "{X0}"')
    cfg = tmp_path / "sim_exo.toml"
    cfg.write_text(text)
    return cfg


def test_walklab_run_exo_world_publishes_plates_markers_and_joints(tmp_path):
    cfg = private_lab(tmp_path)
    rec = tmp_path / "s.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "6", "--record",
                          str(rec)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    f = frames(rec)
    lab = load(cfg)
    motors = lab.devices["exo_mcu"].motors
    for stream in ("forceplate/FP1", "forceplate/FP2", "markers/exo", "sim/exo", "dynamics/grf",
                   *(f"encoder/{m}" for m in motors)):
        assert stream in f, sorted(f)
    for stream, docs in f.items():
        seq = np.array([d["seq"] for d in docs])
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + seq.size)), stream  # no seq gap
    world_proc = next(p for p in lab.processes if p.name == "world")
    world = build_world(parse_args("world", world_proc.args))
    pm = to_pinocchio(world.model)
    data = pm.createData()

    # markers: Pinocchio's forward kinematics of the motion at each frame's time, 1 mm noise, occlusions NaN
    docs = f["markers/exo"]
    labels = [c.split(":")[0] for c in docs[0]["channels"][0::3]]
    assert labels == list(world.labels)
    t_m, pos = samples(docs)
    pos = pos.reshape(pos.shape[0], -1, 3)
    tm = t_m * 1e-9
    assert tm[-1] - tm[0] > 3.0
    q, _, _ = motion(world, tm, X0)
    err = []
    for k in range(0, tm.size, 10):
        pin.forwardKinematics(pm, data, q[k])
        for j, (s, p) in enumerate(zip(world.marker_segments, world.marker_points)):
            seg = world.model.segments[s]
            err.append(pos[k, j] - data.oMi[pm.getJointId(seg.joint_name or seg.name)].act(p))
    err = np.array(err)
    seen = ~np.isnan(err[:, 0])
    assert seen.mean() > 0.9 and (~seen).any()
    assert np.abs(err[seen].mean(axis=0)).max() < 0.3e-3 and 0.8e-3 < err[seen].std() < 1.2e-3

    # plates: total Fz against Pinocchio's rnea (free-flyer rows: the ground force the motion requires)
    total, t_ref = None, None
    for name in ("FP1", "FP2"):
        dev = lab.devices[name]
        plate = Plate(type=dev.type, corners=dev.corners, origin=dev.origin, cal_matrix=dev.cal_matrix, name=name)
        t_p, raw = samples(f[f"forceplate/{name}"])
        if t_ref is None:
            t_ref = t_p
        assert np.array_equal(t_p, t_ref)  # one world sample per plate sample, both plates
        sig = process(plate, raw, offset=raw[:300].mean(axis=0))
        total = sig.force[:, 2] if total is None else total + sig.force[:, 2]
    tp = t_ref * 1e-9
    q, v, a = motion(world, tp, X0)
    g = ground_reaction(world, tp, q, v, a)
    loaded = g.foot_force[:, :, 2] > 1.0
    x = g.point[:, :, 0]
    on = np.all(~loaded | ((x > 0.02) & (x < 1.18)), axis=1) & np.any(loaded & (x > 0.02) & (x < 1.18), axis=1)
    assert on.sum() > 300, "the wearer never stood on the plates"
    fz = np.empty(tp.size)
    for k in np.flatnonzero(on):
        pin.forwardKinematics(pm, data, q[k])
        fz[k] = data.oMi[1].act(pin.Force(pin.rnea(pm, data, q[k], v[k], a[k])[:6])).linear[2]
    diff = total[on] - fz[on]
    assert abs(diff.mean()) < 1.0 and diff.std() < 3.0  # two plates' noise, σ 0.5 N a channel
    assert total[:300].std() < 3.0  # the wearer was not on a plate while the offsets were taken

    # joints: each encoder within the cuffs' give (a few mrad) and one count of the prescribed joint angle
    col = world.iq[world.actuated]
    for j, m in enumerate(motors):
        t_e, enc = samples(f[f"encoder/{m}"])
        qj = motion(world, t_e * 1e-9, X0)[0][:, col[j]]
        assert np.abs(enc[:, 0] - qj).max() < 0.03, m
        assert np.ptp(qj) > 0.3, m  # the joint moved
