"""`walklab run` on the simulated Jansen world (configs/sim.toml with private ports and pty, a one-nominal
library built by `walklab synergies build`): a real supervisor, world, dynamics service, control loop and
recorder as subprocesses. Truths: the recording read with the mcap library and msgpack (not walklab's
reader): every stream the issue names, no seq gaps; the walker's distance against the no-slip distance of
its crank revolutions (gait metrics L/D); the plates' raw channels, read through dynamics.forceplate with
offsets taken while the walker stood off them, carry the walker's weight when it stands on them."""
from __future__ import annotations

import re
import socket
import time
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
from mcap.reader import make_reader

import configs
from controller.config import load
from controller.status import load_script
from daq.ports import on_free_ports
from dynamics.forceplate import Plate, process

REPO = Path(__file__).resolve().parents[2]
G = 9.81


@pytest.fixture(scope="module")
def robot(tmp_path_factory) -> tuple[Path, Path]:
    """configs/jansen_world.toml reduced to one nominal (0.2 m/s straight), and its library."""
    d = tmp_path_factory.mktemp("robot")
    text = configs.path("jansen_world.toml").read_text()
    text = re.sub(r"speeds = \[.*\]", "speeds = [0.2]", text)
    text = re.sub(r"turns = \[.*\]", "turns = [0.0]", text)
    cfg = d / "robot.toml"
    cfg.write_text(text)
    subprocess.run([sys.executable, "-m", "controller.cli", "synergies", "build", "--config", str(cfg), "--library",
                    str(d / "lib")], cwd=REPO, check=True, timeout=600, capture_output=True)
    return cfg, d / "lib"


def private_lab(tmp_path: Path, robot: tuple[Path, Path]) -> Path:
    """configs/sim.toml on free ports with its pty under tmp_path, the test's robot, the walker 0.3 m before FP1."""
    text = configs.path("sim.toml").read_text()
    text, _ = on_free_ports(text)
    text = text.replace("/tmp/walklab-sim/world-mcu", str(tmp_path / "pty" / "mcu"))
    text = text.replace('"--robot", "jansen_world"', f'"--robot", "{robot[0]}", "--library", "{robot[1]}"')
    text = text.replace('"--x0", "-1.0"', '"--x0", "-0.6"')
    cfg = tmp_path / "sim.toml"
    cfg.write_text(text)
    return cfg


def frames(path: Path) -> dict[str, list[dict]]:
    """Decoded messages by topic (docs/recording.md: one msgpack map per frame, buffers with dtype/shape)."""
    out: dict[str, list[dict]] = {}
    with open(path, "rb") as fh:
        for _, ch, m in make_reader(fh).iter_messages(log_time_order=False):
            doc = msgpack.unpackb(m.data, raw=False)
            doc["arrays"] = {b["name"]: np.frombuffer(b["data"], dtype=np.dtype(b["dtype"])).reshape(b["shape"])
                             for b in doc["buffers"]}
            out.setdefault(ch.topic, []).append(doc)
    return out


def samples(docs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(t_device of each sample ns, data (N, C)) of a sampled stream's frames."""
    t, d = [], []
    for doc in docs:
        a = doc["arrays"]["data"]
        t.append(doc["t_device"] + np.round(np.arange(a.shape[0]) * 1e9 / doc["rate_hz"]).astype(np.int64))
        d.append(a)
    return np.concatenate(t), np.concatenate(d)


def test_walklab_run_walks_the_world_records_it_and_summarises(tmp_path, robot):
    script = tmp_path / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'stand'\nspeed = 0.0\n\n"
                      "[[command]]\nat = 2.0\nlabel = 'walk'\nspeed = 0.2\n\n"
                      "[[command]]\nat = 17.0\nlabel = 'stop'\nspeed = 0.0\n")
    cfg = private_lab(tmp_path, robot)
    rec = tmp_path / "s.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "19", "--record",
                          str(rec), "--script", str(script)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    f = frames(rec)
    for stream in ("forceplate/FP1", "forceplate/FP2", "markers/walker", "encoder/left_shaft", "encoder/right_shaft",
                   "dynamics/grf", "controller/state", "controller/events", "sim/walker"):
        assert stream in f, sorted(f)
    for stream, docs in f.items():
        seq = np.array([d["seq"] for d in docs])
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + seq.size)), stream  # no seq gap
    # the walker walked, as far as its cranks turned: no-slip L/D per revolution (within slip)
    ch = list(f["sim/walker"][0]["channels"])
    t_sim, sim = samples(f["sim/walker"])
    advance = f["sim/walker"][0]["meta"]["advance_per_cycle_m"]
    distance = sim[-1, ch.index("x")] - sim[0, ch.index("x")]
    revs = (sim[-1, [ch.index("s_L"), ch.index("s_R")]] - sim[0, [ch.index("s_L"), ch.index("s_R")]]).mean() / (2 * np.pi)
    assert distance > 1.0
    assert distance == pytest.approx(revs * advance, rel=0.2)
    m = re.search(r"distance walked: ([-0-9.]+) m", run.stdout)
    assert m and float(m.group(1)) == pytest.approx(distance, abs=0.05)
    assert "recording: " + str(rec.resolve()) in run.stdout
    # energy per cycle: the dynamics service's revolutions as recorded, per shaft (net, absolute, J); a
    # revolution is 0.9 m of walking, so this run completes at most one or two
    shown = 0
    for shaft in ("left_shaft", "right_shaft"):
        cycles = np.array([d["arrays"]["data"][0, :3] for d in f.get("dynamics/energy", [])
                           if d["meta"]["shaft"] == shaft]).reshape(-1, 3)
        m = re.search(rf"energy per cycle, {shaft}: ([-0-9.]+) J net, ([-0-9.]+) J absolute, mean over (\d+)", run.stdout)
        assert (m is None) == (len(cycles) == 0), run.stdout
        if m:
            shown += 1
            assert int(m.group(3)) == len(cycles)
            assert float(m.group(1)) == pytest.approx(cycles[:, 0].mean(), abs=0.006)
            assert float(m.group(2)) == pytest.approx(cycles[:, 2].mean(), abs=0.006) and cycles[:, 2].min() > 0
    assert shown or "energy per cycle: no completed cycle" in run.stdout
    # plates: offsets from the first second (walker off the plates), then Fz of FP1 + FP2 while every foot
    # is on them (chassis x in [0.48, 0.72] m: feet within 0.478 m of it) averages the weight
    lab = load(cfg)
    total = None
    for name in ("FP1", "FP2"):
        dev = lab.devices[name]
        plate = Plate(type=dev.type, corners=dev.corners, origin=dev.origin, cal_matrix=dev.cal_matrix, name=name)
        t_p, raw = samples(f[f"forceplate/{name}"])
        sig = process(plate, raw, offset=raw[:1000].mean(axis=0))
        fz = np.interp(t_sim, t_p, sig.force[:, 2])
        total = fz if total is None else total + fz
    x = sim[:, ch.index("x")]
    on = (x > 0.48) & (x < 0.72)
    assert on.sum() > 50
    weight = f["sim/walker"][0]["meta"]["mass_kg"] * G
    assert total[on].mean() == pytest.approx(weight, rel=0.05)
    # encoders: the shaft angle in whole counts of the MCU (4096 per revolution), within one count of the truth
    t_e, enc = samples(f["encoder/left_shaft"])
    count = 2 * np.pi / 4096
    np.testing.assert_allclose(enc[:, 0] / count, np.round(enc[:, 0] / count), atol=1e-6)
    k = np.searchsorted(t_e, t_sim).clip(0, t_e.size - 1)
    same = t_e[k] == t_sim
    assert same.sum() > 100
    assert np.abs(enc[k[same], 0] - sim[same, ch.index("s_L")]).max() <= count
    # markers: 1 mm noise on the true chassis corner, occlusions NaN in positions and residuals
    docs = f["markers/walker"]
    labels = list(docs[0]["channels"])
    t_m, pos = samples(docs)
    res = np.concatenate([d["arrays"]["residual"] for d in docs])
    assert np.array_equal(np.isnan(pos[:, 0::3]), np.isnan(res))
    assert np.isnan(res).any() and not np.isnan(res).all()
    k = np.searchsorted(t_m, t_sim).clip(0, t_m.size - 1)
    same = (t_m[k] == t_sim) & ~np.isnan(pos[k, labels.index("chassis_FL:x")])
    front = sim[same, ch.index("x")] + 0.3 * np.cos(sim[same, ch.index("pitch")])
    err = pos[k[same], labels.index("chassis_FL:x")] - front
    assert same.sum() > 100 and abs(err.mean()) < 0.5e-3 and 0.5e-3 < err.std() < 2e-3


def test_script_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[command]]\nat = 1.0\n")
    with pytest.raises(ValueError, match=r"command\[0\]: missing 'speed'"):
        load_script(bad)
    bad.write_text("[[command]]\nat = -1.0\nspeed = 0.2\n")
    with pytest.raises(ValueError, match="at >= 0 s"):
        load_script(bad)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_script(tmp_path / "none.toml")
    out = subprocess.run([sys.executable, "-m", "controller.cli", "run", "--duration", "-3"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("walklab run: error: --duration")
    # a script for a lab without a control loop: refused before any process starts (none left bound)
    text = configs.path("sim_plates.toml").read_text()
    text, _ = on_free_ports(text)
    free = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", text)}
    plates = tmp_path / "plates.toml"
    plates.write_text(text)
    out = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(plates), "--script",
                          str(configs.path("walk_script.toml")), "--duration", "1"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("walklab run: error: ")
    assert "controller.loop" in out.stderr
    import psutil

    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(plates) in " ".join(p.info["cmdline"] or [])]
    assert not left  # no supervisor was started (it would outlive the refusal)
    for port in free:  # nothing bound
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", port))


@pytest.mark.parametrize("name", ["lab-jansen.toml", "lab-forceplates.toml"])
def test_live_lab_templates_are_valid(name):
    # the README's live-mode templates: they load, their modules import, the loop's robot drives the MCU's motors
    from controller import config
    from controller.loop import parse_args
    from controller.synergies.robot import load_robot

    lab = config.load(configs.path(name))
    config.check_processes(lab)
    plates = [d for d in lab.devices.values() if d.kind == "forceplate"]
    assert len(plates) == 2 and all(d.source.startswith("/dev/") for d in plates)
    for p in lab.processes:
        if p.module == "controller.loop":
            mcu = [lab.devices[n] for n in p.devices if lab.devices[n].kind == "mcu"][0]
            assert tuple(mcu.motors) == load_robot(parse_args(p.name, p.args).robot).actuators
            assert mcu.port.startswith("/dev/")


def test_live_status_renders_what_the_bus_says(tmp_path, robot):
    # The status table (a terminal) and the plain line (a log) from real frames on a real socket: a
    # process's health, the world's truth (1 m walked), the dynamics service's energy of a revolution of
    # each shaft, a control-loop safety event and an operator request.
    import io
    import math

    from rich.console import Console

    from controller.status import Monitor
    from daq.bus import Publisher

    lab = load(private_lab(tmp_path, robot))
    world = next(p for p in lab.processes if p.name == "world")
    mon = Monitor(lab)
    pub = Publisher(world.bind)
    try:
        assert pub.wait_for_subscribers(1, 30.0)
        t = np.arange(400) / 100.0                    # 4 s at 100 Hz
        s = np.pi * t                                  # two revolutions of each shaft
        power = np.full(400, 1.0)                      # 1 W on each shaft: 2 J per revolution (2 s)
        data = np.column_stack([-1.0 + 0.25 * t, np.full(400, 0.6), np.zeros(400), np.full(400, 0.25), s, s,
                                np.full(400, np.pi), np.full(400, np.pi), power / np.pi, power / np.pi, power, power])
        for k in range(0, 400, 10):
            pub.publish("sim/walker", data[k:k + 10], kind="sim", rate_hz=100.0,
                        channels=["x", "z", "pitch", "vx", "s_L", "s_R", "omega_L", "omega_R", "tau_L", "tau_R",
                                  "power_L", "power_R"], units=["m"] * 12, meta={"advance_per_cycle_m": 0.5})
        for shaft, row in (("left_shaft", [2.0, 2.25, 2.5, 2.0]), ("right_shaft", [1.5, 2.25, 3.0, 2.0])):
            pub.publish("dynamics/energy", np.array([row]), kind="energy", rate_hz=0.0,
                        channels=["net", "positive", "absolute", "period"], units=["J", "J", "J", "s"],
                        meta={"shaft": shaft, "cycle": 1})
        for ev in ("crash", "restart"):  # as controller.supervisor publishes them
            pub.publish("events/supervisor", np.zeros((1, 0)), kind="event", rate_hz=0.0, channels=(), units=(),
                        meta={"event": ev, "process": "world", "pid": 2})
        for cause in ("request", "stale"):
            pub.publish("controller/events", np.array([[0.0]]), kind="event", rate_hz=0.0, channels=["latched"],
                        units=["1"], meta={"cause": cause, "detail": f"{cause} detail"})
        pub.publish("health/world", np.array([[200.0, 0.0]]), kind="health", rate_hz=1.0,
                    channels=["forceplate/FP1:sent_per_s", "forceplate/FP1:sent"], units=["1/s", "1"],
                    meta={"process": "world", "pid": 1, "uptime_s": 1.0, "state": "running"})
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and not (len(mon.cycles) == 2 and mon.restarts and mon.safety and "world" in mon.state):
            mon.poll(0.1)
    finally:
        pub.close()
        mon.close()
    assert mon.distance() == pytest.approx(0.9975)          # x from -1.0 to -1.0 + 0.25 * 3.99
    assert mon.expected_distance() == pytest.approx(3.99 / 2 * 0.5)
    assert mon.cycles == {"left_shaft": [(2.0, 2.5)], "right_shaft": [(1.5, 3.0)]}
    assert mon.restarts == 1 and {"supervisor crash: world", "supervisor restart: world"} <= set(mon.events)
    assert "  restarts: 1\n" in mon.summary(4.0, None, tmp_path / "log", 0)
    out = Console(file=io.StringIO(), force_terminal=True, width=120, record=True)
    out.print(mon.table(4.0, 20.0))
    text = out.export_text()
    for words in ("forceplate/FP1", "200", "1.00 m (no-slip 1.00 m)", "left_shaft 2.00 J net, 2.50 J absolute",
                  "right_shaft 1.50 J net, 3.00 J absolute", "safety events: 1", "request"):
        assert words in text, text
    assert "distance 1.00 m" in mon.line(4.0) and "1 safety event(s)" in mon.line(4.0)
    assert not math.isnan(mon.distance())
