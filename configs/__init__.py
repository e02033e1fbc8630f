"""Lab configurations and model files shipped with walklab (TOML, URDF).

``configs.path("sim.toml")`` or ``configs.path("models/jansen_leg.toml")`` gives the file's path,
both in a source checkout and in an installed wheel.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Path of a shipped config or model file, relative to this folder; FileNotFoundError names it."""
    p = ROOT / name
    if not p.is_file():
        raise FileNotFoundError(f"no shipped config {name!r} under {ROOT}")
    return p
