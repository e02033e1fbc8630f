"""Simulated and replayed marker streams: a model's markers in motion, or a C3D file's markers.

``run`` (``module = "daq.devices.markers_sim"``) publishes ``markers/NAME`` (``--stream``) in the
marker stream layout of docs/devices.md (kind ``markers``, channels ``LABEL:x/y/z`` in m, lab
frame z up, extra ``residual`` (n, M) m, NaN where occluded), through `daq.context.serve` (so the
stamps go through `daq.clock.ClockSync` like a real device's), from one of:

- ``--model NAME`` (default ``human15``): the model's markers (`dynamics.kinematics.marker_positions`)
  under a synthetic periodic motion — the floating base advancing along x at ``--speed-m-s`` (1.2),
  its height set so the lowest marker of the neutral pose is on the floor, and every other joint
  coordinate ``0.25 sin(2π t / T + k)`` rad with stride period ``T`` = ``--stride-s`` (1.1 s) — plus
  Gaussian noise ``--noise-mm`` (1 mm, the residual reported is that σ) and dropouts: each marker is
  occluded with probability ``--dropout`` (0.01) per frame, for 50–300 ms. Not a recorded gait: a
  moving, rigid, labelled marker set with realistic defects, for pipelines and tests;
- ``--c3d FILE``: the markers of a C3D trial (`daq.formats.c3d.load`: m, NaN gaps), at the file's
  rate, ``--loop`` to start over at the end (a new epoch in meta).

``--rate-hz`` (model only, 200), ``--block`` frames per message (2), ``--seed`` (0).
``t_device`` is the simulation's (or the file's) clock of the first frame.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Sequence

import numpy as np

from daq.context import Block, serve

if TYPE_CHECKING:
    from daq.context import ProcessContext


def occlusions(rng: np.random.Generator, occluded_until: np.ndarray, frames, p: float, rate_hz: float) -> np.ndarray:
    """Which markers are hidden at each of the marker frame numbers `frames` (n of them): (n, M) bool.

    At every frame each visible marker starts an occlusion with probability `p`, lasting 50-300 ms
    (frames at `rate_hz`); `occluded_until` (M,) holds each marker's first visible frame again and is
    updated in place (a stream carries it from block to block)."""
    m = occluded_until.size
    lo, hi = round(0.05 * rate_hz), round(0.3 * rate_hz)
    frames = list(frames)
    hidden = np.empty((len(frames), m), dtype=bool)
    for i, k in enumerate(frames):
        start = rng.random(m) < p
        length = rng.integers(lo, hi + 1, size=m)
        occluded_until[:] = np.where(start & (occluded_until <= k), k + length, occluded_until)
        hidden[i] = occluded_until > k
    return hidden


class ModelMarkers:
    """Marker positions (N, M, 3) m of a model under the synthetic motion (module docstring)."""

    def __init__(self, model_name: str, speed_m_s: float, stride_s: float):
        import dynamics

        self.model = dynamics.load_model(model_name)
        if not hasattr(self.model, "marker_names") or not self.model.marker_names:
            raise ValueError(f"--model {model_name!r}: a tree model with markers is needed")
        self.labels = tuple(self.model.marker_names)
        self.speed, self.stride = speed_m_s, stride_s
        q0 = self.model.neutral()
        self.floating = self.model.nq == self.model.nv + 1  # a free base: (x, y, z, quaternion)
        self.height = -float(self.positions_at_q(q0[None])[..., 2].min()) if self.floating else 0.0

    def positions_at_q(self, q: np.ndarray) -> np.ndarray:
        from dynamics.kinematics import marker_positions

        return np.asarray(marker_positions(self.model, q)).reshape(len(q), len(self.labels), 3)

    def q(self, t_s: np.ndarray) -> np.ndarray:
        """Configurations (N, nq) at times t_s (N,) [s]."""
        q = np.tile(self.model.neutral(), (len(t_s), 1))
        first = 7 if self.floating else 0
        if self.floating:
            q[:, 0] = self.speed * t_s
            q[:, 2] = self.height
        k = np.arange(self.model.nq - first)
        q[:, first:] += 0.25 * np.sin(2 * np.pi * t_s[:, None] / self.stride + k[None, :])
        return q

    def positions(self, t_s: np.ndarray) -> np.ndarray:
        return self.positions_at_q(self.q(t_s))


class SimulatedMarkers:
    """The `daq.context.Source` of the simulated or C3D-replayed marker stream."""

    def __init__(self, ctx: ProcessContext, opts: argparse.Namespace):
        self.ctx, self.opts = ctx, opts
        self.rng = np.random.default_rng(opts.seed)
        if opts.c3d:
            from daq.formats import c3d

            trial = c3d.load(opts.c3d)
            self.labels, self.rate = trial.markers.labels, float(trial.markers.rate)
            self.table = trial.markers.positions
            self.model = None
        else:
            self.model = ModelMarkers(opts.model, opts.speed_m_s, opts.stride_s)
            self.labels, self.rate, self.table = self.model.labels, float(opts.rate_hz), None
        self.channels = tuple(f"{s}:{a}" for s in self.labels for a in "xyz")
        self.occluded_until = np.zeros(len(self.labels), dtype=np.int64)  # frame index per marker
        self.next = 0
        self.t0 = 0
        self.epoch = 0

    def open(self) -> None:
        self.t0 = self.ctx.clock()
        self.next = 0

    def _frames(self, k0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        m = len(self.labels)
        if self.table is not None:
            idx = np.arange(k0, k0 + n) % len(self.table)
            pos = self.table[idx].copy()
            return pos, np.where(np.isnan(pos).any(axis=2), np.nan, 0.0)
        t = (k0 + np.arange(n)) / self.rate
        pos = self.model.positions(t) + self.rng.normal(scale=self.opts.noise_mm * 1e-3, size=(n, m, 3))
        res = np.full((n, m), self.opts.noise_mm * 1e-3)
        hidden = occlusions(self.rng, self.occluded_until, range(k0, k0 + n), self.opts.dropout, self.rate)
        pos[hidden] = np.nan
        res[hidden] = np.nan
        return pos, res

    def read(self, timeout_s: float) -> Sequence[Block]:
        block = self.opts.block
        due = self.t0 + round((self.next + block) * 1e9 / self.rate)
        now = self.ctx.clock()
        if now < due:
            self.ctx.stop.wait(min(timeout_s, (due - now) * 1e-9))
            return []
        if self.table is not None and self.next + block > len(self.table) * (self.epoch + 1):
            if not self.opts.loop:
                self.ctx.stop.wait(timeout_s)  # the file is done: idle until the lab stops
                return []
            self.epoch += 1
        pos, res = self._frames(self.next, block)
        b = Block(self.opts.stream, pos.reshape(block, -1), round(self.next * 1e9 / self.rate), now, "markers",
                  self.rate, self.channels, ("m",) * len(self.channels), extra={"residual": res},
                  meta={"epoch": self.epoch, "frame": self.next})
        self.next += block
        return [b]

    def close(self) -> None:
        pass


def run(ctx: ProcessContext, args: Sequence[str]) -> int:
    """Publish the simulated (or C3D-replayed) markers until asked to stop (module docstring)."""
    p = argparse.ArgumentParser(prog="daq.devices.markers_sim", add_help=False)
    p.add_argument("--stream", default="markers/sim")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default="human15")
    src.add_argument("--c3d", metavar="FILE")
    p.add_argument("--loop", action="store_true")
    p.add_argument("--rate-hz", type=float, default=200.0)
    p.add_argument("--block", type=int, default=2)
    p.add_argument("--speed-m-s", type=float, default=1.2)
    p.add_argument("--stride-s", type=float, default=1.1)
    p.add_argument("--noise-mm", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    opts = p.parse_args(list(args))
    if opts.block < 1 or not opts.rate_hz > 0 or opts.noise_mm < 0 or not 0 <= opts.dropout < 1 or not opts.stride_s > 0:
        raise ValueError("need --block >= 1, --rate-hz > 0, --noise-mm >= 0, 0 <= --dropout < 1, --stride-s > 0")
    if not opts.stream.startswith("markers/"):
        raise ValueError(f"--stream {opts.stream!r}: marker streams are named markers/NAME")
    return serve(ctx, SimulatedMarkers(ctx, opts))
