"""Simulated and C3D-replayed marker streams (daq.devices.markers_sim) as real processes."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import numpy as np

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Subscriber
from daq.formats import c3d
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[3]


def collect(tmp_path: Path, args: list[str], n_frames: int) -> list:
    sup, port = free_tcp_ports(2)
    cfg = tmp_path / "lab.toml"
    quoted = ", ".join(f'"{a}"' for a in args)
    cfg.write_text(f'[lab]\nname = "m"\n[supervisor]\nbind = "tcp://127.0.0.1:{sup}"\n[[processes]]\n'
                   f'name = "markers"\nmodule = "daq.devices.markers_sim"\nbind = "tcp://127.0.0.1:{port}"\n'
                   f'args = [{quoted}]\n')
    lab = load(cfg)
    proc = subprocess.Popen(Supervisor(lab).command(lab.process("markers")), cwd=REPO, stderr=subprocess.PIPE,
                            text=True)
    got = []
    with Subscriber(f"tcp://127.0.0.1:{port}", ["markers/*"]) as sub:
        try:
            while len(got) < n_frames:
                f = sub.recv(timeout_s=60)
                assert f is not None, "no marker frames"
                got.append(f)
        finally:
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err
    return got


def test_model_markers_are_rigid_labelled_noisy_and_occluded(tmp_path):
    frames = collect(tmp_path, ["--rate-hz", "200", "--dropout", "0.02"], 300)  # 3 s
    labels = ("OMPH", "MIDH", "CERV", "SUPR", "XYPH", "VERT", "MET3_l", "MET3_r")  # human15's markers
    assert all(f.channels == tuple(f"{s}:{a}" for s in labels for a in "xyz") for f in frames)
    pos = np.concatenate([f.data.reshape(-1, 8, 3) for f in frames])
    res = np.concatenate([f.extra["residual"] for f in frames])
    assert np.array_equal(np.isnan(res), np.isnan(pos).any(axis=2)) and 0 < np.isnan(res).mean() < 0.5
    # OMPH and MIDH sit on one segment 0.1457 m apart (configs/models/human15.toml): a rigid pair
    d = np.linalg.norm(pos[:, 0] - pos[:, 1], axis=1)
    d = d[~np.isnan(d)]
    assert abs(np.mean(d) - 0.1457) < 0.5e-3 and np.std(d) < 3e-3  # 1 mm noise per coordinate
    # the base walks along x at 1.2 m/s (MIDH, the hip centre, over the 3 s)
    t = np.concatenate([f.sample_times("t_device") for f in frames]) * 1e-9
    ok = ~np.isnan(pos[:, 1, 0])
    assert abs(np.polyfit(t[ok], pos[ok, 1, 0], 1)[0] - 1.2) < 0.05


def test_c3d_markers_replayed_as_in_the_file(tmp_path, shared_data):
    path = shared_data / "gait-raw.c3d"
    trial = c3d.load(path)
    frames = collect(tmp_path, ["--c3d", str(path), "--stream", "markers/c3d", "--block", "5"], 142 // 5)
    m = trial.markers
    assert frames[0].rate_hz == m.rate and frames[0].channels == tuple(f"{s}:{a}" for s in m.labels for a in "xyz")
    got = np.concatenate([f.data.reshape(-1, len(m.labels), 3) for f in frames])
    want = m.positions[:len(got)]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(got, want)  # positions and gaps exactly as the file has them
    assert [f.t_device for f in frames] == [round(5 * k * 1e9 / m.rate) for k in range(len(frames))]


def test_the_model_walks_a_recorded_gait_in_its_marker_set(tmp_path, shared_data):
    """--gait: human15 fitted to OpenSim's example trial (41 markers, 60 Hz) and published in that
    marker set at 120 Hz. Truth: the recorded markers themselves. The pelvis is the fitted root:
    its markers within the fit's residual (~1 cm) of the recorded ones; the legs are the model's
    (its proportions, hinge knees: a generic set on another body), yet every heel, toe and shank
    marker moves fore and aft with the recorded marker of its own side (correlation > 0.99) and
    against the other side's (a gait, sides not swapped); rigid pairs keep their distance."""
    from daq.devices.markers_sim import load_marker_set
    from daq.formats.opensim import read_trc

    path = shared_data / "subject01_walk1.trc"
    rec = read_trc(path).markers
    frames = collect(tmp_path, ["--gait", str(path), "--rate-hz", "120", "--noise-mm", "0", "--dropout", "0",
                                "--block", "4", "--stream", "markers/gait"], 300 // 4)
    mset = load_marker_set("human15_opensim")
    assert all(f.rate_hz == 120.0 and f.channels == tuple(f"{s}:{a}" for s in mset.labels for a in "xyz")
               for f in frames)
    pos = np.concatenate([f.data.reshape(-1, len(mset.labels), 3) for f in frames])[::2]  # at the trial's 60 Hz
    assert not np.isnan(pos).any() and len(pos) == 150

    def published(label):
        return pos[:, mset.labels.index(label)]

    def recorded(label):
        return rec.positions[:150, rec.labels.index(label)]

    for label in ("L.ASIS", "R.ASIS", "V.Sacral"):
        assert np.median(np.linalg.norm(published(label) - recorded(label), axis=1)) < 0.015, label
    for side, other in (("L", "R"), ("R", "L")):
        for part in ("Heel", "Toe.Tip", "Shank.Front"):
            x = published(f"{side}.{part}")[:, 0]
            assert np.corrcoef(x, recorded(f"{side}.{part}")[:, 0])[0, 1] > 0.99, (side, part)
            assert np.corrcoef(x, recorded(f"{other}.{part}")[:, 0])[0, 1] < 0, (side, part)
    # rigid on the pelvis: the set's 2 x 0.128 m between the ASIS (human15_opensim.toml), on a model
    # whose thigh is the set's reference length (scale 1)
    d = np.linalg.norm(published("L.ASIS") - published("R.ASIS"), axis=1)
    assert np.allclose(d, 0.256, atol=1e-9)
