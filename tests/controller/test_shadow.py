"""`walklab replay FILE --shadow` on a session `walklab run` recorded from the simulated Jansen world.

Truth: the live run's own outputs in the recording (read with the `mcap` library, not walklab's reader):
the replay recomputes the plate wrenches, the walker's torques, ZMP and foot forces from the recorded
inputs with the same code, so every sample both computed from complete inputs is the same number — replayed
as fast as it goes (``--fast``), where a stale rule on the host's clock held inputs on a busy machine. The
control loop, in shadow mode, measured the recorded encoder samples (the recording's own values)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from mcap.reader import make_reader

from .test_run_sim import REPO, frames, private_lab, robot  # noqa: F401  (robot: a fixture)


def series(docs):
    """(t of each sample ns, data (N, C), channels) of a stream's decoded frames."""
    t, d = [], []
    for doc in docs:
        a = doc["arrays"]["data"]
        step = 1e9 / doc["rate_hz"] if doc["rate_hz"] else 0.0
        t.append(doc["t"] + np.round(np.arange(a.shape[0]) * step).astype(np.int64))
        d.append(a)
    return np.concatenate(t), np.concatenate(d), list(docs[0]["channels"])


def limit_file_size() -> None:
    """In a child before exec: no file may grow past 1 MB (writes beyond fail with EFBIG, SIGXFSZ ignored)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))


@pytest.fixture(scope="module")
def shadowed(tmp_path_factory, robot):  # noqa: F811
    """(the recording of an 8 s `walklab run` walking, its `walklab replay --shadow --fast` output)."""
    tmp_path = tmp_path_factory.mktemp("shadow")
    script = tmp_path / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.2\n")
    cfg = private_lab(tmp_path, robot)
    # the live walker dynamics waits up to 2 s for its inputs, so a loaded machine leaves few samples held
    text = cfg.read_text()
    assert '"--markers", "markers/walker"' in text
    cfg.write_text(text.replace('"--markers", "markers/walker"', '"--markers", "markers/walker", "--max-wait-s", "2.0"'))
    rec, out = tmp_path / "s.mcap", tmp_path / "s.shadow.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "8", "--record",
                          str(rec), "--script", str(script)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # As fast as it goes: the replay is paced by the analysis's progress in lab time, and nothing waits on
    # the host's clock, so a busy machine computes the same samples as the live run (controller/shadow.py)
    rep = subprocess.run([sys.executable, "-m", "controller.cli", "replay", str(rec), "--shadow", "--fast", "--quiet",
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    return rec, out


def messages(path):
    """The mcap library's messages by topic: (data bytes, log_time, publish_time, sequence), and the channels'
    metadata."""
    out, meta = {}, {}
    with open(path, "rb") as fh:
        for _, ch, m in make_reader(fh).iter_messages(log_time_order=False):
            out.setdefault(ch.topic, []).append((bytes(m.data), m.log_time, m.publish_time, m.sequence))
            meta[ch.topic] = dict(ch.metadata)
    return out, meta


def test_shadow_replay_recomputes_the_live_results(tmp_path, shadowed):
    rec, out = shadowed
    # a shadow recording the disk refuses (files limited to 1 MB: EFBIG) is an error, not a result
    full = tmp_path / "full.shadow.mcap"
    rep2 = subprocess.run([sys.executable, "-m", "controller.cli", "replay", str(rec), "--shadow", "--fast", "--quiet",
                           "--out", str(full)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          preexec_fn=limit_file_size)
    assert rep2.returncode == 2, rep2.stdout[-3000:] + rep2.stderr[-3000:]
    last = rep2.stderr.strip().splitlines()[-1]
    assert last.startswith("walklab replay: error: ") and "shadow recording stopped (disk_full" in last, last
    assert "recomputed" not in rep2.stdout
    live, again = frames(rec), frames(out)
    for stream in ("dynamics/grf/FP1", "dynamics/grf/FP2"):
        t1, a, _ = series(live[stream])
        t2, b, _ = series(again[stream])
        plate = stream.rsplit("/", 1)[1]
        zero = [(z["t"], z["meta"], z["arrays"]["data"].tolist()) for z in live.get(f"dynamics/zero/{plate}", [])], \
            [(z["t"], z["meta"], z["arrays"]["data"].tolist()) for z in again.get(f"dynamics/zero/{plate}", [])]
        raw = live[f"forceplate/{plate}"]
        why = f"zero live/replay {zero}; raw seqs in the file from {min(d['seq'] for d in raw)}, {len(raw)} frames"
        assert np.array_equal(t1, t2[:t1.size]), why
        assert np.array_equal(a, b[:t1.size], equal_nan=True), why
    t1, a, ch = series(live["dynamics/torques"])
    t2, b, _ = series(again["dynamics/torques"])
    common, i1, i2 = np.intersect1d(t1, t2, return_indices=True)
    stale = ch.index("stale")
    both = (a[i1, stale] == 0) & (b[i2, stale] == 0)
    why = (f"live {t1.size} samples ({int(a[:, stale].sum())} stale), replay {t2.size} ({int(b[:, stale].sum())} "
           f"stale), common {common.size}, complete in both {int(both.sum())}")
    assert common.size > 0.9 * t1.size and both.sum() > 0.5 * t1.size, why
    diff = np.abs(a[i1][both] - b[i2][both]).max(axis=1)
    assert np.allclose(a[i1][both], b[i2][both], rtol=1e-12, atol=1e-9), \
        f"{int((diff > 1e-9).sum())} samples differ, largest {diff.max()}; {why}"
    for stream in ("dynamics/zmp", "dynamics/contact"):
        _, za, _ = series(live[stream])
        _, zb, _ = series(again[stream])
        assert np.allclose(za[i1][both], zb[i2][both], rtol=1e-12, atol=1e-9, equal_nan=True)
    # the control loop ran in shadow mode on the replayed encoder streams: each cycle's measured angle is the
    # recorded encoder sample at or before its time, and it walked from the recorded request on
    t_s, st, sch = series(again["controller/state"])
    assert np.all(np.diff(t_s) == 2_000_000), "one cycle every 2 ms of the data's clock"
    for shaft in ("left_shaft", "right_shaft"):
        t_e, enc, ech = series(live[f"encoder/{shaft}"])
        k = np.searchsorted(t_e, t_s, side="right") - 1
        assert k.min() >= 0
        np.testing.assert_array_equal(st[:, sch.index(f"{shaft}/q")], enc[k, ech.index("angle")])
    asked = [d["t"] for d in live["controller/events"] if d["meta"]["cause"] == "request"]
    assert len(asked) == 1
    walking = st[:, sch.index("walking")] == 1
    assert not walking[t_s < asked[0]].any() and walking[t_s > asked[0] + 2_000_000].all()
    assert np.abs(st[walking, sch.index("left_shaft/tau")]).max() > 0


def test_the_shadow_output_is_a_whole_session_that_analyze_takes(tmp_path, shadowed):
    """The shadow output holds the input frames replayed as the live recording holds them — truth: the live
    file read with the mcap library, message for message (bytes, times, sequence, channel metadata) — beside
    the recomputed streams, so `walklab analyze` takes it (it refused the recomputed streams alone: no marker
    stream and no plate) and, from the same markers and plates, finds what it finds in the live recording."""
    rec, out = shadowed
    (live, live_meta), (again, again_meta) = messages(rec), messages(out)
    inputs = sorted(s for s in live if not s.startswith(("dynamics/", "events/", "health/", "controller/")))
    assert {"forceplate/FP1", "forceplate/FP2", "markers/walker", "encoder/left_shaft", "encoder/right_shaft"} \
        <= set(inputs), inputs
    for s in inputs:
        assert again.get(s) == live[s], f"{s}: {len(again.get(s, []))} messages in the shadow output, {len(live[s])} live"
        assert again_meta[s] == live_meta[s]
    assert "controller/request" not in again        # the requests went to the loop, not into the session
    assert {"dynamics/torques", "dynamics/grf/FP1", "controller/state"} <= set(again)
    res = tmp_path / "analysis"
    ana = subprocess.run([sys.executable, "-m", "controller.cli", "analyze", str(rec), str(out), "--out", str(res),
                          "--workers", "1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ana.returncode == 0, ana.stdout[-3000:] + ana.stderr[-3000:]
    assert (res / "s.shadow" / "report.html").is_file()
    a, b = np.load(res / "s" / "results.npz"), np.load(res / "s.shadow" / "results.npz")
    assert sorted(a.files) == sorted(b.files)
    assert sum(int(np.isfinite(a[k]).sum()) for k in a.files if a[k].dtype.kind == "f") > 1000   # not all NaN
    for k in a.files:
        assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k


LAB = '''
[lab]
name = "tricky"
description = """two lines, the second like a table header:
[[processes]]"""
[supervisor]
bind = "tcp://127.0.0.1:5600"
[[processes]]
name = 'dynamics'
module = 'dynamics.service'   # single quotes, a comment
bind = "tcp://127.0.0.1:5603"
devices = ["FP1"]
[[processes]]
name = "world"
module = "daq.devices.world_sim"
bind = "tcp://127.0.0.1:5601"
[[processes]]
name = "loop"
module = "controller.loop"
bind = "tcp://127.0.0.1:5604"
args = ["--robot", "jansen", "--operator", "tcp://127.0.0.1:5610"]
[[processes]]
name = "torques"
module = "dynamics.service_torques"
bind = "tcp://127.0.0.1:5605"
devices = ["FP1"]
args = ["--max-wait-s", "2.0", "--markers", "markers/walker"]
[devices.FP1]
kind = "forceplate"
source = "sim"
corners = [[0.6, -0.4, 0.0], [0.0, -0.4, 0.0], [0.0, 0.4, 0.0], [0.6, 0.4, 0.0]]
'''


def test_the_shadow_lab_is_the_config_as_a_table_with_only_the_analysis_on_free_ports(tmp_path):
    """Truth: tomllib and controller.config.load reading the written lab; the text has what line-based
    editing got wrong (single-quoted module names, a multi-line string holding a table header)."""
    import tomllib

    from controller.config import load
    from controller.shadow import NO_HOST_WAIT_S, shadow_lab

    path = shadow_lab(LAB, "tcp://127.0.0.1:59999", tmp_path)
    table = tomllib.loads(path.read_text())
    lab = load(path)
    assert table["lab"]["description"] == "two lines, the second like a table header:\n[[processes]]"
    procs = {p.name: p for p in lab.processes}
    assert list(procs) == ["dynamics", "loop", "torques", "replay"]
    assert procs["replay"].bind == "tcp://127.0.0.1:59999"
    binds = [lab.supervisor.bind] + [p.bind for p in lab.processes]
    assert len(set(binds)) == len(binds) and not {"5600", "5603", "5604", "5605"} & {b.rsplit(":", 1)[1] for b in binds}
    loop = list(procs["loop"].args)
    assert "--shadow" in loop and loop[loop.index("--operator") + 1] not in ("tcp://127.0.0.1:5610", *binds)
    torques = list(procs["torques"].args)
    assert float(torques[torques.index("--max-wait-s") + 1]) == NO_HOST_WAIT_S and torques.count("--max-wait-s") == 1
    assert lab.devices["FP1"].corners == ((0.6, -0.4, 0.0), (0.0, -0.4, 0.0), (0.0, 0.4, 0.0), (0.6, 0.4, 0.0))


def test_replay_publishes_by_default_where_no_lab_config_binds_or_connects(tmp_path):
    """`walklab replay`'s default --bind is no endpoint of any shipped lab config (above all not a control
    loop's operator endpoint, where a live loop would obey the recording's requests and e-stops). Truth: every
    config in configs/ read with controller.config (supervisor, processes' bind/connect, their endpoint args;
    copied beside keys made with `walklab keys`, which the real-lab template needs)."""
    import shutil

    import configs
    from controller.cli import build_parser, main
    from controller.config import load

    default = build_parser().parse_args(["replay", "x.mcap"]).bind
    port = default.rsplit(":", 1)[1]
    labs = [p for p in sorted(configs.path("sim.toml").parent.glob("*.toml"))
            if tomllib_has(p, "processes")]
    assert len(labs) >= 5, labs
    for name in ("server", "client"):
        assert main(["keys", "--dir", str(tmp_path / "keys"), name]) == 0
    (tmp_path / "keys" / "authorized").mkdir()
    (tmp_path / "keys" / "client.key").rename(tmp_path / "keys" / "authorized" / "client.key")
    used = set()
    for path in labs:
        lab = load(shutil.copy(path, tmp_path))
        used |= {lab.supervisor.bind, lab.supervisor.connect}
        for p in lab.processes:
            used |= {p.bind, p.connect} | {a for a in map(str, p.args) if "://" in a}
    used.discard("")
    assert "tcp://127.0.0.1:5610" in used  # the control loops' operator endpoint is among them
    assert not [e for e in used if e.rsplit(":", 1)[-1] == port], (default, sorted(used))


def tomllib_has(path, key: str) -> bool:
    """Whether the TOML file at `path` has the top-level `key` (a lab config has ``processes``)."""
    import tomllib

    return key in tomllib.loads(path.read_text())


def test_a_failed_start_stops_the_analysis_processes_already_started(tmp_path, monkeypatch):
    """Starting the second analysis process fails (an OSError injected into its spawn): the error comes out
    and the first, a real `dynamics.service` process, is stopped, not left running. Truth: the child's own
    exit status (None while it runs: it was left running before the fix)."""
    import subprocess as sp

    import controller.shadow as shadow
    from daq.frames import Frame
    from daq.record import SessionWriter

    session = tmp_path / "in.mcap"
    with_frame = SessionWriter(session)
    with_frame.write(Frame("forceplate/FP1", "forceplate", 0, None, 1, 1, 1000.0, ("Fz",), ("N",), np.zeros((10, 1))))
    with_frame.close()
    config = tmp_path / "lab.toml"
    config.write_text(LAB)
    started: list[sp.Popen] = []
    real = sp.Popen

    def popen(*args, **kwargs):
        if started:
            raise OSError("injected: cannot start the second process")
        started.append(real(*args, **kwargs))
        return started[0]

    monkeypatch.setattr(shadow.subprocess, "Popen", popen)
    try:
        with pytest.raises(OSError, match="injected"):
            shadow.run_shadow(session, tmp_path / "out.mcap", config=config)
        assert len(started) == 1 and started[0].poll() is not None, "the first analysis process was left running"
    finally:
        for c in started:
            if c.poll() is None:
                c.kill()
                c.wait()


def test_a_request_goes_out_before_the_first_block_holding_a_sample_at_or_after_its_time():
    """The shadow loop runs its cycles up to a block's last sample as soon as it has the block, so a request
    at t must reach it before any block with a sample at or after t — not only before blocks starting after
    t (a request inside a block was applied one cycle late in a clean-clone run). Truth: the sample times of
    blocks built by hand (10 samples at 1 kHz from 0 and from 10 ms)."""
    from controller.shadow import merged
    from daq.frames import Frame

    def block(seq, t0):
        return Frame("encoder/left_shaft", "encoder", seq, None, t0, t0, 1000.0, ("angle",), ("rad",),
                     np.zeros((10, 1)))

    def request(t):
        return Frame("controller/request", "command", 0, None, t, t, 0.0, ("speed", "turn"), ("m/s", "rad/s"),
                     np.array([[0.1, 0.0]]))

    ms = 1_000_000
    blocks = [block(0, 0), block(1, 10 * ms)]
    for t, before in ((0, 0), (5 * ms, 0), (9 * ms, 0), (9 * ms + 1, 1), (19 * ms, 1), (19 * ms + 1, 2)):
        order = [f.stream for f in merged(blocks, [request(t)])]
        assert order.index("controller/request") == before, (t, order)
