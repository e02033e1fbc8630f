"""A synergy library: a folder of nominal files (format.py) and ``index.json``, one entry per nominal.

The index is a JSON array of `Synergy.summary()` objects (meta + samples + actuators), rewritten
atomically after every build; `load_index` refuses an index that names a missing file. Building is
parallel over processes (`concurrent.futures`, one job per nominal), the caller shows progress.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterator

from . import biped, jansen
from .format import Synergy, SynergyError, _jsonable, load, save

INDEX = "index.json"
BUILDERS = {"jansen": (jansen.jobs, jansen.build), "biped": (biped.jobs, biped.build),
            "exoskeleton": (biped.jobs, biped.build)}


def load_index(folder: Path) -> list[dict]:
    """The library's index entries; SynergyError if the folder or its index is missing or bad."""
    p = Path(folder) / INDEX
    try:
        entries = json.loads(p.read_text())
    except FileNotFoundError:
        raise SynergyError(f"{folder}: no synergy library here (no {INDEX}; run `walklab synergies build`)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SynergyError(f"{p}: unreadable index ({e})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        raise SynergyError(f"{p}: expected a JSON array of objects with a name")
    return entries


def write_index(folder: Path, entries: list[dict]) -> None:
    p = Path(folder) / INDEX
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


def build(cfg, jobs: int = 1, progress: Callable[[int, int, str], None] | None = None) -> tuple[list[str], list[str]]:
    """Build every nominal of a robot config's grid into cfg.library with `jobs` processes.

    Returns (written names, skipped names: optimised profiles that did not beat constant).
    progress(done, total, name) is called after each nominal.
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
    for i, (spec, syn) in enumerate(_run(run, specs, jobs), 1):
        if syn is None:
            skipped.append(spec["name"])
            entries.pop(spec["name"], None)
        else:
            save(syn, folder / f"{syn.name}.npz")
            entries[syn.name] = syn.summary()
            written.append(syn.name)
        write_index(folder, list(entries.values()))
        if progress:
            progress(i, len(specs), spec["name"])
    return written, skipped


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
