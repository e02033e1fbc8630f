"""daq.devices.world_sim: its arguments (every bad value is one line naming the option; the process then exits
2 and is not restarted), and the world process with a type-1 plate, its COP against the world's own contact
points (the feet, read from its markers with noise off). The whole lab runs in tests/controller/test_run_sim.py."""
import pytest

from daq.devices.world_sim import parse_args


@pytest.mark.parametrize("args, words", [
    (["--control-hz", "300"], "--control-hz 300: expected a divisor of 1000000"),
    (["--stiffness", "0"], "--stiffness 0.0: expected > 0"),
    (["--mu", "-0.1"], "--mu -0.1: expected >= 0"),
    (["--dropout", "1.5"], "--dropout 1.5: expected 0 <= p < 1"),
    (["--marker-stream", "walker"], "marker streams are named markers/NAME"),
    (["--plate-noise-n", "nan"], "--plate-noise-n nan: expected >= 0"),
])
def test_bad_arguments_are_one_line(args, words):
    with pytest.raises(ValueError) as err:
        parse_args("world", args)
    assert words in str(err.value) and "\n" not in str(err.value) and "process 'world'" in str(err.value)



# ------------------------------------------------------------------ the world process and a type-1 plate

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from controller.config import load as load_lab  # noqa: E402
from daq.bus import Subscriber  # noqa: E402
from daq.ports import free_tcp_ports  # noqa: E402
from dynamics.forceplate import Plate, process, zero_offset  # noqa: E402
from firmware_bridge import protocol as P  # noqa: E402
from firmware_bridge.link import Link  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
#: a narrow type-1 plate under the left feet (y = +0.2 m): most of the time one foot at most is on it
CORNERS = [[0.15, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.4, 0.0], [0.15, 0.4, 0.0]]


def test_a_type1_plates_cop_is_where_the_world_puts_the_foot(tmp_path):
    # Truth: the world's own contact points (the feet markers, noise and occlusions off, sampled at the
    # plate's instants). Where exactly one foot is inside the plate and loaded, the COP the plate's raw
    # channels give (offsets zeroed while the walker stood before it) is that foot's ground point:
    # COP_x = x + δ F_x / F_z with the foot δ = −z below the surface (a few mm), COP_y = y.
    ports = free_tcp_ports(2)
    port = tmp_path / "mcu"
    cfg = tmp_path / "lab.toml"
    cfg.write_text(textwrap.dedent(f"""
        [lab]
        name = "world-type1"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "world"
        module = "daq.devices.world_sim"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["FP1", "walker_mcu"]
        args = ["--x0", "-0.8", "--marker-noise-mm", "0", "--dropout", "0", "--plate-offset-n", "5",
                "--plate-noise-n", "0.5"]
        [devices.FP1]
        kind = "forceplate"
        type = 1
        source = "sim"
        rate_hz = 1000.0
        block = 5
        corners = {CORNERS}
        origin = [0.0, 0.0, -0.04]
        force_range_n = 5000.0
        moment_range_nm = 1000.0
        [devices.walker_mcu]
        kind = "mcu"
        port = "{port}"
        motors = ["left_shaft", "right_shaft"]
        watchdog_ms = 300
        """))
    sub = Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["forceplate/FP1", "markers/walker"])
    args = load_lab(cfg).process("world").args
    proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "world", *args],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    link = None
    got: dict[str, list] = {"forceplate/FP1": [], "markers/walker": []}
    try:
        assert sub.wait_connected(60.0), "the world process did not come up"
        end = time.monotonic() + 60.0
        while not port.exists():
            assert time.monotonic() < end and proc.poll() is None, "the world's MCU port did not appear"
            time.sleep(0.05)
        link = Link(str(port), liveness_s=0.5).open()
        link.wait_caps(10.0)
        # the MCU's own speed loop turns both shafts at 3 rad/s: the walker crosses the plate in ~3 s (a
        # 5 s watchdog: this test's commands may pause on a loaded machine, and a trip would stop the walk)
        link.request(P.Config(kp=4.0, ki=8.0, kd=0.0, watchdog_ms=5000))
        walk = P.Command(tuple(P.MotorCommand(P.MODE_VELOCITY, 3.0) for _ in range(2)))
        end = time.monotonic() + 120.0
        x_chassis = -1.0
        while x_chassis < 0.7:  # every foot (within 0.48 m of the crank centre) past the plate
            if proc.poll() is not None:
                pytest.fail(f"the world process exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
            assert time.monotonic() < end, f"the walker did not cross (x = {x_chassis})"
            link.send(walk)
            f = sub.recv(timeout_s=0.02)
            if f is not None:
                got[f.stream].append(f)
                if f.stream == "markers/walker":
                    x_chassis = float(f.data[-1, 0] + f.data[-1, 6]) / 2  # chassis_FL:x, chassis_BL:x
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
    plate = Plate(type=1, corners=CORNERS, origin=[0.0, 0.0, -0.04], name="FP1")
    t_p = np.concatenate([f.sample_times() for f in got["forceplate/FP1"]])
    raw = np.vstack([f.data for f in got["forceplate/FP1"]])
    t_m = np.concatenate([f.sample_times() for f in got["markers/walker"]])
    ch = list(got["markers/walker"][0].channels)
    mk = np.vstack([f.data for f in got["markers/walker"]])
    assert np.array_equal(t_p, np.unique(t_p))
    x_feet = mk[:, [i for i, c in enumerate(ch) if c.startswith("foot_") and c.endswith(":x")]]
    k0 = np.searchsorted(t_p, t_m[np.flatnonzero(x_feet.max(axis=1) >= 0.0)[0]])
    assert k0 >= 200, k0  # the zeroing window: no foot on the plate yet
    sig = process(plate, raw, threshold=20.0, offset=zero_offset(plate, raw, slice(0, k0)))
    feet = [c[:-2] for c in ch if c.startswith("foot_") and c.endswith(":x")]
    x = np.column_stack([mk[:, ch.index(f"{n}:x")] for n in feet])
    y = np.column_stack([mk[:, ch.index(f"{n}:y")] for n in feet])
    z = np.column_stack([mk[:, ch.index(f"{n}:z")] for n in feet])
    inside = (x >= 0.0) & (x <= 0.15) & (y >= 0.0) & (y <= 0.4)
    k = np.searchsorted(t_p, t_m)
    common = (k < t_p.size) & (t_p[np.minimum(k, t_p.size - 1)] == t_m)  # the same world samples
    one = common & (inside.sum(axis=1) == 1)
    one[one] &= sig.valid[k[one]]
    assert one.sum() > 50, one.sum()  # feet crossed the plate, one at a time
    leg = np.argmax(inside[one], axis=1)
    rows = np.flatnonzero(one)
    fx, fz = sig.force[k[one], 0], sig.force[k[one], 2]
    cop = sig.cop[k[one]]
    xt = x[rows, leg] - z[rows, leg] * fx / fz
    np.testing.assert_allclose(cop[:, 0], xt, atol=4e-3)  # COP noise σ 0.5 mm (1.8 mm max seen)
    np.testing.assert_allclose(cop[:, 1], y[rows, leg], atol=4e-3)
