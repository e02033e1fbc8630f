"""daq.ports: free loopback ports, and a lab config moved onto them."""
from __future__ import annotations

import re
import socket

from daq.ports import free_tcp_ports, on_free_ports


def test_on_free_ports_moves_each_port_once_even_when_an_old_port_prefixes_a_new_one():
    """Old ports 1-9: every free port the OS hands out (ephemeral range, 5 digits) begins with one of
    them, so a port-by-port replacement rewrites ports it just wrote (the clean-clone failure
    "tcp://127.0.0.1:529679"). Truth: the text's own structure — each endpoint keeps its place, equal
    old ports get equal new ones, distinct get distinct, other hosts are untouched — and the OS, which
    lets every new port be bound."""
    lines = [f'bind = "tcp://127.0.0.1:{p}"' for p in (1, 2, 3, 4, 5, 6, 7, 8, 9, 3)]
    text = "\n".join(lines + ['remote = "tcp://10.1.2.3:5"'])
    out, extra = on_free_ports(text, extra=2)
    got = re.findall(r'^bind = "tcp://127\.0\.0\.1:(\d+)"$', out, flags=re.M)
    assert len(got) == 10 and out.endswith('remote = "tcp://10.1.2.3:5"')
    ports = [int(p) for p in got]
    assert ports[2] == ports[9] and len(set(ports)) == 9
    assert not set(ports) & set(extra) and len(set(extra)) == 2
    for p in set(ports) | set(extra):
        assert 1024 < p <= 65535
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_free_tcp_ports_are_distinct_and_bindable():
    ports = free_tcp_ports(16)
    assert len(set(ports)) == 16
    socks = [socket.socket() for _ in ports]
    try:
        for s, p in zip(socks, ports):
            s.bind(("127.0.0.1", p))
    finally:
        for s in socks:
            s.close()
