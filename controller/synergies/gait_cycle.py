"""The biped's prescribed leg synergy source: one real gait cycle of sagittal joint angles
(methods.md j.3), read from a shared trial through the analysis pipeline, stored as a small CSV.

``cycle_from_trial(path)`` runs `controller.analyze` on a C3D trial (CGM 1.0 kinematics, the file's
and the plates' gait events), takes the mean over the left strides (`analyze.cycle_curves`) of the
sagittal (X) hip flexion, knee flexion and ankle dorsiflexion and the pelvis anterior tilt, made
periodic by removing the stride-mean's end-to-start drift (`semi_inverse.periodic`), and the double
support share p (% of the stride) from the events. ``write_cycle``/``read_cycle``: the CSV
(``configs/gaits/walking01.csv``, made by ``cycle_from_trial`` from
``../shared/data/pyCGM2_lower_limb_CGM24_Walking01.c3d``, Vicon's pyCGM2 sample walking trial from the
c3d.org sample collection): ``#`` header lines (source, double_support), then ``phase,hip,knee,ankle,tilt``
in rad at phases k/K of the cycle from the left foot strike.
"""
from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np

from dynamics import gait_events as ge
from dynamics.synthesis.biped import BipedError
from dynamics.synthesis.semi_inverse import LegCycle, periodic

SHIPPED = "gaits/walking01.csv"


def cycle_from_trial(path, side: str = "L", points: int = 101) -> LegCycle:
    """The mean gait cycle of `side` of a trial through the analysis pipeline (module doc)."""
    from controller import analyze

    res = analyze.analyze_trial(analyze.load_trial(path))
    if res.events is None or len(res.events.strike[side]) < 2:
        raise BipedError(f"{path}: no complete {side} stride (gait events) to take a cycle from")
    strikes = res.events.strike[side]
    names = {"hip": f"{side}HipAngles", "knee": f"{side}KneeAngles", "ankle": f"{side}AnkleAngles",
             "tilt": f"{side}PelvisAngles"}
    curves, strides = {}, 0
    for k, n in names.items():
        cyc = ge.normalise_cycles(res.series[n][:, 0], res.time, strikes, points)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            curves[k] = periodic(np.radians(np.nanmean(cyc, axis=0)))
        strides = len(cyc)
    p = double_support(res.events, side)
    K = points - 1
    return LegCycle(np.arange(K) / K, curves["hip"], curves["knee"], curves["ankle"], curves["tilt"], p,
                    f"{Path(path).name}: mean of {strides} {side} strides through walklab analyze (CGM 1.0)")


def double_support(events: ge.Events, side: str = "L") -> float:
    """Mean double support share (%) of `side`'s strides: from its strike to the other foot's off,
    plus from the other foot's strike to its own off."""
    o = "R" if side == "L" else "L"
    s, out = np.sort(events.strike[side]), []
    for a, b in zip(s[:-1], s[1:]):
        off_o = events.off[o][(events.off[o] > a) & (events.off[o] < b)]
        str_o = events.strike[o][(events.strike[o] > a) & (events.strike[o] < b)]
        if len(off_o) and len(str_o):
            off_s = events.off[side][(events.off[side] > str_o[0]) & (events.off[side] < b)]
            if len(off_s):
                out.append(((off_o[0] - a) + (off_s[0] - str_o[0])) / (b - a) * 100.0)
    if not out:
        raise BipedError(f"no {side} stride with both double supports in the events")
    return float(np.mean(out))


def write_cycle(cycle: LegCycle, path: Path) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        f.write(f"# source: {cycle.source}\n# double_support: {cycle.double_support:.6f}\n")
        w = csv.writer(f)
        w.writerow(["phase", "hip", "knee", "ankle", "tilt"])
        for row in zip(cycle.phase, cycle.hip, cycle.knee, cycle.ankle, cycle.tilt):
            w.writerow([f"{x:.10g}" for x in row])
    return path


def read_cycle(path=None) -> LegCycle:
    """A cycle CSV (module doc); default the shipped one. BipedError naming the file if bad."""
    import configs

    p = configs.path(SHIPPED) if path is None else Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise BipedError(f"{p}: cannot read the gait cycle ({e.strerror})") from None
    head = dict(ln[1:].strip().split(": ", 1) for ln in lines if ln.startswith("#") and ": " in ln)
    try:
        rows = np.array([[float(x) for x in ln.split(",")] for ln in lines if ln and not ln.startswith(("#", "phase"))])
        return LegCycle(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4],
                        float(head["double_support"]), head.get("source", ""))
    except (KeyError, ValueError, IndexError) as e:
        raise BipedError(f"{p}: not a gait cycle table ({e})") from None
