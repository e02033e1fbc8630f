"""A serial force board (the virtual MCU as a FORCE-only board on a real pty) served by
daq.devices.forceboard as a real process, recorded by daq.record: unplugged and replugged mid-stream."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import time
import tty
from pathlib import Path

import msgpack
import numpy as np
from mcap.reader import make_reader

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports
from firmware_bridge import protocol as P
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


def test_samples_received_before_an_unplug_are_published_partial_blocks_included(tmp_path):
    """Two boards (ptys the test writes FORCE frames to) in one daemon, blocks of 10: each sends 23
    samples, then FP2's pty closes (the cable pulled). Every sample sent is published, the 3 of each
    board's partial block included: FP2's own, and FP1's, which the reopen of all boards would drop."""
    sent = 23
    ptys = {name: os.openpty() for name in ("FP1", "FP2")}
    for _, s in ptys.values():
        tty.setraw(s)  # a byte pipe until the daemon opens it
    sup, plates = free_tcp_ports(2)
    cfg = tmp_path / "lab.toml"
    devices = "".join(f"""
[devices.{name}]
kind = "forceplate"
type = 2
source = "{os.ttyname(s)}"
rate_hz = 1000.0
block = 10
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
""" for name, (_, s) in ptys.items())
    cfg.write_text(f"""
[lab]
name = "boards"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "plates"
module = "daq.devices.forceboard"
bind = "tcp://127.0.0.1:{plates}"
devices = ["FP1", "FP2"]
args = ["--retry-s", "0.1"]
""" + devices)
    watch = Subscriber(f"tcp://127.0.0.1:{plates}", ["forceplate/FP1", "forceplate/FP2", "events/plates",
                                                     "health/plates"])
    daemon = proc(cfg, "plates")
    got: dict[str, list[float]] = {"forceplate/FP1": [], "forceplate/FP2": []}

    def collect(f) -> bool:
        if f.stream in got:
            got[f.stream] += f.data[:, 2].tolist()  # Fz: the sample's number, sent below
        return False

    try:
        # both ports open (pyserial's open empties their input: write after it)
        wait_for(watch, lambda f: collect(f) or (f.stream == "health/plates" and
                                                 parse_health(f).get("device/sessions", {}).get("count", 0) >= 1))
        frames = b"".join(P.encode_frame(P.Force((0.0, 0.0, float(i), 0.0, 0.0, 0.0)), i, 0, 1000 * i)
                          for i in range(sent))
        for m, _ in ptys.values():
            os.write(m, b"\x00" + frames)  # a delimiter first: the host's decoder syncs on it
        # the full blocks of both boards are out: the partial ones are in the daemon
        wait_for(watch, lambda f: collect(f) or all(len(v) >= 20 for v in got.values()))
        for fd in ptys.pop("FP2"):
            os.close(fd)
        wait_for(watch, lambda f: collect(f) or f.meta.get("event") == "device_lost")
        try:
            wait_for(watch, lambda f: collect(f) or all(len(v) >= sent for v in got.values()), 30.0)
        except AssertionError:
            pass  # the assertion below says which samples are missing
        assert daemon.poll() is None
    finally:
        watch.close()
        daemon.send_signal(signal.SIGTERM)
        err = daemon.communicate(timeout=30)[1]
        for fd in (fd for pair in ptys.values() for fd in pair):
            os.close(fd)
    assert daemon.returncode == 0, err
    assert got == {k: [float(i) for i in range(sent)] for k in got}
