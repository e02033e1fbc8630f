"""Host link <-> virtual MCU through a real pseudo-terminal (os.openpty + pyserial).

Counts, not timing: the MCU's tick clock (µs in every frame header) is the time base for the
watchdog, and lost frames are counted from sequence numbers and the MCU's own transmit record.
"""
from __future__ import annotations

import binascii
import os
import struct
import subprocess
import sys
import threading
import time
import tty

import numpy as np
import pytest
import serial

from firmware_bridge import cobs
from firmware_bridge import protocol as P
from firmware_bridge.link import Link, LinkError, LinkTimeout, NackError
from firmware_bridge.virtual import Faults, VirtualMCU

N = 8
PERIOD_US = 1000


def torque_cmd(tau: float) -> P.Command:
    return P.Command(tuple(P.MotorCommand(P.MODE_TORQUE, tau) for _ in range(N)))


def stream_commands(link: Link, seconds: float, cmd: P.Command, rate_hz: float = 1000.0) -> int:
    """Send `cmd` at rate_hz with absolute deadlines for `seconds`; returns the last seq."""
    t0 = time.monotonic()
    seq = -1
    for k in range(int(seconds * rate_hz)):
        seq = link.send(cmd)
        delay = t0 + (k + 1) / rate_hz - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return seq


def states(frames: list[P.Frame]) -> list[P.Frame]:
    return [f for f in frames if isinstance(f.msg, P.State)]


def covers(ack: int, seq: int) -> bool:
    """True if a header `ack` shows that frame `seq` was handled (ack at or after seq, mod 2**16)."""
    return (ack - seq) & 0xFFFF < 0x8000


def wait_for(pred, timeout_s: float = 5.0, step_s: float = 0.01) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step_s)
    return pred()


def collect_until(link: Link, frames: list[P.Frame], pred, timeout_s: float = 10.0) -> None:
    """Append received frames to `frames` until pred(frames) holds (the MCU may lag on a loaded machine)."""
    assert wait_for(lambda: frames.extend(link.drain()) or pred(frames), timeout_s), "expected frames never came"


REQ = {"timeout_s": 0.5, "retries": 6}  # generous: the MCU thread may be starved on a shared 2-core machine
HELLO = {"timeout_s": 1.0, "retries": 4}


def test_1khz_state_and_command_round_trips_8_motors_clean_line():
    # The MCU clock starts 0.1 s before the 2**32 µs wrap, so the stream crosses it.
    # A 5 s watchdog: a host stalled > 100 ms on a loaded machine must not end this streaming test
    # (the 100 ms watchdog has its own, lockstep test).
    with VirtualMCU(N, clock_start_us=2**32 - 100_000, watchdog_ms=5000) as mcu, \
            Link(mcu.port, heartbeat_hz=0) as link:
        caps = link.hello(**HELLO)
        assert caps.n_motors == N and caps.cpr == (4096,) * N and 1000 in caps.rates_hz
        last = stream_commands(link, 2.0, torque_cmd(0.05))
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: any(covers(f.ack, last) for f in states(fr)) and len(states(fr)) >= 1000)
        ls, ms = link.stats, mcu.stats
    st = states(frames)
    assert ls.lost_frames == 0 and ls.rejected == {} and ls.out_of_order == 0 and ls.late_heartbeats == 0
    # every HELLO and COMMAND arrived; a write pyserial reported timed out (tx_failed: an MCU starved
    # while its pty was full, ~1.4 s seen) may have gone out whole all the same (LinkStats docstring)
    assert ms.rx_errors == {} and ms.rx_lost == 0 and ls.tx_frames <= ms.rx_frames <= ls.tx_frames + ls.tx_failed
    assert ms.tx_overflow == 0
    # Contiguous seq over every received frame; STATE every MCU tick, 1000 µs apart across the wrap.
    seqs = [f.seq for f in frames]
    assert all(P.seq_gap(a, b) == 0 for a, b in zip(seqs, seqs[1:]))
    t = [st[0].t_us]
    for f in st[1:]:
        t.append(P.unwrap(t[-1], f.t_us, 32))
    assert all(b - a == PERIOD_US for a, b in zip(t, t[1:]))
    assert t[0] < 2**32 < t[-1]
    # The header ack is the COMMAND round trip: non-decreasing, ends at the last command.
    acks = [f.ack for f in st]
    assert all(P.seq_gap(a, b) < 0x8000 or a == b for a, b in zip(acks, acks[1:]))
    # Torque mode, 0.05 N·m at the output: i = tau / (Kt N) = 83 mA; motors enabled, accelerating.
    on = [f for f in st if covers(f.ack, last)][0].msg.motors
    assert all(m.flags & P.FLAG_ENABLED and m.mode == P.MODE_TORQUE for m in on)
    assert all(abs(m.current_ma - 83) <= 3 for m in on) and all(m.vel > 0 for m in on)
    # 1 Mbaud 8N1 budget: 10 bits per byte over the MCU's elapsed time.
    assert ms.tx_bytes * 10 <= 1_000_000 * ms.ticks * PERIOD_US * 1e-6


def test_one_percent_byte_corruption_every_bad_frame_rejected_stream_continues():
    """1 % of the MCU's bytes corrupted (delimiters included) for 1.5 s of MCU time. Truth from the
    bytes the MCU actually handed to the pty: split on 0x00, every non-empty chunk that is not an
    intact frame must be rejected and counted exactly once, every intact one received."""
    with VirtualMCU(N, record=True, faults=Faults(seed=3)) as mcu, Link(mcu.port, heartbeat_hz=0) as link:
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: len(fr) >= 10)  # the link is synchronised on a clean line
        with mcu._lock:  # switch the fault on between two ticks and note the next seq
            corrupt_from = mcu._tx_seq
            mcu.set_faults(corrupt_rate=0.01)
        ticks0 = mcu.stats.ticks
        assert wait_for(lambda: mcu.stats.ticks >= ticks0 + 1500, 30.0)  # however loaded the host
        with mcu._lock:
            mcu.set_faults(corrupt_rate=0.0)
            clean_from = mcu._tx_seq
        collect_until(link, frames, lambda fr: fr[-1].seq >= clean_from + 100)
        ls = link.stats
    sent, transmitted, affected = dict(mcu.sent), dict(mcu.transmitted), set(mcu.affected)
    ms = mcu.stats
    assert ms.corrupted_frames > 300  # ~58 % of 89-byte frames at 1 % per byte
    # Every accepted frame is bit-identical to what the MCU sent under that seq.
    for f in frames:
        assert P.encode_frame(f.msg, f.seq, f.ack, f.t_us) == sent[f.seq]
    # The oracle: the transmitted bytes from the first corrupted frame on (the frame before it ended
    # with an intact delimiter), split on 0x00 (a corrupted byte may become a 0x00, a hit delimiter
    # merges two frames).
    seqs = range(corrupt_from, frames[-1].seq + 1)
    stream = b"".join(transmitted[q] for q in seqs)
    intact = {sent[q][:-1] for q in seqs}
    chunks = [c for c in stream.split(b"\x00") if c]
    bad_chunks = [c for c in chunks if c not in intact]
    assert len(bad_chunks) >= 0.9 * ms.corrupted_frames  # roughly one bad chunk per corrupted frame
    assert sum(ls.rejected.values()) == len(bad_chunks)  # each rejected and counted, once
    received = {f.seq for f in frames}
    assert {f.seq for f in frames if f.seq >= corrupt_from} == {q for q in seqs if sent[q][:-1] in chunks}
    window = set(range(frames[0].seq, frames[-1].seq + 1))
    assert window - received == affected & window  # lost exactly the corrupted (or merged) frames
    assert ls.lost_frames == len(window - received)
    assert ls.crc_failures.get("STATE", 0) > 0  # counted per (claimed) message type
    lost_hb = [q for q in affected & window if isinstance(P.decode_frame(sent[q]).msg, P.Heartbeat)]
    assert lost_hb and ls.late_heartbeats >= 1  # a lost MCU heartbeat shows as a late one
    # After the fault is switched off the stream is whole again.
    # (clean_from itself may be lost: glued to its predecessor if that one's delimiter was hit)
    assert set(range(clean_from + 1, frames[-1].seq + 1)) <= received


def test_watchdog_cuts_torque_and_config_does_not_feed_it():
    """Lockstep (the MCU ticks only when the test steps it), so a host stalled by the scheduler
    cannot feed or starve the watchdog: 300 ticks of COMMANDs at 1 kHz, then only CONFIG requests
    every 20 ticks. The cut must come timeout +- one period after the tick that handled the last
    COMMAND, on the MCU clock in the STATE headers, and stay latched."""
    timeout_ms = 100
    mcu = VirtualMCU(N, watchdog_ms=timeout_ms)
    frames: list[P.Frame] = []
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            for _ in range(300):
                last_cmd = link.send(torque_cmd(0.05))
                assert mcu.wait_rx()
                mcu.step()
            # Tick until a STATE shows the last COMMAND handled (the pty may hold it for a tick),
            # reading each tick's STATE before the next tick: a host starved by the scheduler must
            # not let the MCU run on towards the watchdog before the CONFIGs are sent.
            for _ in range(100):
                n_states = len(states(frames))
                mcu.step()
                collect_until(link, frames, lambda fr: len(states(fr)) > n_states)
                if any(covers(f.ack, last_cmd) for f in states(frames)):
                    break
            configs = []
            for k in range(20):  # 400 ticks of CONFIG only
                configs.append(link.send(P.Config(watchdog_ms=timeout_ms)))
                assert mcu.wait_rx()
                mcu.step(20)
            collect_until(link, frames, lambda fr: sum(isinstance(f.msg, P.Ack) for f in fr) == len(configs))
    finally:
        mcu.close()
    st = states(frames)
    t, prev = [], None
    for f in st:
        prev = f.t_us if prev is None else P.unwrap(prev, f.t_us, 32)
        t.append(prev)
    k_feed = next(i for i, f in enumerate(st) if covers(f.ack, last_cmd))  # tick that handled the last COMMAND
    k_cut = next(i for i, f in enumerate(st) if i > k_feed and not f.msg.motors[0].flags & P.FLAG_ENABLED)
    cut = st[k_cut].msg.motors
    assert all(m.flags & P.FLAG_WATCHDOG and not m.flags & P.FLAG_ENABLED and m.current_ma == 0 for m in cut)
    assert all(m.flags & P.FLAG_ENABLED and m.current_ma > 0 for f in st[k_feed:k_cut] for m in f.msg.motors)
    dt = t[k_cut] - t[k_feed]
    assert timeout_ms * 1000 - PERIOD_US <= dt <= timeout_ms * 1000 + PERIOD_US
    # CONFIGs were handled between the last COMMAND and the cut (so they did not feed it) and after.
    acked = [f for f in frames if isinstance(f.msg, P.Ack)]
    assert [a.msg.seq for a in acked] == configs
    assert sum(t[k_feed] < P.unwrap(t[k_feed], a.t_us, 32) < t[k_cut] for a in acked) >= 4
    # Latched: every later STATE (CONFIGs kept arriving) still has torque off.
    assert all(not m.flags & P.FLAG_ENABLED and m.current_ma == 0 for f in st[k_cut:] for m in f.msg.motors)
    assert mcu.stats.watchdog_trips == 1


def test_estop_latches_until_reset_and_nack_names_the_error():
    # A 5 s watchdog, so only the e-stop can latch here, however the host is scheduled.
    with VirtualMCU(N, watchdog_ms=5000) as mcu, Link(mcu.port, heartbeat_hz=50, liveness_s=1.0) as link:
        stream_commands(link, 0.1, torque_cmd(0.05))
        link.request(P.Estop(reason=2), **REQ)
        ticks0 = mcu.stats.ticks
        while mcu.stats.ticks < ticks0 + 200:  # 200 ms of MCU time of commands and heartbeats: no effect
            stream_commands(link, 0.02, torque_cmd(0.05))
        link.request(P.Config(), **REQ)  # nor does configuration
        with pytest.raises(NackError, match="bad_motor"):
            link.request(P.Config(motor=N + 3), **REQ)
        stream_commands(link, 0.05, torque_cmd(0.05))
        link.request(P.Reset(), **REQ)
        last = stream_commands(link, 0.1, torque_cmd(0.05))
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: any(covers(f.ack, last) for f in states(fr)))
    # Each ESTOP the MCU handled is acknowledged (a late ACK on a loaded machine makes the link
    # retry, and a repeated ESTOP is legal: requests are idempotent).
    assert mcu.stats.estops == sum(isinstance(f.msg, P.Ack) and f.msg.type == P.Estop.TYPE for f in frames) >= 1
    k_estop = next(i for i, f in enumerate(frames) if isinstance(f.msg, P.Ack) and f.msg.type == P.Estop.TYPE)
    k_reset = next(i for i, f in enumerate(frames) if isinstance(f.msg, P.Ack) and f.msg.type == P.Reset.TYPE)
    before = states(frames[:k_estop])
    latched = states(frames[k_estop:k_reset])
    after = states(frames[k_reset:])
    assert before[-1].msg.motors[0].flags & P.FLAG_ENABLED
    assert len(latched) >= 200
    assert all(m.flags & P.FLAG_ESTOP and not m.flags & P.FLAG_ENABLED and m.current_ma == 0
               for f in latched for m in f.msg.motors)
    hb = [f.msg.status for f in frames[k_estop:k_reset] if isinstance(f.msg, P.Heartbeat)]
    assert hb and all(s & P.STATUS_ESTOP for s in hb)
    assert not after[0].msg.motors[0].flags & (P.FLAG_ESTOP | P.FLAG_ENABLED)  # reset leaves motors idle
    assert all(m.flags & P.FLAG_ENABLED and m.current_ma > 0 for m in after[-1].msg.motors)


def test_reconnect_after_unplug_within_one_second():
    """Within 1 s, by counts rather than a clock: the link retries every backoff period, capped at
    0.2 s, so if at most one attempt fails after the device is back (the one that may have been in
    flight while it came back), the reconnect came within 2 x 0.2 s + one open."""
    cap_s = 0.2
    with VirtualMCU(N) as mcu, Link(mcu.port, heartbeat_hz=20, backoff_s=(0.02, cap_s)) as link:
        assert link.hello(**HELLO).n_motors == N
        mcu.unplug()
        assert not os.path.exists(mcu.port)  # the device path disappears, as for a pulled USB cable
        assert wait_for(lambda: link.stats.disconnects == 1, 3.0)
        # Unplugged for a while: attempts fail, the backoff grows to its cap (0.02 ... 0.16, 0.2).
        assert wait_for(lambda: link.stats.open_failures >= 5, 5.0)
        assert link.stats.reconnect_backoff_s == cap_s
        link.drain()
        failed = link.stats.open_failures
        mcu.replug()
        assert wait_for(lambda: link.stats.reconnects == 1 and link.recv(0.001) is not None, 5.0, 0.001)
        assert link.stats.open_failures - failed <= 1  # so: reconnected within 2 x 0.2 s + one open
        assert link.hello(**HELLO).n_motors == N  # the link works end to end again
        # A scheduled unplug from the fault injector is survived the same way.
        mcu.set_faults(unplug_at_s=mcu.stats.t_us * 1e-6 + 0.05, unplug_for_s=0.2)
        assert wait_for(lambda: link.stats.reconnects == 2, 3.0)
        assert link.hello(**HELLO).n_motors == N
        assert mcu.stats.unplugs == 2


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # the heartbeat thread's too
def test_frames_sent_while_the_port_goes_away_are_counted_failed_never_raised():
    """An unplug in the middle of writes: the reader thread closes the port while the heartbeat thread
    and two application threads write. `send` never raises (its contract: a frame that cannot be
    written is counted in tx_failed) — before the close took the write lock, pyserial's write met a
    closed descriptor and a TypeError escaped in about 1 % of such unplugs. 400 unplugs; a raw pty,
    unplugged by closing both ends and removing the path, as a pulled USB cable does."""
    escaped: list[str] = []
    for trial in range(400):
        master, slave = os.openpty()
        tty.setraw(master)
        tty.setraw(slave)
        path = f"/tmp/walklab-unplug-{os.getpid()}"
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(f"/proc/{os.getpid()}/fd/{slave}", path)
        stop = threading.Event()

        def application(link: Link) -> None:
            try:
                while not stop.is_set():
                    link.send(P.Heartbeat(0))
            except Exception as exc:  # noqa: BLE001 — the contract under test: nothing escapes
                escaped.append(f"trial {trial}: {exc!r}")

        with Link(path, heartbeat_hz=1000, liveness_s=10.0, backoff_s=(0.5, 0.5)) as link:
            senders = [threading.Thread(target=application, args=(link,)) for _ in range(2)]
            for t in senders:
                t.start()
            assert wait_for(lambda: link.stats.tx_frames > 20, 5.0, 0.001)
            os.unlink(path)
            os.close(master)
            os.close(slave)
            assert wait_for(lambda: link.stats.disconnects == 1, 5.0, 0.001)
            failed = link.stats.tx_failed
            assert wait_for(lambda: link.stats.tx_failed > failed, 5.0, 0.001)  # sends go on, counted failed
            stop.set()
            for t in senders:
                t.join(5.0)
    assert not escaped, escaped[:3]


def test_walklab_devices_probes_a_virtual_mcu_port():
    with VirtualMCU(6, cpr=2048, name="bench-rig") as mcu:
        r = subprocess.run([sys.executable, "-m", "controller.cli", "devices", "--port", mcu.port, "--timeout", "1.0"],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"{mcu.port}: bench-rig  firmware 1.0.0  protocol v1" in r.stdout
    assert "motors: 6  encoder counts/rev: 2048" in r.stdout
    assert "stream rates (Hz): 100, 200, 250, 500, 1000" in r.stdout
    r = subprocess.run([sys.executable, "-m", "controller.cli", "devices", "--port", "/nonexistent/ttyX"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("walklab devices: error: cannot open serial port")
    m, s = os.openpty()  # a port that opens but where nothing answers
    try:
        r = subprocess.run([sys.executable, "-m", "controller.cli", "devices", "--port", os.ttyname(s),
                            "--timeout", "0.1"], capture_output=True, text=True, timeout=60)
    finally:
        os.close(m)
        os.close(s)
    assert r.returncode == 2 and "no CAPS from" in r.stderr and r.stderr.count("\n") == 1


def test_drop_and_delay_faults_at_run_time():
    with VirtualMCU(N, record=True, faults=Faults(drop_rate=0.02, seed=5)) as mcu, Link(mcu.port, heartbeat_hz=0) as link:
        assert wait_for(lambda: mcu.stats.ticks >= 500, 30.0)
        with mcu._lock:
            mcu.set_faults(drop_rate=0.0, delay_s=0.3)
            clean_from = mcu._tx_seq
        # Every frame now leaves the MCU 300 ms late: a 50 ms request cannot be answered in time.
        with pytest.raises(LinkTimeout):
            link.request(P.Config(), timeout_s=0.05, retries=0)
        # With retries, the (300 ms late) ACK of an earlier try completes the request: >= 2 retries first.
        r0 = link.stats.retries
        link.request(P.Config(), timeout_s=0.1, retries=100)
        assert link.stats.retries - r0 >= 2 and link.stats.timeouts == 1
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: fr and fr[-1].seq >= clean_from + 50)
        ls = link.stats
    window = set(range(frames[0].seq, frames[-1].seq + 1))
    received = {f.seq for f in frames}
    assert mcu.stats.dropped_frames > 0
    assert window - received == mcu.affected & window and ls.lost_frames == len(window - received)
    assert set(range(clean_from, frames[-1].seq + 1)) <= received


def test_lockstep_position_and_velocity_control_with_a_load_callback():
    """Manual ticks (no real-time thread): motor 0 holds 1 rad against a pendulum load
    tau = m g r sin(theta); motor 1 runs at 5 rad/s unloaded. Statics and kinematics are the truth."""
    mgr = 0.5  # N·m
    seen = []

    def load(t, theta, omega):
        seen.append(t)
        return np.full_like(theta, 2e-3), np.array([mgr * np.sin(theta[0]), 0.0])

    mcu = VirtualMCU(2, load=load, cpr=4096)
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            link.send(P.Config(0, kp=5.0, ki=10.0, kd=0.2))
            link.send(P.Config(1, kp=0.05, ki=0.5, kd=0.0))
            cmd = P.Command((P.MotorCommand(P.MODE_POSITION, 1.0), P.MotorCommand(P.MODE_VELOCITY, 5.0)))
            for k in range(3000):
                if k % 10 == 0:
                    link.send(cmd)  # 100 Hz: feeds the 100 ms watchdog
                    assert mcu.wait_rx()  # handled at this tick, however late the pty delivers it
                mcu.step()
            frames: list[P.Frame] = []
            collect_until(link, frames, lambda fr: len(states(fr)) >= 3000)
    finally:
        mcu.close()
    assert sum(isinstance(f.msg, P.Ack) and f.msg.type == P.Config.TYPE for f in frames) == 2
    st = states(frames)[-1000:]  # the last second, settled
    m0 = [f.msg.motors[0] for f in st]
    m1 = [f.msg.motors[1] for f in st]
    bank = mcu.bank
    # Motor 0: encoder at 1 rad (4096/2π counts/rad, ±2 counts), current = m g r sin(1) / (Kt N).
    assert all(abs(m.count - 4096 / (2 * np.pi)) <= 2 for m in m0)
    i_static = mgr * np.sin(1.0) / (bank.Kt[0] * bank.gear[0])
    assert np.mean([m.current_ma for m in m0]) == pytest.approx(i_static * 1e3, rel=0.02)
    # Motor 1: counts advance at 5 rad/s over 999 ticks (±2 counts of quantisation and limit cycle).
    dcount = P.unwrap(m1[0].count, m1[-1].count, 32) - m1[0].count
    assert dcount == pytest.approx(5.0 * 0.999 * 4096 / (2 * np.pi), abs=3)
    assert np.mean([m.vel for m in m1]) * P.VEL_LSB_CPS == pytest.approx(5.0 * 4096 / (2 * np.pi), rel=0.01)
    assert all(m.flags & P.FLAG_ENABLED and m.mode == P.MODE_VELOCITY for m in m1)
    assert seen and seen[-1] > 2.9  # the load saw the MCU clock (s)


def test_a_motor_that_starts_away_from_zero_reports_no_velocity_spike():
    """A motor at rest at 1.5 rad when the MCU starts (the exoskeleton world straps its motors where the
    wearer's joints are) reports zero velocity from its first STATE: the velocity window starts at the
    first reading. Before, the window held zero counts, so the first STATEs reported 1.5 rad over the
    window (tens of rad/s), and the control loop latched a velocity-limit fault at its first cycle."""
    mcu = VirtualMCU(2, cpr=4096, load=lambda t, th, om: (np.full_like(th, 1.0), np.zeros_like(th)))
    mcu.bank.theta[:] = [1.5, -0.7]
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            for _ in range(20):
                mcu.step()
            frames: list[P.Frame] = []
            collect_until(link, frames, lambda fr: len(states(fr)) >= 20)
    finally:
        mcu.close()
    st = states(frames)[:20]
    assert [m.count for m in st[0].msg.motors] == [int(np.floor(x * 4096 / (2 * np.pi))) for x in (1.5, -0.7)]
    assert all(m.vel == 0 for f in st for m in f.msg.motors)


def test_host_heartbeats_feed_the_watchdog_only_while_the_application_is_alive():
    with VirtualMCU(N, watchdog_ms=1000) as mcu, Link(mcu.port, heartbeat_hz=50, liveness_s=0.1) as link:
        link.send(torque_cmd(0.05))  # arms the watchdog
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:  # alive, but no commands: heartbeats keep the MCU fed
            link.alive()
            time.sleep(0.02)
        link.request(P.Config(watchdog_ms=1000), **REQ)  # answered only after everything sent before it
        assert mcu.stats.watchdog_trips == 0
        # The application stops checking in: heartbeats stop after liveness_s, the watchdog trips.
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: any(f.msg.motors[0].flags & P.FLAG_WATCHDOG for f in states(fr)))
        assert mcu.stats.watchdog_trips == 1


def test_current_noise_statistics():
    mcu = VirtualMCU(1, current_noise_a=0.01, seed=11)  # idle: true current 0, sigma 10 mA
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            mcu.step(3000)
            frames: list[P.Frame] = []
            collect_until(link, frames, lambda fr: len(states(fr)) >= 3000)
    finally:
        mcu.close()
    cur = np.array([f.msg.motors[0].current_ma for f in states(frames)], dtype=float)
    assert abs(cur.mean()) < 1.0  # 5.5 standard errors
    assert 9.0 < cur.std() < 11.0  # sqrt(10² + 1/12) mA after 1 mA rounding


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="corrupt_rate"):
        Faults(corrupt_rate=2.0)
    with pytest.raises(ValueError, match="stream_hz = 300"):
        VirtualMCU(2, stream_hz=300)
    with pytest.raises(P.ProtocolError, match="STATE: field out of range"):
        P.encode_frame(P.State((P.MotorState(0, 40000, 0, 0),)))
    with pytest.raises(ValueError, match="not acknowledged"):
        Link("loop://").request(P.Command(()))


def test_force_board_streams_6_or_8_channels():
    """A force-only board (no motors) streaming 8 Kistler channels: f(t) known, so each FORCE frame's
    values must equal f at the frame's own MCU timestamp (to float32)."""
    def f(t):
        return [100.0 * np.sin(2 * np.pi * t) + k for k in range(8)]

    mcu = VirtualMCU(0, n_force=8, force=f, stream_hz=500)
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            link.send(P.Hello())
            assert mcu.wait_rx()  # the HELLO is handled at the first tick, not whenever the pty delivers it
            mcu.step(1000)
            frames: list[P.Frame] = []
            collect_until(link, frames, lambda fr: sum(isinstance(x.msg, P.Force) for x in fr) >= 500)
    finally:
        mcu.close()
    caps = [x.msg for x in frames if isinstance(x.msg, P.Caps)]
    assert caps and caps[0].n_force == 8 and caps[0].n_motors == 0
    forces = [x for x in frames if isinstance(x.msg, P.Force)]
    assert not any(isinstance(x.msg, P.State) for x in frames) and len(forces) == 500
    for x in forces:
        np.testing.assert_allclose(x.msg.channels, np.float32(f(x.t_us * 1e-6)), rtol=1e-6, atol=1e-4)
    with pytest.raises(ValueError, match="n_force = 7"):
        VirtualMCU(0, n_force=7, force=f)


def test_lockstep_burst_reaches_a_reader_that_starts_late():
    """A lockstep burst larger than the pty buffer, with nobody reading during the burst: every frame
    still arrives once the host reads, with no further tick (a real UART drains its buffer while the
    firmware loop waits). The cause of the old flaky force-board test: the bytes the pty could not take
    at the last tick stayed in the MCU's buffer until a next tick that never came."""
    mcu = VirtualMCU(0, n_force=8, force=lambda t: [float(k) for k in range(8)], stream_hz=1000, record=True)
    try:
        mcu.step(1000)  # about 50 kB of FORCE frames: far more than a pty holds
        fd = os.open(mcu.port, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            decoder = P.StreamDecoder()
            frames: list[P.Frame] = []

            def read_some() -> bool:
                try:
                    frames.extend(decoder.feed(os.read(fd, 65536)))
                except BlockingIOError:
                    pass
                return sum(isinstance(x.msg, P.Force) for x in frames) >= 1000

            assert wait_for(read_some, timeout_s=20.0, step_s=0.001), \
                f"{sum(isinstance(x.msg, P.Force) for x in frames)} of 1000 FORCE frames arrived"
        finally:
            os.close(fd)
    finally:
        mcu.close()
    assert [x.seq for x in frames] == sorted(mcu.sent)  # every frame the MCU sent, in order, none lost
    assert mcu.stats.tx_overflow == 0 and decoder.errors == {}


def test_virtual_mcu_as_a_process_answers_link_and_devices():
    proc = subprocess.Popen([sys.executable, "-m", "firmware_bridge.virtual", "--motors", "3", "--name", "proc-mcu"],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = proc.stdout.readline().strip()
        with Link(port, heartbeat_hz=0) as link:
            caps = link.hello(timeout_s=2.0)
        assert caps.name == "proc-mcu" and caps.n_motors == 3
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert not os.path.exists(port)  # the process removed its device path on SIGTERM


def test_link_accepts_pyserial_urls(tmp_path):
    # loop:// echoes every byte: the link receives its own frames, decoded and counted.
    with Link("loop://", heartbeat_hz=0) as link:
        seqs = [link.send(torque_cmd(0.1 * k)) for k in range(5)]
        frames: list[P.Frame] = []
        collect_until(link, frames, lambda fr: len(fr) >= 5)
        assert [f.seq for f in frames] == seqs and frames[3].msg == torque_cmd(np.float32(0.3).item())
        assert link.stats.frames == {"COMMAND": 5} and link.stats.lost_frames == 0
    # spy:// wraps the virtual MCU's pty and hexdumps the traffic to a file.
    log = tmp_path / "spy.txt"
    with VirtualMCU(2, name="spied") as mcu, Link(f"spy://{mcu.port}?file={log}", heartbeat_hz=0) as link:
        assert link.hello(**HELLO).name == "spied"
    assert "TX" in log.read_text() and "RX" in log.read_text()


def _host_frame(typ: int, payload: bytes, seq: int, ver: int = 1) -> bytes:
    """A host frame built by hand from the layout in docs/protocol.md (not by protocol.py)."""
    body = struct.pack("<BBHHIH", ver, typ, seq, 0, 0, len(payload)) + payload
    return cobs.encode(body + binascii.crc_hqx(body, 0xFFFF).to_bytes(2, "big")) + b"\x00"


def test_device_nacks_what_it_cannot_use_and_drops_other_versions():
    """Every NACK code the v1 firmware sends, each for the documented cause, with the request's seq
    and type; a frame of another protocol version is dropped unanswered (and counted)."""
    mcu = VirtualMCU(2)
    try:
        with serial.Serial(mcu.port, timeout=0.05) as port:
            cfg = struct.pack("<B5fHH", 0xFF, 1.0, 0.0, 0.0, 2.0, 10.0, 0, 0)
            port.write(_host_frame(0x12, cfg[:-1], 10)  # CONFIG of 24 bytes
                       + _host_frame(0x55, b"", 11)  # unknown type
                       + _host_frame(0x11, struct.pack("<BfBfBf", 1, 0.0, 1, 0.0, 1, 0.0), 12)  # 3 motors, CAPS says 2
                       + _host_frame(0x11, struct.pack("<BfBf", 9, 0.0, 1, 0.0), 13)  # mode 9
                       + _host_frame(0x11, struct.pack("<BfBf", 1, float("nan"), 1, 0.0), 14)  # NaN setpoint
                       + _host_frame(0x12, b"\x05" + cfg[1:], 15)  # motor 5 of 2
                       + _host_frame(0x12, struct.pack("<B5fHH", 0, -1.0, 0, 0, 2, 10, 0, 0), 16)  # kp < 0
                       + _host_frame(0x12, struct.pack("<B5fHH", 0, 1.0, 0, 0, 2, 10, 0, 300), 17)  # 300 Hz
                       + _host_frame(0x10, bytes(9), 18)  # a device message sent to the device
                       + _host_frame(0x01, b"", 19, ver=2)  # HELLO of protocol 2
                       + _host_frame(0x12, cfg, 20))  # a good CONFIG
            port.flush()
            dec = P.StreamDecoder()
            replies: list[P.Frame] = []
            for _ in range(200):  # lockstep: each tick handles whatever has arrived
                mcu.step()
                replies += [f for f in dec.feed(port.read(4096)) if isinstance(f.msg, (P.Ack, P.Nack))]
                if any(isinstance(f.msg, P.Ack) for f in replies):
                    break
    finally:
        mcu.close()
    got = [(f.msg.seq, f.msg.type, getattr(f.msg, "error", 0)) for f in replies]
    assert got == [(10, 0x12, P.ERR_BAD_LENGTH), (11, 0x55, P.ERR_UNKNOWN_TYPE), (12, 0x11, P.ERR_BAD_LENGTH),
                   (13, 0x11, P.ERR_BAD_VALUE), (14, 0x11, P.ERR_BAD_VALUE), (15, 0x12, P.ERR_BAD_MOTOR),
                   (16, 0x12, P.ERR_BAD_VALUE), (17, 0x12, P.ERR_BAD_VALUE), (18, 0x10, P.ERR_UNKNOWN_TYPE),
                   (20, 0x12, 0)]
    assert mcu.stats.rx_errors == {"payload": 1, "type": 1, "version": 1}
    assert not mcu.wd_armed  # refused COMMANDs neither arm nor feed the watchdog


def test_hello_names_a_protocol_version_mismatch():
    m, s = os.openpty()
    tty.setraw(s)
    try:
        with Link(os.ttyname(s), heartbeat_hz=0, reconnect=False) as link:
            # A device answering in protocol 2 (the leading 0x00 ends whatever the link skips on open).
            os.write(m, b"\x00" + _host_frame(0x02, b"", 0, ver=2))
            assert wait_for(lambda: link.stats.rejected.get("version") == 1)
            with pytest.raises(LinkTimeout, match="1 frames of another protocol version than 1"):
                link.hello(timeout_s=0.05, retries=0)
    finally:
        os.close(m)
        os.close(s)


def test_close_is_clean_and_ends_a_pending_request():
    """close() from another thread: the waiting request ends with a LinkError saying so (not a
    timeout after all its retries), the link's threads are gone, the port is closed, later sends
    are counted as failed, and a second close() is harmless."""
    import threading

    mcu = VirtualMCU(2)  # never stepped: nothing answers
    try:
        before = set(threading.enumerate())
        link = Link(mcu.port, heartbeat_hz=20).open()
        ours = [t for t in threading.enumerate() if t not in before]
        assert {t.name for t in ours} == {"link-reader", "link-heartbeat"}
        errors: list[BaseException] = []

        def pending() -> None:
            try:
                link.request(P.Config(), timeout_s=30.0, retries=0)
            except BaseException as exc:  # noqa: BLE001 - the test inspects what was raised
                errors.append(exc)

        th = threading.Thread(target=pending)
        th.start()
        assert wait_for(lambda: link.stats.tx_frames >= 1)
        link.close()
        th.join(10)
        assert not th.is_alive() and not any(t.is_alive() for t in ours)
        assert len(errors) == 1 and type(errors[0]) is LinkError and "link was closed" in str(errors[0])
        assert not link.connected.is_set()
        failed = link.stats.tx_failed
        link.send(P.Heartbeat())
        assert link.stats.tx_failed == failed + 1
        link.close()
    finally:
        mcu.close()


def test_caps_announces_only_rates_the_control_loop_can_make_and_config_applies_them():
    """A 500 Hz control loop can stream at 100, 250, 500 Hz (its divisors among the firmware's
    rates), not 200 or 1000: CAPS says so, CONFIG refuses 1000 and applies 250 (STATE 4 ms apart
    on the MCU clock)."""
    mcu = VirtualMCU(1, control_hz=500, stream_hz=500)
    replies: list[P.Frame] = []
    try:
        with serial.Serial(mcu.port, timeout=0.05) as port:
            cfg = struct.pack("<B5fHH", 0xFF, 0.5, 0.0, 0.03125, 5.0, 50.0, 0, 1000)
            port.write(_host_frame(0x01, b"", 1) + _host_frame(0x12, cfg, 2)
                       + _host_frame(0x12, cfg[:-2] + struct.pack("<H", 250), 3))
            port.flush()
            dec = P.StreamDecoder()
            assert mcu.wait_rx()
            mcu.step(100)  # 2 + 49 STATEs
            assert wait_for(lambda: replies.extend(dec.feed(port.read(4096)))
                            or sum(isinstance(f.msg, P.State) for f in replies) >= 50)
    finally:
        mcu.close()
    caps = next(f.msg for f in replies if isinstance(f.msg, P.Caps))
    assert caps.rates_hz == (100, 250, 500)
    answers = [(f.msg.seq, getattr(f.msg, "error", 0)) for f in replies if isinstance(f.msg, (P.Ack, P.Nack))]
    assert answers == [(2, P.ERR_BAD_VALUE), (3, 0)]
    k_ack = next(i for i, f in enumerate(replies) if isinstance(f.msg, P.Ack))
    t = [f.t_us for f in replies[k_ack:] if isinstance(f.msg, P.State)]
    assert len(t) >= 5 and all(b - a == 4000 for a, b in zip(t, t[1:]))


def test_host_to_mcu_corruption_never_applies_a_bad_command():
    """1 % of the bytes the MCU receives corrupted (lockstep, 1000 COMMANDs between clean ones,
    distinct torque setpoints): every setpoint the MCU ever holds is one the host sent, every
    COMMAND is either applied or shows as a sequence gap, and each corrupted byte costs at most two
    frames (its own, and the next one if it hit a delimiter)."""
    setpoints = [(k + 1) * 2.0**-12 for k in range(1010)]  # float32-exact, none 0
    mcu = VirtualMCU(N, faults=Faults(seed=9))
    held = []
    try:
        with Link(mcu.port, heartbeat_hz=0) as link:
            for k, sp in enumerate(setpoints):
                if k in (5, 1005):  # clean head and tail, so the gap count covers every COMMAND
                    mcu.set_faults(rx_corrupt_rate=0.01 if k == 5 else 0.0)
                link.send(torque_cmd(sp))
                assert mcu.wait_rx()
                mcu.step()
                held.append(float(mcu.setpoint[0]))
    finally:
        mcu.close()
    ms = mcu.stats
    assert set(held) <= set(setpoints)
    assert len(set(held)) == ms.rx_frames  # each applied COMMAND set its own setpoint
    assert ms.rx_frames + ms.rx_lost == len(setpoints) and ms.rx_lost > 50
    assert sum(ms.rx_errors.values()) > 50 and ms.rx_lost <= 2 * ms.rx_corrupted_bytes
    assert ms.watchdog_trips == 0


def test_a_killed_mcu_process_leaves_no_path_into_another_pty():
    """SIGKILL leaves the port symlink behind; it must dangle, not lead a reconnecting host into the
    next program that gets the same pty number (pty numbers are reused at once)."""
    proc = subprocess.Popen([sys.executable, "-m", "firmware_bridge.virtual", "--motors", "1"],
                            stdout=subprocess.PIPE, text=True)
    port = proc.stdout.readline().strip()
    proc.kill()
    proc.wait(timeout=10)
    try:
        assert os.path.islink(port) and not os.path.exists(port)  # stale, and dangling
        with VirtualMCU(1):  # most likely on the same /dev/pts number (which the old /dev/pts link reached)
            with pytest.raises(LinkError, match="cannot open serial port"):
                Link(port, heartbeat_hz=0, reconnect=False).open()
    finally:
        os.unlink(port)
        os.rmdir(os.path.dirname(port))


# ---------------------------------------------------------------- the link's own HELLO after a reconnect


def test_link_refreshes_caps_by_itself_after_a_reconnect():
    """The board comes back from an unplug reflashed under another name: `link.caps` follows without
    the application calling hello(), and wait_caps() then answers from it without another HELLO. The
    first connection sends nothing by itself (lockstep users count every frame they send)."""
    with VirtualMCU(2, name="board-a") as mcu, Link(mcu.port, heartbeat_hz=0) as link:
        assert wait_for(lambda: mcu.stats.ticks >= 50, 30.0)
        assert link.stats.tx_frames == 0 and link.stats.auto_hellos == 0
        assert link.hello(**HELLO).name == "board-a"
        mcu.unplug()
        assert wait_for(lambda: link.stats.disconnects == 1, 10.0)
        mcu.name = "board-b"
        mcu.replug()
        assert wait_for(lambda: link.caps.name == "board-b", 30.0), "caps not refreshed after the reconnect"
        assert link.stats.reconnects == 1 and link.stats.auto_hellos >= 1
        sent = link.stats.auto_hellos
        assert link.wait_caps(timeout_s=10.0).name == "board-b"
        assert link.stats.auto_hellos == sent


def test_wait_caps_asks_on_a_first_connection_and_times_out_in_one_line():
    with VirtualMCU(3, name="fresh") as mcu, Link(mcu.port, heartbeat_hz=0) as link:
        assert link.wait_caps(timeout_s=30.0).n_motors == 3 and link.stats.auto_hellos >= 1
    m, s = os.openpty()  # a port that opens but where nothing answers
    try:
        tty.setraw(s)
        with Link(os.ttyname(s), heartbeat_hz=0, reconnect=False, hello_timeout_s=0.05) as link:
            with pytest.raises(LinkTimeout, match=r"^no CAPS from /dev/pts/\d+ within 0.3 s of HELLOs every 50 ms$"):
                link.wait_caps(timeout_s=0.3)
            assert link.stats.auto_hellos >= 2
    finally:
        os.close(m)
        os.close(s)


# ---------------------------------------------------------------- python -m firmware_bridge.virtual

VIRTUAL = [sys.executable, "-m", "firmware_bridge.virtual"]


@pytest.mark.parametrize("args, flag", [
    (["--corrupt-rate", "2"], "--corrupt-rate 2.0: expected a probability in [0, 1]"),
    (["--stream-hz", "300"], "--stream-hz 300: expected one of 100, 200, 250, 500, 1000 dividing --control-hz 1000"),
    (["--motors", "40"], "--motors 40: expected 0..32"),
    (["--control-hz", "500", "--stream-hz", "1000"], "--stream-hz 1000: expected one of"),
    (["--control-hz", "300"], "--control-hz 300: expected a divisor of 1 000 000"),
    (["--drop-rate", "-0.1"], "--drop-rate -0.1: expected a probability"),
    (["--delay-s", "nan"], "--delay-s nan: expected a finite time >= 0 s"),
    (["--unplug-at-s", "-1"], "--unplug-at-s -1.0: expected a finite time"),
    (["--stall-for-s", "inf"], "--stall-for-s inf: expected a finite time"),
    (["--watchdog-ms", "70000"], "--watchdog-ms 70000: expected 1..65535"),
    (["--name", "x" * 256], "--name 'xxx"),
    (["--motors", "two"], "argument --motors: invalid int value: 'two'"),
    (["--unplug"], "unrecognized arguments: --unplug"),
])
def test_virtual_mcu_cli_refuses_bad_arguments_in_one_line(args, flag):
    r = subprocess.run(VIRTUAL + args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"python -m firmware_bridge.virtual: error: {flag}"), r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def start_virtual(*args: str) -> tuple[subprocess.Popen, str]:
    """A virtual MCU process and its port (the first line it prints)."""
    proc = subprocess.Popen(VIRTUAL + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = proc.stdout.readline().strip()
    assert port, proc.communicate(timeout=30)[1]
    return proc, port


def stop_virtual(proc: subprocess.Popen, sig: int) -> dict[str, int]:
    """Signal the process; the counters it prints on exit, by name."""
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err
    head, *lines = out.splitlines()
    assert head.startswith("walklab-virtual: stopped at MCU time ") and head.endswith("counters:")
    counters = {name: int(value) for name, value in (line.split() for line in lines)}
    assert {"ticks", "tx_frames", "dropped_frames", "corrupted_frames", "unplugs", "stalls", "watchdog_trips",
            "rx_frames", "rx_errors"} <= set(counters)
    return counters


def test_virtual_mcu_cli_drops_and_corrupts_and_counts_on_exit():
    """--drop-rate and --corrupt-rate: the host sees sequence gaps and rejected chunks; the counters the
    process prints on SIGTERM agree with what the host observed (an intact frame received was
    transmitted uncorrupted; a frame lost was dropped, corrupted, or merged by a corrupted delimiter)."""
    import signal

    proc, port = start_virtual("--motors", "2", "--stream-hz", "500", "--drop-rate", "0.05",
                               "--corrupt-rate", "0.001", "--seed", "4")
    try:
        with Link(port, heartbeat_hz=0) as link:
            assert wait_for(lambda: link.stats.frames.get("STATE", 0) >= 1000, 60.0)
            ls = link.stats
    finally:
        c = stop_virtual(proc, signal.SIGTERM)
    assert ls.lost_frames > 0 and sum(ls.rejected.values()) > 0
    assert c["dropped_frames"] > 0 and c["corrupted_frames"] > 0
    assert sum(ls.frames.values()) <= c["tx_frames"] - c["corrupted_frames"]
    assert ls.lost_frames <= c["dropped_frames"] + 2 * c["corrupted_frames"]
    assert c["unplugs"] == c["stalls"] == c["tx_overflow"] == 0


def test_virtual_mcu_cli_delays_every_frame():
    """--delay-s 0.4: a HELLO's CAPS cannot come back sooner (a lower bound, whatever the load)."""
    import signal

    proc, port = start_virtual("--motors", "1", "--stream-hz", "100", "--delay-s", "0.4")
    try:
        with Link(port, heartbeat_hz=0) as link:
            t0 = time.monotonic()
            assert link.hello(timeout_s=5.0, retries=2).n_motors == 1
            elapsed = time.monotonic() - t0
            assert wait_for(lambda: link.stats.frames.get("STATE", 0) >= 20, 30.0)
            ls = link.stats
    finally:
        c = stop_virtual(proc, signal.SIGINT)
    assert elapsed >= 0.4
    assert ls.lost_frames == 0 and ls.rejected == {} and c["rx_frames"] >= 1


def test_virtual_mcu_cli_unplugs_at_a_time():
    """--unplug-at-s 1 --unplug-for-s 0.3: one disconnect and one reconnect on the host, after which
    the link has the board's CAPS again by itself; one unplug counted by the MCU."""
    import signal

    proc, port = start_virtual("--motors", "1", "--stream-hz", "100", "--unplug-at-s", "1.0", "--unplug-for-s", "0.3")
    try:
        with Link(port, heartbeat_hz=0) as link:
            assert link.hello(**HELLO).n_motors == 1
            assert wait_for(lambda: link.stats.reconnects == 1, 60.0)
            assert link.wait_caps(timeout_s=30.0).name == "walklab-virtual"
            ls = link.stats
    finally:
        c = stop_virtual(proc, signal.SIGTERM)
    assert ls.disconnects == 1 and ls.auto_hellos >= 1
    assert c["unplugs"] == 1


def test_virtual_mcu_cli_stall_trips_the_watchdog():
    """--stall-at-s 3 --stall-for-s 1.5 --watchdog-ms 1000: the host keeps its heartbeats going, yet
    the MCU loses them from 3 s of MCU time on, so its watchdog trips in the stall, by the MCU's clock:
    between 3 s and 3 s + 1000 ms (+ one tick), and stays latched."""
    import signal

    stall_us, watchdog_us = 3_000_000, 1_000_000
    proc, port = start_virtual("--motors", "1", "--stream-hz", "100", "--watchdog-ms", "1000",
                               "--stall-at-s", "3.0", "--stall-for-s", "1.5")
    frames: list[P.Frame] = []
    try:
        with Link(port, heartbeat_hz=50, liveness_s=1.0) as link:
            assert link.hello(**HELLO).n_motors == 1
            link.send(P.Command((P.MotorCommand(P.MODE_IDLE, 0.0),)))  # arms the watchdog

            def tripped(fr):
                link.alive()  # the host is alive throughout: heartbeats keep flowing
                return any(isinstance(f.msg, P.Heartbeat) and f.msg.status & P.STATUS_WATCHDOG and f.t_us > stall_us
                           + 1_500_000 for f in fr)

            collect_until(link, frames, tripped, timeout_s=60.0)
    finally:
        c = stop_virtual(proc, signal.SIGTERM)
    armed = [f for f in frames if isinstance(f.msg, P.Heartbeat) and f.msg.status & P.STATUS_ARMED]
    assert armed and armed[0].t_us < stall_us  # armed before the stall began
    logs = [f for f in frames if isinstance(f.msg, P.Log) and f.msg.text.startswith("watchdog:")]
    assert len(logs) == 1 and stall_us <= logs[0].t_us <= stall_us + watchdog_us + PERIOD_US
    assert c["stalls"] == 1 and c["watchdog_trips"] == 1 and c["rx_stalled_bytes"] > 0


def test_mcu_tick_waits_for_a_transmit_in_progress_instead_of_crashing():
    # The transmitter thread writes from the output buffer (os.write(_outbuf) holds a buffer export under
    # _io_lock) while the MCU tick appends new frames to it: appending then must wait for the lock. Before
    # the fix the tick raised BufferError ("Existing exports of data") and the MCU thread died when no
    # host drained the pty fast enough. Here a held export stands for the write in progress.
    import threading

    mcu = VirtualMCU(1, control_hz=1000, stream_hz=1000)  # lockstep: ticks run by step()
    try:
        mcu.step(1)
        # the race's window: the tick's pty read done (it takes the lock too), the transmitter then writing
        mcu._read = lambda: b""
        errors: list[BaseException] = []

        def tick():
            try:
                mcu.step(200)  # 0.2 s of ticks: heartbeats and STATE frames to send
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        with mcu._io_lock:
            view = memoryview(mcu._outbuf)  # the buffer as os.write sees it
            worker = threading.Thread(target=tick)
            worker.start()
            worker.join(0.3)
            blocked = worker.is_alive()
            view.release()
        worker.join(10.0)
        assert not errors, errors
        assert blocked  # it waited for the write to finish
        assert mcu.stats.ticks >= 201 and mcu.stats.tx_frames > 1
    finally:
        mcu.close()
