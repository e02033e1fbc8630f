"""A synergy library: a folder of nominal files (format.py) and ``index.json``, one entry per nominal.

The index is a JSON array of `Synergy.summary()` objects (meta + samples + actuators), rewritten
atomically after every build; `load_index` refuses an index that names a missing file. Building is
parallel over processes (`concurrent.futures`, one job per nominal), the caller shows progress.

Biped and exoskeleton libraries also hold the transitions between neighbouring nominals
(transitions.py): files ``transitions/NAME.npz`` (format.StoredTransition) and their index
``transitions.json`` (a JSON array of `StoredTransition.summary()`: from, to, d_max as
zmp_max_deviation, eps, accepted, min_margin, ...), computed by the same build after the nominals.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterator

from . import biped, jansen, transitions
from .format import StoredTransition, Synergy, SynergyError, _jsonable, load, load_transition, save, save_transition

INDEX = "index.json"
TRANSITIONS = "transitions"  # the folder of transition files; its index is TRANSITIONS + ".json"
BUILDERS = {"jansen": (jansen.jobs, jansen.build), "biped": (biped.jobs, transitions.nominal_job),
            "exoskeleton": (biped.jobs, transitions.nominal_job)}


def load_index(folder: Path, index: str = INDEX) -> list[dict]:
    """The library's index entries; SynergyError if the folder or its index is missing or bad."""
    p = Path(folder) / index
    try:
        entries = json.loads(p.read_text())
    except FileNotFoundError:
        raise SynergyError(f"{folder}: no synergy library here (no {index}; run `walklab synergies build`)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SynergyError(f"{p}: unreadable index ({e})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        raise SynergyError(f"{p}: expected a JSON array of objects with a name")
    return entries


def write_index(folder: Path, entries: list[dict], index: str = INDEX) -> None:
    p = Path(folder) / index
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps([_jsonable(e) for e in sorted(entries, key=lambda e: e["name"])], indent=1))
    tmp.replace(p)


def get(folder: Path, name: str) -> Synergy:
    """The nominal called name; SynergyError naming the library if it has none."""
    names = [e["name"] for e in load_index(folder)]
    if name not in names:
        raise SynergyError(f"{folder}: no nominal {name!r} ({len(names)} in the library; `walklab synergies list`)")
    return load(Path(folder) / f"{name}.npz")


def load_all(folder: Path) -> list[Synergy]:
    """Every nominal of the library (the controller loads them once at start)."""
    return [load(Path(folder) / f"{e['name']}.npz") for e in load_index(folder)]


def transition_index(folder: Path) -> list[dict]:
    """The library's transition entries (module doc); [] where it has none (a Jansen library, or one
    built before transitions were stored)."""
    if not (Path(folder) / f"{TRANSITIONS}.json").exists():
        return []
    return load_index(folder, f"{TRANSITIONS}.json")


def load_transitions(folder: Path) -> list[StoredTransition]:
    """Every stored transition of the library, accepted or not (the controller loads them at start)."""
    return [load_transition(Path(folder) / TRANSITIONS / f"{e['name']}.npz") for e in transition_index(folder)]


def build(cfg, jobs: int = 1, progress: Callable[[int, int, str], None] | None = None) -> tuple[list[str], list[str]]:
    """Build every nominal of a robot config's grid into cfg.library with `jobs` processes.

    Returns (written names, skipped names: optimised profiles that did not beat constant, or biped
    grid points without a periodic trunk). progress(done, total, name) is called after each nominal
    and, for a biped or exoskeleton, after each transition between neighbours (`build_transitions`).
    """
    if cfg.robot not in BUILDERS:
        raise SynergyError(f"{cfg.source}: robot = {cfg.robot!r}: no nominal generator for this robot kind yet "
                           f"(available: {', '.join(BUILDERS)})")
    if not isinstance(jobs, int) or jobs < 1:
        raise SynergyError(f"--jobs: expected an integer >= 1, got {jobs!r}")
    make_jobs, run = BUILDERS[cfg.robot]
    specs = make_jobs(cfg)
    folder = Path(cfg.library)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        entries = {e["name"]: e for e in load_index(folder)}
    except SynergyError:
        entries = {}
    written, skipped = [], []
    made = {}  # biped kinds: name -> (job, Synergy, BipedNominal) for the transitions
    pairs = transitions.pairs(specs) if cfg.robot != "jansen" else []
    total = len(specs) + len(pairs)
    for i, (spec, syn) in enumerate(_run(run, specs, jobs), 1):
        if isinstance(syn, tuple):
            made[spec["name"]] = (spec, *syn)
            syn = syn[0]
        if syn is None:
            skipped.append(spec["name"])
            entries.pop(spec["name"], None)
        else:
            save(syn, folder / f"{syn.name}.npz")
            entries[syn.name] = syn.summary()
            written.append(syn.name)
        write_index(folder, list(entries.values()))
        if progress:
            progress(i, total, spec["name"])
    if pairs:
        build_transitions(folder, pairs, made, lambda k, name: progress and progress(len(specs) + k, total, name))
    return written, skipped


def build_transitions(folder: Path, pairs: list[tuple[dict, dict]], made: dict,
                      progress: Callable[[int, str], None] | None = None) -> None:
    """Compute and store the transition of every neighbour pair (transitions.py) whose two nominals
    were built (`made`: name -> (job, Synergy, BipedNominal)); a pair with a skipped nominal loses its
    stored transition. The transition index is rewritten after each. In this process: a transition
    takes well under a second (no shooting), a nominal many seconds."""
    sub = Path(folder) / TRANSITIONS
    sub.mkdir(exist_ok=True)
    entries = {e["name"]: e for e in transition_index(folder)}
    specs, gone = [], []
    for a, b in pairs:
        name = transitions.name_of(a["name"], b["name"])
        if a["name"] in made and b["name"] in made:
            specs.append({"name": name, "eps": transitions.EPS, "from": made[a["name"]], "to": made[b["name"]]})
        else:
            gone.append(name)
            if entries.pop(name, None) is not None:
                (sub / f"{name}.npz").unlink(missing_ok=True)
    write_index(folder, list(entries.values()), f"{TRANSITIONS}.json")
    if progress and gone:
        progress(len(gone), gone[-1])
    for k, spec in enumerate(specs, len(gone) + 1):
        tr = transitions.build(spec)
        save_transition(tr, sub / f"{tr.name}.npz")
        entries[tr.name] = tr.summary()
        write_index(folder, list(entries.values()), f"{TRANSITIONS}.json")
        if progress:
            progress(k, spec["name"])


def _run(fn, specs: list[dict], jobs: int) -> Iterator[tuple[dict, Synergy | None]]:
    if jobs == 1:
        for s in specs:
            yield s, fn(s)
        return
    # one BLAS thread per worker: the workers already use every core asked for
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(fn, s): s for s in specs}
        for f in as_completed(futs):
            yield futs[f], f.result()
