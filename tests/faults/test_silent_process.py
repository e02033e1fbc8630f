"""A silent process (issue 8, A2, the supervisor's half): `walklab run` restarts a process whose
health frames stop for its ``liveness_s`` (or that sends none within ``startup_s`` of a start),
as events on ``events/supervisor``; a healthy process is never touched.

Real subprocesses and sockets: the supervisor under `walklab run`, a process module written here
that wedges on a signal from this test (a busy loop that never ticks its health nor checks its
stop flag: only SIGKILL ends it). Truths: the health frames this test itself received from the
wedged pid (the supervisor may not call a process silent before its last frame is
``liveness_s`` old), the pids in the health frames, the events on the bus.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from daq.bus import Subscriber
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]

WEDGE = '''
import os
import time

def run(ctx, args):
    """Healthy until the file args[0] exists; then remove it and spin without health or stop checks."""
    while not os.path.exists(args[0]):
        if not ctx.sleep_until(time.monotonic_ns() + 20_000_000):
            return 0
    os.unlink(args[0])  # the restarted instance stays healthy
    while True:
        pass
'''

MUTE = '''
import time

def run(ctx, args):
    """Never publishes a health frame: wedged from its very start (only SIGKILL ends it)."""
    while True:
        time.sleep(0.01)
'''


def start_lab(tmp_path: Path, module: str, source: str, extra: str) -> tuple[subprocess.Popen, list[int]]:
    (tmp_path / f"{module}.py").write_text(source)
    ports = free_tcp_ports(2)
    config = tmp_path / "lab.toml"
    config.write_text(textwrap.dedent(f"""
        [lab]
        name = "silence"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        stop_grace_s = 0.5
        backoff_initial_s = 0.1
        status_interval_s = 0.5
        [[processes]]
        name = "{module}"
        module = "{module}"
        bind = "tcp://127.0.0.1:{ports[1]}"
    """) + textwrap.dedent(extra))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, ports


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=60)  # a hang guard: the stop is bounded by stop_grace_s
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"walklab run did not stop:\n{err}")


class Bus:
    """Events and health frames of the lab, in arrival order."""

    def __init__(self, ports: list[int]):
        self.sub = Subscriber([f"tcp://127.0.0.1:{p}" for p in ports], ["events/supervisor", "health/*"])
        self.frames = []

    def until(self, pred, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s  # a hang guard, not a timing assertion
        while time.monotonic() < deadline:
            f = self.sub.recv(timeout_s=0.1)
            if f is not None:
                self.frames.append(f)
                if pred(f):
                    return
        pytest.fail(f"{what} never came within {timeout_s} s; events: {self.events()}")

    def events(self, name: str | None = None) -> list:
        return [f for f in self.frames if f.stream == "events/supervisor" and name in (None, f.meta["event"])]

    def health(self, process: str, pid: int | None = None) -> list:
        return [f for f in self.frames if f.stream == f"health/{process}" and pid in (None, f.meta["pid"])]


def test_a_wedged_process_is_stopped_and_restarted_after_its_liveness_timeout(tmp_path):
    go = tmp_path / "go"
    proc, ports = start_lab(tmp_path, "wedge", WEDGE, f"""
        args = ["{go}"]
        liveness_s = 3.0
    """)
    bus = Bus(ports)
    try:
        # Healthy for well over its liveness timeout: no event at all.
        bus.until(lambda f: f.stream == "health/wedge", 60, "the first health frame")
        first_pid = bus.health("wedge")[0].meta["pid"]
        bus.until(lambda f: len(bus.health("wedge")) >= 4, 60, "four health frames")
        assert not bus.events("silent") and not bus.events("crash"), [e.meta for e in bus.events()]
        go.touch()
        bus.until(lambda f: f.stream == "events/supervisor" and f.meta["event"] == "restart", 60, "the restart")
        bus.until(lambda f: f.stream == "health/wedge" and f.meta["pid"] != first_pid, 60,
                  "the restarted instance's health")
    finally:
        out, err = stop(proc)
        bus.sub.close()
    events = [e.meta for e in bus.events()]
    assert [e["event"] for e in events] == ["silent", "crash", "restart"], (events, err[-3000:])
    silent, crash, restart = bus.events()
    assert silent.meta["process"] == "wedge" and silent.meta["pid"] == first_pid and not silent.meta["first"]
    assert silent.meta["liveness_s"] == 3.0 and silent.meta["silent_s"] >= 3.0  # (rounded to the ms)
    # Never early: the wedged instance's last health frame (as this test received it) is at least
    # liveness_s older than the supervisor's decision (t_host: the same monotonic clock, ns).
    last = bus.health("wedge", first_pid)[-1]
    assert silent.t_host - last.t_host >= 3.0e9
    # It spins without checking its stop flag: SIGTERM is not enough, SIGKILL after stop_grace_s.
    assert crash.meta["status"] == -signal.SIGKILL and crash.meta["restart_in_s"] == 0.1
    assert restart.meta["pid"] != first_pid and restart.meta["restarts"] == 1
    assert f"wedge (pid {first_pid}) silent for" in err and "its health frames stopped" in err
    assert f"wedge (pid {first_pid}) ignored SIGTERM for 0.5 s: SIGKILL" in err
    assert proc.returncode == 0, err


def test_a_process_that_never_reports_is_stopped_after_startup_s_and_not_restarted_with_never(tmp_path):
    proc, ports = start_lab(tmp_path, "mute", MUTE, """
        liveness_s = 2.0
        startup_s = 2.0
        restart = "never"
    """)
    bus = Bus(ports)
    try:
        bus.until(lambda f: f.stream == "events/supervisor" and f.meta["event"] == "exit", 60, "the exit event")
        out, err = proc.communicate(timeout=60)  # nothing left to run: the supervisor stops by itself
    finally:
        if proc.poll() is None:
            out, err = stop(proc)
        bus.sub.close()
    (silent,) = bus.events("silent")
    assert silent.meta["first"] and silent.meta["silent_s"] >= 2.0  # (rounded to the ms)
    assert not bus.health("mute")  # it never published one, as the supervisor saw
    (exit_,) = bus.events("exit")
    # killed: SIGKILL after stop_grace_s, or SIGTERM itself if it came before the runtime's handler
    # (a loaded machine can take longer than startup_s to start Python and import numpy and zmq)
    assert exit_.meta["status"] in (-signal.SIGKILL, -signal.SIGTERM) and not bus.events("restart")
    assert "no health frame since its start" in err and "no process left to run" in err
    assert proc.returncode == 1


def test_liveness_zero_never_stops_a_silent_process(tmp_path):
    proc, ports = start_lab(tmp_path, "mute", MUTE, """
        liveness_s = 0
        startup_s = 0.5
    """)
    bus = Bus(ports)
    try:
        # The supervisor's own health frames are its loop's heartbeat: six of them span > 5 s,
        # ten times startup_s, and every liveness check of the loop ran in between.
        bus.until(lambda f: len(bus.health("supervisor")) >= 6, 60, "six supervisor health frames")
    finally:
        out, err = stop(proc)
        bus.sub.close()
    assert not bus.events("silent") and not bus.events("crash")
    assert "mute up" in out.splitlines()[-1]
