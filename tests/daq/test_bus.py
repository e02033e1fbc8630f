"""The bus over real ZeroMQ sockets: round trips, counting of every lost frame, slow joiners, shutdown."""
import logging
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import zmq

from daq.bus import (BusError, EndpointError, Publisher, Subscriber, is_local_endpoint)
from daq.frames import DTYPES, Frame, encode

TIMEOUT = 10.0  # generous: a loaded 2-core machine; tests finish as soon as the data is there
FORCE = dict(kind="force", rate_hz=1000.0, channels=["fx", "fy", "fz"], units=["N", "N", "N"])


@pytest.fixture(params=["tcp", "ipc"])
def endpoint(request, tmp_path):
    if request.param == "tcp":
        return "tcp://127.0.0.1:*"
    return f"ipc://{tmp_path}/bus.ipc"


def connected(endpoint, streams=(), **sub_kw):
    """A Publisher and a Subscriber that have completed the handshake."""
    pub = Publisher(endpoint)
    sub = Subscriber(pub.endpoint, streams, **sub_kw)
    assert pub.wait_for_subscribers(1, TIMEOUT)
    assert sub.wait_connected(TIMEOUT)
    return pub, sub


def drain(sub, timeout_s=0.5):
    frames = []
    while (f := sub.recv(timeout_s)) is not None:
        frames.append(f)
    return frames


def recv_n(sub, n):
    frames = []
    deadline = time.monotonic() + TIMEOUT
    while len(frames) < n and time.monotonic() < deadline:
        f = sub.recv(0.5)
        if f is not None:
            frames.append(f)
    return frames


def test_every_dtype_round_trips_over_the_bus(endpoint):
    rng = np.random.default_rng(0)
    pub, sub = connected(endpoint)
    with pub, sub:
        sent = {}
        for dtype in sorted(DTYPES):
            shape = (int(rng.integers(1, 12)), int(rng.integers(1, 8)))
            raw = rng.integers(0, 256, size=shape[0] * shape[1] * np.dtype(dtype).itemsize, dtype=np.uint8)
            data = (raw % 2 if dtype == "|b1" else raw).view(dtype).reshape(shape)
            stream = f"test/{dtype[1:]}"
            pub.publish(stream, data, kind="test", rate_hz=100.0, channels=[f"c{i}" for i in range(shape[1])],
                        units=["1"] * shape[1], meta={"dtype": dtype})
            sent[stream] = data
        got = {f.stream: f for f in recv_n(sub, len(sent))}
    assert got.keys() == sent.keys()
    for stream, data in sent.items():
        assert got[stream].data.dtype == data.dtype and got[stream].data.tobytes() == data.tobytes()
        assert got[stream].seq == 0 and got[stream].t_recv >= got[stream].t_pub


def test_multi_block_stream_reassembles_the_signal(endpoint):
    """A 1 kHz sine sent in 5-sample blocks comes back sample for sample, times from sample counts."""
    n, block, rate = 2000, 5, 1000.0
    t0 = 5_000_000_000
    k = np.arange(n)
    signal = np.stack([np.sin(2 * np.pi * 3.0 * k / rate), np.cos(2 * np.pi * 7.0 * k / rate), k * 0.5], axis=1)
    pub, sub = connected(endpoint, ["forceplate/FP1"])
    with pub, sub:
        for i in range(0, n, block):
            pub.publish("forceplate/FP1", signal[i:i + block], **FORCE, t_host=t0 + i * 1_000_000,
                        t_device=i * 1_000_000)
        frames = recv_n(sub, n // block)
        stats = sub.stats()["forceplate/FP1"]
    assert [f.seq for f in frames] == list(range(n // block))
    np.testing.assert_array_equal(np.concatenate([f.data for f in frames]), signal)
    times = np.concatenate([f.sample_times() for f in frames])
    np.testing.assert_array_equal(times, t0 + k * 1_000_000)
    assert (stats.received, stats.samples, stats.gaps, stats.dropped, stats.missed_at_join) == (n // block, n, 0, 0, 0)


def test_gaps_in_seq_are_counted_exactly(endpoint):
    pub, sub = connected(endpoint, ["enc/left"])
    seqs = [0, 1, 2, 5, 6, 10, 11]  # two holes: 3-4 and 7-9
    with pub, sub:
        for s in seqs:
            pub.send(Frame("enc/left", "angle", s, None, s, s, 100.0, ("q",), ("rad",), np.full((1, 1), s, float)))
        frames = recv_n(sub, len(seqs))
        st = sub.stats()["enc/left"]
        # publish() continues after the last sent seq
        assert pub.publish("enc/left", [0.0], kind="angle", rate_hz=100.0, channels=["q"], units=["rad"]).seq == 12
    assert [f.seq for f in frames] == seqs
    assert (st.gaps, st.dropped, st.first_seq, st.last_seq, st.received) == (2, 5, 0, 11, 7)


def test_hwm_overflow_is_counted_not_silent():
    """A burst far beyond both high-water marks: every frame is either received or counted as dropped."""
    total = 4000  # 16 kB frames: 64 MB, far beyond the HWMs (10 frames) plus the kernel's socket buffers
    pub = Publisher("tcp://127.0.0.1:*", sndhwm=10)
    sub = Subscriber(pub.endpoint, ["burst"], rcvhwm=10)
    chans = dict(kind="force", rate_hz=1000.0, channels=[f"c{i}" for i in range(64)], units=["N"] * 64)
    with pub, sub:
        assert pub.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
        payload = np.zeros((32, 64))
        for _ in range(total):  # the subscriber is not reading meanwhile
            pub.publish("burst", payload, **chans)
        received = len(drain(sub, 1.0))
        # Then one frame at a time until the last one published is the last one received (on a
        # loaded machine frames may still be in flight after the pause): every frame before it
        # is then either received or counted as dropped.
        last = None
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            sent = pub.publish("burst", payload, **chans).seq
            while (f := sub.recv(0.2)) is not None:
                received, last = received + 1, f.seq
            if last == sent:
                break
        st = sub.stats()["burst"]
    assert last == pub.sent["burst"] - 1 and pub.sent["burst"] > total
    assert st.dropped > 0 and st.gaps > 0
    assert st.received == received
    assert st.received + st.dropped + st.missed_at_join == pub.sent["burst"]
    assert st.missed_at_join == 0  # the handshake happened before the burst


def test_late_joiner_is_told_what_it_missed(caplog):
    """Without a replay, frames published before the subscription are lost: counted, logged, never silent."""
    pub = Publisher("tcp://127.0.0.1:*", replay_s=0)
    with pub:
        for _ in range(50):  # nobody listens yet
            pub.publish("forceplate/FP1", np.zeros((5, 3)), **FORCE)
        with Subscriber(pub.endpoint, ["forceplate/FP1"]) as sub, caplog.at_level(logging.WARNING, "walklab.bus"):
            assert sub.missing() == ["forceplate/FP1"]
            assert pub.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
            for _ in range(10):
                pub.publish("forceplate/FP1", np.zeros((5, 3)), **FORCE)
            frames = recv_n(sub, 10)
            st = sub.stats()["forceplate/FP1"]
            assert sub.missing() == []
    assert [f.seq for f in frames] == list(range(50, 60))
    assert (st.missed_at_join, st.first_seq, st.received, st.dropped) == (50, 50, 10, 0)
    assert "joined stream 'forceplate/FP1' late" in caplog.text and "missed 50" in caplog.text


PUBLISHER_SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    from daq.bus import Publisher
    with Publisher(sys.argv[1]) as pub:
        print(pub.endpoint, flush=True)
        if not pub.wait_for_subscribers(int(sys.argv[2]), 30.0):
            sys.exit(3)
        for i in range(100):
            pub.publish("forceplate/FP1", np.full((5, 3), i, float), kind="force", rate_hz=1000.0,
                        channels=["fx", "fy", "fz"], units=["N", "N", "N"])
""")


def test_handshake_loses_nothing_across_processes(endpoint):
    """A publisher process that starts publishing immediately after its subscribers join: all 100 frames
    reach both subscribers (the slow-joiner problem would lose the first ones)."""
    proc = subprocess.Popen([sys.executable, "-c", PUBLISHER_SCRIPT, endpoint, "2"], stdout=subprocess.PIPE, text=True)
    try:
        bound = proc.stdout.readline().strip()
        with Subscriber(bound, ["forceplate/FP1"]) as a, Subscriber(bound, ["forceplate/*"]) as b:
            got = {name: recv_n(s, 100) for name, s in (("a", a), ("b", b))}
            stats = [s.stats()["forceplate/FP1"] for s in (a, b)]
        assert proc.wait(TIMEOUT) == 0
    finally:
        proc.kill()
        proc.wait()
    for frames in got.values():
        assert [f.seq for f in frames] == list(range(100))
        assert [f.data[0, 0] for f in frames] == list(range(100))
    for st in stats:
        assert (st.missed_at_join, st.dropped, st.gaps) == (0, 0, 0)


LIVE_PUBLISHER_SCRIPT = textwrap.dedent("""
    import sys, time, numpy as np
    from daq.bus import Publisher
    # a plate simulator started with the lab: publishes from its start, paced at 1 kHz in
    # 5-sample blocks, column 0 = the sample's index; waits for nobody
    with Publisher(sys.argv[1]) as pub:
        print(pub.endpoint, flush=True)
        t0 = time.monotonic_ns()
        for i in range(int(sys.argv[2])):
            while time.monotonic_ns() < t0 + (i + 1) * 5_000_000:
                pub.poll_subscriptions(0.001)
            pub.publish("forceplate/FP1", np.arange(5 * i, 5 * i + 5, dtype=float).reshape(5, 1),
                        kind="force", rate_hz=1000.0, channels=["fz"], units=["N"], t_host=t0 + i * 5_000_000)
            if i == 50:
                print("published 50", flush=True)
        sys.stdin.read()  # keep the socket until the test is done
""")


def test_a_subscriber_started_after_the_publisher_misses_nothing(endpoint):
    """A12: a process started with the lab after a publisher that is already publishing (the dynamics
    service after the plate simulator) receives every frame from seq 0, in order, none counted lost;
    a subscriber without replay counts what it missed as BEFORE_JOIN instead."""
    total = 400
    proc = subprocess.Popen([sys.executable, "-c", LIVE_PUBLISHER_SCRIPT, endpoint, str(total)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        bound = proc.stdout.readline().strip()
        assert proc.stdout.readline().strip() == "published 50"  # it has been publishing for 0.25 s
        with Subscriber(bound, ["forceplate/FP1"]) as sub, \
                Subscriber(bound, ["forceplate/FP1"], replay=False) as fresh:
            frames = recv_n(sub, total)
            fresh_frames = recv_n(fresh, 1)
            st = sub.stats()["forceplate/FP1"]
            st_fresh = fresh.stats()["forceplate/FP1"]
    finally:
        proc.stdin.close()
        proc.wait(TIMEOUT)
    assert [f.seq for f in frames] == list(range(total))
    np.testing.assert_array_equal(np.concatenate([f.data[:, 0] for f in frames]), np.arange(5 * total))
    assert (st.received, st.missed_at_join, st.dropped, st.gaps, st.out_of_order) == (total, 0, 0, 0, 0)
    first = fresh_frames[0].seq
    assert first > 50 and st_fresh.missed_at_join == first and st_fresh.dropped == 0


def test_the_replay_holds_sampled_streams_not_commands():
    """Frames of a sampled stream published before a subscriber joined are replayed to it; an
    irregular stream's (rate_hz 0: a command a controller would execute again) are not, and their
    late join is counted instead."""
    with Publisher("tcp://127.0.0.1:*") as pub:
        for i in range(5):
            pub.publish("forceplate/FP1", np.full((5, 3), i, float), **FORCE)
            pub.publish("controller/command", [float(i)], kind="command", rate_hz=0.0, channels=["crank"],
                        units=["rad/s"])
        with Subscriber(pub.endpoint, ["forceplate/FP1", "controller/command"]) as sub:
            assert pub.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
            pub.publish("forceplate/FP1", np.full((5, 3), 5, float), **FORCE)
            pub.publish("controller/command", [5.0], kind="command", rate_hz=0.0, channels=["crank"], units=["rad/s"])
            frames = recv_n(sub, 7)
            stats = sub.stats()
    assert [f.seq for f in frames if f.stream == "forceplate/FP1"] == list(range(6))
    assert [f.data[0, 0] for f in frames if f.stream == "forceplate/FP1"] == list(range(6))
    assert [f.seq for f in frames if f.stream == "controller/command"] == [5]
    assert stats["controller/command"].missed_at_join == 5 and stats["forceplate/FP1"].missed_at_join == 0


def test_subscription_filters_exact_names_and_prefixes():
    pub = Publisher("tcp://127.0.0.1:*")
    exact = Subscriber(pub.endpoint, ["fp/1"])
    prefix = Subscriber(pub.endpoint, ["fp/*"])
    everything = Subscriber(pub.endpoint)
    with pub, exact, prefix, everything:
        assert pub.wait_for_subscribers(3, TIMEOUT)
        for s in (exact, prefix, everything):
            assert s.wait_connected(TIMEOUT)
        # the second fp/1 is an end marker all three want: frames of one connection arrive in
        # order, so whatever a subscriber wrongly let through would come before it
        for stream in ("fp/1", "fp/10", "fp/2", "markers/mocap", "fp/1"):
            pub.publish(stream, np.zeros((1, 3)), **FORCE)

        def until_marker(sub):
            got = []
            while (f := sub.recv(TIMEOUT)) is not None and not (f.stream == "fp/1" and f.seq == 1):
                got.append(f.stream)
            assert f is not None, "the end marker never came"
            return sorted(got)

        assert until_marker(exact) == ["fp/1"]
        assert until_marker(prefix) == ["fp/1", "fp/10", "fp/2"]
        assert until_marker(everything) == ["fp/1", "fp/10", "fp/2", "markers/mocap"]


def test_malformed_messages_are_counted_and_skipped(caplog):
    """A raw ZeroMQ publisher sends garbage between valid frames; the subscriber keeps going."""
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.linger = 0
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    good = encode(Frame("fp/1", "force", 0, None, 0, 0, 1000.0, ("fx",), ("N",), np.ones((5, 1))))
    with Subscriber(f"tcp://127.0.0.1:{port}", ["fp/1"]) as sub, caplog.at_level(logging.WARNING, "walklab.bus"):
        # wait until this subscriber's subscriptions have reached the raw socket
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if raw.poll(100) and raw.recv().startswith(b"\x01\x00walklab/sub/"):
                break
        raw.send_multipart([b"fp/1", b"\xc1garbage", b"123"])
        raw.send_multipart([b"fp/1", good[1], b"short"])
        raw.send_multipart([b"fp/1"])
        raw.send_multipart(good)
        frame = sub.recv(TIMEOUT)
        st = sub.stats()["fp/1"]
    raw.close()
    assert frame is not None and frame.seq == 0
    np.testing.assert_array_equal(frame.data, np.ones((5, 1)))
    assert sub.malformed == 3 and st.malformed == 3 and st.received == 1
    # the first logged with its reason; the two after it, within the second, counted (`last_error`: the newest)
    lines = [r.getMessage() for r in caplog.records if r.name == "walklab.bus" and "malformed" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("dropped malformed frame #1: ")
    assert "1 parts" in sub.last_error


def test_a_flood_of_malformed_frames_is_counted_whole_and_logged_a_line_a_second(caplog):
    """2000 garbage messages on a real ZeroMQ socket as fast as it takes them (a corrupted or misconfigured
    publisher): every one counted, but the log gets the first at once and then a line a second at most,
    with the count since the last (a line per frame floods the terminal and the supervisor's stderr pipe).
    Truths: the 2000 this test sent, and the wall time it measured around their receipt."""
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.linger = 0
    raw.sndhwm = 0   # queue all 2000 for the subscriber: none dropped at the sender
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    good = encode(Frame("fp/1", "force", 0, None, 0, 0, 1000.0, ("fx",), ("N",), np.ones((5, 1))))
    with Subscriber(f"tcp://127.0.0.1:{port}", ["fp/1"], rcvhwm=0) as sub, \
            caplog.at_level(logging.WARNING, "walklab.bus"):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if raw.poll(100) and raw.recv().startswith(b"\x01\x00walklab/sub/"):
                break
        t0 = time.monotonic()
        for k in range(2000):
            raw.send_multipart([b"fp/1", b"\xc1garbage %d" % k, b"123"])
        raw.send_multipart(good)   # the end: one connection keeps the order
        frame = sub.recv(TIMEOUT * 3)
        elapsed = time.monotonic() - t0
        st = sub.stats()["fp/1"]
    raw.close()
    assert frame is not None and frame.seq == 0
    assert sub.malformed == 2000 and st.malformed == 2000 and st.received == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "walklab.bus" and "malformed" in r.getMessage()]
    assert lines and lines[0].startswith("dropped malformed frame #1: ")
    assert len(lines) <= 1 + math.ceil(elapsed), (len(lines), elapsed)   # one a second after the first
    # each later line: its frame's number, and the count since the previous line's frame
    nums = [int(re.match(r"dropped malformed frame #(\d+): ", m).group(1)) for m in lines]
    counts = [int(m.group(1)) if (m := re.search(r"\((\d+) more like it since the last such line\)$", s)) else 0
              for s in lines]
    assert counts[0] == 0 and all(c == n - p - 1 for p, n, c in zip(nums, nums[1:], counts[1:]))


def handshake_interleaved(pub, sub):
    """Both ends in one thread: let each side make progress in turn until the publisher sees the subscriber."""
    deadline = time.monotonic() + TIMEOUT
    while not pub.poll_subscriptions(0.02) and time.monotonic() < deadline:
        assert sub.recv(0.02) is None
    return pub.subscribers == 1


def test_publisher_restart_is_detected_and_rejoined(endpoint):
    """The subscriber reconnects to a restarted publisher, which sees it again (handshake) and restarts seq at 0."""
    with Publisher(endpoint) as first:
        endpoint = first.endpoint  # keep the port for the restart
    with Subscriber(endpoint, ["enc/q"]) as sub:
        for _ in range(3):
            with Publisher(endpoint) as pub:
                assert handshake_interleaved(pub, sub)
                for _ in range(3):
                    pub.publish("enc/q", [1.0], kind="angle", rate_hz=100.0, channels=["q"], units=["rad"])
                frames = recv_n(sub, 3)
                assert [f.seq for f in frames] == [0, 1, 2]
        st = sub.stats()["enc/q"]
    assert (st.restarts, st.received, st.dropped, st.gaps, st.missed_at_join) == (2, 9, 0, 0, 0)


def test_stats_measure_rate_and_latency():
    """Rate and latency against the test's own clock: each frame's true latency lies between 0 and
    (return of recv - call of publish), and its arrival between those two instants; the rate over
    the window follows from those arrival intervals and the instants around the stats() call."""
    pub, sub = connected("tcp://127.0.0.1:*", ["fp"])
    n, block = 40, 5
    before_pub, after_recv = [], []
    with pub, sub:
        for _ in range(n):
            before_pub.append(time.monotonic_ns())
            pub.publish("fp", np.zeros((block, 3)), **FORCE)
            assert sub.recv(TIMEOUT) is not None
            after_recv.append(time.monotonic_ns())
            time.sleep(0.005)
        s0 = time.monotonic_ns()
        st = sub.stats()["fp"]
        s1 = time.monotonic_ns()
    p, r = np.array(before_pub), np.array(after_recv)
    bound = (r - p) * 1e-9  # frame i's latency is in [0, bound_i]: so is each order statistic
    assert 0 < st.latency_max_s <= bound.max()
    assert 0 < st.latency_p50_s <= np.percentile(bound, 50) and st.latency_p99_s <= np.percentile(bound, 99)
    assert st.latency_p50_s <= st.latency_p99_s <= st.latency_max_s
    # stats(): frames arrived in the last W before `now` (s0 <= now <= s1), over min(W, now - first arrival)
    w = 2_000_000_000
    n_lo, n_hi = int(np.sum(p >= s1 - w)), int(np.sum(r >= s0 - w))
    span_lo, span_hi = min(w, s0 - r[0]), min(w, s1 - p[0])
    assert n_lo >= 2, "the machine stalled for the whole window: nothing to check"
    assert n_lo * 1e9 / span_hi <= st.frames_per_s <= n_hi * 1e9 / span_lo
    assert block * n_lo * 1e9 / span_hi <= st.rate_hz <= block * n_hi * 1e9 / span_lo


def test_context_term_never_hangs_after_close():
    """Publisher with frames queued for a subscriber that stopped reading; term() must return."""
    ctx = zmq.Context()
    pub = Publisher("tcp://127.0.0.1:*", context=ctx, sndhwm=100_000)
    sub = Subscriber(pub.endpoint, context=ctx, rcvhwm=10)
    assert pub.wait_for_subscribers(1, TIMEOUT)
    for _ in range(2000):  # 80 MB: the kernel buffers fill, frames stay queued in the publisher
        pub.publish("x", np.zeros((500, 10)), kind="t", rate_hz=0.0, channels=list("abcdefghij"), units=["1"] * 10)
    pub.close()
    pub.close()  # idempotent
    sub.close()
    done = threading.Event()
    threading.Thread(target=lambda: (ctx.term(), done.set()), daemon=True).start()
    assert done.wait(TIMEOUT), "zmq.Context.term() hung after close()"
    with pytest.raises(BusError, match="closed"):
        pub.send(Frame("x", "t", 0, None, 0, 0, 0.0, ("a",), ("1",), np.zeros((1, 1))))


# ------------------------------------------------------------------------------ endpoints


@pytest.mark.parametrize("endpoint, local", [
    ("tcp://127.0.0.1:5555", True), ("tcp://127.3.2.1:*", True), ("tcp://localhost:5555", True),
    ("tcp://[::1]:5555", True), ("ipc:///tmp/x.ipc", True), ("ipc://@abstract", True), ("inproc://a", True),
    ("tcp://0.0.0.0:5555", False), ("tcp://*:5555", False), ("tcp://192.168.1.20:5555", False),
    ("tcp://lab-pc.example.org:5555", False), ("tcp://eth0:5555", False), ("tcp://[::]:5555", False),
])
def test_loopback_classification(endpoint, local):
    assert is_local_endpoint(endpoint) is local


@pytest.mark.parametrize("endpoint", ["udp://127.0.0.1:5", "tcp://127.0.0.1", "127.0.0.1:5555", "tcp://:5",
                                      "ipc://" + "/x" * 60, "tcp://127.0.0.1:port", 5555])
def test_malformed_endpoints_are_rejected(endpoint):
    with pytest.raises(EndpointError):
        Publisher(endpoint)


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:*", "tcp://*:*", "tcp://10.11.12.13:5555"])
def test_non_loopback_without_keys_is_refused(endpoint):
    with pytest.raises(EndpointError, match="without CurveZMQ keys"):
        Publisher(endpoint)
    with pytest.raises(EndpointError, match="without CurveZMQ keys"):
        Subscriber(endpoint.replace("*", "5555").replace("0.0.0.0", "10.0.0.1"))


def test_bind_failure_is_a_bus_error(tmp_path):
    with Publisher("tcp://127.0.0.1:*") as pub:
        with pytest.raises(BusError, match="cannot bind"):
            Publisher(pub.endpoint)
    # ipc: libzmq alone would steal a live socket file from its owner
    with Publisher(f"ipc://{tmp_path}/a.ipc") as pub:
        with pytest.raises(BusError, match="another process is listening"):
            Publisher(pub.endpoint)
    with pytest.raises(BusError, match="cannot bind"):
        Publisher(f"ipc://{tmp_path}/no/such/folder/a.ipc")
    # a stale socket file left by a crashed process is taken over
    stale = tmp_path / "stale.ipc"
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))
    with Publisher(f"ipc://{stale}") as pub:
        assert pub.endpoint == f"ipc://{stale}"


def test_a_closed_ipc_publisher_leaves_no_socket_file(tmp_path):
    path = tmp_path / "fp.ipc"
    with Publisher(f"ipc://{path}") as pub, Subscriber(pub.endpoint, ["fp/1"]) as sub:
        assert pub.wait_for_subscribers(1, TIMEOUT) and sub.wait_connected(TIMEOUT)
        assert path.is_socket()
        pub.publish("fp/1", np.zeros((5, 3)), **FORCE)
        assert sub.recv(TIMEOUT) is not None
    assert not path.exists()
    # a path taken over by another publisher after ours closed is not removed by our close
    first = Publisher(f"ipc://{path}")
    os.unlink(path)  # as if it had gone, and a second publisher had bound the same path
    with Publisher(f"ipc://{path}"):
        first.close()
        assert path.is_socket()


def test_one_subscriber_many_publishers(tmp_path):
    """A recorder-style subscriber on a tcp and an ipc publisher: handshake with both, streams kept apart."""
    a = Publisher("tcp://127.0.0.1:*")
    b = Publisher(f"ipc://{tmp_path}/b.ipc")
    sub = Subscriber([a.endpoint, b.endpoint], expect=["fp/1", "enc/q", "markers/m"])
    with a, b, sub:
        assert a.wait_for_subscribers(1, TIMEOUT)
        assert not sub.wait_connected(0.2)  # b has not answered yet
        assert b.wait_for_subscribers(1, TIMEOUT)
        assert sub.wait_connected(TIMEOUT)
        for _ in range(5):
            a.publish("fp/1", np.zeros((5, 3)), **FORCE)
            b.publish("enc/q", [0.5], kind="angle", rate_hz=200.0, channels=["q"], units=["rad"])
        frames = recv_n(sub, 10)
        stats = sub.stats()
    assert sorted({f.stream for f in frames}) == ["enc/q", "fp/1"]
    assert stats["fp/1"].received == stats["enc/q"].received == 5
    assert stats["fp/1"].samples == 25 and stats["enc/q"].samples == 5
    assert stats["markers/m"].received == 0 and sub.missing() == ["markers/m"]


def test_frames_queued_from_a_publisher_that_left_are_all_read(endpoint):
    """Reconnecting after a publisher goes away must not discard the frames it sent before leaving."""
    pub, sub = connected(endpoint, ["fp/1"])
    with sub:
        with pub:
            for _ in range(600):
                pub.publish("fp/1", np.zeros((5, 3)), **FORCE)
        time.sleep(0.5)  # the disconnection is noticed while 600 frames wait unread
        frames = recv_n(sub, 600)
        st = sub.stats()["fp/1"]
    assert [f.seq for f in frames] == list(range(600))
    assert (st.dropped, st.gaps) == (0, 0)
