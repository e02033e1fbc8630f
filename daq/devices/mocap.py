"""Markers from a motion-capture PC over ZeroMQ, in walklab's documented msgpack schema.

The mocap PC (Vicon, Qualisys, OptiTrack SDKs are Windows programs: a small script there, or
`MocapSender` itself, forwards what the SDK gives) binds a ZeroMQ PUB socket; the daemon connects
to it (``[devices.NAME] kind = "mocap"``, ``endpoint``; CurveZMQ keys of ``[bus.curve]`` when the
endpoint leaves the machine). Two messages, each ``[topic, msgpack map]`` (docs/devices.md):

- ``b"mocap/labels"``: ``{"v": 1, "epoch": int, "labels": [str], "units": "m" | "mm",
  "rate_hz": float}`` — sent first, again every second (late joiners), and whenever the marker set
  changes (with a new ``epoch``);
- ``b"mocap/frames"``: ``{"v": 1, "epoch": int, "frame": int, "t_us": int, "positions": {"dtype":
  "<f4" | "<f8", "shape": [n, M, 3], "data": bin}, "residuals": {... "shape": [n, M] ...} (optional)}``
  — ``n`` consecutive camera frames from frame number ``frame``, ``t_us`` the mocap PC's clock
  of the first one (µs); NaN positions for occluded markers.

The daemon (`MocapSource` on `daq.context.serve`) publishes ``markers/NAME`` (kind ``markers``):
data (n, 3M) m in the lab frame, channels ``LABEL:x, LABEL:y, LABEL:z``, extra ``residual``
(n, M) m (NaN where not given or occluded), ``t_device`` = ``t_us`` × 1000, ``t`` the
`daq.clock.ClockSync` mapping, meta ``{"epoch", "frame"}``. A label set is fixed for an epoch: a
new one is announced as an event ``marker_epoch`` on ``events/NAME`` (labels in its meta); frames
of an epoch whose labels have not arrived yet are dropped and counted (``NAME/no_labels``);
missing frame numbers are counted (``NAME/frames_lost``). No message for ``--silence-s`` (2 s)
after data had come: the device is lost (``device/lost``), the socket is reopened.
"""
from __future__ import annotations

import argparse
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import msgpack
import numpy as np
import zmq

from daq.context import Block, DeviceLost, serve
from daq.logthrottle import LogThrottle

if TYPE_CHECKING:
    from daq.context import ProcessContext

log = logging.getLogger("walklab.mocap")

LABELS, FRAMES = b"mocap/labels", b"mocap/frames"
UNITS = {"m": 1.0, "mm": 1e-3}
_DTYPES = ("<f4", "<f8")


class MocapError(ValueError):
    """A mocap message that does not follow the schema (the message names the field)."""


def _array(doc: Any, what: str, ndim: int) -> np.ndarray:
    if type(doc) is not dict or doc.get("dtype") not in _DTYPES or type(doc.get("data")) is not bytes:
        raise MocapError(f"{what}: expected {{dtype: <f4|<f8, shape, data: bin}}")
    shape = doc.get("shape")
    if type(shape) is not list or len(shape) != ndim or not all(type(d) is int and d >= 0 for d in shape):
        raise MocapError(f"{what}: shape {shape!r:.40} must be {ndim} non-negative integers")
    dt = np.dtype(doc["dtype"])
    if len(doc["data"]) != int(np.prod(shape)) * dt.itemsize:
        raise MocapError(f"{what}: {len(doc['data'])} bytes for shape {shape} of {doc['dtype']}")
    return np.frombuffer(doc["data"], dtype=dt).reshape(shape)


def pack_array(a: np.ndarray, dtype: str = "<f8") -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype=dtype)
    return {"dtype": dtype, "shape": list(a.shape), "data": a.tobytes()}


class MocapSender:
    """The mocap PC's side: binds ``endpoint`` and sends labels and blocks of frames (a lifetime object).

    Also the simulated mocap PC of tests and demos. ``curve``: `daq.security.CurveServer` keys
    (required by `daq.bus.check_endpoint` for a non-loopback endpoint).
    """

    def __init__(self, endpoint: str, labels: Sequence[str], rate_hz: float, *, units: str = "m",
                 curve: Any = None, context: zmq.Context | None = None):
        from daq.bus import check_endpoint

        check_endpoint(endpoint, secured=curve is not None, action="bind")
        if units not in UNITS:
            raise ValueError(f"units must be one of {sorted(UNITS)}, got {units!r}")
        self.sock = (context or zmq.Context.instance()).socket(zmq.PUB)
        self.sock.linger = 200
        if curve is not None:
            curve.apply(self.sock)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.last_endpoint.decode()
        self.labels, self.rate_hz, self.units = list(labels), float(rate_hz), units
        self.epoch = 0
        self.next_labels = 0.0

    def send_labels(self) -> None:
        self.sock.send_multipart([LABELS, msgpack.packb({"v": 1, "epoch": self.epoch, "labels": self.labels,
                                                         "units": self.units, "rate_hz": self.rate_hz})])
        self.next_labels = time.monotonic() + 1.0

    def relabel(self, labels: Sequence[str]) -> None:
        """A new marker set: a new epoch, announced at once."""
        self.labels = list(labels)
        self.epoch += 1
        self.send_labels()

    def send(self, frame: int, t_us: int, positions: np.ndarray, residuals: np.ndarray | None = None) -> None:
        """Send ``n`` frames: positions (n, M, 3) in ``units``, NaN when occluded; residuals (n, M)."""
        if time.monotonic() >= self.next_labels:
            self.send_labels()
        doc = {"v": 1, "epoch": self.epoch, "frame": int(frame), "t_us": int(t_us), "positions": pack_array(positions)}
        if residuals is not None:
            doc["residuals"] = pack_array(residuals)
        self.sock.send_multipart([FRAMES, msgpack.packb(doc)])

    def close(self) -> None:
        self.sock.close()


class MocapSource:
    """The `daq.context.Source` of one ``kind = "mocap"`` device (module docstring)."""

    def __init__(self, ctx: ProcessContext, device: Any, silence_s: float = 2.0):
        self.ctx = ctx
        self.device = device
        self.silence_ns = round(silence_s * 1e9)
        self.stream = f"markers/{device.name}"
        self.sock: zmq.Socket | None = None
        self.epoch: int | None = None
        self.labels: tuple[str, ...] = ()
        self.channels: tuple[str, ...] = ()
        self.scale = 1.0
        self.rate = float(device.rate_hz)
        self.next_frame: int | None = None
        self.last_msg: int | None = None
        self.malformed_log = LogThrottle(log, clock=ctx.clock)  # a bad sender repeats it every message

    def open(self) -> None:
        from daq.bus import check_endpoint, is_local_endpoint

        curve = self.ctx.lab.bus.curve
        secured = curve is not None and not is_local_endpoint(self.device.endpoint)
        check_endpoint(self.device.endpoint, secured=secured, action="connect to")
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.linger = 0
        if secured:
            from daq.security import CurveClient

            CurveClient.from_files(curve.server_public, curve.client_key).apply(sock)
        sock.subscribe(b"mocap/")
        sock.connect(self.device.endpoint)
        self.sock, self.last_msg, self.next_frame = sock, None, None

    def _labels(self, doc: dict) -> None:
        labels, units, epoch = doc.get("labels"), doc.get("units"), doc.get("epoch")
        if type(labels) is not list or not labels or not all(type(s) is str and s for s in labels) \
                or len(set(labels)) != len(labels):
            raise MocapError("labels: expected a list of distinct non-empty strings")
        if units not in UNITS or type(epoch) is not int:
            raise MocapError(f"labels: units {units!r} must be 'm' or 'mm', epoch an integer")
        if epoch == self.epoch and tuple(labels) == self.labels:
            return  # the periodic repeat
        self.epoch, self.labels, self.scale = epoch, tuple(labels), UNITS[units]
        self.channels = tuple(f"{s}:{a}" for s in labels for a in "xyz")
        rate = doc.get("rate_hz")
        if type(rate) in (int, float) and rate > 0:
            self.rate = float(rate)
        self.next_frame = None
        self.ctx.event("marker_epoch", device=self.device.name, epoch=epoch, labels=list(labels))

    def _frames(self, doc: dict, t_recv: int) -> Block | None:
        if doc.get("epoch") != self.epoch or not self.labels:
            self.ctx.health.count(f"{self.device.name}/no_labels")
            return None
        frame, t_us = doc.get("frame"), doc.get("t_us")
        if type(frame) is not int or type(t_us) is not int:
            raise MocapError("frames: frame and t_us must be integers")
        m = len(self.labels)
        pos = _array(doc.get("positions"), "frames.positions", 3)
        if pos.shape[1:] != (m, 3) or pos.shape[0] == 0:
            raise MocapError(f"frames.positions: shape {list(pos.shape)}, expected [n >= 1, {m}, 3]")
        n = pos.shape[0]
        res = np.full((n, m), np.nan)
        if "residuals" in doc:
            r = _array(doc["residuals"], "frames.residuals", 2)
            if r.shape != (n, m):
                raise MocapError(f"frames.residuals: shape {list(r.shape)}, expected [{n}, {m}]")
            res = r * self.scale
        res[np.isnan(pos).any(axis=2)] = np.nan
        if self.next_frame is not None and frame != self.next_frame:
            if frame > self.next_frame:
                self.ctx.health.count(f"{self.device.name}/frames_lost", frame - self.next_frame)
        self.next_frame = frame + n
        return Block(self.stream, (pos * self.scale).reshape(n, 3 * m).astype(np.float64), t_us * 1000, t_recv,
                     "markers", self.rate, self.channels, ("m",) * 3 * m, extra={"residual": res.astype(np.float64)},
                     meta={"epoch": self.epoch, "frame": frame})

    def read(self, timeout_s: float) -> Sequence[Block]:
        out: list[Block] = []
        sock = self.sock
        if not sock.poll(int(timeout_s * 1000)):
            if self.last_msg is not None and self.ctx.clock() - self.last_msg > self.silence_ns:
                raise DeviceLost(f"{self.device.endpoint}: no mocap message for {self.silence_ns / 1e9:.1f} s")
            return out
        for _ in range(1000):  # what is there now, bounded
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            t_recv = self.ctx.clock()
            self.last_msg = t_recv
            try:
                if len(parts) != 2:
                    raise MocapError(f"expected [topic, payload], got {len(parts)} parts")
                doc = msgpack.unpackb(parts[1], raw=False, max_ext_len=0)
                if type(doc) is not dict or doc.get("v") != 1:
                    raise MocapError("payload: expected a msgpack map with v = 1")
                if parts[0] == LABELS:
                    self._labels(doc)
                elif parts[0] == FRAMES:
                    b = self._frames(doc, t_recv)
                    if b is not None:
                        out.append(b)
            except (MocapError, ValueError, msgpack.UnpackException) as exc:  # a bad message: counted, dropped
                self.ctx.health.count(f"{self.device.name}/malformed")
                self.malformed_log.log("dropped a mocap message: %s", exc)
        return out

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Serve the process's one ``mocap`` device until asked to stop. ``args``: ``--silence-s`` (2.0)."""
    p = argparse.ArgumentParser(prog="daq.devices.mocap", add_help=False)
    p.add_argument("--silence-s", type=float, default=2.0)
    opts = p.parse_args(list(args))
    return serve(ctx, MocapSource(ctx, ctx.device("mocap"), opts.silence_s))
