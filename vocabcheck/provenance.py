"""Which code a report measured, when and where: one line for the header of every report (``bench --report`` and
the scripts under ``benchmarks/``), so that a report says what it is a measurement of.

The commit is the checkout that holds this package (``git rev-parse --short HEAD``), with ``+dirty`` where tracked
files under ``vocabcheck/`` differ from it; ``unknown`` where there is no checkout (an installed package) or no git.
Nothing here raises: a report is never lost for want of its provenance.
"""

from __future__ import annotations

import dataclasses
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from .machine import machine_description

CHECKOUT = Path(__file__).resolve().parent.parent
"""The directory above the package: a git checkout when vocabcheck runs from one."""


@dataclasses.dataclass(frozen=True)
class Provenance:
    commit: str
    """``abc1234``, ``abc1234+dirty`` or ``unknown``."""
    date: str
    """When the report was made, in UTC: ``2026-12-05 14:03 UTC``."""
    machine: str
    """:func:`vocabcheck.machine.machine_description`, or what the caller measured on (a device, say)."""

    def line(self) -> str:
        """``measured at: commit `abc1234` (2026-12-05 14:03 UTC), machine: x86_64, ...``: a report header's line."""
        return f"measured at: commit `{self.commit}` ({self.date}), machine: {self.machine}"


def _git(checkout: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit(checkout: Path = CHECKOUT) -> str:
    """The checkout's short commit hash, ``+dirty`` where tracked files under vocabcheck/ were changed; ``unknown``
    where ``checkout`` is not the top of a git checkout or git cannot be run."""
    if not (checkout / ".git").exists():
        return "unknown"
    head = _git(checkout, "rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    changed = _git(checkout, "status", "--porcelain", "--untracked-files=no", "--", "vocabcheck")
    return head + ("+dirty" if changed else "")


def current(machine: str | None = None, checkout: Path = CHECKOUT) -> Provenance:
    """This process's provenance: the commit of ``checkout``, now (UTC), and ``machine`` (else this machine's
    :func:`~vocabcheck.machine.machine_description`)."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Provenance(commit(checkout), now, machine if machine is not None else machine_description())
