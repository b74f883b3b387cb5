"""Signals as exceptions, for the command line.

The command line runs each command inside :class:`handled`: SIGINT raises ``KeyboardInterrupt``, SIGTERM and SIGHUP
raise :class:`Terminated`, in the main thread. The stack unwinds, so every ``finally`` runs and
:mod:`vocabcheck.atomic` removes its temporary files, and the command exits with 130, 143 or 129. Nothing is
installed when vocabcheck is used as a library, and a signal the process ignores (``nohup``, a background job)
stays ignored.

Two rules make an interrupt count wherever it lands:

- **Never inside an import.** An exception raised while a module is being imported leaves the submodules it has
  imported so far in ``sys.modules``, so that a later import of the module in the same process fails half-way
  ("module 'numpy' has no attribute 'ndarray'"); and C code that imports can swallow it: ``import torch`` initialises
  NumPy from C++ and turns any failure, KeyboardInterrupt included, into a warning, so the command ran on to the end.
  A signal that arrives while a module is being imported is held until the outermost import returns to the code
  that asked for it, and raised there, before that code goes on.
- **Never lost.** What arrived is recorded; a command that returns normally after a library swallowed the exception
  (in a ``__del__``, a callback run from C) still exits with the signal's code.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

MESSAGES = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}
if hasattr(signal, "SIGHUP"):  # not on Windows
    MESSAGES[signal.SIGHUP] = "hung up (SIGHUP)"
EXIT_CODES = frozenset(128 + signum for signum in MESSAGES)  # ExitCode.INTERRUPTED, TERMINATED, HUNG_UP

_IMPORT_MACHINERY = frozenset({"importlib._bootstrap", "importlib._bootstrap_external", "_frozen_importlib",
                               "_frozen_importlib_external"})


class Terminated(BaseException):
    """SIGTERM or SIGHUP. A BaseException like KeyboardInterrupt, so that ``except Exception`` lets it through; not a
    KeyboardInterrupt, so that code that stops early on Ctrl-C and reports what it has (``run``, ``bench``) does not
    take a request to terminate for one."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal an interrupt exception stands for."""
    return exc.signum if isinstance(exc, Terminated) else signal.SIGINT


def exit_code(signum: int) -> int:
    """The exit code a signal stops a command with (:class:`vocabcheck.errors.ExitCode`: 128 + the signal's number)."""
    from .errors import ExitCode

    return ExitCode(128 + signum)


def report(signum: int) -> int:
    """Say on stderr that the command was stopped and by what; returns the exit code. After SIGHUP the terminal may be
    gone: nothing is said then."""
    try:
        print(MESSAGES[signum], file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass
    return exit_code(signum)


class Signals:
    """What one command's handlers saw: ``received`` is the first signal that arrived (``None``: none)."""

    def __init__(self, base: FrameType | None):
        self.received: int | None = None
        self._base = base  # the frame that installed the handlers: imports it is running itself are not held up
        self._held: int | None = None  # a signal not raised yet
        self._deferring = 0  # depth of deferred() blocks
        self._importer: FrameType | None = None  # where the held signal is raised once its import returns
        self._importer_trace: Any = None
        self._trace_was: Any = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._held is None:  # a second signal while one is held changes nothing
            self._held = signum
            self._deliver(frame)

    def _deliver(self, frame: FrameType | None) -> None:
        """Raise the held signal in ``frame`` now, or arrange for it to be raised where that is safe."""
        if self._deferring:  # raised when the outermost deferred() block ends
            return
        importer = self._outermost_importer(frame)
        if importer is not None:
            self._trace(importer)
            return
        raise _exception(self._release())

    def _outermost_importer(self, frame: FrameType | None) -> FrameType | None:
        """The frame that started the import the interrupted code runs in, or ``None`` when it runs in no import."""
        importer = None
        while frame is not None and frame is not self._base:
            if frame.f_globals.get("__name__") in _IMPORT_MACHINERY and frame.f_back is not None:
                importer = frame.f_back
            frame = frame.f_back
        return importer

    def _trace(self, importer: FrameType) -> None:
        """Raise the held signal in ``importer`` at its next event: the next line after the import, its return, or
        the exception the import raised. Tracing is on meanwhile (new frames are not traced), off again after."""
        self._importer = importer
        self._importer_trace, self._trace_was = importer.f_trace, sys.gettrace()
        importer.f_trace = self._resume
        importer.f_trace_lines = True
        if self._trace_was is None:
            sys.settrace(_untraced)

    def _resume(self, frame: FrameType, event: str, arg: Any) -> Any:
        self._untrace()
        if self._deferring:  # the import ran inside a deferred() block: it delivers the signal when it ends
            return None
        raise _exception(self._release())  # raised from a trace function, it also ends tracing, as settrace(None)

    def _untrace(self) -> None:
        importer, self._importer = self._importer, None
        if importer is not None:
            importer.f_trace = self._importer_trace
            if self._trace_was is None:
                sys.settrace(None)

    def _release(self) -> int:
        signum, self._held = self._held, None
        self._untrace()
        return signum


class handled:
    """``with handled() as signals:`` SIGINT, SIGTERM and SIGHUP raise in the main thread until the block ends; then
    the handlers that were there before are back. Nested blocks share the outer one's handlers. Outside the main
    thread (where Python cannot install handlers) nothing is installed."""

    _active: Signals | None = None

    def __enter__(self) -> Signals:
        if handled._active is not None:
            self._installed: dict[int, Any] | None = None
            return handled._active
        signals = Signals(sys._getframe(1))
        if threading.current_thread() is not threading.main_thread():
            self._installed = None
            return signals
        self._installed = {}
        for signum in MESSAGES:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:  # ignored on purpose, or set outside Python: kept
                continue
            self._installed[signum] = signal.signal(signum, signals._handle)
        self._signals = handled._active = signals
        return signals

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._installed is None:
            return
        for signum, previous in self._installed.items():
            signal.signal(signum, previous)
        self._signals._untrace()
        handled._active = None


@contextmanager
def deferred() -> Iterator[None]:
    """``with deferred():`` a signal that arrives inside the block is raised when the block ends, so the block runs
    whole: a cleanup, or a commit of several renames. Without the command line's handlers (vocabcheck used as a
    library), or outside the main thread, it changes nothing."""
    signals = handled._active
    if signals is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    signals._deferring += 1
    try:
        yield
    finally:
        signals._deferring -= 1
        if not signals._deferring and signals._held is not None and signals._importer is None:
            signals._deliver(sys._getframe())


def _exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _untraced(frame: FrameType, event: str, arg: Any) -> None:
    return None
