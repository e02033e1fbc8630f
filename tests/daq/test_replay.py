"""Replay (daq.replay): recorded frames back on a real ZeroMQ bus, exactly and deterministically."""
from __future__ import annotations

import threading
import time

from mcap.reader import make_reader

from daq.bus import Publisher, Subscriber
from daq.frames import Frame, encode
from daq.labload import write_session
from daq.record import unpack_message
from daq.replay import WireFrame, frames, replay, set_backpressure, wire_frames


def key(f: Frame) -> tuple:
    """Everything a replayed frame must carry over from the recording (t_pub is the replay's own)."""
    return (f.stream, f.kind, f.seq, f.t, f.t_host, f.t_device, f.rate_hz, tuple(f.channels), tuple(f.units),
            f.data.dtype.str, f.data.shape, f.data.tobytes(),
            tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in f.extra.items()), repr(f.meta))


def replay_into_slow_subscriber(path, source=frames) -> tuple[list[tuple], dict]:
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
        n = replay(source(path), pub, speed=None)
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
    second, _ = replay_into_slow_subscriber(path, wire_frames)  # the fast path: the same frames
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


class Parts:
    """A stand-in publisher that keeps what `WireFrame.send` hands over (no socket: bytes compared)."""

    def __init__(self):
        self.sent: list[tuple] = []

    def send_parts(self, stream, seq, rate_hz, parts, t_pub):
        self.sent.append((stream, seq, rate_hz, [bytes(p) for p in parts], t_pub))


def test_wire_frames_are_the_bytes_of_the_encoded_frames(tmp_path):
    """Truth: `daq.frames.encode` of each decoded frame, stamped with the same t_pub. The session mixes
    layouts (a stream whose block size changes, extra buffers, NaN, an event with meta, a stream
    without device clock) so that both the long and the short path are taken."""
    import numpy as np

    from daq.labload import frames as load_frames, lab_streams
    from daq.record import SessionWriter, Settings, event_frame

    path = tmp_path / "mixed.mcap"
    w = SessionWriter(path, Settings(fsync=False))
    for i, f in enumerate(load_frames(lab_streams(), 0.5)):
        w.write(f)
        if i % 50 == 0:
            w.write(event_frame("mark", i // 50, f.t, "info", n=i, tag=b"x"))
    odd = Frame("forceplate/FP9", "force", 0, None, 10**12, 10**12, 1000.0, ("Fz",), ("N",), np.ones((3, 1)))
    for seq, n in enumerate((3, 3, 7, 3, 0)):
        odd.seq, odd.data = seq, np.full((n, 1), float(seq))
        w.write(odd)
    w.close()
    pub = Parts()
    wires = list(wire_frames(path))
    for wf in wires:
        assert type(wf) is WireFrame
        wf.send(pub)
    decoded = list(frames(path))
    assert len(decoded) == len(wires) == len(pub.sent) > 700
    for f, (stream, seq, rate, parts, t_pub) in zip(decoded, pub.sent):
        f.t_pub = t_pub
        assert (stream, seq, rate) == (f.stream, f.seq, f.rate_hz)
        assert parts == [bytes(p) for p in encode(f)]


def test_walklab_replay_fast_publishes_every_recorded_frame(tmp_path):
    """The command (the fast path, `wire_frames`) into a real subscriber in this process that reads
    slower than the replay sends: the command is done long before the subscriber, and must wait
    for it to take the frames still queued (it exited with them, and the tail was lost unseen)."""
    import subprocess
    import sys
    from pathlib import Path

    from daq.ports import free_tcp_ports

    path = tmp_path / "s.mcap"
    written = write_session(path, 10.0)  # ~14 MB: more than the loopback socket buffers hold
    port, = free_tcp_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "replay", str(path), "--fast", "--quiet",
                             "--bind", endpoint, "--wait-subscribers", "1"], cwd=Path(__file__).resolve().parents[2],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = []
    with Subscriber(endpoint, rcvhwm=100) as sub:
        try:
            while len(got) < len(written):
                f = sub.recv(timeout_s=60)
                assert f is not None, f"{len(got)} of {len(written)} frames"
                got.append(key(f))
                if len(got) % 50 == 0:
                    time.sleep(0.005)  # ~10 000 frames/s at most: the replay sends faster
        finally:
            out, err = proc.communicate(timeout=60)
        assert all(st.dropped == 0 for st in sub.stats().values())
    assert proc.returncode == 0, err
    assert got == [key(f) for f in written] and f"{len(written)} frames published" in out


def test_a_bad_recorded_field_is_the_same_frame_error_on_both_paths(tmp_path):
    """A message of a known channel and layout whose seq is a string (a damaged or foreign file):
    the fast path refuses it with the FrameError that encoding the decoded frame gives."""
    import msgpack
    import pytest
    from mcap.writer import Writer

    from daq.frames import FrameError
    from daq.labload import frames as load_frames, lab_streams
    from daq.record import MESSAGE_ENCODING, PROFILE, pack_frame

    fp1 = [f for f in load_frames(lab_streams(), 0.05) if f.stream == "forceplate/FP1"]
    path = tmp_path / "bad.mcap"
    with open(path, "wb") as fh:
        w = Writer(fh)
        w.start(profile=PROFILE, library="test")
        cid = w.register_channel("forceplate/FP1", MESSAGE_ENCODING, 0, {})
        for f in fp1[:-1]:
            w.add_message(cid, f.t, pack_frame(f), f.t, f.seq)
        doc = msgpack.unpackb(pack_frame(fp1[-1]))
        doc["seq"] = "nine"
        w.add_message(cid, fp1[-1].t, msgpack.packb(doc), fp1[-1].t, 9)
        w.finish()
    with pytest.raises(FrameError) as slow:
        for f in frames(path):
            encode(f)
    with pytest.raises(FrameError) as fast:
        list(wire_frames(path))
    assert str(fast.value) == str(slow.value) and "seq" in str(fast.value)


def test_sigterm_stops_a_fast_replay_whose_subscriber_stopped_reading(tmp_path):
    """``--fast`` (back-pressure) as a lab process, into a subscriber that is connected but never reads:
    the replay waits for it, its health shows the frame count standing still, and SIGTERM still stops
    it (a send blocked for ever never looked at the stop: the process had to be killed)."""
    import signal
    import subprocess
    from pathlib import Path

    from controller.config import load
    from controller.supervisor import Supervisor
    from daq.health import parse_health
    from daq.ports import free_tcp_ports

    path = tmp_path / "s.mcap"
    written = write_session(path, 10.0)  # ~14 MB: more than the queues and loopback socket buffers hold
    sup, rep = free_tcp_ports(2)
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f"""
[lab]
name = "stuck"
[bus]
sndhwm = 100
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "replay"
module = "daq.replay"
bind = "tcp://127.0.0.1:{rep}"
args = ["--file", "{path}", "--fast", "--wait-subscribers", "2"]
""")
    lab = load(cfg)
    endpoint = lab.process("replay").endpoint
    stuck = Subscriber(endpoint, sorted({f.stream for f in written}), rcvhwm=1)  # never reads
    watcher = Subscriber(endpoint, ["health/replay"])
    proc = subprocess.Popen(Supervisor(lab).command(lab.process("replay")), cwd=Path(__file__).resolve().parents[2],
                            stderr=subprocess.PIPE, text=True)
    try:
        counts: list[float] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (len(counts) >= 2 and counts[-1] == counts[-2] > 0):
            f = watcher.recv(timeout_s=1.0)
            if f is not None:
                h = parse_health(f)
                assert f.meta["state"] != "finished", "the replay finished: the subscriber never held it up"
                counts.append(h.get("replay/frames", {}).get("count", 0.0))
        assert len(counts) >= 2 and counts[-1] == counts[-2] > 0, f"the replay never stood still: {counts}"
        assert counts[-1] < len(written)
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(60)
        except subprocess.TimeoutExpired:
            status = None
        assert status == 0, "SIGTERM did not stop the waiting replay within 60 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        err = proc.communicate(timeout=30)[1]
        stuck.close()
        watcher.close()
    assert "Traceback" not in err, err
