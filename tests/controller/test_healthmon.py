"""The health monitor's bookkeeping on real health frames over a real bus: it reports new losses
(gaps/drops a process's subscriber counted from seq, samples lost by the sample times), malformed
messages as malformed (never as lost), silences as SILENT and process restarts, once each."""
from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from controller.healthmon import HealthBook
from daq.bus import Publisher, Subscriber
from daq.frames import Frame
from daq.health import Health

T0 = 5_000_000_000  # stamp of the plate's sample 0 [ns]
MS = 1_000_000


def plate_frame(seq: int) -> Frame:
    """Block ``seq`` of a 1 kHz plate in 5-sample blocks, stamped by its sample count: t = T0 + 5 ms * seq."""
    return Frame("plate", "force", seq, None, T0 + 5 * MS * seq, T0 + 5 * MS * seq, 1000.0, ("Fz",), ("N",),
                 np.ones((5, 1)))


@pytest.fixture
def lab():
    """A data publisher, a raw ZeroMQ socket for garbage, the reader's subscriber on both, its health."""
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.linger = 0
    raw_ep = f"tcp://127.0.0.1:{raw.bind_to_random_port('tcp://127.0.0.1')}"
    with Publisher("tcp://127.0.0.1:*") as data_pub, Publisher("tcp://127.0.0.1:*") as health_pub, \
            Subscriber([data_pub.endpoint, raw_ep], ["plate"]) as data_sub, \
            Subscriber([health_pub.endpoint], ["health/*"]) as health_sub:
        assert data_pub.wait_for_subscribers(1, 10) and health_pub.wait_for_subscribers(1, 10)
        deadline = time.monotonic() + 10
        while not (raw.poll(100) and raw.recv().startswith(b"\x01\x00walklab/sub/")):
            assert time.monotonic() < deadline, "the reader never subscribed to the raw socket"
        health = Health("reader", health_pub)
        health.watch(data_sub)
        yield data_pub, raw, data_sub, health, health_sub
    raw.close()


def exchange(lab, book, frames=(), garbage=()):
    """Send frames (and garbage on the raw socket), let the reader take them, publish its health,
    and hand the health frame to the book; returns (health frame, warnings)."""
    data_pub, raw, data_sub, health, health_sub = lab
    for parts in garbage:
        raw.send_multipart(parts)
    for f in frames:
        data_pub.send(f)
    for _ in frames:
        assert data_sub.recv(timeout_s=10) is not None
    if garbage:  # the garbage arrives on another connection: wait until all of it was refused
        deadline = time.monotonic() + 10
        while data_sub.malformed < len(garbage):
            assert time.monotonic() < deadline, "the garbage never arrived"
            data_sub.recv(timeout_s=0.05)
    health.publish()
    frame = health_sub.recv(timeout_s=10)
    assert frame is not None
    return frame, book.update(frame)


def test_losses_are_reported_once_from_seq_and_sample_times(lab):
    book = HealthBook(silent_s=3.0)
    _, warnings = exchange(lab, book, [plate_frame(0), plate_frame(1), plate_frame(2)])
    assert warnings == []  # contiguous: nothing lost
    # blocks 3 and 4 never arrive: one gap, two frames, 10 samples (2 blocks x 5) by the stamps
    frame, warnings = exchange(lab, book, [plate_frame(5)])
    assert warnings == ["reader: plate gaps 0 -> 1", "reader: plate dropped 0 -> 2",
                        "reader: plate lost_samples 0 -> 10"]
    _, warnings = exchange(lab, book, [plate_frame(6)])
    assert warnings == []  # cumulative counters unchanged: no repeated warning
    assert "lost 2 frames/10 samples" in book.summary(frame.t_recv)


def test_malformed_messages_are_not_losses(lab):
    """Issue 8 A4: garbage on a stream's topic was shown as 'lost'; nothing of the stream was lost."""
    book = HealthBook(silent_s=3.0)
    exchange(lab, book, [plate_frame(0)])
    garbage = [[b"plate", b"\xc1garbage", b"123"], [b"plate"], [b"plate", b"\x80", b""]]
    frame, warnings = exchange(lab, book, [plate_frame(1)], garbage)
    assert warnings == ["reader: plate malformed 0 -> 3", "reader: bus malformed 0 -> 3"]
    line = book.summary(frame.t_recv)
    assert "bad 3" in line and "lost" not in line


def test_silence_is_shown_and_logged_as_silent_once(lab):
    book = HealthBook(silent_s=3.0)
    last, _ = exchange(lab, book, [plate_frame(0)])
    now = last.t_recv  # the clock of the last arrival, not of the test's (possibly late) next line
    assert book.check_silence(now + 2_900_000_000) == []
    assert "reader running" in book.summary(now)
    silent = book.check_silence(now + 4_000_000_000)
    assert silent == ["reader: SILENT: no health frame for 4.0 s (last state running)"]
    assert book.check_silence(now + 5_000_000_000) == []  # once per silence
    # the summary no longer shows the last rates as if the process were alive
    assert book.summary(now + 5_000_000_000) == "health: reader SILENT 5.0s"
    back, warnings = exchange(lab, book, [plate_frame(1)])
    assert warnings[0].startswith("reader: health is back after")
    assert "reader running" in book.summary(back.t_recv)


def test_a_stopped_process_is_not_silent(lab):
    book = HealthBook(silent_s=3.0)
    health = lab[3]
    health.state = "stopped"
    last, _ = exchange(lab, book, [plate_frame(0)])
    assert book.check_silence(last.t_recv + 60_000_000_000) == []


def test_a_process_restart_is_logged_and_its_counters_start_again(lab):
    book = HealthBook(silent_s=3.0)
    frame, _ = exchange(lab, book, [plate_frame(0), plate_frame(3)])  # one gap
    # the same process name with another pid and counters from zero (a restarted process)
    frame.meta = dict(frame.meta, pid=frame.meta["pid"] + 1)
    assert book.update(frame) == ["reader: process restarted "
                                  f"(pid {frame.meta['pid'] - 1} -> {frame.meta['pid']})",
                                  "reader: plate gaps 0 -> 1", "reader: plate dropped 0 -> 2",
                                  "reader: plate lost_samples 0 -> 10"]
