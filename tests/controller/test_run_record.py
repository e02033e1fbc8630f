"""`walklab run CONFIG --record FILE`: the lab's streams recorded while the supervisor runs it."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
from mcap.reader import make_reader

from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


def test_run_with_record_writes_a_complete_session(tmp_path):
    sup, load = free_tcp_ports(2)
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f"""
[lab]
name = "recorded"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
status_interval_s = 0.0
[[processes]]
name = "load"
module = "daq.labload"
bind = "tcp://127.0.0.1:{load}"
""")
    out = tmp_path / "run.mcap"
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(cfg), "--record", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # until the recorder has written a few chunks of the load
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 300_000):
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    with open(out, "rb") as fh:
        reader = make_reader(fh)
        assert reader.get_summary() is not None  # closed cleanly: index written
        meta = {r.name: r.metadata for r in reader.iter_metadata()}
        topics = {}
        for _, ch, m in reader.iter_messages(log_time_order=False):
            topics.setdefault(ch.topic, []).append(msgpack.unpackb(m.data)["seq"])
    assert meta["walklab/lab"]["toml"] == cfg.read_text()
    assert meta["walklab/recorder"]["stop_reason"] == "stopped"
    for stream in ("forceplate/FP1", "markers/mocap", "encoder/m8", "health/load"):
        seqs = topics[stream]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), stream  # no gap once recording
