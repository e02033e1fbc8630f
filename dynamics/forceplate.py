"""Force platforms: raw channels -> lab-frame wrench, centre of pressure, free moment, contacts.

Pure computation (methods.md d.1, d.2, d.6), batched over time: every array of samples has the
time axis first, ``N`` samples. SI units throughout: N, N·m, m. Conversions from file units
(N·mm, mm, ADC counts) happen at the edge, in the loader (``daq.formats.c3d``) or the daemon.

Conventions (C3D FORCE_PLATFORM group, as in ezc3d ``ForcePlatforms.cpp`` and Visual3D):

* Plate axes from the four CORNERS c0..c3 (lab frame, metres):
  ``x̂ = c0 − c1, ŷ = c0 − c3, ẑ = x̂ × ŷ, ŷ ← ẑ × x̂`` (normalised), ``R = [x̂ ŷ ẑ]``;
  the surface centre is ``mean(corners)``. Plate axes are often z-down; R takes care of it.
* ORIGIN, types 1, 2, 4: the vector ``o`` from the transducer origin to the surface centre,
  plate axes. Vendors store either direction; it is normalised so that the surface lies above the
  transducer in the lab, ``(R o)_z >= 0``, by negating the whole vector. For the usual z-down
  plate axes (every shared file) that is ezc3d's and Visual3D's rule ``o_z <= 0``; for z-up plate
  axes it keeps ``o_z >= 0``, where the vendor-blind rule would put the transducer above the
  surface. Type 3 (Kistler): ``(a, b, az0)``, the sensor half-spacings and the sensor-plane depth;
  only ``az0`` is normalised — a and b are spacings, not a vector between two points, and
  negating them mirrors the COP (ezc3d 1.7.2 negates them; docs/forceplates.md has the proof on
  ``Walking_Hybrid_1_1.c3d``).
* The load shows as a positive lab-frame vertical reaction ``F_lab,z`` (as ezc3d reports it for
  every shared file): the threshold, the sign-flip guard and the least-loaded window rely on it.

Per type, with raw channels ``r`` (N, n_channels), SI:

* type 1: ``r = (Fx, Fy, Fz, COPx, COPy, Tz)`` — COP relative to the surface centre, plate axes;
  ``M_s = COP × F + (0, 0, Tz)``.
* type 2: ``r = (Fx, Fy, Fz, Mx, My, Mz)`` about the transducer origin; ``M_s = M_o + F × o``.
* type 4: as type 2 after ``r ← CAL_MATRIX · r`` (the matrix maps raw to N and N·m).
* type 3: ``r = (Fx12, Fx34, Fy14, Fy23, Fz1, Fz2, Fz3, Fz4)``; ``F = (Fx12 + Fx34, Fy14 + Fy23,
  ΣFz)``, ``M = (b(Fz1 + Fz2 − Fz3 − Fz4), a(−Fz1 + Fz2 + Fz3 − Fz4),
  b(−Fx12 + Fx34) + a(Fy14 − Fy23))``, ``M_s = M + F × (0, 0, az0)``; then the optional
  FPCOPPOLY correction of the COP.
* COP (plate axes, about the surface centre) ``= (−M_s,y / F_z, M_s,x / F_z, 0)``; free moment
  ``T_z = M_s,z − (COP_x F_y − COP_y F_x)``; lab: ``F_lab = R F``, ``M_lab = R M_s`` (about the
  surface centre), ``COP_lab = R COP + centre``, ``T_lab = T_z R ẑ``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

SUPPORTED_TYPES = (1, 2, 3, 4)
N_CHANNELS = {1: 6, 2: 6, 3: 8, 4: 6}
DEFAULT_THRESHOLD = 20.0  # N, vertical force below which the COP is undefined (methods d.6)


class PlateError(ValueError):
    """A plate description or a raw-channel array is not usable (message says which and why)."""


def _as_float(a, name: str, shape: tuple) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if arr.shape != shape:
        raise PlateError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise PlateError(f"{name} must be finite, got {arr.tolist()}")
    return arr


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a × b for (N, 3) or (3,) operands, broadcast; np.cross costs ~0.1 ms a call on small blocks."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def plate_axes(corners: np.ndarray) -> np.ndarray:
    """Rotation R (3, 3) from plate axes to lab axes from the CORNERS (4, 3), lab frame, m.

    ``x̂ = c0 − c1, ŷ = c0 − c3, ẑ = x̂ × ŷ, ŷ ← ẑ × x̂`` (each normalised), ``R = [x̂ ŷ ẑ]``.
    """
    x = corners[0] - corners[1]
    y = corners[0] - corners[3]
    z = _cross(x, y)
    y = _cross(z, x)
    norms = np.array([np.linalg.norm(x), np.linalg.norm(y), np.linalg.norm(z)])
    if np.any(norms < 1e-9):
        raise PlateError(f"corners {corners.tolist()} are degenerate: they span no plane")
    return np.column_stack([x / norms[0], y / norms[1], z / norms[2]])


@dataclass(frozen=True)
class Plate:
    """One force platform, constant: geometry, type and calibration (SI).

    Attributes:
        type: C3D FORCE_PLATFORM:TYPE, one of 1, 2, 3, 4.
        corners: (4, 3) lab frame, m, in the C3D order (c0 − c1 is the plate x axis).
        origin: (3,) plate axes, m; ORIGIN as stored in either direction (normalised on
            construction so that the surface lies above the transducer, see module doc).
        cal_matrix: (6, 6) for type 4 (raw -> N, N, N, N·m, N·m, N·m); None otherwise.
        cop_poly: (12,) FPCOPPOLY for type 3 in SI (x, y and the corrections in m); None: none.
        channel_range: (n_channels, 2) lowest and highest raw value the acquisition can represent,
            in the raw units given to :func:`process`; a sample at or beyond either is saturated.
            None: saturation is not detectable (flag always False).
        name: free label ("FP1").
    Derived (set on construction): ``rotation`` (3, 3) plate -> lab axes, ``centre`` (3,) lab, m.
    """

    type: int
    corners: np.ndarray
    origin: np.ndarray
    cal_matrix: np.ndarray | None = None
    cop_poly: np.ndarray | None = None
    channel_range: np.ndarray | None = None
    name: str = ""
    rotation: np.ndarray = field(init=False, repr=False)
    centre: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if self.type not in SUPPORTED_TYPES:
            raise PlateError(f"plate {self.name!r}: type {self.type} is not supported "
                             f"(supported: {', '.join(map(str, SUPPORTED_TYPES))})")
        set_ = object.__setattr__
        corners = _as_float(self.corners, f"plate {self.name!r} corners", (4, 3))
        origin = _as_float(self.origin, f"plate {self.name!r} origin", (3,)).copy()
        rotation = plate_axes(corners)
        if origin[2] * rotation[2, 2] < 0:
            # Vendors disagree on the direction of ORIGIN; the surface lies above the sensors.
            if self.type == 3:
                origin[2] = -origin[2]
            else:
                origin = -origin
        if self.type == 1:
            origin[:] = 0.0  # type 1 reports the COP itself; ORIGIN does not enter
        set_(self, "corners", corners)
        set_(self, "origin", origin)
        set_(self, "rotation", rotation)
        set_(self, "centre", corners.mean(axis=0))
        if self.type == 4:
            if self.cal_matrix is None:
                raise PlateError(f"plate {self.name!r}: type 4 needs a (6, 6) cal_matrix")
            set_(self, "cal_matrix", _as_float(self.cal_matrix, f"plate {self.name!r} cal_matrix", (6, 6)))
        elif self.cal_matrix is not None:
            raise PlateError(f"plate {self.name!r}: cal_matrix is only used by type 4, "
                             f"got one for type {self.type}")
        if self.cop_poly is not None:
            if self.type != 3:
                raise PlateError(f"plate {self.name!r}: cop_poly (FPCOPPOLY) is only used by type 3")
            set_(self, "cop_poly", _as_float(self.cop_poly, f"plate {self.name!r} cop_poly", (12,)))
        if self.channel_range is not None:
            rng = _as_float(self.channel_range, f"plate {self.name!r} channel_range",
                            (self.n_channels, 2))
            set_(self, "channel_range", rng)

    @property
    def n_channels(self) -> int:
        return N_CHANNELS[self.type]

    @property
    def zeroable(self) -> np.ndarray:
        """(n_channels,) bool: channels carrying a load (type 1's COP channels are positions)."""
        mask = np.ones(self.n_channels, bool)
        if self.type == 1:
            mask[3:5] = False
        return mask


@dataclass(frozen=True)
class PlateSignals:
    """One plate's outputs for N samples, lab frame, SI.

    force (N, 3) N: the ground reaction as the plate reports it in lab axes (+z on a loaded plate);
    moment (N, 3) N·m: about the plate's surface centre, lab axes;
    cop (N, 3) m: lab frame, NaN where not ``valid``;
    free_moment (N, 3) N·m: ``T_z`` along the plate normal, lab axes, NaN where not ``valid``;
    valid (N,) bool: ``F_lab,z > threshold``; saturated (N,) bool: any channel at its range limit.
    """

    force: np.ndarray
    moment: np.ndarray
    cop: np.ndarray
    free_moment: np.ndarray
    valid: np.ndarray
    saturated: np.ndarray


def _check_raw(plate: Plate, raw) -> np.ndarray:
    r = np.asarray(raw, dtype=float)
    if r.ndim != 2 or r.shape[1] != plate.n_channels:
        raise PlateError(f"raw channels of plate {plate.name!r} (type {plate.type}) must have shape "
                         f"(N, {plate.n_channels}), got {r.shape}")
    return r


def plate_wrench(plate: Plate, raw) -> tuple[np.ndarray, np.ndarray]:
    """Force F (N, 3) N and moment M_s (N, 3) N·m about the surface centre, in plate axes.

    raw: (N, n_channels) SI channels of ``plate.type`` (module doc). For type 1 the moment is
    ``M_s = COP × F + (0, 0, Tz)``; for the others ``M_s`` is as in the module doc.
    """
    r = _check_raw(plate, raw)
    o = plate.origin
    if plate.type == 3:
        a, b, _ = o
        fz1, fz2, fz3, fz4 = r[:, 4], r[:, 5], r[:, 6], r[:, 7]
        force = np.column_stack([r[:, 0] + r[:, 1], r[:, 2] + r[:, 3], fz1 + fz2 + fz3 + fz4])
        moment = np.column_stack([
            b * (fz1 + fz2 - fz3 - fz4),
            a * (-fz1 + fz2 + fz3 - fz4),
            b * (r[:, 1] - r[:, 0]) + a * (r[:, 2] - r[:, 3]),
        ])
        moment += _cross(force, np.array([0.0, 0.0, o[2]]))
        return force, moment
    if plate.type == 1:
        force = r[:, :3].copy()
        cop = np.column_stack([r[:, 3], r[:, 4], np.zeros(len(r))])
        moment = _cross(cop, force)
        moment[:, 2] += r[:, 5]
        return force, moment
    w = r @ plate.cal_matrix.T if plate.type == 4 else r
    force = w[:, :3].copy()
    moment = w[:, 3:6] + _cross(force, o)
    return force, moment


def _cop_poly_correction(poly: np.ndarray, x: np.ndarray, y: np.ndarray):
    """Kistler FPCOPPOLY: offsets (dx, dy), m, subtracted from the raw COP (x, y), m.

    dx = (P0 y⁴ + P1 y² + P2) x³ + (P3 y⁴ + P4 y² + P5) x
    dy = (P6 x⁴ + P7 x² + P8) y³ + (P9 x⁴ + P10 x² + P11) y
    """
    p = poly
    x2, y2 = x * x, y * y
    dx = (p[0] * y2 * y2 + p[1] * y2 + p[2]) * x2 * x + (p[3] * y2 * y2 + p[4] * y2 + p[5]) * x
    dy = (p[6] * x2 * x2 + p[7] * x2 + p[8]) * y2 * y + (p[9] * x2 * x2 + p[10] * x2 + p[11]) * y
    return dx, dy


def saturated(plate: Plate, raw) -> np.ndarray:
    """(N,) bool: any raw channel (N, n_channels) at or beyond ``plate.channel_range``."""
    r = _check_raw(plate, raw)
    if plate.channel_range is None:
        return np.zeros(len(r), bool)
    lo, hi = plate.channel_range[:, 0], plate.channel_range[:, 1]
    return np.any((r <= lo) | (r >= hi), axis=1)


def process(plate: Plate, raw, threshold: float = DEFAULT_THRESHOLD, offset=None) -> PlateSignals:
    """Raw channels -> lab-frame force, moment, COP and free moment of one plate.

    raw: (N, n_channels) SI channels (module doc). offset: (n_channels,) subtracted first (see
    :func:`zero_offset`), or None. threshold: N; the COP and free moment are NaN and ``valid`` is
    False where ``F_lab,z <= threshold`` (flight, unloading, a sign flip from an offset) — no
    division happens there. Saturation is judged on the raw values, before the offset.
    Equations: module doc (methods.md d.1).
    """
    r = _check_raw(plate, raw)
    sat = saturated(plate, r)
    if offset is not None:
        off = np.asarray(offset, dtype=float)
        if off.shape != (plate.n_channels,):
            raise PlateError(f"offset of plate {plate.name!r} must have shape ({plate.n_channels},), "
                             f"got {off.shape}")
        r = r - off
    force, moment = plate_wrench(plate, r)
    R = plate.rotation
    f_lab = force @ R.T
    valid = (f_lab[:, 2] > threshold) & (force[:, 2] != 0.0)
    fz = force[:, 2]
    if plate.type == 1:
        cx = np.where(valid, r[:, 3], np.nan)
        cy = np.where(valid, r[:, 4], np.nan)
    else:
        cx = np.full(len(r), np.nan)
        cy = np.full(len(r), np.nan)
        np.divide(-moment[:, 1], fz, out=cx, where=valid)
        np.divide(moment[:, 0], fz, out=cy, where=valid)
        if plate.cop_poly is not None:
            dx, dy = _cop_poly_correction(plate.cop_poly, cx, cy)
            cx, cy = cx - dx, cy - dy
    tz = moment[:, 2] - (cx * force[:, 1] - cy * force[:, 0])
    cop_plate = np.column_stack([cx, cy, np.zeros(len(r))])
    return PlateSignals(
        force=f_lab,
        moment=moment @ R.T,
        cop=cop_plate @ R.T + plate.centre,
        free_moment=tz[:, None] * R[:, 2],
        valid=valid,
        saturated=sat,
    )


def vertical_force(plate: Plate, raw) -> np.ndarray:
    """(N,) lab-frame vertical reaction F_lab,z, N, from raw channels (N, n_channels), SI."""
    force, _ = plate_wrench(plate, raw)
    return force @ plate.rotation[2]


def least_loaded_window(plate: Plate, raw, length: int) -> slice:
    """The ``length`` consecutive samples of raw (N, n_channels) with the least mean F_lab,z.

    A load always raises the lab vertical reaction, whatever the offset, so the window of least
    mean vertical force is the unloaded one (not the one of least |F_z|, which an offset of the
    opposite sign would put in the middle of a stance). Ties go to the earliest window.
    """
    r = _check_raw(plate, raw)
    if not 1 <= length <= len(r):
        raise PlateError(f"zeroing window length must be in [1, {len(r)}] samples, got {length}")
    fz = vertical_force(plate, r)
    c = np.concatenate([[0.0], np.cumsum(fz)])
    means = (c[length:] - c[:-length]) / length
    i = int(np.argmin(means))
    return slice(i, i + length)


def zero_offset(plate: Plate, raw, window: slice) -> np.ndarray:
    """(n_channels,) offset = mean of raw (N, n_channels) over ``window``; 0 for positions.

    Subtract it (``process(..., offset=...)``) to remove an unzeroed baseline. Type 1's COP
    channels are positions, not loads, and are never offset.
    """
    r = _check_raw(plate, raw)[window]
    if len(r) == 0:
        raise PlateError(f"zeroing window {window} of plate {plate.name!r} holds no samples")
    return np.where(plate.zeroable, r.mean(axis=0), 0.0)


@dataclass(frozen=True)
class Combined:
    """Total ground reaction of several plates, lab frame, SI.

    force (N, 3) N; moment (N, 3) N·m about the lab origin; cop (N, 3) m on the plane z = pz,
    NaN where not valid; valid (N,) bool: total F_z > threshold.
    """

    force: np.ndarray
    moment: np.ndarray
    cop: np.ndarray
    valid: np.ndarray


def combine(plates: Sequence[Plate], signals: Sequence[PlateSignals],
            threshold: float = DEFAULT_THRESHOLD, pz: float | None = None) -> Combined:
    """Sum the plates' wrenches about the lab origin and find the global COP (methods.md d.2).

    ``F = Σ F_k``, ``n = Σ (c_k × F_k + M_k)`` (c_k the surface centre, M_k the moment about it:
    a plate below threshold contributes its wrench, never its NaN COP);
    ``p_x = (p_z F_x − n_y) / F_z``, ``p_y = (p_z F_y + n_x) / F_z``.
    pz: height of the ground plane, m (default: the mean height of the plate centres).
    """
    if len(plates) != len(signals) or not plates:
        raise PlateError(f"combine needs one signal set per plate, got {len(plates)} plates and "
                         f"{len(signals)} signal sets")
    n = len(signals[0].force)
    force = np.zeros((n, 3))
    moment = np.zeros((n, 3))
    for plate, s in zip(plates, signals):
        if s.force.shape != (n, 3):
            raise PlateError(f"plate {plate.name!r}: force has shape {s.force.shape}, expected ({n}, 3)")
        force += s.force
        moment += _cross(plate.centre, s.force) + s.moment
    if pz is None:
        pz = float(np.mean([p.centre[2] for p in plates]))
    valid = force[:, 2] > threshold
    cop = np.full((n, 3), np.nan)
    np.divide(pz * force[:, 0] - moment[:, 1], force[:, 2], out=cop[:, 0], where=valid)
    np.divide(pz * force[:, 1] + moment[:, 0], force[:, 2], out=cop[:, 1], where=valid)
    cop[valid, 2] = pz
    return Combined(force=force, moment=moment, cop=cop, valid=valid)


@dataclass(frozen=True)
class Contacts:
    """contact (N,) bool; touchdown, liftoff: sample indices where contact starts / ends."""

    contact: np.ndarray
    touchdown: np.ndarray
    liftoff: np.ndarray


def contact_events(fz, on: float = 50.0, off: float = DEFAULT_THRESHOLD,
                   initial: bool = False) -> Contacts:
    """Touch-down / lift-off from a vertical force fz (N,), N, with hysteresis.

    Contact starts at the first sample with ``fz > on`` and ends at the first later sample with
    ``fz < off`` (``off < on``); between the two levels the state holds. NaN counts as unloaded.
    initial: the state before the first sample (carry it between blocks of a live stream).
    ``liftoff[k]`` is the first sample out of contact.
    """
    f = np.asarray(fz, dtype=float)
    if f.ndim != 1:
        raise PlateError(f"fz must have shape (N,), got {f.shape}")
    if not off < on:
        raise PlateError(f"hysteresis needs off < on, got off={off}, on={on}")
    with np.errstate(invalid="ignore"):
        up = f > on
        down = ~(f >= off)  # NaN is unloaded
    # Last decisive sample at or before each index; the state there holds until the next one.
    idx = np.where(up | down, np.arange(len(f)), -1)
    last = np.maximum.accumulate(idx) if len(f) else idx
    contact = np.where(last >= 0, up[np.maximum(last, 0)], initial)
    prev = np.concatenate([[initial], contact[:-1]])
    return Contacts(contact=contact,
                    touchdown=np.flatnonzero(contact & ~prev),
                    liftoff=np.flatnonzero(~contact & prev))
