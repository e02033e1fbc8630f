"""The frame schema: one ZeroMQ multipart message ``[topic, header, *buffers]`` per block of samples.

- ``topic``: the UTF-8 stream name (``forceplate/FP1``); equal to ``header["stream"]``.
- ``header``: a msgpack map (schema version ``v`` = 1)::

      {"v": 1, "stream": str, "kind": str, "seq": int, "t_device": int | None, "t_host": int,
       "t": int, "t_pub": int, "rate_hz": float, "channels": [str], "units": [str],
       "buffers": [{"name": str, "dtype": str, "shape": [int]}], "meta": {str: value}}

- ``buffers``: raw little-endian C-order array bytes, one message part per entry of
  ``header["buffers"]``, in that order. Buffer 0 is always ``"data"``, shape
  ``(samples, len(channels))``; further named buffers carry per-frame extras (e.g. a device's raw
  sample counters).

Clock domains (all integer nanoseconds, all stamps refer to the block's *first* sample, row 0):
``t_device`` is the device clock (``None`` when the device has none); ``t_host`` the host
``time.monotonic_ns()`` attributed to the sample on arrival; ``t`` the lab time after clock
synchronisation (equal to ``t_host`` when no correction is known); ``t_pub`` the host monotonic time
at which the frame was handed to ZeroMQ (for latency measurement). Sample ``i`` of a block is at
``t + round(i * 1e9 / rate_hz)`` (sample counts, not wall-clock arithmetic, define times within a
block), or ``t + round(i * 1e9 / meta["rate_lab_hz"])`` when a daemon's clock fit gives the device's
rate on the lab clock (`Frame.sample_times`); ``rate_hz`` is 0 for irregular streams (events, health).

No pickle, ever: decoding accepts only the numeric dtypes of ``DTYPES`` and validates the whole
header and every byte count before allocating anything; every violation is a `FrameError` naming
the field, the bad value and what was expected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack
import numpy as np

SCHEMA_VERSION = 1

#: Accepted buffer dtypes (numpy ``dtype.str``): little-endian numeric types only.
DTYPES = frozenset({
    "|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8",
    "<f2", "<f4", "<f8", "<c8", "<c16",
})
_NP_DTYPES = {s: np.dtype(s) for s in DTYPES}
#: Largest buffer accepted by `decode` (bytes); a larger declared size is rejected before any allocation.
MAX_BUFFER_BYTES = 256 * 2**20
#: Largest msgpack header accepted by `decode` (bytes); a health frame of a process watching
#: 100 streams has about 1000 channels (~40 kB of names and units).
MAX_HEADER_BYTES = 2**20
#: Most extra buffers a frame may carry besides ``data``.
MAX_BUFFERS = 16
MAX_NDIM = 8
MAX_NAME_BYTES = 255

_INT64 = 2**63
_UINT64 = 2**64
_HEADER_KEYS = frozenset({
    "v", "stream", "kind", "seq", "t_device", "t_host", "t", "t_pub", "rate_hz", "channels",
    "units", "buffers", "meta",
})
_BUFFER_KEYS = frozenset({"name", "dtype", "shape"})


class FrameError(ValueError):
    """A frame that cannot be encoded or decoded; the message names the field and the reason."""


@dataclass
class Frame:
    """One block of samples of one stream.

    Attributes:
        stream: stream name, e.g. ``"forceplate/FP1"`` (UTF-8, 1..255 bytes, no NUL: topics
            starting with NUL are bus control messages).
        kind: what the samples are, e.g. ``"force"``, ``"markers"``, ``"health"``.
        seq: per-stream frame counter, 0 for the first frame, +1 per frame (0 <= seq < 2**64).
        t_device: device clock of sample 0 [ns], or None when the device has no clock.
        t_host: host monotonic clock of sample 0 [ns].
        t: lab time of sample 0 after clock synchronisation [ns].
        rate_hz: nominal sample rate [Hz]; 0 for irregular streams.
        channels: one name per column of ``data``.
        units: one SI unit string per channel (``"N"``, ``"N*m"``, ``"m"``, ``"rad"``, ``"1"``).
        data: array of shape (samples, channels), any dtype of `DTYPES` (numpy native order is
            fine: it is little-endian on every supported machine; big-endian arrays are converted).
        extra: further named arrays sent as raw buffers (any shape, dtype in `DTYPES`).
        meta: small msgpack-able map (str keys; str/int/float/bool/None/bytes/list/map values).
        t_pub: host monotonic clock when published [ns] (set by `daq.bus.Publisher`).
        t_recv: host monotonic clock when received [ns] (set by `daq.bus.Subscriber`; not on the wire).
    """

    stream: str
    kind: str
    seq: int
    t_device: int | None
    t_host: int
    t: int
    rate_hz: float
    channels: tuple[str, ...]
    units: tuple[str, ...]
    data: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    t_pub: int = 0
    t_recv: int | None = None

    @property
    def samples(self) -> int:
        """Number of samples (rows) in the block."""
        return int(self.data.shape[0])

    def sample_times(self, clock: str = "t") -> np.ndarray:
        """Times of every sample of the block [ns], shape (samples,), int64.

        ``times[i] = T + round(i * 1e9 / rate)`` with ``T`` the frame stamp named by ``clock``
        (``"t"``, ``"t_host"`` or ``"t_device"``) and ``rate`` = ``rate_hz``, except on the lab
        clock (``"t"``) of a frame whose ``meta["rate_lab_hz"]`` gives the device's rate as the
        clock fit estimates it on the lab clock (`daq.context.serve`): a device clock 100 ppm off
        moves the last sample of a 1 s block by 100 us. Raises FrameError for irregular streams
        (``rate_hz == 0``) with more than one sample, or a missing device clock.
        """
        if clock not in ("t", "t_host", "t_device"):
            raise FrameError(f"sample_times: clock must be 't', 't_host' or 't_device', got {clock!r}")
        t0 = getattr(self, clock)
        if t0 is None:
            raise FrameError(f"sample_times: stream {self.stream!r} has no {clock}")
        n = self.samples
        if n > 1 and self.rate_hz <= 0:
            raise FrameError(f"sample_times: stream {self.stream!r} is irregular (rate_hz=0)")
        rate = self.rate_hz
        if clock == "t":
            lab_rate = self.meta.get("rate_lab_hz")
            if type(lab_rate) is float and math.isfinite(lab_rate) and lab_rate > 0:
                rate = lab_rate
        period = 1e9 / rate if n > 1 else 0.0
        return t0 + np.rint(np.arange(n) * period).astype(np.int64)


# ----------------------------------------------------------------------------------- encoding

# The dtype string of every accepted (little-endian) numpy dtype: a dict look-up is ~4x cheaper
# than ``dtype.str``, which formats a new string on every call.
_DTYPE_CODES = {dt: s for s, dt in _NP_DTYPES.items()}


def _wire_array(name: str, arr: Any) -> tuple[np.ndarray, str]:
    """The array as it goes on the wire (little-endian, C-contiguous; a copy only if needed) and its dtype string."""
    if not isinstance(arr, np.ndarray):
        raise FrameError(f"buffer {name!r}: expected a numpy array, got {type(arr).__name__}")
    dt = arr.dtype
    code = _DTYPE_CODES.get(dt)
    if code is None:
        if dt.byteorder == ">":
            dt = dt.newbyteorder("<")
        code = dt.str
        if code not in DTYPES:
            raise FrameError(f"buffer {name!r}: dtype {arr.dtype.str!r} is not one of {sorted(DTYPES)}")
    if arr.ndim > MAX_NDIM:
        raise FrameError(f"buffer {name!r}: {arr.ndim} dimensions, at most {MAX_NDIM} allowed")
    if arr.nbytes > MAX_BUFFER_BYTES:
        raise FrameError(f"buffer {name!r}: {arr.nbytes} bytes exceeds MAX_BUFFER_BYTES={MAX_BUFFER_BYTES}")
    if dt is not arr.dtype or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=dt).reshape(arr.shape)  # reshape: keeps a 0-d array 0-d
    return arr, code


def _static_header(frame: Frame, buffers: Sequence[tuple[str, np.ndarray, str]]) -> dict[str, Any]:
    """The fields of ``frame``'s header that stay the same from frame to frame of a stream."""
    rate = frame.rate_hz
    return {
        "v": SCHEMA_VERSION,
        "stream": frame.stream,
        "kind": frame.kind,
        "rate_hz": float(rate) if isinstance(rate, (int, float, np.number)) else rate,
        "channels": list(frame.channels) if isinstance(frame.channels, (list, tuple)) else frame.channels,
        "units": list(frame.units) if isinstance(frame.units, (list, tuple)) else frame.units,
        "buffers": [{"name": n, "dtype": code, "shape": list(a.shape)} for n, a, code in buffers],
    }


def _dynamic_header(frame: Frame) -> dict[str, Any]:
    """The fields of ``frame``'s header that change with every frame (numpy integers made ints)."""
    h = {"seq": frame.seq, "t_device": frame.t_device, "t_host": frame.t_host, "t": frame.t,
         "t_pub": frame.t_pub, "meta": frame.meta}
    for key in ("seq", "t_device", "t_host", "t", "t_pub"):
        if isinstance(h[key], np.integer):
            h[key] = int(h[key])
    return h


# Packed static header parts already validated, by layout key (stream, kind, rate, channels, units,
# buffer names/dtypes/shapes): a stream's header is packed and checked in full once, after which a
# frame costs the packing and checking of its six changing fields only.
_PREFIXES: dict[tuple, bytes] = {}
_MAX_PREFIXES = 4096
# msgpack fixmap markers: maps of up to 15 entries are one byte 0x80 | n, then the key/value pairs,
# so a header is the marker of 13 entries, the static pairs and the dynamic pairs concatenated.
_FIXMAP = 0x80
_N_STATIC, _N_DYNAMIC = 7, 6
_STATIC_ORDER = ("v", "stream", "kind", "rate_hz", "channels", "units", "buffers")  # `_static_header`'s
assert _N_STATIC + _N_DYNAMIC == len(_HEADER_KEYS) <= 15


def _packb(obj: Any, stream: Any) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"stream {stream!r}: header not encodable with msgpack: {exc}") from None


def encode(frame: Frame) -> list[bytes | memoryview]:
    """The multipart message ``[topic, header, data, *extra]`` of ``frame``.

    Zero-copy: contiguous little-endian arrays are returned as memoryviews on their own memory
    (send them with ``copy=False`` and do not modify them until ZeroMQ has sent them); others are
    converted once. Raises FrameError for anything `decode` would reject.
    """
    data, extra = frame.data, frame.extra
    if not isinstance(data, np.ndarray) or data.ndim != 2:
        shape = getattr(data, "shape", None)
        raise FrameError(f"stream {frame.stream!r}: data must be a 2-D array (samples, channels), got shape {shape}")
    if not isinstance(extra, dict):
        raise FrameError(f"stream {frame.stream!r}: extra must be a dict of arrays, got {type(extra).__name__}")
    if len(extra) > MAX_BUFFERS:
        raise FrameError(f"stream {frame.stream!r}: {len(extra)} extra buffers, at most {MAX_BUFFERS}")
    buffers = [("data", *_wire_array("data", data))]
    for name, arr in extra.items():
        buffers.append((name, *_wire_array(name, arr)))
    channels, units = frame.channels, frame.units
    key = (frame.stream, frame.kind, frame.rate_hz, tuple(channels) if type(channels) is list else channels,
           tuple(units) if type(units) is list else units, tuple([(n, c, a.shape) for n, a, c in buffers]))
    try:
        prefix = _PREFIXES.get(key)
    except TypeError:  # unhashable junk in a field: not cached; the full check below names it
        key, prefix = None, None
    dynamic = _dynamic_header(frame)
    if prefix is None:
        static = _static_header(frame, buffers)
        _check_header({**static, **dynamic})
        prefix = bytes([_FIXMAP | (_N_STATIC + _N_DYNAMIC)]) + _packb(static, frame.stream)[1:]
        if key is not None:
            if len(_PREFIXES) >= _MAX_PREFIXES:
                _PREFIXES.clear()
            _PREFIXES[key] = prefix
    else:
        _check_dynamic(dynamic)
    packed = prefix + _packb(dynamic, frame.stream)[1:]
    if len(packed) > MAX_HEADER_BYTES:
        raise FrameError(f"stream {frame.stream!r}: header is {len(packed)} bytes, at most {MAX_HEADER_BYTES}")
    parts: list[bytes | memoryview] = [frame.stream.encode("utf-8"), packed]
    for _, a, _ in buffers:
        parts.append(a.data.cast("B") if a.size else b"")  # memoryview.cast refuses zero-size arrays
    return parts


# ----------------------------------------------------------------------------------- decoding


def _check_name(what: str, value: Any) -> None:
    if type(value) is not str:
        raise FrameError(f"header: {what} must be a string, got {type(value).__name__}")
    n = len(value.encode("utf-8", "surrogatepass"))
    if not 1 <= n <= MAX_NAME_BYTES or "\x00" in value:
        raise FrameError(f"header: {what} {value[:40]!r} must be 1..{MAX_NAME_BYTES} bytes without NUL")


def _check_meta(value: Any, path: str, depth: int = 0) -> None:
    if depth > 8:
        raise FrameError(f"header: {path} nested deeper than 8 levels")
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        if type(value) is int and not -_INT64 <= value < _UINT64:
            raise FrameError(f"header: {path} integer {value} out of 64-bit range")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_meta(v, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise FrameError(f"header: {path} key {k!r} must be a string")
            _check_meta(v, f"{path}.{k}", depth + 1)
        return
    raise FrameError(f"header: {path} has unsupported type {type(value).__name__}")


def _check_dynamic(h: dict) -> None:
    """Validate the fields that change with every frame: seq, the four stamps, meta."""
    # `type(x) is int` on purpose: msgpack booleans are ints to isinstance() and must not pass
    seq = h["seq"]
    if type(seq) is not int or not 0 <= seq < _UINT64:
        raise FrameError(f"header: seq must be an integer in [0, 2**64), got {seq!r}")
    for key in ("t_host", "t", "t_pub"):
        if type(h[key]) is not int or not -_INT64 <= h[key] < _INT64:
            raise FrameError(f"header: {key} must be an int64 nanosecond stamp, got {h[key]!r}")
    t_device = h["t_device"]
    if t_device is not None and (type(t_device) is not int or not -_INT64 <= t_device < _INT64):
        raise FrameError(f"header: t_device must be an int64 nanosecond stamp or nil, got {t_device!r}")
    meta = h["meta"]
    if type(meta) is not dict:
        raise FrameError(f"header: meta must be a map, got {type(meta).__name__}")
    if meta:
        _check_meta(meta, "meta")


class _Layout:
    """What a validated header says about a stream's layout, kept to validate its next frames cheaply.

    ``kind``, ``channels``, ``units``, ``buffers`` are private copies of the header's values (for
    comparison); ``channels_t``, ``units_t`` the tuples handed to Frames; ``specs`` per buffer
    (name, numpy dtype, shape, byte count).
    """

    __slots__ = ("kind", "channels", "units", "buffers", "channels_t", "units_t", "specs")

    def __init__(self, h: dict):
        self.kind = h["kind"]
        self.channels, self.units = list(h["channels"]), list(h["units"])
        self.buffers = [{"name": b["name"], "dtype": b["dtype"], "shape": list(b["shape"])} for b in h["buffers"]]
        self.channels_t, self.units_t = tuple(self.channels), tuple(self.units)
        self.specs = []
        for b in self.buffers:
            dtype, shape = _NP_DTYPES[b["dtype"]], tuple(b["shape"])
            self.specs.append((b["name"], dtype, shape, math.prod(shape) * dtype.itemsize))

    def matches(self, h: dict) -> bool:
        """True if ``h`` has exactly this layout (ints stay ints: 5.0 and True equal 5 and 1 in Python)."""
        channels, units, buffers = h["channels"], h["units"], h["buffers"]
        # exact list types first: == on an arbitrary object (a numpy array from an encoder) may raise
        if not (type(channels) is list and type(units) is list and type(buffers) is list and h["kind"] == self.kind
                and channels == self.channels and units == self.units and buffers == self.buffers):
            return False
        for b in buffers:
            for d in b["shape"]:
                if type(d) is not int:
                    return False
        return True


# Layouts already validated, by stream: a stream's layout rarely changes, so checking it costs a
# few list comparisons per frame instead of one check per channel and buffer field.
_LAYOUTS: dict[str, _Layout] = {}
_MAX_LAYOUTS = 4096


def _check_buffer(i: int, b: Any) -> None:
    if type(b) is not dict or b.keys() != _BUFFER_KEYS:
        raise FrameError(f"header: buffers[{i}] must be a map with exactly {sorted(_BUFFER_KEYS)}")
    _check_name(f"buffers[{i}].name", b["name"])
    dtype, shape = b["dtype"], b["shape"]
    if type(dtype) is not str or dtype not in DTYPES:
        raise FrameError(f"header: buffers[{i}] ({b['name']!r}) dtype {dtype!r:.40} is not one of {sorted(DTYPES)}")
    if type(shape) is not list or len(shape) > MAX_NDIM or not all(type(d) is int and d >= 0 for d in shape):
        raise FrameError(f"header: buffers[{i}] ({b['name']!r}) shape {shape!r:.60} must be <= {MAX_NDIM} non-negative ints")
    nbytes = math.prod(shape) * int(dtype[2:])  # dtype.str ends with the item size
    if nbytes > MAX_BUFFER_BYTES:
        raise FrameError(f"header: buffers[{i}] ({b['name']!r}) declares {nbytes} bytes, "
                         f"more than MAX_BUFFER_BYTES={MAX_BUFFER_BYTES}")


def _check_layout(h: dict) -> None:
    """Validate stream, kind, channels, units and buffers in full."""
    _check_name("stream", h["stream"])
    _check_name("kind", h["kind"])
    for key in ("channels", "units"):
        if type(h[key]) is not list:
            raise FrameError(f"header: {key} must be a list of strings, got {type(h[key]).__name__}")
        for item in h[key]:
            if type(item) is not str or len(item) > MAX_NAME_BYTES:
                raise FrameError(f"header: {key} entries must be strings of <= {MAX_NAME_BYTES} chars, got {item!r:.60}")
    if len(h["units"]) != len(h["channels"]):
        raise FrameError(f"header: {len(h['channels'])} channels but {len(h['units'])} units")
    buffers = h["buffers"]
    if type(buffers) is not list or not 1 <= len(buffers) <= MAX_BUFFERS + 1:
        raise FrameError(f"header: buffers must be a list of 1..{MAX_BUFFERS + 1} descriptors")
    for i, b in enumerate(buffers):
        _check_buffer(i, b)
    if len(buffers) > 1 and len({b["name"] for b in buffers}) != len(buffers):
        raise FrameError(f"header: buffer names {[b['name'] for b in buffers]} repeat")
    data = buffers[0]
    if data["name"] != "data" or len(data["shape"]) != 2 or data["shape"][1] != len(h["channels"]):
        raise FrameError(f"header: buffer 0 must be 'data' of shape (samples, {len(h['channels'])}), "
                         f"got {data['name']!r} {data['shape']}")


def _check_header(h: Any) -> _Layout:
    """Validate a header map in full; returns its layout; raises FrameError naming the first bad field."""
    if type(h) is not dict:
        raise FrameError(f"header: expected a msgpack map, got {type(h).__name__}")
    if h.keys() != _HEADER_KEYS:
        missing = _HEADER_KEYS - h.keys()
        if missing:
            raise FrameError(f"header: missing field(s) {sorted(missing)}")
        raise FrameError(f"header: unknown field(s) {sorted(map(str, h.keys() - _HEADER_KEYS))}")
    if type(h["v"]) is not int or h["v"] != SCHEMA_VERSION:
        raise FrameError(f"header: schema version v={h['v']!r}, this reader understands v={SCHEMA_VERSION}")
    _check_dynamic(h)
    rate = h["rate_hz"]
    if type(rate) not in (int, float) or not math.isfinite(rate) or rate < 0:
        raise FrameError(f"header: rate_hz must be a finite number >= 0, got {rate!r}")
    stream = h["stream"]
    layout = _LAYOUTS.get(stream) if type(stream) is str else None
    if layout is None or not layout.matches(h):
        _check_layout(h)
        layout = _Layout(h)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[stream] = layout
    return layout


def _buffer(part: Any) -> memoryview:
    """A read-only byte view of a message part (bytes, memoryview, or zmq.Frame)."""
    buf = getattr(part, "buffer", part)  # zmq.Frame exposes its memory as .buffer
    try:
        view = memoryview(buf)
    except TypeError:
        raise FrameError(f"message part of type {type(part).__name__} is not a byte buffer") from None
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def decode(parts: Sequence[Any]) -> Frame:
    """The Frame of a multipart message ``[topic, header, *buffers]``.

    Validates the topic (UTF-8, equal to the header's stream), the header (`_check_header`), the
    part count and every buffer's byte count against its declared dtype and shape *before* creating
    any array. The arrays are read-only views on the message memory (no copy); ``.copy()`` them to
    modify. Raises FrameError with the reason for any malformed message.
    """
    if not isinstance(parts, (list, tuple)) or len(parts) < 2:
        raise FrameError(f"message has {len(parts) if isinstance(parts, (list, tuple)) else '?'} parts, "
                         "expected [topic, header, *buffers]")
    topic_buf = _buffer(parts[0])
    if len(topic_buf) > MAX_NAME_BYTES:
        raise FrameError(f"topic is {len(topic_buf)} bytes, at most {MAX_NAME_BYTES}")
    try:
        topic = str(topic_buf, "utf-8")
    except UnicodeDecodeError:
        raise FrameError(f"topic {bytes(topic_buf)[:40]!r} is not UTF-8") from None
    header_buf = _buffer(parts[1])
    if len(header_buf) > MAX_HEADER_BYTES:
        raise FrameError(f"topic {topic!r}: header is {len(header_buf)} bytes, at most {MAX_HEADER_BYTES}")
    fast = _decode_known(topic, header_buf, parts)
    if fast is not None:
        return fast
    try:
        header = msgpack.unpackb(
            header_buf, raw=False, strict_map_key=True, use_list=True,
            max_str_len=MAX_HEADER_BYTES, max_bin_len=MAX_HEADER_BYTES,
            # bounded container sizes: msgpack preallocates declared lengths while nesting
            max_array_len=65536, max_map_len=65536, max_ext_len=0,  # and no extension types
        )
    except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError, ...)
        raise FrameError(f"topic {topic!r}: header is not valid msgpack: {type(exc).__name__}: {exc}"[:300]) from None
    layout = _check_header(header)
    if header["stream"] != topic:
        raise FrameError(f"topic {topic!r} differs from header stream {header['stream']!r}")
    _learn_static(topic, header, header_buf, layout)
    return _frame(topic, header, layout, parts)


# The static part of a stream's header as `encode` packs it (the fixmap marker of 13 entries, then
# the 7 static pairs), with its validated layout, by topic: a header starting with these bytes has
# exactly these static values (msgpack is prefix-free), so only its 6 dynamic pairs are unpacked
# and checked (a marker stream's 240 channel and unit names are not parsed again per frame).
_STATIC_HEADERS: dict[str, tuple[bytes, _Layout, float, str]] = {}
_DYNAMIC_KEYS = frozenset({"seq", "t_device", "t_host", "t", "t_pub", "meta"})
_UNPACK_DYNAMIC = {"raw": False, "strict_map_key": True, "max_str_len": MAX_HEADER_BYTES,
                   "max_bin_len": MAX_HEADER_BYTES, "max_array_len": 65536, "max_map_len": 65536, "max_ext_len": 0}


def _learn_static(topic: str, header: dict, header_buf: memoryview, layout: _Layout) -> None:
    """Remember a fully validated header's static bytes if it was packed as `encode` packs it."""
    if header_buf[0] != _FIXMAP | (_N_STATIC + _N_DYNAMIC) or list(header)[:_N_STATIC] != list(_STATIC_ORDER):
        return
    try:
        static = msgpack.packb({k: header[k] for k in _STATIC_ORDER}, use_bin_type=True)[1:]
    except (TypeError, ValueError, OverflowError):
        return
    n = 1 + len(static)
    if header_buf[1:n] == static:
        if len(_STATIC_HEADERS) >= _MAX_LAYOUTS:
            _STATIC_HEADERS.clear()
        _STATIC_HEADERS[topic] = (bytes(header_buf[:n]), layout, float(header["rate_hz"]), header["kind"])


def _decode_known(topic: str, header_buf: memoryview, parts: Sequence[Any]) -> Frame | None:
    """`decode` of a header whose static part is known (`_STATIC_HEADERS`), or None to take the full path."""
    known = _STATIC_HEADERS.get(topic)
    if known is None:
        return None
    prefix, layout, rate, kind = known
    n = len(prefix)
    if header_buf[:n] != prefix:
        return None
    try:
        dynamic = msgpack.unpackb(bytes([_FIXMAP | _N_DYNAMIC]) + header_buf[n:], **_UNPACK_DYNAMIC)
    except Exception:  # not 6 well-formed pairs: the full path names the problem
        return None
    if type(dynamic) is not dict or dynamic.keys() != _DYNAMIC_KEYS:
        return None
    _check_dynamic(dynamic)
    dynamic["kind"], dynamic["rate_hz"] = kind, rate
    return _frame(topic, dynamic, layout, parts)


def _frame(topic: str, header: dict, layout: _Layout, parts: Sequence[Any]) -> Frame:
    """The Frame of a validated header (its layout) and the message's buffer parts (byte counts checked)."""
    specs = layout.specs
    if len(parts) != 2 + len(specs):
        raise FrameError(f"stream {topic!r}: header declares {len(specs)} buffers, message has {len(parts) - 2}")
    data, extra = None, {}
    for (name, dtype, shape, nbytes), part in zip(specs, parts[2:]):
        view = _buffer(part)
        if len(view) != nbytes:
            raise FrameError(f"stream {topic!r}: buffer {name!r} has {len(view)} bytes, "
                             f"dtype {dtype.str} shape {list(shape)} needs {nbytes}")
        array = np.ndarray(shape, dtype, view)  # a view, read-only when the message memory is
        if data is None:
            data = array
        else:
            extra[name] = array
    # positional (the field order of Frame): half the cost of keywords, on the per-frame path
    return Frame(topic, header["kind"], header["seq"], header["t_device"], header["t_host"], header["t"],
                 float(header["rate_hz"]), layout.channels_t, layout.units_t, data, extra, header["meta"],
                 header["t_pub"])
