"""Transitions between neighbouring biped nominals stored in the library, and the loop following them
(controller.synergies.transitions, library, track; methods.md j.6).

A tiny grid of the shipped biped config (surla_bidyn, T = 1.2 s, ZMP law II/2, S = 0.8, 0.81, 0.82, 0.85, 0.9,
64 phases) is built once by `walklab synergies build` in a subprocess. Truths: the ZMP that `dynamics.zmp.zmp_model` computes again from the stored
transition's own 3-D motion (the recorded d_max must be its deviation from the stored law path); the
nominals' own tables at the transition's two ends; the configured slew and torque limits; the real CLI in
a subprocess.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.loop import Controller, Measured
from controller.synergies import library
from controller.synergies.robot import load_robot
from controller.synergies.select import Request, SelectionError
from controller.synergies.track import Tracker
from dynamics.loader import load_model
from dynamics.zmp import zmp_model

REPO = Path(__file__).resolve().parents[2]
GRID = ('[synergies]\nlibrary = "LIB"\nscales = [0.8, 0.81, 0.82, 0.85, 0.9]\nperiods = [1.2]\nzmp_laws = [[2, 2]]\n'
        'samples = 64\n\n')
NAME = "biped_S{:.2f}_T1.20_z22"


def walklab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=1200, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("biped_lib")
    src = (REPO / "configs" / "biped.toml").read_text()
    head, _, rest = src.partition("[synergies]")
    (tmp / "biped.toml").write_text(head + GRID.replace("LIB", str(tmp / "lib")) + rest[rest.index("[biped]"):])
    cfg = load_robot(tmp / "biped.toml")
    r = walklab("synergies", "build", "--robot", "biped", "--config", str(tmp / "biped.toml"), "--jobs", "2")
    assert r.returncode == 0, r.stderr
    assert "5 nominals written" in r.stdout
    assert "8 transitions between neighbours stored, 6 accepted (d_max < eps; 2 of them repaired)" in r.stdout
    return {"cfg": cfg, "path": tmp / "biped.toml", "nominals": {s.meta["S"]: s for s in library.load_all(cfg.library)},
            "transitions": library.load_transitions(cfg.library)}


def pair(lib, a: float, b: float):
    return next(t for t in lib["transitions"] if t.meta["from"] == NAME.format(a) and t.meta["to"] == NAME.format(b))


def test_build_stores_the_transitions_between_neighbouring_step_scales(lib):
    trs = lib["transitions"]
    assert sorted((t.meta["S_from"], t.meta["S_to"]) for t in trs) == [(0.8, 0.81), (0.81, 0.8), (0.81, 0.82),
                                                                        (0.82, 0.81), (0.82, 0.85), (0.85, 0.82),
                                                                        (0.85, 0.9), (0.9, 0.85)]
    for t in trs:
        assert t.meta["accepted"] == (t.meta["zmp_max_deviation"] < t.meta["eps"]) and t.meta["eps"] == 0.01
    # methods.md j.6 as measured on this model (docs/controller.md): a 1 % step in S passes eps = 1 cm as
    # blended, a 3.5 % step only once repaired (the blend's d̄ was above eps), a 6 % step not even then
    for a, b in ((0.8, 0.81), (0.81, 0.82)):
        for t in (pair(lib, a, b), pair(lib, b, a)):
            assert t.meta["accepted"] and t.meta["repair"] == {"tried": False}
    for t in (pair(lib, 0.82, 0.85), pair(lib, 0.85, 0.82)):
        fix = t.meta["repair"]
        assert t.meta["accepted"] and fix["repaired"] and fix["d_before"] >= 0.01 > fix["d_after"]
        assert t.meta["zmp_max_deviation"] <= fix["d_after"]   # the samples are among the repair's instants
    for t in (pair(lib, 0.85, 0.9), pair(lib, 0.9, 0.85)):
        fix = t.meta["repair"]
        assert not t.meta["accepted"] and fix["tried"] and not fix["repaired"]
        assert fix["d_after"] >= 0.01 and t.meta["zmp_max_deviation"] == fix["d_before"]   # stored as blended
    # the CLI lists them, with the recorded d_max
    r = walklab("synergies", "list", "--config", str(lib["path"]), "--transitions", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(x["from"], x["to"]): x["zmp_max_deviation"] for x in rows} == \
        {(t.meta["from"], t.meta["to"]): t.meta["zmp_max_deviation"] for t in trs}


def test_recorded_deviation_is_the_zmp_of_the_stored_motion_and_the_ends_are_the_nominals(lib):
    model = load_model("surla_bidyn")
    for t in lib["transitions"]:
        p = zmp_model(model, t.model_q, t.model_v, t.model_a).point
        dy = np.nan_to_num(p[:, 1] - t.zmp_law_y)  # NaN law: a sagittal-only nominal, judged on x
        assert np.isfinite(t.zmp_law_y).all()    # the shipped test grid is frontal: judged in 2-D
        assert np.hypot(p[:, 0] - t.zmp_law_x, dy).max() == pytest.approx(t.meta["zmp_max_deviation"], rel=1e-9,
                                                                          abs=1e-12)
        a, b = lib["nominals"][t.meta["S_from"]], lib["nominals"][t.meta["S_to"]]
        # the stride starts on nominal a at its phase 0 (angle, rate, acceleration) and ends on b at phase 0;
        # one sample before its end it is within one sample's motion of b
        for k in ("q", "qd", "qdd"):
            np.testing.assert_allclose(getattr(t, k)[0], getattr(a, k)[0], atol=1e-7)
            np.testing.assert_array_equal(getattr(t, k)[-1], getattr(b, k)[0])
        h = t.period / (t.u.size - 1)
        assert np.all(np.abs(t.q[-2] - b.q[-1]) <= np.abs(b.qd).max(axis=0) * h * 0.05 + 1e-4)


def simulate(ctl: Controller, seconds: float, plan: dict, start) -> list:
    """The update step with the measured state = the previous cycle's reference (a perfect plant) and a
    fresh ZMP sample of a 5 cm margin each cycle (the biped's guard is on); plan: cycle -> speed request."""
    refs = []
    q, qd = start
    for k in range(int(round(seconds / ctl.dt))):
        if k in plan:
            ctl.command(Request(plan[k]))
        t = k * round(ctl.dt * 1e9)
        out = ctl.update(t, Measured(t, q, qd), (np.array([t]), np.array([0.05])), t)
        assert out.decision.enabled and out.reference is not None
        q, qd = out.reference.q, out.reference.qd
        refs.append(out)
    return refs


def test_the_loop_follows_the_stored_transition_without_a_setpoint_step(lib):
    cfg = lib["cfg"]
    noms = list(lib["nominals"].values())
    ctl = Controller(cfg, noms, transitions=lib["transitions"])
    a, b = lib["nominals"][0.8], lib["nominals"][0.81]
    tr = pair(lib, 0.8, 0.81)
    refs = simulate(ctl, 4.0, {0: a.meta["speed"], 300: b.meta["speed"]}, (a.q[0], a.qd[0]))
    names = [o.reference.nominal for o in refs]
    during = [o for o in refs if o.reference.blending]
    assert names[0] == a.name and names[-1] == b.name and ctl.tracker.switches == 1
    # it waited for the next whole stride (phase 1, t = T) and followed the stored stride for one period
    assert abs(len(during) * ctl.dt - tr.period) <= 2 * ctl.dt
    p0 = np.floor(during[0].reference.phase[0])
    assert p0 == 1.0
    follows(tr, during, p0)
    within_limits_then_on(b, cfg, ctl, refs)


def follows(tr, outs: list, p0: float) -> None:
    """Each setpoint of `outs` (phase p0 + x) is the stored stride `tr` at x, within linear interpolation's
    error bound between its samples, h²/8 max|q̈|, with max|q̈| between the samples taken as the samples'
    largest |q̈| plus the largest change of q̈ from one sample to the next (a smooth motion's acceleration
    changes within an interval by about as much as between samples)."""
    h = tr.period / (tr.u.size - 1)
    bound = (np.abs(tr.qdd).max(axis=0) + np.abs(np.diff(tr.qdd, axis=0)).max(axis=0)) * h ** 2 / 8 + 1e-6
    for o in outs:
        x = o.reference.phase[0] - p0
        lin = np.array([np.interp(x, tr.u, tr.q[:, j]) for j in range(tr.q.shape[1])])
        assert np.all(np.abs(o.reference.q - lin) <= bound)


def within_limits_then_on(b, cfg, ctl: Controller, refs: list) -> None:
    """No setpoint step beyond the slew limit (the reference itself, before the safety's slew), the torque
    limits kept, and at the end nominal b at its own reference."""
    q = np.array([o.reference.q for o in refs])
    assert np.all(np.abs(np.diff(q, axis=0)) <= np.asarray(cfg.limits.slew) * ctl.dt)
    assert np.all(np.abs([o.decision.tau for o in refs]) <= np.asarray(cfg.limits.torque))
    last = refs[-1].reference
    np.testing.assert_allclose(last.q, b.reference(last.phase)[0])


def test_a_nominal_two_neighbours_away_is_reached_through_the_one_between(lib):
    """S 0.80 -> 0.82 (no transition stored between them): the loop follows the stored strides 0.80 -> 0.81
    and 0.81 -> 0.82 back to back (the first ends on 0.81's phase 0, where the second starts), each to its
    stored table, with no setpoint step beyond the slew limit, then walks 0.82. The operator repeats the
    request during the first stride (a turn change selects the same nominal): still no stride of 0.81."""
    cfg = lib["cfg"]
    n = lib["nominals"]
    a, b = n[0.8], n[0.82]
    assert not any(t.meta["from"] == a.name and t.meta["to"] == b.name for t in lib["transitions"])
    ctl = Controller(cfg, list(n.values()), transitions=lib["transitions"])
    refs = simulate(ctl, 5.5, {0: a.meta["speed"], 300: b.meta["speed"], 800: b.meta["speed"]}, (a.q[0], a.qd[0]))
    assert ctl.tracker.switches == 2 and refs[-1].reference.nominal == b.name
    during = [o for o in refs if o.reference.blending]
    strides = pair(lib, 0.8, 0.81).period + pair(lib, 0.81, 0.82).period
    assert abs(len(during) * ctl.dt - strides) <= 2 * ctl.dt   # two strides, none of 0.81 between
    for k, (tr, target) in enumerate(((pair(lib, 0.8, 0.81), n[0.81]), (pair(lib, 0.81, 0.82), b))):
        p0 = 1.0 + k   # the first starts at the next whole stride after the request (t = T), the second at its end
        part = [o for o in during if np.floor(o.reference.phase[0]) == p0]
        assert part and all(o.reference.nominal == target.name for o in part)
        follows(tr, part, p0)
    within_limits_then_on(b, cfg, ctl, refs)


def test_a_route_interrupted_by_a_re_align_goes_on_to_its_end(lib):
    """The loop re-aligns the tracker after a stale-data or latch gap (Controller.update): a re-align in
    the middle of the route's first stride resumes on 0.81, and the route's second stride still takes the
    robot to the requested 0.82 at a whole stride of 0.81."""
    n = lib["nominals"]
    a, b = n[0.8], n[0.82]
    tr = Tracker(a, lib["cfg"].limits.slew, transitions=lib["transitions"], nominals=list(n.values()))
    tr.request(b)
    dt = 1 / lib["cfg"].rate_hz
    seen = []
    T = pair(lib, 0.8, 0.81).period
    for k in range(int(round(6 * T / dt))):
        ref = tr.step(dt)
        seen.append(ref.nominal)
        if ref.blending and ref.nominal == n[0.81].name and float(ref.phase[0]) - 1.0 > 0.5:
            break
    else:
        raise AssertionError(f"the first stride never came: {sorted(set(seen))}")
    tr.align(ref.q)  # a resume: the clock from the measured angles, on 0.81
    assert tr.nominal is n[0.81] and not tr.blending
    for k in range(int(round(3 * T / dt))):
        ref = tr.step(dt)
    assert ref.nominal == b.name and not ref.blending and tr.switches == 2 and tr.pending is None
    np.testing.assert_allclose(ref.q, b.reference(ref.phase)[0])


def test_a_switch_without_an_accepted_transition_is_refused(lib):
    cfg = lib["cfg"]
    n = lib["nominals"]
    ctl = Controller(cfg, list(n.values()), transitions=lib["transitions"])
    ctl.command(Request(n[0.85].meta["speed"]))
    with pytest.raises(SelectionError, match=r"transition was rejected \(ZMP deviation 0\.0\d+ m >= eps 0\.0100 m\)"):
        ctl.command(Request(n[0.9].meta["speed"]))
    assert ctl.tracker.pending is None and ctl.request.speed == n[0.85].meta["speed"]
    ctl = Controller(cfg, list(n.values()), transitions=lib["transitions"])
    ctl.command(Request(n[0.8].meta["speed"]))
    with pytest.raises(SelectionError, match="no chain of usable precomputed transitions"):  # 0.85 -> 0.9 rejected
        ctl.command(Request(n[0.9].meta["speed"]))
    ctl.command(Request(n[0.81].meta["speed"]))   # a neighbour: queued
    assert ctl.tracker.pending is n[0.81]


def test_a_transition_whose_zmp_leaves_the_support_is_refused(lib):
    """A stored transition is followed only if its ZMP stays inside the support (min_margin >= 0: the guard
    then holds the walk to its plan); the same stride with its recorded margin negative is refused with
    the figure in the message."""
    a, b = lib["nominals"][0.8], lib["nominals"][0.81]
    tr = pair(lib, 0.8, 0.81)
    assert tr.meta["accepted"] and tr.meta["min_margin"] >= 0
    out = dataclasses.replace(tr, meta={**tr.meta, "min_margin": -0.004})
    others = [t for t in lib["transitions"] if t is not tr]
    ctl = Controller(lib["cfg"], list(lib["nominals"].values()), transitions=[out, *others])
    ctl.command(Request(a.meta["speed"]))
    with pytest.raises(SelectionError, match=r"leaves the support \(stability margin -0\.0040 m < 0\)"):
        ctl.command(Request(b.meta["speed"]))


def test_the_guard_holds_the_walk_to_its_plan_through_a_transition(lib):
    """limits.min_margin above the least planned margin of the walk (nominal 0.80, its stored stride to 0.81,
    then 0.81): a measured margin equal to the plan of each cycle never trips the guard, although it falls
    below min_margin (an absolute floor would stop the walk there); the plan less 1.5 x margin_tolerance
    trips it (zmp_margin, naming the plan) where the plan is nearer the edge than min_margin, and only there."""
    a, b = lib["nominals"][0.8], lib["nominals"][0.81]
    tr = pair(lib, 0.8, 0.81)
    least = min(a.margin.min(), b.margin.min(), tr.margin.min())
    assert np.isfinite(a.margin).all() and abs(a.margin.min() - a.meta["min_margin"]) < 1e-12
    cfg = lib["cfg"]
    lim = dataclasses.replace(cfg.limits, min_margin=least + 0.02, margin_tolerance=0.005, margin_window_s=0.0)
    cfg = dataclasses.replace(cfg, limits=lim)

    def walk(shortfall: float):
        ctl = Controller(cfg, list(lib["nominals"].values()), transitions=lib["transitions"])
        ctl.command(Request(a.meta["speed"]))
        q, qd, plan, dt = a.q[0], a.qd[0], None, round(ctl.dt * 1e9)
        seen.clear()
        for k in range(int(round(4.0 / ctl.dt))):
            if k == 300:
                ctl.command(Request(b.meta["speed"]))
            t = k * dt
            # the previous cycle's plan measured now, at its own time (a ZMP lag of one cycle)
            zmp = None if plan is None else (np.array([t - dt]), np.array([plan - shortfall]))
            out = ctl.update(t, Measured(t, q, qd), zmp, t - dt)
            if out.reference is None:
                return out, plan
            q, qd, plan = out.reference.q, out.reference.qd, out.reference.margin
            seen.append(plan)
        return out, plan

    seen: list[float] = []
    out, _ = walk(0.0)
    assert out.reference is not None and out.reference.nominal == b.name and not out.decision.events
    assert min(seen) < lim.min_margin - 0.015     # it walked where an absolute floor would have stopped it
    out, plan = walk(1.5 * lim.margin_tolerance)
    ev = [e for e in out.decision.events if e.cause == "zmp_margin"]
    assert ev and "the plan's margin less margin_tolerance" in ev[0].detail
    assert plan - 1.5 * lim.margin_tolerance < lim.min_margin and plan < lim.min_margin + lim.margin_tolerance


def test_a_biped_walk_is_guarded_by_the_zmp_margin_by_default(lib):
    """The biped's loop watches the ZMP without being asked (--zmp-guard auto): walking with no ZMP sample
    is a latched zmp_stale stop, the nominal dropped."""
    ctl = Controller(lib["cfg"], list(lib["nominals"].values()), transitions=lib["transitions"])
    a = lib["nominals"][0.8]
    ctl.command(Request(a.meta["speed"]))
    out = ctl.update(0, Measured(0, a.q[0], a.qd[0]))
    assert [e.cause for e in out.decision.events] == ["fresh", "zmp_stale"] and out.decision.stop_requested
    assert ctl.tracker is None and ctl.safety.latched.cause == "zmp_stale"


def test_a_blend_beyond_the_repairs_reach_is_not_tried(lib, monkeypatch):
    """S 0.80 -> 0.90 (not neighbours in the test grid, built here): the blend's d̄ is above REACH eps, so
    the build stores it rejected without trying (the repair halves d̄ at best); with the reach widened it
    is tried, and still comes back rejected, its d̄ at least halved but not below eps."""
    from controller.synergies import biped, transitions

    jobs = {j["S"]: j for j in biped.jobs(lib["cfg"])}
    made = [(jobs[S], *biped.build_with_nominal(jobs[S], check=False)) for S in (0.8, 0.9)]
    spec = {"name": "far", "eps": transitions.EPS, "from": made[0], "to": made[1]}
    tr = transitions.build(spec)
    assert not tr.meta["accepted"] and tr.meta["zmp_max_deviation"] >= transitions.REACH * transitions.EPS
    assert tr.meta["repair"]["tried"] is False and "beyond the repair's reach" in tr.meta["repair"]["why"]
    monkeypatch.setattr(transitions, "REACH", 10.0)
    tried = transitions.build(spec)
    fix = tried.meta["repair"]
    assert fix["tried"] and not fix["repaired"] and not tried.meta["accepted"]
    assert fix["d_before"] == tr.meta["zmp_max_deviation"] and transitions.EPS <= fix["d_after"] < 0.6 * fix["d_before"]


def test_the_guard_does_not_judge_samples_measured_before_the_walk_began(lib):
    """A walk begins at the first ZMP sample (the loop's initial request waits for one): the samples measured
    before its first cycle (the robot not yet following the plan; here 5 cm outside the support) are not
    judged; the same margin measured once the walk runs latches zmp_margin."""
    a = lib["nominals"][0.8]
    ctl = Controller(lib["cfg"], list(lib["nominals"].values()), transitions=lib["transitions"])
    ctl.command(Request(a.meta["speed"]))
    dt = round(ctl.dt * 1e9)
    t0 = 10 * dt
    old = (np.array([t0 - 3 * dt, t0 - dt]), np.array([-0.05, -0.05]))
    out = ctl.update(t0, Measured(t0, a.q[0], a.qd[0]), old, t0 - dt)
    assert out.reference is not None and not [e for e in out.decision.events if e.cause.startswith("zmp")]
    t1 = t0 + dt
    out = ctl.update(t1, Measured(t1, out.reference.q, out.reference.qd), (np.array([t1]), np.array([-0.05])), t1)
    assert [e.cause for e in out.decision.events] == ["zmp_margin"]


def test_the_floor_does_not_depend_on_how_late_a_sample_is_judged(lib):
    """A ZMP sample judged at the first cycle after it (a short lag) and the same sample judged 0.2 s later
    (a long lag, the plan recorded all around it) get the same floor to 2 mm: past the last cycle the window
    takes the tracked nominal's plan ahead on its clock. The sample is put 0.05 s before the plan's steepest
    fall within the window, where a window cut at the judging cycle would miss the fall."""
    a = lib["nominals"][0.8]
    # min_margin above every plan: the floor is the plan less the tolerance everywhere (the window's doing)
    cfg = dataclasses.replace(lib["cfg"], limits=dataclasses.replace(lib["cfg"].limits, min_margin=1.0))
    ctl = Controller(cfg, list(lib["nominals"].values()), transitions=lib["transitions"])
    ctl.command(Request(a.meta["speed"]))
    dt = round(ctl.dt * 1e9)

    def walk(c, cycles: int) -> list[float]:
        """Perfect tracking with the plan measured back a cycle later (the guard fed, never tripped)."""
        q, qd, plan, seen = a.q[0], a.qd[0], None, []
        for k in range(cycles):
            zmp = None if plan is None else (np.array([k * dt - dt]), np.array([plan]))
            out = c.update(k * dt, Measured(k * dt, q, qd), zmp, k * dt - dt)
            q, qd, plan = out.reference.q, out.reference.qd, out.reference.margin
            seen.append(plan)
        return seen

    plans = walk(ctl, int(round(2.4 / ctl.dt)))
    plans = np.array(plans)
    w = round(cfg.limits.margin_window_s / ctl.dt)
    # a cycle s in the second stride whose plan w/2 later is far below its own
    drop = plans[w // 2:] - plans[:-w // 2]
    s = int(np.argmin(drop[600:900])) + 600
    assert drop[s] < -0.01
    early = Controller(cfg, list(lib["nominals"].values()), transitions=lib["transitions"])
    early.command(Request(a.meta["speed"]))
    walk(early, s + 2)
    first = early.floor(np.array([s * dt]))[0]
    late = ctl.floor(np.array([s * dt]))[0]        # the plan recorded up to 2.4 s, 1.4 s past the sample
    assert first == pytest.approx(late, abs=0.002)
    assert late < plans[s] - cfg.limits.margin_tolerance - 0.01      # the fall ahead lowered it


@pytest.mark.parametrize("slower", [1.05, 0.95])
def test_phase_gain_keeps_the_setpoint_with_a_wearer_off_the_nominals_period(lib, slower):
    """A wearer walks nominal 0.80's path with a stride 5 % longer (or shorter) than its T, measured exactly:
    the clock alone ([loop] phase_gain 0) drifts off by 5 % of the time walked (0.21 cycles in 5 s);
    with phase_gain 4/s it settles at the wearer's rate, its lag the phase-locked loop's
    |1/T_w - 1/T| / gain cycles (the truth: the first-order loop's steady state), within half a sample."""
    a = lib["nominals"][0.8]
    T = float(a.period[0])
    lags = {}
    for gain in (0.0, 4.0):
        cfg = dataclasses.replace(lib["cfg"], phase_gain=gain)
        ctl = Controller(cfg, list(lib["nominals"].values()), zmp_guard=False)
        ctl.command(Request(a.meta["speed"]))
        dt = round(ctl.dt * 1e9)
        for k in range(int(round(5.0 / ctl.dt)) + 1):
            wearer = k * ctl.dt / (slower * T)
            q, qd, _, _ = a.reference(np.full(len(a.actuators), wearer))
            out = ctl.update(k * dt, Measured(k * dt, q, qd / slower))
        lags[gain] = float(out.reference.phase[0]) - wearer
    assert abs(lags[0.0]) == pytest.approx(abs(1 / slower - 1) * 5.0 / T, rel=0.05)
    steady = (1 / (slower * T) - 1 / T) / 4.0       # cycles the clock leads (+) or lags (-) the wearer
    assert lags[4.0] == pytest.approx(-steady, abs=0.5 / a.u.size)
