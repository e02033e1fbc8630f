"""`dynamics.service_torques` as a real `controller.proc` subprocess on real ZeroMQ sockets: the frames
of an offline world walk published by the test, the outputs read back with a Subscriber.

Truth: the same frames fed in process (`test_service_torques.serve`, whose results are checked against
the reduced tables and the world there) — the process computes the same numbers — and every output
frame carries its latency (publication minus the newest input's receipt), reported in its health."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import textwrap
import time
from collections import defaultdict

import numpy as np

from daq.bus import Publisher, Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports
from dynamics.service_torques import REANCHOR_FRAMES

from .test_service_live import start
from .test_service_torques import PLATES, TORQUES, ZMP, frames_of, serve, walk


def lab_file(tmp_path, ports, name: str, devices: list[str], args: list[str], plates, extra: str = ""):
    """A private lab file: the ``torques`` process (dynamics.service_torques with `args`, `devices`) on
    ports[1], a ``feed`` process entry on ports[2] that is never started (the test publishes there), the
    force plates `plates` ((name, `fp.Plate`)) and `extra` TOML."""
    text = textwrap.dedent(f"""
        [lab]
        name = "{name}"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "torques"
        module = "dynamics.service_torques"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = {json.dumps(devices)}
        args = {json.dumps(args)}
        [[processes]]
        name = "feed"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[2]}"
    """) + textwrap.dedent(extra) + "".join(textwrap.dedent(f"""
        [devices.{n}]
        kind = "forceplate"
        source = "test"
        corners = {p.corners.tolist()}
        origin = [0.0, 0.0, -0.04]
        """) for n, p in plates)
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def lab(tmp_path, ports, max_wait_s: float = 2.0):
    return lab_file(tmp_path, ports, "torquestest", ["FP1", "FP2", "walker_mcu"], ["--max-wait-s", repr(max_wait_s)],
                    PLATES, """
        [devices.walker_mcu]
        kind = "mcu"
        port = "/tmp/walklab-test-none"
        motors = ["left_shaft", "right_shaft"]
        """)


@contextlib.contextmanager
def serving(tmp_path, config, ports, topics: list[str], expect: list[str], timeout_s: float = 30.0):
    """The ``torques`` process of lab file `config` (ports: supervisor, the process, the test's feed)
    started, the test's publisher it reads from and a subscriber to its `topics`, both connected:
    (publisher, process, subscriber); the process killed if still running."""
    feed = Publisher(f"tcp://127.0.0.1:{ports[2]}")
    proc = start(config, "torques", tmp_path)
    sub = Subscriber([f"tcp://127.0.0.1:{ports[1]}"], topics, expect=expect)
    try:
        assert sub.wait_connected(timeout_s=timeout_s), "the service did not come up"
        assert feed.wait_for_subscribers(1, timeout_s=timeout_s), "the service never subscribed"
        yield feed, proc, sub
    finally:
        if proc.poll() is None:
            proc.kill()
        sub.close()
        feed.close()


@contextlib.contextmanager
def served(tmp_path, max_wait_s: float, topics: list[str], expect: list[str]):
    """`serving` on a private walker lab (`lab`)."""
    ports = free_tcp_ports(3)
    with serving(tmp_path, lab(tmp_path, ports, max_wait_s), ports, topics, expect) as started:
        yield started


def run_through(feed, proc, sub, frames, n_expected: int, pause_s: float, wait_s: float) -> tuple[dict, dict]:
    """Publish `frames` (a pause of pause_s every 4: about real time), collect the outputs until
    `n_expected` torques samples came (at most wait_s), stop the process (SIGTERM) and collect until its
    health says stopped: ({stream: frames received}, the subscriber's stats); the process exited 0."""
    got = defaultdict(list)
    for k, f in enumerate(frames):
        publish(feed, f)
        if k % 4 == 3:
            time.sleep(pause_s)
            while (g := sub.recv(timeout_s=0)) is not None:
                got[g.stream].append(g)
    deadline = time.monotonic() + wait_s
    while sum(g.samples for g in got[TORQUES]) < n_expected and time.monotonic() < deadline:
        g = sub.recv(timeout_s=0.2)
        if g is not None:
            got[g.stream].append(g)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        g = sub.recv(timeout_s=0.2)
        if g is not None:
            got[g.stream].append(g)
            if g.stream == "health/torques" and g.meta["state"] == "stopped":
                break
    stats = sub.stats()
    assert proc.wait(timeout=wait_s) == 0
    return got, stats


def publish(feed, f) -> None:
    """Publish frame `f`'s samples and stamps (the publisher gives its own seq)."""
    feed.publish(f.stream, f.data, kind=f.kind, rate_hz=f.rate_hz, channels=f.channels, units=f.units, t=f.t,
                 t_host=f.t_host, t_device=f.t_device)


def test_the_process_computes_what_the_service_computes_in_process(tmp_path):
    frames = frames_of(walk())
    expected = serve(frames)
    with served(tmp_path, 2.0, ["dynamics/*", "health/torques"],
                ["dynamics/torques", "dynamics/zmp", "dynamics/contact"]) as (feed, proc, sub):
        # about real time: the world's 1.6 s in ~1.6 s
        got, stats = run_through(feed, proc, sub, frames, sum(d.shape[0] for d, _ in expected.frames[TORQUES]),
                                 0.002, 30.0)
    for stream in (TORQUES, ZMP):
        live = np.concatenate([g.data for g in got[stream]])
        mine = np.concatenate([d for d, _ in expected.frames[stream]])
        assert live.shape == mine.shape
        assert np.allclose(live, mine, rtol=1e-12, atol=1e-9, equal_nan=True)
    t_live = np.concatenate([g.t + np.arange(g.samples) * 1_000_000 for g in got[TORQUES]])
    t_mine = np.concatenate([kw["t"] + np.arange(d.shape[0]) * 1_000_000 for d, kw in expected.frames[TORQUES]])
    assert np.array_equal(t_live, t_mine)
    assert all(0 <= g.meta["latency_s"] < 5.0 for g in got[TORQUES])
    assert all(stats[s].gaps == 0 and stats[s].dropped == 0 for s in (TORQUES, ZMP, "dynamics/contact"))
    # every frame's latency went into the health frames (p50/p99/max per second)
    health = [parse_health(g) for g in got["health/torques"]]
    assert sum(h["latency"]["latency_n"] for h in health if "latency" in h) == len(got[TORQUES])
    # a health period in which nothing was computed (the service idle, e.g. at the end) has n = 0 and no max (NaN)
    assert all(h["latency"]["latency_max_s"] < 5.0 for h in health if "latency" in h and h["latency"]["latency_n"])


def test_the_process_waits_for_a_slow_input_as_long_as_its_measured_lateness(tmp_path):
    """The markers published 1 s after the encoders and plates of the same lab time (a slow motion-capture
    system), the process with --max-wait-s 0.5: once the markers' first frame is in, every sample waits for
    the markers that bracket it and is computed from them — stale 0; a fixed wait held each with the
    markers at their last value 0.5 s after its receipt, before the markers came (every sample stale).
    Truth: the same frames fed in process with no host clock (`serve`: each sample from its bracketing
    inputs)."""
    frames = frames_of(walk())
    expected = serve(frames)
    lag = 1.0
    end = lambda f: (f.t - frames[0].t + round((f.samples - 1) * 1e9 / f.rate_hz)) * 1e-9   # noqa: E731
    plan = sorted(((end(f) + (lag if f.stream == "markers/walker" else 0.0), k) for k, f in enumerate(frames)))
    got = []
    with served(tmp_path, 0.5, [TORQUES], [TORQUES]) as (feed, proc, sub):
        t0 = time.monotonic()
        for due, k in plan:        # in real time: each frame when its last sample is measured (markers: 1 s on)
            while time.monotonic() < t0 + due:
                while (g := sub.recv(timeout_s=0)) is not None:
                    got.append(g)
                time.sleep(0.001)
            publish(feed, frames[k])
        n_expected = sum(d.shape[0] for d, _ in expected.frames[TORQUES])
        deadline = time.monotonic() + 30.0
        while sum(g.samples for g in got) < n_expected and time.monotonic() < deadline:
            g = sub.recv(timeout_s=0.2)
            if g is not None:
                got.append(g)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    t = np.concatenate([g.t + np.arange(g.samples) * 1_000_000 for g in got])
    data = np.concatenate([g.data for g in got])
    stale = data[:, list(got[0].channels).index("stale")] > 0
    steady = t > frames[0].t + round((lag + 0.01) * 1e9)      # the markers' first frame came at lag
    assert steady.sum() > 500 and not stale[steady].any(), f"{stale[steady].sum()} of {steady.sum()} samples stale"
    mine = np.concatenate([d for d, _ in expected.frames[TORQUES]])
    t_mine = np.concatenate([kw["t"] + np.arange(d.shape[0]) * 1_000_000 for d, kw in expected.frames[TORQUES]])
    k = np.searchsorted(t_mine, t[steady])
    assert np.array_equal(t_mine[k], t[steady])
    assert np.allclose(data[steady], mine[k], rtol=1e-12, atol=1e-9, equal_nan=True)


def test_a_first_frame_stamped_60_s_ahead_is_re_anchored_and_the_good_frames_are_computed(tmp_path):
    """The first frame the process receives — the reference shaft's, stamped 60 s ahead of the frames
    after it — has nothing to be judged against, so it is taken and set the shaft 60 s on: every good
    frame after it was a repeat and the process published no torque for them (found by review).
    REANCHOR_FRAMES good frames rejected in a row with one lead re-anchor the shaft (an ``events/clock``
    clock_reset naming it) and every later encoder sample is computed. Truth: the frames sent (their
    stamps) and the same clean frames fed in process (`serve`, checked against the world in
    test_service_torques)."""
    frames = frames_of(walk())
    left = [f for f in frames if f.stream == "encoder/left_shaft"]
    first = dataclasses.replace(left[0], t=left[0].t + 60 * 10 ** 9, t_device=None)
    t1, a, _ = serve(frames).series(TORQUES)
    anchor = left[REANCHOR_FRAMES - 1].t                        # the good frame that re-anchors the shaft
    sent = np.concatenate([f.sample_times() for f in left[REANCHOR_FRAMES - 1:]])
    got = defaultdict(list)
    with served(tmp_path, 2.0, [TORQUES, "events/clock"], [TORQUES]) as (feed, proc, sub):
        for k, f in enumerate([first] + frames):
            publish(feed, f)
            if k % 4 == 3:
                time.sleep(0.002)          # about real time
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and not (got[TORQUES] and got[TORQUES][-1].sample_times()[-1] >= t1[-1]
                                                   and got["events/clock"]):
            g = sub.recv(timeout_s=0.2)
            if g is not None:
                got[g.stream].append(g)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    t = np.concatenate([g.sample_times() for g in got[TORQUES]])
    data = np.concatenate([g.data for g in got[TORQUES]])
    # every good reference sample from the re-anchoring on is computed (the last ones, whose inputs never
    # come, held after --max-wait-s), and nothing else after it — none at the bad stamp
    assert np.array_equal(t[t >= anchor], sent[:np.count_nonzero(t >= anchor)])
    assert np.isin(t1[t1 >= anchor], t).all() and np.count_nonzero(t1 >= anchor) > 1000
    later = t1 >= anchor + 20_000_000       # the shaft's acceleration and the chassis velocity have their history
    k = np.searchsorted(t, t1[later])
    assert np.allclose(data[k], a[later], rtol=1e-12, atol=1e-9, equal_nan=True)
    events = [g.meta for g in got["events/clock"]]
    assert [(e["event"], e["stream"]) for e in events] == [("clock_reset", "encoder/left_shaft")]
    assert abs(events[0]["jump_s"] + 60.0) < 1.0
