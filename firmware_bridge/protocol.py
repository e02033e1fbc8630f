"""walklab wire protocol v1: message types, little-endian payload packing, frames, a streaming decoder.

Frame on the wire (docs/protocol.md is the normative text)::

    COBS( ver:u8 | type:u8 | seq:u16 | ack:u16 | t_us:u32 | len:u16 | payload[len] | crc:u16be ) 0x00

All header and payload integers little-endian; ``crc`` is CRC-16/CCITT-FALSE (check 0x29B1) over
header + payload, appended **most significant byte first** (see CRC_BYTEORDER).
``seq`` counts frames per direction (mod 2**16), ``ack`` is the last good ``seq`` received from the
peer, ``t_us`` the sender's microsecond clock (mod 2**32; the host sends its monotonic clock).

Messages are frozen dataclasses holding wire units (integers as sent, float32 setpoints); the
conversion of STATE to SI is `telemetry.StateUnwrapper`, using the counts per revolution announced
in CAPS.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar, Iterator

from . import cobs, crc

PROTOCOL_VERSION = 1
HEADER = struct.Struct("<BBHHIH")  # ver, type, seq, ack, t_us, len
HEADER_SIZE = HEADER.size  # 12
CRC_SIZE = 2
# The CRC is computed MSB-first (no reflection), so it is appended big-endian: header | payload | crc
# is then one codeword and every error burst of <= 16 bits (in either bit order of a UART byte) is
# detected. Appended little-endian, bursts straddling the payload/CRC boundary can pass.
CRC_BYTEORDER = "big"
MAX_PAYLOAD = 1024
MAX_FRAME = HEADER_SIZE + MAX_PAYLOAD + CRC_SIZE
MAX_ENCODED = MAX_FRAME + MAX_FRAME // 254 + 2

# Fixed-point units of STATE (docs/protocol.md, "STATE").
VEL_LSB_CPS = 16  # velocity LSB: 16 encoder counts per second
CUR_LSB_A = 1e-3  # current LSB: 1 mA

# Motor modes (COMMAND.mode, STATE flags bits 6-7).
MODE_IDLE, MODE_VELOCITY, MODE_POSITION, MODE_TORQUE = 0, 1, 2, 3
MODE_NAMES = {MODE_IDLE: "idle", MODE_VELOCITY: "velocity", MODE_POSITION: "position", MODE_TORQUE: "torque"}

# Per-motor STATE flags.
FLAG_ENABLED = 0x01  # bridge on: the motor can produce torque
FLAG_WATCHDOG = 0x02  # watchdog tripped (latched until RESET)
FLAG_ESTOP = 0x04  # e-stop latched (until RESET)
FLAG_CURRENT_LIMIT = 0x08  # current setpoint clipped this period
FLAG_VEL_SATURATED = 0x10  # |velocity| beyond the int16 range, value clipped
FLAG_FAULT = 0x20  # plant/driver fault
MODE_SHIFT = 6

# Device-level status (HEARTBEAT.status from the MCU).
STATUS_ESTOP = 0x0001
STATUS_WATCHDOG = 0x0002
STATUS_ARMED = 0x0004  # watchdog armed (a COMMAND has been received since the last RESET/boot)

# NACK error codes.
ERR_BAD_LENGTH, ERR_BAD_VALUE, ERR_UNKNOWN_TYPE, ERR_ESTOP_LATCHED, ERR_BAD_MOTOR, ERR_BAD_VERSION, ERR_BUSY = range(1, 8)
ERRORS = dict(enumerate(("bad_length", "bad_value", "unknown_type", "estop_latched", "bad_motor", "bad_version",
                         "busy"), start=1))


class ProtocolError(ValueError):
    """A frame or payload that does not follow protocol v1; `reason` is a short counter key."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class _Fixed:
    """Base of the fixed-layout messages: the dataclass fields, in declaration order, packed by `_S`."""

    _S: ClassVar[struct.Struct]

    def pack(self) -> bytes:
        return self._S.pack(*(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def unpack(cls, payload: bytes):
        if len(payload) != cls._S.size:
            raise ProtocolError("payload", f"{cls.__name__.upper()}: payload of {len(payload)} bytes, "
                                           f"expected {cls._S.size}")
        return cls(*cls._S.unpack(payload))


@dataclass(frozen=True)
class Hello(_Fixed):
    """Host -> MCU: ask for capabilities (answered by Caps). Empty payload."""

    TYPE: ClassVar[int] = 0x01
    _S: ClassVar[struct.Struct] = struct.Struct("<")


@dataclass(frozen=True)
class Caps:
    """MCU -> host: capabilities.

    Layout: fw_major u8, fw_minor u8, fw_patch u8, n_motors u8, n_force u8, heartbeat_hz u16,
    cpr u32[n_motors] (encoder counts per output-shaft revolution), n_rates u8, rates_hz u16[n_rates],
    name_len u8, name utf-8[name_len].
    """

    TYPE: ClassVar[int] = 0x02
    firmware: tuple[int, int, int] = (1, 0, 0)
    cpr: tuple[int, ...] = ()
    n_force: int = 0
    heartbeat_hz: int = 20
    rates_hz: tuple[int, ...] = ()
    name: str = ""
    _HEAD: ClassVar[struct.Struct] = struct.Struct("<BBBBBH")

    @property
    def n_motors(self) -> int:
        return len(self.cpr)

    def pack(self) -> bytes:
        name = self.name.encode("utf-8")
        if len(name) > 255 or len(self.cpr) > 255 or len(self.rates_hz) > 255:
            raise ProtocolError("payload", "CAPS: name, cpr or rates longer than 255")
        self._check()
        return (self._HEAD.pack(*self.firmware, len(self.cpr), self.n_force, self.heartbeat_hz)
                + struct.pack(f"<{len(self.cpr)}I", *self.cpr)
                + struct.pack(f"<B{len(self.rates_hz)}H", len(self.rates_hz), *self.rates_hz)
                + bytes([len(name)]) + name)

    @classmethod
    def unpack(cls, payload: bytes) -> "Caps":
        try:
            ma, mi, pa, nm, nf, hb = cls._HEAD.unpack_from(payload, 0)
            off = cls._HEAD.size
            cpr = struct.unpack_from(f"<{nm}I", payload, off)
            off += 4 * nm
            (nr,) = struct.unpack_from("<B", payload, off)
            rates = struct.unpack_from(f"<{nr}H", payload, off + 1)
            off += 1 + 2 * nr
            ln = payload[off]
            name_b = payload[off + 1:off + 1 + ln]
        except (struct.error, IndexError):
            raise ProtocolError("payload", f"CAPS: truncated payload of {len(payload)} bytes") from None
        if off + 1 + ln != len(payload) or len(name_b) != ln:
            raise ProtocolError("payload", f"CAPS: payload of {len(payload)} bytes, fields need {off + 1 + ln}")
        try:
            name = name_b.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("payload", "CAPS: name is not UTF-8") from None
        caps = cls((ma, mi, pa), tuple(cpr), nf, hb, tuple(rates), name)
        caps._check()
        return caps

    def _check(self) -> None:
        # Values the host divides by or sizes arrays with: a zero cpr would make angles infinite.
        if self.n_force not in (0, 6, 8):
            raise ProtocolError("payload", f"CAPS: n_force = {self.n_force}, expected 0, 6 or 8")
        for name, values in (("cpr", self.cpr), ("rates_hz", self.rates_hz)):
            for k, v in enumerate(values):
                if v <= 0:
                    raise ProtocolError("payload", f"CAPS: {name}[{k}] = {v}, expected > 0")


@dataclass(frozen=True)
class Heartbeat(_Fixed):
    """Both directions, >= 10 Hz: status u16 (MCU: STATUS_* bits; host: 0). Feeds the MCU watchdog."""

    TYPE: ClassVar[int] = 0x03
    status: int = 0
    _S: ClassVar[struct.Struct] = struct.Struct("<H")


@dataclass(frozen=True)
class MotorState:
    """One motor in STATE: count i32 (output-shaft encoder counts, wraps mod 2**32), vel i16
    (units of VEL_LSB_CPS counts/s), current i16 (mA), flags u8 (FLAG_* | mode << 6)."""

    count: int
    vel: int
    current_ma: int
    flags: int

    @property
    def mode(self) -> int:
        return self.flags >> MODE_SHIFT


@dataclass(frozen=True)
class State:
    """MCU -> host, at the stream rate: n_motors x (i32 count, i16 vel, i16 current_mA, u8 flags).

    The sample time is the frame header's t_us."""

    TYPE: ClassVar[int] = 0x10
    motors: tuple[MotorState, ...] = ()
    _M: ClassVar[struct.Struct] = struct.Struct("<ihhB")

    def pack(self) -> bytes:
        return b"".join(self._M.pack(m.count, m.vel, m.current_ma, m.flags) for m in self.motors)

    @classmethod
    def unpack(cls, payload: bytes) -> "State":
        if len(payload) % cls._M.size:
            raise ProtocolError("payload", f"STATE: payload of {len(payload)} bytes is not a multiple of {cls._M.size}")
        return cls(tuple(MotorState(*t) for t in cls._M.iter_unpack(payload)))


@dataclass(frozen=True)
class MotorCommand:
    """One motor in COMMAND: mode u8 (MODE_*), setpoint f32 in output-shaft SI units:
    rad (position), rad/s (velocity), N·m (torque); ignored for idle."""

    mode: int
    setpoint: float


@dataclass(frozen=True)
class Command:
    """Host -> MCU, each control period: n_motors x (u8 mode, f32 setpoint). Feeds the watchdog."""

    TYPE: ClassVar[int] = 0x11
    motors: tuple[MotorCommand, ...] = ()
    _M: ClassVar[struct.Struct] = struct.Struct("<Bf")

    def pack(self) -> bytes:
        for m in self.motors:
            if m.mode not in MODE_NAMES:
                raise ProtocolError("payload", f"COMMAND: mode {m.mode} is not one of {sorted(MODE_NAMES)}")
        return b"".join(self._M.pack(m.mode, m.setpoint) for m in self.motors)

    @classmethod
    def unpack(cls, payload: bytes) -> "Command":
        if len(payload) % cls._M.size:
            raise ProtocolError("payload", f"COMMAND: payload of {len(payload)} bytes is not a multiple of {cls._M.size}")
        return cls(tuple(MotorCommand(*t) for t in cls._M.iter_unpack(payload)))


@dataclass(frozen=True)
class Config(_Fixed):
    """Host -> MCU, acknowledged: motor u8 (0xFF = all), kp, ki, kd f32 (SI: N·m/rad or N·m/(rad/s) per
    mode), max_current f32 (A), max_velocity f32 (rad/s, output shaft), watchdog_ms u16 (0 keeps),
    stream_hz u16 (0 keeps). Every other field is applied, so a CONFIG is a full set; the defaults
    here are the firmware's boot values. Does NOT feed the watchdog."""

    TYPE: ClassVar[int] = 0x12
    motor: int = 0xFF
    kp: float = 0.5
    ki: float = 0.0
    kd: float = 0.03125  # float32-exact, so boot values survive a wire round trip
    max_current: float = 5.0
    max_velocity: float = 50.0
    watchdog_ms: int = 0
    stream_hz: int = 0
    _S: ClassVar[struct.Struct] = struct.Struct("<B5fHH")


@dataclass(frozen=True)
class Estop(_Fixed):
    """Host -> MCU, acknowledged: latch the e-stop (torque off on every motor) until Reset. reason u8."""

    TYPE: ClassVar[int] = 0x13
    reason: int = 0
    _S: ClassVar[struct.Struct] = struct.Struct("<B")


@dataclass(frozen=True)
class Reset(_Fixed):
    """Host -> MCU, acknowledged: clear the latched e-stop and watchdog faults; motors stay idle. Empty."""

    TYPE: ClassVar[int] = 0x14
    _S: ClassVar[struct.Struct] = struct.Struct("<")


@dataclass(frozen=True)
class Ack(_Fixed):
    """Reply to a request: seq u16 (of the request frame), type u8 (of the request)."""

    TYPE: ClassVar[int] = 0x20
    seq: int = 0
    type: int = 0
    _S: ClassVar[struct.Struct] = struct.Struct("<HB")


@dataclass(frozen=True)
class Nack(_Fixed):
    """Refusal of a request (or of any well-framed frame the device cannot use): seq u16, type u8,
    error u8 (ERRORS)."""

    TYPE: ClassVar[int] = 0x21
    seq: int = 0
    type: int = 0
    error: int = 0
    _S: ClassVar[struct.Struct] = struct.Struct("<HBB")


@dataclass(frozen=True)
class Log:
    """MCU -> host: level u8 (10 debug, 20 info, 30 warning, 40 error, as Python logging), text utf-8."""

    TYPE: ClassVar[int] = 0x30
    level: int = 20
    text: str = ""

    def pack(self) -> bytes:
        return bytes([self.level]) + self.text.encode("utf-8")

    @classmethod
    def unpack(cls, payload: bytes) -> "Log":
        if not payload:
            raise ProtocolError("payload", "LOG: empty payload, expected at least the level byte")
        try:
            return cls(payload[0], payload[1:].decode("utf-8"))
        except UnicodeDecodeError:
            raise ProtocolError("payload", "LOG: text is not UTF-8") from None


@dataclass(frozen=True)
class Force:
    """Amplifier / load-cell board -> host: 6 (Fx Fy Fz Mx My Mz, N and N·m) or 8 (Kistler fx12 fx34 fy14
    fy23 fz1..fz4, N) channels as f32, sample time in the header's t_us."""

    TYPE: ClassVar[int] = 0x40
    channels: tuple[float, ...] = field(default=(0.0,) * 6)

    def pack(self) -> bytes:
        if len(self.channels) not in (6, 8):
            raise ProtocolError("payload", f"FORCE: {len(self.channels)} channels, expected 6 or 8")
        return struct.pack(f"<{len(self.channels)}f", *self.channels)

    @classmethod
    def unpack(cls, payload: bytes) -> "Force":
        if len(payload) not in (24, 32):
            raise ProtocolError("payload", f"FORCE: payload of {len(payload)} bytes, expected 24 or 32")
        return cls(struct.unpack(f"<{len(payload) // 4}f", payload))


Message = Hello | Caps | Heartbeat | State | Command | Config | Estop | Reset | Ack | Nack | Log | Force
MESSAGES: dict[int, type] = {c.TYPE: c for c in
                             (Hello, Caps, Heartbeat, State, Command, Config, Estop, Reset, Ack, Nack, Log, Force)}
TYPE_NAMES: dict[int, str] = {t: c.__name__.upper() for t, c in MESSAGES.items()}
REQUESTS = (Config, Estop, Reset)  # answered by Ack/Nack; Hello is answered by Caps


@dataclass(frozen=True)
class Frame:
    """A decoded frame: header fields and the message. seq/ack mod 2**16, t_us mod 2**32 (µs)."""

    msg: Message
    seq: int = 0
    ack: int = 0
    t_us: int = 0
    version: int = PROTOCOL_VERSION

    @property
    def type(self) -> int:
        return self.msg.TYPE


def pack_frame(msg: Message, seq: int = 0, ack: int = 0, t_us: int = 0) -> bytes:
    """Unencoded frame: header + payload + CRC (no COBS, no delimiter)."""
    try:
        payload = msg.pack()
    except struct.error as exc:  # a field outside its wire range, e.g. vel = 40000 for an i16
        raise ProtocolError("payload", f"{TYPE_NAMES[msg.TYPE]}: field out of range for its wire type: {exc}") from None
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError("length", f"{TYPE_NAMES[msg.TYPE]}: payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = HEADER.pack(PROTOCOL_VERSION, msg.TYPE, seq & 0xFFFF, ack & 0xFFFF, t_us & 0xFFFFFFFF, len(payload)) + payload
    return body + crc.crc16(body).to_bytes(CRC_SIZE, CRC_BYTEORDER)


def encode_frame(msg: Message, seq: int = 0, ack: int = 0, t_us: int = 0) -> bytes:
    """Wire bytes of one frame: COBS(pack_frame(...)) followed by the 0x00 delimiter."""
    return cobs.encode(pack_frame(msg, seq, ack, t_us)) + b"\x00"


def unpack_frame(raw: bytes) -> Frame:
    """Parse an unencoded frame (header + payload + CRC); raise ProtocolError(reason) on any defect.

    Reasons: short, crc, version, length, type, payload."""
    if len(raw) < HEADER_SIZE + CRC_SIZE:
        raise ProtocolError("short", f"frame of {len(raw)} bytes, shorter than header + CRC ({HEADER_SIZE + CRC_SIZE})")
    # CRC first: a corrupted length or type byte is reported as what it is, a CRC failure.
    if crc.crc16(raw[:-CRC_SIZE]) != int.from_bytes(raw[-CRC_SIZE:], CRC_BYTEORDER):
        raise ProtocolError("crc", "CRC-16/CCITT-FALSE mismatch")
    ver, typ, seq, ack, t_us, n = HEADER.unpack_from(raw, 0)
    if ver != PROTOCOL_VERSION:
        raise ProtocolError("version", f"protocol version {ver}, expected {PROTOCOL_VERSION}")
    if HEADER_SIZE + n + CRC_SIZE != len(raw):
        raise ProtocolError("length", f"header says {n} payload bytes, frame holds {len(raw) - HEADER_SIZE - CRC_SIZE}")
    cls = MESSAGES.get(typ)
    if cls is None:
        raise ProtocolError("type", f"unknown message type 0x{typ:02x}")
    return Frame(cls.unpack(raw[HEADER_SIZE:-CRC_SIZE]), seq, ack, t_us, ver)


def decode_frame(encoded: bytes) -> Frame:
    """Parse one COBS-encoded frame without its delimiter (a trailing 0x00 is tolerated)."""
    if encoded.endswith(b"\x00"):
        encoded = encoded[:-1]
    try:
        raw = cobs.decode(encoded)
    except cobs.CobsError as exc:
        raise ProtocolError("cobs", str(exc)) from None
    return unpack_frame(raw)


class StreamDecoder:
    """Incremental decoder of a byte stream: feed any bytes, get the valid frames.

    Never raises on input: a defective chunk between two 0x00 is counted in `errors[reason]`
    (and in `crc_by_type[claimed type]` for CRC failures) and dropped; decoding resumes at the
    next delimiter, so the first complete valid frame after garbage is returned. A run longer
    than MAX_ENCODED without a delimiter is discarded ("overflow") up to the next 0x00.
    With synchronised=False (a port just opened, mid-stream) the bytes before the first 0x00 are
    a frame's tail: they are skipped (counted in `skipped`), not reported as errors.
    on_reject(reason, raw), if given, is called for every chunk that COBS-decodes but is refused,
    with the unencoded bytes: for reasons "type" and "payload" the header is intact (CRC, version
    and length checked), so a device can NACK the frame's seq and type.
    """

    def __init__(self, synchronised: bool = True,
                 on_reject: Callable[[str, bytes], None] | None = None) -> None:
        self.on_reject = on_reject
        self._buf = bytearray()
        self._overflow = False
        self._hunting = not synchronised
        self.skipped = 0
        self.errors: dict[str, int] = {}
        self.crc_by_type: dict[int, int] = {}
        self.frames = 0
        self.bytes = 0

    def _error(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def feed(self, data: bytes) -> list[Frame]:
        """Consume `data`; return the frames completed by it, in order."""
        self.bytes += len(data)
        out = []
        for chunk in self._chunks(data):
            try:
                raw = cobs.decode(chunk)
            except cobs.CobsError:
                self._error("cobs")
                continue
            try:
                out.append(unpack_frame(raw))
            except ProtocolError as exc:
                self._error(exc.reason)
                if exc.reason == "crc" and len(raw) > 1:
                    self.crc_by_type[raw[1]] = self.crc_by_type.get(raw[1], 0) + 1
                if self.on_reject is not None:
                    self.on_reject(exc.reason, raw)
        self.frames += len(out)
        return out

    def _chunks(self, data: bytes) -> Iterator[bytes]:
        parts = bytes(data).split(b"\x00")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if self._hunting:
                self.skipped += len(part)
                if not last:
                    self._hunting = False
                continue
            if not self._overflow:
                self._buf += part
                if len(self._buf) > MAX_ENCODED:
                    self._error("overflow")
                    self._overflow = True
                    self._buf.clear()
            if last:
                break
            # A delimiter: the buffered chunk is complete.
            if not self._overflow and self._buf:
                yield bytes(self._buf)
            self._buf.clear()
            self._overflow = False


def seq_gap(prev: int, seq: int) -> int:
    """Frames missing between sequence numbers `prev` and `seq` (mod 2**16): 0 when contiguous."""
    return (seq - prev - 1) & 0xFFFF


def unwrap(prev_unwrapped: int, raw: int, bits: int) -> int:
    """Unwrap a counter that wraps mod 2**bits (signed or unsigned) given the previous unwrapped value:
    the step is taken as the signed difference in [-2**(bits-1), 2**(bits-1))."""
    half = 1 << (bits - 1)
    step = ((raw - prev_unwrapped + half) % (1 << bits)) - half
    return prev_unwrapped + step
