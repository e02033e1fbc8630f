"""Figures (matplotlib PNG) and self-contained HTML reports of `walklab analyze`.

``trial_report`` writes, in the trial's folder: grf.png (vertical and horizontal ground reactions
per plate or foot), cop.png (COP paths on the plate outlines), zmp.png (ZMP path with the support
margin over time), angles.png / moments.png / powers.png (0–100 % of the gait cycle, left red,
right blue, mean ± SD over the strides), stick.png (a sagittal stick-figure strip); for a planar
model planar.png (its joint angles, moments and powers over time) and scheme.png (the model's
kinematic scheme, evenly spaced frames); and report.html with every figure embedded (base64), the notes on what could not be computed, the
plates, events and metrics tables. ``summary_report`` writes summary.html over several trials
(mean ± SD curves across trials, a table of metrics).
"""
from __future__ import annotations

import base64
import html
import warnings
from pathlib import Path

import numpy as np

from dynamics import gait_events as ge

COLORS = {"L": "tab:red", "R": "tab:blue"}
JOINTS = ("Hip", "Knee", "Ankle")
PLANES = ("sagittal (X)", "frontal (Y)", "transverse (Z)")
KINDS = {"Angles": ("angles", "deg"), "Moment": ("moments", "N·m/kg"), "Power": ("powers", "W/kg")}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # path simplification and chunked Agg paths: kHz force curves draw in a fraction of the time
    plt.style.use("fast")

    return plt


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=90)  # no bbox_inches="tight": it lays every axis out twice (seconds per figure)
    _plt().close(fig)
    return path


def _mean_sd(cycles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # phases NaN in every stride stay NaN
        return np.nanmean(cycles, axis=0), np.nanstd(cycles, axis=0)


def cycle_figure(curves: dict[str, np.ndarray], kind: str, title: str, path: Path) -> Path | None:
    """3 × 3 grid (hip/knee/ankle × X/Y/Z) of cycle curves: curves maps a PiG name (``LHipAngles``)
    to (n, 101, 3) cycles; mean ± SD per side. None when no curve has data."""
    if not any(k.endswith(kind) and np.isfinite(v).any() for k, v in curves.items()):
        return None
    plt = _plt()
    fig, axes = plt.subplots(3, 3, figsize=(11, 8), sharex=True)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.07, top=0.92, hspace=0.3, wspace=0.25)
    pct = np.linspace(0, 100, 101)
    _, unit = KINDS[kind]
    for r, joint in enumerate(JOINTS):
        for c in range(3):
            ax = axes[r, c]
            if kind == "Power" and c < 2:  # PiG powers live in Z only
                ax.set_visible(False)
                continue
            for side in "LR":
                cyc = curves.get(f"{side}{joint}{kind}")
                if cyc is None or not len(cyc):
                    continue
                m, s = _mean_sd(cyc[:, :, c])
                ax.plot(pct, m, color=COLORS[side], label=f"{side} (n={len(cyc)})")
                ax.fill_between(pct, m - s, m + s, color=COLORS[side], alpha=0.2, lw=0)
            ax.axhline(0, color="0.7", lw=0.6)
            ax.set_title(f"{joint} {PLANES[c] if kind != 'Power' else ''}".strip(), fontsize=9)
            if c == 0 or kind == "Power":
                ax.set_ylabel(unit)
            if r == 2:
                ax.set_xlabel("% gait cycle")
    handles = [h for ax in axes.ravel() for h in ax.get_legend_handles_labels()[0]][:2]
    fig.legend(handles, [h.get_label() for h in handles], loc="upper right", fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def _trial_cycles(res) -> dict[str, np.ndarray]:
    out = {}
    if res.events is None:
        return out
    for k, v in res.series.items():
        if k[0] in "LR" and k.endswith(tuple(KINDS)):
            out[k] = ge.normalise_cycles(v, res.time, res.events.strike[k[0]])
    return out


def _grf_figure(res, path: Path) -> Path | None:
    if not res.grf:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    for label, t, f in res.grf:
        axes[0].plot(t, f[:, 2], label=label)
        axes[1].plot(t, f[:, 0], label=f"{label} x")
        axes[1].plot(t, f[:, 1], "--", label=f"{label} y")
    axes[0].set_ylabel("vertical force (N)")
    axes[1].set_ylabel("horizontal forces (N)")
    axes[1].set_xlabel("time (s)")
    if res.events is not None:
        for side in "LR":
            for t in res.events.strike[side]:
                axes[0].axvline(t, color=COLORS[side], lw=0.6)
            for t in res.events.off[side]:
                axes[0].axvline(t, color=COLORS[side], lw=0.6, ls=":")
    axes[0].legend(fontsize=7, loc="upper right")
    axes[1].legend(fontsize=7, ncol=2, loc="upper right")
    axes[0].set_title("ground reactions on the body (event lines: strike solid, off dotted; L red, R blue)")
    return _save(fig, path)


def _cop_figure(res, path: Path) -> Path | None:
    if not res.cop:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for (corners, cop), (label, _, _) in zip(res.cop, res.grf):
        if corners is not None:
            c = np.vstack([corners, corners[:1]])
            ax.plot(c[:, 0], c[:, 1], color="0.4")
            ax.text(corners[:, 0].mean(), corners[:, 1].mean(), label, color="0.5", ha="center")
        ax.plot(cop[:, 0], cop[:, 1], ".", ms=2, label=f"COP {label}")
    for side in "LR":
        for key in (side + "HEE", side + "TOE"):
            if key in res.centres:
                p = res.centres[key]
                ax.plot(p[:, 0], p[:, 1], color=COLORS[side], lw=0.4, alpha=0.5)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("centre of pressure on the plate outlines (lab frame, top view)")
    return _save(fig, path)


def _zmp_figure(res, path: Path) -> Path | None:
    if res.zmp is None or not np.isfinite(res.zmp).any():
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].plot(res.zmp[:, 0], res.zmp[:, 1], "k.", ms=2, label="ZMP (global COP)")
    for side in "LR":
        for key in (side + "HEE", side + "TOE", side + "AJC"):
            if key in res.centres:
                p = res.centres[key]
                axes[0].plot(p[:, 0], p[:, 1], color=COLORS[side], lw=0.5)
    axes[0].set_aspect("equal", adjustable="datalim")
    axes[0].set_xlabel("x (m)")
    axes[0].set_ylabel("y (m)")
    axes[0].set_title("ZMP and foot paths (top view)")
    if res.margin is not None and np.isfinite(res.margin).any():
        axes[1].plot(res.time, 1000 * res.margin, "k")
        axes[1].axhline(0, color="r", lw=0.6)
        axes[1].set_ylabel("stability margin (mm, > 0 inside)")
        axes[1].set_xlabel("time (s)")
        axes[1].set_title("ZMP distance to the support polygon edge")
    else:
        axes[1].text(0.5, 0.5, "no support polygon\n(foot markers or events missing)", ha="center",
                     transform=axes[1].transAxes)
    return _save(fig, path)


def _stick_figure(res, path: Path) -> Path | None:
    need = [f"{s}{k}" for s in "LR" for k in ("HJC", "KJC", "AJC", "TOE")]
    if not all(k in res.centres for k in need):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 3))
    n = len(res.time)
    frames = np.linspace(0, n - 1, min(14, n)).astype(int)
    for i in frames:
        for side in "LR":
            chain = np.array([res.centres[f"{side}{k}"][i] for k in ("HJC", "KJC", "AJC", "TOE")])
            ax.plot(chain[:, 0], chain[:, 2], "-o", color=COLORS[side], ms=2, lw=1)
        hips = np.array([res.centres["LHJC"][i], res.centres["RHJC"][i]])
        ax.plot(hips[:, 0], hips[:, 2], "k-", lw=1)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("z (m)")
    ax.set_title("kinematic scheme: hip–knee–ankle–toe, sagittal projection, evenly spaced frames")
    return _save(fig, path)


def _planar_figure(res, path: Path) -> Path | None:
    """A planar model's joint angles, moments and powers over time, one curve per joint."""
    if res.scheme is None:
        return None
    plt = _plt()
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    fig.subplots_adjust(left=0.08, right=0.82, bottom=0.07, top=0.94, hspace=0.2)
    for ax, (kind, col, unit) in zip(axes, (("Angles", 0, "deg"), ("Moment", 0, "N·m/kg"), ("Power", 2, "W/kg"))):
        for joint in res.scheme[2]:
            y = res.series.get(f"{joint}{kind}")
            if y is not None and np.isfinite(y[:, col]).any():
                ax.plot(res.time, y[:, col], lw=1, label=joint)
        ax.axhline(0, color="0.7", lw=0.6)
        ax.set_ylabel(f"joint {kind.lower()} ({unit})")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(f"{res.name}: planar joint angles (relative), moments and powers")
    return _save(fig, path)


def _scheme_figure(res, path: Path) -> Path | None:
    """The planar model's kinematic scheme (joint points joined segment by segment), evenly
    spaced frames, drawn in the planar frame (x forward, y up)."""
    if res.scheme is None:
        return None
    pts, proximal, _ = res.scheme
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 3.5))
    n = len(pts)
    for k, i in enumerate(np.linspace(0, n - 1, min(14, n)).astype(int)):
        color = plt.cm.viridis(k / 14)
        for s, p in enumerate(proximal):
            seg = pts[i, [p, s + 1]]
            ax.plot(seg[:, 0], seg[:, 1], "-o", color=color, ms=2, lw=1)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title("kinematic scheme of the planar model, evenly spaced frames (early: dark, late: light)")
    return _save(fig, path)


def _img(path: Path | None) -> str:
    if path is None:
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></figure>'


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return "–" if not np.isfinite(v) else f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v) or "–"
    return str(v)


CSS = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
       "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}"
       "img{max-width:100%}.notes li{color:#8a4b00}")


def _html(title: str, parts: list[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>")


def trial_report(res, out: Path, data=None) -> Path:
    """Write the figures and report.html of one analysed trial (controller.analyze.TrialResult)
    into out/; returns the report path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cycles = _trial_cycles(res)
    figs = [_grf_figure(res, out / "grf.png"), _cop_figure(res, out / "cop.png"), _zmp_figure(res, out / "zmp.png")]
    for kind, (name, _) in KINDS.items():
        figs.append(cycle_figure(cycles, kind, f"{res.name}: joint {name}", out / f"{name}.png"))
    figs.append(_stick_figure(res, out / "stick.png"))
    figs += [_planar_figure(res, out / "planar.png"), _scheme_figure(res, out / "scheme.png")]
    parts = []
    if data is not None:
        m = data.markers
        parts.append(f"<p>file <code>{html.escape(str(data.path))}</code>: {len(m.labels)} markers at {m.rate:g} Hz, "
                     f"{len(m.positions)} frames ({len(m.positions) / m.rate:.2f} s), "
                     f"{len(data.plates)} force plates"
                     + (f" at {data.analog_rate:g} Hz" if data.plates else "")
                     + (", per-foot ground reactions" if data.feet is not None else "") + "</p>")
    if res.mass:
        parts.append(f"<p>body mass {res.mass:g} kg; CGM subject parameters: {html.escape(res.subject_source)}</p>")
    parts.append("<h2>What could not be computed, and other notes</h2><ul class='notes'>"
                 + ("".join(f"<li>{html.escape(n)}</li>" for n in res.notes) or "<li>none</li>") + "</ul>")
    parts.append("<h2>Force plates</h2>" + _table(res.plates))
    ev_rows = []
    if res.events is not None:
        for side in "LR":
            ev_rows.append({"side": side, "source": res.events.source.get(side, "none"),
                            "strikes (s)": [float(x) for x in res.events.strike[side]],
                            "offs (s)": [float(x) for x in res.events.off[side]]})
    parts.append("<h2>Gait events</h2>" + _table(ev_rows))
    if res.event_rows:
        parts.append("<h3>Events stored in the file, and ours</h3>" + _table(res.event_rows))
    parts.append("<h2>Gait metrics</h2>" + _table([{"metric": k, "value": v} for k, v in res.metrics.items()]))
    parts.append("<h2>Figures</h2>" + "".join(_img(f) for f in figs))
    report = out / "report.html"
    report.write_text(_html(f"walklab analysis: {res.name}", parts), encoding="utf-8")
    return report


def summary_report(summaries: list[dict], out: Path) -> Path:
    """summary.html over several trials (run_trial summaries): mean ± SD across trials of each
    trial's mean cycle curves, a metrics table, and the one-line errors of the files that were
    not trials."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ok = [s for s in summaries if "error" not in s]
    curves: dict[str, np.ndarray] = {}
    for k in {k for s in ok for k in s.get("curves", {})}:
        curves[k] = np.array([s["curves"][k] for s in ok if k in s["curves"]])
    figs = [cycle_figure(curves, kind, f"all trials: joint {name} (mean ± SD across trials)", out / f"summary_{name}.png")
            for kind, (name, _) in KINDS.items()]
    keys = ["cadence_steps_per_min", "speed_m_s", "L_stride_time_s", "R_stride_time_s", "L_stride_length_m",
            "R_stride_length_m", "L_stance_pct", "R_stance_pct", "L_double_support_pct", "R_double_support_pct",
            "symmetry_stride_time_s_pct"]
    rows = [{"trial": s["name"], "plates": len(s["plates"]), "strikes L/R": f"{s['events'].get('L', 0)}/{s['events'].get('R', 0)}",
             **{k: s["metrics"].get(k, float("nan")) for k in keys}, "notes": len(s["notes"])} for s in ok]
    parts = [f"<p>{len(ok)} trials analysed, {len(summaries) - len(ok)} files were not trials.</p>",
             "<h2>Metrics</h2>" + _table(rows)]
    bad = [s for s in summaries if "error" in s]
    if bad:
        parts.append("<h2>Files that were not trials</h2><ul class='notes'>"
                     + "".join(f"<li>{html.escape(s['error'])}</li>" for s in bad) + "</ul>")
    parts.append("<h2>Trials</h2><ul>" + "".join(
        f"<li><a href='{html.escape(s['name'])}/report.html'>{html.escape(s['name'])}</a></li>" for s in ok) + "</ul>")
    parts.append("<h2>Curves</h2>" + "".join(_img(f) for f in figs))
    path = out / "summary.html"
    path.write_text(_html("walklab analysis: summary", parts), encoding="utf-8")
    return path
