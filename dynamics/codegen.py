"""Straight-line code generation for tree algorithms (used by rnea.py and kinematics.py).

A per-model algorithm is unrolled once into plain Python with the model's constants folded in
(zero offsets, identity placements, axis-aligned joints and massless segments cost nothing),
compiled, and kept in the model's workspace (workspace.Data). The generated function takes coordinate columns and runs on
float scalars (one sample: pure Python arithmetic, no numpy overhead) or on (N,) arrays (a batch:
one numpy operation per scalar operation, no loop over samples).

Items of the symbolic algebra: None (zero), a float constant, or a string holding a Python
expression or variable name of the generated code; a leading "-" marks a negated term, which
sums turn into subtractions.
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:      # the joint types (dynamics/joints) use the algebra below: no import cycle at run time
    from .model import Joint, Model


def mul(x, y):
    """x y with constant folding."""
    if x is None or y is None or (isinstance(x, float) and x == 0.0) or (isinstance(y, float) and y == 0.0):
        return None
    if isinstance(x, float) and isinstance(y, float):
        return x * y
    negative = x.startswith("-") if isinstance(x, str) else x < 0
    negative ^= y.startswith("-") if isinstance(y, str) else y < 0
    x = x.removeprefix("-") if isinstance(x, str) else abs(x)
    y = y.removeprefix("-") if isinstance(y, str) else abs(y)
    if isinstance(x, float) and x == 1.0:
        out = y
    elif isinstance(y, float) and y == 1.0:
        out = x
    else:
        out = f"({x!r}*{y})" if isinstance(x, float) else f"({x}*{y!r})" if isinstance(y, float) else f"({x}*{y})"
    return f"-{out}" if negative else out      # the sign is carried to the enclosing sum


def add(*xs):
    """Σ xs with constant folding; negated terms become subtractions."""
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


def neg(x):
    return mul(-1.0, x)


def sub(x, y):
    return add(x, neg(y))


def vadd(*vs):
    return [add(*(v[i] for v in vs)) for i in range(3)]


def vneg(x):
    return [neg(e) for e in x]


def vcross(a, b):
    if a == b:                       # v × v = 0 (e.g. a free flyer's own joint velocity)
        return ZERO
    return [sub(mul(a[1], b[2]), mul(a[2], b[1])),
            sub(mul(a[2], b[0]), mul(a[0], b[2])),
            sub(mul(a[0], b[1]), mul(a[1], b[0]))]


def rot(R, x):
    """R x for a 3x3 nested list R."""
    return [add(*(mul(R[i][k], x[k]) for k in range(3))) for i in range(3)]


def rotT(R, x):
    """Rᵀ x."""
    return [add(*(mul(R[k][i], x[k]) for k in range(3))) for i in range(3)]


def matmul(A, B):
    return [[add(*(mul(A[i][k], B[k][j]) for k in range(3))) for j in range(3)] for i in range(3)]


def const(a) -> list:
    """Float items of a constant array (flattened one level: vectors give floats, matrices rows)."""
    a = np.asarray(a, dtype=float)
    return [float(x) for x in a] if a.ndim == 1 else [[float(x) for x in r] for r in a]


ZERO = [None, None, None]
IDENTITY = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


class Code:
    """Lines of a generated function body."""

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

    def function(self, name: str, args: dict[str, list[str]], outputs: list) -> str:
        """Source of ``def name(<args>, cos, sin)`` and of ``name_batch``, the same body freeing
        each temporary after its last use (so a batch's arrays are recycled while still in
        cache); each arg is a sequence unpacked into the listed names; both return the tuple of
        outputs (zeros as 0.0)."""
        head = [f"({', '.join(args)}, cos, sin):"]
        for arg, names in args.items():
            if names:
                head.append(f"    {', '.join(names)}, = {arg}")
        ret = ", ".join("0.0" if x is None else repr(x) if isinstance(x, float) else x for x in outputs)
        tail = [f"    return ({ret}{',' if len(outputs) == 1 else ''})", ""]
        lines = self._live(ret)
        last: dict[str, int] = {}
        for i, line in enumerate(lines):
            for var in TEMP.findall(line):
                last[var] = i
        keep = set(TEMP.findall(ret))
        freed: list[str] = []
        for i, line in enumerate(lines):
            freed.append(line)
            dead = [v for v in dict.fromkeys(TEMP.findall(line)) if last[v] == i and v not in keep]
            if dead:
                freed.append(f"    del {', '.join(dead)}")
        return "\n".join([f"def {name}" + head[0]] + head[1:] + lines + tail
                         + [f"def {name}_batch" + head[0]] + head[1:] + freed + tail)


    def _live(self, ret: str) -> list[str]:
        """The lines whose result is used, directly or indirectly, by the returned expression."""
        needed = set(TEMP.findall(ret))
        keep = []
        for line in reversed(self.lines):
            target, expr = line.split(" = ", 1)
            if target.strip() in needed:
                needed.update(TEMP.findall(expr))
                keep.append(line)
        return keep[::-1]


TEMP = re.compile(r"\bt\d+\b")


def joint_transform(code: Code, j: Joint, qs: list[str]):
    """Rotation R_J (3x3 items) and translation t_J (3 items) of the child frame in the joint
    placement frame, for the joint's coordinate names qs (quaternions assumed unit): its type's
    emit_transform (dynamics/joints)."""
    from .joints import joint_type

    return joint_type(j.type).emit_transform(code, j, qs)


def joint_motion(code: Code, j: Joint, RJ, vs: list[str], as_: list[str]):
    """Joint velocity v_J = S v and acceleration S a + c_J in the child frame, as
    ((lin, ang), (lin, ang)) items: its type's emit_motion."""
    from .joints import joint_type

    return joint_type(j.type).emit_motion(code, j, RJ, vs, as_)


def compiled(model: Model, key: str, generate: Callable[[Model], str], data=None) -> tuple[Callable, Callable]:
    """The (scalar, batch) functions generated by generate(model) (see Code.function), compiled
    once and kept in the model's workspace (`data`, default workspace.data(model))."""
    from . import workspace

    cache = workspace.data(model, data).generated
    fns = cache.get(key)
    if fns is None:
        env: dict = {}
        exec(compile(generate(model), f"<{key} kernel of model {model.name!r}>", "exec"), env)
        fns = cache[key] = (env[key], env[f"{key}_batch"])
    return fns


# Up to this many samples, calling the scalar kernel once per sample beats the batch kernel, whose
# cost is one numpy call per scalar operation whatever N (human15 rnea: ~90 µs per sample on floats
# vs ~2.5 ms per batch call); the ratio is that of a numpy call to a float operation, so it hardly
# depends on the model.
SCALAR_MAX_N = 32  # measured crossover on human15 rnea: about 35 samples (bench: 17 samples 3.4 ms batch vs 1.8 ms scalar)


def run(fns: tuple[Callable, Callable], columns: list[np.ndarray], n_out: int) -> np.ndarray:
    """Call a generated kernel on (N, k) input arrays; returns (N, n_out). Up to SCALAR_MAX_N
    samples run the scalar function on Python floats with math.cos/sin, one call per sample (a
    division by zero makes that sample's row NaN); a larger batch the batch function on column
    arrays with np.cos/np.sin."""
    scalar, batch = fns
    N = columns[0].shape[0]
    if N <= SCALAR_MAX_N:
        out = np.empty((N, n_out))
        for k, row in enumerate(zip(*(c.tolist() for c in columns))):
            try:
                out[k] = scalar(*row, math.cos, math.sin)
            except ZeroDivisionError:
                out[k] = np.nan         # as the batch kernel gives under np.errstate: the caller names the sample
        return out
    out = np.empty((n_out, N))
    for k, x in enumerate(batch(*(np.ascontiguousarray(c.T) for c in columns), np.cos, np.sin)):
        out[k] = x
    return out.T


# ------------------------------------------------------------------------------------------------
# Spatial (6-D) items for the body-frame algorithms (aba.py, crba.py). A motion or force is a pair
# (linear, angular) of 3-item lists in a body frame; a spatial inertia is Y = (A, B, C), the 6×6
# matrix [[A, B], [Bᵀ, C]] (A, C symmetric) mapping a motion to a force about the same origin.


def mT(M):
    """Transpose of a 3x3 item matrix."""
    return [[M[j][i] for j in range(3)] for i in range(3)]


def skew(t):
    """[t]× (3x3 items) with [t]× x = t × x."""
    return [[None, neg(t[2]), t[1]], [t[2], None, neg(t[0])], [neg(t[1]), t[0], None]]


def madd(*Ms):
    return [[add(*(M[i][j] for M in Ms)) for j in range(3)] for i in range(3)]


def mneg(M):
    return [[neg(x) for x in r] for r in M]


def let_mat(code: Code, M):
    return [code.vec(r) for r in M]


def dot6(x, y):
    """xᵀ y of two (linear, angular) pairs."""
    return add(*(mul(a, b) for a, b in zip(x[0] + x[1], y[0] + y[1])))


def inertia_times(Y, x):
    """Y x = (A x_lin + B x_ang, Bᵀ x_lin + C x_ang)."""
    A, B, C = Y
    return vadd(rot(A, x[0]), rot(B, x[1])), vadd(rotT(B, x[0]), rot(C, x[1]))


def body_inertia(m: float, h: np.ndarray, I_O: np.ndarray):
    """Constant Y items of a body with mass m, first moment h = m c and rotational inertia I_O
    about its frame origin: A = m E, B = −[h]×, C = I_O (Y (v, ω) = (m v − h × ω, I_O ω + h × v))."""
    return ([[m if r == k else None for k in range(3)] for r in range(3)], mneg(skew(const(h))),
            [[float(x) if x else None for x in r] for r in I_O])


def force_to_parent(code: Code, R, t, f):
    """A force (lin, ang) of a child frame in its parent frame, the child frame having axes R and
    origin t there: (R f_lin, R f_ang + t × R f_lin)."""
    fl = code.vec(rot(R, f[0]))
    return fl, vadd(rot(R, f[1]), vcross(t, fl))


def inertia_to_parent(code: Code, R, t, Y):
    """ᵖX_i* Y ⁱX_p: a child's spatial inertia in its parent frame (child axes R, origin t there).
    Rotate the blocks (A' = R A Rᵀ, ...), then move the origin by T = [t]×:
    A'' = A', B'' = B' − A'T, C'' = C' + T B' − B'ᵀ T − T A' T."""
    A0, B0, C0 = Y
    A, C = _rotate_symmetric(code, R, A0), _rotate_symmetric(code, R, C0)
    B = let_mat(code, matmul(let_mat(code, matmul(R, B0)), mT(R)))
    T = skew(t)
    AT = let_mat(code, matmul(A, T))

    def c(i, j):
        return add(C[i][j], *(mul(T[i][k], B[k][j]) for k in range(3)), *(neg(mul(B[k][i], T[k][j])) for k in range(3)),
                   *(neg(mul(T[i][k], AT[k][j])) for k in range(3)))

    return A, let_mat(code, madd(B, mneg(AT))), _symmetric(code, c)


def _symmetric(code: Code, entry):
    """3x3 symmetric item matrix from entry(i, j), computed for j >= i only."""
    M = [[None] * 3 for _ in range(3)]
    for i in range(3):
        for j in range(i, 3):
            M[i][j] = M[j][i] = code.let(entry(i, j))
    return M


def _rotate_symmetric(code: Code, R, S):
    """R S Rᵀ for a symmetric S (upper triangle computed)."""
    RS = let_mat(code, matmul(R, S))
    return _symmetric(code, lambda i, j: add(*(mul(RS[i][k], R[j][k]) for k in range(3))))


def subspace(j: Joint, RJ) -> list[tuple[list, list]]:
    """Motion subspace columns S (nv_i × (lin, ang) items) of a joint, in the child frame: its
    type's emit_subspace."""
    from .joints import joint_type

    return joint_type(j.type).emit_subspace(j, RJ)


def moving_bodies(model: Model) -> tuple[list[int], dict[int, tuple[int, np.ndarray, np.ndarray]], dict[int, tuple]]:
    """Segments on fixed joints merged into their moving ancestor, as Pinocchio's URDF reader does.

    Returns the moving segments (joint with coordinates, model order); for every segment its
    anchor (nearest moving ancestor-or-self, -1 = the world) with the constant placement (R, t)
    of its frame in the anchor frame; and per moving segment the merged constant inertia
    (m kg, h = m c kg·m, I_O kg·m²) about its frame origin, in its frame.
    """
    from .spatial import parallel_axis

    anchor: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
    moving = []
    for i, s in enumerate(model.segments):
        if s.joint.nv:
            anchor[i] = (i, np.eye(3), np.zeros(3))
            moving.append(i)
        else:
            p = model.parents[i]
            a, Ra, ta = (-1, np.eye(3), np.zeros(3)) if p < 0 else anchor[p]
            anchor[i] = (a, Ra @ s.joint.rotation, ta + Ra @ s.joint.translation)
    inertia = {i: [0.0, np.zeros(3), np.zeros((3, 3))] for i in moving}
    for i, s in enumerate(model.segments):
        a, R, t = anchor[i]
        if a < 0 or s.mass == 0:
            continue
        c = t + R @ s.com
        acc = inertia[a]
        acc[0] += s.mass
        acc[1] = acc[1] + s.mass * c
        acc[2] = acc[2] + parallel_axis(np.array(s.mass), c, R @ s.inertia @ R.T)
    return moving, anchor, {i: tuple(x) for i, x in inertia.items()}


def body_transform(code: Code, model: Model, i: int, anchor: dict, q: list[str]):
    """(anchor index of the parent body (-1 = world), R, t, RJ) of moving segment i: its frame's
    axes R and origin t in the parent body's frame, and the joint rotation RJ."""
    s, p = model.segments[i], model.parents[i]
    j = s.joint
    a, Ra, ta = (-1, np.eye(3), np.zeros(3)) if p < 0 else anchor[p]
    R0, t0 = const(Ra @ j.rotation), const(ta + Ra @ j.translation)
    iq = model.idx_q[i]
    RJ, tJ = joint_transform(code, j, q[iq:iq + j.nq])
    return a, let_mat(code, matmul(R0, RJ)), code.vec(vadd(t0, rot(R0, tJ))), RJ
