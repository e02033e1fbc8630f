"""Session files written by `daq.record`: read them (whole or cut short), describe, recover, export.

- `read` walks one or more session files (rotated parts in order) record by record with the
  ``mcap`` library's `StreamReader`, in file order (the order the recorder received the frames,
  so every stream's ``seq`` order is kept), and yields the frames of the chosen streams and time
  window. A file cut short (``kill -9``, power cut) is read up to its last complete record;
  `Scan.complete` says whether the file ended properly and `Scan.error` why not.
- `info` gathers, per stream, frames, samples, nominal and measured rate, duration, ``seq`` gaps and
  time gaps; the events (``events/*`` frames: recorder drops and alarms, device resets and clock
  faults, supervisor restarts) and the metadata records.
- `recover` rewrites a file, keeping every complete message and metadata record, with a fresh
  index (summary) and footer.
- `export_csv` writes one CSV per stream; C3D and Foxglove exports are in `daq.formats.c3d_write`
  and `daq.formats.foxglove` (driven by `export_c3d` and `export_foxglove` here).

Time: frame stamps are integer ns on the lab clock; "relative" times in reports and CSV files are
seconds since the first frame of the session (``t0``).
"""
from __future__ import annotations

import functools
import json
import math
import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from daq.frames import Frame
from daq.record import MESSAGE_ENCODING, PROFILE, MessageDecoder, part_path, plate_calibrations

#: Event names (``meta["event"]``) reported as clock faults by `info`, besides every frame of
#: ``events/clock`` (the dynamics service's clock_fault / clock_reset episodes).
CLOCK_EVENTS = ("clock_fault", "clock_reset", "clock_wrap", "clock_jump", "device_reset", "counter_wrap")


class SessionError(ValueError):
    """A file that is not a walklab session, or a request it cannot honour (message names it)."""


def session_parts(path: str | Path) -> list[Path]:
    """``path`` and its rotated parts (``STEM.001.mcap``, ...) that exist, in order."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such session file")
    parts = [p]
    k = 1
    while part_path(p, k).is_file():
        parts.append(part_path(p, k))
        k += 1
    return parts


def matches(stream: str, patterns: Sequence[str]) -> bool:
    """True if ``stream`` is selected by ``patterns`` (exact names or ``prefix*``; empty = all)."""
    if not patterns:
        return True
    return any(stream.startswith(p[:-1]) if p.endswith("*") else stream == p for p in patterns)


@dataclass
class Scan:
    """What reading a file found besides frames.

    Attributes: ``metadata`` {name: {key: value}} (later records of the same name update it),
    ``complete`` (the footer and end magic were read), ``error`` (why reading stopped early, or
    None), ``messages`` (complete messages read), ``bytes_read`` (offset after the last complete
    record), ``size`` (file size).
    """

    path: Path
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    complete: bool = False
    error: str | None = None
    messages: int = 0
    bytes_read: int = 0
    size: int = 0


class _Counted:
    """A read-only file wrapper that counts the bytes consumed (where the last complete record ended)."""

    def __init__(self, fh: Any):
        self.fh = fh
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        b = self.fh.read(n)
        self.pos += len(b)
        return b


def records(path: Path, scan: Scan) -> Iterator[Any]:
    """Every MCAP record of ``path`` in file order (chunks opened, CRCs checked), until the end or the
    first unreadable byte; fills ``scan`` (see `Scan`).

    The top-level records are framed here (mcap.dev/spec: opcode u8, length u64, body) and parsed by
    the mcap library's record classes, except two: MessageIndex records (the library's
    `StreamReader` parses them entry by entry, a third of a replay's reading time; an index of the
    chunk before it, rebuilt by any writer) are skipped unread, and Chunk records are split with
    `struct` (`_read_chunk`). The chunk CRCs and the DataEnd record's data-section CRC are checked.
    """
    import zlib

    from mcap.records import Message, Metadata

    scan.size = size = path.stat().st_size
    ended = "the file ends inside a record (never closed: killed, power cut or full disk)"
    with open(path, "rb") as fh:
        read = fh.read
        if read(8) != _MAGIC:
            scan.error = ended if size < 8 else "not an MCAP file (bad magic)"
            return
        crc = zlib.crc32(_MAGIC)
        pos = scan.bytes_read = 8
        while True:
            head = read(9)
            if len(head) < 9:
                scan.error = ended
                return
            op, length = _RECORD_HEAD.unpack(head)
            if length > size - pos - 9:
                scan.error = ended
                return
            body = read(length)
            try:
                recs = () if op == _OP_MESSAGE_INDEX else _top_record(op, body, crc)
            except Exception as exc:  # mcap, struct, zstd and lz4 raise their own types for damaged bytes
                scan.error = (f"{type(exc).__name__}: {exc}".strip(": ") or type(exc).__name__)[:300]
                return
            crc = zlib.crc32(body, zlib.crc32(head, crc))
            pos += 9 + length
            for r in recs:
                if isinstance(r, Metadata):
                    scan.metadata.setdefault(r.name, {}).update(r.metadata)
                elif isinstance(r, Message):
                    scan.messages += 1
                yield r
            if op == _OP_FOOTER:
                if read(8) != _MAGIC:
                    scan.error = "the file ends without its closing magic"
                    return
                scan.complete = True
                scan.bytes_read = pos + 8
                return
            scan.bytes_read = pos


_MAGIC = b"\x89MCAP0\r\n"
_OP_FOOTER, _OP_MESSAGE, _OP_CHUNK, _OP_MESSAGE_INDEX, _OP_DATA_END = 0x02, 0x05, 0x06, 0x07, 0x0F
_CHUNK_HEAD = struct.Struct("<QQQII")  # message start/end time, uncompressed size and CRC, compression length


def _top_record(op: int, body: bytes, crc: int) -> Sequence[Any]:
    """The record(s) of one top-level record body: a chunk's inner records, else the record itself
    (none for an opcode this mcap version does not know). ``crc``: the data section's CRC so far."""
    from io import BytesIO

    from mcap.data_stream import ReadDataStream
    from mcap import records as r

    if op == _OP_CHUNK:
        return _chunk_records(_read_chunk(body))
    if op == _OP_DATA_END:
        end = r.DataEnd(struct.unpack_from("<I", body)[0])
        if end.data_section_crc not in (0, crc):
            raise SessionError("data section CRC mismatch: the file is damaged")
        return (end,)
    stream = ReadDataStream(BytesIO(body))
    if op == _OP_MESSAGE:
        return (r.Message.read(stream, len(body)),)
    cls = _top_record_classes().get(op)
    return () if cls is None else (cls.read(stream),)


def _read_chunk(body: bytes) -> Any:
    """The Chunk record of a chunk record's body (mcap.dev/spec), its data sliced out once."""
    from mcap.records import Chunk

    start, end, size, ucrc, n = _CHUNK_HEAD.unpack_from(body)
    p = _CHUNK_HEAD.size
    compression = str(body[p:p + n], "utf-8")
    data_len, = struct.unpack_from("<Q", body, p + n)
    p += n + 8
    if data_len > len(body) - p:
        raise SessionError("a chunk declares more bytes than its record holds: the file is damaged")
    return Chunk(compression=compression, data=body[p:p + data_len], message_end_time=end,
                 message_start_time=start, uncompressed_crc=ucrc, uncompressed_size=size)


@functools.cache
def _top_record_classes() -> dict[int, Any]:
    """Record class by opcode of the top-level records `_top_record` parses with the mcap library."""
    from mcap import records as r
    from mcap.opcode import Opcode as O

    return {O.ATTACHMENT: r.Attachment, O.ATTACHMENT_INDEX: r.AttachmentIndex, O.CHANNEL: r.Channel,
            O.CHUNK_INDEX: r.ChunkIndex, O.FOOTER: r.Footer, O.HEADER: r.Header, O.METADATA: r.Metadata,
            O.METADATA_INDEX: r.MetadataIndex, O.SCHEMA: r.Schema, O.STATISTICS: r.Statistics,
            O.SUMMARY_OFFSET: r.SummaryOffset}


_MESSAGE_HEAD = struct.Struct("<HIQQ")  # channel_id, sequence, log_time, publish_time
_RECORD_HEAD = struct.Struct("<BQ")  # opcode, length


def _chunk_records(chunk: Any) -> list[Any]:
    """The records inside an MCAP chunk (mcap.dev/spec: Schema, Channel, Message), CRC checked.

    The mcap library's own chunk reader costs ~10 us per message through its stream object; this
    reads the message records with two struct calls (replay speed) and leaves the rare channel
    and schema records to the library's parsers.
    """
    import zlib
    from io import BytesIO

    from mcap.data_stream import ReadDataStream
    from mcap.opcode import Opcode
    from mcap.records import Channel, Message, Schema

    if chunk.compression == "zstd":
        import zstandard

        data = zstandard.decompress(chunk.data, chunk.uncompressed_size)
    elif chunk.compression == "lz4":
        import lz4.frame

        data = lz4.frame.decompress(chunk.data)
    elif chunk.compression == "":
        data = chunk.data
    else:
        raise SessionError(f"chunk compression {chunk.compression!r} is not supported")
    if chunk.uncompressed_crc != 0 and zlib.crc32(data) != chunk.uncompressed_crc:
        raise SessionError("chunk CRC mismatch: the file is damaged")
    out: list[Any] = []
    pos, n = 0, len(data)
    msg_op, chan_op, schema_op = int(Opcode.MESSAGE), int(Opcode.CHANNEL), int(Opcode.SCHEMA)
    while pos < n:
        op, length = _RECORD_HEAD.unpack_from(data, pos)
        pos += 9
        if op == msg_op:
            cid, seq, log_time, pub_time = _MESSAGE_HEAD.unpack_from(data, pos)
            out.append(Message(cid, log_time, data[pos + 22:pos + length], pub_time, seq))
        elif op in (chan_op, schema_op):
            stream = ReadDataStream(BytesIO(data[pos:pos + length]))
            out.append(Channel.read(stream) if op == chan_op else Schema.read(stream))
        pos += length
    return out


def messages(paths: str | Path | Sequence[str | Path], streams: Sequence[str] = (), *,
             start_ns: int | None = None, end_ns: int | None = None,
             scans: list[Scan] | None = None) -> Iterator[tuple[tuple[int, int], Any]]:
    """The MCAP messages of a session's walklab frames (its files in order), in file order, each with
    its channel's key (file index, channel id); selection and ``scans`` as `read`."""
    from mcap.records import Channel, Message

    if isinstance(paths, (str, Path)):
        paths = session_parts(paths)
    for k, path in enumerate(paths):
        scan = Scan(Path(path))
        if scans is not None:
            scans.append(scan)
        topics: dict[int, str | None] = {}
        for rec in records(Path(path), scan):
            if isinstance(rec, Channel):
                ok = rec.message_encoding == MESSAGE_ENCODING and matches(rec.topic, streams)
                topics[rec.id] = rec.topic if ok else None
            elif isinstance(rec, Message):
                if topics.get(rec.channel_id) is None:
                    continue
                if (start_ns is not None and rec.log_time < start_ns) or (end_ns is not None and rec.log_time >= end_ns):
                    continue
                yield (k, rec.channel_id), rec


def read(paths: str | Path | Sequence[str | Path], streams: Sequence[str] = (), *,
         start_ns: int | None = None, end_ns: int | None = None,
         scans: list[Scan] | None = None) -> Iterator[Frame]:
    """The frames of a session (its files in order), in file order.

    ``streams``: names or ``prefix*`` patterns (empty: all). ``start_ns``/``end_ns``: keep frames with
    ``start_ns <= t < end_ns`` (lab time of the frame's first sample). ``scans``: a list that gets
    one `Scan` per file read. A message that is not a walklab frame raises FrameError.
    """
    decoder = MessageDecoder()
    for key, m in messages(paths, streams, start_ns=start_ns, end_ns=end_ns, scans=scans):
        yield decoder.decode(m.data, key)


def scan(paths: str | Path | Sequence[str | Path]) -> list[Scan]:
    """Read every file of a session once for its metadata and state (no frame decoding)."""
    if isinstance(paths, (str, Path)):
        paths = session_parts(paths)
    out = []
    for p in paths:
        s = Scan(Path(p))
        for _ in records(Path(p), s):
            pass
        out.append(s)
    return out


def metadata(scans: Sequence[Scan]) -> dict[str, dict[str, str]]:
    """The metadata records of a session's files merged (later parts update earlier ones)."""
    out: dict[str, dict[str, str]] = {}
    for s in scans:
        for k, v in s.metadata.items():
            out.setdefault(k, {}).update(v)
    return out


# ----------------------------------------------------------------------------------- info


@dataclass
class StreamInfo:
    """One stream of a session: counts, times [ns, lab clock], rates [Hz], gaps."""

    stream: str
    kind: str
    rate_hz: float
    frames: int = 0
    samples: int = 0
    first_t: int = 0
    end_t: int = 0  # lab time just after the last sample
    first_seq: int = 0
    last_seq: int = 0
    seq_gaps: int = 0
    seq_missing: int = 0
    time_gaps: int = 0
    longest_gap_s: float = 0.0
    restarts: int = 0

    @property
    def duration_s(self) -> float:
        return (self.end_t - self.first_t) * 1e-9

    @property
    def measured_rate_hz(self) -> float:
        return self.samples / self.duration_s if self.duration_s > 0 else math.nan


@dataclass
class Info:
    """`info`'s report: files, metadata, streams, events and clock faults (times relative to ``t0``)."""

    files: list[Scan]
    metadata: dict[str, dict[str, str]]
    streams: dict[str, StreamInfo]
    events: list[dict[str, Any]]
    t0: int
    t_end: int

    @property
    def clock_faults(self) -> list[dict[str, Any]]:
        return [e for e in self.events if str(e.get("event", "")) in CLOCK_EVENTS or e["stream"] == "events/clock"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [{"path": str(s.path), "size": s.size, "complete": s.complete, "error": s.error,
                       "messages": s.messages} for s in self.files],
            "duration_s": (self.t_end - self.t0) * 1e-9,
            "streams": {k: {**{f: getattr(v, f) for f in ("kind", "rate_hz", "frames", "samples", "seq_gaps",
                                                          "seq_missing", "time_gaps", "longest_gap_s", "restarts")},
                            "start_s": (v.first_t - self.t0) * 1e-9, "duration_s": v.duration_s,
                            "measured_rate_hz": v.measured_rate_hz} for k, v in self.streams.items()},
            "events": self.events, "clock_faults": self.clock_faults,
            "metadata": {k: {kk: (vv if len(vv) <= 200 else f"<{len(vv)} characters>") for kk, vv in v.items()}
                         for k, v in self.metadata.items()},
        }


def info(paths: str | Path | Sequence[str | Path], gap_factor: float = 2.5) -> Info:
    """Describe a session. A time gap is a frame starting more than ``gap_factor`` sample periods
    (and 1 ms) after where the previous frame of its stream ended."""
    scans: list[Scan] = []
    streams: dict[str, StreamInfo] = {}
    events: list[tuple[int, dict[str, Any]]] = []
    t0 = t_end = None
    for f in read(paths, scans=scans):
        st = streams.get(f.stream)
        n = f.samples
        period = 1e9 / f.rate_hz if f.rate_hz > 0 else 0.0
        end = f.t + round(n * period)
        if st is None:
            st = streams[f.stream] = StreamInfo(f.stream, f.kind, f.rate_hz, first_t=f.t, end_t=f.t,
                                                first_seq=f.seq, last_seq=f.seq - 1)
        else:
            if f.seq > st.last_seq + 1:
                st.seq_gaps += 1
                st.seq_missing += f.seq - st.last_seq - 1
            elif f.seq <= st.last_seq:
                st.restarts += 1
            if period and f.t - st.end_t > max(gap_factor * period, 1e6):
                st.time_gaps += 1
                st.longest_gap_s = max(st.longest_gap_s, (f.t - st.end_t) * 1e-9)
        st.frames += 1
        st.samples += n
        st.last_seq = f.seq
        st.end_t = max(st.end_t, end)
        t0 = f.t if t0 is None else min(t0, f.t)
        t_end = end if t_end is None else max(t_end, end)
        if f.kind == "event":
            events.append((f.t, {"stream": f.stream, "seq": f.seq, **f.meta}))
    t0 = t0 or 0
    ev = [{"t_s": (t - t0) * 1e-9, **e} for t, e in sorted(events, key=lambda x: x[0])]
    return Info(scans, metadata(scans), streams, ev, t0, t_end or t0)


def format_info(rep: Info) -> str:
    """A human-readable report of `info`."""
    lines = []
    for s in rep.files:
        state = "complete" if s.complete else f"CUT SHORT ({s.error}); `walklab sessions recover` rebuilds its index"
        lines.append(f"{s.path}: {s.size / 2**20:.2f} MB, {s.messages} messages, {state}")
    rec = rep.metadata.get("walklab/recording", {})
    if rec:
        lines.append(f"recorded {rec.get('start_utc', '?')} on {rec.get('host', '?')} by walklab "
                     f"{rec.get('version', '?')}; streams asked for: {rec.get('streams', '?')}")
    lab = rep.metadata.get("walklab/lab", {})
    if lab:
        lines.append(f"lab {lab.get('name', '?')!r} ({lab.get('path', '?')})")
    plates = rep.metadata.get("walklab/plates", {})
    if plates:
        lines.append(f"plate calibrations: {', '.join(sorted(plates))}")
    models = rep.metadata.get("walklab/models", {})
    if models:
        lines.append(f"models: {', '.join(sorted(models))}")
    stop = rep.metadata.get("walklab/recorder", {})
    lines.append(f"stopped: {stop.get('stop_reason', 'no clean stop recorded')}")
    lines.append(f"duration {(rep.t_end - rep.t0) * 1e-9:.3f} s, {len(rep.streams)} streams")
    cols = ("STREAM", "KIND", "FRAMES", "SAMPLES", "RATE_HZ", "MEASURED_HZ", "START_S", "DURATION_S",
            "SEQ_GAPS", "MISSING", "TIME_GAPS", "LONGEST_GAP_S")
    rows = [cols]
    for name in sorted(rep.streams):
        v = rep.streams[name]
        rows.append((name, v.kind, str(v.frames), str(v.samples), f"{v.rate_hz:g}", f"{v.measured_rate_hz:.1f}",
                     f"{(v.first_t - rep.t0) * 1e-9:.3f}", f"{v.duration_s:.3f}", str(v.seq_gaps),
                     str(v.seq_missing), str(v.time_gaps), f"{v.longest_gap_s:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    lines.append(f"events: {len(rep.events)}" + ("" if rep.events else " (none)"))
    for e in rep.events:
        fields = {k: v for k, v in e.items() if k not in ("t_s", "stream", "seq", "event")}
        lines.append(f"  {e['t_s']:10.3f} s  {e['stream']}  {e.get('event', '?')}  "
                     + json.dumps(fields, default=str)[:200])
    lines.append(f"clock faults: {len(rep.clock_faults)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- recover


@dataclass
class Recovery:
    """What `recover` kept: messages, metadata records, bytes of the input read; the input state."""

    output: Path
    messages: int
    metadata: int
    bytes_kept: int
    size: int
    was_complete: bool
    error: str | None


def recover(path: str | Path, output: str | Path | None = None) -> Recovery:
    """Rewrite a session file with every complete message and metadata record and a fresh index.

    ``output`` None: replace ``path`` (through a temporary file in the same folder and an atomic
    rename, so an interruption never leaves neither). Channels, schemas, log/publish times and
    sequence numbers are kept; attachments too.
    """
    from mcap.records import Attachment, Channel, Message, Metadata, Schema
    from mcap.writer import CompressionType, Writer

    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such session file")
    dst = Path(output) if output is not None else src
    s = Scan(src)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    n_meta = 0
    try:
        with os.fdopen(fd, "wb") as out:
            w = Writer(out, chunk_size=1 * 2**20, compression=CompressionType.ZSTD)
            w.start(profile=PROFILE, library="walklab sessions recover")
            schemas: dict[int, int] = {0: 0}
            channels: dict[int, int] = {}
            for rec in records(src, s):
                if isinstance(rec, Schema):
                    if rec.id not in schemas:
                        schemas[rec.id] = w.register_schema(rec.name, rec.encoding, rec.data)
                elif isinstance(rec, Channel):
                    if rec.id not in channels:
                        channels[rec.id] = w.register_channel(rec.topic, rec.message_encoding,
                                                              schemas.get(rec.schema_id, 0), rec.metadata)
                elif isinstance(rec, Message):
                    if rec.channel_id in channels:
                        w.add_message(channels[rec.channel_id], rec.log_time, rec.data, rec.publish_time,
                                      rec.sequence)
                elif isinstance(rec, Metadata):
                    w.add_metadata(rec.name, rec.metadata)
                    n_meta += 1
                elif isinstance(rec, Attachment):
                    w.add_attachment(rec.create_time, rec.log_time, rec.name, rec.media_type, rec.data)
            if s.messages == 0 and not channels:
                raise SessionError(f"{src}: no readable MCAP record ({s.error or 'empty file'})")
            w.finish()
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return Recovery(dst, s.messages, n_meta, s.bytes_read, s.size, s.complete, s.error)


# ----------------------------------------------------------------------------------- CSV


def stream_file_name(stream: str) -> str:
    """A file name for a stream (``forceplate/FP1`` -> ``forceplate__FP1``)."""
    return stream.replace("/", "__")


def export_csv(paths: str | Path | Sequence[str | Path], out_dir: str | Path, streams: Sequence[str] = (),
               progress: Callable[[int], None] | None = None) -> dict[str, Path]:
    """One CSV per stream in ``out_dir``: columns ``t_ns`` (lab time of the sample, integer ns),
    ``t_s`` (seconds since the session's first frame), ``seq``, then one column per channel named
    ``CHANNEL [UNIT]``, one row per sample (NaN written as empty). Event streams get ``t_ns, t_s,
    seq, meta`` (JSON). A stream whose channels change (a health stream gaining a subject, a new
    marker epoch) continues in ``STREAM.2.csv``, ``STREAM.3.csv``... with its new header. Returns
    {stream (or ``stream#k`` for the k-th layout): file}. ``progress`` is called with frames done."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[tuple, Any] = {}
    layouts: dict[str, int] = {}
    result: dict[str, Path] = {}
    t0 = None
    try:
        for i, f in enumerate(read(paths, streams)):
            t0 = f.t if t0 is None else t0
            key = (f.stream, f.channels, f.units)
            fh = files.get(key)
            if fh is None:
                k = layouts[f.stream] = layouts.get(f.stream, 0) + 1
                name = f.stream if k == 1 else f"{f.stream}#{k}"
                result[name] = out / (f"{stream_file_name(f.stream)}.csv" if k == 1 else
                                      f"{stream_file_name(f.stream)}.{k}.csv")
                fh = files[key] = open(result[name], "w", encoding="utf-8", newline="")
                cols = ["t_ns", "t_s", "seq"] + ([f"{c} [{u}]" for c, u in zip(f.channels, f.units)]
                                                 if f.kind != "event" else ["meta"])
                fh.write(",".join(_csv_cell(c) for c in cols) + "\n")
            if f.kind == "event":
                fh.write(f"{f.t},{(f.t - t0) * 1e-9:.9f},{f.seq},{_csv_cell(json.dumps(f.meta, default=str))}\n")
            else:
                times = f.sample_times() if f.samples > 1 else np.array([f.t])
                for t, row in zip(times.tolist(), f.data.tolist()):
                    cells = ["" if isinstance(v, float) and math.isnan(v) else repr(v) for v in row]
                    fh.write(f"{t},{(t - t0) * 1e-9:.9f},{f.seq}," + ",".join(cells) + "\n")
            if progress is not None and i % 1000 == 0:
                progress(i)
    finally:
        for fh in files.values():
            fh.close()
    if not result:
        raise SessionError(f"no frames of {list(streams) or 'any stream'} in the session")
    return result


def _csv_cell(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


# ----------------------------------------------------------------------------------- gathering


@dataclass
class StreamData:
    """All samples of one stream on a regular grid of its own rate (for exports).

    ``t0``: lab time of sample 0 [ns]; ``data`` (N, channels) with NaN rows where frames are
    missing; ``extra`` per extra buffer (N, ...) likewise; ``channels``, ``units``, ``kind``.
    """

    stream: str
    kind: str
    rate_hz: float
    channels: tuple[str, ...]
    units: tuple[str, ...]
    t0: int
    data: np.ndarray
    extra: dict[str, np.ndarray]


def gather(paths: str | Path | Sequence[str | Path], streams: Sequence[str] = ()) -> dict[str, StreamData]:
    """Every regular (rate > 0) stream of the session as one array on its sample grid: sample ``k``
    at ``t0 + round(k * 1e9 / rate_hz)``; frames are placed by their ``t``, missing ones leave NaN."""
    frames: dict[str, list[Frame]] = {}
    for f in read(paths, streams):
        if f.rate_hz > 0 and f.kind != "event":
            frames.setdefault(f.stream, []).append(f)
    out = {}
    for name, fs in frames.items():
        first = fs[0]
        rate = first.rate_hz
        idx = [round((f.t - first.t) * rate / 1e9) for f in fs]
        n = max(i + f.samples for i, f in zip(idx, fs))
        if min(idx) < 0:
            raise SessionError(f"stream {name!r}: frames go back in time (a device reset); export a time window")
        data = np.full((n, first.data.shape[1]), np.nan)
        extra = {k: np.full((n,) + v.shape[1:], np.nan if v.dtype.kind == "f" else 0, dtype=v.dtype)
                 for k, v in first.extra.items()}
        for i, f in zip(idx, fs):
            if f.channels != first.channels:
                raise SessionError(f"stream {name!r}: its channels change at seq {f.seq} "
                                   f"({len(first.channels)} -> {len(f.channels)}); export a time window or other streams")
            data[i:i + f.samples] = f.data
            for k, v in f.extra.items():
                if k in extra and v.shape[1:] == extra[k].shape[1:]:
                    extra[k][i:i + v.shape[0]] = v
        out[name] = StreamData(name, first.kind, rate, first.channels, first.units, first.t, data, extra)
    return out


def stream_kinds(paths: Sequence[Path]) -> dict[str, str]:
    """``{stream: kind}`` of every channel of a session's files (from the MCAP channel metadata)."""
    from mcap.records import Channel

    out: dict[str, str] = {}
    for p in paths:
        for rec in records(Path(p), Scan(Path(p))):
            if isinstance(rec, Channel):
                out.setdefault(rec.topic, rec.metadata.get("kind", ""))
    return out


def marker_labels(channels: Sequence[str]) -> tuple[str, ...]:
    """Labels of a marker stream's channels ``LABEL:x, LABEL:y, LABEL:z, ...`` (docs/devices.md);
    SessionError if the channels are not in that layout."""
    if len(channels) % 3:
        raise SessionError(f"marker channels {list(channels)[:6]}...: expected LABEL:x, LABEL:y, LABEL:z triples")
    labels = []
    for i in range(0, len(channels), 3):
        label = channels[i].rpartition(":")[0]
        if [channels[i], channels[i + 1], channels[i + 2]] != [f"{label}:x", f"{label}:y", f"{label}:z"] or not label:
            raise SessionError(f"marker channels {channels[i:i + 3]}: expected {label or 'LABEL'}:x, :y, :z")
        labels.append(label)
    return tuple(labels)


def export_c3d(paths: str | Path | Sequence[str | Path], out: str | Path, *, markers: str | None = None,
               plates: Sequence[str] | None = None, subject: dict[str, Any] | None = None) -> Path:
    """Write a session's markers and force plates as a C3D file (`daq.formats.c3d_write`).

    ``markers``: the marker stream (default: the only ``kind = "markers"`` stream, if any);
    ``plates``: plate streams (default: every stream with a calibration in ``walklab/plates``).
    The streams are cut to the time span they all cover, on the grid of the marker stream (point
    frames) and of the plates (analog samples; one rate for all plates, an integer multiple of the
    marker rate). Missing samples stay NaN (marker gaps; analog NaN). Events (``events/*`` frames
    in the span) become C3D events labelled by their ``event`` name.
    """
    from daq.formats.c3d import Analogs, Markers
    from daq.formats.c3d_write import C3DPlate, Event, write
    from dynamics import forceplate as fp

    parts = session_parts(paths) if isinstance(paths, (str, Path)) else list(paths)
    cal = plate_calibrations(metadata(scan(parts)))
    kinds = stream_kinds(parts)
    wanted = ([markers] if markers else [k for k, v in kinds.items() if v == "markers"]) + \
        list(plates if plates is not None else cal)
    if not wanted:
        raise SessionError("nothing to export to C3D: no marker stream and no force plate with a calibration")
    data = gather(parts, wanted)
    if markers is None:
        found = [k for k, v in data.items() if v.kind == "markers"]
        if len(found) > 1:
            raise SessionError(f"several marker streams ({', '.join(found)}): choose one with --markers")
        markers = found[0] if found else None
    elif markers not in data:
        raise SessionError(f"no marker stream {markers!r} in the session (streams: {', '.join(sorted(data))})")
    plate_streams = [p for p in (plates if plates is not None else sorted(cal)) if p in data]
    for p in plate_streams:
        if p not in cal:
            raise SessionError(f"stream {p!r} has no plate calibration in the session's walklab/plates metadata")
    if markers is None and not plate_streams:
        raise SessionError("nothing to export to C3D: no marker stream and no force plate with a calibration")
    used = ([markers] if markers else []) + plate_streams
    a_rates = {data[p].rate_hz for p in plate_streams}
    if len(a_rates) > 1:
        raise SessionError(f"plates at different rates {sorted(a_rates)} Hz cannot share a C3D file")
    a_rate = a_rates.pop() if a_rates else None
    p_rate = data[markers].rate_hz if markers else a_rate
    ratio = round(a_rate / p_rate) if a_rate else 1
    start = max(data[s].t0 for s in used)
    end = min(data[s].t0 + round(len(data[s].data) * 1e9 / data[s].rate_hz) for s in used)
    n_p = int((end - start) * p_rate // 1e9)
    if n_p <= 0:
        raise SessionError(f"the streams {', '.join(used)} do not overlap in time")

    def cut(s: StreamData, n: int) -> slice:
        i0 = round((start - s.t0) * s.rate_hz / 1e9)
        return slice(i0, i0 + n)

    mk = res = None
    if markers:
        s = data[markers]
        labels = marker_labels(s.channels)
        sl = cut(s, n_p)
        pos = s.data[sl].reshape(-1, len(labels), 3)
        n_p = min(n_p, len(pos))
        mk = Markers(labels, pos[:n_p], p_rate)
        r = s.extra.get("residual")
        res = None if r is None else np.asarray(r[sl][:n_p], float)
    an, c3d_plates = None, []
    if plate_streams:
        cols, labels, units = [], [], []
        for p in plate_streams:
            s = data[p]
            d = cal[p]
            plate = fp.Plate(type=d["type"], corners=np.array(d["corners"]), origin=np.array(d["origin"]),
                             cal_matrix=None if d.get("cal_matrix") is None else np.array(d["cal_matrix"]),
                             name=d.get("name", p))
            k0 = len(labels)
            c3d_plates.append(C3DPlate(plate, tuple(range(k0, k0 + len(s.channels)))))
            cols.append(s.data[cut(s, n_p * ratio)])
            labels += [f"{plate.name}_{c}" for c in s.channels]
            units += list(s.units)
        n_a = min(len(c) for c in cols) // ratio
        n_p = min(n_p, n_a)
        an = Analogs(tuple(labels), tuple(units), np.hstack([c[:n_p * ratio] for c in cols]), a_rate)
        if mk is not None:
            mk = Markers(mk.labels, mk.positions[:n_p], p_rate)
            res = None if res is None else res[:n_p]
    events = [Event((f.t - start) * 1e-9, str(f.meta.get("event", f.stream)), "General", f.stream)
              for f in read(parts, ["events/*"], start_ns=start, end_ns=start + round(n_p * 1e9 / p_rate))]
    return write(out, markers=mk, residuals=res, analogs=an, plates=c3d_plates, events=events, subject=subject)


def iter_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Every file of the sessions named (each with its rotated parts)."""
    out: list[Path] = []
    for p in paths:
        out.extend(session_parts(p))
    return out


