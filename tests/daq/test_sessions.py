"""Session files (daq.sessions, `walklab sessions`): info against sessions built with known gaps and
events, recover against the mcap library's own view of the chunks, CSV export against the frames."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap.records import Chunk, Message
from mcap.stream_reader import StreamReader, breakup_chunk

from daq import sessions
from daq.labload import frames, lab_streams, write_session
from daq.frames import Frame
from daq.record import SessionWriter, Settings, event_frame

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_info_counts_gaps_events_and_clock_faults(tmp_path):
    path = tmp_path / "gaps.mcap"
    specs = lab_streams()
    all_frames = list(frames(specs, 2.0))
    fp1 = [f for f in all_frames if f.stream == "forceplate/FP1"]
    dropped = {f.seq for f in fp1[100:103]}  # 3 frames of 5 samples lost: one seq gap, one 15 ms hole
    w = SessionWriter(path, Settings(fsync=False))
    for f in all_frames:
        if not (f.stream == "forceplate/FP1" and f.seq in dropped):
            w.write(f)
    t_ev = fp1[200].t
    w.write(event_frame("clock_reset", 0, t_ev, "warning", device="FP1"))
    w.write(event_frame("drops", 1, t_ev + 1000, "warning", stream="x"))
    clock = event_frame("clock_fault", 0, t_ev + 2000, "warning", plate="FP2")
    clock.stream = "events/clock"  # as the dynamics service publishes its clock episodes
    w.write(clock)
    w.close()
    rep = sessions.info(path)
    fp = rep.streams["forceplate/FP1"]
    assert (fp.frames, fp.samples, fp.seq_gaps, fp.seq_missing, fp.time_gaps) == (400 - 3, 1985, 1, 3, 1)
    assert fp.longest_gap_s == pytest.approx(0.015, abs=1e-9)
    assert rep.streams["forceplate/FP2"].seq_gaps == 0 and rep.streams["markers/mocap"].samples == 400
    assert rep.streams["encoder/m3"].measured_rate_hz == pytest.approx(1000.0)
    assert [e["event"] for e in rep.events] == ["clock_reset", "drops", "clock_fault"]
    assert rep.events[0]["t_s"] == pytest.approx((t_ev - all_frames[0].t) * 1e-9)
    assert [e.get("device", e.get("plate")) for e in rep.clock_faults] == ["FP1", "FP2"]
    assert rep.files[0].complete and rep.metadata["walklab/recorder"]["stop_reason"] == "stopped"
    out = cli("sessions", "info", str(path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["streams"]["forceplate/FP1"]["seq_missing"] == 3 and len(doc["clock_faults"]) == 2


def chunk_message_counts(path: Path) -> list[tuple[int, int]]:
    """(end offset, messages) of every chunk, from the mcap library: offsets from the summary's chunk
    indexes, counts from its own chunk reader (breakup_chunk)."""
    with open(path, "rb") as fh:
        indexes = make_reader(fh).get_summary().chunk_indexes
    with open(path, "rb") as fh:
        chunks = [r for r in StreamReader(fh, emit_chunks=True).records if isinstance(r, Chunk)]
    assert len(chunks) == len(indexes)
    return [(ix.chunk_start_offset + ix.chunk_length,
             sum(isinstance(r, Message) for r in breakup_chunk(c))) for ix, c in zip(indexes, chunks)]


@pytest.mark.parametrize("fraction", [0.13, 0.5, 0.77, 0.999])
def test_recover_keeps_every_complete_chunk(tmp_path, fraction):
    whole = tmp_path / "whole.mcap"
    written = write_session(whole, 3.0)
    data = whole.read_bytes()
    cut = int(len(data) * fraction)
    path = tmp_path / "cut.mcap"
    path.write_bytes(data[:cut])
    expected = sum(n for end, n in chunk_message_counts(whole) if end <= cut)
    out = cli("sessions", "recover", str(path))
    assert out.returncode == 0, out.stderr
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        assert reader.get_summary().statistics.message_count == expected
        got = [m for _, _, m in reader.iter_messages(log_time_order=False)]
    with open(whole, "rb") as fh:
        orig = [m for _, _, m in make_reader(fh).iter_messages(log_time_order=False)][:expected]
    assert [(m.channel_id, m.log_time, m.publish_time, m.sequence, m.data) for m in got] == \
        [(m.channel_id, m.log_time, m.publish_time, m.sequence, m.data) for m in orig]
    assert 0 < expected <= len(written)
    meta = {name for name in sessions.metadata(sessions.scan(path))}
    assert "walklab/recording" in meta


def test_records_equal_the_mcap_readers_messages_and_metadata(tmp_path):
    path = tmp_path / "s.mcap"
    write_session(path, 1.0, metadata={"walklab/lab": {"name": "x"}})
    scan = sessions.Scan(path)
    got = [r for r in sessions.records(path, scan) if isinstance(r, Message)]
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        want = [m for _, _, m in reader.iter_messages(log_time_order=False)]
        meta = {m.name: m.metadata for m in reader.iter_metadata()}
    assert [(m.channel_id, m.log_time, m.publish_time, m.sequence, m.data) for m in got] == \
        [(m.channel_id, m.log_time, m.publish_time, m.sequence, m.data) for m in want]
    assert scan.complete and scan.error is None and scan.messages == len(want) and scan.bytes_read == scan.size
    assert {k: scan.metadata[k] for k in meta} == meta


def _first_record(data: bytes, opcode: int) -> tuple[int, int]:
    """(offset, length) of the body of the first top-level record ``opcode`` (mcap.dev/spec framing)."""
    pos = 8
    while True:
        op, length = int(data[pos]), int.from_bytes(data[pos + 1:pos + 9], "little")
        if op == opcode:
            return pos + 9, length
        pos += 9 + length


def test_a_damaged_chunk_stops_reading_at_its_crc(tmp_path):
    whole = tmp_path / "whole.mcap"
    w = SessionWriter(whole, Settings(fsync=False, compression="none"))  # no zstd checksum: the CRC's job
    for f in frames(lab_streams(), 0.2):
        w.write(f)
    w.close()
    data = bytearray(whole.read_bytes())
    off, length = _first_record(bytes(data), 0x06)  # the first chunk
    data[off + length - 3] ^= 0x40
    path = tmp_path / "bad.mcap"
    path.write_bytes(bytes(data))
    scan = sessions.Scan(path)
    assert not any(isinstance(r, Message) for r in sessions.records(path, scan))
    assert not scan.complete and "CRC mismatch" in scan.error, scan.error


@pytest.mark.parametrize("damaged", [False, True])
def test_the_data_section_crc_covers_the_skipped_message_indexes(tmp_path, damaged):
    """The reader skips MessageIndex records unread; a DataEnd record carrying the data section's
    CRC-32 (zlib's, over every byte before it, as the spec defines it; the Python writer leaves 0)
    still catches a flipped byte in one."""
    path = tmp_path / "s.mcap"
    written = write_session(path, 0.5)
    data = bytearray(path.read_bytes())
    end, _ = _first_record(bytes(data), 0x0F)  # DataEnd
    data[end:end + 4] = zlib.crc32(bytes(data[:end - 9])).to_bytes(4, "little")
    if damaged:
        off, length = _first_record(bytes(data), 0x07)
        data[off + length - 3] ^= 0x40
    path.write_bytes(bytes(data))
    scan = sessions.Scan(path)
    n = sum(isinstance(r, Message) for r in sessions.records(path, scan))
    assert n == len(written) and scan.complete is not damaged
    assert (scan.error is not None and "data section CRC" in scan.error) if damaged else scan.error is None


def test_recover_and_info_refuse_junk(tmp_path):
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file at all")
    for args in (("sessions", "recover", str(junk)), ("sessions", "info", str(tmp_path / "missing.mcap"))):
        out = cli(*args)
        assert out.returncode == 2 and out.stderr.startswith("walklab sessions: error:"), out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_csv_export_starts_a_new_file_when_a_stream_changes_channels(tmp_path):
    path = tmp_path / "h.mcap"
    w = SessionWriter(path, Settings(fsync=False))
    layouts = [("a:count",), ("a:count",), ("a:count", "b:count")]
    for k, chans in enumerate(layouts):
        w.write(Frame("health/x", "health", k, None, k * 10**9, k * 10**9, 1.0, chans, ("1",) * len(chans),
                      np.full((1, len(chans)), float(k))))
    w.close()
    files = sessions.export_csv(path, tmp_path / "csv")
    assert sorted(p.name for p in files.values()) == ["health__x.2.csv", "health__x.csv"]
    with open(files["health/x"], newline="") as fh:
        assert list(csv.reader(fh)) == [["t_ns", "t_s", "seq", "a:count [1]"], ["0", "0.000000000", "0", "0.0"],
                                        ["1000000000", "1.000000000", "1", "1.0"]]
    with open(files["health/x#2"], newline="") as fh:
        assert list(csv.reader(fh))[1] == ["2000000000", "2.000000000", "2", "2.0", "2.0"]


def test_csv_export_equals_the_frames(tmp_path):
    path = tmp_path / "s.mcap"
    written = write_session(path, 1.0)
    out = cli("sessions", "export", str(path), "--csv", str(tmp_path / "csv"))
    assert out.returncode == 0, out.stderr
    t0 = written[0].t
    for stream in ("forceplate/FP2", "markers/mocap", "encoder/m8"):
        fs = [f for f in written if f.stream == stream]
        with open(tmp_path / "csv" / f"{stream.replace('/', '__')}.csv", newline="") as fh:
            rows = list(csv.reader(fh))
        assert rows[0][:3] == ["t_ns", "t_s", "seq"]
        assert rows[0][3:] == [f"{c} [{u}]" for c, u in zip(fs[0].channels, fs[0].units)]
        body = rows[1:]
        want_t = np.concatenate([f.t + np.rint(np.arange(f.samples) * 1e9 / f.rate_hz) for f in fs])
        assert [int(r[0]) for r in body] == want_t.astype(np.int64).tolist()
        assert [float(r[1]) for r in body] == pytest.approx(((want_t - t0) * 1e-9).tolist(), abs=1e-9)
        values = np.array([[float(v) if v else np.nan for v in r[3:]] for r in body])
        np.testing.assert_array_equal(values, np.vstack([f.data for f in fs]))  # repr round-trips floats
