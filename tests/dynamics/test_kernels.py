"""The compiled kernels (dynamics/kernels) against the numpy reference path and Pinocchio, the
workspace (dynamics/workspace.py), and numba's on-disk cache across processes."""
import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

import dynamics
from dynamics import kernels, workspace
from dynamics.kernels.tree import AXIS_K
from dynamics.model import G, Model
from dynamics.pinocchio_model import to_pinocchio
from dynamics.samples import random_configuration, random_model
from dynamics.workspace import Data

REPO = Path(__file__).resolve().parents[2]
TYPES = ("revolute", "prismatic", "fixed", "spherical", "revolute_unbounded", "planar")


def _case(seed):
    rng = np.random.default_rng(200 + seed)
    model = random_model(rng, 10, TYPES, root=("free_flyer", "spherical", "planar", "revolute")[seed % 4])
    N = 6
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    segs = [s.name for s in model.segments]
    wrenches = [dynamics.Wrench(seg, force=rng.normal(scale=30, size=(N, 3)), point=rng.normal(size=(N, 3)),
                                moment=rng.normal(size=(N, 3))) for seg in rng.choice(segs, 3, replace=False)]
    return model, rng, q, v, a, wrenches


def _all(model, q, v, a, wrenches):
    return {
        "rnea": dynamics.rnea(model, q, v, a),
        "rnea f_ext": dynamics.rnea(model, q, v, a, f_ext=wrenches),
        "crba": dynamics.crba(model, q),
        "aba": dynamics.aba(model, q, v, a),
        "aba f_ext": dynamics.aba(model, q, v, a, f_ext=wrenches),
        "rotation": dynamics.forward_kinematics(model, q).rotation,
        "translation": dynamics.forward_kinematics(model, q).translation,
        "points": np.concatenate(dynamics.point_kinematics(model, q, v, a), axis=-1),
        "jacobians": dynamics.point_jacobians(model, q),
        "com": np.concatenate(dynamics.com(model, q, v, a), axis=-1),
        "centroidal": np.concatenate(dynamics.centroidal_momentum(model, q, v, a), axis=-1),
    }


@pytest.mark.parametrize("seed", range(8))
def test_compiled_equals_numpy_path(seed):
    """Every joint type, branching, external wrenches: the two paths agree to 1e-10 relative."""
    model, _, q, v, a, wrenches = _case(seed)
    with kernels.use_jit(True):
        jit = _all(model, q, v, a, wrenches)
    with kernels.use_jit(False):
        ref = _all(model, q, v, a, wrenches)
    for name, x in ref.items():
        scale = max(1.0, float(np.abs(x).max()))
        np.testing.assert_allclose(jit[name], x, rtol=1e-10, atol=1e-10 * scale, err_msg=name)


@pytest.mark.parametrize("path", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("seed", range(4))
def test_spherical_trees_with_external_wrenches_match_pinocchio(seed, path):
    """rnea with external forces and aba on trees of spherical (quaternion, Pinocchio's
    JointModelSpherical), unbounded, planar, prismatic and fixed joints, against Pinocchio built from
    the same model."""
    model, _, q, v, a, wrenches = _case(seed)
    pm = to_pinocchio(model)
    pd = pm.createData()
    with kernels.use_jit(path):
        tau = dynamics.rnea(model, q, v, a, f_ext=wrenches)
        acc = dynamics.aba(model, q, v, a, f_ext=wrenches)
    for k, fext in enumerate(_pinocchio_forces(model, pm, pd, q, wrenches)):
        np.testing.assert_allclose(tau[k], pin.rnea(pm, pd, q[k], v[k], a[k], fext), atol=1e-9)
        np.testing.assert_allclose(acc[k], pin.aba(pm, pd, q[k], v[k], a[k], fext), atol=1e-7)


def _pinocchio_forces(model, pm, pd, q, wrenches):
    """Per sample of q, Pinocchio's external forces (one pin.Force per joint, in the joint frame)
    equal to the lab-frame `wrenches`."""
    frame_joint = {}               # segment -> Pinocchio joint id (to_pinocchio merges fixed segments)
    for s in model.segments:
        frame_joint[s.name] = len(set(frame_joint.values()) - {0}) + 1 if s.joint.nv else frame_joint.get(s.parent, 0)
    for k in range(len(q)):
        pin.forwardKinematics(pm, pd, q[k])
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        for w in wrenches:
            jid = frame_joint[w.segment]
            F, P, T = w.force[k], w.point[k], w.moment[k]
            fext[jid] += pd.oMi[jid].actInv(pin.Force(F, np.cross(P, F) + T))
        yield fext


@pytest.mark.parametrize("seed", range(4))
def test_axis_aligned_revolute_joints_match_pinocchio_and_the_numpy_path(seed):
    """Revolute joints (bounded and unbounded) about ±x, ±y, ±z with identity placement rotations
    take rnea's rotate-two-components step (itab AXIS_K); in a random tree among general joints,
    one sample, a batch over the cores, external wrenches and the centroidal output equal
    Pinocchio to 1e-9 and the numpy path to 1e-10."""
    rnea_mod = importlib.import_module("dynamics.rnea")
    rng = np.random.default_rng(300 + seed)
    base = random_model(rng, 16, ("revolute", "revolute_unbounded", "prismatic", "spherical"), root="free_flyer")
    segs = []
    for k, s in enumerate(base.segments):
        j = s.joint
        if k > 0 and k % 3 != 2:           # aligned revolute joints; every third keeps its random joint
            j = dataclasses.replace(j, type=("revolute", "revolute_unbounded")[k % 2], axis=np.eye(3)[k % 3] *
                                    (-1.0 if k % 4 < 2 else 1.0), rotation=np.eye(3))
        segs.append(dataclasses.replace(s, joint=j))
    model = Model(base.name, tuple(segs), gravity=base.gravity)
    assert (Data(model).itab[:, AXIS_K] >= 0).sum() == 10
    N = rnea_mod.PARALLEL_FROM + 3
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    w = [dynamics.Wrench(segs[-1].name, force=rng.normal(scale=30, size=(N, 3)), point=rng.normal(size=(N, 3)))]
    out = {}
    for jit in (True, False):
        with kernels.use_jit(jit):
            out[jit] = {"one": np.array([dynamics.rnea(model, q[k], v[k], a[k]) for k in range(4)]),
                        "batch": dynamics.rnea(model, q, v, a), "f_ext": dynamics.rnea(model, q, v, a, w),
                        "centroidal": np.concatenate(dynamics.centroidal_momentum(model, q[:9], v[:9], a[:9]), axis=-1)}
    for name, x in out[True].items():
        scale = max(1.0, float(np.abs(x).max()))
        np.testing.assert_allclose(x, out[False][name], rtol=1e-10, atol=1e-10 * scale, err_msg=name)
    pm = to_pinocchio(model)
    pd = pm.createData()
    for k, fext in enumerate(_pinocchio_forces(model, pm, pd, q[:4], [dynamics.Wrench(w[0].segment, w[0].force[:4], w[0].point[:4], np.zeros((4, 3)))])):
        np.testing.assert_allclose(out[True]["one"][k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=1e-9)
        np.testing.assert_allclose(out[True]["batch"][k], pin.rnea(pm, pd, q[k], v[k], a[k]), atol=1e-9)
        np.testing.assert_allclose(out[True]["f_ext"][k], pin.rnea(pm, pd, q[k], v[k], a[k], fext), atol=1e-9)


def test_large_batches_equal_on_both_paths_whichever_runs(monkeypatch):
    """From kernels.NUMPY_BATCH_FROM samples aba and the kinematics take the numpy path by default
    (rnea and crba stay compiled); forced compiled at that size every algorithm gives the same results."""
    model, rng, *_ = _case(5)
    N = kernels.NUMPY_BATCH_FROM + 3
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    w = [dynamics.Wrench("s3", force=rng.normal(size=(N, 3)), point=rng.normal(size=(N, 3)))]
    with kernels.use_jit(True):
        default = _all(model, q, v, a, w)
        monkeypatch.setattr(kernels, "NUMPY_BATCH_FROM", 1 << 62)
        forced = _all(model, q, v, a, w)
    for name, x in default.items():
        scale = max(1.0, float(np.abs(x).max()))
        np.testing.assert_allclose(forced[name], x, rtol=1e-10, atol=1e-10 * scale, err_msg=name)


def test_explicit_workspace_is_used_and_checked():
    model, _, q, v, a, wrenches = _case(1)
    d = Data(model)
    with kernels.use_jit(True):
        np.testing.assert_array_equal(dynamics.rnea(model, q, v, a, data=d), dynamics.rnea(model, q, v, a))
        np.testing.assert_array_equal(dynamics.aba(model, q, v, a, wrenches, data=d), dynamics.aba(model, q, v, a, wrenches))
        np.testing.assert_array_equal(dynamics.crba(model, q, data=d), dynamics.crba(model, q))
        other = Data(random_model(np.random.default_rng(0), 3))
        with pytest.raises(ValueError, match="workspace of model .* given for model"):
            dynamics.rnea(model, q, v, a, data=other)
    with kernels.use_jit(False):
        dynamics.rnea(model, q, v, a, data=d)
    assert "rnea" in d.generated          # the numpy path's generated code went into the given workspace
    # the frozen model holds nothing but its default workspace (the calls above without data=), a Data of its
    # own, not the given one (kept on the model, not in a module map: a model and its workspace are freed
    # together, test_rnea.py)
    assert [k for k in vars(model) if k.startswith("_")] == ["_workspace_data"]
    assert workspace.data(model) is vars(model)["_workspace_data"] and workspace.data(model) is not d


def test_readonly_and_strided_inputs_take_the_one_signature():
    """Read-only and non-contiguous inputs are accepted (copied to the kernels' layout), so no
    second compiled signature is ever needed (compilation is disabled after the first)."""
    model, _, q, v, a, _ = _case(2)
    want = dynamics.rnea(model, q, v, a)
    for x in (q, v, a):
        x.setflags(write=False)
    np.testing.assert_array_equal(dynamics.rnea(model, q, v, a), want)
    wide = np.zeros((len(q), 2 * model.nv))
    wide[:, ::2] = v
    np.testing.assert_array_equal(dynamics.rnea(model, q, wide[:, ::2], a), want)
    assert len(kernels.kernel("tree.rnea").signatures) == 1


_LOAD_RNEA = textwrap.dedent("""
    import json, numpy as np, dynamics
    from dynamics import kernels
    model = dynamics.load_model("human15")
    tau = dynamics.rnea(model, model.neutral(), np.zeros(model.nv), np.zeros(model.nv))
    stats = kernels.kernel("tree.rnea_one").stats     # what one dynamics.rnea sample runs
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                      "tau0": float(tau[2])}))
""")


def test_second_process_loads_the_kernel_from_the_cache(tmp_path):
    """numba's dispatcher statistics: the first process compiles (a cache miss) and writes the
    cache; a second process finds it (a hit, no miss) and gives the same result."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), WALKLAB_JIT="1", PYTHONPATH=str(REPO))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _LOAD_RNEA], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr
        runs.append((json.loads(p.stdout.strip().splitlines()[-1]), p.stderr))
    (first, first_err), (second, second_err) = runs
    assert first["misses"] == 1 and "compiling dynamics kernel tree.rnea_one" in first_err
    assert second == {"hits": 1, "misses": 0, "tau0": first["tau0"]}
    assert "compiling" not in second_err
    assert first["tau0"] == pytest.approx(dynamics.load_model("human15").total_mass * G)


def test_a_kernel_is_recompiled_when_a_joint_type_it_inlines_changes(tmp_path):
    """The tree kernels inline the joint type modules (dynamics/joints), which numba's cache does
    not watch: a joint module newer than a kernel's cache index makes the next process compile the
    kernel again (a miss) instead of loading the stale machine code (a hit without the check). Run
    on a copy of the package, so that the checkout's sources and caches stay untouched."""
    shutil.copytree(REPO / "dynamics", tmp_path / "dynamics", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), WALKLAB_JIT="1", PYTHONPATH=str(tmp_path))
    runs = []
    for k in range(2):
        if k == 1:                      # an edit of the revolute joint, one second after the cache was written
            later = max(f.stat().st_mtime for f in (tmp_path / "cache").rglob("*.nbi")) + 1
            os.utime(tmp_path / "dynamics" / "joints" / "revolute.py", (later, later))
        p = subprocess.run([sys.executable, "-c", _LOAD_RNEA], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr
        runs.append((json.loads(p.stdout.strip().splitlines()[-1]), p.stderr))
    (first, _), (second, second_err) = runs
    assert first["misses"] == 1
    assert second["misses"] == 1 and second["hits"] == 0 and "compiling dynamics kernel tree.rnea_one" in second_err
    assert second["tau0"] == first["tau0"]


def test_walklab_jit_0_selects_the_numpy_path():
    env = dict(os.environ, WALKLAB_JIT="0", PYTHONPATH=str(REPO))
    code = "from dynamics import kernels; print(kernels.enabled())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("seed", range(3))
def test_zmp_model_equal_on_both_paths(seed):
    from dynamics.zmp import zmp_model

    model = dynamics.load_model("human15")
    rng = np.random.default_rng(seed)
    q = np.tile(model.neutral(), (5, 1))
    q[:, 2] = 0.9
    v, a = rng.normal(size=(2, 5, model.nv))
    with kernels.use_jit(True):
        jit = zmp_model(model, q, v, a)
    with kernels.use_jit(False):
        ref = zmp_model(model, q, v, a)
    np.testing.assert_array_equal(jit.valid, ref.valid)
    np.testing.assert_allclose(jit.point, ref.point, rtol=1e-10, atol=1e-12)


def _walklab_model(*args, env=None):
    return subprocess.run([sys.executable, "-m", "controller.cli", "model", *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO, env=env)


def test_walklab_model_compile_warms_every_kernel_and_runs_the_model():
    # the kernels on whatever the suite's environment says (a WALKLAB_JIT=0 run would refuse)
    r = _walklab_model("compile", "human15", env=dict(os.environ, WALKLAB_JIT="1"))
    assert r.returncode == 0, r.stderr
    for name in kernels.SIGNATURES:
        assert any(line.startswith(name + " ") and ("compiled in" in line or "loaded from the cache in" in line)
                   for line in r.stdout.splitlines()), r.stdout
    assert "model 'human15': rnea, crba, kinematics, centroidal and aba run on the compiled kernels" in r.stdout


@pytest.mark.parametrize("args, words", [
    (("compile", "jansen_leg"), ("linkage", "tree model")),
    (("compile", "no_such_model"), ("no_such_model",)),
])
def test_walklab_model_compile_bad_input_is_one_line(args, words):
    r = _walklab_model(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("walklab model: error: "), r.stderr
    for w in words:
        assert w in lines[0]


@pytest.mark.parametrize("d", [3, 2])
def test_contact_wrench_and_zmp_of_wrench_equal_on_both_paths(d):
    """The compiled per-foot sums and wrench ZMP against the numpy path: several contacts per foot,
    a foot without contacts, invalid (f_z below the limit) and NaN samples."""
    from dynamics.contact import contact_wrench
    from dynamics.zmp import zmp_of_wrench

    rng = np.random.default_rng(11)
    N, C, F = 50, 7, 4
    points, forces, refs = rng.normal(size=(N, C, d)), rng.normal(scale=100, size=(N, C, d)), rng.normal(size=(N, F, d))
    foot = np.array([0, 0, 1, 1, 1, 3, 0])
    out = {}
    for jit in (True, False):
        with kernels.use_jit(jit):
            out[jit] = contact_wrench(points, forces, refs, foot)
            if d == 3:
                f, m = out[jit][0][:, 0], out[jit][1][:, 0]
                f[::5, 2] = -1.0
                f[3] = np.nan
                z = zmp_of_wrench(f, m, 0.02, 10.0)
                out[jit] += (z.point, z.valid)
    for a, b in zip(out[True], out[False]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)
    assert np.all(out[True][0][:, 2] == 0)                 # the foot without contacts


@pytest.mark.parametrize("tree_numpy", [False, True], ids=["tree compiled", "tree numpy (large batch)"])
@pytest.mark.parametrize("edge_tol", [0.0, 0.03])
def test_plate_inverse_dynamics_equal_on_both_paths(edge_tol, tree_numpy, monkeypatch):
    """Plates under one foot, under both feet (shared: the nearest-COP rule), an empty loaded plate
    (unassigned), plates touching so a foot straddles, the outline grown by edge_tol (points in the
    band take the exact-distance branch), some samples unloaded: every PlateID field is the same on
    the compiled and the numpy path, also when the tree algorithms take the numpy path (a batch of
    NUMPY_BATCH_FROM samples or more) before the compiled plate stage."""
    from dynamics.plate_id import PlateLoad, plate_inverse_dynamics

    if tree_numpy:
        monkeypatch.setattr(kernels, "NUMPY_BATCH_FROM", 1)

    model = dynamics.load_model("human15")
    rng = np.random.default_rng(21)
    N = 25
    q = np.tile(model.neutral(), (N, 1))
    q[:, 2] = 0.8948
    q[:, 7:] = 0.05 * rng.standard_normal((N, model.nq - 7))
    v, a = rng.standard_normal((2, N, model.nv))
    feet = dynamics.contact_positions(model, q, ["heel_r", "toe_r", "heel_l", "toe_l"])
    lo, hi = feet[..., :2].min(axis=(0, 1)), feet[..., :2].max(axis=(0, 1))
    mid = 0.5 * (lo[1] + hi[1])
    z = float(feet[..., 2].min()) - 1e-3

    def box(x0, x1, y0, y1):
        return np.array([[x1, y1, z], [x0, y1, z], [x0, y0, z], [x1, y0, z]])

    outlines = [box(lo[0] - 0.05, hi[0] + 0.05, lo[1] - 0.05, hi[1] + 0.05),     # both feet: shared
                box(lo[0] - 0.02, 0.5 * (lo[0] + hi[0]), mid, hi[1] + 0.02),      # part of one foot
                box(0.5 * (lo[0] + hi[0]), hi[0] + 0.02, mid, hi[1] + 0.02),      # the rest: straddling
                box(5.0, 6.0, 5.0, 6.0)]                                          # nobody: unassigned
    plates = []
    for k, corners in enumerate(outlines):
        force = np.column_stack([rng.normal(scale=20, size=N), rng.normal(scale=20, size=N), rng.uniform(100, 400, N)])
        moment = rng.normal(scale=30, size=(N, 3))
        loaded = rng.random(N) > 0.2
        plates.append(PlateLoad(force, moment, corners, loaded, f"P{k}"))
    res = {}
    for jit in (True, False):
        with kernels.use_jit(jit):
            res[jit] = plate_inverse_dynamics(model, q, v, a, plates, ["foot_r", "foot_l"], edge_tol=edge_tol)
    jit, ref = res[True], res[False]
    for name in ("tau_bottom_up", "tau_top_down", "disagreement", "residual_force", "residual_moment",
                 "com_acc_kinematic", "com_acc_plates", "com", "foot_wrench"):
        x = getattr(ref, name)
        np.testing.assert_allclose(getattr(jit, name), x, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(x).max()), err_msg=name)
    for name in ("plate_below", "indeterminate"):
        np.testing.assert_array_equal(getattr(jit, name), getattr(ref, name), err_msg=name)
    for name in ("weights", "on_plate", "shared", "unassigned", "straddling"):
        np.testing.assert_array_equal(getattr(jit.assignment, name), getattr(ref.assignment, name), err_msg=name)
    asg = ref.assignment
    assert asg.shared.any() and asg.unassigned.any() and asg.straddling.any()


def test_walklab_model_compile_on_the_numpy_path_says_there_is_nothing_to_compile():
    r = _walklab_model("compile", env=dict(os.environ, WALKLAB_JIT="0"))
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("walklab model: error: ") and "WALKLAB_JIT=0" in lines[0], r.stderr


def test_parallel_rnea_equals_the_one_thread_kernel_and_the_numpy_path(monkeypatch):
    """From rnea.PARALLEL_FROM samples the call runs over the cores (tree.rnea_parallel, blocks of
    samples with their own scratch): the same torques, bit for bit, as the one-thread kernel, and
    the numpy path's to 1e-10, with external wrenches."""
    rnea_mod = importlib.import_module("dynamics.rnea")     # the module (dynamics.rnea is the function)

    model, rng, *_ = _case(3)
    N = rnea_mod.PARALLEL_FROM + 37
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    w = [dynamics.Wrench("s4", force=rng.normal(scale=30, size=(N, 3)), point=rng.normal(size=(N, 3)))]
    with kernels.use_jit(True):
        parallel = dynamics.rnea(model, q, v, a, w)
        monkeypatch.setattr(rnea_mod, "PARALLEL_FROM", 1 << 62)
        serial = dynamics.rnea(model, q, v, a, w)
    np.testing.assert_array_equal(parallel, serial)
    with kernels.use_jit(False):
        ref = dynamics.rnea(model, q, v, a, w)
    np.testing.assert_allclose(parallel, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


_FORK_AFTER_PARALLEL = textwrap.dedent("""
    import multiprocessing, numpy as np, dynamics
    from dynamics.samples import random_configuration
    model = dynamics.load_model("human15")
    rng = np.random.default_rng(0)
    N = 2 * sys_N
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    tau = dynamics.rnea(model, q, v, a)          # the parent starts numba's OpenMP threads

    def child(conn):
        conn.send(dynamics.rnea(model, q, v, a))
        conn.close()

    if __name__ == "__main__":
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe()
        p = ctx.Process(target=child, args=(there,))
        p.start()
        got = here.recv() if here.poll(300) else None
        p.join(60)
        print("exit", p.exitcode, "equal", got is not None and bool(np.array_equal(got, tau)))
""")


def test_a_child_forked_after_a_parallel_rnea_runs_its_batches_on_one_thread():
    """GNU OpenMP cannot run in a child forked after the parent used it (numba terminates the
    child). ProcessPoolExecutor forks on Linux (controller/analyze.py), so a child of a parent that
    ran a parallel rnea takes the one-thread kernel: same torques, exit 0."""
    rnea_mod = importlib.import_module("dynamics.rnea")
    code = _FORK_AFTER_PARALLEL.replace("sys_N", str(rnea_mod.PARALLEL_FROM))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO,
                       env=dict(os.environ, WALKLAB_JIT="1", PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "exit 0 equal True", (r.stdout, r.stderr)


@pytest.mark.parametrize("name", ["tree.rnea", "tree.rnea_parallel", "tree.aba"])
def test_kernels_report_the_first_non_finite_sample(name):
    """The kernels check finiteness themselves (the Python side checks only shapes): a NaN or inf
    in q, v or a / τ stops them with status −2 − s for the first such sample s, in sample order
    also when the samples run in parallel blocks."""
    from dynamics.workspace import data

    model, rng, *_ = _case(0)
    N = 3000
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    v[2500, 1], a[1700, 0], q[2900, 0] = np.nan, np.inf, -np.inf
    d = data(model)
    out = np.empty((N, model.nv))
    args = (d.itab, d.ftab, d.gravity, q, v, a, d.no_ext, out) + ((d.no_cent,) if "rnea" in name else ())
    assert kernels.kernel(name)(*args) == -2 - 1700
    a[1700, 0] = 0.0
    assert kernels.kernel(name)(*args) == -2 - 2500


@pytest.mark.parametrize("fn", [dynamics.rnea, dynamics.aba])
def test_non_finite_input_is_named_by_argument_and_sample_on_the_compiled_path(fn):
    """A batch large enough for the parallel rnea and a single sample: the error names the
    argument, the sample and the coordinate (found by the kernel, named by the Python side)."""
    model, rng, *_ = _case(1)
    N = 2000
    q = random_configuration(model, rng, N)
    v, a = rng.normal(size=(2, N, model.nv))
    v[1234, 2] = np.nan
    second = "tau" if fn is dynamics.aba else "a"
    with kernels.use_jit(True):
        with pytest.raises(ValueError, match=r"^v: non-finite value \(NaN or inf\) at sample 1234, coordinate 2$"):
            fn(model, q, v, a)
        a[7, 5] = np.inf
        with pytest.raises(ValueError, match=rf"^{second}: non-finite value \(NaN or inf\) at sample 0, coordinate 5$"):
            fn(model, q[7], v[7], a[7])


def test_inputs_of_any_array_like_form_give_the_same_result():
    """The compiled path's shape-only check (kinematics.kernel_state) takes lists, integer arrays,
    read-only and strided single samples like the full check did."""
    model, rng, q, v, a, _ = _case(2)
    with kernels.use_jit(True):
        want = dynamics.rnea(model, q[0], v[0], a[0])
        wide = np.zeros(2 * model.nv)
        wide[::2] = v[0]
        np.testing.assert_array_equal(dynamics.rnea(model, q[0].tolist(), wide[::2], a[0].tolist()), want)
        z = np.zeros(model.nv, dtype=int)
        np.testing.assert_array_equal(dynamics.rnea(model, q[0], z, z), dynamics.rnea(model, q[0], 0.0 * v[0], 0.0 * v[0]))
        with pytest.raises(ValueError, match=r"^v: expected shape"):
            dynamics.rnea(model, q[0], v[0][:-1], a[0])
        with pytest.raises(ValueError, match=r"^q: expected shape"):
            dynamics.aba(model, 1.0, v[0], a[0])
