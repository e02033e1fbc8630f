"""Shared test vectors (tests/vectors/protocol_v1.json): Python and the C reference agree on each.

The C header is compiled with the system C compiler into a temporary folder; its driver answers one
line per request (hex in, hex out), so every vector crosses a real process boundary.
"""
from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from firmware_bridge import cobs, crc
from firmware_bridge import protocol as P

REPO = Path(__file__).resolve().parents[2]
VECTORS = json.loads((REPO / "tests" / "vectors" / "protocol_v1.json").read_text())
C_DIR = REPO / "firmware_bridge" / "c"
C_ERR = {"cobs": -1, "short": -2, "crc": -3, "version": -4, "length": -5}


def message(v: dict) -> P.Message:
    """The message of a frame vector, rebuilt from its JSON fields."""
    cls = getattr(P, v["message"])
    f = v["fields"]
    if cls is P.State:
        return P.State(tuple(P.MotorState(*m) for m in f["motors"]))
    if cls is P.Command:
        return P.Command(tuple(P.MotorCommand(*m) for m in f["motors"]))
    return cls(**{k: (tuple(x) if isinstance(x, list) else x) for k, x in f.items()})


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def pack_line(msg: P.Message) -> str | None:
    """The wl_tool request that packs `msg` from its fields (None for empty payloads)."""
    if isinstance(msg, P.State):
        return f"pack state {len(msg.motors)} " + " ".join(
            f"{m.count} {m.vel} {m.current_ma} {m.flags}" for m in msg.motors)
    if isinstance(msg, P.Command):
        return f"pack command {len(msg.motors)} " + " ".join(f"{m.mode} {bits(m.setpoint)}" for m in msg.motors)
    if isinstance(msg, P.Config):
        return (f"pack config {msg.motor} {bits(msg.kp)} {bits(msg.ki)} {bits(msg.kd)} {bits(msg.max_current)} "
                f"{bits(msg.max_velocity)} {msg.watchdog_ms} {msg.stream_hz}")
    if isinstance(msg, P.Heartbeat):
        return f"pack heartbeat {msg.status}"
    if isinstance(msg, P.Ack):
        return f"pack ack {msg.seq} {msg.type}"
    if isinstance(msg, P.Nack):
        return f"pack nack {msg.seq} {msg.type} {msg.error}"
    if isinstance(msg, P.Estop):
        return f"pack estop {msg.reason}"
    if isinstance(msg, P.Log):
        return f"pack log {msg.level} {msg.text.encode().hex()}"
    if isinstance(msg, P.Force):
        return f"pack force {len(msg.channels)} " + " ".join(str(bits(c)) for c in msg.channels)
    if isinstance(msg, P.Caps):
        return (f"pack caps {msg.firmware[0]} {msg.firmware[1]} {msg.firmware[2]} {msg.n_force} {msg.heartbeat_hz} "
                f"{len(msg.cpr)} {' '.join(map(str, msg.cpr))} {len(msg.rates_hz)} {' '.join(map(str, msg.rates_hz))} "
                f"{msg.name.encode().hex()}")
    return None


def test_crc_and_cobs_vectors_are_the_spec_values():
    assert VECTORS["crc"]["check"] == 0x29B1 and VECTORS["crc"]["name"] == "CRC-16/CCITT-FALSE"
    for case in VECTORS["crc"]["cases"]:
        assert crc.crc16(bytes.fromhex(case["data"])) == case["crc"]
    assert {"decoded": "11220033", "encoded": "0311220233"} in VECTORS["cobs"]  # ecosystem.md §7 example
    for case in VECTORS["cobs"]:
        assert cobs.encode(bytes.fromhex(case["decoded"])).hex() == case["encoded"]
        assert cobs.decode(bytes.fromhex(case["encoded"])).hex() == case["decoded"]


def crc_by_division(data: bytes) -> int:
    """CRC-16/CCITT-FALSE as the remainder of I x^n + M(x) x^16 divided by G(x) = x^16 + x^12 + x^5 + 1
    over GF(2) (M: the n message bits, most significant first; I = 0xFFFF, the register preset; no
    reflection, no final XOR): polynomial long division on one integer, neither the shift register
    of test_codec nor binascii.crc_hqx, which the code uses."""
    n = 8 * len(data)
    r = (0xFFFF << n) ^ (int.from_bytes(data, "big") << 16)
    for bit in range(r.bit_length() - 1, 15, -1):
        if r >> bit & 1:
            r ^= 0x11021 << (bit - 16)
    return r


# Frames derived by hand from docs/protocol.md §2-3, not by the code: the header written field by
# field (ver u8 | type u8 | seq u16 | ack u16 | t_us u32 | len u16, little-endian), the payload from
# the message table, the CRC by crc_by_division (the hex below), and the wire COBS-encoded by hand:
# split header | payload | crc at each 00, each block becomes (length + 1) and its bytes, then 00.
HAND = [
    # HELLO, seq 0x0102, ack 0x0304, t_us 0x05060708: no payload. Blocks [01 01 02 01 04 03 08 07 06 05]
    # [] [1b 7c].
    (P.Hello(), 0x0102, 0x0304, 0x05060708,
     "01 01 0201 0403 08070605 0000", "", "1b7c",
     "0b 01010201040308070605 01 03 1b7c 00"),
    # HEARTBEAT status ESTOP | ARMED = 5 (u16), everything else 0: eight zero bytes in a row.
    (P.Heartbeat(P.STATUS_ESTOP | P.STATUS_ARMED), 0, 0, 0,
     "01 03 0000 0000 00000000 0200", "0500", "0f33",
     "03 0103 01 01 01 01 01 01 01 02 02 02 05 03 0f33 00"),
    # COMMAND, 2 motors: torque 1.0 (f32 0000803f), velocity -2.5 (f32 000020c0); seq and t_us at their maxima.
    (P.Command((P.MotorCommand(P.MODE_TORQUE, 1.0), P.MotorCommand(P.MODE_VELOCITY, -2.5))), 0xFFFF, 1, 0xFFFFFFFF,
     "01 11 ffff 0100 ffffffff 0a00", "03 0000803f 01 000020c0", "f4be",
     "06 0111ffff01 06 ffffffff0a 02 03 01 04 803f01 01 05 20c0f4be 00"),
    # STATE, 1 motor: count -2 (i32), vel 16 (i16, x 16 counts/s), current -1000 mA (i16 18fc), flags 0x81;
    # seq 300 (012c), ack 7, t_us 1 000 000 (000f4240).
    (P.State((P.MotorState(-2, 16, -1000, 0x81),)), 300, 7, 1_000_000,
     "01 10 2c01 0700 40420f00 0900", "feffffff 1000 18fc 81", "c49b",
     "06 01102c0107 04 40420f 02 09 06 feffffff10 06 18fc81c49b 00"),
]


def _hex(spaced: str) -> str:
    return spaced.replace(" ", "")


def test_crc_by_division_is_the_catalogue_crc():
    assert crc_by_division(b"123456789") == 0x29B1 and crc_by_division(b"") == 0xFFFF  # reveng check, preset


@pytest.mark.parametrize("msg, seq, ack, t_us, header, payload, crc_hex, wire", HAND,
                         ids=[type(h[0]).__name__ for h in HAND])
def test_python_matches_hand_derived_frame(msg, seq, ack, t_us, header, payload, crc_hex, wire):
    frame = bytes.fromhex(_hex(header) + _hex(payload))
    assert crc_by_division(frame) == int(crc_hex, 16)
    assert msg.pack().hex() == _hex(payload)
    assert P.encode_frame(msg, seq, ack, t_us).hex() == _hex(wire)
    got = P.decode_frame(bytes.fromhex(_hex(wire))[:-1])
    assert (got.msg, got.seq, got.ack, got.t_us) == (msg, seq, ack, t_us)


@pytest.mark.parametrize("v", VECTORS["frames"], ids=lambda v: f"{v['message']}-{v['seq']}")
def test_python_matches_frame_vector(v):
    msg = message(v)
    assert msg.pack().hex() == v["payload"]
    assert P.encode_frame(msg, v["seq"], v["ack"], v["t_us"]).hex() == v["wire"]
    frame = P.decode_frame(bytes.fromhex(v["wire"]))
    assert (frame.msg, frame.seq, frame.ack, frame.t_us) == (msg, v["seq"], v["ack"], v["t_us"])
    # The CRC in the vector is the CRC-16/CCITT-FALSE of header + payload, most significant byte first.
    raw = bytes.fromhex(v["raw"])
    assert int.from_bytes(raw[-2:], "big") == crc.crc16(raw[:-2])


def test_python_rejects_and_stream_vectors():
    for r in VECTORS["rejects"]:
        with pytest.raises(P.ProtocolError) as e:
            P.decode_frame(bytes.fromhex(r["wire"]))
        assert e.value.reason == r["why"]
    dec = P.StreamDecoder()
    got = dec.feed(bytes.fromhex(VECTORS["stream"]["bytes"]))
    want = [message(VECTORS["frames"][i]) for i in VECTORS["stream"]["frames"]]
    assert [f.msg for f in got] == want
    assert dec.errors.get("crc", 0) >= 1 and dec.errors.get("cobs", 0) >= 1


@pytest.fixture(scope="module")
def wl_tool(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc/gcc) on PATH"
    exe = tmp_path_factory.mktemp("c") / "wl_tool"
    # The warnings a firmware build is likely to enable, and AddressSanitizer + UBSan (abort on the
    # first finding): every vector and fuzz line below also checks the header for overruns and UB.
    r = subprocess.run([cc, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Werror",
                        "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        "-I", str(C_DIR), "-o", str(exe), str(C_DIR / "wl_tool.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    def run(lines: list[str]) -> list[str]:
        r = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"wl_tool exited with {r.returncode}: {r.stderr[-3000:]}"  # sanitizer reports
        return r.stdout.splitlines()

    return run


def test_c_crc_and_cobs_match_vectors(wl_tool):
    cases = VECTORS["crc"]["cases"]
    lines = [f"crc {c['data']}" for c in cases]
    lines += [f"cobs_enc {c['decoded']}" for c in VECTORS["cobs"]] + [f"cobs_dec {c['encoded']}" for c in VECTORS["cobs"]]
    out = wl_tool(lines)
    assert out[:len(cases)] == [f"{c['crc']:04x}" for c in cases]
    n = len(VECTORS["cobs"])
    assert out[len(cases):len(cases) + n] == [c["encoded"] for c in VECTORS["cobs"]]
    assert out[len(cases) + n:] == [c["decoded"] for c in VECTORS["cobs"]]


def test_c_frames_and_messages_match_vectors(wl_tool):
    lines, want = [], []
    for v in VECTORS["frames"]:
        msg = message(v)
        lines.append(f"frame_enc {v['type']} {v['seq']} {v['ack']} {v['t_us']} {v['payload']}")
        want.append(v["wire"])
        lines.append(f"frame_dec {v['wire'][:-2]}")
        want.append(f"{v['type']} {v['seq']} {v['ack']} {v['t_us']} {v['payload']}")
        line = pack_line(msg)
        if line:
            lines.append(line)
            want.append(v["payload"])
        if isinstance(msg, P.Command):  # what the MCU parses
            lines.append(f"unpack command {v['payload']}")
            want.append(f"{len(msg.motors)} " + " ".join(f"{m.mode} {bits(m.setpoint)}" for m in msg.motors))
        if isinstance(msg, P.Config):
            lines.append(f"unpack config {v['payload']}")
            want.append(pack_line(msg).removeprefix("pack config "))
        if isinstance(msg, P.Heartbeat):
            lines.append(f"unpack heartbeat {v['payload']}")
            want.append(str(msg.status))
        if isinstance(msg, P.Estop):
            lines.append(f"unpack estop {v['payload']}")
            want.append(str(msg.reason))
    # Wrong lengths are refused by every unpacker (the firmware then NACKs bad_length).
    for what, payload in (("command", "00000000"), ("config", "00" * 24), ("heartbeat", "00"), ("estop", "")):
        lines.append(f"unpack {what} {payload}")
        want.append("ERR -1")
    assert wl_tool(lines) == want


def test_c_matches_hand_derived_frames(wl_tool):
    lines, want = [], []
    for msg, seq, ack, t_us, header, payload, _, wire in HAND:
        lines.append(f"frame_enc {msg.TYPE} {seq} {ack} {t_us} {_hex(payload)}")
        want.append(_hex(wire))
        lines.append(f"frame_dec {_hex(wire)[:-2]}")
        want.append(f"{msg.TYPE} {seq} {ack} {t_us} {_hex(payload)}")
    assert wl_tool(lines) == want


def test_c_rejects_and_resynchronises_like_python(wl_tool):
    out = wl_tool([f"frame_dec {r['wire'][:-2]}" for r in VECTORS["rejects"]])
    assert out == [f"ERR {C_ERR[r['why']]}" for r in VECTORS["rejects"]]
    out = wl_tool([f"stream {VECTORS['stream']['bytes']}"])
    want = [VECTORS["frames"][i] for i in VECTORS["stream"]["frames"]]
    assert out[:-1] == [f"{v['type']} {v['seq']} {v['ack']} {v['t_us']} {v['payload']}" for v in want]
    assert out[-1].startswith("END ") and int(out[-1].split()[1]) >= 2


def _fuzz_stream(rng: random.Random) -> bytes:
    """A byte stream mixing intact vector frames, corrupted and truncated ones, random garbage, lone
    and doubled delimiters, runs longer than MAX_ENCODED, and CRC-valid frames of an unknown type or
    with a malformed payload (which the C framing layer passes up and Python's decoder refuses)."""
    wires = [bytes.fromhex(v["wire"]) for v in VECTORS["frames"]]
    out = bytearray()
    for _ in range(rng.randint(1, 12)):
        kind = rng.randrange(8)
        if kind == 0:
            out += rng.choice(wires)
        elif kind == 1:
            w = bytearray(rng.choice(wires))
            w[rng.randrange(len(w))] ^= rng.randrange(1, 256)
            out += w
        elif kind == 2:
            w = rng.choice(wires)
            out += w[:rng.randrange(1, len(w))]
        elif kind == 3:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 60)))
        elif kind == 4:
            out += b"\x00" * rng.randint(1, 3)
        elif kind == 5:
            out += bytes(rng.randrange(1, 256) for _ in range(P.MAX_ENCODED + rng.randint(-2, 3)))
        elif kind == 6:  # valid COBS decoding to just under / over the largest frame: the C decoder's bound
            n = P.MAX_FRAME + rng.randint(-2, 5)
            out += cobs.encode(bytes(rng.randrange(1, 256) for _ in range(n))) + b"\x00"
        else:
            typ, payload = rng.choice([(0x7F, b""), (0x03, b"\x01"), (0x12, bytes(7)), (0x40, bytes(4))])
            body = struct.pack("<BBHHIH", 1, typ, 9, 8, 7, len(payload)) + payload
            out += cobs.encode(body + crc.crc16(body).to_bytes(2, "big")) + b"\x00"
    return bytes(out + b"\x00")


def test_c_and_python_stream_decoders_agree_on_fuzzed_bytes(wl_tool):
    """300 fuzzed streams through both decoders: the same frames in the same order, and the same
    number of rejected chunks, except that frames of unknown type or malformed payload are passed up
    by the C framing layer (the firmware's message switch refuses them) and refused by Python."""
    rng = random.Random(55)
    streams = [_fuzz_stream(rng) for _ in range(300)]
    out = wl_tool([f"stream {s.hex()}" for s in streams])
    results, k = [], 0
    for _ in streams:
        frames = []
        while not out[k].startswith("END "):
            frames.append(out[k])
            k += 1
        results.append((frames, int(out[k].split()[1])))
        k += 1
    assert k == len(out)
    passed_up = 0
    for stream, (c_frames, c_rejected) in zip(streams, results):
        dec = P.StreamDecoder()
        py = [f"{f.type} {f.seq} {f.ack} {f.t_us} {f.msg.pack().hex()}" for f in dec.feed(stream)]
        c_only = [line for line in c_frames if line not in py]
        assert [line for line in c_frames if line in py] == py
        for line in c_only:  # each is well framed, and Python refuses it as a message
            typ, seq, ack, t_us, *payload = line.split()
            payload = bytes.fromhex(payload[0] if payload else "")
            body = struct.pack("<BBHHIH", 1, int(typ), int(seq), int(ack), int(t_us), len(payload)) + payload
            with pytest.raises(P.ProtocolError) as e:
                P.unpack_frame(body + crc.crc16(body).to_bytes(2, "big"))
            assert e.value.reason in ("type", "payload")
        errors = dict(dec.errors)
        assert len(c_only) == errors.pop("type", 0) + errors.pop("payload", 0)
        assert c_rejected == sum(errors.values())
        passed_up += len(c_only)
    assert passed_up > 0 and sum(r for _, r in results) > 300  # the fuzz reached both kinds of case


def test_c_reference_builds_as_cpp_and_agrees(tmp_path):
    """Arduino-style firmware compiles the header as C++: the same driver built by the system C++
    compiler with the same warnings answers the CRC check and a frame vector identically."""
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "no C++ compiler (c++/g++) on PATH"
    exe = tmp_path / "wl_tool_cpp"
    r = subprocess.run([cxx, "-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Werror",
                        "-I", str(C_DIR), "-o", str(exe), str(C_DIR / "wl_tool.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    v = VECTORS["frames"][5]
    out = subprocess.run([str(exe)], input=f"crc {b'123456789'.hex()}\nframe_dec {v['wire'][:-2]}\n",
                         capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    assert out == ["29b1", f"{v['type']} {v['seq']} {v['ack']} {v['t_us']} {v['payload']}"]
