"""The machine a measurement ran on, described one way for every report (``bench --report`` and ``benchmarks/``).

Cores are the ones this process may run on (``os.sched_getaffinity``: a container or ``taskset`` limits them), not
the machine's total: that is what a measurement could use. A leaf module: it imports nothing from vocabcheck.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path


def usable_cores() -> int:
    """How many CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_description() -> str:
    """``x86_64, x86_64, 2 cores, Python 3.11.7``: architecture, processor, usable cores, Python."""
    return (f"{platform.machine()}, {platform.processor() or 'cpu'}, {usable_cores()} cores, "
            f"Python {platform.python_version()}")


@functools.cache
def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``'s first "model name"), else what :mod:`platform` knows; read
    once per process (each kept choice or cost reads and writes under it)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cache_root() -> Path:
    """Where vocabcheck keeps what it builds or measures once per machine: $VOCABCHECK_CACHE, else
    $XDG_CACHE_HOME/vocabcheck, else ~/.cache/vocabcheck."""
    if os.environ.get("VOCABCHECK_CACHE"):
        return Path(os.environ["VOCABCHECK_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vocabcheck"
