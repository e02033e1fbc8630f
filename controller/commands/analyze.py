"""`walklab analyze`: joint angles, moments, powers, ZMP, events and a report from gait trials.

    walklab analyze INPUT... --out DIR [--model cgm|human15|MODEL] [--mass KG] [--cutoff HZ]
                    [--filter butterworth|spline] [--subject NAME=VALUE ...] [--reference A,B,M[,vertical]] [--static FILE] [--workers N]
                    [--dask ADDRESS] [--no-figures] [--identify]

INPUT: C3D files, OpenSim TRC files (their GRF ``NAME_grf.mot`` or ``NAME.mot`` is read beside
them), walklab session recordings (.mcap), folders, or glob patterns, in any mix. Per trial: DIR/NAME/results.npz (Plug-in Gait
names, (n_frames, 3), degrees, N·m/kg, W/kg, plus ``time`` s), series.csv, events.csv,
metrics.csv, PNG figures and report.html; with several trials, DIR/summary.html. A file that is
not a trial gets one error line and the others go on (exit status 2 at the end). Details:
docs/analysis.md.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="joint angles, moments, powers, events and a report from gait trials",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="C3D or TRC files, folders or glob patterns")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (one sub-folder per trial)")
    p.add_argument("--model", default="cgm", metavar="cgm|human15|MODEL",
                   help="marker model (default cgm: Conventional Gait Model / Plug-in Gait lower body; "
                        "human15: the 15-segment human from configs/markersets/human15.toml; a planar model of "
                        "configs/models/, e.g. zinkovsky_5_1: its joint points <root>_proximal and "
                        "<segment>_distal, by the reference-line method)")
    p.add_argument("--reference", metavar="A,B,M[,vertical]",
                   help="planar models: markers A and B on a horizontal (or vertical) reference segment M metres "
                        "long give the axes and scale of the record (default: lab x forward, z up, metres)")
    p.add_argument("--freeze", type=float, default=1.0, metavar="DEG",
                   help="planar models: a joint whose mobility over the trial (methods.md f.3) is below DEG degrees "
                        "is frozen, its two segments merged for the kinetics (default 1; 0 = never)")
    p.add_argument("--mass", type=float, metavar="KG", help="body mass in kg (overrides the file's)")
    p.add_argument("--cutoff", type=float, default=6.0, metavar="HZ",
                   help="zero-lag Butterworth cutoff for the markers in Hz, 0 = none (default 6)")
    p.add_argument("--subject", action="append", default=[], metavar="NAME=VALUE",
                   help="a subject measurement as Vicon's PROCESSING group names it, in its units (mm, rad, "
                        "kg), over the file's: e.g. --subject LLegLength=860 --subject RKneeWidth=101 "
                        "(repeatable)")
    p.add_argument("--filter", choices=("butterworth", "spline"), default="butterworth",
                   help="marker smoothing: zero-lag Butterworth at --cutoff (default) or the smoothing "
                        "spline with its parameter chosen by generalised cross-validation")
    p.add_argument("--static", metavar="FILE",
                   help="a static trial (C3D or TRC): cgm: the foot offsets StaticPlantFlex and StaticRotOff from it; "
                        "human15: the subject standing in the model's neutral posture, which places the marker "
                        "set's markers on the subject before the trials are fitted")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="parallel trial jobs (default one per core; 1 = in this process)")
    p.add_argument("--dask", metavar="ADDRESS", help="send the trial jobs to this Dask scheduler instead")
    p.add_argument("--no-figures", action="store_true", help="results and CSVs only (no PNG, no HTML)")
    p.add_argument("--identify", action="store_true",
                   help="trials with plates or a GRF file: search the marker cutoff and the segment masses (+-5 %%, "
                        "total kept) that minimise the pelvis residual (cgm) or the whole-body CoM criterion "
                        "(human15), and report them with the criterion before and after")
    p.set_defaults(func=_analyze)


def _analyze(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from controller import analyze

    if args.mass is not None and not args.mass > 0:
        raise ValueError(f"--mass must be a positive number of kg, got {args.mass}")
    if args.workers < 0:
        raise ValueError(f"--workers must be >= 0, got {args.workers}")
    subject = []
    for item in args.subject:
        name, sep, value = item.partition("=")
        try:
            subject.append((name.strip(), float(value)))
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"--subject {item!r}: expected NAME=NUMBER, e.g. LLegLength=860 (mm)")
    reference = None
    if args.reference:
        parts = [x.strip() for x in args.reference.split(",")]
        try:
            length = float(parts[2])
        except (IndexError, ValueError):
            length = float("nan")
        if not 3 <= len(parts) <= 4 or not length > 0 or not all(parts[:2]) or parts[3:] not in ([], ["vertical"]):
            raise ValueError(f"--reference {args.reference!r}: expected A,B,METRES[,vertical] (two marker names and "
                             "a length > 0), e.g. floor1,floor2,2.0")
        reference = (parts[0], parts[1], length, len(parts) == 4)
    if not (math.isfinite(args.freeze) and args.freeze >= 0):
        raise ValueError(f"--freeze {args.freeze}: expected a finite angle >= 0 in degrees")
    if args.static and not Path(args.static).is_file():
        raise FileNotFoundError(f"--static {args.static}: no such file")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise NotADirectoryError(f"--out {args.out} exists and is not a folder")
    paths = analyze.expand_inputs(args.inputs)
    options = analyze.Options(model=args.model, mass=args.mass, cutoff=args.cutoff, figures=not args.no_figures,
                              identify=args.identify, filter=args.filter, subject=tuple(subject),
                              reference=reference, static=args.static,
                              freeze=math.radians(args.freeze))
    errors = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("analysing", total=len(paths))

        def progress(summary: dict) -> None:
            nonlocal errors
            if "error" in summary:
                errors += 1
                bar.console.print(f"walklab analyze: error: {summary['error']}", highlight=False, markup=False,
                                  soft_wrap=True)
            bar.advance(task)

        summaries = analyze.run_all(paths, args.out, options, workers=args.workers, dask_address=args.dask,
                                    progress=progress)
    done = [s for s in summaries if "error" not in s]
    for s in done:
        print(f"{s['name']}: {s['out']}/report.html" if options.figures else f"{s['name']}: {s['out']}")
    if len(summaries) > 1 and options.figures:
        from controller import report

        print(f"summary: {report.summary_report(summaries, Path(args.out))}")
    return 2 if errors else 0
