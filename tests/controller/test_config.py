"""Lab config validation: good files load into typed objects, every bad file is ONE line naming
file, key, value and expectation (exit status 2, no traceback), through the real `walklab` command."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tomllib
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import cli, config
from daq.bus import is_local_endpoint

REPO = Path(__file__).resolve().parents[2]

GOOD = """
[lab]
name = "t"

[supervisor]
bind = "tcp://127.0.0.1:5700"

[[processes]]
name = "plates"
module = "daq.simulated"
bind = "tcp://127.0.0.1:5701"
devices = ["FP1"]

[devices.FP1]
kind = "forceplate"
corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.0, 0.0], [0.6, 0.0, 0.0]]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


def test_good_config_loads_into_typed_frozen_objects(tmp_path):
    lab = config.load(write(tmp_path, GOOD))
    assert lab.lab.name == "t"
    assert lab.bus.sndhwm == 10_000 and lab.bus.curve is None  # defaults (those of daq.bus)
    (proc,) = lab.processes
    assert proc.restart == "on-failure" and proc.args == () and proc.devices == ("FP1",)
    plate = lab.devices["FP1"]
    assert isinstance(plate, config.ForcePlate)
    assert plate.name == "FP1" and plate.stream_name == "forceplate/FP1"
    assert plate.corners[1] == (0.0, 0.4, 0.0) and isinstance(plate.rate_hz, float)
    assert plate.channels == ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
    assert lab.endpoints() == {"supervisor": "tcp://127.0.0.1:5700", "plates": "tcp://127.0.0.1:5701"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        lab.lab.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("sim*.toml")))
def test_shipped_sim_configs_are_valid_and_local(name):
    """Every shipped sim lab loads, its process modules import with a run(), it stays on this machine."""
    lab = config.load(REPO / "configs" / name)
    config.check_processes(lab)
    assert "controller.healthmon" in {p.module for p in lab.processes}
    assert all(is_local_endpoint(e) for e in lab.endpoints().values())


# (edit applied to GOOD, key named in the message, words the message must contain)
BAD = [
    (("[supervisor]", "[supervisor]\nstatus_intreval_s = 1.0"), "supervisor.status_intreval_s",
     ["unknown key", "did you mean 'status_interval_s'"]),
    (('name = "plates"', 'name = "plates"\nrestart = "sometimes"'), "processes[0].restart",
     ['"sometimes"', '"always"', '"on-failure"', '"never"']),
    (('bind = "tcp://127.0.0.1:5700"', 'bind = "tcp://127.0.0.1:5700"\nstop_grace_s = "1"'),
     "supervisor.stop_grace_s", ['"1"', "expected a number"]),
    (('name = "t"', 'name = "t"\n[bus]\nsndhwm = -1'), "bus.sndhwm", ["-1", ">= 0"]),
    (('name = "t"', 'name = "t"\n[bus]\nsndhwm = true'), "bus.sndhwm", ["true", "integer"]),
    (('module = "daq.simulated"', 'module = "daq.simulatd"'), "processes[0].module",
     ['"daq.simulatd"', "module not found"]),
    (('devices = ["FP1"]', 'devices = ["FP3"]'), "processes[0].devices[0]",
     ['"FP3"', "[devices.NAME]", "did you mean 'FP1'"]),
    (('bind = "tcp://127.0.0.1:5701"', 'bind = "tcp://127.0.0.1:99999"'), "processes[0].bind",
     ["99999", "tcp://HOST:PORT"]),
    (('bind = "tcp://127.0.0.1:5701"', 'bind = ""'), "processes[0].bind", ['""', "tcp://HOST:PORT"]),
    (('name = "plates"', 'name = "plates"\nliveness_s = 1.0'), "processes[0].liveness_s",
     ["1.0", "0 (no liveness check) or at least 2 s"]),
    (('bind = "tcp://127.0.0.1:5700"', 'bind = ""'), "supervisor.bind", ['""', "tcp://HOST:PORT"]),
    (('bind = "tcp://127.0.0.1:5701"', 'bind = "tcp://10.0.0.7:5701"'), "processes[0].bind",
     ["10.0.0.7", "[bus.curve]", "walklab keys"]),
    (('bind = "tcp://127.0.0.1:5701"', 'bind = "tcp://127.0.0.1:5700"'), "processes[0].bind",
     ["already bound by supervisor.bind"]),
    (('[0.0, 0.0, 0.0], [0.6', '[0.0, 0.0], [0.6'), "devices.FP1.corners",
     ["expected 4 lists of 3 numbers"]),
    (('kind = "forceplate"', 'kind = "forceplat"'), "devices.FP1.kind",
     ['"forceplat"', '"forceplate"', '"mcu"', '"mocap"']),
    (('kind = "forceplate"', 'kind = "forceplate"\ntype = 4'), "devices.FP1.cal_matrix",
     ["type-4", "6x6"]),
    (('kind = "forceplate"', 'kind = "forceplate"\ntype = true'), "devices.FP1.type",
     ["true", "one of 1, 2, 3, 4"]),
    (('name = "t"\n', ''), "lab.name", ["missing required key", "a string"]),
    (('name = "plates"', 'name = "supervisor"'), "processes[0].name", ["unique"]),
    (("[lab]", "lab = 3\n[lab2]"), "lab", ["unknown key"]),
    (("[devices.FP1]", '[devices.M]\nkind = "mcu"\nport = "/dev/null"\nrobot = "exoskeletn"\n[devices.FP1]'),
     "devices.M.robot", ['"exoskeletn"', "no robot config 'exoskeletn'"]),
    (("[devices.FP1]", '[devices.M]\nkind = "mcu"\nport = "/dev/null"\nrobot = "mine.toml"\n[devices.FP1]'),
     "devices.M.robot", ['"mine.toml"', "mine.toml: cannot read"]),
    (("[devices.FP1]", '[devices.M]\nkind = "mcu"\nport = "/dev/null"\nrobot = "exoskeleton"\n[devices.FP1]'),
     "devices.M.motors", ['["crank"]', "expected the actuators of its robot config", "exoskeleton.toml",
                          '["hip_flexion_l", "knee_l", "hip_flexion_r", "knee_r"]']),
]


@pytest.mark.parametrize("edit, key, words", BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_bad_config_is_one_line_naming_file_key_and_expectation(tmp_path, capsys, edit, key, words):
    old, new = edit
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    assert cli.main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"walklab config: error: {path}: {key}")
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_an_mcu_s_robot_config_is_read_on_load(tmp_path):
    """``devices.NAME.robot``: a shipped name, or a file relative to the lab config; the typed device carries
    the robot config `controller.synergies.robot.load_robot` reads from that file (processes use it without
    importing the controller)."""
    from controller.synergies.robot import load_robot

    mcu = '[devices.M]\nkind = "mcu"\nport = "/dev/null"\nmotors = ["left_shaft", "right_shaft"]\nrobot = "{}"\n'
    shipped = config.load(write(tmp_path, GOOD + mcu.format("jansen"))).devices["M"]
    assert shipped.robot == "jansen" and shipped.robot_config == load_robot(REPO / "configs" / "jansen.toml")
    (tmp_path / "robots").mkdir()
    (tmp_path / "robots" / "mine.toml").write_text((REPO / "configs" / "jansen.toml").read_text())
    other = tmp_path / "elsewhere"
    other.mkdir()
    mine = config.load(write(other, GOOD + mcu.format("../robots/mine.toml"))).devices["M"]
    assert mine.robot_config == dataclasses.replace(load_robot(tmp_path / "robots" / "mine.toml"),
                                                    source=str(other / "../robots/mine.toml"))


def test_check_requires_a_run_function(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace('module = "daq.simulated"', 'module = "controller.config"'))
    assert cli.main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f'{path}: processes[0].module = "controller.config": expected a module defining run(ctx, args)' in err


def test_missing_file_and_bad_toml_through_the_real_command(tmp_path):
    missing = tmp_path / "nope.toml"
    broken = write(tmp_path, "[lab\nname = 1\n")
    for path, words in [(missing, "no such config file"), (broken, "invalid TOML")]:
        r = subprocess.run([sys.executable, "-m", "controller.cli", "config", "check", str(path)],
                           capture_output=True, text=True, cwd=REPO, timeout=60)
        assert r.returncode == 2
        assert r.stdout == "" and "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1 and f"{path}: {words}" in r.stderr, r.stderr


def test_good_config_check_prints_summary(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert cli.main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "process plates: module daq.simulated on tcp://127.0.0.1:5701" in out
    assert out.rstrip().endswith("ok")


def test_lab_template_with_generated_keys(tmp_path):
    """The real-lab template binds on the lab network: valid once `walklab keys` made its keys."""
    text = (REPO / "configs" / "lab_template.toml").read_text()
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError, match=r"bus\.curve\.server_key: no such file"):
        config.load(path)
    for name in ("server", "client"):
        assert cli.main(["keys", "--dir", str(tmp_path / "keys"), name]) == 0
    (tmp_path / "keys" / "authorized").mkdir()
    (tmp_path / "keys" / "client.key").rename(tmp_path / "keys" / "authorized" / "client.key")
    lab = config.load(path)
    assert lab.bus.curve is not None and lab.bus.curve.client_key == tmp_path / "keys" / "client.key_secret"
    assert not all(is_local_endpoint(p.bind) for p in lab.processes)


def test_keys_refuses_to_overwrite(tmp_path, capsys):
    assert cli.main(["keys", "--dir", str(tmp_path), "bus"]) == 0
    secret = (tmp_path / "bus.key_secret")
    before = secret.read_bytes()
    assert secret.stat().st_mode & 0o077 == 0
    capsys.readouterr()
    assert cli.main(["keys", "--dir", str(tmp_path), "bus"]) == 2
    assert "exists" in capsys.readouterr().err
    assert secret.read_bytes() == before


def _keys(cls: type, prefix: str) -> list[str]:
    """Every TOML key of dataclass `cls`, dotted (``processes[].restart``)."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("from_key") or f.metadata.get("internal"):
            continue
        tp = hints[f.name]
        args = typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            out += _keys(tp, f"{prefix}{f.name}.")
        elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(args[0]):
            out += _keys(args[0], f"{prefix}{f.name}[].")
        elif typing.get_origin(tp) is dict:
            for kind in typing.get_args(args[1]):
                out += _keys(kind, f"{prefix}{f.name}.NAME.")
        elif any(dataclasses.is_dataclass(a) for a in args):  # optional sub-table
            out += _keys(next(a for a in args if dataclasses.is_dataclass(a)), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def test_every_config_key_is_documented():
    doc = (REPO / "docs" / "config.md").read_text()
    keys = _keys(config.Lab, "")
    assert "processes[].restart" in keys and "devices.NAME.corners" in keys and "bus.curve.client_key" in keys
    undocumented = [k for k in keys if f"`{k}`" not in doc]
    assert not undocumented


# ------------------------------------------------------------------ any value at any key ----

_scalars = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.booleans(),
                     st.text(max_size=12))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["kind", "name", "x", "corners"]), inner,
                                                 max_size=3)), max_leaves=8)


def _toml(value) -> str:
    """Inline TOML for a tomllib-shaped value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "nan"
        return repr(value) if abs(value) != float("inf") else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


GOOD_TREE = tomllib.loads(GOOD)
GOOD_PATHS = list(_paths(GOOD_TREE))


def _like(v) -> st.SearchStrategy:
    """Values of the same TOML type as `v` (so that many are accepted, and the accepted branch is
    exercised): any boolean, integer, float (NaN and infinities too), string, or list of such."""
    if isinstance(v, bool):
        return st.booleans()
    if isinstance(v, int):
        return st.integers(-2**63, 2**63 - 1)
    if isinstance(v, float):
        return st.floats()
    if isinstance(v, str):
        return st.one_of(st.just(v), st.text(max_size=12), st.sampled_from(["FP1", "a.b", "tcp://127.0.0.1:5799"]))
    if isinstance(v, list) and v:
        return st.lists(_like(v[0]), min_size=max(len(v) - 1, 0), max_size=len(v) + 1)
    return _values


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(GOOD_PATHS), data=st.data())
def test_any_value_anywhere_is_accepted_or_one_line_config_error(tmp_path, path, data):
    tree = json.loads(json.dumps(GOOD_TREE))
    node = tree
    for p in path[:-1]:
        node = node[p]
    value = data.draw(st.one_of(_values, _like(node[path[-1]]), _like(node[path[-1]])), label="value")
    node[path[-1]] = value
    text = "\n".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in tree.items())
    file = write(tmp_path, text)
    try:
        lab = config.load(file)
    except config.ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"{file}: ")
    else:
        _holds(lab, tree, "")  # accepted: the typed config holds exactly what the file says


def _holds(obj, value, where: str) -> None:
    """Assert that the loaded config object `obj` holds the TOML `value` (the truth: what was
    written): every key of a table, every item of a list (a tuple), booleans as booleans, numbers
    equal as numbers (an integer may become a float), strings as written."""
    if isinstance(value, dict):
        for k, v in value.items():
            _holds(obj[k] if isinstance(obj, dict) else getattr(obj, k), v, f"{where}.{k}")
    elif isinstance(value, list):
        assert isinstance(obj, tuple) and len(obj) == len(value), (where, obj, value)
        for i, (o, v) in enumerate(zip(obj, value)):
            _holds(o, v, f"{where}[{i}]")
    elif isinstance(value, bool):
        assert obj is value, (where, obj, value)
    elif isinstance(value, (int, float)):
        assert isinstance(obj, (int, float)) and not isinstance(obj, bool), (where, obj, value)
        assert obj == value or (isinstance(obj, float) and obj == float(value)), (where, obj, value)
    else:
        assert isinstance(obj, str) and obj == value, (where, obj, value)
