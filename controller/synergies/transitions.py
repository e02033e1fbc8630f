"""Precomputed transitions between neighbouring biped / exoskeleton nominals (methods.md j.6).

`walklab synergies build --robot biped|exo` computes, after the nominals, one transition stride per
ordered pair of **neighbours**: two nominals of the grid with the same period T, the same ZMP laws and
double support, and adjacent step scales S in the sorted grid (S_i -> S_i+1 and S_i+1 -> S_i: the
blend is not symmetric, so both directions are computed and judged). The stride is
`dynamics.synthesis.semi_inverse.transition` (legs and trunk blended with the quintic weight from
nominal a at its phase 0 to nominal b at its phase 1, C2 at both ends; the ZMP recomputed by
`dynamics.zmp` against the blended law path; accepted when its largest deviation d_max < `EPS`).
A pair whose plain blend is rejected with d_max < `REACH` eps is repaired when it can be
(`dynamics.synthesis.transition_repair`: the compensating coordinates moved by a spline of defect 3
with C2 ends, methods.md j.6); the meta's ``repair`` says whether it was tried (else why not) and
repaired, d̄ before (the blend's) and after, the iterations and evaluations; an unrepaired pair is
stored as its plain blend, rejected.
Its joint torques, ZMP, margin and foot forces are the `semi_inverse.figures` of the blended motion
(rnea with the ground wrench at the ZMP), packed for the loop's actuators by `biped.synergy_of`.

Stored (format.StoredTransition) in the library folder's ``transitions/`` with the index
``transitions.json`` (one entry per pair, accepted or not, with its d_max); the loop's tracker follows
an accepted one and refuses a switch whose transition was rejected or was never computed
(controller.synergies.track).
"""
from __future__ import annotations

import copyreg
import dataclasses
import types

import numpy as np

from dynamics.synthesis.semi_inverse import figures, transition
from dynamics.synthesis.transition_repair import repair

from .biped import build_with_nominal, synergy_of
from .format import StoredTransition, Synergy, SynergyError

#: Acceptance threshold of a transition's largest ZMP deviation from its blended law path (m), methods.md j.6.
EPS = 0.01
#: A rejected blend is repaired only when its d̄ < REACH * eps: the repair cuts d̄ to 0.46-0.49 of the
#: blend's in every pair measured (surla_bidyn, T = 1.2 s, law II/2: 14.6, 24.3, 24.8, 92.9 and 94.9 mm), so a
#: blend beyond ~2.2 eps is not repairable, and a hopeless try costs up to ~30 s at 200 phases.
REACH = 3.0


def _mappingproxy(d: dict) -> types.MappingProxyType:
    return types.MappingProxyType(d)


# A model's read-only joint index is a mappingproxy, which pickle refuses: pickled as one over a copy of
# its dict, a build worker can hand its BipedNominal back for the transitions (registered on import of
# this module, which the worker function below lives in: any start method).
copyreg.pickle(types.MappingProxyType, lambda m: (_mappingproxy, (dict(m),)))


def nominal_job(job: dict):
    """A library build job of a biped / exoskeleton grid point: (Synergy, BipedNominal) or None
    (`biped.build_with_nominal`)."""
    return build_with_nominal(job)


def name_of(a: str, b: str) -> str:
    return f"{a}__to__{b}"


def pairs(specs: list[dict]) -> list[tuple[dict, dict]]:
    """The ordered neighbour pairs (module doc) of a biped grid's job specs (biped.jobs)."""
    groups: dict = {}
    for s in specs:
        groups.setdefault((s["robot"], s["model"], s["T"], tuple(s["laws"]), s.get("share")), []).append(s)
    out = []
    for g in groups.values():
        g = sorted(g, key=lambda s: s["S"])
        for a, b in zip(g, g[1:]):
            out += [(a, b), (b, a)]
    return out


def build(spec: dict) -> StoredTransition:
    """The transition of one pair. spec: name, eps (m), and "from" / "to" as (job, Synergy,
    semi_inverse.BipedNominal) of the two nominals."""
    (ja, sa, na), (jb, sb, nb) = spec["from"], spec["to"]
    if sa.meta["model_hash"] != sb.meta["model_hash"] or ja["joints"] != jb["joints"] or ja["roll"] != jb["roll"]:
        raise SynergyError(f"{spec['name']}: the two nominals are not of one model and joint set")
    # one model object for both (each nominal was built, and pickled, on its own)
    nb = dataclasses.replace(nb, tree=na.tree)
    tr = transition(na, nb, spec["eps"])
    fixed = {"tried": False}
    if not tr.accepted and tr.d_max < REACH * spec["eps"]:   # Surla's iterations on the compensating coordinates
        rep = repair(na, nb, spec["eps"])
        tr, fixed = rep.transition, rep.meta()
    elif not tr.accepted:
        fixed["why"] = f"d_max >= {REACH:g} eps: beyond the repair's reach (it cuts d_max to about half)"
    moved = dataclasses.replace(na, q=tr.q, v=tr.v, a=tr.a, zmp_law_x=tr.zmp_law_x, zmp_law_y=tr.zmp_law_y)
    fg = figures(moved)
    syn: Synergy = synergy_of(moved, fg, {**ja, "name": spec["name"]}, sa.meta["model_hash"])
    M = syn.u.size
    meta = {"name": spec["name"], "robot": sa.meta["robot"], "model": sa.meta["model"],
            "model_hash": sa.meta["model_hash"], "kind": "transition", "from": sa.name, "to": sb.name,
            "S_from": sa.meta["S"], "S_to": sb.meta["S"], "period": float(na.T), "zmp_law": sa.meta["zmp_law"],
            "zmp_max_deviation": tr.d_max, "eps": float(spec["eps"]), "accepted": bool(tr.accepted),
            "min_margin": float(fg.margin.min()), "peak_torque": float(np.abs(syn.tau).max()),
            "peak_contact_force": float(fg.foot_force.max()), "repair": fixed,
            "rule": "accepted when the largest distance of the ZMP from the law point (x: the transition's stance "
                    "ankle plus the blend of the two nominals' law offsets; y where zmp_law_y is finite) < eps (ZMP "
                    "by dynamics.zmp of model_q, model_v, model_a)"}
    end = lambda x, y: np.vstack([x, y[:1]])  # noqa: E731 - the stride ends on nominal b at its phase 0
    return StoredTransition(meta=meta, actuators=syn.actuators, u=np.arange(M + 1) / M, q=end(syn.q, sb.q),
                            qd=end(syn.qd, sb.qd), qdd=end(syn.qdd, sb.qdd), tau=end(syn.tau, sb.tau),
                            model_q=tr.q, model_v=tr.v, model_a=tr.a, zmp_law_x=tr.zmp_law_x,
                            zmp_law_y=np.full_like(tr.zmp_law_x, np.nan) if tr.zmp_law_y is None else tr.zmp_law_y,
                            zmp=fg.zmp,
                            margin=fg.margin)
