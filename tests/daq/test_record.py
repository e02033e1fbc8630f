"""The recorder (daq.record, `walklab record`): files read back with the `mcap` library and msgpack
alone, decoded as docs/recording.md says, compared with what was published."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from mcap.reader import make_reader

import configs
from controller import config
from daq.bus import Publisher, Subscriber
from daq.frames import Frame
from daq.labload import LoadPublisher, frames, lab_streams
from daq.record import QUIET_NS, SessionWriter, Settings, drain, lab_metadata, part_path, record

REPO = Path(__file__).resolve().parents[2]
#: The issue's check: 60 s at lab load (2 plates x 1 kHz, 40 markers x 200 Hz, 8 encoders x 1 kHz).
LAB_LOAD_S = 60.0


def decode(data: bytes) -> dict:
    """A recorded message decoded as docs/recording.md describes (msgpack + numpy, no walklab)."""
    doc = msgpack.unpackb(data, raw=False)
    doc["arrays"] = {b["name"]: np.frombuffer(b["data"], dtype=np.dtype(b["dtype"])).reshape(b["shape"])
                     for b in doc["buffers"]}
    return doc


def mcap_messages(path: Path) -> list[tuple]:
    """(topic, message, decoded) of every message, in file order, read by the mcap library."""
    with open(path, "rb") as fh:
        return [(ch.topic, m, decode(m.data)) for _, ch, m in make_reader(fh).iter_messages(log_time_order=False)]


def same_frame(doc: dict, f: Frame) -> None:
    assert (doc["stream"], doc["kind"], doc["seq"], doc["t"], doc["t_host"], doc["t_device"]) == \
        (f.stream, f.kind, f.seq, f.t, f.t_host, f.t_device)
    assert doc["channels"] == list(f.channels) and doc["units"] == list(f.units)
    assert doc["rate_hz"] == f.rate_hz and doc["meta"] == f.meta
    assert list(doc["arrays"]) == ["data", *f.extra]
    for name, arr in [("data", f.data), *f.extra.items()]:
        got = doc["arrays"][name]
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert got.tobytes() == np.ascontiguousarray(arr).tobytes()  # bit for bit, NaN included


def recorder(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "controller.cli", "record", "--quiet", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_message_layout_and_channel_fields(tmp_path):
    """One frame with an extra buffer, a None device clock and meta: every documented field."""
    out = tmp_path / "one.mcap"
    w = SessionWriter(out, Settings(fsync=False))
    data = np.arange(12.0).reshape(2, 6)
    flags = np.array([1, 2], dtype=np.uint8)
    f = Frame("forceplate/FP1", "force", 7, None, 123_000, 124_000, 1000.0, ("Fx", "Fy", "Fz", "Mx", "My", "Mz"),
              ("N",) * 3 + ("N*m",) * 3, data, {"flags": flags}, {"session": 2}, t_pub=125_000)
    w.write(f, t_recv=126_000)
    w.close()
    with open(out, "rb") as fh:
        reader = make_reader(fh)
        summary = reader.get_summary()
        msgs = list(reader.iter_messages())
        assert reader.get_header().profile == "walklab"
    (_, ch, m), = [x for x in msgs if x[1].topic == "forceplate/FP1"]
    assert ch.message_encoding == "msgpack" and ch.schema_id == 0
    assert ch.metadata["kind"] == "force" and json.loads(ch.metadata["channels"]) == list(f.channels)
    assert json.loads(ch.metadata["units"]) == list(f.units) and float(ch.metadata["rate_hz"]) == 1000.0
    assert (m.log_time, m.publish_time, m.sequence) == (124_000, 124_000, 7)  # no device clock: publish = t
    doc = decode(m.data)
    same_frame(doc, f)
    assert doc["v"] == 1 and doc["t_pub"] == 125_000 and doc["t_recv"] == 126_000
    assert summary.statistics.message_count == 1


def test_metadata_records(tmp_path):
    """Lab TOML, plate calibrations, models and the recording record, as written in the config."""
    lab = config.load(configs.path("sim_walker.toml"))
    out = tmp_path / "meta.mcap"
    SessionWriter(out, Settings(fsync=False), metadata=lab_metadata(lab), streams=["forceplate/*"]).close()
    with open(out, "rb") as fh:
        meta = {r.name: r.metadata for r in make_reader(fh).iter_metadata()}
    assert meta["walklab/lab"]["toml"] == configs.path("sim_walker.toml").read_text()
    plates = {k: json.loads(v) for k, v in meta["walklab/plates"].items()}
    for dev in lab.devices.values():
        if dev.kind == "forceplate":
            p = plates[dev.stream_name]
            assert p["type"] == dev.type and np.allclose(p["corners"], dev.corners)
            assert np.allclose(p["origin"], dev.origin) and p["channels"] == list(dev.channels)
    assert meta["walklab/models"]["jansen_walker"] == configs.path("models/jansen_walker.toml").read_text()
    rec = meta["walklab/recording"]
    assert rec["host"] == os.uname().nodename and json.loads(rec["streams"]) == ["forceplate/*"]
    assert rec["start_utc"].endswith("Z") and int(rec["start_unix_ns"]) > 0
    assert meta["walklab/recorder"]["stop_reason"] == "stopped"


def test_lab_load_recording_frame_for_frame(tmp_path):
    """60 s at lab load through `walklab record` (a real subprocess on a real ZeroMQ socket): the
    mcap library reads back every published frame, no seq gap, payloads bit for bit."""
    out = tmp_path / "lab.mcap"
    with Publisher("tcp://127.0.0.1:*") as pub:
        proc = recorder(["--connect", pub.endpoint, "-o", str(out)])
        try:
            assert pub.wait_for_subscribers(1, 60), proc.stderr.read() if proc.poll() is not None else "no recorder"
            load = LoadPublisher(pub, lab_streams(), keep=True)
            load.run(LAB_LOAD_S)
        finally:
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    by_stream: dict[str, list] = {}
    for topic, m, doc in mcap_messages(out):
        assert topic == doc["stream"] and m.log_time == doc["t"] and m.publish_time == doc["t_device"]
        by_stream.setdefault(topic, []).append(doc)
    published: dict[str, list[Frame]] = {}
    for f in load.published:
        published.setdefault(f.stream, []).append(f)
    assert set(published) == set(by_stream) and len(published) == 11
    for name, sent in published.items():
        got = by_stream[name]
        assert [d["seq"] for d in got] == list(range(len(sent))), name  # every frame, no gap
        for d, f in zip(got, sent):
            same_frame(d, f)
    assert sum(map(len, published.values())) == load.frames >= 1400 * LAB_LOAD_S * 0.99


def recorded(path) -> tuple[dict[str, list[int]], list[str]]:
    """A session file read with the `mcap` reader: each stream's seq in file order, and the recorder's
    own event names (``events/recorder``)."""
    got: dict[str, list[int]] = {}
    events = []
    for topic, _, doc in mcap_messages(path):
        if topic == "events/recorder":
            events.append(doc["meta"]["event"])
        else:
            got.setdefault(topic, []).append(doc["seq"])
    return got, events


def seqs_by_stream(sent) -> dict[str, list[int]]:
    """Each stream's seq in the order the frames were published."""
    want: dict[str, list[int]] = {}
    for f in sent:
        want.setdefault(f.stream, []).append(f.seq)
    return want


def test_a_recorder_far_behind_keeps_its_backlog_at_a_clean_stop(tmp_path):
    """A recorder that fell behind its socket (here frozen by SIGSTOP while a minute of lab load
    is published, as a CPU-starved machine freezes it) and is then asked to stop writes every frame
    published before the stop: the backlog is drained, not cut (it was cut after 2 s)."""
    out = tmp_path / "behind.mcap"
    # a minute (84 k frames): two minutes took up to 46 s of the drain's 60 s cap at load 5-6
    sent = list(frames(lab_streams(), 60.0))
    with Publisher("tcp://127.0.0.1:*", sndhwm=0) as pub:  # 0: the publisher queues it all, drops nothing
        proc = recorder(["--connect", pub.endpoint, "-o", str(out)])
        try:
            assert pub.wait_for_subscribers(1, 60), proc.stderr.read() if proc.poll() is not None else "no recorder"
            proc.send_signal(signal.SIGSTOP)
            for f in sent:
                pub.send(f)
            proc.send_signal(signal.SIGINT)  # pending until it runs again: the stop comes after every frame
        finally:
            proc.send_signal(signal.SIGCONT)
            stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    got, events = recorded(out)
    want = seqs_by_stream(sent)
    assert "drain_cut" not in events
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
    assert got == want


def test_a_writer_stall_longer_than_the_quiet_window_does_not_end_the_drain(tmp_path):
    """The drain's quiet window counts time spent waiting on the socket, not the recorder's own
    work: a chunk write that stalls longer than the window (0.975 s measured on a loaded 2-core
    machine) while frames published before the stop wait in the socket does not end the drain
    (it did, a wall-clock 0.2 s window: 24044 of 167800 frames kept)."""
    class StallingWriter(SessionWriter):
        stalls = 0

        def poll(self, now_ns=None):
            if self.stalls < 2:  # the first two chunk writes stall, the backlog waiting in the socket
                self.stalls += 1
                time.sleep(QUIET_NS * 1.5e-9)
            super().poll(now_ns)

    out = tmp_path / "stall.mcap"
    sent = list(frames(lab_streams(), 2.0))
    with Publisher("tcp://127.0.0.1:*", sndhwm=0) as pub, Subscriber(pub.endpoint, replay=False) as sub:
        assert pub.wait_for_subscribers(1, 60)
        for f in sent:
            pub.send(f)
        writer = StallingWriter(out, Settings(fsync=False))
        drain(sub, writer)
        writer.close()
    got, events = recorded(out)
    want = seqs_by_stream(sent)
    assert "drain_cut" not in events
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in want.items()}
    assert got == want
    assert writer.stalls == 2  # the stalls happened with frames still to read


def test_a_recorder_stopped_while_the_lab_goes_on_ends_its_drain(tmp_path):
    """Stopped while the lab keeps publishing (``walklab record`` and Ctrl-C beside a running lab),
    the recorder's final drain ends once only frames published after the stop arrive (no
    ``drain_cut`` event: not at its time cap) and the file holds every frame published before the
    stop, each stream's seq contiguous from 0."""
    out = tmp_path / "on.mcap"
    done = threading.Event()
    stop_at: list[int] = []

    def should_stop() -> bool:
        if time.monotonic_ns() >= t_stop:
            stop_at.append(time.monotonic_ns())
            return True
        return False

    with Publisher("tcp://127.0.0.1:*") as pub, Subscriber(pub.endpoint, replay=False) as sub:
        assert pub.wait_for_subscribers(1, 60)
        load = LoadPublisher(pub, lab_streams(), keep=True)
        thread = threading.Thread(target=load.run, args=(600.0, done.is_set))
        thread.start()
        try:
            writer = SessionWriter(out, Settings(fsync=False))
            t_stop = time.monotonic_ns() + 2_000_000_000
            assert record(sub, writer, should_stop) == "stopped"
            writer.close()
        finally:
            done.set()
            thread.join(60)
    assert not thread.is_alive()
    got, events = recorded(out)
    assert "drain_cut" not in events
    before: dict[str, int] = {}
    for f in load.published:
        if f.t_pub < stop_at[0]:
            before[f.stream] = before.get(f.stream, 0) + 1
    assert set(got) == set(before) and len(before) == 11
    for name, seqs in got.items():
        assert seqs == list(range(len(seqs))) and len(seqs) >= before[name], name


def test_rotation_makes_complete_parts_with_contiguous_seq(tmp_path):
    out = tmp_path / "rot.mcap"
    w = SessionWriter(out, Settings(fsync=False, chunk_ms=1, rotate_bytes=200_000))
    sent = list(frames(lab_streams(), 3.0))
    for f in sent:
        w.write(f)
        w.poll(now_ns=2**62)  # every frame past its chunk deadline: the size check runs at once
    w.close()
    parts = [part_path(out, k) for k in range(len(w.files))]
    assert parts == w.files and len(parts) >= 3 and all(p.is_file() for p in parts)
    got = []
    for p in parts:
        with open(p, "rb") as fh:
            reader = make_reader(fh)
            assert reader.get_summary() is not None  # each part finished, with its index
            meta = {r.name: r.metadata for r in reader.iter_metadata()}
            assert meta["walklab/recording"]["part"] == str(parts.index(p))
        got += [doc for topic, _, doc in mcap_messages(p)]
    assert len(got) == len(sent)
    for d, f in zip(got, sent):
        same_frame(d, f)


@pytest.mark.parametrize("args, message", [
    (["-o", "x.txt"], "must end in .mcap"),
    (["-o", "/nonexistent/dir/x.mcap"], "no such folder"),
    (["-o", "x.mcap", "--chunk-ms", "500"], "chunk_ms must be in (0, 100]"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "controller.cli", "record", "--connect", "tcp://127.0.0.1:9", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("walklab record: error:") and message in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_restarted_recorder_never_overwrites(tmp_path):
    """A recorder restarted on the same file (a crash under the supervisor) continues in the next part."""
    out = tmp_path / "s.mcap"
    first = SessionWriter(out, Settings(fsync=False))
    first.write(next(frames(lab_streams(), 0.01)))
    first.close()
    before = out.read_bytes()
    second = SessionWriter(out, Settings(fsync=False))
    second.close()
    assert out.read_bytes() == before and second.files == [part_path(out, 1)]
    with open(part_path(out, 1), "rb") as fh:
        meta = {r.name: r.metadata for r in make_reader(fh).iter_metadata()}
    assert meta["walklab/recording"]["part"] == "1"


def test_message_decoder_equals_a_full_decode(tmp_path):
    """MessageDecoder's fast path (static part skipped) gives the frames msgpack alone gives, and a
    message laid out otherwise (keys in another order, by another writer) is decoded in full."""
    from daq.record import MessageDecoder, pack_frame, unpack_message

    decoder = MessageDecoder()
    sent = list(frames(lab_streams(), 0.2))
    for f in sent:
        data = pack_frame(f, 5)
        got = decoder.decode(data, f.stream)
        doc = decode(data)
        same_frame(doc, got)
        assert (got.t_recv, got.t_pub) == (5, f.t_pub)
        full = unpack_message(data)
        assert (full.stream, full.seq, full.t, full.channels) == (got.stream, got.seq, got.t, got.channels)
    other = dict(reversed(list(msgpack.unpackb(pack_frame(sent[0], 7)).items())))  # same fields, other order
    again = decoder.decode(msgpack.packb(other), sent[0].stream)
    same_frame(decode(msgpack.packb(other)), again)


def test_the_fast_message_writer_writes_the_mcap_librarys_bytes():
    """`_fast_writer_class()` and the library's own `Writer` given the same records (several channels,
    times out of order, chunks closed by size and by hand) write byte-identical files."""
    import io

    from mcap.writer import CompressionType, Writer

    from daq.record import _fast_writer_class

    rng = np.random.default_rng(3)
    msgs = [(int(rng.integers(3)), int(rng.integers(10**12)), rng.bytes(int(rng.integers(0, 3000))),
             int(rng.integers(10**12)), int(rng.integers(2**32))) for _ in range(3000)]
    files = []
    for cls in (Writer, _fast_writer_class()):
        out = io.BytesIO()
        w = cls(out, chunk_size=200_000, compression=CompressionType.ZSTD)
        w.start(profile="walklab", library="test")
        ids = [w.register_channel(f"s{k}", "msgpack", 0, {"k": str(k)}) for k in range(3)]
        for i, (c, t, data, pub, seq) in enumerate(msgs):
            w.add_message(ids[c], t, data, pub, seq)
            if i % 700 == 699:
                w.flush()  # how the recorder closes a chunk by time
        w.finish()
        files.append(out.getvalue())
    assert files[0] == files[1]
    with io.BytesIO(files[1]) as fh:
        got = [(m.log_time, m.data, m.publish_time, m.sequence) for _, _, m in
               make_reader(fh).iter_messages(log_time_order=False)]
    assert got == [(t, d, p, s) for _, t, d, p, s in msgs]
