"""The nominal-synergy file format (methods.md j): metadata + phase-indexed periodic tables.

A nominal is one `.npz` file (numpy's zip of arrays, no pickle) in a library folder:

- ``meta``: a JSON string (UTF-8 bytes) with at least the keys of `REQUIRED_META`: name, robot
  (``jansen``, ``biped``, ``exoskeleton``), model and model_hash (sha256 of the model files), kind
  (``crank_programme`` or ``semi_inverse``), the key parameters (gait, speed m/s, turn rad/s, S, T s,
  zmp_law, double_support, asymmetry, profile) and the figures (zmp_max_deviation m or null where
  no ZMP law is prescribed, min_margin m, peak_torque N m, peak_contact_force N, energy per cycle
  net / positive / absolute J, methods.md l).
- ``actuators`` (A,) names; ``period`` (A,) s, each actuator's own cycle (a Jansen walker's left and
  right shafts turn at different rates while turning); ``wrap`` (A,) rad, the increase of the
  coordinate over one cycle (2 pi for a crank, 0 for a joint).
- ``u`` (M,) uniform phases k/M in [0, 1); ``q``, ``qd``, ``qdd``, ``tau`` (M, A): coordinate (rad),
  rate (rad/s), acceleration (rad/s^2) and feed-forward torque (N m) at each actuator's phase u.
- ``inertia`` (M, A) kg m^2: each actuated coordinate's effective inertia (the coefficient of its own
  acceleration in its torque), used to correct the feed-forward during transitions;
- ``contact_force`` (M, C) N expected normal ground force per contact; ``zmp`` (M, 2) m ZMP / COP
  path (NaN where none) in the robot's ground frame (x forward, y lateral);
- ``margin`` (M,) m, optional: the planned ZMP's stability margin in the planned support (methods.md d.5;
  NaN where none is planned: a crank programme, or a file written before the key existed). The loop's
  ZMP guard holds the measured margin to it (controller.safety, rule 4).

Evaluation: each channel is a periodic cubic spline in phase (q through its periodic part
q - wrap u); `Synergy.reference(phase)` returns q, qd, qdd, tau at one phase per actuator.
"""
from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.interpolate import CubicSpline

from dynamics.hermite import quintic_coefficients, quintic_eval

ROBOTS = ("jansen", "biped", "exoskeleton")
REQUIRED_META = ("name", "robot", "model", "model_hash", "kind", "speed", "turn", "period", "profile",
                 "zmp_max_deviation", "min_margin", "peak_torque", "peak_contact_force",
                 "energy_net_per_cycle", "energy_positive_per_cycle", "energy_abs_per_cycle")
ARRAYS = ("actuators", "period", "wrap", "u", "q", "qd", "qdd", "tau", "inertia", "contact_force", "zmp")
#: arrays a nominal file may lack (written before they existed): read as NaN
OPTIONAL = ("margin",)


class SynergyError(ValueError):
    """A nominal file or library entry is missing, unreadable or inconsistent (names file and key)."""


@dataclass(frozen=True, eq=False)
class Synergy:
    """One nominal motion (module doc for the arrays and their units)."""

    meta: dict
    actuators: tuple[str, ...]
    period: np.ndarray
    wrap: np.ndarray
    u: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    inertia: np.ndarray
    contact_force: np.ndarray
    zmp: np.ndarray
    margin: np.ndarray | None = None
    _splines: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        name = self.meta.get("name", "?")
        missing = [k for k in REQUIRED_META if k not in self.meta]
        if missing:
            raise SynergyError(f"synergy {name}: meta: missing key {missing[0]!r}")
        if self.margin is None:
            object.__setattr__(self, "margin", np.full(self.u.shape[0], np.nan))
        if self.meta["robot"] not in ROBOTS:
            raise SynergyError(f"synergy {name}: meta.robot: expected one of {ROBOTS}, got {self.meta['robot']!r}")
        A, M = len(self.actuators), self.u.shape[0]
        if M < 8 or not np.allclose(self.u, np.arange(M) / M):
            raise SynergyError(f"synergy {name}: u: expected uniform phases k/M, M >= 8")
        for k in ("q", "qd", "qdd", "tau", "inertia"):
            a = getattr(self, k)
            if a.shape != (M, A) or not np.all(np.isfinite(a)):
                raise SynergyError(f"synergy {name}: {k}: expected finite shape ({M}, {A}), got {a.shape}")
        if self.period.shape != (A,) or not np.all(self.period > 0) or self.wrap.shape != (A,):
            raise SynergyError(f"synergy {name}: period, wrap: expected ({A},) with periods > 0 s")
        if self.contact_force.ndim != 2 or self.contact_force.shape[0] != M or self.zmp.shape != (M, 2):
            raise SynergyError(f"synergy {name}: contact_force (M, C) and zmp (M, 2) expected")
        if self.margin.shape != (M,):
            raise SynergyError(f"synergy {name}: margin: expected shape ({M},), got {self.margin.shape}")

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    def _table(self) -> np.ndarray:
        """Periodic cubic spline coefficients of (q - wrap u, qd, qdd, tau): (M, A, 4 powers, 4 channels),
        highest power first, on [u_k, u_k + 1/M]."""
        c = self._splines.get("coef")
        if c is None:
            y = np.stack([self.q - self.wrap * self.u[:, None], self.qd, self.qdd, self.tau], axis=-1)  # (M, A, 4)
            spl = CubicSpline(np.append(self.u, 1.0), np.concatenate([y, y[:1]]), bc_type="periodic")
            c = np.ascontiguousarray(np.moveaxis(spl.c, 0, 2))  # (M, A, 4 powers, 4 channels)
            self._splines["coef"] = c
        return c

    def reference(self, phase) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """q (rad), qd (rad/s), qdd (rad/s^2), tau (N m), each (A,), at phase (A,) in cycles (any real
        value: the integer part counts whole cycles, q grows by wrap per cycle)."""
        A = len(self.actuators)
        ph = np.broadcast_to(np.asarray(phase, dtype=float), (A,))
        c = self._table()
        M = c.shape[0]
        x = (ph - np.floor(ph)) * M
        k = np.minimum(x.astype(np.intp), M - 1)
        t = ((x - k) / M)[:, None]
        sel = c[k, np.arange(A)]                                  # (A, 4 powers, 4 channels)
        v = ((sel[:, 0] * t + sel[:, 1]) * t + sel[:, 2]) * t + sel[:, 3]
        return v[:, 0] + self.wrap * ph, v[:, 1], v[:, 2], v[:, 3]

    def planned_margin(self, phase):
        """The planned ZMP stability margin (m) at `phase` (cycles of the first actuator's clock; a number or
        an array), linear between the stored samples; NaN where none is planned."""
        M = self.u.shape[0]
        x = (np.asarray(phase, dtype=float) % 1.0) * M
        out = np.interp(x, np.arange(M + 1), np.append(self.margin, self.margin[0]))
        return float(out) if out.ndim == 0 else out

    def summary(self) -> dict:
        """The index entry: meta plus the number of samples and actuators."""
        return {**self.meta, "samples": int(self.u.shape[0]), "actuators": list(self.actuators)}


def _jsonable(meta: dict) -> dict:
    def fix(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (np.floating, np.integer)):
            return fix(v.item())
        if isinstance(v, (list, tuple)):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        return v

    return fix(meta)


def _write(obj, path: Path, names: tuple[str, ...]) -> Path:
    """An .npz of obj's meta (JSON bytes), actuators and arrays `names`, written to a temporary name and
    renamed: never half a file."""
    path = Path(path)
    tmp = path.with_suffix(".tmp.npz")
    blob = json.dumps(_jsonable(obj.meta), sort_keys=True).encode()
    np.savez(tmp, meta=np.frombuffer(blob, dtype=np.uint8), actuators=np.array(obj.actuators, dtype="U64"),
             **{k: getattr(obj, k) for k in names if k != "actuators"})
    tmp.replace(path)
    return path


def _read(path: Path, cls, names: tuple[str, ...], what: str, optional: tuple[str, ...] = ()):
    """A `cls` (Synergy, StoredTransition) from a file `_write` wrote (the `optional` arrays when it has
    them); SynergyError naming the file."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            arr = {k: z[k] for k in names}
            arr.update({k: z[k] for k in optional if k in z.files})
    except FileNotFoundError:
        raise SynergyError(f"{path}: no such {what} file") from None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise SynergyError(f"{path}: not a readable {what} file ({e})") from None
    try:
        return cls(meta=meta, actuators=tuple(str(a) for a in arr.pop("actuators")),
                   **{k: np.asarray(v, dtype=float) for k, v in arr.items()})
    except SynergyError as e:
        raise SynergyError(f"{path}: {e}") from None


def save(syn: Synergy, path: Path) -> Path:
    """Write syn to path (.npz, written to a temporary name and renamed: never half a file)."""
    return _write(syn, path, ARRAYS + OPTIONAL)


def load(path: Path) -> Synergy:
    """Read a nominal file; SynergyError naming the file for a missing, unreadable or bad one."""
    return _read(path, Synergy, ARRAYS, "nominal", OPTIONAL)


# ------------------------------------------------------------------------------ transitions

TRANSITION_META = ("name", "robot", "model", "from", "to", "period", "zmp_max_deviation", "eps", "accepted",
                   "min_margin")
TRANSITION_ARRAYS = ("actuators", "u", "q", "qd", "qdd", "tau", "model_q", "model_v", "model_a", "zmp_law_x",
                     "zmp_law_y", "zmp", "margin")


@dataclass(frozen=True, eq=False)
class StoredTransition:
    """A precomputed transition stride between two nominals of one period T (methods.md j.6): ``meta``
    (name, robot, model, from, to, period s, zmp_max_deviation = d_max m, eps m, accepted = d_max < eps,
    min_margin m, ...); the actuators' q rad, qd rad/s, qdd rad/s^2, tau N m at phases ``u`` (M + 1,)
    = k/M, k = 0..M, of the stride (u = 0 is nominal `from` at its phase 0, u = 1 nominal `to` at its
    phase 0: the endpoint is stored, the motion is not periodic); and the 3-D model's motion it was
    judged on: model_q (M, nq), model_v, model_a (M, nv) at u[:-1] (lab frame, x forward, z up), the
    blended law path zmp_law_x (M,) m and zmp_law_y (M,) m (NaN: no lateral law, a sagittal-only
    nominal), the ZMP by dynamics zmp (M, 2) m and its margin (M,) m."""

    meta: dict
    actuators: tuple[str, ...]
    u: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    model_q: np.ndarray
    model_v: np.ndarray
    model_a: np.ndarray
    zmp_law_x: np.ndarray
    zmp_law_y: np.ndarray
    zmp: np.ndarray
    margin: np.ndarray

    def __post_init__(self) -> None:
        name = self.meta.get("name", "?")
        missing = [k for k in TRANSITION_META if k not in self.meta]
        if missing:
            raise SynergyError(f"transition {name}: meta: missing key {missing[0]!r}")
        A, M = len(self.actuators), self.u.shape[0] - 1
        if M < 8 or not np.allclose(self.u, np.arange(M + 1) / M):
            raise SynergyError(f"transition {name}: u: expected phases k/M, k = 0..M, M >= 8")
        for k in ("q", "qd", "qdd", "tau"):
            a = getattr(self, k)
            if a.shape != (M + 1, A) or not np.all(np.isfinite(a)):
                raise SynergyError(f"transition {name}: {k}: expected finite shape ({M + 1}, {A}), got {a.shape}")
        if not (self.model_q.shape[0] == self.model_v.shape[0] == self.model_a.shape[0] == self.zmp_law_x.shape[0]
                == self.zmp_law_y.shape[0] == self.margin.shape[0] == M) or self.zmp.shape != (M, 2):
            raise SynergyError(f"transition {name}: model_q, model_v, model_a, zmp_law_x, zmp_law_y, zmp, margin: "
                               f"expected {M} rows")

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def period(self) -> float:
        return float(self.meta["period"])

    def reference(self, x: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd, tau (A,) at the fraction x in [0, 1] of the stride (clipped): the quintic Hermite
        interpolant of the stored q, qd, qdd (`dynamics.hermite`), so the setpoint is C² (its position,
        rate and acceleration continuous across the samples and equal to the stored ones there); tau
        linear between the samples."""
        M = self.u.shape[0] - 1
        s = min(max(float(x), 0.0), 1.0) * M
        k = min(int(s), M - 1)
        f, h = s - k, self.period / M
        c = quintic_coefficients(np.array([0.0, h]), self.q[k:k + 2], self.qd[k:k + 2], self.qdd[k:k + 2])[0]
        q, qd, qdd = quintic_eval(c, f, h)
        tau = (1 - f) * self.tau[k] + f * self.tau[k + 1]
        return q, qd, qdd, tau

    def planned_margin(self, x: float) -> float:
        """The planned ZMP stability margin (m) at the fraction x in [0, 1] of the stride (clipped), linear
        between the stored samples (the stride's last sample stands for x = 1)."""
        M = self.margin.shape[0]
        s = min(max(float(x), 0.0), 1.0) * M
        k = min(int(s), M - 1)
        f = s - k
        return float((1 - f) * self.margin[k] + f * self.margin[min(k + 1, M - 1)])

    def summary(self) -> dict:
        """The entry of the library's transitions index: meta plus samples and actuators."""
        return {**self.meta, "samples": int(self.u.shape[0] - 1), "actuators": list(self.actuators)}


def save_transition(tr: StoredTransition, path: Path) -> Path:
    """Write a transition to path (.npz, written to a temporary name and renamed)."""
    return _write(tr, path, TRANSITION_ARRAYS)


def load_transition(path: Path) -> StoredTransition:
    """Read a transition file; SynergyError naming the file for a missing, unreadable or bad one."""
    return _read(path, StoredTransition, TRANSITION_ARRAYS, "transition")
