"""`walklab run --script`: the status keeps coming while a scripted command waits for the loop.

A scripted command waits up to `SCRIPT_TIMEOUT_S` (30 s) for the control loop's confirmation. Here the
loop is a remote process (`remote = true`) whose health frames the test publishes on a real socket,
so the lab is up, but nothing subscribes at its operator endpoint: the command fails after 30 s. The
run's plain status lines (one every 5 s without a terminal) must go on meanwhile — they stopped for
the whole wait when the command was sent from the status loop itself.
"""
from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import configs
from controller.status import SCRIPT_TIMEOUT_S
from daq.bus import Publisher
from daq.health import Health
from daq.ports import on_free_ports

REPO = Path(__file__).resolve().parents[2]


def test_the_status_goes_on_while_a_scripted_command_waits(tmp_path):
    text = configs.path("sim_plates.toml").read_text()
    text, free = on_free_ports(text, extra=2)
    loop_ep, operator = f"tcp://127.0.0.1:{free[0]}", f"tcp://127.0.0.1:{free[1]}"
    text += (f'\n[[processes]]\nname = "loop"\nmodule = "controller.loop"\nbind = "{loop_ep}"\n'
             f'args = ["--robot", "jansen_world", "--operator", "{operator}"]\nremote = true\n')
    lab, script = tmp_path / "lab.toml", tmp_path / "script.toml"
    lab.write_text(text)
    script.write_text('[[command]]\nat = 0.5\nspeed = 0.2\nlabel = "walk"\n')
    done = threading.Event()
    with Publisher(loop_ep) as pub:
        health = Health("loop", pub)

        def beat() -> None:  # the remote loop's health, once a second, until the run ends
            while not done.wait(0.1):
                health.tick()

        beater = threading.Thread(target=beat)
        beater.start()
        try:
            out = subprocess.run([sys.executable, "-m", "controller.cli", "run", str(lab), "--script", str(script),
                                  "--duration", str(SCRIPT_TIMEOUT_S + 6)], cwd=REPO, capture_output=True,
                                 text=True, timeout=600)
        finally:
            done.set()
            beater.join(60)
    lines = out.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if "script: walk" in line and "FAILED" in line]
    assert out.returncode == 1 and failed, out.stdout + out.stderr
    assert "no control loop subscribed" in lines[failed[0]]
    status = [i for i, line in enumerate(lines) if re.match(r"walklab run: +[\d.]+ s, \d+ streams", line)]
    waited = [float(lines[i].split()[2]) for i in status if i < failed[0]]
    # lines at 0, 5, 10, ... s of the run while the command (sent at 0.5 s) waited 30 s for its answer
    assert len(waited) >= 4 and max(waited) > 10.0, out.stdout
