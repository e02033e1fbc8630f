"""A serial force board (the virtual MCU as a FORCE-only board on a real pty) served by
daq.devices.forceboard as a real process, recorded by daq.record: unplugged and replugged mid-stream."""
from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path

import msgpack
import numpy as np
from mcap.reader import make_reader

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports
from firmware_bridge.virtual import VirtualMCU

REPO = Path(__file__).resolve().parents[3]


def load_at(t: float) -> list[float]:
    """The board's channels at its time t [s]: Fx Fy Fz (N), Mx My Mz (N·m)."""
    return [10 * math.sin(3 * t), -5.0, 700 + 100 * math.sin(2 * math.pi * t), 1.5, -2 * math.cos(t), 0.25]


def proc(cfg: Path, name: str) -> subprocess.Popen:
    lab = load(cfg)  # the process as the supervisor starts it, alone
    return subprocess.Popen(Supervisor(lab).command(lab.process(name)), cwd=REPO, stderr=subprocess.PIPE, text=True)


def wait_for(sub: Subscriber, pred, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        f = sub.recv(timeout_s=0.2)
        if f is not None and pred(f):
            return f
    raise AssertionError("timed out waiting for a frame")


def test_unplug_and_replug_is_a_gap_event_and_the_stream_resumes(tmp_path):
    out = tmp_path / "board.mcap"
    with VirtualMCU(n_motors=0, n_force=6, force=load_at, stream_hz=1000) as mcu:
        sup, plates, rec = free_tcp_ports(3)
        cfg = tmp_path / "lab.toml"
        cfg.write_text(f"""
[lab]
name = "board"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "plates"
module = "daq.devices.forceboard"
bind = "tcp://127.0.0.1:{plates}"
devices = ["FP1"]
args = ["--retry-s", "0.1"]
[[processes]]
name = "rec"
module = "daq.record"
bind = "tcp://127.0.0.1:{rec}"
args = ["-o", "{out}"]
[devices.FP1]
kind = "forceplate"
type = 2
source = "{mcu.port}"
rate_hz = 1000.0
block = 5
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
""")
        recorder = proc(cfg, "rec")
        daemon = proc(cfg, "plates")
        watch = Subscriber(f"tcp://127.0.0.1:{plates}", ["forceplate/FP1", "events/plates"])
        rec_health = Subscriber(f"tcp://127.0.0.1:{rec}", ["health/rec"])
        try:
            # the recorder is recording (it counts frames written) before the cable is pulled
            wait_for(rec_health, lambda f: parse_health(f).get("recorder/frames", {}).get("count", 0) > 100)
            first = wait_for(watch, lambda f: f.stream == "forceplate/FP1" and f.seq >= 200)
            mcu.unplug()
            lost = wait_for(watch, lambda f: f.meta.get("event") == "device_lost")
            time.sleep(0.5)  # the cable stays out half a second
            mcu.replug()
            back = wait_for(watch, lambda f: f.meta.get("event") == "device_back")
            after = wait_for(watch, lambda f: f.stream == "forceplate/FP1" and f.seq >= first.seq + 300)
            assert daemon.poll() is None  # the same process all along: no restart
        finally:
            watch.close()
            rec_health.close()
            for p in (recorder, daemon):
                p.send_signal(signal.SIGTERM)
            errs = [p.communicate(timeout=30)[1] for p in (recorder, daemon)]
    assert recorder.returncode == 0 and daemon.returncode == 0, errs
    assert back.meta["gap_s"] >= 0.5 and lost.meta["device"] == "FP1"
    with open(out, "rb") as fh:
        docs = [msgpack.unpackb(m.data) for _, _, m in make_reader(fh).iter_messages(log_time_order=False)]
    events = [d["meta"]["event"] for d in docs if d["stream"] == "events/plates"]
    assert events == ["device_lost", "device_back"]  # the gap is in the recording
    plate = [d for d in docs if d["stream"] == "forceplate/FP1"]
    t_lost = next(d["t_host"] for d in docs if d["stream"] == "events/plates")
    assert any(d["t_host"] > t_lost for d in plate) and any(d["t_host"] < t_lost for d in plate)
    seqs = [d["seq"] for d in plate]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # one publisher, no frame lost on the bus
    for d in plate[::50]:  # values: the board's load at each sample's device time (float32 on the wire)
        data = np.frombuffer(d["buffers"][0]["data"], dtype=d["buffers"][0]["dtype"]).reshape(d["buffers"][0]["shape"])
        for i, row in enumerate(data):
            want = np.float32(load_at((d["t_device"] + i * 1_000_000) * 1e-9))
            np.testing.assert_array_equal(row, want.astype(np.float64))
