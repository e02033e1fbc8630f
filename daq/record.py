"""The recorder: every frame of the bus (or of chosen streams) into a crash-safe MCAP session file.

File layout (the full format, for readers without walklab, is ``docs/recording.md``):

- MCAP (mcap.dev/spec), profile ``walklab``, one **channel per stream**: topic = stream name,
  ``message_encoding = "msgpack"``, schema id 0 (msgpack carries no schema), channel metadata
  ``kind``, ``rate_hz``, ``channels`` and ``units`` (the last two JSON lists).
- One **MCAP message per frame**: ``log_time`` = lab time ``t`` of the frame's first sample [ns],
  ``publish_time`` = its device time ``t_device`` [ns] (``t`` when the device has no clock),
  ``sequence`` = ``seq mod 2**32``; the data is one msgpack map (`pack_frame`) with the header
  fields at top level (``v, stream, kind, seq, t, t_host, t_device, t_pub, t_recv, rate_hz,
  channels, units, meta``) and ``buffers``: a list of ``{name, dtype, shape, data}`` with
  ``data`` the raw little-endian C-order bytes as msgpack bin (buffer 0 is ``data``, shape
  (samples, channels)).
- **Metadata records** written at the start of every file: ``walklab/recording`` (software
  version, host, start time UTC and monotonic, part number, streams asked for), ``walklab/lab``
  (the lab config's path and TOML text), ``walklab/plates`` (each force plate's calibration by
  stream name: type, corners, origin, cal_matrix, channels, JSON), ``walklab/models`` (the TOML/URDF
  text of models named by ``--model`` in the lab's process arguments); and at a clean stop
  ``walklab/recorder`` (stop reason, frames and drops per stream).
- The recorder's own events are messages of stream ``events/recorder`` (kind ``event``, no
  samples, the details in ``meta``: ``event``, ``severity``, ...): ``drops`` when its subscriber
  saw a ``seq`` gap (its own losses, counted, never hidden), ``disk_full`` / ``write_error``
  (severity ``alarm``) when it had to stop.

Crash safety: messages are gathered into a chunk that is closed, written and ``fsync``-ed every
``chunk_ms`` (50 ms by default) of arrival time, so a ``kill -9`` or a power cut loses at most the
open chunk; the index (summary) is written by a clean stop, and `daq.sessions.recover` rebuilds it
for a file that never got one. Disk space: after every chunk the free space of the file system
(and the process's RLIMIT_FSIZE) is compared with what the end of the file needs; below
``reserve_bytes`` recording stops cleanly (event ``disk_full``, complete file). Should a write
fail anyway (ENOSPC, EDQUOT, EFBIG, EIO), the file is cut back to the last complete chunk and
closed with a minimal footer (readable by any MCAP reader; `daq.sessions.recover` adds the index).

The recorder is a subscriber: it never slows the bus (a publisher drops for a slow subscriber and
the subscriber counts it from ``seq``). Rotation: a new file ``STEM.001.mcap``, ``STEM.002.mcap``
... starts when a file reaches ``rotate_bytes`` or ``rotate_s``; each is a complete session file
with its own metadata.

Process entry point `run(ctx, args)` (a ``[[processes]]`` entry ``module = "daq.record"``);
stand-alone: ``walklab record`` (``controller/commands/record.py``).
"""
from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import json
import logging
import os
import resource
import shlex
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import msgpack
import numpy as np

from daq.frames import DTYPES, Frame, FrameError, _wire_array

if TYPE_CHECKING:
    from daq.context import ProcessContext

log = logging.getLogger("walklab.record")

MESSAGE_ENCODING = "msgpack"
PROFILE = "walklab"
FORMAT_VERSION = 1
EVENTS_STREAM = "events/recorder"
#: Errors that mean "no room left": a full file system, a quota, a file size limit.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_UINT32 = 2**32
_COMPRESSIONS = ("zstd", "lz4", "none")
_EVENTS_CHANNEL_META = {"kind": "event", "rate_hz": "0.0", "channels": "[]", "units": "[]"}


class RecordingError(OSError):
    """A recording that cannot be opened or written (the message names the file and the reason)."""


# ----------------------------------------------------------------------------------- messages


def pack_frame(frame: Frame, t_recv: int | None = None) -> bytes:
    """The msgpack map recorded for ``frame`` (see module docstring and docs/recording.md).

    ``t_recv``: host monotonic time at which the recorder received it [ns] (None: unknown).
    """
    buffers = [_buffer_entry("data", frame.data)]
    for name, arr in frame.extra.items():
        buffers.append(_buffer_entry(name, arr))
    dynamic = {"seq": int(frame.seq), "t": int(frame.t), "t_host": int(frame.t_host),
               "t_device": None if frame.t_device is None else int(frame.t_device),
               "t_pub": int(frame.t_pub), "t_recv": t_recv, "meta": frame.meta, "buffers": buffers}
    key = (frame.stream, frame.kind, frame.rate_hz, frame.channels, frame.units)
    prefix = _PREFIXES.get(key)
    if prefix is None:
        static = {"v": FORMAT_VERSION, "stream": frame.stream, "kind": frame.kind, "rate_hz": float(frame.rate_hz),
                  "channels": list(frame.channels), "units": list(frame.units)}
        # one msgpack map of 14 entries = the fixmap marker, then the static and the dynamic pairs
        prefix = bytes([0x80 | (len(static) + len(dynamic))]) + msgpack.packb(static, use_bin_type=True)[1:]
        if len(_PREFIXES) >= 4096:
            _PREFIXES.clear()
        _PREFIXES[key] = prefix
    return prefix + msgpack.packb(dynamic, use_bin_type=True)[1:]


# Packed static part (v, stream, kind, rate_hz, channels, units) per stream layout: a marker
# stream's 120 channel names are packed once, not once per frame.
_PREFIXES: dict[tuple, bytes] = {}


def _buffer_entry(name: str, arr: np.ndarray) -> dict[str, Any]:
    # the bus's own conversion (little-endian, C order, allowed dtypes; FrameError otherwise), and
    # the array's memory packed as bin without an intermediate copy
    a, code = _wire_array(name, arr)
    return {"name": name, "dtype": code, "shape": list(a.shape), "data": a.data.cast("B") if a.size else b""}


_UNPACK = {"raw": False, "strict_map_key": True, "max_ext_len": 0}
_STATIC_KEYS = ("v", "stream", "kind", "rate_hz", "channels", "units")


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, **_UNPACK)
    except Exception as exc:  # msgpack raises several types
        raise FrameError(f"recorded message is not valid msgpack: {type(exc).__name__}: {exc}"[:200]) from None


def _frame(stream: str, kind: str, rate_hz: float, channels: tuple, units: tuple, doc: dict) -> Frame:
    """A Frame from a message's static values and its (dynamic) fields in ``doc``."""
    try:
        arrays = []
        for b in doc["buffers"]:
            if b["dtype"] not in DTYPES:
                raise FrameError(f"stream {stream!r}: buffer {b['name']!r} dtype {b['dtype']!r} not allowed")
            arrays.append((b["name"], np.frombuffer(b["data"], dtype=b["dtype"]).reshape(b["shape"])))
        if not arrays or arrays[0][0] != "data":
            raise FrameError(f"stream {stream!r}: buffer 0 must be 'data'")
        # positional (Frame's field order): keywords cost twice as much on the replay path
        return Frame(stream, kind, doc["seq"], doc["t_device"], doc["t_host"], doc["t"], rate_hz, channels, units,
                     arrays[0][1], dict(arrays[1:]), doc["meta"], doc["t_pub"], doc["t_recv"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, FrameError):
            raise
        raise FrameError(f"recorded message: missing or malformed field ({type(exc).__name__}: {exc})"[:200]) from None


def _full(doc: Any) -> Frame:
    if type(doc) is not dict or doc.get("v") != FORMAT_VERSION:
        raise FrameError(f"recorded message is not a walklab frame map of format v{FORMAT_VERSION}")
    try:
        static = (doc["stream"], doc["kind"], float(doc["rate_hz"]), tuple(doc["channels"]), tuple(doc["units"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise FrameError(f"recorded message: missing or malformed field ({type(exc).__name__}: {exc})"[:200]) from None
    return _frame(*static, doc)


def unpack_message(data: bytes | memoryview) -> Frame:
    """The Frame of one recorded message (`pack_frame`'s inverse); arrays are read-only views.

    ``t_recv`` of the Frame is the recorder's receive time. Raises FrameError naming the field for
    a message that is not a walklab frame map. (`MessageDecoder` does the same faster for the
    messages of one channel.)
    """
    return _full(_unpack(bytes(data)))


class MessageDecoder:
    """`unpack_message` for the messages of many channels, faster (a lifetime object: one per file).

    `pack_frame` writes the fields that never change within a stream (v, stream, kind, rate_hz,
    channels, units) first; once a channel's first message shows those bytes, a message starting
    with the same bytes is decoded from its remaining fields only (a marker stream's 120 channel
    names are not parsed again per frame). Any other message is decoded in full.
    """

    def __init__(self) -> None:
        self._static: dict[Any, tuple[bytes, bytes, tuple]] = {}  # channel -> (prefix, map header, values)

    def split(self, data: bytes, channel: Any) -> dict | None:
        """The fields of a message that change from frame to frame (seq, t, t_host, t_device, t_pub,
        t_recv, meta, buffers), unpacked but not checked, if its channel's static fields are known
        and it starts with them; else None (`decode` it)."""
        known = self._static.get(channel)
        if known is not None and data.startswith(known[0]):
            return _unpack(known[1] + data[len(known[0]):])
        return None

    def decode(self, data: bytes, channel: Any) -> Frame:
        known = self._static.get(channel)
        if known is not None and data.startswith(known[0]):
            return _frame(*known[2], _unpack(known[1] + data[len(known[0]):]))
        doc = _unpack(data)
        frame = _full(doc)
        if type(doc) is dict and list(doc)[:len(_STATIC_KEYS)] == list(_STATIC_KEYS) and 0x80 <= data[0] <= 0x8F:
            packed = msgpack.packb({k: doc[k] for k in _STATIC_KEYS}, use_bin_type=True)[1:]
            if data[1:1 + len(packed)] == packed:  # written as pack_frame writes: the fast path applies
                header = bytes([0x80 | (len(doc) - len(_STATIC_KEYS))])
                self._static[channel] = (data[:1 + len(packed)], header,
                                         (frame.stream, frame.kind, frame.rate_hz, frame.channels, frame.units))
        return frame


def channel_metadata(frame: Frame) -> dict[str, str]:
    """MCAP channel metadata of a stream (string values only, as MCAP requires)."""
    return {"kind": frame.kind, "rate_hz": repr(float(frame.rate_hz)),
            "channels": json.dumps(list(frame.channels)), "units": json.dumps(list(frame.units))}


def event_frame(name: str, seq: int, t_ns: int, severity: str = "info", **fields: Any) -> Frame:
    """An event frame of ``events/recorder`` (no samples; ``meta`` holds ``event``, ``severity``, fields)."""
    return Frame(stream=EVENTS_STREAM, kind="event", seq=seq, t_device=None, t_host=t_ns, t=t_ns, rate_hz=0.0,
                 channels=(), units=(), data=np.zeros((1, 0)), meta={"event": name, "severity": severity, **fields},
                 t_pub=t_ns)


# ----------------------------------------------------------------------------------- metadata


def software_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("walklab")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def lab_metadata(lab: Any) -> dict[str, dict[str, str]]:
    """Metadata records describing a lab config (`controller.config.Lab`): its TOML text, plate
    calibrations by stream name, and the models named by ``--model`` in process arguments."""
    out: dict[str, dict[str, str]] = {}
    source = Path(lab.source)
    lab_rec = {"name": lab.lab.name, "path": str(source)}
    try:
        lab_rec["toml"] = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        lab_rec["toml_error"] = str(exc)
    out["walklab/lab"] = lab_rec
    plates = {}
    for name, dev in lab.devices.items():
        if getattr(dev, "kind", None) == "forceplate":
            d = dataclasses.asdict(dev)
            d["channels"] = list(dev.channels)
            plates[dev.stream_name] = json.dumps(d)
    out["walklab/plates"] = plates
    models = {}
    for p in lab.processes:
        args = list(p.args)
        for flag, value in zip(args, args[1:]):
            if flag == "--model":
                path = _model_file(value, source.parent)
                if path is not None:
                    models[value] = path.read_text(encoding="utf-8")
    out["walklab/models"] = models
    return out


def _model_file(value: str, base: Path) -> Path | None:
    for cand in (Path(value), base / value):
        if cand.is_file():
            return cand
    import configs

    for ext in (".toml", ".urdf"):
        try:
            return configs.path(f"models/{value}{ext}")
        except FileNotFoundError:
            continue
    return None


def plate_calibrations(metadata: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    """``{stream: plate description}`` from a session's ``walklab/plates`` metadata record."""
    return {k: json.loads(v) for k, v in metadata.get("walklab/plates", {}).items()}


# ----------------------------------------------------------------------------------- the writer


def _write_fully(fd: int, data: bytes | bytearray) -> None:
    """os.write until every byte is written (a short write, e.g. at a size limit, then raises)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])


_MESSAGE_RECORD = struct.Struct("<BQHIQQ")  # opcode 0x05, record length, channel_id, sequence, log_time, publish_time


@functools.cache
def _fast_writer_class() -> type:
    """The mcap library's `Writer` with a cheaper `add_message` (built on first use: mcap is imported late)."""
    from mcap.records import MessageIndex
    from mcap.writer import Writer

    class FastWriter(Writer):
        """`mcap.writer.Writer` whose `add_message` writes the Message record with one `struct` call.

        The library builds a `Message` object and writes it field by field through its record
        builder (~8 us of the recorder's per-frame work); this writes the same bytes (mcap.dev/spec:
        opcode, length, channel_id u16, sequence u32, log_time u64, publish_time u64, data) and
        keeps the same statistics and message index, in the library's own (name-mangled) state:
        `tests/daq/test_record.py` checks that both write identical files.
        """

        def add_message(self, channel_id: int, log_time: int, data: bytes, publish_time: int,
                        sequence: int = 0) -> None:
            cb = self._Writer__chunk_builder
            if cb is None:  # unchunked files: the library's path
                return super().add_message(channel_id, log_time, data, publish_time, sequence)
            st = self._Writer__statistics
            if st.message_count == 0 or log_time < st.message_start_time:
                st.message_start_time = log_time
            if log_time > st.message_end_time:
                st.message_end_time = log_time
            st.channel_message_counts[channel_id] += 1
            st.message_count += 1
            if cb.num_messages == 0 or log_time < cb.message_start_time:
                cb.message_start_time = log_time
            if log_time > cb.message_end_time:
                cb.message_end_time = log_time
            index = cb.message_indices.get(channel_id)
            if index is None:
                index = cb.message_indices[channel_id] = MessageIndex(channel_id=channel_id, records=[])
            buf = cb.record_writer._buffer
            index.records.append((log_time, buf.tell()))
            buf.write(_MESSAGE_RECORD.pack(0x05, 22 + len(data), channel_id, sequence, log_time, publish_time))
            buf.write(data)
            cb.num_messages += 1
            if buf.tell() > self._Writer__chunk_size:
                self._Writer__finalize_chunk()

    return FastWriter


class _Sink:
    """The file-like object the MCAP writer writes to: bytes are held in memory and reach the file
    only in `commit` (after a whole chunk), so the file always ends on a record boundary we know.

    A committed chunk is in the kernel at once (a killed process loses nothing written); with
    ``fsync`` a background thread then makes it durable (a power cut), so a slow disk never holds up
    the receiving loop — the bus queue would fill meanwhile, and a kill would lose what waits there.
    An fsync failure is raised by the next `commit`.
    """

    def __init__(self, fd: int, fsync: bool):
        self.fd = fd
        self.committed = 0
        self.buf = bytearray()
        self._wanted = threading.Event()
        self._closing = False
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._syncer, name="recorder-fsync", daemon=True) if fsync else None
        if self._thread is not None:
            self._thread.start()

    def _syncer(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closing:
                return
            try:
                os.fsync(self.fd)
            except OSError as exc:
                self._error = exc
                return

    def write(self, b: bytes) -> int:
        self.buf += b
        return len(b)

    def tell(self) -> int:
        return self.committed + len(self.buf)

    def flush(self) -> None:
        """The MCAP writer's flush: nothing (commit decides when bytes reach the file)."""

    def commit(self) -> None:
        if self._error is not None:
            raise self._error
        _write_fully(self.fd, self.buf)
        self.committed += len(self.buf)
        self.buf = bytearray()
        if self._thread is not None:
            self._wanted.set()

    def close(self, final_fsync: bool) -> None:
        """Stop the fsync thread (before the descriptor is closed); fsync once more if asked."""
        if self._thread is not None:
            self._closing = True
            self._wanted.set()
            self._thread.join()
            self._thread = None
            if final_fsync:
                os.fsync(self.fd)


@dataclass
class Settings:
    """Recorder settings.

    Attributes:
        chunk_ms: longest time a received frame waits in memory before its chunk is written and
            fsync-ed [ms] (the loss window of a crash); at most 100.
        compression: chunk compression, ``zstd``, ``lz4`` or ``none``.
        fsync: fsync each chunk (survives a power cut, not only a process kill).
        rotate_bytes: start a new file when one reaches this size [bytes] (0: never).
        rotate_s: start a new file after this many seconds (0: never).
        reserve_bytes: stop cleanly when less room than this is left on the file system [bytes].
    """

    chunk_ms: float = 50.0
    compression: str = "zstd"
    fsync: bool = True
    rotate_bytes: int = 0
    rotate_s: float = 0.0
    reserve_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        if not 0 < self.chunk_ms <= 100:
            raise ValueError(f"chunk_ms must be in (0, 100] ms, got {self.chunk_ms!r}")
        if self.compression not in _COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(_COMPRESSIONS)}, got {self.compression!r}")
        if self.rotate_bytes < 0 or self.rotate_s < 0 or self.reserve_bytes < 0:
            raise ValueError("rotate_bytes, rotate_s and reserve_bytes must be >= 0")


def part_path(path: Path, part: int) -> Path:
    """File of rotation part ``part`` (0: ``path`` itself, k: ``STEM.00k.mcap``)."""
    return path if part == 0 else path.with_name(f"{path.stem}.{part:03d}{path.suffix}")


def room_left(fd: int, path: Path) -> int:
    """Bytes that can still be written to the open file ``fd``: free space of its file system for
    this user, and the process's file size limit (RLIMIT_FSIZE) minus the file size."""
    st = os.statvfs(path.parent)
    room = st.f_bavail * st.f_frsize
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        room = min(room, limit - os.fstat(fd).st_size)
    return room


@dataclass
class StreamCount:
    """Frames and bytes of one stream written by the recorder."""

    frames: int = 0
    bytes: int = 0


class SessionWriter:
    """A session being recorded (a lifetime object): one file, or several with rotation.

    Args:
        path: the first file (``.mcap``); rotated parts go beside it (`part_path`).
        settings: `Settings`.
        metadata: extra metadata records ``{name: {key: str}}`` (e.g. `lab_metadata`), written at
            the start of every part.
        streams: the stream patterns recorded (for the ``walklab/recording`` record).
        on_event: called with every event frame the writer records (e.g. to publish it on the bus).

    Attributes: ``stopped`` (no more frames accepted), ``stop_reason``, ``files``, ``counts``.
    """

    def __init__(self, path: str | Path, settings: Settings | None = None, *,
                 metadata: dict[str, dict[str, str]] | None = None, streams: Sequence[str] = (),
                 on_event: Callable[[Frame], None] | None = None):
        self.path = self.check_path(path)
        self.settings = settings or Settings()
        self.metadata = dict(metadata or {})
        self.streams = list(streams)
        self.on_event = on_event
        self.files: list[Path] = []
        self.counts: dict[str, StreamCount] = {}
        self.stopped = False
        self.stop_reason: str | None = None
        self.events_seq = 0
        self.start_unix_ns = time.time_ns()
        self.start_mono_ns = time.monotonic_ns()
        self._writer: Any = None
        self._sink: _Sink | None = None
        self._fd = -1
        self._channels: dict[str, int] = {}
        self._part = -1
        self._part_start = 0
        self._chunk_due: int | None = None  # monotonic ns by which the open chunk must be written
        self._summary_estimate = 0
        self._largest_commit = 0
        first = 0
        while part_path(self.path, first).exists():  # never overwrite a recording (a restarted recorder)
            first += 1
        if first:
            log.warning("%s exists: recording into %s", self.path, part_path(self.path, first))
        self._open_part(first)

    @staticmethod
    def check_path(path: str | Path) -> Path:
        """``path`` as a Path if it can name a session file (``.mcap`` in an existing folder)."""
        p = Path(path)
        if p.suffix != ".mcap":
            raise RecordingError(f"{p}: a session file name must end in .mcap")
        if not p.parent.is_dir():
            raise RecordingError(f"{p}: no such folder {str(p.parent)!r}")
        return p

    # -- files

    def _open_part(self, part: int) -> None:
        from mcap.writer import CompressionType

        path = part_path(self.path, part)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise RecordingError(f"{path}: cannot create the session file: {exc.strerror}") from None
        self._fd, self._sink, self._part = fd, _Sink(fd, self.settings.fsync), part
        self._part_start = time.monotonic_ns()
        self._channels = {}
        self._summary_estimate = 0
        self.files.append(path)
        comp = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
        # chunk_size in bytes is only a ceiling; chunks are closed by time (commit)
        self._writer = _fast_writer_class()(self._sink, chunk_size=8 * 2**20,
                                            compression=comp[self.settings.compression])
        self._writer.start(profile=PROFILE, library=f"walklab {software_version()}")
        rec = {"software": "walklab", "version": software_version(), "host": socket.gethostname(),
               "pid": str(os.getpid()), "python": sys.version.split()[0],
               "start_utc": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.start_unix_ns / 1e9))
               + f".{self.start_unix_ns % 10**9 // 10**6:03d}Z",
               "start_unix_ns": str(self.start_unix_ns), "start_monotonic_ns": str(self.start_mono_ns),
               "part": str(part), "part_start_monotonic_ns": str(self._part_start),
               "streams": json.dumps(self.streams or ["*"]), "chunk_ms": repr(self.settings.chunk_ms),
               "command": shlex.join(sys.argv)}
        self._writer.add_metadata("walklab/recording", rec)
        for name, data in self.metadata.items():
            self._writer.add_metadata(name, {k: str(v) for k, v in data.items()})
        self._channel(EVENTS_STREAM, _EVENTS_CHANNEL_META)
        self._commit()

    def _channel(self, stream: str, meta: dict[str, str]) -> int:
        cid = self._channels.get(stream)
        if cid is None:
            cid = self._channels[stream] = self._writer.register_channel(stream, MESSAGE_ENCODING, 0, meta)
            self._summary_estimate += 64 + len(stream) + sum(len(k) + len(v) + 8 for k, v in meta.items())
        return cid

    def _commit(self) -> None:
        """Close the open chunk and write it (and anything before it) to the file (fsync follows)."""
        self._writer.flush()
        n = len(self._sink.buf)
        self._sink.commit()
        self._largest_commit = max(self._largest_commit, n)
        self._summary_estimate += 200 + 16 * len(self._channels)  # its chunk index entry
        self._chunk_due = None

    def _end_part(self) -> None:
        self._writer.finish()
        self._sink.commit()
        self._sink.close(final_fsync=True)
        os.close(self._fd)
        self._fd = -1

    # -- writing

    def write(self, frame: Frame, t_recv: int | None = None) -> None:
        """Add one frame (ignored once `stopped`). A disk problem stops the writer (see `stopped`)."""
        if self.stopped:
            return
        try:
            cid = self._channels.get(frame.stream)
            if cid is None:
                cid = self._channel(frame.stream, channel_metadata(frame))
            data = pack_frame(frame, t_recv)
            t = max(int(frame.t), 0)
            pub = t if frame.t_device is None else max(int(frame.t_device), 0)
            self._writer.add_message(cid, t, data, pub, int(frame.seq) % _UINT32)
            c = self.counts.get(frame.stream)
            if c is None:
                c = self.counts[frame.stream] = StreamCount()
            c.frames += 1
            c.bytes += len(data)
            if self._chunk_due is None:
                self._chunk_due = time.monotonic_ns() + round(self.settings.chunk_ms * 1e6)
        except OSError as exc:
            self._fail(exc)

    def event(self, name: str, severity: str = "info", **fields: Any) -> Frame:
        """Record an ``events/recorder`` event now (and hand it to ``on_event``); returns it."""
        now = time.monotonic_ns()
        frame = event_frame(name, self.events_seq, now, severity, **fields)
        self.events_seq += 1
        log.log(logging.ERROR if severity == "alarm" else logging.WARNING if severity == "warning" else logging.INFO,
                "event %s %s", name, fields)
        self.write(frame, now)
        if self.on_event is not None:
            self.on_event(frame)
        return frame

    def next_due_ns(self) -> int | None:
        """Monotonic time by which `poll` must be called (the open chunk's deadline), or None."""
        return self._chunk_due

    def poll(self, now_ns: int | None = None) -> None:
        """Write the open chunk if its time has come; check the room left; rotate when due."""
        if self.stopped or self._chunk_due is None:
            return
        now = time.monotonic_ns() if now_ns is None else now_ns
        if now < self._chunk_due:
            return
        try:
            self._commit()
            need = self.settings.reserve_bytes + 2 * self._summary_estimate + 2 * self._largest_commit
            room = room_left(self._fd, self.files[-1])
            if room < need:
                self.event("disk_full", "alarm", file=str(self.files[-1]), room_bytes=int(room),
                           needed_bytes=int(need), action="recording stopped, file closed")
                self.close("disk_full")
                return
            s = self.settings
            if (s.rotate_bytes and self._sink.committed >= s.rotate_bytes) or \
                    (s.rotate_s and now - self._part_start >= s.rotate_s * 1e9):
                self._end_part()
                self._open_part(self._part + 1)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        """A write failed: cut the file back to its last complete chunk, end it with a minimal
        footer (no index) so that any MCAP reader opens it, and stop."""
        from mcap.data_stream import RecordBuilder
        from mcap.records import Channel, DataEnd, Footer, Message
        from mcap.writer import MCAP0_MAGIC

        reason = "disk_full" if exc.errno in NO_SPACE_ERRNOS else "write_error"
        self.stopped = True
        self.stop_reason = reason
        path = self.files[-1]
        good = self._sink.committed
        ended = False
        try:
            self._sink.close(final_fsync=False)
            os.ftruncate(self._fd, good)
            os.lseek(self._fd, good, os.SEEK_SET)
            now = time.monotonic_ns()
            ev = event_frame(reason, self.events_seq, now, "alarm", file=str(path), error=str(exc),
                             action="recording stopped; file cut at its last complete chunk")
            b = RecordBuilder()
            # the channel again: its first record may still sit in the unwritten chunk (allowed twice, identical)
            Channel(id=self._channels[EVENTS_STREAM], topic=EVENTS_STREAM, message_encoding=MESSAGE_ENCODING,
                    metadata=_EVENTS_CHANNEL_META, schema_id=0).write(b)
            Message(self._channels[EVENTS_STREAM], now, pack_frame(ev, now), now, self.events_seq % _UINT32).write(b)
            DataEnd(0).write(b)
            Footer(0, 0, 0).write(b)
            tail = b.end() + MCAP0_MAGIC
            try:
                _write_fully(self._fd, tail)
                ended = True
            except OSError:
                os.ftruncate(self._fd, good)  # not even room for the footer: recoverable as it is
            if self.settings.fsync:
                os.fsync(self._fd)
        except OSError as exc2:
            log.error("%s: cannot cut the file back after a failed write: %s", path, exc2)
        finally:
            os.close(self._fd)
            self._fd = -1
        ev = event_frame(reason, self.events_seq, time.monotonic_ns(), "alarm", file=str(path), error=str(exc),
                         action=("recording stopped; file closed at its last complete chunk" if ended else
                                 "recording stopped; run `walklab sessions recover` on the file"))
        self.events_seq += 1
        log.error("%s: %s; %s", path, exc, ev.meta["action"])
        if self.on_event is not None:
            self.on_event(ev)

    def close(self, reason: str = "stopped", stats: dict[str, Any] | None = None) -> None:
        """Write the last chunk, the ``walklab/recorder`` record and the index; idempotent."""
        if self._fd < 0:
            return
        self.stopped = True
        self.stop_reason = self.stop_reason or reason
        try:
            rec = {"stop_reason": self.stop_reason, "stop_unix_ns": str(time.time_ns()),
                   "frames": json.dumps({k: v.frames for k, v in self.counts.items()}),
                   "subscriber": json.dumps(stats or {})}
            self._writer.add_metadata("walklab/recorder", rec)
            self._end_part()
        except OSError as exc:
            self._fail(exc)


# ----------------------------------------------------------------------------------- the loop


def loss_stats(sub: Any) -> dict[str, dict[str, int]]:
    return {name: {"received": st.received, "dropped": st.dropped, "gaps": st.gaps,
                   "missed_at_join": st.missed_at_join, "malformed": st.malformed, "restarts": st.restarts}
            for name, st in sub.stats().items()}


#: Longest the recorder leaves frames waiting in its socket after it emptied it [ns]: they are
#: then read in batches (~14 frames at lab load) rather than one wake-up per frame; it adds at most
#: this to the time a frame spends before its chunk is written (chunk_ms + 10 ms <= 100 ms).
BATCH_NS = 10_000_000
#: longest final drain at a clean stop [s] (`drain`); `walklab run --record` waits this and more
DRAIN_CAP_S = 60.0
#: the drain ends after this long spent waiting on the socket without a frame published before
#: the stop [ns]; generous for a starved machine (a publisher's I/O thread descheduled for tenths
#: of a second), at the cost of this much wait once per clean stop
QUIET_NS = 1_000_000_000


def record(sub: Any, writer: SessionWriter, should_stop: Callable[[], bool], *,
           duration_s: float | None = None, tick: Callable[[], None] | None = None,
           progress: Callable[[SessionWriter], None] | None = None) -> str:
    """Receive frames from ``sub`` (a `daq.bus.Subscriber`) into ``writer`` until ``should_stop()``,
    ``duration_s`` passed, or the writer stopped (disk full); returns the stop reason.

    Every new loss seen by the subscriber (seq gap, frames missed at join, malformed) is recorded
    as a ``drops`` event. ``tick`` is called about every 50 ms (health), ``progress`` once a second.

    Frames of ``events/recorder`` from the bus are not written: the writer writes its own events
    there as it raises them, and a lab recorder publishes them too, so its subscriber (connected to
    every publisher of the lab, its own included) gets each one back; writing those would record
    every event twice, a second seq series in one channel.
    """
    end = None if duration_s is None else time.monotonic_ns() + round(duration_s * 1e9)
    reported: dict[str, tuple[int, int, int]] = {}
    next_check = next_progress = 0
    reason = "stopped"
    while True:
        if should_stop():
            break
        now = time.monotonic_ns()
        if end is not None and now >= end:
            reason = "duration"
            break
        due = writer.next_due_ns()
        wait_ns = 50_000_000 if due is None else max(0, min(due - now, 50_000_000))
        frame = sub.recv(timeout_s=wait_ns * 1e-9)
        n = 0
        while frame is not None:
            if frame.stream != EVENTS_STREAM:
                writer.write(frame, frame.t_recv)
            n += 1
            if n >= 200:  # give poll() a turn on a busy bus: chunks stay within chunk_ms
                break
            frame = sub.recv(timeout_s=0)
        now = time.monotonic_ns()
        writer.poll(now)
        if frame is None and n:
            # queue drained: let frames gather in the socket for a while instead of waking up
            # for each one (1400 wake-ups a second at lab load, each a few system calls)
            due = writer.next_due_ns()
            nap = BATCH_NS if due is None else min(BATCH_NS, due - now)
            if nap > 0:
                time.sleep(nap * 1e-9)
        if writer.stopped:
            return writer.stop_reason or "stopped"
        if now >= next_check:
            next_check = now + 200_000_000
            for name, st in loss_stats(sub).items():
                key = (st["dropped"], st["missed_at_join"], st["malformed"])
                if key != reported.get(name, (0, 0, 0)):
                    writer.event("drops", "warning", stream=name, dropped=st["dropped"], gaps=st["gaps"],
                                 missed_at_join=st["missed_at_join"], malformed=st["malformed"])
                    reported[name] = key
            if tick is not None:
                tick()
        if progress is not None and now >= next_progress:
            next_progress = now + 1_000_000_000
            progress(writer)
    drain(sub, writer)
    return reason


def drain(sub: Any, writer: SessionWriter, cap_s: float = DRAIN_CAP_S) -> None:
    """The final read at a clean stop: every frame published before the stop goes into the file,
    however far behind its socket the recorder has fallen (a CPU-starved machine queues seconds of
    frames there).

    Reads until the recorder has spent ``QUIET_NS`` (1 s) *waiting on the socket* without a frame
    published before the stop (``t_pub`` < the stop's time, host monotonic ns): the lab stopped and
    the socket is empty, or the lab goes on and every frame still arriving is new. Only time inside
    ``sub.recv`` counts, not the recorder's own work: a chunk write that stalled 0.975 s on a loaded
    machine used to pass a wall-clock 0.2 s window with no read at all, and the drain ended with
    86 % of a two-minute backlog unread. So each clean stop waits about 1 s once. Bounded by
    ``cap_s``; a cut drain is a ``drain_cut`` event (the frames left are lost, and said to be).
    Publishers on another host stamp ``t_pub`` on their own clock: a clock behind ours keeps the
    drain to ``cap_s``, one ahead ends it at the quiet rule.
    """
    stop_ns = time.monotonic_ns()
    cap_ns = stop_ns + round(cap_s * 1e9)
    waited_ns = 0  # time spent in recv since the last frame published before the stop
    while waited_ns < QUIET_NS:
        now = time.monotonic_ns()
        if now >= cap_ns:
            writer.event("drain_cut", "warning", waited_s=round(cap_s, 3),
                         action="frames published before the stop may be missing at the end of the file")
            return
        frame = sub.recv(timeout_s=min(QUIET_NS - waited_ns, cap_ns - now) * 1e-9)
        waited_ns += time.monotonic_ns() - now
        if frame is None:
            continue
        if frame.t_pub < stop_ns:
            waited_ns = 0
        if frame.stream != EVENTS_STREAM:
            writer.write(frame, frame.t_recv)
        writer.poll()


def parser() -> argparse.ArgumentParser:
    """Options shared by `run` and ``walklab record``."""
    p = argparse.ArgumentParser(prog="daq.record", add_help=False)
    add_options(p)
    return p


def add_options(p: argparse.ArgumentParser, output_required: bool = True) -> None:
    p.add_argument("-o", "--output", required=output_required, metavar="FILE.mcap", help="session file to write")
    p.add_argument("--stream", metavar="PATTERN", action="append", default=[],
                   help="stream name or prefix* to record (repeatable; default: every stream)")
    p.add_argument("--duration", metavar="S", type=float, help="stop after S seconds")
    p.add_argument("--chunk-ms", type=float, default=50.0,
                   help="longest time a frame waits in memory before it is written and fsync-ed (<= 100, default 50)")
    p.add_argument("--compression", choices=_COMPRESSIONS, default="zstd", help="chunk compression (default zstd)")
    p.add_argument("--no-fsync", action="store_true", help="do not fsync each chunk (a power cut may lose more)")
    p.add_argument("--rotate-mb", type=float, default=0.0, help="start a new file every this many MB (0: never)")
    p.add_argument("--rotate-min", type=float, default=0.0, help="start a new file every this many minutes (0: never)")
    p.add_argument("--reserve-mb", type=float, default=16.0,
                   help="stop cleanly when less than this is free on the disk (default 16)")


def settings_from(opts: argparse.Namespace) -> Settings:
    return Settings(chunk_ms=opts.chunk_ms, compression=opts.compression, fsync=not opts.no_fsync,
                    rotate_bytes=int(opts.rotate_mb * 2**20), rotate_s=opts.rotate_min * 60.0,
                    reserve_bytes=int(opts.reserve_mb * 2**20))


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Process entry point: record the lab's bus until stopped (options as ``walklab record``).

    A restarted recorder never overwrites: it continues in the next free part (`part_path`)."""
    opts = parser().parse_args(list(args))
    if opts.duration is not None and opts.duration <= 0:
        raise ValueError("--duration must be > 0 seconds")
    settings = settings_from(opts)
    sub = ctx.subscriber(opts.stream)

    def publish_event(frame: Frame) -> None:
        ctx.publisher.publish(frame.stream, frame.data, kind="event", rate_hz=0.0, channels=(), units=(),
                              t_host=frame.t_host, meta=frame.meta)

    writer = SessionWriter(opts.output, settings, metadata=lab_metadata(ctx.lab), streams=opts.stream,
                           on_event=publish_event)

    written = [0]

    def tick() -> None:
        total = sum(c.frames for c in writer.counts.values())
        ctx.health.count("recorder/frames", total - written[0])
        written[0] = total
        ctx.tick()

    reason = record(sub, writer, lambda: ctx.stopping, duration_s=opts.duration, tick=tick)
    writer.close(reason, loss_stats(sub))
    if writer.stop_reason in ("stopped", "duration"):
        return 0
    ctx.health.state = writer.stop_reason
    # status 2: the supervisor does not restart it (a full disk stays full); the alarm says why
    raise RecordingError(f"{writer.files[-1]}: recording stopped ({writer.stop_reason}); the file is readable")
