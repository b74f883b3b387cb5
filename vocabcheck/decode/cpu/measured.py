"""What a machine measured once, kept for its later processes: small JSON files in vocabcheck's cache directory
(:func:`vocabcheck.machine.cache_root`), one entry per key under the machine that measured it (processor model,
torch version, thread count), so that a cold ``vocabcheck run`` starts from what earlier runs on this machine
learned instead of paying again to learn it. Two stores use it: the CPU head's kernel choices
(:mod:`vocabcheck.decode.cpu.head`, ``head-kernels.json``) and ``-k auto``'s step costs and pooled acceptance
(:mod:`vocabcheck.decode.auto.costs`, ``step-costs.json``).

What is kept only ever speeds a later process up: a file that cannot be read or written, or holds what this code
did not write, costs only the measuring again (each store checks the values it reads), and deleting the files
starts over. A kept file is read only if it is a regular file (never a FIFO, a device or a symbolic link, never
blocking) of at most ``max_bytes``, parsed with Python's bounded recursion; one that fails any of that is set aside
(renamed ``NAME.unusable-TIME``; ``--debug`` says why) and rebuilt, and writing replaces whatever is at the path,
never writing through a link (to ``/dev/stdout``, say). Writes are a read, a merge and an atomic replace: a concurrent process loses at most its own entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ... import atomic
from ...machine import cache_root, cpu_model


class MachineStore:
    """``{"version": 1, "machines": {machine: {key: value}}}`` in ``cache_root() / name``; at most ``keep`` keys per
    machine (the least recently written leave first)."""

    version = 1
    max_bytes = 1 << 20  # a file larger than any that this code writes is not read

    def __init__(self, name: str, keep: int = 256):
        self.name, self.keep = name, keep
        self.set_aside = 0  # how many times this process set the file aside (its users say their state was discarded)

    def path(self) -> Path:
        return cache_root() / self.name

    @staticmethod
    def machine() -> str:
        return f"{cpu_model()}; torch {torch.__version__}; {torch.get_num_threads()} threads"

    def _load(self) -> dict:
        path = self.path()
        try:
            data = json.loads(atomic.read_regular(path, self.max_bytes).decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:  # a special file, too large, not JSON, too deep
            self.set_aside += 1
            set_aside(path, _why(exc))
            return {}
        if (not isinstance(data, dict) or data.get("version") != self.version
                or not isinstance(data.get("machines"), dict)):
            self.set_aside += 1
            set_aside(path, "not a vocabcheck state file of this version")
            return {}
        return data

    def get(self, key: str) -> object | None:
        """This machine's value for ``key`` as JSON gave it (the caller checks it), or None."""
        entries = self._load().get("machines", {}).get(self.machine())
        return entries.get(key) if isinstance(entries, dict) else None

    def put(self, key: str, value: object) -> None:
        """Keep ``value`` (JSON-able) for ``key`` on this machine; a cache directory that cannot be written is left
        alone."""
        data = self._load() or {"version": self.version, "machines": {}}
        entries = data["machines"].get(self.machine())
        entries = dict(entries) if isinstance(entries, dict) else {}
        entries.pop(key, None)
        entries[key] = value
        data["machines"][self.machine()] = dict(list(entries.items())[-self.keep:])
        try:
            atomic.replace_bytes(self.path(), (json.dumps(data, indent=1) + "\n").encode("utf-8"))
        except OSError:
            pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deep to parse"
    return getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200] or type(exc).__name__


def set_aside(path: Path, why: str) -> None:
    """Rename an unusable kept file out of the way (what a user may want to look at stays on disk) so that it is
    rebuilt; a note on stderr under ``--debug``. A rename that fails leaves it, to be replaced by the next write."""
    import os
    import time

    aside = path.with_name(f"{path.name}.unusable-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(path, aside)
    except OSError:
        aside = None
    where = f"; moved to {aside}" if aside else ""
    debug_note(f"kept state {path} set aside: {why}{where}")


def debug_note(message: str) -> None:
    """A line on stderr about kept state, under ``--debug`` (or ``VOCABCHECK_DEBUG``) only."""
    import os
    import sys

    if os.environ.get("VOCABCHECK_DEBUG", "") not in ("", "0") or "--debug" in sys.argv:
        print(f"debug: {message}", file=sys.stderr)
