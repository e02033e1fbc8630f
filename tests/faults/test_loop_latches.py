"""The control loop's latches against a crash, a restart and a link that drops its ESTOP (controller.loop,
McuIo): real loop processes (`controller.proc`, as the supervisor starts them) on one VirtualMCU over a pty.

Truths: the MCU's own latch state (`VirtualMCU.estop`, `wd_tripped`, the motor mode) — what a new loop may
not clear by itself — and the process's exit status; threads of the link left running (a leak) counted by
name in this process.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import configs
from controller.config import load as load_lab
from controller.synergies import library
from controller.synergies.robot import load_robot
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports
from dynamics.contact import NormalLaw
from dynamics.linkage.model import read_crank_legs
from dynamics.plants.crank import crank_plant, motor_load
from dynamics.plants.motor import MotorParams
from firmware_bridge import protocol as P
from firmware_bridge.link import Link, LinkError
from firmware_bridge.virtual import VirtualMCU

REPO = Path(__file__).resolve().parents[2]
LAW = NormalLaw("hunt_crossley_constant", 2e4, damping=10.0)


def until(pred, timeout_s: float, what: str, pump=None) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pump:
            pump(0.05)
        else:
            time.sleep(0.01)
        if pred():
            return
    loop = getattr(pump, "__self__", None)     # a Loop's pump: say what its process did (it may have died)
    if isinstance(loop, Loop):
        alive = loop.proc.poll() is None
        code = loop.stop()
        pytest.fail(f"{what}: not within {timeout_s} s (the loop {'was running' if alive else 'had exited'}, exit "
                    f"{code}; its events {loop.causes()}; {len(loop.state)} state frames; its last health "
                    f"{loop.health}; the MCU's thread {'running' if loop.mcu.running else 'DEAD'}, its stats "
                    f"{loop.mcu.stats}; stderr:\n{(loop.stderr or '')[-3000:]})")
    pytest.fail(f"{what}: not within {timeout_s} s")


class Loop:
    """One loop process and its controller/state and controller/events frames."""

    def __init__(self, rig: dict) -> None:
        args = load_lab(rig["cfg"]).process("loop").args
        self.mcu = rig["mcu"]
        self.sub = Subscriber([rig["endpoint"]], ["controller/state", "controller/events", "health/loop"])
        # The MCU's port appears once this subscriber has joined (the loop waits for it): a loop that finds
        # the MCU latched publishes its estop event at its first cycle, and the bus never replays events
        # to a late joiner (daq.bus: only sampled streams) — 2 clean-clone suites of ~10 lost it that way
        port = rig["port"]
        if os.path.lexists(port):
            os.unlink(port)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(rig["cfg"]),
                                          "--name", "loop", *args], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.state: list = []
            self.events: list = []
            self.health: dict = {}  # the newest health frame, parsed
            assert self.sub.wait_connected(60.0), "the loop process did not come up"
        finally:
            os.symlink(self.mcu.port, port)

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f = self.sub.recv(timeout_s=0.02)
            if f is None:
                continue
            if f.stream == "health/loop":
                self.health = parse_health(f)
            else:
                (self.events if f.stream == "controller/events" else self.state).append(f)

    def causes(self) -> list[str]:
        return [f.meta.get("cause") for f in self.events]

    def stop(self, sig=signal.SIGTERM) -> int:
        """Signal the process (if it runs), wait for its exit; its exit status (idempotent)."""
        if self.proc.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                _, self.stderr = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, self.stderr = self.proc.communicate()
            self.sub.close()
        return self.proc.returncode


def walklab(*args):
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """A one-crank robot and its library, a lab with the loop process, and its MCU (load: the walker's crank
    plant, plus `push[0]` N m driving the crank forward when a test sets it)."""
    tmp = tmp_path_factory.mktemp("latches")
    robot = tmp / "robot.toml"
    text = configs.path("jansen_single.toml").read_text()  # the shipped one-crank robot, one cheap nominal
    lib = tmp / "lib"
    for pattern, value in ((r"library = .*", f'library = "{lib}"'), (r"speeds = \[.*\]", "speeds = [0.2]"),
                           (r"profiles = \[.*\]", 'profiles = ["constant"]'), (r"samples = \d+", "samples = 256"),
                           (r"stale_s = \S+", "stale_s = 0.1"),
                           (r"torque_slew = .*", "torque_slew = [30.0]")):  # a start ramp of ~10 cycles
        text, n = re.subn(pattern, value, text)
        assert n == 1, pattern
    robot.write_text(text)
    written, _ = library.build(load_robot(robot))
    assert len(written) == 1
    ports = free_tcp_ports(3)
    port = tmp / "mcu"
    cfg = tmp / "lab.toml"
    cfg.write_text(textwrap.dedent(f"""
        [lab]
        name = "latch-test"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "loop"
        module = "controller.loop"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["mcu"]
        args = ["--robot", "{robot}", "--speed", "0.2", "--operator", "tcp://127.0.0.1:{ports[2]}"]
        [devices.mcu]
        kind = "mcu"
        port = "{port}"
        motors = ["crank"]
        watchdog_ms = 1000
        """))
    plant = crank_plant(read_crank_legs("jansen_walker"), ground_penetration=0.008, law=LAW)
    push = [0.0]

    def load(t, th, om):
        J, tau = motor_load(plant, th, om)
        return J, tau - push[0]

    mcu = VirtualMCU(1, motor=MotorParams(), control_hz=1000, stream_hz=500, watchdog_ms=1000, load=load)
    mcu.start()
    os.symlink(mcu.port, port)
    try:
        yield {"cfg": cfg, "mcu": mcu, "endpoint": f"tcp://127.0.0.1:{ports[1]}", "port": port, "push": push}
    finally:
        mcu.close()


@pytest.fixture
def start(rig):
    """Start a loop process (`start()` -> Loop); every one still running is stopped after the test."""
    loops: list[Loop] = []

    def new() -> Loop:
        loops.append(Loop(rig))
        return loops[-1]

    try:
        yield new
    finally:
        for lp in loops:
            lp.stop()


def walking(mcu) -> bool:
    return mcu.wd_armed and not mcu.wd_tripped and not mcu.estop and mcu.mode[0] == P.MODE_TORQUE


def test_a_restarted_loop_keeps_what_the_mcu_latched_until_an_operator_reset(rig, start):
    mcu, cfg = rig["mcu"], str(rig["cfg"])
    # a loop walks, then dies mid-walk (killed: no clean stop): the MCU's watchdog trips
    a = start()
    until(lambda: walking(mcu), 60.0, "the first loop walking", a.pump)
    # the torque's start ramp was limited by the torque slew: counted in the health frame
    until(lambda: a.health.get("safety/clipped", {}).get("count", 0) > 0, 10.0, "health safety/clipped", a.pump)
    a.stop(signal.SIGKILL)
    until(lambda: mcu.wd_tripped and mcu.mode[0] == P.MODE_IDLE, 10.0, "the MCU's watchdog")
    # its successor (what the supervisor's restart does) finds the trip: latched, no RESET sent
    b = start()
    until(lambda: "estop" in b.causes(), 60.0, "the new loop latching on the MCU's trip", b.pump)
    ev = b.events[b.causes().index("estop")]
    assert "watchdog tripped" in ev.meta["detail"] and ev.data[0, 0] == 1.0
    until(lambda: len(b.state) > 20, 20.0, "controller/state frames", b.pump)
    assert mcu.wd_tripped and mcu.mode[0] == P.MODE_IDLE
    assert all(np.all(f.data[:, 5] == 0) for f in b.state)  # no torque commanded
    # only the operator's reset clears it: then it walks
    r = walklab("estop", cfg, "--reset", "--timeout", "20")
    assert r.returncode == 0, r.stderr
    until(lambda: walking(mcu), 20.0, "walking after the reset", b.pump)
    # an e-stop, then the loop stopped while latched: the MCU stays latched, and so does the next loop
    r = walklab("estop", cfg, "--timeout", "20")
    assert r.returncode == 0, r.stderr
    until(lambda: mcu.estop, 10.0, "the MCU's e-stop")
    assert b.stop() == 0
    c = start()
    until(lambda: "estop" in c.causes(), 60.0, "the next loop latching on the MCU's e-stop", c.pump)
    assert "e-stop latched" in c.events[c.causes().index("estop")].meta["detail"]
    until(lambda: len(c.state) > 20, 20.0, "controller/state frames", c.pump)
    assert mcu.estop and mcu.mode[0] == P.MODE_IDLE
    r = walklab("estop", cfg, "--reset", "--timeout", "20")
    assert r.returncode == 0, r.stderr
    until(lambda: walking(mcu), 20.0, "walking after the second reset", c.pump)
    # a clean stop with nothing latched disarms the MCU's watchdog: the next loop walks without a reset
    assert c.stop() == 0
    time.sleep(1.5)  # longer than the watchdog's 1 s: it would have tripped if still armed
    assert not mcu.wd_tripped and not mcu.estop
    d = start()
    until(lambda: walking(mcu), 60.0, "the loop after a clean stop walking", d.pump)
    assert "estop" not in d.causes()
    assert d.stop() == 0


def test_an_estop_the_mcu_does_not_acknowledge_leaves_the_loop_running_and_latched(rig, start):
    # the host's frames stall for 2 s (lost before the firmware: no ACK) while the crank is driven past
    # its 8 rad/s limit: the loop latches on the velocity, its ESTOP times out, and it must neither die
    # (the supervisor's restart would be a new session) nor stop trying: the MCU latches once the stall ends
    mcu = rig["mcu"]
    with Link(str(rig["port"])) as link:  # whatever an earlier test left latched: cleared, as an operator would
        link.wait_caps(10.0)
        link.request(P.Reset())
    e = start()
    try:
        until(lambda: walking(mcu), 60.0, "the loop walking", e.pump)
        mcu.set_faults(stall_at_s=0.0, stall_for_s=2.0)  # longer than the ESTOP's 4 tries of 0.1 s
        rig["push"][0] = 3.0
        until(lambda: "velocity_limit" in e.causes(), 30.0, "the velocity limit latching the loop", e.pump)
        until(lambda: mcu.estop or e.proc.poll() is not None, 30.0, "the MCU's e-stop, retried after the stall",
              e.pump)
        assert e.proc.poll() is None, "the loop died on the unacknowledged ESTOP"
        assert "mcu_estop_failed" in e.causes()
        rig["push"][0] = 0.0
        e.pump(1.0)
        assert e.proc.poll() is None
        assert all(np.all(f.data[:, 5] == 0) for f in e.state if f.t_host >= e.events[e.causes().index(
            "velocity_limit")].t_pub)
    finally:
        rig["push"][0] = 0.0
        code = e.stop()
    assert code == 0, e.stderr[-2000:]


def test_a_failed_session_set_up_leaves_no_link_threads():
    # McuIo on a device it cannot use — the wrong motor count, or a port where nothing answers —
    # raises, and the link's reader and heartbeat threads are gone (the loop retries every 0.2 s)
    from controller.loop import McuIo

    def link_threads():
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("link-"))

    before = link_threads()
    with VirtualMCU(3, watchdog_ms=1000) as mcu:
        with pytest.raises(ValueError, match="the MCU has 3 motors, the robot config 1"):
            McuIo(mcu.port, 1_000_000, 200, 1)
    assert link_threads() == before
    master, slave = os.openpty()  # a port with nothing behind it: no CAPS ever
    try:
        with pytest.raises(LinkError, match="no CAPS"):
            McuIo(os.ttyname(slave), 1_000_000, 200, 1)
    finally:
        os.close(master)
        os.close(slave)
    assert link_threads() == before


def test_a_new_session_reads_the_mcus_latches_from_frames_sent_after_its_config():
    # A loop killed mid-walk stops reading the port; the MCU streams on into its transmit buffer (the
    # pty holds ~1.6 s of frames, the firmware's buffer the rest) and its watchdog trips later. The next
    # loop reads that backlog first: frames from before the trip say nothing is latched. Judged from them,
    # it RESET the MCU the killed loop had left tripped. Truth: the MCU's own latch state.
    from controller.loop import McuIo

    with VirtualMCU(1, watchdog_ms=3000) as mcu:
        with Link(mcu.port) as killed:
            killed.wait_caps(10.0)
            killed.send(P.Command((P.MotorCommand(P.MODE_TORQUE, 0.0),)))  # arms the watchdog
            until(lambda: mcu.wd_armed, 10.0, "the watchdog armed")
        until(lambda: mcu.wd_tripped, 30.0, "the watchdog tripping 3 s after the last COMMAND")
        io = McuIo(mcu.port, 1_000_000, 1000, 1)
        try:
            assert io.mcu_latch is not None and "watchdog tripped" in io.mcu_latch
            assert mcu.wd_tripped, "the new session RESET a tripped watchdog"
        finally:
            io.close()


def test_a_loop_whose_mcu_never_appears_says_why(rig, tmp_path):
    # a loop retries an absent port every 0.2 s (a device plugged in late, a simulated world still starting):
    # the first failure at INFO, then after 10 s a WARNING naming the port and the error (it said nothing:
    # a loop stuck connecting was silent). Truth: the process's own stderr and its health counter.
    cfg = tmp_path / "lab.toml"
    absent = tmp_path / "no-such-mcu"
    cfg.write_text(rig["cfg"].read_text().replace(f'port = "{rig["port"]}"', f'port = "{absent}"'))
    args = load_lab(cfg).process("loop").args
    sub = Subscriber([rig["endpoint"]], ["health/loop"])
    proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "loop", *args],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert sub.wait_connected(60.0), "the loop process did not come up"
        failures, end = 0, time.monotonic() + 120.0
        while failures < 60 and time.monotonic() < end:  # 60 tries of 0.2 s: past the 10 s
            f = sub.recv(timeout_s=0.5)
            if f is not None:
                failures = parse_health(f).get("mcu/open_failures", {}).get("count", 0)
        assert failures >= 60, f"{failures} open failures counted in 120 s"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        sub.close()
    assert proc.returncode == 0, err[-2000:]
    lines = [ln for ln in err.splitlines() if str(absent) in ln]
    assert lines and " INFO " in lines[0] and "retrying" in lines[0], err[-2000:]
    warned = [ln for ln in lines if " WARNING " in ln]
    assert warned and "No such file or directory" in warned[0] and "retrying for" in warned[0], err[-2000:]
