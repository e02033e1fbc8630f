"""What every benchmark prints first: the machine and the command, so a figure can be traced."""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def machine(*extra: str) -> str:
    """'CPU model, cores, OS, Python, load average' plus any `extra` items (library versions)."""
    cpu = platform.processor() or "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    items = [cpu, f"{os.cpu_count()} cores", f"{platform.system()} {platform.release()}",
             f"Python {platform.python_version()}", *extra, f"load average {load}"]
    return ", ".join(items)


def command() -> str:
    """The command line that ran this benchmark."""
    return " ".join(["python", os.path.relpath(sys.argv[0])] + sys.argv[1:])
