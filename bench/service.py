"""Dynamics service benchmark: publish -> service -> subscriber latency and CPU per frame at 1 kHz.

For 2 and 4 simulated plates (1 kHz, 5-sample blocks: 200 frames/s per plate), the simulator
(`daq.simulated`) and the service (`dynamics.service`) run as real `controller.proc`
subprocesses on loopback tcp, as `walklab run` starts them; this script subscribes to both.

- ``grf/FP1``: receive time of the ``dynamics/grf/FP1`` frame holding a block's first sample
  minus the publish time (``t_pub``) of that raw ``forceplate/FP1`` block (one host, one
  monotonic clock; one plate's output only, so that this subscriber keeps up);
- ``grf total``: receive time of the combined ``dynamics/grf`` frame minus the latest publish
  time of the raw frames it combines (it waits for the last plate);
- peer ``bus hop``: receive minus publish time of the raw frames themselves, same subscriber
  (what the extra hop through the service is compared with);
- CPU: user + system time of the service process (``/proc/PID/stat``) over the measurement,
  per input frame (raw frames received here over the same time) and as a share of one core;
  the simulator's for reference;
- in-process: `GrfService.feed` alone (no sockets, no decoding), median µs per input frame.

    python bench/service.py [--duration 5] [--plates 2,4]
    python bench/service.py --walker REC.mcap [--seconds 20]

``--walker``: the walker dynamics (`dynamics.service_torques.WalkerService` of configs/sim.toml) in
process on a recording's input frames (encoders, chassis markers, plate wrenches, as `walklab bench
live --record` or `walklab run --record` keep them), fed one frame at a time in recorded order as its
process does: CPU time (thread clock) per feed that computed samples (p50/p99), per feed that did not,
and per output sample, on the compiled kernels and on the numpy path (``WALKLAB_JIT=0``), in one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import zmq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import machine  # noqa: E402
from controller.config import load  # noqa: E402
from controller.supervisor import Supervisor  # noqa: E402
from daq.bus import Subscriber  # noqa: E402
from daq.frames import Frame  # noqa: E402
from daq.simulated import Gait, SimulatedPlate  # noqa: E402
from daq.ports import free_tcp_ports  # noqa: E402
from dynamics.service import GrfService, Settings  # noqa: E402

ZERO_S = 1.0
BLOCK = 5  # samples per frame of the simulated plates (the config default)
TICK = os.sysconf("SC_CLK_TCK")


def lab_text(n_plates: int, ports: list[int]) -> str:
    names = [f"FP{i + 1}" for i in range(n_plates)]
    plates = "".join(f"""
        [devices.{name}]
        kind = "forceplate"
        corners = [[{0.6 * (i // 2) + 0.6}, {0.4 * (i % 2) + 0.4}, 0.0], [{0.6 * (i // 2)}, {0.4 * (i % 2) + 0.4}, 0.0], [{0.6 * (i // 2)}, {0.4 * (i % 2)}, 0.0], [{0.6 * (i // 2) + 0.6}, {0.4 * (i % 2)}, 0.0]]
        origin = [0.0, 0.0, -0.04]
        """ for i, name in enumerate(names))
    return textwrap.dedent(f"""
        [lab]
        name = "bench"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "forceplates"
        module = "daq.simulated"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = {names}
        [[processes]]
        name = "dynamics"
        module = "dynamics.service"
        bind = "tcp://127.0.0.1:{ports[2]}"
        devices = {names}
        args = ["--zero-s", "{ZERO_S}"]
    """).replace("'", '"') + textwrap.dedent(plates)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK    # utime, stime


def pct(values) -> str:
    a = np.asarray(values) * 1e3
    if a.size == 0:
        return "n/a"
    return f"p50 {np.percentile(a, 50):6.2f}  p99 {np.percentile(a, 99):6.2f}  max {a.max():6.2f} ms  (n={a.size})"


def live(n_plates: int, duration: float) -> None:
    ports = free_tcp_ports(3)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "lab.toml"
        config.write_text(lab_text(n_plates, ports))
        lab = load(config)
        sup = Supervisor(lab)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        procs = {name: subprocess.Popen(sup.command(lab.process(name)), cwd=REPO, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name in ("dynamics", "forceplates")}
        # one plate's output only: this subscriber must keep up too (it is Python as well)
        sub = Subscriber([lab.process("forceplates").endpoint, lab.process("dynamics").endpoint],
                         ["forceplate/*", "dynamics/grf/FP1", "dynamics/grf"])
        try:
            if not sub.wait_connected(20.0):
                sys.exit("simulator or service did not come up")
            # zeroing, the held frames' flush, then one more second
            end = time.monotonic() + ZERO_S + 1.5
            while time.monotonic() < end:
                sub.recv(timeout_s=0.05)
            raw_pub: dict[tuple[str, int], int] = {}
            hop, per_plate, total = [], [], []
            received: list[tuple[str, list[int], int]] = []
            frames_in = 0
            c0 = {n: cpu_s(p.pid) for n, p in procs.items()}
            t0 = time.monotonic()
            end = t0 + duration
            while time.monotonic() < end:
                f = sub.recv(timeout_s=0.05)
                if f is None:
                    continue
                if f.stream.startswith("forceplate/"):
                    frames_in += 1
                    raw_pub[(f.stream[len("forceplate/"):], f.t)] = f.t_pub
                    hop.append((f.t_recv - f.t_pub) * 1e-9)
                    continue
                # an output frame may cover several input blocks (the service caught up), and a
                # total frame may start inside a block: each block counts from its own
                # publication to the frame holding its first sample
                starts = f.sample_times("t_device") % (BLOCK * 1_000_000) == 0
                received.append((f.stream, f.sample_times()[starts].tolist(), f.t_recv))
            wall = time.monotonic() - t0
            for stream, block_starts, t_recv in received:   # matched afterwards: arrival order varies
                for t in block_starts:
                    if stream == "dynamics/grf":
                        pubs = [raw_pub.get((f"FP{i + 1}", t)) for i in range(n_plates)]
                        if None not in pubs:
                            total.append((t_recv - max(pubs)) * 1e-9)
                    elif (stream.rsplit("/", 1)[1], t) in raw_pub:
                        per_plate.append((t_recv - raw_pub[(stream.rsplit("/", 1)[1], t)]) * 1e-9)
            used = {n: cpu_s(p.pid) - c0[n] for n, p in procs.items()}
            lost = {s: (st.gaps, st.dropped) for s, st in sub.stats().items() if st.gaps or st.dropped}
        finally:
            sub.close()
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(timeout=10)
        print(f"\n{n_plates} plates, {n_plates * 200} input frames/s, {wall:.1f} s measured")
        print(f"  bus hop (raw, peer)       {pct(hop)}")
        print(f"  raw -> grf/FP1            {pct(per_plate)}")
        print(f"  raw -> grf total          {pct(total)}")
        print(f"  service CPU  {used['dynamics'] / wall * 100:5.1f} % of a core, "
              f"{used['dynamics'] / max(frames_in, 1) * 1e6:6.0f} us per input frame "
              f"(incl. receive, decode, publish); simulator {used['forceplates'] / wall * 100:5.1f} %")
        print(f"  seq gaps/dropped: {lost or 'none'}")


def in_process(n_plates: int, n_blocks: int = 2000) -> float:
    lab = load(REPO / "configs" / "sim.toml")
    devices = [lab.devices["FP1"].__class__(**{**vars(lab.devices["FP1"]), "name": f"FP{i + 1}"})
               for i in range(n_plates)]
    rng = np.random.default_rng(0)
    sims = [SimulatedPlate(d, Gait(), 0.5 * (i % 2), 1.0 if i % 2 == 0 else -1.0, 1.0, rng)
            for i, d in enumerate(devices)]
    frames = []
    for b in range(n_blocks):
        for s in sims:
            n0, raw = s.next_block()
            td = n0 * 1_000_000
            frames.append(Frame(s.stream, "force", b, td, td, td, 1000.0, s.channels, s.units, raw))
    runs = []
    for _ in range(3):
        svc = GrfService(devices, Settings(zero_s=0.0), lambda *a, **k: None)
        t = time.perf_counter()
        for f in frames:
            svc.feed([f])
        runs.append((time.perf_counter() - t) / len(frames))
    return float(np.median(runs))


def walker_frames(path: Path, seconds: float) -> list[Frame]:
    """The walker dynamics' input frames of the first `seconds` of a recording's encoder samples."""
    from daq.sessions import read, session_parts

    keep = ("encoder/left_shaft", "encoder/right_shaft", "markers/walker", "dynamics/grf/FP1", "dynamics/grf/FP2")
    out: list[Frame] = []
    t0 = None
    for f in read(session_parts(path)):
        if f.stream in keep:
            t0 = f.t if t0 is None else t0
            if f.t - t0 > seconds * 1e9:
                break
            out.append(f)
    if not any(f.stream == keep[0] for f in out):
        raise ValueError(f"{path}: no {keep[0]} frames (not a recording of the simulated walker lab)")
    return out


def walker(path: Path, seconds: float) -> None:
    """In-process walker dynamics on a recording (module doc)."""
    import configs
    from dynamics import forceplate as fp
    from dynamics import kernels
    from dynamics.contact import Friction, NormalLaw
    from dynamics.plants.jansen_world import jansen_world
    from dynamics.service_torques import Settings as WalkerSettings, WalkerService, _parser

    lab = load(configs.path("sim.toml"))
    o = _parser().parse_args([])
    world = jansen_world(o.model, law=NormalLaw("hunt_crossley_constant", o.stiffness, damping=o.damping),
                         friction=Friction(o.mu, kind="tanh", v_s=o.slip_velocity))
    plates = [(n, fp.Plate(type=d.type, corners=d.corners, origin=d.origin, cal_matrix=d.cal_matrix, name=n))
              for n, d in lab.devices.items() if d.kind == "forceplate"]
    frames = walker_frames(path, seconds)
    print(f"walker dynamics in process: {len(frames)} input frames of {path.name} ({seconds:g} s), one per feed")
    for jit in (True, False):
        with kernels.use_jit(jit):
            for _ in range(2):          # the second pass is measured (kernels loaded, caches warm)
                samples = [0]

                def publish(stream, data, **kw):
                    if stream == "dynamics/torques":
                        samples[0] += len(data)

                svc = WalkerService(world, plates, ("encoder/left_shaft", "encoder/right_shaft"), "markers/walker",
                                    WalkerSettings(), publish)
                computed, idle = [], []
                for f in frames:
                    n0 = len(svc.latencies)
                    c0 = time.thread_time_ns()
                    svc.feed((f,))
                    (computed if len(svc.latencies) > n0 else idle).append(time.thread_time_ns() - c0)
            a, b = np.array(computed) * 1e-3, np.array(idle) * 1e-3
            print(f"  {'compiled' if jit else 'numpy   '}: feeds that computed p50 {np.median(a):7.1f}  p99 "
                  f"{np.percentile(a, 99):7.1f} us (n = {a.size}); other feeds p50 {np.median(b):6.1f} us; "
                  f"{(a.sum() + b.sum()) / max(samples[0], 1):6.1f} us CPU per output sample")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per plate count")
    ap.add_argument("--plates", default="2,4", help="comma-separated plate counts")
    ap.add_argument("--walker", metavar="REC", help="the walker dynamics in process on this recording instead")
    ap.add_argument("--seconds", type=float, default=20.0, help="with --walker: seconds of the recording fed")
    args = ap.parse_args()
    if args.walker:
        print(f"machine: {machine(f'numpy {np.__version__}')}")
        print(f"command: python bench/service.py --walker {args.walker} --seconds {args.seconds:g}")
        walker(Path(args.walker), args.seconds)
        return
    print(f"machine: {machine(f'numpy {np.__version__}', f'libzmq {zmq.zmq_version()}')}")
    print(f"command: python bench/service.py --duration {args.duration} --plates {args.plates}")
    counts = [int(x) for x in args.plates.split(",")]
    for n in counts:
        us = in_process(n) * 1e6
        print(f"in-process GrfService.feed, {n} plates: {us:6.1f} us per input frame "
              f"(x {n * 200} frames/s = {us * n * 200 / 1e4:4.1f} % of a core)")
    for n in counts:
        live(n, args.duration)


if __name__ == "__main__":
    main()
