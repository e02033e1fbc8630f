"""Faults on the device link and on the bus during a whole `walklab run --record` of the simulated Jansen world
(issue 13, part 6), each bounded in time:

1. serial corruption and drops between the control loop and the walker's MCU: a `SerialWire` (a real pty
   relay, tests/faults/serial_wire.py) between the world's virtual MCU and the loop's port corrupts one
   data byte of some frames and drops others, for a few seconds — the loop counts every damaged frame
   (``link/rejected``, ``link/lost_frames`` in its health frames) and records ``link_errors`` events;
2. the MCU unplugged mid-run (the loop's port path vanishes, its pty closes) for longer than the MCU's
   watchdog, then plugged back — the loop records ``link_lost``, goes stale (torque off; the MCU's own
   watchdog trips too), and on the new port records ``link_back``, sets the MCU up again and walks on
   (configs/sim.toml's loop has ``--reset-on-latch``: a later trip of the starved virtual MCU is reset);
3. malformed messages on the live bus: a lab process (tests/faults/bus_junk.py) sends four kinds of
   broken message on four topics the lab's processes read — every subscriber counts them
   (``bus:malformed``), the recorder records them as drops events, nothing crashes.

The run goes on through all of them: one loop process (no restart), no seq gap in any recorded stream.
Truth: the wire's and the junk process's own counts, the MCU's counters (the world's health frames), the
motor current the world measures, and the recording read with the `mcap` library.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from controller.config import load
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports

from ..controller.test_run_sim import REPO, frames, private_lab, robot  # noqa: F401  (robot: a fixture)
from .bus_junk import KINDS
from .serial_wire import SerialWire

TOPICS = ("forceplate/FP1", "encoder/left_shaft", "controller/request", "health/world")
ROUNDS = 20
#: Who reads each junk topic: process -> the topic, one of its streams. A stream is counted per stream once
#: the subscriber knows it (a valid frame seen): the loop's bus subscriber never saw a valid request (the
#: script's reach it at its operator endpoint), so its junk is in its total only (None).
READERS = {"dynamics": "forceplate/FP1", "torques": "encoder/left_shaft", "loop": None, "healthmon": "health/world"}
#: The junk process's subscribers: healthmon, dynamics, torques, loop, supervisor (health), recorder, the
#: run's status, and this test's own.
SUBSCRIBERS = 8


class Watch:
    """The test's own subscriber: the loop's events, state and health, the world's encoder and health,
    the junk process's health."""

    def __init__(self, lab) -> None:
        eps = [lab.process(n).bind for n in ("loop", "world", "junk", "dynamics", "torques", "healthmon")]
        self.sub = Subscriber(eps, ["controller/events", "controller/state", "encoder/left_shaft", "health/*"],
                              expect=())
        self.events: list = []     # (t_recv, cause, detail)
        self.health: dict[str, dict] = {}
        self.state_of: dict[str, str] = {}
        self.rows: list = []       # (t_recv, walking, tau_left)
        self.current: list = []    # (t_recv, max |current| A of the left motor in the frame)

    def drain(self) -> None:
        while (f := self.sub.recv(timeout_s=0)) is not None:
            if f.stream == "controller/events":
                self.events.append((f.t_recv, f.meta["cause"], f.meta["detail"]))
            elif f.stream == "controller/state":
                tau = f.data[:, list(f.channels).index("left_shaft/tau")]
                self.rows += [(f.t_recv, w, t) for w, t in zip(f.data[:, 0], tau)]
            elif f.stream == "encoder/left_shaft":
                self.current.append((f.t_recv, float(np.abs(f.data[:, 2]).max())))
            else:
                name = f.stream[len("health/"):]
                self.health[name] = parse_health(f)
                self.state_of[name] = str((f.meta or {}).get("state"))

    def value(self, process: str, subject: str, field: str = "count") -> float:
        return self.health.get(process, {}).get(subject, {}).get(field, 0.0)

    def wait(self, what: str, predicate, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            if predicate():
                return
            assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}; events " \
                                                f"{[e[1:] for e in self.events[-8:]]}"
            time.sleep(0.05)

    def idle(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.drain()
            time.sleep(0.02)

    def walking_since(self, t_ns: int) -> bool:
        """The loop commands torque and the MCU's motor draws current, after t_ns (MCU not latched)."""
        return sum(1 for t, w, tau in self.rows if t > t_ns and w == 1 and tau != 0) > 100 and \
            sum(1 for t, a in self.current if t > t_ns and a > 0.01) > 20


def lab_with_wire_and_junk(tmp, robot) -> tuple:  # noqa: F811
    """configs/sim.toml privately (test_run_sim.private_lab), the world's MCU at pty/world-mcu, the loop's
    port (the mcu device) at pty/mcu for the wire, and the junk process (it starts when the file `go` exists)."""
    cfg = private_lab(tmp, robot)
    lab = load(cfg)
    host = lab.devices["walker_mcu"].port
    device = str(tmp / "pty" / "world-mcu")
    text = cfg.read_text()
    world_args = 'args = ["--control-hz", "500"'
    assert text.count(world_args) == 1
    text = text.replace(world_args, f'args = ["--port", "{device}", "--control-hz", "500"')
    topics = ", ".join(f'"{t}"' for t in TOPICS)
    go = tmp / "junk.go"
    text += (f'\n[[processes]]\nname = "junk"\nmodule = "tests.faults.bus_junk"\n'
             f'bind = "tcp://127.0.0.1:{free_tcp_ports(1)[0]}"\nrestart = "never"\n'
             f'args = ["--subscribers", "{SUBSCRIBERS}", "--go", "{go}", "--rounds", "{ROUNDS}", "--topics", {topics}]\n')
    cfg.write_text(text)
    return cfg, device, host, go


@pytest.fixture(scope="module")
def link_run(tmp_path_factory, robot):  # noqa: F811
    tmp = tmp_path_factory.mktemp("linkfaults")
    script = tmp / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.2\n")
    cfg, device, host, go = lab_with_wire_and_junk(tmp, robot)
    lab = load(cfg)
    rec = tmp / "s.mcap"
    run = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "300", "--record",
                            str(rec), "--script", str(script)], cwd=REPO, stdout=open(tmp / "run.log", "w"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    watch = Watch(lab)
    wire = SerialWire(device, host, seed=3)
    out: dict = {}
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(device):
            assert run.poll() is None and time.monotonic() < deadline, (tmp / "run.log").read_text()[-3000:]
            time.sleep(0.1)
        wire.start()
        watch.wait("the loop walking through the wire", lambda: watch.walking_since(0), 300)
        # 1. corruption and drops, device -> host, for 3 s
        with wire.lock:
            wire.corrupt_rate, wire.drop_rate = 0.05, 0.05
        watch.idle(3.0)
        with wire.lock:
            wire.corrupt_rate = wire.drop_rate = 0.0
            out["corrupted"], out["dropped"], out["passed"] = wire.corrupted, wire.dropped, wire.passed
        want = (out["corrupted"], out["corrupted"] + out["dropped"])
        watch.wait(f"the loop's link counters at {want}", lambda: (
            watch.value("loop", "link/rejected"), watch.value("loop", "link/lost_frames")) == want, 60)
        # 2. unplugged for 1.5 s (the MCU's watchdog is 300 ms), then back
        trips = watch.value("world", "mcu/watchdog_trips")
        out["unplug_ns"] = time.monotonic_ns()
        wire.unplug()
        watch.wait("link_lost", lambda: any(c == "link_lost" for _, c, _ in watch.events), 30)
        watch.wait("the loop's state 'disconnected'", lambda: watch.state_of.get("loop") == "disconnected", 30)
        watch.wait("the MCU's watchdog", lambda: watch.value("world", "mcu/watchdog_trips") > trips, 30)
        watch.idle(max(0.0, 1.5 - (time.monotonic_ns() - out["unplug_ns"]) * 1e-9))
        out["plug_ns"] = time.monotonic_ns()
        wire.plug()
        watch.wait("link_back", lambda: any(c == "link_back" for _, c, _ in watch.events), 60)
        watch.wait("the loop walking again, the MCU's motor drawing current",
                   lambda: watch.walking_since(out["plug_ns"]), 120)
        out["back_ns"] = time.monotonic_ns()
        # 3. the junk (now: every subscriber has long been connected), every round out, every reader has counted it
        go.touch()
        watch.wait("the junk process's rounds", lambda: watch.value("junk", "junk/done") == 1, 180)
        out["junk_sent"] = watch.value("junk", "junk/sent")
        per_topic = ROUNDS * len(KINDS)
        watch.wait(f"every reader's malformed count ({per_topic}), have "
                   f"{ {p: watch.value(p, 'bus', 'malformed') for p in READERS} }, junk {watch.health.get('junk')}",
                   lambda: all(
            watch.value(p, "bus", "malformed") >= per_topic for p in READERS), 60)
        watch.idle(2.0)
        out["events"] = list(watch.events)
        run.send_signal(signal.SIGINT)
        out["status"] = run.wait(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        watch.sub.close()
        wire.close()
    out.update(frames=frames(rec), log=(tmp / "run.log").read_text())
    return out


def last_health(f: dict, process: str) -> dict:
    """The process's last recorded health frame before it stopped, parsed ({subject: {field: value}})."""
    for d in reversed(f[f"health/{process}"]):
        ch = list(d["channels"])
        row = d["arrays"]["data"][0]
        out: dict = {}
        for c, v in zip(ch, row):
            subject, _, fld = c.rpartition(":")
            out.setdefault(subject, {})[fld] = float(v)
        return out
    raise AssertionError(f"no health/{process} frame recorded")


def test_the_run_went_on_through_every_fault(link_run):
    assert link_run["status"] == 0, link_run["log"][-3000:]
    f = link_run["frames"]
    bad = [d["meta"] for d in f["events/supervisor"] if d["meta"].get("event") in ("crash", "exit", "restart", "failed")]
    assert not bad, bad
    for stream, docs in f.items():
        seq = np.array([d["seq"] for d in docs])
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + seq.size)), stream


def test_serial_corruption_and_drops_are_each_counted_by_the_loop_and_recorded(link_run):
    c, d = link_run["corrupted"], link_run["dropped"]
    assert c > 20 and d > 20 and link_run["passed"] > 1000
    h = last_health(link_run["frames"], "loop")
    assert h["link/rejected"]["count"] == c          # each corrupted frame rejected, once
    assert h["link/lost_frames"]["count"] == c + d   # and every frame that did not arrive intact is a gap
    assert h["link/crc_failures"]["count"] <= c
    events = [x["meta"] for x in link_run["frames"]["controller/events"]]
    assert any(e["cause"] == "link_errors" for e in events), events


def test_an_unplugged_mcu_is_recorded_and_the_walker_walks_on_after_the_replug(link_run):
    f = link_run["frames"]
    causes = [(d["t"], d["meta"]["cause"]) for d in f["controller/events"]]
    lost = [t for t, c in causes if c == "link_lost"]
    back = [t for t, c in causes if c == "link_back"]
    assert len(lost) == 1 and len(back) == 1 and lost[0] < back[0], causes
    assert lost[0] >= link_run["unplug_ns"] and back[0] >= link_run["plug_ns"]
    # stale once the port was gone (torque off; it may be noticed before the link's reader notices the loss),
    # or already stale when it went (a loaded machine: the loop latched stale just before, and a latch is
    # one event, not one per cycle)
    before = [c for t, c in causes if c in ("stale", "fresh") and t < link_run["unplug_ns"]]
    assert any(c == "stale" and link_run["unplug_ns"] <= t < back[0] for t, c in causes) or \
        (before and before[-1] == "stale"), causes
    h = last_health(f, "loop")
    assert h["link/disconnects"]["count"] == 1 and h["link/reconnects"]["count"] >= 1
    assert last_health(f, "world")["mcu/watchdog_trips"]["count"] >= 1
    # the walker advanced after the loop was back (sim/walker: the world's truth)
    docs = f["sim/walker"]
    ch = list(docs[0]["channels"])
    x = [(d["t"], d["arrays"]["data"][-1, ch.index("x")]) for d in docs]
    after = [v for t, v in x if t > link_run["back_ns"]]
    assert after and after[-1] - after[0] > 0.05, (after[:1], after[-1:])


def test_malformed_frames_on_the_live_bus_are_counted_by_every_reader(link_run):
    f = link_run["frames"]
    per_topic = ROUNDS * len(KINDS)
    assert link_run["junk_sent"] == per_topic * len(TOPICS)
    for process, topic in READERS.items():
        h = last_health(f, process)
        assert h["bus"]["malformed"] == per_topic, (process, h["bus"])
        if topic is not None:
            assert h[topic]["malformed"] == per_topic, (process, topic, h[topic])
    # the recorder: a drops event per stream it knows, with the count
    drops = {}
    for d in f["events/recorder"]:
        m = d["meta"]
        if m.get("event") == "drops":
            drops[m["stream"]] = m["malformed"]
    for topic in ("forceplate/FP1", "encoder/left_shaft", "health/world"):
        assert drops.get(topic) == per_topic, drops
