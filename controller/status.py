"""`walklab run` with a live status: the lab under its supervisor, a command script, a terminal status and a summary.

`run_live` (what `walklab run` does with ``--duration``, ``--script`` or the default lab):

1. the lab's control loops get their synergy library (built once, with a progress bar, when missing);
2. the recorder (``--record FILE``, `controller.commands.record.start_beside`) and the supervisor
   (``walklab run CONFIG --supervise-only`` in a subprocess: `controller.supervisor.run_lab`, never this
   runner again), its output and the processes' logs in a log file beside the
   recording, or in the temporary folder) start;
3. once every process reports a health frame (start-up excluded from ``--duration``), the script's
   operator commands (`load_script`, TOML ``[[command]]`` tables ``at``/``speed``/``turn``/``label``)
   are sent on ``controller/request`` to the control loop, each at its time, as `walklab command` sends
   one (`controller.commands.estop.send_to_loop`: the operator endpoint bound only while the command is
   delivered and confirmed, so `walklab estop` and `walklab command` reach the loop between them);
4. the status (`Monitor`, from health frames, ``sim/walker`` or ``sim/exo``, ``dynamics/torques`` and ``/energy``, ``controller/events`` and the
   supervisor's events; a `rich` table refreshed 4 times a second on a terminal) shows the streams
   (frames/s as published, frames lost on the way as their subscribers count them: `lost_frames`), the
   dynamics' latency p50/p99 (each ``dynamics/torques`` frame's ``meta["latency_s"]``: host time of its
   publication minus the receipt of the newest input sample it used; the live figures over the latest
   `RECENT_FRAMES`, the summary's over the whole run from the moment the lab was up), the distance walked, the energy per crank cycle (the last revolution's net and absolute work of
   each shaft, from the dynamics service's ``dynamics/energy``), the safety state;
5. after ``--duration`` seconds (or Ctrl-C) the supervisor and the recorder stop cleanly (SIGINT) and
   the summary is printed: what the status showed over the whole run, the recording's and the log's paths.

Units: SI (s, m, J); stream rates in frames per second.
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Command:
    """One scripted operator command: at (s after the lab is up), speed (m/s, >= 0), turn (rad/s), label."""

    at: float
    speed: float
    turn: float = 0.0
    label: str = ""


def load_script(path: str | Path) -> list[Command]:
    """The commands of a script file (module doc), sorted by time; ValueError/OSError with one line."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"--script {p}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--script {p}: not TOML ({exc})") from None
    rows = data.get("command")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"--script {p}: expected [[command]] tables with at, speed (and turn, label)")
    out = []
    for k, r in enumerate(rows):
        unknown = set(r) - {"at", "speed", "turn", "label"}
        if unknown:
            raise ValueError(f"--script {p}: command[{k}]: unknown key(s) {sorted(unknown)}")
        try:
            c = Command(float(r["at"]), float(r["speed"]), float(r.get("turn", 0.0)), str(r.get("label", "")))
        except KeyError as exc:
            raise ValueError(f"--script {p}: command[{k}]: missing {exc.args[0]!r}") from None
        except (TypeError, ValueError):
            raise ValueError(f"--script {p}: command[{k}]: at, speed and turn must be numbers") from None
        if not (math.isfinite(c.at) and c.at >= 0 and math.isfinite(c.speed) and c.speed >= 0
                and math.isfinite(c.turn)):
            raise ValueError(f"--script {p}: command[{k}]: expected at >= 0 s, speed >= 0 m/s, a finite turn")
        out.append(c)
    return sorted(out, key=lambda c: c.at)


# ------------------------------------------------------------------------------------ the monitor

#: Control-loop event causes that are not safety events: operator requests, data fresh again, a latch reset
#: (by the operator, or the loop's RESET of a tripped MCU: the trip itself is counted), the MCU's link back,
#: frames lost or rejected on it (the stale rule is what stops the motors when they matter).
NOT_SAFETY = ("request", "fresh", "reset", "mcu_reset", "link_back", "link_errors")


def lost_frames(health: dict[str, dict[str, dict[str, float]]]) -> dict[str, tuple[int, str]]:
    """Per stream, the frames published and never received: the largest ``dropped`` count any process's
    subscriber reports for it (`daq.bus.StreamStats`: frames inside seq gaps, and frames a restarted
    publisher sent before the subscriber was connected to it again), with that process's name.

    `health`: ``{process: parse_health(its latest health frame)}``. Frames only: a stream's
    ``lost_samples`` (samples missing from its sample times, which across a publisher's restart include
    the whole time it was down, at its rate) are not frames lost on the way, and are not added —
    adding them made a quiet run show ~30–140 "dropped" for one restarted process's 1 Hz health stream."""
    out: dict[str, tuple[int, str]] = {}
    for process, subjects in health.items():
        for stream, fields in subjects.items():
            n = int(fields.get("dropped", 0.0)) if "gaps" in fields else 0
            if n > out.get(stream, (0, ""))[0]:
                out[stream] = (n, process)
    return out


def _lost(figure: tuple[int, str] | None) -> str:
    """A stream's `lost_frames` figure: "0", or "N (by PROCESS)"."""
    return f"{figure[0]} (by {figure[1]})" if figure else "0"


#: events/supervisor events the run lists (controller.supervisor's names: a process that ended, was
#: restarted, fell silent, was given up on or refused its scheduling priority)
SUPERVISOR_EVENTS = ("exit", "crash", "failed", "restart", "silent", "gave-up", "priority")
#: the live status's latency figures are over this many of the latest dynamics/torques frames
RECENT_FRAMES = 1000
#: the simulated worlds' truth streams whose ``x`` channel (m) is the distance walked: the Jansen walker's
#: chassis (with its shafts ``s_L``, ``s_R``), the exoskeleton wearer's pelvis
WORLD_TRUTH = ("sim/walker", "sim/exo")


def _num(x: float, digits: int) -> str:
    return "—" if not math.isfinite(x) else f"{x:.{digits}f}"


@dataclass
class _Walker:
    """What a simulated world's truth frames told (`WORLD_TRUTH`): first and last x of the walker's chassis
    or the wearer's pelvis (m); the walker's shaft angles (rad; None for a world without shafts)."""

    x0: float = math.nan
    x: float = math.nan
    s0: np.ndarray | None = None
    s: np.ndarray | None = None
    advance: float = math.nan


class Monitor:
    """The lab as the status sees it (module doc, step 4); `poll` it often, `table` and `summary` read it."""

    def __init__(self, lab: Any) -> None:
        from controller.proc import subscriber_for

        self.lab = lab
        eps = [lab.supervisor.bind] + [p.endpoint for p in lab.processes if p.enabled]
        self.sub = subscriber_for(lab, eps, ["health/*", "sim/*", "controller/events", "events/*", "dynamics/energy",
                                             "dynamics/torques"], expect=())
        self.processes = [p.name for p in lab.processes if p.enabled]
        self.health: dict[str, dict] = {}
        self.state: dict[str, str] = {}
        self.rates: dict[str, list[float]] = {}
        #: every dynamics/torques frame's latency_s since the lab was up (start-up excluded), s (8 bytes a
        #: frame: 22 MB for 8 hours at 100 frames/s)
        self.latency = array("d")
        self.walker = _Walker()
        #: per shaft (a walker) or foot (a tree model's gait cycles), the dynamics service's (net, absolute) work of
        #: each completed cycle, J (NaN: a cycle with an unknown load or lost samples)
        self.cycles: dict[str, list[tuple[float, float]]] = {}
        self.events: list[str] = []
        self.safety: list[str] = []
        self.loop_states: set[str] = set()  # control-loop health states seen while the lab was up
        self.restarts = 0

    def close(self) -> None:
        self.sub.close()

    def up(self) -> bool:
        """Every enabled process has published a health frame."""
        return all(p in self.state for p in self.processes)

    def poll(self, budget_s: float = 0.05) -> None:
        from daq.health import parse_health

        end = time.monotonic() + budget_s
        while (f := self.sub.recv(timeout_s=max(0.0, end - time.monotonic()))) is not None:
            if f.stream.startswith("health/"):
                name = f.stream[len("health/"):]
                v = parse_health(f)
                self.health[name] = v
                self.state[name] = str((f.meta or {}).get("state", "?"))
                if "loop/cycles" in v and self.up() and self.state[name] != "stopped":
                    self.loop_states.add(self.state[name])
                for subject, fields in v.items():
                    if "sent_per_s" in fields:
                        self.rates.setdefault(subject, []).append(fields["sent_per_s"])
            elif f.stream in WORLD_TRUTH and "x" in f.channels and f.data.shape[0]:
                self._walker(f)
            elif f.stream == "dynamics/torques":
                lat = (f.meta or {}).get("latency_s")
                if self.up() and isinstance(lat, float) and math.isfinite(lat):
                    self.latency.append(lat)
            elif f.stream == "dynamics/energy" and f.data.shape[0] and {"net", "absolute"} <= set(f.channels):
                ch = list(f.channels)
                meta = f.meta or {}    # a walker's per shaft revolution, a tree model's per gait cycle of a foot
                self.cycles.setdefault(str(meta.get("shaft", meta.get("foot", "?"))), []).append(
                    (float(f.data[0, ch.index("net")]), float(f.data[0, ch.index("absolute")])))
            elif f.stream == "controller/events":
                cause = str((f.meta or {}).get("cause", "?"))
                detail = str((f.meta or {}).get("detail", ""))
                (self.events if cause in NOT_SAFETY else self.safety).append(f"{cause}: {detail}")
            elif f.stream == "events/supervisor":
                ev = (f.meta or {}).get("event")
                if ev in SUPERVISOR_EVENTS:
                    self.restarts += ev == "restart"
                    self.events.append(f"supervisor {ev}: {(f.meta or {}).get('process', '')}")
            if time.monotonic() >= end:
                break

    def _walker(self, f) -> None:
        w = self.walker
        ch = {c: i for i, c in enumerate(f.channels)}
        d = f.data
        shafts = [ch["s_L"], ch["s_R"]] if "s_L" in ch and "s_R" in ch else None   # sim/exo has none
        if math.isnan(w.x0):
            w.x0 = float(d[0, ch["x"]])
            w.s0 = None if shafts is None else d[0, shafts].copy()
            w.advance = float((f.meta or {}).get("advance_per_cycle_m", math.nan))
        w.x = float(d[-1, ch["x"]])
        w.s = None if shafts is None or w.s0 is None else d[-1, shafts].copy()

    # -- figures -----------------------------------------------------------------------------

    def drops(self) -> dict[str, tuple[int, str]]:
        """`lost_frames` of the processes' latest health frames."""
        return lost_frames(self.health)

    def distance(self) -> float:
        return self.walker.x - self.walker.x0

    def expected_distance(self) -> float:
        """No-slip distance of the shafts' mean revolutions (L/D per revolution, m)."""
        w = self.walker
        if w.s is None:
            return math.nan
        return float(np.mean(w.s - w.s0)) / (2 * math.pi) * w.advance

    def latency_figures(self, last: int | None = None) -> tuple[float, float, float]:
        """(p50, p99, max) of the dynamics' latency over every torques frame since the lab was up, or
        over the ``last`` ones, s (NaN before the first)."""
        if not self.latency:
            return math.nan, math.nan, math.nan
        a = np.array(self.latency[-last:] if last else self.latency)  # a copy: the array keeps growing
        p50, p99 = np.percentile(a, [50, 99])
        return float(p50), float(p99), float(a.max())

    def safety_state(self) -> str:
        """The control loops' health states seen while the lab was up (running, stale, latched)."""
        if not self.loop_states:
            return "no control loop heard"
        return ("running throughout" if self.loop_states == {"running"}
                else "states seen: " + ", ".join(sorted(self.loop_states)))

    def table(self, elapsed: float, duration: float | None):
        """The live status as a rich renderable."""
        from rich.console import Group
        from rich.table import Table

        from rich.text import Text

        head = Text(f"walklab run — lab {self.lab.lab.name!r}: " + (f"{elapsed:5.1f} s" if self.up() else "starting")
                    + (f" of {duration:g} s" if duration and self.up() else ""), style="bold")
        t = Table(expand=False)
        for c in ("stream", "frames/s", "frames lost"):
            t.add_column(c, justify="right" if c != "stream" else "left")
        drops = self.drops()
        for name in sorted(s for s in self.rates if not s.startswith("health/")):
            t.add_row(name, f"{self.rates[name][-1]:.0f}", _lost(drops.get(name)))
        p50, p99, _ = self.latency_figures(last=RECENT_FRAMES)
        info = Table.grid(padding=(0, 2))
        info.add_row("processes", ", ".join(f"{n} {self.state.get(n, '…')}" for n in self.processes))
        info.add_row("dynamics latency", f"p50 {_num(p50 * 1e3, 2)} ms, p99 {_num(p99 * 1e3, 2)} ms "
                                         f"(last {RECENT_FRAMES} torques frames)")
        info.add_row("distance walked", f"{_num(self.distance(), 2)} m (no-slip {_num(self.expected_distance(), 2)} m)")
        info.add_row("energy per cycle", "; ".join(f"{shaft} {v[-1][0]:.2f} J net, {v[-1][1]:.2f} J absolute"
                                                   for shaft, v in sorted(self.cycles.items()))
                     or "no completed cycle yet (dynamics/energy)")
        info.add_row("safety", f"{self.safety_state()}; safety events: {len(self.safety)}")
        info.add_row("last command", self.events[-1] if self.events else "none")
        return Group(head, t, info)

    def line(self, elapsed: float) -> str:
        """The status in one plain line (no terminal)."""
        p50, p99, _ = self.latency_figures(last=RECENT_FRAMES)
        drops = sum(n for n, _ in self.drops().values())
        return (f"walklab run: {elapsed:5.1f} s, {len(self.rates)} streams, {drops} frames lost, distance "
                f"{_num(self.distance(), 2)} m, dynamics latency p50 {_num(p50 * 1e3, 2)} ms p99 "
                f"{_num(p99 * 1e3, 2)} ms, "
                f"{self.safety_state()}, {len(self.safety)} safety event(s)")

    def summary(self, elapsed: float, record: str | None, log: Path, status: int) -> str:
        p50, p99, top = self.latency_figures()
        lines = [f"walklab run: {elapsed:.1f} s of lab {self.lab.lab.name!r} ({self.lab.source}), exit {status}"]
        drops = self.drops()
        for name in sorted(s for s in self.rates if not s.startswith("health/")):
            r = np.array(self.rates[name])
            lines.append(f"  stream {name}: {np.median(r):.0f} frames/s median, frames lost {_lost(drops.get(name))}")
        w = self.walker
        lines.append(f"  distance walked: {_num(self.distance(), 3)} m (x {_num(w.x0, 3)} -> {_num(w.x, 3)} m); "
                     f"no-slip distance of the crank revolutions: {_num(self.expected_distance(), 3)} m")
        for shaft, cycles in sorted(self.cycles.items()):
            c = np.array(cycles)
            known = np.isfinite(c).all(axis=1)
            net, ab = c[known].mean(axis=0) if known.any() else (math.nan, math.nan)
            lines.append(f"  energy per cycle, {shaft}: {net:.2f} J net, {ab:.2f} J absolute, mean over "
                         f"{known.sum()} cycle(s)" + (f" ({(~known).sum()} more not known: a load unknown or samples "
                                                      f"lost)" if (~known).any() else "") + " (dynamics/energy)")
        if not self.cycles:
            lines.append("  energy per cycle: no completed cycle (dynamics/energy)")
        lines.append(f"  dynamics latency: p50 {_num(p50 * 1e3, 3)} ms, p99 {_num(p99 * 1e3, 3)} ms, max "
                     f"{_num(top * 1e3, 3)} ms over {len(self.latency)} torques frames (start-up excluded)")
        lines.append(f"  safety: {self.safety_state()}; {len(self.safety)} safety event(s)"
                     + ("".join(f"\n    {e}" for e in self.safety[:10])))
        lines.append(f"  restarts: {self.restarts}")
        lines.append(f"  commands and events: {len(self.events)}" + "".join(f"\n    {e}" for e in self.events[:20]))
        if record:
            size = Path(record).stat().st_size if Path(record).exists() else 0
            lines.append(f"  recording: {Path(record).resolve()} ({size / 1e6:.1f} MB)")
        lines.append(f"  log: {log}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------ the runner


def ensure_libraries(lab: Any) -> None:
    """Build the synergy library of every control loop of `lab` that has none (progress bar)."""
    import dataclasses

    from controller.commands.synergies import build_with_progress
    from controller.loop import parse_args
    from controller.synergies.library import INDEX
    from controller.synergies.robot import load_robot

    for p in lab.processes:
        if p.module != "controller.loop" or not p.enabled:
            continue
        o = parse_args(p.name, p.args)
        cfg = load_robot(o.robot)
        if o.library:
            cfg = dataclasses.replace(cfg, library=Path(o.library))
        if not (Path(cfg.library) / INDEX).exists():
            print(f"walklab run: no synergy library at {cfg.library} for process {p.name!r}: building it once")
            build_with_progress(cfg)


#: How long a scripted command waits for the control loop to subscribe and confirm it [s] (a loaded machine).
SCRIPT_TIMEOUT_S = 30.0


def settle(in_flight: list[tuple[str, Future]], mon: "Monitor", console: Any) -> int:
    """Move the script's commands that finished from ``in_flight`` to the run's events; 1 if one
    failed (not delivered, or refused by the loop: printed), else 0."""
    status = 0
    for what, done in [x for x in in_flight if x[1].done()]:
        in_flight.remove((what, done))
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or isinstance(exc, InterruptedError):
            what += ": not confirmed before the run ended"
        elif isinstance(exc, (OSError, ValueError, LookupError)):
            status = 1
            what += f" FAILED: {exc}"
            console.print(f"walklab run: {what}", soft_wrap=True)  # one line in a log
        elif exc is not None:
            raise exc
        mon.events.append(what)
    return status


def run_live(lab: Any, *, duration: float | None, script: list[Command], record: str | None,
             startup_s: float = 180.0) -> int:
    """Run `lab` with the status, `script` and an optional recording (module doc); the exit status."""
    from rich.console import Console
    from rich.live import Live

    from controller.commands.estop import loop_of, send_to_loop
    from controller.commands.record import start_beside, stop_beside
    from controller.loop import REQUEST_STREAM

    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"--duration {duration}: expected a positive number of seconds")
    console = Console()
    ensure_libraries(lab)
    if script:
        loop_of(lab)  # before anything starts: a script for a lab without one control loop is one line
    mon = Monitor(lab)
    if record:
        log = Path(record).with_suffix(".log")
        logf = open(log, "w")
    else:
        fd, name = tempfile.mkstemp(prefix="walklab-run-", suffix=".log")
        log, logf = Path(name), open(fd, "w")  # the file object owns (and closes) mkstemp's descriptor
    recorder = start_beside(lab, record) if record else None
    # nothing that can fail between here and the try: the finally stops both
    sup = subprocess.Popen([sys.executable, "-m", "controller.cli", "run", str(lab.source), "--supervise-only"],
                           stdout=logf, stderr=subprocess.STDOUT)
    status, t_up, pending = 0, None, list(script)
    # the script's commands go out one after the other from a thread of their own: each waits up to
    # SCRIPT_TIMEOUT_S for the loop's confirmation, and the status must not freeze meanwhile
    sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="walklab-script")
    cancel = threading.Event()  # set at the end: a command still waiting gives up within 0.1 s
    in_flight: list[tuple[str, Future]] = []

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a shell starts a background job with SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler, so Ctrl-C's signal sent by a script would be lost
    previous = {s: signal.signal(s, on_term) for s in (signal.SIGINT, signal.SIGTERM)}
    live = Live(console=console, refresh_per_second=4, transient=False) if console.is_terminal else None
    t_start = time.monotonic()
    next_line = t_start
    try:
        if live is not None:
            live.start()
        while True:
            mon.poll(0.05)
            now = time.monotonic()
            if sup.poll() is not None:
                status = sup.returncode or 1
                console.print(f"walklab run: the supervisor exited ({sup.returncode}); see {log}")
                break
            if t_up is None:
                if mon.up():
                    t_up = now
                elif now - t_start > startup_s:
                    status = 1
                    console.print(f"walklab run: the lab was not up after {startup_s:g} s "
                                  f"(no health from {sorted(set(mon.processes) - set(mon.state))}); see {log}")
                    break
            else:
                while pending and now - t_up >= pending[0].at:
                    c = pending.pop(0)
                    what = f"{now - t_up:5.1f} s script: {c.label or 'command'} speed {c.speed} m/s turn {c.turn} rad/s"
                    in_flight.append((what, sender.submit(
                        send_to_loop, lab, REQUEST_STREAM, np.array([[c.speed, c.turn]]), ["speed", "turn"],
                        ["m/s", "rad/s"], {"source": "walklab run script", "label": c.label}, {"request"},
                        SCRIPT_TIMEOUT_S, cancel)))
                status = max(status, settle(in_flight, mon, console))
                if duration is not None and now - t_up >= duration:
                    break
            if live is not None:
                live.update(mon.table(0.0 if t_up is None else now - t_up, duration))
            elif t_up is not None and now >= next_line:  # no terminal (a log, CI): a plain line every 5 s
                next_line = now + 5.0
                print(mon.line(now - t_up), flush=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C or SIGTERM: a normal end, as for the supervisor
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if live is not None:
            live.stop()
        cancel.set()
        sender.shutdown(wait=True, cancel_futures=True)
        status = max(status, settle(in_flight, mon, console))
        elapsed = 0.0 if t_up is None else time.monotonic() - t_up
        if sup.poll() is None:
            sup.send_signal(signal.SIGINT)
            try:
                sup.wait(60)
            except subprocess.TimeoutExpired:
                sup.kill()
                sup.wait()
            if status == 0 and sup.returncode not in (0, -signal.SIGINT):
                status = 1
        mon.poll(0.2)  # the last events (the supervisor's stop)
        if recorder is not None:
            stop_beside(recorder)
        mon.close()
        logf.close()
    print(mon.summary(elapsed, record, log, status))
    return status
