"""Inverse dynamics throughput and latency of dynamics.rnea against Pinocchio, same run.

Run: .venv/bin/python bench/dynamics.py [--samples 100000] [--calls 3000] [--model human15]

(0) The compiled kernels (dynamics/kernels): load (or compile) time in this process.
(1) Batch: one dynamics.rnea call on N samples of the floating-base 15-segment human
    (configs/models/human15.toml) against a Python loop of pinocchio.rnea over the same samples on
    the same model; torques compared (max |Δτ|) and throughput ratio printed. Both walklab paths
    run: the compiled kernels (default; over the cores from rnea.PARALLEL_FROM samples, and again
    on one thread) and the numpy path (WALKLAB_JIT=0).
(2) Single sample: latency of dynamics.rnea(q, v, a) for one sample (p50/p99/max) on both paths,
    with pinocchio.rnea from Python as the reference.
(3) Jansen table lookup rate: bench/linkage.py, run from here (batched and single-sample).
(4) Forward dynamics: dynamics.aba (what dynamics.forward_dynamics runs) and the CRBA + Cholesky
    route (dynamics.crba, nonlinear_effects, numpy Cholesky solve) batched, against a Python loop
    of pinocchio.aba (accelerations compared), and their single-sample latency.

Both libraries load the same URDF, written by dynamics.save_urdf from the TOML model (floating
base: free flyer added on load by both). A model URDF cannot express (spherical joints) falls
back to building the Pinocchio model from the walklab Model through Pinocchio's C++ API
(dynamics.pinocchio_model.to_pinocchio, identical joint order and q/v layout); the output says
which path ran.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402

import dynamics  # noqa: E402
from dynamics import kernels  # noqa: E402
from dynamics.pinocchio_model import to_pinocchio  # noqa: E402
from dynamics.samples import random_configuration  # noqa: E402


def percentiles(times_s: list[float]) -> str:
    t = np.array(times_s) * 1e6
    return f"p50 {np.percentile(t, 50):8.1f} µs   p99 {np.percentile(t, 99):8.1f} µs   max {t.max():8.1f} µs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000, help="batch size N for (1)")
    ap.add_argument("--calls", type=int, default=3000, help="single-sample calls for (2)")
    ap.add_argument("--model", default="human15", help="model name or TOML path")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the batch timings (median reported)")
    args = ap.parse_args(argv)
    import pinocchio as pin

    print(f"machine: {machine()}")
    print(f"command: {command()}")
    print(f"numpy {np.__version__}, pinocchio {pin.__version__}")
    toml_model = dynamics.load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        urdf = Path(tmp) / f"{toml_model.name}.urdf"
        try:
            dynamics.save_urdf(toml_model, urdf)
        except dynamics.ModelError as e:
            print(f"peer model: built with to_pinocchio ({e})")
            model, pm = toml_model, to_pinocchio(toml_model)
        else:
            floating = toml_model.segments[0].joint.type == "free_flyer"
            print(f"peer model: the same URDF (dynamics.save_urdf of {args.model}) loaded by both, floating={floating}")
            model = dynamics.load_urdf(urdf, floating=floating)
            pm = (pin.buildModelFromUrdf(str(urdf), pin.JointModelFreeFlyer()) if floating
                  else pin.buildModelFromUrdf(str(urdf)))
            pm.gravity = pin.Motion(np.concatenate((model.gravity, np.zeros(3))))
    pd = pm.createData()
    joints = {}
    for s in model.segments:
        joints[s.joint.type] = joints.get(s.joint.type, 0) + 1
    print(f"model {model.name}: {len(model.segments)} segments, nq = {model.nq}, nv = {model.nv}, "
          f"{model.total_mass:.1f} kg, joints {joints}")

    rng = np.random.default_rng(0)
    N = args.samples
    q = random_configuration(model, rng, N)
    v = rng.normal(size=(N, model.nv))
    a = rng.normal(size=(N, model.nv))

    # (0) the compiled kernels; forced at every N here (by default an aba or kinematics call of
    # NUMPY_BATCH_FROM samples or more takes the numpy path, the faster one there)
    print(f"\n(0) compiled kernels (numba cache; `walklab model compile` warms it); 'compiled' rows force them at "
          f"every N (default: aba and kinematics on the numpy path from {kernels.NUMPY_BATCH_FROM} samples per call)")
    kernels.NUMPY_BATCH_FROM = 1 << 62
    for name, seconds, compiled in kernels.compile_all():
        print(f"    {name:<24} {'compiled' if compiled else 'loaded'} in {seconds:6.2f} s")

    # (1) batch throughput, both walklab paths and the Pinocchio loop in the same run
    paths = (("compiled", True), ("numpy path", False))
    rnea_module = sys.modules["dynamics.rnea"]
    for _, jit in paths:
        with kernels.use_jit(jit):
            dynamics.rnea(model, q[:40], v[:40], a[:40])   # generate / load each path's kernel once
    # wall time, and this process's CPU time (on a loaded machine the wall time also counts the
    # time other jobs held the cores)
    times: dict[str, list[tuple[float, float]]] = {"pinocchio.rnea loop": []}
    results = {}
    parallel_from = rnea_module.PARALLEL_FROM
    for _ in range(args.repeats):
        for label, jit in paths:
            with kernels.use_jit(jit):
                t0, c0 = time.perf_counter(), time.process_time()
                results[label] = dynamics.rnea(model, q, v, a)
                times.setdefault(f"dynamics.rnea {label}", []).append((time.perf_counter() - t0, time.process_time() - c0))
        # the compiled kernel on one thread (the row above runs over the cores from PARALLEL_FROM samples)
        rnea_module.PARALLEL_FROM = 1 << 62
        t0, c0 = time.perf_counter(), time.process_time()
        results["one thread"] = dynamics.rnea(model, q, v, a)
        times.setdefault("dynamics.rnea compiled, 1 thread", []).append((time.perf_counter() - t0, time.process_time() - c0))
        rnea_module.PARALLEL_FROM = parallel_from
        t0, c0 = time.perf_counter(), time.process_time()
        tau_pin = np.array([pin.rnea(pm, pd, q[k], v[k], a[k]) for k in range(N)])
        times["pinocchio.rnea loop"].append((time.perf_counter() - t0, time.process_time() - c0))
    t_pin, c_pin = (float(x) for x in np.median(times["pinocchio.rnea loop"], axis=0))
    print(f"\n(1) batch inverse dynamics, N = {N} samples (median of {args.repeats}; wall, and CPU of this process, "
          f"all its threads; 'compiled' runs over the cores from {parallel_from} samples)")
    for label, ts in times.items():
        t, c = (float(x) for x in np.median(ts, axis=0))
        print(f"    {label:<28} {t:8.3f} s   {N / t:12,.0f} samples/s   {t_pin / t:6.2f} x the Pinocchio loop   "
              f"CPU {c:6.3f} s = {c / N * 1e6:5.2f} µs/sample ({c_pin / c:5.2f} x)")
    print("    (targets: compiled >= 5 x the Pinocchio loop and >= 1 M samples/s)")
    for label, tau in results.items():
        print(f"    max |tau - tau_pin| {label:<12} {np.abs(tau - tau_pin).max():.3e} (of max |tau| {np.abs(tau_pin).max():.1f})")
        if not np.allclose(tau, tau_pin, rtol=1e-9, atol=1e-9):
            print("    RESULTS DIFFER", file=sys.stderr)
            return 1
    tau = results["compiled"]

    # (2) single-sample latency
    lat: dict[str, list[float]] = {f"dynamics.rnea {label}": [] for label, _ in paths}
    lat["pinocchio.rnea"] = []
    for k in range(args.calls):
        i = k % N
        for label, jit in paths:
            with kernels.use_jit(jit):
                t0 = time.perf_counter()
                dynamics.rnea(model, q[i], v[i], a[i])
                lat[f"dynamics.rnea {label}"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pin.rnea(pm, pd, q[i], v[i], a[i])
        lat["pinocchio.rnea"].append(time.perf_counter() - t0)
    print(f"\n(2) single-sample latency, {args.calls} calls (target: compiled p50 <= pinocchio.rnea)")
    for label, ts in lat.items():
        print(f"    {label:<26} {percentiles(ts)}")
    # the same calls back to back (warm caches; above, each call follows the other paths' calls):
    # per call, the best of 5 loops of `calls` calls, wall and CPU time
    print(f"    back to back, per call (best of 5 loops of {args.calls}; wall / CPU of this process):")
    q0, v0, a0 = q[0], v[0], a[0]
    for label, fn in (("dynamics.rnea compiled", lambda: dynamics.rnea(model, q0, v0, a0)),
                      ("pinocchio.rnea", lambda: pin.rnea(pm, pd, q0, v0, a0))):
        best = [np.inf, np.inf]
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.calls):
                fn()
            best = [min(best[0], time.perf_counter() - t0), min(best[1], time.process_time() - c0)]
        print(f"    {label:<26} {best[0] / args.calls * 1e6:6.2f} µs / {best[1] / args.calls * 1e6:6.2f} µs")

    print("\n(3) Jansen table lookup rate (bench/linkage.py, target > 100 000 lookups/s)")
    from bench import linkage as bench_linkage

    bench_linkage.main(["--batch", "100000", "--single", "20000", "--repeats", str(max(3, args.repeats))])

    # (4) forward dynamics
    Nf = min(N, 20_000)
    qf, vf, tf = q[:Nf], v[:Nf], tau_pin[:Nf]
    acc_pin = np.array([pin.aba(pm, pd, qf[k], vf[k], tf[k]) for k in range(Nf)])
    print(f"\n(4) forward dynamics, N = {Nf} samples (median of {args.repeats}); single-sample: {args.calls // 3} calls")

    def crba_cholesky(model, q, v, tau):
        L = np.linalg.cholesky(dynamics.crba(model, q))
        b = (tau - dynamics.nonlinear_effects(model, q, v))[..., None]
        return np.linalg.solve(np.swapaxes(L, -1, -2), np.linalg.solve(L, b))[..., 0]

    for name, fn, jit in (("dynamics.aba compiled", dynamics.aba, True), ("dynamics.aba numpy path", dynamics.aba, False),
                          ("CRBA + Cholesky compiled", crba_cholesky, True)):
        with kernels.use_jit(jit):
            fn(model, qf[:40], vf[:40], tf[:40])
            runs = []
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                acc = fn(model, qf, vf, tf)
                runs.append((time.perf_counter() - t0, time.process_time() - c0))
            single = []
            for k in range(args.calls // 3):
                t0 = time.perf_counter()
                fn(model, qf[k], vf[k], tf[k])
                single.append(time.perf_counter() - t0)
        t, c = (float(x) for x in np.median(runs, axis=0))
        print(f"    {name:<26} batch {Nf / t:10,.0f} samples/s   CPU {c / Nf * 1e6:6.2f} µs/sample   "
              f"max |a - a_true| {np.abs(acc - a[:Nf]).max():.1e}")
        print(f"    {'':<26} one   {percentiles(single)}")
    single = []
    for k in range(args.calls // 3):
        t0 = time.perf_counter()
        pin.aba(pm, pd, qf[k], vf[k], tf[k])
        single.append(time.perf_counter() - t0)
    print(f"    {'pinocchio.aba':<26} one   {percentiles(single)}   (target: compiled aba p50 <= 20 µs)")
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(Nf):
        pin.aba(pm, pd, qf[k], vf[k], tf[k])
    print(f"    {'pinocchio.aba loop':<26} batch {Nf / (time.perf_counter() - t0):10,.0f} samples/s   "
          f"CPU {(time.process_time() - c0) / Nf * 1e6:6.2f} µs/sample   max |a - a_true| {np.abs(acc_pin - a[:Nf]).max():.1e}")
    print("    (a_true: the accelerations tau was computed from; random human15 states reach cond(M) ~ 1e13)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
