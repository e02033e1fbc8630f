"""`walklab run`'s status figures (controller/status.py): the frames lost on the way.

Truth: what the test itself published and received over real ZeroMQ sockets; the figure is read
from a real health frame (`daq.health.Health` watching the receiving subscriber, published and parsed
as the status reads it). A publisher that restarts loses nothing on the way — the figure must say 0
(it added the samples of the publisher's down time, ~30-140 in quiet runs); a subscriber that cannot
keep up loses exactly the frames it never received.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from controller.status import lost_frames
from daq.bus import Publisher, Subscriber
from daq.health import Health, parse_health
from daq.ports import free_tcp_ports

from .test_run_sim import robot  # noqa: F401  (a fixture: a one-nominal robot and its library)

STREAM = "x/y"
BLOCK = 10          # samples per frame at 1 kHz
TIMEOUT = 20.0


def publish(pub: Publisher, k0: int, n: int, t0: int) -> None:
    """Frames k0 .. k0 + n - 1 of a 1 kHz stream whose sample 0 is at t0 [ns]."""
    for k in range(k0, k0 + n):
        t = t0 + k * BLOCK * 1_000_000
        pub.publish(STREAM, np.full((BLOCK, 1), float(k)), kind="test", rate_hz=1000.0, channels=["k"], units=["1"],
                    t_host=t, t=t)


def receive(sub: Subscriber, n: int) -> list[int]:
    """The frame numbers (data) of the next `n` frames of STREAM."""
    got = []
    while len(got) < n:
        f = sub.recv(timeout_s=TIMEOUT)
        assert f is not None, f"only {len(got)} of {n} frames came"
        got.append(int(f.data[0, 0]))
    return got


def health_of(sub: Subscriber) -> dict:
    """{"reader": parsed health frame} of a `Health` watching `sub`, as a lab process publishes it."""
    with Publisher("tcp://127.0.0.1:*") as hpub, Subscriber([hpub.endpoint], ["health/reader"]) as hsub:
        health = Health("reader", hpub)
        health.watch(sub)
        assert hpub.wait_for_subscribers(1, TIMEOUT) and hsub.wait_connected(TIMEOUT)
        health.tick(time.monotonic_ns() + 2_000_000_000)
        f = hsub.recv(timeout_s=TIMEOUT)
        assert f is not None, "no health frame"
        return {"reader": parse_health(f)}


def test_a_restarted_publisher_loses_no_frame_on_the_way():
    ep = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    t0 = time.monotonic_ns()
    with Subscriber([ep], [STREAM], expect=()) as sub:
        with Publisher(ep) as first:
            assert first.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
            publish(first, 0, 20, t0)
            assert receive(sub, 20) == list(range(20))
        # the process restarts; it was down 1 s of its sample clock (1000 samples never produced)
        with Publisher(ep) as second:
            deadline = time.monotonic() + TIMEOUT
            while not second.wait_for_subscribers(1, 0.1):
                sub.recv(timeout_s=0.05)  # the subscriber notices the drop and reconnects
                assert time.monotonic() < deadline, "the subscriber never came back"
            publish(second, 0, 20, t0 + 20 * BLOCK * 1_000_000 + 1_000_000_000)
            assert receive(sub, 20) == list(range(20))   # every frame of both runs received
        h = health_of(sub)
    st = h["reader"][STREAM]
    assert st["restarts"] == 1 and st["dropped"] == 0
    assert st["lost_samples"] == 1000          # the down time, in samples: not frames lost on the way
    assert lost_frames(h).get(STREAM, (0, ""))[0] == 0


def test_frames_a_slow_subscriber_never_received_are_counted_exactly():
    ep = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    t0 = time.monotonic_ns()
    with Subscriber([ep], [STREAM], expect=(), rcvhwm=10) as sub, Publisher(ep, sndhwm=10) as pub:
        assert pub.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
        n = 3000
        publish(pub, 0, n, t0)           # nobody reads meanwhile: the queues hold ~20 frames
        got = []
        while (f := sub.recv(timeout_s=1.0)) is not None:
            got.append(int(f.data[0, 0]))
        publish(pub, n, 1, t0)           # one more frame, read: its seq shows every gap before it
        got += receive(sub, 1)
        h = health_of(sub)
    lost = n + 1 - len(got)
    assert got == sorted(got) and got[-1] == n and lost > 0
    assert lost_frames(h)[STREAM] == (lost, "reader")


def test_walklab_estop_reaches_the_loop_during_a_scripted_run(tmp_path, robot):  # noqa: F811
    """A scripted `walklab run` leaves the loop's operator endpoint free between its commands, so `walklab
    estop` (which binds it for a moment) reaches the loop. Truth: the loop's own ``controller/events`` frames
    on a real socket (the script's request taken, then an ``estop`` latch) and the e-stop command's exit status."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import psutil

    from controller.config import load
    from controller.loop import EVENT_STREAM

    from .test_run_sim import REPO, private_lab

    script = tmp_path / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.2\n")
    cfg = private_lab(tmp_path, robot)
    loop = next(p for p in load(cfg).processes if p.module == "controller.loop")
    run = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "300", "--script",
                            str(script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           # started as a shell's background job is: SIGINT ignored (the run must still stop on it)
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    causes: list[str] = []
    try:
        with Subscriber([loop.bind], [EVENT_STREAM], expect=()) as events:
            deadline = time.monotonic() + 300.0
            while "request" not in causes:  # the script's command was taken: its publisher has had its turn
                assert run.poll() is None and time.monotonic() < deadline, f"no scripted request; events {causes}"
                f = events.recv(timeout_s=0.5)
                if f is not None:
                    causes.append(str((f.meta or {}).get("cause")))
            # its log (no --record: a temporary file) is open once: mkstemp's descriptor was leaked beside it
            logs = [o.path for o in psutil.Process(run.pid).open_files() if Path(o.path).name.startswith("walklab-run-")]
            assert len(logs) == 1, logs
            estop = subprocess.run([sys.executable, "-m", "controller.cli", "estop", str(cfg), "--timeout", "60"],
                                   cwd=REPO, capture_output=True, text=True, timeout=300)
            assert estop.returncode == 0, estop.stdout + estop.stderr
            assert estop.stdout.startswith("e-stop latched")
            deadline = time.monotonic() + 60.0
            while "estop" not in causes:
                assert time.monotonic() < deadline, f"the loop did not latch; events {causes}"
                f = events.recv(timeout_s=0.5)
                if f is not None:
                    causes.append(str((f.meta or {}).get("cause")))
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=150)  # the run's --duration is 300 s: a lost SIGINT fails here
    assert run.returncode == 0, out[-3000:]
    assert re.search(r"safety: .*; [1-9]\d* safety event\(s\)\n(    .*\n)*    estop: ", out), out[-3000:]  # the summary


def test_the_status_shows_the_dynamics_latency_of_every_torques_frame(tmp_path, robot):  # noqa: F811
    """The status's latency is every ``dynamics/torques`` frame's ``meta["latency_s"]`` once the lab is
    up: the summary's p50/p99/max over the whole run, the live figures over the latest frames; not
    a health figure (neither the plate service's ``processing`` time nor a per-second p99). Truth: the
    latencies the test published in real frames, and numpy's percentiles of them."""
    import io

    from rich.console import Console

    from controller.config import load
    from controller.status import RECENT_FRAMES, Monitor

    from .test_run_sim import private_lab

    lab = load(private_lab(tmp_path, robot))
    procs = [p for p in lab.processes if p.enabled]
    mon = Monitor(lab)
    pubs = {p.name: Publisher(p.bind) for p in procs}
    torques = pubs[next(p.name for p in procs if p.module == "dynamics.service_torques")]
    latency = np.random.default_rng(1).uniform(1e-4, 3e-3, RECENT_FRAMES + 500)
    latency[RECENT_FRAMES // 2] = 0.25  # one stalled frame: the run's max and, being old, not the live one
    try:
        assert all(p.wait_for_subscribers(1, TIMEOUT) for p in pubs.values())
        for name, pub in pubs.items():  # the lab is up: every process has said so
            pub.publish(f"health/{name}", np.array([[4e-5, 9e-5]]), kind="health", rate_hz=1.0,
                        channels=["processing:latency_p50_s", "processing:latency_p99_s"], units=["s", "s"],
                        meta={"process": name, "pid": 1, "uptime_s": 1.0, "state": "running"})
        deadline = time.monotonic() + TIMEOUT
        while not mon.up():
            assert time.monotonic() < deadline, f"health frames not received: {sorted(mon.state)}"
            mon.poll(0.1)
        for lat in latency:
            torques.publish("dynamics/torques", np.zeros((1, 1)), kind="torques", rate_hz=1000.0, channels=["tau"],
                            units=["N*m"], meta={"latency_s": float(lat)})
        while len(mon.latency) < latency.size:
            assert time.monotonic() < deadline + TIMEOUT, f"{len(mon.latency)} torques frames received"
            mon.poll(0.1)
    finally:
        for p in pubs.values():
            p.close()
        mon.close()
    p50, p99 = np.percentile(latency, [50, 99])
    assert mon.latency_figures() == pytest.approx((p50, p99, 0.25))
    r50, r99 = np.percentile(latency[-RECENT_FRAMES:], [50, 99])
    assert mon.latency_figures(last=RECENT_FRAMES) == pytest.approx((r50, r99, latency[-RECENT_FRAMES:].max()))
    out = Console(file=io.StringIO(), force_terminal=True, width=140, record=True)
    out.print(mon.table(1.0, None))
    assert f"dynamics latency  p50 {r50 * 1e3:.2f} ms, p99 {r99 * 1e3:.2f} ms" in out.export_text(), out.export_text()
    assert f"dynamics latency p50 {r50 * 1e3:.2f} ms p99 {r99 * 1e3:.2f} ms" in mon.line(1.0)
    summary = mon.summary(1.0, None, tmp_path / "log", 0)
    assert (f"dynamics latency: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms, max 250.000 ms over "
            f"{latency.size} torques frames") in summary, summary
