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

from . import kernels
from .kernels import ground as G

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


def plate_axes(corners: np.ndarray) -> np.ndarray:
    """Rotation R (3, 3) from plate axes to lab axes from the CORNERS (4, 3), lab frame, m.

    ``x̂ = c0 − c1, ŷ = c0 − c3, ẑ = x̂ × ŷ, ŷ ← ẑ × x̂`` (each normalised), ``R = [x̂ ŷ ẑ]``.
    """
    x = corners[0] - corners[1]
    y = corners[0] - corners[3]
    z = np.cross(x, y)
    y = np.cross(z, x)
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
    # Constant per plate, built once (the live service calls process() per 1-10-sample block,
    # where each numpy call costs more than the arithmetic): for types 2-4 the whole raw ->
    # wrench map is linear (calibration, F × o and R folded in), raw (N, n) @ _wrench_lab (n, 16)
    # = columns of `_wrench`; None for type 1 (COP × F is not linear in the channels).
    _wrench_lab: np.ndarray | None = field(init=False, repr=False, compare=False)
    _cop_axes: np.ndarray = field(init=False, repr=False, compare=False)   # (2, 3) = R[:, :2].T
    # [F, M] (N, 6) @ _to_origin (6, 8) = [F, n, −n_y, n_x], n = centre × F + M (about the lab origin)
    _to_origin: np.ndarray = field(init=False, repr=False, compare=False)
    # Lab [F, M_s] (N, 6) @ _raw_lab (6, n) = raw channels (the inverse of _wrench_lab's first
    # columns, least-norm for type 3's 8 channels); None for type 1 (see raw_channels).
    _raw_lab: np.ndarray | None = field(init=False, repr=False, compare=False)
    # The constants and (type, n_channels, has a range, has FPCOPPOLY) as the compiled kernels
    # take them (layout: kernels/ground.py PLATE_*).
    _kernel_consts: np.ndarray = field(init=False, repr=False, compare=False)
    _kernel_meta: np.ndarray = field(init=False, repr=False, compare=False)

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
        wrench = _wrench_map(self.type, origin, self.cal_matrix)
        rot2 = np.zeros((6, 6))
        rot2[:3, :3] = rot2[3:, 3:] = rotation.T
        set_(self, "_wrench_lab", None if wrench is None else np.hstack([
            wrench, wrench @ rot2, -wrench[:, 4:5], wrench[:, 3:4], wrench[:, 1:2], -wrench[:, 0:1]]))
        set_(self, "_cop_axes", np.ascontiguousarray(rotation[:, :2].T))
        set_(self, "_raw_lab", None if wrench is None else rot2.T @ np.linalg.pinv(wrench))
        to_origin = np.zeros((6, 8))
        to_origin[0:3, 0:3] = to_origin[3:6, 3:6] = np.eye(3)
        to_origin[0:3, 3:6] = np.cross(self.centre, np.eye(3))   # row i: centre × e_i
        to_origin[:, 6], to_origin[:, 7] = -to_origin[:, 4], to_origin[:, 3]
        set_(self, "_to_origin", to_origin)
        k = np.zeros(G.PLATE_WIDTH)
        n = self.n_channels
        if wrench is not None:
            k[G.PLATE_MAP:G.PLATE_MAP + 16 * n] = self._wrench_lab.ravel()
        k[G.PLATE_R:G.PLATE_R + 9] = rotation.ravel()
        k[G.PLATE_CENTRE:G.PLATE_CENTRE + 3] = self.centre
        if self.cop_poly is not None:
            k[G.PLATE_POLY:G.PLATE_POLY + 12] = self.cop_poly
        if self.channel_range is not None:
            k[G.PLATE_LO:G.PLATE_LO + n], k[G.PLATE_HI:G.PLATE_HI + n] = self.channel_range[:, 0], self.channel_range[:, 1]
        k[G.PLATE_ORIGIN:G.PLATE_ORIGIN + 48] = to_origin.ravel()
        set_(self, "_kernel_consts", k)
        set_(self, "_kernel_meta", np.array([self.type, n, self.channel_range is not None, self.cop_poly is not None],
                                            dtype=np.int64))

    @property
    def n_channels(self) -> int:
        return N_CHANNELS[self.type]

    def raw_channels(self, force, moment) -> np.ndarray:
        """The raw channels (N, n_channels), SI, that :func:`process` reads as the lab-frame force
        `force` (N, 3) N and moment `moment` (N, 3) N·m about the surface centre, lab axes: the
        plate's inverse mechanics (what its amplifier sends under that load; simulators and tests).

        Plate axes ``F_p = Rᵀ F``, ``M_p = Rᵀ M``. Types 2-4: ``r = [F_p, M_p] A⁺`` with A the
        linear map ``[F_p, M_s] = r A`` of the module doc (``M_o = M_s − F_p × o``; type 4 through
        ``CAL⁻¹``; type 3's 8 channels: the least-norm set, its FPCOPPOLY is not inverted, so a
        plate with one is refused). Type 1: ``r = (F_p, COP_x, COP_y, T_z)`` with
        ``COP = (−M_p,y / F_p,z, M_p,x / F_p,z)`` and ``T_z = M_p,z − (COP_x F_p,y − COP_y F_p,x)``
        (COP 0 where ``F_p,z = 0``: no load, no centre of pressure).
        """
        f = np.asarray(force, dtype=float)
        m = np.asarray(moment, dtype=float)
        if f.ndim != 2 or f.shape[1:] != (3,) or m.shape != f.shape:
            raise PlateError(f"plate {self.name!r}: force and moment must both have shape (N, 3), "
                             f"got {f.shape} and {m.shape}")
        if self.cop_poly is not None:
            raise PlateError(f"plate {self.name!r}: raw channels of a plate with FPCOPPOLY are not "
                             "computed (the COP correction has no closed-form inverse)")
        if self._raw_lab is not None:
            return np.concatenate([f, m], axis=1) @ self._raw_lab
        f_p, m_p = f @ self.rotation, m @ self.rotation
        fz = f_p[:, 2]
        loaded = fz != 0.0
        inv = np.divide(1.0, fz, out=np.zeros_like(fz), where=loaded)
        cx, cy = -m_p[:, 1] * inv, m_p[:, 0] * inv
        return np.column_stack([f_p, cx, cy, m_p[:, 2] - (cx * f_p[:, 1] - cy * f_p[:, 0])])

    @property
    def zeroable(self) -> np.ndarray:
        """(n_channels,) bool: channels carrying a load (type 1's COP channels are positions)."""
        mask = np.ones(self.n_channels, bool)
        if self.type == 1:
            mask[3:5] = False
        return mask


def _wrench_map(kind: int, origin: np.ndarray, cal: np.ndarray | None) -> np.ndarray | None:
    """(n_channels, 6) A with ``[F, M_s] = r @ A`` (plate axes, SI) for the linear types 2-4
    (module doc equations); None for type 1, whose moment ``COP × F`` is not linear in r."""
    if kind == 1:
        return None
    if kind == 3:
        a, b, az0 = origin
        f = np.zeros((8, 3))
        f[0:2, 0] = f[2:4, 1] = f[4:8, 2] = 1.0
        m = np.zeros((8, 3))
        m[4:8, 0] = b * np.array([1.0, 1.0, -1.0, -1.0])
        m[4:8, 1] = a * np.array([-1.0, 1.0, 1.0, -1.0])
        m[0:4, 2] = [-b, b, a, -a]
        o = np.array([0.0, 0.0, az0])
    else:
        f = np.zeros((6, 3))
        f[0:3] = np.eye(3)
        m = np.zeros((6, 3))
        m[3:6] = np.eye(3)
        o = origin
    m = m + f @ np.cross(np.eye(3), o)   # M_s = M + F × o; row i of the cross: e_i × o
    a6 = np.hstack([f, m])
    return cal.T @ a6 if kind == 4 else a6


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


def load_moment(force, cop_offset, tz) -> np.ndarray:
    """Moment (N, 3) N·m about a plate's surface centre of forces `force` (N, 3) N applied at
    `cop_offset` (N, 3) m from that centre plus a free moment `tz` (N,) N·m about lab z:
    ``M = c × F + (0, 0, T_z)``, lab axes (the form :meth:`Plate.raw_channels` takes)."""
    f = np.asarray(force, dtype=float)
    m = np.cross(np.asarray(cop_offset, dtype=float), f)
    m[:, 2] += np.asarray(tz, dtype=float)
    return m


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
    w = _wrench(plate, _check_raw(plate, raw))
    return w[:, 0:3], w[:, 3:6]


def _wrench(plate: Plate, r: np.ndarray) -> np.ndarray:
    """(N, 16) from checked SI raw channels r: ``[F, M_s]`` plate axes (0:6), ``[F, M_s]`` lab
    axes (6:12), ``(−M_s,y, M_s,x)`` (12:14, F_z · COP) and ``(F_y, −F_x)`` (14:16), plate axes."""
    if plate._wrench_lab is not None:
        return r @ plate._wrench_lab
    # Type 1: M_s = (cx, cy, 0) × F + (0, 0, Tz) = (cy Fz, −cx Fz, cx Fy − cy Fx + Tz).
    fx, fy, fz, cx, cy = r[:, 0], r[:, 1], r[:, 2], r[:, 3], r[:, 4]
    w = np.empty((len(r), 16))
    w[:, 0:3] = r[:, 0:3]
    w[:, 3] = cy * fz
    w[:, 4] = -cx * fz
    w[:, 5] = cx * fy - cy * fx + r[:, 5]
    R = plate.rotation
    w[:, 6:9] = w[:, 0:3] @ R.T
    w[:, 9:12] = w[:, 3:6] @ R.T
    w[:, 12] = -w[:, 4]
    w[:, 13] = w[:, 3]
    w[:, 14] = fy
    w[:, 15] = -fx
    return w


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
    return _saturated(plate, _check_raw(plate, raw))


def _saturated(plate: Plate, r: np.ndarray) -> np.ndarray:
    if plate.channel_range is None:
        return np.zeros(len(r), bool)
    lo, hi = plate.channel_range[:, 0], plate.channel_range[:, 1]
    return ((r <= lo) | (r >= hi)).any(axis=1)


def process(plate: Plate, raw, threshold: float = DEFAULT_THRESHOLD, offset=None) -> PlateSignals:
    """Raw channels -> lab-frame force, moment, COP and free moment of one plate.

    raw: (N, n_channels) SI channels (module doc). offset: (n_channels,) subtracted first (see
    :func:`zero_offset`), or None. threshold: N; the COP and free moment are NaN and ``valid`` is
    False where ``F_lab,z <= threshold`` (flight, unloading, a sign flip from an offset) — no
    division happens there. Saturation is judged on the raw values, before the offset.
    A sample whose outputs are not finite numbers (a non-finite raw value, or finite raw values
    so large that the arithmetic overflows float64, e.g. 1e308 N) is invalid: every output NaN,
    ``valid`` False; no floating-point warning is raised for it.
    Equations: module doc (methods.md d.1).
    """
    r = _check_raw(plate, raw)
    if kernels.enabled():
        return _process_compiled(plate, r, threshold, offset)
    sat = _saturated(plate, r)
    # Below _SAFE_RAW no product or sum of the computation can overflow (a cheap test that
    # keeps the live per-block path free of error-state switching); above it, or with a
    # non-finite value, the checked path finds the samples whose outputs are not finite.
    big = not _below(r, _SAFE_RAW)
    if offset is not None:
        off = np.asarray(offset, dtype=float)
        if off.shape != (plate.n_channels,):
            raise PlateError(f"offset of plate {plate.name!r} must have shape ({plate.n_channels},), "
                             f"got {off.shape}")
        big = big or not _below(off, _SAFE_RAW)
        if not big:
            r = r - off
    if not big:
        return _signals(plate, r, threshold, sat)
    with np.errstate(over="ignore", invalid="ignore"):
        sig = _signals(plate, r if offset is None else r - off, threshold, sat)
        # Finite iff the sample's force, moment (and, where valid, free moment and so COP) are,
        # and their sum does not overflow either.
        ok = np.isfinite(sig.force.sum(axis=1) + sig.moment.sum(axis=1) + np.where(sig.valid, sig.free_moment.sum(axis=1), 0.0))
    if not ok.all():
        for a in (sig.force, sig.moment, sig.cop, sig.free_moment):
            a[~ok] = np.nan
        sig.valid[~ok] = False
    return sig


_NO_OFFSET = np.zeros(8)


def _process_compiled(plate: Plate, r: np.ndarray, threshold: float, offset) -> PlateSignals:
    """`process` as one compiled loop over the samples (kernels/ground.py plate_process)."""
    off = _NO_OFFSET
    if offset is not None:
        off = np.zeros(8)
        o = np.asarray(offset, dtype=float)
        if o.shape != (plate.n_channels,):
            raise PlateError(f"offset of plate {plate.name!r} must have shape ({plate.n_channels},), got {o.shape}")
        off[:plate.n_channels] = o
    n = r.shape[0]
    out, valid, sat = np.empty((n, 12)), np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    kernels.kernel("ground.plate_process")(np.ascontiguousarray(r), off, plate._kernel_consts, plate._kernel_meta,
                                           float(threshold), out, valid, sat)
    return PlateSignals(force=out[:, 0:3], moment=out[:, 3:6], cop=out[:, 6:9], free_moment=out[:, 9:12],
                        valid=valid, saturated=sat)


#: Raw values below this magnitude cannot overflow any step of `process` (products of two
#: outputs, the FPCOPPOLY quintic with calibration gains up to 1e4 and coefficients up to 1e100).
_SAFE_RAW = 1e30
#: Wrench values below this magnitude cannot overflow `combine_wrenches` (sums, and their
#: products with plate positions and p_z of a few metres).
_SAFE_WRENCH = 1e150


def _below(a: np.ndarray, limit: float) -> bool:
    """True when every value of `a` is finite and below `limit` in magnitude (NaN: False)."""
    return bool(np.abs(a).max() < limit)


def _signals(plate: Plate, r: np.ndarray, threshold: float, sat: np.ndarray) -> PlateSignals:
    """`process` on checked raw channels r (N, n_channels), SI, the offset already removed."""
    w = _wrench(plate, r)
    valid = w[:, 8] > threshold
    valid &= w[:, 2] != 0.0   # plate F_z, the divisor (0 only on a plate tilted by 90°)
    if plate.type == 1:
        cxy = np.where(valid[:, None], r[:, 3:5], np.nan)   # the COP channels themselves
    else:
        # NaN where not valid, so no division by a small or zero F_z happens there.
        cxy = w[:, 12:14] * (1.0 / np.where(valid, w[:, 2], np.nan))[:, None]
        if plate.cop_poly is not None:
            dx, dy = _cop_poly_correction(plate.cop_poly, cxy[:, 0], cxy[:, 1])
            cxy = cxy - np.column_stack([dx, dy])
    tz = w[:, 5] - (cxy * w[:, 14:16]).sum(axis=1)   # T_z = M_s,z − (COP_x F_y − COP_y F_x)
    return PlateSignals(
        force=w[:, 6:9],
        moment=w[:, 9:12],
        # COP_lab = R (cx, cy, 0) + centre; a NaN in cx or cy makes every lab component NaN.
        cop=cxy @ plate._cop_axes + plate.centre,
        free_moment=tz[:, None] * plate.rotation[:, 2],
        valid=valid,
        saturated=sat,
    )


def vertical_force(plate: Plate, raw) -> np.ndarray:
    """(N,) lab-frame vertical reaction F_lab,z, N, from raw channels (N, n_channels), SI
    (non-finite where the raw values overflow it; no warning)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _wrench(plate, _check_raw(plate, raw))[:, 8]


def least_loaded_window(plate: Plate, raw, length: int) -> slice:
    """The ``length`` consecutive samples of raw (N, n_channels) with the least mean F_lab,z.

    A load always raises the lab vertical reaction, whatever the offset, so the window of least
    mean vertical force is the unloaded one (not the one of least |F_z|, which an offset of the
    opposite sign would put in the middle of a stance). Ties go to the earliest window.
    """
    r = _check_raw(plate, raw)
    if not 1 <= length <= len(r):
        raise PlateError(f"zeroing window length must be in [1, {len(r)}] samples, got {length}")
    means = window_means(vertical_force(plate, r), length)
    # A window holding a non-finite or overflowing force is never the unloaded one.
    i = int(np.argmin(np.where(np.isfinite(means), means, np.inf)))
    return slice(i, i + length)


def window_means(x: np.ndarray, length: int) -> np.ndarray:
    """(N − length + 1,) means of every `length` consecutive values of x (N,); a window holding a
    non-finite value or summing beyond float64 is non-finite (no warning), the others exact
    (a local sum: one huge value does not spoil later windows, as a running sum would)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.convolve(x, np.full(length, 1.0 / length), "valid")


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
    for plate, sig in zip(plates, signals):
        if sig.force.shape != (n, 3) or sig.moment.shape != (n, 3):
            raise PlateError(f"plate {plate.name!r}: force and moment have shapes {sig.force.shape} "
                             f"and {sig.moment.shape}, expected ({n}, 3)")
    if kernels.enabled():
        w = np.concatenate([a for sig in signals for a in (sig.force, sig.moment)], axis=1, dtype=float)
        return _combine_compiled(plates, w, threshold, pz)
    # Σ_k [F_k, M_k] @ _to_origin_k plate by plate (no (N, 6 K) interleaved copy: slower).
    total = np.zeros((n, 8))
    with np.errstate(over="ignore", invalid="ignore"):
        for plate, sig in zip(plates, signals):
            total += sig.force @ plate._to_origin[0:3]
            total += sig.moment @ plate._to_origin[3:6]
        return _combined(plates, total, threshold, pz)


def combine_wrenches(plates: Sequence[Plate], wrenches, threshold: float = DEFAULT_THRESHOLD,
                     pz: float | None = None) -> Combined:
    """:func:`combine` from the plates' lab wrenches side by side.

    wrenches: (N, 6 K) ``[F_1, M_1, F_2, M_2, ...]`` for the K plates, N and N·m, lab axes, M_k
    about plate k's surface centre (``PlateSignals.force``, ``.moment``). One product does the
    sum: ``[F, n] = wrenches @ [[I, [c_k]×ᵀ], [0, I]]`` stacked over k.
    """
    w = np.asarray(wrenches, dtype=float)
    if not plates or w.ndim != 2 or w.shape[1] != 6 * len(plates):
        raise PlateError(f"wrenches must have shape (N, {6 * len(plates)}) for {len(plates)} "
                         f"plate(s), got {w.shape}")
    if kernels.enabled():
        return _combine_compiled(plates, w, threshold, pz)
    to_origin = plates[0]._to_origin if len(plates) == 1 else np.vstack([p._to_origin for p in plates])
    if _below(w, _SAFE_WRENCH):    # finite, and no overflow possible: the live path
        return _combined(plates, w @ to_origin, threshold, pz, finite=True)
    with np.errstate(over="ignore", invalid="ignore"):
        return _combined(plates, w @ to_origin, threshold, pz)


def _combine_compiled(plates: Sequence[Plate], w: np.ndarray, threshold: float, pz: float | None) -> Combined:
    """combine / combine_wrenches as one compiled loop (kernels/ground.py plate_combine) on the
    plates' lab wrenches w (N, 6 K); the same equations and non-finite rule as `_combined`."""
    if pz is None:
        pz = sum(float(p.centre[2]) for p in plates) / len(plates)
    n = w.shape[0]
    out, valid = np.empty((n, 9)), np.empty(n, dtype=bool)
    kernels.kernel("ground.plate_combine")(np.ascontiguousarray(w), np.array([p._kernel_consts for p in plates]),
                                           float(threshold), float(pz), out, valid)
    return Combined(force=out[:, 0:3], moment=out[:, 3:6], cop=out[:, 6:9], valid=valid)


def _combined(plates: Sequence[Plate], total: np.ndarray, threshold: float, pz: float | None,
              finite: bool = False) -> Combined:
    """Combined from total (N, 8) = ``[F, n, −n_y, n_x]`` about the lab origin (methods.md d.2).
    A sample whose total or COP is not finite (a plate's NaN, or an overflow) is NaN, not valid.
    Callers with possibly huge values hold the floating-point errors off around it; `finite`:
    the caller knows every value is finite and far from overflow (no check)."""
    if pz is None:
        pz = sum(float(p.centre[2]) for p in plates) / len(plates)
    cop = np.empty((len(total), 3))
    valid = total[:, 2] > threshold
    # NaN where not valid, so no division by a small or zero F_z happens there.
    cop[:, 0:2] = (pz * total[:, 0:2] + total[:, 6:8]) * (1.0 / np.where(valid, total[:, 2], np.nan))[:, None]
    if not finite and not np.isfinite(total[:, 2].sum()):   # a NaN plate, or an overflow
        ok = np.isfinite(total[:, 0:6].sum(axis=1) + np.where(valid, cop[:, 0] + cop[:, 1], 0.0))
        total[~ok] = np.nan
        cop[~ok, 0:2] = np.nan
        valid &= ok
    cop[:, 2] = np.where(valid, pz, np.nan)
    return Combined(force=total[:, 0:3], moment=total[:, 3:6], cop=cop, valid=valid)


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
