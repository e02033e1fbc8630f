"""The simulated walker (daq/simulated_robot.py + daq/encoder.py) as real processes on a real pty and
real ZeroMQ sockets: the shipped configs/sim_walker.toml under `walklab run` (ports and pty path
moved to private ones), and the robot + encoder started by their `controller.proc` entry points.
Truths: the commanded speed (a mean over many samples), seq contiguity, the energy balance of the
motor (the electrical work Kt·N·∫i dθ over whole revolutions equals the motor's known friction
work, as I(θ) and the potential are periodic), and the MCU's own restart."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import configs
from controller.config import load
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import on_free_ports
from daq.simulated_robot import link_port
from dynamics.linkage import read_crank_legs
from firmware_bridge import protocol as P
from dynamics.plants.motor import MotorParams

REPO = Path(__file__).resolve().parents[2]


def private_copy(tmp_path: Path, extra_args: dict[str, list[str]] | None = None) -> Path:
    """configs/sim_walker.toml with free ports and a pty path under tmp_path; `extra_args` are appended
    to the args of the named processes (argparse: a repeated option's last value wins)."""
    text = configs.path("sim_walker.toml").read_text()
    text, _ = on_free_ports(text)
    text = text.replace("/tmp/walklab-sim/walker-mcu", str(tmp_path / "run" / "walker-mcu"))
    for name, extra in (extra_args or {}).items():
        start = text.index("args = [", text.index(f'name = "{name}"'))
        end = text.index("]", start)
        text = text[:end] + "".join(f', "{a}"' for a in extra) + text[end:]
    cfg = tmp_path / "sim_walker.toml"
    cfg.write_text(text)
    return cfg


class Watch:
    """Encoder frames and the latest health of each process of a lab, from the bus."""

    def __init__(self, cfg: Path):
        self.lab = load(cfg)
        self.sub = Subscriber(list(self.lab.endpoints().values()), ["encoder/crank", "health/*"])
        self.frames = []
        self.health: dict[str, dict] = {}

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f = self.sub.recv(timeout_s=0.1)
            if f is None:
                continue
            if f.kind == "health":
                self.health[f.meta["process"]] = {**parse_health(f), "meta": f.meta}
            else:
                self.frames.append(f)

    def until(self, pred, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.pump(0.2)
            try:
                if pred(self.health):
                    return
            except KeyError:
                pass
        pytest.fail(f"condition not met within {timeout_s} s; health: {self.health.get('encoder')}")

    def samples(self, seconds: float) -> np.ndarray:
        """(n, 3) samples of the last `seconds` of device time."""
        last = self.frames[-1].t_device
        rows = [f.data for f in self.frames if f.t_device >= last - seconds * 1e9 and
                f.meta["session"] == self.frames[-1].meta["session"]]
        return np.vstack(rows)


def sessions(h: dict) -> float:
    return h["encoder"]["link/sessions"]["count"]


def test_walker_legs_share_two_tables_with_their_phases():
    legs = read_crank_legs("jansen_walker")
    assert len(legs) == 12 and len({id(m) for m, _ in legs}) == 2
    assert sorted(np.degrees([p for _, p in legs]).round(6)) == sorted([0, 0, 60, 60, 120, 120, 180, 180, 240, 240,
                                                                         300, 300])
    assert len(read_crank_legs("jansen_leg")) == 1
    with pytest.raises(FileNotFoundError, match="no_such_walker"):
        read_crank_legs("no_such_walker")


def test_port_symlink_never_replaces_a_real_file(tmp_path):
    real = tmp_path / "ttyACM0"
    real.write_text("")
    with pytest.raises(FileExistsError, match="not a symlink"):
        link_port(str(real), "/dev/null")
    link = tmp_path / "sub" / "mcu"
    link_port(str(link), "/dev/null")
    link_port(str(link), "/dev/zero")  # a live link is re-pointed
    assert os.readlink(link) == "/dev/zero"
    link_port(str(link), str(tmp_path / "gone"))  # a killed robot's dangling link is replaced too
    link_port(str(link), "/dev/null")
    assert os.readlink(link) == "/dev/null"


def test_sim_walker_lab_walks_and_survives_an_unplug(tmp_path):
    cfg = private_copy(tmp_path)
    w = Watch(cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    lab = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg)], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert w.sub.wait_connected(60.0), "the lab's processes did not come up"  # hang guard: start-up imports numba/scipy on a busy machine
        w.until(lambda h: sessions(h) >= 1, 60.0)
        w.pump(3.5)
        steady = w.samples(2.0)
        walker_pid = w.health["walker"]["meta"]["pid"]
        old_target = os.readlink(tmp_path / "run" / "walker-mcu")  # /proc/PID/fd/N of the MCU's pty
        os.kill(walker_pid, signal.SIGKILL)  # pull the cable (and power): the supervisor restarts the MCU
        w.until(lambda h: h["encoder"]["link/disconnects"]["count"] >= 1, 30.0)
        w.until(lambda h: sessions(h) >= 2 and h["walker"]["meta"]["pid"] != walker_pid, 60.0)
        w.pump(2.5)
        after = w.samples(1.0)
        st = w.sub.stats()["encoder/crank"]
        h = w.health["encoder"]
        new_target = os.readlink(tmp_path / "run" / "walker-mcu")
    finally:
        lab.send_signal(signal.SIGTERM)
        out, err = lab.communicate(timeout=30)
        w.sub.close()
    assert lab.returncode == 0, err
    # the crank turns at the default setpoint, 2 pi rad/s, under gravity, inertia and ground contact
    assert steady[:, 1].mean() == pytest.approx(2 * np.pi, rel=0.03)
    assert np.ptp(steady[:, 0]) == pytest.approx(2 * 2 * np.pi, rel=0.05)  # 2 s of angle
    assert np.abs(steady[:, 2]).max() > 0.1  # the plant loads the motor
    # every encoder frame arrived, before and after the unplug; the daemon said what happened
    assert st.gaps == 0 and st.dropped == 0 and st.missed_at_join == 0 and st.received > 200
    assert h["link/reconnects"]["count"] >= 1 and h["meta"]["state"] == "running"
    assert after[:, 1].mean() == pytest.approx(2 * np.pi, rel=0.05)
    assert "walker" in err and "restarted" in err
    # the dead robot's pty handle died with it (a reused /dev/pts number is never reopened)
    assert new_target != old_target and not os.path.exists(old_target)
    assert not os.path.lexists(tmp_path / "run" / "walker-mcu")  # a clean stop removes the link


def test_motor_electrical_work_equals_friction_work_without_contact(tmp_path):
    # Robot and daemon by their entry points; no ground. Over whole revolutions
    # Kt N ∮ i dθ = ∮ τ_f dθ with τ_f = N (b N θ̇ + τ_c tanh(N θ̇ / ω_ε)) (MotorParams defaults):
    # ½ I′ θ̇² + G and I θ̈ integrate to zero (kinetic and potential energy return).
    cfg = private_copy(tmp_path, {"walker": ["--contact", "none"]})
    lab = load(cfg)
    w = Watch(cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", name,
                               *lab.process(name).args], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("walker", "encoder")]
    try:
        w.until(lambda h: sessions(h) >= 1, 60.0)
        w.pump(4.5)
    finally:
        for p in procs:
            p.terminate()
        errs = [p.communicate(timeout=15)[1] for p in procs]
        w.sub.close()
    assert [p.returncode for p in procs] == [0, 0], errs
    frames = [f for f in w.frames if f.meta["session"] == 1]
    t = np.concatenate([f.sample_times("t_device") for f in frames]) * 1e-9
    d = np.vstack([f.data for f in frames])
    flags = np.concatenate([f.extra["flags"] for f in frames])
    assert np.all(np.diff(t) > 0)
    keep = t > t[0] + 1.5  # past the spin-up (current-limited, then the PI settles)
    assert np.all(flags[keep] & P.FLAG_ENABLED), "the motor was not driven all along (watchdog: machine stalled?)"
    assert not np.any(flags[keep] & P.FLAG_CURRENT_LIMIT)
    t, theta, i = t[keep], d[keep, 0], d[keep, 2]
    n_rev = int((theta[-1] - theta[0]) // (2 * np.pi))
    assert n_rev >= 2
    sel = theta <= theta[0] + n_rev * 2 * np.pi  # whole revolutions
    th, cur = theta[sel], i[sel]
    om = np.gradient(th, t[sel])
    assert om.mean() == pytest.approx(2 * np.pi, rel=0.03)
    m = MotorParams()
    tau_f = m.gear * (m.b * m.gear * om + m.tau_c * np.tanh(m.gear * om / m.w_eps))
    electrical = np.trapezoid(m.Kt * m.gear * cur, th)
    friction = np.trapezoid(tau_f, th)
    ripple = np.trapezoid(np.abs(m.Kt * m.gear * cur), th)
    assert ripple > 5 * friction  # the inertial and gravity terms dominate the instantaneous current
    assert electrical == pytest.approx(friction, rel=0.15)


def test_bad_robot_arguments_are_one_line_errors(tmp_path):
    cfg = private_copy(tmp_path, {"walker": ["--model", "no_such_walker"]})
    args = load(cfg).process("walker").args
    run = subprocess.run([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "walker", *args],
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "no_such_walker" in errors[0], run.stderr
