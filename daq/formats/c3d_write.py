"""C3D trials out: markers (labels, residuals), analog channels, force platforms, events, subject.

``write(path, ...)`` builds the file with ezc3d. Everything comes in SI, lab frame (z up), time
first, and is converted here, at the edge (the inverse of `daq.formats.c3d.load`):

* lengths in ``POINT:UNITS`` = mm: marker positions and residuals ×1000, plate CORNERS and ORIGIN
  ×1000; NaN marker samples are written as (0, 0, 0) with residual −1 (the C3D gap convention);
  float storage with ``POINT:SCALE`` = −0.1: residuals are kept in 0.1 mm steps up to 25.5 mm
  (C3D stores a residual as an 8-bit multiple of |SCALE|);
* force-plate channels are written as analog channels in the units the readers expect with mm
  points: forces N, moments N·mm (types 1 and 2), type-1 COP in mm, type-3 channels N; a type-4
  plate's raw channels are written as they are and its CAL_MATRIX rescaled so that it maps them to
  N and N·mm (rows 4–6 ×1000);
* FORCE_PLATFORM parameters: USED, TYPE, CORNERS (3, 4, plates), ORIGIN (3, plates), CHANNEL
  (channels, plates; 1-based into ANALOG), CAL_MATRIX (6, 6, plates; identity for plates that have
  none), ZERO = [0, 0] (no baseline: the samples are written already zeroed or raw, as given);
* ANALOG:RATE must be an integer multiple of POINT:RATE, and the analog sample count that
  multiple of the point frame count (C3D stores analogs as subframes of point frames);
* events: ``EVENT`` group, times in s on the file's clock (point frame i at (first_frame + i)/rate,
  as Nexus writes them and `daq.formats.c3d.load` reads them); subject: numeric entries in
  ``PROCESSING`` written as given, in the file's units as Vicon stores them (lengths in mm,
  ``Bodymass`` in kg; cgm.md §2) — `daq.formats.c3d.load` returns them as stored — and the name in
  ``SUBJECTS:NAMES``.

Readers checked: ezc3d (points, analogs and its force-platform module, in the tests) and
`daq.formats.c3d.load`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from daq.formats.c3d import Analogs, C3DError, Markers
from dynamics import forceplate as fp

MM = 1000.0  # mm per m
#: Resolution of the residuals written [mm] (POINT:SCALE = -RESIDUAL_STEP_MM); larger ones are clipped.
RESIDUAL_STEP_MM = 0.1


@dataclass(frozen=True)
class C3DPlate:
    """A force platform to write: its description (SI, lab frame) and the 0-based indices of its
    raw channels among the analogs, in the order of its type (`dynamics.forceplate.N_CHANNELS`)."""

    plate: fp.Plate
    channels: tuple[int, ...]


@dataclass(frozen=True)
class Event:
    """A trial event: time [s] from the first frame, label (``Foot Strike``), context
    (``Left``, ``Right``, ``General``), free description."""

    time_s: float
    label: str
    context: str = "General"
    description: str = ""


def _plate_scale(kind: int) -> np.ndarray:
    """Factor from SI raw channels to the file's units (N, N·mm, mm) per channel of a plate type."""
    return {1: np.array([1, 1, 1, MM, MM, MM]), 2: np.array([1, 1, 1, MM, MM, MM]),
            3: np.ones(8), 4: np.ones(6)}[kind].astype(float)


def _int_parameter(c, group: str, name: str, values: np.ndarray) -> None:
    """An INT parameter (ezc3d's add_parameter stores integer arrays as floats, and its force-platform
    module refuses a float TYPE)."""
    import ezc3d

    param = ezc3d.ezc3d.Parameter(name, "")
    param.set(ezc3d.ezc3d.VecInt([int(v) for v in np.asarray(values).reshape(-1, order="F")]), list(np.shape(values)))
    c["parameters"].add_parameter(group, param)


def write(path: str | Path, *, markers: Markers | None = None, residuals: np.ndarray | None = None,
          analogs: Analogs | None = None, plates: Sequence[C3DPlate] = (), events: Sequence[Event] = (),
          subject: Mapping[str, float | str] | None = None, first_frame: int = 0) -> Path:
    """Write a C3D file; returns its path.

    Args:
        markers: labels (M,), positions (N, M, 3) m lab frame (NaN = gap), rate Hz; None: no markers
            (then POINT:RATE = the analog rate).
        residuals: (N, M) m, marker residuals (NaN or < 0 = invalid); None: 0 where present.
        analogs: labels, units, values (N·k, C) in SI (plate moments N·m, COP m), rate Hz.
        plates: the force platforms among the analogs.
        events: trial events (times on the file's clock); subject: ``{"name": str, "Bodymass": kg,
        "Height": mm, ...}`` (PROCESSING units, as Vicon writes them).
        first_frame: 0-based index of the first point frame (written 1-based).
    Raises C3DError for inconsistent sizes or rates.
    """
    import ezc3d

    p = Path(path)
    if p.suffix.lower() != ".c3d":
        raise C3DError(f"{p}: a C3D file name must end in .c3d")
    if markers is None and analogs is None:
        raise C3DError(f"{p}: nothing to write (no markers, no analogs)")
    if analogs is None and plates:
        raise C3DError(f"{p}: force plates need their analog channels")
    a_rate = None if analogs is None else float(analogs.rate)
    p_rate = float(markers.rate) if markers is not None else a_rate
    if not p_rate > 0 or (a_rate is not None and not a_rate > 0):
        raise C3DError(f"{p}: rates must be > 0 Hz (points {p_rate}, analogs {a_rate})")
    ratio = 1 if a_rate is None else a_rate / p_rate
    if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
        raise C3DError(f"{p}: the analog rate {a_rate:g} Hz must be an integer multiple of the point rate {p_rate:g} Hz")
    ratio = round(ratio)
    n_a = 0 if analogs is None else analogs.values.shape[0]
    if markers is not None:
        pos = np.asarray(markers.positions, float)
        if pos.ndim != 3 or pos.shape[1:] != (len(markers.labels), 3):
            raise C3DError(f"{p}: marker positions shape {pos.shape}, expected (frames, {len(markers.labels)}, 3)")
        n_p = pos.shape[0]
    else:
        pos = np.zeros((n_a // ratio, 0, 3))
        n_p = n_a // ratio
    if analogs is not None and n_a != n_p * ratio:
        raise C3DError(f"{p}: {n_a} analog samples, expected {n_p} point frames x {ratio} = {n_p * ratio}")

    c = ezc3d.c3d()
    # points: (4, M, N) homogeneous, mm; gaps (0, 0, 0) with residual -1
    gap = ~np.isfinite(pos).all(axis=2)  # (N, M)
    pts = np.where(gap[:, :, None], 0.0, pos * MM)
    data = np.ones((4, pos.shape[1], n_p))
    data[:3] = pts.transpose(2, 1, 0)
    res = np.zeros((n_p, pos.shape[1])) if residuals is None else np.asarray(residuals, float) * MM
    if res.shape != (n_p, pos.shape[1]):
        raise C3DError(f"{p}: residuals shape {res.shape}, expected ({n_p}, {pos.shape[1]})")
    # the stored count is truncated (ezc3d): write the nearest count plus a quarter step
    counts = np.rint(np.clip(np.nan_to_num(res), 0, 255 * RESIDUAL_STEP_MM) / RESIDUAL_STEP_MM)
    res = np.where(gap | ~np.isfinite(res) | (res < 0), -1.0, (counts + 0.25) * RESIDUAL_STEP_MM)
    c["parameters"]["POINT"]["RATE"]["value"] = np.array([p_rate])
    c["parameters"]["POINT"]["LABELS"]["value"] = list(markers.labels) if markers is not None else []
    c["parameters"]["POINT"]["UNITS"]["value"] = ["mm"]
    # float storage: the sign says float, the magnitude is the residual's resolution (C3D keeps it
    # as an 8-bit count of |SCALE| in the 4th word): 0.1 mm steps, up to 25.5 mm
    c["parameters"]["POINT"]["SCALE"]["value"] = np.array([-RESIDUAL_STEP_MM])
    c["data"]["points"] = data
    c["data"]["meta_points"] = {"residuals": res.T[None, :, :]}

    if analogs is not None:
        vals = np.array(analogs.values, float)
        units = list(analogs.units)
        for pl in plates:
            if len(pl.channels) != pl.plate.n_channels:
                raise C3DError(f"{p}: plate {pl.plate.name!r} of type {pl.plate.type} needs "
                               f"{pl.plate.n_channels} channels, got {len(pl.channels)}")
            scale = _plate_scale(pl.plate.type)
            for k, ch in enumerate(pl.channels):
                vals[:, ch] *= scale[k]
                if scale[k] != 1:
                    units[ch] = "Nmm" if units[ch] in ("N*m", "Nm", "N.m") else "mm" if units[ch] == "m" else units[ch]
        c["parameters"]["ANALOG"]["RATE"]["value"] = np.array([a_rate])
        c["parameters"]["ANALOG"]["LABELS"]["value"] = list(analogs.labels)
        c["parameters"]["ANALOG"]["UNITS"]["value"] = units
        c["parameters"]["ANALOG"]["SCALE"]["value"] = np.ones(len(analogs.labels))
        c["parameters"]["ANALOG"]["OFFSET"]["value"] = np.zeros(len(analogs.labels))
        c["parameters"]["ANALOG"]["GEN_SCALE"]["value"] = np.array([1.0])
        c["data"]["analogs"] = vals.T[None, :, :]

    if plates:
        n = len(plates)
        width = max(pl.plate.n_channels for pl in plates)
        channel = np.zeros((width, n), dtype=np.int32)
        corners = np.zeros((3, 4, n))
        origin = np.zeros((3, n))
        cal = np.zeros((6, 6, n))
        for i, pl in enumerate(plates):
            channel[:len(pl.channels), i] = np.asarray(pl.channels) + 1
            corners[:, :, i] = pl.plate.corners.T * MM
            origin[:, i] = pl.plate.origin * MM
            cal[:, :, i] = (np.diag([1, 1, 1, MM, MM, MM]) @ pl.plate.cal_matrix) if pl.plate.type == 4 else np.eye(6)
        c.add_parameter("FORCE_PLATFORM", "USED", n)
        _int_parameter(c, "FORCE_PLATFORM", "TYPE", np.array([pl.plate.type for pl in plates]))
        _int_parameter(c, "FORCE_PLATFORM", "ZERO", np.array([0, 0]))
        c.add_parameter("FORCE_PLATFORM", "CORNERS", corners)
        c.add_parameter("FORCE_PLATFORM", "ORIGIN", origin)
        _int_parameter(c, "FORCE_PLATFORM", "CHANNEL", channel)
        c.add_parameter("FORCE_PLATFORM", "CAL_MATRIX", cal)
        c.add_parameter("FORCE_PLATFORM", "UNITS", ["N"])

    for ev in events:
        minutes, seconds = divmod(float(ev.time_s), 60.0)
        c.add_event([float(minutes), seconds], context=ev.context, label=ev.label, description=ev.description)
    if subject:
        for key, value in subject.items():
            if key == "name":
                c.add_parameter("SUBJECTS", "USED", 1)
                c.add_parameter("SUBJECTS", "NAMES", [str(value)])
            elif isinstance(value, str):
                c.add_parameter("PROCESSING", key, [value])
            else:
                c.add_parameter("PROCESSING", key, [float(value)])
    c["header"]["points"]["first_frame"] = int(first_frame)
    try:
        c.write(str(p))
    except (RuntimeError, ValueError, TypeError) as exc:
        raise C3DError(f"{p}: ezc3d could not write the file: {exc}") from None
    return p
