"""The process contract and the daemon skeleton (daq/context.py).

The example daemon of docs/daemons.md, read from that page, runs as a real process
(`python -m controller.proc`) on a real pseudo-terminal: this test plays the amplifier on the
pty's master side. Truths: the values this test wrote, in the order written; sample counts for
the device clock; the pty's life (closing it is pulling the cable). In-process: `serve` against a
Source that never opens (the retry is counted, a stop request ends it, a ValueError goes through).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import tty
from pathlib import Path

import numpy as np
import pytest

from controller.config import load
from controller.proc import make_context
from daq.bus import Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]
RATE = 1000.0
BLOCK = 10


def doc_example() -> str:
    """The Python block of docs/daemons.md that defines the example daemon's run()."""
    text = (REPO / "docs" / "daemons.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (example,) = [b for b in blocks if "class LinePlate" in b]
    return example


def lab(tmp_path: Path, module: str, port: Path) -> tuple[Path, list[int]]:
    ports = free_tcp_ports(2)
    path = tmp_path / "lab.toml"
    path.write_text(textwrap.dedent(f"""
        [lab]
        name = "skeleton"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "plates"
        module = "{module}"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["FP1"]
        [devices.FP1]
        kind = "forceplate"
        source = "{port}"
        rate_hz = {RATE}
        block = {BLOCK}
        corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.0, 0.0], [0.6, 0.0, 0.0]]
    """))
    return path, ports


class Amplifier:
    """The device side: a pty whose slave is linked at `path`; writes sample lines on the master."""

    def __init__(self, path: Path):
        self.master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line editing: bytes pass as written
        self.slave_name = os.ttyname(slave)
        os.close(slave)  # the daemon opens it by path
        self.path = path
        tmp = path.with_suffix(".new")
        os.symlink(self.slave_name, tmp)
        os.replace(tmp, path)

    def write(self, lines: list[bytes]) -> None:
        """`lines` at most at the plate's rate, 10 per write: line i leaves no earlier than
        ``t_start + (i // 10) * 10 ms`` (host monotonic clock)."""
        self.t_start = time.monotonic_ns()
        for i in range(0, len(lines), 10):
            os.write(self.master, b"".join(lines[i:i + 10]))
            time.sleep(10 / RATE)

    def unplug(self) -> None:
        """Pull the cable: the port's path disappears, as a USB serial device's does, and the pty closes.
        (With the path left behind, the daemon can reopen /dev/pts/N as soon as another program gets that
        number — Linux hands out the lowest free one: a reconnect within one health period, the state
        never "disconnected"; seen once with three suites running at once.)"""
        os.unlink(self.path)
        os.close(self.master)


def rows(k0: int, n: int) -> np.ndarray:
    """Sample k: Fx = k/8, Fy = −k, Fz = 700 + k mod 13, Mx = k/64, My = 0.5, Mz = −k/4 (exact in decimal)."""
    k = np.arange(k0, k0 + n, dtype=float)
    return np.column_stack([k / 8, -k, 700 + k % 13, k / 64, np.full(n, 0.5), -k / 4])


def lines(data: np.ndarray) -> list[bytes]:
    return [(" ".join(repr(float(v)) for v in row) + "\n").encode() for row in data]


class Bus:
    def __init__(self, port: int):
        self.sub = Subscriber([f"tcp://127.0.0.1:{port}"], ["forceplate/FP1", "health/plates"])
        self.frames: list = []
        self.health: dict = {}

    def until(self, pred, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s  # a hang guard
        while time.monotonic() < deadline:
            f = self.sub.recv(timeout_s=0.1)
            if f is None:
                continue
            if f.kind == "health":
                self.health = {**parse_health(f), "meta": f.meta}
            else:
                self.frames.append(f)
            if pred():
                return
        pytest.fail(f"{what}: not within {timeout_s} s; health {self.health}")

    def drain(self) -> None:
        """Everything still queued (the stopped process's last health frame among it)."""
        self.until(lambda: self.health.get("meta", {}).get("state") == "stopped", 30, "the last health frame")

    def count(self, subject: str) -> float:
        return self.health.get(subject, {}).get("count", 0)


def test_the_documented_daemon_publishes_what_the_device_sent_and_reconnects(tmp_path):
    (tmp_path / "line_plate.py").write_text(doc_example())
    port = tmp_path / "amp"
    config, ports = lab(tmp_path, "line_plate", port)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    bus = Bus(ports[1])
    proc = subprocess.Popen([sys.executable, "-m", "controller.proc", "--config", str(config), "--name", "plates"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # No device yet: the daemon waits and retries.
        bus.until(lambda: bus.count("device/open_failures") >= 2, 60, "open retries")
        assert bus.health["meta"]["state"] == "connecting"
        amp = Amplifier(port)
        bus.until(lambda: bus.count("device/sessions") == 1 and bus.health["meta"]["state"] == "running", 60,
                  "session 1")
        first = rows(0, 300)
        sent = lines(first)
        sent[123] = b"12.5 oops 3\n"  # a garbled sample
        amp.write(sent)
        bus.until(lambda: sum(f.samples for f in bus.frames) >= 300, 60, "300 samples")
        amp.unplug()
        starts = [amp.t_start]
        bus.until(lambda: bus.count("device/lost") == 1, 60, "the loss")
        assert bus.health["meta"]["state"] == "disconnected"
        session1 = list(bus.frames)
        amp = Amplifier(port)  # plugged back: a new pty at the same path
        bus.until(lambda: bus.count("device/sessions") == 2, 60, "session 2")
        second = rows(1000, 200)
        amp.write(lines(second))
        bus.until(lambda: sum(f.samples for f in bus.frames) >= 500, 60, "200 more samples")
        amp.unplug()
        starts.append(amp.t_start)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)  # a hang guard: the stop takes one read timeout
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the daemon did not stop on SIGTERM:\n{err}")
        try:
            bus.drain()
        finally:
            bus.sub.close()
    assert proc.returncode == 0 and "Traceback" not in err, err
    session2 = bus.frames[len(session1):]
    got1 = np.vstack([f.data for f in session1])
    expected = first.copy()
    expected[123] = np.nan
    np.testing.assert_array_equal(got1, expected)  # every value, in order; the garbled one NaN
    np.testing.assert_array_equal(np.vstack([f.data for f in session2]), second)
    assert bus.count("device/bad_lines") == 1 and bus.count("forceplate/FP1/samples") == 500
    for frames, t_start in zip((session1, session2), starts):
        assert [f.seq for f in frames] == list(range(frames[0].seq, frames[0].seq + len(frames)))
        # the device clock is the session's sample count: block j starts at j * BLOCK / RATE
        assert [f.t_device for f in frames] == [round(j * BLOCK * 1e9 / RATE) for j in range(len(frames))]
        assert all(f.rate_hz == RATE and f.channels == ("Fx", "Fy", "Fz", "Mx", "My", "Mz") for f in frames)
        # t_host: arrival of the block's last sample minus the block's span (sample counts); the
        # block's last line (10 j + 9) left at >= t_start + 10 j ms = t_start + t_device
        span = round((BLOCK - 1) * 1e9 / RATE)
        assert all(f.t_host + span >= t_start + f.t_device for f in frames)
        # Lab time t (ClockSync, the minimum-delay envelope; a session is shorter than its 1 s
        # window, so the envelope is the least t_recv - t_device so far): the first block defines it,
        # no sample is placed after its block's arrival, and none before this test wrote it
        # (line i left at >= t_start + (i // 10) * 10 ms: at most BLOCK - 1 ms before i ms).
        assert frames[0].t == frames[0].t_host
        assert all(f.t <= f.t_host for f in frames)
        assert all(f.t >= t_start + f.t_device - span for f in frames)


class NeverThere:
    """A Source whose device never appears (or whose config is wrong: `error`)."""

    def __init__(self, error: Exception):
        self.error, self.closed = error, 0

    def open(self) -> None:
        raise self.error

    def read(self, timeout_s: float):
        raise AssertionError("read() before a successful open()")

    def close(self) -> None:
        self.closed += 1


def context(tmp_path: Path):
    config, _ = lab(tmp_path, "daq.simulated", tmp_path / "none")
    lab_ = load(config)
    return make_context(lab_, lab_.process("plates"))


def test_serve_retries_a_missing_device_until_asked_to_stop(tmp_path):
    from daq.context import serve

    ctx = context(tmp_path)
    source = NeverThere(FileNotFoundError("no such port /dev/ttyUSB9"))
    stopper = threading.Timer(1.0, ctx.request_stop)
    stopper.start()
    try:
        assert serve(ctx, source, retry_s=0.1) == 0  # returns once stop is set (a hang here = a bug)
    finally:
        stopper.cancel()
        ctx.close()
    assert ctx.health._counts["device/open_failures"] >= 2 and "device/sessions" not in ctx.health._counts
    assert source.closed == 1


def test_serve_lets_a_config_mistake_through(tmp_path):
    from daq.context import serve

    ctx = context(tmp_path)
    try:
        with pytest.raises(ValueError, match="6 channels expected"):
            serve(ctx, NeverThere(ValueError("FP1: the amplifier sends 8 channels, 6 channels expected")))
    finally:
        ctx.close()


def test_the_context_finds_its_one_device_of_a_kind(tmp_path):
    ctx = context(tmp_path)
    try:
        assert ctx.device("forceplate").name == "FP1" and ctx.config.devices == ("FP1",)
        with pytest.raises(ValueError, match=r"expected exactly one device of kind 'mcu'.*listed: FP1 \(forceplate\)"):
            ctx.device("mcu")
    finally:
        ctx.close()


class Scripted:
    """A Source whose device stamps follow a script: one 10-sample 1 kHz block per read, block j
    stamped `t_device[j]` (ns); arrival = the host clock at the read. Blocks leave at the
    device's pace (10 ms apart, from the first read on); the stop is requested after the last."""

    def __init__(self, ctx, t_device: list[int]):
        self.ctx, self.t_device, self.j, self.t0 = ctx, t_device, 0, None

    def open(self) -> None:
        pass

    def read(self, timeout_s: float):
        from daq.context import Block

        if self.j == len(self.t_device):
            self.ctx.request_stop()
            return []
        now = self.ctx.clock()
        self.t0 = now if self.t0 is None else self.t0
        due = self.t0 + self.j * 10_000_000
        if now < due:
            time.sleep(min((due - now) * 1e-9, timeout_s))
            return []
        j, self.j = self.j, self.j + 1
        return [Block("test/clock", np.full((10, 1), float(j)), t_device=self.t_device[j], t_recv=self.ctx.clock(),
                      kind="test", rate_hz=1000.0, channels=("j",), units=("1",))]

    def close(self) -> None:
        pass


def test_a_device_clock_reset_restarts_the_fit_and_t_stays_on_the_host_clock(tmp_path):
    """2.5 s on time (the clock fit is a line by then), a reboot (the device clock starts again
    at 0), one block stamped 10 s ahead, then back on the rebooted clock. Truth: each block's own
    arrival (t_host, from the host clock): a block's lab time never lies after it, and the first
    block on a new fit is placed exactly there."""
    from daq.context import serve

    ms = 1_000_000
    stamps = [10 * ms * j for j in range(250)] + [10 * ms * j for j in range(50)]
    stamps += [stamps[-1] + 10_000 * ms] + [stamps[-1] + 10 * ms * (j + 2) for j in range(19)]
    ctx = context(tmp_path)
    sub = Subscriber([ctx.publisher.endpoint], ["test/clock", "events/*"])
    try:
        assert ctx.publisher.wait_for_subscribers(1, timeout_s=20.0) and sub.wait_connected(timeout_s=20.0)
        assert serve(ctx, Scripted(ctx, stamps)) == 0
        received = [f for f in iter(lambda: sub.recv(timeout_s=2.0), None)]
        counts = dict(ctx.health._counts)
    finally:
        sub.close()
        ctx.close()
    frames = [f for f in received if f.stream == "test/clock"]
    events = [f for f in received if f.stream == "events/plates"]
    # each reset is an event, published just before the block it re-anchors on (the script's three)
    assert [(e.kind, e.meta["event"], e.meta["severity"], e.meta["stream"]) for e in events] == \
        [("event", "clock_reset", "warning", "test/clock")] * 3
    assert [e.meta["t_device"] for e in events] == [stamps[250], stamps[300], stamps[301]]
    assert [received.index(e) + 1 for e in events] == [received.index(frames[j]) for j in (250, 300, 301)]
    assert "went back" in events[0].meta["reason"] and "ahead" in events[1].meta["reason"]
    assert [int(f.data[0, 0]) for f in frames] == list(range(len(stamps)))  # every block, in order
    assert [f.t_device for f in frames] == stamps  # as the device stamped them
    # Never after its arrival: exactly while a fit is the least delay seen (its first two 1 s
    # windows); once it is a line through the windows' minima, within ClockSync's reset_ms (50 ms:
    # a block further below the line than that re-anchors it).
    exact = set(range(0, 200)) | set(range(250, len(stamps)))
    assert all(f.t <= f.t_host for j, f in enumerate(frames) if j in exact)
    assert all(f.t <= f.t_host + 50 * ms for f in frames)
    for j in (0, 250, 300, 301):  # a new fit: its first block is placed at its arrival
        assert frames[j].t == frames[j].t_host, j
    # on a fit shorter than its 1 s window, the offset t - t_device is the least delay seen so far:
    # it never grows (a reset missed would show as a jump of it)
    for a, b in ((250, 299), (301, 319)):
        offsets = [f.t - f.t_device for f in frames[a:b + 1]]
        assert all(y <= x for x, y in zip(offsets, offsets[1:]))
    assert counts["test/clock/clock_resets"] == 3  # the reboot, the jump ahead, the jump back (each logged)


def test_a_device_clock_jumping_on_every_block_logs_a_line_a_second(tmp_path, caplog):
    """A device whose stamps jump 10 s ahead and back on alternate blocks re-anchors its fit on every
    block: each reset is counted and published as an event (truth: the script's jumps), while the log
    gets the first at once and then at most a line a second (`daq.logthrottle`; it was a line a block)."""
    import logging
    import math
    import re

    from daq.context import serve

    ms = 1_000_000
    stamps = [10 * ms * j + (10_000 * ms if j % 2 else 0) for j in range(200)]
    ctx = context(tmp_path)
    sub = Subscriber([ctx.publisher.endpoint], ["events/*"])
    try:
        assert ctx.publisher.wait_for_subscribers(1, timeout_s=20.0) and sub.wait_connected(timeout_s=20.0)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="walklab"):
            assert serve(ctx, Scripted(ctx, stamps)) == 0
        elapsed = time.monotonic() - t0
        events = [f for f in iter(lambda: sub.recv(timeout_s=2.0), None) if f.meta.get("event") == "clock_reset"]
        resets = dict(ctx.health._counts)["test/clock/clock_resets"]
    finally:
        sub.close()
        ctx.close()
    assert resets == 199 and len(events) == 199          # every block after the first jumps
    lines = [r.getMessage() for r in caplog.records if "clock fit re-anchored" in r.getMessage()]
    assert 1 <= len(lines) <= 1 + math.ceil(elapsed)
    held = sum(int(m.group(1)) for m in (re.search(r"\((\d+) more like it", x) for x in lines) if m)
    assert len(lines) + held <= resets      # written or counted in a next line, never more than happened


class Drifting:
    """A Source whose device clock runs ``drift`` fast against the host: 1 s blocks of a 1 kHz device,
    sample k (device time k ms) taken at host time ``H0 + k ms * (1 + drift)`` and its block
    arriving ``MIN_DELAY`` plus up to 10 us of jitter after its last sample. No waiting: the blocks
    come as fast as serve asks; the stop is requested after the last."""

    H0, MIN_DELAY, BLOCK = 5_000_000_000_000, 300_000, 1000

    def __init__(self, ctx, drift: float, blocks: int):
        self.ctx, self.drift, self.blocks, self.j = ctx, drift, blocks, 0
        self.rng = np.random.default_rng(7)

    def host(self, k: np.ndarray | int) -> np.ndarray:
        """The true host time of sample k [ns]."""
        return self.H0 + np.rint(np.asarray(k) * 1e6 * (1 + self.drift)).astype(np.int64)

    def open(self) -> None:
        pass

    def read(self, timeout_s: float):
        from daq.context import Block

        if self.j == self.blocks:
            self.ctx.request_stop()
            return []
        k0, self.j = self.j * self.BLOCK, self.j + 1
        arrival = int(self.host(k0 + self.BLOCK - 1)) + self.MIN_DELAY + int(self.rng.integers(0, 10_000))
        return [Block("test/drift", np.arange(k0, k0 + self.BLOCK, dtype=float)[:, None], t_device=k0 * 1_000_000,
                      t_recv=arrival, kind="test", rate_hz=1000.0, channels=("k",), units=("1",))]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("drift", [100e-6, -100e-6])
def test_sample_times_within_a_block_follow_the_estimated_rate(tmp_path, drift):
    """Truth: the analytic host time of every sample (plus the minimum delay, which no one-way method
    separates from the offset). After 10 s every sample of a block is within 0.2 ms of it, and a
    block's span is the true one within 5 us, where the nominal rate is off by 100 us."""
    from daq.context import serve

    ctx = context(tmp_path)
    sub = Subscriber([ctx.publisher.endpoint], ["test/drift"])
    source = Drifting(ctx, drift, blocks=20)
    try:
        assert ctx.publisher.wait_for_subscribers(1, timeout_s=20.0) and sub.wait_connected(timeout_s=20.0)
        assert serve(ctx, source) == 0
        frames = [f for f in iter(lambda: sub.recv(timeout_s=2.0), None)]
    finally:
        sub.close()
        ctx.close()
    assert len(frames) == 20
    for f in frames[10:]:
        k = f.data[:, 0].astype(np.int64)
        truth = source.host(k) + source.MIN_DELAY
        times = f.sample_times()
        assert np.max(np.abs(times - truth)) < 200_000, f.seq
        true_span, span = truth[-1] - truth[0], times[-1] - times[0]
        assert abs(span - true_span) < 5_000, (f.seq, span - true_span)
        nominal = f.sample_times("t_device") - f.t_device
        assert abs(nominal[-1] - true_span) > 90_000  # what the nominal rate would give
        assert f.meta["rate_lab_hz"] == pytest.approx(1000.0 / (1 + drift), rel=5e-6)
