"""Fault-test fixtures. `service_lab`: the real dynamics service process in a one-plate lab.

`ServiceLab` writes the lab config, starts ``dynamics.service`` as `walklab run` would (a real
`controller.proc` subprocess), and is itself the publisher of the plate's raw blocks (real
ZeroMQ, stamped on the host monotonic clock the service receives them by, sent at real time) and
the subscriber of the service's outputs, health frame and events.
"""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Publisher, Subscriber
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def service_lab() -> type:
    """The `ServiceLab` class: ``with service_lab(tmp_path, args) as lab: ...``."""
    return ServiceLab


class ServiceLab:
    """One type-2 plate FP1 (1 kHz, `CORNERS`, `ORIGIN`, plus `plate_toml`) served by the real
    service with `args`. Use as a context manager; `got` collects received frames by stream."""

    MS = 1_000_000
    BLOCK = 5
    CHANNELS = ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
    UNITS = ("N", "N", "N", "N*m", "N*m", "N*m")
    CORNERS = ((0.6, 0.4, 0.0), (0.0, 0.4, 0.0), (0.0, 0.8, 0.0), (0.6, 0.8, 0.0))
    ORIGIN = (0.0, 0.0, -0.04)

    def __init__(self, tmp: Path, args: list[str], plate_toml: str = "", stop_grace_s: float = 2.0):
        ports = free_tcp_ports(3)
        text = textwrap.dedent(f"""
            [lab]
            name = "faults"
            [supervisor]
            bind = "tcp://127.0.0.1:{ports[0]}"
            stop_grace_s = {stop_grace_s}
            [[processes]]
            name = "dynamics"
            module = "dynamics.service"
            bind = "tcp://127.0.0.1:{ports[1]}"
            devices = ["FP1"]
            args = {list(args)!r}
            # not started: the test publishes FP1 there
            [[processes]]
            name = "plates"
            module = "controller.healthmon"
            bind = "tcp://127.0.0.1:{ports[2]}"
            [devices.FP1]
            kind = "forceplate"
            source = "test"
            corners = {[list(c) for c in self.CORNERS]}
            origin = {list(self.ORIGIN)}
        """).replace("'", '"') + textwrap.dedent(plate_toml)
        config = tmp / "lab.toml"
        config.write_text(text)
        self.lab = load(config)
        self.log_path = tmp / "dynamics.log"
        self.endpoints = {"svc": f"tcp://127.0.0.1:{ports[1]}", "plates": f"tcp://127.0.0.1:{ports[2]}"}
        self.got: dict[str, list] = {}
        self.t0 = 0

    def __enter__(self) -> "ServiceLab":
        self.pub = Publisher(self.endpoints["plates"])
        self.sub = Subscriber([self.endpoints["svc"]], ["dynamics/*", "events/*", "health/dynamics"],
                              expect=["dynamics/grf/FP1", "dynamics/grf"])
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(Supervisor(self.lab).command(self.lab.process("dynamics")), cwd=REPO,
                                         env=env, stdout=log, stderr=subprocess.STDOUT)
        assert self.pub.wait_for_subscribers(1, timeout_s=20.0), f"the service never subscribed:\n{self.log}"
        assert self.sub.wait_connected(timeout_s=20.0), f"the service's outputs never came:\n{self.log}"
        self.t0 = time.monotonic_ns() + 50 * self.MS
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.pub.close()
        self.sub.close()

    @property
    def log(self) -> str:
        return self.log_path.read_text()[-3000:]

    def stamps(self, k0: int, jump_ns: int = 0) -> dict[str, int]:
        """Stamps of sample slot k0 (1 kHz from `t0`), `jump_ns` off on every clock."""
        ms = self.MS
        return dict(t_device=k0 * ms + jump_ns, t_host=self.t0 + k0 * ms + jump_ns, t=self.t0 + k0 * ms + jump_ns)

    def send(self, raw: np.ndarray, k0: int, jump_ns: int = 0) -> None:
        self.pub.publish("forceplate/FP1", raw, kind="force", rate_hz=1000.0, channels=self.CHANNELS, units=self.UNITS,
                         **self.stamps(k0, jump_ns))

    def pump_until(self, t_ns: int) -> None:
        """Collect the service's frames until host time `t_ns` (the next block is due)."""
        while (now := time.monotonic_ns()) < t_ns:
            f = self.sub.recv(timeout_s=min(0.05, (t_ns - now) * 1e-9))
            if f is not None:
                self.got.setdefault(f.stream, []).append(f)

    def wait_for(self, predicate, timeout_s: float) -> bool:
        """Collect frames until `predicate(frame)` holds for one of them (True) or the time is up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            f = self.sub.recv(timeout_s=0.2)
            if f is not None:
                self.got.setdefault(f.stream, []).append(f)
                if predicate(f):
                    return True
        return False

    def stop(self) -> int:
        """SIGTERM; the exit status. The contract is an exit within stop_grace_s; the bound here
        is ten times that (a loaded machine), and a process still running fails the test."""
        assert self.proc.poll() is None, f"the service died:\n{self.log}"
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10 * self.lab.supervisor.stop_grace_s)
