"""Forward kinematics of a tree model, batched over time: segment placements, spatial velocities
and accelerations, markers and contact points with their Jacobians.

Every function takes q of shape (nq,) or (N, nq) (v: (nv,) / (N, nv), a likewise; time first)
and returns arrays with the same leading shape (no N axis for a single sample). Results are in
the lab frame (z up; planar models x forward, y up). The computation loops over the segments,
never over samples.

Formulation (lab frame, spatial vectors (linear, angular) about the lab origin, spatial.py):
each velocity coordinate k of the joint of segment j has a motion subspace column S_k (6,);
segment velocities and accelerations are sums over the joints supporting the segment,

    v_i = Σ_{k ∈ support(i)} S_k v_k
    a_i = Σ_{k ∈ support(i)} (S_k a_k + (v_c(k) × S_k) v_k)

with v_c(k) the velocity of the body S_k is fixed in (the child, or the parent for the planar
joint's translations). The velocity of a point P of segment i is v_O,i + ω_i × P, its
acceleration a_O,i + α_i × P + ω_i × (v_O,i + ω_i × P).

Placements, S_k, and the segment velocities and accelerations come from the compiled kernel
(kernels/tree.py `kinematics`), or on the numpy path (kernels.enabled() False) from straight-line
code unrolled per model (codegen.py, kernels fk / fkv / fka), like rnea.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .codegen import ZERO, Code, add, compiled, const, joint_transform, matmul, mul, rot, run, subspace, vadd, vcross
from . import kernels, workspace
from .joints import fixed_in_parent, normalized_configuration
from .model import Model
from .spatial import cross, matvec, parallel_axis


def as_batch(x, name: str, width: int) -> tuple[np.ndarray, bool]:
    """(N, width) float array from (width,) or (N, width) input, and whether it was batched.

    ValueError naming the argument on a wrong shape or a non-finite value.
    """
    a = np.asarray(x, dtype=float)
    if a.ndim == 1 and a.shape[0] == width:
        a, batched = a[None], False
    elif a.ndim == 2 and a.shape[1] == width:
        batched = True
    else:
        raise ValueError(f"{name}: expected shape ({width},) or (N, {width}), got {a.shape}")
    if not all_finite(a):
        n, k = np.argwhere(~np.isfinite(a))[0]
        raise ValueError(f"{name}: non-finite value (NaN or inf) at sample {n}, coordinate {k}")
    return a, batched


def all_finite(a: np.ndarray) -> bool:
    """Whether every entry of the float array a is finite: the sum first, one cheap pass (on a
    Python list for a few values, where a numpy reduction costs microseconds), the entries only
    when the sum is not finite (a NaN or inf, or finite values overflowing)."""
    if a.size <= 64:
        total = sum(a.ravel().tolist())
    else:
        with np.errstate(over="ignore", invalid="ignore"):    # inf − inf in the sum: not a warning
            total = a.sum()
    return math.isfinite(total) or bool(np.all(np.isfinite(a)))


def check_state(model: Model, q, v=None, a=None, a_name: str = "a") -> tuple[list[np.ndarray | None], bool]:
    """Validate q (nq), v, a (nv) (single or (N, ·), same N; a is called `a_name` in errors, e.g.
    "tau"); returns ([q, v, a] as (N, ·) arrays or None, batched)."""
    out, batched, N = [], None, None
    for x, name, width in ((q, "q", model.nq), (v, "v", model.nv), (a, a_name, model.nv)):
        if x is None:
            out.append(None)
            continue
        arr, b = as_batch(x, name, width)
        if batched is None:
            batched, N = b, arr.shape[0]
        elif b != batched or arr.shape[0] != N:
            raise ValueError(f"{name}: shape {np.shape(x)} does not match q's "
                             f"{'(N, ·) with N = ' + str(N) if batched else 'single sample'}")
        out.append(arr)
    return out, bool(batched)


def kernel_state(model: Model, q, v, a, a_name: str = "a") -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """q (nq), v, a (nv) (single or (N, ·)) as C-contiguous float64 arrays of the same shapes and
    whether they were batched, for a compiled kernel that checks finiteness itself (its status −2 − s; then
    `kernel_input_failed` names the argument). Only the shapes are checked here, in a few
    attribute look-ups; anything unusual goes through check_state and its clear errors."""
    Q = np.ascontiguousarray(q, dtype=np.float64)
    V = np.ascontiguousarray(v, dtype=np.float64)
    A = np.ascontiguousarray(a, dtype=np.float64)
    nv = model.nv
    if Q.ndim == 1:
        if Q.shape[0] == model.nq and V.shape == (nv,) and A.shape == (nv,):
            return Q, V, A, False
    elif Q.ndim == 2 and Q.shape[1] == model.nq and V.shape == (Q.shape[0], nv) and A.shape == V.shape:
        return Q, V, A, True
    (q, v, a), batched = check_state(model, q, v, a, a_name)    # raises naming the argument
    if not batched:
        q, v, a = q[0], v[0], a[0]
    return contiguous(q), contiguous(v), contiguous(a), batched


def kernel_input_failed(model: Model, status: int, q, v, a, a_name: str = "a", pivot: bool = False) -> None:
    """Raise the clear error after a tree kernel stopped with `status` on the inputs q, v, a as
    the caller gave them: −2 − s a non-finite entry of sample s (check_state names the argument
    and coordinate), s · nseg + segment a unit block of q off norm (named as on the numpy path).
    With pivot (aba) a status ≥ 0 may also be a singular pivot: returns then, for the caller."""
    check_state(model, q, v, a, a_name)
    normalized_configuration(model, np.atleast_2d(np.asarray(q, dtype=float)))
    if not (pivot and status >= 0):
        raise AssertionError(f"a compiled kernel refused input that the numpy path accepts (status {status})")


def contiguous(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous float64 array (the compiled kernels' one signature)."""
    return np.ascontiguousarray(x, dtype=np.float64)


def configuration_failed(model: Model, q: np.ndarray) -> None:
    """Raise the clear error for q (N, nq) after a kernel refused a unit block of it."""
    normalized_configuration(model, q)     # raises ValueError naming the block and the sample
    raise AssertionError("a compiled kernel refused q that the numpy path accepts")


@dataclass(frozen=True)
class TreeState:
    """Kinematics of all segments for N samples, lab frame.

    rotation (N, nseg, 3, 3): segment frame axes; position (N, nseg, 3) m: segment frame
    origins; S (N, nv, 6): motion subspace columns about the lab origin; velocity,
    acceleration (N, nseg, 6) or None: spatial velocity (m/s, rad/s) and acceleration (m/s²,
    rad/s², gravity not included) about the lab origin.
    """

    rotation: np.ndarray
    position: np.ndarray
    S: np.ndarray
    velocity: np.ndarray | None = None
    acceleration: np.ndarray | None = None


def _generate_fk(model: Model, order: int) -> str:
    """Source of fk(q) (order 0), fkv(q, v) (1) or fka(q, v, a) (2): the 9 rotation and 3
    translation entries of every segment frame, the 6 entries of every motion subspace column S_k
    in the lab frame about the origin, then (order >= 1) every segment's spatial velocity
    V_i = V_parent + Σ_k S_k v_k and (order 2) acceleration
    A_i = A_parent + Σ_k (S_k a_k + (V_c(k) × S_k) v_k), 6 entries each."""
    code = Code()
    q = [f"q{k}" for k in range(model.nq)]
    v = [f"v{k}" for k in range(model.nv)]
    a = [f"a{k}" for k in range(model.nv)]
    zero = (ZERO, ZERO)
    world, out, cols, vel, acc = [], [], [], [], []
    for i, s in enumerate(model.segments):
        j, par = s.joint, model.parents[i]
        RJ, tJ = joint_transform(code, j, q[model.idx_q[i]:model.idx_q[i] + j.nq])
        R0 = const(j.rotation)
        R_rel, t_rel = matmul(R0, RJ), vadd(const(j.translation), rot(R0, tJ))
        if par < 0:
            R, p = R_rel, t_rel
        else:
            Rp, pp = world[par]
            R, p = matmul(Rp, R_rel), vadd(pp, rot(Rp, t_rel))
        R, p = [code.vec(r) for r in R], code.vec(p)
        world.append((R, p))
        out += R[0] + R[1] + R[2] + p
        S = []
        for lin, ang in subspace(j, RJ):          # S_k about the lab origin: (R s_lin + p × R s_ang, R s_ang)
            w = code.vec(rot(R, ang))
            S.append((code.vec(vadd(rot(R, lin), vcross(p, w))), w))
            cols += S[-1][0] + S[-1][1]
        if order == 0:
            continue
        iv = model.idx_v[i]
        Vp = zero if par < 0 else vel[par]
        V = tuple(code.vec(vadd(Vp[h], *([mul(x, v[iv + k]) for x in Sk[h]] for k, Sk in enumerate(S))))
                  for h in (0, 1))
        vel.append(V)
        if order == 1:
            continue
        Ap = zero if par < 0 else acc[par]
        terms = ([], [])
        for k, (Sk, in_parent) in enumerate(zip(S, fixed_in_parent(j))):
            Vc = Vp if in_parent else V
            cross_lin, cross_ang = vadd(vcross(Vc[1], Sk[0]), vcross(Vc[0], Sk[1])), vcross(Vc[1], Sk[1])
            for h, c in ((0, cross_lin), (1, cross_ang)):
                terms[h].append([add(mul(x, a[iv + k]), mul(y, v[iv + k])) for x, y in zip(Sk[h], c)])
        acc.append(tuple(code.vec(vadd(Ap[h], *terms[h])) for h in (0, 1)))
    outputs = out + cols + [x for V in vel for x in V[0] + V[1]] + [x for A in acc for x in A[0] + A[1]]
    name = ("fk", "fkv", "fka")[order]
    return code.function(name, dict(list({"q": q, "v": v, "a": a}.items())[:order + 1]), outputs)


def tree_state(model: Model, q: np.ndarray, v: np.ndarray | None = None, a: np.ndarray | None = None,
               data: workspace.Data | None = None) -> TreeState:
    """Kinematics from validated (N, nq), (N, nv), (N, nv) arrays (see check_state); data: the
    model's workspace (default workspace.data(model))."""
    N, n, nv = q.shape[0], len(model.segments), model.nv
    if kernels.tree_compiled(q.shape[0]):
        d = workspace.data(model, data)
        out = (np.empty((N, n, 3, 3)), np.empty((N, n, 3)), np.empty((N, nv, 6)),
               np.empty((0 if v is None else N, n, 6)), np.empty((0 if a is None else N, n, 6)))
        empty = np.empty((0, nv))
        status = kernels.kernel("tree.kinematics")(d.itab, d.ftab, contiguous(q), empty if v is None else contiguous(v),
                                                   empty if a is None else contiguous(a), *out)
        if status >= 0:
            configuration_failed(model, q)
        return TreeState(*out[:3], None if v is None else out[3], None if a is None else out[4])
    q = normalized_configuration(model, q)
    inputs = [q] if v is None else [q, v] if a is None else [q, v, a]
    order = len(inputs) - 1
    name = ("fk", "fkv", "fka")[order]
    X = run(compiled(model, name, lambda m: _generate_fk(m, order), data), inputs, 12 * n + 6 * nv + 6 * n * order)
    F = X[:, :12 * n].reshape(N, n, 12)
    R = F[..., :9].reshape(N, n, 3, 3)
    p = np.ascontiguousarray(F[..., 9:])
    S = X[:, 12 * n:12 * n + 6 * nv].reshape(N, nv, 6)
    VA = [X[:, 12 * n + 6 * nv + 6 * n * k:12 * n + 6 * nv + 6 * n * (k + 1)].reshape(N, n, 6) for k in range(order)]
    return TreeState(R, p, S, *VA)


def lab_inertias(model: Model, st: TreeState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Segment inertias about the lab origin: mass (nseg,) kg, CoM c (N, nseg, 3) m, first
    moment h = m c (N, nseg, 3) kg·m, rotational inertia I_O = R I_c Rᵀ + m(|c|² E − c cᵀ)
    (N, nseg, 3, 3) kg·m²."""
    m = model.masses
    R = st.rotation
    c = st.position + matvec(R, np.broadcast_to(model.coms, st.position.shape))
    I_c = np.matmul(np.matmul(R, model.inertias), np.swapaxes(R, -1, -2))
    return m, c, m[:, None] * c, parallel_axis(m, c, I_c)


@dataclass(frozen=True)
class Placements:
    """Segment frames in the lab frame: rotation ([N,] nseg, 3, 3), translation ([N,] nseg, 3) m,
    segments in model order."""

    rotation: np.ndarray
    translation: np.ndarray


def forward_kinematics(model: Model, q) -> Placements:
    """Placements of all segment frames for q (nq,) or (N, nq): x_lab = R x_segment + p."""
    (q, _, _), batched = check_state(model, q)
    st = tree_state(model, q)
    if batched:
        return Placements(st.rotation, st.position)
    return Placements(st.rotation[0], st.position[0])


def _points(model: Model, names: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray]:
    names = model.marker_names if names is None else names
    if isinstance(names, str):
        raise TypeError("names must be a sequence of marker/contact names, not a string")
    segs, pts = [], []
    for nm in names:
        i, pt = model.point(nm)
        segs.append(i)
        pts.append(pt)
    return np.array(segs, dtype=int), np.array(pts, dtype=float).reshape(-1, 3)


def _unbatch(x: np.ndarray, batched: bool) -> np.ndarray:
    return x if batched else x[0]


def point_kinematics(model: Model, q, v=None, a=None, names: Sequence[str] | None = None):
    """Positions, and if v (and a) are given velocities (and accelerations) of named markers or
    contact points (default: all markers, in model.marker_names order).

    q (nq,) | (N, nq); v, a (nv,) | (N, nv). Returns position ([N,] k, 3) m, or a tuple
    (position, velocity m/s[, acceleration m/s²]) in the lab frame; k = len(names).
    Acceleration is the classical point acceleration a_O + α × P + ω × v_P.
    """
    (q, v, a), batched = check_state(model, q, v, a)
    segs, pts = _points(model, names)
    st = tree_state(model, q, v, a)
    P = matvec(st.rotation[:, segs], pts) + st.position[:, segs]
    if v is None:
        return _unbatch(P, batched)
    Vs = st.velocity[:, segs]
    vP = Vs[..., :3] + cross(Vs[..., 3:], P)
    if a is None:
        return _unbatch(P, batched), _unbatch(vP, batched)
    As = st.acceleration[:, segs]
    aP = As[..., :3] + cross(As[..., 3:], P) + cross(Vs[..., 3:], vP)
    return _unbatch(P, batched), _unbatch(vP, batched), _unbatch(aP, batched)


def marker_positions(model: Model, q, names: Sequence[str] | None = None) -> np.ndarray:
    """Lab-frame positions ([N,] k, 3) m of markers/contacts `names` (default all markers)."""
    return point_kinematics(model, q, names=names)


def contact_positions(model: Model, q, names: Sequence[str] | None = None) -> np.ndarray:
    """Lab-frame positions ([N,] k, 3) m of contact points `names` (default all contacts)."""
    return point_kinematics(model, q, names=model.contact_names if names is None else names)


def point_jacobians(model: Model, q, names: Sequence[str] | None = None) -> np.ndarray:
    """Linear-velocity Jacobians ([N,] k, 3, nv) of named points, lab frame: v_P = J_P v.

    Column k of J_P is S_lin,k + S_ang,k × P for the joints supporting the point's segment, 0
    otherwise.
    """
    (q, _, _), batched = check_state(model, q)
    segs, pts = _points(model, names)
    st = tree_state(model, q)
    P = matvec(st.rotation[:, segs], pts) + st.position[:, segs]           # (N, k, 3)
    S = st.S[:, None]                                                         # (N, 1, nv, 6)
    J = S[..., :3] + cross(S[..., 3:], P[:, :, None, :])                      # (N, k, nv, 3)
    J = J * model.supports[segs][:, model.dof_segment][None, :, :, None]
    return _unbatch(np.swapaxes(J, -1, -2), batched)


def frame_jacobian(model: Model, q, segment: str) -> np.ndarray:
    """Jacobian ([N,] 6, nv) of a segment frame, lab-aligned at its origin (Pinocchio's
    LOCAL_WORLD_ALIGNED): (velocity of the origin m/s, angular velocity rad/s) = J v."""
    (q, _, _), batched = check_state(model, q)
    model.segment(segment)  # KeyError naming an unknown segment
    i = model.index[segment]
    st = tree_state(model, q)
    S = st.S
    lin = S[..., :3] + cross(S[..., 3:], st.position[:, i, None, :])
    J = np.concatenate((lin, S[..., 3:]), axis=-1) * model.supports[i, model.dof_segment][None, :, None]
    return _unbatch(np.swapaxes(J, -1, -2), batched)
