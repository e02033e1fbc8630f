"""Per-sample cost at 1 kHz of COP + ZMP + contact for a 16-foot Jansen walker.

Run: .venv/bin/python bench/ground.py [--seconds 1.0] [--batch 10000]

The walker: 16 Jansen legs (configs/models/jansen_leg.toml, foot point F, assembled by
dynamics.linkage), 8 per side at y = ±0.2 m with cranks 45° apart (the right side 22.5° behind),
chassis held in place (treadmill), crank at 1 rev/s, ground 8 mm above the lowest foot point
(models.md 2). Per sample:
  contact   penetration of 16 feet against z = 0, Lankarani–Nikravesh (K = 2e4 N/m^1.5, c_r = 0.5,
            v_min = 1e-3 m/s) with latching, regularised Coulomb friction (μ = 0.4), episode energy;
  wrench    the 16 foot forces summed to the ground wrench about the origin (contact_wrench);
  zmp       ZMP of that wrench (zmp_of_wrench) and the kinematic ZMP from CoM/centroidal arrays
            (zmp_centroidal);
  margin    support polygon of the feet in contact and the signed margin of the ZMP;
  cop       two type-2 force plates (one per side) raw channels -> lab COP, combined COP.
Modes: one batched call over --batch samples (offline), and live blocks of 1 and 10 samples (a bus
frame) with the contact state carried between calls; each first as the modules' functions one after
the other, then as the fused stage (dynamics.ground_stage.GroundStage: the same quantities in one
compiled call, a reused output workspace). Peer: scipy.spatial.ConvexHull (Qhull) for the support hull.
Last: plate inverse dynamics (dynamics.plate_id) and the kinematic ZMP (zmp_model) of human15 (32 DoF) with
two plates, in blocks of 1, 10 and 1000 samples.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial import ConvexHull

# The repository root first: a bench/<name>.py named like a package would otherwise shadow it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import command, machine  # noqa: E402

from dynamics import forceplate as fp  # noqa: E402
from dynamics.contact import Friction, NormalLaw, Plane, contact_forces, contact_wrench, penetration  # noqa: E402
from dynamics.linkage.constraints import point_positions  # noqa: E402
from dynamics.linkage.model import read_linkage  # noqa: E402
from dynamics.linkage.position import assembled_positions  # noqa: E402
from dynamics.support import stability_margin, support_margin, support_polygon  # noqa: E402
from dynamics.zmp import zmp_centroidal, zmp_of_wrench  # noqa: E402
from dynamics.ground_stage import GroundSample, GroundStage  # noqa: E402

RATE = 1000.0
N_FEET = 16
MASS = 2.0 + 16 * 0.6  # kg: chassis + legs (order of magnitude; the cost does not depend on it)


def walker_feet(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Foot positions and velocities (n, 16, 3), lab frame, from the Jansen leg's foot path."""
    leg = read_linkage("jansen_leg")
    s = np.linspace(0.0, 2 * np.pi, 721)
    foot = point_positions(leg, assembled_positions(leg, s), "F")           # (721, 2) x forward, y up
    ground = foot[:, 1].min() + 0.008
    t = np.arange(n) / RATE
    pos = np.empty((n, N_FEET, 3))
    for k in range(N_FEET):
        side, j = divmod(k, 8)
        phase = j * np.pi / 4 + side * np.pi / 8
        ang = np.mod(2 * np.pi * t + phase, 2 * np.pi)
        pos[:, k, 0] = np.interp(ang, s, foot[:, 0])
        pos[:, k, 1] = 0.2 if side == 0 else -0.2
        pos[:, k, 2] = np.interp(ang, s, foot[:, 1]) - ground
    vel = np.gradient(pos, 1.0 / RATE, axis=0)
    return pos, vel


def plates_and_raw(pos, force):
    """Two type-2 plates (left/right rows of feet) and their raw channels carrying the foot forces."""
    plates, raws = [], []
    for side, y0 in ((0, 0.0), (1, -0.4)):
        corners = np.array([[-0.8, y0, 0.0], [0.8, y0, 0.0], [0.8, y0 + 0.4, 0.0], [-0.8, y0 + 0.4, 0.0]])  # z-down plate
        p = fp.Plate(type=2, corners=corners, origin=np.array([0.0, 0.0, -0.04]), name=f"FP{side + 1}")
        sel = slice(8 * side, 8 * side + 8)
        F = force[:, sel].sum(axis=1)
        n_o = np.cross(pos[:, sel], force[:, sel]).sum(axis=1)
        R = p.rotation
        Fp = F @ R
        Ms = (n_o - np.cross(p.centre, F)) @ R
        plates.append(p)
        raws.append(np.column_stack([Fp, Ms - np.cross(Fp, p.origin)]))
    return plates, raws


def centroidal_arrays(n, rng):
    com = np.column_stack([0.01 * rng.standard_normal(n), np.zeros(n), 0.55 + 0.005 * rng.standard_normal(n)])
    return com, MASS * 0.3 * rng.standard_normal((n, 3)), 0.05 * rng.standard_normal((n, 3))


class Pipeline:
    """The per-sample work, callable on a block of samples with carried contact state."""

    def __init__(self):
        self.law = NormalLaw("lankarani_nikravesh", 2e4, restitution=0.5, v_min=1e-3)
        self.friction = Friction(0.4, kind="tanh", v_s=1e-2)
        self.ground = Plane()
        self.state = None
        self.refs = np.zeros((1, 1, 3))
        self.one_foot = np.zeros(N_FEET, int)

    def contact(self, pos, vel):
        kin = penetration(self.ground, pos, vel)
        res = contact_forces(self.law, kin, self.friction, self.state)
        self.state = res.state
        return kin, res

    def wrench_zmp(self, pos, force, com, pdot, ldot):
        F, M = contact_wrench(pos, force, np.broadcast_to(self.refs, (pos.shape[0], 1, 3)), self.one_foot)
        z = zmp_of_wrench(F[:, 0], M[:, 0], 0.0, 20.0)
        zk = zmp_centroidal(MASS, com, pdot, ldot)
        return z, zk

    @staticmethod
    def cop(plates, raws):
        return fp.combine(plates, [fp.process(p, r) for p, r in zip(plates, raws)])

    def step(self, pos, vel, plates, raws, com, pdot, ldot):
        kin, res = self.contact(pos, vel)
        z, _ = self.wrench_zmp(pos, res.force, com, pdot, ldot)
        margin, _ = support_margin(pos, kin.delta > 0, z.point)
        return self.cop(plates, raws), margin


def fused_stage(pipe: Pipeline, plates) -> GroundStage:
    """The same laws, ZMP thresholds and plates as `pipe` and `Pipeline.cop`, in one stage."""
    return GroundStage(pipe.law, N_FEET, pipe.friction, pipe.ground, min_fz=20.0, mass=MASS, plates=plates)


def stats(label, ns, per=1):
    ns = np.asarray(ns, float) / per
    p50, p99, mx = np.percentile(ns, 50), np.percentile(ns, 99), ns.max()
    print(f"{label:<44} p50 {p50 / 1e3:9.2f} us  p99 {p99 / 1e3:9.2f} us  max {mx / 1e3:9.2f} us  "
          f"({p50 * RATE / 1e9 * 100:6.2f} % of 1 kHz)")


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return np.array(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="approximate timing time per live case")
    ap.add_argument("--batch", type=int, default=10000, help="samples in the offline batch")
    args = ap.parse_args()
    print(f"machine: {machine(f'numpy {np.__version__}')}")
    print(f"command: {command()}")
    rng = np.random.default_rng(0)
    n = args.batch
    pos, vel = walker_feet(n)
    com, pdot, ldot = centroidal_arrays(n, rng)
    pipe = Pipeline()
    _, res = pipe.contact(pos, vel)
    plates, raws = plates_and_raw(pos, res.force)
    in_c = penetration(pipe.ground, pos, vel).delta > 0
    print(f"walker: {N_FEET} feet, feet in contact per sample {in_c.sum(1).min()}-{in_c.sum(1).max()}, "
          f"peak F_N {res.f_normal.max():.1f} N, episodes closed {int(res.lift_off.sum())}")

    # --- offline: one call over n samples, cost per sample
    print(f"\nbatched, {n} samples per call (per-sample cost = call time / {n}):")
    reps = 3
    pipe.state = None
    stats("contact (penetration + LN + friction)", timed(lambda: pipe.contact(pos, vel), reps), n)
    stats("wrench + ZMP (plate-free + kinematic)", timed(lambda: pipe.wrench_zmp(pos, res.force, com, pdot, ldot), reps), n)
    z = zmp_of_wrench(*(w[:, 0] for w in contact_wrench(pos, res.force, np.zeros((n, 1, 3)), np.zeros(N_FEET, int))), 0.0, 20.0)
    stats("support polygon + margin (loop per sample)", timed(lambda: support_margin(pos, in_c, z.point), 1), n)
    stats("COP: 2 type-2 plates + combine", timed(lambda: pipe.cop(plates, raws), reps), n)
    pipe.state = None
    stats("all of the above", timed(lambda: pipe.step(pos, vel, plates, raws, com, pdot, ldot), reps), n)
    cent = np.column_stack([com, pdot, ldot])
    fused = fused_stage(pipe, plates)
    fused.step(pos[:1], vel[:1], [r[:1] for r in raws], cent[:1])     # loads the kernel (not a per-call cost)
    fused.reset()
    stats("fused stage (GroundStage.step)", timed(lambda: fused.step(pos, vel, raws, cent), reps), n)

    # --- live: blocks of 1 sample and of 10 samples (a bus frame) with carried state
    steps = int(max(200, min(n, args.seconds * 2000)))
    for block in (1, 10):
        print(f"\nlive, {block}-sample blocks ({steps} consecutive samples, contact state carried; per-sample figures):")
        pipe.state = None
        parts = {"contact": [], "wrench + ZMP": [], "support + margin": [], "COP 2 plates + combine": [], "total": []}
        for i in range(0, steps, block):
            sl = slice(i, i + block)
            t0 = time.perf_counter_ns()
            kin, r = pipe.contact(pos[sl], vel[sl])
            t1 = time.perf_counter_ns()
            zz, _ = pipe.wrench_zmp(pos[sl], r.force, com[sl], pdot[sl], ldot[sl])
            t2 = time.perf_counter_ns()
            support_margin(pos[sl], kin.delta > 0, zz.point)
            t3 = time.perf_counter_ns()
            pipe.cop(plates, [rw[sl] for rw in raws])
            t4 = time.perf_counter_ns()
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                parts[k].append(v)
        for k, v in parts.items():
            stats(k, v, block)
        fused.reset()
        out = GroundSample.empty(block, N_FEET, len(plates))
        ns = []
        for i in range(0, steps - block + 1, block):
            sl = slice(i, i + block)
            blk = (pos[sl], vel[sl], [rw[sl] for rw in raws], cent[sl])
            t0 = time.perf_counter_ns()
            fused.step(*blk, out=out)
            ns.append(time.perf_counter_ns() - t0)
        stats("fused stage, all of the above", ns, block)

    # --- peer: the support hull, walklab (monotone chain) vs scipy ConvexHull (Qhull)
    m = min(steps, n)
    idx = [i for i in range(m) if in_c[i].sum() >= 3]
    ours = timed(lambda: [support_polygon(pos[i], in_c[i]) for i in idx], 1) / max(len(idx), 1)
    qhull_ns = []
    for i in idx:
        p2 = pos[i, in_c[i], :2]
        t0 = time.perf_counter_ns()
        try:
            ConvexHull(p2)
        except Exception:  # collinear contacts: Qhull refuses, walklab returns a segment
            pass
        qhull_ns.append(time.perf_counter_ns() - t0)
    print(f"\npeer, support hull of the feet in contact ({len(idx)} samples with >= 3 feet down):")
    stats("walklab support_polygon (mean per sample)", ours)
    stats("scipy.spatial.ConvexHull", qhull_ns)
    poly = support_polygon(pos[idx[0]], in_c[idx[0]])
    stats("stability_margin, 1 point", timed(lambda: stability_margin(z.point[idx[0], :2], poly), 2000))
    plate_id_bench(rng)
    return 0


def plate_id_bench(rng):
    """Inverse dynamics with two plates (human15, 32 DoF): bottom-up, top-down and residual per sample."""
    from dynamics import contact_positions, load_model
    from dynamics.plate_id import PlateLoad, plate_inverse_dynamics
    from dynamics.zmp import zmp_model

    model = load_model("human15")
    print("\nplate inverse dynamics, human15 (32 DoF), 2 plates (ground-free rnea + one position pass, bottom-up + top-down + residual),"
          "\nand the kinematic ZMP of the same motion (zmp_model):")
    for n in (1, 10, 1000):
        q = np.tile(model.neutral(), (n, 1))
        q[:, 2] = 0.8948
        v, a = rng.standard_normal((n, model.nv)), rng.standard_normal((n, model.nv))
        plates = []
        for names in (["heel_r", "toe_r"], ["heel_l", "toe_l"]):
            p = contact_positions(model, q, names)[..., :2].reshape(-1, 2)
            lo, hi = p.min(0) - 0.05, p.max(0) + 0.05
            corners = np.array([[hi[0], hi[1], -1e-3], [lo[0], hi[1], -1e-3], [lo[0], lo[1], -1e-3], [hi[0], lo[1], -1e-3]])
            plates.append(PlateLoad(np.tile([0.0, 0, 358.0], (n, 1)), np.zeros((n, 3)), corners, np.ones(n, bool)))
        reps = {1: 300, 10: 100}.get(n, 5)
        # One call first: the model's generated kernels compile on first use (~50 ms), not a per-call cost.
        timed(lambda: (plate_inverse_dynamics(model, q, v, a, plates, ["foot_r", "foot_l"]), zmp_model(model, q, v, a)), 1)
        t = timed(lambda: plate_inverse_dynamics(model, q, v, a, plates, ["foot_r", "foot_l"]), reps)
        stats(f"block of {n} samples, per sample", t, n)
        t = timed(lambda: zmp_model(model, q, v, a), reps)
        stats("  zmp_model (CoM + centroidal rate), per sample", t, n)


if __name__ == "__main__":
    raise SystemExit(main())
