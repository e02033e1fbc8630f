"""Faults during a whole `walklab run --record` of the simulated Jansen world (issue 13, part 6).

One run (private ports and pty, a one-nominal synergy library), three faults in turn, each bounded in time:

1. ``kill -9`` of a daemon (the walker dynamics process): the supervisor restarts it, the crash and the
   restart are events in the recording, and its stream goes on after them;
2. the control loop stalled (SIGSTOP for 1.5 s, then SIGCONT): the virtual MCU's watchdog cuts the
   torque (its ``mcu/watchdog_trips`` counter in the world's recorded health frames; the motors' current
   falls to zero while the loop is stopped);
3. ``kill -9`` of the whole run (every process of it at once): `walklab sessions recover` makes the
   file whole, and every plate frame the test itself received from the world more than 100 ms before
   the kill is in it (the recorder's chunks are at most 100 ms).

Truth: what the test received on its own subscriber, the supervisor's and the MCU's own counts, read
back with the `mcap` library (not walklab's reader).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from controller.config import load
from daq.bus import Subscriber

from ..controller.test_run_sim import REPO, frames, private_lab, robot  # noqa: F401  (robot: a fixture)


def procs_named(root: psutil.Process) -> dict[str, psutil.Process]:
    out = {}
    for p in root.children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "--name" in cmd:
            out[cmd[cmd.index("--name") + 1]] = p
    return out


def wait_for(what: str, predicate, timeout_s: float, poll=lambda: None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        poll()
        time.sleep(0.05)


def idle(seconds: float, drain) -> None:
    """Keep reading the bus for `seconds` (a fault lasts, or the lab runs on after it)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        drain()
        time.sleep(0.02)


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory, robot):  # noqa: F811
    tmp = tmp_path_factory.mktemp("runfaults")
    script = tmp / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.2\n")
    cfg = private_lab(tmp, robot)
    lab = load(cfg)
    rec = tmp / "s.mcap"
    run = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "300", "--record",
                            str(rec), "--script", str(script)], cwd=REPO, stdout=open(tmp / "run.log", "w"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    root = psutil.Process(run.pid)
    world = lab.process("world").bind
    sub = Subscriber([world, lab.process("torques").bind], ["forceplate/FP1", "encoder/left_shaft", "dynamics/torques"])
    torque_seq: list[int] = []
    seen: list[tuple[int, int]] = []        # (seq, host receipt ns) of FP1 frames the test received
    current: list[tuple[int, float]] = []   # (receipt ns, |current| A) of the left motor

    def drain() -> None:
        while (f := sub.recv(timeout_s=0)) is not None:
            if f.stream == "forceplate/FP1":
                seen.append((f.seq, f.t_recv))
            elif f.stream == "dynamics/torques":
                torque_seq.append(f.seq)
            else:
                current.append((f.t_recv, float(np.abs(f.data[:, 2]).max())))

    out: dict = {}
    try:
        wait_for("the world's plate frames", lambda: len(seen) > 200, 300.0, drain)
        wait_for("the processes", lambda: {"torques", "loop", "world"} <= set(procs_named(root)), 60.0, drain)
        wait_for("the torques", lambda: len(torque_seq) > 100, 120.0, drain)
        # 1. kill -9 of a daemon
        victim = procs_named(root)["torques"]
        out["killed_pid"] = victim.pid
        victim.send_signal(signal.SIGKILL)
        before = len(torque_seq)
        wait_for("the restarted torques process's frames", lambda: any(
            s < 50 for s in torque_seq[before:]), 120.0, drain)
        # 2. the controller stalled
        loop = procs_named(root)["loop"]
        out["stop_ns"] = time.monotonic_ns()
        loop.send_signal(signal.SIGSTOP)
        idle(1.5, drain)
        out["cont_ns"] = time.monotonic_ns()
        loop.send_signal(signal.SIGCONT)
        idle(3.0, drain)
        # 3. kill -9 of the whole run, every process at once
        everyone = [root] + root.children(recursive=True)
        drain()
        out["kill_ns"] = time.monotonic_ns()
        for p in everyone:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(everyone, timeout=30)
    finally:
        for p in [root] + (root.children(recursive=True) if root.is_running() else []):
            try:
                p.kill()
            except psutil.Error:
                pass
        sub.close()
    rc = subprocess.run([sys.executable, "-m", "controller.cli", "sessions", "recover", str(rec)], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stdout + rc.stderr
    out.update(seen=seen, current=current, frames=frames(rec), log=(tmp / "run.log").read_text())
    return out


def test_a_killed_daemon_is_restarted_and_the_gap_is_in_the_recording(faulted_run):
    f = faulted_run["frames"]
    events = [d["meta"] for d in f["events/supervisor"]]
    crash = [e for e in events if e.get("process") == "torques" and e.get("event") in ("crash", "exit")]
    restart = [e for e in events if e.get("process") == "torques" and e.get("event") == "restart"]
    assert crash and restart, events
    # its stream went on after the restart: a new run of seq from 0
    seq = [d["seq"] for d in f["dynamics/torques"]]
    assert seq.count(0) >= 2 and len(seq) > 100


def test_a_stalled_controller_trips_the_mcu_watchdog(faulted_run):
    f = faulted_run["frames"]
    trips = 0.0
    for d in f["health/world"]:
        ch = list(d["channels"])
        if "mcu/watchdog_trips:count" in ch:
            trips = max(trips, float(d["arrays"]["data"][0, ch.index("mcu/watchdog_trips:count")]))
    assert trips >= 1
    # the motor current fell to zero while the loop was stopped (torque cut), within the stop
    stop, cont = faulted_run["stop_ns"], faulted_run["cont_ns"]
    during = [a for t, a in faulted_run["current"] if stop + 300_000_000 + 500_000_000 < t < cont]
    assert during and min(during) < 1e-3


def test_kill9_of_the_whole_run_recovers_every_frame_older_than_100ms(faulted_run):
    f = faulted_run["frames"]
    recorded = {d["seq"] for d in f["forceplate/FP1"]}
    older = [s for s, t in faulted_run["seen"] if t < faulted_run["kill_ns"] - 100_000_000]
    assert len(older) > 1000
    missing = [s for s in older if s not in recorded]
    assert not missing, f"{len(missing)} frames older than 100 ms lost, e.g. {missing[:5]}"
