"""Foot-path gait metrics (methods.md c.8) against an analytic elliptical path."""
import math

import numpy as np
import pytest

from dynamics.linkage.gait import gait_metrics
from dynamics.linkage.model import LinkageError


@pytest.mark.parametrize("a, b, pen", [(0.2, 0.08, 0.008), (0.3, 0.05, 0.002)])
def test_ellipse_metrics_are_analytic(a, b, pen):
    N = 4000
    phi = 2 * np.pi * np.arange(N) / N + 0.123            # arbitrary start on the cycle
    foot = np.column_stack([0.1 + a * np.cos(phi), -0.5 + b * np.sin(phi)])
    pivot = np.array([-0.25, -0.05])
    g = gait_metrics(foot, pivot, pen)
    alpha = math.acos(1 - pen / b)                        # half-angle of the stance arc
    assert g.ground_level == pytest.approx(-0.5 - b + pen, abs=1e-7)  # lowest *sample* + pen
    assert g.step_length == pytest.approx(2 * a * math.sin(alpha), rel=1e-5)
    assert g.duty_factor == pytest.approx(alpha / np.pi, rel=1e-5)
    assert g.step_height == pytest.approx(2 * b, rel=1e-6)
    assert g.path_width == pytest.approx(2 * a, rel=1e-6)
    assert g.leg_length == pytest.approx(-0.05 - (-0.5 - b), rel=1e-6)
    assert g.lifting_capability == pytest.approx(2 * b / (0.45 + b), rel=1e-6)


def test_bad_inputs():
    foot = np.column_stack([np.cos(np.linspace(0, 6, 50)), np.sin(np.linspace(0, 6, 50))])
    with pytest.raises(LinkageError, match="ground_penetration"):
        gait_metrics(foot, np.zeros(2), 0.0)
    with pytest.raises(LinkageError, match="never leave the ground"):
        gait_metrics(foot, np.zeros(2), 5.0)
    with pytest.raises(LinkageError, match=r"foot: expected a finite \(N >= 4, 2\)"):
        gait_metrics(foot[:, :1], np.zeros(2), 0.01)
