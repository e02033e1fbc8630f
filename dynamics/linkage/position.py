"""Position analysis of a driven linkage: Newton-Raphson on Phi(q, s) = 0 (methods.md c.3).

    q <- q - Phi_q(q)^-1 Phi(q, s)     until ||Phi||_2 < tol (1e-12)

The driven linkage is square (m = n rows). The assembly branch is kept by starting every sample
from the previous one (continuation, `track`) or from the constructive assembly of the chosen branch
(`assembled_positions`). Passing a singular configuration (branch point, dead centre, end of the
assembly range) is reported as `SingularConfigurationError`, never a silent branch flip: the
condition number of Phi_q is bounded, the sign of det Phi_q (which can only change through a
singular configuration) must stay constant, and Newton must converge.
"""
from __future__ import annotations

import numpy as np

from . import constraints as C
from .assembly import assemble
from .kinematics import solve
from .model import Linkage, SingularConfigurationError

TOL = 1e-12
COND_MAX = 1e6


def newton(model: Linkage, q0: np.ndarray, s, tol: float = TOL, max_iter: int = 25) -> np.ndarray:
    """Batched Newton-Raphson: q (N, n) with ||Phi(q_k, s_k)|| < tol from guesses q0 (N, n)."""
    q = np.array(q0, dtype=float, copy=True)
    s = np.atleast_1d(np.asarray(s, dtype=float))
    active = np.arange(q.shape[0])
    for _ in range(max_iter + 1):
        phi = C.residual(model, q[active], s[active])
        norm = np.linalg.norm(phi, axis=1)
        keep = norm >= tol
        active, phi = active[keep], phi[keep]
        if active.size == 0:
            return q
        try:
            q[active] -= solve(model, C.jacobian(model, q[active]), phi)
        except SingularConfigurationError as exc:
            raise SingularConfigurationError(f"{exc} (Newton step near input s={s[active[0]]:.6g})") from None
    k = int(active[0])
    raise SingularConfigurationError(
        f"{model.name}: Newton-Raphson did not converge at input s={s[k]:.6g} "
        f"(||Phi|| = {np.linalg.norm(C.residual(model, q[k:k + 1], s[k:k + 1])):.3g}): no assembly "
        "near the previous configuration, the linkage was driven past a singular configuration")


def condition_numbers(model: Linkage, q: np.ndarray) -> np.ndarray:
    """cond_2(Phi_q) per sample, shape (N,) (about 400 at worst for the nominal Jansen leg); for a
    linkage of independent blocks (a walker) the largest condition number of its blocks."""
    return _regularity(model, C.jacobian(model, q))[0]


def _regularity(model: Linkage, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cond (N,), sign of det (N, n_blocks)) of Phi_q per independent block."""
    conds, signs = [], []
    for cols, rows in model.components:
        B = J[:, rows[:, None], cols] if len(model.components) > 1 else J
        conds.append(np.linalg.cond(B))
        signs.append(np.linalg.slogdet(B)[0])
    return np.max(conds, axis=0), np.stack(signs, axis=1)


def _check_regular(model: Linkage, q: np.ndarray, s: np.ndarray, cond_max: float,
                   sign0: np.ndarray | None = None, s_prev: float = float("nan")) -> np.ndarray:
    cond, sign = _regularity(model, C.jacobian(model, q))
    bad = np.flatnonzero(cond > cond_max)
    if bad.size:
        k = int(bad[0])
        raise SingularConfigurationError(
            f"{model.name}: near-singular configuration at input s={s[k]:.6g}: cond(Phi_q) = "
            f"{cond[k]:.3g} > {cond_max:.3g} (dead centre or branch point; the branch would flip)")
    ref = sign[0] if sign0 is None else sign0
    flip = np.flatnonzero(np.any(sign != ref, axis=1))
    if flip.size:
        k = int(flip[0])
        prev = s[k - 1] if k > 0 else s_prev
        raise SingularConfigurationError(
            f"{model.name}: det(Phi_q) changed sign between inputs s={prev:.6g} and s={s[k]:.6g}: "
            "the solution crossed a singular configuration onto another assembly branch")
    return ref


def chunks(model: Linkage, N: int, kkt: bool = False) -> list[slice]:
    """Sample slices keeping the batched (N, m, n) systems under ~32 MB (walkers are large)."""
    size = model.n_coords * (2 if kkt else 1)
    step = max(1, int(4e6 // (size * size)))
    return [slice(a, min(a + step, N)) for a in range(0, N, step)]


def assembled_positions(model: Linkage, s, cond_max: float = COND_MAX) -> np.ndarray:
    """Configurations q (N, n) on the model's assembly branch at inputs s (N,), vectorised:
    constructive assembly, then Newton to ||Phi|| < 1e-12, then a branch check over the samples."""
    s = np.atleast_1d(np.asarray(s, dtype=float))
    q = np.empty((s.shape[0], model.n_coords))
    sign = None
    for c in chunks(model, s.shape[0]):
        q[c] = newton(model, assemble(model, s[c]), s[c])
        sign = _check_regular(model, q[c], s[c], cond_max, sign)
    return q


def track(model: Linkage, s, q_start: np.ndarray | None = None, cond_max: float = COND_MAX,
          tol: float = TOL) -> np.ndarray:
    """Continuation along a sequence of inputs s (N,) (e.g. an encoder record): sample k starts from
    sample k-1 plus the first-order predictor q_s (s_k - s_{k-1}); returns q (N, n).

    q_start (n,) is the configuration at s[0] (default: the constructive assembly). Raises
    SingularConfigurationError where the linkage cannot follow the input on its branch.
    """
    s = np.atleast_1d(np.asarray(s, dtype=float))
    q0 = assemble(model, s[:1])[0] if q_start is None else np.asarray(q_start, dtype=float)
    out = np.empty((s.shape[0], model.n_coords))
    q = newton(model, q0[None, :], s[:1], tol)
    sign = _check_regular(model, q, s[:1], cond_max)
    out[0] = q[0]
    for k in range(1, s.shape[0]):
        q_s = solve(model, C.jacobian(model, q), -C.input_derivative(model, s[k - 1:k]))
        q = newton(model, q + q_s * (s[k] - s[k - 1]), s[k:k + 1], tol)
        _check_regular(model, q, s[k:k + 1], cond_max, sign, s_prev=s[k - 1])
        out[k] = q[0]
    return out
