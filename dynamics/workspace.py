"""The workspace (`Data`) of a constant `Model`, as Pinocchio separates Model and Data.

A `Data` holds what the algorithms derive once from a model: the packed tables the compiled
kernels read (dynamics/kernels/tree.py: itab, ftab, gravity), the numpy path's generated
functions (codegen.py), the unit-norm blocks of q and the plate inverse-dynamics workspaces
(plate_id.py). The caller may build one with `Data(model)` and pass it (``data=``) to every call;
the live processes hold one per model. Without it, `data(model)` gives the one kept on the model
(an entry of its instance dictionary, outside its dataclass fields: the model stays constant): the
model and its workspace refer to each other and are collected together (a weak map keyed by the model
here kept every model alive, since its value referred to its key). A Data only grows caches
keyed by what was asked (dictionary inserts), so threads may share it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .joints import joint_type
from .kernels.layout import AXIS, COM, FTAB_WIDTH, INERTIA, ITAB_WIDTH, MASS, PARAM, ROT, SCOL, TRANS, Y6
from .kernels.tree import rnea_work_size
from .model import JOINT_NQ_NV, Model
from .spatial import parallel_axis


JOINT_CODES = tuple(JOINT_NQ_NV)   # the kernels' joint type codes (each dynamics/joints module's CODE)


def _tables(model: Model) -> tuple[np.ndarray, np.ndarray]:
    n = len(model.segments)
    itab = np.empty((n, ITAB_WIDTH), dtype=np.int64)
    ftab = np.zeros((n, FTAB_WIDTH))
    for i, s in enumerate(model.segments):
        j = s.joint
        plain = bool(np.array_equal(np.asarray(j.rotation, dtype=float), np.eye(3)))
        axis = np.asarray(j.axis, dtype=float)
        jt = joint_type(j.type)
        aligned = plain and jt.ABOUT_AXIS and np.count_nonzero(axis) == 1 and abs(axis[np.flatnonzero(axis)[0]]) == 1.0
        unit_q, unit_w = (model.idx_q[i] + jt.UNIT[0], jt.UNIT[1]) if jt.UNIT else (-1, 0)
        sconst = jt.NV == 1 and jt.CONSTANT_SUBSPACE
        itab[i] = (model.parents[i], jt.CODE, model.idx_q[i], model.idx_v[i], j.nq, j.nv, plain,
                   np.flatnonzero(axis)[0] if aligned else -1, unit_q, unit_w,
                   sum(1 << k for k, fixed in enumerate(jt.FIXED_IN_PARENT) if fixed), sconst)
        if sconst:       # the constant column, from the type's own code items (floats, None for 0)
            lin, ang = jt.emit_subspace(j, None)[0]
            ftab[i, SCOL:SCOL + 6] = [float(x or 0.0) for x in (*lin, *ang)]
        ftab[i, AXIS:AXIS + 3] = j.axis
        ftab[i, PARAM] = j.pitch
        ftab[i, ROT:ROT + 9] = np.asarray(j.rotation, dtype=float).ravel()
        ftab[i, TRANS:TRANS + 3] = j.translation
        ftab[i, MASS] = s.mass
        ftab[i, COM:COM + 3] = s.com
        ftab[i, INERTIA:INERTIA + 9] = np.asarray(s.inertia, dtype=float).ravel()
        # spatial inertia about the frame origin: [[m E, −[h]×], [[h]×, I_O]], h = m c
        h = s.mass * np.asarray(s.com, dtype=float)
        H = np.array([[0.0, -h[2], h[1]], [h[2], 0.0, -h[0]], [-h[1], h[0], 0.0]])
        Y = np.zeros((6, 6))
        Y[:3, :3] = s.mass * np.eye(3)
        Y[:3, 3:], Y[3:, :3] = -H, H
        Y[3:, 3:] = parallel_axis(np.array(s.mass), np.asarray(s.com, dtype=float), np.asarray(s.inertia, dtype=float))
        ftab[i, Y6:Y6 + 36] = Y.ravel()
    itab.setflags(write=False)
    ftab.setflags(write=False)
    return itab, ftab


@dataclass(eq=False)
class Data:
    """Workspace of `model` (see the module docstring). itab and ftab (kernels/layout.py): the
    kernel tables; gravity (3,) m/s² (zero_gravity: zeros); no_ext (0, nseg, 6) and
    no_cent (0, 15): the "no external wrenches" and "no centroidal output" arguments of the kernels;
    rnea_work: gravity and the one-sample rnea kernel's scratch (a kernel holds the GIL: threads may
    share it);
    generated, unit_blocks, plate_id: caches of codegen.py, joints.py and plate_id.py."""

    model: Model
    itab: np.ndarray = field(init=False, repr=False)
    ftab: np.ndarray = field(init=False, repr=False)
    gravity: np.ndarray = field(init=False, repr=False)
    no_ext: np.ndarray = field(init=False, repr=False)
    no_cent: np.ndarray = field(init=False, repr=False)
    zero_gravity: np.ndarray = field(init=False, repr=False)
    rnea_work: np.ndarray = field(init=False, repr=False)
    generated: dict = field(init=False, repr=False, default_factory=dict)
    unit_blocks: list | None = field(init=False, repr=False, default=None)
    plate_id: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model, Model):
            raise TypeError(f"Data needs a dynamics.Model, got {type(self.model).__name__}")
        self.itab, self.ftab = _tables(self.model)
        self.gravity = np.array(self.model.gravity, dtype=float)
        self.no_ext = np.zeros((0, len(self.model.segments), 6))
        self.no_cent = np.zeros((0, 15))
        self.zero_gravity = np.zeros(3)
        self.rnea_work = np.empty(rnea_work_size(len(self.model.segments), self.model.nq))
        self.rnea_work[:3] = self.gravity


_KEY = "_workspace_data"     # the default workspace's entry in a model's instance dictionary


def data(model: Model, given: Data | None = None) -> Data:
    """`given` if not None (checked to belong to `model`), else the model's default workspace."""
    if given is not None:
        if given.model is not model:
            raise ValueError(f"data: workspace of model {given.model.name!r} given for model {model.name!r}")
        return given
    d = model.__dict__.get(_KEY)
    if d is None:
        d = model.__dict__[_KEY] = Data(model)   # the frozen dataclass refuses setattr, not its dict
    return d
