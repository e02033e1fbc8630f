"""Repair of a rejected transition stride: Surla's iterations on the compensating coordinates
(methods.md j.6, d.4; Surla 1980 thesis, Ch. 3.4). Pure computation.

The plain transition (`semi_inverse.transition`) blends the legs and the compensating coordinates of
nominals a and b over one stride T; its ZMP, recomputed by `dynamics.zmp.zmp_model` from the 3-D
motion, leaves the law path by d̄ (d.4). The repair keeps the legs and moves the compensating
coordinates c (psi; psi and theta for a frontal nominal):

    c(t) = c_blend(t) + S(t),   S the spline of defect 3 (`transition.defect3_spline`) on N + 1 uniform
    nodes over [0, T] with S = S' = S'' = 0 at both ends, interior node values free (start: 0, the blend)

so c equals nominal a's value, rate and acceleration at t = 0 and b's at t = T (the joins stay C2,
the setpoint never steps). The spline carries the correction, not the whole coordinate: the
nominals' accelerations jump at the ZMP law's switches (j.5), which the blend keeps and a C2 spline
of the whole coordinate cannot follow (measured on surla_bidyn with the frontal compensation, S 0.82
-> 0.85, T = 1.2 s, 24 intervals: d̄ 268 mm through the blend's node values, the blend's own 14.6 mm).

**Objective.** The moments about the law path at chosen instants tau_i, as the ZMP's distances d(tau_i)
from the law point (d = M / F_z, d.4): the stride's own samples refined `oversample` times (the
nominals' coordinates integrated again there), so that the spline cannot hide a deviation between the
stored samples (measured, same pair: optimised on the samples alone, d̄ 6.2 mm there was 9.8 mm on a
grid 16 times finer; optimised on 4 times the samples, 6.8 mm there and 7.0 mm on the 16-times grid). Surla's Iteration A minimises J = sum_i |M(tau_i)| by gradient steps, his
Iteration B takes Newton steps on the accelerations once d̄ < delta; both stop at d̄ < eps. The
acceptance is on d̄ = max_i |d(tau_i)|, and sums are the wrong target for it: least squares on the
same residuals (scipy.optimize.least_squares, same nodes and instants, same pair) lowered the sum of
squares 2.7 times but d̄ only from 14.6 to 12.2 mm, the min-max step below to 6.8 mm: a trunk whose
ends are fixed (an inverted pendulum) cannot cancel the deviation everywhere, and a sum leaves it
where it is largest. So each iteration here is
Iteration B's Newton linearisation d(z + dz) ~ d(z) + J dz (J by forward differences over all interior
node values, not one equal acceleration increment per plane) with the step that minimises d̄ of the
linearisation: the linear programme min s subject to e_k . (d_i + J_i dz) <= s for 8 directions e_k
of the plane (a lateral law; the octagon is within 8 % of the 2-D distance) or +-x (sagittal only),
|dz| <= rho (scipy.optimize.linprog, HiGHS). A step is kept when the true d̄ falls, else rho is halved.
Stops at d̄ < eps (repaired), or after `max_iterations` linearisations, or when d̄ falls by less than
`min_gain` (relative) in an iteration, or rho < `min_step` (not repaired: the result says d̄ before
and after). Every loop is bounded: at most max_iterations (n + 1 + halvings) evaluations, n = the
number of interior node values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from .biped import BipedError
from .semi_inverse import BipedNominal, Transition, blended_trunk, transition
from .transition import Defect3Spline, defect3_spline

NODES = 24          # intervals of the correction spline over the stride (50 ms at T = 1.2 s)
OVERSAMPLE = 4      # instants per stored sample
MAX_ITERATIONS = 8
DIRECTIONS = 8      # of the polygon that bounds the 2-D distance in the linear programme


@dataclass(frozen=True, eq=False)
class Repair:
    """The result of `repair`: transition, the stride at the nominals' samples (the repaired one when
    repaired, else the plain blend); repaired (d̄ < eps at every instant); d_before (m) the plain
    blend's d̄ at the samples; d_after (m) the best d̄ found over the instants (the samples included);
    iterations (linearisations), evaluations (strides computed), nodes (intervals N), instants (count);
    correction: per compensating coordinate (psi, then theta) the spline S of the module doc."""

    transition: Transition
    repaired: bool
    d_before: float
    d_after: float
    iterations: int
    evaluations: int
    nodes: int
    instants: int
    correction: tuple[Defect3Spline, ...]

    def meta(self) -> dict:
        """JSON-able summary for a stored transition's metadata."""
        return {"tried": True, "repaired": self.repaired, "d_before": self.d_before, "d_after": self.d_after,
                "iterations": self.iterations, "evaluations": self.evaluations, "nodes": self.nodes,
                "instants": self.instants,
                "method": "correction of psi (and theta) by a spline of defect 3 with zero end value, rate and "
                          "acceleration; Newton linearisation, min-max step by linear programme (methods.md j.6)"}


def _corrections(x: np.ndarray, z: np.ndarray) -> tuple[Defect3Spline, ...]:
    zero = np.zeros(1)
    return tuple(defect3_spline(x, np.concatenate([zero, zk, zero]), (0.0, 0.0), (0.0, 0.0)) for zk in z)


def repair(a: BipedNominal, b: BipedNominal, eps: float = 0.01, nodes: int = NODES, oversample: int = OVERSAMPLE,
           max_iterations: int = MAX_ITERATIONS, step: float = 0.05, min_step: float = 1e-4,
           min_gain: float = 0.01) -> Repair:
    """Repair the transition from a to b (module doc): nodes N >= 2 intervals, `oversample` instants
    per stored sample, at most `max_iterations` linearisations; step: the first bound rho of a node
    value's change (rad). BipedError for bad arguments (named)."""
    if not (isinstance(nodes, int) and nodes >= 2):
        raise BipedError(f"repair: nodes: expected an integer >= 2, got {nodes!r}")
    if not (isinstance(oversample, int) and oversample >= 1):
        raise BipedError(f"repair: oversample: expected an integer >= 1, got {oversample!r}")
    if not (isinstance(max_iterations, int) and max_iterations >= 0):
        raise BipedError(f"repair: max_iterations: expected an integer >= 0, got {max_iterations!r}")
    if not (eps > 0 and step > 0):
        raise BipedError(f"repair: expected eps > 0 m and step > 0 rad, got {eps!r}, {step!r}")
    plain = transition(a, b, eps)
    T, M = a.T, len(a.t)
    tf = np.arange(M * oversample) * T / (M * oversample)
    base = blended_trunk(a, b, tf)
    coords = [c for c in base if c is not None]
    x = np.linspace(0.0, T, nodes + 1)
    lateral = a.zmp_law_y is not None
    angles = np.arange(DIRECTIONS) * 2 * np.pi / DIRECTIONS if lateral else np.array([0.0, np.pi])
    E = np.column_stack([np.cos(angles), np.sin(angles)])          # (K, 2) directions of the plane
    count = [0]

    def trunk(z, t, blended):
        out = []
        for c, s in zip(blended, _corrections(x, z)):
            out.append(tuple(ck + s(t, k) for k, ck in enumerate(c)))
        return out[0], (out[1] if len(out) > 1 else None)

    def deviations(z):
        """(M * oversample, 2) ZMP minus law point (y column 0 without a lateral law) and d̄."""
        count[0] += 1
        tr = transition(a, b, eps, tf, trunk(z, tf, coords))
        d = np.column_stack([tr.zmp[:, 0] - tr.zmp_law_x,
                             tr.zmp[:, 1] - tr.zmp_law_y if lateral else np.zeros(len(tf))])
        return d, float(tr.deviation.max())

    n = nodes - 1
    z = np.zeros((len(coords), n))
    d, dbar = deviations(z)
    it, rho, h = 0, step, 1e-6
    while dbar >= eps and it < max_iterations and rho >= min_step:
        it += 1
        flat = z.ravel()
        J = np.empty((d.size, flat.size))
        for j in range(flat.size):
            zj = flat.copy()
            zj[j] += h
            J[:, j] = ((deviations(zj.reshape(z.shape))[0] - d) / h).ravel()
        # rows: e_k . (d_i + J_i dz) <= s, for every instant i and direction k
        Jx, Jy = J[0::2], J[1::2]
        A = np.vstack([np.column_stack([e[0] * Jx + e[1] * Jy, -np.ones(len(tf))]) for e in E])
        rhs = np.concatenate([-(d @ e) for e in E])
        cost = np.zeros(flat.size + 1)
        cost[-1] = 1.0
        before = dbar
        while rho >= min_step:
            lp = linprog(cost, A_ub=A, b_ub=rhs, bounds=[(-rho, rho)] * flat.size + [(0, None)], method="highs")
            if lp.status != 0:
                rho /= 2
                continue
            zn = (flat + lp.x[:-1]).reshape(z.shape)
            dn, dbn = deviations(zn)
            if dbn < dbar:
                z, d, dbar = zn, dn, dbn
                break
            rho /= 2
        if dbar >= eps and before - dbar < min_gain * before:
            break
    repaired = dbar < eps
    spl = _corrections(x, z)
    out = transition(a, b, eps, a.t, trunk(z, a.t, blended_trunk(a, b, a.t)[:len(coords)])) if repaired else plain
    return Repair(out, repaired, plain.d_max, dbar, it, count[0], nodes, len(tf), spl)
