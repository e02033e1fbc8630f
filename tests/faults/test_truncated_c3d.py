"""Truncated C3D files (issue 8, A7): a file holding fewer frames than its header declares is a
clear error by default, and with ``allow_truncated=True`` the frames that are there, marked.

Truths: the complete file (its frame count as ezc3d reads it, and the shared data README: gait-raw
142 frames at 50 Hz, 30 analog channels at 800 Hz, TYPE-2 199 frames); the byte layout of the
data section (header word 9 = first data block, DEC 16-bit words: 4 per marker and the analog
words per frame), from which the frames present after a cut are counted here by hand.
"""
from __future__ import annotations

import ezc3d
import numpy as np
import pytest

from daq.formats import c3d


def cut(shared_data, tmp_path, name: str, size: int):
    data = (shared_data / name).read_bytes()
    path = tmp_path / f"cut-{size}-{name}"
    path.write_bytes(data[:size])
    return path


def frame_layout(data: bytes) -> tuple[int, int]:
    """(byte offset of the data section, bytes per frame) of an integer (16-bit) DEC/Intel file."""
    header = np.frombuffer(data[:24], "<i2")
    n_markers, n_analog_words, start = int(header[1]), int(header[2]), int(header[8])
    return (start - 1) * 512, 2 * (4 * n_markers + n_analog_words)


def test_half_of_gait_raw_is_refused_naming_both_counts(shared_data, tmp_path):
    full = shared_data / "gait-raw.c3d"
    assert ezc3d.c3d(str(full))["data"]["points"].shape[2] == 142  # README: 142 frames
    half = cut(shared_data, tmp_path, "gait-raw.c3d", full.stat().st_size // 2)
    with pytest.raises(c3d.C3DError, match=r"cut-\d+-gait-raw.c3d: truncated C3D file: the header declares "
                                           r"142 frames, the file holds 66; allow_truncated=True reads"):
        c3d.load(half)
    assert c3d.load(full).truncated_from is None


def test_allow_truncated_loads_the_frames_present_and_records_the_cut(shared_data, tmp_path):
    full_path = shared_data / "gait-raw.c3d"
    data = full_path.read_bytes()
    start, per_frame = frame_layout(data)
    size = len(data) // 2
    present = (size - start) // per_frame  # whole frames left after the cut, counted from the bytes
    assert present == 66
    trial = c3d.load(cut(shared_data, tmp_path, "gait-raw.c3d", size), allow_truncated=True)
    full = c3d.load(full_path)
    assert trial.truncated_from == 142
    assert trial.markers.positions.shape[0] == present
    assert trial.analogs.values.shape == (present * 16, 30)  # 800 Hz / 50 Hz = 16 samples a frame
    # The frames that are there are the complete file's first frames, unchanged.
    np.testing.assert_array_equal(trial.markers.positions, full.markers.positions[:present])
    np.testing.assert_array_equal(trial.analogs.values, full.analogs.values[:present * 16])
    assert trial.first_frame == full.first_frame
    for t, f in zip(trial.plates, full.plates, strict=True):
        np.testing.assert_array_equal(t.force, f.force[:present * 16])
        np.testing.assert_array_equal(t.cop, f.cop[:present * 16])


@pytest.mark.parametrize("frames_left, extra_bytes", [(198, 0), (100, 0), (100, 37), (1, 0)])
def test_a_cut_anywhere_in_the_data_is_caught(shared_data, tmp_path, frames_left, extra_bytes):
    """TYPE-2.c3d (199 frames) cut at a frame boundary or inside a frame: the whole frames left."""
    data = (shared_data / "TYPE-2.c3d").read_bytes()
    start, per_frame = frame_layout(data)
    path = cut(shared_data, tmp_path, "TYPE-2.c3d", start + frames_left * per_frame + extra_bytes)
    with pytest.raises(c3d.C3DError, match=f"declares 199 frames, the file holds {frames_left};"):
        c3d.load(path)
    trial = c3d.load(path, allow_truncated=True)
    assert trial.truncated_from == 199 and trial.markers.positions.shape[0] == frames_left


def test_a_file_cut_before_its_first_frame_is_refused_even_when_truncation_is_allowed(shared_data, tmp_path):
    data = (shared_data / "TYPE-2.c3d").read_bytes()
    start, _ = frame_layout(data)
    path = cut(shared_data, tmp_path, "TYPE-2.c3d", start + 10)
    for allow in (False, True):
        with pytest.raises(c3d.C3DError, match="the header declares 199 frames, the file holds 0$"):
            c3d.load(path, allow_truncated=allow)


@pytest.mark.parametrize("name, frames", [("Walking_Hybrid_1_1.c3d", 672), ("pyCGM2_lower_limb_CGM24_Walking01.c3d", 493),
                                          ("Eb015pi.c3d", 450), ("Walk1.c3d", 151), ("TYPE-3.c3d", 515)])
def test_complete_files_are_not_truncated(shared_data, name, frames):
    """Headers whose first frame is not 1 (Walking_Hybrid: 290..961, pyCGM2: 63..555) and Intel
    files: the declared count is last - first + 1 (README frame counts)."""
    trial = c3d.load(shared_data / name)
    assert trial.truncated_from is None and trial.markers.positions.shape[0] == frames
