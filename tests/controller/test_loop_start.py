"""The control loop's initial request (``--speed``; controller.loop `_start_walk` and its callers `run` and
`_run_shadow`): applied only once its inputs are live, dropped when the operator speaks first, a refusal
reported, and in shadow mode started on the data's clock.

Real components: loop processes (`controller.proc`, as the supervisor starts them) on a VirtualMCU over a pty
driving the walker's crank plant, the ``dynamics/zmp`` stream and operator frames published by this test on
real ZeroMQ sockets, `walklab command` on the loop's operator endpoint. Truths: the MCU's own mode and latch
(what reached the motors), the times and margins of the ZMP samples this test published against the robot
config's limits, the sample times of the encoder streams it published (shadow), and the nominal's own rates
against the slew limit the test put below them.
"""
from __future__ import annotations

import re
import subprocess
import time
import types

import numpy as np
import pytest

import configs
from controller.loop import Controller, Measured, ZmpWatch, _start_walk
from controller.synergies import library
from controller.synergies.robot import load_robot
from controller.synergies.select import Request
from daq.bus import Publisher, Subscriber
from daq.frames import Frame
from daq.ports import free_tcp_ports
from dynamics.linkage.model import read_crank_legs
from dynamics.plants.crank import crank_plant, motor_load
from dynamics.plants.motor import MotorParams
from firmware_bridge import protocol as P
from firmware_bridge.virtual import VirtualMCU
from daq.health import parse_health

from .test_loop import LAW, Bus, ZmpSource, loop_lab, start_loop, until, walklab

MS = 1_000_000
ZMP_STALE_S = 3.0   # the robot's limits.zmp_stale_s: a loaded machine's stalls (100-200 ms seen) stay far below it


class Loop(Bus):
    """A loop process (test_loop.start_loop) and its controller/state, controller/events and health/loop
    frames, read on one socket: the loop's publisher's order (an event before the state rows and health
    frames published after it)."""

    def __init__(self, cfg, endpoint: str, mcu: VirtualMCU) -> None:
        self.sub = Subscriber([endpoint], ["controller/state", "controller/events", "health/loop"])
        self.state, self.events, self.mcu = [], [], mcu
        self.health: dict = {}   # the newest health frame, parsed
        self.ended: tuple[int, str] | None = None
        self.proc = start_loop(cfg)
        assert self.sub.wait_connected(60.0), "the loop process did not come up"

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f = self.sub.recv(timeout_s=0.02)
            if f is not None and f.stream == "health/loop":
                self.health = parse_health(f)
            elif f is not None:
                (self.events if f.stream == "controller/events" else self.state).append(f)

    def causes(self) -> list[str]:
        return [f.meta.get("cause") for f in self.events]

    def wait(self, pred, what: str, pump=None, timeout_s: float = 60.0) -> None:
        """`until` pred, pumping (`pump`, default this loop's); a wait that runs out says what the loop did."""
        try:
            until(pred, timeout_s, what, pump or self.pump)
        except pytest.fail.Exception:
            alive = self.proc.poll() is None
            code, err = self.stop()
            pytest.fail(f"{what}: not within {timeout_s} s (the loop {'was running' if alive else 'had exited'}, "
                        f"exit {code}; its events {self.causes()}; {len(self.state)} state frames; its last health "
                        f"{self.health}; the MCU's stats {self.mcu.stats}; stderr:\n{err[-3000:]})")

    def stop(self) -> tuple[int, str]:
        """Stop the process (if it runs) and close the socket; (its exit status, its stderr); idempotent."""
        if self.ended is None:
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                _, err = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            self.sub.close()
            self.ended = (self.proc.returncode, err or "")
        return self.ended


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    """The shipped one-crank robot (configs/jansen_single.toml) with one cheap nominal (0.2 m/s) in a tmp
    library, min_margin 0.02 m and zmp_stale_s ZMP_STALE_S."""
    tmp = tmp_path_factory.mktemp("start")
    text = configs.path("jansen_single.toml").read_text()
    for pattern, value in ((r"library = .*", f'library = "{tmp / "lib"}"'), (r"speeds = \[.*\]", "speeds = [0.2]"),
                           (r"profiles = \[.*\]", 'profiles = ["constant"]'), (r"samples = \d+", "samples = 256"),
                           (r"stale_s = \S+", "stale_s = 0.1")):
        text, n = re.subn(pattern, value, text)
        assert n == 1, pattern
    path = tmp / "robot.toml"
    path.write_text(text.rstrip() + f"\nmin_margin = 0.02\nzmp_stale_s = {ZMP_STALE_S}\n")
    written, _ = library.build(load_robot(path))
    assert len(written) == 1
    return path


@pytest.fixture
def lab(robot, tmp_path):
    """`lab(args)`: a lab with the loop process (`args`, --robot `robot`) and a ``dyn`` entry (not started:
    this test's `Publisher` there is the lab's dynamics service), the loop's MCU at tmp_path/mcu, the loop
    started (a `Loop`). Returns (loop, MCU, lab config, Publisher); all closed after the test."""
    made = []

    def new(args: list[str], robot_path=robot):
        dyn = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
        cfg, endpoint = loop_lab(tmp_path, robot_path, args, f"""
            [[processes]]
            name = "dyn"
            module = "controller.healthmon"
            bind = "{dyn}"
            """)
        plant = crank_plant(read_crank_legs("jansen_walker"), ground_penetration=0.008, law=LAW)
        mcu = VirtualMCU(1, motor=MotorParams(), control_hz=1000, stream_hz=500, watchdog_ms=1000,
                         load=lambda t, th, om: motor_load(plant, th, om))
        pub = Publisher(dyn)
        made.append((mcu, pub))
        loop = Loop(cfg, endpoint, mcu)
        made.append(loop)
        # the MCU's port appears once this test reads the loop's outputs (the loop waits for it, as for a USB
        # device plugged in late): no cycle runs before, so no event is published before this test can see it
        mcu.start()
        (tmp_path / "mcu").symlink_to(mcu.port)
        return loop, mcu, cfg, pub

    try:
        yield new
    finally:
        for item in reversed(made):
            if isinstance(item, Loop):
                item.stop()
            else:
                item[1].close()
                item[0].close()


def send_zmp(pub, age_s: float, margin: float = 0.05) -> None:
    """One ``dynamics/zmp`` block as a dynamics service publishes it: 10 samples at 500 Hz, the newest
    measured `age_s` ago on the host's monotonic clock (the loop's), margin `margin` m."""
    t = time.monotonic_ns() - round(age_s * 1e9) - 18 * MS
    pub.publish("dynamics/zmp", np.tile([0.0, 0.0, margin, 4.0, 1.0], (10, 1)), kind="zmp", rate_hz=500.0,
                channels=ZmpSource.CHANNELS, units=ZmpSource.UNITS, t_host=t, t=t)


def zmp_taken(loop: Loop, pub) -> None:
    """Until the loop has taken every ``dynamics/zmp`` block `pub` sent before: a block without a margin
    channel sent after them (ZeroMQ keeps one publisher's order) is counted in the loop's health
    (``zmp/rejected``) in the cycle that read it, after those blocks; the health frame comes on the loop's
    publisher after that cycle's events, so every event of that cycle is in `loop.events` by then."""
    seen = loop.health.get("zmp/rejected", {}).get("count", 0)
    pub.publish("dynamics/zmp", np.zeros((1, 1)), kind="zmp", rate_hz=500.0, channels=["ZMPx"], units=["m"])
    loop.wait(lambda: loop.health.get("zmp/rejected", {}).get("count", 0) > seen,
              "the loop reading the ZMP blocks (its zmp/rejected count)")


def rows(loop: Loop) -> np.ndarray:
    """The loop's controller/state rows so far: walking, jitter, phase, q_ref, q, tau (one crank)."""
    return np.vstack([f.data for f in loop.state]) if loop.state else np.zeros((0, 6))


def measured_rows(loop: Loop) -> int:
    return int(np.isfinite(rows(loop)[:, 4]).sum())


def idle(loop: Loop, mcu) -> None:
    """Nothing walked: no request applied, every state row not walking with zero torque, the MCU's motor idle."""
    r = rows(loop)
    assert "request" not in loop.causes(), [f.meta for f in loop.events]
    assert np.all(r[:, 0] == 0) and np.all(r[:, 5] == 0)
    assert mcu.mode[0] == P.MODE_IDLE


def test_the_initial_request_waits_for_a_fresh_zmp_sample_then_walks(lab):
    """``--zmp-guard on --speed 0.2``: with fresh measurements but no ZMP sample, then with samples older than
    limits.zmp_stale_s on the loop's clock (a dynamics service catching up at its start), the loop stays idle
    — no request applied, no torque at the MCU, no ``zmp_stale`` stop; the first fresh sample starts the walk."""
    loop, mcu, _, pub = lab(["--zmp-guard", "on", "--speed", "0.2", "--reset-on-latch"])
    assert pub.wait_for_subscribers(2, 60.0), "the loop never subscribed to the ZMP stream"
    # fresh measurements, no ZMP: 200 cycles with a measured angle (the start would come at the first of them)
    loop.wait(lambda: measured_rows(loop) >= 200, "the loop's measured cycles")
    idle(loop, mcu)
    # old samples only: 10 x zmp_stale_s old, read by the loop; then 100 more measured cycles
    for _ in range(5):
        send_zmp(pub, 10 * ZMP_STALE_S)
    zmp_taken(loop, pub)
    n = measured_rows(loop)
    loop.wait(lambda: measured_rows(loop) >= n + 100, "the loop's measured cycles after the old ZMP")
    idle(loop, mcu)
    assert not any(c.startswith("zmp") for c in loop.causes()), loop.causes()
    # fresh samples: the initial request applied, the MCU takes torque, the guard content
    t_fresh = time.monotonic_ns()

    def pump(seconds: float) -> None:
        send_zmp(pub, 0.0)
        loop.pump(seconds)

    loop.wait(lambda: "request" in loop.causes(), "the initial request applied", pump)
    ev = loop.events[loop.causes().index("request")]
    assert ev.meta["detail"].startswith("initial request: speed 0.2 m/s") and ev.meta["speed"] == 0.2
    assert ev.t > t_fresh   # on the loop's clock: after the first fresh sample was sent
    loop.wait(lambda: mcu.wd_armed and mcu.mode[0] == P.MODE_TORQUE and rows(loop)[-1, 0] == 1, "the loop walking",
              pump)
    assert not any(c.startswith("zmp") for c in loop.causes()), loop.causes()


@pytest.mark.parametrize("via", ["operator endpoint: walklab command speed 0", "bus: controller/estop"])
def test_an_operator_frame_before_the_start_drops_the_initial_request(lab, via):
    """An operator's word received while the initial request waits for its ZMP input wins: a stop through
    the ``--operator`` endpoint (`walklab command speed 0`), or an e-stop on the bus from another process of
    the lab; then fresh ZMP samples arrive — and the initial ``--speed 0.2`` must not start the walk."""
    loop, mcu, cfg, pub = lab(["--zmp-guard", "on", "--speed", "0.2", "--reset-on-latch"])
    assert pub.wait_for_subscribers(2, 60.0), "the loop never subscribed to the bus"
    loop.wait(lambda: measured_rows(loop) >= 50, "the loop's measured cycles")
    if via.startswith("operator"):
        r = walklab("command", "speed", "0", str(cfg), "--timeout", "30")
        assert r.returncode == 0, r.stderr
        loop.wait(lambda: "request" in loop.causes(), "the operator's stop event")
        stop = loop.events[loop.causes().index("request")]
        assert stop.meta["speed"] == 0.0 and not stop.meta["detail"].startswith("initial")
    else:
        pub.publish("controller/estop", np.array([[1.0]]), kind="command", rate_hz=0.0, channels=["latch"],
                    units=["1"], meta={"source": "test"})
        loop.wait(lambda: mcu.estop and "estop" in loop.causes(), "the e-stop latching the loop and MCU")
    for _ in range(5):
        send_zmp(pub, 0.0)
    zmp_taken(loop, pub)
    n = measured_rows(loop)

    def pump(seconds: float) -> None:
        send_zmp(pub, 0.0)
        loop.pump(seconds)

    loop.wait(lambda: measured_rows(loop) >= n + 100, "the loop's measured cycles with fresh ZMP", pump)
    assert not any(str(f.meta.get("detail", "")).startswith("initial request") for f in loop.events), \
        [f.meta for f in loop.events]
    r = rows(loop)
    assert np.all(r[:, 0] == 0) and np.all(r[:, 5] == 0) and mcu.mode[0] == P.MODE_IDLE
    assert loop.proc.poll() is None


def test_a_refused_initial_request_is_a_rejected_event_and_the_loop_runs_on(lab, robot, tmp_path):
    """A request the controller refuses once its inputs are live — here the nominal's crank rate reaches the
    robot config's setpoint slew limit (the tracker refuses it; selection at the start does not look at the
    slew) — is a ``rejected`` event naming it; the loop goes on idle and serves the operator."""
    from controller.synergies.library import load_all

    nom = load_all(load_robot(robot).library)[0]
    peak = float(np.abs(nom.qd).max())     # rad/s: the nominal's own crank rate
    slow = tmp_path / "slow.toml"
    text, n = re.subn(r"^slew = \[.*\]", f"slew = [{peak / 2:.6g}]", robot.read_text(), flags=re.M)
    assert n == 1
    slow.write_text(text)
    loop, mcu, cfg, _ = lab(["--speed", "0.2"], slow)
    loop.wait(lambda: "rejected" in loop.causes() or loop.proc.poll() is not None, "the initial request's refusal")
    if loop.proc.poll() is not None:
        code, err = loop.stop()
        pytest.fail(f"the loop exited ({code}): {err[-2000:]}")
    ev = loop.events[loop.causes().index("rejected")]
    detail = ev.meta["detail"]
    assert detail.startswith("initial request: nominals ") and "reach the setpoint slew limits" in detail, detail
    assert f"[{peak / 2:.6g}]" in detail.replace(" ", "")
    n = measured_rows(loop)
    loop.wait(lambda: measured_rows(loop) >= n + 100, "the loop's cycles after the refusal")
    idle(loop, mcu)
    r = walklab("estop", str(cfg), "--timeout", "30")   # still serving its operator
    assert r.returncode == 0, r.stderr
    loop.wait(lambda: mcu.estop, "the MCU's e-stop")
    assert loop.proc.poll() is None


def test_the_shadow_loop_starts_on_the_data_clock_whatever_order_its_streams_arrive_in(lab):
    """``--shadow --zmp-guard on --speed 0.2``: the encoder samples of 0.2 s arrive first, their ZMP samples
    only after them (a replay's ZMP is recomputed from its inputs: it comes later). The cycles wait for the
    ZMP stream to cover them, so the initial request is applied at the first cycle with a fresh measurement
    and a fresh ZMP sample on the data's clock (1000 s from the host's): t_first, the first encoder sample's
    time, where the ZMP sample of that time is — and the guard never finds its input missing (the loop ran
    its cycles before the ZMP arrived and latched ``zmp_stale`` at the first)."""
    loop, mcu, _, zpub = lab(["--shadow", "--zmp-guard", "on", "--speed", "0.2"])
    T0 = 10**12
    assert zpub.wait_for_subscribers(1, 60.0), "the shadow loop never subscribed"
    for k in range(20):                          # 0.2 s of 10-sample encoder blocks at 1 kHz, a crank at 2 rad/s
        t = T0 + 10 * k * MS
        ts = (t - T0 + np.arange(10) * MS) * 1e-9
        zpub.publish("encoder/crank", np.column_stack([2.0 * ts, np.full(10, 2.0), np.zeros(10)]), kind="encoder",
                     rate_hz=1000.0, channels=["angle", "velocity", "current"], units=["rad", "rad/s", "A"],
                     t_host=t, t=t)
    # the ZMP of those samples, after them on the same socket (the loop reads them in this order)
    for k in range(20):
        t = T0 + 10 * k * MS
        zpub.publish("dynamics/zmp", np.tile([0.0, 0.0, 0.05, 4.0, 1.0], (10, 1)), kind="zmp", rate_hz=1000.0,
                     channels=ZmpSource.CHANNELS, units=ZmpSource.UNITS, t_host=t, t=t)
    loop.wait(lambda: "request" in loop.causes(), "the initial request")
    loop.wait(lambda: sum(f.data.shape[0] for f in loop.state) >= 50, "the shadow loop's cycles")
    ev = loop.events[loop.causes().index("request")]
    assert ev.meta["detail"].startswith("initial request: speed 0.2 m/s")
    assert ev.t == T0 and ev.t == loop.state[0].t     # the first cycle, on the data's clock
    assert set(loop.causes()) <= {"request", "fresh"}, loop.causes()  # no zmp_stale: its input at every cycle
    walking = np.concatenate([f.data[:, 0] for f in loop.state])
    assert walking.all()
    assert mcu.stats.rx_frames == 0                   # shadow: nothing reached the MCU


def test_start_walk_applies_the_request_only_at_fresh_inputs_on_the_loops_clock(robot):
    """`_start_walk` on one cycle's inputs: a measurement older than limits.stale_s or none, a ZMP sample
    older than limits.zmp_stale_s or none keep the request waiting (returned, nothing published, no nominal
    tracked); at ages 1 us within the limits it is applied (one ``request`` event, the nominal tracked) and
    None returned. Truth: the robot config's limits and the times this test hands in."""
    from controller.synergies.library import load_all

    cfg = load_robot(robot)
    lim = cfg.limits
    assert (lim.stale_s, lim.zmp_stale_s) == (0.1, ZMP_STALE_S)
    sent = []
    ctx = types.SimpleNamespace(publisher=types.SimpleNamespace(publish=lambda stream, data, **kw: sent.append(kw)))
    now, req = 50_000 * MS, Request(0.2)

    def meas(age_s: float) -> Measured:
        return Measured(now - round(age_s * 1e9), np.zeros(1), np.zeros(1))

    def zmp(age_s: float | None) -> ZmpWatch:
        w = ZmpWatch("t_host")
        if age_s is not None:
            t = now - round(age_s * 1e9)
            w.feed(Frame("dynamics/zmp", "zmp", 0, None, t, t, 500.0, ZmpSource.CHANNELS, ZmpSource.UNITS,
                         np.array([[0.0, 0.0, 0.05, 4.0, 1.0]])))
            w.take(now)
        return w

    waiting = [(None, zmp(0.0)), (meas(lim.stale_s + 1e-6), zmp(0.0)), (meas(0.0), zmp(None)),
               (meas(0.0), zmp(lim.zmp_stale_s + 1e-6))]
    for m, w in waiting:
        ctl = Controller(cfg, load_all(cfg.library), zmp_guard=True)
        assert _start_walk(ctx, ctl, req, now, m, w) is req and ctl.tracker is None and sent == []
    for w in (zmp(lim.zmp_stale_s - 1e-6), None):        # None: the guard off (or shadow mode): the measurement alone
        ctl = Controller(cfg, load_all(cfg.library), zmp_guard=w is not None)
        assert _start_walk(ctx, ctl, req, now, meas(lim.stale_s - 1e-6), w) is None
        assert ctl.tracker is not None and ctl.tracker.nominal.meta["speed"] == 0.2
        assert len(sent) == 1 and sent[0]["meta"]["cause"] == "request" and sent[0]["t"] == now
        sent.clear()
