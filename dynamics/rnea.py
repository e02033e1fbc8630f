"""Recursive Newton–Euler inverse dynamics of a tree, batched over time (methods.md b.1).

    τ = M(q) a + C(q, v) v + g(q) − Σ_e J_eᵀ w_e

Local-frame recursion (Pinocchio's, Featherstone's notation; spatial vectors (linear, angular)
expressed in each segment frame, spatial.py), gravity entering as the base acceleration (−g, 0):

    forward  v_i = ⁱX_p v_p + v_J,         v_J = S_i v[i]   (v[i]: the joint's velocity block)
             a_i = ⁱX_p a_p + S_i a[i] + c_J + v_i × v_J
             f_i = Y_i a_i + v_i ×* (Y_i v_i)
    backward τ_i = S_iᵀ f_i,   f_p += ᵖX_i* f_i

External wrenches enter as τ −= Σ_e Σ_{k supports e} S_kᵀ w_e with S and w_e in the lab frame
(kinematics.py), i.e. −J_eᵀ w_e. For a free flyer, τ's six entries are the residual base wrench
(force, moment about the base origin) in the base frame, which vanishes when every external load
is measured; this is pinocchio.rnea's output for all joint types.

Speed: by default the compiled kernel (kernels/tree.py `rnea`, the same recursion over the model's
tables, a loop over samples in compiled code) runs: `rnea_one` for one sample without external
wrenches (straight from the arguments when they are the last model's float64 C-contiguous arrays), `rnea_parallel` over the cores from PARALLEL_FROM samples; external wrenches enter it as
f_i −= w_i in the body frame, and it checks that q, v, a are finite (the Python side only the shapes). The numpy path (kernels.enabled() False, ``WALKLAB_JIT=0``), the reference, unrolls
the recursion once per model into straight-line Python (codegen.py: constants folded, so zero
offsets, axis-aligned joints and massless segments cost nothing), run on float scalars for a single
sample and on (N,) component arrays for a batch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .codegen import (ZERO, Code, compiled, const, dot6, joint_motion, joint_transform, mul, rot, rotT, run, subspace,
                      vadd, vcross, vneg)
from . import kernels, workspace
from .joints import normalized_configuration
from .kinematics import as_batch, check_state, kernel_input_failed, kernel_state, tree_state
from .model import Model
from .spatial import cross

CHUNK = 4096  # samples per block: bounds memory and keeps the working set in cache
# From this many samples a compiled rnea call runs over the cores (kernels/tree.py rnea_parallel);
# below, the start of the threads costs more than it saves (docs/kernels.md)
PARALLEL_FROM = 1024
_threads_pid: int | None = None     # the process whose numba (GNU OpenMP) threads rnea_parallel started


def _may_run_parallel() -> bool:
    """Whether this process may run rnea_parallel: not in a child forked (ProcessPoolExecutor's
    default on Linux) after the parent started numba's OpenMP threads — GNU OpenMP cannot run there
    and numba terminates the child ("fork() called from a process already using GNU OpenMP")."""
    global _threads_pid
    if _threads_pid is None:
        _threads_pid = os.getpid()
    return _threads_pid == os.getpid()


@dataclass(frozen=True, eq=False)
class Wrench:
    """An external wrench acting ON a segment (e.g. a ground reaction), lab frame.

    segment: segment name. force: (3,) or (N, 3) N. point: (3,) or (N, 3) m, where the force is
    applied (e.g. a force plate's centre of pressure). moment: (3,) or (N, 3) N·m, free moment
    (default 0). For a force plate that measures the wrench the foot applies to the plate
    (F_plate, free moment T_z about the vertical at the COP), the wrench on the foot is
    ``Wrench(foot, force=-F_plate, point=cop, moment=(0, 0, -T_z))`` (methods.md b.1).
    """

    segment: str
    force: np.ndarray
    point: np.ndarray
    moment: np.ndarray | tuple = (0.0, 0.0, 0.0)


def external_wrenches(model: Model, f_ext: Sequence[Wrench] | None, N: int,
                      batched: bool) -> list[tuple[int, np.ndarray]]:
    """Validate f_ext and turn each wrench into (segment index, (N, 6) force about the lab origin)."""
    out = []
    for k, w in enumerate(f_ext or ()):
        if not isinstance(w, Wrench):
            raise TypeError(f"f_ext[{k}]: expected a dynamics.Wrench, got {type(w).__name__}")
        if w.segment not in model.index:
            raise ValueError(f"f_ext[{k}]: model {model.name!r} has no segment {w.segment!r}")
        arrs = []
        for name in ("force", "point", "moment"):
            x, b = as_batch(getattr(w, name), f"f_ext[{k}].{name}", 3)
            if b and (not batched or x.shape[0] != N):
                raise ValueError(f"f_ext[{k}].{name}: shape {x.shape} does not match q "
                                 f"({'N = ' + str(N) if batched else 'one sample: give (3,)'})")
            arrs.append(np.broadcast_to(x, (N, 3)))
        F, P, T = arrs
        out.append((model.index[w.segment], np.concatenate((F, cross(P, F) + T), axis=-1)))
    return out


def _generate(model: Model) -> str:
    code = Code()
    q = [f"q{k}" for k in range(model.nq)]
    v = [f"v{k}" for k in range(model.nv)]
    a = [f"a{k}" for k in range(model.nv)]
    n = len(model.segments)
    motion, joint, f = [None] * n, [None] * n, [None] * n
    for i, s in enumerate(model.segments):
        j, p = s.joint, model.parents[i]
        if p < 0:
            vp = wp = alp = ZERO
            ap = const(-model.gravity)              # gravity as a base acceleration
        else:
            vp, wp, ap, alp = motion[p]
        R0, t0 = const(j.rotation), const(j.translation)
        # into the placement frame
        w1 = code.vec(rotT(R0, wp))
        v1 = code.vec(rotT(R0, vadd(vp, vcross(wp, t0))))
        al1 = code.vec(rotT(R0, alp))
        a1 = code.vec(rotT(R0, vadd(ap, vcross(alp, t0))))
        iq, iv = model.idx_q[i], model.idx_v[i]
        RJ, tJ = joint_transform(code, j, q[iq:iq + j.nq])
        tJ = code.vec(tJ)
        vJ, aJ = joint_motion(code, j, RJ, v[iv:iv + j.nv], a[iv:iv + j.nv])
        # through the joint, plus the joint's own motion: v_i = X v_p + v_J,
        # a_i = X a_p + a_J + v_i × v_J with v_i × v_J = (X v_p) × v_J
        wX = code.vec(rotT(RJ, w1))
        vX = code.vec(rotT(RJ, vadd(v1, vcross(w1, tJ))))
        w2, v2 = code.vec(vadd(wX, vJ[1])), code.vec(vadd(vX, vJ[0]))
        al2 = code.vec(vadd(rotT(RJ, al1), aJ[1], vcross(wX, vJ[1])))
        a2 = code.vec(vadd(rotT(RJ, vadd(a1, vcross(al1, tJ))), aJ[0], vcross(wX, vJ[0]), vcross(vX, vJ[1])))
        motion[i] = (v2, w2, a2, al2)
        joint[i] = (R0, t0, RJ, tJ)
        if s.mass > 0:
            # f = Y a + v ×* (Y v), Y v = (m (v − c × ω), I_c ω + c × (Y v)_lin)
            m, c, Ic = float(s.mass), const(s.com), const(s.inertia)
            hl = code.vec([mul(m, x) for x in vadd(v2, vneg(vcross(c, w2)))])
            ha = code.vec(vadd(rot(Ic, w2), vcross(c, hl)))
            fl = code.vec([mul(m, x) for x in vadd(a2, vneg(vcross(c, al2)))])
            fa = vadd(rot(Ic, al2), vcross(c, fl))
            f[i] = [code.vec(vadd(fl, vcross(w2, hl))), code.vec(vadd(fa, vcross(w2, ha), vcross(v2, hl)))]
        else:
            f[i] = [ZERO, ZERO]
    tau: list = [None] * model.nv
    for i in reversed(range(n)):
        j, p = model.segments[i].joint, model.parents[i]
        fl, fa = f[i]
        R0, t0, RJ, tJ = joint[i]
        iv = model.idx_v[i]
        for k, col in enumerate(subspace(j, RJ)):          # τ = Sᵀ f
            tau[iv + k] = dot6(col, (fl, fa))
        if p >= 0:        # f_p += ᵖX_i* f_i: through the joint, then the placement
            fl2 = code.vec(rot(RJ, fl))
            fa2 = vadd(rot(RJ, fa), vcross(tJ, fl2))
            fl1 = code.vec(rot(R0, fl2))
            fa1 = vadd(rot(R0, fa2), vcross(t0, fl1))
            f[p] = [code.vec(vadd(f[p][0], fl1)), code.vec(vadd(f[p][1], fa1))]
    return code.function("rnea", {"q": q, "v": v, "a": a}, tau)


def segment_wrenches(d: workspace.Data, ext: list[tuple[int, np.ndarray]], N: int) -> np.ndarray:
    """The compiled kernels' external-force argument: (N, nseg, 6) summed wrench on each segment
    about the lab origin, or the workspace's (0, nseg, 6) when there is none."""
    if not ext:
        return d.no_ext
    F = np.zeros((N, d.itab.shape[0], 6))
    for i, w in ext:
        F[:, i] += w
    return F


@dataclass(frozen=True, eq=False)
class _OneSample:
    """What the one-sample fast path of `rnea` needs, resolved once: the model, its workspace, the
    kernel's entry point (no type dispatch), its constant arguments and the shapes of q and v."""

    model: Model | None = None
    data: workspace.Data | None = None
    kernel: object = None
    itab: np.ndarray | None = None
    ftab: np.ndarray | None = None
    work: np.ndarray | None = None
    q_shape: tuple = ()
    v_shape: tuple = ()
    nv: int = 0


# the last model run through the one-sample kernel: its next call skips the workspace look-up,
# kernel_state's conversions and numba's type dispatch (a tuple-like frozen object, replaced
# whole, so threads read a consistent one)
_one = _OneSample()
_NDARRAY, _F64, _STRIDE = np.ndarray, np.dtype(np.float64), (8,)


def rnea(model: Model, q, v, a, f_ext: Sequence[Wrench] | None = None, data: workspace.Data | None = None) -> np.ndarray:
    """Joint torques τ ([N,] nv) for q ([N,] nq), v, a ([N,] nv) under gravity model.gravity and
    external wrenches f_ext (a sequence of `Wrench`, lab frame; each force/point/moment (3,) or
    (N, 3)). Units: N·m for revolute coordinates, N for prismatic ones; a free flyer's six
    entries are the residual base wrench (force, moment about the base origin) in the base frame.
    Equals pinocchio.rnea (with the same external forces). data: the model's workspace (default
    workspace.data(model)).
    """
    one = _one
    # fast path: one sample of the last model, already 1-D C-contiguous float64 ndarrays of the
    # right lengths (a stride of 8 bytes on one axis is C-contiguous), which is exactly the
    # kernel's signature, so its entry point may be called without numba's checks (docs/kernels.md)
    if (one.model is model and f_ext is None and (data is None or data is one.data) and kernels.enabled()
            and q.__class__ is _NDARRAY and v.__class__ is _NDARRAY and a.__class__ is _NDARRAY
            and q.dtype is _F64 and v.dtype is _F64 and a.dtype is _F64
            and q.shape == one.q_shape and v.shape == one.v_shape and a.shape == one.v_shape
            and q.strides == _STRIDE and v.strides == _STRIDE and a.strides == _STRIDE):
        tau = np.empty(one.nv)
        status = one.kernel(one.itab, one.ftab, one.work, q, v, a, tau)
        if status != -1:
            kernel_input_failed(model, status, q, v, a)   # raises, naming the non-finite entry or the q block
        return tau
    if v is None or a is None:
        raise ValueError("rnea needs q, v and a")
    if kernels.enabled():
        # the kernel checks finiteness (one pass over data it reads anyway); here only the shapes
        Q, V, A, batched = kernel_state(model, q, v, a)
        d = workspace.data(model, data)
        if not (batched or f_ext):    # the one-sample kernel, called without numba's type dispatch
            tau = np.empty(model.nv)
            kernel = kernels.entry("tree.rnea_one")
            status = kernel(d.itab, d.ftab, d.rnea_work, Q, V, A, tau)
            if status != -1:
                kernel_input_failed(model, status, q, v, a)
            _remember_one(model, d, kernel)
            return tau
        if not batched:
            Q, V, A = Q[None], V[None], A[None]
        N = Q.shape[0]
        F = segment_wrenches(d, external_wrenches(model, f_ext, N, batched), N) if f_ext else d.no_ext
        tau = np.empty((N, model.nv))
        # a large batch over the cores
        parallel = N >= PARALLEL_FROM and _may_run_parallel()
        kernel = kernels.kernel("tree.rnea_parallel") if parallel else kernels.entry("tree.rnea")
        status = kernel(d.itab, d.ftab, d.gravity, Q, V, A, F, tau, d.no_cent)
        if status != -1:
            kernel_input_failed(model, status, q, v, a)
        return tau if batched else tau[0]
    (q, v, a), batched = check_state(model, q, v, a)
    N = q.shape[0]
    ext = external_wrenches(model, f_ext, N, batched)
    q = normalized_configuration(model, q)
    kernel = compiled(model, "rnea", _generate, data)
    tau = np.empty((N, model.nv))
    for s in range(0, N, CHUNK):
        tau[s:s + CHUNK] = run(kernel, [q[s:s + CHUNK], v[s:s + CHUNK], a[s:s + CHUNK]], model.nv)
    if ext:
        tau -= external_generalized_forces(model, q, ext)
    return tau if batched else tau[0]


def _remember_one(model: Model, d: workspace.Data, kernel) -> None:
    """Make `model` (with workspace d) the one that rnea's one-sample fast path serves."""
    global _one
    if _one.model is not model or _one.data is not d:
        _one = _OneSample(model, d, kernel, d.itab, d.ftab, d.rnea_work, (model.nq,), (model.nv,), model.nv)


def external_generalized_forces(model: Model, q: np.ndarray, ext: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """Σ_e J_eᵀ w_e (N, nv): column k gets S_k · w_e for every wrench on a segment it supports."""
    out = np.zeros((q.shape[0], model.nv))
    for s in range(0, q.shape[0], CHUNK):
        S = tree_state(model, q[s:s + CHUNK]).S
        for i, w in ext:
            out[s:s + CHUNK] += np.einsum("nkj,nj->nk", S, w[s:s + CHUNK]) * model.supports[i, model.dof_segment]
    return out


def nonlinear_effects(model: Model, q, v, f_ext: Sequence[Wrench] | None = None,
                      data: workspace.Data | None = None) -> np.ndarray:
    """h(q, v) = C(q, v) v + g(q) − Σ J_eᵀ w_e = rnea(q, v, 0), ([N,] nv)."""
    return rnea(model, q, v, np.zeros(np.shape(v)), f_ext, data)


def generalized_gravity(model: Model, q, data: workspace.Data | None = None) -> np.ndarray:
    """g(q) = rnea(q, 0, 0), ([N,] nv): joint torques holding the model still under gravity."""
    z = np.zeros(np.shape(q)[:-1] + (model.nv,))
    return rnea(model, q, z, z, data=data)
