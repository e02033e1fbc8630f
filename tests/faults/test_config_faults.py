"""Config faults (issue 8, A5 and A6) through the real `walklab` command and real subprocesses.

A5: two devices on one stream name (two plates both ``forceplate/FP1``, two MCUs both with a motor
``crank``) are refused by ``config check`` and ``run`` in one line; a process that exits with the
config-error status 2 is marked failed and not restarted, whatever its restart policy.
A6: a process module with a syntax error, a missing import or an exception at import time is
one line naming the module file and the line (exit 2), ``run`` starts nothing, and
``bus monitor --config`` does not need the modules importable.

Truths: the line numbers and names written into the broken modules here; the streams a
publisher of this test sends; the events the supervisor publishes on the bus.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from daq.bus import Publisher, Subscriber
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]

PLATE = 'kind = "forceplate"\ncorners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.0, 0.0], [0.6, 0.0, 0.0]]\n'


def lab(tmp_path: Path, processes: str, devices: str = "", supervisor: str = "") -> tuple[Path, list[int]]:
    """A lab file: `processes` and `devices` TOML with {p1}, {p2} for free ports; returns (path, ports)."""
    ports = free_tcp_ports(3)
    text = (f'[lab]\nname = "faults"\n[supervisor]\nbind = "tcp://127.0.0.1:{ports[0]}"\n'
            + textwrap.dedent(supervisor) + textwrap.dedent(processes).format(p1=ports[1], p2=ports[2])
            + textwrap.dedent(devices))
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path, ports


def walklab(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command, with `tmp_path` importable (where this test writes process modules)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, command: str) -> str:
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"walklab {command}: error: ")
    return lines[0]


# ------------------------------------------------------------------------- A5: duplicate streams ----

PLATES = """
    [[processes]]
    name = "plates"
    module = "daq.simulated"
    bind = "tcp://127.0.0.1:{p1}"
    devices = ["FP1", "FP2"]
"""

DUPLICATES = [
    # (devices TOML, key named, words)
    (f'[devices.FP1]\n{PLATE}[devices.FP2]\n{PLATE}stream = "forceplate/FP1"\n',
     'devices.FP2.stream = "forceplate/FP1"', "'forceplate/FP1' is already published by devices.FP1"),
    (f'[devices.FP1]\n{PLATE}stream = "forceplate/FP2"\n[devices.FP2]\n{PLATE}',
     "devices.FP2", "'forceplate/FP2' is already published by devices.FP1"),
    (f'[devices.FP1]\n{PLATE}[devices.FP2]\n{PLATE}'
     '[devices.left]\nkind = "mcu"\nport = "/dev/null"\nmotors = ["crank"]\n'
     '[devices.right]\nkind = "mcu"\nport = "/dev/null"\nmotors = ["hip", "crank"]\n',
     "devices.right", "'encoder/crank' is already published by devices.left"),
    (f'[devices.FP1]\n{PLATE}stream = "health/plates"\n[devices.FP2]\n{PLATE}',
     'devices.FP1.stream = "health/plates"', "'health/plates' is already published by processes[0] (its health)"),
]


@pytest.mark.parametrize("devices, key, words", DUPLICATES, ids=["plate-stream", "default-name", "mcu-motor",
                                                                  "health"])
def test_duplicate_stream_names_are_refused_by_check_and_run(tmp_path, devices, key, words):
    path, ports = lab(tmp_path, PLATES, devices)
    for command in ("config", "run"):
        args = ["config", "check", str(path)] if command == "config" else ["run", str(path)]
        line = one_line_error(walklab(tmp_path, *args), command)
        assert f"{path}: {key}: " in line and words in line, line
    # `run` refused before starting anything: nothing ever bound the plates' endpoint
    with Publisher(f"tcp://127.0.0.1:{ports[1]}"):
        pass


# ---------------------------------------------------------------- A5: exit status 2 is not a loop ----

BAD_ARGS = '''
def run(ctx, args):
    """A process whose arguments are wrong: the one-line error of controller.proc, exit status 2."""
    raise ValueError(f"process {ctx.name!r}: --speed {args[0]}: expected a number")
'''


def badargs_lab(tmp_path: Path, others: str = "") -> tuple[Path, list[int]]:
    """A lab whose process `badargs` (restart always) exits with status 2, plus `others`."""
    (tmp_path / "badargs.py").write_text(BAD_ARGS)
    return lab(tmp_path, """
        [[processes]]
        name = "badargs"
        module = "badargs"
        bind = "tcp://127.0.0.1:{p1}"
        args = ["fast"]
        restart = "always"
    """ + others, supervisor="backoff_initial_s = 0.05\nstatus_interval_s = 0.2\n")


def test_a_config_error_exit_is_not_restarted_and_says_why(tmp_path):
    path, ports = badargs_lab(tmp_path, """
        [[processes]]
        name = "waiter"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{p2}"
        restart = "never"
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    with Subscriber([f"tcp://127.0.0.1:{ports[0]}"], ["events/supervisor"]) as sub:
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(path)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        events = []
        try:
            deadline = time.monotonic() + 60  # a hang guard: the loop ends at the failed event
            while time.monotonic() < deadline and not any(e.meta["event"] == "failed" for e in events):
                f = sub.recv(timeout_s=0.2)
                if f is not None:
                    events.append(f)
            # 20 backoff periods: a restart loop would have restarted it many times meanwhile
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                f = sub.recv(timeout_s=0.1)
                if f is not None:
                    events.append(f)
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=60)
    names = [e.meta["event"] for e in events]
    assert "failed" in names, (names, err)
    assert "restart" not in names and err.count("started badargs") == 1, err
    failed = next(e for e in events if e.meta["event"] == "failed")
    assert failed.meta["process"] == "badargs" and failed.meta["status"] == 2
    assert failed.meta["error"] == "process 'badargs': --speed fast: expected a number"  # its line, unprefixed
    assert "badargs exit status 2 (a config, argument or import error): failed, not restarted: " in err
    assert "badargs failed (config error)" in out  # the status line says so too


def test_a_lab_whose_processes_all_failed_stops_by_itself(tmp_path):
    path, _ = badargs_lab(tmp_path)
    r = walklab(tmp_path, "run", str(path), timeout=60)  # a restart loop never ends: the timeout fails it
    assert r.returncode == 1, r.stderr
    assert "no process left to run" in r.stderr and "badargs restarted" not in r.stderr


# ------------------------------------------------------------------------ A6: unimportable modules ----

BROKEN = {
    # module file text, (line, words) the one-line error must name
    "syntax": ("import time\n\ndef run(ctx, args)\n    return 0\n", (3, "SyntaxError: expected ':'")),
    "missing_import": ('"""a process."""\nimport time\nimport no_such_dependency_xyz\n\ndef run(ctx, args):\n'
                       '    return 0\n', (3, "ModuleNotFoundError: No module named 'no_such_dependency_xyz'")),
    "raises": ("import math\n\nSCALE = 1 / 0\n\ndef run(ctx, args):\n    return 0\n",
               (3, "ZeroDivisionError: division by zero")),
}


def broken_lab(tmp_path: Path, kind: str) -> tuple[Path, list[int], Path]:
    text, _ = BROKEN[kind]
    module = tmp_path / f"broken_{kind}.py"
    module.write_text(text)
    path, ports = lab(tmp_path, f"""
        [[processes]]
        name = "plates"
        module = "daq.simulated"
        bind = "tcp://127.0.0.1:{{p1}}"
        devices = ["FP1"]
        [[processes]]
        name = "broken"
        module = "broken_{kind}"
        bind = "tcp://127.0.0.1:{{p2}}"
    """, f"[devices.FP1]\n{PLATE}")
    return path, ports, module


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_an_unimportable_module_is_one_line_and_run_refuses(tmp_path, kind):
    path, ports, module = broken_lab(tmp_path, kind)
    line_no, words = BROKEN[kind][1]
    for command in ("config", "run"):
        args = ["config", "check", str(path)] if command == "config" else ["run", str(path)]
        line = one_line_error(walklab(tmp_path, *args), command)
        assert f'{path}: processes[1].module = "broken_{kind}": cannot import it: ' in line, line
        assert f"{module} line {line_no}: {words}" in line, line
    # `run` started nothing: the plates' endpoint was never bound
    with Publisher(f"tcp://127.0.0.1:{ports[1]}"):
        pass


def test_a_broken_package_is_one_line_too(tmp_path):
    """A module inside a package whose __init__ fails (the old check's find_spec raised out of it)."""
    pkg = tmp_path / "mylab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("VERSION = (1,\n")
    (pkg / "plates.py").write_text("def run(ctx, args):\n    return 0\n")
    path, _ = lab(tmp_path, """
        [[processes]]
        name = "plates"
        module = "mylab.plates"
        bind = "tcp://127.0.0.1:{p1}"
    """)
    line = one_line_error(walklab(tmp_path, "config", "check", str(path)), "config")
    assert f"cannot import it: {pkg / '__init__.py'} line 1: SyntaxError: " in line, line


def test_the_process_runtime_reports_an_unimportable_module_in_one_line(tmp_path):
    """`python -m controller.proc` (what the supervisor starts) on the same module: exit 2, one ERROR line."""
    path, _, module = broken_lab(tmp_path, "missing_import")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    r = subprocess.run([sys.executable, "-m", "controller.proc", "--config", str(path), "--name", "broken"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert " ERROR " in line and f"{module} line 3: ModuleNotFoundError" in line, line


@pytest.mark.parametrize("module", ["no_such_module_xyz", "mylab.plates"], ids=["missing", "broken-package"])
def test_bus_monitor_does_not_need_the_process_modules(tmp_path, module):
    """The monitor watches a lab whose process module is missing or broken: it reads the streams of
    the endpoints the config names (here a publisher of this test on the process's endpoint)."""
    pkg = tmp_path / "mylab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('half-installed')\n")
    path, ports = lab(tmp_path, f"""
        [[processes]]
        name = "plates"
        module = "{module}"
        bind = "tcp://127.0.0.1:{{p1}}"
    """)
    stop = threading.Event()
    with Publisher(f"tcp://127.0.0.1:{ports[1]}") as pub:
        def publish() -> None:
            while not stop.is_set():
                pub.publish("forceplate/FP1", np.zeros((5, 6)), kind="force", rate_hz=1000.0,
                            channels=["Fx", "Fy", "Fz", "Mx", "My", "Mz"], units=["N"] * 3 + ["N*m"] * 3)
                pub.poll_subscriptions()
                stop.wait(0.005)

        thread = threading.Thread(target=publish)
        thread.start()
        try:
            r = walklab(tmp_path, "bus", "monitor", "--config", str(path), "--duration", "2")
        finally:
            stop.set()
            thread.join(timeout=10)
    assert r.returncode == 0, r.stderr
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()[2:]}
    assert "forceplate/FP1" in rows and int(rows["forceplate/FP1"][4]) > 0, r.stdout
