"""The health monitor's bookkeeping on real health frames over a real bus: it reports new losses
(gaps/drops a process's subscriber counted from seq) and silences, once each."""
from __future__ import annotations

import numpy as np

from controller.healthmon import HealthBook
from daq.bus import Publisher, Subscriber
from daq.health import Health


def test_health_book_reports_new_drops_and_silence():
    with Publisher("tcp://127.0.0.1:*") as data_pub, Publisher("tcp://127.0.0.1:*") as health_pub, \
            Subscriber([data_pub.endpoint], ["plate"]) as data_sub, \
            Subscriber([health_pub.endpoint], ["health/*"]) as health_sub:
        assert data_pub.wait_for_subscribers(1, 5)
        assert health_pub.wait_for_subscribers(1, 5)
        health = Health("reader", health_pub)
        health.watch(data_sub)
        book = HealthBook(silent_s=3.0)

        def publish_and_read(frames):
            for f in frames:
                if isinstance(f, np.ndarray):
                    data_pub.publish("plate", f, kind="force", rate_hz=1000.0, channels=["Fz"], units=["N"])
                else:
                    data_pub.send(f)  # a whole Frame with its own seq
            for _ in frames:
                assert data_sub.recv(timeout_s=5) is not None
            health.publish()
            frame = health_sub.recv(timeout_s=5)
            assert frame is not None
            return frame, book.update(frame)

        block = np.ones((5, 1))
        first, warnings = publish_and_read([block, block])
        assert warnings == []  # two contiguous frames: nothing lost
        # seq 2 arrives, then seq 5: frames 3 and 4 were lost on the way, the reader's subscriber
        # counts one gap of two frames and its health frame says so.
        third = data_pub.publish("plate", block, kind="force", rate_hz=1000.0, channels=["Fz"], units=["N"])
        assert third.seq == 2 and data_sub.recv(timeout_s=5) is not None
        third.seq = 5
        _, warnings = publish_and_read([third])
        assert warnings == ["reader: plate gaps 0 -> 1", "reader: plate dropped 0 -> 2"]
        last, warnings = publish_and_read([block])
        assert warnings == []  # cumulative counters unchanged: no repeated warning

        now = last.t_recv  # the clock of the last arrival, not of the test's (possibly late) next line
        assert book.check_silence(now) == []
        silent = book.check_silence(now + 4_000_000_000)
        assert len(silent) == 1 and silent[0].startswith("reader: no health frame for")
        assert book.check_silence(now + 5_000_000_000) == []  # once per silence
        assert "reader running" in book.summary(now)
