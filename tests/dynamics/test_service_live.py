"""The dynamics service live: simulated plates and `dynamics.service` as two real
`controller.proc` subprocesses on real ZeroMQ sockets, a third plate (FP3, never loaded) published
by the test, garbage and unusable frames injected on the input streams.

Truths: ezc3d's force-platform reader on a C3D written from the very raw frames (with the offset
the service reports), the simulator's analytic load (`daq.simulated.foot_wrench`) at the frames'
device times, and its analytic stance timing for the contact events."""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import ezc3d
import msgpack
import numpy as np
import pytest
import zmq
from ezc3d import ezc3d as ezc3d_swig

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Publisher, Subscriber
from daq.health import parse_health
from daq.ports import free_tcp_ports
from daq.simulated import Gait, foot_wrench

REPO = Path(__file__).resolve().parents[2]
GAIT = Gait(body_mass_kg=70.0, stride_s=1.0, stance_fraction=0.62)
FOOT = {"FP1": (0.0, 1.0), "FP2": (0.5, -1.0)}   # (phase, side) the simulator gives plates 1, 2
CORNERS = {
    "FP1": [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]],
    "FP2": [[0.6, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.4, 0.0], [0.6, 0.4, 0.0]],
    "FP3": [[1.2, 0.4, 0.0], [0.6, 0.4, 0.0], [0.6, 0.8, 0.0], [1.2, 0.8, 0.0]],
}
ORIGIN = [0.0, 0.0, -0.04]
FP3_OFFSET = np.array([3.0, -2.0, 12.0, 0.4, -0.3, 0.1])   # an unzeroed amplifier, N and N*m
CHANNELS = ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
UNITS = ("N", "N", "N", "N*m", "N*m", "N*m")
MIRROR_FRAMES = 700          # FP3 blocks published (3.5 s of samples)
BAD_CHANNELS_AT, BAD_RATE_AT, NAN_AT, SKIP_AT = 280, 300, 320, 340   # FP3 block indices
NAN_ROWS = [1, 2]


def lab_config(tmp_path: Path, ports: list[int]) -> Path:
    plates = "".join(f"""
        [devices.{name}]
        kind = "forceplate"
        source = "{'sim' if name != 'FP3' else 'test'}"
        corners = {corners}
        origin = {ORIGIN}
        """ for name, corners in CORNERS.items())
    text = textwrap.dedent(f"""
        [lab]
        name = "servicetest"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        [[processes]]
        name = "forceplates"
        module = "daq.simulated"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["FP1", "FP2"]
        args = ["--stride-s", "{GAIT.stride_s}", "--stance-fraction", "{GAIT.stance_fraction}", "--seed", "3"]
        [[processes]]
        name = "dynamics"
        module = "dynamics.service"
        bind = "tcp://127.0.0.1:{ports[2]}"
        devices = ["FP1", "FP2", "FP3"]
        args = ["--zero-s", "1.2", "--max-lag-s", "1.0"]  # FP3 comes through this test: slow
        # not started: the test itself publishes FP3 there, and garbage on the next one
        [[processes]]
        name = "fp3"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[3]}"
        [[processes]]
        name = "junk"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[4]}"
    """) + textwrap.dedent(plates)
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def start(config: Path, name: str, tmp_path: Path) -> subprocess.Popen:
    """`python -m controller.proc --config FILE --name NAME ARGS...`, as `walklab run` starts it."""
    lab = load(config)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp_path / f"{name}.log", "w") as log:
        return subprocess.Popen(Supervisor(lab).command(lab.process(name)), cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Run the lab, mirror FP1's blocks as FP3 with injected faults, collect everything."""
    tmp = tmp_path_factory.mktemp("service")
    ports = free_tcp_ports(5)
    config = lab_config(tmp, ports)
    ep = {k: f"tcp://127.0.0.1:{p}" for k, p in zip(("sup", "sim", "svc", "fp3", "junk"), ports)}
    rng = np.random.default_rng(7)
    fp3_pub = Publisher(ep["fp3"])
    junk = zmq.Context.instance().socket(zmq.PUB)
    junk.linger = 0
    junk.bind(ep["junk"])
    procs = {n: start(config, n, tmp) for n in ("dynamics", "forceplates")}
    frames: dict[str, list] = defaultdict(list)
    fp3_sent: dict[int, np.ndarray] = {}       # t of the block -> raw published
    junk_sent = 0
    sub = Subscriber([ep["sim"], ep["svc"]], ["forceplate/*", "dynamics/*", "events/contact", "health/dynamics"],
                     expect=["forceplate/FP1", "forceplate/FP2", "dynamics/grf/FP1", "dynamics/grf/FP2",
                             "dynamics/grf/FP3", "dynamics/grf", "events/contact"])
    try:
        assert sub.wait_connected(timeout_s=20.0), "simulator or service did not come up"
        assert fp3_pub.wait_for_subscribers(1, timeout_s=10.0), "the service never subscribed to FP3"
        i = 0
        deadline = time.monotonic() + 30.0
        while i < MIRROR_FRAMES and time.monotonic() < deadline:
            f = sub.recv(timeout_s=0.5)
            if f is None:
                continue
            frames[f.stream].append(f)
            if f.stream != "forceplate/FP1":
                continue
            stamps = dict(t_device=f.t_device, t_host=f.t_host, t=f.t)
            raw = FP3_OFFSET + rng.normal(0.0, [1, 1, 1, 0.05, 0.05, 0.05], (f.samples, 6))
            if i == BAD_CHANNELS_AT:      # well-formed, but not a type-2 plate's block
                fp3_pub.publish("forceplate/FP3", raw[:, :5], kind="force", rate_hz=1000.0,
                                channels=CHANNELS[:5], units=UNITS[:5], **stamps)
            if i == BAD_RATE_AT:
                fp3_pub.publish("forceplate/FP3", raw, kind="force", rate_hz=500.0, channels=CHANNELS,
                                units=UNITS, **stamps)
            if i == NAN_AT:
                raw[NAN_ROWS] = np.nan
            if i != SKIP_AT:
                fp3_pub.publish("forceplate/FP3", raw, kind="force", rate_hz=1000.0, channels=CHANNELS,
                                units=UNITS, **stamps)
                fp3_sent[f.t] = raw
            if i % 20 == 0 and i < 400:
                for parts in ([b"forceplate/FP1", b"\xc1"], [b"forceplate/FP1", msgpack.packb({"v": 1})],
                              [b"forceplate/FP1"]):
                    junk.send_multipart(parts)
                    junk_sent += 1
            i += 1
        assert i == MIRROR_FRAMES, "the simulator stopped publishing"
        # let the service publish what is in flight, then stop it and read its last health frame
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            f = sub.recv(timeout_s=0.05)
            if f is not None:
                frames[f.stream].append(f)
        alive = procs["dynamics"].poll() is None
        procs["dynamics"].send_signal(signal.SIGTERM)
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            f = sub.recv(timeout_s=0.2)
            if f is not None:
                frames[f.stream].append(f)
                if f.stream == "health/dynamics" and f.meta["state"] == "stopped":
                    break
        stats = sub.stats()
        status = procs["dynamics"].wait(timeout=10)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        sub.close()
        fp3_pub.close()
        junk.close()
    log = (tmp / "dynamics.log").read_text()
    return dict(frames=frames, fp3_sent=fp3_sent, stats=stats, alive=alive, log=log, junk_sent=junk_sent,
                status=status)


def samples(frames) -> dict[int, tuple[np.ndarray, int | None, int]]:
    """Every sample of `frames` by its time t [ns]: (row, t_device, t_host), from sample counts."""
    out = {}
    for f in frames:
        t, th = f.sample_times(), f.sample_times("t_host")
        td = f.sample_times("t_device") if f.t_device is not None else [None] * f.samples
        for i in range(f.samples):
            out[int(t[i])] = (f.data[i], None if td[i] is None else int(td[i]), int(th[i]))
    return out


def fp3_samples(live) -> dict[int, np.ndarray]:
    return {t + i * 1_000_000: raw[i] for t, raw in live["fp3_sent"].items() for i in range(len(raw))}


def health(live, state: str | None = "stopped") -> dict:
    hs = [f for f in live["frames"]["health/dynamics"] if state is None or f.meta["state"] == state]
    assert hs, f"no health/dynamics frame in state {state!r}:\n{live['log'][-3000:]}"
    return parse_health(hs[-1])


def _int_param(c3d, name, values):
    arr = np.asarray(values, dtype=int)
    p = ezc3d_swig.Parameter(name, "")
    p.set(ezc3d_swig.VecInt([int(v) for v in arr.reshape(-1, order="F")]), [int(s) for s in arr.shape])
    c3d._storage["parameters"].add_parameter("FORCE_PLATFORM", p)


def ezc3d_plates(tmp_path, raws: list[np.ndarray]) -> list[dict]:
    """ezc3d's force platforms of a C3D holding the type-2 raw channels `raws` (n, 6) of FP1..FP3."""
    n = len(raws[0])
    k = len(raws)
    c = ezc3d.c3d()
    c["parameters"]["POINT"]["RATE"]["value"] = [100.0]
    c["parameters"]["POINT"]["UNITS"]["value"] = ["m"]
    c["parameters"]["POINT"]["LABELS"]["value"] = ["dummy"]
    c["parameters"]["ANALOG"]["RATE"]["value"] = [1000.0]
    c["parameters"]["ANALOG"]["LABELS"]["value"] = [f"{ch}{i}" for i in range(1, k + 1) for ch in CHANNELS]
    c["parameters"]["ANALOG"]["UNITS"]["value"] = ["N"] * 3 * k + ["Nm"] * 3 * k
    c["data"]["points"] = np.ones((4, 1, n // 10))
    c["data"]["analogs"] = np.concatenate([r.T for r in raws])[None]
    _int_param(c, "USED", [k])
    _int_param(c, "TYPE", [2] * k)
    _int_param(c, "ZERO", [1, 0])
    _int_param(c, "CHANNEL", np.arange(1, 6 * k + 1).reshape(k, 6).T)
    c.add_parameter("FORCE_PLATFORM", "CORNERS", np.stack([np.array(CORNERS[f"FP{i}"]).T for i in range(1, k + 1)], -1))
    c.add_parameter("FORCE_PLATFORM", "ORIGIN", np.stack([np.array(ORIGIN)] * k, axis=-1))
    path = tmp_path / "trial.c3d"
    c.write(str(path))
    return ezc3d.c3d(str(path), extract_forceplat_data=True)["data"]["platform"]


# ------------------------------------------------------------------------------------ tests ----

def test_plates_equal_ezc3d_on_the_same_raw_frames(live, tmp_path):
    """Every sample the test saw on all three inputs: the service's force, COP, free moment and
    validity equal ezc3d's on a C3D of those raw samples minus the offset the service reports."""
    fr = live["frames"]
    raw_in = {"FP1": samples(fr["forceplate/FP1"]), "FP2": samples(fr["forceplate/FP2"]), "FP3": fp3_samples(live)}
    out = {n: samples(fr[f"dynamics/grf/{n}"]) for n in CORNERS}
    common = set(raw_in["FP3"])
    for name in CORNERS:
        common &= set(raw_in[name]) & set(out[name])
    common = sorted(t for t in common if np.isfinite(raw_in["FP3"][t]).all())
    assert len(common) > 2000
    common = common[: len(common) // 10 * 10]          # whole 10-sample analog frames
    raws, served = [], []
    for name in CORNERS:
        (report,) = fr[f"dynamics/zero/{name}"]
        assert report.meta["status"] == ("unloaded" if name == "FP3" else "zeroed")
        raws.append(np.array([raw_in[name][t] if name == "FP3" else raw_in[name][t][0] for t in common])
                    - report.data[0])
        served.append(np.array([out[name][t][0] for t in common]))
    for name, p, s in zip(CORNERS, ezc3d_plates(tmp_path, raws), served):
        force, cop, tz = p["force"].T, p["center_of_pressure"].T, p["Tz"].T[:, 2]
        # analogs are stored as float32 in the C3D: 1e-7 relative
        np.testing.assert_allclose(s[:, 0:3], force, atol=2e-4 * max(1.0, np.abs(force).max()), err_msg=name)
        clear = np.abs(force[:, 2] - 20.0) > 0.05
        np.testing.assert_array_equal(s[clear, 10] == 1.0, force[clear, 2] > 20.0, err_msg=name)
        valid = s[:, 10] == 1.0
        np.testing.assert_allclose(s[valid, 6:9], cop[valid], atol=1e-5, err_msg=name)
        np.testing.assert_allclose(s[valid, 9], tz[valid], atol=2e-3, err_msg=name)
        assert np.isnan(s[~valid, 6:10]).all()
        if name != "FP3":
            assert valid.sum() > 300


def test_forces_cop_and_total_match_the_simulated_load(live):
    """At the device time of each sample, per plate and combined (methods d.2 on the analytic
    loads), within the simulator's channel noise (1 N, 0.05 N*m)."""
    fr = live["frames"]
    truth = {}
    for name, (phase, side) in FOOT.items():
        rows = np.concatenate([f.data for f in fr[f"dynamics/grf/{name}"]])
        t = np.concatenate([f.sample_times("t_device") for f in fr[f"dynamics/grf/{name}"]]) * 1e-9
        force, cop, tz = foot_wrench(t, GAIT, phase, side)
        cop = cop + np.mean(CORNERS[name], axis=0)
        np.testing.assert_allclose(rows[:, 0:3], force, atol=6.0, err_msg=name)
        loaded = force[:, 2] > 200.0
        assert loaded.sum() > 500
        np.testing.assert_allclose(rows[loaded, 6:9], cop[loaded], atol=3e-3, err_msg=name)
        truth[name] = {ti: (f, c, z) for ti, f, c, z in zip(np.round(t * 1e9).astype(np.int64), force, cop, tz)}
    total = [f for f in fr["dynamics/grf"]]
    rows = np.concatenate([f.data for f in total])
    td = np.concatenate([f.sample_times("t_device") for f in total])
    have = np.array([all(ti in truth[n] for n in FOOT) for ti in td]) & (rows[:, 9] == 1.0)
    assert have.sum() > 1000
    f_sum = np.array([sum(truth[n][ti][0] for n in FOOT) for ti in td[have]])
    n_sum = np.array([sum(np.cross(truth[n][ti][1], truth[n][ti][0]) + [0, 0, truth[n][ti][2]] for n in FOOT)
                      for ti in td[have]])
    np.testing.assert_allclose(rows[have, 0:3], f_sum, atol=10.0)
    cop = np.column_stack([-n_sum[:, 1] / f_sum[:, 2], n_sum[:, 0] / f_sum[:, 2]])
    # noise: 1 N on each of the 3 plates' forces, about 1 m from the lab origin: ~1 N*m of moment
    err = np.abs(rows[have, 6:8] - cop).max(axis=1)
    assert (err <= 3.0 / f_sum[:, 2]).all(), err.max()
    np.testing.assert_array_equal(rows[have, 8], 0.0)


def test_no_sequence_gap_and_every_input_sample_served_with_its_stamps(live):
    st = live["stats"]
    for stream in ("forceplate/FP1", "forceplate/FP2", "dynamics/grf/FP1", "dynamics/grf/FP2",
                   "dynamics/grf/FP3", "dynamics/grf", "events/contact"):
        assert st[stream].received > 0, stream
        assert (st[stream].gaps, st[stream].dropped) == (0, 0), stream
    h = health(live)
    for stream in ("forceplate/FP1", "forceplate/FP2", "forceplate/FP3"):
        assert (h[stream]["gaps"], h[stream]["dropped"]) == (0, 0), stream
    fr = live["frames"]
    for name in ("FP1", "FP2"):
        raw, out = samples(fr[f"forceplate/{name}"]), samples(fr[f"dynamics/grf/{name}"])
        span = [t for t in raw if min(out) <= t <= max(out)]
        assert len(span) > 1500
        for t in span:
            assert t in out and out[t][1:] == raw[t][1:], (name, t)      # t_device, t_host
    # the combined stream is one unbroken timeline at the plates' rate
    total = fr["dynamics/grf"]
    for a, b in zip(total, total[1:]):
        assert b.t == a.t + a.samples * 1_000_000


def test_contact_events_match_the_simulated_stance_timing(live):
    """Touch-down 0..15 ms after the analytic start of stance (the load crosses 50 N ~7 ms in),
    lift-off 0..10 ms before its end, one event per analytic boundary and none on FP3."""
    fr = live["frames"]
    events = fr["events/contact"]
    assert {e.meta["plate"] for e in events} == {"FP1", "FP2"}
    T, beta = GAIT.stride_s, GAIT.stance_fraction
    for name, (phase, _) in FOOT.items():
        served = np.concatenate([f.sample_times("t_device") for f in fr[f"dynamics/grf/{name}"]]) * 1e-9
        lo, hi = served.min() + 0.03, served.max() - 0.03
        mine = [(e.meta["event"], e.t_device * 1e-9) for e in events if e.meta["plate"] == name]
        for kind, start in (("touchdown", -phase), ("liftoff", beta - phase)):
            bounds = start + T * np.arange(-2, 20)
            got = np.array(sorted(t for k, t in mine if k == kind))
            nearest = bounds[np.abs(got[:, None] - bounds).argmin(axis=1)]
            lag = got - nearest if kind == "touchdown" else nearest - got
            assert ((lag >= 0) & (lag <= (0.015 if kind == "touchdown" else 0.010))).all(), (name, kind, got)
            inside = bounds[(bounds > lo) & (bounds < hi)]
            assert len(inside) >= 2 and set(inside) <= set(nearest), (name, kind, got, inside)
            assert len(set(nearest)) == len(nearest), (name, kind, got)    # one event per boundary
        # each event frame carries the vertical force at its sample: above on / below off
        for e in events:
            if e.meta["plate"] == name:
                assert (e.data[0, 0] > 50.0) if e.meta["event"] == "touchdown" else (e.data[0, 0] < 20.0)


def test_bad_frames_are_counted_and_the_service_keeps_running(live):
    assert live["alive"] and live["status"] == 0, live["log"][-3000:]
    h = health(live)
    assert h["FP3:rejected"]["count"] == 2                      # wrong channels, wrong rate
    assert h["FP3:missing_samples"]["count"] == 5               # the skipped block
    assert h["FP3:nonfinite_samples"]["count"] == len(NAN_ROWS)
    assert 1 <= h["forceplate/FP1"]["malformed"] <= live["junk_sent"]
    assert h["bus"]["malformed"] == h["forceplate/FP1"]["malformed"]
    running = health(live, "running")
    assert running["processing"]["latency_n"] > 0 and running["processing"]["latency_p99_s"] > 0
    # outputs continue after the faults, up to the end of the input
    fr = live["frames"]
    t_fault = sorted(live["fp3_sent"])[SKIP_AT]
    for stream in ("dynamics/grf/FP1", "dynamics/grf/FP3", "dynamics/grf"):
        assert sum(f.samples for f in fr[stream] if f.t > t_fault) > 1000, stream


def test_missing_samples_are_nan_flagged_and_only_them(live):
    fr = live["frames"]
    fp3 = sorted(live["fp3_sent"])
    t_nan, t_skip = fp3[NAN_AT], fp3[SKIP_AT - 1] + 5_000_000
    out3 = samples(fr["dynamics/grf/FP3"])
    assert not {t_skip + i * 1_000_000 for i in range(5)} & set(out3)   # no invented plate samples
    rows = np.array([out3[t_nan + i * 1_000_000][0] for i in range(5)])
    assert np.isnan(rows[NAN_ROWS, :10]).all() and (rows[NAN_ROWS, 10] == 0).all()
    others = [i for i in range(5) if i not in NAN_ROWS]
    assert np.isfinite(rows[others, :6]).all()
    total = fr["dynamics/grf"]
    rows = np.concatenate([f.data for f in total])
    t = np.concatenate([f.sample_times() for f in total])
    missing = {t_nan + i * 1_000_000 for i in NAN_ROWS} | {t_skip + i * 1_000_000 for i in range(5)}
    near = (t >= t_nan - 20_000_000) & (t <= t_skip + 25_000_000)
    gone = np.isin(t, list(missing))
    assert gone.sum() == len(missing)
    assert np.isnan(rows[gone, :9]).all() and (rows[gone, 9] == 0).all()
    assert np.isfinite(rows[near & ~gone, :6]).all()


def test_a_plate_that_never_loads_gives_nan_cop_with_the_flag(live):
    fr = live["frames"]
    rows = np.concatenate([f.data for f in fr["dynamics/grf/FP3"]])
    assert len(rows) > 1000
    assert (rows[:, 10] == 0).all() and np.isnan(rows[:, 6:10]).all()
    assert {f.meta["zero"] for f in fr["dynamics/grf/FP3"]} == {"unloaded"}
    # zeroed from its record anyway: the amplifier's 12 N baseline is gone
    assert abs(np.nanmean(rows[:, 2])) < 1.0
    h = health(live)
    assert h["zero/FP3/unloaded"]["count"] == 1
    assert h["zero/FP1/zeroed"]["count"] == 1 and h["zero/FP2/zeroed"]["count"] == 1
    assert "FP3: never loaded during the 1.2 s zeroing record" in live["log"]
