"""Force plates from a serial amplifier / load-cell board speaking the firmware bridge's FORCE message.

The board (firmware_bridge protocol, docs/protocol.md) streams one FORCE frame per sample: 6
channels (Fx Fy Fz in N, Mx My Mz in N·m: a C3D type-2 plate's raw channels) or 8 (Kistler, N),
stamped with its microsecond clock ``t_us`` (mod 2³², unwrapped here). The daemon serves the
process's ``kind = "forceplate"`` devices whose ``source`` is a port (a device path or a pyserial
URL, not ``sim``), one board per plate, through `daq.context.serve`:

- samples are gathered into blocks of the device's ``block``; a block never spans a missing sample
  (a ``t_us`` that is not the next sample time closes it; the missing samples are counted,
  ``STREAM/samples_lost``);
- ``t_device`` is the board's clock of sample 0 [ns]; ``t`` the `daq.clock.ClockSync` mapping;
- the cable pulled (the port fails): the samples received before are published (the partial
  block too: a reopened board starts a new session without it), then the link is closed and
  reopened every ``retry_s`` until the board is back, without restarting the process; the gap is published as events on
  ``events/NAME`` (``device_lost`` with the last sample's time, ``device_back`` with the gap in s),
  so a recording shows it.

Stream ``forceplate/NAME`` (or the device's ``stream``), kind ``force``, channels of the plate type
(`controller.config.ForcePlate.channels`), units N and N*m.
"""
from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from daq.context import Block, DeviceLost, serve
from firmware_bridge import protocol as P
from firmware_bridge.link import Link

if TYPE_CHECKING:
    from daq.context import ProcessContext

log = logging.getLogger("walklab.forceboard")


def units_of(channels: Sequence[str]) -> tuple[str, ...]:
    """SI units of raw plate channels: N for forces, N*m for moments (M*, Tz), m for COP."""
    return tuple("m" if c.startswith("COP") else "N*m" if c[0] in "MT" else "N" for c in channels)


class ForceBoard:
    """The `daq.context.Source` of one force plate on a serial FORCE board."""

    def __init__(self, ctx: ProcessContext, device: Any, baud: int = 1_000_000):
        self.ctx = ctx
        self.device = device
        self.baud = baud
        self.channels = tuple(device.channels)
        self.units = units_of(self.channels)
        self.period_us = 1e6 / device.rate_hz
        self.link: Link | None = None
        self.rows: list[tuple[float, ...]] = []
        self.t0_ns: int | None = None  # device time of the first row held
        self.prev_us: int | None = None  # unwrapped µs of the last sample
        self.lost_at: int | None = None  # host time the board went away

    def _event(self, name: str, **fields: Any) -> None:
        self.ctx.event(name, "warning" if name == "device_lost" else "info", device=self.device.name, **fields)

    def open(self) -> None:
        link = Link(self.device.source, baudrate=self.baud, heartbeat_hz=0, reconnect=False)
        link.open()  # LinkError (an OSError) while the port is not there: serve retries
        self.link = link
        self.rows, self.t0_ns, self.prev_us = [], None, None  # a new session: the board may have rebooted
        if self.lost_at is not None:
            self._event("device_back", gap_s=(self.ctx.clock() - self.lost_at) * 1e-9)
            self.lost_at = None

    def _flush(self, t_recv: int) -> list[Block]:
        if not self.rows:
            return []
        b = Block(self.device.stream_name, np.array(self.rows), self.t0_ns, t_recv, "force", self.device.rate_hz,
                  self.channels, self.units)
        self.rows, self.t0_ns = [], None
        return [b]

    def check(self) -> None:
        """Raise DeviceLost if a read found the board gone (`serve` then closes and reopens it)."""
        if self.lost_at is not None:
            raise DeviceLost(f"{self.device.source}: force board disconnected")

    def read(self, timeout_s: float) -> Sequence[Block]:
        """Blocks of the samples received within ``timeout_s`` [s]. A read that finds the board gone
        returns every sample received before, the partial block included; the next one raises
        DeviceLost."""
        self.check()
        link = self.link
        frame = link.recv(timeout_s)
        t_recv = self.ctx.clock()
        # the reader thread clears `connected` when the port fails (reconnect is off), after it
        # queued what it received: checked before the drain, the drain holds every frame
        lost = not link.connected.is_set()
        frames = ([frame] if frame is not None else []) + link.drain()
        out: list[Block] = []
        for f in frames:
            if not isinstance(f.msg, P.Force):
                continue
            if len(f.msg.channels) != len(self.channels):
                raise ValueError(f"[devices.{self.device.name}]: the board sends {len(f.msg.channels)} channels, "
                                 f"a type-{self.device.type} plate has {len(self.channels)}")
            t_us = f.t_us if self.prev_us is None else P.unwrap(self.prev_us, f.t_us, 32)
            if self.prev_us is not None:
                step = round((t_us - self.prev_us) / self.period_us)
                if step != 1:  # a lost or repeated sample: never inside a block
                    out += self._flush(t_recv)
                    if step > 1:
                        self.ctx.health.count(f"{self.device.stream_name}/samples_lost", step - 1)
            self.prev_us = t_us
            if self.t0_ns is None:
                self.t0_ns = t_us * 1000
            self.rows.append(f.msg.channels)
            if len(self.rows) >= self.device.block:
                out += self._flush(t_recv)
        if lost:
            out += self._flush(t_recv)
            self.lost_at = t_recv
            self._event("device_lost", last_t_device=None if self.prev_us is None else self.prev_us * 1000)
        return out

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None


class Boards:
    """Several boards served by one process: reads each in turn (a lost one raises for all: serve
    reconnects them together, the others' sessions simply restart, after their samples received
    so far, partial blocks included, are published)."""

    def __init__(self, boards: list[ForceBoard]):
        self.boards = boards

    def open(self) -> None:
        for b in self.boards:
            if b.link is None:
                b.open()

    def read(self, timeout_s: float) -> Sequence[Block]:
        for b in self.boards:
            b.check()  # before any board reads: what a read gathered now would be dropped by the reopen
        out: list[Block] = []
        for b in self.boards:
            out += b.read(timeout_s / len(self.boards))
        if any(b.lost_at is not None for b in self.boards):
            # the next read raises and serve reopens every board, each a new session without its
            # partial block: publish what each one received
            for b in self.boards:
                if b.lost_at is None:
                    out += b.read(0.0)
                out += b._flush(b.ctx.clock())
        return out

    def close(self) -> None:
        for b in self.boards:
            b.close()


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Serve the process's serial force plates until asked to stop. ``args``: ``--baud`` (1000000),
    ``--retry-s`` (0.5)."""
    p = argparse.ArgumentParser(prog="daq.devices.forceboard", add_help=False)
    p.add_argument("--baud", type=int, default=1_000_000)
    p.add_argument("--retry-s", type=float, default=0.5)
    opts = p.parse_args(list(args))
    plates = [d for d in ctx.devices.values()
              if d.kind == "forceplate" and d.source != "sim" and not d.source.startswith("lsl:")]
    if not plates:
        raise ValueError(f"process {ctx.name!r}: no force plate with a serial source in its devices")
    source = Boards([ForceBoard(ctx, d, opts.baud) for d in plates])
    return serve(ctx, source, retry_s=opts.retry_s)
