"""STATE -> SI conversion across the int32 count wrap and the u32 µs wrap."""
from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_bridge import protocol as P
from firmware_bridge.telemetry import StateUnwrapper


def wrap32(x: int, signed: bool) -> int:
    x %= 2**32
    return x - 2**32 if signed and x >= 2**31 else x


def test_unwraps_counts_and_clock_to_si():
    cpr = (4096, 1000)
    u = StateUnwrapper(cpr)
    c0, t0 = 2**31 - 5000, 2**32 - 3000  # both counters wrap during the run
    out = []
    for k in range(10):
        counts = (c0 + 1000 * k, -c0 - 700 * k)  # motor 1 runs backwards through -2**31
        motors = tuple(P.MotorState(wrap32(c, True), 64, -1500, 0xC1) for c in counts)
        out.append(u(P.Frame(P.State(motors), seq=k, t_us=wrap32(t0 + 1000 * k, False))))
    dt = np.diff([s.t_ns for s in out])
    assert all(isinstance(s.t_ns, int) for s in out) and np.all(dt == 1_000_000)
    theta = np.array([s.theta for s in out])
    np.testing.assert_allclose(np.diff(theta, axis=0), [[1000 * 2 * math.pi / 4096, -700 * 2 * math.pi / 1000]] * 9)
    assert theta[0, 0] == pytest.approx(c0 * 2 * math.pi / 4096)
    np.testing.assert_allclose(out[0].omega, [64 * 16 * 2 * math.pi / 4096, 64 * 16 * 2 * math.pi / 1000])
    np.testing.assert_allclose(out[0].current, [-1.5, -1.5])
    assert out[0].flags.dtype == np.uint8 and out[0].flags[0] >> P.MODE_SHIFT == P.MODE_TORQUE


def test_wrong_frames_are_named():
    u = StateUnwrapper((4096,))
    with pytest.raises(ValueError, match="is Heartbeat, expected State"):
        u(P.Frame(P.Heartbeat()))
    with pytest.raises(ValueError, match="has 2 motors, CAPS announced 1"):
        u(P.Frame(P.State((P.MotorState(0, 0, 0, 0),) * 2)))
    with pytest.raises(ValueError, match="cpr"):
        StateUnwrapper((0,))
