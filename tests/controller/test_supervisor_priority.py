"""`[[processes]]` ``nice`` and ``realtime``: `walklab run` (a real subprocess) gives its children the
niceness and SCHED_FIFO priority of their config entries, as the kernel itself reports them
(``os.sched_getscheduler``, ``os.sched_getparam``, ``os.getpriority`` on every thread of the child);
and a supervisor without CAP_SYS_NICE (dropped by ``setpriv``) still runs the lab, with a
``priority`` event on ``events/supervisor`` saying the setting was refused."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daq.bus import Subscriber

from .test_supervisor import REPO, health_pids, lab_of, start, stop

IDLE = '''
import os
import time

def run(ctx, args):
    """With args [GO]: exit with status 3 once the file GO exists, the first time only (GO.crashed marks it).
    Otherwise (and after that crash) idle until stopped."""
    while not ctx.stopping:
        if args and os.path.exists(args[0]) and not os.path.exists(args[0] + ".crashed"):
            open(args[0] + ".crashed", "w").close()
            return 3
        if not ctx.sleep_until(time.monotonic_ns() + 10_000_000):
            break
    return 0
'''

NO_SYS_NICE = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"]


def threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def permitted() -> bool:
    """True when this user may set SCHED_FIFO (probed in a throwaway process, not this one)."""
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.mark.skipif(not permitted(), reason="this user may not set SCHED_FIFO (no CAP_SYS_NICE): see the refused test")
def test_children_get_their_realtime_priority_and_niceness(tmp_path):
    (tmp_path / "idle.py").write_text(IDLE)
    config, ports = lab_of(tmp_path, "prio", [("rt", "idle", "realtime = 10"), ("nicer", "idle", "nice = 5"),
                                              ("plain", "idle", "")])
    proc = start(config, tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{p}" for p in ports[1:]], ["health/*"]) as sub:
            pids = health_pids(sub, {"rt", "nicer", "plain"}, 60.0)
        # every thread, the ZeroMQ I/O threads and the health thread included: they inherit it
        rt, nicer, plain = threads(pids["rt"]), threads(pids["nicer"]), threads(pids["plain"])
        assert len(rt) > 1 and len(nicer) > 1  # the runtime's own threads were started after the setting
        assert [os.sched_getscheduler(t) for t in rt] == [os.SCHED_FIFO] * len(rt)
        assert [os.sched_getparam(t).sched_priority for t in rt] == [10] * len(rt)
        assert [os.sched_getscheduler(t) for t in nicer] == [os.SCHED_OTHER] * len(nicer)
        assert [os.getpriority(os.PRIO_PROCESS, t) for t in nicer] == [5] * len(nicer)
        # a process without the keys keeps the supervisor's (inherited) scheduling
        supervisor_nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        assert [os.sched_getscheduler(t) for t in plain] == [os.SCHED_OTHER] * len(plain)
        assert [os.getpriority(os.PRIO_PROCESS, t) for t in plain] == [supervisor_nice] * len(plain)
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err
    assert "refused" not in err


def refusing() -> list[str]:
    """The command prefix under which the supervisor is refused SCHED_FIFO: `setpriv` dropping
    CAP_SYS_NICE as root, nothing for a user who has neither the capability nor an RLIMIT_RTPRIO."""
    if os.geteuid() != 0 and not permitted():
        return []
    if os.geteuid() != 0:
        pytest.skip("this user is granted SCHED_FIFO by RLIMIT_RTPRIO, and only root can drop that with setpriv")
    if shutil.which("setpriv") is None:
        pytest.skip("needs util-linux setpriv to drop CAP_SYS_NICE as root")
    return NO_SYS_NICE


def test_refused_priority_runs_the_lab_and_says_so(tmp_path):
    (tmp_path / "idle.py").write_text(IDLE)
    go = tmp_path / "go"
    config, ports = lab_of(tmp_path, "refused", [("rt", "idle", f'realtime = 10\nnice = -5\nargs = ["{go}"]')],
                           supervisor="backoff_initial_s = 0.2")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    with Subscriber([f"tcp://127.0.0.1:{ports[0]}"], ["events/supervisor"]) as sub:
        proc = subprocess.Popen([*refusing(), sys.executable, "-m", "controller.cli", "run", str(config)], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        events = []
        try:
            # The first start's event may precede our subscription: the crash (after `go`) and
            # restart give a second start, and its event, once the subscription is confirmed.
            assert sub.wait_connected(timeout_s=60.0), "the supervisor never answered (hang guard)"
            go.touch()
            deadline = time.monotonic() + 60.0  # a hang guard: the loop ends at the restart
            while time.monotonic() < deadline and not any(e["event"] == "restart" for e in events):
                f = sub.recv(timeout_s=0.2)
                if f is not None:
                    events.append(f.meta)
            with Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["health/*"]) as hsub:
                pid = health_pids(hsub, {"rt"}, 60.0)["rt"]  # the restarted process runs
            assert os.sched_getscheduler(pid) == os.SCHED_OTHER
            assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, proc.pid)
        finally:
            out, err = stop(proc)
    assert proc.returncode == 0, err
    names = [e["event"] for e in events]
    assert names[-2:] == ["priority", "restart"], events  # the restart's own refusal, announced before it
    refused = events[-2]
    assert refused["process"] == "rt" and refused["pid"] == events[-1]["pid"] == pid
    assert refused["realtime"] == 10 and refused["nice"] == -5
    assert "rt (pid" in err and "refused" in err  # and the warning in the supervisor's log


@pytest.mark.parametrize("line, message", [
    ("realtime = 100", r"processes\[0\]\.realtime = 100: expected a value <= 99$"),
    ("realtime = -1", r"processes\[0\]\.realtime = -1: expected a value >= 0$"),
    ("nice = 20", r"processes\[0\]\.nice = 20: expected a value <= 19$"),
    ("nice = -21", r"processes\[0\]\.nice = -21: expected a value >= -20$"),
    ('realtime = "high"', r"processes\[0\]\.realtime = \"high\": expected an integer"),
])
def test_out_of_range_priority_is_a_one_line_config_error(tmp_path, line, message):
    from controller.config import ConfigError, load

    config, _ = lab_of(tmp_path, "bad", [("rt", "idle", line)])
    with pytest.raises(ConfigError, match=message) as e:
        load(config)
    assert "\n" not in str(e.value)
