"""OpenSim text formats: TRC marker files and MOT/STO tables, read and written.

OpenSim's lab frame is Y up (X forward, Z to the right); walklab's is z up (x forward, y left).
The rotation between them is applied here and nowhere else:
x_walklab = X, y_walklab = −Z, z_walklab = Y (a proper rotation, det +1). TRC lengths are
converted from the file's Units (mm, cm or m) to m; MOT forces are N, points m, torques N·m.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .c3d import LENGTH_UNITS, Markers

# walklab = OPENSIM_TO_LAB @ opensim
OPENSIM_TO_LAB = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


class OpenSimFormatError(ValueError):
    """A TRC or MOT file this reader cannot parse (names the file and what is wrong)."""


def to_lab(v: np.ndarray) -> np.ndarray:
    """(..., 3) OpenSim Y-up vectors → walklab z-up."""
    return np.asarray(v, float) @ OPENSIM_TO_LAB.T


def to_opensim(v: np.ndarray) -> np.ndarray:
    """(..., 3) walklab z-up vectors → OpenSim Y-up."""
    return np.asarray(v, float) @ OPENSIM_TO_LAB


@dataclass(frozen=True)
class TRC:
    """markers (labels, positions (N, M, 3) m z-up lab frame, NaN gaps, rate Hz); time (N,) s."""

    markers: Markers
    time: np.ndarray


def read_trc(path) -> TRC:
    """Read an OpenSim TRC file (tab-separated; header lines: PathFileType, the DataRate... names
    and values, marker names, X1 Y1 Z1...). Empty cells are gaps (NaN)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise OSError(f"{p}: cannot read TRC file ({e.strerror})") from None
    if len(lines) < 6 or not lines[0].startswith("PathFileType"):
        raise OpenSimFormatError(f"{p}: not a TRC file (first line does not start with PathFileType)")
    keys = lines[1].split("\t")
    vals = lines[2].split("\t")
    info = {k.strip(): v.strip() for k, v in zip(keys, vals)}
    try:
        rate = float(info["DataRate"])
        n_markers = int(info["NumMarkers"])
        unit = LENGTH_UNITS[info.get("Units", "m").lower()]
    except (KeyError, ValueError) as e:
        raise OpenSimFormatError(f"{p}: TRC header lacks a usable {e} (DataRate, NumMarkers, Units)") from None
    names = [s.strip() for s in lines[3].split("\t")[2:] if s.strip()]
    if len(names) < n_markers:
        raise OpenSimFormatError(f"{p}: TRC header names {len(names)} markers, NumMarkers says {n_markers}")
    names = names[:n_markers]
    rows = []
    for ln in lines[5:]:
        if not ln.strip():
            continue
        cells = ln.split("\t")
        cells += [""] * (2 + 3 * n_markers - len(cells))
        rows.append([float(c) if c.strip() else np.nan for c in cells[:2 + 3 * n_markers]])
    data = np.array(rows, float).reshape(len(rows), -1)
    pos = to_lab(data[:, 2:].reshape(len(rows), n_markers, 3) * unit)
    return TRC(markers=Markers(labels=tuple(names), positions=pos, rate=rate), time=data[:, 1])


def write_trc(path, markers: Markers, time=None) -> None:
    """Write markers (positions (N, M, 3) m, z-up) as an OpenSim TRC file in mm, Y up; NaN as
    empty cells; time (N,) s defaults to frame / rate."""
    pos = to_opensim(np.asarray(markers.positions, float)) * 1000.0
    n, m, _ = pos.shape
    t = np.arange(n) / markers.rate if time is None else np.asarray(time, float)
    p = Path(path)
    head = [f"PathFileType\t4\t(X/Y/Z)\t{p.name}",
            "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
            f"{markers.rate:.6g}\t{markers.rate:.6g}\t{n}\t{m}\tmm\t{markers.rate:.6g}\t1\t{n}",
            "Frame#\tTime\t" + "\t".join(f"{lab}\t\t" for lab in markers.labels),
            "\t\t" + "\t".join(f"X{k + 1}\tY{k + 1}\tZ{k + 1}" for k in range(m)), ""]
    body = []
    for i in range(n):
        cells = ["" if not np.isfinite(v) else f"{v:.6f}" for v in pos[i].ravel()]
        body.append(f"{i + 1}\t{t[i]:.6f}\t" + "\t".join(cells))
    p.write_text("\n".join(head + body) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Table:
    """An OpenSim MOT/STO table as stored: labels (C,) without 'time', time (N,) s, data (N, C)."""

    labels: tuple[str, ...]
    time: np.ndarray
    data: np.ndarray


def read_mot(path) -> Table:
    """Read an OpenSim MOT/STO table (header lines up to 'endheader', then a label row)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise OSError(f"{p}: cannot read MOT file ({e.strerror})") from None
    try:
        end = next(i for i, ln in enumerate(lines) if ln.strip().lower() == "endheader")
    except StopIteration:
        raise OpenSimFormatError(f"{p}: not a MOT/STO file (no 'endheader' line)") from None
    labels = lines[end + 1].split()
    if not labels or labels[0].lower() != "time":
        raise OpenSimFormatError(f"{p}: the first column after endheader must be 'time', got {labels[:1]}")
    try:
        data = np.array([[float(c) for c in ln.split()] for ln in lines[end + 2:] if ln.strip()], float)
    except ValueError as e:
        raise OpenSimFormatError(f"{p}: non-numeric value in the table ({e})") from None
    if data.ndim != 2 or data.shape[1] != len(labels):
        raise OpenSimFormatError(f"{p}: rows do not have the {len(labels)} columns the label row names")
    return Table(labels=tuple(labels[1:]), time=data[:, 0], data=data[:, 1:])


def write_mot(path, table: Table, name: str | None = None) -> None:
    """Write a MOT table (values as given; use ``to_opensim`` on vectors first)."""
    p = Path(path)
    n, c = table.data.shape
    head = [name or p.stem, "version=1", f"nRows={n}", f"nColumns={c + 1}", "inDegrees=yes", "endheader",
            "\t".join(("time",) + tuple(table.labels))]
    body = ["\t".join(f"{v:.8g}" for v in np.r_[table.time[i], table.data[i]]) for i in range(n)]
    p.write_text("\n".join(head + body) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class FootGRF:
    """Ground reaction on one foot, z-up lab frame: force (N, 3) N, cop (N, 3) m, torque (N, 3)
    N·m (the free moment about the COP)."""

    force: np.ndarray
    cop: np.ndarray
    torque: np.ndarray


def grf_per_foot(table: Table, prefixes: tuple[str, ...] = ("", "1_")) -> list[FootGRF]:
    """The per-foot ground reactions of a GRF MOT: for each prefix, the columns
    ``{prefix}ground_force_v[xyz]``, ``{prefix}ground_force_p[xyz]`` and
    ``{prefix}ground_torque_[xyz]``, rotated to z up."""
    idx = {lab: i for i, lab in enumerate(table.labels)}
    out = []
    for pre in prefixes:
        cols = [[f"{pre}ground_force_v{a}" for a in "xyz"], [f"{pre}ground_force_p{a}" for a in "xyz"],
                [f"{pre}ground_torque_{a}" for a in "xyz"]]
        missing = [c for grp in cols for c in grp if c not in idx]
        if missing:
            raise OpenSimFormatError(f"GRF table has no column {missing[0]}")
        f, c, t = (to_lab(table.data[:, [idx[k] for k in grp]]) for grp in cols)
        out.append(FootGRF(force=f, cop=c, torque=t))
    return out


def grf_table(feet: list[FootGRF], time, prefixes: tuple[str, ...] = ("", "1_")) -> Table:
    """The inverse of ``grf_per_foot``: per-foot ground reactions (z-up) → an OpenSim GRF table
    (Y up) with the ``{prefix}ground_force_v*``, ``_p*`` and ``{prefix}ground_torque_*`` columns,
    force blocks first and torque blocks last, as OpenSim's example files order them."""
    if len(feet) != len(prefixes):
        raise OpenSimFormatError(f"{len(feet)} feet for {len(prefixes)} column prefixes")
    labels: list[str] = []
    cols: list[np.ndarray] = []
    for pre, g in zip(prefixes, feet):
        labels += [f"{pre}ground_force_v{a}" for a in "xyz"] + [f"{pre}ground_force_p{a}" for a in "xyz"]
        cols += [to_opensim(g.force), to_opensim(g.cop)]
    for pre, g in zip(prefixes, feet):
        labels += [f"{pre}ground_torque_{a}" for a in "xyz"]
        cols.append(to_opensim(g.torque))
    return Table(labels=tuple(labels), time=np.asarray(time, float), data=np.hstack(cols))
