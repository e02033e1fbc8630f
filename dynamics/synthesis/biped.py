"""Semi-inverse biped nominals: ZMP laws, periodic shooting and the collocation cross-check
(methods.md j.2-j.5; Surla 1980 thesis; models.md 5-6). Pure computation.

**ZMP laws** (models.md 6, sagittal offsets only here). x is measured from the stance ankle, +
forward (walklab's convention, fixed here; BIDYN shifts segment coordinates by XREL instead, which
flips the sign of the printed double-support offsets). Single support, times as fractions of the
half-period P (the printed times are for P = 1 s): law I 0; II 0 until 0.3 P, then +0.035 m; III 0
until 0.5 P, then +0.035 m; IV -0.020 m until 0.2 P, then 0; V -0.020 m until 0.2 P, 0 until 0.6 P, then
+0.035 m. Double support lasts tau = T p / 400 = P p / 200 at each end of the half-step (p % of the
stride); law k (1, 2, 3) is a staircase of k equal steps that carries the ZMP from the trailing foot
(x = -S_h) to the stance ankle in [0, tau], x = -((k - i + 1/2)/k) S_h in the i-th sub-interval, and on
toward the next stance foot (x = +S_h) in [P - tau, P], x = +((i - 1/2)/k) S_h (S_h the half-step length).

**Periodic shooting** (methods.md j.4, BIDYN settings): state Y, half-step map Y(P) = Phi(Y(0));
symmetric gait: Y(P) = W Y(0) (W diagonal +-1); asymmetric: full stride, W = I.

    e = Y0 - W Y(P),  J = ||e||_w (weighted: J mixes rad and rad/s),  grad J = (I - W U)^T w e / J
    Newton step: (U - W) dY0 = W Y0 - Y(P)       (U = dY(P)/dY0, finite differences)
    gradient: Y0 <- Y0 - eps grad J while J > J*; Newton when J <= J* (switch_J = 4)

reject an initial guess with J >= 15, accept at J <= 1e-3, at most 99 iterations, J must decrease
strictly (step halved up to 5 times; a candidate whose integration fails counts as no decrease), divergence guard |Y0|^2 >= 1000, gradient step scaled so the
largest angle change is 0.025 rad. The integrator is scipy's DOP853 (BIDYN: Adams-Moulton).

**Beletsky's linear 5-link biped** (methods.md j.4; Surla 1980 thesis, Ch. 1.1), the unit test: the trunk
obeys J0 psi'' - n0^2 psi = C cos wt + S sin wt, J0 = J + 2 K_r (a + b), n0^2 = g K_r, K_r = M r; its
periodic solution is psi = C1 e^(-mu t) + C2 e^(mu t) - (D cos wt + B sin wt), mu = n0/sqrt(J0),
D = C/(J0 w^2 + n0^2), B = S/(J0 w^2 + n0^2), C1, C2 from the boundary conditions. The system is linear,
so the shooting map is affine and Newton converges in one step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.integrate import solve_bvp, solve_ivp

from ..model import G

#: Single-support laws I..V (models.md 6.1 routine data): end of heel phase TSW1, start of toe phase
#: TSW2 (fractions of the half-period), toe offset FRN1 and heel offset BHND (m).
SINGLE_SUPPORT = {1: (0.0, 0.0, 0.0, 0.0), 2: (0.2, 0.3, 0.035, 0.0), 3: (0.4, 0.5, 0.035, 0.0),
                  4: (0.2, 1.0, 0.0, 0.020), 5: (0.2, 0.6, 0.035, 0.020)}
#: Law 6, "the foot's contacts" (not Surla's; `zmp_law`): the single-support ZMP moves from the ankle to
#: the toe contact in TOE_STEPS equal steps at u0 + (u1 − u0) i / n, i = 0..n−1, TOE_PHASE = (u0, u1)
#: (fractions of the half-period): on the toe from 0.54.
FOOT_LAW = 6
TOE_PHASE = (0.45, 0.55)
TOE_STEPS = 10


class BipedError(ValueError):
    """Bad gait parameters or a shooting that cannot converge (the message names which)."""


def toe_breaks(P: float) -> list[float]:
    """Times (s) in a half-step of length P (s) where law 6's single-support ZMP steps toward the toe."""
    (u0, u1), n = TOE_PHASE, TOE_STEPS
    return [P * (u0 + (u1 - u0) * i / n) for i in range(n)]


def zmp_law(t, P: float, single: int = 1, double: int = 1, step: float = 0.26, share: float = 0.0,
            foot: tuple[float, float] | None = None) -> np.ndarray:
    """Sagittal ZMP offset x (m, from the stance ankle, + forward) at times t (s) within a half-step
    of length P (s): single-support law `single` (1..5 = I..V, or 6), double-support law `double` (1..3),
    half-step length `step` = S_h (m), double support `share` p in % of the stride (module doc).

    Law 6 (the foot's contacts; needs `foot` = (heel x, toe x), m, the stance foot's rearmost and
    foremost contact points from its ankle) is for a rigid foot that rolls onto its toe: its heel
    leaves the floor late in single support, when the ZMP must be at the toe, its only contact (laws
    I-V keep it within 3.5 cm of the ankle, Surla's foot). Single support: at the ankle, then up to the
    toe in n = TOE_STEPS equal steps over TOE_PHASE (u0, u1) of the half-step: x = toe * (the number of
    the breaks P (u0 + (u1 - u0) i / n), i = 0..n-1, at or before t) / n. Double support: law k's
    staircase between the trailing foot's toe and the leading foot's heel (not between the ankles): in
    the i-th sub-interval a + ((i + 1/2)/k) (b - a) with a = toe - S_h, b = heel at the start of the
    half-step and a = toe, b = S_h + heel at its end. Piecewise constant like I-V (Surla's form: the
    integration restarts at each step)."""
    if (single not in SINGLE_SUPPORT and single != FOOT_LAW) or double not in (1, 2, 3):
        raise BipedError(f"zmp law: single-support law {single!r} (1..6) or double-support law {double!r} (1..3) unknown")
    if not (P > 0 and 0 <= share < 100 and math.isfinite(step)):
        raise BipedError(f"zmp law: expected P > 0 s, 0 <= share < 100 %, finite step, got {P}, {share}, {step}")
    if single == FOOT_LAW and not (foot is not None and len(foot) == 2 and all(map(math.isfinite, foot))
                                   and foot[0] < 0 <= foot[1]):
        raise BipedError(f"zmp law 6 (the foot's contacts): expected foot = (heel x < 0, toe x >= 0) m from the "
                         f"ankle, got {foot!r}")
    t = np.asarray(t, dtype=float)
    u = t / P
    heel_x, toe_x = foot if single == FOOT_LAW else (0.0, 0.0)
    if single == FOOT_LAW:
        # the step count from the break times themselves (`toe_breaks`), so that a time on a break is on
        # the same side of it here as in the trunk's right-hand side
        x = toe_x * np.searchsorted(toe_breaks(P), t, side="right") / TOE_STEPS
    else:
        tsw1, tsw2, toe, heel = SINGLE_SUPPORT[single]
        x = np.where(u < tsw1, -heel, 0.0)
        x = np.where(u >= tsw2, toe, x) if tsw2 > 0 else x
    tau = P * share / 200.0
    if tau > 0:
        k = double
        i = np.clip(np.floor(t / tau * k), 0, k - 1)             # 0-based sub-interval of [0, tau]
        a = toe_x - step
        start = a + ((i + 0.5) / k) * (heel_x - a)               # laws I-V: -((k - i - 1/2)/k) S_h
        j = np.clip(np.floor((t - (P - tau)) / tau * k), 0, k - 1)
        end = toe_x + ((j + 0.5) / k) * (step + heel_x - toe_x)  # laws I-V: ((j + 1/2)/k) S_h
        x = np.where(t < tau, start, np.where(t >= P - tau, end, x))
    return x


# ---------------------------------------------------------------------------------------- shooting


@dataclass(frozen=True)
class ShootingSettings:
    """BIDYN's iteration settings (module doc); weights (n,) of the norm J, default 1."""

    switch_J: float = 4.0
    reject_J: float = 15.0
    accept_J: float = 1e-3
    max_iter: int = 99
    halvings: int = 5
    diverge: float = 1000.0
    max_angle_step: float = 0.025
    weights: tuple[float, ...] | None = None
    rtol: float = 1e-10
    atol: float = 1e-12
    method: str = "DOP853"
    fd_step: float = 1e-6


@dataclass(frozen=True)
class ShootingResult:
    """y0 (n,) the periodic initial state; J its residual norm; iterations, newton_steps and the history
    of J per iteration; converged; W the boundary map used."""

    y0: np.ndarray
    J: float
    iterations: int
    newton_steps: int
    history: tuple[float, ...]
    converged: bool
    W: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class Flow:
    """A trajectory integrated piecewise: t (K,) s, y (n, K) at t_eval (or the solver's steps)."""

    t: np.ndarray
    y: np.ndarray


def flow(rhs: Callable, y0: np.ndarray, P: float, settings: ShootingSettings = ShootingSettings(),
         t_eval=None, breaks=()) -> Flow:
    """Integrate y' = rhs(t, y) on [0, P] from y0 (DOP853), restarting at each of `breaks` (s, inside
    (0, P)): a right-hand side that jumps there (a ZMP law switch, methods.md j.5) is integrated one
    smooth piece at a time. A t_eval sample on a break is taken from the piece that ends there."""
    edges = np.unique(np.concatenate([[0.0], [b for b in breaks if 0.0 < b < P], [P]]))
    te = None if t_eval is None else np.asarray(t_eval, dtype=float)
    ts, ys, y = [], [], np.asarray(y0, dtype=float)
    for k, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        eps = 1e-12 * (b - a)   # a piece's own end points see its own law, not the neighbour's

        def piece(t, y, a=a, b=b, eps=eps):
            return rhs(min(max(t, a + eps), b - eps), y)

        sol = solve_ivp(piece, (a, b), y, method=settings.method, rtol=settings.rtol, atol=settings.atol,
                        dense_output=te is not None)
        if not sol.success:
            raise BipedError(f"integration failed on [{a:.4g}, {b:.4g}] s: {sol.message}")
        if te is None:
            last = k == len(edges) - 2
            ts.append(sol.t if last else sol.t[:-1])
            ys.append(sol.y if last else sol.y[:, :-1])
        else:
            sel = te[((te > a) | ((te == a) & (k == 0))) & (te <= b)]
            ts.append(sel)
            ys.append(sol.sol(sel) if sel.size else np.empty((y.size, 0)))
        y = sol.y[:, -1]
    return Flow(np.concatenate(ts), np.concatenate(ys, axis=1))


def monodromy(rhs: Callable, y0: np.ndarray, P: float, settings: ShootingSettings,
              breaks=()) -> tuple[np.ndarray, np.ndarray]:
    """(Y(P), U = dY(P)/dY0 by central differences)."""
    n = y0.size
    yP = flow(rhs, y0, P, settings, breaks=breaks).y[:, -1]
    U = np.empty((n, n))
    for j in range(n):
        d = np.zeros(n)
        d[j] = settings.fd_step * max(1.0, abs(y0[j]))
        U[:, j] = (flow(rhs, y0 + d, P, settings, breaks=breaks).y[:, -1]
                   - flow(rhs, y0 - d, P, settings, breaks=breaks).y[:, -1]) / (2 * d[j])
    return yP, U


def shoot(rhs: Callable, y0, P: float, W=None, angles: int | None = None,
          settings: ShootingSettings = ShootingSettings(), breaks=()) -> ShootingResult:
    """Periodic initial state of y' = rhs(t, y) with Y(P) = W Y(0) (module doc: gradient while
    J > switch_J, Newton below; BIDYN's acceptance, rejection, halving and divergence rules).
    angles: how many leading state entries are angles (the gradient step's 0.025 rad scale);
    breaks: times where rhs jumps (`flow`)."""
    y = np.asarray(y0, dtype=float).copy()
    n = y.size
    Wm = np.eye(n) if W is None else np.diag(np.asarray(W, dtype=float))
    w = np.ones(n) if settings.weights is None else np.asarray(settings.weights, dtype=float)
    angles = n // 2 if angles is None else angles

    def residual(y0):
        yP = flow(rhs, y0, P, settings, breaks=breaks).y[:, -1]
        e = y0 - Wm @ yP
        return e, float(np.sqrt(np.sum(w * e * e))), yP

    e, J, yP = residual(y)
    if J >= settings.reject_J:
        raise BipedError(f"shooting: initial guess rejected, J = {J:.4g} >= {settings.reject_J}")
    hist, newton = [J], 0
    for it in range(1, settings.max_iter + 1):
        if J <= settings.accept_J:
            return ShootingResult(y, J, it - 1, newton, tuple(hist), True, Wm)
        yP, U = monodromy(rhs, y, P, settings, breaks)
        if J <= settings.switch_J:
            step = np.linalg.solve(U - Wm, Wm @ y - yP)
            newton += 1
        else:
            grad = (np.eye(n) - Wm @ U).T @ (w * e) / J
            scale = settings.max_angle_step / max(np.abs(grad[:angles]).max(), 1e-300)
            step = -scale * grad
        for _ in range(settings.halvings + 1):
            cand = y + step
            if float(cand @ cand) >= settings.diverge:
                raise BipedError(f"shooting diverged at iteration {it} (|Y0|^2 >= {settings.diverge})")
            try:
                e2, J2, _ = residual(cand)
            except BipedError:          # the trunk fell within the half-step: a step too long
                J2 = math.inf
            if J2 < J:
                break
            step = 0.5 * step
        else:
            return ShootingResult(y, J, it, newton, tuple(hist), False, Wm)
        y, e, J = cand, e2, J2
        hist.append(J)
    return ShootingResult(y, J, settings.max_iter, newton, tuple(hist), J <= settings.accept_J, Wm)


def collocate(rhs: Callable, y0_guess, P: float, W=None, nodes: int = 81, tol: float = 1e-8, breaks=(),
              max_nodes: int = 100000):
    """The same periodic problem by collocation (`scipy.integrate.solve_bvp`, BC y(0) - W y(P) = 0),
    from the constant initial guess y0_guess on every node (no integration: an unstable system,
    such as a trunk, need not survive the half-step from a poor guess); returns y(0) (n,) and the result.
    With `breaks` (rhs jumps there), each smooth piece [a_k, b_k] is its own block of the state on a
    common s in [0, 1] (t = a_k + s (b_k - a_k)), joined by continuity conditions: collocation
    needs a smooth right-hand side within each interval. max_nodes bounds the mesh (and the time):
    beyond it the collocation fails (BipedError)."""
    y0 = np.asarray(y0_guess, dtype=float)
    n = y0.size
    Wm = np.eye(n) if W is None else np.diag(np.asarray(W, dtype=float))
    edges = np.unique(np.concatenate([[0.0], [b for b in breaks if 0.0 < b < P], [P]]))
    a, h = edges[:-1], np.diff(edges)
    K = len(h)
    s = np.linspace(0.0, 1.0, nodes)
    guess = np.tile(y0[:, None], (K, nodes))

    def f(ss, yy):
        out = np.empty_like(yy)
        for k in range(K):
            lo, eps = a[k], 1e-12 * h[k]
            for j, sj in enumerate(ss):
                t = min(max(lo + sj * h[k], lo + eps), lo + h[k] - eps)
                out[k * n:(k + 1) * n, j] = h[k] * rhs(t, yy[k * n:(k + 1) * n, j])
        return out

    def bc(ya, yb):
        joins = [ya[k * n:(k + 1) * n] - yb[(k - 1) * n:k * n] for k in range(1, K)]
        return np.concatenate([ya[:n] - Wm @ yb[(K - 1) * n:], *joins])

    res = solve_bvp(f, bc, s, guess, tol=tol, max_nodes=max_nodes)
    if not res.success:
        raise BipedError(f"collocation failed: {res.message}")
    return res.sol(0.0)[:n], res


# ------------------------------------------------------------------------- Beletsky's linear biped


@dataclass(frozen=True)
class Beletsky:
    """The linear 5-link biped's trunk (module doc): J (kg m^2, trunk about its CoM), M (kg) and r (m,
    hip to trunk CoM), a, b (m, shank and thigh half-lengths as in Surla's J0), forcing amplitudes
    C, S (N m) at circular frequency w (rad/s). Defaults: BIDYN's trunk (models.md 5.2, 22 kg inferred)."""

    J: float = 1.344
    M: float = 22.0
    r: float = 0.246
    a: float = 0.193
    b: float = 0.214
    C: float = 5.0
    S: float = 2.0
    w: float = 2 * math.pi / 1.5

    @property
    def J0(self) -> float:
        return self.J + 2 * self.M * self.r * (self.a + self.b)

    @property
    def n0sq(self) -> float:
        return G * self.M * self.r

    @property
    def mu(self) -> float:
        return math.sqrt(self.n0sq / self.J0)

    def rhs(self, t: float, y: np.ndarray) -> np.ndarray:
        """[psi', psi''] with psi'' = (n0^2 psi + C cos wt + S sin wt) / J0."""
        return np.array([y[1], (self.n0sq * y[0] + self.C * math.cos(self.w * t) + self.S * math.sin(self.w * t)) / self.J0])

    def periodic(self, t, P: float, W=(1.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
        """The closed-form periodic solution psi(t), psi'(t) (rad, rad/s) with Y(0) = W Y(P), C1 and C2
        solved from those two boundary conditions (module doc)."""
        t = np.asarray(t, dtype=float)
        k = self.J0 * self.w ** 2 + self.n0sq
        D, B = self.C / k, self.S / k
        mu, w = self.mu, self.w

        def part(tt):
            return -(D * np.cos(w * tt) + B * np.sin(w * tt)), -(-D * w * np.sin(w * tt) + B * w * np.cos(w * tt))

        # homogeneous basis [e^-mu t, e^mu t] and derivatives; BC: Y(0) - W Y(P) = 0
        w1, w2 = W
        p0, dp0 = part(0.0)
        pP, dpP = part(P)
        A = np.array([[1 - w1 * math.exp(-mu * P), 1 - w1 * math.exp(mu * P)],
                      [-mu * (1 - w2 * math.exp(-mu * P)), mu * (1 - w2 * math.exp(mu * P))]])
        rhs = -np.array([p0 - w1 * pP, dp0 - w2 * dpP])
        c1, c2 = np.linalg.solve(A, rhs)
        pt, dpt = part(t)
        return (c1 * np.exp(-mu * t) + c2 * np.exp(mu * t) + pt,
                -mu * c1 * np.exp(-mu * t) + mu * c2 * np.exp(mu * t) + dpt)
