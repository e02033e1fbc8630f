"""Build the equivalent Pinocchio model of a walklab tree Model (for tests and benchmarks).

Requires `pin` (a test dependency, imported lazily). Joint order, q and v layouts are identical;
each joint type's module (dynamics/joints) gives its Pinocchio joint: revolute →
RevoluteUnaligned, revolute_unbounded → RUBZ in a frame turned onto the axis, prismatic →
PrismaticUnaligned, spherical → Spherical, free_flyer → FreeFlyer, planar → Composite(PX, PY, RZ),
helical → HelicalUnaligned; fixed segments are merged into their parent's body as Pinocchio's URDF reader does. Used where
URDF cannot carry the model (spherical and planar joints). Pinocchio's CRBA assumes each subtree's
velocity coordinates are contiguous (depth-first order, as load_urdf gives); for other orders
(e.g. samples.random_model) pin.crba is wrong while pin.rnea and pin.aba are not.
"""
from __future__ import annotations

import numpy as np

from .joints import joint_type
from .model import Model


def to_pinocchio(model: Model):
    """pinocchio.Model with the same dynamics, joint order and layouts as `model`."""
    import pinocchio as pin

    pm = pin.Model()
    pm.name = model.name
    pm.gravity = pin.Motion(np.concatenate((model.gravity, np.zeros(3))))
    frame = []                         # per segment: (pin joint id, segment frame in that joint's frame)
    for s in model.segments:
        j = s.joint
        if s.parent is None:
            pid, pplace = 0, pin.SE3.Identity()
        else:
            pid, pplace = frame[model.index[s.parent]]
        placement = pplace * pin.SE3(np.asarray(j.rotation), np.asarray(j.translation))
        Y = pin.Inertia(float(s.mass), np.asarray(s.com, dtype=float), np.asarray(s.inertia, dtype=float))
        made = joint_type(j.type).pinocchio(pin, j)
        if made is None:             # a fixed joint: the body joins its parent's
            pm.appendBodyToJoint(pid, Y, placement)
            frame.append((pid, placement))
            continue
        jm, R_a = made
        body = pin.SE3.Identity()
        if R_a is not None:          # the joint model works in a frame turned by R_a (e.g. RUBZ onto the axis)
            placement = placement * pin.SE3(R_a, np.zeros(3))
            body = pin.SE3(R_a.T, np.zeros(3))
        jid = pm.addJoint(pid, jm, placement, s.joint_name or s.name)
        pm.appendBodyToJoint(jid, Y, body)
        frame.append((jid, body))
    return pm
