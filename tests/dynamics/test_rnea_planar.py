"""The planar closed form of methods.md b.3 (dynamics.planar, corrected B sign) equals the general
tree RNEA on the shipped Zinkovsky planar models (relative joint angles ψ, absolute φ = μ ψ,
joint moments M = μᵀ U)."""
import numpy as np
import pytest

import dynamics
from dynamics.planar import joint_moments, planar_chain_from_model, planar_inverse_dynamics


@pytest.mark.parametrize("name", ["zinkovsky_4_1", "zinkovsky_4_2", "zinkovsky_4_3", "zinkovsky_5_1", "zinkovsky_5_2"])
def test_closed_form_equals_rnea_on_zinkovsky_tables(name):
    model = dynamics.load_model(name)
    chain = planar_chain_from_model(model)
    rng = np.random.default_rng(0)
    N = 20
    q, v, a = rng.normal(size=(3, N, model.nv))
    tau = dynamics.rnea(model, q, v, a)
    # absolute angles and their derivatives: φ = μ ψ (row i sums the path root -> i)
    to_abs = lambda x: np.concatenate((x[:, :2], x[:, 2:] @ chain.mu.T), axis=1)  # noqa: E731
    Q = planar_inverse_dynamics(chain, to_abs(q), to_abs(v), to_abs(a), g=9.81)
    np.testing.assert_allclose(tau[:, :2], Q[:, :2], atol=1e-9)
    np.testing.assert_allclose(tau[:, 2:], joint_moments(chain, Q[:, 2:]), atol=1e-9)
    assert np.abs(tau).max() > 10       # not a trivial comparison
