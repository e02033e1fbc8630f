"""Recorder faults with real processes: kill -9 mid-recording then `walklab sessions recover`, and a
full disk (the kernel's file size limit, RLIMIT_FSIZE, which fails writes exactly as a full file
system does for this file: a short write, then an error)."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from mcap.reader import make_reader

from daq.bus import Publisher, Subscriber
from daq.labload import LoadPublisher, lab_streams
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, **kw)


def read_mcap(path: Path) -> list[dict]:
    """Every message of a file, decoded with msgpack alone (docs/recording.md), in file order."""
    with open(path, "rb") as fh:
        out = []
        for _, ch, m in make_reader(fh).iter_messages(log_time_order=False):
            doc = msgpack.unpackb(m.data, raw=False)
            assert doc["stream"] == ch.topic
            out.append(doc)
    return out


def _raise_priority() -> None:
    """In the recorder's child before exec: SCHED_FIFO 10 when permitted (as a lab's ``realtime`` gives
    it; the threads it starts inherit it), else niceness -10, else as it is."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except OSError:
        try:
            os.nice(-10)
        except OSError:
            pass


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill9_then_recover_keeps_every_frame_older_than_100ms(tmp_path, seed):
    out = tmp_path / "killed.mcap"
    with Publisher("tcp://127.0.0.1:*") as pub:
        # The bound is a property of a recorder that gets the CPU when its chunk is due. On this shared
        # 2-core VM (load averages of 7-12 from other jobs) a normal-priority process is at times not
        # scheduled for 150+ ms (seen: the file ended 197 ms before the kill); a lab runs its recorder
        # with priority, and so does this test when it may (root; otherwise as it is).
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "record", "--quiet", "--connect",
                                 pub.endpoint, "-o", str(out)], cwd=REPO, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_raise_priority)
        assert pub.wait_for_subscribers(1, 60), "the recorder never subscribed"
        load = LoadPublisher(pub, lab_streams(), keep=True)
        done = threading.Event()
        thread = threading.Thread(target=load.run, args=(120.0, done.is_set))
        thread.start()
        try:
            # the kill lands at a random moment of the recording (seeded: reproducible)
            done.wait(2.0 + 4.0 * np.random.default_rng(seed).random())
            t_kill = time.monotonic_ns()
            proc.kill()
            proc.wait(30)
        finally:
            done.set()
            thread.join(30)
    assert proc.returncode == -signal.SIGKILL
    info = cli("sessions", "info", str(out))
    assert info.returncode == 0 and "CUT SHORT" in info.stdout, info.stderr
    rec = cli("sessions", "recover", str(out))
    assert rec.returncode == 0, rec.stderr
    got = {(d["stream"], d["seq"]): d for d in read_mcap(out)}  # the recovered file, read by the mcap library
    with open(out, "rb") as fh:
        assert make_reader(fh).get_summary() is not None  # recovered: indexed again
    # The file's crash window: each stream's frames are in the file from seq 0 without a hole (frames
    # reach the recorder in publish order), up to one the recorder received within 100 ms of the kill.
    by_stream: dict[str, list[dict]] = {}
    for d in got.values():
        by_stream.setdefault(d["stream"], []).append(d)
    for name, docs in by_stream.items():
        seqs = sorted(d["seq"] for d in docs)
        assert seqs == list(range(len(seqs))), f"{name}: a hole in the recovered frames"
    # The crash's reference time: the kill, or the last frame published before it if the publisher (this
    # process's thread) had stopped earlier — a stalled machine stalls it too (CI: the file ended 298 ms
    # before the kill), and a recorder cannot lose what was never sent.
    t_ref = min(t_kill, max(f.t_pub for f in load.published if f.t_pub <= t_kill))
    last_recv = max(d["t_recv"] for d in got.values())
    assert last_recv >= t_ref - 100_000_000, (f"the file ends {(t_ref - last_recv) / 1e6:.0f} ms before the last "
                                              f"frame published before the kill ({(t_kill - t_ref) / 1e6:.0f} ms "
                                              "before the kill)")
    # And by publish time: every frame published more than 100 ms before that, plus however far the
    # recorder was behind the publisher then (a starved recorder on a loaded machine reads late;
    # measured from the frames' own stamps, printed), is there.
    tail = sorted(got.values(), key=lambda d: d["t_recv"])[-200:]
    lag = max(d["t_recv"] - d["t_pub"] for d in tail)
    print(f"recorder receive lag before the kill: {lag / 1e6:.1f} ms; last publish {(t_kill - t_ref) / 1e6:.1f} ms "
          "before the kill")
    old = [f for f in load.published if f.t_pub < t_ref - 100_000_000 - lag]
    assert len(old) > 1400  # more than a second of lab load before the kill
    missing = [(f.stream, f.seq) for f in old if (f.stream, f.seq) not in got]
    assert not missing, f"{len(missing)} frames older than 100 ms (+{lag / 1e6:.0f} ms lag) lost, first {missing[:3]}"
    for f in old:
        d = got[(f.stream, f.seq)]
        assert d["t"] == f.t and d["buffers"][0]["data"] == np.ascontiguousarray(f.data).tobytes()
    # nothing invented: every recovered frame was published
    published = {(f.stream, f.seq) for f in load.published}
    assert set(got) <= published


def _limited(limit_bytes: int):
    def setup() -> None:  # in the child, before exec: a file size limit, and EFBIG instead of SIGXFSZ
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return setup


def _lab(tmp_path: Path, out: Path, recorder_args: list[str]) -> Path:
    sup, load, rec = free_tcp_ports(3)
    cfg = tmp_path / "lab.toml"
    args = ", ".join(f'"{a}"' for a in ["-o", str(out), *recorder_args])
    cfg.write_text(f"""
[lab]
name = "diskfull"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "load"
module = "daq.labload"
bind = "tcp://127.0.0.1:{load}"
args = ["--wait-subscribers", "1"]
[[processes]]
name = "recorder"
module = "daq.record"
bind = "tcp://127.0.0.1:{rec}"
args = [{args}]
""")
    return cfg


def _proc(cfg: Path, name: str, **kw) -> subprocess.Popen:
    """The process as the supervisor starts it (its argv), alone."""
    from controller.config import load
    from controller.supervisor import Supervisor

    lab = load(cfg)
    return subprocess.Popen(Supervisor(lab).command(lab.process(name)), cwd=REPO, stderr=subprocess.PIPE, text=True,
                            **kw)


@pytest.mark.parametrize("limit, reserve_mb, complete", [
    (3_000_000, "0.5", True),   # the room check sees the limit coming: clean stop, finished file
    (16_000, "0", False),       # the first data chunk itself fails (short write, then EFBIG): cut back
])
def test_disk_full_stops_cleanly_with_an_alarm_and_a_readable_file(tmp_path, limit, reserve_mb, complete):
    out = tmp_path / "full.mcap"
    cfg = _lab(tmp_path, out, ["--reserve-mb", reserve_mb])
    from controller.config import load as load_config

    lab = load_config(cfg)
    watcher = Subscriber(lab.process("recorder").endpoint, ["events/recorder"])
    rec = _proc(cfg, "recorder", preexec_fn=_limited(limit))
    # The alarm is an event (never replayed to a late subscriber): the watcher must be connected before
    # the load starts and the first chunk fails (a quick recorder raised it before the handshake).
    assert watcher.wait_connected(60), "the recorder's publisher never welcomed the watcher"
    src = _proc(cfg, "load")
    try:
        alarm = None
        deadline = time.monotonic() + 120
        while alarm is None and time.monotonic() < deadline:
            f = watcher.recv(timeout_s=1.0)
            if f is not None and f.meta.get("severity") == "alarm":
                alarm = f
        assert alarm is not None, "no alarm event on the bus"
        assert alarm.meta["event"] == "disk_full"
        assert rec.wait(60) == 2  # it ends by itself, status 2: not restarted (the disk stays full)
    finally:
        for p in (rec, src):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            p.communicate(timeout=30)
        watcher.close()
    size = out.stat().st_size
    assert size <= limit
    with open(out, "rb") as fh:
        reader = make_reader(fh)
        assert (reader.get_summary() is not None) == complete
    docs = read_mcap(out)  # readable by the mcap library either way
    alarms = [d for d in docs if d["stream"] == "events/recorder" and d["meta"]["severity"] == "alarm"]
    assert [a["meta"]["event"] for a in alarms] == ["disk_full"]
    seqs: dict[str, list[int]] = {}
    for d in docs:
        seqs.setdefault(d["stream"], []).append(d["seq"])
    if complete:
        assert {s.stream for s in lab_streams()} <= set(seqs)  # it recorded the load before it stopped
    for name, s in seqs.items():  # whatever was kept is contiguous: no frame lost inside the file
        assert s == list(range(s[0], s[0] + len(s))), name


def test_a_lab_recorder_records_each_of_its_drops_events_once(tmp_path):
    """The recorder writes its own events and publishes them; its subscriber connects to every publisher
    of the lab, its own included, so each event also comes back over the bus: it must not be written
    again (a second seq series in ``events/recorder``). Drops are made by a publisher skipping seqs."""
    out = tmp_path / "drops.mcap"
    cfg = _lab(tmp_path, out, [])
    from controller.config import load as load_config

    lab = load_config(cfg)
    watcher = Subscriber(lab.process("recorder").endpoint, ["events/recorder"])
    rec = _proc(cfg, "recorder")
    gaps = 3
    try:
        assert watcher.wait_connected(60), "the recorder's publisher never welcomed the watcher"
        with Publisher(lab.process("load").endpoint) as pub:  # in the place of the lab's "load" process
            assert pub.wait_for_subscribers(1, 60), "the recorder never subscribed"
            for i in range(gaps):
                pub.publish("forceplate/FP1", np.zeros((1, 1)), kind="force", rate_hz=1000.0, channels=("fz",),
                            units=("N",))
                skipped = pub.publish("forceplate/FP1", np.zeros((1, 1)), kind="force", rate_hz=1000.0,
                                      channels=("fz",), units=("N",))
                skipped.seq += 2  # two frames "lost on the way": a gap the recorder reports as a drops event
                pub.send(skipped)
                event = None
                deadline = time.monotonic() + 60
                while event is None and time.monotonic() < deadline:
                    f = watcher.recv(timeout_s=1.0)
                    if f is not None and f.meta.get("event") == "drops":
                        event = f
                assert event is not None, f"no drops event for gap {i + 1}"
                assert event.meta["gaps"] == i + 1
            pub.publish("forceplate/FP1", np.zeros((1, 1)), kind="force", rate_hz=1000.0, channels=("fz",),
                        units=("N",))
            rec.send_signal(signal.SIGTERM)
            assert rec.wait(60) == 0
    finally:
        if rec.poll() is None:
            rec.kill()
        rec.communicate(timeout=30)
        watcher.close()
    events = [d for d in read_mcap(out) if d["stream"] == "events/recorder"]
    assert [d["meta"]["gaps"] for d in events if d["meta"]["event"] == "drops"] == list(range(1, gaps + 1))
    assert [d["seq"] for d in events] == list(range(len(events)))
