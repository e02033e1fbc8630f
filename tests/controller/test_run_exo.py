"""`walklab run` on the simulated exoskeleton world (configs/sim_exo.toml with private ports and pty: the
wearer on a split-belt treadmill, a plate under each belt): a real supervisor, world, control loop, dynamics
services and recorder as subprocesses. Truths: the recording read with the mcap library and msgpack (not
walklab's reader): the plate, marker, joint (encoder) and controller streams, no seq gaps; Pinocchio
(forward kinematics and rnea with the free flyer) of the prescribed motion, moved by the belt, at the
recorded samples' times: the markers within their 1 mm noise, the plates' total vertical force read back
through dynamics.forceplate (each plate's offsets taken while its foot was in swing, by the world's loads)
within their noise; the encoders on the prescribed joint angles within the cuffs' give; the loop's
reference on the prescribed joint angles (its phase on the wearer's)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pinocchio as pin

import configs
from controller.config import load
from daq.devices.exo_world_sim import build_world, parse_args, world_robot
from daq.ports import on_free_ports
from dynamics.forceplate import Plate, process
from dynamics.pinocchio_model import to_pinocchio
from dynamics.plants.exo_world import ground_reaction, motion
from dynamics.plants.jansen_world import plate_loads
from tests.controller.test_run_sim import frames, samples  # the recording read with mcap + msgpack


REPO = Path(__file__).resolve().parents[2]
X0 = 0.25  # the shipped config's: the loaded feet centred on the belts' plates


def private_lab(tmp_path: Path, extra: str = "", torques: str = "") -> Path:
    """configs/sim_exo.toml on free ports with its pty under tmp_path; extra: more world arguments, torques:
    more torques-process arguments (TOML list items, e.g. '"--dropout", "0"')."""
    text = configs.path("sim_exo.toml").read_text()
    text, _ = on_free_ports(text)
    text = text.replace("/tmp/walklab-sim/exo-mcu", str(tmp_path / "pty" / "mcu"))
    last = f'"--x0", "{X0}", "--dropout", "0.0005"'   # the world's last arguments: the extra ones go after them
    assert last in text and '"--filter-hz", "6"' in text
    text = text.replace(last, last + (f", {extra}" if extra else ""))
    text = text.replace('"--filter-hz", "6"', '"--filter-hz", "6"' + (f", {torques}" if torques else ""))
    cfg = tmp_path / "sim_exo.toml"
    cfg.write_text(text)
    return cfg


def belt(world) -> float:
    """The treadmill's belt speed (m/s): the stride's advance per period (the world process's)."""
    return world.advance / world.period


def test_walklab_run_exo_world_publishes_plates_markers_and_joints(tmp_path):
    cfg = private_lab(tmp_path)
    rec = tmp_path / "s.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "10", "--record",
                          str(rec)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    f = frames(rec)
    lab = load(cfg)
    motors = lab.devices["exo_mcu"].motors
    for stream in ("forceplate/FP1", "forceplate/FP2", "markers/exo", "sim/exo", "dynamics/grf",
                   *(f"encoder/{m}" for m in motors)):
        assert stream in f, sorted(f)
    for stream, docs in f.items():
        seq = np.array([d["seq"] for d in docs])
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + seq.size)), stream  # no seq gap
    world_proc = next(p for p in lab.processes if p.name == "world")
    world = build_world(parse_args("world", world_proc.args), world_robot(lab.source, lab.devices["exo_mcu"]))
    pm = to_pinocchio(world.model)
    data = pm.createData()

    # markers: Pinocchio's forward kinematics of the motion at each frame's time, 1 mm noise, occlusions NaN
    docs = f["markers/exo"]
    labels = [c.split(":")[0] for c in docs[0]["channels"][0::3]]
    assert labels == list(world.labels)
    t_m, pos = samples(docs)
    pos = pos.reshape(pos.shape[0], -1, 3)
    tm = t_m * 1e-9
    assert tm[-1] - tm[0] > 3.0
    q, _, _ = motion(world, tm, X0, belt(world))
    err = []
    for k in range(0, tm.size, 10):
        pin.forwardKinematics(pm, data, q[k])
        for j, (s, p) in enumerate(zip(world.marker_segments, world.marker_points)):
            seg = world.model.segments[s]
            err.append(pos[k, j] - data.oMi[pm.getJointId(seg.joint_name or seg.name)].act(p))
    err = np.array(err)
    seen = ~np.isnan(err[:, 0])
    assert seen.mean() > 0.9 and (~seen).any()
    assert np.abs(err[seen].mean(axis=0)).max() < 0.3e-3 and 0.8e-3 < err[seen].std() < 1.2e-3

    # plates: total Fz against Pinocchio's rnea (free-flyer rows: the ground force the motion requires, the
    # same on the belt as on the floor: the frame moves uniformly); each plate's offsets from the samples of
    # its first 2 s its foot was in swing (the world's loads), as the dynamics service zeroes it
    t_ref = samples(f["forceplate/FP1"])[0]
    tp = t_ref * 1e-9
    q, v, a = motion(world, tp, X0, belt(world))
    g = ground_reaction(world, tp, q, v, a)
    loaded = g.foot_force[:, :, 2] > 1.0
    x, y = g.point[:, :, 0], g.point[:, :, 1]
    assert np.all(~loaded | ((np.abs(x) < 0.75) & (np.abs(y) < 0.45))), "a loaded foot off the treadmill's plates"
    plates = []
    for name in ("FP1", "FP2"):
        dev = lab.devices[name]
        plates.append(Plate(type=dev.type, corners=dev.corners, origin=dev.origin, cal_matrix=dev.cal_matrix,
                            name=name))
    total = np.zeros(tp.size)
    for plate, (F, _) in zip(plates, plate_loads(g.point, g.foot_force, plates, g.foot_moment)):
        t_p, raw = samples(f[f"forceplate/{plate.name}"])
        assert np.array_equal(t_p, t_ref)  # one world sample per plate sample, both plates
        swing = (np.abs(F[:, 2]) < 1e-9) & (tp - tp[0] < 2.0)
        assert swing.sum() > 300 and (np.abs(F[:, 2]) > 100).sum() > 300   # its foot in swing, then standing
        sig = process(plate, raw, offset=raw[swing].mean(axis=0))
        assert sig.force[swing, 2].std() < 2.0
        total += sig.force[:, 2]
    k = np.arange(0, tp.size, 5)
    fz = np.empty(k.size)
    for i, kk in enumerate(k):
        pin.forwardKinematics(pm, data, q[kk])
        fz[i] = data.oMi[1].act(pin.Force(pin.rnea(pm, data, q[kk], v[kk], a[kk])[:6])).linear[2]
    diff = total[k] - fz
    assert fz.min() > 300 and abs(diff.mean()) < 1.0 and diff.std() < 3.0  # two plates' noise, σ 0.5 N a channel

    # the summary's distance walked is the world's truth (sim/exo's x: the pelvis's place along the walk over
    # the belt; it said "—" when only sim/walker counted): first to last x the status saw, within the frames it
    # may have seen before or after the recorder (0.1 s of walking at 0.76 m/s); in the lab the wearer stays
    # within 2 cm of one place
    m = re.search(r"distance walked: (\S+) m \(x (\S+) -> (\S+) m\)", run.stdout)
    assert m, run.stdout[-2000:]
    _, truth = samples(f["sim/exo"])
    x = truth[:, list(f["sim/exo"][0]["channels"]).index("x")]
    assert float(m.group(1)) > 1.0
    assert abs(float(m.group(2)) - x[0]) < 0.1 and abs(float(m.group(3)) - x[-1]) < 0.1, (m.group(0), x[0], x[-1])
    x_lab = truth[:, list(f["sim/exo"][0]["channels"]).index("x_lab")]
    assert np.ptp(x_lab) < 0.03 and np.ptp(x) > 3.0

    # joints: each encoder within the cuffs' give (the loop's torque over 1000 N m/rad: up to 25 mrad) and one
    # count of the prescribed joint angle
    col = world.iq[world.actuated]
    for j, m in enumerate(motors):
        t_e, enc = samples(f[f"encoder/{m}"])
        qj = motion(world, t_e * 1e-9, X0)[0][:, col[j]]
        assert np.abs(enc[:, 0] - qj).max() < 0.04, m
        assert np.ptp(qj) > 0.3, m  # the joint moved

    # (a 10 s run: the loop starts at its first fresh ZMP sample, which a loaded machine delays — 630 walking
    # cycles of a 6 s run once in a clean-clone suite, the torques process still catching up)
    # the loop: walking from its first ZMP sample, its reference on the wearer's prescribed joint angles (the
    # loop's clock re-aligned to the measured angles at the start, then on time: the world's truth at the state
    # rows' host times), no safety event, although the plates' margin went below limits.min_margin (2 cm)
    # for a third of the walk: law 6's push-off on the toe, where the guard holds the margin to the plan
    # (while the world ran: at the stop every process gets SIGINT at once, and a loop that outlives the world
    # by a cycle reports its MCU's port gone — `link_lost` after the world's last frame, once on a loaded machine)
    world_end = max(d["t_host"] for d in f["sim/exo"])
    causes = [d["meta"]["cause"] for d in f["controller/events"] if d["t"] <= world_end]
    assert set(causes) <= {"fresh", "request"} and "request" in causes, causes
    st = f["controller/state"]
    ch = st[0]["channels"]
    rows = np.concatenate([d["arrays"]["data"] for d in st])
    th = np.concatenate([d["t_host"] + np.round(np.arange(d["arrays"]["data"].shape[0]) * 1e9 / d["rate_hz"])
                         for d in st])
    walking = rows[:, ch.index("walking")] == 1
    assert walking.sum() > 1000
    sim = f["sim/exo"]
    t_sim = np.concatenate([d["t_host"] + np.round(np.arange(d["arrays"]["data"].shape[0]) * 1e9 / d["rate_hz"])
                            for d in sim])
    for m in motors:
        q_world = np.interp(th[walking], t_sim, truth[:, list(sim[0]["channels"]).index(f"q:{m}")])
        e = rows[walking, ch.index(f"{m}/q_ref")] - q_world
        assert np.sqrt(np.mean(e ** 2)) < 0.03, (m, np.sqrt(np.mean(e ** 2)))
    # the margins the guard judged: the ZMP samples measured (t_host) while the loop walked
    zd = f["dynamics/zmp"]
    t_zh = np.concatenate([d["t_host"] + np.round(np.arange(d["arrays"]["data"].shape[0]) * 1e9 / d["rate_hz"])
                           for d in zd])
    margin = np.concatenate([d["arrays"]["data"] for d in zd])[:, list(zd[0]["channels"]).index("margin")]
    during = (t_zh > th[walking][0]) & (t_zh < th[walking][-1]) & np.isfinite(margin)
    margin = margin[during]
    assert margin.size > 500 and (margin < 0.02).mean() > 0.2 and margin.min() > -0.03


def test_walklab_run_exo_world_live_torques_and_zmp_agree_with_the_worlds_truth(tmp_path):
    """The torques process (dynamics.service_torques --model exoskeleton on markers/exo and the plates'
    dynamics/grf/NAME) against the world's truth: Pinocchio's rnea of the world's prescribed q, v, a (moved by
    the belt) at each published sample's time with the world's own ground reaction on each foot (its share of
    the force at its point, its free moment) as external forces — compared where the service says the foot's
    load is known (a leg's torques need only its own foot's). Markers without noise or occlusions and the
    markers' low-pass off here (--filter-hz 0; tests/dynamics/test_service_tree_exo.py measures it under
    noise): what remains is the plates' noise (σ 0.5 N a channel), their zeroing and the central differences'
    O(h²): the median error per leg joint 0.0-0.2 N·m, single samples up to 21 N·m (of a 212 N·m peak) where
    the prescribed acceleration changes fast and the ±10 ms stencil smears it (asserted: median < 5 % of the
    joint's peak + 0.5 N·m, max < 25 % + 1 N·m). On the split-belt treadmill each foot stands on its own
    plate, so both loads are known at nearly every sample (on a walkway's row of plates, only while the
    swing foot was not over the stance foot's plate: 20-60 samples a run). The ZMP: the plates' ZMP is the
    world's; the margin a number wherever both loads are known, within 3 cm outside the sole at worst (the
    world's own centre of pressure is up to 1.3 cm beyond its rigid foot's toe late in single support)."""
    # the dynamics services' first seconds under load are computed with the plates held (stale = 1, left out
    # below) while the plate service catches up with its start
    cfg = private_lab(tmp_path, '"--marker-noise-mm", "0", "--dropout", "0"', '"--filter-hz", "0"')
    rec = tmp_path / "s.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "10", "--record",
                          str(rec)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    f = frames(rec)
    for stream in ("dynamics/torques", "dynamics/zmp", "dynamics/contact"):
        assert stream in f, sorted(f)
    lab = load(cfg)
    world = build_world(parse_args("world", lab.process("world").args), world_robot(lab.source, lab.devices["exo_mcu"]))
    pm = to_pinocchio(world.model)
    data = pm.createData()
    t, tq = samples(f["dynamics/torques"])
    ch = f["dynamics/torques"][0]["channels"]
    t_z, zmp = samples(f["dynamics/zmp"])
    zch = f["dynamics/zmp"][0]["channels"]
    t_c, con = samples(f["dynamics/contact"])
    cch = f["dynamics/contact"][0]["channels"]
    assert np.array_equal(t, t_z) and np.array_equal(t, t_c)
    ts = t * 1e-9
    q, v, a = motion(world, ts, X0, belt(world))
    g = ground_reaction(world, ts, q, v, a)
    # a leg's bottom-up torques need only its own foot's load: compared per leg where that foot's load is
    # known and the leg's torques are numbers (the service's NaN elsewhere)
    # a sample computed with a plate held (the service waited past its bound for a stalled plate:
    # stale = 1) is the service's declared approximation, not compared with the truth
    fresh = tq[:, ch.index("stale")] == 0
    known = {side: (con[:, cch.index(f"foot_{side}:known")] == 1) & fresh for side in "lr"}
    legs = {side: [k for k, c in enumerate(ch) if c.startswith("tau:") and c.endswith(f"_{side}")
                   and any(j in c for j in ("hip", "knee", "ankle"))] for side in "lr"}
    rows = {side: np.flatnonzero(known[side] & np.isfinite(tq[:, legs[side]]).all(axis=1)) for side in "lr"}
    err, truth = {side: [] for side in "lr"}, {side: [] for side in "lr"}
    tau_true = np.full((ts.size, world.model.nv - 6), np.nan)
    for k in sorted(set(rows["l"]) | set(rows["r"])):
        pin.forwardKinematics(pm, data, q[k])
        fext = pin.StdVec_Force()
        for _ in range(pm.njoints):
            fext.append(pin.Force.Zero())
        for side, s in enumerate(world.feet):
            seg = world.model.segments[s]
            jid = pm.getJointId(seg.joint_name or seg.name)
            F = g.foot_force[k, side]
            fext[jid] = data.oMi[jid].actInv(pin.Force(F, np.cross(g.point[k, side], F) + g.foot_moment[k, side]))
        tau = tau_true[k] = pin.rnea(pm, data, q[k], v[k], a[k], fext)[6:]       # tau:JOINT j is v coordinate 6 + j
        for side in "lr":
            if k in rows[side]:
                truth[side].append(tau[legs[side]])
                err[side].append(np.abs(tq[k, legs[side]] - tau[legs[side]]))
    n = sum(len(e) for e in err.values())
    print("torque samples compared", {side: len(e) for side, e in err.items()}, "of", t.size)
    assert n > 1000, {side: len(e) for side, e in err.items()}
    for side in "lr":
        if not err[side]:
            continue
        e, peak = np.array(err[side]), np.abs(np.array(truth[side])).max(axis=0)
        print(side, "median |error|", np.median(e, axis=0).round(2), "max", e.max(axis=0).round(2), "peak", peak.round(1))
        # the central differences' O(h²): where the prescribed acceleration changes fast (the nominal's ZMP
        # law switching at the double-support bounds) the ±10 ms stencil smears it; elsewhere plate noise
        assert np.all(np.median(e, axis=0) < 0.05 * peak + 0.5), np.median(e, axis=0)
        assert np.all(e.max(axis=0) < 0.25 * peak + 1.0), e.max(axis=0)
    # the ZMP of the plates' wrench is the world's ground reaction's (plate noise: sub-mm)
    on = np.isfinite(zmp[:, 0]) & fresh & (g.foot_force[:, :, 2] > 1.0).any(axis=1)
    print("ZMP compared", on.sum(), "|error|", np.abs(zmp[on, :2] - g.zmp[on, :2]).max(axis=0))
    assert on.sum() > 400 and np.abs(zmp[on, :2] - g.zmp[on, :2]).max() < 0.005
    # both loads known at nearly every fresh sample (each foot on its own plate), and there the margin is a
    # number: to the stance feet's markers and soles (heel and toe widened across the foot), 3 cm outside at
    # worst (to the markers alone it was -6.9 cm: the toe marker is 6.4 cm behind the toe, docs/service.md)
    both = known["l"] & known["r"]
    assert both[fresh].mean() > 0.95, both[fresh].mean()
    valid = both & (zmp[:, zch.index("valid")] == 1)
    margin = zmp[valid, zch.index("margin")]
    assert valid.sum() > 400 and np.isfinite(margin).all() and margin.min() > -0.03
    # energy per gait cycle (touch-down of the left foot to the next; the exoskeleton's four motorised joints,
    # --energy-joints): every cycle known here, each its joints' net and absolute work — Pinocchio's torques
    # times the world's joint rates, integrated by the trapezoid rule over the cycle's samples — within 3 %
    # of the absolute work + 0.2 J (the central differences and the plates' 20 N touch-down threshold)
    cycles = f.get("dynamics/energy", [])
    assert len(cycles) >= 5
    compared = 0
    actuated = list(lab.devices["exo_mcu"].motors)
    names = [c[len("tau:"):] for c in ch if c.startswith("tau:")]
    cols = [names.index(j) for j in actuated]
    power = tau_true[:, cols] * v[:, 6:][:, cols]
    for d in cycles:
        ech = d["channels"]
        row = d["arrays"]["data"][0]
        assert np.isfinite(row).all(), row
        end = d["t_device"] * 1e-9
        span = (ts >= end - row[ech.index("period")] - 1e-6) & (ts <= end + 1e-6)
        if not np.isfinite(power[span]).all() or span.sum() < 200:
            continue        # a cycle begun before the services' first fresh sample
        for j, joint in enumerate(actuated):
            net, ab = np.trapezoid(power[span, j], ts[span]), np.trapezoid(np.abs(power[span, j]), ts[span])
            assert row[ech.index(f"net:{joint}")] == pytest.approx(net, abs=0.03 * ab + 0.2), joint
            assert row[ech.index(f"absolute:{joint}")] == pytest.approx(ab, abs=0.03 * ab + 0.2), joint
        assert row[ech.index("absolute")] == pytest.approx(sum(row[ech.index(f"absolute:{j}")] for j in actuated))
        compared += 1
    assert compared >= 3, compared


def test_walklab_replay_shadow_of_the_exo_lab_recomputes_the_tree_dynamics_and_its_loop_walks_guarded(tmp_path):
    """`walklab replay --shadow --fast` of an 8 s recording of the exoskeleton lab: its torques process computes
    the tree model's dynamics again from the replayed markers and plates. Truth: the live run's own outputs in the
    recording — the same code on the same inputs: every torque, ZMP and contact sample both computed is the same
    number, and every sample computed live is computed again (live, a sample may be held on the host's clock;
    not in a replay). The guarded shadow loop reads the recomputed ZMP on the data's clock: it walks, with no
    safety event (the recomputed ZMP arrives after the encoder samples it belongs with, and the loop latched
    `zmp_stale` at its first cycle)."""
    from tests.controller.test_shadow import series

    cfg = private_lab(tmp_path)
    rec, out = tmp_path / "s.mcap", tmp_path / "s.shadow.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "8", "--record",
                          str(rec)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rep = subprocess.run([sys.executable, "-m", "controller.cli", "replay", str(rec), "--shadow", "--fast", "--quiet",
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    live, again = frames(rec), frames(out)
    for stream in ("dynamics/torques", "dynamics/zmp", "dynamics/contact"):
        t1, a, _ = series(live[stream])
        t2, b, _ = series(again[stream])
        common, i1, i2 = np.intersect1d(t1, t2, return_indices=True)
        fa, fb = np.isfinite(a[i1]).all(axis=1), np.isfinite(b[i2]).all(axis=1)
        why = f"{stream}: live {t1.size} samples ({int(fa.sum())} finite), replay {t2.size} ({int(fb.sum())}), common {common.size}"
        assert common.size == t1.size and fa.sum() > 0.3 * t1.size, why
        assert not (fa & ~fb).any(), why
        np.testing.assert_allclose(b[i2][fa], a[i1][fa], rtol=1e-12, atol=1e-9, err_msg=why)
    causes = [d["meta"]["cause"] for d in again["controller/events"]]
    assert set(causes) <= {"fresh", "request"} and "request" in causes, causes
    t_s, st, ch = series(again["controller/state"])
    walking = st[:, ch.index("walking")] == 1
    assert np.all(np.diff(t_s) == t_s[1] - t_s[0]) and walking.sum() > 0.5 * t_s.size, (walking.sum(), t_s.size)
