"""The Jansen world's step (dynamics.plants.jansen_world): cost of one `JansenSim.load` (the motor plant's
callback: contact stage, the shafts' implicit entries, the chassis' 3x3 solve, one sample row) on the
compiled contact kernel and on the numpy reference, while the walker walks at 3 rad/s.

    python bench/world.py [--steps 5000]

Prints the machine and command, then per path the median, p99 and max of the call in µs and the
fraction of real time it takes at the lab's 1 ms world step (the MCU's 500 Hz tick, two substeps).
Peer: the held walker's crank plant callback (dynamics.plants.crank.motor_load, no chassis) in the
same run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402

import numpy as np  # noqa: E402

from dynamics import kernels  # noqa: E402
from dynamics.contact import NormalLaw  # noqa: E402
from dynamics.linkage import read_crank_legs  # noqa: E402
from dynamics.plants.crank import crank_plant, motor_load  # noqa: E402
from dynamics.plants.jansen_world import JansenSim, advance, jansen_world  # noqa: E402


def timed(fn, n: int) -> np.ndarray:
    out = np.empty(n)
    for k in range(n):
        t0 = time.perf_counter_ns()
        fn(k)
        out[k] = time.perf_counter_ns() - t0
    return out * 1e-3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5000)
    a = p.parse_args()
    print(machine(), "\n" + command())
    w = jansen_world()
    rows = []
    for name, jit in (("world, compiled contact", True), ("world, numpy contact", False)):
        with kernels.use_jit(jit):
            sim = JansenSim(w, 1e-3)
            for k in range(500):  # walking first
                advance(sim, 4.0 * (3.0 - sim.u[3:5]), k * 1e-3)
            us = timed(lambda k: advance(sim, 4.0 * (3.0 - sim.u[3:5]), k * 1e-3), a.steps)
            rows.append((name, us))
    plant = crank_plant(read_crank_legs("jansen_walker"), ground_penetration=0.008,
                        law=NormalLaw("hunt_crossley_constant", 2e4, damping=1.0))
    th, om = np.zeros(1), np.full(1, 3.0)
    rows.append(("peer: held walker's crank plant (motor_load)", timed(lambda k: motor_load(plant, th + 3e-3 * k, om),
                                                                       a.steps)))
    print(f"{'path':48s} {'p50 µs':>8s} {'p99 µs':>8s} {'max µs':>8s} {'of real time at 1 ms':>22s}")
    for name, us in rows:
        print(f"{name:48s} {np.median(us):8.1f} {np.percentile(us, 99):8.1f} {us.max():8.0f} "
              f"{np.median(us) / 1e3:21.1%}")


if __name__ == "__main__":
    main()
