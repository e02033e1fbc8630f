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
- ``--gait FILE``: the human15 model walking a recorded gait, in a full marker set: the trial's
  markers (a C3D or an OpenSim TRC file, m, lab frame) are fitted segment by segment with the
  marker set ``--markerset`` (``configs/markersets/NAME.toml``, default ``human15_opensim``, the
  names of OpenSim's example trial), giving the model's joint coordinates q in every frame
  (`dynamics.human15_markers.joint_coordinates`; a coordinate no marker fixes is held at its
  neutral 0, as the analysis holds an unmarked hand); q is resampled to ``--rate-hz`` (translations
  and angles linearly, the base orientation by slerp) and the set's markers, placed on the model
  (`set_positions`: rigid on their segments, the model's proportions, not the subject's), are
  published with the same noise and dropouts as ``--model``; ``--loop`` starts over (a new epoch);
- ``--c3d FILE``: the markers of a C3D trial (`daq.formats.c3d.load`: m, NaN gaps), at the file's
  rate, ``--loop`` to start over at the end (a new epoch in meta).

``--rate-hz`` (model and gait, 200), ``--block`` frames per message (2), ``--seed`` (0).
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


def load_marker_set(name: str):
    """The shipped marker set ``configs/markersets/NAME.toml`` (`dynamics.human15_markers.MarkerSet`)."""
    import tomllib

    import configs
    from dynamics import human15_markers as h15

    try:
        return h15.marker_set_from_dict(tomllib.loads(configs.path(f"markersets/{name}.toml").read_text()))
    except FileNotFoundError:
        raise ValueError(f"--markerset {name!r}: no configs/markersets/{name}.toml") from None


def gait_q(model, markers, mset) -> tuple[np.ndarray, float]:
    """(q (N, nq), rate Hz) of `model` walking the recorded `markers` (`daq.formats.c3d.Markers`, m, lab
    frame), fitted with the marker set `mset` (module docstring); ValueError (one line) when the set
    does not fit the trial."""
    from dynamics import human15_markers as h15

    by_label = {lab: markers.positions[:, i] for i, lab in enumerate(markers.labels)}
    try:
        q = h15.joint_coordinates(model, mset, h15.fit_segments(model, mset, by_label))
    except h15.MarkerError as exc:
        raise ValueError(f"--gait: {exc}") from None
    base = np.isfinite(q[:, :7]).all(axis=1)
    if not base.all():
        raise ValueError(f"--gait: the root segment is not fitted in {int((~base).sum())} of {len(q)} frames "
                         f"(marker set {mset.name!r})")
    q[:, 7:] = np.nan_to_num(q[:, 7:], nan=0.0)  # unmarked (or unseen) joints at their neutral angle
    return q, float(markers.rate)


def set_positions(model, mset, q: np.ndarray) -> np.ndarray:
    """Positions (N, M, 3) m, lab frame, of the marker set's markers (``mset.labels`` order) on `model`
    at q (N, nq): x = R_segment (scale · p_marker) + p_segment, the set scaled to the model's thigh
    (`dynamics.human15_markers.scale`) as the fit scales it."""
    from dynamics import human15_markers as h15
    from dynamics.kinematics import forward_kinematics

    frames = forward_kinematics(model, q)
    s = h15.scale(mset, model)
    where = {}
    for seg, table in mset.segments.items():
        for label, p in table.items():
            where.setdefault(label, (model.index[seg], s * np.asarray(p)))
    out = np.empty((len(q), len(mset.labels), 3))
    for j, label in enumerate(mset.labels):
        i, p = where[label]
        out[:, j] = frames.rotation[:, i] @ p + frames.translation[:, i]
    return out


def resample_q(q: np.ndarray, rate_in: float, rate_out: float) -> np.ndarray:
    """q (N, nq) of a free-flyer model sampled at rate_in [Hz], at rate_out over the same span: base
    position and joint angles interpolated linearly, the base quaternion (x, y, z, w) by slerp."""
    from scipy.spatial.transform import Rotation, Slerp

    t_in = np.arange(len(q)) / rate_in
    t_out = np.arange(int(np.floor(t_in[-1] * rate_out)) + 1) / rate_out
    out = np.empty((len(t_out), q.shape[1]))
    for j in (*range(3), *range(7, q.shape[1])):
        out[:, j] = np.interp(t_out, t_in, q[:, j])
    out[:, 3:7] = Slerp(t_in, Rotation.from_quat(q[:, 3:7]))(t_out).as_quat()
    return out


class SimulatedMarkers:
    """The `daq.context.Source` of the simulated or C3D-replayed marker stream."""

    def __init__(self, ctx: ProcessContext, opts: argparse.Namespace):
        self.ctx, self.opts = ctx, opts
        self.rng = np.random.default_rng(opts.seed)
        self.defects = not opts.c3d  # noise and dropouts on a model's markers; a file's gaps are its own
        if opts.c3d:
            from daq.formats import c3d

            trial = c3d.load(opts.c3d)
            self.labels, self.rate = trial.markers.labels, float(trial.markers.rate)
            self.table = trial.markers.positions
            self.model = None
        elif opts.gait:
            import dynamics

            model, mset = dynamics.load_model("human15"), load_marker_set(opts.markerset)
            q, rate = gait_q(model, load_markers(opts.gait), mset)
            self.labels, self.rate, self.model = mset.labels, float(opts.rate_hz), None
            self.table = set_positions(model, mset, resample_q(q, rate, self.rate))
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
            pos = self.table[np.arange(k0, k0 + n) % len(self.table)].copy()
            if not self.defects:
                return pos, np.where(np.isnan(pos).any(axis=2), np.nan, 0.0)
        else:
            pos = self.model.positions((k0 + np.arange(n)) / self.rate)
        pos += self.rng.normal(scale=self.opts.noise_mm * 1e-3, size=(n, m, 3))
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
    src.add_argument("--gait", metavar="FILE")
    p.add_argument("--markerset", default="human15_opensim")
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


def load_markers(path: str):
    """The markers (`daq.formats.c3d.Markers`: m, lab frame z up) of a C3D or OpenSim TRC trial."""
    from daq.formats import c3d, opensim

    if path.lower().endswith(".trc"):
        return opensim.read_trc(path).markers
    if path.lower().endswith(".c3d"):
        return c3d.load(path).markers
    raise ValueError(f"--gait {path}: expected a .c3d or .trc trial")
