"""Lab configuration: TOML files validated into frozen dataclasses.

A lab config names the lab, the bus settings (high-water marks, CurveZMQ keys), the supervisor's
settings, the processes `walklab run` starts and the devices they talk to. `load(path)` reads the
file with `tomllib` and checks every key against the dataclasses below: the type hints are the
schema, the field metadata holds the documentation and the range checks. Any problem raises a
`ConfigError` whose message is one line: ``FILE: dotted.key = value: what was expected``; unknown
keys are errors with a "did you mean" suggestion. Every key is documented in ``docs/config.md``.
`load` never imports the process modules (so ``walklab bus monitor --config`` works whatever
state they are in); `check_processes` does (``walklab config check`` and ``walklab run``), and a
module that cannot be imported is one line too (module file, line, error).

Units are SI (m, N, s, Hz); corner and origin coordinates are in metres, corners in the lab frame
(z up, x the walking direction), origins in the plate frame as in C3D ``FORCE_PLATFORM:ORIGIN``.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import re
import tomllib
import traceback
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Union

from controller.synergies.robot import RobotConfig, load_robot
from daq.bus import DEFAULT_RCVHWM, DEFAULT_SNDHWM, is_local_endpoint

__all__ = [
    "ConfigError", "Lab", "LabInfo", "Bus", "Curve", "Supervisor", "Process",
    "ForcePlate", "Mcu", "Mocap", "LslStream", "Device", "load", "parse_endpoint", "process_entry", "check_processes",
]


class ConfigError(ValueError):
    """A lab config is missing, unreadable or invalid; the message is one line naming file and key."""


def _doc(text: str, **checks: Any) -> dict[str, Any]:
    # Field metadata: `doc` for docs/config.md and error messages, plus optional checks:
    # min / max / gt (numbers), pattern (strings), shape (nested lists), from_key (filled from the table key).
    return {"doc": text, **checks}


NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_\-]*"
_MODULE_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


# ----------------------------------------------------------------------------------- schema ----

@dataclass(frozen=True)
class LabInfo:
    """``[lab]``: who this lab is."""
    name: str = field(metadata=_doc("lab name, shown in status lines and health frames",
                                    pattern=NAME_PATTERN))
    description: str = field(default="", metadata=_doc("free text"))


@dataclass(frozen=True)
class Curve:
    """``[bus.curve]``: CurveZMQ keys (made by ``walklab keys``); paths relative to the config file."""
    server_key: Path = field(metadata=_doc(
        "secret key file (``NAME.key_secret``) every publisher of the lab binds with", exists=True))
    server_public: Path = field(metadata=_doc(
        "the matching public key file (``NAME.key``) subscribers use to trust the publishers",
        exists=True))
    client_key: Path = field(metadata=_doc(
        "secret key file of the subscribers (processes, `walklab bus monitor`)", exists=True))
    authorized_keys: Path | None = field(default=None, metadata=_doc(
        "folder of public key files (``*.key``) allowed to subscribe; a client whose key is not in "
        "it gets nothing; unset = any client that knows the server's public key", exists=True))


@dataclass(frozen=True)
class Bus:
    """``[bus]``: ZeroMQ settings shared by every publisher and subscriber of the lab."""
    sndhwm: int = field(default=DEFAULT_SNDHWM, metadata=_doc(
        "send high-water mark of every publisher, in frames per subscriber (0 = unlimited)", min=0))
    rcvhwm: int = field(default=DEFAULT_RCVHWM, metadata=_doc(
        "receive high-water mark of every subscriber, in frames (0 = unlimited)", min=0))
    curve: Curve | None = field(default=None, metadata=_doc(
        "CurveZMQ keys; required as soon as any endpoint binds a non-loopback address"))


@dataclass(frozen=True)
class Supervisor:
    """``[supervisor]``: how `walklab run` starts, restarts and stops the processes."""
    bind: str = field(default="tcp://127.0.0.1:5600", metadata=_doc(
        "endpoint where the supervisor publishes ``events/supervisor`` and ``health/supervisor``",
        endpoint=True))
    connect: str = field(default="", metadata=_doc(
        "endpoint subscribers connect to; empty = same as ``bind`` (needed when binding ``*``)",
        endpoint="optional"))
    status_interval_s: float = field(default=5.0, metadata=_doc(
        "seconds between two status lines on stdout (0 = no status line)", min=0.0))
    stop_grace_s: float = field(default=1.0, metadata=_doc(
        "seconds between SIGTERM and SIGKILL when stopping a process", min=0.0))
    backoff_initial_s: float = field(default=0.5, metadata=_doc(
        "delay before the first restart of a crashed process; doubled at each further crash", gt=0.0))
    backoff_max_s: float = field(default=30.0, metadata=_doc("upper bound of the restart delay", gt=0.0))
    backoff_reset_s: float = field(default=10.0, metadata=_doc(
        "a process that ran this long before crashing restarts with the initial delay again", gt=0.0))


@dataclass(frozen=True)
class Process:
    """``[[processes]]``: one process started by `walklab run` as ``python -m MODULE``."""
    name: str = field(metadata=_doc("unique process name; its health stream is ``health/NAME``",
                                    pattern=NAME_PATTERN))
    module: str = field(metadata=_doc(
        "module whose ``run(ctx, args)`` is the process (see ``controller.proc``)", module=True))
    bind: str = field(metadata=_doc("endpoint where this process publishes its streams", endpoint=True))
    connect: str = field(default="", metadata=_doc(
        "endpoint subscribers connect to; empty = same as ``bind`` (needed when binding ``*``)",
        endpoint="optional"))
    args: tuple[str, ...] = field(default=(), metadata=_doc(
        "extra arguments passed to ``run(ctx, args)`` (the module's own options)"))
    devices: tuple[str, ...] = field(default=(), metadata=_doc(
        "names of the ``[devices.NAME]`` sections this process serves"))
    restart: Literal["always", "on-failure", "never"] = field(default="on-failure", metadata=_doc(
        "restart policy: ``always`` (any exit), ``on-failure`` (non-zero exit or signal), ``never``"))
    max_restarts: int = field(default=0, metadata=_doc(
        "give up after this many restarts (0 = never give up)", min=0))
    enabled: bool = field(default=True, metadata=_doc("false = listed but not started"))
    remote: bool = field(default=False, metadata=_doc(
        "true = runs on another machine (``walklab forward NAME`` there): ``walklab run`` does not start it "
        "but subscribes to it at ``connect`` like any other process"))
    liveness_s: float = field(default=5.0, metadata=_doc(
        "the supervisor restarts the process when its health frames (``health/NAME``) stop for this "
        "long, s (0 = never; else at least 2: the frames come once a second, give or take)", min=0.0))
    startup_s: float = field(default=30.0, metadata=_doc(
        "time allowed from a start to the first health frame, s, before ``liveness_s`` applies", gt=0.0))
    stop_grace_s: float | None = field(default=None, metadata=_doc(
        "seconds between SIGTERM and SIGKILL for this process; unset = ``[supervisor] stop_grace_s`` "
        "(a ``daq.record`` process needs up to 60 s to write what is still queued in its socket)", min=0.0))
    nice: int | None = field(default=None, metadata=_doc(
        "niceness the supervisor gives the process at its start, -20..19 (lower = more CPU); unset = "
        "the supervisor's own", min=-20, max=19))
    realtime: int = field(default=0, metadata=_doc(
        "SCHED_FIFO priority 1..99 the supervisor gives the process at its start (0 = normal scheduling); "
        "refused (no CAP_SYS_NICE): it runs at normal priority and a ``priority`` event says so",
        min=0, max=99))

    @property
    def endpoint(self) -> str:
        """Where subscribers connect to reach this process."""
        return self.connect or self.bind

    @property
    def started_here(self) -> bool:
        """True if this machine's supervisor starts the process (enabled and not remote)."""
        return self.enabled and not self.remote


@dataclass(frozen=True)
class ForcePlate:
    """``[devices.NAME]`` with ``kind = "forceplate"``: a force platform and its amplifier."""
    kind: Literal["forceplate"] = field(metadata=_doc("device kind"))
    corners: tuple[tuple[float, ...], ...] = field(metadata=_doc(
        "4 corners x (x, y, z) in m, lab frame, in C3D ``FORCE_PLATFORM:CORNERS`` order", shape=(4, 3)))
    name: str = field(default="", metadata=_doc("", from_key=True))
    type: Literal[1, 2, 3, 4] = field(default=2, metadata=_doc(
        "C3D plate type: 1 (Fx Fy Fz COPx COPy Tz), 2 (Fx Fy Fz Mx My Mz), 3 (Kistler, 8 channels), "
        "4 (type 2 with a 6x6 calibration matrix)"))
    source: str = field(default="sim", metadata=_doc(
        "``sim`` for the simulated plate, ``lsl:NAME`` for the LSL stream NAME (``daq.lsl``), else the "
        "amplifier's pyserial URL or device path (``daq.devices.forceboard``)"))
    rate_hz: float = field(default=1000.0, metadata=_doc("sampling rate in Hz", gt=0.0))
    block: int = field(default=5, metadata=_doc("samples per frame on the bus", min=1))
    origin: tuple[float, ...] = field(default=(0.0, 0.0, 0.0), metadata=_doc(
        "C3D ``FORCE_PLATFORM:ORIGIN``: vector between the transducer origin and the surface centre, "
        "m, plate axes (normalised to z <= 0, as ezc3d does)", shape=(3,)))
    cal_matrix: tuple[tuple[float, ...], ...] | None = field(default=None, metadata=_doc(
        "6x6 calibration matrix (type 4 only)", shape=(6, 6)))
    force_range_n: float | None = field(default=None, metadata=_doc(
        "amplifier range of the raw force channels, +- N (type 4: as sent, before calibration); a sample "
        "at or beyond it is flagged saturated; unset: saturation is not detected", gt=0.0))
    moment_range_nm: float | None = field(default=None, metadata=_doc(
        "amplifier range of the raw moment channels (Mx My Mz, type 1's Tz), +- N*m; as force_range_n",
        gt=0.0))
    stream: str = field(default="", metadata=_doc(
        "bus stream name; empty = ``forceplate/NAME``"))

    @property
    def stream_name(self) -> str:
        return self.stream or f"forceplate/{self.name}"

    @property
    def streams(self) -> tuple[str, ...]:
        """The bus streams of this device."""
        return (self.stream_name,)

    @property
    def channels(self) -> tuple[str, ...]:
        """Raw channel names of this plate type (Visual3D FP_Type pages, ecosystem.md section 2)."""
        if self.type == 1:
            return ("Fx", "Fy", "Fz", "COPx", "COPy", "Tz")
        if self.type == 3:
            return ("Fx12", "Fx34", "Fy14", "Fy23", "Fz1", "Fz2", "Fz3", "Fz4")
        return ("Fx", "Fy", "Fz", "Mx", "My", "Mz")


@dataclass(frozen=True)
class Mcu:
    """``[devices.NAME]`` with ``kind = "mcu"``: the robot's microcontroller (firmware bridge)."""
    kind: Literal["mcu"] = field(metadata=_doc("device kind"))
    port: str = field(metadata=_doc("pyserial URL or device path, e.g. ``/dev/ttyACM0``"))
    name: str = field(default="", metadata=_doc("", from_key=True))
    baud: int = field(default=1_000_000, metadata=_doc("serial baud rate", gt=0))
    watchdog_ms: int = field(default=100, metadata=_doc(
        "MCU watchdog: torque off when commands and heartbeats stop this long", gt=0))
    motors: tuple[str, ...] = field(default=("crank",), metadata=_doc(
        "motor names in MCU order; each is the stream ``encoder/NAME``"))
    robot: str = field(default="", metadata=_doc(
        "robot config of the robot this MCU drives: a shipped name (``exoskeleton``: "
        "``configs/exoskeleton.toml``) or a ``.toml`` file (relative to the lab config), read and checked on "
        "load; ``motors`` must be its ``actuators``. Empty: none (the simulated exoskeleton world needs one)"))
    robot_config: RobotConfig | None = field(default=None, compare=False, repr=False, metadata=_doc(
        "", internal=True))  # ``robot`` read by `load`: processes use it without importing the controller

    @property
    def streams(self) -> tuple[str, ...]:
        """The bus streams of this device."""
        return tuple(f"encoder/{m}" for m in self.motors)


@dataclass(frozen=True)
class Mocap:
    """``[devices.NAME]`` with ``kind = "mocap"``: a motion-capture PC forwarding markers."""
    kind: Literal["mocap"] = field(metadata=_doc("device kind"))
    endpoint: str = field(metadata=_doc("endpoint of the mocap PC's stream", endpoint=True))
    name: str = field(default="", metadata=_doc("", from_key=True))
    rate_hz: float = field(default=100.0, metadata=_doc("marker frame rate in Hz", gt=0.0))

    @property
    def streams(self) -> tuple[str, ...]:
        """The bus streams of this device (none declared yet)."""
        return ()


@dataclass(frozen=True)
class LslStream:
    """``[devices.NAME]`` with ``kind = "lsl"``: a Lab Streaming Layer stream brought onto the bus
    (``daq.lsl``); found on the network by any of ``lsl_name``, ``lsl_type``, ``source_id``."""
    kind: Literal["lsl"] = field(metadata=_doc("device kind"))
    name: str = field(default="", metadata=_doc("", from_key=True))
    lsl_name: str = field(default="", metadata=_doc("LSL stream name to resolve (e.g. ``EMG``)"))
    lsl_type: str = field(default="", metadata=_doc("LSL stream type to resolve (e.g. ``MoCap``, ``EEG``)"))
    source_id: str = field(default="", metadata=_doc("LSL source id to resolve (the most specific)"))
    stream: str = field(default="", metadata=_doc(
        "bus stream name; empty = ``markers/NAME`` for a MoCap stream, else ``lsl/NAME``"))

    @property
    def streams(self) -> tuple[str, ...]:
        """The bus stream of this device (known once resolved when ``stream`` is empty)."""
        return (self.stream,) if self.stream else ()


Device = Union[ForcePlate, Mcu, Mocap, LslStream]


@dataclass(frozen=True)
class Lab:
    """A whole lab config; `source` is the file it was read from."""
    lab: LabInfo = field(metadata=_doc("``[lab]`` section"))
    bus: Bus = field(default_factory=Bus, metadata=_doc("``[bus]`` section"))
    supervisor: Supervisor = field(default_factory=Supervisor, metadata=_doc("``[supervisor]`` section"))
    processes: tuple[Process, ...] = field(default=(), metadata=_doc("``[[processes]]`` entries"))
    devices: dict[str, Device] = field(default_factory=dict, metadata=_doc("``[devices.NAME]`` sections"))
    source: Path = field(default=Path("<none>"), metadata=_doc("", internal=True))

    def process(self, name: str) -> Process:
        """The process called `name`; LookupError naming the file otherwise."""
        for p in self.processes:
            if p.name == name:
                return p
        raise LookupError(f"{self.source}: no process named {name!r} "
                          f"(processes: {', '.join(p.name for p in self.processes) or 'none'})")

    def endpoints(self) -> dict[str, str]:
        """Connect endpoint of every publisher of the lab (supervisor first), by process name."""
        eps = {"supervisor": self.supervisor.connect or self.supervisor.bind}
        eps.update({p.name: p.endpoint for p in self.processes if p.enabled})
        return eps

    def summary(self) -> str:
        """A few human-readable lines describing the lab (for `walklab config check`)."""
        lines = [f"lab {self.lab.name!r} ({self.source})"]
        curve = "CurveZMQ on" if self.bus.curve else "loopback only, no CurveZMQ"
        lines.append(f"  bus: sndhwm {self.bus.sndhwm}, rcvhwm {self.bus.rcvhwm}, {curve}")
        lines.append(f"  supervisor: {self.supervisor.bind}")
        for p in self.processes:
            extra = f" devices {', '.join(p.devices)}" if p.devices else ""
            off = " (disabled)" if not p.enabled else " (remote: walklab forward)" if p.remote else ""
            lines.append(f"  process {p.name}: module {p.module} on {p.bind}, "
                         f"restart {p.restart}{extra}{off}")
        for name, d in self.devices.items():
            lines.append(f"  device {name}: {d.kind}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------- endpoints ----

_TCP = re.compile(r"^tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(?P<port>\d+)$")


def parse_endpoint(endpoint: str) -> tuple[str, str, int | str]:
    """Split ``tcp://host:port`` into ("tcp", host, port) and ``ipc://path`` into ("ipc", "", path).

    ValueError names the endpoint and the accepted forms otherwise.
    """
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return "ipc", "", endpoint[len("ipc://"):]
    m = _TCP.match(endpoint)
    if m and 0 < int(m["port"]) < 65536:
        return "tcp", m["host"].strip("[]"), int(m["port"])
    raise ValueError(f"endpoint {endpoint!r} is not tcp://HOST:PORT (port 1-65535) or ipc://PATH")


# ------------------------------------------------------------------------------- validation ----

@dataclass
class _Ctx:
    file: Path

    def error(self, key: str, problem: str, value: Any = dataclasses.MISSING) -> ConfigError:
        shown = "" if value is dataclasses.MISSING else f" = {_show(value)}"
        return ConfigError(f"{self.file}: {key}{shown}: {problem}")


def _show(value: Any) -> str:
    """A TOML-like, one-line, bounded rendering of a value for error messages."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(tp: Any) -> str:
    """What a value of type `tp` looks like, in words."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is Path:
        return "a file path (string)"
    if origin is Literal:
        return "one of " + ", ".join(_show(a) for a in args)
    if origin is tuple:
        item = args[0]
        if dataclasses.is_dataclass(item):
            return "a list of tables"
        if typing.get_origin(item) is tuple:
            return "a list of lists of " + _describe(item).removeprefix("a list of ")
        return "a list of " + {str: "strings", int: "integers", float: "numbers"}.get(item, "values")
    if origin is dict:
        return "a table"
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            return _describe(kinds[0])
        return "a table with kind = " + " or ".join(_show(_kind_of(a)) for a in kinds)
    if dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def _kind_of(cls: type) -> str:
    return typing.get_args(typing.get_type_hints(cls)["kind"])[0]


def _convert(tp: Any, value: Any, key: str, ctx: _Ctx, meta: dict[str, Any]) -> Any:
    """Check `value` (from tomllib) against type `tp`; return it converted (lists -> tuples)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    bad = ctx.error(key, f"expected {_describe(tp)}", value)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _convert(options[0], value, key, ctx, meta)
        # A tagged union of dataclasses: the `kind` key picks the class.
        if not isinstance(value, dict):
            raise bad
        kinds = {_kind_of(c): c for c in options}
        if "kind" not in value:
            raise ctx.error(f"{key}.kind", "missing required key (expected "
                            + " or ".join(map(_show, kinds)) + ")")
        if not isinstance(value["kind"], str) or value["kind"] not in kinds:
            raise ctx.error(f"{key}.kind", "expected one of " + ", ".join(map(_show, kinds)),
                            value["kind"])
        return _build(kinds[value["kind"]], value, key, ctx, from_key=meta.get("from_key"))
    if origin is Literal:
        if not any(type(value) is type(a) and value == a for a in args):
            raise bad
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad
        return value
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad
        if not math.isfinite(value):
            raise ctx.error(key, "expected a finite number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise bad
        p = Path(value).expanduser()
        return p if p.is_absolute() else (ctx.file.parent / p)
    if origin is tuple:
        if not isinstance(value, list):
            raise bad
        return tuple(_convert(args[0], v, f"{key}[{i}]", ctx, {}) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return {k: _convert(args[1], v, f"{key}.{k}", ctx, {"from_key": k}) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise bad
        return _build(tp, value, key, ctx, from_key=meta.get("from_key"))
    raise TypeError(f"config schema uses an unsupported type {tp!r} at {key}")  # a bug in this file


def _check(value: Any, key: str, ctx: _Ctx, meta: dict[str, Any]) -> None:
    """Range, pattern, shape, endpoint, module and file checks from the field metadata."""
    if value is None:
        return
    if "min" in meta and value < meta["min"]:
        raise ctx.error(key, f"expected a value >= {meta['min']}", value)
    if "max" in meta and value > meta["max"]:
        raise ctx.error(key, f"expected a value <= {meta['max']}", value)
    if "gt" in meta and not value > meta["gt"]:
        raise ctx.error(key, f"expected a value > {meta['gt']}", value)
    if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
        raise ctx.error(key, "expected a name of letters, digits, '_' or '-' starting with a letter",
                        value)
    if "shape" in meta:
        shape = meta["shape"]
        rows_ok = len(value) == shape[0]
        if len(shape) == 2:
            rows_ok = rows_ok and all(len(row) == shape[1] for row in value)
        if not rows_ok:
            what = f"{shape[0]} numbers" if len(shape) == 1 else f"{shape[0]} lists of {shape[1]} numbers"
            raise ctx.error(key, f"expected {what}", value)
    if meta.get("endpoint") and (value or meta["endpoint"] != "optional"):  # only a connect may be empty
        try:
            parse_endpoint(value)
        except ValueError:
            raise ctx.error(key, "expected tcp://HOST:PORT (port 1-65535) or ipc://PATH", value) from None
    if meta.get("module") and not re.fullmatch(_MODULE_NAME, value):
        raise ctx.error(key, "expected a dotted module name, e.g. \"daq.simulated\"", value)
    if meta.get("exists") and not value.exists():
        raise ctx.error(key, f"no such file or folder {str(value)!r} (make keys with `walklab keys`)")


def _build(cls: type, table: dict[str, Any], prefix: str, ctx: _Ctx, from_key: str | None = None) -> Any:
    """Validate a TOML table against dataclass `cls` and construct it."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    readable = [n for n, f in fields.items() if not f.metadata.get("from_key") and not f.metadata.get("internal")]
    dot = f"{prefix}." if prefix else ""
    for k in table:
        if k not in readable:
            close = difflib.get_close_matches(k, readable, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(readable)})"
            raise ctx.error(f"{dot}{k}", f"unknown key{hint}")
    kwargs: dict[str, Any] = {}
    for name in readable:
        f = fields[name]
        key = f"{dot}{name}"
        if name in table:
            value = _convert(hints[name], table[name], key, ctx, dict(f.metadata))
            _check(value, key, ctx, f.metadata)
            kwargs[name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.error(key, f"missing required key (expected {_describe(hints[name])})")
    for name, f in fields.items():
        if f.metadata.get("from_key") and from_key is not None:
            kwargs[name] = from_key
    return cls(**kwargs)


def _cross_checks(lab: Lab, ctx: _Ctx) -> None:
    """Checks that involve several keys: unique names and endpoints, device references, security."""
    seen_names: dict[str, int] = {}
    binds: dict[str, str] = {lab.supervisor.bind: "supervisor.bind"}
    for i, p in enumerate(lab.processes):
        key = f"processes[{i}]"
        if p.name in seen_names or p.name == "supervisor":
            raise ctx.error(f"{key}.name", "expected a unique process name (also not 'supervisor')", p.name)
        seen_names[p.name] = i
        if 0 < p.liveness_s < 2.0:
            raise ctx.error(f"{key}.liveness_s", "expected 0 (no liveness check) or at least 2 s: health frames "
                            "come once a second, so a shorter limit restarts healthy processes", p.liveness_s)
        if p.started_here and p.bind in binds:
            raise ctx.error(f"{key}.bind", f"endpoint already bound by {binds[p.bind]}", p.bind)
        if not p.remote:  # a remote process binds on its own machine
            binds[p.bind] = f"{key}.bind"
        for j, d in enumerate(p.devices):
            if d not in lab.devices:
                close = difflib.get_close_matches(d, list(lab.devices), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ctx.error(f"{key}.devices[{j}]", f"expected the name of a [devices.NAME] section{hint}", d)
    for name, d in lab.devices.items():
        if isinstance(d, ForcePlate) and d.type == 4 and d.cal_matrix is None:
            raise ctx.error(f"devices.{name}.cal_matrix", "missing: a type-4 plate needs a 6x6 calibration matrix")
        if isinstance(d, Mcu):
            for j, m in enumerate(d.motors):
                if not re.fullmatch(NAME_PATTERN, m) or d.motors.index(m) != j:
                    raise ctx.error(f"devices.{name}.motors[{j}]", "expected distinct names of letters, digits, "
                                    "'_' or '-' starting with a letter", m)
    _unique_streams(lab, ctx)
    owners = [("supervisor", lab.supervisor)] + [(f"processes[{i}]", p) for i, p in enumerate(lab.processes)]
    for key, owner in owners:
        for ep_key in ("bind", "connect"):
            ep = getattr(owner, ep_key)
            if ep and not is_local_endpoint(ep) and lab.bus.curve is None:
                raise ctx.error(f"{key}.{ep_key}", "a non-loopback endpoint needs [bus.curve] keys "
                                "(make them with `walklab keys`)", ep)
        transport, host, _ = parse_endpoint(owner.bind)
        if transport == "tcp" and host in ("*", "0.0.0.0", "::") and not owner.connect:
            raise ctx.error(f"{key}.connect", f"missing: {key}.bind = {_show(owner.bind)} binds every "
                            "interface, so subscribers need an address to connect to")


def _unique_streams(lab: Lab, ctx: _Ctx) -> None:
    """Every stream has one publisher: no two devices (nor a device and a health or supervisor
    stream) share a name, or a subscriber would see two interleaved streams as one."""
    owner: dict[str, str] = {"events/supervisor": "the supervisor", "health/supervisor": "the supervisor"}
    owner.update({f"health/{p.name}": f"processes[{i}] (its health)" for i, p in enumerate(lab.processes)})
    for name, d in lab.devices.items():
        named = isinstance(d, ForcePlate) and d.stream  # the key to name: the one that set the stream
        for stream in d.streams:
            if stream in owner:
                problem = f"stream {stream!r} is already published by {owner[stream]}: stream names must be unique"
                if named:
                    raise ctx.error(f"devices.{name}.stream", problem, d.stream)
                raise ctx.error(f"devices.{name}", problem)
            owner[stream] = f"devices.{name}"


def process_entry(lab: Lab, spec: Process) -> Callable[..., int]:
    """Import the module of process `spec` and return its ``run(ctx, args)``.

    ConfigError (one line: the key, the module file, the line and the error) when the module is
    not found, cannot be imported (syntax error, missing import, any exception at import time) or
    defines no ``run``.
    """
    index = lab.processes.index(spec)
    key = f"processes[{index}].module"
    ctx = _Ctx(lab.source)
    try:
        module = importlib.import_module(spec.module)
    except Exception as exc:  # noqa: BLE001 - whatever the import raised, one line for the user
        if isinstance(exc, ModuleNotFoundError) and exc.name and \
                (spec.module == exc.name or spec.module.startswith(exc.name + ".")):
            raise ctx.error(key, "expected an importable module (python -m MODULE): module not found",
                            spec.module) from None
        raise ctx.error(key, f"cannot import it: {_import_failure(exc)}", spec.module) from None
    run = getattr(module, "run", None)
    if not callable(run):
        raise ctx.error(key, "expected a module defining run(ctx, args) (see controller/proc.py)", spec.module)
    return run


def _import_failure(exc: BaseException) -> str:
    """``FILE line N: Type: message`` of an exception raised while importing a module."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where, message = f"{exc.filename} line {exc.lineno}", exc.msg
    else:
        # The innermost frame outside the import machinery: where the module (or what it
        # imports) failed, e.g. the line of a missing `import`.
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
        where = f"{frames[-1].filename} line {frames[-1].lineno}" if frames else "?"
        message = str(exc)
    first = (message.strip().splitlines() or [""])[0]
    return f"{where}: {type(exc).__name__}: {first}"


def check_processes(lab: Lab) -> None:
    """`process_entry` of every process of `lab` (``walklab config check`` and ``walklab run``)."""
    for spec in lab.processes:
        process_entry(lab, spec)


def load(path: str | Path) -> Lab:
    """Read and validate the lab config at `path`; ConfigError (one line) on any problem."""
    p = Path(path)
    ctx = _Ctx(p)
    try:
        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a folder, expected a TOML config file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: invalid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    lab = _build(Lab, raw, "", ctx)
    lab = dataclasses.replace(lab, source=p)
    _cross_checks(lab, ctx)
    return dataclasses.replace(lab, devices={n: _with_robot(n, d, ctx) for n, d in lab.devices.items()})


def _with_robot(name: str, device: Device, ctx: _Ctx) -> Device:
    """An MCU with ``robot`` set, its robot config read (`controller.synergies.robot.load_robot`) and its
    ``motors`` checked against the config's ``actuators``; any other device as it is."""
    if not isinstance(device, Mcu) or not device.robot:
        return device
    try:
        where = Path(device.robot).expanduser()
        if where.suffix and not where.is_absolute():  # a file: relative to the lab config, as its other paths
            where = ctx.file.parent / where
        robot = load_robot(where if where.suffix else device.robot)
    except (ValueError, OSError, RuntimeError) as exc:  # RobotConfigError; a name no path can be (NUL, ~nobody)
        raise ctx.error(f"devices.{name}.robot", str(exc).replace("\n", " "), device.robot) from None
    if device.motors != robot.actuators:
        raise ctx.error(f"devices.{name}.motors", f"expected the actuators of its robot config {robot.source}, "
                        f"{_show(list(robot.actuators))}", list(device.motors))
    return dataclasses.replace(device, robot_config=robot)
