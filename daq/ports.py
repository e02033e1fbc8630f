"""Loopback TCP ports that are free right now, for tests, benchmarks and generated lab configs."""
from __future__ import annotations

import re
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


def on_free_ports(text: str, extra: int = 0, host: str = "127.0.0.1") -> tuple[str, list[int]]:
    """`text` (a lab config) with every ``HOST:PORT`` of `host` moved to a free port (one distinct port
    for each distinct old one), and `extra` more free ports distinct from those, for the caller's own
    endpoints.

    One pass of `re.sub`: replacing port by port rewrites a port another replacement just wrote
    whenever an old port is a prefix of a new one (``127.0.0.1:5557`` matches ``127.0.0.1:55579``,
    giving ``127.0.0.1:529679``; seen in a clean-clone test run).
    """
    pattern = re.compile(re.escape(host) + r":(\d+)\b")
    old = sorted(set(pattern.findall(text)))
    free = free_tcp_ports(len(old) + extra, host)
    new = dict(zip(old, map(str, free)))
    return pattern.sub(lambda m: f"{host}:{new[m.group(1)]}", text), free[len(old):]
