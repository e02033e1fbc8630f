"""`walklab forward --config FILE NAME`: one device process of a lab run alone on this machine."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from daq.bus import Subscriber
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


def test_forward_runs_one_process_and_stops_cleanly(tmp_path):
    sup, plates = free_tcp_ports(2)
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f"""
[lab]
name = "fwd"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "plates"
module = "daq.simulated"
bind = "tcp://127.0.0.1:{plates}"
devices = ["FP1"]
[devices.FP1]
kind = "forceplate"
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
""")
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "forward", "--config", str(cfg), "plates"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Subscriber(f"tcp://127.0.0.1:{plates}", ["forceplate/FP1"]) as sub:
        try:
            frames = []
            while len(frames) < 50:
                f = sub.recv(timeout_s=60)
                assert f is not None, "no frames from the forwarded process"
                frames.append(f)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.startswith("forwarding FP1 (daq.simulated) on tcp://127.0.0.1:")
    assert all(f.kind == "force" and f.data.shape == (5, 6) for f in frames)


def test_forward_of_an_unknown_process_is_one_line(tmp_path):
    cfg = tmp_path / "lab.toml"
    cfg.write_text('[lab]\nname = "fwd"\n')
    res = subprocess.run([sys.executable, "-m", "controller.cli", "forward", "--config", str(cfg), "nope"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("walklab forward: error:") and "nope" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_remote_process_is_subscribed_to_but_not_started_here(tmp_path):
    """`remote = true`: `walklab forward` runs it on its own machine; this machine's supervisor starts
    only the others, yet the lab's endpoints (what `run`, `status` and the recorder subscribe to)
    include it, and its bind may repeat a local one (it is another machine's address)."""
    from controller.config import load
    from controller.supervisor import Supervisor

    cfg = tmp_path / "lab.toml"
    cfg.write_text("""
[lab]
name = "two-machines"
[supervisor]
bind = "tcp://127.0.0.1:5600"
[[processes]]
name = "plates"
module = "daq.simulated"
bind = "tcp://127.0.0.1:5601"
devices = ["FP1"]
remote = true
[[processes]]
name = "recorder"
module = "daq.record"
bind = "tcp://127.0.0.1:5601"
args = ["-o", "x.mcap"]
[devices.FP1]
kind = "forceplate"
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
""")
    lab = load(cfg)
    plates, rec = lab.processes
    assert plates.remote and not plates.started_here and rec.started_here
    assert [c.spec.name for c in Supervisor(lab).children] == ["recorder"]
    assert lab.endpoints()["plates"] == "tcp://127.0.0.1:5601"
    assert "process plates: module daq.simulated on tcp://127.0.0.1:5601, restart on-failure devices FP1 " \
           "(remote: walklab forward)" in lab.summary()
    local = cfg.read_text().replace("remote = true\n", "")
    cfg.write_text(local)  # both started here: the repeated bind is refused, naming the key
    try:
        load(cfg)
    except ValueError as exc:
        assert "processes[1].bind" in str(exc) and "already bound" in str(exc)
    else:
        raise AssertionError("two local processes on one endpoint were accepted")
