"""A recorded session re-analysed: its inputs replayed into the lab's own dynamics processes, their outputs recorded.

``walklab replay FILE --shadow`` (controller/commands/replay.py) runs this. The lab is the one the
session was recorded with (its ``walklab/lab`` metadata record, or ``--config``), cut down to its
analysis processes (`ANALYSIS`: the plate service and the walker's dynamics) on fresh loopback ports,
plus a ``replay`` entry — this process's publisher, not started — that the processes subscribe to as
to any publisher of the lab. The session's input streams (everything but what the analysis processes
and the rest of the lab publish: `DERIVED`) go out with their recorded seq and stamps; the
processes compute as they did live; their outputs are written to a new session file. The same code on
the same inputs gives the same numbers (docs/cli.md, `walklab replay --shadow`).

The control loop is not among them: it reads its robot's MCU, not the bus, so a replay has no state
to give it.
"""
from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: The modules of the processes a shadow replay runs.
ANALYSIS = ("dynamics.service", "dynamics.service_torques")
#: Stream prefixes the lab computes or reports (not replayed: the analysis recomputes them).
DERIVED = ("dynamics/", "events/", "health/", "controller/")
#: How long the outputs must be quiet after the last input before the processes are stopped [s].
QUIET_S = 1.5


class ShadowError(ValueError):
    """A session that cannot be re-analysed (no lab config, no analysis process); one line."""


def lab_text(file: str | Path, config: str | Path | None) -> str:
    """The lab config TOML: `config`'s text, or the session's ``walklab/lab`` metadata record."""
    if config is not None:
        return Path(config).read_text(encoding="utf-8")
    from daq.sessions import metadata, scan

    toml = metadata(scan(file)).get("walklab/lab", {}).get("toml")
    if not toml:
        raise ShadowError(f"{file}: the session holds no lab config (walklab/lab metadata); give --config LAB")
    return toml


def shadow_lab(text: str, replay_bind: str, directory: Path) -> Path:
    """The lab file for the shadow run: `text` with only its `ANALYSIS` processes, every loopback port
    made a free one, and a ``replay`` process (not started) bound at `replay_bind`; written in
    `directory`."""
    from daq.ports import free_tcp_ports

    blocks = re.split(r"(?m)^(?=\[)", text)
    kept = []
    for b in blocks:
        if b.startswith("[[processes]]"):
            m = re.search(r'(?m)^module\s*=\s*"([^"]+)"', b)
            if not m or m.group(1) not in ANALYSIS:
                continue
        kept.append(b)
    out = "".join(kept)
    if not any(b.startswith("[[processes]]") for b in kept):
        raise ShadowError(f"the lab has no analysis process ({', '.join(ANALYSIS)}) to run on the replay")
    ports = sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", out)))
    for old, new in zip(ports, free_tcp_ports(len(ports))):
        out = out.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    out += f'\n[[processes]]\nname = "replay"\nmodule = "daq.replay"\nbind = "{replay_bind}"\n' \
           f'args = ["--file", "(this process: walklab replay --shadow)"]\nrestart = "never"\n'
    path = directory / "shadow_lab.toml"
    path.write_text(out, encoding="utf-8")
    return path


@dataclass
class ShadowResult:
    """frames replayed, frames recorded per output stream, the output file."""
    replayed: int
    recorded: dict[str, int]
    output: Path


def run_shadow(file: str | Path, output: str | Path, *, config: str | Path | None = None, speed: float | None = None,
               should_stop: Callable[[], bool] = lambda: False,
               progress: Callable[[int], None] | None = None, start_timeout_s: float = 60.0) -> ShadowResult:
    """Replay `file`'s inputs into its lab's analysis processes (module doc) at `speed` (None: as fast as
    they keep up), recording their outputs into `output`. Raises ShadowError / OSError in one line."""
    import tempfile

    from controller.config import load
    from controller.proc import subscriber_for
    from controller.supervisor import Supervisor
    from daq.bus import Publisher
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
        last = [time.monotonic()]
        done = threading.Event()

        def record() -> None:
            sub = subscriber_for(lab, [p.bind for p in procs], ["dynamics/*", "events/*", "health/*"])
            try:
                while not done.is_set():
                    f = sub.recv(timeout_s=0.05)
                    if f is not None:
                        writer.write(f, f.t_recv)
                        counts[f.stream] = counts.get(f.stream, 0) + 1
                        if not f.stream.startswith("health/"):     # those come every second regardless
                            last[0] = time.monotonic()
                    writer.poll()
            finally:
                sub.close()

        sup = Supervisor(lab)
        logs = [Path(tmp) / f"{p.name}.log" for p in procs]
        children = []
        for p, log in zip(procs, logs):
            with open(log, "wb") as fh:
                children.append(subprocess.Popen(sup.command(p), stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                                 start_new_session=True))
        thread = threading.Thread(target=record, name="shadow-recorder", daemon=True)
        thread.start()
        n = 0
        try:
            with Publisher(bind, replay_s=0.0) as pub:
                if speed is None:
                    set_backpressure(pub)
                deadline = time.monotonic() + start_timeout_s
                while not pub.wait_for_subscribers(len(procs), 0.2):
                    dead = [f"{p.name} ({_last_line(log)})" for p, c, log in zip(procs, children, logs)
                            if c.poll() is not None]
                    if dead or time.monotonic() > deadline or should_stop():
                        raise ShadowError(f"shadow replay: {', '.join(dead) or 'the analysis processes'} did not "
                                          f"start (or subscribe within {start_timeout_s:.0f} s)")
                n = replay(frames(file, inputs), pub, speed=speed, should_stop=should_stop,
                           progress=None if progress is None else (lambda k, f: progress(k)))
                # the processes finish what is in flight (the torques wait up to --max-wait-s for the last samples)
                last[0] = time.monotonic()
                while time.monotonic() - last[0] < QUIET_S and not should_stop():
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
            thread.join(timeout=10)
            writer.close()
    return ShadowResult(n, counts, Path(output))


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"
