"""Progress that shows in a log as well as on a terminal (stderr only, never in ``--json``'s stdout).

On a terminal a status line is redrawn in place. Anywhere else (a file, a pipe, a CI log) each phase is one line,
``vocabcheck: <phase>``, and a phase that lasts longer than :data:`HEARTBEAT_S` gets a line every
:data:`HEARTBEAT_S` seconds saying it is still running and for how long, so that no phase is silent for long.
``VOCABCHECK_HEARTBEAT_S`` sets another interval (a positive number of seconds; the test suite sets a day, so that
no test's stderr depends on how fast the machine is).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator

from rich.console import Console

from ..text import printable

HEARTBEAT_S = 10.0


def heartbeat_seconds() -> float:
    """:data:`HEARTBEAT_S`, or ``VOCABCHECK_HEARTBEAT_S`` where that is a positive number of seconds."""
    try:
        seconds = float(os.environ.get("VOCABCHECK_HEARTBEAT_S") or HEARTBEAT_S)
    except ValueError:
        return HEARTBEAT_S
    return seconds if math.isfinite(seconds) and seconds > 0 else HEARTBEAT_S


@contextlib.contextmanager
def phases(err: Console, first: str, *, heartbeat_s: float | None = None,
           announce: bool = True) -> Iterator[Callable[[str], None]]:
    """Yield ``say(phase)``; ``first`` is said at once, or (``announce=False``: a command whose first phase may end at
    once in a one-line error about its input) only by the heartbeat, if it lasts that long. ``heartbeat_s``: the
    interval (default :func:`heartbeat_seconds`)."""
    heartbeat_s = heartbeat_s if heartbeat_s is not None else heartbeat_seconds()
    if err.is_terminal:
        with err.status(first) as status:
            yield status.update
        return
    now = time.monotonic()
    state = {"phase": first, "since": now, "said": now}  # the phase, when it began, when a line was last written
    lock = threading.Lock()
    stop = threading.Event()

    def line(text: str) -> None:
        state["said"] = time.monotonic()
        try:
            err.file.write(f"vocabcheck: {printable(text)}\n")
            err.file.flush()
        except (OSError, ValueError):  # a closed or broken stderr: progress is not worth failing for
            pass

    def say(phase: str) -> None:
        with lock:
            if phase == state["phase"]:
                return
            state["phase"], state["since"] = phase, time.monotonic()
            line(phase)

    def beat() -> None:
        # a heartbeat only where nothing was said for a whole interval: a phase that reports its own steps
        # (training: step 10/100) is not interrupted by "still … (0 s)"
        while not stop.wait(max(0.0, state["said"] + heartbeat_s - time.monotonic())):
            with lock:
                if time.monotonic() - state["said"] < heartbeat_s:
                    continue
                phase, since = state["phase"], state["since"]
                line(f"still {phase} ({time.monotonic() - since:.0f} s)")

    if announce:
        line(first)
    ticker = threading.Thread(target=beat, name="vocabcheck-heartbeat", daemon=True)
    ticker.start()
    try:
        yield say
    finally:
        stop.set()
        ticker.join()
