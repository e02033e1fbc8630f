"""Geared DC motor plant of the virtual MCU, batched over motors.

Per motor (motor-shaft quantities m, output shaft after the gear of ratio N):

    L di/dt = V - R i - Ke w_m                                  (armature circuit)
    (J_m + J_load/N**2) dw_m/dt = Kt i - b w_m - tau_c tanh(w_m/w_eps) - tau_load/N
    theta = theta_m / N,  omega = w_m / N                       (output shaft, rad, rad/s)

tau_load and J_load come from a callback `load(t, theta, omega) -> (J_load, tau_load)` at the output
shaft (kg·m², N·m; tau_load opposes positive motion when positive), so a linkage such as the Jansen
crank can supply I(theta) and its velocity-product and ground-force terms. With the bridge disabled
(torque off) the armature is open: i = 0.

Integration: the current is advanced exactly over a substep with w_m frozen
(i <- i_ss + (i - i_ss) exp(-R h/L), i_ss = (V - Ke w_m)/R), then the mechanics by semi-implicit
Euler; stable for h well below the mechanical time constant.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

LoadFn = Callable[[float, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class MotorParams:
    """DC motor + gear. SI: R (ohm), L (H), Kt (N·m/A), Ke (V·s/rad), J_m (kg·m², motor shaft),
    b (N·m·s/rad, motor shaft), tau_c (N·m Coulomb, motor shaft), gear (motor turns per output
    turn, > 0), J_load (kg·m² at the output, used when no load callback),
    v_supply (V, bridge voltage limit)."""

    R: float = 1.2
    L: float = 0.5e-3
    Kt: float = 0.03
    Ke: float = 0.03
    J_m: float = 2e-6
    b: float = 1e-6
    tau_c: float = 1e-3
    gear: float = 20.0
    J_load: float = 2e-3
    v_supply: float = 24.0
    w_eps: float = 0.5  # rad/s, width of the smoothed Coulomb friction

    def __post_init__(self) -> None:
        for name in ("R", "L", "Kt", "Ke", "J_m", "gear", "v_supply", "w_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MotorParams.{name} = {getattr(self, name)!r}: expected > 0")
        for name in ("b", "tau_c", "J_load"):
            if getattr(self, name) < 0:
                raise ValueError(f"MotorParams.{name} = {getattr(self, name)!r}: expected >= 0")


@dataclass
class MotorBank:
    """Parameters of n motors as arrays of shape (n,) (built once) and their state (mutable)."""

    R: np.ndarray
    L: np.ndarray
    Kt: np.ndarray
    Ke: np.ndarray
    J_m: np.ndarray
    b: np.ndarray
    tau_c: np.ndarray
    gear: np.ndarray
    J_load: np.ndarray
    v_supply: np.ndarray
    w_eps: np.ndarray
    i: np.ndarray  # A, armature current
    w_m: np.ndarray  # rad/s, motor shaft
    theta: np.ndarray  # rad, output shaft

    @classmethod
    def from_params(cls, params: list[MotorParams]) -> "MotorBank":
        n = len(params)
        cols = {k: np.array([getattr(p, k) for p in params], dtype=float)
                for k in ("R", "L", "Kt", "Ke", "J_m", "b", "tau_c", "gear", "J_load", "v_supply", "w_eps")}
        return cls(**cols, i=np.zeros(n), w_m=np.zeros(n), theta=np.zeros(n))

    @property
    def omega(self) -> np.ndarray:
        """Output-shaft angular velocity, rad/s, shape (n,)."""
        return self.w_m / self.gear


def step(bank: MotorBank, v: np.ndarray, enabled: np.ndarray, t: float, h: float,
         load: LoadFn | None = None, substeps: int = 2) -> None:
    """Advance `bank` in place by h seconds under armature voltages `v` (V, shape (n,), clipped to
    ±v_supply); motors with enabled False are open-circuit (i = 0)."""
    v = np.clip(v, -bank.v_supply, bank.v_supply)
    dt = h / substeps
    decay = np.exp(-bank.R * dt / bank.L)
    for k in range(substeps):
        tk = t + k * dt
        i_ss = (v - bank.Ke * bank.w_m) / bank.R
        bank.i = np.where(enabled, i_ss + (bank.i - i_ss) * decay, 0.0)
        if load is None:
            j_load, tau_load = bank.J_load, 0.0
        else:
            j_load, tau_load = load(tk, bank.theta, bank.omega)
        j = bank.J_m + np.asarray(j_load) / bank.gear ** 2
        tau = (bank.Kt * bank.i - bank.b * bank.w_m - bank.tau_c * np.tanh(bank.w_m / bank.w_eps)
               - np.asarray(tau_load) / bank.gear)
        bank.w_m = bank.w_m + dt * tau / j
        bank.theta = bank.theta + dt * bank.w_m / bank.gear
