"""A faulty serial cable for fault tests: between a device's port and a host-side port, in this process.

`SerialWire(device_path, host_path)` opens the device's port (a pty path, as a host would) and offers
the host a pty of its own at `host_path` (a symlink to ``/proc/PID/fd/N`` of its slave, the way
`daq.simulated_robot.pty_handle` publishes a virtual MCU), relaying bytes both ways on a thread.
Faults, on the device -> host direction, by whole frames of the wire protocol (COBS, 0x00-delimited):

- ``drop_rate``: probability per frame of not passing it on;
- ``corrupt_rate``: probability per frame of XOR-ing one of its COBS *data* bytes (never a code byte)
  with a non-zero value that does not make it 0x00: the frame keeps its length and one byte of its
  decoded payload differs, which the protocol's CRC-16 always detects (a burst of <= 8 bits), so each
  such frame is exactly one frame rejected by the host;
- `unplug` / `plug`: the host's port vanishes (symlink removed, pty closed: the host's reads fail, as
  with a USB cable pulled) and comes back on a new pty at the same path. Bytes the device sends
  meanwhile are lost.

``dropped`` and ``corrupted`` count the frames it damaged (the test's truth); set the rates under
`lock` to start and stop a fault window on a frame boundary.
"""
from __future__ import annotations

import os
import random
import select
import threading
import tty


def data_positions(segment: bytes) -> list[int]:
    """Indices of the COBS data bytes of one encoded frame (no delimiter): all but the code bytes."""
    codes, i = set(), 0
    while i < len(segment):
        codes.add(i)
        i += segment[i]
    return [k for k in range(len(segment)) if k not in codes]


class SerialWire:
    """The cable (module doc); lifetime start() .. close()."""

    def __init__(self, device_path: str, host_path: str, seed: int = 0) -> None:
        self.device_path, self.host_path = device_path, host_path
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.drop_rate = self.corrupt_rate = 0.0
        self.dropped = self.corrupted = self.passed = 0
        self.unplugs = 0
        self._dev = -1
        self._master = self._slave = -1
        self._partial = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._relay, name="serial-wire", daemon=True)

    def start(self) -> "SerialWire":
        self._dev = os.open(self.device_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        tty.setraw(self._dev)
        self.plug()
        self._thread.start()
        return self

    def plug(self) -> None:
        """A new pty for the host at host_path."""
        with self.lock:
            master, slave = os.openpty()
            tty.setraw(master)
            tty.setraw(slave)
            os.set_blocking(master, False)
            tmp = f"{self.host_path}.{os.getpid()}.new"
            os.symlink(f"/proc/{os.getpid()}/fd/{slave}", tmp)
            os.replace(tmp, self.host_path)
            self._master, self._slave = master, slave

    def unplug(self) -> None:
        """The host's port vanishes: path removed, pty closed."""
        with self.lock:
            os.unlink(self.host_path)
            for fd in (self._master, self._slave):
                os.close(fd)
            self._master = self._slave = -1
            self._partial = b""
            self.unplugs += 1

    @property
    def plugged(self) -> bool:
        return self._master >= 0

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.plugged:
            self.unplug()
        if self._dev >= 0:
            os.close(self._dev)
            self._dev = -1

    def _relay(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                fds = [self._dev] + ([self._master] if self._master >= 0 else [])
            try:
                ready, _, _ = select.select(fds, [], [], 0.05)
            except (OSError, ValueError):  # the host side closed by unplug() between the copy and select
                continue
            with self.lock:
                if self._dev in ready:
                    try:
                        data = os.read(self._dev, 65536)
                    except BlockingIOError:
                        data = b""
                    self._to_host(data)
                if self._master >= 0 and self._master in ready:
                    try:
                        data = os.read(self._master, 65536)
                    except (BlockingIOError, OSError):  # OSError: no host has the slave open (EIO)
                        data = b""
                    if data:
                        _write_all(self._dev, data)

    def _to_host(self, data: bytes) -> None:
        """Pass complete frames on, with the faults (caller holds lock)."""
        if self._master < 0:
            return  # unplugged: what the device sends is lost
        *frames, self._partial = (self._partial + data).split(b"\x00")
        out = []
        for seg in frames:
            if seg and self.drop_rate and self.rng.random() < self.drop_rate:
                self.dropped += 1
                continue
            if seg and self.corrupt_rate and self.rng.random() < self.corrupt_rate:
                pos = data_positions(seg)
                if pos:
                    k = self.rng.choice(pos)
                    flip = self.rng.choice([v for v in range(1, 256) if v != seg[k]])
                    seg = seg[:k] + bytes([seg[k] ^ flip]) + seg[k + 1:]
                    self.corrupted += 1
            self.passed += bool(seg)
            out.append(seg + b"\x00")
        if out:
            _write_all(self._master, b"".join(out))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 0.05)
            continue
        except OSError:
            return  # the other side went away (an unplug): the bytes are lost, as on a pulled cable
        view = view[n:]
