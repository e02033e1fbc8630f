"""Invariants of the tree dynamics (methods.md b.6): RNEA = M a + h, M from RNEA differences,
FD(ID(a)) = a, energy conservation in a torque-free simulation, RNEA = finite-differenced
Lagrangian, momentum balance with external wrenches, batching, and input errors."""
import sys

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import dynamics
from dynamics import kernels, workspace
from dynamics.codegen import SCALAR_MAX_N
from dynamics.kinematics import lab_inertias, tree_state
from dynamics.model import Model
from dynamics.samples import random_configuration, random_model

pytestmark = pytest.mark.usefixtures("kernel_path")   # compiled kernels and the numpy path

ALL = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")
ROOTS = ("free_flyer", "revolute", "planar", "spherical", "prismatic")


def _model(seed, n=8, types=ALL):
    rng = np.random.default_rng(seed)
    return random_model(rng, n, types, root=ROOTS[seed % len(ROOTS)]), rng


def _zero_g(model):
    return Model(model.name, model.segments, model.actuators, gravity=np.zeros(3))


@pytest.mark.parametrize("seed", range(10))
def test_rnea_equals_mass_matrix_times_a_plus_nonlinear_effects(seed):
    model, rng = _model(seed)
    q = random_configuration(model, rng, 20)
    v, a = rng.normal(size=(2, 20, model.nv))
    tau = dynamics.rnea(model, q, v, a)
    rhs = np.einsum("nij,nj->ni", dynamics.crba(model, q), a) + dynamics.nonlinear_effects(model, q, v)
    assert np.abs(tau - rhs).max() <= 1e-10 * max(1.0, np.abs(tau).max())


@pytest.mark.parametrize("seed", range(5))
def test_mass_matrix_columns_are_rnea_differences(seed):
    model, rng = _model(seed)
    mz = _zero_g(model)
    q = random_configuration(model, rng)
    v = rng.normal(size=model.nv)
    M = dynamics.crba(model, q)
    base = dynamics.rnea(mz, q, v, np.zeros(model.nv))
    cols = np.stack([dynamics.rnea(mz, q, v, e) - base for e in np.eye(model.nv)], axis=1)
    np.testing.assert_allclose(M, cols, atol=1e-10)
    np.testing.assert_allclose(M, M.T, atol=1e-12)
    assert np.linalg.eigvalsh(M).min() > 0


@pytest.mark.parametrize("seed", range(5))
def test_forward_dynamics_inverts_rnea(seed):
    model, rng = _model(seed)
    q = random_configuration(model, rng, 10)
    v, a = rng.normal(size=(2, 10, model.nv))
    np.testing.assert_allclose(dynamics.forward_dynamics(model, q, v, dynamics.rnea(model, q, v, a)), a, atol=1e-8)


def _energy(model, q, v):
    """T + V with T = ½ vᵀ M v and V = −Σ m_i g·c_i."""
    _, c, _, _ = lab_inertias(model, tree_state(model, q[None]))
    T = 0.5 * v @ dynamics.crba(model, q) @ v
    return T - np.einsum("s,sj,j->", model.masses, c[0], model.gravity)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_energy_conserved_in_torque_free_simulation(seed):
    model, rng = _model(seed, n=5)
    q0 = random_configuration(model, rng)
    v0 = rng.normal(size=model.nv)
    nq = model.nq

    def f(t, x):
        q, v = x[:nq], x[nq:]
        qd = dynamics.configuration_derivative(model, q[None], v[None])[0]
        return np.concatenate((qd, dynamics.forward_dynamics(model, q, v, np.zeros(model.nv))))

    sol = solve_ivp(f, (0.0, 0.5), np.concatenate((q0, v0)), method="DOP853", rtol=1e-11, atol=1e-11)
    assert sol.success
    E = np.array([_energy(model, x[:nq], x[nq:]) for x in sol.y.T])
    E0 = E[0]
    scale = abs(E0) + 0.5 * v0 @ dynamics.crba(model, q0) @ v0
    assert np.abs(E - E0).max() < 1e-7 * scale
    # the motion is not trivial: kinetic and potential energy exchange far more than the drift
    T_end = 0.5 * sol.y[nq:, -1] @ dynamics.crba(model, sol.y[:nq, -1]) @ sol.y[nq:, -1]
    assert abs(T_end - 0.5 * v0 @ dynamics.crba(model, q0) @ v0) > 1e-3 * scale


def _kinetic(model, q, v):
    """T = Σ ½ m |v_c|² + ½ ωᵀ I_c ω from segment velocities (no mass matrix)."""
    st = tree_state(model, q[None], v[None])
    m, c, _, _ = lab_inertias(model, st)
    V = st.velocity[0]
    w = V[:, 3:]
    vc = V[:, :3] + np.cross(w, c[0])
    R = st.rotation[0]
    Ic = R @ model.inertias @ np.swapaxes(R, -1, -2)
    return 0.5 * np.sum(m * np.einsum("sj,sj->s", vc, vc)) + 0.5 * np.einsum("si,sij,sj->", w, Ic, w)


def _lagrangian(model, q, v):
    _, c, _, _ = lab_inertias(model, tree_state(model, q[None]))
    return _kinetic(model, q, v) + np.einsum("s,sj,j->", model.masses, c[0], model.gravity)


@pytest.mark.parametrize("seed", range(4))
def test_rnea_matches_finite_differenced_lagrangian(seed):
    """τ = d/dt ∂L/∂q̇ − ∂L/∂q (joints with q̇ = v), central differences, step 1e-5 / 1e-4."""
    model, rng = _model(seed, n=6, types=("revolute", "prismatic", "fixed", "planar"))
    if model.segments[0].joint.type in ("free_flyer", "spherical"):
        model = random_model(rng, 6, ("revolute", "prismatic", "fixed", "planar"), root="revolute")
    q, v, a = rng.normal(size=(3, model.nv))
    eps, h = 1e-5, 1e-4
    E = np.eye(model.nv)

    def dL_dv(q_, v_):
        return np.array([(_lagrangian(model, q_, v_ + eps * e) - _lagrangian(model, q_, v_ - eps * e)) / (2 * eps) for e in E])

    dL_dq = np.array([(_lagrangian(model, q + eps * e, v) - _lagrangian(model, q - eps * e, v)) / (2 * eps) for e in E])
    # along q(t) = q + v t + a t²/2, v(t) = v + a t
    ddt = (dL_dv(q + v * h + a * h * h / 2, v + a * h) - dL_dv(q - v * h + a * h * h / 2, v - a * h)) / (2 * h)
    np.testing.assert_allclose(dynamics.rnea(model, q, v, a), ddt - dL_dq, atol=2e-5 * max(1.0, np.abs(ddt).max()))


def test_external_wrenches_close_the_momentum_balance():
    """Free-flying body: with external wrenches equal to the momentum rate minus weight, the base
    residual vanishes (methods.md b.1, b.5): Σ w_e + (M g at the CoM) = ḣ."""
    model, rng = _model(0)
    assert model.segments[0].joint.type == "free_flyer"
    q = random_configuration(model, rng, 5)
    v, a = rng.normal(size=(2, 5, model.nv))
    G, _, _ = dynamics.com(model, q, v, a)
    _, dh = dynamics.centroidal_momentum(model, q, v, a)
    F = dh[:, :3] - model.total_mass * model.gravity
    split = rng.uniform(0.2, 0.8)
    w = [dynamics.Wrench("s3", force=split * F, point=G, moment=dh[:, 3:]),
         dynamics.Wrench("s5", force=(1 - split) * F, point=G)]
    tau = dynamics.rnea(model, q, v, a, f_ext=w)
    assert np.abs(tau[:, :6]).max() < 1e-9 * np.abs(F).max()
    # without them the residual is the whole momentum balance
    assert np.abs(dynamics.rnea(model, q, v, a)[:, :6]).max() > 1.0


@pytest.mark.parametrize("N", [7, SCALAR_MAX_N + 9], ids=["float kernels", "array kernels"])
def test_batched_equals_single_samples(N):
    """Few samples run the generated kernels on floats, more on numpy columns (codegen.run): both
    must equal one-sample calls, which the Pinocchio tests compare against pinocchio."""
    model, rng = _model(2)
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    batch = {
        "rnea": dynamics.rnea(model, q, v, a),
        "crba": dynamics.crba(model, q),
        "aba": dynamics.aba(model, q, v, a),
        "placements": dynamics.forward_kinematics(model, q).translation,
        "com": np.concatenate(dynamics.com(model, q, v, a), axis=-1),
        "centroidal": np.concatenate(dynamics.centroidal_momentum(model, q, v, a), axis=-1),
    }
    for k in range(N):
        one = {
            "rnea": dynamics.rnea(model, q[k], v[k], a[k]),
            "crba": dynamics.crba(model, q[k]),
            "aba": dynamics.aba(model, q[k], v[k], a[k]),
            "placements": dynamics.forward_kinematics(model, q[k]).translation,
            "com": np.concatenate(dynamics.com(model, q[k], v[k], a[k]), axis=-1),
            "centroidal": np.concatenate(dynamics.centroidal_momentum(model, q[k], v[k], a[k]), axis=-1),
        }
        for name, x in one.items():
            np.testing.assert_allclose(x, batch[name][k], rtol=1e-12, atol=1e-10, err_msg=f"{name}, sample {k}")


def test_chunked_batch_equals_unchunked(monkeypatch):
    rnea_mod = sys.modules["dynamics.rnea"]     # the attribute dynamics.rnea is the function

    model, rng = _model(1)
    q = random_configuration(model, rng, 50)
    v, a = rng.normal(size=(2, 50, model.nv))
    whole = dynamics.rnea(model, q, v, a)
    monkeypatch.setattr(rnea_mod, "CHUNK", 7)
    np.testing.assert_allclose(dynamics.rnea(model, q, v, a), whole, rtol=1e-14, atol=1e-12)


@pytest.mark.parametrize("args, match", [
    (lambda m: (np.full(m.nq, np.nan), np.zeros(m.nv), np.zeros(m.nv)), r"^q: non-finite value"),
    (lambda m: (m.neutral(), np.zeros(m.nv + 1), np.zeros(m.nv)), r"^v: expected shape \(\d+,\) or \(N, \d+\)"),
    (lambda m: (m.neutral(), np.zeros(m.nv), np.zeros((3, m.nv))), r"^a: shape .* does not match q"),
    (lambda m: (m.neutral()[None].repeat(2, 0), np.zeros((3, m.nv)), np.zeros((3, m.nv))), r"^v: shape"),
    (lambda m: (np.zeros(m.nq), np.zeros(m.nv), np.zeros(m.nv)), r"^q\[3:7\]: quaternion .* unit norm, got 0 at sample 0"),
    (lambda m: (np.vstack([m.neutral(), 2 * m.neutral()]), np.zeros((2, m.nv)), np.zeros((2, m.nv))),
     r"^q\[3:7\]: quaternion .* unit norm, got 2 at sample 1"),
    (lambda m: (m.neutral(), np.zeros(m.nv), np.array([np.inf] * m.nv)), r"^a: non-finite"),
])
@pytest.mark.parametrize("warm", [False, True])
def test_bad_state_raises_a_clear_error(args, match, warm):
    model, _ = _model(0)    # free-flyer root
    if warm:    # a good sample first: the next one-sample call of this model takes rnea's fast path
        dynamics.rnea(model, model.neutral(), np.zeros(model.nv), np.zeros(model.nv))
    with pytest.raises(ValueError, match=match):
        dynamics.rnea(model, *args(model))


def test_one_sample_fast_path_equals_converted_inputs():
    """A sample of the last model (the fast path: float64 C-contiguous) and the same values as
    lists, integer-valued arrays, strided views and in another workspace give the same torques,
    equal to the batched call; a workspace of another model is still refused."""
    model, rng = _model(3)
    q = random_configuration(model, rng, 2)
    v, a = rng.normal(size=(2, 2, model.nv))
    batch = dynamics.rnea(model, q, v, a)
    first = dynamics.rnea(model, q[0], v[0], a[0])
    again = dynamics.rnea(model, q[0], v[0], a[0])
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, batch[0], rtol=1e-12, atol=1e-12)
    wide = np.zeros((model.nq, 2))
    wide[:, 0] = q[1]
    for args in ((list(q[1]), list(v[1]), a[1].tolist()), (wide[:, 0], v[1], a[1])):
        np.testing.assert_allclose(dynamics.rnea(model, *args), batch[1], rtol=1e-12, atol=1e-12)
    z = np.zeros(model.nv, dtype=np.int64)
    np.testing.assert_allclose(dynamics.rnea(model, q[0], z, z), dynamics.rnea(model, q[0], z.astype(float), z.astype(float)),
                               rtol=1e-15, atol=0)
    own = workspace.Data(model)
    np.testing.assert_array_equal(dynamics.rnea(model, q[0], v[0], a[0], data=own), first)
    other, _ = _model(4)
    with pytest.raises(ValueError, match=r"^data: workspace of model"):
        dynamics.rnea(model, q[0], v[0], a[0], data=workspace.Data(other))


def test_a_model_no_longer_used_is_freed_with_its_default_workspace():
    """Truth: the garbage collector. A model run through rnea (batch and one sample) and crba gets its
    default workspace (workspace.data); once nothing else refers to it and another model is the last run,
    a weak reference to it dies (the weak map that held the workspaces before kept every model alive:
    its values referred to their keys)."""
    import gc
    import weakref

    model, rng = _model(3)
    q = random_configuration(model, rng, 2)
    v, a = rng.normal(size=(2, 2, model.nv))
    dynamics.rnea(model, q, v, a)
    dynamics.rnea(model, q[0], v[0], a[0])
    dynamics.crba(model, q[0])
    assert workspace.data(model) is workspace.data(model)
    other, _ = _model(4)
    dynamics.rnea(other, other.neutral(), np.zeros(other.nv), np.zeros(other.nv))   # the last model now
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def _mappingproxy(d: dict):
    import types

    return types.MappingProxyType(d)


def test_a_used_model_pickles_without_its_workspace():
    """A model whose default workspace holds generated code (the numpy path's forward kinematics of a
    large batch, >= NUMPY_BATCH_FROM samples) pickles (as the library build sends a worker's nominal back,
    its mappingproxy index pickled as controller.synergies.transitions registers it) and the copy computes
    the same torques with a workspace of its own."""
    import copyreg
    import io
    import pickle
    import types

    from dynamics.kinematics import forward_kinematics

    model, rng = _model(3)
    q = random_configuration(model, rng, 600)
    with kernels.use_jit(False):
        forward_kinematics(model, q)
    assert workspace.data(model).generated          # generated functions: these do not pickle
    buf = io.BytesIO()
    pk = pickle.Pickler(buf)
    pk.dispatch_table = copyreg.dispatch_table.copy()
    pk.dispatch_table[types.MappingProxyType] = lambda m: (_mappingproxy, (dict(m),))
    pk.dump(model)
    copy = pickle.loads(buf.getvalue())
    v, a = rng.normal(size=(2, 3, model.nv))
    np.testing.assert_array_equal(dynamics.rnea(copy, q[:3], v, a), dynamics.rnea(model, q[:3], v, a))
    assert workspace.data(copy) is not workspace.data(model) and workspace.data(copy).model is copy


def test_bad_external_wrench_raises():
    model, _ = _model(0)
    q, z = model.neutral(), np.zeros(model.nv)
    with pytest.raises(ValueError, match=r"f_ext\[0\]: model .* has no segment 'nope'"):
        dynamics.rnea(model, q, z, z, [dynamics.Wrench("nope", force=[0, 0, 1], point=[0, 0, 0])])
    with pytest.raises(ValueError, match=r"f_ext\[0\].point: non-finite"):
        dynamics.rnea(model, q, z, z, [dynamics.Wrench("s1", force=[0, 0, 1], point=[np.nan, 0, 0])])
    with pytest.raises(ValueError, match=r"f_ext\[0\].force: shape \(4, 3\) does not match q"):
        dynamics.rnea(model, q, z, z, [dynamics.Wrench("s1", force=np.zeros((4, 3)), point=[0, 0, 0])])
