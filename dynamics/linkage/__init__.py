"""Planar closed-chain linkages in absolute coordinates (methods.md c, i, l; models.md 2-3).

One algorithm per module: `model` (bodies, constraints, TOML loader), `constraints` (Phi, Phi_q,
gamma), `assembly` (constructive assembly), `position` (Newton-Raphson with branch tracking),
`kinematics` (velocity and acceleration solves), `inverse` (KKT inverse dynamics), `forward`
(Baumgarte + projection), `reduced` (tabulated one-DOF crank form), `gait` (foot-path metrics),
`report` (`linkage_report`). Planar frame: x forward, y up, angles counter-clockwise from +x.
"""
from .model import (AssemblyError, Linkage, LinkageError, SingularConfigurationError, load_linkage,
                    read_crank_legs, read_linkage)

__all__ = ["AssemblyError", "Linkage", "LinkageError", "SingularConfigurationError", "load_linkage",
           "read_crank_legs", "read_linkage", "linkage_report"]


def linkage_report(name_or_path: str, crank_speed: float = 6.283185307179586,
                   ground_penetration: float = 0.008) -> dict:
    """See `dynamics.linkage.report.linkage_report` (imported lazily: it pulls in the solvers)."""
    from .report import linkage_report as _report

    return _report(name_or_path, crank_speed, ground_penetration)
