"""Loopback TCP ports that are free right now, for tests, benchmarks and generated lab configs."""
from __future__ import annotations

import socket


def free_tcp_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct TCP ports on `host` that the OS reports free at the time of the call.

    All `n` sockets are bound before any is closed, so the ports are distinct; another process
    may still take one before the caller binds it (the usual race of this technique).
    """
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
