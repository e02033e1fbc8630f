"""Linkage benchmark: Jansen reduced-form table lookup rate (methods.md c.6), target > 100 000
lookups/s, batched and single-sample, against peers in the same run.

    python bench/linkage.py [--batch 100000] [--single 50000] [--repeats 7] [--resolution 720]

A lookup is one crank torque tau = I th'' + 1/2 I' th'^2 + G - J_P^T F at a crank angle from the
tables (periodic cubic splines, `dynamics.linkage.reduced`). Peers: the same tables through
scipy's CubicSpline (batched and one call per sample) and the full KKT inverse-dynamics solve
(position, velocity, KKT, per batch of samples), i.e. what the tables replace. The results are
checked equal (tables vs KKT within the interpolation error) before timing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from scipy.interpolate import CubicSpline  # noqa: E402

from bench.common import command, machine  # noqa: E402  (bench/ is a namespace package)
from dynamics.linkage import inverse, kinematics, position, reduced  # noqa: E402
from dynamics.linkage.model import read_linkage  # noqa: E402


def rate_line(label: str, n: int, runs: list[float]) -> str:
    per = np.array(runs) / n * 1e6  # us per lookup
    return (f"  {label:<44} {n / statistics.median(runs):12,.0f} lookups/s   per lookup (us): "
            f"p50 {np.percentile(per, 50):7.3f}  p99 {np.percentile(per, 99):7.3f}  max {per.max():7.3f}")


def timed(fn, repeats: int) -> list[float]:
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--single", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--resolution", type=int, default=720)
    a = ap.parse_args(argv)
    print(f"# bench/linkage.py  machine: {machine()}")
    print(f"# command: {command()}")

    model = read_linkage("jansen_leg")
    t = time.perf_counter()
    table = reduced.tabulate(model, a.resolution)
    print(f"tabulate jansen_leg at {a.resolution} crank angles: {(time.perf_counter() - t) * 1e3:.1f} ms")

    rng = np.random.default_rng(0)
    th = rng.uniform(-50.0, 50.0, a.batch)
    thd, thdd = rng.uniform(-12, 12, a.batch), rng.uniform(-60, 60, a.batch)
    F = rng.normal(0.0, 30.0, (a.batch, 2))

    # peer: scipy CubicSpline on the same tabulated knots (I, G, J_P; I' as its derivative)
    grid = 2 * np.pi * np.arange(a.resolution + 1) / a.resolution
    knots = reduced.lookup(table, grid[:-1])
    spl = CubicSpline(grid, np.vstack([knots[:, [0, 2, 5, 6]], knots[:1, [0, 2, 5, 6]]]), bc_type="periodic")
    dspl = spl.derivative()

    def scipy_torque(x, xd, xdd, f):
        x = np.mod(x, 2 * np.pi)
        v, dI = spl(x), dspl(x)[..., 0]
        return v[..., 0] * xdd + 0.5 * dI * xd ** 2 + v[..., 1] - v[..., 2] * f[..., 0] - v[..., 3] * f[..., 1]

    # correctness before timing: tables == scipy peer; tables ~ full KKT within interpolation error
    ours = reduced.crank_torque(table, th, thd, thdd, F)
    assert np.allclose(ours, scipy_torque(th, thd, thdd, F), rtol=1e-9, atol=1e-9)
    k = 200
    q = position.assembled_positions(model, th[:k])
    qd = kinematics.velocities(model, q, th[:k], thd[:k])
    kkt = inverse.inverse_dynamics(model, q, qd, th[:k], thd[:k], thdd[:k], F[:k]).effort
    err = np.max(np.abs(ours[:k] - kkt))
    print(f"max |table - KKT| over {k} random states: {err:.2e} N m (max |tau| {np.abs(kkt).max():.2f} N m)")

    print(f"batched ({a.batch} crank angles per call, median of {a.repeats}):")
    print(rate_line("walklab reduced.crank_torque", a.batch,
                    timed(lambda: reduced.crank_torque(table, th, thd, thdd, F), a.repeats)))
    print(rate_line("peer: scipy CubicSpline", a.batch,
                    timed(lambda: scipy_torque(th, thd, thdd, F), a.repeats)))
    nk = 2000
    print(rate_line("peer: full KKT solve (position+velocity+KKT)", nk, timed(
        lambda: inverse.inverse_dynamics(
            model, qq := position.assembled_positions(model, th[:nk]),
            kinematics.velocities(model, qq, th[:nk], thd[:nk]), th[:nk], thd[:nk], thdd[:nk], F[:nk]),
        max(3, a.repeats // 2))))

    n = a.single
    args = list(zip(th[:n].tolist(), thd[:n].tolist(), thdd[:n].tolist(), F[:n, 0].tolist(), F[:n, 1].tolist()))

    def single_ours():
        for x, xd, xdd, fx, fy in args:
            reduced.crank_torque_one(table, x, xd, xdd, fx, fy)

    def single_scipy():
        for x, xd, xdd, fx, fy in args[: n // 10]:
            scipy_torque(np.array(x), xd, xdd, np.array([fx, fy]))

    lat = []
    for x, xd, xdd, fx, fy in args[:20000]:
        t0 = time.perf_counter_ns()
        reduced.crank_torque_one(table, x, xd, xdd, fx, fy)
        lat.append(time.perf_counter_ns() - t0)
    lat = np.array(lat) / 1e3
    print(f"single sample (one call per lookup, median of {a.repeats}):")
    print(rate_line("walklab reduced.crank_torque_one", n, timed(single_ours, a.repeats)))
    print(rate_line("peer: scipy CubicSpline, one call per sample", n // 10, timed(single_scipy, a.repeats)))
    print(f"  crank_torque_one latency (us): p50 {np.percentile(lat, 50):.2f}  p99 {np.percentile(lat, 99):.2f}  "
          f"max {lat.max():.2f}  (incl. ~0.1 us timer overhead)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
