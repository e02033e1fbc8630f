"""A process that stops sending health is shown and logged as SILENT by the health monitor, and
its return is logged (issue 8, A2, the health monitor's half; the supervisor's liveness restart
is tested in test_silent_process.py).

Real processes started as `walklab run` starts them (`python -m controller.proc`): the plate
simulator, frozen with SIGSTOP (alive, its socket open, nothing sent: the wedged service of the
issue) and thawed with SIGCONT, and the real health monitor with ``--silent-s 1``. No supervisor,
so nothing restarts the frozen process. Every wait is bounded.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0  # a hang guard on a loaded 2-core machine; the test ends as soon as the lines come


def lab(tmp_path: Path) -> Path:
    ports = free_tcp_ports(3)
    text = textwrap.dedent(f"""
        [lab]
        name = "silent"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "forceplates"
        module = "daq.simulated"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["FP1"]
        [[processes]]
        name = "healthmon"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[2]}"
        [devices.FP1]
        kind = "forceplate"
        corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
        origin = [0.0, 0.0, -0.04]
    """)
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def start(config: Path, name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "controller.proc", "--config", str(config), "--name", name]
    if name == "healthmon":
        cmd += ["--silent-s", "1", "--interval", "0.5"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))


def lines_of(proc: subprocess.Popen) -> queue.Queue:
    """The process's output lines, read by a thread (so a wait on them can be bounded)."""
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [q.put(line) for line in proc.stdout], daemon=True).start()
    return q


def wait_for(q: queue.Queue, text: str, seen: list[str]) -> str:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"{text!r} never came; the health monitor said:\n{''.join(seen[-40:])}")


def test_a_frozen_process_is_silent_then_back(tmp_path):
    config = lab(tmp_path)
    plates = start(config, "forceplates")
    mon = start(config, "healthmon")
    seen: list[str] = []
    try:
        out = lines_of(mon)
        wait_for(out, "forceplates running", seen)  # the summary has seen its health
        plates.send_signal(signal.SIGSTOP)
        logged = wait_for(out, "forceplates: SILENT: no health frame for", seen)
        summary = wait_for(out, "forceplates SILENT", seen)
        plates.send_signal(signal.SIGCONT)
        back = wait_for(out, "forceplates: health is back after", seen)
        again = wait_for(out, "forceplates running", seen)
    finally:
        plates.send_signal(signal.SIGCONT)
        for p in (plates, mon):
            p.terminate()
            try:
                p.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert "(last state running)" in logged
    # the summary shows the silence, not the plates' last rates
    assert "forceplate/FP1" not in summary.split("forceplates SILENT")[1].split("|")[0]
    assert "s of silence" in back and "forceplate/FP1" in again
