"""The machine a measurement ran on, described one way for every report (``bench --report`` and ``benchmarks/``).

Cores are the ones this process may run on (``os.sched_getaffinity``: a container or ``taskset`` limits them), not
the machine's total: that is what a measurement could use. :class:`CpuSample` says how busy the machine was while
something ran (other processes' share of its CPUs). A leaf module: it imports nothing from vocabcheck.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path


def usable_cores() -> int:
    """How many CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_description() -> str:
    """``x86_64, AMD EPYC 7763 64-Core Processor, 2 cores, Python 3.11.7, torch 2.13.0+cpu``: architecture,
    processor model, usable cores, Python, and torch's version where it is installed (read from its metadata: torch
    is not imported)."""
    try:
        torch = f", torch {importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        torch = ""
    return (f"{platform.machine()}, {cpu_model()}, {usable_cores()} cores, "
            f"Python {platform.python_version()}{torch}")


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


BUSY_SHARE = 0.25  # other processes' share of the CPUs beyond which a timing is theirs as much as ours


@dataclass(frozen=True)
class CpuSample:
    """The machine's busy CPU seconds (every process, and time a hypervisor took: ``steal``) and this process's own,
    at one moment; ``busy`` is None where the system does not say (no ``/proc/stat``)."""

    at: float
    busy: float | None
    own: float

    @classmethod
    def now(cls) -> "CpuSample":
        return cls(time.monotonic(), _busy_seconds(), _own_seconds())

    def others_share(self, since: "CpuSample", own_children: float = 0.0) -> float | None:
        """The share of this machine's CPUs that other processes (or the hypervisor) used between ``since`` and this
        sample: 0 on an idle machine, 0.5 with one busy-looping process beside us on two cores. None where unknown.
        ``own_children``: CPU seconds that processes of our own (still running, so not in our own times) used
        meanwhile, as they say."""
        wall = self.at - since.at
        if self.busy is None or since.busy is None or wall <= 0:
            return None
        others = (self.busy - since.busy) - (self.own - since.own) - own_children
        return max(0.0, others / (wall * (os.cpu_count() or 1)))


def _busy_seconds() -> float | None:
    """Busy CPU seconds of the whole machine since boot, from ``/proc/stat``'s first line (user, nice, system, irq,
    softirq and steal; idle and iowait left out); None where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system
