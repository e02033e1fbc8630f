"""The per-sample ground stage of a walker in one compiled call: contact forces with latching, the
contact wrench and its ZMP, the kinematic ZMP, the support polygon and the ZMP's margin, and the
force plates' COP (methods.md d.1-d.6, e.2-e.5).

Each quantity is the one of its module, in the same floating-point steps:

    contact   penetration (contact.penetration) of C points against a level ground plane z = z_g,
              contact.contact_forces with the episode state carried between calls;
    wrench    F = Σ_c F_c, n_O = Σ_c p_c × F_c about the lab origin (contact.contact_wrench);
    zmp       zmp.zmp_of_wrench of that wrench on z = z_g (f_z > min_fz), and, given the CoM and the
              centroidal momentum rate, zmp.zmp_centroidal;
    margin    support.support_margin of the contact ZMP to the hull of the points with δ > 0;
    plates    forceplate.process of each plate and forceplate.combine of them all.

A live process holds one :class:`GroundStage` (its constants and the contact state) and calls
:meth:`GroundStage.step` per bus frame of N samples (N = 1 at 1 kHz): on the compiled path that is
one kernel call (kernels/ground.py `stage`), with only shape checks in Python; with the kernels
off (``WALKLAB_JIT=0``) the same step composes the modules' numpy functions. Lab frame, z up, SI,
time first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import forceplate as fp
from . import kernels
from .kernels import ground as G_
from .contact import (ContactError, ContactState, Friction, NormalLaw, Plane, _law_codes, contact_forces,
                      contact_wrench, penetration)
from .model import G
from .support import support_margin
from .zmp import zmp_centroidal, zmp_of_wrench


@dataclass(frozen=True)
class GroundSample:
    """Result of :meth:`GroundStage.step` for N samples, C contact points, P plates (lab frame, SI).

    contact (N, C, 6): F_N (N), contact force F = F_N n̂ + F_T (3, N), latched δ̇⁻ (m/s, NaN out of
    contact), episode energy (J); flags (N, C, 3) bool: in contact (δ > 0), touch-down, lift-off;
    wrench (N, 6): Σ F_c (N) and Σ p_c × F_c (N·m) about the lab origin; zmp (N, 6): the ZMP of that
    wrench and the kinematic ZMP (m, NaN where not valid); margin (N,) m and n_vertices (N,) of the
    support polygon; plates (N, P, 12): each plate's force, moment about its surface centre, COP,
    free moment (forceplate.PlateSignals); plate_flags (N, P, 2): valid, saturated; combined (N, 9):
    total plate force, moment about the origin, COP (forceplate.Combined); valid (N, 3) bool:
    contact ZMP, kinematic ZMP, combined COP. The named properties are views of these arrays.
    """

    contact: np.ndarray
    flags: np.ndarray
    wrench: np.ndarray
    zmp: np.ndarray
    margin: np.ndarray
    n_vertices: np.ndarray
    plates: np.ndarray
    plate_flags: np.ndarray
    combined: np.ndarray
    valid: np.ndarray

    @classmethod
    def empty(cls, n: int, n_contacts: int, n_plates: int) -> "GroundSample":
        """Uninitialised arrays for n samples (a workspace to pass as ``out``)."""
        c, p = n_contacts, n_plates
        return cls(np.empty((n, c, 6)), np.empty((n, c, 3), bool), np.empty((n, 6)), np.empty((n, 6)), np.empty(n),
                   np.empty(n, np.int64), np.empty((n, p, 12)), np.empty((n, p, 2), bool), np.empty((n, 9)),
                   np.empty((n, 3), bool))

    @property
    def f_normal(self) -> np.ndarray:
        return self.contact[:, :, 0]

    @property
    def force(self) -> np.ndarray:
        return self.contact[:, :, 1:4]

    @property
    def in_contact(self) -> np.ndarray:
        return self.flags[:, :, 0]

    @property
    def zmp_point(self) -> np.ndarray:
        return self.zmp[:, 0:3]

    @property
    def zmp_kinematic(self) -> np.ndarray:
        return self.zmp[:, 3:6]

    @property
    def cop(self) -> np.ndarray:
        return self.combined[:, 6:9]


class GroundStage:
    """Constants and contact state of one walker's ground stage (module doc).

    law, friction: the contact laws (contact.NormalLaw, contact.Friction or None); n_contacts: C;
    ground: a level contact.Plane (normal +z; its height is the ZMP plane z_g); min_fz: N, the
    contact ZMP is NaN where Σ F_z ≤ min_fz; mass (kg), g (m/s²), min_fraction: the kinematic ZMP
    (as zmp.zmp_centroidal; mass None: not computed, NaN); tol: m², the hull's collinearity
    tolerance; plates: the forceplate.Plate list, threshold N and pz m as forceplate.process and
    forceplate.combine take them (pz default: the plates' mean centre height). offsets: each
    plate's raw offset (forceplate.zero_offset), settable with :meth:`set_offset`.
    """

    def __init__(self, law: NormalLaw, n_contacts: int, friction: Friction | None = None, ground: Plane | None = None,
                 min_fz: float = 0.0, mass: float | None = None, g: float = G, min_fraction: float = 0.1,
                 tol: float = 1e-12, plates: Sequence[fp.Plate] = (), threshold: float = fp.DEFAULT_THRESHOLD,
                 pz: float | None = None):
        ground = Plane() if ground is None else ground
        if ground.normal.shape != (3,) or not np.array_equal(ground.normal, [0.0, 0.0, 1.0]):
            raise ContactError(f"GroundStage: the ground must be a level 3-D plane (normal +z), got normal {ground.normal.tolist()}")
        if mass is not None and not (np.isfinite(mass) and mass > 0):
            raise ContactError(f"GroundStage: mass must be finite and > 0 kg (or None), got {mass}")
        self.law, self.friction, self.ground = law, friction, ground
        self.n_contacts = int(n_contacts)
        self.min_fz, self.mass, self.g, self.min_fraction, self.tol = float(min_fz), mass, float(g), float(min_fraction), float(tol)
        self.plates = tuple(plates)
        self.threshold = float(threshold)
        self.pz = (sum(float(p.centre[2]) for p in self.plates) / len(self.plates) if self.plates else 0.0) if pz is None else float(pz)
        self.state = ContactState.initial(self.n_contacts)
        self.offsets = np.zeros((len(self.plates), 8))
        self._codes = _law_codes(law, friction)
        self._plane = np.concatenate([ground.point, ground.normal])
        self._par = np.array([ground.point[2], self.min_fz, self.tol, mass or 0.0, self.g, self.min_fraction,
                              self.threshold, self.pz])
        self._pk = np.array([p._kernel_consts for p in self.plates]).reshape(len(self.plates), G_.PLATE_WIDTH)
        self._pmeta = np.array([p._kernel_meta for p in self.plates], dtype=np.int64).reshape(len(self.plates), 4)
        self._raw = np.zeros((0, len(self.plates), 8))
        self._no_cent = np.zeros((0, 9))

    def reset(self) -> None:
        """All contacts out of contact, no history."""
        self.state = ContactState.initial(self.n_contacts)

    def set_offset(self, plate: int, offset) -> None:
        """Raw offset (n_channels,) of plate index `plate` (forceplate.zero_offset), subtracted first."""
        pl = self.plates[plate]
        o = np.asarray(offset, dtype=float)
        if o.shape != (pl.n_channels,):
            raise fp.PlateError(f"offset of plate {pl.name!r} must have shape ({pl.n_channels},), got {o.shape}")
        self.offsets[plate] = 0.0
        self.offsets[plate, :pl.n_channels] = o

    def step(self, pos, vel, raws: Sequence = (), centroidal=None, out: GroundSample | None = None) -> GroundSample:
        """The ground stage of N samples after the previous call's (module doc).

        pos, vel (N, C, 3): contact point positions (m) and velocities (m/s); raws: each plate's raw
        channels (N, n_channels), SI; centroidal (N, 9) = (c m, Ṗ N, L̇_G N·m), needed when the stage
        has a mass; out: a GroundSample.empty(N, C, P) to write into (default: new arrays).
        """
        pos, vel = np.asarray(pos, dtype=float), np.asarray(vel, dtype=float)
        n, c, p = pos.shape[0], self.n_contacts, len(self.plates)
        if pos.shape != (n, c, 3) or vel.shape != pos.shape:
            raise ContactError(f"GroundStage.step: pos and vel must be (N, {c}, 3), got {pos.shape} and {vel.shape}")
        if len(raws) != p:
            raise fp.PlateError(f"GroundStage.step: {p} plate(s), got {len(raws)} raw arrays")
        if self.mass is not None:
            cent = np.asarray(centroidal, dtype=float) if centroidal is not None else None
            if cent is None or cent.shape != (n, 9):
                raise ContactError(f"GroundStage.step: centroidal must be (N, 9) = (c, Ṗ, L̇_G) with N = {n}, got "
                                   f"{None if cent is None else cent.shape}")
        if out is None:
            out = GroundSample.empty(n, c, p)
        elif out.margin.shape != (n,) or out.contact.shape[1] != c or out.plates.shape[1] != p:
            raise ContactError(f"GroundStage.step: out is for {out.margin.shape[0]} samples, {out.contact.shape[1]} "
                               f"contacts, {out.plates.shape[1]} plates; the step has {n}, {c}, {p}")
        if not kernels.enabled():
            return self._step_numpy(pos, vel, raws, cent if self.mass is not None else None, out)
        if self._raw.shape[0] != n:
            self._raw = np.zeros((n, p, 8))
        for k, (pl, r) in enumerate(zip(self.plates, raws)):
            if getattr(r, "shape", None) != (n, pl.n_channels):
                r = fp._check_raw(pl, r)
                if r.shape[0] != n:
                    raise fp.PlateError(f"raw channels of plate {pl.name!r} have {r.shape[0]} samples, the step {n}")
            self._raw[:, k, :pl.n_channels] = r
        st = self.state
        lcode, lp, fcode, fpar = self._codes
        kernels.kernel("ground.stage")(
            lcode, lp, fcode, fpar, self._plane, np.ascontiguousarray(pos), np.ascontiguousarray(vel), st.in_contact,
            st.v_latched, st.energy, st.last_delta, st.last_force, self._par,
            np.ascontiguousarray(cent) if self.mass is not None else self._no_cent, self._raw, self.offsets, self._pk,
            self._pmeta, out.contact, out.flags, out.wrench, out.zmp, out.margin, out.n_vertices, out.plates,
            out.plate_flags, out.combined, out.valid)
        return out

    def _step_numpy(self, pos, vel, raws, cent, out: GroundSample) -> GroundSample:
        """The same step composed of the modules' numpy functions (the reference path)."""
        n, c = pos.shape[:2]
        kin = penetration(self.ground, pos, vel)
        res = contact_forces(self.law, kin, self.friction, self.state)
        self.state = res.state
        f, m = contact_wrench(pos, res.force, np.zeros((n, 1, 3)), np.zeros(c, dtype=np.int64))
        z = zmp_of_wrench(f[:, 0], m[:, 0], self._par[0], self.min_fz)
        margin, nv = support_margin(pos, kin.delta > 0, z.point, self.tol)
        out.contact[..., 0], out.contact[..., 1:4] = res.f_normal, res.force
        out.contact[..., 4], out.contact[..., 5] = res.v_latched, res.energy
        out.flags[..., 0], out.flags[..., 1], out.flags[..., 2] = kin.delta > 0, res.touch_down, res.lift_off
        out.wrench[:, :3], out.wrench[:, 3:] = f[:, 0], m[:, 0]
        out.zmp[:, :3], out.valid[:, 0] = z.point, z.valid
        if cent is not None:
            zk = zmp_centroidal(self.mass, cent[:, :3], cent[:, 3:6], cent[:, 6:], self._par[0], self.g, self.min_fraction)
            out.zmp[:, 3:], out.valid[:, 1] = zk.point, zk.valid
        else:
            out.zmp[:, 3:], out.valid[:, 1] = np.nan, False
        out.margin[:], out.n_vertices[:] = margin, nv
        if not self.plates:
            out.combined[:], out.valid[:, 2] = np.nan, False
            return out
        sigs = []
        for k, (pl, r) in enumerate(zip(self.plates, raws)):
            r = fp._check_raw(pl, r)
            if r.shape[0] != n:
                raise fp.PlateError(f"raw channels of plate {pl.name!r} have {r.shape[0]} samples, the step {n}")
            sig = fp.process(pl, r, self.threshold, self.offsets[k, :pl.n_channels])
            out.plates[:, k] = np.concatenate([sig.force, sig.moment, sig.cop, sig.free_moment], axis=1)
            out.plate_flags[:, k, 0], out.plate_flags[:, k, 1] = sig.valid, sig.saturated
            sigs.append(sig)
        comb = fp.combine(self.plates, sigs, self.threshold, self.pz)
        out.combined[:] = np.concatenate([comb.force, comb.moment, comb.cop], axis=1)
        out.valid[:, 2] = comb.valid
        return out
