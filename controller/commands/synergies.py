"""`walklab synergies`: build, list and show the library of nominal synergies (docs/controller.md).

    walklab synergies build [--robot jansen|biped|exo] [--config FILE] [--library DIR] [--jobs N]
    walklab synergies list [--robot ...] [--library DIR] [--json] [--transitions]
    walklab synergies show NAME [--robot ...] [--library DIR] [--plot FILE.png]

The robot config (configs/jansen.toml, configs/exoskeleton.toml, or --config FILE) names the model,
the grid of nominals and the library folder (--library overrides it). A biped or exoskeleton build
also computes the transitions between neighbouring nominals (same period and ZMP laws, adjacent step
scales S, both directions) and stores them, accepted or not, with their ZMP deviation d_max;
`list --transitions` lists them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROBOT_CONFIGS = {"jansen": "jansen", "biped": "biped", "exo": "exoskeleton"}
LIST_FIELDS = ("name", "robot", "speed", "turn", "period", "profile", "zmp_max_deviation", "min_margin",
               "peak_torque", "peak_contact_force", "energy_abs_per_cycle")
TRANSITION_FIELDS = ("name", "robot", "from", "to", "S_from", "S_to", "period", "zmp_max_deviation", "eps", "accepted",
                     "min_margin", "peak_torque", "repair")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("synergies", help="build, list and show the library of nominal synergies",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="synergies_command", metavar="SUBCOMMAND", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--robot", choices=sorted(ROBOT_CONFIGS), default="jansen", help="robot kind (default jansen)")
        q.add_argument("--config", metavar="FILE", help="robot config file (default: the shipped one of --robot)")
        q.add_argument("--library", metavar="DIR", help="library folder (default: the config's synergies.library)")

    b = sub.add_parser("build", help="generate the robot's nominals in parallel into its library")
    common(b)
    b.add_argument("--jobs", type=int, default=1, metavar="N", help="worker processes (default 1)")
    b.set_defaults(func=_build)
    ls = sub.add_parser("list", help="one line per nominal (or --json: one JSON array)")
    common(ls)
    ls.add_argument("--json", action="store_true", help="print one JSON array, one object per nominal")
    ls.add_argument("--transitions", action="store_true",
                    help="list the stored transitions between neighbouring nominals instead (biped, exoskeleton)")
    ls.set_defaults(func=_list)
    sh = sub.add_parser("show", help="a nominal's metadata and figures (and --plot its curves)")
    common(sh)
    sh.add_argument("name", metavar="NAME", help="nominal name (see `walklab synergies list`)")
    sh.add_argument("--plot", metavar="FILE.png", help="write a plot of q, q', tau and contact forces over the phase")
    sh.set_defaults(func=_show)


def _config(args):
    from controller.synergies.robot import load_robot

    cfg = load_robot(args.config or ROBOT_CONFIGS[args.robot])
    if args.library:
        import dataclasses

        cfg = dataclasses.replace(cfg, library=Path(args.library))
    return cfg


def _build(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.jobs < 1:
        raise ValueError(f"--jobs: expected an integer >= 1, got {args.jobs}")
    build_with_progress(cfg, args.jobs)
    return 0


def build_with_progress(cfg, jobs: int = 1) -> None:
    """Build a robot config's library with a rich progress bar and a one-line result (also used by
    `walklab run` when a lab's control loop finds no library)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from controller.synergies import library

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn()) as prog:
        task = prog.add_task(f"building {cfg.robot} nominals", total=None)

        def step(done: int, total: int, name: str) -> None:
            prog.update(task, completed=done, total=total, description=f"{name}")

        written, skipped = library.build(cfg, jobs=jobs, progress=step)
    why = ("optimised profiles skipped (no cut of both peak force and energy)" if cfg.robot == "jansen"
           else "grid points skipped (no periodic trunk: the trunk falls)")
    print(f"{len(written)} nominals written to {cfg.library}" +
          (f"; {len(skipped)} {why}: " + ", ".join(skipped) if skipped else ""))
    if cfg.robot != "jansen":
        trs = library.transition_index(cfg.library)
        fixed = sum(bool((e.get("repair") or {}).get("repaired")) for e in trs)
        print(f"{len(trs)} transitions between neighbours stored, {sum(bool(e['accepted']) for e in trs)} accepted "
              f"(d_max < eps; {fixed} of them repaired)")


def _list(args: argparse.Namespace) -> int:
    from controller.synergies.library import load_index, transition_index

    if args.transitions:
        return _list_transitions(transition_index(_config(args).library), args.json)
    entries = load_index(_config(args).library)
    if args.json:
        print(json.dumps([{k: e.get(k) for k in LIST_FIELDS} for e in entries]))
        return 0
    print(f"{'name':36} {'speed':>6} {'turn':>6} {'period':>7} {'margin':>7} {'tau_max':>8} {'F_max':>8} {'E_abs':>8}")
    for e in entries:
        print(f"{e['name']:36} {e['speed']:6.3f} {e['turn']:6.2f} {e['period']:7.3f} {e['min_margin']:7.3f} "
              f"{e['peak_torque']:8.3f} {e['peak_contact_force']:8.3f} {e['energy_abs_per_cycle']:8.3f}")
    return 0


def _list_transitions(entries: list[dict], as_json: bool) -> int:
    if as_json:
        print(json.dumps([{k: e.get(k) for k in TRANSITION_FIELDS} for e in entries]))
        return 0
    print(f"{'from':30} {'to':30} {'d_max':>8} {'eps':>6} {'margin':>7}  accepted")
    for e in entries:
        fix = e.get("repair") or {}
        how = (f" (repaired from {fix['d_before']:.4f})" if fix.get("repaired") else
               f" (repair failed: {fix['d_after']:.4f})" if fix.get("tried") else "")
        print(f"{e['from']:30} {e['to']:30} {e['zmp_max_deviation']:8.4f} {e['eps']:6.3f} {e['min_margin']:7.3f}  "
              f"{'yes' if e['accepted'] else 'no'}{how}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from controller.synergies.library import get

    syn = get(_config(args).library, args.name)
    for k, v in sorted(syn.summary().items()):
        print(f"{k:30} {v}")
    if args.plot:
        _plot(syn, Path(args.plot))
        print(f"plot written to {args.plot}")
    return 0


def _plot(syn, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(4, 1, figsize=(8, 9), sharex=True)
    for j, a in enumerate(syn.actuators):
        ax[0].plot(syn.u, syn.q[:, j] - syn.wrap[j] * syn.u, label=a)
        ax[1].plot(syn.u, syn.qd[:, j], label=a)
        ax[2].plot(syn.u, syn.tau[:, j], label=a)
    ax[3].plot(syn.u, syn.contact_force)
    for a, lab in zip(ax, ("q - wrap u (rad)", "q' (rad/s)", "tau (N m)", "contact force (N)")):
        a.set_ylabel(lab)
        a.grid(True, alpha=0.3)
    ax[0].legend()
    ax[-1].set_xlabel("phase (cycles)")
    fig.suptitle(syn.name)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=90)
    finally:
        plt.close(fig)
