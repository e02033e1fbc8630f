"""Compiled (numba) kernels of the dynamics, and the switch to the numpy reference path.

`enabled()` says which path the algorithms take: the compiled kernels (default) or the numpy path
(dynamics/codegen.py, the reference), chosen by the environment variable ``WALKLAB_JIT=0`` at
import or by `use_jit(False)` in a ``with`` block (tests run both). Every kernel has one
signature (C-contiguous float64 / int64 arrays) compiled on first use and cached on disk by numba
(``cache=True``, next to the source, or under NUMBA_CACHE_DIR): a later process loads it instead
of compiling. The first compile in a process prints one line on standard error; `compile_all()`
(``walklab model compile``) warms the cache ahead of time. Further compilation is disabled once a
kernel has its signature, so a wrongly typed call is a TypeError, never a silent second compile.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

ENV = "WALKLAB_JIT"
_enabled = os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _array(ndim: int, out: bool = False, dtype: str = "float64"):
    """C-contiguous array type; inputs are typed read-only, which writable arrays also match."""
    from numba import types

    return types.Array(getattr(types, dtype), ndim, "C", readonly=not out)


def _signatures() -> dict:
    """module.function -> signature (the arguments as the Python wrappers pass them)."""
    from numba import types

    I2, F1, F2, F3 = _array(2, dtype="int64"), _array(1), _array(2), _array(3)
    O2, O3, O4 = _array(2, True), _array(3, True), _array(4, True)
    i64 = types.int64
    return {
        "tree.rnea": i64(I2, F2, F1, F2, F2, F2, F3, O2, O2),
        "tree.rnea_parallel": i64(I2, F2, F1, F2, F2, F2, F3, O2, O2),
        "tree.rnea_one": i64(I2, F2, _array(1, True), F1, F1, F1, _array(1, True)),
        "tree.crba": i64(I2, F2, F2, O3),
        "tree.aba": i64(I2, F2, F1, F2, F2, F2, F3, O2),
        "tree.kinematics": i64(I2, F2, F2, F2, F2, O4, O3, O3, O3, O3),
        "ground.contact_forces": types.none(i64, F1, i64, F1, F2, F2, F3, F3, _array(1, True, "boolean"),
                                            _array(1, True), _array(1, True), _array(1, True), _array(1, True), O2,
                                            O3, O3, O2, O2, _array(2, True, "boolean"), _array(2, True, "boolean")),
        "ground.contact_wrench": types.none(F3, F3, F3, _array(1, dtype="int64"), O3, O3),
        "ground.zmp_of_wrench": types.none(F2, F2, types.float64, types.float64, O2, _array(1, True, "boolean")),
        "ground.plate_id": types.none(
            _array(4), F3, F3, F2, F1, F2, _array(1, dtype="int64"), F2, _array(1, dtype="int64"), F2,
            F3, _array(2, dtype="boolean"), F2, F2, _array(1, dtype="int64"), F1, types.float64, types.float64,
            F1, O3, _array(3, True, "boolean"), _array(3, True, "boolean"), _array(2, True, "boolean"), O3,
            _array(3, True, "boolean"), O3, O3),
        "ground.plate_process": types.none(F2, F1, F1, _array(1, dtype="int64"), types.float64, O2,
                                           _array(1, True, "boolean"), _array(1, True, "boolean")),
        "ground.stage": types.none(i64, F1, i64, F1, F1, F3, F3, _array(1, True, "boolean"), _array(1, True),
                                   _array(1, True), _array(1, True), _array(1, True), F1, F2, F3, F2, F2, I2, O3,
                                   _array(3, True, "boolean"), O2, O2, _array(1, True), _array(1, True, "int64"), O3,
                                   _array(3, True, "boolean"), O2, _array(2, True, "boolean")),
        "ground.plate_combine": types.none(F2, F2, types.float64, types.float64, O2, _array(1, True, "boolean")),
        "ground.support_margin": i64(F3, _array(2, dtype="boolean"), F2, types.float64, _array(1, True),
                                     _array(1, True, "int64")),
        "world.jansen_contact": types.none(i64, F1, i64, F1, F3, _array(1, dtype="int64"), F1, F1, F1, F1, F1, F1,
                                           O2, O2, O2, _array(1, True), O3, _array(1, True)),
        "walker.inverse": types.none(i64, F1, i64, F1, F3, types.float64, _array(1, dtype="int64"), F1, F1, F1, F1,
                                     F3, F2, F2, F2, F2, F2, F3, types.float64, types.float64, O3, O3,
                                     _array(2, True, "boolean"), O2, O2, O2, O2, _array(1, True, "boolean"),
                                     _array(1, True), _array(1, True, "int64"), _array(1, True)),
        "walker.interp": i64(_array(1, dtype="int64"), F2, _array(1, dtype="int64"), O2, _array(1, True, "boolean")),
        "markers.segment_fits": types.none(F3, _array(2, dtype="int64"), F3, _array(1, dtype="int64"), F2, O4, O3,
                                           O2),
        "markers.joint_coordinates": types.none(_array(4), F3, i64, I2, F2, F2, _array(1, dtype="int64"), F1, O2),
        "markers.joint_rates": types.none(F2, types.float64, I2, _array(1, dtype="int64"), O2, O2),
        "marker_id.fill": types.none(F2, F2, F2, _array(1, dtype="int64"), _array(1, dtype="int64"), F1,
                                     _array(2, True, "boolean"), O2, O2, O2),
        "marker_id.finish": types.none(
            _array(4), F3, _array(1, dtype="int64"), F2, _array(1, dtype="int64"), F2, F2, _array(1, dtype="int64"),
            types.float64, types.float64, types.float64, F3, _array(3, dtype="boolean"), _array(2, dtype="boolean"),
            _array(2, dtype="boolean"), _array(2, dtype="boolean"), _array(2, dtype="boolean"),
            _array(2, dtype="boolean"), _array(2, dtype="boolean"), _array(2, dtype="boolean"), F2, F2, F2, F2,
            _array(2, True, "boolean"), O2, O2, O2, O2),
    }


SIGNATURES = _signatures()

_ready: dict[str, Callable] = {}

# From this many samples in one call, aba and the kinematics take the numpy path even when the
# kernels are enabled: its column kernels (one numpy call per scalar operation whatever N) then
# match or beat their compiled per-sample recursion on human15 (aba in the local-scalar form: CPU
# 8.5 against 15.6 µs per sample at 512 samples, 8.4 against 8.6 at 4096, 9.2 against 7.2 at
# 20 000; docs/kernels.md). rnea and crba (whose kernels keep each body's step in local scalars;
# rnea's centroidal output serves com, centroidal_momentum, zmp_model) and the ground stage are
# faster compiled at every N.
NUMPY_BATCH_FROM = 512


def enabled() -> bool:
    """True when the algorithms run the compiled kernels, False on the numpy path."""
    return _enabled


def tree_compiled(n: int) -> bool:
    """Whether aba and the kinematics run a call of n samples compiled."""
    return _enabled and n < NUMPY_BATCH_FROM


@contextmanager
def use_jit(flag: bool) -> Iterator[None]:
    """Run the block on the compiled kernels (True) or on the numpy path (False)."""
    global _enabled
    old, _enabled = _enabled, bool(flag)
    try:
        yield
    finally:
        _enabled = old


def _dispatcher(name: str):
    import importlib

    module, func = name.split(".")
    return getattr(importlib.import_module(f"{__name__}.{module}"), func)


def cached_on_disk(name: str) -> bool:
    """Whether numba's on-disk cache index of kernel `name` exists (a load, not a compile, is
    likely; a changed source still recompiles)."""
    try:
        return os.path.exists(_dispatcher(name)._cache._cache_file._index_path)
    except AttributeError:        # numba internals moved: assume a compile
        return False


def kernel(name: str) -> Callable:
    """The compiled kernel `name` (a key of SIGNATURES), loaded from numba's cache or compiled
    on first use in the process (one line on standard error when it compiles)."""
    k = _ready.get(name)
    if k is None:
        k = _ready[name] = _prepare(name, announce=True)
    return k


def entry(name: str) -> Callable:
    """The machine-code entry of kernel `name` without numba's type dispatch (~0.6 µs less per
    call of nine arrays). It does not check its arguments' types: only for callers that pass
    exactly the signature's C-contiguous float64 / int64 arrays (the one-sample wrappers)."""
    k = _entries.get(name)
    if k is None:
        d = kernel(name)
        k = _entries[name] = getattr(d.overloads.get(d.signatures[0]), "entry_point", d)
    return k


_entries: dict[str, Callable] = {}


# Kernel modules that inline code of other source files, which numba's cache does not watch (it
# checks only the kernel's own file): the tree kernels inline every joint type (dynamics/joints),
# the walker, world and marker_id kernels ground.py's helpers. Paths relative to the dynamics package.
_INLINED = {"tree": ("joints",), "walker": ("kernels/ground.py",), "world": ("kernels/ground.py",),
            "marker_id": ("kernels/ground.py",)}


def _drop_stale_cache(name: str) -> None:
    """Remove numba's cache index of kernel `name` if a source file it inlines is newer than the
    index, so that the kernel is compiled from the current sources instead of loaded stale."""
    from pathlib import Path

    deps = _INLINED.get(name.split(".")[0])
    if not deps:
        return
    try:
        index = Path(_dispatcher(name)._cache._cache_file._index_path)
        built = index.stat().st_mtime
    except (AttributeError, OSError):       # numba internals moved, or nothing cached yet
        return
    package = Path(__file__).resolve().parents[1]
    files = [f for d in deps for f in ((package / d).glob("*.py") if (package / d).is_dir() else [package / d])]
    if any(f.stat().st_mtime > built for f in files):
        try:
            index.unlink()
        except OSError:                      # another process removed it first
            pass


def _prepare(name: str, announce: bool) -> Callable:
    d = _dispatcher(name)
    if not d.signatures:
        _drop_stale_cache(name)
        if announce and not cached_on_disk(name):
            print(f"walklab: compiling dynamics kernel {name} (once; numba caches it on disk, "
                  "`walklab model compile` warms the cache)", file=sys.stderr, flush=True)
        d.compile(SIGNATURES[name])
        d.disable_compile()
    return d


def compile_all(progress: Callable[[str, float, bool], None] | None = None) -> list[tuple[str, float, bool]]:
    """Load or compile every kernel; returns (name, seconds, compiled rather than loaded) each,
    calling progress(name, seconds, compiled) after each."""
    out = []
    for name in SIGNATURES:
        t0 = time.perf_counter()
        d = _prepare(name, announce=False)
        _ready[name] = d
        compiled = sum(d.stats.cache_misses.values()) > 0
        out.append((name, time.perf_counter() - t0, compiled))
        if progress is not None:
            progress(*out[-1])
    return out
