"""Lab Streaming Layer bridge: walklab streams out as LSL outlets, LSL streams in as walklab streams.

LSL (labstreaminglayer.org, `pylsl`, the ``walklab[lsl]`` extra) is how EEG/EMG amplifiers and the
Qualisys, OptiTrack and Vicon bridges reach a lab. Its clock, ``lsl_local_clock()``, is
``std::chrono::steady_clock``: on Linux the same CLOCK_MONOTONIC as walklab's host clock
(``time.monotonic_ns``), so stamps cross the bridge without an offset on one machine
(`clock_offset_s` measures it; `run` refuses a machine where it is not ~0).

**Out** (`Outlets`): each walklab stream chosen (``--out PATTERN``) becomes an outlet when its
first frame arrives: name = stream, type = kind (``MoCap`` for markers), channel count and
nominal rate from the frame, ``cf_double64``, source id ``walklab/<lab>/<stream>``; the
description carries ``channels/channel/{label, unit, type}`` (the XDF meta-data convention) and
``walklab/{stream, kind}``. Samples are pushed with their walklab lab times ``t + i/rate`` [s].

**In** (`Inlet`): each ``[devices.NAME]`` of ``kind = "lsl"`` is resolved by name, type and/or
source id; its chunks become frames of ``lsl/NAME`` (or the device's ``stream``):

- ``t_device`` = the sender's LSL stamp of sample 0 [ns] (raw, the sender's clock);
- ``t`` = that stamp plus LSL's clock offset (``StreamInlet.time_correction``, the NTP-like
  minimum-round-trip estimate LSL refreshes every few seconds) [ns]: the sample on walklab's
  clock, lined up with every other stream; ``t_host`` = when the bridge received the chunk, minus
  the chunk's span at the nominal rate;
- extra buffer ``lsl_time`` (samples,) float64: every sample's raw sender stamp [s], so that an
  offline fit (pyxdf-style dejitter) stays possible; ``meta`` ``{"lsl_offset_s": offset}``;
- a regular stream (nominal rate > 0) is published one pulled chunk per frame; an irregular one,
  one sample per frame (rate 0).

A ``kind = "forceplate"`` device whose ``source`` is ``lsl:NAME`` is served from the LSL stream
named NAME: its channels (as many as the plate type has, in its order) become ``forceplate/NAME``
(kind ``force``, N and N·m), and the dynamics service turns them into wrenches with the plate's
calibration like any other plate's.

A stream of type ``MoCap`` (case-insensitive) becomes a walklab marker stream (``markers/NAME``,
kind ``markers``, channels ``LABEL:x, LABEL:y, LABEL:z`` in m, NaN preserved): its channels are
grouped by label ``LABEL_X``/``LABEL_Y``/``LABEL_Z`` (or ``:``, ``.``, space before the axis, or
channel types ``PositionX/Y/Z``), scaled from their unit (mm, millimeters, cm, m, meters; none:
m); channels that are not positions are left out (logged once). The label set is fixed for the
inlet's life; a stream that comes back with other channels is a new stream epoch (``meta`` ``epoch``).

Process entry point `run(ctx, args)`: inlets for the process's ``lsl`` devices, outlets for
``--out PATTERN`` (repeatable). Health: ``lsl/<device>/samples``, ``lsl/<device>/resolve_failures``,
``lsl/outlets``.
"""
from __future__ import annotations

import argparse
import logging
import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from daq.frames import Frame

if TYPE_CHECKING:
    from daq.context import ProcessContext

log = logging.getLogger("walklab.lsl")

LENGTH_UNITS = {"mm": 1e-3, "millimeter": 1e-3, "millimeters": 1e-3, "cm": 1e-2, "centimeters": 1e-2,
                "m": 1.0, "meter": 1.0, "meters": 1.0, "": 1.0}
_AXIS = re.compile(r"^(?P<label>.+?)[_:. ](?P<axis>[XYZxyz])$")
#: A force plate device whose ``source`` starts with this is served from the LSL stream of that name.
PLATE_PREFIX = "lsl:"
#: How often the inlets' clock offsets are refreshed [s] (LSL updates its estimate every ~5 s).
OFFSET_REFRESH_S = 5.0


def clock_offset_s(samples: int = 5) -> float:
    """``lsl_local_clock() − time.monotonic()`` [s], the smallest magnitude of a few reads (~0 on Linux)."""
    import pylsl

    best = math.inf
    for _ in range(samples):
        a = time.monotonic()
        lsl = pylsl.local_clock()
        b = time.monotonic()
        d = lsl - (a + b) / 2
        best = d if abs(d) < abs(best) else best
    return best


# ----------------------------------------------------------------------------------- out


def outlet_info(frame: Frame, lab_name: str) -> Any:
    """The `pylsl.StreamInfo` of a walklab stream (module docstring)."""
    import pylsl

    kind = "MoCap" if frame.kind == "markers" else frame.kind
    info = pylsl.StreamInfo(frame.stream, kind, len(frame.channels), float(frame.rate_hz), pylsl.cf_double64,
                            f"walklab/{lab_name}/{frame.stream}")
    chans = info.desc().append_child("channels")
    for c, u in zip(frame.channels, frame.units):
        ch = chans.append_child("channel")
        ch.append_child_value("label", c)
        ch.append_child_value("unit", u)
        ch.append_child_value("type", frame.kind)
    wl = info.desc().append_child("walklab")
    wl.append_child_value("stream", frame.stream)
    wl.append_child_value("kind", frame.kind)
    return info


class Outlets:
    """One LSL outlet per walklab stream seen (a lifetime object: outlets live until `close`)."""

    def __init__(self, lab_name: str):
        self.lab_name = lab_name
        self.outlets: dict[str, tuple[Any, int]] = {}  # stream -> (outlet, channel count)
        self.skipped = 0

    def push(self, frame: Frame) -> None:
        """Push a frame's samples with their lab times [s]; frames whose channel count changed or
        whose data is not numeric are skipped (counted in ``skipped``)."""
        import pylsl

        if frame.kind == "event" or frame.data.shape[1] == 0:
            return
        entry = self.outlets.get(frame.stream)
        if entry is None:
            entry = self.outlets[frame.stream] = (pylsl.StreamOutlet(outlet_info(frame, self.lab_name)),
                                                  frame.data.shape[1])
        outlet, n_ch = entry
        if frame.data.shape[1] != n_ch or frame.data.dtype.kind not in "fiub":
            self.skipped += 1
            return
        times = (frame.sample_times() if frame.samples > 1 else np.array([frame.t])) * 1e-9
        outlet.push_chunk(np.ascontiguousarray(frame.data, dtype=np.float64), times.tolist())

    def close(self) -> None:
        self.outlets.clear()  # pylsl destroys an outlet with its last reference


# ----------------------------------------------------------------------------------- in


def describe_channels(info: Any) -> list[tuple[str, str, str]]:
    """(label, unit, type) per channel of an LSL stream (empty strings where the sender gave none)."""
    out = []
    ch = info.desc().child("channels").child("channel")
    for i in range(info.channel_count()):
        if ch.empty():
            out.append((f"ch{i + 1}", "", ""))
        else:
            out.append((ch.child_value("label") or f"ch{i + 1}", ch.child_value("unit"), ch.child_value("type")))
            ch = ch.next_sibling()
    return out


@dataclass(frozen=True)
class MarkerLayout:
    """Where a MoCap stream's marker coordinates are: labels, the (x, y, z) channel index of each,
    and the factor to metres of each coordinate."""

    labels: tuple[str, ...]
    index: np.ndarray  # (markers, 3) int
    scale: np.ndarray  # (markers, 3) float

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(f"{label}:{a}" for label in self.labels for a in "xyz")


def marker_layout(channels: Sequence[tuple[str, str, str]], stream: str) -> MarkerLayout:
    """The marker layout of a MoCap stream's channels (module docstring); ValueError if no marker has
    all three coordinates or a unit is not a length."""
    found: dict[str, dict[str, tuple[int, float]]] = {}
    for i, (label, unit, ctype) in enumerate(channels):
        m = _AXIS.match(label)
        axis = m["axis"].lower() if m else (ctype[-1].lower() if ctype.lower().startswith("position") else None)
        base = m["label"] if m else label
        if axis is None:
            continue
        u = unit.strip().lower()
        if u not in LENGTH_UNITS:
            raise ValueError(f"LSL stream {stream!r}: channel {label!r} unit {unit!r} is not a length "
                             f"({', '.join(sorted(k for k in LENGTH_UNITS if k))})")
        found.setdefault(base, {})[axis] = (i, LENGTH_UNITS[u])
    labels = [lab for lab, axes in found.items() if set(axes) == {"x", "y", "z"}]
    if not labels:
        raise ValueError(f"LSL stream {stream!r} of type MoCap has no LABEL_X/_Y/_Z channel triple")
    index = np.array([[found[lab][a][0] for a in "xyz"] for lab in labels])
    scale = np.array([[found[lab][a][1] for a in "xyz"] for lab in labels])
    return MarkerLayout(tuple(labels), index, scale)


class Inlet:
    """One ``kind = "lsl"`` device: resolves its LSL stream, pulls chunks, makes walklab frames."""

    def __init__(self, device: Any, clock: Any = time.monotonic_ns):
        # a force plate whose source is "lsl:NAME": its raw channels come from the LSL stream NAME
        self.plate = device if device.kind == "forceplate" else None
        if self.plate is not None and not device.source.startswith(PLATE_PREFIX):
            raise ValueError(f"[devices.{device.name}]: a force plate served by daq.lsl needs source = \"lsl:NAME\"")
        if self.plate is None and not (device.lsl_name or device.lsl_type or device.source_id):
            raise ValueError(f"[devices.{device.name}]: an lsl device needs lsl_name, lsl_type or source_id")
        self.device = device
        self.clock = clock
        self.inlet: Any = None
        self.epoch = 0
        self.stream = ""
        self.layout: MarkerLayout | None = None
        self.channels: tuple[str, ...] = ()
        self.units: tuple[str, ...] = ()
        self.kind = "lsl"
        self.rate = 0.0
        self.offset_s = 0.0
        self.next_offset = 0
        self.signature: tuple | None = None

    def predicate(self) -> str:
        d = self.device
        if self.plate is not None:
            return f"name='{d.source[len(PLATE_PREFIX):]}'"
        parts = [f"{k}='{v}'" for k, v in (("name", d.lsl_name), ("type", d.lsl_type), ("source_id", d.source_id)) if v]
        return " and ".join(parts)

    def open(self, timeout_s: float) -> bool:
        """Resolve and open the stream; False if it is not on the network yet."""
        import pylsl

        found = pylsl.resolve_bypred(self.predicate(), 1, timeout_s)
        if not found:
            return False
        self.inlet = pylsl.StreamInlet(found[0], max_buflen=60, recover=True)
        info = self.inlet.info(timeout=5.0)
        chans = describe_channels(info)
        mocap = info.type().lower() == "mocap" and self.plate is None
        self.rate = float(info.nominal_srate())
        if self.plate is not None:
            if len(chans) != len(self.plate.channels):
                raise ValueError(f"[devices.{self.plate.name}]: LSL stream {info.name()!r} has {len(chans)} channels, "
                                 f"a type-{self.plate.type} plate {len(self.plate.channels)}")
            from daq.devices.forceboard import units_of

            self.layout = None
            self.channels, self.kind = tuple(self.plate.channels), "force"
            self.units = units_of(self.channels)
            self.rate = self.rate or float(self.plate.rate_hz)
        elif mocap:
            self.layout = marker_layout(chans, info.name())
            used = set(self.layout.index.ravel().tolist())
            if len(used) < len(chans):
                log.info("LSL %r: %d channel(s) that are not marker coordinates left out", info.name(),
                         len(chans) - len(used))
            self.channels, self.units, self.kind = self.layout.channels, ("m",) * (3 * len(self.layout.labels)), "markers"
        else:
            self.layout = None
            self.channels = tuple(c[0] for c in chans)
            self.units = tuple(c[1] or "1" for c in chans)
            self.kind = info.type() or "lsl"
        signature = (self.channels, self.units, self.kind)
        if self.signature is not None and signature != self.signature:
            self.epoch += 1  # the sender came back with other channels: a new epoch, announced in meta
        self.signature = signature
        self.stream = (self.plate.stream_name if self.plate is not None else self.device.stream
                       or (f"markers/{self.device.name}" if mocap else f"lsl/{self.device.name}"))
        self.inlet.open_stream(timeout=5.0)
        self.offset_s = self.inlet.time_correction(timeout=5.0)
        self.next_offset = self.clock() + round(OFFSET_REFRESH_S * 1e9)
        log.info("LSL %r (%s, %d channels, %g Hz) -> %s, clock offset %.6f s", info.name(), info.type(),
                 info.channel_count(), self.rate, self.stream, self.offset_s)
        return True

    def frames(self, timeout_s: float) -> list[Frame]:
        """Frames of the samples that arrived (waiting at most ``timeout_s`` for the first)."""
        if self.clock() >= self.next_offset:
            self.offset_s = self.inlet.time_correction(timeout=0.5)
            self.next_offset = self.clock() + round(OFFSET_REFRESH_S * 1e9)
        samples, stamps = self.inlet.pull_chunk(timeout=timeout_s, max_samples=4096)
        if not stamps:
            return []
        t_recv = self.clock()
        data = np.asarray(samples, dtype=np.float64)
        if self.layout is not None:
            data = (data[:, self.layout.index] * self.layout.scale).reshape(len(data), -1)
        ts = np.asarray(stamps, dtype=np.float64)
        rows = [slice(0, len(ts))] if self.rate > 0 else [slice(i, i + 1) for i in range(len(ts))]
        out = []
        for sl in rows:
            n = sl.stop - sl.start
            span = round((n - 1) * 1e9 / self.rate) if self.rate > 0 else 0
            t_dev = round(ts[sl.start] * 1e9)
            out.append(Frame(self.stream, self.kind, 0, t_dev, t_recv - span, round((ts[sl.start] + self.offset_s) * 1e9),
                             self.rate, self.channels, self.units, data[sl], {"lsl_time": ts[sl].copy()},
                             {"lsl_offset_s": self.offset_s, "epoch": self.epoch}))
        return out

    def close(self) -> None:
        if self.inlet is not None:
            self.inlet.close_stream()
            self.inlet = None


# ----------------------------------------------------------------------------------- process


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Process entry point (module docstring): inlets for the ``lsl`` devices, outlets for ``--out``."""
    p = argparse.ArgumentParser(prog="daq.lsl", add_help=False)
    p.add_argument("--out", metavar="PATTERN", action="append", default=[],
                   help="walklab stream or prefix* to offer as an LSL outlet (repeatable)")
    p.add_argument("--resolve-s", type=float, default=0.2, help="longest wait for an LSL stream per try [s]")
    opts = p.parse_args(list(args))
    try:
        import pylsl  # noqa: F401  (the optional extra)
    except ImportError:
        raise OSError("the LSL bridge needs pylsl: pip install 'walklab[lsl]'") from None
    inlets = [Inlet(d, ctx.clock) for d in ctx.devices.values()
              if d.kind == "lsl" or (d.kind == "forceplate" and d.source.startswith(PLATE_PREFIX))]
    if not inlets and not opts.out:
        raise ValueError(f"process {ctx.name!r}: nothing to bridge (no [devices] of kind \"lsl\", no force plate "
                         "with source = \"lsl:NAME\", no --out)")
    offset = clock_offset_s()
    if abs(offset) > 1e-3:
        raise OSError(f"LSL's clock differs from the host monotonic clock by {offset:.6f} s on this machine: "
                      "stamps would not line up (walklab needs lsl_local_clock = CLOCK_MONOTONIC)")
    sub = ctx.subscriber(opts.out) if opts.out else None
    outlets = Outlets(ctx.lab.lab.name)
    try:
        while not ctx.stopping:
            for inlet in inlets:
                if inlet.inlet is None:
                    if not inlet.open(opts.resolve_s):
                        ctx.health.count(f"lsl/{inlet.device.name}/resolve_failures")
                        continue
                try:
                    frames = inlet.frames(0.0)
                except Exception as exc:  # pylsl.LostError and friends: reopen
                    log.warning("LSL %s lost: %s; resolving again", inlet.device.name, exc)
                    inlet.close()
                    continue
                for f in frames:
                    ctx.publisher.publish(f.stream, f.data, kind=f.kind, rate_hz=f.rate_hz, channels=f.channels,
                                          units=f.units, t_device=f.t_device, t_host=f.t_host, t=f.t,
                                          extra=f.extra, meta=f.meta)
                    ctx.health.count(f"lsl/{inlet.device.name}/samples", f.samples)
            if sub is not None:
                n = 0
                while (f := sub.recv(timeout_s=0.005 if n == 0 else 0)) is not None and n < 500:
                    if not f.stream.startswith("health/"):
                        outlets.push(f)
                    n += 1
                ctx.health.queue_depth("lsl/outlets", len(outlets.outlets))
            elif not any(i.inlet is not None for i in inlets):
                ctx.sleep_until(ctx.clock() + 50_000_000)
            else:
                time.sleep(0.002)  # LSL chunks of a few ms: poll the inlets at ~500 Hz
            ctx.tick()
    finally:
        for inlet in inlets:
            inlet.close()
        outlets.close()
    return 0
