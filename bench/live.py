"""Soak and latency benchmark of a whole simulated lab: `walklab run` of a shipped lab at lab load.

    python bench/live.py [--config configs/sim.toml|configs/sim_exo.toml] [--minutes 10] [--record FILE]
                         [--realtime P]    (or: walklab bench live --minutes M [--config ...])

Two labs (`labs`), each on private ports plus an extra-load process (this module's `run`) so the bus
carries the lab load of issue 13 — 2 plates x 1 kHz, 40 markers x 200 Hz, 8 encoders x 1 kHz:

- configs/sim.toml (the default): the Jansen world, plate service, walker dynamics, control loop,
  health monitor, recorder, walking at 0.3 m/s (a `walklab run` script); the world publishes 2 plates,
  16 markers and 2 encoders, the extra process 24 markers (``markers/extra``) and 6 encoders
  (``encoder/x1..x6``) of `daq.labload`'s synthetic kinds;
- configs/sim_exo.toml: the exoskeleton world (the wearer on a split-belt treadmill, a plate under each
  belt), plate service, the tree dynamics service (``torques``: `dynamics.service_tree`), the control loop
  (assisting the wearer from its first ZMP sample, its ``--speed``), health monitor, recorder, no script;
  the world publishes 2 plates, 40 markers and 4 encoders, the extra process 4 encoders.

Prints the machine and command, then per stage the latency p50 / p99 / max over the whole run:

- ``bus hop``: a plate frame's publication by the world to its receipt by the recorder (t_recv - t_pub);
- ``plate service``: receipt of a plate frame to its outputs handed to ZeroMQ (the service's own
  ``processing`` figure, from its health frames: the median of the per-second p50, the largest
  per-second p99 and max);
- ``walker dynamics`` (``tree dynamics`` in the exoskeleton lab): every ``dynamics/torques`` frame's
  latency, publication minus the receipt of the newest input sample it used (its ``meta.latency_s``:
  the issue's "dynamics-service latency"); then the same split into frames computed with every input
  fresh and frames with a held or absent input (``stale``: a sample that waited ``--max-wait-s`` for a
  lagging input, whose latency is at least that wait, or computed without an input that has not
  started, as the plates during the plate service's zeroing), and over the run after its first 10 s
  (start-up: the plate service zeroes for 2 s before it publishes);
- ``world -> torques``: the world's publication of an encoder block to the publication of the torques
  frame that holds its last sample (both on the host monotonic clock); in the exoskeleton lab, of the
  marker frame that completes a torques frame's last sample (its `service_tree.LOOKAHEAD` = 2 marker
  samples after it, the rates' stencil) to that torques frame's publication;

``--realtime P`` sets ``realtime = P`` (SCHED_FIFO priority, 0 = normal scheduling) on the lab's loop,
walker or tree dynamics (``torques``) and plate service (``dynamics``) entries, whatever the config
says, and on the simulated world (``world``: it stands for the lab's hardware — the MCU, plates and
markers — which host load never delays; at normal priority behind three SCHED_FIFO processes its MCU
went 117.8 ms without a STATE frame at start-up, a ``stale`` stop of the loop, measured); without it
they run as the config says. Every process's scheduling, as the kernel reports it, is
printed with its CPU.

then drops (frames missing from the recording by seq, per stream; the services' subscribers' ``dropped``
counters from their last health frames) and the CPU of each process (psutil: CPU seconds over the run
/ wall seconds, % of one core).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402


@dataclass(frozen=True)
class Lab:
    """What the benchmark runs and reads for one shipped simulated lab: its config (``configs/NAME``),
    the MCU pty path in it (moved under the run's temporary folder), the processes ``--realtime`` sets,
    the extra-load process's markers and encoders (bringing the bus to lab load), the `walklab run`
    script (None: the world walks by itself), the torques service's stage name, the stream whose
    samples are the torques' grid with the name of one of its frames, and how many grid samples after
    a torques sample the service waits for (the world -> torques stage)."""
    config: str
    pty: str
    realtime: tuple[str, ...]
    extra_markers: int
    extra_encoders: int
    script: str | None
    service: str
    grid: str
    grid_frame: str
    lookahead: int = 0


def labs() -> dict[str, Lab]:
    """The labs ``--config`` accepts, by config file name (module doc)."""
    from dynamics.service_tree import LOOKAHEAD

    return {"sim.toml": Lab("sim.toml", "/tmp/walklab-sim/world-mcu", ("world", "loop", "torques", "dynamics"), 24, 6,
                            "[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.3\n", "walker dynamics",
                            "encoder/left_shaft", "encoder block"),
            "sim_exo.toml": Lab("sim_exo.toml", "/tmp/walklab-sim/exo-mcu", ("world", "loop", "torques", "dynamics"), 0,
                                4, None,
                                "tree dynamics", "markers/exo", "marker frame", LOOKAHEAD)}


def run(ctx: Any, args: Sequence[str]) -> int:
    """Process entry point: the extra load (module doc; ``--markers N --encoders M``, default 24 and 6)
    on the process's publisher until stopped."""
    from daq.labload import LoadPublisher, StreamSpec

    p = argparse.ArgumentParser(prog="bench.live")
    p.add_argument("--markers", type=int, default=24)
    p.add_argument("--encoders", type=int, default=6)
    o = p.parse_args(list(args))
    specs = [StreamSpec("markers/extra", "markers", 200.0, 1,
                        tuple(f"X{i:02d}:{a}" for i in range(o.markers) for a in "xyz"), ("m",) * 3 * o.markers,
                        extra="residual")] if o.markers else []
    specs += [StreamSpec(f"encoder/x{i + 1}", "encoder", 1000.0, 10, ("angle", "velocity", "current"),
                         ("rad", "rad/s", "A"), extra="flags") for i in range(o.encoders)]
    for i, s in enumerate(specs):
        s.rng = np.random.default_rng([99, i])
    pub = LoadPublisher(ctx.publisher, specs)

    def stop() -> bool:
        ctx.tick()
        return ctx.stopping

    pub.run(1e9, stop)      # seconds: until stopped (an infinite duration overflows its integer deadline)
    return 0


def with_realtime(text: str, names: Sequence[str], priority: int) -> str:
    """Lab config `text` with ``realtime = priority`` in the ``[[processes]]`` entries named `names`
    (replacing any ``realtime`` line they have)."""
    head, *blocks = text.split("[[processes]]")
    out = []
    for b in blocks:
        m = re.search(r'^name = "([^"]+)"$', b, flags=re.M)
        if m and m.group(1) in names:
            b = re.sub(r"^realtime = .*\n", "", b, flags=re.M)
            b = b[:m.end()] + f"\nrealtime = {priority}" + b[m.end():]
        out.append(b)
    return "[[processes]]".join([head, *out])


def lab(tmp: Path, realtime: int | None = None, spec: Lab | None = None) -> Path:
    """The config of `spec` (default configs/sim.toml's) on free ports, its pty under `tmp`, plus the
    extra-load process; `realtime` not None: that SCHED_FIFO priority for the lab's `Lab.realtime`
    processes (0 = normal scheduling)."""
    import configs
    from daq.ports import on_free_ports

    spec = spec or labs()["sim.toml"]
    text = configs.path(spec.config).read_text()
    if realtime is not None:
        text = with_realtime(text, spec.realtime, realtime)
    text += ('\n[[processes]]\nname = "extra"\nmodule = "bench.live"\nbind = "tcp://127.0.0.1:5699"\n'
             f'args = ["--markers", "{spec.extra_markers}", "--encoders", "{spec.extra_encoders}"]\n'
             'restart = "on-failure"\n')
    text, _ = on_free_ports(text)
    text = text.replace(spec.pty, str(tmp / "pty" / "mcu"))
    path = tmp / "lab.toml"
    path.write_text(text)
    return path


def _name(p: Any) -> str:
    try:
        cmd = p.cmdline()
    except Exception:  # noqa: BLE001 - a process that just ended
        return "?"
    if "--name" in cmd:
        return cmd[cmd.index("--name") + 1]
    if "controller.cli" in cmd and cmd.index("controller.cli") + 1 < len(cmd):
        sub = cmd[cmd.index("controller.cli") + 1]
        return "walklab run (supervisor, status)" if sub == "run" else f"walklab {sub}"
    return " ".join(cmd[:3])


def cpu_watch(root: Any, running: Any, poll_s: float = 2.0,
              sched: dict[str, str] | None = None) -> dict[str, float]:
    """CPU % of one core per process under `root` (psutil.Process) over `seconds` of wall time: each process's
    CPU time at its last sight minus at its first, over the wall time between them (a restarted process:
    both lives added under its name), under its name at its last sight (a child seen between its fork and
    its exec has its parent's command line: the torques process once counted as the supervisor); until
    `running()` is False. `sched`, if given, receives each name's scheduling at its first sight under that
    name (``SCHED_FIFO 10`` or ``nice 0``, the kernel's report)."""
    import psutil

    first: dict[int, tuple[float, float]] = {}
    last: dict[int, tuple[str, float, float]] = {}
    while running():
        for p in [root] + root.children(recursive=True):
            try:
                c = p.cpu_times()
                cpu, now = c.user + c.system, time.monotonic()
                name = _name(p)
                if name == "?" and p.pid in last:  # it ended between two reads: the name it had
                    name = last[p.pid][0]
                first.setdefault(p.pid, (cpu, now))
                if sched is not None and name not in sched:
                    fifo = os.sched_getscheduler(p.pid) == os.SCHED_FIFO
                    sched[name] = (f"SCHED_FIFO {os.sched_getparam(p.pid).sched_priority}" if fifo
                                   else f"nice {os.getpriority(os.PRIO_PROCESS, p.pid)}")
                last[p.pid] = (name, cpu, now)
            except (psutil.Error, ProcessLookupError):
                pass
        time.sleep(poll_s)
    out: dict[str, float] = {}
    for pid, (c0, w0) in first.items():
        name, c1, w1 = last[pid]
        if w1 > w0:
            out[name] = out.get(name, 0.0) + 100.0 * (c1 - c0) / (w1 - w0)
    return out


def pct(x: Sequence[float]) -> str:
    a = np.asarray(x, dtype=float) * 1e3
    if not a.size:
        return "no samples"
    return f"p50 {np.percentile(a, 50):8.3f}  p99 {np.percentile(a, 99):8.3f}  max {a.max():9.3f} ms  (n = {a.size})"


def analyse(path: Path, spec: Lab | None = None) -> dict[str, Any]:
    """Latencies, drops and counters from a recording of the lab `spec` (default configs/sim.toml's;
    module doc)."""
    from daq.health import parse_health
    from daq.sessions import read, session_parts

    hop, torques, ends = [], [], []    # ends: per torques frame, its grid sample's t and its t_pub [ns]
    stale, t_torques = [], []           # per torques frame: computed with a held input; its publication [ns]
    proc50, proc99, procmax = [], [], []
    seqs: dict[str, list[int]] = {}
    grid_pub: dict[int, int] = {}     # t of a grid frame's (an encoder block's) last sample -> its t_pub
    health: dict[str, Any] = {}
    spec = spec or labs()["sim.toml"]
    for f in read(session_parts(path)):
        seqs.setdefault(f.stream, []).append(f.seq)
        if f.stream.startswith("forceplate/") and f.t_recv and f.t_pub:
            hop.append((f.t_recv - f.t_pub) * 1e-9)
        elif f.stream == spec.grid:
            grid_pub[f.t + round((f.samples - 1) * 1e9 / f.rate_hz)] = f.t_pub
        elif f.stream == "dynamics/torques":
            torques.append(f.meta["latency_s"])
            stale.append(bool(np.asarray(f.data)[:, list(f.channels).index("stale")].any()))
            t_torques.append(f.t_pub)
            ends.append((f.t + round((f.samples - 1 + spec.lookahead) * 1e9 / f.rate_hz), f.t_pub))
        elif f.stream == "health/dynamics":
            h = parse_health(f).get("processing")
            if h and h.get("latency_n"):
                proc50.append(h["latency_p50_s"])
                proc99.append(h["latency_p99_s"])
                procmax.append(h["latency_max_s"])
        if f.stream.startswith("health/"):
            health[f.stream] = parse_health(f)
    # paired after reading: the recorder may take a torques frame before the grid frame it waited for
    e2e = [(t_pub - grid_pub[end]) * 1e-9 for end, t_pub in ends if end in grid_pub]
    # frames missing inside a publisher's run (a seq going back is a restart, not a loss)
    gaps = {s: int(np.sum(np.maximum(np.diff(np.asarray(v)) - 1, 0))) for s, v in seqs.items()
            if len(v) > 1 and np.any(np.diff(np.asarray(v)) > 1)}
    dropped = {f"{h} <- {s}": int(v.get("dropped", 0)) for h, d in health.items() for s, v in d.items()
               if isinstance(v, dict) and v.get("dropped")}
    return dict(hop=hop, torques=torques, stale=np.array(stale, dtype=bool), t_torques=np.array(t_torques), e2e=e2e,
                proc=(proc50, proc99, procmax), gaps=gaps, dropped=dropped, frames={s: len(v) for s, v in seqs.items()})


def lab_of(config: str) -> Lab:
    """The `Lab` of ``--config``: a shipped lab's file (``configs/sim_exo.toml``, its path, or its name);
    ValueError naming the labs otherwise."""
    import configs

    known, path = labs(), Path(config)
    name = path.name
    if name not in known or (path.parent not in (Path("."), Path("configs"))
                             and path.resolve() != configs.path(name).resolve()):
        raise ValueError(f"--config {config}: expected one of the shipped simulated labs "
                         f"{', '.join('configs/' + k for k in known)}")
    return known[name]


def report(r: dict[str, Any], spec: Lab, cpu: dict[str, float], sched: dict[str, str], log: str) -> None:
    """Print the latency per stage, drops and CPU of `analyse`'s `r` for lab `spec` (module doc); `log`:
    `walklab run`'s output, whose summary lines end the report."""
    print("\nlatency per stage")
    print(f"  bus hop (world -> recorder)      {pct(r['hop'])}")
    p50, p99, pmax = r["proc"]
    if p50:
        print(f"  plate service (processing)       p50 {np.median(p50) * 1e3:8.3f}  p99 {max(p99) * 1e3:8.3f}  "
              f"max {max(pmax) * 1e3:9.3f} ms  (median of per-second p50, largest per-second p99 and max)")
    print(f"  {spec.service + ' (newest input -> publication)':47s}{pct(r['torques'])}")
    lat, st = np.asarray(r["torques"]), r["stale"]
    if lat.size:
        steady = (r["t_torques"] - r["t_torques"][0]) > 10e9
        print(f"    frames with every input fresh                {pct(lat[~st])}")
        print(f"    frames with a held or absent input (stale: waited --max-wait-s, an input not yet started, "
              f"or one KEEP_S ahead): "
              f"{st.sum()} of {st.size} ({100 * st.mean():.2f} %), {pct(lat[st])}")
        print(f"    after the first 10 s                         {pct(lat[steady])}")
    print(f"  {'world ' + spec.grid_frame + ' -> torques published':47s}{pct(r['e2e'])}")
    print("\ndrops")
    print(f"  seq gaps in the recording: {r['gaps'] or 'none'}")
    print(f"  subscribers' dropped counters (last health frames): {r['dropped'] or 'none'}")
    print(f"  frames recorded: {sum(r['frames'].values())} in {len(r['frames'])} streams")
    print("\nCPU per process (% of one core, over the run; its scheduling at first sight)")
    for name, c in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:45s} {c:6.1f}   {sched.get(name, '')}")
    print(f"  {'total':45s} {sum(cpu.values()):6.1f}")
    summary = [line for line in log.splitlines() if "distance walked" in line or "dynamics latency" in line]
    print("\n" + "\n".join(summary))


def main(argv: Sequence[str] | None = None) -> int:
    from bench.common import command, machine

    p = argparse.ArgumentParser(prog="bench/live.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/sim.toml", help="the lab: configs/sim.toml (the Jansen walker, "
                   "default) or configs/sim_exo.toml (the exoskeleton, tree dynamics)")
    p.add_argument("--minutes", type=float, default=10.0, help="length of the run with the lab up (default 10)")
    p.add_argument("--record", metavar="FILE", help="keep the recording here (default: a temporary file)")
    p.add_argument("--realtime", type=int, metavar="P", help="SCHED_FIFO priority of the lab's world, loop and "
                   "dynamics services (sim.toml and sim_exo.toml: world, loop, torques, dynamics); 0 = normal "
                   "(default: as the config says)")
    o = p.parse_args(list(argv) if argv is not None else None)
    spec = lab_of(o.config)
    if not 0 < o.minutes <= 24 * 60:
        raise ValueError(f"--minutes must be in (0, 1440], got {o.minutes}")
    if o.realtime is not None and not 0 <= o.realtime <= 99:
        raise ValueError(f"--realtime must be in 0..99, got {o.realtime}")
    import psutil

    print(machine(f"psutil {psutil.__version__}"))
    print(command())
    with tempfile.TemporaryDirectory(prefix="walklab-bench-") as tmp:
        cfg = lab(Path(tmp), o.realtime, spec)
        rec = Path(o.record) if o.record else Path(tmp) / "live.mcap"
        extra = []
        if spec.script is not None:
            script = Path(tmp) / "script.toml"
            script.write_text(spec.script)
            extra = ["--script", str(script)]
        seconds = o.minutes * 60.0
        t0 = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", str(seconds),
                                  "--record", str(rec), *extra], cwd=REPO,
                                 stdout=open(Path(tmp) / "run.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + seconds + 600.0
        sched: dict[str, str] = {}
        cpu = cpu_watch(psutil.Process(child.pid), lambda: child.poll() is None and time.monotonic() < deadline,
                        sched=sched)
        try:
            status = child.wait(timeout=60)
        except subprocess.TimeoutExpired:      # past its duration and the 10-minute grace: stopped, reported
            child.kill()
            status = child.wait()
            print(f"walklab run did not end {seconds + 600:.0f} s after its start: killed", file=sys.stderr)
        wall = time.monotonic() - t0
        log = (Path(tmp) / "run.log").read_text()
        print(f"walklab run exit {status} after {wall:.0f} s wall ({seconds:.0f} s with the lab up)")
        if status != 0:
            print(log[-3000:])
            return 1
        r = analyse(rec, spec)
    report(r, spec, cpu, sched, log)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError) as exc:       # a user mistake: one line, no traceback
        sys.exit(f"bench/live.py: error: {exc}")
