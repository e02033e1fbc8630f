"""Encoder daemon (daq/encoder.py) as a real subprocess (`python -m controller.proc`) on a real pty
(firmware_bridge.virtual.VirtualMCU in this process), with real ZeroMQ sockets: this test publishes
`controller/command` on the lab's `controller` endpoint and subscribes to `encoder/crank` and
`health/encoder`. Truths: the MCU's own state (setpoint, watchdog latch), the commanded speed as
a mean over many samples, and sample accounting (published + counted lost = device samples)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from controller.config import load
from daq.bus import Publisher, Subscriber
from daq.encoder import CommandError, command_setpoints, parse_args
from daq.frames import Frame
from daq.health import parse_health
from daq.ports import free_tcp_ports
from firmware_bridge import protocol as P
from dynamics.plants.motor import MotorParams
from firmware_bridge.virtual import VirtualMCU

REPO = Path(__file__).resolve().parents[2]
RATE = 250  # Hz, STATE rate the daemon asks for
PERIOD_NS = 1_000_000_000 // RATE


def frame(channels, units, rows) -> Frame:
    data = np.array(rows, dtype=float)
    return Frame("controller/command", "command", 0, None, 0, 0, 0.0, tuple(channels), tuple(units), data)


def test_command_frames_map_units_to_modes():
    motors = ["left", "right"]
    got = command_setpoints(frame(["right", "left"], ["rad/s", "N*m"], [[1.0, 2.0], [3.0, 0.5]]), motors)
    assert got == {1: (P.MODE_VELOCITY, 3.0), 0: (P.MODE_TORQUE, 0.5)}  # the last row applies
    assert command_setpoints(frame(["left"], ["rad"], [[0.25]]), motors) == {0: (P.MODE_POSITION, 0.25)}
    assert command_setpoints(frame(["left"], ["1"], [[0.0]]), motors) == {0: (P.MODE_IDLE, 0.0)}
    with pytest.raises(CommandError, match="'middle' is not a motor"):
        command_setpoints(frame(["middle"], ["rad/s"], [[1.0]]), motors)
    with pytest.raises(CommandError, match="unit 'deg/s'"):
        command_setpoints(frame(["left"], ["deg/s"], [[1.0]]), motors)
    with pytest.raises(CommandError, match="not finite"):
        command_setpoints(frame(["left"], ["rad/s"], [[np.nan]]), motors)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="--block 0"):
        parse_args("enc", ["--block", "0"])
    with pytest.raises(ValueError, match="--stream-hz 0"):
        parse_args("enc", ["--stream-hz", "0"])


def write_lab(tmp_path: Path, ports: list[int], port_path: Path, devices: str = '["mcu"]') -> Path:
    """A lab whose encoder process serves the MCU device `mcu` at `port_path` (its `devices`)."""
    cfg = tmp_path / "lab.toml"
    cfg.write_text(textwrap.dedent(f"""
        [lab]
        name = "encoder-test"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "encoder"
        module = "daq.encoder"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = {devices}
        args = ["--stream-hz", "{RATE}", "--block", "5",
                "--kp", "2.0", "--ki", "20.0", "--setpoint", "6.283185307179586"]
        # this test publishes controller/command on the controller's endpoint
        [[processes]]
        name = "controller"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[2]}"
        [devices.mcu]
        kind = "mcu"
        port = "{port_path}"
        motors = ["crank"]
        watchdog_ms = 500
        [devices.other]
        kind = "mcu"
        port = "{port_path}.other"
        motors = ["other_crank"]
        """))
    return cfg


def start_encoder(cfg: Path, ports: list[int]) -> tuple[subprocess.Popen, Subscriber]:
    sub = Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["encoder/crank", "health/encoder"])
    args = load(cfg).process("encoder").args  # as the supervisor starts it
    proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "encoder", *args],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, sub


def stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"encoder did not stop on SIGTERM:\n{err}")
    assert proc.returncode == 0, err
    return err


class Recorder:
    """Every encoder frame and the latest health of the daemon, read from the bus."""

    def __init__(self, sub: Subscriber):
        self.sub = sub
        self.frames: list[Frame] = []
        self.health: dict = {}

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f = self.sub.recv(timeout_s=0.1)
            if f is None:
                continue
            if f.kind == "health":
                self.health = {**parse_health(f), "meta": f.meta, "t_pub": f.t_pub}
            else:
                self.frames.append(f)

    def until(self, pred, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.pump(0.2)
            if self.health and pred(self.health):
                return
        pytest.fail(f"condition not met within {timeout_s} s; last health: {self.health}")

    def mean_velocity(self, frames: int = 25, timeout_s: float = 60.0) -> float:
        """The mean velocity of the next `frames` encoder frames received (waited for: a loaded machine
        delivers them in bursts; 18 in a 1-s window once)."""
        since = time.monotonic_ns()
        end = time.monotonic() + timeout_s
        while len(rows := [f.data for f in self.frames if f.t_recv >= since]) < frames:
            if time.monotonic() > end:
                pytest.fail(f"{len(rows)} encoder frames within {timeout_s} s; last health: {self.health}")
            self.pump(0.1)
        return float(np.vstack(rows)[:, 1].mean())


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """One daemon run: default setpoint, a bus command, line noise, an unplug. Yields the record."""
    tmp = tmp_path_factory.mktemp("encoder")
    ports = free_tcp_ports(3)
    port = tmp / "mcu"  # appears once the MCU is up, like a USB device plugged in late
    cfg = write_lab(tmp, ports, port)
    proc, sub = start_encoder(cfg, ports)
    pub = Publisher(f"tcp://127.0.0.1:{ports[2]}")
    rec = Recorder(sub)
    mcu = VirtualMCU(1, motor=MotorParams(J_load=0.1), control_hz=500, stream_hz=500, seed=3)
    out: dict = {"mcu": mcu, "rec": rec}
    try:
        assert sub.wait_connected(15.0), "the encoder daemon did not come up"
        rec.until(lambda h: h.get("link/open_failures", {}).get("count", 0) >= 2, 10.0)
        out["waiting_state"] = rec.health["meta"]["state"]
        out["mcu_t0"] = time.monotonic_ns()  # the MCU's tick k comes no earlier than this + k periods
        mcu.start()
        os.symlink(mcu.port, port)
        rec.until(lambda h: h.get("link/sessions", {}).get("count", 0) >= 1, 15.0)
        rec.pump(2.0)
        out["default_speed"] = rec.mean_velocity()
        assert pub.wait_for_subscribers(1, 5.0), "the daemon never subscribed to controller/command"
        pub.publish("controller/command", np.array([[3 * np.pi]]), kind="command", rate_hz=0.0,
                    channels=["crank"], units=["rad/s"])
        rec.pump(2.0)
        out["mcu_setpoint"] = (int(mcu.mode[0]), float(mcu.setpoint[0]))
        out["commanded_speed"] = rec.mean_velocity()
        n_before_noise = len(rec.frames)
        mcu.set_faults(corrupt_rate=1e-3)  # per byte: ~2 % of the STATE frames
        rec.pump(3.0)
        mcu.set_faults(corrupt_rate=0.0)
        rec.pump(0.5)
        out["noise_frames"] = rec.frames[n_before_noise:]
        # a health frame published after the last of those frames counts every hole before it (the
        # daemon counts a hole when the STATE after it arrives, before publishing that block)
        last = rec.frames[-1].t_pub
        rec.until(lambda h: h["t_pub"] > last, 10.0)
        out["noise_health"] = rec.health
        mcu.unplug()
        time.sleep(0.5)
        assert mcu.wd_tripped, "the MCU watchdog should trip while its host is gone"
        mcu.replug()
        rec.until(lambda h: h["link/sessions"]["count"] >= 2 and h["meta"]["state"] == "running", 10.0)
        rec.pump(1.5)
        out["after_replug_speed"] = rec.mean_velocity()
        out["wd_after"] = mcu.wd_tripped
        out["stats"] = sub.stats()["encoder/crank"]
    finally:
        out["stderr"] = stop(proc)
        pub.close()
        sub.close()
        mcu.close()
    return out


def test_a_missing_port_is_waited_for(scenario):
    assert scenario["waiting_state"] == "connecting"


def test_default_setpoint_holds_the_commanded_speed(scenario):
    assert scenario["default_speed"] == pytest.approx(2 * np.pi, rel=0.03)


def test_a_bus_command_changes_the_setpoint(scenario):
    assert scenario["mcu_setpoint"] == (P.MODE_VELOCITY, pytest.approx(3 * np.pi, rel=1e-6))
    assert scenario["commanded_speed"] == pytest.approx(3 * np.pi, rel=0.03)


def test_frames_are_contiguous_on_the_bus_and_in_si(scenario):
    st = scenario["stats"]
    assert st.received > 100 and st.gaps == 0 and st.dropped == 0 and st.missed_at_join == 0
    f = scenario["rec"].frames[-1]
    assert f.channels == ("angle", "velocity", "current") and f.units == ("rad", "rad/s", "A")
    assert f.rate_hz == RATE and f.extra["flags"].shape == (f.samples,)
    assert np.all(f.extra["flags"] & P.FLAG_ENABLED)
    # lab time: the MCU clock mapped onto the host clock (the virtual MCU paces its ticks by the host's
    # monotonic clock, so the mapping has unit slope: over session 1 once its fit is a line, from
    # its third 1 s window on — before, the least delay seen so far is still being learned)
    first = [g for g in scenario["rec"].frames if g.meta["session"] == 1]
    a = next(g for g in first if g.t_device - first[0].t_device >= 2_000_000_000)
    b = first[-1]
    assert (b.t - a.t) / (b.t_device - a.t_device) == pytest.approx(1.0, abs=2e-3)
    session = [g for g in scenario["rec"].frames if g.meta["session"] == f.meta["session"]]
    # ... between two clocks this test trusts: the MCU's sample at device time t_device was made no
    # earlier than t0 + t_device (t0: this test's monotonic clock just before mcu.start(); its ticks
    # are paced by that clock and never early) and read by the daemon at t_host, so exactly
    # t0 + t_device <= t_host; the lab time t lies between, up to the residual of the clock fit
    # (ClockSync: a line through per-second minima of t_host - t_device).
    t0, fit_ns = scenario["mcu_t0"], 5_000_000
    settled = session[len(session) // 2:]
    assert all(g.t_host >= t0 + g.t_device for g in settled)
    assert all(t0 + g.t_device - fit_ns <= g.t <= g.t_host + fit_ns for g in settled)
    # ... and a mapping, not a copy of the arrival stamps: within one second of device time the fit
    # is fixed (ClockSync refits when a 1 s window closes), so there t = t_device + offset +
    # drift (t_device - t_ref) is affine in t_device to the rounding (1 ns), while t_host jitters by
    # the daemon's batching (ms). Frames grouped by the window of their last sample (the fit a frame
    # gets is the one of the windows closed before it); from the third window on (a line needs two).
    groups: dict[int, list] = {}
    for g in first:
        last = g.t_device + (g.samples - 1) * PERIOD_NS
        groups.setdefault((last - first[0].t_device) // 1_000_000_000, []).append(g)
    checked = 0
    for window, frames in groups.items():
        if window < 2 or len(frames) < 3:
            continue
        x = np.array([g.t_device for g in frames], dtype=float)
        y = np.array([g.t - g.t_device for g in frames], dtype=float)
        line = y[0] + (y[-1] - y[0]) * (x - x[0]) / (x[-1] - x[0])
        assert np.abs(y - line).max() <= 2.0, (window, y - line)
        checked += 1
    assert checked >= 3


@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """The daemon on an MCU whose crystal runs 500 ppm slow (ten times a real one's error, so the rate on
    the lab clock is told from the nominal one by far more than the clock fit's noise): its frames over
    8 s of a session."""
    tmp = tmp_path_factory.mktemp("drift")
    ports = free_tcp_ports(3)
    port = tmp / "mcu"
    cfg = write_lab(tmp, ports, port)
    proc, sub = start_encoder(cfg, ports)
    rec = Recorder(sub)
    mcu = VirtualMCU(1, motor=MotorParams(J_load=0.1), control_hz=500, stream_hz=500, seed=4, clock_ppm=-500.0)
    try:
        assert sub.wait_connected(15.0), "the encoder daemon did not come up"
        mcu.start()
        os.symlink(mcu.port, port)
        rec.until(lambda h: h.get("link/sessions", {}).get("count", 0) >= 1, 30.0)
        rec.pump(8.0)
    finally:
        stop(proc)
        sub.close()
        mcu.close()
    return {"rec": rec}


def test_sample_times_follow_the_mcu_clock_rate_on_the_lab_clock(drifting):
    """The MCU's crystal runs 500 ppm slow: 250 STATEs a second of its time are 249.875 a second of the
    host's. The daemon publishes that rate (meta rate_lab_hz, from its clock fit), and within one fit
    window a block's samples continue exactly into the next block's first (the nominal 250 Hz put
    the next block 10 µs early: 5 samples x 4 ms x 500e-6)."""
    session = [g for g in drifting["rec"].frames if g.meta["session"] == 1]
    settled = session[len(session) // 2:]
    rates = np.array([g.meta["rate_lab_hz"] for g in settled])
    # the fit's drift comes from per-second minima of the transport delay: over this short session,
    # at a loaded machine's jitter, it is within 20-300 ppm of the truth; its sign is sure
    assert np.median(rates) < RATE
    groups: dict[int, list] = {}
    for g in session:
        last = g.t_device + (g.samples - 1) * PERIOD_NS
        groups.setdefault((last - session[0].t_device) // 1_000_000_000, []).append(g)
    checked = 0
    for window, frames in groups.items():
        if window < 2:
            continue
        for a, b in zip(frames, frames[1:]):
            if b.t_device - a.t_device == a.samples * PERIOD_NS:  # contiguous on the MCU clock
                t = a.sample_times()
                assert abs(b.t - (t[-1] + (t[-1] - t[0]) / (a.samples - 1))) <= 2, (window, a.seq)
                checked += 1
    assert checked > 100


def test_line_noise_is_counted_and_no_received_sample_is_lost_silently(scenario):
    frames = [f for f in scenario["noise_frames"] if f.meta["session"] == 1]
    h = scenario["noise_health"]
    assert h["link/crc_failures"]["count"] + h["link/rejected"]["count"] > 0
    # device-time accounting: between the first and the last published sample every sample of the
    # MCU's clock was either published or counted lost (the daemon's counter is cumulative)
    published = sum(f.samples for f in frames)
    span = (frames[-1].t_device + (frames[-1].samples - 1) * PERIOD_NS - frames[0].t_device) // PERIOD_NS + 1
    holes = sum((b.t_device - a.t_device) // PERIOD_NS - a.samples for a, b in zip(frames, frames[1:]))
    assert holes > 0, "the injected noise should have cost some STATE frames"
    assert published + holes == span
    assert h["encoder/crank/samples_lost"]["count"] >= holes
    # within a block, sample counts define time: every block is contiguous on the device clock
    for f in frames:
        assert f.sample_times("t_device")[-1] - f.t_device == (f.samples - 1) * PERIOD_NS


def test_unplug_is_reported_and_the_session_restarts(scenario):
    h = scenario["rec"].health
    assert h["link/disconnects"]["count"] >= 1 and h["link/reconnects"]["count"] >= 1
    assert h["link/sessions"]["count"] == 2
    assert not scenario["wd_after"], "the new session must RESET the latched watchdog"
    assert scenario["after_replug_speed"] == pytest.approx(3 * np.pi, rel=0.03)  # the setpoint survives
    assert scenario["rec"].frames[-1].meta["session"] == 2


def one_error_line(cfg: Path, ports: list[int]) -> str:
    """Run the daemon of `cfg` until it exits: status 2 and exactly one ERROR line (returned)."""
    proc, sub = start_encoder(cfg, ports)
    sub.close()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the daemon kept running")
    assert proc.returncode == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1, err
    return errors[0]


def test_an_mcu_with_other_motors_is_a_one_line_error(tmp_path):
    ports = free_tcp_ports(3)
    with VirtualMCU(2, control_hz=500, stream_hz=500) as mcu:
        line = one_error_line(write_lab(tmp_path, ports, Path(mcu.port)), ports)
    assert "has 2 motor(s), devices.mcu.motors names 1 (crank)" in line


@pytest.mark.parametrize("devices, words", [
    ("[]", "expected exactly one device of kind 'mcu' in its devices (listed: none)"),
    ('["mcu", "other"]', "expected exactly one device of kind 'mcu' in its devices (listed: mcu (mcu), other (mcu))"),
], ids=["no-mcu", "two-mcus"])
def test_the_port_comes_from_exactly_one_mcu_device(tmp_path, devices, words):
    """The daemon serves the MCU listed in its `devices` (no --port argument): none or two is one line, exit 2."""
    ports = free_tcp_ports(3)
    assert words in one_error_line(write_lab(tmp_path, ports, tmp_path / "mcu", devices=devices), ports)
