"""`walklab devices`: list serial ports and the capabilities of each walklab device answering HELLO."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "devices", help="list serial ports and the walklab devices (MCUs, force boards) answering on them",
        description="List serial ports (pyserial list_ports) and, for each that answers HELLO within the "
                    "timeout, show its capabilities. With --port, probe only the given ports or pyserial "
                    "URLs (a device path, a virtual MCU's pty path, socket://host:port, ...); a given port "
                    "that does not answer is an error.")
    p.add_argument("--port", action="append", metavar="URL",
                   help="probe this port / pyserial URL only (repeatable)")
    p.add_argument("--timeout", type=float, default=0.3, metavar="S",
                   help="seconds to wait for the capabilities answer, per try (default 0.3; 2 tries)")
    p.add_argument("--baud", type=int, default=1_000_000, help="baud rate (default 1000000)")
    p.set_defaults(func=handler)


def describe(url: str, caps) -> str:
    """Human-readable capabilities block of one device."""
    from firmware_bridge import protocol as P

    cpr = sorted(set(caps.cpr))
    cpr_txt = ", ".join(str(c) for c in cpr) if len(cpr) > 1 else (str(cpr[0]) if cpr else "-")
    return "\n".join([
        f"{url}: {caps.name or '(unnamed)'}  firmware {'.'.join(map(str, caps.firmware))}  protocol v{P.PROTOCOL_VERSION}",
        f"  motors: {caps.n_motors}  encoder counts/rev: {cpr_txt}",
        f"  force channels: {caps.n_force}",
        f"  stream rates (Hz): {', '.join(map(str, caps.rates_hz)) or '-'}",
        f"  heartbeat: {caps.heartbeat_hz} Hz",
    ])


def handler(args: argparse.Namespace) -> int:
    from serial.tools import list_ports

    from firmware_bridge.link import Link, LinkError

    if args.timeout <= 0:
        raise ValueError(f"--timeout {args.timeout}: expected a positive number of seconds")
    explicit = bool(args.port)
    ports = [(u, "") for u in args.port] if explicit else \
        [(p.device, p.description) for p in sorted(list_ports.comports(), key=lambda p: p.device)]
    if not ports:
        print("no serial ports found")
        return 0
    for url, desc in ports:
        try:
            with Link(url, baudrate=args.baud, heartbeat_hz=0, reconnect=False) as link:
                caps = link.hello(timeout_s=args.timeout, retries=1)
        except LinkError as exc:
            if explicit:
                raise LinkError(f"{url}: {exc}" if url not in str(exc) else str(exc)) from None
            print(f"{url}: {desc + '  ' if desc and desc != 'n/a' else ''}no walklab device ({exc})")
            continue
        print(describe(url, caps))
    return 0
