"""Framing, CRC and message codec: property-based round trips, fuzzed decoding, burst-error detection."""
from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge import cobs, crc
from firmware_bridge import protocol as P


def crc16_bitwise(data: bytes) -> int:
    """Independent textbook CRC-16/CCITT-FALSE (MSB first, poly 0x1021, init 0xFFFF)."""
    c = 0xFFFF
    for byte in data:
        c ^= byte << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) & 0xFFFF if c & 0x8000 else (c << 1) & 0xFFFF
    return c


def test_crc_check_value():
    assert crc.crc16(b"123456789") == crc.CHECK == 0x29B1
    assert crc16_bitwise(b"123456789") == 0x29B1


@given(st.binary(max_size=300))
def test_crc_matches_bitwise_definition(data):
    assert crc.crc16(data) == crc16_bitwise(data)


@given(st.binary(max_size=1200))
def test_cobs_round_trip_no_zero_and_overhead(data):
    enc = cobs.encode(data)
    assert 0 not in enc
    assert len(enc) <= len(data) + 1 + len(data) // 254
    assert cobs.decode(enc) == data


# ---------------------------------------------------------------- messages

u8, u16, u32 = (st.integers(0, 2**k - 1) for k in (8, 16, 32))
i16, i32 = st.integers(-2**15, 2**15 - 1), st.integers(-2**31, 2**31 - 1)
f32 = st.floats(width=32, allow_nan=False)
text = st.text(max_size=60)
motor_state = st.builds(P.MotorState, i32, i16, i16, u8)
motor_cmd = st.builds(P.MotorCommand, st.sampled_from(sorted(P.MODE_NAMES)), f32)
MESSAGES = st.one_of(
    st.just(P.Hello()),
    st.builds(P.Caps, st.tuples(u8, u8, u8), st.lists(st.integers(1, 2**32 - 1), max_size=16).map(tuple),
              st.sampled_from([0, 6, 8]), u16, st.lists(st.integers(1, 2**16 - 1), max_size=8).map(tuple), text),
    st.builds(P.Heartbeat, u16),
    st.builds(P.State, st.lists(motor_state, max_size=16).map(tuple)),
    st.builds(P.Command, st.lists(motor_cmd, max_size=16).map(tuple)),
    st.builds(P.Config, u8, f32, f32, f32, f32, f32, u16, u16),
    st.builds(P.Estop, u8),
    st.just(P.Reset()),
    st.builds(P.Ack, u16, u8),
    st.builds(P.Nack, u16, u8, u8),
    st.builds(P.Log, u8, text),
    st.builds(P.Force, st.one_of(st.lists(f32, min_size=6, max_size=6), st.lists(f32, min_size=8, max_size=8)).map(tuple)),
)


@given(MESSAGES, u16, u16, u32)
def test_every_message_round_trips(msg, seq, ack, t_us):
    wire = P.encode_frame(msg, seq, ack, t_us)
    assert wire.endswith(b"\x00") and 0 not in wire[:-1]
    f = P.decode_frame(wire)
    assert (f.msg, f.seq, f.ack, f.t_us, f.version) == (msg, seq, ack, t_us, P.PROTOCOL_VERSION)
    # The payload layout is little-endian packed with the documented length.
    raw = P.pack_frame(msg, seq, ack, t_us)
    assert struct.unpack_from("<BBHHIH", raw) == (1, msg.TYPE, seq, ack, t_us, len(raw) - 14)


@given(st.lists(MESSAGES, min_size=1, max_size=8), st.lists(st.integers(1, 40), min_size=1, max_size=20))
def test_stream_decoder_reassembles_any_chunking(msgs, cuts):
    stream = b"".join(P.encode_frame(m, i) for i, m in enumerate(msgs))
    dec = P.StreamDecoder()
    got, i, k = [], 0, 0
    while i < len(stream):
        n = cuts[k % len(cuts)]
        got += dec.feed(stream[i:i + n])
        i, k = i + n, k + 1
    assert [f.msg for f in got] == msgs and [f.seq for f in got] == list(range(len(msgs)))
    assert dec.errors == {}


@settings(max_examples=300)
@given(st.binary(max_size=3000), MESSAGES, MESSAGES)
def test_decoder_never_raises_and_resynchronises(garbage, first, second):
    """Arbitrary bytes never raise; after garbage, the first frame that starts after a delimiter is
    decoded (the frame glued to unterminated garbage is lost with it, by design)."""
    dec = P.StreamDecoder()
    dec.feed(garbage)  # must not raise
    w1, w2 = P.encode_frame(first, 1), P.encode_frame(second, 2)
    out = dec.feed(w1 + w2)
    assert out and out[-1].msg == second and out[-1].seq == 2
    if garbage == b"" or garbage.endswith(b"\x00"):
        assert [f.msg for f in out[-2:]] == [first, second]


def test_decoder_discards_oversized_runs_and_recovers():
    dec = P.StreamDecoder()
    assert dec.feed(b"\x01" * (P.MAX_ENCODED + 10)) == []
    out = dec.feed(b"\x00" + P.encode_frame(P.Heartbeat(3), 9))
    assert [f.msg for f in out] == [P.Heartbeat(3)] and dec.errors["overflow"] == 1


def _flip(raw: bytes, bit: int, order: str) -> bytes:
    """`raw` with bit number `bit` flipped, bits counted in transmission order: "msb" (bit 7 of each
    byte first, the CRC's own order) or "lsb" (bit 0 first, the order of a UART line)."""
    out = bytearray(raw)
    out[bit // 8] ^= 1 << (7 - bit % 8 if order == "msb" else bit % 8)
    return bytes(out)


def _syndromes(raw: bytes, order: str) -> np.ndarray:
    """Per transmitted bit: the CRC syndrome that flipping it causes. The frame check is affine, so
    an error pattern passes exactly when the XOR of its bits' syndromes is 0. Computed with the
    textbook bitwise CRC and the byte order of the frame check (P.CRC_BYTEORDER)."""
    def syndrome(b: bytes) -> int:
        return crc16_bitwise(b[:-2]) ^ int.from_bytes(b[-2:], P.CRC_BYTEORDER)
    s0 = syndrome(raw)
    return np.array([syndrome(_flip(raw, k, order)) ^ s0 for k in range(8 * len(raw))], dtype=np.uint32)


FRAMES = [P.pack_frame(P.Heartbeat(3), 10, 8, 99),  # the shortest frame with a payload (16 bytes)
          P.pack_frame(P.State(tuple(P.MotorState(1000 * k, -k, 3 * k, 0xC1) for k in range(8))), 7, 5, 123456)]


@pytest.mark.parametrize("order", ["msb", "lsb"])
@pytest.mark.parametrize("raw", FRAMES, ids=["HEARTBEAT", "STATE8"])
def test_every_burst_up_to_16_bits_is_detected_exhaustively(raw, order):
    """All error bursts of length 1..16 bits at every position (first and last bit flipped, any
    inside), in both bit orders a byte may travel in: none leaves a zero syndrome. With the CRC
    appended least significant byte first, 12 (msb) / 3 (lsb) bursts straddling the payload/CRC
    boundary of any frame pass; this is the test that caught it."""
    syn = _syndromes(raw, order)
    undetected = 0
    for start in range(len(syn)):
        w = min(16, len(syn) - start)
        xor = np.zeros(1 << w, dtype=np.uint32)  # xor[p] = syndrome of pattern p (bit i = start + i)
        for i in range(w):
            xor[1 << i:2 << i] = xor[:1 << i] ^ syn[start + i]
        undetected += int(np.count_nonzero(xor[1::2] == 0))  # patterns whose first bit is `start`
    assert undetected == 0


def test_no_single_burst_up_to_16_bits_is_accepted():
    """10^5 corruptions by one burst of <= 16 bits, half of them over the last 5 bytes where the
    CRC's byte order matters, both bit orders; each goes through the real decoder (unpack_frame and,
    COBS-encoded, the stream decoder): accepted count must be 0 (the width-16 CRC guarantee)."""
    rng = random.Random(1)
    frames = FRAMES + [P.pack_frame(P.Command(tuple(P.MotorCommand(3, 0.5 * k) for k in range(8))), 8, 6, 0),
                       P.pack_frame(P.Config(2, 1.0, 0.0, 0.1, 3.0, 20.0, 100, 1000), 9, 7, 0)]
    n = 100_000
    accepted = 0
    wire = bytearray()
    for k in range(n):
        raw = frames[k % len(frames)]
        nbits = 8 * len(raw)
        length = rng.randint(1, 16)
        lo = nbits - 40 if k % 2 else 0
        start = rng.randint(lo, nbits - length)
        bad = raw
        for i in range(length):  # first and last bit flipped, the inside random
            if i in (0, length - 1) or rng.getrandbits(1):
                bad = _flip(bad, start + i, "lsb" if k % 4 >= 2 else "msb")
        assert bad != raw
        try:
            P.unpack_frame(bad)
            accepted += 1
        except P.ProtocolError as exc:
            assert exc.reason == "crc"
        if k % 10 == 0:
            wire += cobs.encode(bad) + b"\x00"
    assert accepted == 0
    dec = P.StreamDecoder()
    assert dec.feed(bytes(wire)) == []
    assert dec.errors == {"crc": n // 10}


def test_single_byte_corruption_on_the_wire_is_rejected():
    """Corrupting one byte of the COBS-encoded frame (data or code byte) is always caught (counted)."""
    rnd = random.Random(2)
    msg = P.State(tuple(P.MotorState(k, k, k, 0x41) for k in range(8)))
    wire = P.encode_frame(msg, 1, 2, 3)
    stream = bytearray()
    for _ in range(20_000):
        bad = bytearray(wire)
        i = rnd.randrange(len(wire) - 1)
        bad[i] ^= rnd.randrange(1, 256)
        stream += bad
    dec = P.StreamDecoder()
    assert dec.feed(bytes(stream)) == []
    assert sum(dec.errors.values()) >= 20_000


def test_unwrap_counters():
    # µs timestamp across the 2**32 wrap, encoder count across the int32 wrap, both directions.
    assert P.unwrap(2**32 - 500, 200, 32) == 2**32 + 200
    assert P.unwrap(2**31 - 10, -2**31 + 5, 32) == 2**31 + 5
    assert P.unwrap(-2**31 + 5 + 2**32 * 3, 2**31 - 10, 32) == 2**32 * 3 - 2**31 - 10
    assert P.seq_gap(0xFFFF, 0) == 0 and P.seq_gap(0xFFFE, 1) == 2


@given(st.integers(-2**40, 2**40), st.integers(-2**31 + 1, 2**31 - 1))
def test_unwrap_recovers_any_step_below_half_range(start, step):
    raw = ((start + step + 2**31) % 2**32) - 2**31  # as sent: int32
    assert P.unwrap(start, raw, 32) == start + step


@settings(max_examples=1000)
@given(st.sampled_from(sorted(P.MESSAGES)), st.binary(max_size=120), u16, u16, u32)
def test_payload_parsers_fail_only_with_protocol_error(typ, payload, seq, ack, t_us):
    """Any payload behind a valid header and CRC either parses or raises ProtocolError (so the stream
    decoder, which catches only that, can never be crashed by a well-framed but malformed message)."""
    body = struct.pack("<BBHHIH", 1, typ, seq, ack, t_us, len(payload)) + payload
    raw = body + crc.crc16(body).to_bytes(2, "big")
    try:
        f = P.unpack_frame(raw)
    except P.ProtocolError as exc:
        assert exc.reason == "payload"
    else:
        assert (f.type, f.seq, f.ack, f.t_us) == (typ, seq, ack, t_us)
    assert isinstance(P.StreamDecoder().feed(cobs.encode(raw) + b"\x00"), list)


def _raw(typ: int, payload: bytes, ver: int = 1, n: int | None = None) -> bytes:
    body = struct.pack("<BBHHIH", ver, typ, 1, 2, 3, len(payload) if n is None else n) + payload
    return body + crc16_bitwise(body).to_bytes(2, "big")


_CAPS = bytes([1, 0, 0, 1, 0]) + struct.pack("<H", 20)  # firmware 1.0.0, 1 motor, no force, 20 Hz


MALFORMED = [
    (b"\x01" * 13, "short", "frame of 13 bytes, shorter than header [+] CRC [(]14[)]"),
    (_raw(0x03, b"\x00\x00")[:-1] + b"\x00", "crc", "CRC-16/CCITT-FALSE mismatch"),
    (_raw(0x03, b"\x00\x00", ver=2), "version", "protocol version 2, expected 1"),
    (_raw(0x03, b"\x00\x00", n=3), "length", "header says 3 payload bytes, frame holds 2"),
    (_raw(0x7F, b""), "type", "unknown message type 0x7f"),
    (_raw(0x01, b"\x00"), "payload", "HELLO: payload of 1 bytes, expected 0"),
    (_raw(0x02, _CAPS + struct.pack("<I", 4096) + b"\x01"), "payload", "CAPS: truncated payload of 12 bytes"),
    (_raw(0x02, _CAPS + struct.pack("<IB", 4096, 0) + b"\x02ab!"), "payload", "CAPS: payload of 16 bytes, fields need 15"),
    (_raw(0x02, _CAPS + struct.pack("<IB", 4096, 0) + b"\x01\xff"), "payload", "CAPS: name is not UTF-8"),
    (_raw(0x02, _CAPS[:4] + b"\x07" + _CAPS[5:] + struct.pack("<IBB", 4096, 0, 0)), "payload", "CAPS: n_force = 7"),
    (_raw(0x02, _CAPS + struct.pack("<IBB", 0, 0, 0)), "payload", "CAPS: cpr\\[0\\] = 0, expected > 0"),
    (_raw(0x02, _CAPS + struct.pack("<IBHB", 4096, 1, 0, 0)), "payload", "CAPS: rates_hz\\[0\\] = 0"),
    (_raw(0x03, b"\x00"), "payload", "HEARTBEAT: payload of 1 bytes, expected 2"),
    (_raw(0x10, bytes(10)), "payload", "STATE: payload of 10 bytes is not a multiple of 9"),
    (_raw(0x11, bytes(6)), "payload", "COMMAND: payload of 6 bytes is not a multiple of 5"),
    (_raw(0x12, bytes(24)), "payload", "CONFIG: payload of 24 bytes, expected 25"),
    (_raw(0x13, b""), "payload", "ESTOP: payload of 0 bytes, expected 1"),
    (_raw(0x14, b"\x00"), "payload", "RESET: payload of 1 bytes, expected 0"),
    (_raw(0x20, bytes(4)), "payload", "ACK: payload of 4 bytes, expected 3"),
    (_raw(0x21, bytes(3)), "payload", "NACK: payload of 3 bytes, expected 4"),
    (_raw(0x30, b""), "payload", "LOG: empty payload"),
    (_raw(0x30, b"\x14\xc3"), "payload", "LOG: text is not UTF-8"),
    (_raw(0x40, bytes(28)), "payload", "FORCE: payload of 28 bytes, expected 24 or 32"),
]


@pytest.mark.parametrize("raw, reason, message", MALFORMED, ids=[m.split(":")[0].split(" ")[0] for _, _, m in MALFORMED])
def test_malformed_frames_raise_protocol_error_naming_the_problem(raw, reason, message):
    """Each defect, built by hand from the layouts in docs/protocol.md, is refused with its counter
    key and a one-line message that names the message type and the field or size at fault."""
    with pytest.raises(P.ProtocolError, match=message) as e:
        P.unpack_frame(raw)
    assert e.value.reason == reason and "\n" not in str(e.value)
    dec = P.StreamDecoder()
    assert dec.feed(cobs.encode(raw) + b"\x00") == [] and dec.errors == {reason: 1}


@pytest.mark.parametrize("msg, payload_hex", [
    # Written out by hand from the field tables of docs/protocol.md §3 (little-endian, packed).
    (P.Hello(), ""),
    (P.Heartbeat(0x0105), "0501"),
    (P.State((P.MotorState(-2, 3, -4, 0xC1), P.MotorState(0x01020304, -32768, 1000, 0x02))),
     "feffffff" "0300" "fcff" "c1" + "04030201" "0080" "e803" "02"),
    (P.Command((P.MotorCommand(P.MODE_POSITION, 1.0), P.MotorCommand(P.MODE_TORQUE, -2.5))),
     "02" "0000803f" + "03" "000020c0"),
    (P.Config(0xFF, 0.5, 0.0, 0.03125, 5.0, 50.0, 100, 1000),
     "ff" "0000003f" "00000000" "0000003d" "0000a040" "00004842" "6400" "e803"),
    (P.Estop(7), "07"),
    (P.Reset(), ""),
    (P.Ack(0x1234, 0x12), "3412" "12"),
    (P.Nack(0x0102, 0x11, P.ERR_BAD_VALUE), "0201" "11" "02"),
    (P.Log(40, "wd"), "28" "7764"),
    (P.Force((1.0, -1.0, 0.5, 0.0, 2.0, -2.0)), "0000803f" "000080bf" "0000003f" "00000000" "00000040" "000000c0"),
    (P.Caps((1, 2, 3), (4096, 1000), 6, 20, (500, 1000), "ab"),
     "010203" "02" "06" "1400" + "00100000" "e8030000" + "02" "f401" "e803" + "02" "6162"),
])
def test_payload_layouts_match_the_spec_tables(msg, payload_hex):
    """An anchor independent of both implementations (which the C/Python vector tests compare with
    each other): the payload bytes spelled out from the spec, both ways."""
    assert msg.pack().hex() == payload_hex
    assert type(msg).unpack(bytes.fromhex(payload_hex)) == msg


def test_frame_layout_matches_the_spec():
    """HEARTBEAT(status 1), seq 0x0201, ack 0x0403, t_us 0x08070605, written out by hand; the CRC
    is the CRC-16/CCITT-FALSE of the 14 bytes, most significant byte first."""
    body = bytes.fromhex("01" "03" "0102" "0304" "05060708" "0200" "0100")
    raw = P.pack_frame(P.Heartbeat(1), 0x0201, 0x0403, 0x08070605)
    assert raw == body + crc16_bitwise(body).to_bytes(2, "big")
    assert P.encode_frame(P.Heartbeat(1), 0x0201, 0x0403, 0x08070605) == cobs.encode(raw) + b"\x00"
