"""Planar closed-form inverse dynamics of an open tree (Zinkovsky's "direct problem").

Planar frame: x forward, y up, rotations counter-clockwise about k = +z (out of the page), gravity
(0, -g). Coordinates q = (x0, y0, phi_1 .. phi_n): position of the root point (the support point,
segment 1's proximal joint) and the **absolute** segment angles, measured from the downward
vertical, counter-clockwise positive (methods.md a.6), so segment i points along
e1 = (sin phi_i, -cos phi_i) from its proximal to its distal joint and e2 = k x e1 = (cos phi_i,
sin phi_i). Every child attaches at the distal end of its parent (Zinkovsky models).

The equations are methods.md b.3 (Zinkovsky, Sholuha & Ivanov 1996, Eqs. 2.48-2.50, 3.34-3.36)
with the printed sign of B corrected::

    S_i  = sum_{k > i} mu_ki m_k                          strict-subtree mass of i
    C3_i = a1_i m_i + l_i S_i,  C4_i = a2_i m_i,  C0_i = hypot(C3_i, C4_i),  C1_i = atan2(C4_i, C3_i)
    c_i  = C0_i cos(phi_i + C1_i),  d_i = C0_i sin(phi_i + C1_i)
    A_ii = Jc_i + m_i (a1_i^2 + a2_i^2) + l_i^2 S_i
    A_ij = A_ji = l_j C0_i cos(phi_i - phi_j + C1_i)       j a proper ancestor of i
    B_ij =      -l_j C0_i sin(phi_i - phi_j + C1_i),  B_ji = -B_ij,  B_ii = 0
    A_hat = [[M, 0, c^T], [0, M, d^T], [c, d, A]]
    b_hat = [sum_j d_j phidot_j^2, -sum_j c_j phidot_j^2, B phidot^2]
    D_hat = [0, -M, -d]
    Q = A_hat qddot - b_hat - g D_hat

Q = (N_x, N_y, U_1 .. U_n) without other external forces: the support reaction on the root point
(N) and the net moments U_i on the segments; joint moments M = mu^T U (M_1 = moment at the
support). Other external forces F_j (a second force plate under the other foot) add
`external_generalized_forces` to Q: Q = [N + sum F_j, U*]. Here B_hat of the issue text is b_hat
with phidot^2 factored out: b_hat = B_hat phidot^2.

All functions take one sample (shape (n,) / (n + 2,)) or a batch on the first axis ((N, n) /
(N, n + 2)) and return the same leading shape. Pure computation, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import G

CHUNK = 2048  # samples per block: the (N, n+2, n+2) matrices stay in cache


@dataclass(frozen=True)
class PlanarChain:
    """GMIC of a planar tree (methods.md a.3), segments numbered 1..n from the support.

    parent: (n,) int, parent[i-1] = parent number of segment i (0 = root), each smaller than i.
    l: (n,) m, proximal -> distal joint; a1, a2: (n,) m, CoM offset from the proximal joint along
    e1 and e2; m: (n,) kg; Jc: (n,) kg*m^2, central moment of inertia about k.
    """

    parent: np.ndarray
    l: np.ndarray
    m: np.ndarray
    a1: np.ndarray
    a2: np.ndarray
    Jc: np.ndarray

    def __post_init__(self) -> None:
        parent = np.asarray(self.parent)
        n = parent.shape[0] if parent.ndim == 1 else -1
        if n < 1 or not np.issubdtype(parent.dtype, np.integer):
            raise ValueError(f"parent must be a non-empty 1-D integer array, got {self.parent!r}")
        for i, p in enumerate(parent, start=1):
            if not 0 <= p < i:
                raise ValueError(f"segment {i}: parent {p} must be in 0..{i - 1} (parents before children)")
        object.__setattr__(self, "parent", parent.astype(int))
        for name in ("l", "m", "a1", "a2", "Jc"):
            value = np.asarray(getattr(self, name), dtype=float)
            if value.shape != (n,):
                raise ValueError(f"{name} has shape {value.shape}, expected ({n},) like parent")
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name} has non-finite entries: {value}")
            object.__setattr__(self, name, value)
        bad = np.flatnonzero((self.m <= 0) | (self.Jc <= 0) | (self.l < 0))
        if bad.size:
            i = bad[0]
            raise ValueError(
                f"segment {i + 1}: mass {self.m[i]} and Jc {self.Jc[i]} must be > 0, length {self.l[i]} >= 0")

    @property
    def n(self) -> int:
        return self.parent.shape[0]

    @property
    def mu(self) -> np.ndarray:
        """(n, n) structure matrix: mu[i, j] = 1 if segment j is on the path root -> i (i included)."""
        return structure_matrix(self.parent)


def structure_matrix(parent: np.ndarray) -> np.ndarray:
    """(n, n) lower-triangular 0/1 ancestor matrix mu of a parent list (methods.md a.2).

    parent: (n,) int, 1-based parent numbers, 0 = root. phi = mu psi, M = mu^T U.
    """
    parent = np.asarray(parent, dtype=int)
    n = parent.shape[0]
    mu = np.zeros((n, n))
    for i in range(n):
        mu[i, i] = 1.0
        if parent[i]:
            mu[i] += mu[parent[i] - 1]
    return mu


def _batch(chain: PlanarChain, name: str, x: np.ndarray, width: int) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape[-1:] != (width,) or x.ndim not in (1, 2):
        raise ValueError(f"{name} has shape {x.shape}, expected ({width},) or (N, {width}) for {chain.n} segments")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    return np.atleast_2d(x)


def planar_terms(chain: PlanarChain, phi: np.ndarray, dphi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A_hat, b_hat and D_hat of methods.md b.3 at absolute angles phi and rates dphi.

    phi: (n,) or (N, n) rad, from the downward vertical, counter-clockwise; dphi: same shape, rad/s.
    Returns A_hat (N, n+2, n+2) in kg, kg*m, kg*m^2 blocks; b_hat (N, n+2) = [sum d phidot^2,
    -sum c phidot^2, B phidot^2] in N and N*m; D_hat (N, n+2) = [0, -M, -d] in kg and kg*m
    (leading N dropped for 1-D input). Equation: Q = A_hat qddot - b_hat - g D_hat.
    """
    single = np.ndim(phi) == 1
    phi = _batch(chain, "phi", phi, chain.n)
    dphi = _batch(chain, "dphi", dphi, chain.n)
    if phi.shape != dphi.shape:
        raise ValueError(f"phi {phi.shape} and dphi {dphi.shape} differ in shape")
    n, mu = chain.n, chain.mu
    m, l = chain.m, chain.l
    S = mu.T @ m - m
    C3 = chain.a1 * m + l * S
    C4 = chain.a2 * m
    C0 = np.hypot(C3, C4)
    C1 = np.arctan2(C4, C3)
    c = C0 * np.cos(phi + C1)
    d = C0 * np.sin(phi + C1)
    # A_ij, B_ij only for the pairs (i, j) with j a proper ancestor of i (zero elsewhere).
    I, J = np.nonzero(mu - np.eye(n))
    angle = phi[:, I] - phi[:, J] + C1[I]
    coef = l[J] * C0[I]
    N = phi.shape[0]
    total = m.sum()
    Ah = np.zeros((N, n + 2, n + 2))
    Ah[:, 0, 0] = Ah[:, 1, 1] = total
    Ah[:, 0, 2:] = Ah[:, 2:, 0] = c
    Ah[:, 1, 2:] = Ah[:, 2:, 1] = d
    Ah[:, 2:, 2:][:, np.arange(n), np.arange(n)] = chain.Jc + m * (chain.a1**2 + chain.a2**2) + l**2 * S
    Ah[:, 2 + I, 2 + J] = Ah[:, 2 + J, 2 + I] = coef * np.cos(angle)
    B = np.zeros((N, n, n))
    B[:, I, J] = -coef * np.sin(angle)
    B[:, J, I] = -B[:, I, J]
    w2 = dphi**2
    bh = np.concatenate([np.sum(d * w2, axis=1, keepdims=True), -np.sum(c * w2, axis=1, keepdims=True),
                         np.einsum("kij,kj->ki", B, w2)], axis=1)
    Dh = np.concatenate([np.zeros((N, 1)), np.full((N, 1), -total), -d], axis=1)
    if single:
        return Ah[0], bh[0], Dh[0]
    return Ah, bh, Dh


def planar_inverse_dynamics(chain: PlanarChain, q: np.ndarray, v: np.ndarray, a: np.ndarray,
                            g: float = G) -> np.ndarray:
    """Generalised forces Q = A_hat qddot - b_hat - g D_hat (methods.md b.3, Eq. 3.35).

    q = (x0, y0, phi_1..phi_n): (n+2,) or (N, n+2) in m and rad (planar frame x forward, y up);
    v, a: same shape, m/s, rad/s and m/s^2, rad/s^2. Returns Q, same shape: (N_x, N_y) in N, the
    force the support applies at the root point, then the net segment moments U_i in N*m.
    """
    width = chain.n + 2
    single = np.ndim(q) == 1
    q, v, a = (_batch(chain, name, x, width) for name, x in (("q", q), ("v", v), ("a", a)))
    if not q.shape == v.shape == a.shape:
        raise ValueError(f"q {q.shape}, v {v.shape} and a {a.shape} must have the same shape")
    Q = np.empty_like(q)
    for s in range(0, q.shape[0], CHUNK):
        e = s + CHUNK
        Ah, bh, Dh = planar_terms(chain, q[s:e, 2:], v[s:e, 2:])
        Q[s:e] = np.einsum("kij,kj->ki", Ah, a[s:e]) - bh - g * Dh
    return Q[0] if single else Q


def external_generalized_forces(chain: PlanarChain, phi: np.ndarray, segment: int, force: np.ndarray,
                                point: np.ndarray) -> np.ndarray:
    """Generalised force of an external force F on segment `segment` (methods.md b.3)::

        Q_ext = [F_x, F_y, U*_1 - U_1 .. U*_n - U_n]
        U*_i - U_i = (z' x F).k                                    i = segment (z' rotated to the lab)
                   = l_i (F_x cos phi_i + F_y sin phi_i)           i a proper ancestor of the segment

    phi: (n,) or (N, n) rad (absolute, from the downward vertical); segment: 1..n; force: (2,) or
    (N, 2) N in the planar frame; point: (2,) or (N, 2) m, z' = (along e1, along e2) from the
    segment's proximal joint. Returns (n + 2,) or (N, n + 2) in N and N*m. With the motion's
    Q = A_hat qddot - b_hat - g D_hat, the support reaction and net moments are Q - sum Q_ext.
    """
    single = np.ndim(phi) == 1
    phi = _batch(chain, "phi", phi, chain.n)
    if not (isinstance(segment, (int, np.integer)) and 1 <= segment <= chain.n):
        raise ValueError(f"segment must be a segment number 1..{chain.n}, got {segment!r}")
    F = _batch(chain, "force", force, 2)
    z = _batch(chain, "point", point, 2)
    for name, x in (("force", F), ("point", z)):
        if x.shape[0] not in (1, phi.shape[0]):
            raise ValueError(f"{name} has {x.shape[0]} samples, phi has {phi.shape[0]}")
    k = segment - 1
    s, c = np.sin(phi), np.cos(phi)
    # z' in the lab: z1 e1 + z2 e2, e1 = (sin, -cos), e2 = (cos, sin)
    zx = z[:, 0] * s[:, k] + z[:, 1] * c[:, k]
    zy = -z[:, 0] * c[:, k] + z[:, 1] * s[:, k]
    out = np.zeros((phi.shape[0], chain.n + 2))
    out[:, :2] = F
    ancestors = chain.mu[k].astype(bool)
    ancestors[k] = False
    out[:, 2:][:, ancestors] = chain.l[ancestors] * (F[:, :1] * c[:, ancestors] + F[:, 1:] * s[:, ancestors])
    out[:, 2 + k] = zx * F[:, 1] - zy * F[:, 0]
    return out[0] if single else out


def joint_moments(chain: PlanarChain, U: np.ndarray) -> np.ndarray:
    """Joint moments M = mu^T U from net segment moments U (methods.md a.2).

    U: (n,) or (N, n) N*m. Returns the same shape; M_i acts +M_i on segment i and -M_i on its
    parent, M_1 is the moment at the support point. (In relative joint angles psi = mu^-1 phi
    these are the generalised forces.)
    """
    U = np.asarray(U, dtype=float)
    if U.shape[-1:] != (chain.n,):
        raise ValueError(f"U has shape {U.shape}, expected ({chain.n},) or (N, {chain.n})")
    return U @ chain.mu


def planar_chain_from_model(model) -> PlanarChain:
    """The PlanarChain of a planar Zinkovsky tree `Model` (docs/models.md, "Planar Zinkovsky segments").

    Requires gravity (0, -g, 0); segment 1 on the world through a `planar` joint at the lab origin;
    every other joint revolute about +z, unrotated, at origin (0, -l_parent, 0) of its parent (all
    children of one segment at the same distal point); CoMs in the x-y plane. Then a1 = -com_y,
    a2 = com_x, Jc = izz and l of a segment = its children's distance; a leaf's length is not in the
    model and does not enter the dynamics, so it is set to 0. Model q and v are (x0, y0, phi_1,
    psi_2..psi_n) with relative angles psi; the closed form's absolute angles are phi = mu psi
    (psi_1 = phi_1). ValueError naming the segment if the model is not of this form.
    """
    segs = model.segments
    where = f"model {model.name!r}"
    g = np.asarray(model.gravity, dtype=float)
    if not (g[0] == 0 and g[2] == 0 and g[1] < 0):
        raise ValueError(f"{where}: gravity {g.tolist()} is not (0, -g, 0) of a planar model")
    n = len(segs)
    index = {s.name: i for i, s in enumerate(segs)}
    parent = np.zeros(n, dtype=int)
    l = np.full(n, np.nan)
    for i, s in enumerate(segs):
        j = s.joint
        w = f"{where}: segment {s.name!r}"
        if i == 0:
            if s.parent is not None or j.type != "planar" or np.any(j.translation != 0) or np.any(j.rotation != np.eye(3)):
                raise ValueError(f"{w}: the first segment must hang on the world by a planar joint at the origin")
        else:
            if s.parent is None or j.type != "revolute" or not np.allclose(j.axis, [0, 0, 1]) \
                    or not np.allclose(j.rotation, np.eye(3)):
                raise ValueError(f"{w}: expected a revolute joint about +z on a parent segment")
            p = index[s.parent]
            t = np.asarray(j.translation)
            if t[0] != 0 or t[2] != 0 or t[1] > 0 or (np.isfinite(l[p]) and l[p] != -t[1]):
                raise ValueError(f"{w}: joint origin {t.tolist()} is not the parent's distal point (0, -l, 0)")
            parent[i], l[p] = p + 1, -t[1]
        if s.com[2] != 0:
            raise ValueError(f"{w}: CoM {np.asarray(s.com).tolist()} is not in the x-y plane")
    return PlanarChain(parent=parent, l=np.nan_to_num(l, nan=0.0), m=np.array([s.mass for s in segs]),
                       a1=np.array([-s.com[1] for s in segs]), a2=np.array([s.com[0] for s in segs]),
                       Jc=np.array([s.inertia[2, 2] for s in segs]))
