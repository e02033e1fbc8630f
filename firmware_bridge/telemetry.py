"""Host-side conversion of STATE frames to SI, unwrapping the 32-bit encoder counts and µs clock.

This is the edge where encoder counts become radians: theta = count * 2π / cpr (output shaft),
omega = vel * VEL_LSB_CPS * 2π / cpr, current = current_mA * 1e-3, and the device time in integer
nanoseconds t_ns = unwrapped t_us * 1000 (device clock; clock synchronisation is the DAQ's job).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import protocol as P


@dataclass(frozen=True)
class StateSample:
    """One STATE in SI. t_ns: device time (ns, int, unwrapped); theta (n,) rad output shaft, unwrapped;
    omega (n,) rad/s; current (n,) A; flags (n,) uint8 (protocol FLAG_* | mode << 6); seq: frame seq."""

    t_ns: int
    theta: np.ndarray
    omega: np.ndarray
    current: np.ndarray
    flags: np.ndarray
    seq: int


class StateUnwrapper:
    """Converts a stream of STATE frames from one device; keeps the unwrapped counters between calls.

    cpr: encoder counts per output revolution for each motor (from CAPS). Call reset() after a
    reconnect (the device may have rebooted). A step larger than half the counter range between two
    frames cannot be told from a wrap (2**31 counts; 35.8 min of µs clock)."""

    def __init__(self, cpr: Sequence[int]):
        if not len(cpr) or any(c <= 0 for c in cpr):
            raise ValueError(f"StateUnwrapper: cpr = {list(cpr)}: expected one positive count per motor")
        self._rad = np.array([2 * math.pi / c for c in cpr])
        self.reset()

    def reset(self) -> None:
        self._t: int | None = None
        self._counts: list[int] | None = None

    def __call__(self, frame: P.Frame) -> StateSample:
        msg = frame.msg
        if not isinstance(msg, P.State):
            raise ValueError(f"StateUnwrapper: frame seq {frame.seq} is {type(msg).__name__}, expected State")
        if len(msg.motors) != len(self._rad):
            raise ValueError(f"StateUnwrapper: STATE seq {frame.seq} has {len(msg.motors)} motors, "
                             f"CAPS announced {len(self._rad)}")
        raw = [m.count for m in msg.motors]
        if self._counts is None:
            self._t, self._counts = frame.t_us, raw
        else:
            self._t = P.unwrap(self._t, frame.t_us, 32)
            self._counts = [P.unwrap(p, r, 32) for p, r in zip(self._counts, raw)]
        return StateSample(
            t_ns=self._t * 1000,
            theta=np.array(self._counts, dtype=float) * self._rad,
            omega=np.array([m.vel for m in msg.motors], dtype=float) * P.VEL_LSB_CPS * self._rad,
            current=np.array([m.current_ma for m in msg.motors], dtype=float) * P.CUR_LSB_A,
            flags=np.array([m.flags for m in msg.motors], dtype=np.uint8),
            seq=frame.seq,
        )
