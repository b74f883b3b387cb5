"""Download progress on the terminal: rich progress bars drawn from the sources layer's download events.

The sources layer only reports (:mod:`vocabcheck.sources.progress`); this module decides whether and where to draw.
The CLI wraps every command in :func:`show_progress`: on by default when stderr is a terminal and
``HF_HUB_DISABLE_PROGRESS_BARS`` is not set, off with ``--json``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..sources.base import env_flag
from ..sources.progress import Download, report_downloads


class TerminalProgress:
    """A download hook that draws each file as one transient rich progress task.

    The display starts with the first download and ends when the last one is done. ``console`` is the rich console
    to draw on (default: stderr, as it is when the first download starts). ``progress`` draws on a rich ``Progress``
    the caller owns and starts instead. With ``auto``, nothing is drawn unless stderr is a terminal and
    ``HF_HUB_DISABLE_PROGRESS_BARS`` is not set, looked at when a display would start.
    """

    def __init__(self, console: Any = None, *, progress: Any = None, auto: bool = False):
        self._console = console
        self._own = progress is None
        self._progress = progress
        self._auto = auto
        self._tasks: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Download) -> None:
        with self._lock:
            task = self._tasks.get(event.key)
            if event.done:
                if task is not None:
                    self._progress.remove_task(self._tasks.pop(event.key))
                    self._stop_when_idle()
            elif task is not None:
                self._progress.update(task, completed=event.completed, total=event.total)
            elif self._start():
                self._tasks[event.key] = self._progress.add_task(event.label, total=event.total,
                                                                 completed=event.completed)

    def _start(self) -> bool:
        if self._progress is not None:
            return True
        if self._auto and (env_flag("HF_HUB_DISABLE_PROGRESS_BARS") or not sys.stderr.isatty()):
            return False
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        console = self._console if self._console is not None else Console(stderr=True)
        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                                  TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True)
        self._progress.start()
        return True

    def _stop_when_idle(self) -> None:
        if self._own and not self._tasks and self._progress is not None:
            self._progress.stop()
            self._progress = None


@contextmanager
def show_progress(enabled: bool | None = None, console: Any = None) -> Iterator[None]:
    """Draw download progress inside the block: ``True`` always, ``False`` never (``--json``), ``None`` when stderr
    is a terminal and ``HF_HUB_DISABLE_PROGRESS_BARS`` is not set."""
    hook = None if enabled is False else TerminalProgress(console, auto=enabled is None)
    with report_downloads(hook):
        yield

