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

Speed: the recursion is unrolled once per model into straight-line Python (constants folded:
zero offsets, axis-aligned joints and massless segments cost nothing), compiled, and cached on
the model. The same code runs on float scalars for a single sample and on (N,) component arrays
for a batch, so a batch costs one numpy operation per scalar operation of one sample — no Python
loop over samples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .joints import QUAT_TOL
from .kinematics import as_batch, check_state, tree_state
from .model import Model
from .spatial import cross

CHUNK = 4096  # samples per block: bounds memory and keeps the working set in cache


@dataclass(frozen=True)
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


def external_wrenches(model: Model, f_ext: Sequence[Wrench] | None, N: int, batched: bool) -> list[tuple[int, np.ndarray]]:
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


# ---------------------------------------------------------------------------------------------
# Code generation with constant folding. An item is None (zero), a float constant, or a string
# holding a Python expression / variable name of the generated code; a leading "-" marks a
# negated term, which sums turn into subtractions.

def _mul(x, y):
    if x is None or y is None or (isinstance(x, float) and x == 0.0) or (isinstance(y, float) and y == 0.0):
        return None
    if isinstance(x, float) and isinstance(y, float):
        return x * y
    if isinstance(x, float) or isinstance(y, float):
        c, e = (x, y) if isinstance(x, float) else (y, x)
        if c == 1.0:
            return e
        if c == -1.0:
            return e[1:] if e.startswith("-") else f"-{e}"
        return f"({c!r}*{e})"
    return f"({x}*{y})"


def _add(*xs):
    const, terms = 0.0, []
    for x in xs:
        if x is None:
            continue
        if isinstance(x, float):
            const += x
        else:
            terms.append(x)
    if not terms:
        return const if const != 0.0 else None
    if const != 0.0:
        terms.append(repr(const))
    if len(terms) == 1:
        return terms[0]
    terms.sort(key=lambda x: x.startswith("-"))      # a positive term first, negated ones subtracted
    out = terms[0]
    for x in terms[1:]:
        out += f" - {x[1:]}" if x.startswith("-") else f" + {x}"
    return f"({out})"


def _neg(x):
    return _mul(-1.0, x)


def _sub(x, y):
    return _add(x, _neg(y))


def _vadd(*vs):
    return [_add(*(v[i] for v in vs)) for i in range(3)]


def _vcross(a, b):
    return [_sub(_mul(a[1], b[2]), _mul(a[2], b[1])),
            _sub(_mul(a[2], b[0]), _mul(a[0], b[2])),
            _sub(_mul(a[0], b[1]), _mul(a[1], b[0]))]


def _rot(R, x):
    return [_add(*(_mul(R[i][k], x[k]) for k in range(3))) for i in range(3)]


def _rotT(R, x):
    return [_add(*(_mul(R[k][i], x[k]) for k in range(3))) for i in range(3)]


def _const(a) -> list:
    return [float(x) for x in np.ravel(a)]


class _Code:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def let(self, x):
        """Bind a compound expression to a fresh variable; names, constants and zeros pass."""
        if x is None or isinstance(x, float) or x.removeprefix("-").isidentifier():
            return x
        self.n += 1
        name = f"t{self.n}"
        self.lines.append(f"    {name} = {x}")
        return name

    def vec(self, v):
        return [self.let(x) for x in v]


def _joint_motion(code: _Code, j, qs, vs, as_):
    """Rotation R_J (3x3 items), translation t_J, v_J, a_J (+ c_J) as (lin, ang) items."""
    t, Z = j.type, [None, None, None]
    if t in ("revolute", "revolute_unbounded"):
        if t == "revolute":
            c, s = code.let(f"cos({qs[0]})"), code.let(f"sin({qs[0]})")
        else:
            c, s = qs[0], qs[1]
        u = _const(j.axis)
        K = [[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]]
        # Rodrigues, R_ik = u_i u_k + c (δ_ik − u_i u_k) + s K_ik, folds to 0/1 for aligned axes
        R = [[code.let(_add(u[i] * u[k], _mul(c, float(i == k) - u[i] * u[k]), _mul(s, K[i][k]))) for k in range(3)]
             for i in range(3)]
        vJ = (Z, [_mul(x, vs[0]) for x in u])
        aJ = (Z, [_mul(x, as_[0]) for x in u])
        return R, Z, vJ, aJ
    if t == "prismatic":
        u = _const(j.axis)
        I = [[float(i == k) for k in range(3)] for i in range(3)]
        return I, [_mul(x, qs[0]) for x in u], ([_mul(x, vs[0]) for x in u], Z), ([_mul(x, as_[0]) for x in u], Z)
    if t in ("spherical", "free_flyer"):
        x, y, z, w = qs[-4:]
        xx, yy, zz = code.let(f"{x}*{x}"), code.let(f"{y}*{y}"), code.let(f"{z}*{z}")
        xy, xz, yz = code.let(f"{x}*{y}"), code.let(f"{x}*{z}"), code.let(f"{y}*{z}")
        wx, wy, wz = code.let(f"{w}*{x}"), code.let(f"{w}*{y}"), code.let(f"{w}*{z}")
        R = [[code.let(f"1.0 - 2.0*({yy} + {zz})"), code.let(f"2.0*({xy} - {wz})"), code.let(f"2.0*({xz} + {wy})")],
             [code.let(f"2.0*({xy} + {wz})"), code.let(f"1.0 - 2.0*({xx} + {zz})"), code.let(f"2.0*({yz} - {wx})")],
             [code.let(f"2.0*({xz} - {wy})"), code.let(f"2.0*({yz} + {wx})"), code.let(f"1.0 - 2.0*({xx} + {yy})")]]
        if t == "spherical":
            return R, Z, (Z, list(vs)), (Z, list(as_))
        return R, list(qs[:3]), (list(vs[:3]), list(vs[3:])), (list(as_[:3]), list(as_[3:]))
    if t == "planar":
        c, s = code.let(f"cos({qs[2]})"), code.let(f"sin({qs[2]})")
        R = [[c, _neg(s), None], [s, c, None], [None, None, 1.0]]
        vl = code.vec(_rotT(R, [vs[0], vs[1], None]))
        al = _rotT(R, [as_[0], as_[1], None])
        cJ = _neg_v(_vcross([None, None, vs[2]], vl))          # c_J = (−ω_J × v_J,lin, 0)
        return R, [qs[0], qs[1], None], (vl, [None, None, vs[2]]), (_vadd(al, cJ), [None, None, as_[2]])
    raise AssertionError(t)


def _generate(model: Model) -> str:
    code = _Code()
    q = [f"q{k}" for k in range(model.nq)]
    v = [f"v{k}" for k in range(model.nv)]
    a = [f"a{k}" for k in range(model.nv)]
    n = len(model.segments)
    I3 = [[float(i == k) for k in range(3)] for i in range(3)]
    motion, joint, f = [None] * n, [None] * n, [None] * n
    for i, s in enumerate(model.segments):
        j, p = s.joint, model.parents[i]
        if p < 0:
            vp = wp = alp = [None] * 3
            ap = _const(-model.gravity)
        else:
            vp, wp, ap, alp = motion[p]
        R0, t0 = [_const(r) for r in j.rotation], _const(j.translation)
        # into the placement frame
        w1 = code.vec(_rotT(R0, wp))
        v1 = code.vec(_rotT(R0, _vadd(vp, _vcross(wp, t0))))
        al1 = code.vec(_rotT(R0, alp))
        a1 = code.vec(_rotT(R0, _vadd(ap, _vcross(alp, t0))))
        if j.type == "fixed":
            RJ, tJ, vJ, aJ = I3, [None] * 3, ([None] * 3,) * 2, ([None] * 3,) * 2
        else:
            iq, iv = model.idx_q[i], model.idx_v[i]
            RJ, tJ, vJ, aJ = _joint_motion(code, j, q[iq:iq + j.nq], v[iv:iv + j.nv], a[iv:iv + j.nv])
        tJ = code.vec(tJ)
        # through the joint, plus the joint's own motion
        w2 = code.vec(_vadd(_rotT(RJ, w1), vJ[1]))
        v2 = code.vec(_vadd(_rotT(RJ, _vadd(v1, _vcross(w1, tJ))), vJ[0]))
        al2 = code.vec(_vadd(_rotT(RJ, al1), aJ[1], _vcross(w2, vJ[1])))
        a2 = code.vec(_vadd(_rotT(RJ, _vadd(a1, _vcross(al1, tJ))), aJ[0],
                            _vcross(w2, vJ[0]), _vcross(v2, vJ[1])))
        motion[i] = (v2, w2, a2, al2)
        joint[i] = (R0, t0, RJ, tJ)
        if s.mass > 0:
            m, c, Ic = float(s.mass), _const(s.com), [_const(r) for r in s.inertia]
            hl = code.vec([_mul(m, x) for x in _vadd(v2, _neg_v(_vcross(c, w2)))])
            ha = code.vec(_vadd(_rot(Ic, w2), _vcross(c, hl)))
            fl = [_mul(m, x) for x in _vadd(a2, _neg_v(_vcross(c, al2)))]
            fl = code.vec(fl)
            fa = _vadd(_rot(Ic, al2), _vcross(c, fl))
            f[i] = [code.vec(_vadd(fl, _vcross(w2, hl))), code.vec(_vadd(fa, _vcross(w2, ha), _vcross(v2, hl)))]
        else:
            f[i] = [[None] * 3, [None] * 3]
    tau: list = [None] * model.nv
    for i in reversed(range(n)):
        s, j, p = model.segments[i], model.segments[i].joint, model.parents[i]
        fl, fa = f[i]
        R0, t0, RJ, tJ = joint[i]
        iv = model.idx_v[i]
        if j.type in ("revolute", "revolute_unbounded"):
            tau[iv] = _add(*(_mul(x, y) for x, y in zip(_const(j.axis), fa)))
        elif j.type == "prismatic":
            tau[iv] = _add(*(_mul(x, y) for x, y in zip(_const(j.axis), fl)))
        elif j.type == "spherical":
            tau[iv:iv + 3] = fa
        elif j.type == "free_flyer":
            tau[iv:iv + 6] = fl + fa
        elif j.type == "planar":
            g = _rot(RJ, fl)
            tau[iv:iv + 3] = [g[0], g[1], fa[2]]
        if p >= 0:
            fl2 = code.vec(_rot(RJ, fl))
            fa2 = _vadd(_rot(RJ, fa), _vcross(tJ, fl2))
            fl1 = code.vec(_rot(R0, fl2))
            fa1 = _vadd(_rot(R0, fa2), _vcross(t0, fl1))
            f[p] = [code.vec(_vadd(f[p][0], fl1)), code.vec(_vadd(f[p][1], fa1))]
    head = ["def kernel(q, v, a, cos, sin):"]
    for name, seq in (("q", q), ("v", v), ("a", a)):
        if seq:
            head.append(f"    {', '.join(seq)}, = {name}")
    ret = ", ".join("0.0" if x is None else repr(x) if isinstance(x, float) else x for x in tau)
    return "\n".join(head + code.lines + [f"    return ({ret}{',' if len(tau) == 1 else ''})", ""])


def _neg_v(x):
    return [_neg(e) for e in x]


def _kernel(model: Model):
    """The compiled RNEA kernel of `model` (generated on first use, cached on the model)."""
    fn = model.__dict__.get("_rnea_kernel")
    if fn is None:
        env: dict = {}
        exec(compile(_generate(model), f"<rnea kernel of model {model.name!r}>", "exec"), env)
        fn = env["kernel"]
        object.__setattr__(model, "_rnea_kernel", fn)
    return fn


def _unit_blocks(model: Model) -> list[tuple[int, int]]:
    """(start, width) of the quaternion (4) and (cos, sin) (2) blocks of q."""
    return [(iq + s.joint.nq - 4, 4) if s.joint.type in ("spherical", "free_flyer") else (iq, 2)
            for s, iq in zip(model.segments, model.idx_q)
            if s.joint.type in ("spherical", "free_flyer", "revolute_unbounded")]


def normalized_configuration(model: Model, q: np.ndarray) -> np.ndarray:
    """q (N, nq) with quaternion and (cos, sin) blocks normalised; ValueError naming the block if
    a norm is off by more than joints.QUAT_TOL."""
    blocks = _unit_blocks(model)
    if not blocks:
        return q
    q = q.copy()
    for k, w in blocks:
        n = np.linalg.norm(q[:, k:k + w], axis=1)
        bad = np.abs(n - 1) > QUAT_TOL
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"q[{k}:{k + w}]: {'quaternion (x, y, z, w)' if w == 4 else '(cos θ, sin θ)'} "
                             f"must have unit norm, got {n[i]:.6g} at sample {i}")
        q[:, k:k + w] /= n[:, None]
    return q


def rnea(model: Model, q, v, a, f_ext: Sequence[Wrench] | None = None) -> np.ndarray:
    """Joint torques τ ([N,] nv) for q ([N,] nq), v, a ([N,] nv) under gravity model.gravity and
    external wrenches f_ext (a sequence of `Wrench`, lab frame; each force/point/moment (3,) or
    (N, 3)). Units: N·m for revolute coordinates, N for prismatic ones; a free flyer's six
    entries are the residual base wrench (force, moment about the base origin) in the base frame.
    Equals pinocchio.rnea (with the same external forces).
    """
    (q, v, a), batched = check_state(model, q, v, a)
    if v is None or a is None:
        raise ValueError("rnea needs q, v and a")
    N = q.shape[0]
    ext = external_wrenches(model, f_ext, N, batched)
    q = normalized_configuration(model, q)
    kernel = _kernel(model)
    if N == 1:
        tau = np.array([kernel(q[0].tolist(), v[0].tolist(), a[0].tolist(), math.cos, math.sin)], dtype=float)
    else:
        tau = np.empty((N, model.nv))
        for s in range(0, N, CHUNK):
            e = min(s + CHUNK, N)
            cols = kernel(q[s:e].T.copy(), v[s:e].T.copy(), a[s:e].T.copy(), np.cos, np.sin)
            for k, c in enumerate(cols):
                tau[s:e, k] = c
    if ext:
        tau -= external_generalized_forces(model, q, ext)
    return tau if batched else tau[0]


def external_generalized_forces(model: Model, q: np.ndarray, ext: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """Σ_e J_eᵀ w_e (N, nv): column k gets S_k · w_e for every wrench on a segment it supports."""
    out = np.zeros((q.shape[0], model.nv))
    for s in range(0, q.shape[0], CHUNK):
        S = tree_state(model, q[s:s + CHUNK]).S
        for i, w in ext:
            out[s:s + CHUNK] += np.einsum("nkj,nj->nk", S, w[s:s + CHUNK]) * model.supports[i, model.dof_segment]
    return out


def nonlinear_effects(model: Model, q, v, f_ext: Sequence[Wrench] | None = None) -> np.ndarray:
    """h(q, v) = C(q, v) v + g(q) − Σ J_eᵀ w_e = rnea(q, v, 0), ([N,] nv)."""
    return rnea(model, q, v, np.zeros(np.shape(v)), f_ext)


def generalized_gravity(model: Model, q) -> np.ndarray:
    """g(q) = rnea(q, 0, 0), ([N,] nv): joint torques holding the model still under gravity."""
    z = np.zeros(np.shape(q)[:-1] + (model.nv,))
    return rnea(model, q, z, z)
