"""Simulated robot: a virtual MCU on a pty whose crank motor drives a Jansen leg or walker plant.

The process (``run(ctx, args)``, see `controller.proc`) is what a real walker's microcontroller is
to the lab: a serial device speaking the walklab protocol (`firmware_bridge.virtual.VirtualMCU`,
a real pseudo-terminal) that the encoder daemon (`daq.encoder`) opens like a USB CDC port. The
pty's path is the ``port`` of the ``kind = "mcu"`` device in the process's ``devices`` (the one
the encoder daemon serves; ``--port`` overrides it), a symlink (like /dev/serial/by-id; its
folder is created) to
``/proc/PID/fd/N``, which opens the pty only while this process lives (`pty_handle`). The MCU's
one motor, ``crank``, is a geared DC motor (`dynamics.plants.motor`) whose output-shaft load is
the crank plant of `dynamics.plants.crank` (legs read by `dynamics.linkage.read_crank_legs`):

    (J_m + I(θ)/N²) ω̇_m = K_t i − b ω_m − τ_c tanh(ω_m/ω_ε) − τ_load/N
    τ_load = ½ I′(θ) θ̇² + G(θ) − Σ_l J_l(θ)ᵀ F_l        (reduced form of every leg, summed)

with F_l the penalty ground contact of each foot below the ground line (held chassis, see
`dynamics.plants.crank`). Killing the process is pulling the cable: the pty disappears and the encoder
daemon reconnects when the supervisor restarts it.

``args``: ``--port PATH`` (default: the mcu device's ``port``), ``--model NAME|FILE`` (``jansen_walker``), ``--table-size``
(720), ``--contact`` (``hunt_crossley_constant``; ``none`` = no ground), ``--stiffness`` (2e4
N/m^1.5), ``--damping`` (1.0 s/m), ``--penetration`` (0.008 m), ``--mu`` (0: frictionless;
tanh friction with ``--slip-velocity`` 0.05 m/s), ``--gear`` (20), ``--cpr`` (4096),
``--control-hz`` (1000), ``--watchdog-ms`` (100), ``--current-noise-a`` (0), ``--seed`` (0).
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Sequence

from daq.context import ProcessContext
from dynamics.contact import Friction, NormalLaw
from dynamics.linkage import read_crank_legs
from dynamics.plants.crank import CrankPlant, crank_plant, motor_load
from dynamics.plants.motor import MotorParams
from firmware_bridge.virtual import VirtualMCU

log = logging.getLogger("walklab.simulated_robot")

CONTACT_LAWS = ("none", "hunt_crossley_constant", "hertz", "kelvin_voigt")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="daq.simulated_robot", description="virtual MCU driving a Jansen crank plant")
    p.add_argument("--port", help="path of the pty symlink the encoder daemon opens (default: the mcu device's port)")
    p.add_argument("--model", default="jansen_walker", help="linkage model name or TOML file (leg or walker)")
    p.add_argument("--table-size", type=int, default=720, help="reduced-form grid points per revolution")
    p.add_argument("--contact", choices=CONTACT_LAWS, default="hunt_crossley_constant")
    p.add_argument("--stiffness", type=float, default=2e4, help="contact stiffness K, N/m^1.5 (N/m for kelvin_voigt)")
    p.add_argument("--damping", type=float, default=1.0,
                   help="alpha s/m (hunt_crossley_constant), c N*s/m (kelvin_voigt)")
    p.add_argument("--penetration", type=float, default=0.008, help="ground line above the lowest foot point, m")
    p.add_argument("--mu", type=float, default=0.0, help="foot friction coefficient (0 = frictionless)")
    p.add_argument("--slip-velocity", type=float, default=0.05, help="tanh friction transition speed, m/s")
    p.add_argument("--gear", type=float, default=MotorParams.gear)
    p.add_argument("--cpr", type=int, default=4096)
    p.add_argument("--control-hz", type=int, default=1000)
    p.add_argument("--watchdog-ms", type=int, default=100)
    p.add_argument("--current-noise-a", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    return p


def build_plant(opts: argparse.Namespace) -> CrankPlant:
    """The crank plant described by the parsed ``args``."""
    if opts.contact == "none":
        law = friction = None
    else:
        law = NormalLaw(opts.contact, opts.stiffness, damping=opts.damping)
        friction = Friction(opts.mu, kind="tanh", v_s=opts.slip_velocity) if opts.mu > 0 else None
    return crank_plant(read_crank_legs(opts.model), size=opts.table_size, law=law, friction=friction,
                       ground_penetration=None if law is None else opts.penetration)


def link_port(port: str, target: str) -> None:
    """Point the symlink `port` at `target` atomically (replacing a stale one); refuse to replace a real file."""
    if os.path.lexists(port) and not os.path.islink(port):
        raise FileExistsError(f"--port {port!r} exists and is not a symlink (a real device?); choose another path")
    os.makedirs(os.path.dirname(os.path.abspath(port)), exist_ok=True)
    tmp = f"{port}.{os.getpid()}.new"
    os.symlink(target, tmp)
    os.replace(tmp, port)


def pty_handle(mcu: VirtualMCU) -> str:
    """A path that opens the MCU's pty only while this process lives: ``/proc/PID/fd/N`` of its slave.

    A link to ``/dev/pts/N`` outlives a killed robot, and the kernel soon gives that number to
    another program's pty: an encoder reconnecting through it would talk to (and steal bytes
    from) a stranger. The MCU's own private link is removed for the same reason (and so that a
    killed robot leaves nothing behind).
    """
    pts = os.path.realpath(mcu.port)
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == pts:
                handle = f"/proc/{os.getpid()}/fd/{fd}"
                break
        except OSError:
            continue
    else:
        raise OSError(f"the virtual MCU's pty {pts} is not open in this process")
    os.unlink(mcu.port)
    os.rmdir(os.path.dirname(mcu.port))
    return handle


def count_mcu(ctx: ProcessContext, st, reported: dict[str, int]) -> None:
    """Health counters ``mcu/KEY`` of a virtual MCU's stats `st` since the values in `reported`
    (updated), and the queue depth ``mcu/catch_up_ticks``."""
    for key in ("ticks", "tx_frames", "tx_overflow", "rx_frames", "rx_lost", "watchdog_trips", "estops"):
        value = getattr(st, key)
        ctx.health.count(f"mcu/{key}", value - reported.get(key, 0))
        reported[key] = value
    ctx.health.queue_depth("mcu/catch_up_ticks", st.max_catch_up_ticks)


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Run the simulated robot of process `ctx` until it is asked to stop (see module doc)."""
    opts = _parser().parse_args(list(args))
    plant = build_plant(opts)
    motor = MotorParams(gear=opts.gear)
    mcu = VirtualMCU(1, motor=motor, cpr=opts.cpr, control_hz=opts.control_hz, stream_hz=min(1000, opts.control_hz),
                     watchdog_ms=opts.watchdog_ms, current_noise_a=opts.current_noise_a, seed=opts.seed,
                     load=lambda t, theta, omega: motor_load(plant, theta, omega), name=f"walklab-sim-{ctx.name}")
    port = os.path.abspath(opts.port or ctx.device("mcu").port)
    handle = ""
    try:
        handle = pty_handle(mcu)
        link_port(port, handle)
        mcu.start()
        log.info("%s: %d legs (%s), ground %s; MCU on %s -> %s", opts.model, plant.n_legs, plant.name,
                 "none" if plant.ground_y is None else f"y = {plant.ground_y:.4f} m ({opts.contact})", port, handle)
        reported: dict[str, int] = {}
        while ctx.sleep_until(time.monotonic_ns() + 100_000_000):
            count_mcu(ctx, mcu.stats, reported)
        return 0
    finally:
        if handle and os.path.islink(port) and os.readlink(port) == handle:
            os.unlink(port)
        mcu.close()
