"""Stopping a command at a chosen moment: by raising an exception there, or by delivering a real signal there.

``signal.raise_signal`` sends the signal to the calling thread and runs the Python-level handler before it returns,
so a handler that raises does so at that very line: no timing is involved.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

# what stops a command → (exit code, what stderr says afterwards: Ctrl-C inside a command ends silently, as typer
# makes it; SIGTERM and SIGHUP say so in one line)
STOPS = {
    "KeyboardInterrupt": (KeyboardInterrupt(), 130, []),
    "SIGINT": (signal.SIGINT, 130, []),
    "SIGTERM": (signal.SIGTERM, 143, ["terminated (SIGTERM)"]),
    "SIGHUP": (signal.SIGHUP, 129, ["hung up (SIGHUP)"]),
}


def stops(*names: str) -> list:
    """pytest params (what, exit code, stderr lines) for the named ways to stop a command."""
    return [pytest.param(*STOPS[name], id=name) for name in names]


class UnhandledSignal(Exception):
    """Raised by the tests' fallback handlers: the code under test had no handler of its own for this signal."""


def stop(how: BaseException | int) -> NoReturn:
    """Stop here: raise the exception ``how``, or deliver the signal ``how`` to this thread."""
    if isinstance(how, BaseException):
        raise how
    signal.raise_signal(how)
    raise AssertionError(f"{signal.Signals(how).name} was delivered and nothing raised")


@contextmanager
def fallback_handlers() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`UnhandledSignal` instead of ending the test process (their default), so a
    command that forgot its own handlers fails its test instead of killing the run."""

    def unhandled(signum, frame):
        raise UnhandledSignal(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, unhandled) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
