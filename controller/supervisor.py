"""The supervisor behind `walklab run`: start a lab's processes, restart crashed ones, stop them all.

Each enabled ``[[processes]]`` entry becomes a real subprocess
``python -m controller.proc --config FILE --name NAME ARGS...`` (which runs ``MODULE.run``) in its
own session (process group), so a Ctrl-C typed in the terminal reaches only the supervisor, which
then stops the children in order.
Children started through `controller.proc` also ask the kernel for SIGTERM when the supervisor
dies (``PR_SET_PDEATHSIG``), so even a SIGKILLed supervisor leaves no orphans behind.

Restart policy per process: ``always``, ``on-failure`` (non-zero exit status or killed by a
signal) or ``never``. The delay before restart ``k`` (k = 1, 2, ...) is

    delay_k = min(backoff_initial_s * 2**(k-1), backoff_max_s)

and ``k`` falls back to 1 when the process had run at least ``backoff_reset_s`` before crashing.
Every exit (``exit``, or ``crash`` for a non-zero status), restart and give-up is an event: a log
line and a frame on ``events/supervisor`` stamped (``t_host``) with the time the supervisor
detected the exit or started the restart, so a restart frame's stamp minus its crash frame's is the
delay actually waited (never less than the backoff delay).

Exit status 2 (`daq.context.CONFIG_ERROR`: a config, argument or import mistake) is never
restarted, whatever the policy: restarting cannot fix it. The process is marked ``failed``, and
the event ``failed`` carries the child's last stderr line (its one-line error), which the
supervisor also logs. The supervisor relays every child's stderr line by line to its own.

Liveness: every process publishes ``health/NAME`` once a second. The supervisor subscribes to
them; a process whose frames stop for its ``liveness_s`` (or that sends none within
``startup_s`` of its start) is wedged: event ``silent``, SIGTERM to its group, SIGKILL after
``stop_grace_s``, and its exit counts as a failure (restarted unless the policy is ``never``).
Frames are matched by the pid in their meta, so an old instance's frames never vouch for a new one.

Scheduling: a process with ``nice`` or ``realtime`` (``[[processes]]``) gets that niceness and/or
``SCHED_FIFO`` priority from the supervisor right after its spawn, on every thread of the child
(`set_priority`; at that moment only the interpreter's main thread exists, and every thread it
starts later, ZeroMQ's included, inherits the setting). Done here rather than in the child: the
supervisor is the one that must report a refusal on the bus, and ``preexec_fn`` is unsafe in a
process that has threads (the stderr relays). The child runs its first milliseconds of interpreter
start-up at normal priority, before any of its own code. When the kernel refuses (no
``CAP_SYS_NICE``: EPERM/EACCES), the process runs on at the priority it has, and the supervisor
logs a warning and publishes one ``priority`` event for that start: a lab never fails to start
for it.

Stopping (SIGINT, SIGTERM, SIGHUP or `Supervisor.stop`): SIGTERM to every child's process group,
up to ``stop_grace_s`` for them to exit, SIGKILL to those left, then reap them all.
"""
from __future__ import annotations

import gc
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Callable

from controller.config import Lab, Process
from controller.proc import SUPERVISOR_PID_ENV
from daq.context import CONFIG_ERROR

log = logging.getLogger("walklab.supervisor")

_LOG_PREFIX = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \S+ [A-Z]+ ")

#: ``sink(event, fields, at)``: ``at`` is the time of the event on the supervisor's clock [s].
EventSink = Callable[[str, dict[str, Any], float], None]


@dataclass
class Child:
    """Runtime state of one supervised process."""
    spec: Process
    popen: subprocess.Popen | None = None
    state: str = "pending"       # pending | running | silent | backoff | exited | failed | stopped
    started: float = 0.0         # time.monotonic() of the last start
    restarts: int = 0            # restarts done so far
    streak: int = 0              # consecutive quick crashes: sets the backoff exponent
    next_start: float = 0.0      # time.monotonic() of the scheduled restart (state backoff)
    last_status: int | None = None  # last exit status (negative: killed by that signal)
    heard: float | None = None   # time of the last health frame of this instance (None: none yet)
    kill_at: float = 0.0         # state silent: when SIGTERM turns into SIGKILL
    note: str = ""               # why the process failed, for the status line
    relay: threading.Thread | None = None  # copies the child's stderr, keeps its last line
    last_line: str = ""


def backoff_delay(k: int, initial_s: float, max_s: float) -> float:
    """Delay before the k-th consecutive restart: ``min(initial_s * 2**(k-1), max_s)`` [s]."""
    return min(initial_s * 2.0 ** max(k - 1, 0), max_s)


def _describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


class Supervisor:
    """Starts, watches and stops the processes of `lab`.

    `events` receives ``(event, fields, at)`` for every exit, crash, restart, give-up, failure and
    silence (the run command publishes them on the bus); `now` is the clock (``time.monotonic``),
    injectable for tests; `stderr` is where the children's stderr lines are relayed.
    """

    def __init__(self, lab: Lab, *, events: EventSink | None = None,
                 now: Callable[[], float] = time.monotonic, stderr: IO[str] | None = None) -> None:
        self.lab = lab
        self.children = [Child(p) for p in lab.processes if p.started_here]
        self._events = events or (lambda event, fields, at: None)
        self._now = now
        self._stderr = stderr or sys.stderr
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start every enabled process (non-blocking)."""
        for child in self.children:
            self._spawn(child)

    def heard(self, process: Any, pid: Any) -> None:
        """A health frame of `process` (name) from `pid` arrived now (its meta's fields, unchecked)."""
        for child in self.children:
            if child.spec.name == process and child.state == "running" and child.popen.pid == pid:
                child.heard = self._now()

    def poll(self) -> None:
        """Reap exited children, stop silent ones, apply restart policies and start the restarts
        that are due."""
        if self._stopped:
            return
        now = self._now()
        for child in self.children:
            if child.state in ("running", "silent") and child.popen.poll() is not None:
                self._on_exit(child, child.popen.returncode, now)
            elif child.state == "running" and self._silent_for(child, now) is not None:
                self._on_silence(child, now)
            elif child.state == "silent" and now >= child.kill_at:
                self._kill(child)
                child.kill_at = float("inf")
            if child.state == "backoff" and now >= child.next_start:
                child.restarts += 1
                self._spawn(child)
                self._event("restart", child, now, restarts=child.restarts, pid=child.popen.pid)

    def stop(self) -> None:
        """Stop every child: SIGTERM to its group, SIGKILL after the grace period; reap all."""
        if self._stopped:
            return
        self._stopped = True
        live = [c for c in self.children if c.state in ("running", "silent")]
        for c in live:
            _signal_group(c.popen.pid, signal.SIGTERM)
        t0 = time.monotonic()
        waiting = list(live)
        while waiting:
            now = time.monotonic()
            for c in [c for c in waiting if c.popen.poll() is not None or now - t0 >= self._grace(c)]:
                waiting.remove(c)
                if c.popen.poll() is None:
                    self._kill(c)
            if waiting:
                time.sleep(0.01)
        for c in live:
            c.popen.wait()
            c.last_status = c.popen.returncode
        for c in self.children:
            if c.relay is not None:
                c.relay.join(timeout=1.0)  # the last lines of a stopped child, before we return
            c.state = "stopped"

    @property
    def finished(self) -> bool:
        """True when no process runs or waits for a restart (all exited, failed or gave up)."""
        return all(c.state in ("exited", "failed") for c in self.children)

    # -- reporting -------------------------------------------------------------------------

    def status_line(self) -> str:
        """One compact line: every process with its state, pid and restart count."""
        now = self._now()
        parts = []
        for c in self.children:
            if c.state == "running":
                s = f"{c.spec.name} up {now - c.started:.0f}s pid {c.popen.pid}"
            elif c.state == "backoff":
                s = f"{c.spec.name} restarting in {max(c.next_start - now, 0):.1f}s"
            elif c.state == "silent":
                s = f"{c.spec.name} silent, stopping pid {c.popen.pid}"
            else:
                s = f"{c.spec.name} {c.state}" + (f" ({c.note})" if c.note else "")
            if c.restarts:
                s += f" ({c.restarts} restarts)"
            parts.append(s)
        return f"[{self.lab.lab.name}] " + " | ".join(parts)

    # -- internals -------------------------------------------------------------------------

    def command(self, spec: Process) -> list[str]:
        """The argv of process `spec` (see `controller.proc`)."""
        return [sys.executable, "-m", "controller.proc", "--config", str(self.lab.source.resolve()),
                "--name", spec.name, *spec.args]

    def _grace(self, child: Child) -> float:
        """Seconds from SIGTERM to SIGKILL for `child` (its own ``stop_grace_s``, else the supervisor's)."""
        own = child.spec.stop_grace_s
        return self.lab.supervisor.stop_grace_s if own is None else own

    def _kill(self, child: Child) -> None:
        log.warning("%s (pid %d) ignored SIGTERM for %.1f s: SIGKILL", child.spec.name, child.popen.pid,
                    self._grace(child))
        _signal_group(child.popen.pid, signal.SIGKILL)

    def _spawn(self, child: Child) -> None:
        env = dict(os.environ, **{SUPERVISOR_PID_ENV: str(os.getpid())})
        # start_new_session: own process group, so terminal Ctrl-C hits only the supervisor and
        # a stop can signal the child together with anything it spawned.
        child.popen = subprocess.Popen(self.command(child.spec), env=env, start_new_session=True,
                                       stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True)
        child.started = self._now()
        spec = child.spec
        if spec.nice is not None or spec.realtime:
            try:
                set_priority(child.popen.pid, spec.nice, spec.realtime)
            except ProcessLookupError:
                pass  # it exited already: poll() reports that
            except OSError as e:  # not permitted: run at normal priority, and say so
                self._event("priority", child, child.started, pid=child.popen.pid, nice=spec.nice,
                            realtime=spec.realtime, error=f"{e.strerror} (errno {e.errno})")
        child.state = "running"
        child.heard = None
        child.last_line = ""
        child.relay = threading.Thread(target=self._relay, args=(child, child.popen.stderr),
                                       name=f"stderr-{child.spec.name}", daemon=True)
        child.relay.start()
        log.info("started %s (pid %d): %s.run", child.spec.name, child.popen.pid, child.spec.module)

    def _relay(self, child: Child, pipe: IO[bytes]) -> None:
        """Copy the child's stderr to ours line by line, keeping the last non-empty line."""
        with pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace")
                if line.strip():
                    child.last_line = line.strip()
                try:
                    self._stderr.write(line)
                    self._stderr.flush()
                except (OSError, ValueError):  # our stderr is gone: keep draining the child's
                    pass

    def _silent_for(self, child: Child, now: float) -> float | None:
        """Seconds `child` has been silent past its limit, or None while it is alive (or unchecked)."""
        spec = child.spec
        if spec.liveness_s <= 0:
            return None
        if child.heard is None:
            return now - child.started if now - child.started > spec.startup_s else None
        return now - child.heard if now - child.heard > spec.liveness_s else None

    def _on_silence(self, child: Child, now: float) -> None:
        silent_s = self._silent_for(child, now)
        child.state = "silent"
        child.kill_at = now + self._grace(child)
        self._event("silent", child, now, pid=child.popen.pid, silent_s=round(silent_s, 3),
                    liveness_s=child.spec.liveness_s, first=child.heard is None)
        _signal_group(child.popen.pid, signal.SIGTERM)

    def _on_exit(self, child: Child, status: int, now: float) -> None:
        spec, sup = child.spec, self.lab.supervisor
        silenced = child.state == "silent"
        child.last_status = status
        ran = now - child.started
        # Reap anything the child left in its group (it was the group leader).
        _signal_group(child.popen.pid, signal.SIGKILL)
        if status == CONFIG_ERROR and not silenced:
            child.relay.join(timeout=2.0)  # its last line is its one-line error
            child.state = "failed"
            child.note = "config error"
            # the message without the child's log prefix (controller.proc.logging_setup's format)
            error = _LOG_PREFIX.sub("", child.last_line)
            self._event("failed", child, now, status=status, ran_s=round(ran, 3), error=error)
            return
        failed = status != 0 or silenced  # a wedged process that obeyed SIGTERM still failed
        wants = spec.restart == "always" or (spec.restart == "on-failure" and failed)
        if not wants:
            child.state = "exited" if status == 0 else "failed"
            self._event("exit", child, now, status=status, ran_s=round(ran, 3))
            return
        if spec.max_restarts and child.restarts >= spec.max_restarts:
            child.state = "failed"
            self._event("gave-up", child, now, status=status, restarts=child.restarts)
            return
        child.streak = 1 if ran >= sup.backoff_reset_s else child.streak + 1
        delay = backoff_delay(child.streak, sup.backoff_initial_s, sup.backoff_max_s)
        child.state = "backoff"
        child.next_start = now + delay
        self._event("crash" if failed else "exit", child, now, status=status, ran_s=round(ran, 3),
                    restart_in_s=delay)

    def _event(self, event: str, child: Child, at: float, **fields: Any) -> None:
        fields = {"process": child.spec.name, **fields}
        how = _describe_status(fields["status"]) if "status" in fields else ""
        if "restart_in_s" in fields:
            log.warning("%s %s after %.1f s; restart in %.1f s", child.spec.name, how, fields["ran_s"],
                        fields["restart_in_s"])
        elif event == "restart":
            log.warning("%s restarted (restart %d, pid %d)", child.spec.name, fields["restarts"], fields["pid"])
        elif event == "gave-up":
            log.error("%s %s; gave up after %d restarts (max_restarts)", child.spec.name, how,
                      fields["restarts"])
        elif event == "failed":
            log.error("%s %s (a config, argument or import error): failed, not restarted: %s",
                      child.spec.name, how, fields["error"] or "(no message)")
        elif event == "priority":
            wanted = " and ".join(([f"nice {fields['nice']}"] if fields["nice"] is not None else [])
                                  + ([f"SCHED_FIFO priority {fields['realtime']}"] if fields["realtime"] else []))
            log.warning("%s (pid %d): %s refused (%s; needs CAP_SYS_NICE or an rtprio/nice limit): "
                        "it runs at the priority it inherited",
                        child.spec.name, fields["pid"], wanted, fields["error"])
        elif event == "silent":
            what = "no health frame since its start" if fields["first"] else "its health frames stopped"
            log.warning("%s (pid %d) silent for %.1f s (%s; liveness_s %.1f): SIGTERM", child.spec.name,
                        fields["pid"], fields["silent_s"], what, fields["liveness_s"])
        else:
            log.info("%s %s; restart policy %r: not restarted", child.spec.name, how, child.spec.restart)
        self._events(event, fields, at)


def set_priority(pid: int, nice: int | None, realtime: int) -> None:
    """Give every thread of process `pid` niceness `nice` (None: unchanged) and, when `realtime` > 0,
    ``SCHED_FIFO`` priority `realtime` (1..99). Linux applies both per thread, and new threads
    inherit them from their creator. Raises PermissionError when the kernel refuses (no
    CAP_SYS_NICE and RLIMIT_RTPRIO/RLIMIT_NICE too low), ProcessLookupError when `pid` is gone."""
    # not SCHED_RESET_ON_FORK: Linux applies it to every new task, threads too, and the threads the
    # process starts later (ZeroMQ's I/O thread) must run at its priority; no walklab process forks
    policy = os.SCHED_FIFO
    done: set[int] = set()
    while True:  # until a pass finds no new thread: one started during the walk gets it too
        try:
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")} - done
        except FileNotFoundError:
            raise ProcessLookupError(f"no process {pid}") from None
        if not tids:
            return
        for tid in sorted(tids):
            try:
                if nice is not None:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                if realtime:
                    os.sched_setscheduler(tid, policy, os.sched_param(realtime))
            except ProcessLookupError:
                pass  # that thread ended meanwhile; the process's absence shows at the next listing
        done |= tids


def _signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to process group `pgid` (a child started with start_new_session); gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_lab(lab: Lab, *, out: Any = None) -> int:
    """`walklab run`: supervise `lab` until SIGINT/SIGTERM/SIGHUP; returns the exit status.

    0 after a stop signal; when every process has exited or been given up on, the supervisor
    stops by itself with status 0 if they all exited with status 0, else 1.

    Publishes ``events/supervisor`` (kind ``"event"``, no samples; ``meta`` holds the event name
    and its fields) and ``health/supervisor`` on ``[supervisor] bind``; prints `status_line`
    every ``status_interval_s`` on `out` (stdout); subscribes to the processes' ``health/*``
    for the liveness check.
    """
    import numpy as np
    import zmq

    from controller.proc import logging_setup, publisher_for, subscriber_for
    from daq.health import HEALTH_KIND, Health

    out = out or sys.stdout
    logging_setup("supervisor")
    stop = {"signal": None}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = signum

    pub = publisher_for(lab, lab.supervisor.bind)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    health = Health("supervisor", pub)

    def publish_event(event: str, fields: dict[str, Any], at: float | None = None) -> None:
        health.count(f"events/{event}")
        # `at` is on the supervisor's clock, time.monotonic: the same clock as t_host, in seconds
        t_host = None if at is None else round(at * 1e9)
        pub.publish("events/supervisor", np.zeros((1, 0)), kind="event", rate_hz=0.0, channels=(),
                    units=(), t_host=t_host, meta={"event": event, **fields})

    sup = Supervisor(lab, events=publish_event)
    interval = lab.supervisor.status_interval_s
    # Restarted publishers and late joins are normal on this subscription: no log line for them.
    logging.getLogger("walklab.bus").setLevel(logging.ERROR)
    health_sub = subscriber_for(lab, [p.endpoint for p in lab.processes if p.enabled], ["health/*"])
    try:
        log.info("lab %r: supervisor on %s; watch the streams with `walklab bus monitor --config %s`",
                 lab.lab.name, lab.supervisor.bind, lab.source)
        sup.start()
        gc.freeze()  # start-up objects live until the end: out of the collector's scans (ecosystem.md 9)
        next_status = time.monotonic() + min(interval, 2.0)  # a first line soon after start
        while stop["signal"] is None:
            # Every health frame that arrived, before judging silence: a stalled supervisor must
            # not take its own delay for its children's.
            while (f := health_sub.recv(timeout_s=0)) is not None:
                if f.kind == HEALTH_KIND and isinstance(f.meta, dict):
                    sup.heard(f.meta.get("process"), f.meta.get("pid"))
            sup.poll()
            if sup.finished:
                log.warning("no process left to run (all exited or gave up): stopping")
                break
            health.tick()
            pub.poll_subscriptions()
            if interval > 0 and time.monotonic() >= next_status:
                next_status = time.monotonic() + interval
                print(sup.status_line(), file=out, flush=True)
            time.sleep(0.02)
        else:
            log.info("%s: stopping %d process(es)", signal.Signals(stop["signal"]).name, len(sup.children))
    finally:
        sup.stop()
        health.state = "stopped"
        try:
            publish_event("stopped", {"process": "supervisor"})
            health.publish()
        finally:
            health_sub.close()
            pub.close()
            zmq.Context.instance().term()
            for s, handler in previous.items():
                signal.signal(s, handler)
    log.info("all processes stopped")
    return 1 if any(c.last_status for c in sup.children) and stop["signal"] is None else 0
