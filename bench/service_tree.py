"""Tree-model live dynamics in process: CPU per frame of `dynamics.service_tree.TreeService`.

human15 under the simulated marker daemon's synthetic motion (`daq.devices.markers_sim.ModelMarkers`:
walking along x at 1.2 m/s, every joint a sine) carrying its marker set's markers
(`markers_sim.set_positions`, configs/markersets/human15.toml) at 200 Hz in frames of 2 samples (the
daemon's default), and two plates' wrenches at 1 kHz in frames of 5 (the plate service's): one long
plate under the walkway carrying body weight at the base's ground point, one beside it reading
nothing. The frames are fed one per `feed`, in time order, as the process does. Printed: CPU time
(thread clock) per feed that computed samples (p50/p99), per feed of a marker frame that did not (the
segment fits, joint coordinates and rates alone), and per output sample, and each kinematics stage's
CPU per marker frame; beside the peer: the offline
pipeline (`fit_segments`, `joint_coordinates`, `joint_rates`, `marker_inverse_dynamics`) on the whole
record at once, per sample. On the compiled kernels and on the numpy path (``WALKLAB_JIT=0``).

    python bench/service_tree.py [--seconds 10]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from daq.devices.markers_sim import ModelMarkers, load_marker_set, set_positions  # noqa: E402
from daq.frames import Frame  # noqa: E402
from dynamics import forceplate as fp  # noqa: E402
from dynamics import human15_markers as h15  # noqa: E402
from dynamics import kernels  # noqa: E402
from dynamics.plate_id import PlateLoad  # noqa: E402
from dynamics.service_tree import TreeService, TreeSettings  # noqa: E402

T0 = 10 ** 12


def frames(seconds: float):
    """(model, marker set, plates, frames in time order, markers {label: (N, 3)} at 200 Hz, plate rows)."""
    motion = ModelMarkers("human15", 1.2, 1.1)
    model, mset = motion.model, load_marker_set("human15")
    tm = np.arange(round(seconds * 200)) / 200
    pos = set_positions(model, mset, motion.q(tm))
    tp = np.arange(round(seconds * 1000)) / 1000
    weight = model.total_mass * 9.81
    base_x = 1.2 * tp
    wrench = np.zeros((tp.size, 7))
    wrench[:, 2], wrench[:, 6] = weight, 1.0
    corners1 = np.array([[seconds * 1.2 + 1, 0.5, 0], [-1, 0.5, 0], [-1, -0.5, 0], [seconds * 1.2 + 1, -0.5, 0]])
    plates = [(n, fp.Plate(type=2, corners=c, origin=np.array([0.0, 0.0, -0.04]), name=n))
              for n, c in (("FP1", corners1), ("FP2", corners1 + [0, 2.0, 0]))]
    centre = plates[0][1].centre
    wrench[:, 4] = -(base_x - centre[0]) * weight      # COP at the base's x: M_y = −(x_cop − x_c) F_z about the centre
    out = []
    chans = tuple(f"{m}:{a}" for m in mset.labels for a in "xyz")
    flat = pos.reshape(tm.size, -1)
    for k, i in enumerate(range(0, tm.size - 1, 2)):
        t0 = T0 + round(tm[i] * 1e9)
        out.append((t0 + 5_000_000, Frame("markers/sim", "markers", k, t0, t0, t0, 200.0, chans, ("m",) * len(chans),
                                          flat[i:i + 2])))
    for n, _ in plates:
        rows = wrench if n == "FP1" else np.zeros_like(wrench)
        for k, i in enumerate(range(0, tp.size - 4, 5)):
            t0 = T0 + round(tp[i] * 1e9)
            out.append((t0 + 4_000_000, Frame(f"dynamics/grf/{n}", "grf", k, t0, t0, t0, 1000.0,
                                              ("Fx", "Fy", "Fz", "Mx", "My", "Mz", "valid"), ("1",) * 7, rows[i:i + 5])))
    out.sort(key=lambda x: x[0])
    return model, mset, plates, [f for _, f in out], {m: pos[:, j] for j, m in enumerate(mset.labels)}, wrench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of synthetic walking fed")
    args = ap.parse_args()
    print(f"machine: {machine(f'numpy {np.__version__}')}")
    print(f"command: python bench/service_tree.py --seconds {args.seconds:g}")
    model, mset, plates, fr, markers, wrench = frames(args.seconds)
    n_markers = sum(f.stream == "markers/sim" for f in fr)
    print(f"tree dynamics in process: {len(fr)} input frames ({n_markers} marker frames), one per feed")
    feet = ("foot_l", "foot_r")
    for jit in (True, False):
        with kernels.use_jit(jit):
            for _ in range(2):          # the second pass is measured (kernels loaded, caches warm)
                samples = [0]

                def publish(stream, data, **kw):
                    if stream == "dynamics/torques":
                        samples[0] += len(data)

                svc = TreeService(model, mset, feet, plates, "markers/sim", TreeSettings(), publish, clock=lambda: 0)
                computed, marker_only = [], []
                for f in fr:
                    n0 = len(svc.latencies)
                    c0 = time.thread_time_ns()
                    svc.feed((f,))
                    dt = time.thread_time_ns() - c0
                    if len(svc.latencies) > n0:
                        computed.append(dt)
                    elif f.stream == "markers/sim":
                        marker_only.append(dt)
                total = sum(computed) + sum(marker_only)
            c0 = time.thread_time_ns()
            q = h15.joint_coordinates(model, mset, h15.fit_segments(model, mset, markers))
            v, a = h15.joint_rates(model, q, 200.0)
            w = wrench[::5]
            loads = [PlateLoad(w[:, :3] if n == "FP1" else 0 * w[:, :3],
                               (np.cross(p.centre, w[:, :3]) + w[:, 3:6]) if n == "FP1" else 0 * w[:, :3],
                               p.corners, np.full(len(w), n == "FP1"), n) for n, p in plates]
            h15.marker_inverse_dynamics(model, q, v, a, loads, feet)
            offline = (time.thread_time_ns() - c0) / len(q)
            c, m = np.array(computed) * 1e-3, np.array(marker_only) * 1e-3
            stages = _stages(svc, [f for f in fr if f.stream == "markers/sim"])
            print(f"  {'compiled' if jit else 'numpy   '}: feeds that computed p50 {np.median(c):7.1f}  p99 "
                  f"{np.percentile(c, 99):7.1f} us (n = {c.size}); marker frames alone p50 {np.median(m):7.1f} us "
                  f"(n = {m.size}); {total * 1e-3 / max(samples[0], 1):6.1f} us CPU per output sample; "
                  f"peer, offline on the whole record: {offline * 1e-3:6.1f} us per sample")
            print("            per 2-sample marker frame, p50/p99 us: " + "; ".join(
                f"{k} {np.median(v):6.1f}/{np.percentile(v, 99):6.1f}" for k, v in stages.items()))


def _stages(svc: TreeService, marker_frames: list) -> dict[str, np.ndarray]:
    """CPU time (us) of the kinematics stages on each marker frame, as `TreeService._markers` runs
    them: the segment fits, the joint coordinates, the rates of the 6 rows around them."""
    out: dict[str, list[float]] = {"segment fits": [], "joint coordinates": [], "rates": []}
    q_prev = np.full(svc.model.nq, np.nan)
    for f in marker_frames:
        data = np.concatenate([np.asarray(f.data, float), np.full((f.samples, 1), np.nan)], axis=1)
        pos = data[:, svc.cols]
        c0 = time.thread_time_ns()
        fits = h15.fit_positions(svc.plan, pos)
        c1 = time.thread_time_ns()
        q = h15.joint_coordinates(svc.model, svc.mset, fits, q_prev, svc.links, svc.plan)
        c2 = time.thread_time_ns()
        h15.joint_rates(svc.model, np.concatenate([q, q, q]), f.rate_hz)
        c3 = time.thread_time_ns()
        q_prev = q[-1]
        for k, dt in zip(out, (c1 - c0, c2 - c1, c3 - c2)):
            out[k].append(dt * 1e-3)
    return {k: np.array(v) for k, v in out.items()}


if __name__ == "__main__":
    main()
