"""The LSL bridge (daq.lsl) with real pylsl outlets and inlets on this machine, and the bridge as a
real process (controller.proc) on a real ZeroMQ bus."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pylsl

from controller.config import load
from controller.supervisor import Supervisor
from daq.bus import Publisher, Subscriber
from daq.lsl import clock_offset_s
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]


#: LSL finds streams machine-wide: names and source ids of this process's own, or another suite running these
#: tests at the same time is found too (a clean-clone run beside two others received the other's samples)
LAB = f"lsltest{os.getpid()}"


def lab(tmp_path: Path, bridge_args: list[str], devices: str = "", device_names: str = "") -> Path:
    sup, src, bridge = free_tcp_ports(3)
    cfg = tmp_path / "lsl.toml"
    args = ", ".join(f'"{a}"' for a in bridge_args)
    cfg.write_text(f"""
[lab]
name = "{LAB}"
[supervisor]
bind = "tcp://127.0.0.1:{sup}"
[[processes]]
name = "source"
module = "daq.labload"
bind = "tcp://127.0.0.1:{src}"
[[processes]]
name = "bridge"
module = "daq.lsl"
bind = "tcp://127.0.0.1:{bridge}"
args = [{args}]
devices = [{device_names}]
{devices}
""")
    return cfg


def start_bridge(cfg: Path) -> subprocess.Popen:
    lab_ = load(cfg)  # the bridge as the supervisor starts it, alone
    return subprocess.Popen(Supervisor(lab_).command(lab_.process("bridge")), cwd=REPO, stderr=subprocess.PIPE,
                            text=True)


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[1]


def test_lsl_clock_is_the_host_monotonic_clock():
    """The bridge relies on it: LSL stamps and walklab stamps share one clock on this machine."""
    assert abs(clock_offset_s()) < 1e-4
    assert abs(pylsl.local_clock() - time.monotonic()) < 1e-3


def test_walklab_stream_out_as_an_lsl_outlet(tmp_path):
    cfg = lab(tmp_path, ["--out", "forceplate/*"])
    bridge = start_bridge(cfg)
    sent = {}
    channels = ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
    rng = np.random.default_rng(4)
    try:
        with Publisher(load(cfg).process("source").bind) as pub:
            assert pub.wait_for_subscribers(1, 60), "the bridge never subscribed"
            t0 = time.monotonic_ns()
            inlet, got_data, got_ts = None, [], []
            deadline = time.monotonic() + 90
            k = 0
            while len(got_ts) < 500 and time.monotonic() < deadline:
                data = rng.normal(size=(5, 6))
                f = pub.publish("forceplate/FP9", data, kind="force", rate_hz=1000.0, channels=channels,
                                units=("N",) * 3 + ("N*m",) * 3, t_device=k * 5_000_000, t_host=t0 + k * 5_000_000)
                for i in range(5):
                    sent[f.t + i * 1_000_000] = data[i]
                k += 1
                if inlet is None:
                    found = pylsl.resolve_byprop("source_id", f"walklab/{LAB}/forceplate/FP9", 1, 0.05)
                    if found:
                        inlet = pylsl.StreamInlet(found[0])
                        info = inlet.info(timeout=10)
                        inlet.open_stream(timeout=10)
                else:
                    d, ts = inlet.pull_chunk(timeout=0.0)
                    got_data += d
                    got_ts += ts
                time.sleep(0.005)
            assert inlet is not None, stop(bridge)
    finally:
        err = stop(bridge)
    assert len(got_ts) >= 500, err
    assert info.name() == "forceplate/FP9" and info.type() == "force" and info.nominal_srate() == 1000.0
    ch = info.desc().child("channels").child("channel")
    labels = []
    while not ch.empty():
        labels.append((ch.child_value("label"), ch.child_value("unit")))
        ch = ch.next_sibling()
    assert labels == list(zip(channels, ("N",) * 3 + ("N*m",) * 3))
    for row, ts in zip(got_data, got_ts):
        t_ns = round(ts * 1e9)
        key = min(sent, key=lambda t: abs(t - t_ns)) if t_ns not in sent else t_ns
        assert abs(key - t_ns) < 1_000  # the sample's walklab time, to float64 precision of seconds
        np.testing.assert_array_equal(row, sent[key])


def test_lsl_mocap_stream_in_as_walklab_markers(tmp_path):
    labels = ["LASI", "RASI", "LHEE"]
    source = f"qtm-test-{os.getpid()}"  # LAB's comment
    info = pylsl.StreamInfo("mocap-test", "MoCap", 10, 100.0, pylsl.cf_double64, source)
    chans = info.desc().append_child("channels")
    for lab_ in labels:
        for ax in "XYZ":
            c = chans.append_child("channel")
            c.append_child_value("label", f"{lab_}_{ax}")
            c.append_child_value("unit", "mm")
            c.append_child_value("type", f"Position{ax}")
    c = chans.append_child("channel")  # a channel that is not a coordinate
    c.append_child_value("label", "Frame")
    c.append_child_value("unit", "")
    outlet = pylsl.StreamOutlet(info)
    cfg = lab(tmp_path, [], devices=f'[devices.mocap]\nkind = "lsl"\nsource_id = "{source}"\n',
              device_names='"mocap"')
    bridge = start_bridge(cfg)
    watcher = Subscriber(load(cfg).process("bridge").endpoint, ["markers/*"])
    rng = np.random.default_rng(5)
    pushed = {}
    frames = []
    try:
        deadline = time.monotonic() + 90
        k = 0
        while sum(f.samples for f in frames) < 300 and time.monotonic() < deadline:
            chunk = rng.normal(scale=500.0, size=(4, 10))
            chunk[:, 9] = np.arange(k, k + 4)
            chunk[1, 3:6] = np.nan  # RASI occluded in one sample of each chunk
            ts = pylsl.local_clock() - 0.01 + np.arange(4) * 0.01
            outlet.push_chunk(chunk, ts.tolist())
            for row, t in zip(chunk, ts):
                pushed[round(t * 1e9)] = row
            k += 4
            f = watcher.recv(timeout_s=0.04)
            while f is not None:
                frames.append(f)
                f = watcher.recv(timeout_s=0)
    finally:
        err = stop(bridge)
        watcher.close()
    assert sum(f.samples for f in frames) >= 300, err
    for f in frames:
        assert f.stream == "markers/mocap" and f.kind == "markers"
        assert f.channels == tuple(f"{lab_}:{a}" for lab_ in labels for a in "xyz") and set(f.units) == {"m"}
        raw = f.extra["lsl_time"]
        assert f.t_device == round(raw[0] * 1e9)  # the sender's stamp, raw
        # corrected: sender stamp + LSL's offset; one machine, so within a millisecond of the raw stamp
        assert f.t == round((raw[0] + f.meta["lsl_offset_s"]) * 1e9) and abs(f.t - f.t_device) < 1_000_000
        for i, t in enumerate(raw):
            src = pushed[round(t * 1e9)]
            want = src[:9].reshape(3, 3) * 1e-3  # mm -> m, the Frame channel dropped
            got = f.data[i].reshape(3, 3)
            assert np.array_equal(np.isnan(got), np.isnan(want))  # gaps stay gaps
            np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-15)
    assert any(np.isnan(f.data).any() for f in frames)


def test_force_plate_from_an_lsl_stream(tmp_path):
    """A force plate whose source is lsl:NAME: its raw channels arrive as forceplate/NAME (kind force)."""
    name = f"amti-lsl-{os.getpid()}"  # LAB's comment
    info = pylsl.StreamInfo(name, "Force", 6, 1000.0, pylsl.cf_double64, name)
    outlet = pylsl.StreamOutlet(info)
    cfg = lab(tmp_path, [], devices=f'[devices.FP5]\nkind = "forceplate"\nsource = "lsl:{name}"\n'
              'corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]\n',
              device_names='"FP5"')
    bridge = start_bridge(cfg)
    watcher = Subscriber(load(cfg).process("bridge").endpoint, ["forceplate/FP5"])
    rng = np.random.default_rng(6)
    pushed, frames = {}, []
    try:
        deadline = time.monotonic() + 90
        while sum(f.samples for f in frames) < 500 and time.monotonic() < deadline:
            chunk = rng.normal(size=(5, 6)) * [10, 10, 700, 30, 30, 5]
            ts = pylsl.local_clock() - 0.004 + np.arange(5) * 0.001
            outlet.push_chunk(chunk, ts.tolist())
            for row, t in zip(chunk, ts):
                pushed[round(t * 1e9)] = row
            f = watcher.recv(timeout_s=0.005)
            while f is not None:
                frames.append(f)
                f = watcher.recv(timeout_s=0)
    finally:
        err = stop(bridge)
        watcher.close()
    assert sum(f.samples for f in frames) >= 500, err
    for f in frames:
        assert f.kind == "force" and f.channels == ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
        assert f.units == ("N", "N", "N", "N*m", "N*m", "N*m")
        for i, t in enumerate(f.extra["lsl_time"]):
            np.testing.assert_array_equal(f.data[i], pushed[round(t * 1e9)])
