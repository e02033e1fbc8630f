"""Write tests/vectors/protocol_v1.json, the vectors shared by the Python and C implementations.

    python tests/firmware_bridge/make_vectors.py

Anchors that come from outside this project and are asserted before anything is written: the
CRC-16/CCITT-FALSE check value (reveng catalogue: 0x29B1 for "123456789") and the COBS examples of
the reference description (Cheshire & Baker; the Wikipedia "Consistent Overhead Byte Stuffing"
table). Frame and message vectors are produced by the Python implementation and are then checked,
independently, by the C reference (test_vectors.py).
"""
from __future__ import annotations

import json
import random
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from firmware_bridge import cobs, crc  # noqa: E402
from firmware_bridge import protocol as P  # noqa: E402

OUT = REPO / "tests" / "vectors" / "protocol_v1.json"

CRC_SPEC = [  # (ASCII data, CRC-16/CCITT-FALSE) from the reveng catalogue check / its definition
    ("123456789", 0x29B1),
    ("", 0xFFFF),  # init 0xFFFF, no final XOR
]

_R254 = bytes(range(1, 255))
COBS_SPEC = [  # (decoded, encoded) from the reference examples
    (b"\x00", b"\x01\x01"),
    (b"\x00\x00", b"\x01\x01\x01"),
    (b"\x00\x11\x00", b"\x01\x02\x11\x01"),
    (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
    (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
    (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
    (_R254, b"\xff" + _R254),
    (b"\x00" + _R254, b"\x01\xff" + _R254),
    (bytes(range(1, 256)), b"\xff" + _R254 + b"\x02\xff"),
    (bytes(range(2, 256)) + b"\x00", b"\xff" + bytes(range(2, 256)) + b"\x01\x01"),
    (bytes(range(3, 256)) + b"\x00\x01", b"\xfe" + bytes(range(3, 256)) + b"\x02\x01"),
]


def f32(x: float) -> float:
    """x rounded to float32 (so JSON round trips are exact)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def messages(rng: random.Random) -> list[tuple[P.Message, int, int, int]]:
    """(message, seq, ack, t_us): every message type, edge values included."""
    state = P.State(tuple(P.MotorState(c, v, i, f) for c, v, i, f in [
        (0, 0, 0, 0), (-1, -1, -1, 0xFF), (2**31 - 1, 32767, 32767, 0xC1), (-2**31, -32768, -32768, 0x46),
        (123456, 250, -1500, 0x81), (-7, 3, 12, 0x0B), (4096, -17, 0, 0x02), (99, 1, 2, 0x04)]))
    cmd = P.Command(tuple(P.MotorCommand(m, f32(s)) for m, s in [
        (0, 0.0), (1, 1.5), (2, -3.14159), (3, 0.25), (1, -1e-3), (2, 1e6), (3, -0.0), (0, 7.0)]))
    out = [
        (P.Hello(), 0, 0, 0),
        (P.Caps((1, 2, 3), (4096,) * 8, 6, 20, (100, 200, 250, 500, 1000), "walklab-virtual"), 1, 0, 123),
        (P.Caps((0, 0, 1), (1000, 2048), 0, 10, (), "μC"), 2, 1, 2**32 - 1),
        (P.Heartbeat(0), 0xFFFF, 0xFFFF, 0xFFFFFFFF),
        (P.Heartbeat(P.STATUS_ESTOP | P.STATUS_ARMED), 7, 3, 1000),
        (state, 42, 41, 4_294_966_000),
        (P.State(state.motors[:1]), 43, 41, 0),
        (cmd, 100, 42, 0),
        (P.Command(cmd.motors[:2]), 101, 43, 5),
        (P.Config(), 5, 0, 0),
        (P.Config(3, f32(2.5), f32(0.1), f32(0.05), f32(4.0), f32(30.0), 100, 500), 6, 1, 0),
        (P.Estop(7), 8, 9, 10),
        (P.Reset(), 11, 12, 13),
        (P.Ack(8, P.Estop.TYPE), 14, 8, 15),
        (P.Nack(6, P.Config.TYPE, P.ERR_BAD_VALUE), 16, 6, 17),
        (P.Log(40, "watchdog: no COMMAND/HEARTBEAT for 100 ms, torque off"), 18, 0, 19),
        (P.Log(20, ""), 19, 0, 20),
        (P.Force(tuple(f32(x) for x in (1.0, -2.0, 750.5, 0.125, -3.0, 0.0))), 20, 0, 21),
        (P.Force(tuple(f32(x) for x in (10, 11, -12, 13, 200.25, 201, 202, 203.5))), 21, 0, 22),
    ]
    # A frame whose unencoded form holds more than 254 non-zero bytes in a row (multi-block COBS).
    out.append((P.Log(30, "".join(rng.choice("abcdefghij") for _ in range(600))), 300, 299, 77))
    return out


def fields(msg: P.Message) -> dict:
    """JSON form of a message's fields (nested dataclasses as lists)."""
    if isinstance(msg, (P.State, P.Command)):
        return {"motors": [list(vars(m).values()) for m in msg.motors]}
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(msg).items()}
    return d


def build() -> dict:
    for text, value in CRC_SPEC:
        assert crc.crc16(text.encode()) == value, f"CRC of {text!r} is not 0x{value:04X}"
    for dec, enc in COBS_SPEC:
        assert cobs.encode(dec) == enc and cobs.decode(enc) == dec, f"COBS example {dec[:8].hex()}... differs"
    rng = random.Random(5)
    frames = []
    for msg, seq, ack, t in messages(rng):
        raw = P.pack_frame(msg, seq, ack, t)
        frames.append({"message": type(msg).__name__, "type": msg.TYPE, "fields": fields(msg), "seq": seq,
                       "ack": ack, "t_us": t, "payload": msg.pack().hex(), "raw": raw.hex(),
                       "wire": P.encode_frame(msg, seq, ack, t).hex()})
    good = [bytes.fromhex(f["wire"]) for f in frames[:6]]
    raw0 = bytes.fromhex(frames[5]["raw"])
    bad_crc = bytearray(raw0)
    bad_crc[20] ^= 0x10
    bad_len = bytearray(raw0[:-2])
    bad_len[10] += 1
    bad_len += crc.crc16(bytes(bad_len)).to_bytes(2, "big")
    bad_ver = bytearray(raw0[:-2])
    bad_ver[0] = 2
    bad_ver += crc.crc16(bytes(bad_ver)).to_bytes(2, "big")
    rejects = [
        {"why": "crc", "wire": (cobs.encode(bytes(bad_crc)) + b"\x00").hex()},
        {"why": "length", "wire": (cobs.encode(bytes(bad_len)) + b"\x00").hex()},
        {"why": "version", "wire": (cobs.encode(bytes(bad_ver)) + b"\x00").hex()},
        {"why": "short", "wire": (cobs.encode(raw0[:10]) + b"\x00").hex()},
        {"why": "cobs", "wire": "05112200"},
    ]
    garbage = bytes(rng.randrange(256) for _ in range(300))
    stream = garbage + b"\x00" + good[0] + bytes.fromhex(rejects[0]["wire"]) + good[1] + b"\x00\x00" + good[2] \
        + bytes.fromhex(rejects[4]["wire"]) + good[3] + good[4] + good[5]
    return {
        "protocol_version": P.PROTOCOL_VERSION,
        "crc": {"name": crc.NAME, "poly": crc.POLY, "init": crc.INIT, "check": crc.CHECK,
                "cases": [{"data": t.encode().hex(), "crc": v} for t, v in CRC_SPEC]},
        "cobs": [{"decoded": d.hex(), "encoded": e.hex()} for d, e in COBS_SPEC],
        "frames": frames,
        "rejects": rejects,
        "stream": {"bytes": stream.hex(), "frames": [0, 1, 2, 3, 4, 5]},
    }


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {OUT}")
