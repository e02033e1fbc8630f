"""Counters that must not lie (issue 8, A4): a second publisher on a stream's name sending seq
2**64-1, its own run from 0, or a repeated seq, makes frames counted out of order, never a loss
figure (it made DROPPED read 18446744073709553234); the health monitor reports them as out of
order, not as lost.

Truth: the test decides what each publisher sends and in which order it arrives (it reads each
batch before the next is sent), so every count is known: nothing of the real stream is lost.
Real ZeroMQ sockets, two publishers, one subscriber.
"""
from __future__ import annotations

import numpy as np
import pytest

from controller.commands.bus import format_table
from controller.healthmon import HealthBook
from daq.bus import Publisher, Subscriber
from daq.frames import Frame
from daq.health import Health

TIMEOUT = 10.0
STREAM = "forceplate/FP1"


@pytest.fixture
def two_publishers():
    """The real publisher of STREAM, a second one on another endpoint, a subscriber of both."""
    with Publisher("tcp://127.0.0.1:*") as real, Publisher("tcp://127.0.0.1:*") as other, \
            Subscriber([real.endpoint, other.endpoint], [STREAM]) as sub:
        assert real.wait_for_subscribers(1, TIMEOUT) and other.wait_for_subscribers(1, TIMEOUT)
        assert sub.wait_connected(TIMEOUT)
        yield real, other, sub


def real_blocks(pub: Publisher, sub: Subscriber, n: int) -> list[int]:
    """Publish n blocks of the real stream and read them; returns their seqs."""
    for _ in range(n):
        pub.publish(STREAM, np.ones((5, 3)), kind="force", rate_hz=1000.0, channels=["fx", "fy", "fz"],
                    units=["N", "N", "N"])
    return [read(sub).seq for _ in range(n)]


def foreign(pub: Publisher, sub: Subscriber, seqs: list[int]) -> None:
    """Send frames of STREAM with the given seqs from the other publisher, and read them."""
    for seq in seqs:
        pub.send(Frame(STREAM, "force", seq, None, 0, 0, 1000.0, ("fx", "fy", "fz"), ("N", "N", "N"),
                       np.zeros((5, 3))))
        assert read(sub).seq == seq  # delivered: the subscriber cannot know which publisher is right


def read(sub: Subscriber) -> Frame:
    f = sub.recv(TIMEOUT)
    assert f is not None, "a frame never came"
    return f


@pytest.mark.parametrize("seqs", [[2**64 - 1], [0, 1, 2, 3], [9], [5, 2**63, 1]],
                         ids=["max-seq", "own-run-from-0", "repeat", "mixed"])
def test_foreign_seqs_are_out_of_order_never_lost(two_publishers, seqs):
    real, other, sub = two_publishers
    assert real_blocks(real, sub, 10) == list(range(10))
    foreign(other, sub, seqs)
    assert real_blocks(real, sub, 10) == list(range(10, 20))
    st = sub.stats()[STREAM]
    assert (st.received, st.samples) == (20 + len(seqs), 5 * (20 + len(seqs)))
    assert (st.gaps, st.dropped, st.lost_samples, st.missed_at_join, st.restarts) == (0, 0, 0, 0, 0)
    assert st.out_of_order == len(seqs) and st.last_seq == 19
    row = format_table({STREAM: st}, {STREAM: "force"}, "").splitlines()
    cells = dict(zip(row[1].split(), row[2].split()))
    assert (cells["DROPPED"], cells["LOST_SAMPLES"], cells["OUT_OF_ORDER"]) == ("0", "0", str(len(seqs)))


def test_a_foreign_first_frame_is_not_a_late_join(two_publishers):
    """The other publisher's seq 2**64-1 arrives before any real frame: not 'missed 1.8e19 frames
    before joining', and the real stream starts normally after it."""
    real, other, sub = two_publishers
    foreign(other, sub, [2**64 - 1])
    assert real_blocks(real, sub, 5) == list(range(5))
    st = sub.stats()[STREAM]
    assert (st.missed_at_join, st.dropped, st.gaps, st.out_of_order, st.first_seq, st.last_seq) == (0, 0, 0, 1, 0, 4)


def test_health_monitor_reports_out_of_order_not_loss(two_publishers):
    real, other, sub = two_publishers
    with Publisher("tcp://127.0.0.1:*") as health_pub, Subscriber(health_pub.endpoint, ["health/*"]) as health_sub:
        assert health_pub.wait_for_subscribers(1, TIMEOUT)
        health = Health("reader", health_pub)
        health.watch(sub)
        book = HealthBook(silent_s=60.0)
        real_blocks(real, sub, 10)
        health.publish()
        assert book.update(read(health_sub)) == []
        foreign(other, sub, [2**64 - 1])
        real_blocks(real, sub, 10)
        health.publish()
        frame = read(health_sub)
        assert book.update(frame) == [f"reader: {STREAM} out_of_order 0 -> 1"]
        line = book.summary(frame.t_recv)
    assert "out-of-order 1" in line and "lost" not in line
