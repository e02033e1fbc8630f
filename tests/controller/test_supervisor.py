"""`walklab run` as a real subprocess: restarts with exponential backoff recorded as events on the
bus, clean stop on SIGTERM/SIGINT (every spawned pid gone, every port free), no orphans when the
supervisor itself is SIGKILLed, and `walklab bus monitor` seeing the simulated force plates."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from controller.supervisor import backoff_delay
from daq.bus import Subscriber
from daq.ports import free_tcp_ports

REPO = Path(__file__).resolve().parents[2]

CRASHER = '''
import os
import time

def run(ctx, args):
    """Wait for the file args[1] to exist (if given), publish for args[0] s, then fail with status 3."""
    while len(args) > 1 and not os.path.exists(args[1]):
        if not ctx.sleep_until(time.monotonic_ns() + 10_000_000):
            return 0
    end = time.monotonic_ns() + int(float(args[0]) * 1e9)
    ctx.sleep_until(end)
    return 3
'''


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (/proc, no psutil)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def port_free(port: int) -> bool:
    """True when nothing listens on `port` (SO_REUSEADDR: TIME_WAIT leftovers do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def sim_lab(tmp_path: Path, ports: list[int], extra: str = "") -> Path:
    text = textwrap.dedent(f"""
        [lab]
        name = "test"
        [supervisor]
        bind = "tcp://127.0.0.1:{ports[0]}"
        status_interval_s = 0.5
        stop_grace_s = 5.0  # generous: the tests check the children exit on SIGTERM, not how fast
        backoff_initial_s = 0.2
        backoff_max_s = 0.8
        backoff_reset_s = 600.0  # no crasher runs that long, however loaded the machine: the streak grows
        [[processes]]
        name = "forceplates"
        module = "daq.simulated"
        bind = "tcp://127.0.0.1:{ports[1]}"
        devices = ["FP1", "FP2"]
        [[processes]]
        name = "healthmon"
        module = "controller.healthmon"
        bind = "tcp://127.0.0.1:{ports[2]}"
        args = ["--interval", "0.5"]
        [devices.FP1]
        kind = "forceplate"
        corners = [[0.6, 0.4, 0.0], [0.0, 0.4, 0.0], [0.0, 0.8, 0.0], [0.6, 0.8, 0.0]]
        origin = [0.0, 0.0, -0.04]
        [devices.FP2]
        kind = "forceplate"
        corners = [[0.6, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.4, 0.0], [0.6, 0.4, 0.0]]
        origin = [0.0, 0.0, -0.04]
    """) + textwrap.dedent(extra)
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def lab_of(tmp_path: Path, name: str, processes: list[tuple[str, str, str]],
           supervisor: str = "") -> tuple[Path, list[int]]:
    """A lab config NAME with `processes` as (name, module, extra TOML lines) and extra
    `supervisor` lines; returns its path and ports (the supervisor's, then one per process)."""
    ports = free_tcp_ports(1 + len(processes))
    text = f'[lab]\nname = "{name}"\n[supervisor]\nbind = "tcp://127.0.0.1:{ports[0]}"\n'
    text += textwrap.dedent(supervisor).strip() + "\n"
    for port, (proc_name, module, extra) in zip(ports[1:], processes):
        text += (f'[[processes]]\nname = "{proc_name}"\nmodule = "{module}"\nbind = "tcp://127.0.0.1:{port}"\n'
                 + textwrap.dedent(extra).strip() + "\n")
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path, ports


def start(config: Path, tmp_path: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    return subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def health_pids(sub: Subscriber, names: set[str], timeout_s: float) -> dict[str, int]:
    """Pid of each process in `names`, read from its health frame's meta."""
    pids: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    while set(pids) != names and time.monotonic() < deadline:
        f = sub.recv(timeout_s=0.2)
        if f is not None and f.kind == "health" and f.meta["process"] in names:
            pids[f.meta["process"]] = f.meta["pid"]
    assert set(pids) == names, f"health seen only from {sorted(pids)}"
    return pids


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)  # a hang guard: the stop is bounded by stop_grace_s
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"walklab run did not stop on {signal.Signals(sig).name}:\n{err}")
    return out, err


def test_backoff_formula():
    assert [backoff_delay(k, 0.5, 3.0) for k in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_crashing_child_restarts_with_backoff_and_events(tmp_path):
    (tmp_path / "crasher.py").write_text(CRASHER)
    go = tmp_path / "go"
    ports = free_tcp_ports(4)
    config = sim_lab(tmp_path, ports, f"""
        [[processes]]
        name = "crasher"
        module = "crasher"
        bind = "tcp://127.0.0.1:{ports[3]}"
        args = ["0.1", "{go}"]
        restart = "on-failure"
    """)
    with Subscriber([f"tcp://127.0.0.1:{ports[0]}"], ["events/supervisor"]) as sub:
        proc = start(config, tmp_path)
        events = []
        try:
            # The first crash waits for our subscription to reach the supervisor (its welcome),
            # however slowly a loaded machine starts the processes: no event can be lost to a slow join.
            assert sub.wait_connected(timeout_s=60.0), "the supervisor never answered (hang guard)"
            go.touch()
            deadline = time.monotonic() + 60.0  # a hang guard: the loop ends at the 3rd restart
            while time.monotonic() < deadline and sum(e.meta["event"] == "restart" for e in events) < 3:
                f = sub.recv(timeout_s=0.2)
                if f is not None:
                    events.append(f)
        finally:
            out, err = stop(proc)
        stats = sub.stats()["events/supervisor"]
    assert proc.returncode == 0, err
    assert stats.gaps == 0 and stats.missed_at_join == 0  # every event since start was received
    crashes = [e for e in events if e.meta["event"] == "crash"]
    restarts = [e for e in events if e.meta["event"] == "restart"]
    assert len(restarts) >= 3, [e.meta for e in events]
    assert all(e.meta["process"] == "crasher" for e in crashes + restarts)
    assert all(e.meta["status"] == 3 for e in crashes)
    # Exponential backoff: 0.2, 0.4, 0.8, then capped at backoff_max_s = 0.8.
    expected = [min(0.2 * 2 ** k, 0.8) for k in range(len(crashes))]
    assert [e.meta["restart_in_s"] for e in crashes] == pytest.approx(expected)
    for crash, restart in zip(crashes, restarts):
        # Stamps are the supervisor's detection and restart times: the restart never comes before
        # its delay (1 us: the float seconds of time.monotonic rounded to ns).
        assert restart.t_host - crash.t_host >= crash.meta["restart_in_s"] * 1e9 - 1000
    assert [e.meta["restarts"] for e in restarts] == list(range(1, len(restarts) + 1))
    # A restart is a new process; every one of them is gone after the stop.
    pids = [e.meta["pid"] for e in restarts]
    assert len(set(pids)) == len(pids)
    assert not [p for p in pids if alive(p)]
    assert "crasher exit status 3" in err and "restarted (restart 1" in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_leaves_no_process_and_no_socket(tmp_path, sig):
    ports = free_tcp_ports(3)
    proc = start(sim_lab(tmp_path, ports), tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{p}" for p in ports], ["health/*"]) as sub:
            pids = health_pids(sub, {"forceplates", "healthmon", "supervisor"}, timeout_s=60)
    finally:
        out, err = stop(proc, sig)
    assert proc.returncode == 0, err
    assert pids["supervisor"] == proc.pid
    children = [pids["forceplates"], pids["healthmon"]]
    assert not [p for p in children if alive(p)], err
    assert all(port_free(p) for p in ports)
    assert "Traceback" not in err and "SIGKILL" not in err, err  # all stopped on SIGTERM
    # the periodic status line: due 0.5 s after start, printed at the latest in the loop iteration
    # that published the supervisor's first health frame (1 s after start), which we received
    assert "[test] forceplates up" in out


def test_children_die_with_a_killed_supervisor(tmp_path):
    ports = free_tcp_ports(3)
    proc = start(sim_lab(tmp_path, ports), tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{p}" for p in ports[1:]], ["health/*"]) as sub:
            pids = health_pids(sub, {"forceplates", "healthmon"}, timeout_s=60)
    finally:
        proc.kill()  # SIGKILL: the supervisor cannot clean up, the kernel's PDEATHSIG must
        proc.communicate()
    deadline = time.monotonic() + 60  # a hang guard: the loop ends as soon as they are gone
    while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids.values() if alive(p)]


def test_bus_monitor_shows_force_plate_streams_without_gaps(tmp_path):
    ports = free_tcp_ports(3)
    config = sim_lab(tmp_path, ports)
    proc = start(config, tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["forceplate/FP1"]) as sub:
            frames = [sub.recv(timeout_s=20) for _ in range(50)]
            fp1 = sub.stats()["forceplate/FP1"]
        assert None not in frames and fp1.gaps == 0
        # 1 kHz in 5-sample blocks of Fx..Mz; sample times from sample counts: 5 ms per frame.
        assert all(f.data.shape == (5, 6) and f.rate_hz == 1000.0 for f in frames)
        assert frames[0].channels == ("Fx", "Fy", "Fz", "Mx", "My", "Mz")
        assert frames[0].units == ("N", "N", "N", "N*m", "N*m", "N*m")
        assert [b.seq - a.seq for a, b in zip(frames, frames[1:])] == [1] * 49
        assert {b.t_device - a.t_device for a, b in zip(frames, frames[1:])} == {5_000_000}
        mon = subprocess.run([sys.executable, "-m", "controller.cli", "bus", "monitor", "--config", str(config),
                              "--duration", "2"], capture_output=True, text=True, cwd=REPO, timeout=60)
    finally:
        stop(proc)
    assert mon.returncode == 0, mon.stderr
    lines = mon.stdout.splitlines()
    header = lines[1].split()
    rows = {ln.split()[0]: dict(zip(header, ln.split())) for ln in lines[2:]}
    for stream in ("forceplate/FP1", "forceplate/FP2"):
        row = rows[stream]
        assert row["KIND"] == "force"
        assert float(row["RATE_HZ"]) > 0 and int(row["RECEIVED"]) > 0
        assert row["GAPS"] == "0" and row["DROPPED"] == "0" and row["BAD"] == "0"
    assert {"health/forceplates", "health/healthmon", "health/supervisor"} <= set(rows)


def test_bus_monitor_with_nothing_running_is_one_line_error(tmp_path):
    (port,) = free_tcp_ports(1)
    r = subprocess.run([sys.executable, "-m", "controller.cli", "bus", "monitor", "--connect",
                        f"tcp://127.0.0.1:{port}", "--duration", "0.5"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        r.stderr.strip()] and "no frames received from" in r.stderr and "Traceback" not in r.stderr


def test_curve_secured_lab_serves_key_holders_only(tmp_path):
    """A lab binding every interface needs [bus.curve]: its processes and a monitor with the
    client key see the streams; a subscriber without keys, or with an unauthorized key, gets nothing."""
    from controller import cli
    from daq.health import parse_health
    from daq.security import CurveClient

    keys = tmp_path / "keys"
    for name in ("server", "client", "stranger"):
        assert cli.main(["keys", "--dir", str(keys), name]) == 0
    (keys / "authorized").mkdir()
    (keys / "client.key").rename(keys / "authorized" / "client.key")
    ports = free_tcp_ports(3)
    config = sim_lab(tmp_path, ports, """
        [bus.curve]
        server_key = "keys/server.key_secret"
        server_public = "keys/server.key"
        client_key = "keys/client.key_secret"
        authorized_keys = "keys/authorized"
    """)
    text = config.read_text().replace(f'bind = "tcp://127.0.0.1:{ports[1]}"',
                                      f'bind = "tcp://*:{ports[1]}"\nconnect = "tcp://127.0.0.1:{ports[1]}"')
    config.write_text(text)
    fp = f"tcp://127.0.0.1:{ports[1]}"
    proc = start(config, tmp_path)
    try:
        # The health monitor (a key holder) has heard the plates once its own health says so; its
        # summary line follows within 0.5 s, long before the monitor run below ends.
        member = CurveClient.from_files(keys / "server.key", keys / "client.key_secret")
        with Subscriber([f"tcp://127.0.0.1:{ports[2]}"], ["health/healthmon"], curve=member) as sub:
            deadline = time.monotonic() + 60.0  # a hang guard
            heard = False
            while not heard and time.monotonic() < deadline:
                f = sub.recv(timeout_s=0.2)
                heard = f is not None and parse_health(f).get("health/forceplates", {}).get("received", 0) > 0
            assert heard, "the health monitor never received the plates' health"
        stranger = CurveClient.from_files(keys / "server.key", keys / "stranger.key_secret")
        with Subscriber([fp], ["forceplate/*"]) as plain, \
                Subscriber([fp], ["forceplate/*"], curve=stranger) as unauthorized:
            mon = subprocess.run([sys.executable, "-m", "controller.cli", "bus", "monitor", "--config",
                                  str(config), "--stream", "forceplate/*", "--duration", "2.5"],
                                 capture_output=True, text=True, cwd=REPO, timeout=60)
            assert plain.recv(timeout_s=0.5) is None and unauthorized.recv(timeout_s=0.5) is None
    finally:
        out, err = stop(proc)
    assert mon.returncode == 0, mon.stderr
    rows = {ln.split()[0]: ln.split() for ln in mon.stdout.splitlines()[2:]}
    assert set(rows) == {"forceplate/FP1", "forceplate/FP2"}
    assert all(int(r[4]) > 0 and r[5] == "0" for r in rows.values())  # RECEIVED > 0, GAPS 0
    assert "health: forceplates running" in out  # the health monitor, a key holder, heard the plates


def test_gives_up_after_max_restarts_then_stops_by_itself(tmp_path):
    (tmp_path / "crasher.py").write_text(CRASHER)
    config, _ = lab_of(tmp_path, "giveup", [("crasher", "crasher", 'args = ["0.1"]\nmax_restarts = 2'),
                                            ("oneshot", "crasher", 'args = ["0.1"]\nrestart = "never"')],
                       supervisor="backoff_initial_s = 0.1")
    proc = start(config, tmp_path)
    try:
        out, err = proc.communicate(timeout=120)  # a hang guard: 4 process starts, however loaded
    finally:
        proc.kill()
    assert proc.returncode == 1, err  # nothing left to run, and not all exited with status 0
    assert err.count("crasher restarted") == 2
    assert "crasher exit status 3; gave up after 2 restarts" in err
    assert "oneshot exit status 3; restart policy 'never': not restarted" in err
    assert "no process left to run" in err


STUBBORN = '''
import signal
import time

def run(ctx, args):
    """Ignore SIGTERM and never return: only SIGKILL ends this one."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        ctx.health.tick()
        time.sleep(0.02)
'''


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    config, ports = lab_of(tmp_path, "stubborn", [("stubborn", "stubborn", "")], supervisor="stop_grace_s = 0.5")
    proc = start(config, tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{ports[1]}"], ["health/*"]) as sub:
            pid = health_pids(sub, {"stubborn"}, timeout_s=60)["stubborn"]
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0
    assert "stubborn (pid %d) ignored SIGTERM for 0.5 s: SIGKILL" % pid in err
    assert not alive(pid) and all(port_free(p) for p in ports)


SLOW_TO_STOP = '''
import sys
import time
from pathlib import Path

def run(ctx, args):
    """Take 1 s to stop after SIGTERM (a recorder writing its backlog), then leave a mark."""
    while not ctx.stopping:
        ctx.tick()
        time.sleep(0.02)
    time.sleep(1.0)
    Path(args[0]).write_text("stopped cleanly")
    return 0
'''


def test_a_process_own_grace_period_outlasts_the_supervisors(tmp_path):
    """``processes[].stop_grace_s`` = 30 beside ``supervisor.stop_grace_s`` = 0.2: the slow process
    finishes its 1 s stop (its mark is written, no SIGKILL) while the stubborn one is killed."""
    (tmp_path / "slow.py").write_text(SLOW_TO_STOP)
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    mark = tmp_path / "mark"
    config, ports = lab_of(tmp_path, "grace", [("slow", "slow", f'args = ["{mark}"]\nstop_grace_s = 30'),
                                              ("stubborn", "stubborn", "")], supervisor="stop_grace_s = 0.2")
    proc = start(config, tmp_path)
    try:
        with Subscriber([f"tcp://127.0.0.1:{p}" for p in ports[1:]], ["health/*"]) as sub:
            pids = health_pids(sub, {"slow", "stubborn"}, timeout_s=60)
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err
    assert mark.read_text() == "stopped cleanly"
    assert "ignored SIGTERM for 30" not in err and "stubborn (pid %d) ignored SIGTERM for 0.2 s: SIGKILL" % pids["stubborn"] in err
    assert not any(alive(p) for p in pids.values()) and all(port_free(p) for p in ports)


FROZEN = '''
import gc

def run(ctx, args):
    """Exit status 0 if the runtime froze its start-up objects out of the collector's reach, else 7."""
    return 0 if gc.get_freeze_count() > 0 else 7
'''


def test_a_process_runs_with_its_start_up_objects_frozen(tmp_path):
    """ecosystem.md 9: gc.freeze() after start-up, so collections in the loop skip what start-up built."""
    (tmp_path / "frozen.py").write_text(FROZEN)
    config, _ = lab_of(tmp_path, "frozen", [("frozen", "frozen", "")])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    r = subprocess.run([sys.executable, "-m", "controller.proc", "--config", str(config), "--name", "frozen"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


MUTE = '''
import time

def run(ctx, args):
    """Never publishes a health frame nor checks its stop flag (only SIGKILL ends it)."""
    while True:
        time.sleep(0.01)
'''


def test_only_the_running_instance_s_health_vouches_for_it(tmp_path, monkeypatch):
    """Liveness on the supervisor's clock (injected): a frame of another pid (an old instance's,
    still queued) never counts; the running pid's frame restarts the liveness_s countdown."""
    from controller.config import load
    from controller.supervisor import Supervisor

    (tmp_path / "mute.py").write_text(MUTE)
    config, _ = lab_of(tmp_path, "pids", [("mute", "mute", "liveness_s = 2.0\nstartup_s = 5.0")],
                       supervisor="stop_grace_s = 0.2")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO)]))
    clock = [100.0]
    events: list[tuple[str, dict]] = []
    sup = Supervisor(load(config), events=lambda e, f, at: events.append((e, f)), now=lambda: clock[0])
    sup.start()
    try:
        (child,) = sup.children
        pid = child.popen.pid
        clock[0] = 104.0
        sup.heard("mute", pid + 1)      # not this instance
        sup.heard("other", pid)         # not this process
        sup.poll()
        assert not events              # within startup_s
        clock[0] = 105.5
        sup.poll()
        assert [e for e, _ in events] == ["silent"] and events[0][1]["first"] and events[0][1]["pid"] == pid
        assert events[0][1]["silent_s"] == 5.5
    finally:
        sup.stop()
    events.clear()
    sup = Supervisor(load(config), events=lambda e, f, at: events.append((e, f)), now=lambda: clock[0])
    sup.start()
    try:
        (child,) = sup.children
        clock[0] = 109.0
        sup.heard("mute", child.popen.pid)  # heard at 109: silent only after 111
        clock[0] = 110.5
        sup.heard("mute", child.popen.pid + 1)
        sup.poll()
        clock[0] = 110.9
        sup.poll()
        assert not events
        clock[0] = 111.1
        sup.poll()
        assert [e for e, _ in events] == ["silent"] and not events[0][1]["first"]
        assert events[0][1]["silent_s"] == pytest.approx(2.1)
        assert sup.status_line().endswith(f"mute silent, stopping pid {child.popen.pid}")
    finally:
        sup.stop()
