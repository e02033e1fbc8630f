"""The biped's prescribed leg synergy source: one real gait cycle of sagittal joint angles
(methods.md j.3), read from a shared trial through the analysis pipeline, stored as a small CSV.

``cycle_from_trial(path)`` runs `controller.analyze` on a C3D trial (CGM 1.0 kinematics, the file's
and the plates' gait events), takes the mean over the left strides (`analyze.cycle_curves`) of the
sagittal (X) hip flexion, knee flexion and ankle dorsiflexion and the pelvis anterior tilt, made
periodic by removing the stride-mean's end-to-start drift (`semi_inverse.periodic`), and the double
support share p (% of the stride) from the events. The CSV, its reader and writer are a file format,
`daq.formats.gait_cycle` (``read_cycle``, ``write_cycle``): ``configs/gaits/walking01.csv`` was made by
``cycle_from_trial`` from ``../shared/data/pyCGM2_lower_limb_CGM24_Walking01.c3d``, Vicon's pyCGM2 sample
walking trial from the c3d.org sample collection.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from dynamics import gait_events as ge
from dynamics.synthesis.biped import BipedError
from dynamics.synthesis.semi_inverse import LegCycle, periodic


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
