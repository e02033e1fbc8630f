"""The simulated Jansen world as a lab process: the walker's MCU, its force plates, markers and encoders.

``run(ctx, args)`` (``module = "daq.devices.world_sim"``) runs `dynamics.plants.jansen_world`: the
walker's two crank motors are the motors of a virtual MCU on a pty (`firmware_bridge.virtual`, the
``kind = "mcu"`` device the process serves, motors ``left_shaft`` and ``right_shaft``; its path is
linked as in `daq.simulated_robot`), their load the world's `JansenSim.load` — the legs' reduced-form
inertia, gravity and foot forces on a chassis that walks. Whoever opens the pty commands the motors
(the control loop, `controller.loop`). The instruments sample the world at the plates' rate (1 kHz:
one world step of 1 ms at ``--control-hz 500``, two substeps per tick) and publish in the blocks of
`daq.context.Block`. Stamps: ``t_device`` is the world's time (the MCU clock, its control ticks), and
``t_host`` = ``t`` = the host time at which the MCU's clock started plus it — the simulation's own
clock, exact to the sample (the MCU thread paces its ticks from that instant; as `daq.simulated`):

- ``forceplate/NAME`` for each ``kind = "forceplate"`` device served (``source = "sim"``): the raw
  channels of its type (`Plate.raw_channels` of the load of the feet on it, `jansen_world.plate_loads`),
  plus a constant offset per load channel (``--plate-offset-n`` σ, N; a tenth of it in N·m for moments;
  none on a type-1 plate's COP channels, positions the zeroing leaves alone) and Gaussian noise
  (``--plate-noise-n`` σ, the same scales, 1e-3 m per N on COP channels); the dynamics service zeroes
  the offsets while the plates are unloaded (the walker starts at ``--x0`` before them);
- ``markers/walker`` (``--marker-stream``) at ``--marker-rate-hz`` (200): four chassis corners and one
  marker per foot (`jansen_world.marker_positions`), lab frame, m, noise ``--marker-noise-mm`` and
  occlusions of 50–300 ms started with probability ``--dropout`` per marker and frame (NaN, residual
  NaN; `daq.devices.markers_sim.occlusions`) — the layout of `daq.devices.markers_sim`;
- ``encoder/<motor>`` per motor (channels angle, velocity, current as `daq.encoder` publishes them):
  the shaft angle quantised to the MCU's ``--cpr`` counts, its rate, the armature current;
- ``sim/walker`` at 100 Hz: the world's truth — chassis x, height, pitch, forward speed, shaft angles
  and rates, the legs' load torque on each shaft and its power τ ω (what `walklab run` reports); meta
  ``advance_per_cycle_m`` (the no-slip L/D of the gait metrics) and ``mass_kg``.

Health: the MCU counters (`daq.simulated_robot.count_mcu`), ``world/steps``.
``args``: ``--model`` (jansen_walker), ``--control-hz`` (500), ``--stiffness`` (2e4 N/m^1.5),
``--damping`` (1.0 s/m, constant-damping Hunt–Crossley), ``--mu`` (0.8), ``--slip-velocity``
(0.02 m/s), ``--gear`` (20), ``--cpr`` (4096), ``--x0`` (−1.0 m), ``--seed`` (0) and the instrument
options above. docs/sim.md describes the world, its integration and its limits.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from daq.context import Block, ProcessContext

log = logging.getLogger("walklab.world_sim")

MOTORS = ("left_shaft", "right_shaft")
SIM_STREAM = "sim/walker"
SIM_CHANNELS = ("x", "z", "pitch", "vx", "s_L", "s_R", "omega_L", "omega_R", "tau_L", "tau_R", "power_L", "power_R")
SIM_UNITS = ("m", "m", "rad", "m/s", "rad", "rad", "rad/s", "rad/s", "N*m", "N*m", "W", "W")


def world_parser(prog: str, description: str, *, gear: float, cpr: int, x0: float,
                 marker_stream: str) -> argparse.ArgumentParser:
    """The options of every simulated world process: its MCU's pty path and control rate, the motors'
    gear and encoder counts, where the walker starts (x0, m), the instruments' noise, offsets, marker
    stream, rate, occlusions, and the seed (module doc); `check_args` validates them."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--port", help="pty symlink path (default: the mcu device's port)")
    p.add_argument("--control-hz", type=int, default=500)
    p.add_argument("--gear", type=float, default=gear)
    p.add_argument("--cpr", type=int, default=cpr)
    p.add_argument("--x0", type=float, default=x0)
    p.add_argument("--plate-noise-n", type=float, default=0.5)
    p.add_argument("--plate-offset-n", type=float, default=5.0)
    p.add_argument("--marker-stream", default=marker_stream)
    p.add_argument("--marker-rate-hz", type=float, default=200.0)
    p.add_argument("--marker-noise-mm", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.002)
    p.add_argument("--seed", type=int, default=0)
    return p


def check_args(name: str, o: argparse.Namespace, positive: Sequence[str] = (), nonnegative: Sequence[str] = (),
               bad: Sequence[str] = ()) -> argparse.Namespace:
    """`o` if `world_parser`'s options and the world's own `positive` (> 0) and `nonnegative` (>= 0) finite
    ones are valid, else one ValueError naming the process and every bad option (`bad`: the world's other
    complaints)."""
    bad = list(bad)
    if o.control_hz <= 0 or 1_000_000 % o.control_hz:
        bad.append(f"--control-hz {o.control_hz}: expected a divisor of 1000000")
    if o.cpr <= 0:
        bad.append(f"--cpr {o.cpr}: expected > 0 counts per revolution")
    for k in ("gear", "marker_rate_hz", *positive):
        if not (math.isfinite(getattr(o, k)) and getattr(o, k) > 0):
            bad.append(f"--{k.replace('_', '-')} {getattr(o, k)}: expected > 0")
    for k in ("plate_noise_n", "plate_offset_n", "marker_noise_mm", *nonnegative):
        if not (math.isfinite(getattr(o, k)) and getattr(o, k) >= 0):
            bad.append(f"--{k.replace('_', '-')} {getattr(o, k)}: expected >= 0")
    if not 0 <= o.dropout < 1:
        bad.append(f"--dropout {o.dropout}: expected 0 <= p < 1")
    if not o.marker_stream.startswith("markers/"):
        bad.append(f"--marker-stream {o.marker_stream!r}: marker streams are named markers/NAME")
    if bad:
        raise ValueError(f"process {name!r}: " + "; ".join(bad))
    return o


def _parser() -> argparse.ArgumentParser:
    p = world_parser("daq.devices.world_sim", "simulated Jansen world", gear=20.0, cpr=4096, x0=-1.0,
                     marker_stream="markers/walker")
    p.add_argument("--model", default="jansen_walker")
    p.add_argument("--stiffness", type=float, default=2e4)
    p.add_argument("--damping", type=float, default=1.0)
    p.add_argument("--mu", type=float, default=0.8)
    p.add_argument("--slip-velocity", type=float, default=0.02)
    return p


def parse_args(name: str, args: Sequence[str]) -> argparse.Namespace:
    return check_args(name, _parser().parse_args(list(args)), positive=("stiffness", "slip_velocity"),
                      nonnegative=("damping", "mu"))


def _channel_scales(plate, channels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per raw channel, the factors on ``--plate-offset-n`` and ``--plate-noise-n`` (both in N) by the
    channel's kind: forces 1 (N per N), moments 0.1 (N·m per N), a type-1 plate's COP channels 0 offset
    (a position is not zeroed: `Plate.zeroable`) and 1e-3 m per N of noise (as `daq.simulated`)."""
    moment = np.array([c[0] in "MT" for c in channels])
    cop = ~plate.zeroable
    offset = np.where(cop, 0.0, np.where(moment, 0.1, 1.0))
    noise = np.where(cop, 1e-3, np.where(moment, 0.1, 1.0))
    return offset, noise


@dataclass
class _Out:
    """One published stream: samples accumulate (every `every`-th world sample) until a block is full."""

    stream: str
    kind: str
    rate_hz: float
    channels: tuple[str, ...]
    units: tuple[str, ...]
    block: int
    every: int = 1
    meta: dict | None = None
    data: list = field(default_factory=list)
    extra: list = field(default_factory=list)
    t_ns: list = field(default_factory=list)

    def push(self, t_ns: np.ndarray, data: np.ndarray, extra: np.ndarray | None, now: int) -> list[Block]:
        self.t_ns.extend(t_ns.tolist())
        self.data.extend(data)
        if extra is not None:
            self.extra.extend(extra)
        out = []
        while len(self.data) >= self.block:
            b = self.block
            ext = {"residual": np.array(self.extra[:b])} if self.extra else None
            out.append(Block(self.stream, np.array(self.data[:b]), int(self.t_ns[0]), now, self.kind, self.rate_hz,
                             self.channels, self.units, extra=ext, meta=self.meta))
            del self.data[:b], self.t_ns[:b]
            if self.extra:
                del self.extra[:b]
        return out


class WorldSource:
    """The world process's device (open, read, close as a `daq.context.Source`): the MCU and the world
    run on the MCU's thread; `read` drains the recorded samples into instrument blocks."""

    def __init__(self, ctx: ProcessContext, opts: argparse.Namespace) -> None:
        from dynamics.contact import Friction, NormalLaw
        from dynamics.plants.jansen_world import JansenSim, jansen_world, marker_labels

        self.ctx, self.opts = ctx, opts
        mcu = ctx.device("mcu")
        if tuple(mcu.motors) != MOTORS:
            raise ValueError(f"{ctx.lab.source}: devices.{mcu.name}.motors = {list(mcu.motors)}: the Jansen world "
                             f"drives {list(MOTORS)}")
        self.mcu_device = mcu
        self.world = jansen_world(opts.model, law=NormalLaw("hunt_crossley_constant", opts.stiffness,
                                                            damping=opts.damping),
                                  friction=Friction(opts.mu, kind="tanh", v_s=opts.slip_velocity) if opts.mu > 0
                                  else None)
        h = 1.0 / (2 * opts.control_hz)  # the motor plant's two substeps per control tick
        every = self._instruments(h, marker_labels(self.world), MOTORS)
        self.mcu = None
        self.sim = JansenSim(self.world, h, record_every=every, x0=opts.x0,
                             aux=lambda: self.mcu.bank.i, n_aux=len(MOTORS))
        rate = self.rate
        self.truth = _Out(SIM_STREAM, "sim", rate / round(rate / 100.0), SIM_CHANNELS, SIM_UNITS, 10,
                          round(rate / 100.0), meta={"advance_per_cycle_m": self.world.advance_per_cycle,
                                                     "mass_kg": self.world.mass})
        self.n = 0  # world samples published so far
        self._reported: dict[str, int] = {}
        self.handle = ""
        self.t0 = 0
        self.port = os.path.abspath(opts.port or mcu.port)

    def _instruments(self, h: float, labels: Sequence[str], motors: Sequence[str]) -> int:
        """The plates' (``kind = "forceplate"``, ``source = "sim"``), markers' (`labels`) and encoders'
        (`motors`) outputs of a world stepped every h s; returns the world steps per plate sample."""
        from dynamics.forceplate import Plate

        ctx, opts = self.ctx, self.opts
        self.devices = [d for d in ctx.devices.values() if d.kind == "forceplate" and d.source == "sim"]
        rate = self.devices[0].rate_hz if self.devices else 1000.0
        every = round(1.0 / (h * rate))
        if any(d.rate_hz != rate for d in self.devices) or abs(every * h * rate - 1.0) > 1e-9:
            raise ValueError(f"{ctx.lab.source}: process {ctx.name!r}: every plate's rate_hz must be the same "
                             f"whole fraction of the world's {1 / h:g} Hz step")
        self.rate = rate
        self.rng = np.random.default_rng(opts.seed)
        self.plates, self.offsets, self.noise, self.outs = [], [], [], []
        for d in self.devices:
            p = Plate(type=d.type, corners=d.corners, origin=d.origin, cal_matrix=d.cal_matrix, name=d.name)
            offset, noise = _channel_scales(p, d.channels)
            self.plates.append(p)
            self.offsets.append(self.rng.normal(scale=opts.plate_offset_n, size=p.n_channels) * offset)
            self.noise.append(opts.plate_noise_n * noise)
            units = tuple("m" if c.startswith("COP") else "N*m" if c[0] in "MT" else "N" for c in d.channels)
            self.outs.append(_Out(d.stream_name, "force", rate, tuple(d.channels), units, int(d.block)))
        self.labels = tuple(labels)
        m_every = round(rate / opts.marker_rate_hz)
        if abs(m_every * opts.marker_rate_hz - rate) > 1e-9:
            raise ValueError(f"--marker-rate-hz {opts.marker_rate_hz}: expected a whole fraction of {rate:g} Hz")
        self.markers = _Out(opts.marker_stream, "markers", opts.marker_rate_hz,
                            tuple(f"{s}:{a}" for s in self.labels for a in "xyz"), ("m",) * 3 * len(self.labels),
                            2, m_every)
        self.occluded_until = np.zeros(len(self.labels), dtype=np.int64)
        self.encoders = [_Out(f"encoder/{m}", "encoder", rate, ("angle", "velocity", "current"), ("rad", "rad/s", "A"),
                              10) for m in motors]
        return every

    def open(self) -> None:
        from dynamics.plants.motor import MotorParams
        from firmware_bridge.virtual import VirtualMCU

        from daq.simulated_robot import link_port, pty_handle

        o = self.opts
        self.mcu = VirtualMCU(len(MOTORS), motor=MotorParams(gear=o.gear), cpr=o.cpr, control_hz=o.control_hz,
                              stream_hz=min(1000, o.control_hz), watchdog_ms=self.mcu_device.watchdog_ms,
                              load=self.sim.load, seed=o.seed, name=f"walklab-world-{self.ctx.name}")
        self.handle = pty_handle(self.mcu)
        link_port(self.port, self.handle)
        self.t0 = time.monotonic_ns()  # the MCU's clock 0 on the host clock (it paces its ticks from here)
        self.mcu.start()
        log.info("%s: %d legs, %.1f kg, world step %.2g ms; plates %s; MCU on %s", self.world.name,
                 self.world.n_legs, self.world.mass, 1e3 * self.sim.h, [d.name for d in self.devices] or "none",
                 self.port)

    def _drain(self, timeout_s: float, take):
        """Wait a plate block's period at most, then the world samples recorded meanwhile (``take()``): (samples,
        their numbers k (N,), stamps t_ns (N,) ns, the host time now ns), or None if there are none."""
        from daq.simulated_robot import count_mcu

        self.ctx.stop.wait(min(timeout_s, 0.005))  # a plate block's period: frames leave as they fill
        if not self.mcu.running:
            raise OSError("the virtual MCU's thread stopped (see the traceback above): the world is frozen")
        count_mcu(self.ctx, self.mcu.stats, self._reported)
        s = take()
        if s is None:
            return None
        N = s.t.size
        k = self.n + np.arange(N)
        self.n += N
        self.ctx.health.count("world/steps", N * self.sim.record_every)
        return s, k, np.round(s.t * 1e9).astype(np.int64), self.ctx.clock()

    def read(self, timeout_s: float) -> list[Block]:
        from dynamics.plants.jansen_world import marker_positions, plate_loads

        got = self._drain(timeout_s, self.sim.take)
        if got is None:
            return []
        s, k, t_ns, now = got
        out = self._instrument_blocks(t_ns, k, now, plate_loads(s.foot, s.force, self.plates), s.q[:, 3:5], s.u[:, 3:5],
                                      s.aux, lambda sel: marker_positions(self.world, s)[sel])
        sel = k % self.truth.every == 0
        if sel.any():
            tau = s.tau_load[sel]
            om = s.u[sel][:, 3:5]
            q = s.q[sel]
            out += self.truth.push(t_ns[sel], np.column_stack([q[:, 0], q[:, 1], q[:, 2], s.u[sel, 0], q[:, 3], q[:, 4],
                                                               om, tau, tau * om]), None, now)
        return out

    def _instrument_blocks(self, t_ns: np.ndarray, k: np.ndarray, now: int, loads, angle: np.ndarray,
                           velocity: np.ndarray, current: np.ndarray, markers) -> list[Block]:
        """The instruments' blocks of world samples numbered k (N,) stamped t_ns (N,) ns: the plates' raw
        channels of `loads` (`jansen_world.plate_loads`) with offsets and noise; the encoders of the
        motors' angle, velocity and current (N, motors) (rad, rad/s, A; the angle in whole counts);
        the markers of the samples a marker frame falls on: ``markers(sel)`` their true positions
        (n, M, 3) m, with noise and occlusions (`_markers`)."""
        N = t_ns.size
        out: list[Block] = []
        for p, off, noise, o, (F, M) in zip(self.plates, self.offsets, self.noise, self.outs, loads):
            raw = p.raw_channels(F, M) + off + self.rng.normal(size=(N, p.n_channels)) * noise
            out += o.push(t_ns, raw, None, now)
        cpr = self.opts.cpr
        for j, o in enumerate(self.encoders):
            counts = np.floor(angle[:, j] * cpr / (2 * np.pi)) * (2 * np.pi / cpr)
            out += o.push(t_ns, np.column_stack([counts, velocity[:, j], current[:, j]]), None, now)
        sel = k % self.markers.every == 0
        if sel.any():
            pos, res = self._markers(markers(sel), k[sel] // self.markers.every)
            out += self.markers.push(t_ns[sel], pos.reshape(pos.shape[0], -1), res, now)
        return out

    def _markers(self, pos: np.ndarray, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Noise and occlusions (module doc) on true positions (n, M, 3) at marker frame numbers (n,)."""
        from daq.devices.markers_sim import occlusions

        n, m, _ = pos.shape
        sigma = self.opts.marker_noise_mm * 1e-3
        pos = pos + self.rng.normal(scale=sigma, size=pos.shape)
        res = np.full((n, m), sigma)
        hidden = occlusions(self.rng, self.occluded_until, frames.tolist(), self.opts.dropout, self.opts.marker_rate_hz)
        pos[hidden] = np.nan
        res[hidden] = np.nan
        return pos, res

    def close(self) -> None:
        if self.mcu is not None:
            if self.handle and os.path.islink(self.port) and os.readlink(self.port) == self.handle:
                os.unlink(self.port)
            self.mcu.close()
            self.mcu = None


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Run the world until asked to stop (module doc)."""
    return serve(ctx, WorldSource(ctx, parse_args(ctx.name, args)))


def serve(ctx: ProcessContext, src: WorldSource) -> int:
    """Open a world source and publish its blocks, stamped as the module doc says, until asked to stop
    (also the exoskeleton world's loop, `daq.devices.exo_world_sim`)."""
    ctx.health.state = "running"
    try:
        src.open()
        while not ctx.stopping:
            for b in src.read(0.005):
                t = src.t0 + b.t_device
                ctx.publisher.publish(b.stream, b.data, kind=b.kind, rate_hz=b.rate_hz, channels=b.channels,
                                      units=b.units, t_device=b.t_device, t_host=t, t=t, extra=b.extra, meta=b.meta)
                ctx.health.count(f"{b.stream}/samples", b.data.shape[0])
            ctx.tick()
    finally:
        src.close()
    return 0
