"""A process started with the lab misses none of the frames published before it subscribed
(issue 8, A12: the dynamics service missed ~24 plate frames at start-up, filed as BEFORE_JOIN).

The shipped all-simulated lab runs under `walklab run` (real supervisor, real processes, real
ZeroMQ); the dynamics service imports far more than the plate simulator, so it subscribes after
the plates have started publishing. Truth: the service's own health frame (its subscriber's
counters, cumulative from its start) and the simulator's seq numbering, which starts at 0:
the first frame the service received must be seq 0 and nothing may be missing since.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import configs
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


def test_the_dynamics_service_started_with_the_lab_misses_no_plate_frame(tmp_path):
    text = Path(configs.path("sim.toml")).read_text()
    ports = dict(zip(("5600", "5601", "5602", "5603"), map(str, free_tcp_ports(4))))
    text = re.sub(r"127\.0\.0\.1:(560[0-3])", lambda m: f"127.0.0.1:{ports[m.group(1)]}", text)
    config = tmp_path / "lab.toml"
    config.write_text(text)
    lab = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(config)], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    health = None
    plates = ("forceplate/FP1", "forceplate/FP2")
    try:
        with Subscriber(f"tcp://127.0.0.1:{ports['5603']}", ["health/dynamics"], replay=False) as sub:
            deadline = time.monotonic() + 90.0  # a hang guard: the service's imports on a loaded machine
            while time.monotonic() < deadline:
                f = sub.recv(timeout_s=0.5)
                if f is not None:
                    v = parse_health(f)
                    if all(v.get(p, {}).get("received", 0) >= 400 for p in plates):  # 2 s of each plate
                        health = v
                        break
    finally:
        lab.send_signal(signal.SIGTERM)
        try:
            out, err = lab.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            lab.kill()
            out, err = lab.communicate()
    assert health is not None, f"the service never reported 2 s of both plates:\n{err[-3000:]}"
    for p in plates:
        st = health[p]
        assert (st["missed_at_join"], st["dropped"], st["gaps"], st["lost_samples"], st["out_of_order"]) == \
            (0, 0, 0, 0, 0), (p, st)
    assert "joined stream 'forceplate/FP1' late" not in err
