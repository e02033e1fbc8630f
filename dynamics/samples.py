"""Random sample models and configurations (Pinocchio's buildSampleModel / randomConfiguration),
for tests, benchmarks and examples."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .model import JOINT_NQ_NV, G, Joint, Model, Segment
from .spatial import quat_to_matrix


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """(3, 3) uniformly random rotation."""
    x = rng.normal(size=4)
    return quat_to_matrix(x / np.linalg.norm(x))


def random_inertia(rng: np.random.Generator, mass: float) -> np.ndarray:
    """(3, 3) central inertia (kg·m²) of a randomly oriented box of `mass` with sides 0.1–1 m."""
    a, b, c = rng.uniform(0.1, 1.0, 3) ** 2
    R = random_rotation(rng)
    return R @ np.diag([b + c, a + c, a + b]) * mass / 12 @ R.T


def random_model(rng: np.random.Generator, n: int = 8, joint_types: Sequence[str] = ("revolute", "prismatic", "fixed"),
                 root: str = "revolute", name: str = "random") -> Model:
    """A random branching tree of n segments: segment k > 0 hangs on a random earlier segment with a
    joint drawn from joint_types (random axis, half of them axis-aligned; random placement); the
    root joint is `root`; masses 0.5–3 kg, random CoM and box inertia; one marker and one contact
    point per segment; random gravity of magnitude G (9.81 m/s²)."""
    segs = []
    for k in range(n):
        t = root if k == 0 else str(rng.choice(list(joint_types)))
        if t not in JOINT_NQ_NV:
            raise ValueError(f"unknown joint type {t!r}")
        axis = np.eye(3)[rng.integers(3)] * rng.choice([-1.0, 1.0]) if rng.random() < 0.5 else rng.normal(size=3)
        R, p = random_rotation(rng), rng.normal(scale=0.4, size=3)
        if t == "free_flyer" and k == 0:
            R, p = np.eye(3), np.zeros(3)
        mass = float(rng.uniform(0.5, 3.0))
        segs.append(Segment(
            name=f"s{k}", parent=None if k == 0 else f"s{rng.integers(k)}",
            joint=Joint(t, axis=axis / np.linalg.norm(axis), rotation=R, translation=p),
            joint_name=f"j{k}", mass=mass, com=rng.normal(scale=0.2, size=3),
            inertia=random_inertia(rng, mass),
            markers={f"m{k}": rng.normal(scale=0.2, size=3)}, contacts={f"c{k}": rng.normal(scale=0.2, size=3)},
        ))
    g = rng.normal(size=3)
    return Model(name, tuple(segs), gravity=G * g / np.linalg.norm(g))


def random_configuration(model: Model, rng: np.random.Generator, N: int | None = None) -> np.ndarray:
    """Random q ((nq,) or (N, nq)): angles and displacements ~ N(0, 1), uniform unit quaternions,
    (cos θ, sin θ) on the unit circle."""
    M = 1 if N is None else N
    q = rng.normal(size=(M, model.nq))
    for s, iq in zip(model.segments, model.idx_q):
        t, nq = s.joint.type, s.joint.nq
        if t in ("spherical", "free_flyer"):
            x = q[:, iq + nq - 4:iq + nq]
            x /= np.linalg.norm(x, axis=1, keepdims=True)
        elif t == "revolute_unbounded":
            th = rng.uniform(-np.pi, np.pi, M)
            q[:, iq], q[:, iq + 1] = np.cos(th), np.sin(th)
    return q[0] if N is None else q
