"""A session as an MCAP file the Foxglove app plots: JSON messages with JSON schemas.

Foxglove decodes JSON (not msgpack) messages, so `export` rewrites a session (`daq.sessions.read`)
with ``message_encoding = "json"`` and one ``jsonschema`` schema per stream; topic =
``"/" + stream``. One message per **sample** (plots want one value per message), ``log_time`` =
``publish_time`` = the sample's lab time [ns] (``t + round(i * 1e9 / rate_hz)``):

- regular streams: ``{"seq": int, "i": int, "t_ns": int, CHANNEL: number | null, ...}`` (``seq``
  of the frame, ``i`` the sample's row in it, NaN as null since JSON has no NaN); plot e.g.
  ``/forceplate/FP1.Fz``;
- marker streams (kind ``markers``, channels ``LABEL:x/y/z``): ``{"seq", "i", "t_ns", "markers":
  {LABEL: {"x", "y", "z", "residual"}}}`` in m, null when occluded;
- event streams (kind ``event``): one message per frame ``{"seq", "t_ns", "event", "severity",
  "meta": {...}}``.

Units are in each schema's property ``description``; a stream whose channels change (a health
stream gaining a subject) gets a new schema and channel on the same topic from that frame on. The
file's ``walklab/*`` metadata records are copied.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from daq.frames import Frame

_NUM = {"type": ["number", "null"]}


def schema(frame: Frame) -> dict[str, Any]:
    """The JSON schema of the messages `messages` makes from ``frame``'s stream."""
    base = {"seq": {"type": "integer"}, "t_ns": {"type": "integer"}}
    if frame.kind == "event":
        props = {**base, "event": {"type": ["string", "null"]}, "severity": {"type": ["string", "null"]},
                 "meta": {"type": "object"}}
        required = ["seq", "t_ns", "meta"]
    elif frame.kind == "markers":
        from daq.sessions import marker_labels

        point = {"type": "object", "additionalProperties": False, "required": ["x", "y", "z", "residual"],
                 "properties": {"x": _NUM, "y": _NUM, "z": _NUM, "residual": _NUM}}
        labels = marker_labels(frame.channels)
        props = {**base, "i": {"type": "integer"},
                 "markers": {"type": "object", "additionalProperties": False, "required": list(labels),
                             "properties": {label: {**point, "description": f"{label}: m, lab frame"}
                                            for label in labels}}}
        required = ["seq", "i", "t_ns", "markers"]
    else:
        props = {**base, "i": {"type": "integer"},
                 **{c: {**_NUM, "description": u} for c, u in zip(frame.channels, frame.units)}}
        required = ["seq", "i", "t_ns", *frame.channels]
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": frame.stream, "type": "object",
            "additionalProperties": False, "required": required, "properties": props}


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def messages(frame: Frame) -> list[tuple[int, dict[str, Any]]]:
    """(lab time [ns], JSON object) of every message of one frame (module docstring)."""
    if frame.kind == "event":
        return [(frame.t, {"seq": frame.seq, "t_ns": frame.t, "event": frame.meta.get("event"),
                           "severity": frame.meta.get("severity"), "meta": frame.meta})]
    times = frame.sample_times().tolist() if frame.samples > 1 else [frame.t]
    rows = frame.data.tolist()
    out = []
    if frame.kind == "markers":
        from daq.sessions import marker_labels

        labels = marker_labels(frame.channels)
        res = frame.extra.get("residual")
        res_rows = res.tolist() if res is not None else [[math.nan] * len(labels)] * len(rows)
        for i, (t, row, rr) in enumerate(zip(times, rows, res_rows)):
            pts = {lab: {"x": _num(row[3 * k]), "y": _num(row[3 * k + 1]), "z": _num(row[3 * k + 2]),
                         "residual": _num(rr[k])} for k, lab in enumerate(labels)}
            out.append((t, {"seq": frame.seq, "i": i, "t_ns": t, "markers": pts}))
        return out
    for i, (t, row) in enumerate(zip(times, rows)):
        msg = {"seq": frame.seq, "i": i, "t_ns": t}
        msg.update(zip(frame.channels, map(_num, row)))
        out.append((t, msg))
    return out


def export(paths: Any, out: str | Path, streams: Sequence[str] = (),
           progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Write the Foxglove MCAP ``out`` of a session; returns messages per topic."""
    from mcap.writer import CompressionType, Writer

    from daq.sessions import metadata, read

    out = Path(out)
    if out.suffix != ".mcap":
        raise ValueError(f"{out}: the Foxglove export must be an .mcap file")
    counts: dict[str, int] = {}
    channels: dict[tuple, int] = {}
    scans: list = []
    with open(out, "wb") as fh:
        w = Writer(fh, chunk_size=2**20, compression=CompressionType.ZSTD)
        w.start(profile="", library="walklab sessions export --foxglove")
        for n, f in enumerate(read(paths, streams, scans=scans)):
            key = (f.stream, f.kind, f.channels, f.units)
            cid = channels.get(key)
            if cid is None:  # a stream whose channels change gets another schema (same topic, a new channel)
                sid = w.register_schema(f.stream, "jsonschema", json.dumps(schema(f)).encode())
                cid = channels[key] = w.register_channel("/" + f.stream, "json", sid)
            for t, msg in messages(f):
                w.add_message(cid, max(t, 0), json.dumps(msg, allow_nan=False).encode(), max(t, 0),
                              counts.get(f.stream, 0) % 2**32)
                counts[f.stream] = counts.get(f.stream, 0) + 1
            if progress is not None and n % 1000 == 0:
                progress(n)
        for name, data in metadata(scans).items():
            w.add_metadata(name, data)
        w.finish()
    return counts
