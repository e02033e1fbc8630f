"""Columns of the model tables the compiled tree kernels read (built by `dynamics.workspace.Data`,
read by `kernels/tree.py` and by each joint type's compiled step in `dynamics/joints/`).

    itab (nseg, ITAB_WIDTH) int64: parent (-1 = world); joint type code (dynamics.joints: the type's
        CODE); idx_q, idx_v, nq, nv; PLAIN 1 if the placement rotation R0 is the identity (its
        product skipped); AXIS_K k if the joint turns about ±e_k with R0 = E (a type with
        ABOUT_AXIS: rnea's rotation touches 2 components), else −1; UNIT_Q, UNIT_W the start in q
        and the width of the joint's unit-norm block (quaternion 4, (cos θ, sin θ) 2; width 0:
        none); IN_PARENT bit k set if the joint's subspace column k is fixed in the parent frame;
        SCONST 1 if the joint has one coordinate and a constant subspace column in the child frame
        (its type's CONSTANT_SUBSPACE; then c_J = 0), read from ftab's SCOL.
    ftab (nseg, FTAB_WIDTH) float: joint axis (3), placement rotation R0 row-major (9),
        translation t0 (3) m, mass kg, CoM (3) m, central inertia (9) kg·m², the body's spatial
        inertia Y (6×6, row-major) about its frame origin, then PARAM: the joint type's own
        constant (the helical joint's pitch, m/rad; 0 for the others), SCOL the constant subspace
        column (6: linear, angular) of an SCONST joint.

A leaf module (no numba, nothing of dynamics) so that the joint types can import it.
"""
PARENT, TYPE, IQ, IV, NQ, NV, PLAIN, AXIS_K, UNIT_Q, UNIT_W, IN_PARENT, SCONST = range(12)
ITAB_WIDTH = 12
AXIS, ROT, TRANS, MASS, COM, INERTIA, Y6, PARAM, SCOL = 0, 3, 12, 15, 16, 19, 28, 64, 65
FTAB_WIDTH = 71
