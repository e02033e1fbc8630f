"""Gait-cycle tables: one leg's sagittal joint angles over one gait cycle, the biped's prescribed leg synergy
source (methods.md j.3), as a small CSV.

The format: ``#`` header lines ``# source: ...`` (provenance) and ``# double_support: P`` (both double
supports together, % of the stride), then the header row ``phase,hip,knee,ankle,tilt`` and one row per
phase k/K of the cycle from the left foot strike: hip flexion, knee flexion, ankle dorsiflexion and pelvis
anterior tilt, rad (Plug-in Gait signs). The shipped table, ``configs/gaits/walking01.csv``, was made by
`controller.synergies.gait_cycle.cycle_from_trial` from a shared trial (that module says how); a robot
config's ``[synergies] gait`` names another. Read by the library build (`controller.synergies.biped`) and
the simulated exoskeleton world (`daq.devices.exo_world_sim`), both through `read_cycle`.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dynamics.synthesis.biped import BipedError
from dynamics.synthesis.semi_inverse import LegCycle

SHIPPED = "gaits/walking01.csv"


def write_cycle(cycle: LegCycle, path: Path) -> Path:
    """Write `cycle` as a gait-cycle table at `path` (module doc); returns the path."""
    path = Path(path)
    with path.open("w", newline="") as f:
        f.write(f"# source: {cycle.source}\n# double_support: {cycle.double_support:.6f}\n")
        w = csv.writer(f)
        w.writerow(["phase", "hip", "knee", "ankle", "tilt"])
        for row in zip(cycle.phase, cycle.hip, cycle.knee, cycle.ankle, cycle.tilt):
            w.writerow([f"{x:.10g}" for x in row])
    return path


def read_cycle(path=None) -> LegCycle:
    """A gait-cycle table (module doc); default the shipped one. BipedError naming the file if bad."""
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
