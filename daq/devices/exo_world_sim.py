"""The simulated exoskeleton world as a lab process: the exoskeleton's MCU, its force plates, markers and encoders.

``run(ctx, args)`` (``module = "daq.devices.exo_world_sim"``) runs `dynamics.plants.exo_world`: the
wearer and exoskeleton walk one semi-inverse nominal of the robot config its MCU names (the ``kind = "mcu"``
device the process serves, e.g. ``robot = "exo_world"`` in configs/sim_exo.toml: configs/exo_world.toml —
model, joints, gait cycle; the lab config's loader, `controller.config`, reads it and checks the MCU's ``motors`` are its
actuators, so this module never imports the controller; grid point ``--scale`` S, ``--period`` T s,
``--zmp-law`` single double: 6 1 by default, the law whose centre of pressure stays on the rigid feet,
`dynamics.plants.exo_world`), built when the process starts (`semi_inverse.build_nominal`, a few seconds;
with the frontal roll when the config's ``biped.frontal`` is true, as configs/exo_world.toml's; its gait
cycle read by `daq.formats.gait_cycle`); the body's motion is prescribed, its ground reaction computed by
`dynamics.rnea`. The exoskeleton's joint motors are the motors of a virtual MCU on a pty
(`firmware_bridge.virtual`, that device's; its path linked as in `daq.simulated_robot`), geared DC
motors (``--gear`` 100:1, rotor 3.3e-5 kg m², the model's harmonic drives) loaded by the cuffs that strap
them to the wearer's joints (`ExoSim.load`, stiffness ``--cuff-stiffness``, damping ``--cuff-damping``):
unpowered, they follow the nominal's joint angles; whoever opens the pty may command them. Instruments and
stamps as `daq.devices.world_sim` (the same code, `WorldSource._instrument_blocks`): the world's time is the
MCU's, one world sample per plate sample (1 kHz, two motor substeps per 500 Hz control tick):

- ``forceplate/NAME`` per ``kind = "forceplate"``, ``source = "sim"`` device: the raw channels of the
  feet's ground reactions on it (`exo_world.ground_reaction`, each foot's share at its point, free
  moments included; `jansen_world.plate_loads`), offsets ``--plate-offset-n`` and noise
  ``--plate-noise-n`` as the Jansen world's; the dynamics service zeroes them while the wearer walks
  up to the plates (the left foot's first flat place at ``--x0``) or, on a treadmill (``--treadmill``: the
  ground a belt moving at the nominal's mean speed, so the wearer stays in place: `exo_world`, "On a
  treadmill"; a split belt's two plates, one under each foot), while each foot is in swing;
- ``markers/exo`` (``--marker-stream``) at ``--marker-rate-hz`` (200): the marker set ``--markerset``
  (configs/markersets/NAME.toml, human15: Plug-in Gait on the wearer's segments; ``model``: the model's
  own markers) placed on the moving segments (`exo_world.marker_positions`), noise
  ``--marker-noise-mm``, occlusions with probability ``--dropout`` per marker and frame;
- ``encoder/<motor>`` per motor: angle in whole ``--cpr`` counts, rate, armature current;
- ``sim/exo`` at 100 Hz: the world's truth — ``x`` the pelvis's place along the walk over the ground
  (on a treadmill its lab x plus the belt's travel: the distance walked), ``x_lab`` its lab x, ``vx`` its
  forward speed in the lab, the ground reaction's force
  (Fx Fy Fz, N) and ZMP (x, y, m), per motor the prescribed joint angle ``q:JOINT`` and the cuff torque
  ``cuff:JOINT`` (N m); meta ``mass_kg``, ``speed_m_s``, ``stride_s``, ``step_m``, ``nominal``,
  ``belt_m_s`` (0 off a treadmill).

Health: the MCU counters (`daq.simulated_robot.count_mcu`), ``world/steps``. docs/sim.md ("The
exoskeleton world") says what is simulated and what is prescribed.
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Sequence

import numpy as np

from daq.context import Block, ProcessContext
from daq.devices.world_sim import WorldSource, _Out, check_args, serve, world_parser

if TYPE_CHECKING:  # typing only: daq never imports controller at run time (architecture.md)
    from pathlib import Path

    from controller.config import Mcu
    from controller.synergies.robot import RobotConfig

log = logging.getLogger("walklab.exo_world_sim")

SIM_STREAM = "sim/exo"
#: World samples handled per read at most: a main thread behind the MCU's (a loaded machine) catches up in
#: bounded steps, ticking its health between them, instead of in one batch as long as the backlog.
MAX_ROWS = 200
#: Rotor inertia of the exoskeleton's harmonic-drive motors, kg m² (configs/models/exoskeleton.toml).
ROTOR_INERTIA = 3.3e-5


def _parser() -> argparse.ArgumentParser:
    from dynamics.plants.exo_world import CUFF_DAMPING, CUFF_STIFFNESS

    p = world_parser("daq.devices.exo_world_sim", "simulated exoskeleton world", gear=100.0, cpr=16384, x0=-2.0,
                     marker_stream="markers/exo")
    p.add_argument("--scale", type=float, default=0.6, help="step scale S of the nominal")
    p.add_argument("--period", type=float, default=1.2, help="stride period T of the nominal, s")
    p.add_argument("--zmp-law", type=int, nargs=2, default=[6, 1], metavar=("SINGLE", "DOUBLE"),
                   help="single-support law 6 (the foot's contacts: the one whose plates' COP stays on the rigid "
                        "feet, docs/sim.md; Surla's 1..5 refused) and double-support law 1..3")
    p.add_argument("--samples", type=int, default=200, help="nominal samples per stride")
    p.add_argument("--cuff-stiffness", type=float, default=CUFF_STIFFNESS)
    p.add_argument("--cuff-damping", type=float, default=CUFF_DAMPING)
    p.add_argument("--markerset", default="human15")
    p.add_argument("--treadmill", action="store_true",
                   help="walk on a treadmill: the ground a belt at the nominal's mean speed, the wearer in place")
    return p


def parse_args(name: str, args: Sequence[str]) -> argparse.Namespace:
    o = _parser().parse_args(list(args))
    bad = []
    if not (1 <= o.zmp_law[0] <= 6 and 1 <= o.zmp_law[1] <= 3):
        bad.append(f"--zmp-law {o.zmp_law[0]} {o.zmp_law[1]}: expected a single-support law 1..6 and a double 1..3")
    elif o.zmp_law[0] != 6:
        # laws I-V keep the ZMP by the ankle while the rigid foot is on its toe: plates' COP up to 20 cm off the
        # feet (dynamics.plants.exo_world, "The ZMP law it walks"): refused rather than simulated wrong
        bad.append(f"--zmp-law {o.zmp_law[0]} {o.zmp_law[1]}: the exoskeleton world walks single-support law 6 (the "
                   "foot's contacts); Surla's laws I-V put its plates' centre of pressure off the feet")
    if o.samples < 64 or o.samples % 2:
        bad.append(f"--samples {o.samples}: expected an even number >= 64")
    return check_args(name, o, positive=("scale", "period", "cuff_stiffness"), nonnegative=("cuff_damping",), bad=bad)


def world_robot(source: Path, mcu: Mcu) -> RobotConfig:
    """The robot config the world walks: the one its MCU device names (``robot``, read by the lab config's
    loader). ValueError naming the lab file and the key when it names none or one with no ``[biped]`` table."""
    key = f"{source}: devices.{mcu.name}.robot"
    cfg = mcu.robot_config
    if cfg is None:
        raise ValueError(f"{key}: missing: the exoskeleton world walks the robot config its MCU names "
                         '(e.g. robot = "exoskeleton")')
    if cfg.biped is None:
        raise ValueError(f'{key} = "{mcu.robot}": {cfg.source} has no [biped] table (the exoskeleton world walks a '
                         "biped or exoskeleton config)")
    return cfg


def build_world(opts: argparse.Namespace, cfg: RobotConfig):
    """The `ExoWorld` of the options (module doc) and the robot config `cfg` (`world_robot`): its model, joints
    and gait cycle, the nominal at (S, T, law; with the frontal roll when the config's ``biped.frontal`` says
    so), the marker set. A grid point with no periodic trunk is a ValueError."""
    from daq.devices.markers_sim import load_marker_set
    from daq.formats.gait_cycle import read_cycle
    from dynamics.loader import load_model
    from dynamics.plants.exo_world import exo_world
    from dynamics.synthesis.biped import BipedError
    from dynamics.synthesis.semi_inverse import BipedJoints, build_nominal

    g = cfg.biped
    joints = BipedJoints(tuple(g.hips), tuple(g.knees), tuple(g.ankles), g.trunk, tuple(g.feet))
    mset = None if opts.markerset == "model" else load_marker_set(opts.markerset)
    single, double = opts.zmp_law
    try:
        nom = build_nominal(load_model(cfg.model), joints, read_cycle(g.gait), opts.scale, opts.period,
                            single=(single, single), double=(double, double), share=g.double_support,
                            samples=opts.samples, roll=g.roll, frontal=g.frontal)
    except BipedError as exc:
        raise ValueError(f"--scale {opts.scale} --period {opts.period} --zmp-law {single} {double}: "
                         f"no nominal ({exc})") from None
    name = f"{cfg.robot}_S{opts.scale:.2f}_T{opts.period:.2f}_z{single}{double}"
    return exo_world(nom, cfg.actuators, mset, stiffness=opts.cuff_stiffness, damping=opts.cuff_damping, name=name)


class ExoWorldSource(WorldSource):
    """The exoskeleton world process's device (as `WorldSource`, whose instruments, markers and close it
    shares): the MCU and the cuffs run on the MCU's thread; `read` computes the body at the recorded
    samples' times and drains them into instrument blocks."""

    def __init__(self, ctx: ProcessContext, opts: argparse.Namespace) -> None:
        from dynamics.plants.exo_world import ExoSim, stride_table

        self.ctx, self.opts = ctx, opts
        mcu = ctx.device("mcu")  # its motors are the robot config's actuators (checked by the lab config's loader)
        self.world = build_world(opts, world_robot(ctx.lab.source, mcu))
        self.mcu_device = mcu
        h = 1.0 / (2 * opts.control_hz)  # the motor plant's two substeps per control tick
        every = self._instruments(h, self.world.labels, self.world.actuators)
        self.mcu = None
        A = len(self.world.actuators)
        self.sim = ExoSim(self.world, h, record_every=every, aux=lambda: self.mcu.bank.i, n_aux=A)
        rate = self.rate
        self.table = stride_table(self.world, 1.0 / rate)  # the body on the plates' sample grid, once
        channels = (("x", "x_lab", "vx", "Fx", "Fy", "Fz", "zmp_x", "zmp_y") + tuple(f"q:{j}" for j in self.world.actuators)
                    + tuple(f"cuff:{j}" for j in self.world.actuators))
        units = ("m", "m", "m/s", "N", "N", "N", "m", "m") + ("rad",) * A + ("N*m",) * A
        w = self.world
        #: m/s: the treadmill's belt, the stride's advance per period (the wearer stays in place), or the floor
        self.belt = w.advance / w.period if opts.treadmill else 0.0
        self.truth = _Out(SIM_STREAM, "sim", rate / round(rate / 100.0), channels, units, 10, round(rate / 100.0),
                          meta={"mass_kg": w.mass, "speed_m_s": w.speed, "stride_s": w.period, "step_m": w.step,
                                "nominal": w.name, "belt_m_s": self.belt})
        self.n = 0
        self._reported: dict[str, int] = {}
        self.handle = ""
        self.t0 = 0
        self.port = os.path.abspath(opts.port or mcu.port)

    def open(self) -> None:
        import time

        from dynamics.plants.exo_world import joint_reference
        from dynamics.plants.motor import MotorParams
        from firmware_bridge.virtual import VirtualMCU

        from daq.simulated_robot import link_port, pty_handle

        o = self.opts
        A = len(self.world.actuators)
        # an 80 N m harmonic drive: 100:1, 0.05 N m/A (16 A at 80 N m), 48 V bridge
        motor = MotorParams(R=0.3, L=0.3e-3, Kt=0.05, Ke=0.05, J_m=ROTOR_INERTIA, b=1e-5, tau_c=1e-3, gear=o.gear,
                            v_supply=48.0)
        self.mcu = VirtualMCU(A, motor=motor, cpr=o.cpr, control_hz=o.control_hz, stream_hz=min(1000, o.control_hz),
                              watchdog_ms=self.mcu_device.watchdog_ms, load=self.sim.load, seed=o.seed,
                              name=f"walklab-exo-{self.ctx.name}")
        q0, v0 = joint_reference(self.world, 0.0)  # the motors start where the cuffs hold them
        self.mcu.bank.theta[:] = q0
        self.mcu.bank.w_m[:] = v0 * self.mcu.bank.gear
        self.handle = pty_handle(self.mcu)
        link_port(self.port, self.handle)
        self.t0 = time.monotonic_ns()  # the MCU's clock 0 on the host clock (it paces its ticks from here)
        self.mcu.start()
        log.info("%s: %.1f kg, %.2f m/s, stride %.2f s; plates %s; MCU on %s", self.world.name, self.world.mass,
                 self.world.speed, self.world.period, [d.name for d in self.devices] or "none", self.port)

    def read(self, timeout_s: float) -> list[Block]:
        from dynamics.plants.exo_world import body_at
        from dynamics.plants.jansen_world import plate_loads

        got = self._drain(timeout_s, lambda: self.sim.take(MAX_ROWS))
        if got is None:
            return []
        s, k, t_ns, now = got
        w = self.world
        q, v, g, markers = body_at(w, self.table, s.t, self.opts.x0, self.belt)
        loads = plate_loads(g.point, g.foot_force, self.plates, g.foot_moment)
        out = self._instrument_blocks(t_ns, k, now, loads, s.theta, s.omega, s.aux, lambda sel: markers[sel])
        sel = k % self.truth.every == 0
        if sel.any():
            qj = q[sel][:, w.iq[w.actuated]]
            x = q[sel, 0]
            out += self.truth.push(t_ns[sel], np.column_stack([x + self.belt * s.t[sel], x, v[sel, 0], g.force[sel],
                                                               g.zmp[sel, :2], qj, s.tau[sel]]), None, now)
        return out


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Run the exoskeleton world until asked to stop (module doc)."""
    return serve(ctx, ExoWorldSource(ctx, parse_args(ctx.name, args)))
