"""bench/live.py (`walklab bench live`) on the exoskeleton lab, configs/sim_exo.toml: its config (read back
by walklab's config loader) and a short real run (the benchmark as a subprocess: supervisor, world, plate
service, tree dynamics service, control loop, extra load, recorder). Truths: the recording it keeps, read with the mcap
library and msgpack (not walklab's reader): the streams at the issue's lab load, every stream's seq without
a gap, each torques frame's ``meta.latency_s`` — the report's figures are those numbers' percentiles (no
timing is asserted: what they are depends on the machine)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.live import lab, lab_of
from controller.config import load
from dynamics.service_tree import LOOKAHEAD
from tests.controller.test_run_sim import frames  # the recording read with mcap + msgpack

REPO = Path(__file__).resolve().parents[2]


def test_exo_lab_config_sets_realtime_on_its_services_and_brings_the_bus_to_lab_load(tmp_path):
    cfg = load(lab(tmp_path, 20, lab_of("configs/sim_exo.toml")))
    by = {p.name: p for p in cfg.processes}
    assert {n: by[n].realtime for n in by} == {"world": 20, "healthmon": 0, "loop": 20, "dynamics": 20, "torques": 20,
                                               "extra": 0}
    assert by["torques"].module == "dynamics.service_torques" and "exoskeleton" in by["torques"].args
    assert by["extra"].module == "bench.live" and tuple(by["extra"].args) == ("--markers", "0", "--encoders", "4")
    assert Path(cfg.devices["exo_mcu"].port) == tmp_path / "pty" / "mcu"
    # without --realtime the services run as the shipped config says (normal scheduling)
    assert all(p.realtime == 0 for p in load(lab(tmp_path, None, lab_of("sim_exo.toml"))).processes)


@pytest.mark.parametrize("config", ["configs/nope.toml", "configs/lab-jansen.toml", "/elsewhere/sim_exo.toml"])
def test_bench_live_names_the_labs_it_knows(config):
    run = subprocess.run([sys.executable, "-m", "controller.cli", "bench", "live", "--config", config,
                          "--minutes", "0.1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"walklab bench: error: --config {config}: expected one of the shipped simulated labs configs/sim.toml, "
        "configs/sim_exo.toml"]


def _stage(report: str, label: str) -> tuple[float, float, float, int]:
    m = re.search(re.escape(label) + r"\s+p50\s+(\S+)\s+p99\s+(\S+)\s+max\s+(\S+) ms\s+\(n = (\d+)\)", report)
    assert m, report
    return float(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))


def test_bench_live_exo_reports_the_tree_service_latency_and_no_seq_gap(tmp_path):
    rec = tmp_path / "exo.mcap"
    run = subprocess.run([sys.executable, "bench/live.py", "--config", "configs/sim_exo.toml", "--minutes", "0.25",
                          "--record", str(rec)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    f = frames(rec)

    # lab load: 2 plates, 40 markers x 200 Hz (the world's), 8 encoders (the world's 4, the extra process's 4)
    assert sorted(s for s in f if s.startswith("forceplate/")) == ["forceplate/FP1", "forceplate/FP2"]
    assert sorted(s for s in f if s.startswith("markers/")) == ["markers/exo"]
    assert len(f["markers/exo"][0]["channels"]) == 3 * 40 and f["markers/exo"][0]["rate_hz"] == 200.0
    assert len([s for s in f if s.startswith("encoder/")]) == 8

    # no seq gap in any stream, as the report says
    for stream, docs in f.items():
        seq = np.array([d["seq"] for d in docs])
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + seq.size)), stream
    assert "seq gaps in the recording: none" in out

    # the tree service's stage: the percentiles of every recorded torques frame's meta.latency_s
    torques = f["dynamics/torques"]
    assert "tau:knee_l" in torques[0]["channels"] and "stale" in torques[0]["channels"]
    lat = np.array([d["meta"]["latency_s"] for d in torques]) * 1e3
    p50, p99, pmax, n = _stage(out, "tree dynamics (newest input -> publication)")
    assert n == lat.size > 0
    assert (p50, p99, pmax) == tuple(float(f"{x:.3f}") for x in (np.percentile(lat, 50), np.percentile(lat, 99),
                                                                 lat.max()))
    stale = np.array([d["arrays"]["data"][:, list(d["channels"]).index("stale")].any() for d in torques])
    assert f"{stale.sum()} of {stale.size} (" in out
    if (~stale).any():
        assert _stage(out, "frames with every input fresh")[3] == (~stale).sum()

    # world -> torques: each torques frame against the marker frame whose last sample is LOOKAHEAD marker
    # samples after the torques frame's last (the one that completed it), on the host clock
    marker_pub = {d["t"] + round((d["arrays"]["data"].shape[0] - 1) * 1e9 / d["rate_hz"]): d["t_pub"]
                  for d in f["markers/exo"]}
    e2e = np.array([(d["t_pub"] - marker_pub[k]) * 1e-9 for d in torques if (k := d["t"] + round(
        (d["arrays"]["data"].shape[0] - 1 + LOOKAHEAD) * 1e9 / d["rate_hz"])) in marker_pub]) * 1e3    # ms
    assert e2e.size and e2e.min() > 0      # causality: the marker frame went out before the torques it completed
    p50, _, pmax, n = _stage(out, "world marker frame -> torques published")
    assert (p50, pmax, n) == (float(f"{np.percentile(e2e, 50):.3f}"), float(f"{e2e.max():.3f}"), e2e.size)
    # the service's CPU and scheduling (normal without --realtime: the niceness this test runs at)
    assert re.search(r"^  torques\s+\d+\.\d\s+nice -?\d+$", out, flags=re.M), out
