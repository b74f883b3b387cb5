"""A bound on the work a refusal may cost, in CPU seconds rather than wall-clock ones: this process's threads and the
children it has waited for. Other processes on a busy machine slow a test's clock but not its CPU seconds, so a bound
that catches a parser gone quadratic (minutes of CPU) does not catch a machine that is merely shared."""

from __future__ import annotations

import resource
from contextlib import contextmanager


def cpu_seconds() -> float:
    """User and system seconds of this process and of its waited-for children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def cpu_budget(seconds: float):
    """Fails the test where the block used more than ``seconds`` of CPU."""
    started = cpu_seconds()
    yield
    used = cpu_seconds() - started
    assert used < seconds, f"used {used:.1f} CPU seconds, more than the {seconds} s budget"
