"""Acquisition benchmark: CPU per daemon and for the recorder at lab load and 3x lab load, the
recorder's drops, and replay speed.

Every process runs as a real subprocess (``python -m controller.proc``, as the supervisor starts
it) on loopback tcp; CPU = user + system time of the process over the measuring window (psutil),
as a percentage of one core. Scenarios:

- ``record``: the synthetic lab load (`daq.labload`: 2 plates x 1 kHz in 5-sample frames, 40
  markers x 200 Hz, 8 encoders x 1 kHz in 10-sample frames = 1400 frames/s; ``--scale 3`` for 3x)
  published by one process and recorded by `daq.record`; reports both processes' CPU and the
  frames the recorder lost (seq gaps in the file, read back with the mcap library).
- ``daemons``: the device daemons at their lab rates, fed by simulated devices: `daq.simulated`
  (2 plates, 1 kHz), `daq.devices.forceboard` (a virtual FORCE board on a pty, 1 kHz),
  `daq.devices.mocap` (40 markers at 200 Hz from a `MocapSender` in this process, 2-frame blocks).
- ``replay``: the lab-load recording replayed with ``--fast`` (back-pressure) into a subscriber in
  another process: speed = recorded duration / replay wall time, and the CPU per frame of the
  replay and of the consumer, beside the peer: the same file read by the ``mcap`` library's reader
  with each message unpacked by msgpack (the least any replay does), in the same run.

    python bench/daq.py [--seconds 20] [--scenarios record,daemons,replay]
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402
from daq.ports import free_tcp_ports  # noqa: E402


def lab(tmp: Path, body: str) -> Path:
    sup, = free_tcp_ports(1)
    cfg = tmp / f"lab{abs(hash(body)) % 10**6}.toml"
    cfg.write_text(f'[lab]\nname = "bench"\n[supervisor]\nbind = "tcp://127.0.0.1:{sup}"\n{body}')
    return cfg


def start(cfg: Path, name: str) -> subprocess.Popen:
    """The process as the supervisor starts it (its argv), alone."""
    from controller.config import load
    from controller.supervisor import Supervisor

    lab = load(cfg)
    return subprocess.Popen(Supervisor(lab).command(lab.process(name)), cwd=REPO, stderr=subprocess.DEVNULL)


def cpu_percent(procs: dict[str, subprocess.Popen], seconds: float, warmup: float = 3.0) -> dict[str, float]:
    """CPU of each process over `seconds` after `warmup`, % of one core."""
    import psutil

    time.sleep(warmup)
    ps = {k: psutil.Process(p.pid) for k, p in procs.items()}
    before = {k: sum(p.cpu_times()[:2]) for k, p in ps.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    return {k: 100 * (sum(p.cpu_times()[:2]) - before[k]) / dt for k, p in ps.items()}


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def file_losses(path: Path) -> tuple[int, int, float]:
    """(frames, frames missing inside seq runs, duration s) of a recording, read with the mcap library."""
    import msgpack
    from mcap.reader import make_reader

    seqs: dict[str, list[int]] = {}
    t = []
    with open(path, "rb") as fh:
        for _, ch, m in make_reader(fh).iter_messages(log_time_order=False):
            if ch.topic.startswith(("forceplate/", "markers/", "encoder/")):
                seqs.setdefault(ch.topic, []).append(msgpack.unpackb(m.data)["seq"])
                t.append(m.log_time)
    n = sum(map(len, seqs.values()))
    missing = sum(max(s) - min(s) + 1 - len(s) for s in seqs.values())
    return n, missing, (max(t) - min(t)) * 1e-9


def record(tmp: Path, scale: int, seconds: float) -> Path:
    load_port, rec_port = free_tcp_ports(2)
    out = tmp / f"lab_x{scale}.mcap"
    cfg = lab(tmp, f"""
[[processes]]
name = "load"
module = "daq.labload"
bind = "tcp://127.0.0.1:{load_port}"
args = ["--scale", "{scale}", "--wait-subscribers", "1"]
[[processes]]
name = "recorder"
module = "daq.record"
bind = "tcp://127.0.0.1:{rec_port}"
args = ["-o", "{out}"]
""")
    procs = {"recorder": start(cfg, "recorder"), "load": start(cfg, "load")}
    try:
        cpu = cpu_percent(procs, seconds)
    finally:
        stop(procs.values())
    n, missing, dur = file_losses(out)
    print(f"record x{scale}: {1400 * scale} frames/s for {dur:.1f} s recorded; CPU recorder {cpu['recorder']:.1f} %, "
          f"load publisher {cpu['load']:.1f} % of a core; frames {n}, lost {missing}; "
          f"file {out.stat().st_size / 2**20 / dur:.2f} MB/s", flush=True)
    return out


def daemons(tmp: Path, seconds: float) -> None:
    from daq.devices.mocap import MocapSender
    from firmware_bridge.virtual import VirtualMCU

    sim, board, mocap, pc = free_tcp_ports(4)
    plate = 'corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]'
    with VirtualMCU(n_motors=0, n_force=6, force=lambda t: (1.0, 2.0, 700.0, 0.1, 0.2, 0.3), stream_hz=1000) as mcu:
        cfg = lab(tmp, f"""
[[processes]]
name = "plates"
module = "daq.simulated"
bind = "tcp://127.0.0.1:{sim}"
devices = ["FP1", "FP2"]
[[processes]]
name = "board"
module = "daq.devices.forceboard"
bind = "tcp://127.0.0.1:{board}"
devices = ["FP3"]
[[processes]]
name = "markers"
module = "daq.devices.mocap"
bind = "tcp://127.0.0.1:{mocap}"
devices = ["qtm"]
[devices.FP1]
kind = "forceplate"
{plate}
[devices.FP2]
kind = "forceplate"
{plate}
[devices.FP3]
kind = "forceplate"
source = "{mcu.port}"
{plate}
[devices.qtm]
kind = "mocap"
endpoint = "tcp://127.0.0.1:{pc}"
rate_hz = 200.0
""")
        sender = MocapSender(f"tcp://127.0.0.1:{pc}", [f"M{i:02d}" for i in range(40)], 200.0)
        done = threading.Event()

        def feed() -> None:  # the mocap PC: 2-frame blocks at 200 Hz, on an absolute schedule
            rng = np.random.default_rng(0)
            t0, k = time.monotonic_ns(), 0
            while not done.is_set():
                due = t0 + (k + 2) * 5_000_000
                time.sleep(max(0, due - time.monotonic_ns()) * 1e-9)
                sender.send(k, (t0 + k * 5_000_000) // 1000, rng.normal(size=(2, 40, 3)))
                k += 2

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        procs = {n: start(cfg, n) for n in ("plates", "board", "markers")}
        try:
            cpu = cpu_percent(procs, seconds)
        finally:
            stop(procs.values())
            done.set()
            thread.join(5)
            sender.close()
    print(f"daemons: CPU daq.simulated (2 plates x 1 kHz) {cpu['plates']:.1f} %, daq.devices.forceboard "
          f"(1 board x 1 kHz over a pty) {cpu['board']:.1f} %, daq.devices.mocap (40 markers x 200 Hz) "
          f"{cpu['markers']:.1f} % of a core", flush=True)


CONSUMER = """
import sys, time
sys.path.insert(0, {repo!r})
from daq.bus import Subscriber
sub = Subscriber({endpoint!r}, rcvhwm=1000)
n = 0
t_last = 0.0
while True:
    f = sub.recv(timeout_s=5.0)
    if f is None:
        break
    n += 1
    t_last = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process of the machine
print(n, sum(s.dropped for s in sub.stats().values()), t_last)
"""


def raw_read(path: Path) -> tuple[int, float]:
    """The peer: (messages, CPU s) of reading every message of ``path`` with the mcap library's reader
    and unpacking it with msgpack (the least any replay of the file does)."""
    import msgpack
    from mcap.reader import make_reader

    c0 = time.process_time()
    with open(path, "rb") as fh:
        n = sum(1 for _, _, m in make_reader(fh).iter_messages(log_time_order=False) if msgpack.unpackb(m.data))
    return n, time.process_time() - c0


def replay(path: Path) -> None:
    import psutil

    from daq.bus import Publisher
    from daq.replay import replay as run_replay, set_backpressure, wire_frames

    _, _, dur = file_losses(path)
    n_raw, cpu_raw = raw_read(path)
    with Publisher("tcp://127.0.0.1:*", replay_s=0.0) as pub:  # as `walklab replay --fast`
        set_backpressure(pub)
        consumer = subprocess.Popen([sys.executable, "-c", CONSUMER.format(repo=str(REPO), endpoint=pub.endpoint)],
                                    stdout=subprocess.PIPE, text=True)
        assert pub.wait_for_subscribers(1, 60)
        ps = psutil.Process(consumer.pid)
        c_cons = sum(ps.cpu_times()[:2])
        t0, c0 = time.monotonic(), time.process_time()
        n = run_replay(wire_frames(path), pub, speed=None)  # as `walklab replay --fast`
        cpu = time.process_time() - c0
        c_cons = sum(ps.cpu_times()[:2]) - c_cons  # the consumer is still draining: a lower bound
        out = consumer.communicate(timeout=120)[0].split()
        wall = float(out[2]) - t0  # until the consumer has the last frame (the send returns earlier)
    print(f"replay --fast: {n} frames of {dur:.1f} s in {wall:.2f} s = {dur / wall:.1f}x real time "
          f"({n / wall:.0f} frames/s); consumer received {out[0]}, dropped {out[1]}; CPU per frame: "
          f"replay {cpu / n * 1e6:.1f} us, consumer >= {c_cons / n * 1e6:.1f} us; peer, mcap reader + msgpack "
          f"alone: {cpu_raw / n_raw * 1e6:.1f} us per message ({dur / cpu_raw:.0f}x real time on one core)",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="measuring window per scenario [s]")
    p.add_argument("--scenarios", default="record,daemons,replay")
    opts = p.parse_args()
    import mcap
    import zmq

    print(machine(f"pyzmq {zmq.__version__}", f"mcap {getattr(mcap, '__version__', '?')}"))
    print(command(), flush=True)
    todo = opts.scenarios.split(",")
    with tempfile.TemporaryDirectory(prefix="walklab-bench-daq-") as d:
        tmp = Path(d)
        rec1 = None
        if "record" in todo or "replay" in todo:
            rec1 = record(tmp, 1, opts.seconds)
        if "record" in todo:
            record(tmp, 3, opts.seconds)
        if "daemons" in todo:
            daemons(tmp, opts.seconds)
        if "replay" in todo:
            replay(rec1)


if __name__ == "__main__":
    main()
