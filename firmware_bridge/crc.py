"""CRC of the walklab wire protocol: CRC-16/CCITT-FALSE (= CRC-16/IBM-3740).

Parameters (Williams model / reveng catalogue): width 16, poly 0x1021, init 0xFFFF, refin false,
refout false, xorout 0x0000, **check 0x29B1** (the CRC of ASCII "123456789"). Not to be confused
with CRC-16/XMODEM (init 0, check 0x31C3), CRC-16/MCRF4XX (MAVLink, check 0x6F91) or CRC-16/X-25
(check 0x906E). A width-16 CRC detects every single error burst of length <= 16 bits (when appended
most significant byte first, as the protocol does: protocol.CRC_BYTEORDER), and, since 0x1021 has
an even number of terms (a factor x + 1), every odd-weight error.
"""
from __future__ import annotations

import binascii

NAME = "CRC-16/CCITT-FALSE"
POLY = 0x1021
INIT = 0xFFFF
CHECK = 0x29B1  # crc16(b"123456789")
WIDTH_BITS = 16


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE of `data` as an int in [0, 0xFFFF] (stdlib binascii.crc_hqx with init 0xFFFF)."""
    return binascii.crc_hqx(data, INIT)
