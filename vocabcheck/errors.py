"""User-facing errors.

Every failure a user can act on is a :class:`VocabcheckError`: it names the file (or hub id) and the problem, and the
CLI renders it as one line with exit code 2. Anything else that escapes is a bug in vocabcheck (exit code 3).
"""

from __future__ import annotations

from enum import IntEnum

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .text import printable

# where a bug is reported: vocabcheck has no public address (README), so to whoever gave the user their copy
REPORT_BUGS = ("to whoever maintains your copy of vocabcheck (it has no public address), with the command line and "
               "the traceback that --debug adds")


class ExitCode(IntEnum):
    """What every command exits with (the README's table): the one home of these numbers."""

    OK = 0
    FAILED = 1  # a pair refused or a check that failed (incompatible pair, output that differs, a gate pair)
    BAD_INPUT = 2  # a file, a model, an option: one line naming it
    BUG = 3  # an internal error
    HUNG_UP = 128 + 1  # SIGHUP
    INTERRUPTED = 128 + 2  # Ctrl-C (SIGINT)
    TERMINATED = 128 + 15  # SIGTERM


class VocabcheckError(Exception):
    """A problem with the user's input: a file, a model, a manifest, an option.

    ``where`` is the file, directory or hub id the problem is about (``None`` when it is about the command line).
    """

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, problem: str, where: str | Path | None = None):
        super().__init__(problem)
        self.problem = problem
        self.where = None if where is None else str(where)

    def one_line(self) -> str:
        """``where: problem`` on one line, control characters of either part as visible escapes (a file name from a
        shard index may hold ESC sequences)."""
        text = f"{self.where}: {self.problem}" if self.where else self.problem
        return printable(" ".join(text.split()))


class InputError(VocabcheckError):
    """A file exists but cannot be used: malformed, truncated, over a size limit, inconsistent."""


class SourceNotFound(VocabcheckError):
    """A path or hub id that does not resolve to anything."""


class UnsupportedModel(VocabcheckError):
    """A model that vocabcheck will not read (custom tokenizer code, an unknown format)."""


class ModelFailure(VocabcheckError):
    """transformers raised inside a model's own code while running it (its ``generate`` or forward): the model's
    failure, not vocabcheck's: one line, exit code 2."""


class RemoteError(VocabcheckError):
    """The hub could not be reached or refused the request (offline, gated, missing revision, server error)."""


class BadOption(VocabcheckError, ValueError):
    """An option out of its range (a decoding option, a sampling parameter): one line, exit code 2; library callers
    can catch it as the ValueError it also is."""


class RefusedPair(VocabcheckError):
    """A pair that a command refuses to work on because its verdict is incompatible (exit code 1)."""

    exit_code = ExitCode.FAILED


def exception_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: the first line of its message`` (clipped to ``limit``): a third-party exception in one of our lines."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit]}" if lines else type(exc).__name__


def library_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a third-party library while it reads a user's file, means "this file cannot be
    used": any ``Exception``, or a Rust panic inside an extension such as `tokenizers` (PyO3 raises
    ``pyo3_runtime.PanicException``, which derives from ``BaseException`` so that ``except Exception`` misses it).
    KeyboardInterrupt, SystemExit and GeneratorExit are not failures of the file."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


@contextmanager
def panic_output_dropped() -> Iterator[None]:
    """Run a third-party library call whose Rust code may panic, without the panic's own report on the terminal.

    Rust writes a panic's message (and, under RUST_BACKTRACE, a backtrace) straight to file descriptor 2 before PyO3
    turns the panic into an exception; the exception carries the message and the CLI prints it as one line. Inside
    this block descriptor 2 goes to a temporary file; when the block ends without a panic, what was written there is
    passed on to the real descriptor 2 unchanged.
    """
    with _DESCRIPTOR_2:  # one redirection at a time: threads would otherwise restore each other's capture file
        yield from _dropped_panic_output()


_DESCRIPTOR_2 = threading.RLock()


def _dropped_panic_output() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable descriptor 2: nothing to protect
        yield
        return
    panicked = False
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        except BaseException as exc:
            panicked = type(exc).__name__ == "PanicException"
            raise
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            if not panicked:
                capture.seek(0)
                data = capture.read()
                while data:
                    data = data[os.write(2, data):]
