"""Markers from a simulated mocap PC over ZeroMQ (daq.devices.mocap.MocapSender, the documented
msgpack schema) served by the mocap daemon as a real process: labels, NaN gaps, clock-corrected stamps."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Subscriber
from daq.devices.mocap import MocapSender
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[3]
OFFSET_US = 5_000_000_000  # the mocap PC's clock: 5000 s ahead of this host's, and 100 ppm fast
DRIFT = 100e-6


def test_markers_over_zeromq_arrive_with_labels_gaps_and_corrected_stamps(tmp_path):
    sup, pc, daemon_port = free_tcp_ports(3)
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f"""
[lab]
name = "mocap"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "markers"
module = "daq.devices.mocap"
bind = "tcp://127.0.0.1:{daemon_port}"
devices = ["qtm"]
[devices.qtm]
kind = "mocap"
endpoint = "tcp://127.0.0.1:{pc}"
rate_hz = 100.0
""")
    labels = ["LASI", "RASI", "LHEE", "RHEE"]
    sender = MocapSender(f"tcp://127.0.0.1:{pc}", labels, 100.0, units="mm")
    lab = load(cfg)
    daemon = subprocess.Popen(Supervisor(lab).command(lab.process("markers")), cwd=REPO, stderr=subprocess.PIPE,
                              text=True)
    watch = Subscriber(f"tcp://127.0.0.1:{daemon_port}", ["markers/qtm", "events/markers"])
    rng = np.random.default_rng(9)
    sent: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}  # t_us -> positions, residuals, host ns
    got, epochs = [], []
    try:
        deadline = time.monotonic() + 90
        frame = 0
        t_start = time.monotonic_ns()
        while len(got) < 200 and time.monotonic() < deadline:
            host = time.monotonic_ns() - 10_000_000  # the block's first frame was taken 10 ms ago (100 Hz)
            t_us = (host + OFFSET_US * 1000 + round(DRIFT * (host - t_start))) // 1000
            pos = rng.normal(scale=400.0, size=(2, 4, 3))  # mm
            pos[0, 2] = np.nan  # LHEE occluded in the first frame of each block
            res = np.abs(rng.normal(scale=0.5, size=(2, 4)))
            sender.send(frame, t_us, pos, res)
            sent[t_us] = (pos, res, host)
            frame += 2
            f = watch.recv(timeout_s=0.02)
            while f is not None:
                (got if f.stream == "markers/qtm" else epochs).append(f)
                f = watch.recv(timeout_s=0)
    finally:
        watch.close()
        sender.close()
        daemon.send_signal(signal.SIGTERM)
        err = daemon.communicate(timeout=30)[1]
    assert len(got) >= 200, err
    assert epochs and epochs[0].meta["labels"] == labels and epochs[0].meta["epoch"] == 0
    for f in got:
        assert f.kind == "markers" and f.channels == tuple(f"{s}:{a}" for s in labels for a in "xyz")
        pos, res, host = sent[f.t_device // 1000]  # raw device stamp = the PC's t_us
        np.testing.assert_array_equal(f.data.reshape(2, 4, 3), pos * 1e-3)  # mm -> m, NaN kept
        assert np.isnan(f.data[0, 6:9]).all() and np.isnan(f.extra["residual"][0, 2])
        np.testing.assert_array_equal(f.extra["residual"][1], res[1] * 1e-3)
        # corrected: on this host's clock (raw: 5000 s off); once the fit has seen half a second of
        # frames (its envelope: the smallest delay so far), within 5 ms of when the PC stamped it
        assert abs(f.t_device - host) > 4.9e12
        if f.t_device - got[0].t_device >= 500_000_000:
            assert abs(f.t - host) < 5_000_000
