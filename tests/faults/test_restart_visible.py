"""A publisher killed with SIGKILL and restarted is visible (issue 8, A3): a restart in the
subscriber's counters and in `walklab bus monitor` (RESTARTS), the samples lost across it as lost
(from the sample times and the rate, not from seq: the new run's seq starts again at 0), none of
it filed under BEFORE_JOIN; the health monitor logs it.

Truth: the publisher writes each sample's index on the lab's 1 kHz grid (time since a reference
the test chooses, in samples) into the data, so the samples lost are the holes in the indices
received. Real ZeroMQ, real publisher subprocesses, bounded waits.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from controller.healthmon import HealthBook
from daq.bus import Publisher, Subscriber
from daq.health import Health
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0  # generous: a loaded 2-core machine
MS = 1_000_000

# A plate-like publisher: 1 kHz in 5-sample blocks, paced in real time, stamped by its sample
# count from its start t0 (on the 1 ms grid of the reference), column 0 = the sample's index on
# that grid. argv: endpoint, reference [ns], subscribers to wait for, frames.
PUBLISHER = textwrap.dedent("""
    import sys, time, numpy as np
    from daq.bus import Publisher
    endpoint, ref, wait, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with Publisher(endpoint) as pub:
        if wait and not pub.wait_for_subscribers(wait, 60.0):
            sys.exit(3)
        t0 = ref + -(-(time.monotonic_ns() - ref) // 1_000_000) * 1_000_000
        print(t0, flush=True)
        k0 = (t0 - ref) // 1_000_000
        for i in range(frames):
            while time.monotonic_ns() < t0 + (i + 1) * 5_000_000:
                pub.poll_subscriptions(0.001)
            pub.publish("forceplate/FP1", np.arange(k0 + 5 * i, k0 + 5 * i + 5, dtype=float).reshape(5, 1),
                        kind="force", rate_hz=1000.0, channels=["index"], units=["1"],
                        t_host=t0 + i * 5_000_000)
        sys.stdin.read()
""")


def start(endpoint: str, ref: int, wait: int, frames: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PUBLISHER, endpoint, str(ref), str(wait), str(frames)],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(TIMEOUT)


def lost_in(indices: np.ndarray) -> int:
    """Samples missing from a received sequence of sample indices (the holes between them)."""
    steps = np.diff(indices)
    assert np.all(steps >= 1), "indices went backwards: the truth itself is broken"
    return int(np.sum(steps - 1))


def test_a_killed_and_restarted_publisher_is_a_restart_with_its_samples_lost():
    endpoint = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    ref = time.monotonic_ns()
    first = start(endpoint, ref, 1, 100_000)
    second = None
    try:
        with Subscriber(endpoint, ["forceplate/FP1"]) as sub, Publisher("tcp://127.0.0.1:*") as health_pub, \
                Subscriber(health_pub.endpoint, ["health/*"]) as health_sub:
            assert health_pub.wait_for_subscribers(1, TIMEOUT)
            health = Health("reader", health_pub)
            health.watch(sub)
            book = HealthBook(silent_s=60.0)
            first.stdout.readline()  # publishing
            indices = []
            deadline = time.monotonic() + TIMEOUT
            while len(indices) < 500 and time.monotonic() < deadline:  # 100 frames = 0.1 s of plate
                if (f := sub.recv(0.5)) is not None:
                    indices.extend(f.data[:, 0])
            assert len(indices) == 500
            health.publish()
            assert book.update(health_sub.recv(TIMEOUT)) == []

            first.send_signal(signal.SIGKILL)
            first.wait(TIMEOUT)
            while (f := sub.recv(0.3)) is not None:  # what was in flight
                indices.extend(f.data[:, 0])
            last_before = indices[-1]
            time.sleep(1.0)  # the outage: no publisher for 1 s
            second = start(endpoint, ref, 0, 100_000)  # publishes at once, like the simulator
            deadline = time.monotonic() + TIMEOUT
            after = 0
            while after < 500 and time.monotonic() < deadline:
                if (f := sub.recv(0.5)) is not None:
                    indices.extend(f.data[:, 0])
                    after += f.samples
            assert after >= 500, "the restarted publisher's frames never came"
            st = sub.stats()["forceplate/FP1"]
            health.publish()
            warnings = book.update(health_sub.recv(TIMEOUT))
    finally:
        stop(first)
        if second is not None:
            stop(second)
    idx = np.asarray(indices)
    truth = lost_in(idx)
    assert truth >= 900  # the 1 s outage, at least
    first_after = int(idx[np.searchsorted(idx, last_before, side="right")])
    assert truth == first_after - last_before - 1  # every hole is the restart's
    assert (st.restarts, st.lost_samples, st.missed_at_join, st.out_of_order, st.gaps) == (1, truth, 0, 0, 0)
    assert st.received * 5 == st.samples == len(idx)
    assert st.dropped == st.first_seq  # the new run's frames published before we reconnected
    assert "reader: forceplate/FP1 restarts 0 -> 1" in warnings
    assert f"reader: forceplate/FP1 lost_samples 0 -> {truth}" in warnings


def test_bus_monitor_shows_the_restart():
    endpoint = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    ref = time.monotonic_ns()
    first = start(endpoint, ref, 1, 100_000)
    second = None
    mon = subprocess.Popen([sys.executable, "-m", "controller.cli", "bus", "monitor", "--connect", endpoint,
                            "--stream", "forceplate/FP1", "--duration", "8"],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0_first = int(first.stdout.readline())  # the monitor has joined: the publisher started
        time.sleep(0.5)
        t_kill = time.monotonic_ns()
        first.send_signal(signal.SIGKILL)
        first.wait(TIMEOUT)
        time.sleep(1.0)
        second = start(endpoint, ref, 0, 100_000)
        t0_second = int(second.stdout.readline())
        out, err = mon.communicate(timeout=60)
    finally:
        mon.kill()
        stop(first)
        if second is not None:
            stop(second)
    assert mon.returncode == 0, err
    lines = out.strip().splitlines()
    header = next(line.split() for line in lines if line.startswith("STREAM"))
    row = dict(zip(header, next(line.split() for line in lines if line.startswith("forceplate/FP1"))))
    assert int(row["RESTARTS"]) == 1 and int(row["BEFORE_JOIN"]) == 0 and int(row["OUT_OF_ORDER"]) == 0
    # at least the samples of the outage: from the kill (the last published sample is before it)
    # to the new run's first sample (none of its samples is earlier)
    assert int(row["LOST_SAMPLES"]) >= (t0_second - t_kill) // MS - 1 >= 900
    assert t0_first < t_kill
    assert re.search(r" \| restarts 1, lost \d+ frame\(s\) / \d+ sample\(s\), out of order 0, malformed 0$",
                     lines[0])
