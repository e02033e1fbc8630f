"""Inverse dynamics with measured ground reactions: plate → foot assignment, bottom-up and top-down
joint torques, and the data-quality residual (methods.md b.1, b.2, b.5, h.2).

Wrenches are (force, moment about the lab origin), lab frame, SI. A plate's wrench here is the ground
reaction ON the body (``dynamics.forceplate`` reports it so: +z on a loaded plate).

**Assignment rule** (methods.md b.2). At each sample, a foot is *on* a plate when at least one of its
points (contact points of the foot segment, or named markers) projects inside the plate outline
(grown by ``edge_tol``) and lies less than ``height_tol`` above the plate surface. For a loaded plate
(F_z above the plate threshold):
- one foot on it: the whole plate wrench goes to that foot;
- a foot on two plates (straddling): it gets both wrenches (flag ``straddling``);
- two or more feet on one plate cannot be separated: the whole wrench goes to the foot whose point
  is nearest the plate COP (flag ``shared``; the torques of both legs are then unreliable);
- no foot on it: the wrench is not applied to any segment (flag ``unassigned``); it still counts as
  measured, so it shows in the residual.
An unloaded plate's wrench (noise, offsets) is applied to no foot but counts as measured.

**Torques.** With f_i the gravito-inertial wrench of segment i (``rnea``'s backward pass), W(D) the
plate wrenches on a set of segments D, D_k the subtree below joint k and C_k its complement:

    bottom-up   τ_k = S_kᵀ [ Σ_{D_k} f_i − W(D_k) ] = τ_k^free − S_kᵀ W(D_k)   (= rnea with the plate wrenches)
    top-down    τ_k = S_kᵀ [ W(C_k) − Σ_{C_k} f_i ]
                    = τ_k^free − S_kᵀ [ w_req − W(C_k) ]           (joints with a plate below them)
    top-down    τ_k = τ_k^free                                     (joints with no plate below them)

τ^free is the ground-free rnea (no external wrench), w_req = Σ_all f_i the ground wrench the motion
requires (the free-flyer rows of τ^free in the lab frame; equal to f = Ṗ − M g⃗, n_O = L̇_G + c × f of the
centroidal momentum rate). For joints with a plate
below them the top-down torque comes from the free ends (head, arms, swing leg) and uses no plate in
single support; in double support the other foot's plate is on the complement (``indeterminate``: both
sides carry a plate; statically indeterminate, methods.md trap 9). For any joint

    bottom-up − top-down = −S_kᵀ r ,     r = W_measured − w_req      (the residual wrench)

so exact, consistent data give equal torques, and a plate error ΔW gives r = ΔW.

**Data quality** (methods.md h.2, b.5): CoM acceleration from kinematics c̈ = Ṗ/M vs from the plates
ΣF/M + g⃗, and the moment residual about the CoM; :func:`adequacy` integrates them into J.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from . import kernels, workspace
from .forceplate import Plate, PlateSignals
from .kinematics import check_state, contiguous, tree_state
from .model import Model
from .rnea import rnea
from .spatial import cross, matvec
from .support import SupportPolygon, support_polygon, within
from .zmp import com_of_state, zmp_of_wrench


class PlateIDError(ValueError):
    """Bad input to the plate inverse dynamics (names the argument, foot or plate)."""


@dataclass(frozen=True)
class PlateLoad:
    """One level force plate's measured ground reaction on the body for N samples, lab frame.

    force (N, 3) N; moment (N, 3) N·m about the lab origin; corners (4, 3) m, the plate outline (its
    surface height is the corners' mean z); loaded (N,) bool: F_z above the plate threshold; name.
    """

    force: np.ndarray
    moment: np.ndarray
    corners: np.ndarray
    loaded: np.ndarray
    name: str = ""


def plate_load(plate: Plate, signals: PlateSignals) -> PlateLoad:
    """:class:`PlateLoad` of a processed plate: moment about the origin = centre × F + M_centre."""
    f = np.asarray(signals.force, dtype=float)
    return PlateLoad(f, cross(plate.centre, f) + signals.moment, plate.corners, np.asarray(signals.valid, bool), plate.name)


@dataclass(frozen=True)
class Assignment:
    """Which plate's wrench goes to which foot (module doc rule), N samples, P plates, F feet.

    weights (N, P, F): 1 where plate p's wrench goes to foot f, else 0; on_plate (N, P, F) bool: foot f
    has a point on plate p; shared (N, P): several feet on a loaded plate; unassigned (N, P): loaded
    plate with no foot; straddling (N, F): foot on two or more loaded plates.
    """

    weights: np.ndarray
    on_plate: np.ndarray
    shared: np.ndarray
    unassigned: np.ndarray
    straddling: np.ndarray


def assign_plates(plates: Sequence[PlateLoad], points, point_foot, n_feet: int,
                  height_tol: float = 0.05, edge_tol: float = 0.0) -> Assignment:
    """Assign each loaded plate's wrench to the foot (or feet) on it (module doc rule).

    points: (N, K, 3) m, lab frame, the foot points (contact points or foot markers; NaN = not seen);
    point_foot: (K,) int foot index in [0, n_feet) of each point; height_tol: m above the plate surface
    for a point to count as on it; edge_tol: m the outline is grown by (marker placement error).
    """
    pts = np.asarray(points, dtype=float)
    pf = np.asarray(point_foot)
    if pts.ndim != 3 or pts.shape[2] != 3:
        raise PlateIDError(f"points must be (N, K, 3) m, got {pts.shape}")
    n, k = pts.shape[:2]
    if pf.shape != (k,) or not np.issubdtype(pf.dtype, np.integer) or (k and (pf.min() < 0 or pf.max() >= n_feet)):
        raise PlateIDError(f"point_foot must be ({k},) integers in [0, {n_feet}), got {pf!r}")
    onehot = np.zeros((k, n_feet), bool)
    onehot[np.arange(k), pf] = True
    n_p = len(plates)
    flat = pts.reshape(-1, 3)
    inside = np.empty((n, n_p, k), bool)
    loaded = np.empty((n, n_p), bool)
    surfaces = []
    for p, pl in enumerate(plates):
        _check_plate(pl, n, p)
        outline, surface = _outline(np.ascontiguousarray(pl.corners, dtype=float).tobytes())
        surfaces.append(surface)
        # A NaN point (marker not seen) is in no outline: `within` is False there.
        inside[:, p] = (within(flat, outline, edge_tol) & (flat[:, 2] - surface < height_tol)).reshape(n, k)
        loaded[:, p] = pl.loaded
    # All plates at once from here: a live call costs the same few array operations for any P.
    on = (inside[..., None] & onehot).any(axis=2)                       # (N, P, F)
    count = on.sum(axis=2)
    weights = (on & (loaded & (count == 1))[..., None]).astype(float)
    shared = loaded & (count > 1)
    unassigned = loaded & (count == 0)
    for t, p in np.argwhere(shared) if shared.any() else ():
        pl = plates[p]
        cop = zmp_of_wrench(pl.force[t], pl.moment[t], surfaces[p]).point[0]
        d = np.linalg.norm(pts[t, :, :2] - cop[:2], axis=1)
        d[~inside[t, p]] = np.inf
        weights[t, p, pf[int(np.argmin(d))]] = 1.0
    straddling = (weights > 0).sum(axis=1) > 1
    return Assignment(weights, on, shared, unassigned, straddling)


@functools.lru_cache(maxsize=64)
def _outline(corners: bytes) -> tuple[SupportPolygon, float]:
    """Outline polygon and surface height (m) of a plate from its corners' bytes ((4, 3) float64):
    plates are fixed in the lab, so a live stream computes each outline once."""
    c = np.frombuffer(corners, dtype=float).reshape(4, 3)
    return support_polygon(c), float(np.mean(c[:, 2]))


def _check_plate(pl: PlateLoad, n: int, p: int) -> None:
    for name, shape in (("force", (n, 3)), ("moment", (n, 3)), ("corners", (4, 3)), ("loaded", (n,))):
        x = getattr(pl, name)
        if getattr(x, "shape", None) != shape and np.shape(x) != shape:
            raise PlateIDError(f"plate {p} ({pl.name!r}): {name} must have shape {shape}, got {np.shape(getattr(pl, name))}")


@dataclass(frozen=True, eq=False)
class PlateIDWorkspace:
    """The model-constant part of :func:`plate_inverse_dynamics` for one model and foot set (Pinocchio's
    Data idea): built and validated once by :func:`plate_id_workspace`, kept in the model's workspace
    (workspace.Data.plate_id).

    feet (F,) foot segment names; point_segment (K,) int and point_local (K, 3) m: segment and local
    position of each foot point; point_foot (K,) int its foot; below (nv, F) bool: foot f is in the
    subtree of velocity coordinate k (below_weight: the same as floats). model_args: the model's
    constant arrays as the compiled stage takes them (masses, CoMs, the point tables, gravity).
    """

    feet: tuple[str, ...]
    point_segment: np.ndarray
    point_local: np.ndarray
    point_foot: np.ndarray
    below: np.ndarray
    below_weight: np.ndarray
    model_args: tuple = ()


def plate_id_workspace(model: Model, feet: Sequence[str] | Mapping[str, Sequence[str]],
                       data: workspace.Data | None = None) -> PlateIDWorkspace:
    """Validated :class:`PlateIDWorkspace` of model and feet (as in :func:`plate_inverse_dynamics`),
    kept per foot set in the model's workspace (`data`, default workspace.data(model)) so that a live
    stream validates and indexes once."""
    if isinstance(feet, Mapping):
        key = ("points", tuple((f, tuple(pts or ())) for f, pts in feet.items()))
    else:
        key = ("contacts", tuple(feet))
    cache = workspace.data(model, data).plate_id
    ws = cache.get(key)
    if ws is None:
        names = dict(key[1]) if key[0] == "points" else {f: tuple(model.segment(f).contacts) for f in key[1]}
        ws = cache[key] = _build_workspace(model, names)
    return ws


def _build_workspace(model: Model, names: dict[str, tuple[str, ...]]) -> PlateIDWorkspace:
    roots = [s for s in model.segments if s.parent is None]
    if len(roots) != 1 or roots[0].joint.type != "free_flyer":
        raise PlateIDError(f"model {model.name!r}: needs one floating root (a free_flyer joint), got "
                           f"{[(s.name, s.joint.type) for s in roots]}")
    g = float(np.linalg.norm(model.gravity))
    if not np.allclose(model.gravity, [0.0, 0.0, -g]):
        raise PlateIDError(f"model {model.name!r}: plates lie on the lab floor z = const; gravity must be along -z, "
                           f"got {model.gravity.tolist()}")
    if not names:
        raise PlateIDError("feet: give at least one foot segment")
    foot_seg = []
    for f, pts in names.items():
        foot_seg.append(model.index[model.segment(f).name])
        if not pts:
            raise PlateIDError(f"foot {f!r} has no contact points: give its point names (markers) explicitly")
    segs, local = zip(*(model.point(p) for pts in names.values() for p in pts))
    below = model.supports[np.array(foot_seg)][:, model.dof_segment].T.astype(bool)
    point_segment = np.array(segs, dtype=np.int64)
    point_local = np.array(local, dtype=float)
    point_foot = np.repeat(np.arange(len(names), dtype=np.int64), [len(p) for p in names.values()])
    below_weight = below.astype(float)
    return PlateIDWorkspace(
        feet=tuple(names),
        point_segment=point_segment,
        point_local=point_local,
        point_foot=point_foot,
        below=below,
        below_weight=below_weight,
        model_args=(np.ascontiguousarray(model.masses, dtype=float), np.ascontiguousarray(model.coms, dtype=float),
                    point_segment, point_local, point_foot, below_weight, np.array(model.gravity, dtype=float)),
    )


@dataclass(frozen=True)
class PlateID:
    """Result of :func:`plate_inverse_dynamics`, N samples, lab frame, SI.

    tau_bottom_up, tau_top_down, disagreement = bottom-up − top-down: (N, nv) N·m (N for prismatic; a
    free flyer's rows as in ``rnea``: the bottom-up rows are the residual base wrench);
    plate_below (N, nv) bool: a plate wrench acts below the joint; indeterminate (N, nv) bool: plate
    wrenches on both sides of the joint (double support);
    residual_force (N, 3) N and residual_moment (N, 3) N·m about the CoM: measured − required;
    com_acc_kinematic, com_acc_plates (N, 3) m/s²: Ṗ/M and ΣF/M + g⃗; com (N, 3) m;
    foot_wrench (N, F, 6): the plate wrench applied to each foot (force N, moment N·m about the lab
    origin; as ``Wrench(foot, force, point=0, moment)`` it is the f_ext of ``rnea``);
    assignment: the :class:`Assignment` used; feet: the foot segment names in assignment order.
    """

    tau_bottom_up: np.ndarray
    tau_top_down: np.ndarray
    disagreement: np.ndarray
    plate_below: np.ndarray
    indeterminate: np.ndarray
    residual_force: np.ndarray
    residual_moment: np.ndarray
    com_acc_kinematic: np.ndarray
    com_acc_plates: np.ndarray
    com: np.ndarray
    foot_wrench: np.ndarray
    assignment: Assignment
    feet: tuple[str, ...]


def plate_inverse_dynamics(model: Model, q, v, a, plates: Sequence[PlateLoad], feet: Sequence[str] | Mapping[str, Sequence[str]],
                           height_tol: float = 0.05, edge_tol: float = 0.0, data: workspace.Data | None = None) -> PlateID:
    """Joint torques bottom-up from the plates and top-down from the free ends, their disagreement and
    the CoM-acceleration / moment residual (module doc equations).

    model: a 3-D floating-base tree (root joint free_flyer, gravity along −z); q (N, nq), v, a (N, nv); plates:
    :class:`PlateLoad` per plate (see :func:`plate_load`); feet: foot segment names (their contact
    points decide what is on a plate), or a mapping foot segment → point names (markers or contacts
    of the model). height_tol, edge_tol: m, see :func:`assign_plates`. data: the model's workspace
    (workspace.Data; default one per model).
    """
    (q, v, a), batched = check_state(model, q, v, a)
    if v is None or a is None:
        raise PlateIDError("plate_inverse_dynamics needs q, v and a")
    if not plates:
        raise PlateIDError("plates: give at least one PlateLoad")
    ws = plate_id_workspace(model, feet, data)
    # One position pass serves the foot points, the CoM, the root placement and the motion subspaces.
    st = tree_state(model, q, data=data)
    if kernels.enabled():
        return _compiled(model, st, rnea(model, q, v, a, data=data), plates, ws, height_tol, edge_tol)
    positions = matvec(st.rotation[:, ws.point_segment], ws.point_local) + st.position[:, ws.point_segment]
    asg = assign_plates(plates, positions, ws.point_foot, len(ws.feet), height_tol, edge_tol)

    # Plate wrenches (about the lab origin) per foot, and the total measured.
    w_plate = np.stack([np.concatenate([pl.force, pl.moment], axis=1) for pl in plates], axis=1)  # (N, P, 6)
    w_foot = np.einsum("npf,npj->nfj", asg.weights, w_plate)
    w_meas = w_plate.sum(axis=1)
    w_applied = w_foot.sum(axis=1)

    tau_free = rnea(model, q, v, a, data=data)

    # Required ground wrench = the ground-free rnea's free-flyer rows (force, moment about the base
    # origin, base frame), turned to the lab frame about the lab origin.
    R0, p0 = st.rotation[:, 0], st.position[:, 0]
    f_req = matvec(R0, tau_free[:, :3])
    w_req = np.concatenate([f_req, matvec(R0, tau_free[:, 3:6]) + cross(p0, f_req)], axis=1)
    c = com_of_state(model, st)

    # Feet below each joint (foot segment in the joint's subtree) carrying a plate wrench.
    below = ws.below                                                                    # (nv, F)
    loaded_foot = asg.weights.sum(axis=1) > 0                                           # (N, F)
    plate_below = (loaded_foot[:, None, :] & below[None]).any(axis=2)
    plate_above = (loaded_foot[:, None, :] & ~below[None]).any(axis=2)
    w_below = np.einsum("kf,nfj->nkj", ws.below_weight, w_foot)                        # W(D_k)
    w_complement = w_applied[:, None, :] - w_below                                      # W(C_k)
    S = st.S                                                                            # (N, nv, 6)
    tau_bu = tau_free - np.einsum("nkj,nkj->nk", S, w_below)  # = rnea with the foot wrenches as f_ext
    tau_td = np.where(plate_below, tau_free - np.einsum("nkj,nkj->nk", S, w_req[:, None, :] - w_complement), tau_free)

    mass = model.total_mass
    r = w_meas - w_req
    return PlateID(
        tau_bottom_up=tau_bu,
        tau_top_down=tau_td,
        disagreement=tau_bu - tau_td,
        plate_below=plate_below,
        indeterminate=plate_below & plate_above,
        residual_force=r[:, :3],
        residual_moment=r[:, 3:] - cross(c, r[:, :3]),
        com_acc_kinematic=f_req / mass + model.gravity,  # Ṗ = f_req + M g⃗
        com_acc_plates=w_meas[:, :3] / mass + model.gravity,
        com=c,
        foot_wrench=w_foot,
        assignment=asg,
        feet=ws.feet,
    )


def _compiled(model: Model, st, tau_free: np.ndarray, plates: Sequence[PlateLoad], ws: PlateIDWorkspace,
              height_tol: float, edge_tol: float) -> PlateID:
    """plate_inverse_dynamics after the tree kernels, as one compiled loop (kernels/ground.py).
    The Python side is kept to a few array operations: a live one-sample call is dominated by them."""
    n, n_p, n_f, nv = st.position.shape[0], len(plates), len(ws.feet), model.nv
    for p, pl in enumerate(plates):
        _check_plate(pl, n, p)
    # [F_1, M_1, F_2, M_2, ...] (N, 6 P) is the (N, P, 6) layout: one concatenation
    w_plate = np.concatenate([w for pl in plates for w in (pl.force, pl.moment)], axis=1, dtype=float).reshape(n, n_p, 6)
    loaded = np.ascontiguousarray(np.array([pl.loaded for pl in plates], dtype=bool).T)
    ox, oy, ok, oz = _outlines(tuple(np.ascontiguousarray(pl.corners, dtype=float).tobytes() for pl in plates))
    weights, w_foot, tau, vec = np.empty((n, n_p, n_f)), np.empty((n, n_f, 6)), np.empty((3, n, nv)), np.empty((5, n, 3))
    on, pflags, straddling = np.empty((n, n_p, n_f), bool), np.empty((2, n, n_p), bool), np.empty((n, n_f), bool)
    jflags = np.empty((2, n, nv), bool)
    masses, coms, point_segment, point_local, point_foot, below_weight, gravity = ws.model_args
    # entry: no type dispatch (every argument is made here in the kernel's types and dimensions)
    kernels.entry("ground.plate_id")(
        # the tree arrays may come from the numpy path (large batches): make them the kernel's layout
        contiguous(st.rotation), contiguous(st.position), contiguous(st.S), contiguous(tau_free), masses, coms,
        point_segment, point_local, point_foot, below_weight, w_plate, loaded, ox, oy, ok, oz,
        float(height_tol), float(edge_tol), gravity, weights, on, pflags, straddling, tau, jflags, vec, w_foot)
    return PlateID(tau_bottom_up=tau[0], tau_top_down=tau[1], disagreement=tau[2], plate_below=jflags[0],
                   indeterminate=jflags[1], residual_force=vec[0], residual_moment=vec[1], com_acc_kinematic=vec[2],
                   com_acc_plates=vec[3], com=vec[4], foot_wrench=w_foot,
                   assignment=Assignment(weights, on, pflags[0], pflags[1], straddling), feet=ws.feet)


@functools.lru_cache(maxsize=64)
def _outlines(corners: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The plates' outlines as the compiled stage takes them, from their corners' bytes (see
    :func:`_outline`): vertex x, y (P, K) m (zero-padded), vertex counts (P,), surface heights (P,) m."""
    outlines = [_outline(c) for c in corners]
    width = max(o.n_vertices for o, _ in outlines)
    ox, oy = np.zeros((len(outlines), width)), np.zeros((len(outlines), width))
    for p, (o, _) in enumerate(outlines):
        ox[p, :o.n_vertices], oy[p, :o.n_vertices] = o.vertices[:, 0], o.vertices[:, 1]
    return ox, oy, np.array([o.n_vertices for o, _ in outlines], dtype=np.int64), np.array([z for _, z in outlines])


def adequacy(result: PlateID, dt: float, weights: Sequence[float] = (1.0, 1.0, 1.0, 0.0), trim: int = 0) -> float:
    """Adequacy criterion J (methods.md h.2, acceleration integral, 3-D):

        J = Σ_t [ λ_x Δc̈_x² + λ_y Δc̈_y² + λ_z Δc̈_z² + λ_M |ΔM_G|² ] dt ,  t in [trim, N − trim)

    with Δc̈ = c̈_kinematic − c̈_plates (m/s²) and ΔM_G the moment residual about the CoM (N·m). dt in s;
    weights (λ_x, λ_y, λ_z, λ_M) (scale them ∝ h² as methods.md advises when comparing sample rates);
    trim: samples cut at each end (spline end effects). NaN samples are skipped.
    """
    lam = np.asarray(weights, dtype=float)
    if lam.shape != (4,) or np.any(lam < 0):
        raise PlateIDError(f"weights must be 4 non-negative numbers (λx, λy, λz, λM), got {weights!r}")
    n = result.com_acc_kinematic.shape[0]
    if not (0 <= trim and 2 * trim < n) or not dt > 0:
        raise PlateIDError(f"need dt > 0 and 0 <= trim < N/2 = {n / 2}, got dt={dt}, trim={trim}")
    sl = slice(trim, n - trim)
    da = (result.com_acc_kinematic - result.com_acc_plates)[sl]
    dm = result.residual_moment[sl]
    terms = da**2 @ lam[:3] + lam[3] * np.sum(dm**2, axis=1)
    return float(np.nansum(terms) * dt)
