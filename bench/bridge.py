"""Firmware bridge benchmark: frame encode/decode rates (Python vs the C reference) and the COMMAND ->
STATE round trip over a real pty at 1 kHz with the virtual MCU in its own process.

    python bench/bridge.py [--seconds 5] [--frames 50000]

Round trip: the host sends a COMMAND every 1 ms (absolute deadlines); the virtual MCU handles it at
its next 1 kHz tick and its STATE of that tick carries the COMMAND's seq in `ack`; latency = host
time at which the application receives that STATE - host time of the send. Includes up to one MCU
tick of waiting, the pty, both Python processes' scheduling and the link's reader thread.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.common import command, machine  # noqa: E402

import numpy as np  # noqa: E402

from firmware_bridge import protocol as P  # noqa: E402
from firmware_bridge.link import Link  # noqa: E402


def pct(a, qs=(50, 99)) -> str:
    a = np.asarray(a)
    return "  ".join(f"p{q} {np.percentile(a, q):8.1f}" for q in qs) + f"  max {a.max():8.1f}"


def bench_codec(n: int) -> None:
    msgs = [P.State(tuple(P.MotorState(k * (i + 1), k % 3000, 100 + i, 0xC1) for i in range(8))) for k in range(256)]
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        wires = [P.encode_frame(msgs[k & 255], k, 0, k * 1000) for k in range(n)]
        runs.append((time.perf_counter() - t) / n)
    enc = statistics.median(runs)
    stream = b"".join(wires)
    runs = []
    for _ in range(5):
        dec = P.StreamDecoder()
        t = time.perf_counter()
        for i in range(0, len(stream), 4096):  # serial-read-sized chunks
            dec.feed(stream[i:i + 4096])
        runs.append((time.perf_counter() - t) / n)
        assert dec.frames == n and not dec.errors
    dec_t = statistics.median(runs)
    print(f"Python encode_frame(STATE, 8 motors, {len(wires[0])} B on the wire): {1 / enc:10.0f} frames/s "
          f"({enc * 1e6:.2f} µs, median of 5 x {n})")
    print(f"Python StreamDecoder.feed (4 KiB chunks):              {1 / dec_t:10.0f} frames/s ({dec_t * 1e6:.2f} µs)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("C reference: no C compiler, skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "wl_tool"
        c_dir = REPO / "firmware_bridge" / "c"
        subprocess.run([cc, "-std=c99", "-O2", "-I", str(c_dir), "-o", str(exe), str(c_dir / "wl_tool.c")], check=True)
        out = [subprocess.run([str(exe)], input=f"bench {n}\n", capture_output=True, text=True, check=True).stdout.split()
               for _ in range(5)]
    e = statistics.median(float(o[1]) for o in out)
    d = statistics.median(float(o[3]) for o in out)
    print(f"C reference (cc -O2, bitwise CRC) encode:              {1e9 / e:10.0f} frames/s ({e / 1000:.2f} µs)")
    print(f"C reference wl_decoder_push per byte, per frame:       {1e9 / d:10.0f} frames/s ({d / 1000:.2f} µs)")


def bench_round_trip(seconds: float) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "firmware_bridge.virtual", "--motors", "8", "--stream-hz", "1000"],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        port = proc.stdout.readline().strip()
        with Link(port, heartbeat_hz=0) as link:
            caps = link.hello(timeout_s=1.0)
            cmd = P.Command(tuple(P.MotorCommand(P.MODE_VELOCITY, 1.0) for _ in range(caps.n_motors)))
            n = int(seconds * 1000)
            t_send = np.full(n, np.nan)  # written before each send, so the receiver never sees a gap
            lat: list[float] = []
            late: list[float] = []
            first = link.send(cmd)  # the link numbers frames consecutively: command k has seq first + k
            t_send[0] = time.perf_counter()
            done = threading.Event()

            def receiver() -> None:
                next_k = 0
                while not done.is_set():
                    f = link.recv(0.01)
                    if f is None or not isinstance(f.msg, P.State):
                        continue
                    now = time.perf_counter()
                    k_acked = (f.ack - first) & 0xFFFF
                    while next_k <= k_acked and next_k < n and not np.isnan(t_send[next_k]):
                        lat.append((now - t_send[next_k]) * 1e3)
                        next_k += 1

            th = threading.Thread(target=receiver, daemon=True)
            th.start()
            t0 = t_send[0]
            for k in range(1, n):
                deadline = t0 + k * 1e-3
                d = deadline - time.perf_counter()
                if d > 0:
                    time.sleep(d)
                now = time.perf_counter()
                late.append((now - deadline) * 1e3)
                t_send[k] = now
                link.send(cmd)
            time.sleep(0.3)
            done.set()
            th.join()
            st = link.stats
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    print(f"round trip COMMAND -> STATE(ack) over pty, 8 motors, 1 kHz, {n} commands, MCU in its own process:")
    print(f"  latency ms: {pct(lat, (50, 90, 99))}  (answered {len(lat)} of {n})")
    print(f"  host send lateness ms: {pct(late)}")
    print(f"  link: lost frames {st.lost_frames}, rejected {sum(st.rejected.values())}, "
          f"STATE frames {st.frames.get('STATE', 0)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="round-trip run length (default 5)")
    ap.add_argument("--frames", type=int, default=50_000, help="frames per codec run (default 50000)")
    args = ap.parse_args()
    print("command:", command())
    print("machine:", machine())
    bench_codec(args.frames)
    bench_round_trip(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
