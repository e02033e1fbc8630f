"""A recorded session re-analysed: its inputs replayed into the lab's own analysis processes, their outputs recorded.

``walklab replay FILE --shadow`` (controller/commands/replay.py) runs this. The lab is the one the
session was recorded with (its ``walklab/lab`` metadata record, or ``--config``), cut down to its
analysis processes (`ANALYSIS`: the plate service, the walker's dynamics and the control loop, the
loop with ``--shadow``: it reads the replayed encoder streams and commands nothing) on fresh loopback
ports, plus a ``replay`` entry — this process's publisher, not started — that the processes subscribe
to as to any publisher of the lab (`shadow_lab`: the config is read with tomllib and written back
as a table). The session's input streams (everything but what the analysis processes and the rest of
the lab publish: `DERIVED`) go out with their recorded seq and stamps, and the operator's requests the
loop recorded (``controller/events`` of cause ``request``) go out again as ``controller/request`` frames
at their recorded time; the processes compute as they did live; their outputs are written to a new
session file, beside the input frames replayed — each written as the source recorded it (the same msgpack
bytes, log and publish times and sequence: `recorded`), so the output is a whole session that `walklab
analyze` and the other session tools take as they take a live recording (the requests, which the source
holds only as the loop's events, are not written: the loop's own ``controller/events`` record them). The
same code on the same inputs gives the same numbers (docs/cli.md, `walklab replay --shadow`).

The data's clock, not the host's, decides what is stale in a replay:

- the walker dynamics computes a sample once every input covers it, or with the laggards held once
  an input holds more than its buffer (`dynamics.service_torques.KEEP_S`, lab time) — its live
  ``--max-wait-s`` (host time: transport latency) is set to `NO_HOST_WAIT_S` in the shadow lab, since
  nothing is late in transit in a replay;
- as fast as possible (``speed=None``), the replay is paced by the analysis's progress in lab time:
  a frame goes out only when every analysis output stream (`PROGRESS`) has reached within `LEAD_S`
  of its time (less than `KEEP_S`, more than the plate service's zeroing record), so inputs never
  run a buffer ahead of the wrenches computed from them, however slow the machine. An output that
  does not advance for `STALL_S` (host time: an input missing from the recording) stops pacing until
  it advances again.

The control loop's shadow cycles follow the encoder samples' times, and under the ZMP guard wait for the
recomputed ZMP to cover them too (controller/loop.py), so its results do not depend on the replay's speed
either.
"""
from __future__ import annotations

import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: The modules of the processes a shadow replay runs.
ANALYSIS = ("dynamics.service", "dynamics.service_torques", "controller.loop")
#: Stream prefixes the lab computes or reports (not replayed: the analysis recomputes them).
DERIVED = ("dynamics/", "events/", "health/", "controller/")
#: The output stream whose lab time measures each analysis process's progress.
PROGRESS = {"dynamics.service": "dynamics/grf", "dynamics.service_torques": "dynamics/torques",
            "controller.loop": "controller/state"}
#: How long the outputs must be quiet after the last input before the processes are stopped [s].
QUIET_S = 1.5
#: As fast as possible: how far [s of lab time] the inputs may run ahead of the slowest output.
LEAD_S = 3.0
#: An output that has not advanced for this long [s, host] while the replay waits for it no longer paces it.
STALL_S = 10.0
#: The walker dynamics' --max-wait-s in a shadow replay [s]: no host-time wait decides what is held.
NO_HOST_WAIT_S = 3600.0


class ShadowError(ValueError):
    """A session that cannot be re-analysed (no lab config, no analysis process), or a shadow recording
    that stopped (a disk error); one line."""


def lab_text(file: str | Path, config: str | Path | None) -> str:
    """The lab config TOML: `config`'s text, or the session's ``walklab/lab`` metadata record."""
    if config is not None:
        return Path(config).read_text(encoding="utf-8")
    from daq.sessions import metadata, scan

    toml = metadata(scan(file)).get("walklab/lab", {}).get("toml")
    if not toml:
        raise ShadowError(f"{file}: the session holds no lab config (walklab/lab metadata); give --config LAB")
    return toml


def _set_arg(args: list[str], flag: str, value: str | None) -> list[str]:
    """`args` with ``flag value`` (or the bare `flag` when value is None) set, replacing an existing one."""
    out = list(args)
    if flag in out:
        k = out.index(flag)
        if value is not None:
            out[k + 1] = value
        return out
    return out + ([flag] if value is None else [flag, value])


def shadow_lab(text: str, replay_bind: str, directory: Path) -> Path:
    """The lab file for the shadow run (module doc): `text` with only its `ANALYSIS` processes, the loop
    in ``--shadow`` mode, the walker dynamics without a host-time wait, every endpoint (binds, the loop's
    ``--operator``) on a free loopback port, and a ``replay`` process (not started) bound at
    `replay_bind`; written in `directory`. ShadowError for text that is not TOML or has no analysis process."""
    from controller.commands.model import toml_dumps
    from daq.ports import free_tcp_ports

    try:
        lab = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ShadowError(f"the session's lab config is not TOML: {exc}") from None
    procs = [dict(p) for p in lab.get("processes", []) if isinstance(p, dict) and p.get("module") in ANALYSIS]
    if not procs:
        raise ShadowError(f"the lab has no analysis process ({', '.join(ANALYSIS)}) to run on the replay")
    free = iter(free_tcp_ports(2 * len(procs) + 1))

    def endpoint() -> str:
        return f"tcp://127.0.0.1:{next(free)}"

    for p in procs:
        p["bind"] = endpoint()
        p.pop("connect", None)
        args = [str(a) for a in p.get("args", [])]
        if p["module"] == "controller.loop":
            args = _set_arg(_set_arg(args, "--shadow", None), "--operator", endpoint())
        elif p["module"] == "dynamics.service_torques":
            args = _set_arg(args, "--max-wait-s", repr(NO_HOST_WAIT_S))
        p["args"] = args
    lab["supervisor"] = {**lab.get("supervisor", {}), "bind": endpoint()}
    lab["supervisor"].pop("connect", None)
    lab["processes"] = procs + [{"name": "replay", "module": "daq.replay", "bind": replay_bind,
                                 "args": ["--file", "(this process: walklab replay --shadow)"], "restart": "never"}]
    path = directory / "shadow_lab.toml"
    path.write_text(toml_dumps(lab, ["the shadow replay's lab (controller/shadow.py)"]), encoding="utf-8")
    return path


def requests(file: str | Path) -> list:
    """The operator requests the session's control loops took (``controller/events`` of cause ``request``
    with ``speed`` and ``turn`` in the meta) as ``controller/request`` frames at their recorded time."""
    import numpy as np

    from daq.frames import Frame
    from daq.replay import frames

    out = []
    for f in frames(file, ["controller/events"]):
        m = f.meta or {}
        if m.get("cause") == "request" and "speed" in m:
            out.append(Frame("controller/request", "command", len(out), None, f.t_host, f.t, 0.0, ("speed", "turn"),
                             ("m/s", "rad/s"), np.array([[float(m["speed"]), float(m.get("turn", 0.0))]])))
    return sorted(out, key=lambda f: f.t)


def merged(inputs: Iterable, extra: list) -> Iterator:
    """`inputs` in their order with each of `extra` (sorted by t) just before the first input that holds a
    sample at or after its t: a block's last sample, not its first, decides, since a consumer may act up to
    a block's end as soon as it has the block (the shadow loop's cycles), and a request must be there first."""
    k = 0
    for f in inputs:
        last = int(f.sample_times()[-1]) if f.samples > 1 and f.rate_hz > 0 else f.t
        while k < len(extra) and extra[k].t <= last:
            yield extra[k]
            k += 1
        yield f
    yield from extra[k:]


def recorded(inputs: Iterable, write: Callable[[object], None]) -> Iterator:
    """`inputs` unchanged, each frame handed to `write` first — before it is sent: sending stamps a new
    ``t_pub``, and the output keeps the source's (the frame as recorded, `t_recv` included)."""
    for f in inputs:
        write(f)
        yield f


def paced(inputs: Iterable, progress: dict[str, int], streams: list[str], poll: Callable[[], None],
          should_stop: Callable[[], bool], lead_s: float = LEAD_S, stall_s: float = STALL_S) -> Iterator:
    """`inputs`, each frame held back until every stream of `streams` has reached ``frame.t - lead_s`` in
    `progress` (lab time of its newest sample, ns; updated by the caller's recorder) — module doc; a
    stream that does not advance for `stall_s` while a frame waits no longer holds frames back, until it
    advances. `poll` is called while waiting (the publisher's handshakes)."""
    lead = round(lead_s * 1e9)
    start: int | None = None
    stalled: dict[str, int] = {}  # stream -> its progress when it stalled
    for f in inputs:
        if start is None:
            start = f.t
        since, seen = time.monotonic(), {s: progress.get(s, start) for s in streams}
        while not should_stop():
            now = {s: progress.get(s, start) for s in streams}
            for s in [s for s in stalled if now[s] != stalled[s]]:
                del stalled[s]  # it moves again
            behind = [s for s in streams if s not in stalled and now[s] < f.t - lead]
            if not behind:
                break
            if any(now[s] != seen[s] for s in behind):
                since, seen = time.monotonic(), now
            elif time.monotonic() - since > stall_s:
                stalled.update({s: now[s] for s in behind})
                continue
            poll()
            time.sleep(0.005)
        yield f


@dataclass
class ShadowResult:
    """frames replayed (also written to the output), frames the analysis processes published and the
    output holds, per stream, the output file."""
    replayed: int
    recorded: dict[str, int]
    output: Path


def run_shadow(file: str | Path, output: str | Path, *, config: str | Path | None = None, speed: float | None = None,
               should_stop: Callable[[], bool] = lambda: False,
               progress: Callable[[int], None] | None = None, start_timeout_s: float = 60.0) -> ShadowResult:
    """Replay `file`'s inputs into its lab's analysis processes (module doc) at `speed` (None: as fast as
    they keep up), recording the inputs replayed and the processes' outputs into `output`. Raises
    ShadowError / OSError in one line."""
    import tempfile

    from controller.config import load
    from controller.proc import subscriber_for
    from controller.supervisor import Supervisor
    from daq.bus import Publisher
    from daq.frames import Frame
    from daq.ports import free_tcp_ports
    from daq.record import SessionWriter, lab_metadata
    from daq.replay import frames, replay, set_backpressure
    from daq.sessions import read, session_parts

    text = lab_text(file, config)
    with tempfile.TemporaryDirectory(prefix="walklab-shadow-") as tmp:
        bind = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
        lab = load(shadow_lab(text, bind, Path(tmp)))
        procs = [p for p in lab.processes if p.module in ANALYSIS]
        streams = sorted({f.stream for f in read(session_parts(file))})
        inputs = [s for s in streams if not s.startswith(DERIVED)]
        writer = SessionWriter(output, metadata={**lab_metadata(lab), "walklab/shadow": {"source": str(file)}})
        counts: dict[str, int] = {}
        reached: dict[str, int] = {}  # PROGRESS stream -> lab time of its newest sample [ns]
        paced_by = sorted({PROGRESS[p.module] for p in procs})
        last = [time.monotonic()]
        done = threading.Event()
        lock = threading.Lock()  # the writer is shared: outputs from the recorder thread, inputs from the replay

        def record() -> None:
            sub = subscriber_for(lab, [p.bind for p in procs], ["dynamics/*", "events/*", "health/*", "controller/*"])
            try:
                while not done.is_set() and not writer.stopped:
                    f = sub.recv(timeout_s=0.05)
                    with lock:
                        if f is not None:
                            writer.write(f, f.t_recv)
                        writer.poll()
                    if f is not None:
                        if writer.stopped:  # a disk error: this frame was not written, nor will any be
                            break
                        counts[f.stream] = counts.get(f.stream, 0) + 1
                        if not f.stream.startswith("health/"):     # those come every second regardless
                            last[0] = time.monotonic()
                        if f.stream in paced_by and f.samples:
                            reached[f.stream] = max(reached.get(f.stream, f.t), int(f.sample_times()[-1]))
            finally:
                sub.close()

        def write_input(f: Frame) -> None:  # as the source recorded it: its own receipt time
            with lock:
                writer.write(f, f.t_recv)

        sup = Supervisor(lab)
        logs = [Path(tmp) / f"{p.name}.log" for p in procs]
        children: list[subprocess.Popen] = []
        thread = threading.Thread(target=record, name="shadow-recorder", daemon=True)
        n = 0

        def stop() -> bool:  # a failed recording stops the replay (and is an error below, not a result)
            return should_stop() or writer.stopped

        try:
            for p, log in zip(procs, logs):  # inside the try: a failed start stops the ones already started
                with open(log, "wb") as fh:
                    children.append(subprocess.Popen(sup.command(p), stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                                     start_new_session=True))
            thread.start()
            with Publisher(bind, replay_s=0.0) as pub:
                if speed is None:
                    set_backpressure(pub)
                deadline = time.monotonic() + start_timeout_s
                while not pub.wait_for_subscribers(len(procs), 0.2) and not writer.stopped:  # stopped: below
                    dead = [f"{p.name} ({_last_line(log)})" for p, c, log in zip(procs, children, logs)
                            if c.poll() is not None]
                    if dead or time.monotonic() > deadline or should_stop():
                        raise ShadowError(f"shadow replay: {', '.join(dead) or 'the analysis processes'} did not "
                                          f"start (or subscribe within {start_timeout_s:.0f} s)")
                source = merged(recorded(frames(file, inputs), write_input), requests(file))
                if speed is None:
                    source = paced(source, reached, paced_by, pub.poll_subscriptions, stop)
                n = replay(source, pub, speed=speed, should_stop=stop,
                           progress=None if progress is None else (lambda k, f: progress(k)))
                # the processes finish what is in flight (the last samples an input never covers stay pending)
                last[0] = time.monotonic()
                while time.monotonic() - last[0] < QUIET_S and not stop():
                    pub.poll_subscriptions()
                    time.sleep(0.05)
        finally:
            for c in children:
                if c.poll() is None:
                    c.send_signal(signal.SIGTERM)
            for c in children:
                try:
                    c.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    c.kill()
            done.set()
            if thread.is_alive():
                thread.join(timeout=10)
            failed = writer.stop_reason if writer.stopped else None  # close() sets "stopped" when none
            writer.close()
        if failed:
            raise ShadowError(f"{writer.files[-1] if writer.files else output}: the shadow recording stopped ({failed}: see its events/recorder); "
                              f"the file holds only what was written before")
    return ShadowResult(n, counts, Path(output))


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"
