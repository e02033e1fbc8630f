"""The tree-model path as a real `controller.proc` subprocess on real ZeroMQ sockets: the lab's
``dynamics.service_torques`` process with ``--model human15`` (a tree: `service_from` builds the
`TreeService`), fed the synthetic human15 frames of test_service_tree by the test, its outputs read
back with a Subscriber.

Truth: the same frames fed in process (`test_service_tree.serve`, checked against Pinocchio's rnea
there) — the process computes the same numbers with the same stamps — and every output frame carries
its latency, also reported in the health frames."""
from __future__ import annotations

import numpy as np

from daq.health import parse_health
from daq.ports import free_tcp_ports

from .test_service_torques import Bus
from .test_service_torques_live import lab_file, run_through, serving
from .test_service_tree import CONTACT, TORQUES, ZMP, frames_of, record, serve

STREAMS = (TORQUES, ZMP, CONTACT)


def lab(tmp_path, ports):
    return lab_file(tmp_path, ports, "treetest", ["FP1", "FP2"],
                    ["--model", "human15", "--markers", "markers/sim", "--feet", "foot_r", "--height-tol-m", "2.0",
                     "--max-wait-s", "2.0", "--filter-hz", "0"], record()[-1])


def test_the_tree_process_computes_what_the_service_computes_in_process(tmp_path):
    ports = free_tcp_ports(3)
    config = lab(tmp_path, ports)
    frames = frames_of()
    expected: Bus = serve(frames)
    with serving(tmp_path, config, ports, ["dynamics/*", "health/torques"], list(STREAMS), 60.0) as (feed, proc, sub):
        # about real time: 1.5 s of frames in a few seconds
        got, stats = run_through(feed, proc, sub, frames, sum(d.shape[0] for d, _ in expected.frames[TORQUES]),
                                 0.003, 60.0)
    for stream in STREAMS:
        live = np.concatenate([g.data for g in got[stream]])
        mine = np.concatenate([d for d, _ in expected.frames[stream]])
        assert live.shape == mine.shape
        assert np.allclose(live, mine, rtol=1e-12, atol=1e-9, equal_nan=True)
        assert got[stream][0].channels == expected.frames[stream][0][1]["channels"]
    t_live = np.concatenate([g.t + np.arange(g.samples) * 5_000_000 for g in got[TORQUES]])
    t_mine = np.concatenate([kw["t"] + np.arange(d.shape[0]) * 5_000_000 for d, kw in expected.frames[TORQUES]])
    assert np.array_equal(t_live, t_mine)
    assert all(0 <= g.meta["latency_s"] < 5.0 for g in got[TORQUES])
    assert all(stats[s].gaps == 0 and stats[s].dropped == 0 for s in STREAMS)
    health = [parse_health(g) for g in got["health/torques"]]
    assert sum(h["latency"]["latency_n"] for h in health if "latency" in h) == len(got[TORQUES])
