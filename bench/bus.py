"""Bus benchmark: frames/s and publish->receive latency, publisher and subscriber in separate processes.

Scenarios, each on loopback tcp and on ipc:

- ``blocked``: 10 streams of 1 kHz, 6-channel float64 data sent in 5-sample blocks (10 x 200
  frames/s = 2000 frames/s), paced on an absolute 5 ms schedule. Target: p99 latency < 0.5 ms and
  zero lost frames.
- ``small``: 1-sample, 1-channel frames published as fast as the publisher can (throughput; the
  latency then includes queueing).
- ``costs``: CPU time per frame of encode, decode, `Publisher.publish` and `Subscriber.recv` in
  one process (inproc sockets), next to bare msgpack packing of the same header.

Each is run with walklab's `Publisher`/`Subscriber` (framing, validation, counters) and with a
raw pyzmq PUB/SUB peer sending the same bytes without framing or checks, to show the cost of
the frame layer. Latency = receive ``time.monotonic_ns()`` minus publish ``time.monotonic_ns()``
(one host, one clock). Lost = frames published but not received (from seq).

    python bench/bus.py [--duration 5] [--small-frames 50000] [--only tcp|ipc] [--scenarios blocked,small,costs]
"""
from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import command, machine  # noqa: E402
from daq.bus import Publisher, Subscriber  # noqa: E402

STREAMS = 10
BLOCK = 5
RATE_HZ = 1000.0
CHANNELS = 6
END = "bench/end"


# ----------------------------------------------------------------------------------- publisher side


def run_publisher(args: argparse.Namespace) -> None:
    blocked = args.scenario == "blocked"
    names = [f"forceplate/FP{i}" for i in range(STREAMS)] if blocked else ["small/x"]
    shape = (BLOCK, CHANNELS) if blocked else (1, 1)
    data = np.random.default_rng(0).normal(size=shape)
    period_ns = int(BLOCK / RATE_HZ * 1e9)
    n_ticks = int(args.duration * RATE_HZ / BLOCK) if blocked else args.small_frames
    chans = dict(kind="force", rate_hz=RATE_HZ, channels=[f"c{i}" for i in range(shape[1])],
                 units=["N"] * shape[1])
    if args.impl == "walklab":
        pub = Publisher(args.endpoint, sndhwm=100_000)
        print(pub.endpoint, flush=True)
        if not pub.wait_for_subscribers(1, 30.0):
            sys.exit("no subscriber")
        send = lambda name: pub.publish(name, data, **chans)  # noqa: E731
    else:
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.PUB)
        sock.sndhwm = 100_000
        sock.bind(args.endpoint)
        print(sock.last_endpoint.decode(), flush=True)
        sys.stdin.readline()  # the subscriber says it is connected; then wait out the slow joiner
        time.sleep(0.5)
        payload = data.tobytes()
        topics = {n: n.encode() for n in [*names, END]}
        seqs = dict.fromkeys(topics, 0)

        def send(name: str) -> None:
            sock.send_multipart([topics[name], struct.pack("<qQ", time.monotonic_ns(), seqs[name]), payload])
            seqs[name] += 1
    t_next = time.monotonic_ns()
    for _ in range(n_ticks):
        if blocked:
            t_next += period_ns
            delay = t_next - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay * 1e-9)
        for name in names:
            send(name)
    send(END)
    sys.stdin.readline()  # closing earlier would discard frames still queued for the subscriber
    if args.impl == "walklab":
        pub.close()
    else:
        sock.close(linger=1000)


# ----------------------------------------------------------------------------------- subscriber side


def measure(scenario: str, impl: str, endpoint: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--role", "pub", "--scenario", scenario, "--impl", impl,
           "--endpoint", endpoint, "--duration", str(args.duration), "--small-frames", str(args.small_frames)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    bound = proc.stdout.readline().strip()
    lat: list[int] = []
    t_first = t_last = None
    if impl == "walklab":
        with Subscriber(bound, rcvhwm=100_000) as sub:
            while True:
                f = sub.recv(10.0)
                if f is None:
                    raise RuntimeError("publisher went silent")
                if f.stream == END:
                    break
                t_first = t_first or f.t_recv
                t_last = f.t_recv
                lat.append(f.t_recv - f.t_pub)
            proc.stdin.write("done\n")
            proc.stdin.flush()
            stats = [s for name, s in sub.stats().items() if name != END]
        lost = sum(s.dropped + s.missed_at_join for s in stats)
        published = sum(s.last_seq + 1 for s in stats)
    else:
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.rcvhwm = 100_000
        sock.subscribe(b"")
        sock.connect(bound)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        last: dict[bytes, int] = {}
        lost = 0
        while True:
            if not sock.poll(30_000):
                raise RuntimeError("publisher went silent")
            topic, stamp, _payload = sock.recv_multipart()
            t = time.monotonic_ns()
            if topic == END.encode():
                break
            t_pub, seq = struct.unpack("<qQ", stamp)
            lost += seq - last.get(topic, -1) - 1
            last[topic] = seq
            t_first = t_first or t
            t_last = t
            lat.append(t - t_pub)
        proc.stdin.write("done\n")
        proc.stdin.flush()
        sock.close(linger=0)
        published = sum(s + 1 for s in last.values())
    proc.wait(30)
    arr = np.asarray(lat, dtype=np.float64) * 1e-6  # ms
    return dict(frames=len(lat), published=published, lost=lost,
                fps=(len(lat) - 1) / ((t_last - t_first) * 1e-9) if len(lat) > 1 else 0.0,
                p50=np.percentile(arr, 50), p99=np.percentile(arr, 99), max=arr.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of 1 kHz blocked streams per run")
    ap.add_argument("--small-frames", type=int, default=50_000, help="frames in the small-frame throughput run")
    ap.add_argument("--only", choices=["tcp", "ipc"], help="one transport only")
    ap.add_argument("--scenarios", default="blocked,small,costs",
                    help="comma-separated: blocked, small, costs (in-process CPU cost per frame)")
    ap.add_argument("--role", default="sub", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "pub":
        run_publisher(args)
        return
    print(f"machine: {machine(f'pyzmq {zmq.__version__}', f'libzmq {zmq.zmq_version()}')}")
    print(f"command: {command()}")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores: above 2 the runs compete)")
    print("latency = subscriber monotonic_ns at receive - publisher monotonic_ns at send; separate processes")
    print(f"{'scenario':<28}{'transport':<10}{'impl':<9}{'frames':>8}{'lost':>6}{'frames/s':>10}"
          f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for scenario, label in (("blocked", "10 x 1 kHz, 5-sample blocks"), ("small", "small frames, max rate")):
            if scenario not in args.scenarios.split(","):
                continue
            for transport in ("tcp", "ipc"):
                if args.only and transport != args.only:
                    continue
                for impl in ("walklab", "raw"):
                    endpoint = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{tmp}/{scenario}-{impl}.ipc"
                    r = measure(scenario, impl, endpoint, args)
                    print(f"{label:<28}{transport:<10}{impl:<9}{r['frames']:>8}{r['lost']:>6}{r['fps']:>10.0f}"
                          f"{r['p50']:>9.3f}{r['p99']:>9.3f}{r['max']:>9.3f}", flush=True)
    print("target (10 x 1 kHz, walklab): p99 < 0.5 ms, 0 lost")
    if "costs" in args.scenarios.split(","):
        frame_costs()


def frame_costs() -> None:
    """CPU cost of the frame layer and of the bus calls, in-process.

    CPU time of this process (``time.process_time``), best of 5 repeats: on a shared machine wall
    time mostly measures the other processes. Publish and receive go through a real inproc socket
    pair: the frames are queued first, then drained, so each figure is one side's work alone.
    """
    import msgpack

    from daq.frames import Frame, decode, encode

    frame = Frame("forceplate/FP1", "force", 5, None, 0, 0, RATE_HZ, tuple(f"c{i}" for i in range(CHANNELS)),
                  ("N",) * CHANNELS, np.zeros((BLOCK, CHANNELS)))
    parts = [bytes(p) for p in encode(frame)]
    header = msgpack.unpackb(parts[1])
    n = 5000
    print(f"per-frame CPU cost, {BLOCK} x {CHANNELS} float64 block (process CPU time, best of 5):")
    for label, fn in (("walklab encode (validated)", lambda: encode(frame)),
                      ("walklab decode (validated)", lambda: decode(parts)),
                      ("peer: msgpack.packb(header)", lambda: msgpack.packb(header)),
                      ("peer: msgpack.unpackb(header)", lambda: msgpack.unpackb(parts[1]))):
        best = min(timeit.repeat(fn, number=n, repeat=5, timer=time.process_time)) / n
        print(f"  {label:<32}{best * 1e6:8.2f} us")
    ctx = zmq.Context()
    names = [f"forceplate/FP{i}" for i in range(STREAMS)]
    chans = dict(kind="force", rate_hz=RATE_HZ, channels=list(frame.channels), units=list(frame.units))
    best_pub = best_recv = float("inf")
    for rep in range(5):
        with Publisher(f"inproc://bench{rep}", sndhwm=0, context=ctx) as pub, \
                Subscriber(pub.endpoint, rcvhwm=0, context=ctx) as sub:
            if not (pub.wait_for_subscribers(1, 10.0) and sub.wait_connected(10.0)):
                raise RuntimeError("inproc handshake failed")
            t0 = time.process_time()
            for _ in range(n // STREAMS):
                for name in names:
                    pub.publish(name, frame.data, **chans)
            best_pub = min(best_pub, (time.process_time() - t0) / n)
            t0 = time.process_time()
            for _ in range(n):
                if sub.recv(10.0) is None:
                    raise RuntimeError("inproc frame lost")
            best_recv = min(best_recv, (time.process_time() - t0) / n)
    ctx.term()
    print(f"  {'Publisher.publish (inproc)':<32}{best_pub * 1e6:8.2f} us")
    print(f"  {'Subscriber.recv (inproc)':<32}{best_recv * 1e6:8.2f} us")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
