"""Replay (daq.replay): recorded frames back on a real ZeroMQ bus, exactly and deterministically."""
from __future__ import annotations

import threading
import time

from mcap.reader import make_reader

from daq.bus import Publisher, Subscriber
from daq.frames import Frame
from daq.labload import write_session
from daq.record import unpack_message
from daq.replay import frames, replay, set_backpressure


def key(f: Frame) -> tuple:
    """Everything a replayed frame must carry over from the recording (t_pub is the replay's own)."""
    return (f.stream, f.kind, f.seq, f.t, f.t_host, f.t_device, f.rate_hz, tuple(f.channels), tuple(f.units),
            f.data.dtype.str, f.data.shape, f.data.tobytes(),
            tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in f.extra.items()), repr(f.meta))


def replay_into_slow_subscriber(path) -> tuple[list[tuple], dict]:
    """Replay as fast as possible into a subscriber that reads slowly, over inproc (no kernel socket
    buffers to hide a loss) with queues of 20 frames on either side."""
    with Publisher(f"inproc://replay-{path.name}", sndhwm=20) as pub:
        set_backpressure(pub)
        sub = Subscriber(pub.endpoint, rcvhwm=20)
        got: list[tuple] = []
        sent: list[int] = []

        def consume() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (sent and len(got) >= sent[0]):
                f = sub.recv(timeout_s=0.2)
                if f is None:
                    continue
                got.append(key(f))
                if len(got) % 20 == 0:
                    time.sleep(0.001)  # a slow consumer: the replay must wait for it, not drop

        assert pub.wait_for_subscribers(1, 30)
        thread = threading.Thread(target=consume)
        thread.start()
        n = replay(frames(path), pub, speed=None)
        sent.append(n)
        thread.join(150)
        stats = sub.stats()
        sub.close()
    assert n == len(got)
    return got, stats


def test_fast_replay_reproduces_the_recording_twice_identically_without_drops(tmp_path):
    path = tmp_path / "s.mcap"
    written = write_session(path, 3.0)
    first, stats = replay_into_slow_subscriber(path)
    assert all(st.dropped == 0 and st.gaps == 0 for st in stats.values())
    assert first == [key(f) for f in written]  # every frame, in order, exactly as recorded
    second, _ = replay_into_slow_subscriber(path)
    assert second == first


def test_real_time_and_scaled_pacing(tmp_path):
    """Frame k leaves at W0 + (t_k - t_0) / speed on the replay's clock (an injected clock)."""
    path = tmp_path / "s.mcap"
    written = write_session(path, 0.5)

    class Clock:
        now = 5_000

        def __call__(self) -> int:
            return self.now

        def sleep(self, s: float) -> None:
            self.now += round(s * 1e9)

    class Recorder:
        def __init__(self, clock):
            self.clock, self.sent = clock, []

        def send(self, f):
            self.sent.append((self.clock(), f.t))

        def poll_subscriptions(self):
            pass

    for speed in (1.0, 4.0, 0.5):
        clock = Clock()
        pub = Recorder(clock)
        assert replay(frames(path), pub, speed=speed, clock=clock, sleep=clock.sleep) == len(written)
        t0 = written[0].t
        for sent_at, t in pub.sent:
            due = 5_000 + (t - t0) / speed
            assert due <= sent_at < due + 50_000_000  # not early; late only by the sleep slice


def test_stream_selection_and_time_window(tmp_path):
    path = tmp_path / "s.mcap"
    write_session(path, 2.0)
    got = [key(f) for f in frames(path, ["forceplate/*", "markers/mocap"], start_s=0.5, end_s=1.25)]
    with open(path, "rb") as fh:  # the same selection made with the mcap library's own reader
        reader = make_reader(fh)
        t0 = min(m.log_time for _, _, m in reader.iter_messages())
    with open(path, "rb") as fh:
        want = [key(unpack_message(m.data)) for _, ch, m in make_reader(fh).iter_messages(log_time_order=False)
                if (ch.topic.startswith("forceplate/") or ch.topic == "markers/mocap")
                and t0 + 500_000_000 <= m.log_time < t0 + 1_250_000_000]
    assert got == want and len(want) == round(0.75 * (2 * 200 + 200))
    assert {k[0] for k in got} == {"forceplate/FP1", "forceplate/FP2", "markers/mocap"}
