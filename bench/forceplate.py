"""Per-sample cost of raw channels -> lab wrench + COP (+ combined COP) for 2-4 plates at 1 kHz.

Run: .venv/bin/python bench/forceplate.py [--seconds 1.0]

Blocks of 1 and 10 samples (a live daemon's frame) and one 10 s batch (offline), plates of
types 2, 4, 3, 2 in that order. Peer: ezc3d's C++ platform module on the same file
(Walk1.c3d, 2 type-4 plates at 960 Hz), timed as load(extract_forceplat_data=True) − load().
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

# Run as a script, bench/ is sys.path[0] and bench/dynamics.py would shadow the package.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402
from dynamics import forceplate as fp  # noqa: E402

RATE = 1000.0


def make_plates(n):
    rng = np.random.default_rng(0)
    plates = []
    for k, kind in enumerate([2, 4, 3, 2][:n]):
        x0 = 0.6 * k
        corners = np.array([[x0 + 0.5, 0.6, 0], [x0, 0.6, 0], [x0, 0, 0], [x0 + 0.5, 0, 0]])
        origin = [0.12, 0.2, -0.045] if kind == 3 else [0.001, -0.002, 0.04]
        cal = np.eye(6) + 0.01 * rng.standard_normal((6, 6)) if kind == 4 else None
        plates.append(fp.Plate(type=kind, corners=corners, origin=origin, cal_matrix=cal, name=f"FP{k + 1}"))
    return plates


def raw_block(plate, n, rng):
    r = rng.normal(0, 5, (n, plate.n_channels))
    if plate.type == 3:
        r[:, 4:] += 150.0
    else:
        r[:, 2] += 600.0
    return r


def time_calls(fn, min_seconds):
    times = []
    t_end = time.perf_counter() + min_seconds
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return np.array(times, float)


def row(label, times_ns, block):
    p50, p99, mx = np.percentile(times_ns, 50), np.percentile(times_ns, 99), times_ns.max()
    print(f"{label:<34} block {block:>6}  per call p50 {p50 / 1e3:9.1f} us  p99 {p99 / 1e3:9.1f} us  "
          f"max {mx / 1e3:9.1f} us  per sample p50 {p50 / block / 1e3:8.3f} us  "
          f"({p50 / block * RATE / 1e9 * 100:.3f} % of a 1 kHz budget)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="minimum timing time per case")
    args = ap.parse_args()
    print(f"machine: {machine(f'numpy {np.__version__}')}")
    print(f"command: {command()}")
    rng = np.random.default_rng(1)
    for n_plates in (2, 3, 4):
        plates = make_plates(n_plates)
        for block in (1, 10, int(10 * RATE)):
            raws = [raw_block(p, block, rng) for p in plates]

            def per_plate():
                return [fp.process(p, r) for p, r in zip(plates, raws)]

            row(f"{n_plates} plates raw->COP", time_calls(per_plate, args.seconds), block)
            row(f"{n_plates} plates raw->COP+combine",
                time_calls(lambda: fp.combine(plates, per_plate()), args.seconds), block)
    try:
        import ezc3d
    except ImportError:
        return 0
    data = Path(os.environ.get("WALKLAB_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    path = data / "Walk1.c3d"
    if path.is_file():
        from daq.formats import c3d

        n = ezc3d.c3d(str(path), extract_forceplat_data=True)["data"]["platform"][0]["force"].shape[1]
        parse = time_calls(lambda: ezc3d.c3d(str(path)), args.seconds)
        full = time_calls(lambda: ezc3d.c3d(str(path), extract_forceplat_data=True), args.seconds)
        ours = time_calls(lambda: c3d.load(path), args.seconds)
        peer = np.median(full) - np.median(parse)
        print(f"peer ezc3d platforms (C++, 2 type-4 plates, Walk1.c3d, {n} samples): "
              f"{peer / n / 1e3:.3f} us/sample (extract − parse medians)")
        print(f"walklab c3d.load(Walk1.c3d) incl. parse: {np.median(ours) / 1e6:.2f} ms vs ezc3d parse "
              f"{np.median(parse) / 1e6:.2f} ms, parse+platforms {np.median(full) / 1e6:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
