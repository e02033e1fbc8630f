"""Health frames: schedule, figures against known inputs, and delivery over a real bus."""
import math

import numpy as np
import pytest

from daq.bus import Publisher, Subscriber
from daq.frames import Frame, FrameError, decode, encode
from daq.health import Health, parse_health

S = 1_000_000_000  # ns


class FakeClock:
    def __init__(self):
        self.now = 10 * S

    def __call__(self):
        return self.now


@pytest.fixture
def pub():
    with Publisher("tcp://127.0.0.1:*") as p:
        yield p


def test_tick_publishes_once_per_period_on_an_absolute_schedule(pub):
    clock = FakeClock()
    h = Health("sim", pub, period_s=1.0, clock=clock)
    times = []
    for step in range(0, 5_500, 10):  # 5.5 s in 10 ms steps
        clock.now = 10 * S + step * 1_000_000
        if h.tick() is not None:
            times.append(clock.now)
    assert times == [(10 + k) * S for k in range(1, 6)]
    clock.now += 7 * S + S // 2  # a stall of several periods: one frame, no burst
    assert h.tick() is not None and h.tick() is None
    assert pub.sent["health/sim"] == 6


def test_figures_equal_what_was_recorded(pub):
    clock = FakeClock()
    h = Health("daemon", pub, period_s=0.5, clock=clock)
    for _ in range(250):
        h.count("loop")
    h.count("overruns", 3)
    for d in (4, 9, 2):
        h.queue_depth("queue/writer", d)
    for ms in range(1, 101):  # 1..100 ms
        h.latency("loop", ms / 1000)
    for _ in range(7):
        pub.publish("fp/1", np.zeros((5, 1)), kind="force", rate_hz=1000.0, channels=["fz"], units=["N"])
    clock.now += S // 2
    frame = h.tick()
    assert frame.stream == "health/daemon" and frame.kind == "health" and frame.rate_hz == 2.0
    assert frame.data.shape == (1, len(frame.channels)) and frame.data.dtype == np.float64
    assert frame.meta["process"] == "daemon" and frame.meta["state"] == "running"
    assert frame.meta["uptime_s"] == pytest.approx(0.5)
    v = parse_health(decode(encode(frame)))  # exactly what a monitor sees on the wire
    assert v["loop"]["count"] == 250 and v["loop"]["per_s"] == pytest.approx(500.0)
    assert v["overruns"]["count"] == 3
    assert (v["queue/writer"]["depth"], v["queue/writer"]["depth_max"]) == (2, 9)
    # percentiles of 1..100 ms with linear interpolation: p50 = 50.5 ms, p99 = 99.01 ms
    assert v["loop"]["latency_p50_s"] == pytest.approx(0.0505)
    assert v["loop"]["latency_p99_s"] == pytest.approx(0.09901)
    assert v["loop"]["latency_max_s"] == pytest.approx(0.1) and v["loop"]["latency_n"] == 100
    assert v["fp/1"]["sent"] == 7 and v["fp/1"]["sent_per_s"] == pytest.approx(14.0)
    units = dict(zip(frame.channels, frame.units))
    assert units["loop:latency_p99_s"] == "s" and units["loop:per_s"] == "1/s" and units["loop:count"] == "1"
    # the next period starts afresh: rates and latency windows reset, totals carry on
    clock.now += S // 2
    v = parse_health(h.tick())
    assert v["loop"]["count"] == 250 and v["loop"]["per_s"] == 0.0
    assert v["loop"]["latency_n"] == 0 and math.isnan(v["loop"]["latency_p50_s"])
    assert v["queue/writer"]["depth_max"] == 2


def test_health_reports_a_watched_subscriber_over_the_bus(pub):
    with Subscriber(pub.endpoint, ["fp/1", "health/*"]) as sub:
        assert pub.wait_for_subscribers(1, 10.0) and sub.wait_connected(10.0)
        h = Health("recorder", pub, period_s=0.2)
        h.watch(sub)
        for _ in range(40):
            pub.publish("fp/1", np.zeros((5, 1)), kind="force", rate_hz=1000.0, channels=["fz"], units=["N"])
        got = []
        while len(got) < 40:
            f = sub.recv(10.0)
            assert f is not None
            got.append(f)
        frame = h.publish()
        health = None
        while health is None:
            f = sub.recv(10.0)
            assert f is not None
            health = f if f.stream == "health/recorder" else None
    v = parse_health(health)
    assert v["fp/1"]["received"] == 40 and v["fp/1"]["dropped"] == 0 and v["fp/1"]["gaps"] == 0
    assert v["fp/1"]["latency_max_s"] > 0 and v["bus"]["malformed"] == 0
    assert health.seq == frame.seq == 0


def test_parse_health_refuses_other_frames():
    other = Frame("fp/1", "force", 0, None, 0, 0, 1000.0, ("fz",), ("N",), np.zeros((1, 1)))
    with pytest.raises(FrameError, match="not a one-sample health frame"):
        parse_health(other)
    bad = Frame("health/x", "health", 0, None, 0, 0, 1.0, ("nocolon",), ("1",), np.zeros((1, 1)))
    with pytest.raises(FrameError, match="subject:field"):
        parse_health(bad)


def test_health_arguments_are_checked(pub):
    with pytest.raises(ValueError, match="period_s"):
        Health("x", pub, period_s=0)
    with pytest.raises(ValueError, match="name"):
        Health("", pub)


def test_health_of_a_process_watching_many_streams_fits_in_a_frame(pub):
    """200 watched streams x 13 fields: one frame, decodable by any subscriber."""
    with Publisher("tcp://127.0.0.1:*") as source, Subscriber(source.endpoint) as sub:
        assert source.wait_for_subscribers(1, 10.0) and sub.wait_connected(10.0)
        names = [f"forceplate/plate_number_{i:03d}" for i in range(200)]
        for name in names:
            source.publish(name, np.zeros((1, 1)), kind="force", rate_hz=1000.0, channels=["fz"], units=["N"])
        got = 0
        while got < len(names):
            assert sub.recv(10.0) is not None
            got += 1
        h = Health("recorder", pub)
        h.watch(sub)
        frame = h.publish()
    v = parse_health(decode(encode(frame)))
    assert len(frame.channels) == 200 * 13 + 1  # 13 fields per watched stream, and bus:malformed
    assert all(v[name]["received"] == 1 for name in names)
