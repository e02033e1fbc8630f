"""Simulated force plates: a subject walking on an instrumented treadmill, published on the bus.

Each ``[devices.NAME]`` force plate with ``source = "sim"`` served by the process gets one foot
(first plate left, second right, and so on alternately; the right foot lags half a stride). Per
foot, with stride period ``T``, stance fraction ``β`` and body weight ``W = m g``, the stance
phase ``s = ((t / T + φ) mod 1) / β`` in [0, 1) gives the ground reaction in the lab frame
(x walking direction, z up):

    F_z = k W (sin πs + 0.3 sin 3πs)      (double hump, k = π / (4.4 β))
    F_x = −0.18 W sin 2πs                 (braking, then propulsion)
    F_y = ∓0.05 W sin πs                  (medio-lateral, toward the body's midline)
    COP = centre + (−0.12 + 0.24 s, 0, 0) m  (heel to toe),   T_z = 0.007 W·m sin 2πs

and zero during swing, plus Gaussian channel noise. k makes the stride average of the two feet's
vertical reaction exactly W (mean of sin πs + 0.3 sin 3πs over a stance is 2.2/π): in steady
walking the centre of mass does not accelerate on average; the braking/propulsion and the
left/right medio-lateral forces cancel over a stride for the same reason. With β = 0.62 the
peaks are 1.06 W and the mid-stance dip 0.81 W. The plate's own inverse mechanics
(`dynamics.forceplate.Plate.raw_channels`) turns that load into what its amplifier sends: C3D
type 2 ``(Fx, Fy, Fz, Mx, My, Mz)`` in plate axes with moments about the transducer origin, type 4
the same through the inverse calibration matrix, type 1 ``(Fx, Fy, Fz, COPx, COPy, Tz)``.

Frames: stream ``forceplate/NAME`` (or the device's ``stream``), kind ``"force"``, blocks of
``block`` samples x channels, float64, units N and N*m (m for COP channels); ``t_device`` counts
samples from the process start; sample times come from sample counts, not from wall-clock reads.

The process entry point is `run(ctx, args)` (see `controller.proc`); ``args``:
``--body-mass-kg`` (70), ``--stride-s`` (1.1), ``--stance-fraction`` (0.62), ``--noise-n`` (1.0),
``--seed`` (0).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from daq.context import ProcessContext
from dynamics.forceplate import Plate, load_moment
from dynamics.model import G

SIMULATED_TYPES = (1, 2, 4)  # C3D plate types the simulator writes (a noise model for 6 channels)


@dataclass(frozen=True)
class Gait:
    """Walking parameters: body mass [kg], stride period [s], stance fraction of the stride [1]."""
    body_mass_kg: float = 70.0
    stride_s: float = 1.1
    stance_fraction: float = 0.62


def foot_wrench(t_s: np.ndarray, gait: Gait, phase: float, side: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ground reaction on one foot at times `t_s` (N,) [s].

    `phase`: stride phase offset [0, 1); `side`: +1 left foot, −1 right foot (sign of F_y).
    Returns ``force`` (N, 3) N lab frame (reaction on the foot, +z up), ``cop_offset`` (N, 3) m
    from the plate's surface centre in the lab frame, ``tz`` (N,) N·m free moment about lab z.
    """
    w = gait.body_mass_kg * G
    cycle = np.mod(np.asarray(t_s, dtype=float) / gait.stride_s + phase, 1.0)
    stance = cycle < gait.stance_fraction
    s = np.where(stance, cycle / gait.stance_fraction, 0.0)
    on = stance.astype(float)
    force = np.column_stack([
        -0.18 * w * np.sin(2 * np.pi * s),
        -side * 0.05 * w * np.sin(np.pi * s),
        np.pi / (4.4 * gait.stance_fraction) * w * (np.sin(np.pi * s) + 0.3 * np.sin(3 * np.pi * s)),
    ]) * on[:, None]
    cop = np.column_stack([(-0.12 + 0.24 * s) * on, np.zeros_like(s), np.zeros_like(s)])
    tz = 0.007 * w * np.sin(2 * np.pi * s) * on
    return force, cop, tz


class SimulatedPlate:
    """One simulated plate: produces its next block of raw samples on demand."""

    def __init__(self, device: Any, gait: Gait, phase: float, side: float, noise_n: float,
                 rng: np.random.Generator) -> None:
        self.device = device
        self.stream = device.stream_name
        self.channels = tuple(device.channels)
        self.units = tuple("m" if c.startswith("COP") else "N*m" if c[0] in "MT" else "N"
                           for c in self.channels)
        self.rate_hz = float(device.rate_hz)
        self.block = int(device.block)
        self.gait, self.phase, self.side = gait, phase, side
        self.noise = np.array([noise_n] * 3 + ([noise_n * 1e-3] * 2 + [noise_n * 0.05]
                                                if device.type == 1 else [noise_n * 0.05] * 3))
        self.rng = rng
        self.next_sample = 0
        if device.type not in SIMULATED_TYPES:
            raise ValueError(f"simulated plates support C3D types 1, 2 and 4, not type {device.type} "
                             f"({device.name})")
        self.plate = Plate(type=device.type, corners=device.corners, origin=device.origin,
                           cal_matrix=device.cal_matrix, name=device.name)

    def due_ns(self, t0_ns: int) -> int:
        """Host time at which the block after the last published one is complete."""
        return t0_ns + round((self.next_sample + self.block) * 1e9 / self.rate_hz)

    def next_block(self) -> tuple[int, np.ndarray]:
        """(index of its first sample, raw block (block, channels))."""
        n0 = self.next_sample
        t = (n0 + np.arange(self.block)) / self.rate_hz
        force, cop, tz = foot_wrench(t, self.gait, self.phase, self.side)
        raw = self.plate.raw_channels(force, load_moment(force, cop, tz))
        raw += self.rng.normal(0.0, 1.0, raw.shape) * self.noise
        self.next_sample += self.block
        return n0, raw


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="daq.simulated", description="simulated force plates")
    p.add_argument("--body-mass-kg", type=float, default=70.0)
    p.add_argument("--stride-s", type=float, default=1.1)
    p.add_argument("--stance-fraction", type=float, default=0.62)
    p.add_argument("--noise-n", type=float, default=1.0, help="force channel noise sigma [N]")
    p.add_argument("--seed", type=int, default=0)
    return p


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Publish the simulated plates of process `ctx` until it is asked to stop (see module doc)."""
    opts = _parser().parse_args(list(args))
    if not (opts.body_mass_kg > 0 and opts.stride_s > 0 and 0 < opts.stance_fraction < 1):
        raise ValueError(f"process {ctx.name!r}: need --body-mass-kg > 0, --stride-s > 0 and "
                         f"0 < --stance-fraction < 1, got {opts.body_mass_kg}, {opts.stride_s}, "
                         f"{opts.stance_fraction}")
    devices = [d for d in ctx.devices.values() if d.kind == "forceplate" and d.source == "sim"]
    if not devices:
        raise ValueError(f"process {ctx.name!r}: no simulated force plate in its devices "
                         "(list [devices.NAME] sections with kind = \"forceplate\", source = \"sim\")")
    gait = Gait(opts.body_mass_kg, opts.stride_s, opts.stance_fraction)
    rng = np.random.default_rng(opts.seed)
    plates = [SimulatedPlate(d, gait, phase=0.5 * (i % 2), side=1.0 if i % 2 == 0 else -1.0,
                             noise_n=opts.noise_n, rng=rng) for i, d in enumerate(devices)]
    t0 = time.monotonic_ns()
    while True:
        due = min(p.due_ns(t0) for p in plates)
        if not ctx.sleep_until(due):
            return 0
        now = time.monotonic_ns()
        ctx.health.latency("loop", (now - due) * 1e-9)
        for p in plates:
            while p.due_ns(t0) <= now:
                n0, raw = p.next_block()
                t_sample0 = round(n0 * 1e9 / p.rate_hz)
                ctx.publisher.publish(p.stream, raw, kind="force", rate_hz=p.rate_hz,
                                      channels=p.channels, units=p.units, t_device=t_sample0,
                                      t_host=t0 + t_sample0)
