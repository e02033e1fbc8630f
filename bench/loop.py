"""Control-loop benchmark: the real loop process (controller.loop via controller.proc) at 500 Hz on a
virtual MCU over a real pty, its crank motor loaded by the 12-leg Jansen walker's crank plant.

    python bench/loop.py [--seconds 600] [--rate-hz 500] [--spin-us 300] [--realtime P]

Prints the machine and command, then the period jitter (wake time - deadline, from the loop's own
controller/state stream, every cycle) as percentiles, the overruns and missed deadlines (the loop's
health counters) and the cycles seen. The virtual MCU (1 kHz control, 500 Hz STATE, plant) runs in
this process, the loop in its own: the two cores of the reference machine are both busy.

``--realtime P`` (1..99) runs the loop process as a lab would (its ``[[processes]]`` entry's
``realtime = P``, applied by `controller.supervisor.set_priority` right after its spawn) and the
virtual MCU's threads (its firmware loop and UART) at SCHED_FIFO priority P as well; the bench's
own receiving thread stays at normal priority. The kernel's report of each is printed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402

import numpy as np  # noqa: E402

from controller.synergies import library  # noqa: E402
from controller.synergies.robot import load_robot  # noqa: E402
from daq.bus import Subscriber  # noqa: E402
from daq.health import parse_health  # noqa: E402
from daq.ports import free_tcp_ports  # noqa: E402
from dynamics.contact import NormalLaw  # noqa: E402
from dynamics.linkage.model import read_crank_legs  # noqa: E402
from dynamics.plants.crank import crank_plant, motor_load  # noqa: E402
from dynamics.plants.motor import MotorParams  # noqa: E402
from firmware_bridge.virtual import VirtualMCU  # noqa: E402


def _policies(tids) -> str:
    """The distinct (policy, priority) of threads `tids`, e.g. ``SCHED_FIFO 10 x4``."""
    names = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO"}
    seen: dict[str, int] = {}
    for t in tids:
        k = f"{names.get(os.sched_getscheduler(t), '?')} {os.sched_getparam(t).sched_priority}"
        seen[k] = seen.get(k, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in seen.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--rate-hz", type=float, default=500.0)
    ap.add_argument("--spin-us", type=float, default=300.0)
    ap.add_argument("--realtime", type=int, default=0, metavar="P",
                    help="SCHED_FIFO priority 1..99 of the loop and the virtual MCU (0 = normal, the default)")
    a = ap.parse_args()
    if not 0 <= a.realtime <= 99:
        ap.error(f"--realtime {a.realtime}: expected 0..99")
    print(machine())
    print(command())
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        robot = tmp / "robot.toml"
        robot.write_text((REPO / "configs/jansen_single.toml").read_text()
                         .replace('"synergies/jansen_single"', f'"{tmp / "lib"}"')
                         .replace('profiles = ["constant", "optimised"]', 'profiles = ["constant"]'))
        library.build(load_robot(robot), jobs=2)
        ports = free_tcp_ports(3)
        cfg = tmp / "lab.toml"
        cfg.write_text(textwrap.dedent(f"""
            [lab]
            name = "bench-loop"
            [supervisor]
            bind = "tcp://127.0.0.1:{ports[0]}"
            [[processes]]
            name = "loop"
            module = "controller.loop"
            bind = "tcp://127.0.0.1:{ports[1]}"
            devices = ["mcu"]
            args = ["--robot", "{robot}", "--speed", "0.3", "--rate-hz", "{a.rate_hz}", "--spin-us", "{a.spin_us}",
                    "--operator", "tcp://127.0.0.1:{ports[2]}"]
            [devices.mcu]
            kind = "mcu"
            port = "{tmp / 'mcu'}"
            motors = ["crank"]
            watchdog_ms = 300
            """))
        if a.realtime:  # the [[processes]] key, as walklab run would apply it
            cfg.write_text(cfg.read_text().replace('name = "loop"', f'name = "loop"\nrealtime = {a.realtime}'))
        plant = crank_plant(read_crank_legs("jansen_walker"), ground_penetration=0.008,
                            law=NormalLaw("hunt_crossley_constant", 2e4, damping=10.0))
        mcu = VirtualMCU(1, motor=MotorParams(), control_hz=1000, stream_hz=500, watchdog_ms=300,
                         load=lambda t, th, om: motor_load(plant, th, om))
        sub = Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["controller/state", "health/loop"])
        from controller.config import load
        from controller.supervisor import set_priority

        spec = load(cfg).process("loop")
        proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(cfg), "--name", "loop",
                                 *spec.args], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        jit, walking, health = [], [], {}
        try:
            if spec.realtime:
                set_priority(proc.pid, spec.nice, spec.realtime)  # PermissionError: run as root / with CAP_SYS_NICE
            assert sub.wait_connected(30.0), "the loop did not come up"
            mcu.start()
            mcu_threads = [t.native_id for t in threading.enumerate() if t.name.startswith("virtual-mcu")]
            for tid in mcu_threads if a.realtime else ():
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(a.realtime))
            print("scheduling (the kernel's report): loop threads "
                  + _policies(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
                  + "; virtual MCU threads " + _policies(mcu_threads) + "; everything else normal")
            os.symlink(mcu.port, tmp / "mcu")
            t_end = None
            while t_end is None or time.monotonic() < t_end:
                f = sub.recv(timeout_s=0.5)
                if f is None:
                    continue
                if f.stream == "health/loop":
                    health = parse_health(f)
                elif f.data[:, 0].all():
                    if t_end is None:  # time from the first walking cycle
                        t_end = time.monotonic() + a.seconds
                    jit.append(f.data[:, 1])
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            sub.close()
            mcu.close()
    j = np.concatenate(jit) * 1e6
    cyc = health.get("loop/cycles", {}).get("count", float("nan"))
    over = health.get("loop/overruns", {}).get("count", 0.0)
    missed = health.get("loop/missed", {}).get("count", 0.0)
    print(f"cycles seen walking {j.size} (loop counted {cyc:.0f}); MCU watchdog trips {mcu.stats.watchdog_trips}")
    print("period jitter (us): " + "  ".join(f"p{q} {np.percentile(j, q):.1f}" for q in (50, 90, 99, 99.9))
          + f"  max {j.max():.1f}")
    print(f"overruns {over:.0f} ({100 * over / max(cyc, 1):.3f} % of cycles), missed deadlines {missed:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
