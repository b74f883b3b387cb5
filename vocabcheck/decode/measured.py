"""What a machine measured once, kept for its later processes: small JSON files in vocabcheck's cache directory
(:func:`vocabcheck.machine.cache_root`), one entry per key under the machine that measured it (processor model,
torch version, thread count), so that a cold ``vocabcheck run`` starts from what earlier runs on this machine
learned instead of paying again to learn it. Two stores use it: the CPU head's kernel choices
(:mod:`vocabcheck.decode.head`, ``head-kernels.json``) and ``-k auto``'s step costs and pooled acceptance
(:mod:`vocabcheck.decode.costs`, ``step-costs.json``).

What is kept only ever speeds a later process up: a file that cannot be read or written, or holds what this code
did not write, costs only the measuring again (each store checks the values it reads), and deleting the files
starts over. Writes are a read, a merge and an atomic replace: a concurrent process loses at most its own entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .. import atomic
from ..machine import cache_root, cpu_model


class MachineStore:
    """``{"version": 1, "machines": {machine: {key: value}}}`` in ``cache_root() / name``; at most ``keep`` keys per
    machine (the least recently written leave first)."""

    version = 1
    max_bytes = 1 << 20  # a file larger than any that this code writes is not read

    def __init__(self, name: str, keep: int = 256):
        self.name, self.keep = name, keep

    def path(self) -> Path:
        return cache_root() / self.name

    @staticmethod
    def machine() -> str:
        return f"{cpu_model()}; torch {torch.__version__}; {torch.get_num_threads()} threads"

    def _load(self) -> dict:
        try:
            path = self.path()
            if path.stat().st_size > self.max_bytes:
                return {}
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if (not isinstance(data, dict) or data.get("version") != self.version
                or not isinstance(data.get("machines"), dict)):
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
            atomic.write_text(self.path(), json.dumps(data, indent=1) + "\n")
        except OSError:
            pass
