"""``walklab sessions info|recover|export``: describe, repair and convert recorded session files."""
from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sessions", help="describe, recover and export recorded sessions",
                                   description="Work on session files written by `walklab record` (MCAP).")
    sub = parser.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)
    info = sub.add_parser(
        "info", help="streams, rates, duration, gaps, events, clock faults, metadata",
        description="Read a session (with its rotated parts) and report per stream the frames, samples, nominal "
                    "and measured rate, start and duration, seq gaps and missing frames, time gaps; then the "
                    "events (recorder drops and alarms, device resets, clock faults, supervisor restarts) and "
                    "the metadata (host, software version, lab config, plates, models). A file cut short is "
                    "read up to its last complete record and reported as such.")
    info.add_argument("file", metavar="FILE")
    info.add_argument("--json", action="store_true", help="one JSON object instead of the text report")
    info.set_defaults(func=info_handler)
    rec = sub.add_parser(
        "recover", help="make a cut-short file whole again (every complete message kept, index written)",
        description="Rewrite a session file that was never closed (kill -9, power cut, full disk) keeping every "
                    "complete message and metadata record, with a fresh index and footer. Without -o the file "
                    "is replaced atomically.")
    rec.add_argument("file", metavar="FILE")
    rec.add_argument("-o", "--output", metavar="OUT.mcap", help="write here instead of replacing FILE")
    rec.set_defaults(func=recover_handler)
    exp = sub.add_parser(
        "export", help="convert a session to C3D, CSV or a Foxglove-readable MCAP",
        description="--c3d: markers (mm) and force-plate channels with FORCE_PLATFORM parameters (from the "
                    "plate calibrations recorded in the session) for ezc3d, Mokka, Visual3D, OpenSim; --csv: one "
                    "CSV per stream; --foxglove: the same data with JSON messages and JSON schemas (one message "
                    "per sample) for the Foxglove app.")
    exp.add_argument("file", metavar="FILE")
    exp.add_argument("--c3d", metavar="OUT.c3d")
    exp.add_argument("--csv", metavar="DIR")
    exp.add_argument("--foxglove", metavar="OUT.mcap")
    exp.add_argument("--stream", metavar="PATTERN", action="append", default=[],
                     help="streams for --csv and --foxglove (repeatable; default all)")
    exp.add_argument("--markers", metavar="STREAM", help="marker stream for --c3d (default: the only one)")
    exp.add_argument("--plate", metavar="STREAM", action="append",
                     help="plate stream for --c3d (repeatable; default: every calibrated plate)")
    exp.set_defaults(func=export_handler)


def info_handler(args: argparse.Namespace) -> int:
    from daq.sessions import format_info, info

    rep = info(args.file)
    if args.json:
        print(json.dumps(rep.to_dict(), default=str, allow_nan=True))
    else:
        print(format_info(rep))
    return 0


def recover_handler(args: argparse.Namespace) -> int:
    from daq.sessions import recover

    r = recover(args.file, args.output)
    state = "was complete" if r.was_complete else f"was cut short ({r.error})"
    print(f"{r.output}: {r.messages} messages and {r.metadata} metadata records kept; "
          f"{r.bytes_kept} of {r.size} bytes of {args.file} readable; the input {state}")
    return 0


def export_handler(args: argparse.Namespace) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from daq import sessions
    from daq.formats import foxglove

    if not (args.c3d or args.csv or args.foxglove):
        raise ValueError("nothing to export: give --c3d OUT.c3d, --csv DIR and/or --foxglove OUT.mcap")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()) as bar:
        if args.c3d:
            task = bar.add_task(f"C3D {args.c3d}", total=None)
            out = sessions.export_c3d(args.file, args.c3d, markers=args.markers, plates=args.plate)
            bar.update(task, description=f"C3D {out}: done")
        if args.csv:
            task = bar.add_task(f"CSV {args.csv}", total=None)
            files = sessions.export_csv(args.file, args.csv, args.stream,
                                        progress=lambda n: bar.update(task, description=f"CSV {args.csv}: {n} frames"))
            bar.update(task, description=f"CSV {args.csv}: {len(files)} files")
        if args.foxglove:
            task = bar.add_task(f"Foxglove {args.foxglove}", total=None)
            counts = foxglove.export(sessions.session_parts(args.file), args.foxglove, args.stream,
                                     progress=lambda n: bar.update(task, description=f"Foxglove: {n} frames"))
            bar.update(task, description=f"Foxglove {args.foxglove}: {sum(counts.values())} messages, "
                                         f"{len(counts)} topics")
    return 0
