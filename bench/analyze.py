"""Wall time of `walklab analyze` by stage, on the largest shared trial and on long synthetic ones.

Run: .venv/bin/python bench/analyze.py [--repeat 3] [--minutes 10]

Trials:
  shared    pyCGM2_lower_limb_CGM24_Walking01.c3d (1.5 MB, 171 points, 493 frames at 100 Hz,
            1 plate at 1 kHz: the largest shared file), the whole pipeline with figures and report;
  10 s      its markers tiled to 10 s (each copy moved on by the walked distance; no plates, so
            kinematics, events and metrics only), with figures;
  N min     the same tiled to --minutes minutes, with and without figures;
  subject01 subject01_walk1.trc (OpenSim, 41 markers, 151 frames at 60 Hz) with its GRF file,
            --model human15 (OpenSim marker set, per-foot ground reactions), with figures.
Stages (controller.analyze): load, markers (aliases, gap filling, 6 Hz filter), events, kinematics
(CGM), kinetics, zmp+metrics, report (PNG figures + report.html). Medians of --repeat runs, one
process (workers=1). Peer: ezc3d's own parse of the same file (the floor of the load stage).
"""
import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import command, machine  # noqa: E402

from controller import analyze, report  # noqa: E402
from daq.formats.c3d import Markers  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
NAME = "pyCGM2_lower_limb_CGM24_Walking01.c3d"


def tiled(data: analyze.TrialData, seconds: float) -> analyze.TrialData:
    """The trial's markers repeated to `seconds`, each copy shifted by the pelvis's displacement."""
    pos = data.markers.positions
    lab = data.markers.labels
    sac = (pos[:, lab.index("LPSI")] + pos[:, lab.index("RPSI")]) / 2
    step = np.nanmean(sac[-5:], axis=0) - np.nanmean(sac[:5], axis=0)
    step[2] = 0.0
    n_copies = int(np.ceil(seconds * data.markers.rate / len(pos)))
    out = np.concatenate([pos + k * step for k in range(n_copies)])[: int(seconds * data.markers.rate)]
    return dataclasses.replace(data, markers=Markers(lab, out, data.markers.rate), plates=(), events=(),
                               name=f"tiled_{seconds:g}s")


def run(data: analyze.TrialData, figures: bool, out: Path, model: str = "cgm") -> dict[str, float]:
    t0 = time.perf_counter()
    res = analyze.analyze_trial(data, analyze.Options(model=model, figures=figures))
    analyze.write_results(res, out / data.name)
    t1 = time.perf_counter()
    if figures:
        report.trial_report(res, out / data.name, data)
    stages = dict(res.stages)
    stages["write+report"] = time.perf_counter() - t1
    stages["total"] = time.perf_counter() - t0
    return stages


def table(title: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{title}")
    for k in runs[0]:
        v = [r.get(k, 0.0) for r in runs]
        print(f"  {k:14s} median {statistics.median(v):8.3f} s   min {min(v):8.3f}   max {max(v):8.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=10.0)
    args = ap.parse_args()
    import ezc3d

    print(machine(f"numpy {np.__version__}", f"ezc3d {ezc3d.__version__}" if hasattr(ezc3d, "__version__") else "ezc3d"))
    print(command())
    path = SHARED / NAME
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        loads, peer, runs = [], [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            ezc3d.c3d(str(path))
            peer.append(time.perf_counter() - t)
            t = time.perf_counter()
            data = analyze.load_trial(path)
            loads.append(time.perf_counter() - t)
            runs.append({"load": loads[-1], **run(data, True, out)})
        print(f"\nezc3d parse alone (peer, floor of load): median {statistics.median(peer):.3f} s")
        table(f"{NAME} ({len(data.markers.positions) / data.markers.rate:.2f} s trial, 1 plate), figures",
              runs)
        ten = tiled(data, 10.0)
        table("tiled 10 s trial, no plates, figures", [run(ten, True, out) for _ in range(args.repeat)])
        long = tiled(data, 60 * args.minutes)
        table(f"tiled {args.minutes:g} min trial ({len(long.markers.positions)} frames), no figures",
              [run(long, False, out) for _ in range(max(1, args.repeat - 1))])
        table(f"tiled {args.minutes:g} min trial, figures", [run(long, True, out)])
        trc = analyze.load_trial(SHARED / "subject01_walk1.trc")
        table("subject01_walk1.trc, --model human15 (per-foot GRF kinetics), figures",
              [run(trc, True, out, "human15") for _ in range(args.repeat)])


if __name__ == "__main__":
    main()
