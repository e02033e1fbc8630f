"""C3D trials in: markers, analog channels and force platforms, in SI units and the lab frame.

``load(path, zero=False)`` parses the file with ezc3d (parsing only) and computes every plate's
force, moment, centre of pressure and free moment with ``dynamics.forceplate`` from the raw
analog channels and the FORCE_PLATFORM parameters — ezc3d's own platform module is not used.

Edge conversions done here (and nowhere else):

* analog values are ezc3d's ``(raw − ANALOG:OFFSET) · ANALOG:SCALE · ANALOG:GEN_SCALE``, in the
  units of ANALOG:UNITS;
* lengths (marker positions, CORNERS, ORIGIN, type-1 COP channels) and moments (N·length) use
  POINT:UNITS (mm, cm or m; moments are N·mm when it is mm, whatever ANALOG:UNITS says — e.g.
  ``gait-raw.c3d`` labels N·mm channels "Nm"); FORCE_PLATFORM:UNITS must be N when present;
* a type-4 CAL_MATRIX is rescaled so that it maps raw channels to N and N·m;
* markers whose residual is negative (invalid) or at exactly (0, 0, 0) (a gap) are NaN;
* only the first FORCE_PLATFORM:USED plates are read, their channels through FORCE_PLATFORM:CHANNEL
  (1-based, possibly interleaved with other channels).

A file holding fewer frames than its header declares (a copy cut short, a crashed writer) is a
C3DError naming both counts: ezc3d reads such a file without complaint and rewrites its own header
to the frames it found, so the declared count is read here from the file's header words.
``load(..., allow_truncated=True)`` returns the frames that are there and records the declared
count in ``Trial.truncated_from``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynamics import forceplate as fp

LENGTH_UNITS = {"mm": 1e-3, "cm": 1e-2, "m": 1.0}
# Labels listed in these POINT parameters are model outputs (angles, forces...), not markers.
MODEL_OUTPUT_GROUPS = ("ANGLES", "FORCES", "MOMENTS", "POWERS", "SCALARS", "REACTIONS")
# FPCOPPOLY coefficient k multiplies x^i y^j with 1 - i - j = these exponents of the length unit.
_COPPOLY_LENGTH_EXPONENT = np.array([-6, -4, -2, -4, -2, 0] * 2, dtype=float)
ZERO_WINDOW_S = 0.1  # s, length of the least-loaded window used by zero=True
# Processor type byte of the first parameter block: 84 Intel, 85 DEC (little-endian words), 86 MIPS.
_BIG_ENDIAN_PROCESSOR = 86


class C3DError(ValueError):
    """A C3D file cannot be read or holds parameters this loader cannot honour."""


@dataclass(frozen=True)
class Markers:
    """labels (M,); positions (N, M, 3) lab frame, m, NaN for gaps and invalid residuals; rate Hz."""

    labels: tuple[str, ...]
    positions: np.ndarray
    rate: float


@dataclass(frozen=True)
class Analogs:
    """labels, units (C,); values (N, C) in those units (scaled, not zeroed); rate Hz."""

    labels: tuple[str, ...]
    units: tuple[str, ...]
    values: np.ndarray
    rate: float


@dataclass(frozen=True)
class TrialPlate(fp.PlateSignals):
    """One force platform of a trial: its signals at the analog rate, lab frame, SI (the fields of
    ``dynamics.forceplate.PlateSignals``: force (n, 3) N, moment (n, 3) N·m about the surface
    centre, cop (n, 3) m, free_moment (n, 3) N·m, valid (n,) bool (F_z above threshold),
    saturated (n,) bool) and where they came from:

    plate: its description (``dynamics.forceplate.Plate``); channels: 0-based analog indices;
    offset (n_channels,): subtracted from the SI raw channels (zeros without zeroing);
    window: the analog samples the offset came from (None without zeroing).
    """

    plate: fp.Plate
    channels: tuple[int, ...]
    offset: np.ndarray
    window: slice | None

    @property
    def type(self) -> int:
        return self.plate.type

    @property
    def corners(self) -> np.ndarray:
        return self.plate.corners

    @property
    def origin(self) -> np.ndarray:
        return self.plate.origin


@dataclass(frozen=True)
class Trial:
    """A C3D trial: markers, analogs, plates; body_mass kg from PROCESSING:Bodymass or None;
    first_frame: 0-based index of the first point frame (the file stores it 1-based), so point
    frame i is at time (first_frame + i) / markers.rate and analog sample j at
    first_frame / markers.rate + j / analogs.rate, s.
    truncated_from: the point frames the file's header declares when the file holds fewer (read
    with ``allow_truncated=True``; the trial then has ``len(markers.positions)`` of them), None
    for a complete file."""

    path: Path
    markers: Markers
    analogs: Analogs
    plates: tuple[TrialPlate, ...]
    body_mass: float | None
    first_frame: int
    truncated_from: int | None = None
    processing: dict[str, float] = field(default_factory=dict)
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Event:
    """An EVENT of the file: context ("Left", "Right", "General"), label ("Foot Strike"...),
    time s on the file's clock (the same as the point frames' times)."""

    context: str
    label: str
    time: float


def _processing(c) -> dict[str, float]:
    """PROCESSING parameters holding one number (Vicon subject measurements), as stored: lengths
    in mm, angles in rad, Bodymass in kg (cgm.md §2)."""
    out = {}
    for name, v in c["parameters"].get("PROCESSING", {}).items():
        val = np.asarray(v.get("value", [])) if isinstance(v, dict) else np.asarray([])
        if val.size == 1 and np.issubdtype(val.dtype, np.number):
            out[name] = float(val.ravel()[0])
    return out


def _events(c) -> tuple[Event, ...]:
    ev = c["parameters"].get("EVENT", {})
    times = np.asarray(ev.get("TIMES", {}).get("value", []), float)
    if times.ndim != 2 or times.shape[0] != 2:
        return ()
    labels = list(ev.get("LABELS", {}).get("value", []))
    contexts = list(ev.get("CONTEXTS", {}).get("value", []))
    n = min(times.shape[1], len(labels), len(contexts))
    # TIMES holds (minutes, seconds) per event
    return tuple(Event(contexts[i].strip(), labels[i].strip(), float(60 * times[0, i] + times[1, i]))
                 for i in range(n))


def _declared_frames(path: Path) -> int | None:
    """Point frames the C3D header declares (words 4 and 5: first and last frame, 1-based,
    inclusive), or None when it cannot say: last frame 65535 (a long trial whose true count lives
    in TRIAL parameters) or a header too short to hold them (ezc3d has refused such files already).
    Word order from the processor type byte of the first parameter block (MIPS: big-endian)."""
    with open(path, "rb") as f:
        head = f.read(512)
        block = head[0] if head else 0
        f.seek(max(block - 1, 0) * 512 + 3)
        proc = f.read(1)
    if len(head) < 10 or not proc:
        return None
    order = "big" if proc[0] == _BIG_ENDIAN_PROCESSOR else "little"
    first, last = (int.from_bytes(head[k:k + 2], order) for k in (6, 8))
    if last == 0xFFFF:
        return None
    return max(last - first + 1, 0)


def _param(c, path: Path, group: str, name: str, default=None):
    params = c["parameters"]
    if group in params and name in params[group]:
        return params[group][name]["value"]
    if default is not None:
        return default
    raise C3DError(f"{path}: parameter {group}:{name} is missing")


def _labels(c, group: str, count: int, prefix: str) -> tuple[str, ...]:
    """LABELS, LABELS2, LABELS3... joined (files with more than 255 entries split them)."""
    params = c["parameters"].get(group, {})
    out: list[str] = list(params.get("LABELS", {}).get("value", []))
    k = 2
    while len(out) < count and f"LABELS{k}" in params:
        out += list(params[f"LABELS{k}"]["value"])
        k += 1
    out = [s.strip() for s in out[:count]]
    return tuple(out + [f"{prefix}{i + 1}" for i in range(len(out), count)])


def _length_unit(c, path: Path) -> float:
    unit = _param(c, path, "POINT", "UNITS", default=["m"])
    unit = (unit[0] if len(unit) else "m").strip().lower()
    if unit not in LENGTH_UNITS:
        raise C3DError(f"{path}: POINT:UNITS is {unit!r}, expected one of {sorted(LENGTH_UNITS)}")
    return LENGTH_UNITS[unit]


def _read_markers(c, path: Path, length: float) -> Markers:
    pts = c["data"]["points"]  # (4, M, N), POINT:UNITS
    n_points = pts.shape[1]
    labels = _labels(c, "POINT", n_points, "POINT")
    outputs = set()
    for g in MODEL_OUTPUT_GROUPS:
        outputs.update(s.strip() for s in _param(c, path, "POINT", g, default=[]))
    keep = [i for i, lab in enumerate(labels) if lab not in outputs]
    pos = np.transpose(pts[:3, keep, :], (2, 1, 0)) * length
    residual = np.transpose(c["data"]["meta_points"]["residuals"][0, keep, :])
    # A negative residual marks an invalid sample; some writers (Qualisys, in
    # Walking_Hybrid_1_1.c3d) mark gaps with exactly (0, 0, 0) and a positive residual instead.
    pos[(residual < 0) | np.all(pos == 0.0, axis=2)] = np.nan
    rate = float(c["header"]["points"]["frame_rate"])
    return Markers(labels=tuple(labels[i] for i in keep), positions=pos, rate=rate)


def _read_analogs(c, path: Path) -> Analogs:
    values = np.ascontiguousarray(c["data"]["analogs"][0].T)  # (N, C)
    n_ch = values.shape[1]
    labels = _labels(c, "ANALOG", n_ch, "A")
    units = list(_param(c, path, "ANALOG", "UNITS", default=[]))[:n_ch]
    units = tuple(s.strip() for s in units) + ("",) * (n_ch - len(units))
    return Analogs(labels=labels, units=units, values=values,
                   rate=float(c["header"]["analogs"]["frame_rate"]))


def _per_channel(values, n_ch: int) -> np.ndarray:
    """One value per channel: a single value applies to all; files may declare extra entries."""
    v = np.asarray(values, float).ravel()
    return np.full(n_ch, v[0]) if v.size == 1 else v[:n_ch]


def _analog_range(c, path: Path, n_ch: int) -> np.ndarray | None:
    """(C, 2) lowest/highest scaled value each analog channel can hold, or None if unknown.

    From ANALOG:BITS and ANALOG:FORMAT (SIGNED/UNSIGNED) when present, else the 16-bit integer
    storage for integer files; float files without BITS carry no range. The limits are pulled in
    by half a count so that a sample at the limit compares as saturated despite rounding.
    """
    bits = _param(c, path, "ANALOG", "BITS", default=[])
    fmt = _param(c, path, "ANALOG", "FORMAT", default=[])
    is_float = float(np.asarray(_param(c, path, "POINT", "SCALE", default=[-1.0]))[0]) < 0
    if len(bits):
        b = int(bits[0])
        if len(fmt) and fmt[0].strip().upper() == "UNSIGNED":
            counts = np.array([0.0, 2.0 ** b - 1])
        else:
            counts = np.array([-(2.0 ** (b - 1)), 2.0 ** (b - 1) - 1])
    elif not is_float:
        counts = np.array([-32768.0, 32767.0])
    else:
        return None
    counts = counts + np.array([0.5, -0.5])
    scale = _per_channel(_param(c, path, "ANALOG", "SCALE", default=[1.0]), n_ch)
    offset = _per_channel(_param(c, path, "ANALOG", "OFFSET", default=[0.0]), n_ch)
    gen = float(np.asarray(_param(c, path, "ANALOG", "GEN_SCALE", default=[1.0]))[0])
    limits = (counts[None, :] - offset[:, None]) * (scale * gen)[:, None]
    return np.sort(limits, axis=1)


def _zero_param_window(c, path: Path, n: int) -> slice:
    """FORCE_PLATFORM:ZERO [first, last] as a slice of the n analog samples.

    Read as 1-based, inclusive analog-sample numbers counted from the first stored sample
    (ecosystem.md section 2; Walking_Hybrid_1_1.c3d starts at point frame 290 and has ZERO =
    [1, 10], so the range is not absolute). Files also hold [1, 0] or [0, 10]: not a range here.
    """
    v = np.asarray(_param(c, path, "FORCE_PLATFORM", "ZERO")).astype(int).ravel()
    if v.size != 2 or not 1 <= v[0] <= v[1] <= n:
        raise C3DError(f"{path}: FORCE_PLATFORM:ZERO is {v.tolist()}; zero='file' needs a range "
                       f"[first, last] of analog samples with 1 <= first <= last <= {n}")
    return slice(int(v[0]) - 1, int(v[1]))


def _read_plates(c, path: Path, length: float, analogs: Analogs, zero: bool | str,
                 threshold: float) -> tuple[TrialPlate, ...]:
    if "FORCE_PLATFORM" not in c["parameters"]:
        return ()
    used = int(np.asarray(_param(c, path, "FORCE_PLATFORM", "USED", default=[0]))[0])
    if used == 0:
        return ()
    units = _param(c, path, "FORCE_PLATFORM", "UNITS", default=["N"])
    if len(units) and units[0].strip() not in ("N", ""):
        raise C3DError(f"{path}: FORCE_PLATFORM:UNITS is {units[0]!r}, expected 'N'")
    types = np.asarray(_param(c, path, "FORCE_PLATFORM", "TYPE")).astype(int).ravel()
    corners = np.asarray(_param(c, path, "FORCE_PLATFORM", "CORNERS"), float)
    origins = np.asarray(_param(c, path, "FORCE_PLATFORM", "ORIGIN"), float)
    channel = np.asarray(_param(c, path, "FORCE_PLATFORM", "CHANNEL")).astype(int)
    cal = np.asarray(_param(c, path, "FORCE_PLATFORM", "CAL_MATRIX", default=[]), float)
    poly = np.asarray(_param(c, path, "FORCE_PLATFORM", "FPCOPPOLY", default=[]), float)
    channel = channel.reshape(channel.shape[0], -1) if channel.ndim else channel
    corners = corners.reshape(3, 4, -1) if corners.size else corners
    origins = origins.reshape(3, -1) if origins.size else origins
    for name, arr, per in (("TYPE", types, 1), ("CORNERS", corners, 12), ("ORIGIN", origins, 3)):
        if arr.size < per * used:
            raise C3DError(f"{path}: FORCE_PLATFORM:{name} holds {arr.size} values, "
                           f"expected {per} per plate for USED = {used}")
    if channel.ndim != 2 or channel.shape[1] < used:
        raise C3DError(f"{path}: FORCE_PLATFORM:CHANNEL has shape {channel.shape}, "
                       f"expected (channels, >= {used})")
    ranges = _analog_range(c, path, analogs.values.shape[1])
    rate = analogs.rate
    file_window = _zero_param_window(c, path, len(analogs.values)) if zero == "file" else None
    plates = []
    for i in range(used):
        kind = int(types[i])
        if kind not in fp.SUPPORTED_TYPES:
            raise C3DError(f"{path}: FORCE_PLATFORM:TYPE of plate {i + 1} is {kind}; "
                           f"supported types: {', '.join(map(str, fp.SUPPORTED_TYPES))}")
        n = fp.N_CHANNELS[kind]
        if channel.shape[0] < n:
            raise C3DError(f"{path}: FORCE_PLATFORM:CHANNEL gives {channel.shape[0]} channels for "
                           f"plate {i + 1}, type {kind} needs {n}")
        chans = channel[:n, i] - 1
        bad = chans[(chans < 0) | (chans >= analogs.values.shape[1])]
        if bad.size:
            raise C3DError(f"{path}: FORCE_PLATFORM:CHANNEL of plate {i + 1} names analog channel "
                           f"{int(bad[0]) + 1}, the file has {analogs.values.shape[1]}")
        # SI factor per raw channel: forces in N, moments in N·length, type-1 COP in length.
        si = {1: [1, 1, 1, length, length, length], 2: [1, 1, 1, length, length, length],
              3: [1.0] * 8, 4: [1.0] * 6}[kind]
        si = np.asarray(si, float)
        cal_i = None
        if kind == 4:
            if cal.size == 0:
                cal_i = np.eye(6)  # Motion Analysis files leave CAL_MATRIX empty: identity
            elif cal.size < 36 * used:
                raise C3DError(f"{path}: FORCE_PLATFORM:CAL_MATRIX holds {cal.size} values, "
                               f"expected 36 per plate for USED = {used}")
            else:
                cal_i = cal.reshape(6, 6, -1)[:, :, i]
            cal_i = np.diag([1, 1, 1, length, length, length]) @ cal_i
        poly_i = None
        if kind == 3 and poly.size >= 12 * (i + 1):
            p = poly.reshape(-1)[12 * i: 12 * (i + 1)] if poly.ndim == 1 else poly.reshape(12, -1)[:, i]
            if np.any(p != 0):
                poly_i = p * length ** _COPPOLY_LENGTH_EXPONENT
        plate = fp.Plate(type=kind, corners=corners[:, :, i].T * length,
                         origin=origins[:, i] * length, cal_matrix=cal_i, cop_poly=poly_i,
                         channel_range=None if ranges is None else ranges[chans] * si[:, None],
                         name=f"FP{i + 1}")
        raw = analogs.values[:, chans] * si
        window = None
        offset = np.zeros(n)
        if zero:
            window = file_window if file_window is not None else fp.least_loaded_window(
                plate, raw, min(len(raw), max(1, round(ZERO_WINDOW_S * rate))))
            offset = fp.zero_offset(plate, raw, window)
        s = fp.process(plate, raw, threshold=threshold, offset=offset)
        plates.append(TrialPlate(**vars(s), plate=plate, channels=tuple(int(k) for k in chans),
                                 offset=offset, window=window))
    return tuple(plates)


def load(path, zero: bool | str = False, threshold: float = fp.DEFAULT_THRESHOLD,
         allow_truncated: bool = False) -> Trial:
    """Read a C3D trial: markers (m, NaN gaps), analogs, and force plates computed from raw channels.

    path: the .c3d file. zero: remove each plate's offset, the mean of its raw channels over a
    window: True, its least-loaded window (``ZERO_WINDOW_S`` long,
    ``dynamics.forceplate.least_loaded_window``); ``"file"``, the analog samples the file names
    in FORCE_PLATFORM:ZERO (see ``_zero_param_window``); False, none.
    threshold: N, vertical force below which a plate's COP is NaN (``valid`` False).
    allow_truncated: a file holding fewer frames than its header declares is read as far as it
    goes (at least one frame) and ``Trial.truncated_from`` says how many were declared; False
    (the default) refuses it.
    Raises FileNotFoundError for a missing file, C3DError (a ValueError) for an unreadable or
    (without allow_truncated) truncated file,
    a plate type other than 1-4, inconsistent FORCE_PLATFORM parameters, or zero="file" without
    a usable FORCE_PLATFORM:ZERO range; ValueError for another `zero`.
    """
    import ezc3d  # heavy C++ extension: import on use

    if zero is not False and zero is not True and zero != "file":
        raise ValueError(f"c3d.load: zero must be False, True or 'file', got {zero!r}")

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such C3D file")
    try:
        c = ezc3d.c3d(str(p))
    except (OSError, RuntimeError, ValueError, IndexError) as e:
        raise C3DError(f"{p}: not a readable C3D file ({e})") from None
    present = int(c["data"]["points"].shape[2])
    declared = _declared_frames(p)
    truncated_from = declared if declared is not None and present < declared else None
    if truncated_from is not None and (not allow_truncated or present == 0):
        hint = "" if present == 0 else "; allow_truncated=True reads the frames that are there"
        raise C3DError(f"{p}: truncated C3D file: the header declares {declared} frames, the file holds "
                       f"{present}{hint}")
    length = _length_unit(c, p)
    analogs = _read_analogs(c, p)
    try:
        plates = _read_plates(c, p, length, analogs, zero, threshold)
    except fp.PlateError as e:
        raise C3DError(f"{p}: {e}") from None
    mass = c["parameters"].get("PROCESSING", {}).get("Bodymass", {}).get("value", [])
    return Trial(path=p, markers=_read_markers(c, p, length), analogs=analogs, plates=plates,
                 body_mass=float(mass[0]) if len(mass) else None,
                 first_frame=int(c["header"]["points"]["first_frame"]), truncated_from=truncated_from,
                 processing=_processing(c), events=_events(c))
