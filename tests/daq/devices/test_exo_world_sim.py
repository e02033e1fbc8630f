"""daq.devices.exo_world_sim: its arguments (every bad value is one line naming the option; the process then
exits 2 and is not restarted) and its robot, the one its MCU device names (none, a wrong name, one that is
not a biped's: one line naming the key). The whole lab runs in tests/controller/test_run_exo.py; the world's
physics in tests/dynamics/test_exo_world.py."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import configs
from controller.config import load as load_lab
from controller.synergies.robot import load_robot
from daq.bus import Subscriber
from daq.devices.exo_world_sim import build_world, parse_args, world_robot
from daq.ports import free_tcp_ports
from dynamics.plants.exo_world import CUFF_STIFFNESS
from firmware_bridge import protocol as P
from firmware_bridge.link import Link

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("args, words", [
    (["--control-hz", "300"], "--control-hz 300: expected a divisor of 1000000"),
    (["--zmp-law", "7", "1"], "--zmp-law 7 1: expected a single-support law 1..6 and a double 1..3"),
    (["--zmp-law", "1", "1"], "--zmp-law 1 1: the exoskeleton world walks single-support law 6"),
    (["--samples", "101"], "--samples 101: expected an even number >= 64"),
    (["--period", "0"], "--period 0.0: expected > 0"),
    (["--cuff-stiffness", "nan"], "--cuff-stiffness nan: expected > 0"),
    (["--cuff-damping", "-1"], "--cuff-damping -1.0: expected >= 0"),
    (["--cpr", "0"], "--cpr 0: expected > 0 counts per revolution"),
    (["--marker-stream", "exo"], "marker streams are named markers/NAME"),
])
def test_bad_arguments_are_one_line(args, words):
    with pytest.raises(ValueError) as err:
        parse_args("world", args)
    assert words in str(err.value) and "\n" not in str(err.value) and "process 'world'" in str(err.value)


def mcu_lab(tmp_path, robot: str | None, motors: str = '["hip_flexion_l", "knee_l", "hip_flexion_r", "knee_r"]',
            port: Path | None = None, ports=(5790, 5791), args: str = "[]") -> Path:
    """A lab config whose world process serves one MCU naming `robot` (None: no ``robot`` key)."""
    cfg = tmp_path / "lab.toml"
    cfg.write_text(textwrap.dedent(f"""
        [lab]
        name = "exo-world"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "world"
        module = "daq.devices.exo_world_sim"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["exo_mcu"]
        args = {args}
        [devices.exo_mcu]
        kind = "mcu"
        port = "{port or tmp_path / 'mcu'}"
        motors = {motors}
        watchdog_ms = 300
        """) + ("" if robot is None else f'robot = "{robot}"\n'))
    return cfg


def test_the_robot_is_the_one_its_mcu_names_and_a_wrong_one_is_one_line(tmp_path):
    lab = load_lab(mcu_lab(tmp_path, "exoskeleton"))
    assert world_robot(lab.source, lab.devices["exo_mcu"]) == load_robot("exoskeleton")
    lab = load_lab(mcu_lab(tmp_path, "jansen", motors='["left_shaft", "right_shaft"]'))
    with pytest.raises(ValueError) as err:
        world_robot(lab.source, lab.devices["exo_mcu"])
    assert str(err.value) == (f'{lab.source}: devices.exo_mcu.robot = "jansen": {configs.path("jansen.toml")} has no '
                              "[biped] table (the exoskeleton world walks a biped or exoskeleton config)")
    lab = load_lab(mcu_lab(tmp_path, None))
    with pytest.raises(ValueError, match=r"lab\.toml: devices\.exo_mcu\.robot: missing: .* robot = \"exoskeleton\""):
        world_robot(lab.source, lab.devices["exo_mcu"])
    with pytest.raises(ValueError, match="--markerset 'nope'"):
        build_world(parse_args("world", ["--markerset", "nope"]), load_robot("exoskeleton"))


@pytest.mark.parametrize("robot, motors, key, words", [
    ("exoskeletn", None, "devices.exo_mcu.robot", "no robot config 'exoskeletn'"),
    ("jansen", None, "devices.exo_mcu.motors", "expected the actuators of its robot config"),
    (None, None, "devices.exo_mcu.robot", "missing: the exoskeleton world walks the robot config its MCU names"),
])
def test_the_world_process_with_a_wrong_robot_exits_2_with_one_line(tmp_path, robot, motors, key, words):
    # the real process runtime (python -m controller.proc): a config mistake is exit status 2 and one log line
    cfg = mcu_lab(tmp_path, robot, **({"motors": motors} if motors else {}), ports=free_tcp_ports(2))
    run = subprocess.run([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "world"], cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-3000:]
    errors = [ln for ln in run.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and f"{cfg}: {key}" in errors[0] and words in errors[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr


# ------------------------------------------------------------------ a host commanding a motor through the pty

STRIDE_NS = 1_200_000_000  # the default nominal's stride, 1.2 s
TORQUE = 15.0              # N m on the left hip motor (3 A at 5 N m/A: within the MCU's 5 A default)


def test_a_commanded_motor_torque_deflects_its_cuff_by_hookes_law(tmp_path):
    # Truth: Hooke's law of the cuff. Averaged over whole strides (the rotor's inertial torque J q̈ averages
    # to zero over a periodic stride, the cuff's rate term too), the motor torque τ of a host's TORQUE
    # command is held by the cuff alone: mean(θ − q_j) grows by τ / k against the unpowered motor's.
    ports = free_tcp_ports(2)
    port = tmp_path / "mcu"
    cfg = mcu_lab(tmp_path, "exoskeleton", port=port, ports=ports, args='["--dropout", "0"]')
    sub = Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["encoder/hip_flexion_l", "sim/exo"])
    args = load_lab(cfg).process("world").args
    proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "world", *args],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    link = None
    enc, sim = [], []

    def world_ns() -> int:
        return int(enc[-1].sample_times("t_device")[-1]) if enc else 0

    def pump(until_ns: int, command=None) -> None:
        end = time.monotonic() + 120.0
        while world_ns() < until_ns:
            if proc.poll() is not None:
                pytest.fail(f"the world process exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
            assert time.monotonic() < end, f"the world did not reach {until_ns * 1e-9} s (at {world_ns() * 1e-9} s)"
            if command is not None:
                link.send(command)
            f = sub.recv(timeout_s=0.02)
            if f is not None:
                (enc if f.stream.startswith("encoder/") else sim).append(f)

    try:
        assert sub.wait_connected(120.0), "the world process did not come up"
        end = time.monotonic() + 60.0
        while not port.exists():
            assert time.monotonic() < end and proc.poll() is None, "the world's MCU port did not appear"
            time.sleep(0.05)
        link = Link(str(port), liveness_s=0.5).open()
        link.wait_caps(10.0)
        link.request(P.Config(watchdog_ms=5000))
        pump(3 * STRIDE_NS)                       # unpowered: three strides
        t_on = world_ns()
        push = P.Command((P.MotorCommand(P.MODE_TORQUE, TORQUE),) + (P.MotorCommand(P.MODE_IDLE, 0.0),) * 3)
        pump(t_on + 3 * STRIDE_NS, push)          # the left hip pushed: three strides
    finally:
        if link is not None:
            link.close()
        proc.terminate()
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        sub.close()
    t_e = np.concatenate([f.sample_times("t_device") for f in enc])
    e = np.vstack([f.data for f in enc])
    t_s = np.concatenate([f.sample_times("t_device") for f in sim])
    ch = list(sim[0].channels)
    q = np.vstack([f.data for f in sim])[:, ch.index("q:hip_flexion_l")]
    k = np.searchsorted(t_e, t_s).clip(0, t_e.size - 1)
    same = t_e[k] == t_s
    defl, current, t = e[k[same], 0] - q[same], e[k[same], 2], t_s[same]
    powered = np.flatnonzero(current > 1.0)
    assert powered.size > 100, "the commanded current never flowed"
    start = t[powered[0]] + 300_000_000          # the motor's torque on, the cuff settled
    off = (t >= t[powered[0]] - 2 * STRIDE_NS) & (t < t[powered[0]])
    on = (t >= start) & (t < start + 2 * STRIDE_NS)
    assert off.sum() > 150 and on.sum() > 150 and np.all(current[on] > 1.0) and np.all(current[off] == 0.0)
    assert defl[on].mean() - defl[off].mean() == pytest.approx(TORQUE / CUFF_STIFFNESS, rel=0.1)
