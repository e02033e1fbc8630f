"""`walklab model`: inspect model files, report linkage gait metrics, generate a scaled human.

    walklab model show NAME|FILE [--floating]
    walklab model urdf NAME|FILE [-o FILE]
    walklab model linkage NAME|FILE [--crank-speed RAD_S] [--ground-penetration M] [--json]
    walklab model human --mass KG --height M [--sex male|female] [--ball-joints | --exoskeleton]
                        [-o FILE]
    walklab model compile [NAME|FILE]

NAME is a shipped model (configs/models/NAME.toml); FILE a path to a TOML model file (or, for
`show`, a URDF file: FILE.urdf, with --floating for a free-flyer root).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("model", help="show a model, report linkage metrics, generate a scaled human",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="model_command", metavar="SUBCOMMAND", required=True)

    show = sub.add_parser("show", help="print a model's segments (or a linkage's bodies), joints, masses, totals")
    show.add_argument("model", metavar="NAME|FILE", help="shipped model name, TOML or URDF file path")
    show.add_argument("--floating", action="store_true", help="URDF only: give the root link a free-flyer joint")
    show.set_defaults(func=_show)

    urdf = sub.add_parser("urdf", help="write a tree model as URDF (for Pinocchio, RViz, MuJoCo's compiler, ...)")
    urdf.add_argument("model", metavar="NAME|FILE", help="shipped model name or TOML file path")
    urdf.add_argument("-o", "--output", metavar="FILE", help="URDF file to write (default: standard output)")
    urdf.set_defaults(func=_urdf)

    link = sub.add_parser("linkage", help="gait metrics, crank torque and energy of a crank-driven leg linkage")
    link.add_argument("model", metavar="NAME|FILE", help="linkage model (e.g. jansen_leg, chebyshev_leg)")
    link.add_argument("--crank-speed", type=float, default=2 * math.pi, metavar="RAD_S",
                      help="constant crank speed in rad/s, + counter-clockwise (default 2*pi)")
    link.add_argument("--ground-penetration", type=float, default=0.008, metavar="M",
                      help="ground level above the lowest foot point in m, > 0 (default 0.008)")
    link.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    link.set_defaults(func=_linkage)

    human = sub.add_parser("human", help="write a 15-segment human (optionally wearing the exoskeleton) "
                                         "scaled from body mass and stature (de Leva 1996)")
    human.add_argument("--mass", type=float, required=True, metavar="KG", help="body mass in kg")
    human.add_argument("--height", type=float, required=True, metavar="M", help="stature in m")
    human.add_argument("--sex", choices=("male", "female"), default="male", help="de Leva table (default male)")
    kind = human.add_mutually_exclusive_group()
    kind.add_argument("--ball-joints", action="store_true",
                      help="spherical lumbar, neck, shoulder and hip joints instead of three revolutes each "
                           "(not exportable to URDF)")
    kind.add_argument("--exoskeleton", action="store_true",
                      help="add the lower-limb exoskeleton (hip flexion and knee actuators per leg)")
    human.add_argument("-o", "--output", metavar="FILE", help="TOML file to write (default: standard output)")
    human.set_defaults(func=_human)

    comp = sub.add_parser("compile", help="compile the dynamics kernels into numba's on-disk cache (once per "
                                          "install); with a model, run each algorithm on it once")
    comp.add_argument("model", nargs="?", metavar="NAME|FILE", help="tree model to run the kernels on (optional)")
    comp.set_defaults(func=_compile)


def _compile(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import dynamics
    from dynamics import kernels

    model = None
    if args.model is not None:
        model = dynamics.load_model(args.model)
        if not isinstance(model, dynamics.Model):
            raise ValueError(f"{args.model}: a linkage model has no tree kernels to run; give a tree model")
    if not kernels.enabled():
        raise ValueError(f"{kernels.ENV}=0 selects the numpy path: there is nothing to compile")
    lines = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("compiling dynamics kernels", total=len(kernels.SIGNATURES))

        def progress(name: str, seconds: float, compiled: bool) -> None:
            lines.append(f"{name:<20} {'compiled' if compiled else 'loaded from the cache'} in {seconds:.2f} s")
            bar.advance(task)

        kernels.compile_all(progress)
    print("\n".join(lines))
    if model is not None:
        q, z = model.neutral(), np.zeros(model.nv)
        dynamics.rnea(model, q, z, z)
        dynamics.crba(model, q)
        dynamics.forward_kinematics(model, q)
        if model.total_mass > 0:
            dynamics.centroidal_momentum(model, q, z, z)
            dynamics.aba(model, q, z, z)
        print(f"model {model.name!r}: rnea, crba, kinematics, centroidal and aba run on the compiled kernels")
    return 0


def _fmt(v: float, width: int = 9) -> str:
    return f"{v:{width}.4g}"


def _vec(v) -> str:
    return "(" + ", ".join(f"{float(x):.4g}" for x in v) + ")"


def _show(args: argparse.Namespace) -> int:
    from dynamics import Model, load_model, load_urdf

    if args.model.lower().endswith(".urdf"):
        model = load_urdf(args.model, floating=args.floating)
    else:
        model = load_model(args.model)  # a tree Model, or a closed-chain Linkage for kind = "linkage"
    print(_tree_text(model) if isinstance(model, Model) else _linkage_text(model))
    return 0


def _urdf(args: argparse.Namespace) -> int:
    from dynamics import Model, load_model, urdf_string

    model = load_model(args.model)
    if not isinstance(model, Model):
        raise ValueError(f"{args.model}: a closed-chain linkage has no URDF form (URDF describes trees)")
    return _emit(urdf_string(model), args.output, f"{model.name}, {len(model.segments)} segments, "
                 f"nq = {model.nq}, nv = {model.nv}")


def _emit(text: str, output: str | None, summary: str) -> int:
    """Write text to the file `output` (and a one-line summary to stderr), or to stdout."""
    if output:
        Path(output).write_text(text, encoding="utf-8")
        print(f"wrote {output}: {summary}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _tree_text(model) -> str:
    from dynamics.joints import joint_type

    ws = max(len(s.name) for s in model.segments)
    wj = max(len(s.joint_name or s.name) for s in model.segments)
    lines = [f"model {model.name}" + (f"  ({model.source})" if model.source else ""),
             f"gravity {_vec(model.gravity)} m/s^2", "",
             f"{'#':>3} {'segment':<{ws}} {'parent':<{ws}} {'joint':<{wj}} {'type':<11} {'axis':<12} "
             f"{'mass kg':>9}  com m (segment frame)"]
    for i, s in enumerate(model.segments, start=1):
        axis = _vec(s.joint.axis) if joint_type(s.joint.type).AXIS_PARAMETER else "-"
        lines.append(f"{i:>3} {s.name:<{ws}} {s.parent or 'world':<{ws}} {s.joint_name or s.name:<{wj}} "
                     f"{s.joint.type:<11} {axis:<12} {_fmt(s.mass)}  {_vec(s.com)}")
    if model.actuators:
        lines += ["", f"{'actuator':<18} {'joint':<{wj}} {'gear':>7} {'torque N*m':>11} {'speed rad/s':>12}"]
        for a in model.actuators:
            joint = model.segment(a.joint).joint_name or a.joint
            lines.append(f"{a.name:<18} {joint:<{wj}} {_fmt(a.gear_ratio, 7)} {_fmt(a.torque_limit, 11)} "
                         f"{_fmt(a.velocity_limit, 12)}")
    points = [f"    {s.name}: " + "; ".join(f"{kind} {', '.join(pts)}" for kind, pts in
                                            (("markers", s.markers), ("contacts", s.contacts)) if pts)
              for s in model.segments if s.markers or s.contacts]
    if points:
        lines += ["", "markers and contact points:"] + points
    n_points = len(model.marker_names) + len(model.contact_names)
    n_massive = sum(s.mass > 0 for s in model.segments)
    lines += ["", f"total: {len(model.segments)} segments ({n_massive} with mass), mass {model.total_mass:.4f} kg, "
                  f"nq = {model.nq}, nv = {model.nv}, {len(model.actuators)} actuators, "
                  f"{n_points} markers/contact points"]
    return "\n".join(lines)


def _linkage_text(link) -> str:
    wb = max(len(b.name) for b in link.bodies)
    lines = [f"linkage {link.name}  ({link.source})", f"gravity {link.gravity:g} m/s^2 along -y, "
             f"foot point {link.foot}, fixed pivot {link.pivot}", "",
             f"{'#':>3} {'body':<{wb}} {'ends':<14} {'length m':>9} {'mass kg':>9} {'J kg*m^2':>10}"]
    for i, (b, ends) in enumerate(zip(link.bodies, link.body_ends), start=1):
        lines.append(f"{i:>3} {b.name:<{wb}} {ends[0] + ' - ' + ends[1]:<14} {_fmt(b.length)} {_fmt(b.mass)} "
                     f"{_fmt(b.inertia, 10)}")
    lines += ["", "ground points (m):"] + [f"    {k} {_vec(v)}" for k, v in link.ground_points.items()]
    # A pin gives two constraint rows ("... x", "... y"); list each joint once.
    joints = list(dict.fromkeys(r[:-2] if r.endswith((" x", " y")) else r for r in link.row_names))
    lines += ["", f"joints ({len(joints)}):"] + [f"    {j}" for j in joints]
    free = link.n_coords - len(link.kinematic_rows)
    lines += ["", f"total: {link.n_bodies} bodies, mass {sum(b.mass for b in link.bodies):.4f} kg, "
                  f"{link.n_coords} coordinates, {link.n_rows} constraint rows ({len(link.driver_rows)} drivers), "
                  f"{free} DOF without the drivers, {link.n_coords - link.n_rows} with them; input {link.input_kind}"]
    return "\n".join(lines)


# The keys first, in this order, then whatever else the report holds; units for the table.
LINKAGE_KEYS = [("step_length", "m"), ("step_height", "m"), ("path_width", "m"), ("leg_length", "m"),
                ("duty_factor", "-"), ("torque_min", "N*m"), ("torque_max", "N*m"), ("energy_abs_per_cycle", "J"),
                ("energy_net_per_cycle", "J"), ("energy_abs_stance", "J"), ("energy_abs_swing", "J"),
                ("crank_speed", "rad/s"), ("ground_penetration", "m"), ("ground_level", "m")]


def _linkage(args: argparse.Namespace) -> int:
    from dynamics.linkage.report import linkage_report  # validates both numbers (LinkageError)

    report = linkage_report(args.model, crank_speed=args.crank_speed, ground_penetration=args.ground_penetration)
    if args.json:
        print(json.dumps({k: _plain(v) for k, v in report.items()}))
        return 0
    print(f"linkage {args.model}: crank speed {args.crank_speed:g} rad/s, "
          f"ground level = lowest foot point + {args.ground_penetration:g} m")
    known = dict(LINKAGE_KEYS)
    for key in [k for k, _ in LINKAGE_KEYS if k in report] + [k for k in report if k not in known]:
        value = report[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        text = f"{value:12.6g}" if number else f"{value!s:>12}"
        print(f"  {key:<26}{text}  {known.get(key, '')}")
    return 0


def _plain(v):
    """JSON-safe value (numpy scalars and arrays to Python numbers and lists)."""
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _human(args: argparse.Namespace) -> int:
    from dynamics import model_from_dict
    from dynamics.anthropometry import exoskeleton_table, human15_table

    if args.exoskeleton:
        table = exoskeleton_table(args.mass, args.height, args.sex)
    else:
        table = human15_table(args.mass, args.height, args.sex, ball_joints=args.ball_joints)
    model_from_dict(table)  # validate before writing
    command = " ".join(["walklab model human", f"--mass {args.mass:g}", f"--height {args.height:g}",
                        f"--sex {args.sex}"] + (["--exoskeleton"] if args.exoskeleton else [])
                       + (["--ball-joints"] if args.ball_joints else []))
    text = toml_dumps(table, header=[f"Generated by `{command}` (dynamics.anthropometry).",
                                     "Format: docs/models.md. Edit the generator, not this file."])
    return _emit(text, args.output, f"{table['name']}, {len(table['segment'])} segments, "
                 f"{sum(s.get('mass', 0.0) for s in table['segment']):.4f} kg")


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise ValueError(f"cannot write the non-finite number {v!r} to TOML")
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a valid TOML basic string
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise ValueError(f"cannot write {type(v).__name__} {v!r} to TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def toml_dumps(table: dict, header: list[str] = ()) -> str:
    """TOML text of a model table (docs/models.md layout): scalars and inline values first, then
    plain sub-tables, then arrays of tables; long string lists one item per line."""
    out = [f"# {line}" for line in header]
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    for k, v in scalars.items():
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            out.append(f"{_key(k)} = [")
            out += [f"    {_value(x)}," for x in v]
            out.append("]")
        else:
            out.append(f"{_key(k)} = {_value(v)}")
    for k, v in table.items():
        if isinstance(v, dict):
            out += ["", f"[{_key(k)}]"] + [f"{_key(a)} = {_value(b)}" for a, b in v.items()]
    for k, v in table.items():
        if _is_table_array(v):
            for row in v:
                out += ["", f"[[{_key(k)}]]"] + [f"{_key(a)} = {_value(b)}" for a, b in row.items()]
    return "\n".join(out) + "\n"


def _is_table_array(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
