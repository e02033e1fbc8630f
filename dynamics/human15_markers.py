"""Joint coordinates of a tree model (the 15-segment human) from a full-body marker set.

Positions are (N, 3) m per marker in the lab frame (z up), NaN where not seen; time first.

Pipeline (docs/analysis.md, "The 15-segment human"):

1. Each segment of the marker set is fitted by the Söderkvist/Kabsch rigid fit
   (``markers.rigid_fit``) of its markers' positions in the segment frame, x_lab = R x_seg + t.
   In a frame where fewer than 3 of a segment's markers are seen (always for the thigh and upper
   arm, which have 2) its proximal joint centre, placed by the fitted parent, is a further point
   (reference position: the segment origin).
2. Joint coordinates: the root (free flyer) q = (t, quaternion (x, y, z, w) of R) of its fitted
   frame; a chain of revolute joints between two fitted segments (through massless links with no
   offsets) from the relative rotation R_rel = R_parentᵀ R_child = Π_k Rot(s_k e_{i_k}, q_k):
   three axes → the intrinsic Euler angles of the axis sequence (i_1, i_2, i_3), q_k = s_k θ_k;
   one axis a → q = atan2(a · w, (tr R_rel − aᵀ R_rel a)/2), w = vee(R_rel − R_relᵀ)/2 (the
   rotation about a nearest R_rel).
3. Velocities and accelerations (``joint_rates``): revolute v = q̇, a = q̈ by central differences
   (``smoothing.differentiate``) of the unwrapped angles; the free flyer as the model defines it,
   v = (Rᵀ ṫ, vee(Rᵀ Ṙ)) in the base frame, a = v̇.
4. Inverse dynamics with the measured plates (``marker_inverse_dynamics``): ``plate_id`` bottom-up
   and top-down, each joint torque kept only where it is computable: bottom-up τ_k needs the
   coordinates on the paths to every segment below joint k (their motion) and the ground load of
   every foot below it known (on an assigned plate; or unloaded: on a plate carrying no load, or in
   swing by the events; never with a contact point on the bare floor beside the plates, within the
   height tolerance above their surface: the floor may carry part of its load); top-down and the root
   residual need every coordinate and every foot's load.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
from scipy.spatial.transform import Rotation

from . import kernels, workspace
from .markers import MarkerError, masked_rigid_fit, unwrap_finite
from .model import Model
from .kinematics import all_finite, contact_positions, contiguous, tree_state
from .plate_id import PlateLoad, _outline, _outlines, plate_inverse_dynamics
from .support import within
from .rnea import Wrench, rnea
from .zmp import com_of_state
from .smoothing import _series, differentiate


@dataclass(frozen=True)
class MarkerSet:
    """A marker set of a tree model: segment name → {marker name → (3,) m in the segment frame},
    for a model whose thigh (``shank_l`` joint offset) is ``reference_thigh`` m long; opensim:
    marker name → the name OpenSim's gait models give the same landmark (for TRC export)."""

    name: str
    model: str
    segments: Mapping[str, Mapping[str, np.ndarray]]
    reference_thigh: float = 0.4222
    opensim: Mapping[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> tuple[str, ...]:
        """Every marker name, each once, in file order."""
        return tuple(dict.fromkeys(m for seg in self.segments.values() for m in seg))


def marker_set_from_dict(d: Mapping) -> MarkerSet:
    """MarkerSet of a parsed configs/markersets/*.toml table; MarkerError naming a bad entry."""
    if d.get("kind") != "markerset" or not isinstance(d.get("segment"), Mapping):
        raise MarkerError("a marker set needs kind = \"markerset\" and [segment.NAME] tables")
    segs = {}
    for seg, table in d["segment"].items():
        segs[seg] = {}
        for label, xyz in table.items():
            p = np.asarray(xyz, float)
            if p.shape != (3,) or not np.all(np.isfinite(p)):
                raise MarkerError(f"marker set {d.get('name', '?')!r}: {seg}.{label} must be 3 numbers (m), got {xyz!r}")
            segs[seg][label] = p
    names = d.get("opensim", {})
    if not isinstance(names, Mapping) or not all(isinstance(v, str) and v for v in names.values()):
        raise MarkerError(f"marker set {d.get('name', '?')!r}: [opensim] must map marker names to OpenSim names (strings)")
    return MarkerSet(str(d.get("name", "")), str(d.get("model", "")), segs, float(d.get("reference_thigh", 0.4222)),
                     dict(names))


def scale(mset: MarkerSet, model: Model) -> float:
    """Position scale for `model`: its thigh length (the knee offset ``shank_l``) / reference_thigh."""
    try:
        return float(np.linalg.norm(model.segment("shank_l").joint.translation)) / mset.reference_thigh
    except KeyError:
        return 1.0


@dataclass(frozen=True)
class Chain:
    """The joint coordinates between a fitted segment and its nearest fitted ancestor `parent`:
    q_index, v_index (k,) of the revolute coordinates (proximal first), axes (k, 3) in the joint
    frames; centre (3,) m: the joint centre in the parent frame; seq: the lab axis of each joint
    (e.g. "YXZ", the Euler sequence of 3), sign (k,): each axis's direction along it (±1)."""

    segment: str
    parent: str
    q_index: np.ndarray
    v_index: np.ndarray
    axes: np.ndarray
    centre: np.ndarray
    seq: str
    sign: np.ndarray


def chains(model: Model, mset: MarkerSet) -> list[Chain]:
    """The chains of the marker set's non-root segments, parents before children; MarkerError if
    a segment's parent is not in the set or a chain is not 1 or 3 revolute joints through
    massless, offset-free, unrotated links."""
    out = []
    for seg in model.segments:
        if seg.name not in mset.segments or seg.parent is None:
            continue
        path, s = [], seg
        while s.parent is not None and (not path or s.name not in mset.segments):
            path.append(s)
            s = model.segment(s.parent)
        if s.name not in mset.segments:
            raise MarkerError(f"segment {seg.name!r}: its proximal segment {s.name!r} is not in the marker set")
        path.reverse()
        axes = np.array([p.joint.axis for p in path])
        if any(p.joint.type != "revolute" or not np.allclose(p.joint.rotation, np.eye(3)) for p in path) or \
                any(np.any(p.joint.translation) for p in path[1:]) or len(path) not in (1, 3) or \
                (len(path) == 3 and not np.allclose(np.abs(axes) @ np.abs(axes).T, np.eye(3))):
            raise MarkerError(f"segment {seg.name!r}: the joints from {s.name!r} are not 1 revolute joint or 3 about "
                              "distinct lab-aligned axes (±x, ±y, ±z)")
        lab = np.argmax(np.abs(axes), axis=1)
        out.append(Chain(seg.name, s.name, np.array([model.idx_q[model.index[p.name]] for p in path]),
                         np.array([model.idx_v[model.index[p.name]] for p in path]),
                         axes, np.array(path[0].joint.translation), "".join("XYZ"[i] for i in lab),
                         np.sign(axes[np.arange(len(path)), lab])))
    return out


@dataclass(frozen=True)
class SegmentFits:
    """Fitted segment frames, N frames: rotation (N, 3, 3), translation (N, 3) m (x_lab = R x + t)
    and residual (N,) m (RMS marker distance) per segment name; NaN where not fitted. stacked: the
    same rotations (S, N, 3, 3) and translations (S, N, 3) in the `FitPlan`'s segment order, or None
    (`fit_positions` fills it; the compiled `joint_coordinates` reads it)."""

    rotation: dict[str, np.ndarray]
    translation: dict[str, np.ndarray]
    residual: dict[str, np.ndarray]
    stacked: tuple[np.ndarray, np.ndarray] | None = None


def missing_markers(mset: MarkerSet, markers: Mapping[str, np.ndarray]) -> dict[str, list[str]]:
    """segment → its markers never seen (absent or all NaN) in `markers` (label → (N, 3) m)."""
    out = {}
    for seg, table in mset.segments.items():
        gone = [m for m in table if m not in markers or not np.isfinite(markers[m]).any()]
        if gone:
            out[seg] = gone
    return out


@dataclass(frozen=True)
class FitPlan:
    """How `fit_positions` fits the segments of a model's marker set (`fit_plan`, built once):
    segments (S,) names in model order (root first, parents before children); labels (M,) the set's
    markers; marker (S, P) index of each segment's markers in labels (M: a padding slot, never seen);
    ref (S, P + 1, 3) m their positions in the segment frame (scaled to the model), the last slot the
    proximal joint centre (the segment origin); parent (S,) index of the segment's fitted parent (-1:
    none, the root); centre (S, 3) m the joint centre in the parent frame; levels: segment indices by
    depth below the root (level k's parents are in level k − 1). For the compiled `joint_coordinates`
    (kernels.markers.joint_coordinates), the chains: chain (C, 9) int64 the parent and child index in
    segments, the number of joints (3 or 1), their q indices (−1: none) and, for 3, the index triple
    (i, j, k) of scipy's Euler angles of the chain's intrinsic sequence (its lab axes reversed);
    chain_sign (C, 3) each joint's axis sign along its lab axis (0: none); chain_axis (C, 3) the first
    joint's axis; angles (A,) int64 every chain's q indices."""

    segments: tuple[str, ...]
    labels: tuple[str, ...]
    marker: np.ndarray
    ref: np.ndarray
    parent: np.ndarray
    centre: np.ndarray
    levels: tuple[np.ndarray, ...]
    chain: np.ndarray
    chain_sign: np.ndarray
    chain_axis: np.ndarray
    angles: np.ndarray


def fit_plan(model: Model, mset: MarkerSet, links: list[Chain] | None = None) -> FitPlan:
    """The `FitPlan` of model and marker set; links: their `chains` (default: built here)."""
    by_child = {c.segment: c for c in (chains(model, mset) if links is None else links)}
    segs = tuple(x.name for x in model.segments if x.name in mset.segments)
    labels = mset.labels
    width = max(len(mset.segments[g]) for g in segs)
    s = scale(mset, model)
    marker = np.full((len(segs), width), len(labels), dtype=np.int64)
    ref = np.zeros((len(segs), width + 1, 3))
    parent = np.full(len(segs), -1, dtype=np.int64)
    centre = np.zeros((len(segs), 3))
    depth = np.zeros(len(segs), dtype=np.intp)
    for k, g in enumerate(segs):
        table = mset.segments[g]
        marker[k, :len(table)] = [labels.index(m) for m in table]
        ref[k, :len(table)] = [s * p for p in table.values()]
        c = by_child.get(g)
        if c is not None:
            parent[k], centre[k] = segs.index(c.parent), c.centre
            depth[k] = depth[parent[k]] + 1
    levels = tuple(np.flatnonzero(depth == d) for d in range(1, int(depth.max(initial=0)) + 1))
    fitted = [by_child[g] for g in segs if g in by_child]
    chain = np.full((len(fitted), 9), -1, dtype=np.int64)
    sign, axis = np.zeros((len(fitted), 3)), np.zeros((len(fitted), 3))
    for k, c in enumerate(fitted):
        chain[k, :3] = segs.index(c.parent), segs.index(c.segment), len(c.q_index)
        chain[k, 3:3 + len(c.q_index)] = c.q_index
        if len(c.q_index) == 3:     # scipy's as_euler of an intrinsic sequence works on it reversed
            chain[k, 6:] = ["XYZ".index(x) for x in reversed(c.seq)]
        sign[k, :len(c.sign)], axis[k] = c.sign, c.axes[0]
    angles = np.array([i for c in fitted for i in c.q_index], dtype=np.int64)
    return FitPlan(segs, labels, marker, ref, parent, centre, levels, chain, sign, axis, angles)


def fit_positions(plan: FitPlan, positions: np.ndarray) -> SegmentFits:
    """Rigid fit of every segment of the plan (module doc step 1) from positions (N, M, 3) m lab,
    the plan's labels in order, NaN where not seen.

    Every segment at once (`markers.masked_rigid_fit`, one batched SVD) on its own markers (but those
    that see fewer than 3 in every frame, as the thigh and upper arm with 2); then,
    level by level below the root, the segments where fewer than 3 of their markers are seen again
    with their proximal joint centre, placed by the (final) fit of their parent, as a further point.
    A fit where 3 markers are seen does not depend on the parent's, so this is the fit of each
    segment in turn, parents first."""
    pos = np.asarray(positions, float)
    n, m = pos.shape[0], len(plan.labels)
    if pos.ndim != 3 or pos.shape[1:] != (m, 3):
        raise MarkerError(f"positions must be (N, {m}, 3) m for the {m} markers of the set, got {pos.shape}")
    if kernels.enabled():
        S = len(plan.segments)
        rot, tr, res = np.empty((S, n, 3, 3)), np.empty((S, n, 3)), np.empty((S, n))
        ext = np.full((n, m + 1, 3), np.nan)
        ext[:, :m] = pos
        kernels.kernel("markers.segment_fits")(ext, plan.marker, plan.ref, plan.parent, plan.centre, rot, tr, res)
        return _fits(plan, rot, tr, res)
    obs = np.concatenate([pos, np.full((n, 1, 3), np.nan)], axis=1)[:, plan.marker]      # (N, S, P, 3)
    seen = np.all(np.isfinite(obs), axis=3)
    few = seen.sum(axis=2) < 3                                                          # (N, S)
    S, P = plan.marker.shape
    obs = np.concatenate([obs, np.full((n, S, 1, 3), np.nan)], axis=2)
    seen = np.concatenate([seen, np.zeros((n, S, 1), bool)], axis=2)
    first = np.flatnonzero(~(few & (plan.parent >= 0)).all(axis=0))    # not those always fitted with their centre
    rot, tr, res = np.full((S, n, 3, 3), np.nan), np.full((S, n, 3), np.nan), np.full((S, n), np.nan)
    r1, t1, e1 = masked_rigid_fit(plan.ref[first], obs[:, first], seen[:, first])
    rot[first], tr[first], res[first] = np.moveaxis(r1, 0, 1), np.moveaxis(t1, 0, 1), e1.T
    for ks in plan.levels:
        ks = ks[few[:, ks].any(axis=0)]
        if not ks.size:
            continue
        rows = np.flatnonzero(few[:, ks].any(axis=1))           # only the frames that need it
        p, f = plan.parent[ks], few[rows][:, ks]
        c = np.einsum("snij,sj->nsi", rot[p][:, rows], plan.centre[ks]) + np.moveaxis(tr[p][:, rows], 0, 1)
        o, w = obs[rows][:, ks], seen[rows][:, ks]                # (R, K, P + 1, ...)
        o[:, :, P] = c
        w[:, :, P] = f & np.all(np.isfinite(c), axis=2)
        r2, t2, e2 = masked_rigid_fit(plan.ref[ks], o, w)
        sel = (ks[:, None], rows[None, :])
        rot[sel] = np.where(f.T[..., None, None], np.moveaxis(r2, 0, 1), rot[sel])
        tr[sel] = np.where(f.T[..., None], np.moveaxis(t2, 0, 1), tr[sel])
        res[sel] = np.where(f.T, e2.T, res[sel])
    return _fits(plan, rot, tr, res)


def _fits(plan: FitPlan, rot: np.ndarray, tr: np.ndarray, res: np.ndarray) -> SegmentFits:
    """SegmentFits of the stacked (S, N, ...) fits of the plan's segments."""
    return SegmentFits({g: rot[k] for k, g in enumerate(plan.segments)},
                       {g: tr[k] for k, g in enumerate(plan.segments)},
                       {g: res[k] for k, g in enumerate(plan.segments)}, (rot, tr))


def fit_segments(model: Model, mset: MarkerSet, markers: Mapping[str, np.ndarray],
                 links: list[Chain] | None = None) -> SegmentFits:
    """Rigid fit of every segment of the marker set (module doc step 1), root first; a marker
    absent from `markers` counts as never seen. markers: label → (N, 3) m lab; links: the
    `chains` of model and set (default: built here; a live stream builds a `fit_plan` once and calls
    `fit_positions`)."""
    if not any(m in markers for m in mset.labels):
        raise MarkerError(f"none of the {len(mset.labels)} markers of the set {mset.name!r} is in the trial")
    n = len(next(markers[m] for m in mset.labels if m in markers))
    pos = np.full((n, len(mset.labels), 3), np.nan)
    for k, m in enumerate(mset.labels):
        if m in markers:
            pos[:, k] = markers[m]
    return fit_positions(fit_plan(model, mset, links), pos)


def calibrate(model: Model, mset: MarkerSet, static: Mapping[str, np.ndarray]) -> MarkerSet:
    """The marker set placed on this subject from a static trial (OpenSim's "marker placement";
    Plug-in Gait's static offsets, for every segment): the subject stands in the model's neutral
    posture (q = neutral: upright, joint angles 0). The root is fitted from its markers (median
    over the static frames), the model placed at q = neutral on it (forward kinematics), and every
    marker seen is moved to where it is in its segment's frame: p_seg = R_segᵀ (p − t_seg). Markers
    not seen keep the set's (scaled) position. Returns a set for this model (reference_thigh = its
    thigh, scale 1). static: label → (N, 3) m lab; MarkerError if the root is not fitted."""
    from scipy.spatial.transform import Rotation

    from .kinematics import forward_kinematics

    med = {k: np.nanmedian(np.asarray(v, float), axis=0)[None] for k, v in static.items()
           if k in mset.labels and np.isfinite(v).all(axis=1).any()}
    root = model.segments[0].name
    fits = fit_segments(model, MarkerSet(mset.name, mset.model, {root: mset.segments[root]}, mset.reference_thigh),
                        med)
    R, t = fits.rotation[root][0], fits.translation[root][0]
    if not np.all(np.isfinite(R)):
        raise MarkerError(f"static trial: the root segment {root!r} is not fitted (needs 3 of its markers "
                          f"{', '.join(mset.segments[root])})")
    q = model.neutral().astype(float)
    q[:3], q[3:7] = t, Rotation.from_matrix(R).as_quat()
    pose = forward_kinematics(model, q[None])
    s = scale(mset, model)
    segs = {}
    for seg, table in mset.segments.items():
        i = model.index[seg]
        Rs, ts = pose.rotation[0, i], pose.translation[0, i]
        segs[seg] = {m: (Rs.T @ (med[m][0] - ts) if m in med else s * p) for m, p in table.items()}
    thigh = float(np.linalg.norm(model.segment("shank_l").joint.translation)) if "shank_l" in model.index \
        else mset.reference_thigh * s
    return MarkerSet(f"{mset.name} (calibrated)", mset.model, segs, thigh, dict(mset.opensim))


_EYE = np.eye(3)


def _vee(m: np.ndarray) -> np.ndarray:
    """(N, 3) axial vector of the skew part of m (N, 3, 3): vee((m − mᵀ)/2)."""
    return 0.5 * np.stack([m[:, 2, 1] - m[:, 1, 2], m[:, 0, 2] - m[:, 2, 0], m[:, 1, 0] - m[:, 0, 1]], axis=1)


def joint_coordinates(model: Model, mset: MarkerSet, fits: SegmentFits, previous=None,
                      links: list[Chain] | None = None, plan: FitPlan | None = None) -> np.ndarray:
    """q (N, nq) from the fitted frames (module doc step 2), angles unwrapped over time; NaN for the
    coordinates of segments not in the set or not fitted in a frame. The root must be a free flyer.

    previous (nq,) or None: each coordinate's last finite value before these frames (a live stream's
    earlier blocks; NaN where none): the angles continue unwrapped from it and the root quaternion
    stays in its hemisphere, so block by block gives the q of the whole record at once. links: as in
    `fit_segments`; plan: their `fit_plan` (a live stream builds it once; default: built here).

    Compiled (`kernels.enabled()`): kernels.markers.joint_coordinates, scipy's conversions written out
    (Markley's quaternion, Bernardes & Viollet's Euler angles) and np.unwrap's rule: equal to this
    numpy path to rounding (tests: 1e-12 rad)."""
    root = model.segments[0]
    if root.joint.type != "free_flyer" or root.name not in mset.segments or np.any(root.joint.translation) \
            or not (np.array_equal(root.joint.rotation, _EYE) or np.allclose(root.joint.rotation, _EYE)):
        # (array_equal first: allclose costs ~20 µs, a live stream calls this every frame)
        raise MarkerError(f"model {model.name!r}: the root {root.name!r} must be a free flyer at the lab origin "
                          "in the marker set")
    R0 = fits.rotation[root.name]
    n = len(R0)
    if kernels.enabled():
        plan = fit_plan(model, mset, links) if plan is None else plan
        q = np.empty((n, model.nq))
        last = np.full(model.nq, np.nan) if previous is None else np.ascontiguousarray(previous, dtype=float)
        if last.shape != (model.nq,):       # the kernel does not check its indices
            raise MarkerError(f"previous must be ({model.nq},) for model {model.name!r}, got {last.shape}")
        rot, tr = fits.stacked if fits.stacked is not None and len(fits.stacked[0]) == len(plan.segments) else (
            np.stack([fits.rotation[g] for g in plan.segments]), np.stack([fits.translation[g] for g in plan.segments]))
        kernels.kernel("markers.joint_coordinates")(rot, tr, plan.segments.index(root.name), plan.chain,
                                                    plan.chain_sign, plan.chain_axis, plan.angles, last, q)
        return q
    q = np.full((n, model.nq), np.nan)
    ok = np.flatnonzero(np.all(np.isfinite(R0), axis=(1, 2)))
    q[:, :3] = fits.translation[root.name]
    links = chains(model, mset) if links is None else links
    angles = [i for c in links for i in c.q_index]
    groups: dict[str, list[int]] = {}
    one = []
    for k, c in enumerate(links):
        if len(c.q_index) == 3:
            groups.setdefault(c.seq, []).append(k)
        else:
            one.append(k)
    if links:           # every chain at once
        Rp = np.stack([fits.rotation[c.parent] for c in links])                       # (C, N, 3, 3)
        Rc = np.stack([fits.rotation[c.segment] for c in links])
        good = np.all(np.isfinite(Rp), axis=(2, 3)) & np.all(np.isfinite(Rc), axis=(2, 3))   # (C, N)
        rel = np.einsum("cnji,cnjk->cnik", Rp, Rc)                                     # NaN where not good
    # one rotation conversion for the root and every 3-axis chain (scipy's from_matrix costs ~0.1 ms a
    # call whatever N; a slice of its result is not renormalised, so each part is what its own call gives)
    parts = [R0[ok]] + [rel[ks][good[ks]] for ks in groups.values()]
    rot = Rotation.from_matrix(np.concatenate(parts)) if sum(len(x) for x in parts) else None
    if len(ok):
        quat = rot[:len(ok)].as_quat()  # (x, y, z, w), the model's layout
        # one hemisphere over time: a quaternion's sign is arbitrary, its derivative is not
        last = np.full(4, np.nan) if previous is None else np.asarray(previous, float)[3:7]
        first = int(np.all(np.isfinite(last)) and float(quat[0] @ last) < 0)
        flips = first + np.concatenate(([0], np.cumsum(np.einsum("ij,ij->i", quat[1:], quat[:-1]) < 0)))
        q[ok, 3:7] = np.where((flips % 2 == 1)[:, None], -quat, quat)
    start = len(ok)
    for (seq, ks), part in zip(groups.items(), parts[1:]):
        if not len(part):
            continue
        ang = np.full((len(ks), n, 3), np.nan)
        ang[good[ks]] = rot[start:start + len(part)].as_euler(seq)
        start += len(part)
        for j, k in enumerate(ks):
            c = links[k]
            q[:, c.q_index] = ang[j] * c.sign
    if one:             # one axis a: the rotation about a nearest R_rel (module doc); NaN where not good
        a = np.array([links[k].axes[0] for k in one])                                  # (K, 3)
        r = rel[one]
        w = _vee(r.reshape(-1, 3, 3)).reshape(len(one), n, 3)
        cos = 0.5 * (np.trace(r, axis1=2, axis2=3) - np.einsum("ki,knij,kj->kn", a, r, a))
        q[:, [links[k].q_index[0] for k in one]] = np.arctan2(np.einsum("kni,ki->kn", w, a), cos).T
    if angles:          # every angle at once (the columns are independent)
        q[:, angles] = unwrap_finite(q[:, angles], None if previous is None else np.asarray(previous, float)[angles])
    return q


def _rate_tables(model: Model) -> tuple[np.ndarray, np.ndarray, str]:
    """What the compiled `joint_rates` reads of the model, kept in its workspace (a live stream asks
    every frame; ~15 µs of Python): each revolute joint's (q, v) index (R, 2) int64; the first free
    flyer's (2,) int64 (−1: none); the error naming a joint type without rates ('' if none)."""
    cache = workspace.data(model).plate_id
    tables = cache.get(("rates",))
    if tables is None:
        rev = [(iq, iv) for seg, iq, iv in zip(model.segments, model.idx_q, model.idx_v) if seg.joint.type == "revolute"]
        root, bad = np.array([-1, -1], dtype=np.int64), ""
        for seg, iq, iv in zip(model.segments, model.idx_q, model.idx_v):
            if seg.joint.type == "free_flyer" and root[0] < 0:
                root[:] = iq, iv
            elif seg.joint.type not in ("revolute", "fixed", "free_flyer"):
                bad = f"joint_rates: joint type {seg.joint.type!r} of segment {seg.name!r} is not supported"
                break
        tables = cache[("rates",)] = (np.array(rev, dtype=np.int64).reshape(-1, 2), root, bad)
    return tables


def joint_rates(model: Model, q: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """(v, a) (N, nv) of q (N, nq) sampled at fs Hz (module doc step 3); NaN propagates to the
    neighbours of a NaN sample."""
    q = np.asarray(q, float)
    n = len(q)
    if kernels.enabled():       # kernels.markers.joint_rates: the same differences, loops instead of numpy calls
        revs, root, bad = _rate_tables(model)
        if bad:
            raise MarkerError(bad)
        _series(q, "x", 3)
        if q.ndim != 2 or q.shape[1] != model.nq:       # the kernel does not check its indices
            raise MarkerError(f"q must be (N, {model.nq}) for model {model.name!r}, got {q.shape}")
        v, a = np.empty((n, model.nv)), np.empty((n, model.nv))
        kernels.kernel("markers.joint_rates")(np.ascontiguousarray(q), 1.0 / fs, revs, root, v, a)
        return v, a
    rev = [(iq, iv) for seg, iq, iv in zip(model.segments, model.idx_q, model.idx_v) if seg.joint.type == "revolute"]
    v = np.full((n, model.nv), np.nan)
    if rev:             # every revolute coordinate at once (the columns are independent)
        v[:, [iv for _, iv in rev]] = differentiate(q[:, [iq for iq, _ in rev]], fs)
    for seg, iq, iv in zip(model.segments, model.idx_q, model.idx_v):
        t = seg.joint.type
        if t in ("revolute", "fixed"):  # a fixed joint (a body strapped to a segment) has no coordinate
            continue
        elif t == "free_flyer":
            R = np.full((n, 3, 3), np.nan)
            ok = np.all(np.isfinite(q[:, iq + 3:iq + 7]), axis=1)
            R[ok] = Rotation.from_quat(q[ok, iq + 3:iq + 7]).as_matrix()
            dR = differentiate(R, fs)
            W = np.einsum("nji,njk->nik", R, dR)  # Rᵀ Ṙ = [ω_body]×
            v[:, iv:iv + 3] = np.einsum("nji,nj->ni", R, differentiate(q[:, iq:iq + 3], fs))
            v[:, iv + 3:iv + 6] = _vee(W)
        else:
            raise MarkerError(f"joint_rates: joint type {t!r} of segment {seg.name!r} is not supported")
    return v, differentiate(v, fs)


@dataclass(frozen=True)
class MarkerKinetics:
    """Joint torques of a marker-driven motion, N frames, lab frame, SI (module doc step 4).

    tau_bottom_up, tau_top_down (N, nv) N·m (the free flyer's rows: the residual base wrench in
    the base frame for bottom-up), NaN where not computable; residual_force (N, 3) N and
    residual_moment (N, 3) N·m about the CoM: measured − required ground wrench, NaN likewise;
    plate_below, indeterminate (N, nv) bool as in plate_id.PlateID; foot_known (N, F) bool: the
    foot's ground load is known (module doc step 4); feet (F,) segment names; foot_wrench (N, F, 6):
    the ground wrench applied to each foot (force N, moment N·m about the lab origin; zero where none)."""

    tau_bottom_up: np.ndarray
    tau_top_down: np.ndarray
    residual_force: np.ndarray
    residual_moment: np.ndarray
    plate_below: np.ndarray
    indeterminate: np.ndarray
    foot_known: np.ndarray
    feet: tuple[str, ...]
    foot_wrench: np.ndarray | None = None


def _columns(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """(nq, S) and (nv, S) float: 1 where a column of q / of v belongs to segment s (its joint's)."""
    cq, cv = np.zeros((model.nq, len(model.segments))), np.zeros((model.nv, len(model.segments)))
    for k, (seg, iq, iv) in enumerate(zip(model.segments, model.idx_q, model.idx_v)):
        cq[iq:iq + seg.joint.nq, k] = cv[iv:iv + seg.joint.nv, k] = 1.0
    return cq, cv


@dataclass(frozen=True)
class _Layout:
    """What the inverse dynamics below derive once per model and feet (`_layout`): columns (`_columns`);
    neutral (nq,) the neutral posture; need (nv, nv) bool: τ_k needs coordinate j (it moves a segment
    below joint k); below (nv, F) bool: foot f is below coordinate k; contacts (C,) the feet's contact
    point names, contact_foot (C,) the foot of each. For the compiled glue (kernels.marker_id): the
    segment of each column of q (nq,) and of v (nv,), the segment and local position (C, 3) m of each
    contact point (int64 indices, C-contiguous arrays)."""

    columns: tuple[np.ndarray, np.ndarray]
    neutral: np.ndarray
    need: np.ndarray
    below: np.ndarray
    contacts: tuple[str, ...]
    contact_foot: np.ndarray
    q_segment: np.ndarray
    v_segment: np.ndarray
    contact_segment: np.ndarray
    contact_local: np.ndarray


def _layout(model: Model, feet: tuple[str, ...]) -> _Layout:
    """The `_Layout` of model and feet, kept in the model's workspace (a live stream asks it every
    frame: ~80 µs of numpy calls)."""
    cache = workspace.data(model).plate_id
    key = ("markers", tuple(feet))
    lay = cache.get(key)
    if lay is None:
        sup = model.supports[:, model.dof_segment] > 0                    # (nseg, nv): coordinate j moves segment i
        contacts = tuple(c for f in feet for c in model.segment(f).contacts)
        cq, cv = _columns(model)
        points = [model.point(c) for c in contacts]
        lay = cache[key] = _Layout(
            (cq, cv), model.neutral(), (sup.T.astype(float) @ sup.astype(float)) > 0,
            np.ascontiguousarray(model.supports[[model.index[f] for f in feet]][:, model.dof_segment].T > 0),
            contacts, np.repeat(np.arange(len(feet), dtype=np.int64), [len(model.segment(f).contacts) for f in feet]),
            np.argmax(cq, axis=1).astype(np.int64), np.argmax(cv, axis=1).astype(np.int64),
            np.array([i for i, _ in points], dtype=np.int64), np.array([x for _, x in points], dtype=float).reshape(-1, 3))
    return lay


def _coordinate_finite(model: Model, q: np.ndarray, v: np.ndarray, a: np.ndarray,
                       columns: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(N, nv) bool: the coordinate and its rates are finite (a free flyer: all its 7 q)."""
    cq, cv = _columns(model) if columns is None else columns
    bad = (~np.isfinite(q)) @ cq > 0                  # (N, S): a joint with a q not finite
    return np.isfinite(v) & np.isfinite(a) & ~(bad @ cv.T > 0)


def _on_floor(model: Model, q: np.ndarray, plates: list[PlateLoad], feet: tuple[str, ...], height_tol: float,
              edge_tol: float) -> np.ndarray:
    """(N, F) bool: foot f has a contact point (at q (N, nq), lab frame) within height_tol m above the
    plates' surface and outside every plate's outline grown by edge_tol m — on the bare floor, where a
    load on it is not measured (plate_id.assign_plates' geometry)."""
    lay = _layout(model, feet)
    names, foot = lay.contacts, lay.contact_foot
    pts = contact_positions(model, q, names).reshape(-1, len(names), 3)        # (N, K, 3)
    flat = pts.reshape(-1, 3)
    on_any = np.zeros(flat.shape[0], bool)
    surface = []
    for pl in plates:
        outline, z = _outline(np.ascontiguousarray(pl.corners, dtype=float).tobytes())
        on_any |= within(flat, outline, edge_tol)
        surface.append(z)
    low = flat[:, 2] - float(np.mean(surface)) < height_tol
    off = (low & ~on_any).reshape(pts.shape[:2])
    out = np.zeros((pts.shape[0], len(feet)), bool)
    for f in range(len(feet)):
        out[:, f] = off[:, foot == f].any(axis=1)
    return out


def _filled(model: Model, q, v, a) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fin (N, nv) bool, q, v, a) with the coordinates that are not finite set to the neutral
    posture and zero rates (the dynamics kernels take finite input; the result is masked after)."""
    q, v, a = (np.asarray(x, float) for x in (q, v, a))
    lay = _layout(model, ())
    cq, cv = lay.columns
    fin = _coordinate_finite(model, q, v, a, (cq, cv))
    bad = (~fin) @ cv > 0                             # (N, S): a joint with a coordinate not finite
    qf = np.where(bad @ cq.T > 0, lay.neutral, q)
    return fin, qf, np.where(fin, v, 0.0), np.where(fin, a, 0.0)


def _masked(model: Model, fin: np.ndarray, known: np.ndarray, feet: tuple[str, ...], tau_bu, tau_td,
            residual_force, residual_moment, plate_below, indeterminate, foot_wrench) -> MarkerKinetics:
    """MarkerKinetics with each torque kept where computable (module doc step 4): bottom-up τ_k
    where the coordinates moving the segments below joint k are finite and every foot below it has
    a known load; top-down and the residual where everything is."""
    lay = _layout(model, feet)
    need, below = lay.need, lay.below
    ok_bu = ~(need[None] & ~fin[:, None, :]).any(axis=2) & ~(below[None] & ~known[:, None, :]).any(axis=2)
    ok_all = (fin.all(axis=1) & known.all(axis=1))[:, None]
    nan = np.nan
    return MarkerKinetics(
        tau_bottom_up=np.where(ok_bu, tau_bu, nan), tau_top_down=np.where(ok_all, tau_td, nan),
        residual_force=np.where(ok_all, residual_force, nan), residual_moment=np.where(ok_all, residual_moment, nan),
        plate_below=plate_below, indeterminate=indeterminate, foot_known=known, feet=tuple(feet),
        foot_wrench=foot_wrench)


def marker_inverse_dynamics(model: Model, q, v, a, plates: list[PlateLoad], feet: tuple[str, ...],
                            swing=None, height_tol: float = 0.15, edge_tol: float = 0.03) -> MarkerKinetics:
    """Bottom-up and top-down joint torques of q, v, a (N, nq/nv; NaN where not measured) with the
    measured plates (PlateLoad at the same N frames, lab frame), each kept only where computable
    (module doc step 4). feet: foot segment names (their contact points decide the plate
    assignment, ``plate_id.assign_plates``); swing (N, F) bool or None: the foot is known to be in
    swing (unloaded); height_tol, edge_tol m as in assign_plates (marker-driven feet: generous).

    Compiled (`kernels.enabled()`): the steps around the plate inverse dynamics in two kernels
    (kernels.marker_id; a live 2-sample batch spent ~0.2 ms in this function's numpy calls): equal to
    this numpy path to rounding (tests)."""
    if kernels.enabled():
        return _compiled(model, q, v, a, plates, tuple(feet), swing, height_tol, edge_tol)
    fin, qf, vf, af = _filled(model, q, v, a)
    loads = _measured(plates)
    res = plate_inverse_dynamics(model, qf, vf, af, loads, list(feet), height_tol, edge_tol)
    asg = res.assignment
    bad_foot = asg.straddling | (asg.shared[:, :, None] & asg.on_plate).any(axis=1)
    loaded = np.stack([pl.loaded for pl in loads], axis=1)                 # (N, P)
    assigned = asg.weights.sum(axis=1) > 0
    # on a plate that carries no load: the foot's load is known to be zero
    known = (assigned & ~bad_foot) | (asg.on_plate & ~loaded[:, :, None]).any(axis=1) & ~assigned
    # but not a foot with a point on the bare floor beside the plates (its heel off the plate's edge): the
    # floor may carry part of its load, which no plate measures
    known &= ~_on_floor(model, qf, loads, tuple(feet), height_tol, edge_tol)
    if swing is not None:
        known |= np.asarray(swing, bool) & ~assigned
    return _masked(model, fin, known, tuple(feet), res.tau_bottom_up, res.tau_top_down, res.residual_force,
                   res.residual_moment, res.plate_below, res.indeterminate, res.foot_wrench)


def _measured(plates: list[PlateLoad]) -> list[PlateLoad]:
    """The plates with each sample whose force or moment is not finite zeroed and not loaded (the
    dynamics kernels take finite input; such a sample counts as measured nothing); loaded as bool."""
    loads = []
    for pl in plates:
        f, m = np.asarray(pl.force, float), np.asarray(pl.moment, float)
        if all_finite(f) and all_finite(m):         # the usual case: a few µs instead of eight numpy calls
            loads.append(PlateLoad(f, m, pl.corners, np.asarray(pl.loaded, bool), pl.name))
            continue
        ok = np.all(np.isfinite(f), axis=1) & np.all(np.isfinite(m), axis=1)
        loads.append(PlateLoad(np.where(ok[:, None], f, 0.0), np.where(ok[:, None], m, 0.0),
                               pl.corners, np.asarray(pl.loaded, bool) & ok, pl.name))
    return loads


def _compiled(model: Model, q, v, a, plates: list[PlateLoad], feet: tuple[str, ...], swing, height_tol: float,
              edge_tol: float) -> MarkerKinetics:
    """`marker_inverse_dynamics` with its numpy steps compiled: kernels.marker_id.fill (`_filled`), the
    plate inverse dynamics, kernels.marker_id.finish (`_on_floor`, the known feet, `_masked`)."""
    lay = _layout(model, feet)
    q, v, a = (np.ascontiguousarray(x, dtype=float) for x in (q, v, a))
    n = q.shape[0] if q.ndim == 2 else -1
    if q.shape != (n, model.nq) or v.shape != (n, model.nv) or a.shape != (n, model.nv):   # the kernels do not check
        raise MarkerError(f"q, v, a must be (N, {model.nq}), (N, {model.nv}), (N, {model.nv}) for model "
                          f"{model.name!r}, got {q.shape}, {v.shape}, {a.shape}")
    fin, qf, vf, af = np.empty((n, model.nv), bool), np.empty_like(q), np.empty_like(v), np.empty_like(a)
    kernels.entry("marker_id.fill")(q, v, a, lay.q_segment, lay.v_segment, lay.neutral, fin, qf, vf, af)
    loads = _measured(plates)
    res = plate_inverse_dynamics(model, qf, vf, af, loads, list(feet), height_tol, edge_tol)
    sw = np.zeros((n, len(feet)), bool) if swing is None else np.ascontiguousarray(swing, dtype=bool)
    if sw.shape != (n, len(feet)):
        raise MarkerError(f"swing must be (N, {len(feet)}) bool for {n} frames, got {sw.shape}")
    st = tree_state(model, qf)      # the contact points' placements (the plate stage keeps its own)
    asg = res.assignment
    ox, oy, ok, oz = _outlines(tuple(np.ascontiguousarray(pl.corners, dtype=float).tobytes() for pl in loads))
    loaded = np.ascontiguousarray(np.array([pl.loaded for pl in loads], dtype=bool).T)
    known, bu, td = np.empty((n, len(feet)), bool), np.empty((n, model.nv)), np.empty((n, model.nv))
    rf, rm = np.empty((n, 3)), np.empty((n, 3))
    # entry: no type dispatch (~20 µs for 29 arguments); every argument is made here in the kernel's types
    kernels.entry("marker_id.finish")(
        contiguous(st.rotation), contiguous(st.position), lay.contact_segment, lay.contact_local, lay.contact_foot,
        ox, oy, ok, float(np.mean(oz)), float(height_tol), float(edge_tol), asg.weights, asg.on_plate,
        asg.straddling, asg.shared, loaded, sw, fin, lay.need, lay.below, res.tau_bottom_up, res.tau_top_down,
        res.residual_force, res.residual_moment, known, bu, td, rf, rm)
    return MarkerKinetics(bu, td, rf, rm, res.plate_below, res.indeterminate, known, feet, res.foot_wrench)


def foot_inverse_dynamics(model: Model, q, v, a, wrenches, feet: tuple[str, ...]) -> MarkerKinetics:
    """Bottom-up and top-down joint torques of q, v, a (N, nq/nv; NaN where not measured) with the
    ground reaction measured per foot (an OpenSim GRF file: no plate assignment needed). wrenches
    (N, F, 6): force N and moment about the lab origin N·m ON foot f (lab frame), NaN where not
    measured (that foot's load unknown); feet (F,) segment names.

    Bottom-up τ = rnea with the foot wrenches as external wrenches (``rnea.rnea``); the residual
    r = W − w_req = −(the base rows of that rnea, turned to the lab frame about the origin);
    top-down τ_k = τ_bu,k + S_kᵀ r for joints with a loaded foot below them (bottom-up − top-down =
    −S_kᵀ r, ``plate_id``), = τ_bu,k for the others (no foot wrench below: both are the free ends')."""
    fin, qf, vf, af = _filled(model, q, v, a)
    w = np.asarray(wrenches, float)
    if w.shape != (len(qf), len(feet), 6):
        raise MarkerError(f"wrenches must be (N, {len(feet)}, 6) for {len(qf)} frames, got {w.shape}")
    known = np.all(np.isfinite(w), axis=2)
    w = np.where(known[..., None], w, 0.0)
    tau_bu = rnea(model, qf, vf, af, [Wrench(f, w[:, i, :3], np.zeros(3), w[:, i, 3:]) for i, f in enumerate(feet)])
    st = tree_state(model, qf)
    R0, p0 = st.rotation[:, 0], st.position[:, 0]
    f0 = np.einsum("nij,nj->ni", R0, tau_bu[:, :3])                       # w_req − W, lab frame
    r = -np.concatenate([f0, np.einsum("nij,nj->ni", R0, tau_bu[:, 3:6]) + np.cross(p0, f0)], axis=1)
    below = model.supports[[model.index[f] for f in feet]][:, model.dof_segment].T > 0   # (nv, F)
    loaded = np.abs(w[:, :, 2]) > 0
    plate_below = (loaded[:, None, :] & below[None]).any(axis=2)
    plate_above = (loaded[:, None, :] & ~below[None]).any(axis=2)
    tau_td = np.where(plate_below, tau_bu + np.einsum("nkj,nj->nk", st.S, r), tau_bu)
    c = com_of_state(model, st)
    return _masked(model, fin, known, tuple(feet), tau_bu, tau_td, r[:, :3], r[:, 3:] - np.cross(c, r[:, :3]),
                   plate_below, plate_below & plate_above, w)
