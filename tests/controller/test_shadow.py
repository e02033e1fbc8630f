"""`walklab replay FILE --shadow` on a session `walklab run` recorded from the simulated Jansen world.

Truth: the live run's own outputs in the recording (read with the `mcap` library, not walklab's reader):
the replay recomputes the plate wrenches, the walker's torques, ZMP and foot forces from the recorded
inputs with the same code, so every sample both computed from complete inputs is the same number."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from .test_run_sim import REPO, frames, private_lab, robot  # noqa: F401  (robot: a fixture)


def series(docs):
    """(t of each sample ns, data (N, C), channels) of a stream's decoded frames."""
    t, d = [], []
    for doc in docs:
        a = doc["arrays"]["data"]
        step = 1e9 / doc["rate_hz"] if doc["rate_hz"] else 0.0
        t.append(doc["t"] + np.round(np.arange(a.shape[0]) * step).astype(np.int64))
        d.append(a)
    return np.concatenate(t), np.concatenate(d), list(docs[0]["channels"])


def test_shadow_replay_recomputes_the_live_results(tmp_path, robot):  # noqa: F811
    script = tmp_path / "script.toml"
    script.write_text("[[command]]\nat = 0.0\nlabel = 'walk'\nspeed = 0.2\n")
    cfg = private_lab(tmp_path, robot)
    # the live walker dynamics waits up to 2 s for its inputs, so a loaded machine leaves few samples held
    text = cfg.read_text()
    assert '"--markers", "markers/walker"' in text
    cfg.write_text(text.replace('"--markers", "markers/walker"', '"--markers", "markers/walker", "--max-wait-s", "2.0"'))
    rec, out = tmp_path / "s.mcap", tmp_path / "s.shadow.mcap"
    run = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(cfg), "--duration", "8", "--record",
                          str(rec), "--script", str(script)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # At twice real time, not --fast: as fast as possible, the walker dynamics' inputs can run more than its
    # buffer ahead of the plate service's wrenches on a busy machine, and its samples are then computed
    # with held inputs (flagged stale) — the recomputation this test compares needs complete inputs.
    rep = subprocess.run([sys.executable, "-m", "controller.cli", "replay", str(rec), "--shadow", "--speed", "2", "--quiet",
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    live, again = frames(rec), frames(out)
    for stream in ("dynamics/grf/FP1", "dynamics/grf/FP2"):
        t1, a, _ = series(live[stream])
        t2, b, _ = series(again[stream])
        plate = stream.rsplit("/", 1)[1]
        zero = [(z["t"], z["meta"], z["arrays"]["data"].tolist()) for z in live.get(f"dynamics/zero/{plate}", [])], \
            [(z["t"], z["meta"], z["arrays"]["data"].tolist()) for z in again.get(f"dynamics/zero/{plate}", [])]
        raw = live[f"forceplate/{plate}"]
        why = f"zero live/replay {zero}; raw seqs in the file from {min(d['seq'] for d in raw)}, {len(raw)} frames"
        assert np.array_equal(t1, t2[:t1.size]), why
        assert np.array_equal(a, b[:t1.size], equal_nan=True), why
    t1, a, ch = series(live["dynamics/torques"])
    t2, b, _ = series(again["dynamics/torques"])
    common, i1, i2 = np.intersect1d(t1, t2, return_indices=True)
    stale = ch.index("stale")
    both = (a[i1, stale] == 0) & (b[i2, stale] == 0)
    why = (f"live {t1.size} samples ({int(a[:, stale].sum())} stale), replay {t2.size} ({int(b[:, stale].sum())} "
           f"stale), common {common.size}, complete in both {int(both.sum())}")
    assert common.size > 0.9 * t1.size and both.sum() > 0.5 * t1.size, why
    diff = np.abs(a[i1][both] - b[i2][both]).max(axis=1)
    assert np.allclose(a[i1][both], b[i2][both], rtol=1e-12, atol=1e-9), \
        f"{int((diff > 1e-9).sum())} samples differ, largest {diff.max()}; {why}"
    for stream in ("dynamics/zmp", "dynamics/contact"):
        _, za, _ = series(live[stream])
        _, zb, _ = series(again[stream])
        assert np.allclose(za[i1][both], zb[i2][both], rtol=1e-12, atol=1e-9, equal_nan=True)
