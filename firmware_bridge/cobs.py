"""Consistent Overhead Byte Stuffing (COBS, Cheshire & Baker 1999), the framing of the walklab wire protocol.

COBS rewrites a byte string so that it contains no 0x00; 0x00 then delimits frames on the wire.
Each block is ``code, data[code-1]``: ``code`` < 0xFF means "code-1 data bytes, then a zero"
(the zero after the last block is implied and dropped), ``code`` = 0xFF means "254 data bytes,
no zero". Overhead: 1 byte + 1 per 254. Example: ``11 22 00 33`` -> ``03 11 22 02 33``.
Output is byte-identical to the `cobs` package (cobs.cobs.encode/decode).
"""
from __future__ import annotations


class CobsError(ValueError):
    """An encoded block is not valid COBS (zero byte inside, or a code pointing past the end)."""


def encode(data: bytes) -> bytes:
    """COBS-encode `data` (any bytes); the result has no 0x00 and is not delimited."""
    out = bytearray()
    blocks = bytes(data).split(b"\x00")
    last = len(blocks) - 1
    for i, block in enumerate(blocks):
        n = len(block)
        start = 0
        while n - start >= 254:
            out.append(0xFF)
            out += block[start:start + 254]
            start += 254
        # The final block's implied zero is the phantom terminator: a final run that ended
        # exactly on a 0xFF block needs no extra code byte (matches the reference algorithm).
        if i < last or start < n or n == 0:
            out.append(n - start + 1)
            out += block[start:]
    return bytes(out)


def decode(encoded: bytes) -> bytes:
    """Decode one COBS block sequence (without its 0x00 delimiter); raise CobsError if malformed."""
    out = bytearray()
    i = 0
    n = len(encoded)
    while i < n:
        code = encoded[i]
        if code == 0:
            raise CobsError(f"COBS: zero byte at offset {i} inside a frame")
        j = i + code
        if j > n:
            raise CobsError(f"COBS: code 0x{code:02x} at offset {i} runs past the end ({n} bytes)")
        block = encoded[i + 1:j]
        if 0 in block:
            raise CobsError(f"COBS: zero byte inside the block at offset {i}")
        out += block
        i = j
        if code < 0xFF and i < n:
            out.append(0)
    return bytes(out)
