"""The one dispatch of the compiled kernels on a joint type code (kernels/tree.py calls these).

numba cannot call through a list of functions, so each function is a fixed ``if`` chain over the
type codes calling that type's compiled step (every one ``inline="always"``: the chain and the
type's code are written into the kernel, as if by hand). A new joint type adds one branch to each
function here (docs/kernels.md "Adding a joint type"); the chains put the commonest types first.
"""
from __future__ import annotations

from numba import njit

from . import fixed, free_flyer, helical, planar, prismatic, revolute, revolute_unbounded, spherical

# the codes as plain globals (numba freezes them into the compiled code)
REVOLUTE, REVOLUTE_UNBOUNDED, PRISMATIC = revolute.CODE, revolute_unbounded.CODE, prismatic.CODE
SPHERICAL, FREE_FLYER, PLANAR, HELICAL = spherical.CODE, free_flyer.CODE, planar.CODE, helical.CODE


@njit(cache=True, inline="always")
def rt(jt, ftab, i, q, iq):
    """(R_J row-major (9), t_J (3)) of joint i, a 12-tuple: the child frame in the placement frame."""
    if jt == REVOLUTE:
        return revolute.rt(ftab, i, q, iq)
    if jt == FREE_FLYER:
        return free_flyer.rt(ftab, i, q, iq)
    if jt == SPHERICAL:
        return spherical.rt(ftab, i, q, iq)
    if jt == PRISMATIC:
        return prismatic.rt(ftab, i, q, iq)
    if jt == REVOLUTE_UNBOUNDED:
        return revolute_unbounded.rt(ftab, i, q, iq)
    if jt == PLANAR:
        return planar.rt(ftab, i, q, iq)
    if jt == HELICAL:
        return helical.rt(ftab, i, q, iq)
    return fixed.rt(ftab, i, q, iq)


@njit(cache=True, inline="always")
def cos_sin(jt, q, iq):
    """(cos θ, sin θ) of an ABOUT_AXIS joint (rnea's axis-aligned step)."""
    if jt == REVOLUTE:
        return revolute.cos_sin(q, iq)
    return revolute_unbounded.cos_sin(q, iq)


@njit(cache=True, inline="always")
def axis_step(c, s, K, Kd, t0, t1, t2, p0, p1, p2, q0, q1, q2, e0, e1, e2, f0, f1, f2):
    """The body's motion behind an ABOUT_AXIS joint about e_2 (revolute.axis_step): every such type
    is a pure rotation with S = (0, ±u), c_J = 0, so they share it and differ only in cos_sin."""
    return revolute.axis_step(c, s, K, Kd, t0, t1, t2, p0, p1, p2, q0, q1, q2, e0, e1, e2, f0, f1, f2)


@njit(cache=True, inline="always")
def axis_force(c, s, t0, t1, t2, f0, f1, f2, n0, n1, n2):
    """The body's force in the parent frame behind an ABOUT_AXIS joint about e_2 (revolute.axis_force)."""
    return revolute.axis_force(c, s, t0, t1, t2, f0, f1, f2, n0, n1, n2)


@njit(cache=True, inline="always")
def motion(jt, ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2):
    """(v_J = S q̇ (6), (x, y) + S q̈ + c_J (6)) of joint i in the child frame, a 12-tuple."""
    if jt == REVOLUTE or jt == REVOLUTE_UNBOUNDED:
        return revolute.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    if jt == FREE_FLYER:
        return free_flyer.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    if jt == SPHERICAL:
        return spherical.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    if jt == PRISMATIC:
        return prismatic.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    if jt == PLANAR:
        return planar.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    if jt == HELICAL:
        return helical.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)
    return fixed.motion(ftab, i, RJ, v, a, iv, x0, x1, x2, y0, y1, y2)


@njit(cache=True, inline="always")
def column(jt, ftab, i, RJ, k):
    """Column k of joint i's motion subspace S in the child frame, a 6-tuple."""
    if jt == REVOLUTE or jt == REVOLUTE_UNBOUNDED:
        return revolute.column(ftab, i, RJ, k)
    if jt == FREE_FLYER:
        return free_flyer.column(ftab, i, RJ, k)
    if jt == SPHERICAL:
        return spherical.column(ftab, i, RJ, k)
    if jt == PRISMATIC:
        return prismatic.column(ftab, i, RJ, k)
    if jt == PLANAR:
        return planar.column(ftab, i, RJ, k)
    if jt == HELICAL:
        return helical.column(ftab, i, RJ, k)
    return fixed.column(ftab, i, RJ, k)


@njit(cache=True, inline="always")
def project(jt, ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv):
    """tau[s, iv:iv + nv] = Sᵀ (f, n): joint i's generalised force from the force on its body."""
    if jt == REVOLUTE or jt == REVOLUTE_UNBOUNDED:
        revolute.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
    elif jt == FREE_FLYER:
        free_flyer.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
    elif jt == SPHERICAL:
        spherical.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
    elif jt == PRISMATIC:
        prismatic.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
    elif jt == PLANAR:
        planar.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
    elif jt == HELICAL:
        helical.project(ftab, i, RJ, f0, f1, f2, n0, n1, n2, tau, s, iv)
